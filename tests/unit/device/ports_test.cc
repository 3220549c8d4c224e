// Tests for device/ports.cc: which loopback frames carry checksums. A frame
// that never leaves the engine gets none, unless a capture (which must show
// valid frames) or the loopback fault injector (whose corrupted frames only
// the receiver's ICRC check can drop) needs them.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "device/test_env.h"

namespace uroce::device {
namespace {

class PortsTest : public PairFixture {
 protected:
  // Posts a 100-byte SEND from A to B and returns the frame it put on the
  // loopback; the caller requeues it.
  net::Packet* send_one() {
    make_pair(IBV_QPT_RC);
    post_recv(B(), 1, {sge(b(0), 256, b_key_)});
    post_send(A(), wqe(IBV_WR_SEND, 2), {sge(a(0), 100, a_key_)});
    dev_.poll(now_);
    auto frames = DeviceTestPeer::take_in_flight(dev_);
    EXPECT_EQ(frames.size(), 1u);
    return frames.empty() ? nullptr : frames[0];
  }
  void expect_delivered() {
    ASSERT_TRUE(run());
    EXPECT_EQ(one_cqe(b_rcq_).status, uint32_t(IBV_WC_SUCCESS));
    EXPECT_EQ(std::memcmp(b(0), a(0), 100), 0);
    EXPECT_EQ(counters().rx_parse_errors, 0u);
  }
};

TEST_F(PortsTest, LoopbackFramesCarryNoChecksums) {
  net::Packet* p = send_one();
  ASSERT_NE(p, nullptr);
  EXPECT_FALSE(p->checksummed);
  EXPECT_EQ(net::parse_roce_packet(*p, false), net::ParseError::kOk);
  EXPECT_EQ(net::parse_roce_packet(*p, true), net::ParseError::kBadIpChecksum);
  DeviceTestPeer::requeue(dev_, p);
  expect_delivered();  // the receiver did not check what was never computed
}

TEST_F(PortsTest, CapturedLoopbackFramesAreValid) {
  char path[] = "/tmp/uroce-ports-test-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  ASSERT_EQ(dev_.start_capture(path, 0), "");
  net::Packet* p = send_one();
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(p->checksummed);
  EXPECT_EQ(net::parse_roce_packet(*p, true), net::ParseError::kOk);
  DeviceTestPeer::requeue(dev_, p);
  expect_delivered();
  dev_.stop_capture();
  unlink(path);
}

TEST_F(PortsTest, LoopbackFaultInjectionIsCaughtByTheIcrc) {
  ASSERT_EQ(dev_.set_fault(PortId::kLoopback, net::FaultConfig{.corrupt = 1, .seed = 3}), "");
  net::Packet* p = send_one();
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(p->checksummed);
  DeviceTestPeer::requeue(dev_, p);
  ASSERT_TRUE(run());
  // Every frame was corrupted: all dropped, none delivered.
  EXPECT_GT(counters().rx_parse_errors, 0u);
  EXPECT_TRUE(drain_cq(dev_, b_rcq_).empty());
  // Without faults the retransmission gets through.
  ASSERT_EQ(dev_.set_fault(PortId::kLoopback, net::FaultConfig{}), "");
  const uint64_t errors = counters().rx_parse_errors;
  for (int i = 0; i < 20 && drain_cq(dev_, a_scq_).empty(); ++i) ASSERT_TRUE(advance(100'000'000));
  EXPECT_EQ(counters().rx_parse_errors, errors);
  EXPECT_EQ(std::memcmp(b(0), a(0), 100), 0);
}

}  // namespace
}  // namespace uroce::device
