// Protocol tests for device/completer.cc: QP A sends requests that the test
// takes off the wire, then hands A hand-made ACKs, NAKs and responses "from
// B" and checks the completions and the retransmission that follow
// (IBA 9.7.5 - 9.7.6).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "device/test_env.h"

namespace uroce::device {
namespace {

constexpr uint32_t kPsn = 1000;  // A's first PSN (PairFixture::make_pair)
constexpr uint8_t kAck = 0x11, kAtomicAck = 0x12, kReadRespFirst = 0x0d, kReadRespMiddle = 0x0e,
                  kReadRespLast = 0x0f, kReadRespOnly = 0x10;

class CompleterTest : public PairFixture {
 protected:
  void SetUp() override {
    PairFixture::SetUp();
    abi::QpAttr attr = default_attr();
    attr.timeout = 10;  // 4.19 ms
    attr.retry_cnt = 3;
    attr.rnr_retry = 3;
    make_pair(IBV_QPT_RC, attr, default_attr());
  }

  // Posts n signaled SENDs of len bytes and takes their packets off the wire.
  void send_and_lose(int n, uint32_t len = 8) {
    for (int i = 0; i < n; ++i)
      post_send(A(), wqe(IBV_WR_SEND, 100 + i), {sge(a(0), len, a_key_)});
    lost_ = step();
  }
  // An AETH-carrying reply to A.
  void reply(uint8_t opcode, uint32_t psn, uint8_t syndrome, const void* payload = nullptr,
             uint32_t len = 0, uint64_t orig = 0) {
    inject(opcode, a_, psn, false,
           [=](net::Packet& p) {
             const net::OpcodeInfo& info = p.info();
             if (info.has(net::kHasAeth))
               p.hdr<net::Aeth>(info.aeth_off)->syndrome_msn = uint32_t(syndrome) << 24 | 1;
             if (info.has(net::kHasAtomicAck))
               p.hdr<net::AtomicAckEth>(info.atomicack_off)->orig = orig;
           },
           payload, len);
  }
  void post_read(uint64_t wr_id, uint32_t len, size_t local_off = 0) {
    abi::SendWqe w = wqe(IBV_WR_RDMA_READ, wr_id);
    w.remote_addr = b_addr(0);
    w.rkey = b_key_;
    post_send(A(), w, {sge(a(local_off), len, a_key_)});
  }

