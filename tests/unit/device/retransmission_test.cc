// Protocol tests for RC retransmission under loss, duplication and reordering
// (IBA 9.7.5.1 responder, 9.7.5.2 / 9.7.6 requester; issue 9 points 5 and 6).
// Hand-made requests go to QP B and hand-made responses to QP A; the frames
// each sends are taken off the loopback port and checked. Each test is the
// smallest reproduction of a failure seen under `uroce fault` with perftest
// or ibverbs-utils.
#include <gtest/gtest.h>

#include <cstring>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "device/test_env.h"

namespace uroce::device {
namespace {

using net::AtomicEth;
using net::Reth;

// RC opcodes (IBA table 38).
constexpr uint8_t kSendFirst = 0x00, kSendMiddle = 0x01, kSendLast = 0x02, kSendOnly = 0x04,
                  kReadRequest = 0x0c, kReadRespFirst = 0x0d, kReadRespMiddle = 0x0e,
                  kReadRespLast = 0x0f, kReadRespOnly = 0x10, kAck = 0x11, kAtomicAck = 0x12,
                  kFetchAdd = 0x14;
// AETH syndromes (IBA table 44).
constexpr uint8_t kSynAck = 0x1f, kSynRnr = 0x20, kSynPsnSeq = 0x60;
constexpr uint32_t kPsn = 1000;  // A's first PSN and what B expects (PairFixture::make_pair)
constexpr uint32_t kMtu = 1024;

class RetransmissionTest : public PairFixture {
 protected:
  void SetUp() override {
    PairFixture::SetUp();
    payload_.resize(4 * kMtu);
    fill(payload_, 0x40);
  }

  auto reth(uint64_t va, uint32_t rkey, uint32_t len) {
    return [=](net::Packet& p) {
      auto* r = p.hdr<Reth>(p.info().reth_off);
      r->va = va;
      r->rkey = rkey;
      r->dma_len = len;
    };
  }
  auto fetch_add(uint64_t va, uint32_t rkey, uint64_t add) {
    return [=](net::Packet& p) {
      auto* a = p.hdr<AtomicEth>(p.info().atomiceth_off);
      a->va = va;
      a->rkey = rkey;
      a->swap_add = add;
      a->compare = 0;
    };
  }
  // A response "from B" to A, with an AETH where the opcode has one.
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
  void post_read(uint64_t wr_id, uint32_t len, size_t local_off = 0, size_t remote_off = 0) {
    abi::SendWqe w = wqe(IBV_WR_RDMA_READ, wr_id);
    w.remote_addr = b_addr(remote_off);
    w.rkey = b_key_;
    post_send(A(), w, {sge(a(local_off), len, a_key_)});
  }
  static std::vector<uint32_t> psns(const std::vector<Frame>& frames) {
    std::vector<uint32_t> out;
    for (const Frame& f : frames) out.push_back(f.psn);
    return out;
  }
  static size_t count_opcode(const std::vector<Frame>& frames, uint8_t opcode) {
    size_t n = 0;
    for (const Frame& f : frames) n += f.opcode == opcode;
    return n;
  }

