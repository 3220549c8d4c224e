// Tests for net/packet.cc's IPv6 and 802.1Q framing: RoCEv2 over IPv6 (UDP
// checksum over the pseudo header, ICRC over the masked IPv6 header), VLAN
// tags for both families, the layouts begin_roce_packet reserves and the
// move finish_roce_packet makes, every IPv6 parse error, the GID and GRH
// helpers, and (when tshark is installed) Wireshark's decoding of the frames.
//
// The references are computed here, independently of net/: the Internet
// checksum word by word as RFC 1071 describes it, the ICRC bit by bit over a
// pseudo packet masked by hand (IBA A17.3.3), frame offsets typed by hand.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "net/arp.h"
#include "net/icrc.h"
#include "net/packet.h"
#include "tests/unit/net/tshark_util.h"

namespace uroce::net {
namespace {

// ---- independent references ----

uint16_t get16(const uint8_t* p) { return uint16_t(p[0] << 8 | p[1]); }
uint16_t get16(const Packet& p, size_t off) { return get16(p.data + off); }
void put16(Packet& p, size_t off, uint16_t v) {
  p.data[off] = uint8_t(v >> 8);
  p.data[off + 1] = uint8_t(v);
}
uint32_t le32(const uint8_t* p) { return uint32_t(p[0]) | p[1] << 8 | p[2] << 16 | uint32_t(p[3]) << 24; }

// RFC 1071, 16-bit big-endian words, odd byte padded: the one's complement
// sum (not yet complemented) of the IPv6 pseudo header and the data.
uint32_t ref_sum_ipv6(const uint8_t* src, const uint8_t* dst, uint8_t next, const uint8_t* data,
                      size_t len) {
  std::vector<uint8_t> b(src, src + 16);
  b.insert(b.end(), dst, dst + 16);
  b.insert(b.end(), {uint8_t(len >> 24), uint8_t(len >> 16), uint8_t(len >> 8), uint8_t(len), 0, 0,
                     0, next});
  b.insert(b.end(), data, data + len);
  if (b.size() % 2) b.push_back(0);
  uint32_t sum = 0;
  for (size_t i = 0; i < b.size(); i += 2) {
    sum += get16(&b[i]);
    sum = (sum & 0xffff) + (sum >> 16);
  }
  return sum;
}
uint16_t ref_checksum_ipv6(const uint8_t* src, const uint8_t* dst, uint8_t next,
                           const uint8_t* data, size_t len) {
  return uint16_t(~ref_sum_ipv6(src, dst, next, data, len));
}

uint32_t bitwise_crc32(const std::vector<uint8_t>& bytes) {
  uint32_t crc = 0xffffffffu;
  for (uint8_t b : bytes) {
    crc ^= b;
    for (int i = 0; i < 8; ++i) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1)));
  }
  return ~crc;
}

// The ICRC of an IPv6 RoCEv2 frame whose IPv6 header is at l3: eight 0xff
// bytes, then the IPv6 header with traffic class, flow label and hop limit
// set to ones, UDP with its checksum set to ones, the BTH with its FECN,
// BECN and Resv6 byte set to ones, then the rest up to the ICRC.
uint32_t ref_icrc_ipv6(const Packet& p, size_t l3) {
  std::vector<uint8_t> v(8, 0xff);
  std::vector<uint8_t> rest(p.data + l3, p.data + p.len - 4);
  rest[0] |= 0x0f;
  rest[1] = rest[2] = rest[3] = 0xff;
  rest[7] = 0xff;
  rest[40 + 6] = rest[40 + 7] = 0xff;
  rest[48 + 4] = 0xff;
  v.insert(v.end(), rest.begin(), rest.end());
  return bitwise_crc32(v);
}

// ---- frames ----

const Ipv6Addr kSrc6 = {0xfd, 0x00, 0, 0x09, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0a, 0, 0x11};
const Ipv6Addr kDst6 = {0xfd, 0x00, 0, 0x09, 0, 0, 0, 0, 0, 0, 0, 0x01, 0x23, 0x45, 0x67, 0x89};

Route route6(bool vlan = false) {
  Route r;
  r.src_mac = {0x02, 0, 0, 0, 0, 0x01};
  r.dst_mac = {0x02, 0, 0, 0, 0, 0x02};
  r.family = IpFamily::kIpv6;
  r.src_ip6 = kSrc6;
  r.dst_ip6 = kDst6;
  r.src_port = 0xc123;
  r.ttl = 9;
  r.tos = 0xab;
  r.flow_label = 0x12345;
  r.vlan = vlan;
  r.vlan_id = 0x123;
  r.vlan_pcp = 5;
  return r;
}

Route route4(bool vlan = false) {
  Route r = route6(vlan);
  r.family = IpFamily::kIpv4;
  r.src_ip = {10, 0, 0, 1};
  r.dst_ip = {10, 0, 0, 2};
  r.tos = 0x02;
  r.ttl = 17;
  return r;
}

