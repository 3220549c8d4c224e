// Transport protocol tests for UC and UD, and the ingress checks on malformed
// frames. They exercise requester.cc,
// responder.cc, completer.cc and datapath.cc. Two QPs of one Device talk through the
// in-engine loopback port; the test plays the client, writing WQEs into the
// shared-memory rings and reading CQEs back, and moves time by the clock it
// passes to Device::poll() (no sleeping).
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "device/test_env.h"

namespace uroce::device {
namespace {

class TransportUcTest : public PairFixture {};

// ---- UC -------------------------------------------------------------------------

TEST_F(TransportUcTest, UcSendAndWrite) {
  make_pair(IBV_QPT_UC);
  post_recv(B(), 1, {sge(b(0), 4096, b_key_)});
  post_send(A(), wqe(IBV_WR_SEND, 1), {sge(a(0), 3000, a_key_)});
  abi::SendWqe w = wqe(IBV_WR_RDMA_WRITE, 2);
  w.remote_addr = b_addr(10000);
  w.rkey = b_key_;
  post_send(A(), w, {sge(a(20000), 2000, a_key_)});
  ASSERT_TRUE(run());
  auto s = drain_cq(dev_, a_scq_);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(s[1].status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(one_cqe(b_rcq_).byte_len, 3000u);
  EXPECT_EQ(std::memcmp(b(0), a(0), 3000), 0);
  EXPECT_EQ(std::memcmp(b(10000), a(20000), 2000), 0);
}

TEST_F(TransportUcTest, UcReadIsLocalQpOpError) {
  make_pair(IBV_QPT_UC);
  abi::SendWqe w = wqe(IBV_WR_RDMA_READ, 1);
  w.remote_addr = b_addr(0);
  w.rkey = b_key_;
  post_send(A(), w, {sge(a(0), 8, a_key_)});
  ASSERT_TRUE(run());
  EXPECT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_LOC_QP_OP_ERR));
}

TEST_F(TransportUcTest, UcSendWithoutReceiveIsDropped) {
  make_pair(IBV_QPT_UC);
  post_send(A(), wqe(IBV_WR_SEND, 1), {sge(a(0), 3000, a_key_)});
  ASSERT_TRUE(run());
  EXPECT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_SUCCESS));  // UC: done when sent
  EXPECT_EQ(counters().rx_ud_no_recv, 1u);
  // The next message, with a receive posted, arrives whole.
  post_recv(B(), 1, {sge(b(0), 4096, b_key_)});
  post_send(A(), wqe(IBV_WR_SEND, 2), {sge(a(100), 2500, a_key_)});
  ASSERT_TRUE(run());
  abi::Cqe r = one_cqe(b_rcq_);
  EXPECT_EQ(r.status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(r.byte_len, 2500u);
  EXPECT_EQ(std::memcmp(b(0), a(100), 2500), 0);
}

TEST_F(TransportUcTest, UcLostPacketDropsOnlyThatMessage) {
  make_pair(IBV_QPT_UC);
  post_recv(B(), 1, {sge(b(0), 4096, b_key_)});
  post_send(A(), wqe(IBV_WR_SEND, 1), {sge(a(0), 3000, a_key_)});  // 3 packets
  dev_.poll(now_);
  auto frames = DeviceTestPeer::take_in_flight(dev_);
  ASSERT_EQ(frames.size(), 3u);
  DeviceTestPeer::requeue(dev_, frames[0]);
  DeviceTestPeer::drop(dev_, frames[1]);
  DeviceTestPeer::requeue(dev_, frames[2]);
  ASSERT_TRUE(run());
  EXPECT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_SUCCESS));  // UC does not know
  EXPECT_TRUE(drain_cq(dev_, b_rcq_).empty());                  // nothing delivered
  // The next message arrives whole, into the receive the broken one did not complete.
  post_send(A(), wqe(IBV_WR_SEND, 2), {sge(a(10000), 2500, a_key_)});
  ASSERT_TRUE(run());
  abi::Cqe r = one_cqe(b_rcq_);
  EXPECT_EQ(r.wr_id, 1u);
  EXPECT_EQ(r.status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(r.byte_len, 2500u);
  EXPECT_EQ(std::memcmp(b(0), a(10000), 2500), 0);
  EXPECT_EQ(B().state, IBV_QPS_RTS);
}