  std::vector<uint8_t> payload_;
};

// ---- point 5: RNR on a multi-packet SEND with rnr_retry 7 -------------------

// IBA 9.7.5.1.2 / C9-112: one NAK per sequence error. The RNR NAK of a FIRST
// packet is that NAK for the rest of its message: MIDDLE and LAST behind it
// are out of sequence but must not draw PSN sequence error NAKs, which the
// requester would count against retry_cnt on every RNR round.
TEST_F(RetransmissionTest, RnrNakIsTheOnlyNakForTheRestOfItsMessage) {
  make_pair(IBV_QPT_RC);
  for (int round = 0; round < 3; ++round) {
    inject(kSendFirst, b_, kPsn, false, payload_.data(), kMtu);
    inject(kSendMiddle, b_, kPsn + 1, false, payload_.data(), kMtu);
    inject(kSendLast, b_, kPsn + 2, true, payload_.data(), 100);
    auto f = step();
    ASSERT_EQ(f.size(), 1u) << "round " << round;
    EXPECT_EQ(f[0].opcode, kAck);
    EXPECT_EQ(f[0].syndrome & 0xe0, kSynRnr);
    EXPECT_EQ(f[0].psn, kPsn);
  }
  EXPECT_EQ(counters().nak_sent, 0u);
  EXPECT_EQ(counters().rnr_nak_sent, 3u);
  // Once a receive is there the message goes through.
  post_recv(B(), 1, {sge(b(0), 4096, b_key_)});
  inject(kSendFirst, b_, kPsn, false, payload_.data(), kMtu);
  inject(kSendMiddle, b_, kPsn + 1, false, payload_.data() + kMtu, kMtu);
  inject(kSendLast, b_, kPsn + 2, true, payload_.data() + 2 * kMtu, 100);
  auto f = step();
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].syndrome, kSynAck);
  EXPECT_EQ(f[0].psn, kPsn + 2);
  abi::Cqe r = one_cqe(b_rcq_);
  EXPECT_EQ(r.status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(r.byte_len, 2 * kMtu + 100);
  EXPECT_EQ(std::memcmp(b(0), payload_.data(), 2 * kMtu + 100), 0);
}

// The requester side of the same rule: the RNR NAK is the authority for its
// PSN. Sequence error NAKs for that PSN (a responder that sends them anyway)
// neither rewind again nor use up retry_cnt; the RNR timer decides.
TEST_F(RetransmissionTest, SequenceNaksForAnRnrNakedPsnDoNotCountAgainstRetryCnt) {
  abi::QpAttr attr = default_attr();
  attr.retry_cnt = 1;
  attr.rnr_retry = 7;
  attr.timeout = 10;
  make_pair(IBV_QPT_RC, attr, default_attr());
  post_send(A(), wqe(IBV_WR_SEND, 1), {sge(a(0), 2 * kMtu + 100, a_key_)});
  for (int round = 0; round < 5; ++round) {
    auto sent = step();
    ASSERT_EQ(psns(sent), (std::vector<uint32_t>{kPsn, kPsn + 1, kPsn + 2})) << "round " << round;
    reply(kAck, kPsn, kSynRnr | 1);  // 10 us
    reply(kAck, kPsn, kSynPsnSeq);
    reply(kAck, kPsn, kSynPsnSeq);
    EXPECT_TRUE(step().empty()) << "resent before the RNR timer";
    EXPECT_TRUE(drain_cq(dev_, a_scq_).empty()) << "round " << round;
    EXPECT_EQ(A().state, IBV_QPS_RTS);
    now_ += 10'000;
  }
  EXPECT_EQ(counters().retry_exceeded, 0u);
}

// End to end on one device: rnr_retry 7 waits as long as it takes, for a
// SEND of three packets as for one (issue 9 point 5: WR_FLUSH_ERR after 0.4 s).
TEST_F(RetransmissionTest, RnrRetryForeverOnAMultiPacketSend) {
  abi::QpAttr attr_a = default_attr();
  attr_a.retry_cnt = 7;
  attr_a.rnr_retry = 7;
  abi::QpAttr attr_b = default_attr();
  attr_b.min_rnr_timer = 12;  // 0.64 ms
  make_pair(IBV_QPT_RC, attr_a, attr_b);
  post_send(A(), wqe(IBV_WR_SEND, 1), {sge(a(0), 3 * kMtu, a_key_)});
  for (int i = 0; i < 2000; ++i) ASSERT_TRUE(advance(1'000'000));  // 2 s
  EXPECT_TRUE(drain_cq(dev_, a_scq_).empty());
  EXPECT_EQ(A().state, IBV_QPS_RTS);
  EXPECT_GT(counters().rnr_nak_received, 100u);
  post_recv(B(), 9, {sge(b(0), 4096, b_key_)});
  ASSERT_TRUE(advance(1'000'000));
  EXPECT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_SUCCESS));
  abi::Cqe r = one_cqe(b_rcq_);
  EXPECT_EQ(r.status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(r.byte_len, 3 * kMtu);
  EXPECT_EQ(std::memcmp(b(0), a(0), 3 * kMtu), 0);
  EXPECT_EQ(counters().retry_exceeded, 0u);
}