void fill_headers(Packet& p) {
  p.bth()->pkey = 0xffff;
  p.bth()->dest_qp = 0x123456;
  p.bth()->ack_psn = Bth::kAckReq | 0xabcdef;
  const OpcodeInfo& info = p.info();
  if (info.has(kHasReth)) {
    auto* reth = p.hdr<Reth>(info.reth_off);
    reth->va = 0x1122334455667788ull;
    reth->rkey = 0xdeadbeef;
    reth->dma_len = 0x10000;
  }
  if (info.has(kHasImm)) p.hdr<ImmDt>(info.imm_off)->imm = 0xa1b2c3d4;
  if (info.has(kHasDeth)) {
    p.hdr<Deth>(info.deth_off)->qkey = 0x11111111;
    p.hdr<Deth>(info.deth_off)->src_qp = 0x42;
  }
  if (info.has(kHasAtomicEth)) {
    auto* ae = p.hdr<AtomicEth>(info.atomiceth_off);
    ae->va = 0x1000;
    ae->rkey = 0x77;
    ae->swap_add = 0x0102030405060708ull;
    ae->compare = 0x1112131415161718ull;
  }
  if (info.has(kHasAeth)) p.hdr<Aeth>(info.aeth_off)->syndrome_msn = 0x1f000123;
}

// Built for route; begun either for it (no move) or with the IPv4 default
// layout (finish moves the transport headers and payload).
std::unique_ptr<Packet> build(const Route& r, uint8_t opcode, uint32_t payload_len,
                              bool begin_for_route = true, uint8_t fill = 0x5a) {
  auto p = std::make_unique<Packet>();
  if (begin_for_route)
    begin_roce_packet(*p, opcode, r);
  else
    begin_roce_packet(*p, opcode);
  fill_headers(*p);
  for (uint32_t i = 0; i < payload_len; ++i) p->payload()[i] = uint8_t(fill + i * 7);
  p->payload_len = payload_len;
  finish_roce_packet(*p, r);
  return p;
}

std::unique_ptr<Packet> received(const Packet& sent) {
  auto p = std::make_unique<Packet>();
  p->len = sent.len;
  std::memcpy(p->data, sent.data, sent.len);
  return p;
}

// Untagged IPv6: Ethernet 14, IPv6 40, UDP 8.
constexpr size_t kIp6 = 14, kUdp6 = 54, kBth6 = 62;
// 802.1Q-tagged IPv6: 4 bytes further.
constexpr size_t kIp6V = 18, kUdp6V = 58, kBth6V = 66;

// Recomputes the UDP checksum of an untagged IPv6 frame after a test edit.
void fix_udp6_checksum(Packet& p, size_t ip = kIp6) {
  const size_t udp = ip + 40;
  put16(p, udp + 6, 0);
  const uint16_t c = ref_checksum_ipv6(p.data + ip + 8, p.data + ip + 24, 17, p.data + udp,
                                       get16(p, udp + 4));
  put16(p, udp + 6, c ? c : 0xffff);
}

// ---- the checksum ----

TEST(Ipv6Checksum, HandComputedKnownAnswer) {
  // ::1 -> ::1, UDP 0x1234 -> 4791, length 8, no data. The words:
  // 0001 (src) + 0001 (dst) + 0008 (length) + 0011 (next header) + 1234 +
  // 12b7 + 0008 = 250e; ~250e = daf1.
  Ipv6Addr one{};
  one[15] = 1;
  const uint8_t udp[8] = {0x12, 0x34, 0x12, 0xb7, 0x00, 0x08, 0x00, 0x00};
  EXPECT_EQ(ipv6_l4_checksum(one.data(), one.data(), 17, udp, 8), 0xdaf1);
  // With the checksum in place the sum verifies to zero.
  const uint8_t with[8] = {0x12, 0x34, 0x12, 0xb7, 0x00, 0x08, 0xda, 0xf1};
  EXPECT_EQ(ipv6_l4_checksum(one.data(), one.data(), 17, with, 8), 0);
}

TEST(Ipv6Checksum, MatchesTheReferenceForEveryLengthAndAlignment) {
  std::vector<uint8_t> buf(700);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = uint8_t((i * 131 + 17) ^ (i >> 3));
  for (size_t start : {size_t(0), size_t(1), size_t(3)}) {
    for (size_t len = 0; len < 600; len += (len < 40 ? 1 : 37)) {
      const uint8_t* d = buf.data() + start;
      EXPECT_EQ(ipv6_l4_checksum(kSrc6.data(), kDst6.data(), 17, d, len),
                ref_checksum_ipv6(kSrc6.data(), kDst6.data(), 17, d, len))
          << start << "/" << len;
    }
  }
  // Carries: all-ones data.
  std::vector<uint8_t> ones(4096 + 12, 0xff);
  EXPECT_EQ(ipv6_l4_checksum(kSrc6.data(), kDst6.data(), 58, ones.data(), ones.size()),
            ref_checksum_ipv6(kSrc6.data(), kDst6.data(), 58, ones.data(), ones.size()));
}

// ---- building ----

