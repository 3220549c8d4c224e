// Transport protocol tests, errors: local and remote error completions,
// hostile ring indices, RNR, retries on timeout and CQ overflow. They exercise
// requester.cc,
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

class TransportErrorsTest : public PairFixture {
 protected:
  // ACK timeouts of timeout_ns that pass until A completes something (at
  // most 100).
  int timeouts_until_a_completes(uint64_t timeout_ns) {
    int timeouts = 0;
    while (drain_cq(dev_, a_scq_).empty() && timeouts < 100) {
      if (!advance(timeout_ns)) break;
      ++timeouts;
    }
    return timeouts;
  }
  // A connected to B with attr_a while B stays in INIT (its process has not
  // moved it to RTR yet): what A sends is dropped unanswered.
  void connect_to_b_in_init(const abi::QpAttr& attr_a) {
    a_ = create_qp(IBV_QPT_RC, a_scq_, a_rcq_, default_caps());
    b_ = create_qp(IBV_QPT_RC, b_scq_, b_rcq_, default_caps());
    connect(a_, b_, attr_a, /*sq_psn=*/1000, /*rq_psn=*/2000);
    abi::QpAttr init = default_attr();
    init.qp_state = IBV_QPS_INIT;
    ASSERT_EQ(modify(b_, kRcInitMask, init), 0);
  }
  // A's one request `w` on an RC pair with a short ACK timeout, executed
  // at B, and B's one answer lost on the way back; A has not resent yet.
  void execute_and_lose_the_answer(const abi::SendWqe& w, std::initializer_list<abi::Sge> sges = {}) {
    abi::QpAttr attr_a = default_attr();
    attr_a.timeout = 10;
    make_pair(IBV_QPT_RC, attr_a, default_attr());
    post_send(A(), w, sges);
    dev_.poll(now_);  // request out
    dev_.poll(now_);  // executed at B, its answer out
    auto frames = DeviceTestPeer::take_in_flight(dev_);
    ASSERT_EQ(frames.size(), 1u);
    DeviceTestPeer::drop(dev_, frames[0]);
  }
};

// ---- local errors -----------------------------------------------------------

TEST_F(TransportErrorsTest, BadLkeyIsLocalProtectionErrorAndFlushesTheRest) {
  make_pair(IBV_QPT_RC);
  post_recv(B(), 1, {sge(b(0), 64, b_key_)});
  post_recv(A(), 90, {sge(a(60000), 64, a_key_)});
  post_send(A(), wqe(IBV_WR_SEND, 1), {sge(a(0), 8, a_key_)});
  post_send(A(), wqe(IBV_WR_SEND, 2), {sge(a(0), 8, a_key_ ^ 0x80)});
  post_send(A(), wqe(IBV_WR_SEND, 3), {sge(a(0), 8, a_key_)});
  post_send(A(), wqe(IBV_WR_SEND, 4, 0), {sge(a(0), 8, a_key_)});  // unsignaled: flushed anyway
  ASSERT_TRUE(run());
  auto s = drain_cq(dev_, a_scq_);
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(s[0].wr_id, 1u);
  EXPECT_EQ(s[0].status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(s[1].wr_id, 2u);
  EXPECT_EQ(s[1].status, uint32_t(IBV_WC_LOC_PROT_ERR));
  EXPECT_EQ(s[2].wr_id, 3u);
  EXPECT_EQ(s[2].status, uint32_t(IBV_WC_WR_FLUSH_ERR));
  EXPECT_EQ(s[3].wr_id, 4u);
  EXPECT_EQ(s[3].status, uint32_t(IBV_WC_WR_FLUSH_ERR));
  EXPECT_EQ(A().state, IBV_QPS_ERR);
  // A's posted receive is flushed too; B got exactly the one good message.
  abi::Cqe ra = one_cqe(a_rcq_);
  EXPECT_EQ(ra.wr_id, 90u);
  EXPECT_EQ(ra.status, uint32_t(IBV_WC_WR_FLUSH_ERR));
  EXPECT_EQ(one_cqe(b_rcq_).status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(A().sq.hdr->consumer.load(), 4u);
  EXPECT_EQ(counters().local_errors, 1u);
}

TEST_F(TransportErrorsTest, LkeyOutOfBoundsOrWithoutLocalWriteForRead) {
  make_pair(IBV_QPT_RC);
  // SGE past the end of A's MR.
  post_send(A(), wqe(IBV_WR_SEND, 1), {sge(a(kBufSize - 4), 8, a_key_)});
  ASSERT_TRUE(run());
  EXPECT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_LOC_PROT_ERR));

  // A READ lands in local memory, so its SGE needs LOCAL_WRITE.
  const uint32_t ro_key = reg_mr(a(0), 4096, IBV_ACCESS_REMOTE_READ);
  const uint32_t c = create_qp(IBV_QPT_RC, a_scq_, a_rcq_);
  const uint32_t d = create_qp(IBV_QPT_RC, b_scq_, b_rcq_);
  connect(c, d);
  connect(d, c);
  abi::SendWqe w = wqe(IBV_WR_RDMA_READ, 2);
  w.remote_addr = b_addr(0);
  w.rkey = b_key_;
  post_send(*dev_.qp(c), w, {sge(a(0), 64, ro_key)});
  ASSERT_TRUE(run());
  EXPECT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_LOC_PROT_ERR));
}

