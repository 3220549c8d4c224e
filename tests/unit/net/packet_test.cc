// Tests for net/packet.cc: building RoCEv2 frames (begin/finish) and parsing
// them back, with one test per parse error.
#include "net/packet.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace uroce::net {
namespace {

Route test_route() {
  Route r;
  r.src_mac = {0x02, 0, 0, 0, 0, 0x01};
  r.dst_mac = {0x02, 0, 0, 0, 0, 0x02};
  r.src_ip = {10, 0, 0, 1};
  r.dst_ip = {10, 0, 0, 2};
  r.src_port = 0xc123;
  r.ttl = 17;
  r.tos = 0x02;
  return r;
}

// Frame offsets of an untagged IPv4 RoCEv2 frame, by hand: Ethernet 14, IPv4 20, UDP 8.
constexpr size_t kIpOff = 14, kUdpOff = 34, kBthOff = 42;

std::unique_ptr<Packet> build(uint8_t opcode, uint32_t payload_len, uint8_t fill = 0x5a) {
  auto p = std::make_unique<Packet>();
  begin_roce_packet(*p, opcode);
  p->bth()->pkey = 0xffff;
  p->bth()->dest_qp = 0x123456;
  p->bth()->ack_psn = Bth::kAckReq | 0xabcdef;
  for (uint32_t i = 0; i < payload_len; ++i) p->payload()[i] = uint8_t(fill + i);
  p->payload_len = payload_len;
  finish_roce_packet(*p, test_route());
  return p;
}

// A received copy: only len and the bytes, offsets unknown.
std::unique_ptr<Packet> received(const Packet& sent) {
  auto p = std::make_unique<Packet>();
  p->len = sent.len;
  std::memcpy(p->data, sent.data, sent.len);
  return p;
}

uint16_t get16(const Packet& p, size_t off) { return uint16_t(p.data[off] << 8 | p.data[off + 1]); }
void put16(Packet& p, size_t off, uint16_t v) {
  p.data[off] = uint8_t(v >> 8);
  p.data[off + 1] = uint8_t(v);
}
// Recomputes the IPv4 header checksum after a test edits the header.
void fix_ip_checksum(Packet& p) {
  auto* ip = reinterpret_cast<Ipv4Hdr*>(p.data + kIpOff);
  ip->checksum = ipv4_checksum(*ip);
}

TEST(PacketBuild, FramesHaveTheWireLayout) {
  auto p = build(make_opcode(Transport::kRc, op::kSendOnly), 5);
  // 14 + 20 + 8 + 12 (BTH) + 5 payload + 3 pad + 4 ICRC.
  EXPECT_EQ(p->len, 66u);
  EXPECT_EQ(get16(*p, 12), 0x0800);
  EXPECT_EQ(p->data[kIpOff], 0x45);
  EXPECT_EQ(p->data[kIpOff + 1], 0x02);  // tos
  EXPECT_EQ(get16(*p, kIpOff + 2), 66 - 14);
  EXPECT_EQ(p->data[kIpOff + 8], 17);    // ttl
  EXPECT_EQ(p->data[kIpOff + 9], 17);    // UDP
  EXPECT_EQ(get16(*p, kUdpOff + 0), 0xc123);
  EXPECT_EQ(get16(*p, kUdpOff + 2), 4791);
  EXPECT_EQ(get16(*p, kUdpOff + 4), 66 - 34);
  EXPECT_EQ(get16(*p, kUdpOff + 6), 0);  // zero UDP checksum over IPv4
  EXPECT_EQ(p->data[kBthOff], 0x04);
  EXPECT_EQ((p->data[kBthOff + 1] >> 4) & 3, 3);  // pad count
  EXPECT_EQ(p->data[kBthOff + 1] & 0x0f, 0);      // TVer
  const uint8_t ip[4] = {10, 0, 0, 1};
  EXPECT_EQ(std::memcmp(p->data + kIpOff + 12, ip, 4), 0);
  // The pad bytes are zero.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(p->data[kBthOff + 12 + 5 + i], 0);
  // The IPv4 header checksum verifies to zero with the one's complement sum.
  uint32_t sum = 0;
  for (size_t i = 0; i < 20; i += 2) sum += get16(*p, kIpOff + i);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  EXPECT_EQ(sum, 0xffffu);
}

TEST(PacketBuild, Ipv4ChecksumKnownAnswer) {
  // The classic example header: 4500 0073 0000 4000 4011 [b861] c0a8 0001 c0a8 00c7.
  const uint8_t bytes[20] = {0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11,
                             0x00, 0x00, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7};
  Ipv4Hdr ip;
  std::memcpy(&ip, bytes, 20);
  EXPECT_EQ(ipv4_checksum(ip), 0xb861);
  ip.checksum = 0x1234;  // the stored checksum does not take part
  EXPECT_EQ(ipv4_checksum(ip), 0xb861);
}

struct RoundTrip {
  uint8_t opcode;
  uint32_t payload_len;
};

class PacketRoundTrip : public ::testing::TestWithParam<RoundTrip> {};

TEST_P(PacketRoundTrip, ParsesWhatWasBuilt) {
  const RoundTrip rt = GetParam();
  auto sent = std::make_unique<Packet>();
  begin_roce_packet(*sent, rt.opcode);
  const OpcodeInfo& info = opcode_info(rt.opcode);
  sent->bth()->pkey = 0xffff;
  sent->bth()->dest_qp = 0x00abcdef;
  sent->bth()->ack_psn = 0x00fedcba;
  sent->bth()->flags |= Bth::kSolicited;
  if (info.has(kHasReth)) {
    auto* reth = sent->hdr<Reth>(info.reth_off);
    reth->va = 0x1122334455667788ull;
    reth->rkey = 0xdeadbeef;
    reth->dma_len = 0x10000;
  }
  if (info.has(kHasImm)) sent->hdr<ImmDt>(info.imm_off)->imm = 0xa1b2c3d4;
  if (info.has(kHasDeth)) {
    sent->hdr<Deth>(info.deth_off)->qkey = 0x11111111;
    sent->hdr<Deth>(info.deth_off)->src_qp = 0x42;
  }
  if (info.has(kHasAtomicEth)) {
    auto* ae = sent->hdr<AtomicEth>(info.atomiceth_off);
    ae->va = 0x1000;
    ae->rkey = 0x77;
    ae->swap_add = 0x0102030405060708ull;
    ae->compare = 0x1112131415161718ull;
  }
  if (info.has(kHasAeth)) sent->hdr<Aeth>(info.aeth_off)->syndrome_msn = 0x1f000123;
  for (uint32_t i = 0; i < rt.payload_len; ++i) sent->payload()[i] = uint8_t(i * 7 + 1);
  sent->payload_len = rt.payload_len;
  finish_roce_packet(*sent, test_route());

  for (bool check_icrc : {true, false}) {
    auto p = received(*sent);
    ASSERT_EQ(parse_roce_packet(*p, check_icrc), ParseError::kOk) << opcode_name(rt.opcode);
    EXPECT_EQ(p->opcode, rt.opcode);
    EXPECT_EQ(p->l3_off, kIpOff);
    EXPECT_EQ(p->bth_off, kBthOff);
    EXPECT_EQ(p->payload_off, kBthOff + info.length);
    EXPECT_EQ(p->payload_len, rt.payload_len);
    EXPECT_EQ(p->bth()->qpn(), 0xabcdefu);
    EXPECT_EQ(p->bth()->psn(), 0xfedcbau);
    EXPECT_FALSE(p->bth()->ack_req());
    EXPECT_TRUE(p->bth()->solicited());
    EXPECT_EQ(p->bth()->pad_count(), (4 - rt.payload_len % 4) % 4);
    EXPECT_EQ(uint16_t(p->bth()->pkey), 0xffff);
    EXPECT_EQ(std::memcmp(p->payload(), sent->payload(), rt.payload_len), 0);
    if (info.has(kHasReth)) {
      const auto* reth = p->hdr<Reth>(info.reth_off);
      EXPECT_EQ(uint64_t(reth->va), 0x1122334455667788ull);
      EXPECT_EQ(uint32_t(reth->rkey), 0xdeadbeefu);
      EXPECT_EQ(uint32_t(reth->dma_len), 0x10000u);
    }
    if (info.has(kHasImm)) { EXPECT_EQ(p->hdr<ImmDt>(info.imm_off)->imm, 0xa1b2c3d4u); }
    if (info.has(kHasDeth)) {
      EXPECT_EQ(uint32_t(p->hdr<Deth>(info.deth_off)->qkey), 0x11111111u);
      EXPECT_EQ(uint32_t(p->hdr<Deth>(info.deth_off)->src_qp), 0x42u);
    }
    if (info.has(kHasAtomicEth)) {
      const auto* ae = p->hdr<AtomicEth>(info.atomiceth_off);
      EXPECT_EQ(uint64_t(ae->swap_add), 0x0102030405060708ull);
      EXPECT_EQ(uint64_t(ae->compare), 0x1112131415161718ull);
    }
    if (info.has(kHasAeth)) {
      EXPECT_EQ(p->hdr<Aeth>(info.aeth_off)->syndrome(), 0x1f);
      EXPECT_EQ(p->hdr<Aeth>(info.aeth_off)->msn(), 0x123u);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Opcodes, PacketRoundTrip,
    ::testing::Values(RoundTrip{0x04, 0}, RoundTrip{0x04, 1}, RoundTrip{0x04, 2},
                      RoundTrip{0x04, 3}, RoundTrip{0x04, 4}, RoundTrip{0x00, 1024},
                      RoundTrip{0x05, 33}, RoundTrip{0x0b, 4096}, RoundTrip{0x0c, 0},
                      RoundTrip{0x10, 17}, RoundTrip{0x11, 0}, RoundTrip{0x12, 0},
                      RoundTrip{0x13, 0}, RoundTrip{0x14, 0}, RoundTrip{0x17, 8},
                      RoundTrip{0x29, 100}, RoundTrip{0x64, 4096}, RoundTrip{0x65, 1},
                      RoundTrip{0xa4, 9}),
    [](const ::testing::TestParamInfo<RoundTrip>& i) {
      return opcode_name(i.param.opcode) + "_" + std::to_string(i.param.payload_len);
    });

TEST(PacketParse, VlanTaggedFrameParses) {
  auto sent = build(0x04, 10);
  auto p = std::make_unique<Packet>();
  // Insert an 802.1Q tag (TPID 0x8100, VID 5) after the MAC addresses.
  std::memcpy(p->data, sent->data, 12);
  const uint8_t tag[4] = {0x81, 0x00, 0x00, 0x05};
  std::memcpy(p->data + 12, tag, 4);
  std::memcpy(p->data + 16, sent->data + 12, sent->len - 12);
  p->len = sent->len + 4;
  ASSERT_EQ(parse_roce_packet(*p, true), ParseError::kOk);
  EXPECT_EQ(p->l3_off, kIpOff + 4);
  EXPECT_EQ(p->bth_off, kBthOff + 4);
  EXPECT_EQ(p->payload_len, 10u);
}

// ---- one test per parse error ------------------------------------------------

TEST(PacketParse, TooShort) {
  auto sent = build(0x04, 0);
  // The smallest frame: Ethernet + IPv4 + UDP + BTH + ICRC = 58 bytes.
  ASSERT_EQ(sent->len, 58u);
  auto p = received(*sent);
  p->len = 57;
  EXPECT_EQ(parse_roce_packet(*p, false), ParseError::kTooShort);
  p->len = 0;
  EXPECT_EQ(parse_roce_packet(*p, false), ParseError::kTooShort);
  p = received(*sent);
  EXPECT_EQ(parse_roce_packet(*p, true), ParseError::kOk);
}

TEST(PacketParse, UdpLengthTooSmallForBthIsTooShort) {
  // Consistent IP/UDP lengths that leave no room for a BTH and ICRC.
  auto p = received(*build(0x04, 64));
  put16(*p, kIpOff + 2, 20 + 8 + 8);
  put16(*p, kUdpOff + 4, 8 + 8);
  fix_ip_checksum(*p);
  EXPECT_EQ(parse_roce_packet(*p, true), ParseError::kTooShort);
}

TEST(PacketParse, NotIp) {
  // (0x86dd is IPv6 now: an IPv4 header under it is tested in packet_ipv6_test.cc.)
  for (uint16_t type : {uint16_t(0x0806), uint16_t(0x88cc)}) {
    auto p = received(*build(0x04, 16));
    put16(*p, 12, type);
    EXPECT_EQ(parse_roce_packet(*p, true), ParseError::kNotIp) << type;
  }
}

TEST(PacketParse, BadIpHeader) {
  auto p = received(*build(0x04, 16));
  p->data[kIpOff] = 0x46;  // IHL 6: options are not RoCEv2
  fix_ip_checksum(*p);
  EXPECT_EQ(parse_roce_packet(*p, true), ParseError::kBadIpHeader);
  p = received(*build(0x04, 16));
  put16(*p, kIpOff + 2, uint16_t(p->len - 14 + 1));  // total length beyond the frame
  fix_ip_checksum(*p);
  EXPECT_EQ(parse_roce_packet(*p, true), ParseError::kBadIpHeader);
}

TEST(PacketParse, BadIpChecksum) {
  auto p = received(*build(0x04, 16));
  p->data[kIpOff + 10] ^= 0x01;
  EXPECT_EQ(parse_roce_packet(*p, true), ParseError::kBadIpChecksum);
  // The in-engine loopback (check_icrc=false) trusts its own frames.
  p = received(*build(0x04, 16));
  p->data[kIpOff + 10] ^= 0x01;
  EXPECT_EQ(parse_roce_packet(*p, false), ParseError::kOk);
}

TEST(PacketParse, NotRoce) {
  auto p = received(*build(0x04, 16));
  p->data[kIpOff + 9] = 6;  // TCP
  fix_ip_checksum(*p);
  EXPECT_EQ(parse_roce_packet(*p, true), ParseError::kNotRoce);
  p = received(*build(0x04, 16));
  put16(*p, kUdpOff + 2, 4792);
  EXPECT_EQ(parse_roce_packet(*p, false), ParseError::kNotRoce);
}

TEST(PacketParse, BadUdpLength) {
  for (int delta : {-4, 4}) {
    auto p = received(*build(0x04, 16));
    put16(*p, kUdpOff + 4, uint16_t(get16(*p, kUdpOff + 4) + delta));
    EXPECT_EQ(parse_roce_packet(*p, true), ParseError::kBadUdpLength) << delta;
  }
}

TEST(PacketParse, BadOpcode) {
  // 0x15 is reserved in every transport, 0x2c is READ on UC, 0x44 is RD.
  for (uint8_t opcode : {uint8_t(0x15), uint8_t(0x2c), uint8_t(0x44), uint8_t(0xff)}) {
    auto p = received(*build(0x04, 16));
    p->data[kBthOff] = opcode;
    EXPECT_EQ(parse_roce_packet(*p, false), ParseError::kBadOpcode) << int(opcode);
  }
}

TEST(PacketParse, BadLength) {
  // A READ request (BTH + RETH = 28 bytes) in a frame with room for the BTH only.
  auto p = received(*build(0x04, 0));
  p->data[kBthOff] = 0x0c;
  EXPECT_EQ(parse_roce_packet(*p, false), ParseError::kBadLength);
  // An ACK (no payload allowed) carrying 4 bytes.
  auto ack = std::make_unique<Packet>();
  begin_roce_packet(*ack, 0x11);
  ack->payload_len = 4;
  finish_roce_packet(*ack, test_route());
  p = received(*ack);
  EXPECT_EQ(parse_roce_packet(*p, false), ParseError::kBadLength);
  // A pad count larger than what follows the headers.
  p = received(*build(0x04, 0));
  p->data[kBthOff + 1] = 0x30;
  EXPECT_EQ(parse_roce_packet(*p, false), ParseError::kBadLength);
  // A payload over the largest MTU.
  auto big = std::make_unique<Packet>();
  begin_roce_packet(*big, 0x04);
  std::memset(big->payload(), 1, kMaxMtu + 4);
  big->payload_len = kMaxMtu + 4;
  finish_roce_packet(*big, test_route());
  p = received(*big);
  EXPECT_EQ(parse_roce_packet(*p, false), ParseError::kBadLength);
}

TEST(PacketParse, BadIcrc) {
  auto sent = build(0x0a, 64);
  for (size_t byte : {size_t(kBthOff + 28 + 10), size_t(sent->len - 1)}) {
    auto p = received(*sent);
    p->data[byte] ^= 0x10;
    EXPECT_EQ(parse_roce_packet(*p, true), ParseError::kBadIcrc) << byte;
    p = received(*sent);
    p->data[byte] ^= 0x10;
    EXPECT_EQ(parse_roce_packet(*p, false), ParseError::kOk) << byte;
  }
}

TEST(PacketParse, IcrcIgnoresVariantFields) {
  // TTL, TOS, the UDP checksum and the BTH FECN/BECN/Resv6 byte may change in
  // flight without breaking the ICRC (IBA A17.3.3); the IP checksum is fixed up.
  auto p = received(*build(0x04, 32));
  p->data[kIpOff + 1] = 0x03;  // ECN CE
  p->data[kIpOff + 8] = 1;
  fix_ip_checksum(*p);
  put16(*p, kUdpOff + 6, 0xbeef);
  p->data[kBthOff + 4] |= 0xc0;
  EXPECT_EQ(parse_roce_packet(*p, true), ParseError::kOk);
  // The pkey is invariant.
  p = received(*build(0x04, 32));
  p->data[kBthOff + 2] = 0x7f;
  EXPECT_EQ(parse_roce_packet(*p, true), ParseError::kBadIcrc);
}

// A loopback frame built without checksums (send_packet clears
// checksummed): the same frame but for the IPv4 header checksum, the IPv6 UDP
// checksum and the ICRC, all 0; it parses without checks and fails with them.
TEST(PacketBuild, UncheckedFrameDiffersOnlyInItsChecksums) {
  for (bool v6 : {false, true}) {
    Route r = test_route();
    if (v6) {
      r.family = IpFamily::kIpv6;
      r.src_ip6[15] = 1;
      r.dst_ip6[15] = 2;
    }
    auto full = std::make_unique<Packet>(), bare = std::make_unique<Packet>();
    for (Packet* p : {full.get(), bare.get()}) {
      p->checksummed = false;  // a recycled buffer's flag: begin resets it
      begin_roce_packet(*p, 0x04, r);
      EXPECT_TRUE(p->checksummed);
      std::memset(p->payload(), 0x33, 21);
      p->payload_len = 21;
    }
    bare->checksummed = false;
    finish_roce_packet(*full, r);
    finish_roce_packet(*bare, r);
    ASSERT_EQ(full->len, bare->len);
    // Where the checksums are: IPv4 header, or UDP over IPv6; then the ICRC.
    const size_t sum_off = v6 ? kIpOff + 40 + 6 : kIpOff + 10;
    std::set<size_t> differ;
    for (size_t i = 0; i < full->len; ++i)
      if (full->data[i] != bare->data[i]) differ.insert(i);
    for (size_t i : differ) {
      const bool in_sum = i == sum_off || i == sum_off + 1;
      EXPECT_TRUE(in_sum || i >= full->len - kIcrcBytes) << v6 << " byte " << i;
      EXPECT_EQ(bare->data[i], 0) << v6 << " byte " << i;
    }
    EXPECT_GE(differ.size(), 3u) << v6;  // the ICRC and a checksum at least
    auto p = received(*bare);
    ASSERT_EQ(parse_roce_packet(*p, false), ParseError::kOk) << v6;
    EXPECT_EQ(p->payload_off, full->payload_off);
    EXPECT_EQ(p->payload_len, 21u);
    p = received(*bare);
    EXPECT_EQ(parse_roce_packet(*p, true), v6 ? ParseError::kBadIcrc : ParseError::kBadIpChecksum);
    p = received(*full);
    EXPECT_EQ(parse_roce_packet(*p, true), ParseError::kOk) << v6;
  }
}

// A route's header template (a connected QP's path) frames exactly as the
// field-by-field build: every layout, with and without checksums, for
// payload lengths around the pad and for TTL/TOS/ports whose IPv4 checksum
// carries, and started for another layout (moved first).
TEST(PacketBuild, HeaderTemplateFramesAsTheFieldByFieldBuild) {
  int compared = 0;
  for (bool v6 : {false, true})
    for (bool vlan : {false, true})
      for (uint8_t ttl : {1, 64, 255})
        for (bool checksummed : {true, false})
          for (uint32_t len : {0u, 1u, 2u, 3u, 4u, 5u, 63u, 1000u, 4096u})
            for (bool begun_for_route : {true, false}) {
              Route r = test_route();
              r.ttl = ttl;
              r.tos = uint8_t(ttl ^ 0xa5);
              r.src_ip = {255, 255, uint8_t(ttl), 254};
              r.src_port = uint16_t(0xc000 | ttl * 37);
              if (v6) {
                r.family = IpFamily::kIpv6;
                r.src_ip6[0] = 0xfd;
                r.src_ip6[15] = ttl;
                r.dst_ip6[15] = 2;
                r.flow_label = 0x12345;
              }
              r.vlan = vlan;
              r.vlan_id = 42;
              r.vlan_pcp = 5;
              HeaderTemplate t;
              make_header_template(r, t);
              ASSERT_EQ(t.len, bth_offset_for(r));
              auto fields = std::make_unique<Packet>(), templated = std::make_unique<Packet>();
              for (Packet* p : {fields.get(), templated.get()}) {
                std::memset(p->data, 0xee, sizeof(p->data));  // stale bytes of a recycled buffer
                if (begun_for_route)
                  begin_roce_packet(*p, 0x04, r);
                else
                  begin_roce_packet(*p, 0x04);
                p->bth()->dest_qp = 0x123456;
                for (uint32_t i = 0; i < len; ++i) p->payload()[i] = uint8_t(i * 7);
                p->payload_len = len;
                p->checksummed = checksummed;
              }
              finish_roce_packet(*fields, r);
              finish_roce_packet(*templated, r, t);
              ASSERT_EQ(fields->len, templated->len);
              EXPECT_EQ(fields->l3_off, templated->l3_off);
              EXPECT_EQ(fields->bth_off, templated->bth_off);
              EXPECT_EQ(fields->payload_off, templated->payload_off);
              EXPECT_TRUE(templated->framed);
              ASSERT_EQ(std::memcmp(fields->data, templated->data, fields->len), 0)
                  << "v6 " << v6 << " vlan " << vlan << " ttl " << int(ttl) << " checksummed " << checksummed
                  << " len " << len;
              if (checksummed) {
                auto p = received(*templated);
                EXPECT_EQ(parse_roce_packet(*p, true), ParseError::kOk);
              }
              ++compared;
            }
  EXPECT_EQ(compared, 2 * 2 * 3 * 2 * 9 * 2);
}

TEST(PacketParse, ErrorNamesAreDistinct) {
  std::set<std::string> names;
  for (int e = 0; e < int(ParseError::kCount); ++e) {
    const char* n = parse_error_name(ParseError(e));
    ASSERT_NE(n, nullptr);
    EXPECT_GT(std::strlen(n), 0u);
    names.insert(n);
  }
  EXPECT_EQ(names.size(), size_t(ParseError::kCount));
  EXPECT_STREQ(parse_error_name(ParseError::kOk), "ok");
  EXPECT_STREQ(parse_error_name(ParseError::kBadIcrc), "bad_icrc");
}

TEST(PacketPool, RecyclesBuffers) {
  PacketPool pool;
  Packet* a = pool.get();
  Packet* b = pool.get();
  EXPECT_NE(a, b);
  EXPECT_EQ(pool.allocated(), 2u);
  pool.put(a);
  EXPECT_EQ(pool.get(), a);
  EXPECT_EQ(pool.allocated(), 2u);
}

// A NIC's buffers are finite: the pool allocates at most its capacity,
// refuses (and counts) past it, and reuses what comes back, so a long run
// holds no more buffers than were ever in use at once.
TEST(PacketPool, CapacityBoundsItAndBuffersAreReused) {
  PacketPool pool(4);
  EXPECT_EQ(pool.capacity(), 4u);
  std::vector<Packet*> held;
  for (int i = 0; i < 4; ++i) {
    Packet* p = pool.get();
    ASSERT_NE(p, nullptr);
    held.push_back(p);
  }
  EXPECT_EQ(pool.available(), 0u);
  EXPECT_EQ(pool.get(), nullptr);
  EXPECT_EQ(pool.get(), nullptr);
  EXPECT_EQ(pool.exhausted(), 2u);
  EXPECT_EQ(pool.allocated(), 4u);
  held[2]->steered = true;
  pool.put(held[2]);
  EXPECT_EQ(pool.in_use(), 3u);
  Packet* again = pool.get();
  EXPECT_EQ(again, held[2]);  // the same buffer, nothing allocated
  EXPECT_FALSE(again->steered);  // and reset
  EXPECT_EQ(pool.allocated(), 4u);
  for (Packet* p : held) pool.put(p);
  EXPECT_EQ(pool.in_use(), 0u);
  // A million frames through two buffers at a time: two buffers' worth.
  PacketPool big;
  EXPECT_EQ(big.capacity(), PacketPool::kDefaultCapacity);
  for (int i = 0; i < 1'000'000; ++i) {
    Packet* a = big.get();
    Packet* b = big.get();
    ASSERT_TRUE(a && b);
    big.put(a);
    big.put(b);
  }
  EXPECT_EQ(big.allocated(), 2u);
  EXPECT_EQ(big.exhausted(), 0u);
}

}  // namespace
}  // namespace uroce::net