  std::vector<Frame> lost_;
  static constexpr uint64_t kTimeoutNs = 4096ull << 10;
};

TEST_F(CompleterTest, AckCompletesTheWqe) {
  send_and_lose(1);
  ASSERT_EQ(lost_.size(), 1u);
  EXPECT_TRUE(drain_cq(dev_, a_scq_).empty());
  reply(kAck, kPsn, 0x1f);
  EXPECT_TRUE(step().empty());
  abi::Cqe s = one_cqe(a_scq_);
  EXPECT_EQ(s.wr_id, 100u);
  EXPECT_EQ(s.status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(A().comp_psn, kPsn + 1);
  EXPECT_EQ(dev_.next_deadline_ns(), 0u);  // nothing outstanding: no timer
}

TEST_F(CompleterTest, CoalescedAckCompletesEveryCoveredWqe) {
  send_and_lose(4);
  reply(kAck, kPsn + 2, 0x1f);
  step();
  auto s = drain_cq(dev_, a_scq_);
  ASSERT_EQ(s.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(s[i].wr_id, 100u + i);
  EXPECT_NE(dev_.next_deadline_ns(), 0u);  // the fourth is still outstanding
  reply(kAck, kPsn + 3, 0x1f);
  step();
  EXPECT_EQ(one_cqe(a_scq_).wr_id, 103u);
}

TEST_F(CompleterTest, AckOutsideTheWindowIsStale) {
  send_and_lose(1);
  reply(kAck, kPsn + 1, 0x1f);   // never sent
  reply(kAck, kPsn + 0x400000, 0x1f);
  reply(kAck, kPsn - 5, 0x1f);   // long retired
  step();
  EXPECT_EQ(counters().rx_stale_response, 3u);
  EXPECT_TRUE(drain_cq(dev_, a_scq_).empty());
  EXPECT_EQ(A().state, IBV_QPS_RTS);
}

struct NakCase {
  uint8_t syndrome;
  ibv_wc_status status;
};

class CompleterNakTest : public CompleterTest, public ::testing::WithParamInterface<NakCase> {};

TEST_P(CompleterNakTest, FatalNakFailsTheHeadAndFlushesTheRest) {
  send_and_lose(3);
  reply(kAck, kPsn + 1, GetParam().syndrome);  // the second SEND is refused
  step();
  auto s = drain_cq(dev_, a_scq_);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].status, uint32_t(IBV_WC_SUCCESS));  // implied ACK of the first
  EXPECT_EQ(s[1].status, uint32_t(GetParam().status));
  EXPECT_EQ(s[1].wr_id, 101u);
  EXPECT_EQ(s[2].status, uint32_t(IBV_WC_WR_FLUSH_ERR));
  EXPECT_EQ(A().state, IBV_QPS_ERR);
}

INSTANTIATE_TEST_SUITE_P(Syndromes, CompleterNakTest,
                         ::testing::Values(NakCase{0x61, IBV_WC_REM_INV_REQ_ERR},
                                           NakCase{0x62, IBV_WC_REM_ACCESS_ERR},
                                           NakCase{0x63, IBV_WC_REM_OP_ERR},
                                           NakCase{0x64, IBV_WC_REM_OP_ERR}));

TEST_F(CompleterTest, ReservedSyndromeIsIgnored) {
  send_and_lose(1);
  reply(kAck, kPsn, 0x40);  // AETH type 010 is reserved
  reply(kAck, kPsn, 0x80);
  step();
  EXPECT_TRUE(drain_cq(dev_, a_scq_).empty());
  EXPECT_EQ(A().state, IBV_QPS_RTS);
}

TEST_F(CompleterTest, PsnSequenceNakGoesBackN) {
  send_and_lose(3);
  reply(kAck, kPsn + 1, 0x60);  // B expects kPsn + 1: the first arrived
  auto again = step();
  ASSERT_EQ(again.size(), 2u);  // the second and third are resent
  EXPECT_EQ(again[0].psn, kPsn + 1);
  EXPECT_EQ(again[1].psn, kPsn + 2);
  EXPECT_EQ(counters().retransmits, 1u);
  EXPECT_EQ(one_cqe(a_scq_).wr_id, 100u);
}

// A PSN sequence error NAK and the ACK timeouts after it draw on the same
// retry_cnt (IBA 9.7.6.1.3). The responder NAKs once per gap, so a second
// NAK for the same PSN while its retry is under way is a duplicate and
// counts nothing (tests/unit/device/retransmission_test.cc).
TEST_F(CompleterTest, PsnSequenceNaksAndTimeoutsBeyondRetryCntFail) {
  send_and_lose(1);
  reply(kAck, kPsn, 0x60);
  EXPECT_EQ(step().size(), 1u);  // resent: the first of retry_cnt = 3
  reply(kAck, kPsn, 0x60);
  EXPECT_TRUE(step().empty());  // the same NAK again: no second retry
  for (int i = 0; i < 2; ++i) {
    now_ += kTimeoutNs;
    step();                        // the timer fires and rewinds ...
    EXPECT_EQ(step().size(), 1u) << i;  // ... and the requester resends
  }
  EXPECT_TRUE(drain_cq(dev_, a_scq_).empty());
  now_ += kTimeoutNs;  // retry_cnt = 3 exhausted
  step();
  EXPECT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_RETRY_EXC_ERR));
}

TEST_F(CompleterTest, RnrNakTimerFollowsTheSyndrome) {
  // IBA table 45: timer field 0 is 655.36 ms, 31 is 491.52 ms.
  send_and_lose(1);
  reply(kAck, kPsn, 0x20 | 0);
  EXPECT_TRUE(step().empty());
  EXPECT_EQ(dev_.next_deadline_ns(), now_ + 655'360'000ull);
  now_ += 655'360'000ull - 1;
  EXPECT_TRUE(step().empty());  // not yet
  now_ += 1;
  auto r = step();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].psn, kPsn);
  reply(kAck, kPsn, 0x20 | 31);
  step();
  EXPECT_EQ(dev_.next_deadline_ns(), now_ + 491'520'000ull);
  EXPECT_EQ(counters().rnr_nak_received, 2u);
}