// ---- point 6: duplicates and reordering --------------------------------------

// A duplicated READ request (the fault injector, or a requester's retry)
// restarts the response of its own READ; it is not a new READ and must not
// count against max_dest_rd_atomic (C9-149), which made ib_read_bw fail with
// REM_INV_REQ_ERR under duplication.
TEST_F(RetransmissionTest, DuplicateReadRequestsDoNotUseUpResponderResources) {
  make_pair(IBV_QPT_RC);  // max_dest_rd_atomic 4
  inject(kReadRequest, b_, kPsn, true, reth(b_addr(0), b_key_, 4 * kMtu));
  inject(kReadRequest, b_, kPsn + 4, true, reth(b_addr(0), b_key_, 4 * kMtu));
  inject(kReadRequest, b_, kPsn + 8, true, reth(b_addr(0), b_key_, 4 * kMtu));
  inject(kReadRequest, b_, kPsn, true, reth(b_addr(0), b_key_, 4 * kMtu));
  inject(kReadRequest, b_, kPsn + 4, true, reth(b_addr(0), b_key_, 4 * kMtu));
  inject(kReadRequest, b_, kPsn + 12, true, reth(b_addr(0), b_key_, 4 * kMtu));
  std::vector<Frame> out;
  for (int i = 0; i < 10; ++i)
    for (Frame& f : step()) out.push_back(f);
  EXPECT_EQ(count_opcode(out, kAck), 0u) << "NAKed";
  ASSERT_EQ(out.size(), 16u);
  for (uint32_t i = 0; i < 16; ++i) EXPECT_EQ(out[i].psn, kPsn + i);
  EXPECT_EQ(B().state, IBV_QPS_RTS);
  EXPECT_EQ(counters().nak_sent, 0u);
}

// Responses leave in PSN order (IBA 9.7.5.1.1), also when a duplicate READ
// asks again for an earlier range while a later READ is still queued.
TEST_F(RetransmissionTest, DuplicateReadIsAnsweredBeforeLaterQueuedResponses) {
  make_pair(IBV_QPT_RC);
  inject(kReadRequest, b_, kPsn, true, reth(b_addr(0), b_key_, 2 * kMtu));
  EXPECT_EQ(psns(step()), (std::vector<uint32_t>{kPsn, kPsn + 1}));
  inject(kReadRequest, b_, kPsn + 2, true, reth(b_addr(0), b_key_, 2 * kMtu));
  inject(kReadRequest, b_, kPsn + 1, true, reth(b_addr(kMtu), b_key_, kMtu));  // resumed
  auto out = step();
  EXPECT_EQ(psns(out), (std::vector<uint32_t>{kPsn + 1, kPsn + 2, kPsn + 3}));
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(std::memcmp(out[0].payload.data(), b(kMtu), kMtu), 0);
}

// A duplicate atomic is answered from the saved reply, in PSN order, and
// never executed twice, also while its first reply is still queued.
TEST_F(RetransmissionTest, DuplicateAtomicBehindQueuedReadDataIsReplayedInOrder) {
  make_pair(IBV_QPT_RC);
  uint64_t* target = reinterpret_cast<uint64_t*>(b(8192));
  *target = 10;
  inject(kReadRequest, b_, kPsn, true, reth(b_addr(0), b_key_, 2 * kMtu));
  inject(kFetchAdd, b_, kPsn + 2, true, fetch_add(b_addr(8192), b_key_, 5));
  inject(kFetchAdd, b_, kPsn + 2, true, fetch_add(b_addr(8192), b_key_, 5));
  auto out = step();
  EXPECT_EQ(*target, 15u);
  ASSERT_GE(out.size(), 3u);
  for (size_t i = 1; i < out.size(); ++i) EXPECT_GE(out[i].psn, out[i - 1].psn);
  EXPECT_EQ(count_opcode(out, kAtomicAck), 1u) << "its first reply is still queued: one answers both";
  for (const Frame& f : out) {
    if (f.opcode == kAtomicAck) {
      EXPECT_EQ(f.atomic_orig, 10u);
    }
  }
  EXPECT_EQ(B().state, IBV_QPS_RTS);
}