TEST(Ipv6Build, FramesHaveTheWireLayout) {
  auto p = build(route6(), make_opcode(Transport::kRc, op::kSendOnly), 5);
  // 14 + 40 + 8 + 12 (BTH) + 5 payload + 3 pad + 4 ICRC.
  ASSERT_EQ(p->len, 86u);
  EXPECT_EQ(p->l3_off, kIp6);
  EXPECT_EQ(p->bth_off, kBth6);
  EXPECT_EQ(p->payload_off, kBth6 + 12);
  EXPECT_EQ(get16(*p, 12), 0x86dd);
  // Version 6, traffic class 0xab, flow label 0x12345: 6ab1 2345.
  EXPECT_EQ(get16(*p, kIp6), 0x6ab1);
  EXPECT_EQ(get16(*p, kIp6 + 2), 0x2345);
  EXPECT_EQ(get16(*p, kIp6 + 4), 86 - 54);  // payload length: UDP to the ICRC
  EXPECT_EQ(p->data[kIp6 + 6], 17);        // next header UDP
  EXPECT_EQ(p->data[kIp6 + 7], 9);         // hop limit
  EXPECT_EQ(std::memcmp(p->data + kIp6 + 8, kSrc6.data(), 16), 0);
  EXPECT_EQ(std::memcmp(p->data + kIp6 + 24, kDst6.data(), 16), 0);
  EXPECT_EQ(get16(*p, kUdp6 + 0), 0xc123);
  EXPECT_EQ(get16(*p, kUdp6 + 2), 4791);
  EXPECT_EQ(get16(*p, kUdp6 + 4), 86 - 54);
  EXPECT_EQ(p->data[kBth6], 0x04);
  EXPECT_EQ((p->data[kBth6 + 1] >> 4) & 3, 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(p->data[kBth6 + 12 + 5 + i], 0);
  // The UDP checksum: computed, and what RFC 1071 gives with the field zero.
  const uint16_t stored = get16(*p, kUdp6 + 6);
  EXPECT_NE(stored, 0);
  auto copy = received(*p);
  put16(*copy, kUdp6 + 6, 0);
  EXPECT_EQ(stored, ref_checksum_ipv6(kSrc6.data(), kDst6.data(), 17, copy->data + kUdp6, 32));
  EXPECT_EQ(ref_sum_ipv6(kSrc6.data(), kDst6.data(), 17, p->data + kUdp6, 32), 0xffffu);
  // The ICRC, bit by bit over the masked pseudo packet.
  EXPECT_EQ(le32(p->data + p->len - 4), ref_icrc_ipv6(*p, kIp6));
}

TEST(Ipv6Build, VlanTagAndIpv6) {
  auto p = build(route6(true), 0x0a, 64);  // RDMA WRITE ONLY
  // 14 + 4 + 40 + 8 + 12 + 16 (RETH) + 64 + 4.
  ASSERT_EQ(p->len, 162u);
  EXPECT_EQ(get16(*p, 12), 0x8100);
  EXPECT_EQ(get16(*p, 14), 5 << 13 | 0x123);  // PCP 5, DEI 0, VID 0x123
  EXPECT_EQ(get16(*p, 16), 0x86dd);
  EXPECT_EQ(p->l3_off, kIp6V);
  EXPECT_EQ(p->bth_off, kBth6V);
  EXPECT_EQ(p->data[kIp6V] >> 4, 6);
  EXPECT_EQ(get16(*p, kUdp6V + 2), 4791);
  EXPECT_EQ(p->data[kBth6V], 0x0a);
  EXPECT_EQ(ref_sum_ipv6(p->data + kIp6V + 8, p->data + kIp6V + 24, 17, p->data + kUdp6V,
                         get16(*p, kUdp6V + 4)),
            0xffffu);
  EXPECT_EQ(le32(p->data + p->len - 4), ref_icrc_ipv6(*p, kIp6V));
}

TEST(Ipv6Build, VlanTagAndIpv4) {
  auto p = build(route4(true), 0x04, 10);
  EXPECT_EQ(get16(*p, 12), 0x8100);
  EXPECT_EQ(get16(*p, 14), 5 << 13 | 0x123);
  EXPECT_EQ(get16(*p, 16), 0x0800);
  EXPECT_EQ(p->l3_off, 18u);
  EXPECT_EQ(p->bth_off, 46u);
  EXPECT_EQ(p->data[18], 0x45);
  EXPECT_EQ(get16(*p, 18 + 2), p->len - 18);
  EXPECT_EQ(get16(*p, 38 + 6), 0);  // IPv4: zero UDP checksum, tagged or not
  // The header checksum verifies.
  uint32_t sum = 0;
  for (size_t i = 0; i < 20; i += 2) sum += get16(*p, 18 + i);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  EXPECT_EQ(sum, 0xffffu);
}

TEST(Ipv6Build, PriorityTagWithVlanZero) {
  Route r = route6(true);
  r.vlan_id = 0;
  r.vlan_pcp = 3;
  auto p = build(r, 0x04, 0);
  EXPECT_EQ(get16(*p, 14), 3 << 13);
  EXPECT_EQ(vlan_tci(*p), uint16_t(3 << 13));
}

TEST(Ipv6Build, RouteFieldsAreMasked) {
  Route r = route6(true);
  r.flow_label = 0xfff12345;  // only 20 bits go out
  r.vlan_id = 0xf123;         // 12 bits
  r.vlan_pcp = 0xfd;          // 3 bits
  auto p = build(r, 0x04, 0);
  EXPECT_EQ(get16(*p, 14), 5 << 13 | 0x123);
  EXPECT_EQ(get16(*p, kIp6V), 0x6ab1);
  EXPECT_EQ(get16(*p, kIp6V + 2), 0x2345);
}

TEST(Ipv6Build, BeginForTheRouteAndFinishMoveGiveTheSameFrame) {
  for (const Route& r : {route6(), route6(true), route4(true), route4()}) {
    for (auto [opcode, len] : {std::pair<uint8_t, uint32_t>{0x04, 13}, {0x0a, 4096}, {0x11, 0},
                               {0x64, 100}, {0x13, 0}}) {
      auto a = build(r, opcode, len, true);
      auto b = build(r, opcode, len, false);
      ASSERT_EQ(a->len, b->len);
      EXPECT_EQ(std::memcmp(a->data, b->data, a->len), 0) << int(opcode);
      EXPECT_EQ(a->bth_off, b->bth_off);
      EXPECT_EQ(a->payload_off, b->payload_off);
      EXPECT_EQ(a->l3_off, b->l3_off);
      EXPECT_EQ(a->bth_off, bth_offset_for(r));
    }
  }
}

TEST(Ipv6Build, FinishMovesBackToASmallerLayout) {
  // Begun for IPv6 with a tag, finished as untagged IPv4: the headers move
  // 24 bytes back and the frame equals one built for IPv4 from the start.
  auto p = std::make_unique<Packet>();
  begin_roce_packet(*p, 0x0a, route6(true));
  EXPECT_EQ(p->bth_off, kBth6V);
  fill_headers(*p);
  for (uint32_t i = 0; i < 300; ++i) p->payload()[i] = uint8_t(0x5a + i * 7);
  p->payload_len = 300;
  finish_roce_packet(*p, route4());
  auto q = build(route4(), 0x0a, 300, false);
  ASSERT_EQ(p->len, q->len);
  EXPECT_EQ(std::memcmp(p->data, q->data, p->len), 0);
  EXPECT_EQ(p->bth_off, 42u);
}

TEST(Ipv6Build, ZeroUdpChecksumIsSentAsAllOnes) {
  // RFC 768 / RFC 8200 8.1: a computed checksum of zero is transmitted as
  // 0xffff. Search payloads until one sums that way (deterministic).
  const Route r = route6();
  bool found = false;
  auto p = std::make_unique<Packet>();
  for (uint32_t v = 0; v < (1u << 20) && !found; ++v) {
    begin_roce_packet(*p, 0x04, r);
    p->payload_len = 4;
    std::memcpy(p->payload(), &v, 4);
    finish_roce_packet(*p, r);
    if (get16(*p, kUdp6 + 6) != 0xffff) continue;
    found = true;
    // The sum with 0xffff in the field verifies, and parse accepts it.
    EXPECT_EQ(ref_sum_ipv6(kSrc6.data(), kDst6.data(), 17, p->data + kUdp6, get16(*p, kUdp6 + 4)),
              0xffffu);
    auto q = received(*p);
    EXPECT_EQ(parse_roce_packet(*q, true), ParseError::kOk);
  }
  EXPECT_TRUE(found);
}

TEST(Ipv6Build, IcrcOfTaggedAndUntaggedFramesIsTheSame) {
  // The ICRC covers IP and up, not Ethernet or the tag.
  auto a = build(route6(false), 0x04, 33);
  auto b = build(route6(true), 0x04, 33);
  EXPECT_EQ(le32(a->data + a->len - 4), le32(b->data + b->len - 4));
  EXPECT_EQ(get16(*a, kUdp6 + 6), get16(*b, kUdp6V + 6));
}

// ---- round trips ----

struct Trip {
  uint8_t opcode;
  uint32_t payload_len;
  int layout;  // 0 IPv6, 1 IPv6 + VLAN, 2 IPv4 + VLAN
};

Route trip_route(int layout) { return layout == 2 ? route4(true) : route6(layout == 1); }

std::string trip_name(const ::testing::TestParamInfo<Trip>& i) {
  static const char* kLayouts[] = {"ipv6", "ipv6_vlan", "ipv4_vlan"};
  return opcode_name(i.param.opcode) + "_" + std::to_string(i.param.payload_len) + "_" +
         kLayouts[i.param.layout];
}

class Ipv6RoundTrip : public ::testing::TestWithParam<Trip> {};

TEST_P(Ipv6RoundTrip, ParsesWhatWasBuilt) {
  const Trip t = GetParam();
  const Route r = trip_route(t.layout);
  const OpcodeInfo& info = opcode_info(t.opcode);
  for (bool begin_for_route : {true, false}) {
    auto sent = build(r, t.opcode, t.payload_len, begin_for_route);
    for (bool check : {true, false}) {
      auto p = received(*sent);
      ASSERT_EQ(parse_roce_packet(*p, check), ParseError::kOk) << opcode_name(t.opcode);
      EXPECT_EQ(p->opcode, t.opcode);
      EXPECT_EQ(p->l3_off, r.vlan ? 18u : 14u);
      EXPECT_EQ(p->bth_off, bth_offset_for(r));
      EXPECT_EQ(p->payload_off, bth_offset_for(r) + info.length);
      EXPECT_EQ(p->payload_len, t.payload_len);
      EXPECT_EQ(p->bth()->qpn(), 0x123456u);
      EXPECT_EQ(p->bth()->psn(), 0xabcdefu);
      EXPECT_TRUE(p->bth()->ack_req());
      EXPECT_EQ(p->bth()->pad_count(), (4 - t.payload_len % 4) % 4);
      EXPECT_EQ(std::memcmp(p->payload(), sent->payload(), t.payload_len), 0);
      if (info.has(kHasReth)) {
        EXPECT_EQ(uint32_t(p->hdr<Reth>(info.reth_off)->rkey), 0xdeadbeefu);
      }
      if (info.has(kHasImm)) {
        EXPECT_EQ(p->hdr<ImmDt>(info.imm_off)->imm, 0xa1b2c3d4u);
      }
      if (info.has(kHasDeth)) {
        EXPECT_EQ(uint32_t(p->hdr<Deth>(info.deth_off)->qkey), 0x11111111u);
      }
      if (info.has(kHasAtomicEth)) {
        EXPECT_EQ(uint64_t(p->hdr<AtomicEth>(info.atomiceth_off)->compare), 0x1112131415161718ull);
      }
      if (info.has(kHasAeth)) {
        EXPECT_EQ(p->hdr<Aeth>(info.aeth_off)->msn(), 0x123u);
      }
      // The addresses, in GID form.
      const Ipv6Addr sgid = roce_src_gid(*p), dgid = roce_dst_gid(*p);
      if (t.layout == 2) {
        EXPECT_EQ(roce_family(*p), IpFamily::kIpv4);
        EXPECT_EQ(sgid, ipv4_mapped_gid({10, 0, 0, 1}));
        EXPECT_EQ(dgid, ipv4_mapped_gid({10, 0, 0, 2}));
      } else {
        EXPECT_EQ(roce_family(*p), IpFamily::kIpv6);
        EXPECT_EQ(sgid, kSrc6);
        EXPECT_EQ(dgid, kDst6);
      }
      EXPECT_EQ(vlan_tci(*p).has_value(), r.vlan);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Opcodes, Ipv6RoundTrip,
    ::testing::Values(Trip{0x04, 0, 0}, Trip{0x04, 1, 0}, Trip{0x04, 3, 1}, Trip{0x00, 1024, 0},
                      Trip{0x05, 33, 1}, Trip{0x0a, 4096, 0}, Trip{0x0b, 4096, 1},
                      Trip{0x0c, 0, 0}, Trip{0x10, 17, 1}, Trip{0x11, 0, 0}, Trip{0x12, 0, 1},
                      Trip{0x13, 0, 0}, Trip{0x14, 0, 1}, Trip{0x17, 8, 0}, Trip{0x29, 100, 1},
                      Trip{0x64, 4096, 0}, Trip{0x65, 1, 1}, Trip{0xa4, 9, 0}, Trip{0x04, 5, 2},
                      Trip{0x0a, 4096, 2}, Trip{0x11, 0, 2}, Trip{0x64, 77, 2}),
    trip_name);

// ---- one test per IPv6 parse error ----

TEST(Ipv6Parse, TooShort) {
  auto sent = build(route6(), 0x04, 0);
  ASSERT_EQ(sent->len, 78u);  // the smallest: 14 + 40 + 8 + 12 + 4
  auto p = received(*sent);
  p->len = 77;
  EXPECT_EQ(parse_roce_packet(*p, false), ParseError::kTooShort);
  auto tagged = build(route6(true), 0x04, 0);
  p = received(*tagged);
  p->len = 81;
  EXPECT_EQ(parse_roce_packet(*p, false), ParseError::kTooShort);
  p = received(*tagged);
  EXPECT_EQ(parse_roce_packet(*p, true), ParseError::kOk);
}

TEST(Ipv6Parse, UdpLengthTooSmallForBthIsTooShort) {
  auto p = received(*build(route6(), 0x04, 64));
  put16(*p, kIp6 + 4, 8 + 8);
  put16(*p, kUdp6 + 4, 8 + 8);
  fix_udp6_checksum(*p);
  EXPECT_EQ(parse_roce_packet(*p, true), ParseError::kTooShort);
}

TEST(Ipv6Parse, BadIpHeader) {
  // Version 4 under the IPv6 EtherType.
  auto p = received(*build(route6(), 0x04, 16));
  p->data[kIp6] = 0x4a;
  EXPECT_EQ(parse_roce_packet(*p, false), ParseError::kBadIpHeader);
  // An IPv4 frame relabelled IPv6 (long enough to be looked at).
  p = received(*build(route4(), 0x04, 64));
  put16(*p, 12, 0x86dd);
  EXPECT_EQ(parse_roce_packet(*p, false), ParseError::kBadIpHeader);
  // Payload length beyond the frame.
  p = received(*build(route6(), 0x04, 16));
  put16(*p, kIp6 + 4, uint16_t(p->len - 54 + 1));
  EXPECT_EQ(parse_roce_packet(*p, false), ParseError::kBadIpHeader);
  // Payload length 0 (a jumbogram) and too small for UDP.
  for (uint16_t len : {uint16_t(0), uint16_t(7)}) {
    p = received(*build(route6(), 0x04, 16));
    put16(*p, kIp6 + 4, len);
    EXPECT_EQ(parse_roce_packet(*p, false), ParseError::kBadIpHeader) << len;
  }
}

TEST(Ipv6Parse, NotRoce) {
  // TCP, a hop-by-hop options header, ICMPv6 next.
  for (uint8_t next : {uint8_t(6), uint8_t(0), uint8_t(58)}) {
    auto p = received(*build(route6(), 0x04, 16));
    p->data[kIp6 + 6] = next;
    EXPECT_EQ(parse_roce_packet(*p, true), ParseError::kNotRoce) << int(next);
  }
  auto p = received(*build(route6(true), 0x04, 16));
  put16(*p, kUdp6V + 2, 4792);
  EXPECT_EQ(parse_roce_packet(*p, false), ParseError::kNotRoce);
}

TEST(Ipv6Parse, BadUdpLength) {
  for (int delta : {-4, 4}) {
    auto p = received(*build(route6(), 0x04, 16));
    put16(*p, kUdp6 + 4, uint16_t(get16(*p, kUdp6 + 4) + delta));
    EXPECT_EQ(parse_roce_packet(*p, true), ParseError::kBadUdpLength) << delta;
    EXPECT_EQ(parse_roce_packet(*p, false), ParseError::kBadUdpLength) << delta;
  }
}

TEST(Ipv6Parse, BadUdpChecksum) {
  auto sent = build(route6(), 0x0a, 64);
  // A payload bit, the checksum field, a source address bit (pseudo header).
  for (size_t byte : {size_t(kBth6 + 28 + 10), size_t(kUdp6 + 7), size_t(kIp6 + 8 + 15)}) {
    auto p = received(*sent);
    p->data[byte] ^= 0x10;
    EXPECT_EQ(parse_roce_packet(*p, true), ParseError::kBadUdpChecksum) << byte;
    // The in-engine loopback (no checks) takes it.
    p = received(*sent);
    p->data[byte] ^= 0x10;
    EXPECT_EQ(parse_roce_packet(*p, false), ParseError::kOk) << byte;
  }
  // The same over a VLAN.
  auto p = received(*build(route6(true), 0x04, 8));
  p->data[p->len - 6] ^= 1;
  EXPECT_EQ(parse_roce_packet(*p, true), ParseError::kBadUdpChecksum);
}

TEST(Ipv6Parse, ZeroUdpChecksumIsAccepted) {
  // What Linux rxe and RoCE NICs send over IPv6 (relying on the ICRC): taken
  // as "not computed". The ICRC masks the field, so it still verifies.
  auto p = received(*build(route6(), 0x04, 16));
  put16(*p, kUdp6 + 6, 0);
  EXPECT_EQ(parse_roce_packet(*p, true), ParseError::kOk);
  // ... and then the ICRC alone catches a corrupt payload.
  p->data[kBth6 + 12] ^= 1;
  EXPECT_EQ(parse_roce_packet(*p, true), ParseError::kBadIcrc);
}

TEST(Ipv6Parse, BadIcrc) {
  // A corrupt byte with the UDP checksum fixed up: only the ICRC notices.
  auto sent = build(route6(), 0x0a, 64);
  for (size_t byte : {size_t(kBth6 + 28 + 10), size_t(kBth6 + 2), size_t(sent->len - 1)}) {
    auto p = received(*sent);
    p->data[byte] ^= 0x10;
    fix_udp6_checksum(*p);
    EXPECT_EQ(parse_roce_packet(*p, true), ParseError::kBadIcrc) << byte;
    EXPECT_EQ(parse_roce_packet(*p, false), ParseError::kOk) << byte;
  }
}

TEST(Ipv6Parse, IcrcAndUdpChecksumIgnoreVariantFields) {
  // Traffic class (ECN), flow label and hop limit may change in flight
  // (A17.3.3); none is in the UDP pseudo header either. Nor is the BTH
  // FECN/BECN byte in the ICRC, but it is in the UDP checksum.
  auto p = received(*build(route6(true), 0x04, 32));
  p->data[kIp6V + 1] ^= 0x30;  // ECN bits of the traffic class
  p->data[kIp6V + 3] ^= 0x77;  // flow label
  p->data[kIp6V + 7] = 1;      // hop limit
  EXPECT_EQ(parse_roce_packet(*p, true), ParseError::kOk);
  p->data[kBth6V + 4] |= 0xc0;
  fix_udp6_checksum(*p, kIp6V);
  EXPECT_EQ(parse_roce_packet(*p, true), ParseError::kOk);
  // Addresses are invariant.
  p = received(*build(route6(), 0x04, 32));
  p->data[kIp6 + 24 + 3] ^= 1;
  fix_udp6_checksum(*p);
  EXPECT_EQ(parse_roce_packet(*p, true), ParseError::kBadIcrc);
}

TEST(Ipv6Parse, BadOpcodeAndBadLength) {
  auto p = received(*build(route6(), 0x04, 16));
  p->data[kBth6] = 0x15;
  EXPECT_EQ(parse_roce_packet(*p, false), ParseError::kBadOpcode);
  // A READ request in a frame with room for the BTH only.
  p = received(*build(route6(true), 0x04, 0));
  p->data[kBth6V] = 0x0c;
  EXPECT_EQ(parse_roce_packet(*p, false), ParseError::kBadLength);
  // An ACK carrying payload.
  auto ack = std::make_unique<Packet>();
  begin_roce_packet(*ack, 0x11, route6());
  ack->payload_len = 4;
  finish_roce_packet(*ack, route6());
  p = received(*ack);
  EXPECT_EQ(parse_roce_packet(*p, true), ParseError::kBadLength);
  // A payload over the largest MTU, in the largest layout.
  auto big = std::make_unique<Packet>();
  begin_roce_packet(*big, 0x04);
  std::memset(big->payload(), 1, kMaxMtu + 4);
  big->payload_len = kMaxMtu + 4;
  finish_roce_packet(*big, route6(true));
  ASSERT_LE(big->len, kFrameCapacity);
  p = received(*big);
  EXPECT_EQ(parse_roce_packet(*p, true), ParseError::kBadLength);
}

TEST(Ipv6Parse, ErrorName) {
  EXPECT_STREQ(parse_error_name(ParseError::kBadUdpChecksum), "bad_udp_checksum");
}

// ---- GIDs, GRH, routes, tags ----

TEST(Gid, Ipv4MappedForm) {
  const Ipv6Addr g = ipv4_mapped_gid({192, 168, 7, 1});
  const Ipv6Addr want = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 168, 7, 1};
  EXPECT_EQ(g, want);
  EXPECT_TRUE(gid_is_ipv4_mapped(g.data()));
  EXPECT_FALSE(gid_is_ipv4_mapped(kSrc6.data()));
  Ipv6Addr compat{};  // ::a.b.c.d (deprecated IPv4-compatible) is not mapped
  compat[15] = 1;
  EXPECT_FALSE(gid_is_ipv4_mapped(compat.data()));
}

TEST(Gid, RouteFromGids) {
  Route r;
  const Ipv6Addr s4 = ipv4_mapped_gid({10, 1, 2, 3}), d4 = ipv4_mapped_gid({10, 4, 5, 6});
  ASSERT_TRUE(route_set_gids(r, s4.data(), d4.data()));
  EXPECT_EQ(r.family, IpFamily::kIpv4);
  EXPECT_EQ(r.src_ip, (std::array<uint8_t, 4>{10, 1, 2, 3}));
  EXPECT_EQ(r.dst_ip, (std::array<uint8_t, 4>{10, 4, 5, 6}));
  ASSERT_TRUE(route_set_gids(r, kSrc6.data(), kDst6.data()));
  EXPECT_EQ(r.family, IpFamily::kIpv6);
  EXPECT_EQ(r.src_ip6, kSrc6);
  EXPECT_EQ(r.dst_ip6, kDst6);
  // Mixed families: no route, nothing changed.
  Route before = r;
  EXPECT_FALSE(route_set_gids(r, s4.data(), kDst6.data()));
  EXPECT_FALSE(route_set_gids(r, kSrc6.data(), d4.data()));
  EXPECT_EQ(r.family, before.family);
  EXPECT_EQ(r.src_ip6, before.src_ip6);
}

TEST(Gid, GrhForUdReceives) {
  // IPv6: the GRH is the IPv6 header.
  auto p = received(*build(route6(true), 0x64, 20));
  ASSERT_EQ(parse_roce_packet(*p, true), ParseError::kOk);
  uint8_t grh[40];
  std::memset(grh, 0xee, 40);
  roce_grh(*p, grh);
  EXPECT_EQ(std::memcmp(grh, p->data + kIp6V, 40), 0);
  EXPECT_EQ(grh[0] >> 4, 6);
  EXPECT_EQ(std::memcmp(grh + 8, kSrc6.data(), 16), 0);  // the sender's GID, where ibv_grh.sgid is
  // IPv4: 20 zero bytes, then the IPv4 header.
  p = received(*build(route4(), 0x64, 20));
  ASSERT_EQ(parse_roce_packet(*p, true), ParseError::kOk);
  std::memset(grh, 0xee, 40);
  roce_grh(*p, grh);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(grh[i], 0) << i;
  EXPECT_EQ(std::memcmp(grh + 20, p->data + 14, 20), 0);
}

TEST(Vlan, TciOfTaggedAndUntaggedFrames) {
  EXPECT_EQ(vlan_tci(*build(route6(true), 0x04, 0)), uint16_t(5 << 13 | 0x123));
  EXPECT_FALSE(vlan_tci(*build(route6(false), 0x04, 0)).has_value());
  Packet tiny;
  tiny.len = 16;
  std::memset(tiny.data, 0, 16);
  tiny.data[12] = 0x81;
  EXPECT_FALSE(vlan_tci(tiny).has_value());
}

TEST(Vlan, AddTagToABuiltFrame) {
  // Tagging after the fact equals building tagged.
  auto p = build(route4(), 0x0a, 100);
  ASSERT_TRUE(add_vlan_tag(*p, 5 << 13 | 0x123));
  auto want = build(route4(true), 0x0a, 100);
  ASSERT_EQ(p->len, want->len);
  EXPECT_EQ(std::memcmp(p->data, want->data, p->len), 0);
  EXPECT_EQ(p->l3_off, want->l3_off);
  EXPECT_EQ(p->bth_off, want->bth_off);
  EXPECT_EQ(p->payload_off, want->payload_off);
  // Not twice.
  EXPECT_FALSE(add_vlan_tag(*p, 7));
  EXPECT_EQ(p->len, want->len);
  // ARP frames too.
  Packet arp;
  build_arp_request(arp, {2, 0, 0, 0, 0, 1}, {10, 0, 0, 1}, {10, 0, 0, 2});
  ASSERT_TRUE(add_vlan_tag(arp, 0x00a));
  EXPECT_EQ(arp.len, 64u);
  EXPECT_EQ(get16(arp, 12), 0x8100);
  EXPECT_EQ(get16(arp, 14), 0x00a);
  EXPECT_EQ(get16(arp, 16), 0x0806);
  EXPECT_TRUE(is_arp_frame(arp));
}

TEST(Vlan, InsertPutsATagInFrontOfAnyOther) {
  // A received frame whose outer tag the kernel took off keeps its inner
  // one; the outer goes back in front of it.
  auto p = build(route4(true), 0x0a, 100);
  const uint32_t len = p->len;
  ASSERT_TRUE(insert_vlan_tag(*p, 3 << 13 | 0x042));
  EXPECT_EQ(p->len, len + 4);
  EXPECT_EQ(get16(*p, 12), 0x8100);
  EXPECT_EQ(get16(*p, 14), 3 << 13 | 0x042);
  EXPECT_EQ(get16(*p, 16), 0x8100);
  EXPECT_EQ(get16(*p, 18), 5 << 13 | 0x123);
  EXPECT_EQ(get16(*p, 20), 0x0800);
  // No room: the frame stays as it was.
  Packet full;
  full.len = uint32_t(kFrameCapacity - 2);
  std::memset(full.data, 0, full.len);
  EXPECT_FALSE(insert_vlan_tag(full, 1));
  EXPECT_EQ(full.len, uint32_t(kFrameCapacity - 2));
}

// ---- Wireshark ----

TEST(Ipv6Tshark, RoceOverIpv6DecodesWithGoodChecksums) {
  if (!test::have_tshark()) GTEST_SKIP() << "tshark not installed";
  std::vector<std::unique_ptr<Packet>> frames;
  frames.push_back(build(route6(), 0x04, 13));        // RC SEND ONLY
  frames.push_back(build(route6(true), 0x0a, 4096));  // RC RDMA WRITE ONLY, tagged
  frames.push_back(build(route6(), 0x11, 0));         // RC ACKNOWLEDGE
  frames.push_back(build(route6(true), 0x64, 100));   // UD SEND ONLY
  frames.push_back(build(route4(true), 0x04, 13));    // IPv4, tagged
  std::vector<const Packet*> ptrs;
  for (const auto& f : frames) ptrs.push_back(f.get());
  test::PcapFile file(ptrs);
  // udp.check_checksum makes Wireshark verify the UDP checksums itself.
  const auto rows = test::tshark_fields(
      file.path, "-o udp.check_checksum:TRUE",
      {"frame.protocols", "infiniband.bth.opcode", "udp.checksum.status", "ipv6.src", "ipv6.dst",
       "ipv6.flow", "ipv6.hlim", "vlan.id", "vlan.priority", "infiniband.bth.destqp",
       "_ws.malformed", "_ws.expert.message"});
  ASSERT_EQ(rows.size(), frames.size());
  const char* kOpcodes[] = {"4", "10", "17", "100", "4"};
  const bool kTagged[] = {false, true, false, true, true};
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& c = rows[i];
    SCOPED_TRACE(c[0]);
    const std::string stack = kTagged[i] ? "eth:ethertype:vlan:ethertype:" : "eth:ethertype:";
    EXPECT_EQ(c[0], stack + (i == 4 ? "ip" : "ipv6") + ":udp:infiniband" +
                        (i == 2 ? "" : ":data"));
    EXPECT_EQ(c[1], kOpcodes[i]);
    EXPECT_EQ(c[9], "0x123456");
    EXPECT_EQ(c[10], "");
    EXPECT_EQ(c[11], "");
    if (kTagged[i]) {
      EXPECT_EQ(c[7], "291");  // 0x123
      EXPECT_EQ(c[8], "5");
    }
    if (i == 4) continue;
    EXPECT_EQ(c[2], "1");  // PROTO_CHECKSUM_E_GOOD
    EXPECT_EQ(c[3], "fd00:9::a:11");
    EXPECT_EQ(c[4], "fd00:9::1:2345:6789");
    EXPECT_EQ(c[5], "0x012345");
    EXPECT_EQ(c[6], "9");
  }
  const std::string verbose =
      test::run_command("tshark -n -V -o udp.check_checksum:TRUE -r " + file.path + " 2>&1");
  EXPECT_EQ(verbose.find("Malformed"), std::string::npos) << verbose.substr(0, 4000);
  EXPECT_EQ(verbose.find("[Checksum Status: Bad]"), std::string::npos);
  EXPECT_NE(verbose.find("InfiniBand"), std::string::npos);
}

}  // namespace
}  // namespace uroce::net
