// Tests for net/icrc.cc: known answers for the RoCEv2 invariant CRC.
//
// Three independent references:
//  - a frame captured from a ConnectX-4 Lx (a CNP, as published with Scapy's
//    RoCE tests), whose last four bytes are the ICRC the NIC computed;
//  - frames built byte by byte in this file, with the masked pseudo header
//    (IBA A17.3.3) assembled by hand and run through a bitwise CRC-32 written
//    here and through zlib's crc32;
//  - the same check for an IPv6 header;
// then frames of every layout finish_roce_packet builds, against zlib, and
// the CRC-32 itself against zlib over lengths and alignments.
#include "net/icrc.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <cstring>
#include <random>
#include <vector>

#include "net/packet.h"

namespace uroce::net {
namespace {

// CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320), one bit at a time.
uint32_t bitwise_crc32(const std::vector<uint8_t>& bytes) {
  uint32_t crc = 0xffffffffu;
  for (uint8_t b : bytes) {
    crc ^= b;
    for (int i = 0; i < 8; ++i) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1)));
  }
  return ~crc;
}

uint32_t zlib_crc32(const std::vector<uint8_t>& bytes) {
  return uint32_t(crc32(0L, bytes.data(), uInt(bytes.size())));
}

std::vector<uint8_t> from_hex(const char* hex) {
  std::vector<uint8_t> out;
  auto nibble = [](char c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; };
  for (const char* p = hex; *p;) {
    if (*p == ' ' || *p == '\n') {
      ++p;
      continue;
    }
    out.push_back(uint8_t(nibble(p[0]) << 4 | nibble(p[1])));
    p += 2;
  }
  return out;
}

uint32_t le32(const uint8_t* p) { return uint32_t(p[0]) | p[1] << 8 | p[2] << 16 | uint32_t(p[3]) << 24; }

TEST(Icrc, ConnectX4CapturedFrame) {
  // Ethernet | IPv4 (tos 0xc2, ttl 64) | UDP 0 -> 4791 | BTH opcode 0x81 (CNP),
  // BECN set, dest QP 0x118 | 16 reserved bytes | ICRC 82 fd 00 2a.
  std::vector<uint8_t> frame = from_hex(
      "e41d2dab2bc2 7cfe90643b32 0800"
      "45c2 003c 718c 4000 4011 9161 0a001101 0a001201"
      "0000 12b7 0028 0000"
      "8100ffff 40000118 00000000"
      "00000000000000000000000000000000"
      "82fd002a");
  ASSERT_EQ(frame.size(), 74u);
  const size_t transport_len = 12 + 16;
  const std::vector<uint8_t> before = frame;
  const uint32_t icrc = compute_icrc(frame.data() + 14, 20, transport_len);
  EXPECT_EQ(frame, before);  // the bytes borrowed for the pseudo packet are restored
  // Stored little-endian after the payload.
  EXPECT_EQ(icrc, le32(frame.data() + 70));
  EXPECT_EQ(icrc, 0x2a00fd82u);
}

// A RoCEv2 RC SEND_ONLY frame built byte by byte.
struct HandFrame {
  std::vector<uint8_t> bytes;  // from the IPv4 header to the end of the pad
  size_t ip_len = 20;
  size_t transport_len = 0;
};

HandFrame hand_ipv4_frame(const std::vector<uint8_t>& payload) {
  const size_t pad = (4 - payload.size() % 4) % 4;
  HandFrame f;
  f.transport_len = 12 + payload.size() + pad;
  const size_t udp_len = 8 + f.transport_len + 4;
  const size_t ip_total = 20 + udp_len;
  f.bytes = {
      0x45, 0x2e, uint8_t(ip_total >> 8), uint8_t(ip_total), 0x12, 0x34, 0x40, 0x00,  // tos 0x2e
      0x21, 0x11, 0xaa, 0xbb,                                                          // ttl 33, cksum
      192, 168, 7, 1, 192, 168, 7, 2,                                                  // src, dst
      0xc0, 0x01, 0x12, 0xb7, uint8_t(udp_len >> 8), uint8_t(udp_len), 0x5a, 0xa5,     // UDP
      0x04, uint8_t(0x80 | pad << 4), 0xff, 0xff,                                      // BTH: SEND_ONLY, SE
      0xc0, 0x00, 0x01, 0x23,                                                          // FECN+BECN, QP 0x123
      0x80, 0x12, 0x34, 0x56,                                                          // AckReq, PSN
  };
  f.bytes.insert(f.bytes.end(), payload.begin(), payload.end());
  f.bytes.insert(f.bytes.end(), pad, 0);
  return f;
}

