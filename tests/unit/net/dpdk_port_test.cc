// Tests for net/dpdk_port.cc that need no EAL: how the EAL arguments are
// built from a port config, and refusals before EAL is touched. The port
// itself is exercised by tests/integration/dpdk_port_test.sh (one process per
// EAL, STYLE.md 19).
#include "net/dpdk_port.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace uroce::net {
namespace {

bool has(const std::vector<std::string>& args, const std::string& a) {
  return std::find(args.begin(), args.end(), a) != args.end();
}

std::string arg_starting(const std::vector<std::string>& args, const std::string& prefix) {
  for (const std::string& a : args)
    if (a.rfind(prefix, 0) == 0) return a;
  return "";
}

TEST(DpdkPortSpec, PciAddressesAndVdevs) {
  EXPECT_TRUE(is_pci_spec("0000:03:00.0"));
  EXPECT_TRUE(is_pci_spec("03:00.1"));
  EXPECT_TRUE(is_pci_spec("0000:af:00.7,rxq_cqe_comp_en=0"));
  EXPECT_FALSE(is_pci_spec("net_af_packet0,iface=veth0"));
  EXPECT_FALSE(is_pci_spec("net_tap0"));
  EXPECT_FALSE(is_pci_spec("03:00.8"));
  EXPECT_FALSE(is_pci_spec("0000:03:00"));
  EXPECT_FALSE(is_pci_spec(""));
}

TEST(DpdkPortEalArgs, VdevWithoutHugepages) {
  DpdkPortConfig c;
  c.engine_name = "uroce7";
  c.spec = "net_af_packet0,iface=veth0";
  c.mtu = 9000;
  const auto args = build_eal_args(c, /*hugepages_available=*/true);
  EXPECT_TRUE(has(args, "--file-prefix=uroce-uroce7"));
  EXPECT_TRUE(has(args, "--no-huge"));  // not asked for
  EXPECT_TRUE(has(args, "--no-shconf"));
  EXPECT_TRUE(has(args, "--no-pci"));
  EXPECT_TRUE(has(args, "--no-telemetry"));
  EXPECT_TRUE(has(args, "-m"));
  EXPECT_TRUE(has(args, "256"));
  EXPECT_TRUE(has(args, "--log-level=4"));
  EXPECT_EQ(arg_starting(args, "--lcores=0@(").back(), ')');
  // af_packet's ring frames are sized for the MTU (one page-multiple frame
  // per block), and the ring holds 16 MiB of them (512 frames overflowed
  // while an engine was off its CPU).
  EXPECT_EQ(arg_starting(args, "--vdev="),
            "--vdev=net_af_packet0,iface=veth0,framesz=9216,blocksz=36864,framecnt=1820");
  c.mtu = 1500;
  EXPECT_EQ(arg_starting(build_eal_args(c, true), "--vdev="),
            "--vdev=net_af_packet0,iface=veth0,framesz=2048,blocksz=4096,framecnt=8192");
  c.spec = "net_af_packet0,iface=veth0,framecnt=256";  // given: kept
  EXPECT_EQ(arg_starting(build_eal_args(c, true), "--vdev="),
            "--vdev=net_af_packet0,iface=veth0,framecnt=256,framesz=2048,blocksz=4096");
}

TEST(DpdkPortEalArgs, ExplicitFrameSizeIsKept) {
  DpdkPortConfig c;
  c.spec = "net_af_packet1,iface=v1,framesz=2048,blocksz=4096";
  EXPECT_EQ(arg_starting(build_eal_args(c, false), "--vdev="),
            "--vdev=net_af_packet1,iface=v1,framesz=2048,blocksz=4096");
  c.spec = "net_tap0,iface=tap0";
  EXPECT_EQ(arg_starting(build_eal_args(c, false), "--vdev="), "--vdev=net_tap0,iface=tap0");
}

TEST(DpdkPortEalArgs, HugepagesWhenAskedAndAvailable) {
  DpdkPortConfig c;
  c.spec = "net_tap0";
  c.use_hugepages = true;
  auto args = build_eal_args(c, true);
  EXPECT_FALSE(has(args, "--no-huge"));
  EXPECT_FALSE(has(args, "--no-shconf"));
  EXPECT_TRUE(has(args, "--huge-unlink"));
  EXPECT_FALSE(has(args, "-m"));  // hugepages taken as needed
  args = build_eal_args(c, false);
  EXPECT_TRUE(has(args, "--no-huge"));
}

TEST(DpdkPortEalArgs, PciDeviceIsAllowListed) {
  DpdkPortConfig c;
  c.engine_name = "eng/1 x";  // sanitised into the prefix
  c.spec = "0000:03:00.0";
  c.extra_eal_args = {"--iova-mode=va"};
  const auto args = build_eal_args(c, false);
  EXPECT_TRUE(has(args, "--file-prefix=uroce-eng_1_x"));
  EXPECT_FALSE(has(args, "--no-pci"));
  const auto a = std::find(args.begin(), args.end(), "-a");
  ASSERT_NE(a, args.end());
  EXPECT_EQ(*(a + 1), "0000:03:00.0");
  EXPECT_EQ(args.back(), "--iova-mode=va");
}

TEST(DpdkPort, EmptySpecIsRefusedWithoutTouchingEal) {
  DpdkPort port;
  EXPECT_NE(port.open(DpdkPortConfig{}), "");
  EXPECT_FALSE(port.is_open());
  EXPECT_TRUE(DpdkPort::eal_args().empty());
  // The datapath is inert on a closed port, and counts what it refuses.
  PacketPool pool;
  Packet* out[4];
  EXPECT_EQ(port.rx_burst(out, 4, pool), 0u);
  Packet p;
  p.len = 60;
  port.tx(&p);
  EXPECT_EQ(port.flush(), 0u);
  EXPECT_EQ(port.counters().tx_port_closed, 1u);
  EXPECT_NE(port.stats_text().find("tx_port_closed 1"), std::string::npos);
}

}  // namespace
}  // namespace uroce::net