TEST_F(TransportErrorsTest, NumSgeBeyondCapsIsAnError) {
  make_pair(IBV_QPT_RC);
  const uint32_t max = A().caps.max_send_sge;
  ASSERT_GE(max, 4u);
  abi::SendWqe w = wqe(IBV_WR_SEND, 1);
  w.num_sge = max + 1;
  post_send(A(), w, {sge(a(0), 8, a_key_)});
  ASSERT_TRUE(run());
  abi::Cqe s = one_cqe(a_scq_);
  EXPECT_EQ(s.wr_id, 1u);
  EXPECT_EQ(s.status, uint32_t(IBV_WC_LOC_LEN_ERR));
  EXPECT_EQ(A().state, IBV_QPS_ERR);
}

TEST_F(TransportErrorsTest, HugeNumSgeIsAnError) {
  make_pair(IBV_QPT_RC);
  abi::SendWqe w = wqe(IBV_WR_SEND, 1);
  w.num_sge = 0xffffffffu;
  post_send(A(), w, {sge(a(0), 8, a_key_)});
  ASSERT_TRUE(run());
  EXPECT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_LOC_LEN_ERR));
}

TEST_F(TransportErrorsTest, InlineLongerThanCapsIsAnError) {
  make_pair(IBV_QPT_RC);
  abi::SendWqe w = wqe(IBV_WR_SEND, 1, IBV_SEND_SIGNALED | IBV_SEND_INLINE);
  w.inline_len = 100000;
  char data[8] = {};
  abi::SendWqe small = w;
  small.inline_len = 8;
  // Write the WQE with 8 bytes of inline data, then claim 100000.
  const uint32_t idx = post_send(A(), small, {}, data);
  reinterpret_cast<abi::SendWqe*>(A().sq.slot(idx))->inline_len = w.inline_len;
  ASSERT_TRUE(run());
  EXPECT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_LOC_LEN_ERR));
}

TEST_F(TransportErrorsTest, OpcodeNotOfTheTransportIsLocalQpOpError) {
  make_pair(IBV_QPT_RC);
  post_send(A(), wqe(IBV_WR_TSO, 1), {});  // raw packet QPs only
  ASSERT_TRUE(run());
  EXPECT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_LOC_QP_OP_ERR));
  post_send(A(), wqe(0xdeadbeef, 2), {});  // flushed: the QP is in error now
  ASSERT_TRUE(run());
  EXPECT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_WR_FLUSH_ERR));
}

TEST_F(TransportErrorsTest, GarbageOpcodeIsLocalQpOpError) {
  make_pair(IBV_QPT_RC);
  post_send(A(), wqe(0xdeadbeef, 2), {});
  ASSERT_TRUE(run());
  EXPECT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_LOC_QP_OP_ERR));
  EXPECT_EQ(counters().bad_wqes, 1u);
}

TEST_F(TransportErrorsTest, AtomicWithWrongLengthIsLocalLengthError) {
  make_pair(IBV_QPT_RC);
  abi::SendWqe w = wqe(IBV_WR_ATOMIC_FETCH_AND_ADD, 1);
  w.remote_addr = b_addr(0);
  w.rkey = b_key_;
  post_send(A(), w, {sge(a(0), 4, a_key_)});
  ASSERT_TRUE(run());
  EXPECT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_LOC_LEN_ERR));
}

// ---- hostile ring indices -------------------------------------------------------

TEST_F(TransportErrorsTest, HostileSqProducerPutsTheQpInError) {
  make_pair(IBV_QPT_RC);
  const uint32_t cons = A().sq.hdr->consumer.load();
  A().sq.hdr->producer.store(cons + 10 * A().sq.size());
  ASSERT_TRUE(run());
  EXPECT_EQ(A().state, IBV_QPS_ERR);
  EXPECT_GE(counters().bad_wqes, 1u);
  EXPECT_EQ(counters().tx_packets, 0u);
  // No completion can describe a ring the client corrupted: none is invented.
  EXPECT_TRUE(drain_cq(dev_, a_scq_).empty());
  // The QP still works as a QP in error: new work is flushed.
  post_recv(A(), 1, {sge(a(0), 64, a_key_)});
  ASSERT_TRUE(run());
  EXPECT_EQ(one_cqe(a_rcq_).status, uint32_t(IBV_WC_WR_FLUSH_ERR));
  EXPECT_EQ(B().state, IBV_QPS_RTS);
}