// compute_icrc over f placed after an Ethernet-like header, whose bytes
// before the IP header the CRC borrows and must give back.
uint32_t icrc_of(const HandFrame& f) {
  std::vector<uint8_t> frame(14, 0x5a);
  frame.resize(14 + f.bytes.size());
  std::copy(f.bytes.begin(), f.bytes.end(), frame.begin() + 14);
  const std::vector<uint8_t> before = frame;
  const uint32_t icrc = compute_icrc(frame.data() + 14, f.ip_len, f.transport_len);
  EXPECT_EQ(frame, before);
  return icrc;
}

// The pseudo packet of IBA A17.3.3, assembled independently of net/icrc.cc.
std::vector<uint8_t> pseudo_ipv4(const HandFrame& f) {
  std::vector<uint8_t> v(8, 0xff);  // the LRH of native IB, all ones
  std::vector<uint8_t> rest = f.bytes;
  rest[1] = 0xff;                       // IPv4 TOS
  rest[8] = 0xff;                       // TTL
  rest[10] = rest[11] = 0xff;           // header checksum
  rest[20 + 6] = rest[20 + 7] = 0xff;   // UDP checksum
  rest[28 + 4] = 0xff;                  // BTH FECN, BECN, Resv6
  v.insert(v.end(), rest.begin(), rest.end());
  return v;
}

TEST(Icrc, HandBuiltIpv4FrameMatchesIndependentCrc) {
  for (size_t n : {size_t(0), size_t(1), size_t(13), size_t(256)}) {
    std::vector<uint8_t> payload(n);
    for (size_t i = 0; i < n; ++i) payload[i] = uint8_t(i * 31 + 7);
    const HandFrame f = hand_ipv4_frame(payload);
    const std::vector<uint8_t> pseudo = pseudo_ipv4(f);
    const uint32_t expected = bitwise_crc32(pseudo);
    ASSERT_EQ(expected, zlib_crc32(pseudo));  // the two references agree
    EXPECT_EQ(icrc_of(f), expected) << n;
  }
}

TEST(Icrc, FlippedPayloadBitChangesTheIcrc) {
  std::vector<uint8_t> payload(100, 0x3c);
  const HandFrame f = hand_ipv4_frame(payload);
  const uint32_t good = icrc_of(f);
  for (size_t byte = 40; byte < f.bytes.size(); byte += 17) {
    for (int bit : {0, 7}) {
      HandFrame g = f;
      g.bytes[byte] ^= uint8_t(1u << bit);
      EXPECT_NE(icrc_of(g), good) << byte << "/" << bit;
    }
  }
}

TEST(Icrc, VariantFieldsAreMasked) {
  const HandFrame f = hand_ipv4_frame(std::vector<uint8_t>(20, 1));
  const uint32_t good = icrc_of(f);
  // TOS, TTL, IP checksum, UDP checksum and the BTH FECN/BECN/Resv6 byte.
  for (size_t byte : {size_t(1), size_t(8), size_t(10), size_t(11), size_t(26), size_t(27),
                      size_t(32)}) {
    HandFrame g = f;
    g.bytes[byte] ^= 0x5a;
    EXPECT_EQ(icrc_of(g), good) << byte;
  }
  // Everything else in those headers is covered: addresses, ports, pkey, QPN, PSN.
  for (size_t byte : {size_t(0), size_t(3), size_t(9), size_t(12), size_t(19), size_t(22),
                      size_t(25), size_t(28), size_t(30), size_t(35), size_t(39)}) {
    HandFrame g = f;
    g.bytes[byte] ^= 0x01;
    EXPECT_NE(icrc_of(g), good) << byte;
  }
}

TEST(Icrc, HandBuiltIpv6FrameMatchesIndependentCrc) {
  // IPv6 (TC 0xab, flow label 0x12345, hop limit 9) | UDP | BTH | 8 bytes.
  std::vector<uint8_t> bytes = {
      0x6a, 0xb1, 0x23, 0x45, 0x00, 0x20, 0x11, 0x09,  // ver/TC/flow, payload len 32, UDP, hops
  };
  for (int i = 0; i < 32; ++i) bytes.push_back(uint8_t(0xf0 + i));  // src and dst addresses
  const std::vector<uint8_t> tail = {
      0xc0, 0x02, 0x12, 0xb7, 0x00, 0x20, 0x12, 0x34,  // UDP, checksum 0x1234
      0x04, 0x00, 0xff, 0xff, 0x40, 0x00, 0x00, 0x99,  // BTH SEND_ONLY, BECN, QP 0x99
      0x00, 0x00, 0x00, 0x01,                          // PSN 1
      1, 2, 3, 4, 5, 6, 7, 8};
  bytes.insert(bytes.end(), tail.begin(), tail.end());
  std::vector<uint8_t> pseudo(8, 0xff);
  std::vector<uint8_t> masked = bytes;
  masked[0] |= 0x0f;  // TC (low nibble of byte 0, high of byte 1) and flow label
  masked[1] = masked[2] = masked[3] = 0xff;
  masked[7] = 0xff;                    // hop limit
  masked[40 + 6] = masked[40 + 7] = 0xff;
  masked[48 + 4] = 0xff;
  pseudo.insert(pseudo.end(), masked.begin(), masked.end());
  EXPECT_EQ(icrc_of(HandFrame{bytes, 40, 12 + 8}), bitwise_crc32(pseudo));
}

