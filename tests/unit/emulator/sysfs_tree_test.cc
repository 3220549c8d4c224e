// The device's sysfs tree (emulator/sysfs_tree.h): values as the kernel's
// drivers/infiniband/core/sysfs.c prints them, and the tree following the
// device.
#include "emulator/sysfs_tree.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace uroce::emulator {
namespace {

namespace fs = std::filesystem;

TEST(SysfsFormat, RateIsRateShowsForEveryWidthAndSpeed) {
  EXPECT_EQ(sysfs_rate(1, 1), "2.5 Gb/sec (1X SDR)");  // rxe's
  EXPECT_EQ(sysfs_rate(2, 32), "100 Gb/sec (4X EDR)");
  EXPECT_EQ(sysfs_rate(2, 16), "56 Gb/sec (4X FDR)");
  EXPECT_EQ(sysfs_rate(2, 2), "20 Gb/sec (4X DDR)");
  EXPECT_EQ(sysfs_rate(8, 4), "120 Gb/sec (12X QDR)");
  EXPECT_EQ(sysfs_rate(16, 64), "100 Gb/sec (2X HDR)");
  EXPECT_EQ(sysfs_rate(1, 128), "100 Gb/sec (1X NDR)");
  EXPECT_EQ(sysfs_rate(4, 8), "80 Gb/sec (8X FDR10)");
}

TEST(SysfsFormat, GuidGidAndStates) {
  EXPECT_EQ(sysfs_guid(htobe64(0x505400fffe123456ull)), "5054:00ff:fe12:3456");
  const uint8_t gid[16] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0, 0xff, 0xfe, 0x12, 0x34, 0x56};
  EXPECT_EQ(sysfs_gid(gid), "fe80:0000:0000:0000:5054:00ff:fe12:3456");
  EXPECT_EQ(sysfs_port_state(4), "4: ACTIVE");
  EXPECT_EQ(sysfs_port_state(1), "1: DOWN");
  EXPECT_EQ(sysfs_phys_state(5), "5: LinkUp");
  EXPECT_EQ(sysfs_phys_state(3), "3: Disabled");
}

class SysfsTreeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/uroce-sysfs-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    std::strcpy(info_.name, "dev0");
    info_.node_guid = htobe64(0x0075'72ff'feeb'd1bdull);
    info_.sys_image_guid = info_.node_guid;
    std::strcpy(info_.fw_ver, "0.1.0");
    info_.port.state = 4;
    info_.port.phys_state = 5;
    info_.port.active_width = 2;
    info_.port.active_speed = 32;
    info_.port.gid_tbl_len = 4;
    info_.port.port_cap_flags = 0x04010000;
    info_.gids[0] = {{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1}, 2 /* RoCE v2 */, 1};
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(const std::string& rel) {
    std::ifstream f(dir_ + "/dev0.sysfs/" + rel);
    std::stringstream s;
    s << f.rdbuf();
    return f ? s.str() : "<absent>";
  }
  std::string dir_;
  abi::DeviceInfo info_{};
};