TEST_F(TransportUcTest, ZeroLengthWriteAndReadNeedNoKey) {
  make_pair(IBV_QPT_RC);
  abi::SendWqe w = wqe(IBV_WR_RDMA_WRITE, 1);
  w.remote_addr = 0xdead0000;
  w.rkey = 0xbadbad;
  post_send(A(), w, {});
  w.opcode = IBV_WR_RDMA_READ;
  w.wr_id = 2;
  post_send(A(), w, {});
  ASSERT_TRUE(run());
  auto s = drain_cq(dev_, a_scq_);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(s[1].status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(s[1].byte_len, 0u);
  EXPECT_EQ(B().state, IBV_QPS_RTS);
}

TEST_F(TransportUcTest, RingsWrapAround) {
  make_pair(IBV_QPT_RC);  // 16-entry SQ and RQ
  const uint32_t n = 5 * A().sq.size() + 3;
  uint32_t done = 0;
  for (uint32_t i = 0; i < n; i += 3) {
    for (uint32_t j = i; j < std::min(n, i + 3); ++j) {
      post_recv(B(), j, {sge(b(64 * (j % 16)), 64, b_key_)});
      std::memcpy(a(64 * (j % 16)), &j, sizeof(j));
      post_send(A(), wqe(IBV_WR_SEND, j), {sge(a(64 * (j % 16)), 4, a_key_)});
    }
    ASSERT_TRUE(run());
    for (const abi::Cqe& c : drain_cq(dev_, b_rcq_)) {
      ASSERT_EQ(c.status, uint32_t(IBV_WC_SUCCESS));
      ASSERT_EQ(c.wr_id, done);
      uint32_t got;
      std::memcpy(&got, b(64 * (done % 16)), sizeof(got));
      ASSERT_EQ(got, done);
      ++done;
    }
    drain_cq(dev_, a_scq_);
  }
  EXPECT_EQ(done, n);
  EXPECT_EQ(A().sq.hdr->consumer.load(), n);
  EXPECT_EQ(B().rq.hdr->consumer.load(), n);
}

// ---- UD -------------------------------------------------------------------------

class UdTest : public PairFixture {
 protected:
  using PairFixture::PairFixture;
  void SetUp() override {
    PairFixture::SetUp();
    abi::QpAttr attr = default_attr();
    attr.qkey = kQkey;
    a_ = create_qp(IBV_QPT_UD, a_scq_, a_rcq_);
    b_ = create_qp(IBV_QPT_UD, b_scq_, b_rcq_);
    connect(a_, 0, attr);
    connect(b_, 0, attr);
  }
  abi::SendWqe ud_wqe(uint64_t wr_id, uint32_t qkey, uint8_t gid_index = 0) {
    abi::SendWqe w = wqe(IBV_WR_SEND, wr_id);
    w.remote_qpn = b_;
    w.remote_qkey = qkey;
    w.av.is_global = 1;
    w.av.port_num = 1;
    w.av.sgid_index = gid_index;
    std::memcpy(w.av.dgid, dev_.info().gids[gid_index].gid, 16);
    return w;
  }
  static constexpr uint32_t kQkey = 0x1234;
};

TEST_F(UdTest, SendRecvWithGrh) {
  post_recv(B(), 5, {sge(b(0), 40 + 1000, b_key_)});
  post_send(A(), ud_wqe(6, kQkey), {sge(a(0), 1000, a_key_)});
  ASSERT_TRUE(run());
  abi::Cqe s = one_cqe(a_scq_);
  EXPECT_EQ(s.wr_id, 6u);
  EXPECT_EQ(s.status, uint32_t(IBV_WC_SUCCESS));
  abi::Cqe r = one_cqe(b_rcq_);
  EXPECT_EQ(r.wr_id, 5u);
  EXPECT_EQ(r.status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(r.opcode, uint32_t(IBV_WC_RECV));
  EXPECT_EQ(r.byte_len, 40u + 1000);
  EXPECT_EQ(r.src_qp, a_);
  EXPECT_EQ(r.qp_num, b_);
  EXPECT_NE(r.wc_flags & IBV_WC_GRH, 0u);
  // The GRH's last 20 bytes hold the IPv4 header (as rxe and mlx5 place it).
  EXPECT_EQ(*b(20), 0x45);
  EXPECT_EQ(b(20)[9], 17);  // UDP
  EXPECT_EQ(std::memcmp(b(20 + 12), dev_.config().ip.data(), 4), 0);
  EXPECT_EQ(std::memcmp(b(40), a(0), 1000), 0);
}

// RoCEv2 A17.4.5.1, as mlx5 reports it: wc.sl bits 2:0 hold the frame's L3
// header type (2: IPv4). UCX's ud_verbs reads the destination GID from the
// GRH area by it, and drops the datagram when it does not match its own.
TEST_F(UdTest, ReceiveOverIpv4SaysIpv4InSl) {
  post_recv(B(), 5, {sge(b(0), 40 + 64, b_key_)});
  post_send(A(), ud_wqe(6, kQkey), {sge(a(0), 64, a_key_)});
  ASSERT_TRUE(run());
  abi::Cqe r = one_cqe(b_rcq_);
  ASSERT_EQ(r.status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(r.sl, 2u);
  // The last 4 bytes of the GRH area: the destination IPv4 address, which is
  // where UCX looks for a 4-byte GID.
  EXPECT_EQ(std::memcmp(b(36), dev_.config().ip.data(), 4), 0);
}

// The IPv4 header in the GRH area carries the checksum it had on the wire
// (rxe copies the received header), also over the loopback port, which builds
// its frames without one.
TEST_F(UdTest, GrhAreaIpv4HeaderHasItsChecksum) {
  post_recv(B(), 5, {sge(b(0), 40 + 100, b_key_)});
  post_send(A(), ud_wqe(6, kQkey), {sge(a(0), 100, a_key_)});
  ASSERT_TRUE(run());
  ASSERT_EQ(one_cqe(b_rcq_).status, uint32_t(IBV_WC_SUCCESS));
  net::Ipv4Hdr ip;
  std::memcpy(&ip, b(20), sizeof(ip));
  EXPECT_NE(uint16_t(ip.checksum), 0u);
  EXPECT_EQ(uint16_t(ip.checksum), net::ipv4_checksum(ip));
  EXPECT_EQ(uint16_t(ip.total_len), 20u + 8 + 12 + 8 + 100 + 4);  // IP UDP BTH DETH data ICRC
}

DeviceConfig config_with_ip6() {
  DeviceConfig c;
  c.ip6 = {0xfd, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x11};
  return c;
}

class UdIpv6Test : public UdTest {
 protected:
  UdIpv6Test() : UdTest(config_with_ip6()) {}
  static constexpr uint8_t kIpv6GidIndex = 2;
};

TEST_F(UdIpv6Test, ReceiveOverIpv6SaysIpv6InSl) {
  post_recv(B(), 5, {sge(b(0), 40 + 64, b_key_)});
  post_send(A(), ud_wqe(6, kQkey, kIpv6GidIndex), {sge(a(0), 64, a_key_)});
  ASSERT_TRUE(run());
  abi::Cqe r = one_cqe(b_rcq_);
  ASSERT_EQ(r.status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(r.sl, 1u);
  EXPECT_EQ(*b(0) >> 4, 6);  // the IPv6 header fills the GRH area
  EXPECT_EQ(std::memcmp(b(24), dev_.config().ip6.data(), 16), 0);  // its destination
}

TEST_F(UdTest, QkeyMismatchIsDropped) {
  post_recv(B(), 5, {sge(b(0), 2048, b_key_)});
  post_send(A(), ud_wqe(6, kQkey + 1), {sge(a(0), 100, a_key_)});
  ASSERT_TRUE(run());
  EXPECT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_SUCCESS));  // UD: sent is done
  EXPECT_TRUE(drain_cq(dev_, b_rcq_).empty());
  EXPECT_EQ(counters().rx_bad_qkey, 1u);
  EXPECT_EQ(B().rq.hdr->consumer.load(), 0u);  // the receive is still posted
  // It is there for the next, correct datagram.
  post_send(A(), ud_wqe(7, kQkey), {sge(a(0), 100, a_key_)});
  ASSERT_TRUE(run());
  EXPECT_EQ(one_cqe(b_rcq_).wr_id, 5u);
}

TEST_F(UdTest, HighBitQkeyUsesTheQpsOwnQkey) {
  // IBA 10.2.5: a WR Q_Key with the high bit set means "use the QP's Q_Key".
  post_recv(B(), 5, {sge(b(0), 2048, b_key_)});
  post_send(A(), ud_wqe(6, 0x80000000u), {sge(a(0), 100, a_key_)});
  ASSERT_TRUE(run());
  EXPECT_EQ(one_cqe(b_rcq_).status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(counters().rx_bad_qkey, 0u);
}

TEST_F(UdTest, DatagramLongerThanTheReceiveIsLocalLengthError) {
  post_recv(B(), 5, {sge(b(0), 40 + 99, b_key_)});
  post_send(A(), ud_wqe(6, kQkey), {sge(a(0), 100, a_key_)});
  ASSERT_TRUE(run());
  EXPECT_EQ(one_cqe(b_rcq_).status, uint32_t(IBV_WC_LOC_LEN_ERR));
  EXPECT_EQ(counters().rx_ud_too_long, 1u);
}

TEST_F(UdTest, NoReceivePostedIsDropped) {
  post_send(A(), ud_wqe(6, kQkey), {sge(a(0), 100, a_key_)});
  ASSERT_TRUE(run());
  EXPECT_EQ(counters().rx_ud_no_recv, 1u);
  EXPECT_EQ(B().state, IBV_QPS_RTS);
}

// Back-pressure: a UD sender sends 64 datagrams a poll and the loopback
// delivers 32, so a sender with a deep queue outran its receiver and the
// loopback's queue, a buffer per frame, grew for as long as it sent (74,440
// buffers, 300 MiB, after a bench). Now the sender waits while the loopback
// holds kLoopbackDepth frames: nothing it posted is dropped at the port, and
// the engine holds no more than that many buffers.
TEST_F(UdTest, SenderWaitsForTheLoopbackAndBuffersStayBounded) {
  abi::QpCaps caps = default_caps();
  caps.max_send_wr = 4096;
  const uint32_t c = create_qp(IBV_QPT_UD, a_scq_, a_rcq_, caps);
  abi::QpAttr attr = default_attr();
  attr.qkey = kQkey;
  connect(c, 0, attr);
  Qp& sender = *dev_.qp(c);
  constexpr uint32_t kDatagrams = 3 * kLoopbackDepth;
  for (uint32_t i = 0; i < kDatagrams; ++i) {
    abi::SendWqe w = ud_wqe(i, kQkey);
    w.flags = 0;  // unsignaled: the 64-entry send CQ must not overflow
    post_send(sender, w, {sge(a(0), 64, a_key_)});
  }
  size_t most = 0;
  for (int i = 0; i < 100000 && dev_.poll(now_); ++i)
    most = std::max(most, dev_.packet_pool().allocated());
  // Every datagram left A and reached B, which had no receive posted.
  EXPECT_EQ(counters().rx_ud_no_recv, kDatagrams);
  EXPECT_GT(counters().tx_backpressure, 0u);
  EXPECT_EQ(counters().no_packet_buffer, 0u);
  EXPECT_LE(most, size_t(kLoopbackDepth) + kRxBurst);
  EXPECT_EQ(dev_.packet_pool().in_use(), 0u);
}

TEST_F(UdTest, DatagramOverTheMtuIsLocalLengthError) {
  post_send(A(), ud_wqe(6, kQkey), {sge(a(0), 4097, a_key_)});
  ASSERT_TRUE(run());
  EXPECT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_LOC_LEN_ERR));
}

TEST_F(UdTest, RdmaWriteOnUdIsLocalQpOpError) {
  abi::SendWqe w = ud_wqe(6, kQkey);
  w.opcode = IBV_WR_RDMA_WRITE;
  post_send(A(), w, {sge(a(0), 8, a_key_)});
  ASSERT_TRUE(run());
  EXPECT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_LOC_QP_OP_ERR));
}