TEST(Icrc, FinishRocePacketStoresTheIcrcLittleEndian) {
  Packet p;
  begin_roce_packet(p, 0x04);
  std::memset(p.payload(), 0xab, 7);
  p.payload_len = 7;
  Route r;
  r.src_ip = {1, 2, 3, 4};
  r.dst_ip = {5, 6, 7, 8};
  finish_roce_packet(p, r);
  // Rebuild the pseudo packet from the frame bytes and compare with the trailer.
  HandFrame f;
  f.bytes.assign(p.data + 14, p.data + p.len - 4);
  f.transport_len = 12 + 8;
  EXPECT_EQ(le32(p.data + p.len - 4), bitwise_crc32(pseudo_ipv4(f)));
}

// The ICRC of a finished frame, from its bytes: the masked pseudo packet of
// A17.3.3 through zlib (the implementation this one replaced).
uint32_t zlib_icrc(const Packet& p) {
  const size_t n = p.len - 4 - p.l3_off;
  std::vector<uint8_t> v(8 + n, 0xff);  // 8 bytes of ones, then the frame from L3
  std::memcpy(v.data() + 8, p.data + p.l3_off, n);
  const bool v6 = roce_family(p) == IpFamily::kIpv6;
  const size_t ip_len = v6 ? 40 : 20;
  if (v6) {
    v[8] |= 0x0f;                  // traffic class and flow label
    v[9] = v[10] = v[11] = 0xff;
    v[8 + 7] = 0xff;               // hop limit
  } else {
    v[8 + 1] = v[8 + 8] = 0xff;    // TOS, TTL
    v[8 + 10] = v[8 + 11] = 0xff;  // header checksum
  }
  v[8 + ip_len + 6] = v[8 + ip_len + 7] = 0xff;  // UDP checksum
  v[8 + ip_len + 8 + 4] = 0xff;                  // BTH FECN, BECN, Resv6
  return zlib_crc32(v);
}

TEST(Icrc, FinishedFramesOfEveryLayoutMatchZlib) {
  std::mt19937 rng(5);
  auto p = std::make_unique<Packet>();
  for (int i = 0; i < 400; ++i) {
    Route r;
    r.family = i & 1 ? IpFamily::kIpv6 : IpFamily::kIpv4;
    r.vlan = i & 2;
    r.vlan_id = 7;
    r.tos = uint8_t(rng());
    r.ttl = uint8_t(rng());
    r.flow_label = rng();
    r.src_ip6[15] = 1;
    r.dst_ip6[15] = 2;
    begin_roce_packet(*p, 0x04, r);  // RC SEND_ONLY
    p->bth()->dest_qp = rng();       // FECN/BECN/Resv6 too: masked
    p->payload_len = rng() % (kMaxMtu + 1);
    for (uint32_t b = 0; b < p->payload_len; ++b) p->payload()[b] = uint8_t(rng());
    finish_roce_packet(*p, r);
    ASSERT_EQ(le32(p->data + p->len - 4), zlib_icrc(*p)) << i << " payload " << p->payload_len;
  }
}

TEST(Icrc, Crc32MatchesZlibOverLengthsAndAlignments) {
  std::vector<uint8_t> buf(9000 + 8);
  std::mt19937 rng(9);
  for (uint8_t& b : buf) b = uint8_t(rng());
  for (size_t len = 0; len <= 9000; ++len) {
    for (size_t off : {size_t(0), size_t(1), size_t(3), size_t(8)}) {
      const uint8_t* d = buf.data() + off;
      ASSERT_EQ(crc32_ieee(d, len), uint32_t(crc32_z(0, d, len))) << len << " at +" << off;
    }
  }
}

}  // namespace
}  // namespace uroce::net