// A duplicated or delayed PSN sequence error NAK for a gap the requester has
// already gone back for (or that acknowledgements have since passed) is
// old news: no second rewind, and no retry counted.
TEST_F(RetransmissionTest, StaleOrRepeatedSequenceNakIsIgnored) {
  abi::QpAttr attr = default_attr();
  attr.retry_cnt = 1;
  attr.timeout = 10;
  make_pair(IBV_QPT_RC, attr, default_attr());
  for (int i = 0; i < 3; ++i) post_send(A(), wqe(IBV_WR_SEND, 100 + i), {sge(a(0), 8, a_key_)});
  step();
  reply(kAck, kPsn + 1, kSynPsnSeq);
  EXPECT_EQ(psns(step()), (std::vector<uint32_t>{kPsn + 1, kPsn + 2}));
  reply(kAck, kPsn + 1, kSynPsnSeq);  // the same NAK, duplicated on the way
  EXPECT_TRUE(step().empty());
  reply(kAck, kPsn + 1, kSynAck);
  step();
  reply(kAck, kPsn + 1, kSynPsnSeq);  // delayed: B has since acknowledged kPsn + 1
  EXPECT_TRUE(step().empty());
  EXPECT_EQ(counters().retransmits, 1u);
  EXPECT_EQ(A().state, IBV_QPS_RTS);
  reply(kAck, kPsn + 2, kSynAck);
  step();
  auto s = drain_cq(dev_, a_scq_);
  ASSERT_EQ(s.size(), 3u);
  for (const abi::Cqe& c : s) EXPECT_EQ(c.status, uint32_t(IBV_WC_SUCCESS));
}

// A go-back-N rewind pulls the requester back to the oldest unacknowledged
// WQE; a response for it arriving before the resend (here in the same poll
// as the NAK) still completes it. It used to be dropped as stale, so the
// atomic never completed and the QP ended in RETRY_EXC_ERR.
TEST_F(RetransmissionTest, AtomicReplyRightAfterARewindCompletesTheAtomic) {
  make_pair(IBV_QPT_RC);
  for (int i = 0; i < 2; ++i) {
    abi::SendWqe w = wqe(IBV_WR_ATOMIC_FETCH_AND_ADD, 10 + i);
    w.remote_addr = b_addr(8192);
    w.rkey = b_key_;
    w.compare_add = 1;
    post_send(A(), w, {sge(a(8 * i), 8, a_key_)});
  }
  EXPECT_EQ(psns(step()), (std::vector<uint32_t>{kPsn, kPsn + 1}));
  reply(kAck, kPsn, kSynPsnSeq);
  reply(kAtomicAck, kPsn, kSynAck, nullptr, 0, 41);
  step();
  abi::Cqe c = one_cqe(a_scq_);
  EXPECT_EQ(c.wr_id, 10u);
  EXPECT_EQ(c.status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(*reinterpret_cast<uint64_t*>(a(0)), 41u);
}

// The same for plain ACKs: SENDs a rewind went back over complete when an
// ACK covers them, though they have not been resent yet.
TEST_F(RetransmissionTest, AckRightAfterARewindCompletesWhatItCovers) {
  make_pair(IBV_QPT_RC);
  for (int i = 0; i < 3; ++i) post_send(A(), wqe(IBV_WR_SEND, 100 + i), {sge(a(0), 8, a_key_)});
  EXPECT_EQ(step().size(), 3u);
  reply(kAck, kPsn + 1, kSynPsnSeq);
  reply(kAck, kPsn + 2, kSynAck);  // the resent packets were not needed after all
  step();
  auto s = drain_cq(dev_, a_scq_);
  ASSERT_EQ(s.size(), 3u);
  for (const abi::Cqe& c : s) EXPECT_EQ(c.status, uint32_t(IBV_WC_SUCCESS));
}

// A NAK (or RNR NAK) naming a PSN beyond an outstanding READ says the READ
// was executed, not that its data arrived: the requester asks for the READ
// again instead of skipping it (IBA 9.7.5.1.5). It used to move comp_psn past
// the READ, whose responses were then stale forever.
TEST_F(RetransmissionTest, NakBeyondAnOutstandingReadAsksForTheReadAgain) {
  make_pair(IBV_QPT_RC);
  post_read(7, 2 * kMtu);                                            // kPsn, kPsn + 1
  post_send(A(), wqe(IBV_WR_SEND, 8), {sge(a(8192), 8, a_key_)});   // kPsn + 2
  post_send(A(), wqe(IBV_WR_SEND, 9), {sge(a(8192), 8, a_key_)});   // kPsn + 3
  EXPECT_EQ(step().size(), 3u);
  reply(kAck, kPsn + 3, kSynPsnSeq);  // B has the READ and the first SEND
  auto again = step();
  ASSERT_FALSE(again.empty());
  EXPECT_EQ(again[0].opcode, kReadRequest);
  EXPECT_EQ(again[0].psn, kPsn);
  std::vector<uint8_t> data(2 * kMtu);
  fill(data, 77);
  reply(kReadRespFirst, kPsn, kSynAck, data.data(), kMtu);
  reply(kReadRespLast, kPsn + 1, kSynAck, data.data() + kMtu, kMtu);
  reply(kAck, kPsn + 3, kSynAck);
  step();
  auto s = drain_cq(dev_, a_scq_);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].wr_id, 7u);
  for (const abi::Cqe& c : s) EXPECT_EQ(c.status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(std::memcmp(a(0), data.data(), 2 * kMtu), 0);
}