// ---- ingress checks ------------------------------------------------------------

TEST_F(TransportUcTest, MalformedFramesAreCountedAndDropped) {
  make_pair(IBV_QPT_RC);
  // A valid frame to B, built by the codec, then broken in different ways.
  net::Packet good;
  net::begin_roce_packet(good, 0x04);
  good.bth()->dest_qp = b_;
  good.bth()->ack_psn = 2000;
  good.payload_len = 8;
  net::finish_roce_packet(good, net::Route{});
  std::vector<std::vector<uint8_t>> bad;
  auto variant = [&](auto edit) {
    std::vector<uint8_t> f(good.data, good.data + good.len);
    edit(f);
    bad.push_back(f);
  };
  variant([](auto& f) { f.resize(20); });                          // too short
  variant([](auto& f) { f[12] = 0x86; f[13] = 0xdd; });            // not IPv4
  variant([](auto& f) { f[14] = 0x46; });                          // IHL 6
  variant([](auto& f) { f[14 + 20 + 4] ^= 1; });                   // UDP length
  variant([](auto& f) { f[14 + 20 + 8] = 0x15; });                 // reserved opcode
  variant([](auto& f) { f[14 + 20 + 8] = 0x0c; });                 // READ request: no room for RETH
  for (const auto& f : bad) DeviceTestPeer::inject(dev_, f.data(), f.size());
  ASSERT_TRUE(run());
  EXPECT_EQ(counters().rx_parse_errors, bad.size());
  EXPECT_EQ(B().rx_packets, 0u);
  EXPECT_TRUE(drain_cq(dev_, b_rcq_).empty());
  EXPECT_EQ(B().state, IBV_QPS_RTS);
}