TEST_F(CompleterTest, TimeoutResendsFromTheOldestUnackedPsn) {
  send_and_lose(3);
  reply(kAck, kPsn, 0x1f);
  step();
  EXPECT_EQ(one_cqe(a_scq_).wr_id, 100u);
  now_ += kTimeoutNs;
  EXPECT_TRUE(step().empty());  // the timer fires and rewinds ...
  auto r = step();              // ... and the requester resends
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].psn, kPsn + 1);
  EXPECT_EQ(r[1].psn, kPsn + 2);
}

TEST_F(CompleterTest, ReadResponsesCompleteTheReadOnTheLastPacket) {
  post_read(7, 2500);
  step();  // the request is lost; responses come from the test
  std::vector<uint8_t> data(2500);
  fill(data, 9);
  reply(kReadRespFirst, kPsn, 0x1f, data.data(), 1024);
  reply(kReadRespMiddle, kPsn + 1, 0, data.data() + 1024, 1024);
  step();
  EXPECT_TRUE(drain_cq(dev_, a_scq_).empty());
  reply(kReadRespLast, kPsn + 2, 0x1f, data.data() + 2048, 452);
  step();
  abi::Cqe s = one_cqe(a_scq_);
  EXPECT_EQ(s.wr_id, 7u);
  EXPECT_EQ(s.status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(s.byte_len, 2500u);
  EXPECT_EQ(std::memcmp(a(0), data.data(), 2500), 0);
}

TEST_F(CompleterTest, ReadResponseOfTheWrongSizeIsDropped) {
  post_read(7, 2500);
  step();
  std::vector<uint8_t> data(2500, 0xee);
  const std::vector<uint8_t> before(a(0), a(2500));
  reply(kReadRespFirst, kPsn, 0x1f, data.data(), 1000);  // FIRST must carry a full MTU
  reply(kReadRespLast, kPsn + 2, 0x1f, data.data(), 1000);  // LAST past the end
  step();
  EXPECT_EQ(counters().rx_stale_response, 2u);
  EXPECT_TRUE(drain_cq(dev_, a_scq_).empty());
  EXPECT_TRUE(std::equal(before.begin(), before.end(), a(0)));
}

TEST_F(CompleterTest, ReadResponseEndingEarlyIsNotASuccess) {
  post_read(7, 2500);
  step();
  std::vector<uint8_t> data(100, 0xee);
  reply(kReadRespOnly, kPsn, 0x1f, data.data(), 100);
  step();
  for (const abi::Cqe& c : drain_cq(dev_, a_scq_)) EXPECT_NE(c.status, uint32_t(IBV_WC_SUCCESS));
}

TEST_F(CompleterTest, AckBeyondAnOutstandingReadDoesNotLoseIt) {
  post_read(7, 2000);  // PSNs kPsn, kPsn + 1
  post_send(A(), wqe(IBV_WR_SEND, 8), {sge(a(5000), 8, a_key_)});  // kPsn + 2
  step();
  std::vector<uint8_t> data(2000);
  fill(data, 3);
  reply(kAck, kPsn + 2, 0x1f);
  step();
  reply(kReadRespFirst, kPsn, 0x1f, data.data(), 1024);
  reply(kReadRespLast, kPsn + 1, 0x1f, data.data() + 1024, 976);
  step();
  for (int i = 0; i < 3; ++i) {  // allow a retry of the READ, answered again
    now_ += kTimeoutNs;
    for (const Frame& f : step()) {
      if (f.opcode != 0x0c) continue;
      reply(kReadRespFirst, kPsn, 0x1f, data.data(), 1024);
      reply(kReadRespLast, kPsn + 1, 0x1f, data.data() + 1024, 976);
    }
    step();
  }
  auto s = drain_cq(dev_, a_scq_);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].wr_id, 7u);
  EXPECT_EQ(s[0].status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(s[1].status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(std::memcmp(a(0), data.data(), 2000), 0);
}

TEST_F(CompleterTest, OutOfOrderReadResponseAsksAgain) {
  post_read(7, 3000);
  step();
  std::vector<uint8_t> data(3000, 0x5a);
  reply(kReadRespMiddle, kPsn + 1, 0, data.data(), 1024);  // FIRST was lost
  auto r = step();
  EXPECT_EQ(counters().rx_stale_response, 1u);
  ASSERT_EQ(r.size(), 1u);  // the READ is requested again from the start
  EXPECT_EQ(r[0].opcode, 0x0c);
  EXPECT_EQ(r[0].psn, kPsn);
}

TEST_F(CompleterTest, AtomicAckReturnsTheOriginalValue) {
  abi::SendWqe w = wqe(IBV_WR_ATOMIC_FETCH_AND_ADD, 8);
  w.remote_addr = b_addr(0);
  w.rkey = b_key_;
  w.compare_add = 1;
  post_send(A(), w, {sge(a(16), 8, a_key_)});
  step();
  reply(kAtomicAck, kPsn, 0x1f, nullptr, 0, 0x0123456789abcdefull);
  step();
  abi::Cqe s = one_cqe(a_scq_);
  EXPECT_EQ(s.status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(s.opcode, uint32_t(IBV_WC_FETCH_ADD));
  uint64_t orig;
  std::memcpy(&orig, a(16), 8);
  EXPECT_EQ(orig, 0x0123456789abcdefull);
}

TEST_F(CompleterTest, AtomicAckForAReadIsIgnored) {
  post_read(7, 8);
  step();
  const std::vector<uint8_t> before(a(0), a(8));
  reply(kAtomicAck, kPsn, 0x1f, nullptr, 0, 0xffffffffffffffffull);
  step();
  EXPECT_TRUE(drain_cq(dev_, a_scq_).empty());
  EXPECT_TRUE(std::equal(before.begin(), before.end(), a(0)));
}

TEST_F(CompleterTest, PlainAckDoesNotCompleteARead) {
  post_read(7, 100);
  step();
  reply(kAck, kPsn, 0x1f);
  step();
  EXPECT_TRUE(drain_cq(dev_, a_scq_).empty());
}

TEST_F(CompleterTest, ResponsesToAQpInErrorAreDropped) {
  send_and_lose(1);
  ASSERT_EQ(to_state(a_, IBV_QPS_ERR), 0);
  EXPECT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_WR_FLUSH_ERR));
  reply(kAck, kPsn, 0x1f);
  step();
  EXPECT_TRUE(drain_cq(dev_, a_scq_).empty());
  EXPECT_EQ(counters().rx_bad_state, 1u);
}

