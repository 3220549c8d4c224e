// The multicast group table and the GID/MAC rules (device/multicast.h).
#include "device/multicast.h"

#include <cerrno>

#include <gtest/gtest.h>

namespace uroce::device {
namespace {

Gid v4(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  Gid g{};
  g[10] = g[11] = 0xff;
  g[12] = a, g[13] = b, g[14] = c, g[15] = d;
  return g;
}

TEST(MulticastGid, Ipv6MulticastAndIpv4MappedClassDOnly) {
  EXPECT_TRUE(is_multicast_gid(v4(224, 0, 0, 1).data()));
  EXPECT_TRUE(is_multicast_gid(v4(239, 255, 255, 255).data()));
  EXPECT_FALSE(is_multicast_gid(v4(223, 255, 255, 255).data()));
  EXPECT_FALSE(is_multicast_gid(v4(240, 0, 0, 1).data()));
  Gid six{};
  six[0] = 0xff;
  six[1] = 0x02;
  EXPECT_TRUE(is_multicast_gid(six.data()));
  Gid link_local{};
  link_local[0] = 0xfe;
  link_local[1] = 0x80;
  EXPECT_FALSE(is_multicast_gid(link_local.data()));
  Gid not_mapped = v4(239, 1, 1, 1);
  not_mapped[10] = 0;  // ::239.1.1.1 (IPv4-compatible, not mapped)
  EXPECT_FALSE(is_multicast_gid(not_mapped.data()));
}

TEST(MulticastGid, EthernetGroupAddresses) {
  // RFC 1112 6.4: the low 23 bits (239.129.2.3 and 239.1.2.3 share one).
  using Mac = std::array<uint8_t, 6>;
  EXPECT_EQ(multicast_mac(v4(239, 129, 2, 3).data()), (Mac{0x01, 0x00, 0x5e, 0x01, 0x02, 0x03}));
  EXPECT_EQ(multicast_mac(v4(224, 0, 0, 251).data()), (Mac{0x01, 0x00, 0x5e, 0x00, 0x00, 0xfb}));
  Gid six{};
  six[0] = 0xff;
  six[1] = 0x0e;
  six[12] = 0xde, six[13] = 0xad, six[14] = 0xbe, six[15] = 0xef;
  EXPECT_EQ(multicast_mac(six.data()), (Mac{0x33, 0x33, 0xde, 0xad, 0xbe, 0xef}));  // RFC 2464 7
}

TEST(MulticastGroups, AttachDetachAndLimits) {
  MulticastGroups g(2, 3);
  const Gid a = v4(239, 0, 0, 1), b = v4(239, 0, 0, 2), c = v4(239, 0, 0, 3);
  EXPECT_TRUE(g.empty());
  EXPECT_EQ(g.detach(a, 10), EINVAL);
  EXPECT_EQ(g.attach(a, 10), 0);
  EXPECT_EQ(g.attach(a, 10), 0);  // once
  ASSERT_NE(g.members(a.data()), nullptr);
  EXPECT_EQ(g.members(a.data())->size(), 1u);
  EXPECT_EQ(g.attach(a, 11), 0);
  EXPECT_EQ(g.attach(a, 12), 0);
  EXPECT_EQ(g.attach(a, 13), ENOMEM) << "a group of 3";
  EXPECT_EQ(g.attach(b, 13), 0);
  EXPECT_EQ(g.attach(c, 13), ENOMEM) << "a table of 2 groups";
  EXPECT_EQ(g.detach(b, 12), EINVAL) << "12 is in a, not b";
  EXPECT_EQ(g.detach(b, 13), 0);
  EXPECT_EQ(g.members(b.data()), nullptr) << "the last member gone, the group too";
  EXPECT_EQ(g.attach(c, 13), 0) << "its slot is free again";
  g.detach_all(12);
  EXPECT_EQ(g.members(a.data())->size(), 2u);
  g.detach_all(10);
  g.detach_all(11);
  g.detach_all(13);
  EXPECT_TRUE(g.empty());
}

}  // namespace
}  // namespace uroce::device