TEST_F(TransportErrorsTest, HostileSqProducerBehindTheConsumer) {
  make_pair(IBV_QPT_RC);
  post_recv(B(), 1, {sge(b(0), 64, b_key_)});
  post_send(A(), wqe(IBV_WR_SEND, 1), {sge(a(0), 8, a_key_)});
  ASSERT_TRUE(run());
  ASSERT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_SUCCESS));
  A().sq.hdr->producer.store(A().sq.hdr->consumer.load() - 1);
  ASSERT_TRUE(run());
  EXPECT_EQ(A().state, IBV_QPS_ERR);
}

TEST_F(TransportErrorsTest, HostileRqProducerPutsTheResponderInError) {
  make_pair(IBV_QPT_RC);
  B().rq.hdr->producer.store(B().rq.hdr->consumer.load() + 5 * B().rq.size());
  post_send(A(), wqe(IBV_WR_SEND, 1), {sge(a(0), 8, a_key_)});
  ASSERT_TRUE(run());
  EXPECT_EQ(B().state, IBV_QPS_ERR);
  EXPECT_GE(counters().bad_wqes, 1u);
  abi::Cqe s = one_cqe(a_scq_);
  EXPECT_NE(s.status, uint32_t(IBV_WC_SUCCESS));
}

TEST_F(TransportErrorsTest, RecvNumSgeBeyondCapsIsAnError) {
  make_pair(IBV_QPT_RC);
  post_recv(B(), 5, {sge(b(0), 64, b_key_)}, /*num_sge_override=*/B().caps.max_recv_sge + 1);
  post_send(A(), wqe(IBV_WR_SEND, 1), {sge(a(0), 8, a_key_)});
  ASSERT_TRUE(run());
  abi::Cqe r = one_cqe(b_rcq_);
  EXPECT_EQ(r.wr_id, 5u);
  EXPECT_EQ(r.status, uint32_t(IBV_WC_LOC_LEN_ERR));
  EXPECT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_REM_OP_ERR));
  EXPECT_EQ(B().state, IBV_QPS_ERR);
}

TEST_F(TransportErrorsTest, RecvWithBadLkeyIsLocalProtectionError) {
  make_pair(IBV_QPT_RC);
  post_recv(B(), 5, {sge(b(0), 64, b_key_ + 0x100)});
  post_send(A(), wqe(IBV_WR_SEND, 1), {sge(a(0), 8, a_key_)});
  ASSERT_TRUE(run());
  abi::Cqe r = one_cqe(b_rcq_);
  EXPECT_EQ(r.status, uint32_t(IBV_WC_LOC_PROT_ERR));
  EXPECT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_REM_OP_ERR));
}

// ---- remote errors ------------------------------------------------------------

TEST_F(TransportErrorsTest, BadRkeyIsRemoteAccessError) {
  make_pair(IBV_QPT_RC);
  abi::SendWqe w = wqe(IBV_WR_RDMA_WRITE, 1);
  w.remote_addr = b_addr(0);
  w.rkey = b_key_ ^ 0x40;
  std::vector<uint8_t> before(b(0), b(64));
  post_send(A(), w, {sge(a(0), 64, a_key_)});
  post_send(A(), wqe(IBV_WR_SEND, 2), {sge(a(0), 8, a_key_)});
  ASSERT_TRUE(run());
  auto s = drain_cq(dev_, a_scq_);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].wr_id, 1u);
  EXPECT_EQ(s[0].status, uint32_t(IBV_WC_REM_ACCESS_ERR));
  EXPECT_EQ(s[1].status, uint32_t(IBV_WC_WR_FLUSH_ERR));
  EXPECT_EQ(A().state, IBV_QPS_ERR);
  EXPECT_EQ(B().state, IBV_QPS_ERR);  // class C error: the responder fails too
  EXPECT_TRUE(std::equal(before.begin(), before.end(), b(0)));
  EXPECT_EQ(counters().remote_errors, 1u);
}