// An ACK that overtook two READs' responses covers the SEND behind them, but
// when the first READ completes, progress stops at the second READ: it
// used to jump to the ACKed PSN and leave the second READ unanswerable.
TEST_F(RetransmissionTest, AckBeyondTwoReadsStopsAtTheSecond) {
  make_pair(IBV_QPT_RC);
  post_read(1, kMtu, 0, 0);                                          // kPsn
  post_read(2, kMtu, kMtu, kMtu);                                    // kPsn + 1
  post_send(A(), wqe(IBV_WR_SEND, 3), {sge(a(8192), 8, a_key_)});   // kPsn + 2
  EXPECT_EQ(step().size(), 3u);
  reply(kAck, kPsn + 2, kSynAck);
  reply(kReadRespOnly, kPsn, kSynAck, payload_.data(), kMtu);
  step();
  EXPECT_EQ(A().comp_psn, kPsn + 1);
  reply(kReadRespOnly, kPsn + 1, kSynAck, payload_.data() + kMtu, kMtu);
  step();
  auto s = drain_cq(dev_, a_scq_);
  ASSERT_EQ(s.size(), 3u);
  for (uint32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(s[i].wr_id, i + 1);
    EXPECT_EQ(s[i].status, uint32_t(IBV_WC_SUCCESS));
  }
  EXPECT_EQ(std::memcmp(a(0), payload_.data(), 2 * kMtu), 0);
}

