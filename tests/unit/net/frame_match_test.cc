// net/frame_match: the fields a steering rule matches, pulled from hand-made
// frames, the masked compare, and the IPv4/TCP/UDP checksums behind
// IBV_WC_IP_CSUM_OK and IBV_SEND_IP_CSUM.
#include "net/frame_match.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace uroce::net {
namespace {

std::vector<uint8_t> eth(uint16_t type, int vlan = -1) {
  std::vector<uint8_t> f = {0x01, 0x00, 0x5e, 0, 0, 1, 0x02, 0, 0, 0, 0, 2};
  if (vlan >= 0) f.insert(f.end(), {0x81, 0x00, uint8_t(vlan >> 8), uint8_t(vlan)});
  f.push_back(uint8_t(type >> 8));
  f.push_back(uint8_t(type));
  return f;
}

// Ethernet [+ VLAN] + IPv4 (20 bytes, checksum 0) + UDP/TCP with 8 payload bytes.
std::vector<uint8_t> ipv4_l4(uint8_t proto, int vlan = -1) {
  auto f = eth(0x0800, vlan);
  const size_t l4 = proto == 6 ? 20 : 8;
  const uint16_t total = uint16_t(20 + l4 + 8);
  f.insert(f.end(), {0x45, 0x10, uint8_t(total >> 8), uint8_t(total), 0, 0, 0x40, 0, 33, proto, 0, 0,
                     10, 0, 0, 1, 10, 0, 0, 2});
  f.insert(f.end(), {0x04, 0xd2, 0x16, 0x2e});  // 1234 -> 5678
  f.resize(f.size() + l4 - 4, 0);
  if (proto == 6) f[f.size() - l4 + 12] = 0x50;  // data offset 5
  else f[f.size() - 4] = 0, f[f.size() - 3] = 16;  // UDP length
  for (int i = 0; i < 8; ++i) f.push_back(uint8_t(i));
  return f;
}

TEST(FrameFields, EthernetVlanIpv4Udp) {
  const auto f = ipv4_l4(17, 0x2005);
  const FrameFields x = frame_fields(f.data(), f.size());
  EXPECT_EQ(x.protocols, uint32_t(abi::kFlowEth | abi::kFlowVlan | abi::kFlowIpv4 | abi::kFlowUdp));
  EXPECT_TRUE(x.multicast);
  EXPECT_EQ(ntohs(x.key.vlan_tag), 0x2005);
  EXPECT_EQ(ntohs(x.key.ether_type), 0x0800);  // after the tag
  EXPECT_EQ(x.key.ip_proto, 17);
  EXPECT_EQ(x.key.tos, 0x10);
  EXPECT_EQ(x.key.ttl, 33);
  EXPECT_EQ(x.key.ip_flags, 2);  // DF
  const uint8_t src[4] = {10, 0, 0, 1};
  EXPECT_EQ(std::memcmp(x.key.src_ip, src, 4), 0);
  EXPECT_EQ(x.key.src_ip[4], 0);
  EXPECT_EQ(ntohs(x.key.src_port), 1234);
  EXPECT_EQ(ntohs(x.key.dst_port), 5678);
}

TEST(FrameFields, Ipv6FlowLabelAndTruncatedFrames) {
  auto f = eth(0x86dd);
  f.insert(f.end(), {0x6a, 0xb1, 0x23, 0x45, 0, 8, 6, 9});
  for (int i = 0; i < 32; ++i) f.push_back(uint8_t(i));
  f.insert(f.end(), {0, 80, 1, 0xbb});
  const FrameFields x = frame_fields(f.data(), f.size());
  EXPECT_EQ(x.protocols, uint32_t(abi::kFlowEth | abi::kFlowIpv6 | abi::kFlowTcp));
  EXPECT_EQ(ntohl(x.key.flow_label), 0x12345u);
  EXPECT_EQ(x.key.tos, 0xab);
  EXPECT_EQ(x.key.ttl, 9);
  EXPECT_EQ(ntohs(x.key.dst_port), 443);
  // Every prefix parses without reading past it, and knows less.
  for (size_t n = 0; n < f.size(); ++n) {
    const FrameFields p = frame_fields(f.data(), n);
    EXPECT_EQ(p.protocols & ~x.protocols, 0u) << n;
  }
  EXPECT_EQ(frame_fields(f.data(), 13).protocols, 0u);
}

TEST(FrameMatch, MaskedValuesAndImpliedProtocols) {
  const auto f = ipv4_l4(17);
  const FrameFields x = frame_fields(f.data(), f.size());
  FrameMatch m;
  m.protocols = abi::kFlowIpv4 | abi::kFlowUdp;
  EXPECT_TRUE(frame_matches(m, x));  // all wildcards: the protocols decide
  m.mask.dst_port = 0xffff;
  m.value.dst_port = htons(5678);
  EXPECT_TRUE(frame_matches(m, x));
  m.value.dst_port = htons(5679);
  EXPECT_FALSE(frame_matches(m, x));
  m.mask.dst_port = htons(0xfff0);  // 5679 and 5678 agree but for the last bits
  m.value.dst_port = htons(5679 & 0xfff0);
  EXPECT_TRUE(frame_matches(m, x));
  m.protocols = abi::kFlowTcp;
  EXPECT_FALSE(frame_matches(m, x));  // a TCP rule never matches UDP
  m.protocols = abi::kFlowVlan;
  EXPECT_FALSE(frame_matches(m, x));  // untagged
}

TEST(Checksums, FilledThenVerifiedAndBrokenByOneBit) {
  for (uint8_t proto : {uint8_t(6), uint8_t(17)}) {
    auto f = ipv4_l4(proto);
    const FrameFields x = frame_fields(f.data(), f.size());
    EXPECT_FALSE(ipv4_l4_checksums_ok(f.data(), f.size(), x));  // IP header checksum 0
    ASSERT_TRUE(fill_ipv4_l4_checksums(f.data(), f.size(), x));
    EXPECT_TRUE(ipv4_l4_checksums_ok(f.data(), f.size(), x)) << int(proto);
    f.back() ^= 0x40;
    EXPECT_FALSE(ipv4_l4_checksums_ok(f.data(), f.size(), x)) << int(proto);
  }
  // RFC 768: a UDP checksum of 0 was not computed, and is not wrong.
  auto f = ipv4_l4(17);
  const FrameFields x = frame_fields(f.data(), f.size());
  ASSERT_TRUE(fill_ipv4_l4_checksums(f.data(), f.size(), x));
  f[x.l4_off + 6] = f[x.l4_off + 7] = 0;
  EXPECT_TRUE(ipv4_l4_checksums_ok(f.data(), f.size(), x));
}

}  // namespace
}  // namespace uroce::net