TEST_F(TransportErrorsTest, LongWriteWithBadRkeyIsRemoteAccessError) {
  abi::QpAttr attr = default_attr();
  attr.path_mtu = IBV_MTU_256;
  make_pair(IBV_QPT_RC, attr, attr);
  abi::SendWqe w = wqe(IBV_WR_RDMA_WRITE, 1);
  w.remote_addr = b_addr(0);
  w.rkey = b_key_ ^ 0x40;
  post_send(A(), w, {sge(a(0), 200 * 256, a_key_)});  // 200 packets, 64 per poll
  ASSERT_TRUE(run());
  abi::Cqe s = one_cqe(a_scq_);
  EXPECT_EQ(s.wr_id, 1u);
  EXPECT_EQ(s.status, uint32_t(IBV_WC_REM_ACCESS_ERR));
}

TEST_F(TransportErrorsTest, RemoteAccessOutOfBoundsAndReadWithoutRights) {
  make_pair(IBV_QPT_RC);
  abi::SendWqe w = wqe(IBV_WR_RDMA_READ, 1);
  w.remote_addr = b_addr(kBufSize - 100);
  w.rkey = b_key_;
  post_send(A(), w, {sge(a(0), 200, a_key_)});  // 100 bytes past B's MR
  ASSERT_TRUE(run());
  EXPECT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_REM_ACCESS_ERR));
}

TEST_F(TransportErrorsTest, ReceiveBufferTooSmall) {
  make_pair(IBV_QPT_RC);
  post_recv(B(), 7, {sge(b(0), 100, b_key_)});
  post_send(A(), wqe(IBV_WR_SEND, 8), {sge(a(0), 200, a_key_)});
  ASSERT_TRUE(run());
  abi::Cqe r = one_cqe(b_rcq_);
  EXPECT_EQ(r.wr_id, 7u);
  EXPECT_EQ(r.status, uint32_t(IBV_WC_LOC_LEN_ERR));
  abi::Cqe s = one_cqe(a_scq_);
  EXPECT_EQ(s.wr_id, 8u);
  EXPECT_EQ(s.status, uint32_t(IBV_WC_REM_INV_REQ_ERR));
  EXPECT_EQ(A().state, IBV_QPS_ERR);
  EXPECT_EQ(B().state, IBV_QPS_ERR);
}

TEST_F(TransportErrorsTest, ReceiveBufferTooSmallForALaterPacket) {
  make_pair(IBV_QPT_RC);
  post_recv(B(), 7, {sge(b(0), 1500, b_key_)});
  post_send(A(), wqe(IBV_WR_SEND, 8), {sge(a(0), 3000, a_key_)});  // fails on the 2nd packet
  ASSERT_TRUE(run());
  EXPECT_EQ(one_cqe(b_rcq_).status, uint32_t(IBV_WC_LOC_LEN_ERR));
  EXPECT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_REM_INV_REQ_ERR));
}

// ---- RNR ---------------------------------------------------------------------

TEST_F(TransportErrorsTest, RnrRetryZeroFailsOnTheFirstRnrNak) {
  abi::QpAttr attr = default_attr();
  attr.rnr_retry = 0;
  make_pair(IBV_QPT_RC, attr, default_attr());
  post_send(A(), wqe(IBV_WR_SEND, 1), {sge(a(0), 8, a_key_)});
  ASSERT_TRUE(run());
  abi::Cqe s = one_cqe(a_scq_);
  EXPECT_EQ(s.status, uint32_t(IBV_WC_RNR_RETRY_EXC_ERR));
  EXPECT_EQ(A().state, IBV_QPS_ERR);
  EXPECT_EQ(counters().rnr_nak_sent, 1u);
  EXPECT_EQ(counters().rnr_retry_exceeded, 1u);
  EXPECT_EQ(B().state, IBV_QPS_RTS);  // RNR is not an error at the responder
}