// Regression (fixed in 4ad2f3a): with max_rd_atomic = 1, a response lost in
// the middle of a READ makes the completer rewind into that READ. The resumed
// READ must still count against the limit, so the next READ waits instead of
// going out in the same poll (two outstanding against a limit of one).
TEST_F(CompleterTest, ResumedReadStillCountsAgainstMaxRdAtomic) {
  abi::QpAttr attr = default_attr();
  attr.max_rd_atomic = 1;
  // A fresh pair with the limit.
  ASSERT_EQ(dev_.destroy_qp(&owner_, a_), 0);
  ASSERT_EQ(dev_.destroy_qp(&owner_, b_), 0);
  make_pair(IBV_QPT_RC, attr, default_attr());
  post_read(1, 4000);        // PSNs kPsn .. kPsn + 3
  post_read(2, 100, 8000);   // kPsn + 4, must wait for the first
  auto r = step();
  ASSERT_EQ(r.size(), 1u);
  std::vector<uint8_t> data(4000, 0x11);
  reply(kReadRespFirst, kPsn, 0x1f, data.data(), 1024);
  reply(kReadRespMiddle, kPsn + 2, 0, data.data(), 1024);  // kPsn + 1 was lost
  r = step();
  ASSERT_GE(r.size(), 1u);
  EXPECT_EQ(r[0].opcode, 0x0c);
  EXPECT_EQ(r[0].psn, kPsn + 1);  // the first READ, resumed
  EXPECT_EQ(r.size(), 1u) << "the second READ went out while the first is outstanding";
}

TEST_F(CompleterTest, QpLeavingRtsDuringAnRnrWaitLeavesNoDeadline) {
  send_and_lose(1);
  reply(kAck, kPsn, 0x20 | 14);  // RNR NAK, 1.28 ms
  step();
  ASSERT_NE(dev_.next_deadline_ns(), 0u);
  ASSERT_EQ(to_state(a_, IBV_QPS_ERR), 0);
  now_ += 10'000'000;
  ASSERT_TRUE(run());
  const uint64_t d = dev_.next_deadline_ns();
  EXPECT_TRUE(d == 0 || d > now_) << "deadline " << d << " is in the past (now " << now_ << ")";
}

}  // namespace
}  // namespace uroce::device
