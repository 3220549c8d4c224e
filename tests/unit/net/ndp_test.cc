// Tests for net/ndp.cc: Neighbor Solicitation and Advertisement frames byte
// by byte against frames typed here (ICMPv6 checksums as known answers,
// computed independently), handling them (answers, learning, every drop
// counter), the neighbour table's aging, NdpPending, and (when tshark is
// installed) Wireshark's decoding of an NS/NA pair.
#include "net/ndp.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "tests/unit/net/tshark_util.h"

namespace uroce::net {
namespace {

// Host A resolves host B.
const MacAddr kMacA = {0x02, 0x00, 0x5e, 0x10, 0x00, 0x01};
const MacAddr kMacB = {0x02, 0x00, 0x5e, 0x10, 0x00, 0x02};
// fd00:9::a:11 and fd00:9::1:2345:6789
const Ipv6Addr kIpA = {0xfd, 0x00, 0x00, 0x09, 0, 0, 0, 0, 0, 0, 0, 0, 0x00, 0x0a, 0x00, 0x11};
const Ipv6Addr kIpB = {0xfd, 0x00, 0x00, 0x09, 0, 0, 0, 0, 0, 0, 0, 0x01, 0x23, 0x45, 0x67, 0x89};
const Ipv6Addr kIpC = {0xfd, 0x00, 0x00, 0x09, 0, 0, 0, 0, 0, 0, 0, 0, 0x00, 0x0c, 0x00, 0x33};

std::vector<uint8_t> cat(std::initializer_list<std::vector<uint8_t>> parts) {
  std::vector<uint8_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}
std::vector<uint8_t> v(const Ipv6Addr& a) { return {a.begin(), a.end()}; }
std::vector<uint8_t> v(const MacAddr& a) { return {a.begin(), a.end()}; }

// The frames, typed from RFC 4861 4.3/4.4 and RFC 2464. The checksums were
// computed with an independent implementation (Python, RFC 1071 over the
// RFC 8200 pseudo header); ref_checksum below recomputes them too, and the
// tshark test has Wireshark verify them.
std::vector<uint8_t> ns_a_for_b() {
  return cat({{0x33, 0x33, 0xff, 0x45, 0x67, 0x89},  // solicited-node group's MAC
              v(kMacA),
              {0x86, 0xdd},
              {0x60, 0, 0, 0, 0x00, 0x20, 58, 255},  // payload 32, ICMPv6, hop limit 255
              v(kIpA),
              {0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xff, 0x45, 0x67, 0x89},
              {135, 0, 0x2c, 0xc1, 0, 0, 0, 0},  // NS, checksum 2cc1, reserved
              v(kIpB),
              {1, 1},  // source link-layer address
              v(kMacA)});
}

std::vector<uint8_t> na_b_to_a() {
  return cat({v(kMacA), v(kMacB),
              {0x86, 0xdd},
              {0x60, 0, 0, 0, 0x00, 0x20, 58, 255},
              v(kIpB),
              v(kIpA),
              {136, 0, 0xa8, 0xb9, 0x60, 0, 0, 0},  // NA, checksum a8b9, S and O
              v(kIpB),
              {2, 1},  // target link-layer address
              v(kMacB)});
}

// A's answer to a duplicate address probe for kIpA: to all nodes, O only.
std::vector<uint8_t> dad_na_from_a() {
  return cat({{0x33, 0x33, 0, 0, 0, 1}, v(kMacA),
              {0x86, 0xdd},
              {0x60, 0, 0, 0, 0x00, 0x20, 58, 255},
              v(kIpA),
              {0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1},
              {136, 0, 0xfc, 0x44, 0x20, 0, 0, 0},
              v(kIpA),
              {2, 1},
              v(kMacA)});
}

std::unique_ptr<Packet> frame(const std::vector<uint8_t>& bytes) {
  auto p = std::make_unique<Packet>();
  std::memcpy(p->data, bytes.data(), bytes.size());
  p->len = uint32_t(bytes.size());
  return p;
}

std::vector<uint8_t> bytes(const Packet& p) { return {p.data, p.data + p.len}; }

uint16_t get16(const uint8_t* p) { return uint16_t(p[0] << 8 | p[1]); }

// RFC 1071 word by word over the pseudo header and ICMPv6 message.
uint16_t ref_checksum(const Packet& p, size_t ip = 14) {
  std::vector<uint8_t> b(p.data + ip + 8, p.data + ip + 40);
  const size_t len = get16(p.data + ip + 4);
  b.insert(b.end(), {uint8_t(len >> 24), uint8_t(len >> 16), uint8_t(len >> 8), uint8_t(len), 0, 0,
                     0, 58});
  b.insert(b.end(), p.data + ip + 40, p.data + ip + 40 + len);
  b[40 + 2] = b[40 + 3] = 0;  // the checksum field
  if (b.size() % 2) b.push_back(0);
  uint32_t sum = 0;
  for (size_t i = 0; i < b.size(); i += 2) sum += get16(&b[i]);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return uint16_t(~sum);
}

// After a test edits a frame: the checksum made right again.
void fix_checksum(Packet& p, size_t ip = 14) {
  const uint16_t c = ref_checksum(p, ip);
  p.data[ip + 42] = uint8_t(c >> 8);
  p.data[ip + 43] = uint8_t(c);
}

// ---- addresses ----

TEST(NdpAddress, SolicitedNodeGroupAndItsMac) {
  // RFC 4291 2.7.1's example: 4037::01:800:200E:8C6C -> FF02::1:FF0E:8C6C.
  const Ipv6Addr ip = {0x40, 0x37, 0, 0, 0, 0, 0, 0, 0, 0x01, 0x08, 0x00, 0x20, 0x0e, 0x8c, 0x6c};
  const Ipv6Addr want = {0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xff, 0x0e, 0x8c, 0x6c};
  EXPECT_EQ(solicited_node_addr(ip), want);
  // RFC 2464 7: 33:33 and the group's last four bytes.
  EXPECT_EQ(ipv6_multicast_mac(want), (MacAddr{0x33, 0x33, 0xff, 0x0e, 0x8c, 0x6c}));
  EXPECT_EQ(ipv6_multicast_mac(kAllNodesAddr), (MacAddr{0x33, 0x33, 0, 0, 0, 1}));
  EXPECT_TRUE(is_ipv6_multicast(want));
  EXPECT_FALSE(is_ipv6_multicast(ip));
}

// ---- building ----

TEST(NdpBuild, SolicitationBytes) {
  Packet p;
  build_ndp_solicitation(p, kMacA, kIpA, kIpB);
  EXPECT_EQ(bytes(p), ns_a_for_b());
  EXPECT_EQ(p.len, kNdpFrameLen);
  EXPECT_EQ(p.l3_off, 14u);
  EXPECT_EQ(ref_checksum(p), 0x2cc1);  // the reference agrees with the known answer
  EXPECT_TRUE(is_ndp_frame(p));
}

TEST(NdpBuild, AdvertisementBytes) {
  Packet p;
  build_ndp_advertisement(p, kMacB, kIpB, kMacA, kIpA, true);
  EXPECT_EQ(bytes(p), na_b_to_a());
  EXPECT_EQ(ref_checksum(p), 0xa8b9);
  EXPECT_TRUE(is_ndp_frame(p));
  build_ndp_advertisement(p, kMacA, kIpA, {0x33, 0x33, 0, 0, 0, 1}, kAllNodesAddr, false);
  EXPECT_EQ(bytes(p), dad_na_from_a());
  EXPECT_EQ(ref_checksum(p), 0xfc44);
}

TEST(NdpBuild, ChecksumMatchesTheReferenceForOtherAddresses) {
  for (uint8_t x = 0; x < 50; ++x) {
    Ipv6Addr a = kIpA, b = kIpB;
    a[15] = uint8_t(x * 37);
    b[3] = uint8_t(x * 91 + 1);
    MacAddr m = kMacA;
    m[5] = x;
    Packet p;
    build_ndp_solicitation(p, m, a, b);
    EXPECT_EQ(get16(p.data + 14 + 42), ref_checksum(p)) << int(x);
    build_ndp_advertisement(p, m, a, kMacB, b, x & 1);
    EXPECT_EQ(get16(p.data + 14 + 42), ref_checksum(p)) << int(x);
  }
}

TEST(NdpBuild, IsNdpFrame) {
  EXPECT_TRUE(is_ndp_frame(*frame(ns_a_for_b())));
  EXPECT_TRUE(is_ndp_frame(*frame(na_b_to_a())));
  auto tagged = frame(ns_a_for_b());
  ASSERT_TRUE(add_vlan_tag(*tagged, 7));
  EXPECT_TRUE(is_ndp_frame(*tagged));
  // ICMPv6 echo request, IPv6 UDP, ARP, an IPv4 frame, a short frame.
  auto echo = frame(ns_a_for_b());
  echo->data[14 + 40] = 128;
  EXPECT_FALSE(is_ndp_frame(*echo));
  auto udp = frame(ns_a_for_b());
  udp->data[14 + 6] = 17;
  EXPECT_FALSE(is_ndp_frame(*udp));
  Packet arp;
  build_arp_request(arp, kMacA, {10, 0, 0, 1}, {10, 0, 0, 2});
  EXPECT_FALSE(is_ndp_frame(arp));
  auto v4 = frame(ns_a_for_b());
  v4->data[12] = 0x08;
  v4->data[13] = 0x00;
  EXPECT_FALSE(is_ndp_frame(*v4));
  auto shortf = frame(ns_a_for_b());
  shortf->len = 14 + 40;
  EXPECT_FALSE(is_ndp_frame(*shortf));
}

// ---- handling ----

TEST(NdpHandle, SolicitationForUsIsAnsweredAndTheSenderLearned) {
  NdpTable b;  // host B's table
  Packet reply;
  const NdpHandled h = b.handle(*frame(ns_a_for_b()), kMacB, kIpB, 1000, &reply);
  ASSERT_TRUE(h.reply);
  EXPECT_EQ(bytes(reply), na_b_to_a());
  ASSERT_TRUE(h.resolved);
  EXPECT_EQ(*h.resolved, kIpA);
  EXPECT_EQ(b.lookup(kIpA, 1000), kMacA);
  EXPECT_EQ(b.counters().rx, 1u);
  EXPECT_EQ(b.counters().learned, 1u);
  EXPECT_EQ(b.counters().solicitations_answered, 1u);
  // Again: refreshed, not learned twice.
  EXPECT_TRUE(b.handle(*frame(ns_a_for_b()), kMacB, kIpB, 2000, &reply).reply);
  EXPECT_EQ(b.counters().learned, 1u);
  EXPECT_EQ(b.counters().updated, 1u);
  EXPECT_EQ(b.size(), 1u);
  // Without a reply buffer: learn only.
  const NdpHandled quiet = b.handle(*frame(ns_a_for_b()), kMacB, kIpB, 3000, nullptr);
  EXPECT_FALSE(quiet.reply);
  EXPECT_TRUE(quiet.resolved);
}

TEST(NdpHandle, AnyOfOurAddressesIsAnswered) {
  NdpTable b;
  const Ipv6Addr ours[] = {kIpC, kIpB};
  Packet reply;
  const NdpHandled h = b.handle(*frame(ns_a_for_b()), kMacB, ours, 0, &reply);
  ASSERT_TRUE(h.reply);
  EXPECT_EQ(bytes(reply), na_b_to_a());  // the target that matched answers
}

TEST(NdpHandle, SolicitationForAnotherAddress) {
  NdpTable c;
  Packet reply;
  const NdpHandled h = c.handle(*frame(ns_a_for_b()), kMacB, kIpC, 0, &reply);
  EXPECT_FALSE(h.reply);
  EXPECT_FALSE(h.resolved);
  EXPECT_EQ(c.counters().rx_not_for_us, 1u);
  EXPECT_EQ(c.size(), 0u);  // RFC 4861 7.2.3: silently discarded
}

TEST(NdpHandle, AdvertisementAnsweringUsIsLearned) {
  NdpTable a;
  const NdpHandled h = a.handle(*frame(na_b_to_a()), kMacA, kIpA, 5, nullptr);
  EXPECT_FALSE(h.reply);
  ASSERT_TRUE(h.resolved);
  EXPECT_EQ(*h.resolved, kIpB);
  EXPECT_EQ(a.lookup(kIpB, 5), kMacB);
  EXPECT_EQ(a.counters().learned, 1u);
}

TEST(NdpHandle, AdvertisementsForUnknownNeighboursNotAnsweringUsAreIgnored) {
  // Sent to another address.
  NdpTable c;
  EXPECT_FALSE(c.handle(*frame(na_b_to_a()), kMacA, kIpC, 0, nullptr).resolved);
  EXPECT_EQ(c.counters().rx_na_ignored, 1u);
  // Unsolicited to all nodes (S clear), for an address we have no entry for.
  Packet una;
  build_ndp_advertisement(una, kMacB, kIpB, {0x33, 0x33, 0, 0, 0, 1}, kAllNodesAddr, false);
  NdpTable a;
  EXPECT_FALSE(a.handle(una, kMacA, kIpA, 0, nullptr).resolved);
  EXPECT_EQ(a.counters().rx_na_ignored, 1u);
  EXPECT_EQ(a.size(), 0u);
  // Sent to us but without the solicited flag.
  auto p = frame(na_b_to_a());
  p->data[14 + 44] = 0x20;
  fix_checksum(*p);
  EXPECT_FALSE(a.handle(*p, kMacA, kIpA, 0, nullptr).resolved);
  EXPECT_EQ(a.counters().rx_na_ignored, 2u);
}

TEST(NdpHandle, AdvertisementRefreshesKnownNeighbours) {
  NdpTable a;
  const MacAddr old_mac = {0x02, 0, 0, 0, 0, 0x77};
  a.insert(kIpB, old_mac, 0);
  // Unsolicited with override (a MAC change announced to all nodes).
  Packet una;
  build_ndp_advertisement(una, kMacB, kIpB, {0x33, 0x33, 0, 0, 0, 1}, kAllNodesAddr, false);
  EXPECT_EQ(a.handle(una, kMacA, kIpA, 10, nullptr).resolved, kIpB);
  EXPECT_EQ(a.lookup(kIpB, 10), kMacB);
  // Without override a different MAC is not taken (RFC 4861 7.2.5) ...
  a.insert(kIpB, old_mac, 20);
  auto p = frame(na_b_to_a());
  p->data[14 + 44] = 0x40;  // S only
  fix_checksum(*p);
  EXPECT_FALSE(a.handle(*p, kMacA, kIpA, 30, nullptr).resolved);
  EXPECT_EQ(a.lookup(kIpB, 30), old_mac);
  EXPECT_EQ(a.counters().rx_na_ignored, 1u);
  // ... but the same MAC is a confirmation.
  a.insert(kIpB, kMacB, 40);
  EXPECT_EQ(a.handle(*p, kMacA, kIpA, 50, nullptr).resolved, kIpB);
  EXPECT_TRUE(a.lookup(kIpB, 50 + NdpTable::kDefaultMaxAgeNs));
  // Static entries stay as configured.
  a.insert(kIpB, old_mac, 60, true);
  a.handle(*frame(na_b_to_a()), kMacA, kIpA, 70, nullptr);
  EXPECT_EQ(a.lookup(kIpB, 70), old_mac);
}

TEST(NdpHandle, AdvertisementWithoutTargetLinkLayerAddressTeachesNothing) {
  NdpTable a;
  auto p = frame(na_b_to_a());
  p->data[14 + 40 + 24] = 14;  // an unknown option type in place of the TLLA
  fix_checksum(*p);
  EXPECT_FALSE(a.handle(*p, kMacA, kIpA, 0, nullptr).resolved);
  EXPECT_EQ(a.counters().rx_na_ignored, 1u);
  EXPECT_EQ(a.counters().rx_malformed, 0u);
}

TEST(NdpHandle, DuplicateAddressProbeIsAnsweredToAllNodes) {
  // An NS from :: to our solicited-node group, no source link-layer option.
  auto p = frame(ns_a_for_b());
  std::memset(p->data + 14 + 8, 0, 16);                      // source ::
  std::memcpy(p->data + 14 + 24, solicited_node_addr(kIpA).data(), 16);
  std::memcpy(p->data + 14 + 48, kIpA.data(), 16);           // target: our address
  p->data[14 + 5] = 24;                                       // no option
  p->len = 14 + 40 + 24;
  fix_checksum(*p);
  NdpTable a;
  Packet reply;
  const NdpHandled h = a.handle(*p, kMacA, kIpA, 0, &reply);
  ASSERT_TRUE(h.reply);
  EXPECT_FALSE(h.resolved);
  EXPECT_EQ(bytes(reply), dad_na_from_a());
  EXPECT_EQ(a.size(), 0u);
  // With a source link-layer option, or not to the solicited-node group, it
  // is invalid (RFC 4861 7.1.1).
  auto with_option = frame(ns_a_for_b());
  std::memset(with_option->data + 14 + 8, 0, 16);
  fix_checksum(*with_option);
  EXPECT_FALSE(a.handle(*with_option, kMacA, kIpB, 0, &reply).reply);
  EXPECT_EQ(a.counters().rx_malformed, 1u);
  auto unicast = frame(bytes(*p));
  std::memcpy(unicast->data + 14 + 24, kIpA.data(), 16);
  fix_checksum(*unicast);
  EXPECT_FALSE(a.handle(*unicast, kMacA, kIpA, 0, &reply).reply);
  EXPECT_EQ(a.counters().rx_malformed, 2u);
}

TEST(NdpHandle, UnicastSolicitationWithoutOptionIsAnsweredToTheFrameSource) {
  // A reachability probe: unicast, no source link-layer option (allowed).
  auto p = frame(ns_a_for_b());
  std::memcpy(p->data, kMacB.data(), 6);
  std::memcpy(p->data + 14 + 24, kIpB.data(), 16);
  p->data[14 + 5] = 24;
  p->len = 14 + 40 + 24;
  fix_checksum(*p);
  NdpTable b;
  Packet reply;
  const NdpHandled h = b.handle(*p, kMacB, kIpB, 0, &reply);
  ASSERT_TRUE(h.reply);
  EXPECT_FALSE(h.resolved);  // nothing to learn from
  EXPECT_EQ(bytes(reply), na_b_to_a());
}

TEST(NdpHandle, TaggedSolicitationIsAnsweredTagged) {
  auto p = frame(ns_a_for_b());
  ASSERT_TRUE(add_vlan_tag(*p, 3 << 13 | 42));
  NdpTable b;
  Packet reply;
  ASSERT_TRUE(b.handle(*p, kMacB, kIpB, 0, &reply).reply);
  EXPECT_EQ(vlan_tci(reply), uint16_t(3 << 13 | 42));
  auto want = frame(na_b_to_a());
  ASSERT_TRUE(add_vlan_tag(*want, 3 << 13 | 42));
  EXPECT_EQ(bytes(reply), bytes(*want));
  EXPECT_EQ(b.lookup(kIpA, 0), kMacA);
}

// ---- every drop reason ----

TEST(NdpDrop, Malformed) {
  std::vector<std::pair<const char*, std::unique_ptr<Packet>>> cases;
  auto add = [&](const char* name, std::vector<uint8_t> b, bool fix) {
    auto p = frame(b);
    if (fix) fix_checksum(*p);
    cases.emplace_back(name, std::move(p));
  };
  auto edit = [](std::vector<uint8_t> b, size_t off, uint8_t val) {
    b[off] = val;
    return b;
  };
  const std::vector<uint8_t> ns = ns_a_for_b(), na = na_b_to_a();
  add("short frame", {ns.begin(), ns.begin() + 14 + 40 + 20}, false);
  add("code 1", edit(ns, 14 + 41, 1), true);
  add("version 4", edit(ns, 14, 0x40), true);
  add("ICMP length 20", edit(ns, 14 + 5, 20), true);
  add("payload beyond the frame", edit(ns, 14 + 5, 40), false);
  add("option length 0", edit(ns, 14 + 40 + 25, 0), true);
  add("option beyond the message", edit(ns, 14 + 40 + 25, 2), true);
  add("link-layer option of 16 bytes", [&] {
        std::vector<uint8_t> b = edit(ns, 14 + 40 + 25, 2);
        b.insert(b.end(), 8, 0);
        b[14 + 5] = 40;
        return b;
      }(), true);
  std::vector<uint8_t> mtarget = ns;
  mtarget[14 + 48] = 0xff;
  add("multicast target", mtarget, true);
  std::vector<uint8_t> msrc = ns;
  msrc[14 + 8] = 0xff;
  add("multicast source", msrc, true);
  std::vector<uint8_t> s_to_group = na;
  std::memcpy(&s_to_group[14 + 24], kAllNodesAddr.data(), 16);
  add("solicited NA to a group", s_to_group, true);
  add("other ICMPv6 type", edit(ns, 14 + 40, 137), true);
  add("not IPv6", edit(ns, 13, 0x00), false);
  for (auto& [name, p] : cases) {
    NdpTable t;
    Packet reply;
    const NdpHandled h = t.handle(*p, kMacB, kIpB, 0, &reply);
    EXPECT_FALSE(h.reply) << name;
    EXPECT_FALSE(h.resolved) << name;
    EXPECT_EQ(t.counters().rx_malformed, 1u) << name;
    EXPECT_EQ(t.size(), 0u) << name;
  }
}

TEST(NdpDrop, HopLimitNot255) {
  // A router forwarded it: never accepted (RFC 4861 7.1.1).
  auto p = frame(ns_a_for_b());
  p->data[14 + 7] = 254;
  NdpTable b;
  Packet reply;
  EXPECT_FALSE(b.handle(*p, kMacB, kIpB, 0, &reply).reply);
  EXPECT_EQ(b.counters().rx_bad_hop_limit, 1u);
}

TEST(NdpDrop, BadChecksum) {
  for (size_t byte : {size_t(14 + 42), size_t(14 + 8 + 3), size_t(14 + 40 + 30), size_t(85)}) {
    auto p = frame(ns_a_for_b());
    p->data[byte] ^= 0x04;
    NdpTable b;
    Packet reply;
    EXPECT_FALSE(b.handle(*p, kMacB, kIpB, 0, &reply).reply) << byte;
    EXPECT_EQ(b.counters().rx_bad_checksum, 1u) << byte;
    EXPECT_EQ(b.size(), 0u);
  }
}

TEST(NdpDrop, BadLinkLayerAddress) {
  for (const MacAddr& bad : {MacAddr{}, MacAddr{0x33, 0x33, 0, 0, 0, 1}, kBroadcastMac}) {
    auto p = frame(ns_a_for_b());
    std::memcpy(p->data + 14 + 40 + 26, bad.data(), 6);
    fix_checksum(*p);
    NdpTable b;
    Packet reply;
    EXPECT_FALSE(b.handle(*p, kMacB, kIpB, 0, &reply).reply);
    EXPECT_EQ(b.counters().rx_bad_lladdr, 1u);
    EXPECT_EQ(b.size(), 0u);
  }
  // A unicast NS without option from a group MAC: no one to answer.
  auto p = frame(ns_a_for_b());
  p->data[6] = 0x01;
  p->data[14 + 5] = 24;
  p->len = 14 + 40 + 24;
  std::memcpy(p->data + 14 + 24, kIpB.data(), 16);
  fix_checksum(*p);
  NdpTable b;
  Packet reply;
  EXPECT_FALSE(b.handle(*p, kMacB, kIpB, 0, &reply).reply);
  EXPECT_EQ(b.counters().rx_bad_lladdr, 1u);
}

TEST(NdpDrop, CountersHaveDescriptions) {
  size_t n = 0;
#define COUNT(name, desc) \
  EXPECT_GT(std::strlen(desc), 10u) << #name; \
  ++n;
  UROCE_NDP_COUNTERS(COUNT)
#undef COUNT
  EXPECT_EQ(n * sizeof(uint64_t), sizeof(NdpCounters));
}

// ---- the table ----

TEST(NdpTable, LookupAgingAndExpiry) {
  NdpTable t(8, 1000);
  t.insert(kIpA, kMacA, 100);
  EXPECT_EQ(t.lookup(kIpA, 100), kMacA);
  EXPECT_EQ(t.lookup(kIpA, 1100), kMacA);  // exactly max_age: still fresh
  EXPECT_FALSE(t.lookup(kIpA, 1101));
  EXPECT_FALSE(t.lookup(kIpB, 100));
  t.insert(kIpB, kMacB, 600);
  t.insert(kIpC, kMacB, 0, true);  // static
  EXPECT_EQ(t.expire(1200), 1u);    // A only
  EXPECT_EQ(t.size(), 2u);
  EXPECT_EQ(t.counters().expired, 1u);
  EXPECT_EQ(t.expire(1'000'000), 1u);  // B; C is static
  EXPECT_EQ(t.lookup(kIpC, 1'000'000), kMacB);
  t.remove(kIpC);
  EXPECT_EQ(t.size(), 0u);
}

TEST(NdpTable, FullTableReplacesTheOldestDynamicEntry) {
  NdpTable t(3);
  Ipv6Addr ip = kIpA;
  ip[15] = 1;
  t.insert(ip, kMacA, 50, true);  // static: never replaced
  for (uint8_t i = 2; i <= 3; ++i) {
    ip[15] = i;
    t.insert(ip, kMacA, i * 10);
  }
  ip[15] = 4;
  t.insert(ip, kMacB, 100);
  EXPECT_EQ(t.counters().evicted, 1u);
  EXPECT_EQ(t.size(), 3u);
  ip[15] = 2;
  EXPECT_FALSE(t.lookup(ip, 100));  // the oldest dynamic one went
  ip[15] = 1;
  EXPECT_TRUE(t.lookup(ip, 100));
  ip[15] = 4;
  EXPECT_EQ(t.lookup(ip, 100), kMacB);
}

// ---- resolution end to end, with NdpPending ----

TEST(NdpPending, ResolutionReleasesTheWaitingFrames) {
  NdpTable a, b;
  NdpPending pending(NdpPendingConfig{.max_dests = 2, .max_per_dest = 2,
                                      .retry_interval_ns = 100, .max_requests = 2});
  Packet f1, f2, f3;
  EXPECT_EQ(pending.enqueue(kIpB, &f1, 0), PendingEnqueue::kQueuedSendRequest);
  EXPECT_EQ(pending.enqueue(kIpB, &f2, 1), NdpPending::Enqueue::kQueued);
  EXPECT_EQ(pending.enqueue(kIpB, &f3, 2), PendingEnqueue::kRefused);
  EXPECT_TRUE(pending.waiting(kIpB));
  // A asks, B answers, A learns and releases.
  Packet ns, na;
  build_ndp_solicitation(ns, kMacA, kIpA, kIpB);
  ASSERT_TRUE(b.handle(ns, kMacB, kIpB, 10, &na).reply);
  const NdpHandled h = a.handle(na, kMacA, kIpA, 20, nullptr);
  ASSERT_TRUE(h.resolved);
  std::vector<Packet*> sent;
  EXPECT_EQ(pending.resolved(*h.resolved, [&](Packet* p) { sent.push_back(p); }), 2u);
  EXPECT_EQ(sent, (std::vector<Packet*>{&f1, &f2}));
  EXPECT_FALSE(pending.waiting(kIpB));
  EXPECT_EQ(a.lookup(kIpB, 20), kMacB);
  EXPECT_EQ(pending.counters().released, 2u);
}

TEST(NdpPending, UnansweredSolicitationsGiveUp) {
  NdpPending pending(NdpPendingConfig{.max_dests = 2, .max_per_dest = 2,
                                      .retry_interval_ns = 100, .max_requests = 2});
  Packet f;
  ASSERT_EQ(pending.enqueue(kIpC, &f, 0), PendingEnqueue::kQueuedSendRequest);
  std::vector<Ipv6Addr> asked;
  std::vector<Packet*> dropped;
  auto ask = [&](const Ipv6Addr& ip) { asked.push_back(ip); };
  auto drop = [&](Packet* p) { dropped.push_back(p); };
  EXPECT_FALSE(pending.tick(99, ask, drop));
  EXPECT_EQ(pending.next_deadline_ns(), 100u);
  EXPECT_TRUE(pending.tick(100, ask, drop));  // the second solicitation
  EXPECT_EQ(asked, std::vector<Ipv6Addr>{kIpC});
  EXPECT_TRUE(pending.tick(200, ask, drop));  // given up
  EXPECT_EQ(dropped, std::vector<Packet*>{&f});
  EXPECT_EQ(pending.counters().failed_resolutions, 1u);
  EXPECT_EQ(pending.counters().dropped_timeout, 1u);
  EXPECT_EQ(pending.next_deadline_ns(), 0u);
}

// ---- Wireshark ----

TEST(NdpTshark, SolicitationAndAdvertisementDecodeWithGoodChecksums) {
  if (!test::have_tshark()) GTEST_SKIP() << "tshark not installed";
  Packet ns, na, tagged_ns;
  build_ndp_solicitation(ns, kMacA, kIpA, kIpB);
  NdpTable b;
  ASSERT_TRUE(b.handle(ns, kMacB, kIpB, 0, &na).reply);
  build_ndp_solicitation(tagged_ns, kMacA, kIpA, kIpB);
  ASSERT_TRUE(add_vlan_tag(tagged_ns, 0x0064));
  test::PcapFile file({&ns, &na, &tagged_ns});
  const auto rows = test::tshark_fields(
      file.path, "",
      {"frame.protocols", "icmpv6.type", "icmpv6.checksum.status", "ipv6.src", "ipv6.dst",
       "ipv6.hlim", "icmpv6.nd.ns.target_address", "icmpv6.nd.na.target_address",
       "icmpv6.nd.na.flag.s", "icmpv6.nd.na.flag.o", "icmpv6.opt.type", "icmpv6.opt.linkaddr",
       "eth.dst", "_ws.malformed", "_ws.expert.message"});
  ASSERT_EQ(rows.size(), 3u);
  for (const auto& c : rows) {
    SCOPED_TRACE(c[0]);
    EXPECT_EQ(c[2], "1");  // checksum good
    EXPECT_EQ(c[5], "255");
    EXPECT_EQ(c[13], "");
    EXPECT_EQ(c[14], "");
  }
  EXPECT_EQ(rows[0][0], "eth:ethertype:ipv6:icmpv6");
  EXPECT_EQ(rows[0][1], "135");
  EXPECT_EQ(rows[0][3], "fd00:9::a:11");
  EXPECT_EQ(rows[0][4], "ff02::1:ff45:6789");
  EXPECT_EQ(rows[0][6], "fd00:9::1:2345:6789");
  EXPECT_EQ(rows[0][10], "1");
  EXPECT_EQ(rows[0][11], "02:00:5e:10:00:01");
  EXPECT_EQ(rows[0][12], "33:33:ff:45:67:89");
  EXPECT_EQ(rows[1][1], "136");
  EXPECT_EQ(rows[1][3], "fd00:9::1:2345:6789");
  EXPECT_EQ(rows[1][4], "fd00:9::a:11");
  EXPECT_EQ(rows[1][7], "fd00:9::1:2345:6789");
  EXPECT_EQ(rows[1][8], "1");
  EXPECT_EQ(rows[1][9], "1");
  EXPECT_EQ(rows[1][10], "2");
  EXPECT_EQ(rows[1][11], "02:00:5e:10:00:02");
  EXPECT_EQ(rows[1][12], "02:00:5e:10:00:01");
  EXPECT_EQ(rows[2][0], "eth:ethertype:vlan:ethertype:ipv6:icmpv6");
  EXPECT_EQ(rows[2][1], "135");
  const std::string verbose = test::run_command("tshark -n -V -r " + file.path + " 2>&1");
  EXPECT_EQ(verbose.find("Malformed"), std::string::npos) << verbose;
  EXPECT_NE(verbose.find("Neighbor Solicitation"), std::string::npos);
  EXPECT_NE(verbose.find("Neighbor Advertisement"), std::string::npos);
}

}  // namespace
}  // namespace uroce::net