TEST_F(TransportErrorsTest, RnrRetriesWaitForTheRnrTimer) {
  abi::QpAttr attr_a = default_attr();
  attr_a.rnr_retry = 2;
  abi::QpAttr attr_b = default_attr();
  attr_b.min_rnr_timer = 13;  // 0.96 ms (IBA table 45)
  make_pair(IBV_QPT_RC, attr_a, attr_b);
  post_send(A(), wqe(IBV_WR_SEND, 1), {sge(a(0), 8, a_key_)});
  ASSERT_TRUE(run());
  EXPECT_EQ(counters().rnr_nak_received, 1u);
  // Without time passing nothing is resent.
  ASSERT_TRUE(run());
  ASSERT_TRUE(advance(900'000));  // 0.9 ms: still inside the RNR timer
  EXPECT_EQ(counters().rnr_nak_received, 1u);
  EXPECT_TRUE(drain_cq(dev_, a_scq_).empty());
  EXPECT_EQ(dev_.next_deadline_ns(), now_ - 900'000 + 960'000);
  ASSERT_TRUE(advance(100'000));  // past it: one retry, one more RNR NAK
  EXPECT_EQ(counters().rnr_nak_received, 2u);
  EXPECT_TRUE(drain_cq(dev_, a_scq_).empty());
  ASSERT_TRUE(advance(1'000'000));
  EXPECT_EQ(counters().rnr_nak_received, 3u);
  abi::Cqe s = one_cqe(a_scq_);
  EXPECT_EQ(s.status, uint32_t(IBV_WC_RNR_RETRY_EXC_ERR));
  EXPECT_EQ(A().state, IBV_QPS_ERR);
}

TEST_F(TransportErrorsTest, RnrRecoversOnceAReceiveIsPosted) {
  abi::QpAttr attr_a = default_attr();
  attr_a.rnr_retry = 1;
  make_pair(IBV_QPT_RC, attr_a, default_attr());
  post_send(A(), wqe(IBV_WR_SEND, 1), {sge(a(0), 3000, a_key_)});
  ASSERT_TRUE(run());
  EXPECT_EQ(counters().rnr_nak_received, 1u);
  post_recv(B(), 9, {sge(b(0), 4096, b_key_)});
  ASSERT_TRUE(advance(1'000'000));
  EXPECT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_SUCCESS));
  abi::Cqe r = one_cqe(b_rcq_);
  EXPECT_EQ(r.status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(r.byte_len, 3000u);
  EXPECT_EQ(std::memcmp(b(0), a(0), 3000), 0);
}

TEST_F(TransportErrorsTest, RnrOnWriteWithImmResumesAtTheLastPacket) {
  abi::QpAttr attr_a = default_attr();
  attr_a.rnr_retry = 1;
  make_pair(IBV_QPT_RC, attr_a, default_attr());
  abi::SendWqe w = wqe(IBV_WR_RDMA_WRITE_WITH_IMM, 1);
  w.remote_addr = b_addr(0);
  w.rkey = b_key_;
  w.imm_data = htonl(7);
  post_send(A(), w, {sge(a(0), 3000, a_key_)});  // FIRST, MIDDLE, LAST_WITH_IMM
  ASSERT_TRUE(run());
  EXPECT_EQ(counters().rnr_nak_received, 1u);
  post_recv(B(), 9, {});
  ASSERT_TRUE(advance(1'000'000));
  EXPECT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_SUCCESS));
  abi::Cqe r = one_cqe(b_rcq_);
  EXPECT_EQ(r.status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(r.opcode, uint32_t(IBV_WC_RECV_RDMA_WITH_IMM));
  EXPECT_EQ(r.byte_len, 3000u);
  EXPECT_EQ(r.imm_data, htonl(7));
  EXPECT_EQ(std::memcmp(b(0), a(0), 3000), 0);
}

// ---- retry on timeout ------------------------------------------------------------

TEST_F(TransportErrorsTest, PeerDestroyedGivesRetryExceededAfterRetryCntTimeouts) {
  dev_.set_first_contact_grace_ns(0);  // the grace has tests of its own, below
  abi::QpAttr attr_a = default_attr();
  attr_a.retry_cnt = 2;
  attr_a.timeout = 10;  // 4.096 us << 10 = 4.19 ms
  make_pair(IBV_QPT_RC, attr_a, default_attr());
  ASSERT_EQ(dev_.destroy_qp(&owner_, b_), 0);
  const uint64_t timeout_ns = 4096ull << 10;
  post_send(A(), wqe(IBV_WR_SEND, 1), {sge(a(0), 8, a_key_)});
  ASSERT_TRUE(run());
  EXPECT_EQ(counters().rx_no_qp, 1u);
  ASSERT_TRUE(advance(timeout_ns - 1));  // not yet
  EXPECT_EQ(counters().retransmits, 0u);
  for (uint64_t i = 1; i <= 2; ++i) {
    ASSERT_TRUE(advance(timeout_ns));
    EXPECT_EQ(counters().retransmits, i);
    EXPECT_EQ(counters().rx_no_qp, i + 1);
    EXPECT_TRUE(drain_cq(dev_, a_scq_).empty()) << i;
  }
  ASSERT_TRUE(advance(timeout_ns));
  abi::Cqe s = one_cqe(a_scq_);
  EXPECT_EQ(s.wr_id, 1u);
  EXPECT_EQ(s.status, uint32_t(IBV_WC_RETRY_EXC_ERR));
  EXPECT_EQ(A().state, IBV_QPS_ERR);
  EXPECT_EQ(counters().retry_exceeded, 1u);
  EXPECT_EQ(dev_.next_deadline_ns(), 0u);
}

// First contact (kFirstContactGraceNs, device/params.h): a peer whose QP is
// still in INIT (its process not yet scheduled to move it to RTR) drops the
// requests without an answer; the requester keeps retransmitting without
// using up retry_cnt until the grace is over, and the SEND completes once
// the peer is ready. Without the grace, retry_cnt 2 at 4.19 ms ended it in
// RETRY_EXC_ERR after 12.6 ms.
TEST_F(TransportErrorsTest, PeerNotYetReadyWithinTheFirstContactGraceIsWaitedFor) {
  abi::QpAttr attr_a = default_attr();
  attr_a.retry_cnt = 2;
  attr_a.timeout = 10;  // 4.19 ms
  const uint64_t timeout_ns = 4096ull << 10;
  ASSERT_NO_FATAL_FAILURE(connect_to_b_in_init(attr_a));  // B: INIT, not RTR
  post_send(A(), wqe(IBV_WR_SEND, 1), {sge(a(0), 64, a_key_)});
  ASSERT_TRUE(run());
  // 1 s of timeouts: far past retry_cnt, within the grace.
  for (int i = 0; i < 238; ++i) ASSERT_TRUE(advance(timeout_ns));
  EXPECT_TRUE(drain_cq(dev_, a_scq_).empty());
  EXPECT_EQ(A().state, IBV_QPS_RTS);
  EXPECT_GE(counters().first_contact_retries, 200u);
  EXPECT_EQ(counters().retry_exceeded, 0u);
  EXPECT_GE(counters().rx_bad_state, 200u);
  // B's process gets its CPU: RTR, RTS, a receive.
  connect(b_, a_, default_attr(), /*sq_psn=*/2000, /*rq_psn=*/1000);
  post_recv(B(), 9, {sge(b(0), 64, b_key_)});
  ASSERT_TRUE(advance(timeout_ns));
  EXPECT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(one_cqe(b_rcq_).byte_len, 64u);
  EXPECT_EQ(std::memcmp(b(0), a(0), 64), 0);
}

// A peer that never answers (its QP gone) has no grace: retry_cnt + 1
// timeouts, the IBA's time, no constant added (issue 25: a ConnectX ends
// timeout 17 x retry_cnt 5 in 3.2 s).
TEST_F(TransportErrorsTest, APeerThatNeverAnswersFailsInTheIbaTime) {
  abi::QpAttr attr_a = default_attr();
  attr_a.retry_cnt = 2;
  attr_a.timeout = 16;  // 268 ms
  const uint64_t timeout_ns = 4096ull << 16;
  make_pair(IBV_QPT_RC, attr_a, default_attr());
  ASSERT_EQ(dev_.destroy_qp(&owner_, b_), 0);
  post_send(A(), wqe(IBV_WR_SEND, 1), {sge(a(0), 8, a_key_)});
  ASSERT_TRUE(run());
  const int timeouts = timeouts_until_a_completes(timeout_ns);
  EXPECT_EQ(timeouts, 2 + 1);
  EXPECT_EQ(A().state, IBV_QPS_ERR);
  EXPECT_EQ(counters().retry_exceeded, 1u);
  EXPECT_EQ(counters().first_contact_retries, 0u);
}

// A local peer that stays in INIT is waited for only within the grace (2 s),
// then the retries count.
TEST_F(TransportErrorsTest, ALocalPeerStuckInInitIsWaitedForOnlyWithinTheGrace) {
  abi::QpAttr attr_a = default_attr();
  attr_a.retry_cnt = 2;
  attr_a.timeout = 16;  // 268 ms
  const uint64_t timeout_ns = 4096ull << 16;
  ASSERT_NO_FATAL_FAILURE(connect_to_b_in_init(attr_a));
  post_send(A(), wqe(IBV_WR_SEND, 1), {sge(a(0), 8, a_key_)});
  ASSERT_TRUE(run());
  const int timeouts = timeouts_until_a_completes(timeout_ns);
  // 7 timeouts within the 2 s grace (the 8th comes at 2.15 s), then 3 more.
  EXPECT_EQ(timeouts, 7 + 3);
  EXPECT_EQ(A().state, IBV_QPS_ERR);
  EXPECT_EQ(counters().first_contact_retries, 7u);
}

// A peer heard from once has no grace: a later loss has the retries the
// attributes give (CompleterTest and the test above).
TEST_F(TransportErrorsTest, NoFirstContactGraceAfterThePeerAnswered) {
  abi::QpAttr attr_a = default_attr();
  attr_a.retry_cnt = 2;
  attr_a.timeout = 10;
  const uint64_t timeout_ns = 4096ull << 10;
  make_pair(IBV_QPT_RC, attr_a, default_attr());
  post_recv(B(), 1, {sge(b(0), 64, b_key_)});
  post_send(A(), wqe(IBV_WR_SEND, 1), {sge(a(0), 64, a_key_)});
  ASSERT_TRUE(run());
  EXPECT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_SUCCESS));
  ASSERT_EQ(dev_.destroy_qp(&owner_, b_), 0);
  post_send(A(), wqe(IBV_WR_SEND, 2), {sge(a(0), 64, a_key_)});
  ASSERT_TRUE(run());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(advance(timeout_ns));
  EXPECT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_RETRY_EXC_ERR));
  EXPECT_EQ(counters().first_contact_retries, 0u);
}