// A READ being re-read from its middle (the requester rewound into it: a
// response was lost) and an ACK for the SEND behind it arriving meanwhile
// (the responder re-ACKs the resent SEND after the resent responses, and
// one of those was lost again): the ACK says the READ's responses are still
// missing, it must not move comp_psn past them. It used to, when the
// requester stood at the READ itself: the READ was never asked again and
// failed with RETRY_EXC_ERR. Seen with uroce-tag-pingpong under `uroce
// fault drop=0.02`: the device's rendezvous READ, then its FIN.
TEST_F(RetransmissionTest, AckBeyondAReadBeingReReadFromItsMiddleWaitsForTheRead) {
  make_pair(IBV_QPT_RC);
  post_read(7, 4 * kMtu);                                            // kPsn .. kPsn + 3
  post_send(A(), wqe(IBV_WR_SEND, 8), {sge(a(8192), 8, a_key_)});   // kPsn + 4
  EXPECT_EQ(step().size(), 2u);
  std::vector<uint8_t> data(4 * kMtu);
  fill(data, 91);
  reply(kReadRespFirst, kPsn, kSynAck, data.data(), kMtu);
  reply(kReadRespMiddle, kPsn + 2, kSynAck, data.data() + 2 * kMtu, kMtu);  // kPsn + 1 lost
  auto again = step();
  ASSERT_FALSE(again.empty());
  EXPECT_EQ(again[0].opcode, kReadRequest);
  EXPECT_EQ(again[0].psn, kPsn + 1);
  // The re-read answers kPsn + 1, loses kPsn + 2; the rewind to kPsn + 2
  // happens; then B's ACK of the (resent) SEND arrives.
  reply(kReadRespMiddle, kPsn + 1, kSynAck, data.data() + kMtu, kMtu);
  reply(kReadRespLast, kPsn + 3, kSynAck, data.data() + 3 * kMtu, kMtu);
  reply(kAck, kPsn + 4, kSynAck);
  auto third = step();
  EXPECT_EQ(A().comp_psn, kPsn + 2) << "the ACK skipped the READ's missing responses";
  ASSERT_FALSE(third.empty()) << "the READ was not asked again";
  EXPECT_EQ(third[0].opcode, kReadRequest);
  EXPECT_EQ(third[0].psn, kPsn + 2);
  reply(kReadRespMiddle, kPsn + 2, kSynAck, data.data() + 2 * kMtu, kMtu);
  reply(kReadRespLast, kPsn + 3, kSynAck, data.data() + 3 * kMtu, kMtu);
  reply(kAck, kPsn + 4, kSynAck);
  step();
  auto s = drain_cq(dev_, a_scq_);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].wr_id, 7u);
  for (const abi::Cqe& c : s) EXPECT_EQ(c.status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(std::memcmp(a(0), data.data(), 4 * kMtu), 0);
}

// ---- point 6: whole workloads under the loopback fault injector ----------------

// perftest- and pingpong-like traffic from A to B through the device's own
// fault injector at issue 9's rates, with a fixed seed per run, on a
// simulated clock: every work request must complete successfully with the
// right data. One test per operation and a handful of seeds.
struct SoakCase {
  const char* name;
  ibv_wr_opcode op;
  uint32_t len;
  int count;
};

void PrintTo(const SoakCase& c, std::ostream* os) { *os << c.name; }

class FaultSoakTest : public RetransmissionTest,
                      public ::testing::WithParamInterface<std::tuple<SoakCase, uint64_t>> {
 protected:
  static constexpr int kWindow = 16;  // outstanding WRs, perftest's default tx depth for READs
  static abi::QpCaps caps() {
    abi::QpCaps c = default_caps();
    c.max_send_wr = c.max_recv_wr = 64;
    return c;
  }
  static abi::QpAttr attr() {
    abi::QpAttr a = default_attr();
    a.max_rd_atomic = a.max_dest_rd_atomic = 16;
    a.min_rnr_timer = 12;
    return a;
  }
};

