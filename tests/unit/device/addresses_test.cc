// Tests for device/addresses.cc: the GID table built from a bound
// interface's addresses (stable indices as addresses come and go, the
// family's usual index first) and what the CM agent takes as its own.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "device/test_env.h"

namespace uroce::device {
namespace {

net::IfAddress v4(const char* s) {
  net::IfAddress a{AF_INET, {}};
  inet_pton(AF_INET, s, a.addr.data());
  return a;
}

net::IfAddress v6(const char* s) {
  net::IfAddress a{AF_INET6, {}};
  inet_pton(AF_INET6, s, a.addr.data());
  return a;
}

// The GID at index i as text (IPv4-mapped as a.b.c.d), "" if invalid.
std::string gid(const Device& d, int i) {
  const abi::GidEntry& g = d.info().gids[i];
  if (!g.valid) return "";
  char buf[INET6_ADDRSTRLEN];
  static const uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (std::memcmp(g.gid, kMapped, 12) == 0) return inet_ntop(AF_INET, g.gid + 12, buf, sizeof(buf));
  return inet_ntop(AF_INET6, g.gid, buf, sizeof(buf));
}

class AddressesTest : public DeviceFixture {};

TEST_F(AddressesTest, FamiliesTakeTheirUsualIndicesAndTheLinkLocalGidStays) {
  const std::string link_local = gid(dev_, 1);
  EXPECT_EQ(link_local.rfind("fe80::", 0), 0u);
  EXPECT_TRUE(dev_.set_addresses({v6("fd00::1"), v4("10.0.0.1")}));
  EXPECT_EQ(gid(dev_, 0), "10.0.0.1");
  EXPECT_EQ(gid(dev_, 1), link_local);
  EXPECT_EQ(gid(dev_, 2), "fd00::1");
  EXPECT_EQ(dev_.info().gids[0].type, uint32_t(IBV_GID_TYPE_ROCE_V2));
  EXPECT_FALSE(dev_.set_addresses({v4("10.0.0.1"), v6("fd00::1")}));  // the same set: no change
}

TEST_F(AddressesTest, AnAddressKeepsItsIndexWhileOthersComeAndGo) {
  dev_.set_addresses({v4("10.0.0.1"), v6("fd00::1")});
  EXPECT_TRUE(dev_.set_addresses({v4("10.0.0.1"), v6("fd00::1"), v4("10.0.0.2"), v6("fd00::2")}));
  EXPECT_EQ(gid(dev_, 3), "10.0.0.2");
  EXPECT_EQ(gid(dev_, 4), "fd00::2");
  // 10.0.0.1 goes: 10.0.0.2 stays at 3, index 0 is empty until an IPv4 comes.
  EXPECT_TRUE(dev_.set_addresses({v6("fd00::1"), v4("10.0.0.2"), v6("fd00::2")}));
  EXPECT_EQ(gid(dev_, 0), "");
  EXPECT_EQ(gid(dev_, 3), "10.0.0.2");
  EXPECT_TRUE(dev_.set_addresses({v6("fd00::1"), v4("10.0.0.2"), v6("fd00::2"), v4("10.0.0.3")}));
  EXPECT_EQ(gid(dev_, 0), "10.0.0.3");
  EXPECT_EQ(gid(dev_, 4), "fd00::2");
}

TEST_F(AddressesTest, TheInterfacesLinkLocalAddressIsTheMacsGidOrANewOne) {
  const std::string link_local = gid(dev_, 1);
  net::IfAddress same{AF_INET6, {}};
  std::memcpy(same.addr.data(), dev_.info().gids[1].gid, 16);
  EXPECT_FALSE(dev_.set_addresses({v4("127.0.0.1"), same}));  // already GID 1
  EXPECT_TRUE(dev_.set_addresses({v4("127.0.0.1"), same, v6("fe80::1234")}));
  EXPECT_EQ(gid(dev_, 2), "");  // not a link-local's index
  EXPECT_EQ(gid(dev_, 3), "fe80::1234");
}

TEST_F(AddressesTest, AFullTableTakesNoMore) {
  std::vector<net::IfAddress> many;
  for (int i = 1; i <= 20; ++i) many.push_back(v4(("10.0.1." + std::to_string(i)).c_str()));
  dev_.set_addresses(many);
  int valid = 0;
  for (const abi::GidEntry& g : dev_.info().gids) valid += g.valid ? 1 : 0;
  EXPECT_EQ(valid, int(abi::kMaxGids));
  EXPECT_EQ(gid(dev_, 0), "10.0.1.1");
}

}  // namespace
}  // namespace uroce::device