TEST_F(TransportErrorsTest, LostRequestIsRetransmittedAfterTheTimeout) {
  abi::QpAttr attr_a = default_attr();
  attr_a.timeout = 10;
  make_pair(IBV_QPT_RC, attr_a, default_attr());
  post_recv(B(), 1, {sge(b(0), 64, b_key_)});
  post_send(A(), wqe(IBV_WR_SEND, 1), {sge(a(0), 64, a_key_)});
  dev_.poll(now_);  // A sends; the frame is on the loopback port
  auto frames = DeviceTestPeer::take_in_flight(dev_);
  ASSERT_EQ(frames.size(), 1u);
  DeviceTestPeer::drop(dev_, frames[0]);
  ASSERT_TRUE(run());
  EXPECT_TRUE(drain_cq(dev_, a_scq_).empty());
  ASSERT_TRUE(advance(4096ull << 10));
  EXPECT_EQ(counters().retransmits, 1u);
  EXPECT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(one_cqe(b_rcq_).byte_len, 64u);
}

TEST_F(TransportErrorsTest, LostMiddlePacketIsRecoveredByGoBackN) {
  make_pair(IBV_QPT_RC);
  post_recv(B(), 1, {sge(b(0), 8192, b_key_)});
  post_send(A(), wqe(IBV_WR_SEND, 1), {sge(a(0), 5000, a_key_)});  // 5 packets
  dev_.poll(now_);
  auto frames = DeviceTestPeer::take_in_flight(dev_);
  ASSERT_EQ(frames.size(), 5u);
  for (size_t i = 0; i < frames.size(); ++i) {
    if (i == 2)
      DeviceTestPeer::drop(dev_, frames[i]);
    else
      DeviceTestPeer::requeue(dev_, frames[i]);
  }
  ASSERT_TRUE(run());
  EXPECT_EQ(counters().rx_out_of_seq, 2u);  // packets 3 and 4
  EXPECT_EQ(counters().nak_sent, 1u);       // one NAK per gap (C9-112)
  EXPECT_EQ(counters().retransmits, 1u);
  EXPECT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_SUCCESS));
  abi::Cqe r = one_cqe(b_rcq_);
  EXPECT_EQ(r.status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(r.byte_len, 5000u);
  EXPECT_EQ(std::memcmp(b(0), a(0), 5000), 0);
}