TEST_F(TransportUcTest, FramesForUnknownQpsOrTheWrongTransportAreCounted) {
  make_pair(IBV_QPT_RC);
  net::Packet p;
  net::begin_roce_packet(p, 0x04);
  p.bth()->dest_qp = 0x00fffff0;
  p.payload_len = 0;
  net::finish_roce_packet(p, net::Route{});
  DeviceTestPeer::inject(dev_, p.data, p.len);
  net::Packet uc;
  net::begin_roce_packet(uc, 0x24);  // UC SEND_ONLY to an RC QP
  uc.bth()->dest_qp = b_;
  uc.bth()->ack_psn = 1000;  // the PSN B expects
  net::finish_roce_packet(uc, net::Route{});
  DeviceTestPeer::inject(dev_, uc.data, uc.len);
  ASSERT_TRUE(run());
  EXPECT_EQ(counters().rx_no_qp, 1u);
  EXPECT_EQ(counters().rx_bad_transport, 1u);
  EXPECT_EQ(B().resp_epsn, 1000u);
  EXPECT_TRUE(drain_cq(dev_, b_rcq_).empty());
}

TEST_F(TransportUcTest, StatsTextListsEveryCounter) {
  const std::string s = dev_.stats_text();
  for (const char* name : {"rx_parse_errors", "rx_bad_qkey", "rnr_nak_sent", "retry_exceeded",
                           "bad_wqes", "memory_faults"})
    EXPECT_NE(s.find(name), std::string::npos) << name;
}

}  // namespace
}  // namespace uroce::device