TEST_P(FaultSoakTest, EveryWorkRequestCompletesWithItsData) {
  const SoakCase c = std::get<0>(GetParam());
  make_pair(IBV_QPT_RC, attr(), attr(), caps());
  net::FaultConfig f;
  f.drop = 0.02;
  f.duplicate = 0.01;
  f.reorder = 0.05;
  f.corrupt = 0.005;
  f.seed = std::get<1>(GetParam());
  ASSERT_EQ(dev_.set_fault(PortId::kLoopback, f), "");
  const bool atomic = c.op == IBV_WR_ATOMIC_FETCH_AND_ADD;
  const bool recv = c.op == IBV_WR_SEND;
  uint64_t* counter = reinterpret_cast<uint64_t*>(b(60000));
  *counter = 0;
  int posted = 0, done = 0, recvs_posted = 0, recvs_done = 0;
  std::vector<bool> seen(c.count, false);
  const uint64_t start = now_;
  while ((done < c.count || recvs_done < (recv ? c.count : 0)) && now_ - start < 60'000'000'000ull) {
    while (recv && recvs_posted < c.count && recvs_posted - recvs_done < kWindow) {
      post_recv(B(), recvs_posted, {sge(b(0), c.len, b_key_)});
      ++recvs_posted;
    }
    while (posted < c.count && posted - done < kWindow) {
      abi::SendWqe w = wqe(c.op, posted);
      w.remote_addr = atomic ? b_addr(60000) : b_addr(0);
      w.rkey = b_key_;
      w.compare_add = 1;
      const size_t local = atomic ? 60000 + 8 * (posted % kWindow) : 0;
      post_send(A(), w, {sge(a(local), atomic ? 8 : c.len, a_key_)});
      ++posted;
    }
    now_ += 20'000;  // 20 us a round
    dev_.poll(now_);
    for (const abi::Cqe& e : drain_cq(dev_, a_scq_)) {
      ASSERT_EQ(e.status, uint32_t(IBV_WC_SUCCESS))
          << c.name << " wr " << e.wr_id << " after " << done << " of " << c.count << ": "
          << "status " << e.status;
      if (atomic) {
        const uint64_t orig = *reinterpret_cast<uint64_t*>(a(60000 + 8 * (e.wr_id % kWindow)));
        ASSERT_LT(orig, uint64_t(c.count));
        ASSERT_FALSE(seen[orig]) << "fetch-and-add executed twice or its reply replayed wrong: " << orig;
        seen[orig] = true;
      } else if (c.op == IBV_WR_RDMA_READ) {
        ASSERT_EQ(std::memcmp(a(0), b(0), c.len), 0) << "READ " << e.wr_id << " data";
      }
      ++done;
    }
    for (const abi::Cqe& e : drain_cq(dev_, b_rcq_)) {
      ASSERT_EQ(e.status, uint32_t(IBV_WC_SUCCESS)) << "receive " << e.wr_id;
      ASSERT_EQ(e.byte_len, c.len);
      ++recvs_done;
    }
  }
  EXPECT_EQ(done, c.count) << c.name << ": " << done << " completions in 60 simulated s";
  if (recv) {
    EXPECT_EQ(recvs_done, c.count);
  }
  if (atomic) {
    EXPECT_EQ(*counter, uint64_t(c.count));
  }
  if (c.op == IBV_WR_RDMA_WRITE || c.op == IBV_WR_SEND) {
    EXPECT_EQ(std::memcmp(a(0), b(0), c.len), 0);
  }
  EXPECT_EQ(counters().retry_exceeded, 0u);
  EXPECT_GT(DeviceTestPeer::loopback_faults(dev_).dropped, 0u);
}

INSTANTIATE_TEST_SUITE_P(
    Issue9Rates, FaultSoakTest,
    ::testing::Combine(::testing::Values(SoakCase{"read", IBV_WR_RDMA_READ, 16384, 300},
                                         SoakCase{"write", IBV_WR_RDMA_WRITE, 16384, 300},
                                         SoakCase{"send", IBV_WR_SEND, 4096, 600},
                                         SoakCase{"atomic", IBV_WR_ATOMIC_FETCH_AND_ADD, 8, 1000}),
                       ::testing::Values(1u, 2u, 3u, 4u, 5u)),
    [](const auto& info) {
      return std::string(std::get<0>(info.param).name) + "_seed" +
             std::to_string(std::get<1>(info.param));
    });

// Both directions at once, READs and SENDs mixed on one QP, as a tag-matching
// rendezvous mixes the device's READs and FINs with the user's SENDs: A
// alternates multi-packet READs of B and SENDs to B while B sends to A,
// through the fault injector. Everything completes, in order, with its data.
class MixedFaultSoakTest : public RetransmissionTest, public ::testing::WithParamInterface<uint64_t> {};