TEST_F(TransportErrorsTest, DuplicateAtomicIsNotExecutedTwice) {
  uint64_t* target = reinterpret_cast<uint64_t*>(b(0));
  *target = 100;
  abi::SendWqe w = wqe(IBV_WR_ATOMIC_FETCH_AND_ADD, 1);
  w.remote_addr = b_addr(0);
  w.rkey = b_key_;
  w.compare_add = 5;
  execute_and_lose_the_answer(w, {sge(a(0), 8, a_key_)});  // the atomic ACK is lost
  ASSERT_EQ(*target, 105u);
  ASSERT_TRUE(run());
  ASSERT_TRUE(advance(4096ull << 10));  // A resends; B answers from its replay cache
  EXPECT_EQ(counters().rx_duplicate, 1u);
  EXPECT_EQ(*target, 105u);
  EXPECT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_SUCCESS));
  uint64_t orig;
  std::memcpy(&orig, a(0), 8);
  EXPECT_EQ(orig, 100u);
}

TEST_F(TransportErrorsTest, DuplicateAtomicWriteIsAnsweredNotExecutedAgain) {
  auto* target = reinterpret_cast<uint64_t*>(b(0));
  abi::SendWqe w = wqe(IBV_WR_ATOMIC_WRITE, 1);
  w.remote_addr = b_addr(0);
  w.rkey = b_key_;
  w.compare_add = 7;
  execute_and_lose_the_answer(w);  // the empty READ response is lost
  ASSERT_EQ(*target, 7u);
  *target = 9;  // the owner writes it meanwhile
  ASSERT_TRUE(run());
  ASSERT_TRUE(advance(4096ull << 10));  // A resends; B answers without writing again
  EXPECT_EQ(counters().rx_duplicate, 1u);
  EXPECT_EQ(*target, 9u);
  abi::Cqe c = one_cqe(a_scq_);
  EXPECT_EQ(c.status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(c.opcode, uint32_t(IBV_WC_ATOMIC_WRITE));
}

TEST_F(TransportErrorsTest, LostReadResponseIsRequestedAgain) {
  abi::QpAttr attr_a = default_attr();
  attr_a.timeout = 10;
  make_pair(IBV_QPT_RC, attr_a, default_attr());
  abi::SendWqe w = wqe(IBV_WR_RDMA_READ, 1);
  w.remote_addr = b_addr(0);
  w.rkey = b_key_;
  post_send(A(), w, {sge(a(0), 4000, a_key_)});  // 4 responses
  dev_.poll(now_);  // request out
  dev_.poll(now_);  // B queues and emits the responses
  auto frames = DeviceTestPeer::take_in_flight(dev_);
  ASSERT_EQ(frames.size(), 4u);
  for (size_t i = 0; i < frames.size(); ++i) {
    if (i == 1)
      DeviceTestPeer::drop(dev_, frames[i]);
    else
      DeviceTestPeer::requeue(dev_, frames[i]);
  }
  ASSERT_TRUE(run());
  ASSERT_TRUE(advance(4096ull << 10));
  abi::Cqe s = one_cqe(a_scq_);
  EXPECT_EQ(s.status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(s.byte_len, 4000u);
  EXPECT_EQ(std::memcmp(a(0), b(0), 4000), 0);
}

// ---- error state -----------------------------------------------------------------

TEST_F(TransportErrorsTest, WorkPostedInErrorIsFlushed) {
  make_pair(IBV_QPT_RC);
  ASSERT_EQ(to_state(a_, IBV_QPS_ERR), 0);
  post_send(A(), wqe(IBV_WR_SEND, 1, 0), {sge(a(0), 8, a_key_)});
  post_recv(A(), 2, {sge(a(0), 8, a_key_)});
  ASSERT_TRUE(run());
  abi::Cqe s = one_cqe(a_scq_);
  EXPECT_EQ(s.wr_id, 1u);
  EXPECT_EQ(s.status, uint32_t(IBV_WC_WR_FLUSH_ERR));
  abi::Cqe r = one_cqe(a_rcq_);
  EXPECT_EQ(r.wr_id, 2u);
  EXPECT_EQ(r.status, uint32_t(IBV_WC_WR_FLUSH_ERR));
  EXPECT_EQ(counters().tx_packets, 0u);
}

// Four signaled SENDs into a send CQ whose ring holds two.
class CqOverflowTest : public PairFixture {
 protected:
  void SetUp() override {
    PairFixture::SetUp();
    small_ = create_cq(1);
    size_ = dev_.cq(small_)->ring.size();
    a_ = create_qp(IBV_QPT_RC, small_, a_rcq_);
    b_ = create_qp(IBV_QPT_RC, b_scq_, b_rcq_);
    connect(a_, b_, default_attr(), 1000, 2000);
    connect(b_, a_, default_attr(), 2000, 1000);
    for (uint32_t i = 0; i < size_ + 2; ++i) {
      post_recv(B(), i, {sge(b(64 * i), 64, b_key_)});
      post_send(A(), wqe(IBV_WR_SEND, i), {sge(a(0), 8, a_key_)});
    }
  }
  uint32_t small_ = 0, size_ = 0;
};

TEST_F(CqOverflowTest, OverflowPutsTheCqAndQpInError) {
  run(200);  // bounded: see EngineGoesIdleAfterOverflow
  EXPECT_EQ(counters().cq_overflows, 1u);
  EXPECT_TRUE(dev_.cq(small_)->error);
  EXPECT_EQ(A().state, IBV_QPS_ERR);
  auto cqes = drain_cq(dev_, small_);  // what fitted is intact
  ASSERT_EQ(cqes.size(), size_);
  for (uint32_t i = 0; i < size_; ++i) {
    EXPECT_EQ(cqes[i].wr_id, i);
    EXPECT_EQ(cqes[i].status, uint32_t(IBV_WC_SUCCESS));
  }
}

TEST_F(CqOverflowTest, EngineGoesIdleAfterOverflow) {
  ASSERT_TRUE(run());
  EXPECT_EQ(A().state, IBV_QPS_ERR);
  EXPECT_EQ(A().sq.hdr->consumer.load(), A().sq.hdr->producer.load());
}

}  // namespace
}  // namespace uroce::device