TEST_F(SysfsTreeTest, HoldsTheDevicesValuesAndFollowsItsGidsAndPort) {
  SysfsTree tree;
  ASSERT_EQ(tree.create(dir_, info_, "lo"), "");
  EXPECT_EQ(file("node_guid"), "0075:72ff:feeb:d1bd\n");
  EXPECT_EQ(file("node_type"), "1: CA\n");
  EXPECT_EQ(file("parent"), "lo\n");
  EXPECT_EQ(file("ports/1/state"), "4: ACTIVE\n");
  EXPECT_EQ(file("ports/1/rate"), "100 Gb/sec (4X EDR)\n");
  EXPECT_EQ(file("ports/1/cap_mask"), "0x04010000\n");
  EXPECT_EQ(file("ports/1/gids/0"), "0000:0000:0000:0000:0000:ffff:7f00:0001\n");
  EXPECT_EQ(file("ports/1/gid_attrs/types/0"), "RoCE v2\n");
  EXPECT_EQ(file("ports/1/gid_attrs/ndevs/0"), "lo\n");
  EXPECT_EQ(file("ports/1/gids/3"), "0000:0000:0000:0000:0000:0000:0000:0000\n");
  EXPECT_EQ(file("ports/1/gid_attrs/types/3"), "<absent>") << "an empty entry has no type (EINVAL in the kernel)";
  EXPECT_EQ(file("ports/1/hw_counters/sent_pkts"), "0\n");
  EXPECT_TRUE(fs::is_symlink(dir_ + "/dev0.sysfs/device/net/lo"));

  // An address goes, another comes; the port goes down.
  info_.gids[0].valid = 0;
  info_.gids[1] = {{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0x75, 0x72, 0xff, 0xfe, 0xeb, 0xd1, 0xbd}, 2, 1};
  info_.port.state = 1;
  info_.port.phys_state = 3;
  tree.update_port(info_);
  EXPECT_EQ(file("ports/1/gids/0"), "0000:0000:0000:0000:0000:0000:0000:0000\n");
  EXPECT_EQ(file("ports/1/gid_attrs/ndevs/0"), "<absent>");
  EXPECT_EQ(file("ports/1/gids/1"), "fe80:0000:0000:0000:0075:72ff:feeb:d1bd\n");
  EXPECT_EQ(file("ports/1/gid_attrs/ndevs/1"), "lo\n");
  EXPECT_EQ(file("ports/1/state"), "1: DOWN\n");
  EXPECT_EQ(file("ports/1/phys_state"), "3: Disabled\n");

  // Counters: rewritten when they change, left alone when not.
  device::Counters c{};
  c.tx_packets = 7;
  c.retransmits = 2;
  tree.update_counters(c);
  EXPECT_EQ(file("ports/1/hw_counters/sent_pkts"), "7\n");
  EXPECT_EQ(file("ports/1/hw_counters/completer_retry_err"), "2\n");
  struct stat before, after;
  ASSERT_EQ(stat((dir_ + "/dev0.sysfs/ports/1/hw_counters/sent_pkts").c_str(), &before), 0);
  tree.update_counters(c);
  ASSERT_EQ(stat((dir_ + "/dev0.sysfs/ports/1/hw_counters/sent_pkts").c_str(), &after), 0);
  EXPECT_EQ(before.st_ino, after.st_ino) << "an unchanged counter is not rewritten";
  for (const auto& e : fs::recursive_directory_iterator(dir_))
    EXPECT_EQ(e.path().filename().string().front() == '.', false) << "a temporary file left: " << e.path();

  tree.remove();
  EXPECT_FALSE(fs::exists(dir_ + "/dev0.sysfs"));
}

TEST_F(SysfsTreeTest, WithoutAnInterfaceNoNdevsNoParentNoDevice) {
  SysfsTree tree;
  ASSERT_EQ(tree.create(dir_, info_, ""), "");
  EXPECT_EQ(file("ports/1/gid_attrs/types/0"), "RoCE v2\n");
  EXPECT_EQ(file("ports/1/gid_attrs/ndevs/0"), "<absent>");
  EXPECT_EQ(file("parent"), "<absent>");
  EXPECT_FALSE(fs::exists(dir_ + "/dev0.sysfs/device"));
}

TEST_F(SysfsTreeTest, ReplacesWhatAnEarlierEngineLeft) {
  fs::create_directories(dir_ + "/dev0.sysfs/stale");
  SysfsTree tree;
  ASSERT_EQ(tree.create(dir_, info_, "lo"), "");
  EXPECT_FALSE(fs::exists(dir_ + "/dev0.sysfs/stale"));
  EXPECT_EQ(file("node_guid"), "0075:72ff:feeb:d1bd\n");
}

// mlx5 mode: the tree below a PCI function with a ConnectX-5's ids, found two
// levels above the tree's real path (UCX's uct_ib_device_get_sysfs_path), the
// device link up to it, <name>.sysfs a link to the tree; all of it removed.
TEST_F(SysfsTreeTest, Mlx5ModePutsTheTreeBelowAPciFunction) {
  info_.vendor_id = abi::kMlx5VendorId;
  info_.vendor_part_id = abi::kMlx5VendorPartId;
  {
    SysfsTree tree;
    ASSERT_EQ(tree.create(dir_, info_, "lo"), "");
    EXPECT_EQ(file("node_guid"), "0075:72ff:feeb:d1bd\n");  // through the link
    const fs::path real = fs::canonical(dir_ + "/dev0.sysfs");
    EXPECT_EQ(real, fs::canonical(dir_ + "/dev0.pci/infiniband/dev0"));
    const fs::path pci = real.parent_path().parent_path();
    EXPECT_EQ(file("../../vendor"), "0x15b3\n");
    EXPECT_EQ(file("../../device"), "0x1017\n");
    EXPECT_EQ(fs::read_symlink(dir_ + "/dev0.sysfs/device"), pci);
    EXPECT_TRUE(fs::is_symlink(pci / "net/lo"));
  }
  EXPECT_FALSE(fs::exists(dir_ + "/dev0.pci"));
  EXPECT_FALSE(fs::is_symlink(dir_ + "/dev0.sysfs"));
}

}  // namespace
}  // namespace uroce::emulator