TEST_P(MixedFaultSoakTest, ReadsAndSendsBothWaysAllComplete) {
  abi::QpAttr at = default_attr();
  at.max_rd_atomic = at.max_dest_rd_atomic = 4;
  abi::QpCaps caps = default_caps();
  caps.max_send_wr = caps.max_recv_wr = 64;
  make_pair(IBV_QPT_RC, at, at, caps);
  net::FaultConfig f;
  f.drop = 0.03;
  f.duplicate = 0.01;
  f.reorder = 0.05;
  f.seed = GetParam();
  ASSERT_EQ(dev_.set_fault(PortId::kLoopback, f), "");
  constexpr int kCount = 200, kWindow = 8;
  constexpr uint32_t kReadLen = 3000, kSendLen = 100;
  int a_posted = 0, a_done = 0, b_posted = 0, b_done = 0, a_recvd = 0, b_recvd = 0;
  for (int i = 0; i < 64; ++i) {
    post_recv(A(), 1000 + i, {sge(a(40000), kSendLen, a_key_)});
    post_recv(B(), 2000 + i, {sge(b(40000), kSendLen, b_key_)});
  }
  const uint64_t start = now_;
  while ((a_done < kCount || b_done < kCount || a_recvd < kCount || b_recvd < kCount / 2) &&
         now_ - start < 60'000'000'000ull) {
    while (a_posted < kCount && a_posted - a_done < kWindow) {
      if (a_posted % 2 == 0) {
        post_read(a_posted, kReadLen, 4096 * (a_posted / 2 % 4), 0);
      } else {
        post_send(A(), wqe(IBV_WR_SEND, a_posted), {sge(a(30000), kSendLen, a_key_)});
      }
      ++a_posted;
    }
    while (b_posted < kCount && b_posted - b_done < kWindow) {
      post_send(B(), wqe(IBV_WR_SEND, b_posted), {sge(b(30000), kSendLen, b_key_)});
      ++b_posted;
    }
    now_ += 20'000;
    dev_.poll(now_);
    for (const abi::Cqe& e : drain_cq(dev_, a_scq_)) {
      ASSERT_EQ(e.status, uint32_t(IBV_WC_SUCCESS)) << "A wr " << e.wr_id << " after " << a_done;
      ASSERT_EQ(e.wr_id, uint64_t(a_done)) << "A completes in order";
      if (e.wr_id % 2 == 0) {
        ASSERT_EQ(std::memcmp(a(4096 * (e.wr_id / 2 % 4)), b(0), kReadLen), 0) << "READ " << e.wr_id;
      }
      ++a_done;
    }
    for (const abi::Cqe& e : drain_cq(dev_, b_scq_)) {
      ASSERT_EQ(e.status, uint32_t(IBV_WC_SUCCESS)) << "B wr " << e.wr_id << " after " << b_done;
      ++b_done;
    }
    for (const abi::Cqe& e : drain_cq(dev_, a_rcq_)) {
      ASSERT_EQ(e.status, uint32_t(IBV_WC_SUCCESS));
      post_recv(A(), 1000, {sge(a(40000), kSendLen, a_key_)});
      ++a_recvd;
    }
    for (const abi::Cqe& e : drain_cq(dev_, b_rcq_)) {
      ASSERT_EQ(e.status, uint32_t(IBV_WC_SUCCESS));
      post_recv(B(), 2000, {sge(b(40000), kSendLen, b_key_)});
      ++b_recvd;
    }
  }
  EXPECT_EQ(a_done, kCount);
  EXPECT_EQ(b_done, kCount);
  EXPECT_EQ(a_recvd, kCount);
  EXPECT_EQ(b_recvd, kCount / 2);
  EXPECT_EQ(counters().retry_exceeded, 0u);
  EXPECT_GT(DeviceTestPeer::loopback_faults(dev_).dropped, 0u);
}

INSTANTIATE_TEST_SUITE_P(Seeds, MixedFaultSoakTest, ::testing::Values(1u, 2u, 3u, 4u, 5u, 6u, 7u, 8u));

}  // namespace
}  // namespace uroce::device
