// Tests for device/gsi.cc: QP1 as the device serves it. A CM MAD in a UD
// SEND to QPN 1 reaches the CM agent, whose answer leaves as a UD SEND from
// QPN 1 with the GSI's Q_Key and P_Key; anything else to QPN 1 is dropped
// and counted.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>

#include "device/test_env.h"
#include "cm/cm_agent.h"
#include "cm/device_link.h"
#include "cm/cm_mad.h"

namespace uroce::device {
namespace {


constexpr uint8_t kUdSendOnly = 0x64;

class GsiTest : public ::testing::Test {
 protected:
  // A REQ for a TCP port nobody listens on, from the device's own address
  // (so the answer comes back on the loopback), in a UD SEND to QPN 1.
  void inject_req(uint32_t qkey, uint8_t opcode = kUdSendOnly) {
    auto p = std::make_unique<net::Packet>();
    net::begin_roce_packet(*p, opcode);
    p->bth()->pkey = cm::mad::kGsiPkey;
    p->bth()->dest_qp = cm::mad::kGsiQpn;
    if (p->info().has(net::kHasDeth)) {
      auto* deth = p->hdr<net::Deth>(p->info().deth_off);
      deth->qkey = qkey;
      deth->src_qp = cm::mad::kGsiQpn;
    }
    cm::mad::Mad m{};
    m.hdr.base_version = cm::mad::kBaseVersion;
    m.hdr.mgmt_class = cm::mad::kMgmtClassCm;
    m.hdr.class_version = cm::mad::kCmClassVersion;
    m.hdr.method = cm::mad::kMethodSend;
    m.hdr.attr_id = uint16_t(cm::mad::Attr::kReq);
    cm::mad::set(m, cm::mad::req::kLocalCommId, 0x1234);
    cm::mad::set(m, cm::mad::req::kServiceId, cm::mad::service_id(cm::mad::kPsTcp, 9999));
    cm::mad::CmaHdr hdr{};
    hdr.ip_version = 0x40;
    hdr.port = 40000;
    std::memcpy(hdr.src_addr + 12, dev_.config().ip.data(), 4);
    std::memcpy(hdr.dst_addr + 12, dev_.config().ip.data(), 4);
    std::memcpy(cm::mad::at(m, cm::mad::req::kPrivateData), &hdr, sizeof(hdr));
    std::memcpy(p->payload(), &m, sizeof(m));
    p->payload_len = sizeof(m);
    net::Route route;
    route.src_mac = route.dst_mac = dev_.config().mac;
    route.src_ip = route.dst_ip = dev_.config().ip;
    net::finish_roce_packet(*p, route);
    DeviceTestPeer::inject(dev_, p->data, p->len);
  }

  Device dev_{DeviceConfig{}};
  // The CM attached to the device's QP1, as the engine attaches it.
  cm::CmAgent cm_agent_{dev_.config().ip, dev_.config().ip6, dev_.info()};
  bool attached_ = [this] {
    cm::attach_to_device(cm_agent_, dev_);
    return true;
  }();
  uint64_t now_ = 1'000'000;
};

TEST_F(GsiTest, ACmMadReachesTheAgentAndItsAnswerLeavesFromQp1) {
  inject_req(cm::mad::kGsiQkey);
  dev_.poll(now_);
  auto frames = DeviceTestPeer::take_in_flight(dev_);
  ASSERT_EQ(frames.size(), 1u);
  net::Packet& rej = *frames[0];
  ASSERT_EQ(net::parse_roce_packet(rej, rej.checksummed), net::ParseError::kOk);
  EXPECT_EQ(rej.opcode, kUdSendOnly);
  EXPECT_EQ(rej.bth()->qpn(), cm::mad::kGsiQpn);
  EXPECT_EQ(uint16_t(rej.bth()->pkey), cm::mad::kGsiPkey);
  const auto* deth = rej.hdr<net::Deth>(rej.info().deth_off);
  EXPECT_EQ(uint32_t(deth->qkey), cm::mad::kGsiQkey);
  EXPECT_EQ(uint32_t(deth->src_qp), cm::mad::kGsiQpn);
  ASSERT_EQ(rej.payload_len, cm::mad::kMadBytes);
  cm::mad::Mad m;
  std::memcpy(&m, rej.payload(), sizeof(m));
  EXPECT_EQ(uint16_t(m.hdr.attr_id), uint16_t(cm::mad::Attr::kRej));
  EXPECT_EQ(cm::mad::get(m, cm::mad::rej::kRemoteCommId), 0x1234u);
  EXPECT_EQ(cm::mad::get(m, cm::mad::rej::kReason), cm::mad::kRejInvalidServiceId);
  EXPECT_EQ(cm_agent_.wire_counters().mads_received, 1u);
  // The REJ names no id of ours: the agent drops it when it comes back.
  DeviceTestPeer::requeue(dev_, frames[0]);
  dev_.poll(now_);
  EXPECT_EQ(cm_agent_.wire_counters().mads_dropped, 1u);
  EXPECT_FALSE(DeviceTestPeer::in_flight(dev_));
}

TEST_F(GsiTest, Qp1DropsWhatIsNotAMadWithTheGsiQkey) {
  inject_req(0x11111111);  // C13-23: QP1 takes the well-known Q_Key only
  inject_req(cm::mad::kGsiQkey, 0x04);  // an RC SEND_ONLY
  dev_.poll(now_);
  dev_.poll(now_);
  EXPECT_EQ(dev_.counters().rx_gsi_dropped, 2u);
  EXPECT_EQ(cm_agent_.wire_counters().mads_received, 0u);
  EXPECT_FALSE(DeviceTestPeer::in_flight(dev_));
}

}  // namespace
}  // namespace uroce::device
