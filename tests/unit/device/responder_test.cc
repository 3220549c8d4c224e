// Protocol tests for device/responder.cc: hand-made request packets are fed
// to QP B, and the replies B puts on the wire are taken off the loopback port
// and checked field by field (IBA 9.7.4 - 9.7.5). QP A, B's peer, never sees
// them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "device/test_env.h"

namespace uroce::device {
namespace {

using net::AtomicEth;
using net::Reth;

// RC opcodes (IBA table 38).
constexpr uint8_t kSendFirst = 0x00, kSendMiddle = 0x01, kSendOnly = 0x04, kSendOnlyImm = 0x05,
                  kWriteFirst = 0x06, kWriteLast = 0x08, kWriteOnly = 0x0a, kReadRequest = 0x0c,
                  kReadRespFirst = 0x0d, kReadRespMiddle = 0x0e, kReadRespLast = 0x0f,
                  kReadRespOnly = 0x10, kAck = 0x11, kAtomicAck = 0x12, kCompareSwap = 0x13,
                  kFetchAdd = 0x14, kAtomicWrite = 0x1d;
// AETH syndromes (IBA table 44).
constexpr uint8_t kSynAck = 0x1f, kSynRnr = 0x20, kSynPsnSeq = 0x60, kSynInvalid = 0x61,
                  kSynAccess = 0x62, kSynOpError = 0x63;
constexpr uint32_t kPsn = 1000;  // what B expects first (see PairFixture::make_pair)

class ResponderTest : public PairFixture {
 protected:
  void SetUp() override {
    PairFixture::SetUp();
    make_pair(IBV_QPT_RC);
    payload_.resize(4096);
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
  auto atomic(uint64_t va, uint32_t rkey, uint64_t swap_add, uint64_t compare) {
    return [=](net::Packet& p) {
      auto* a = p.hdr<AtomicEth>(p.info().atomiceth_off);
      a->va = va;
      a->rkey = rkey;
      a->swap_add = swap_add;
      a->compare = compare;
    };
  }

  // Exactly one frame from the step; returns it.
  Frame one_frame() {
    auto f = step();
    EXPECT_EQ(f.size(), 1u);
    return f.empty() ? Frame{} : f[0];
  }
  void expect_nak(uint8_t syndrome, uint32_t psn) {
    Frame f = one_frame();
    EXPECT_EQ(f.opcode, kAck);
    EXPECT_EQ(f.qpn, a_);
    EXPECT_EQ(f.syndrome, syndrome);
    EXPECT_EQ(f.psn, psn);
  }

  std::vector<uint8_t> payload_;
};

TEST_F(ResponderTest, SendOnlyIsAckedWithTheMsn) {
  post_recv(B(), 1, {sge(b(0), 256, b_key_)});
  inject(kSendOnly, b_, kPsn, true, payload_.data(), 32);
  Frame f = one_frame();
  EXPECT_EQ(f.opcode, kAck);
  EXPECT_EQ(f.qpn, a_);
  EXPECT_EQ(f.psn, kPsn);
  EXPECT_EQ(f.syndrome, kSynAck);
  EXPECT_EQ(f.msn, 1u);
  EXPECT_FALSE(f.ack_req);
  abi::Cqe r = one_cqe(b_rcq_);
  EXPECT_EQ(r.status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(r.byte_len, 32u);
  EXPECT_EQ(std::memcmp(b(0), payload_.data(), 32), 0);
  EXPECT_EQ(B().resp_epsn, kPsn + 1);
}

// Requests received in one burst are answered by one ACK, for the last of
// them, with the MSN as of it (IBA 9.7.5.1.2: an ACK covers those before
// it); an ACK never overtakes an answer queued behind it.
TEST_F(ResponderTest, OneAckAnswersABurstOfRequests) {
  for (uint64_t i = 0; i < 3; ++i) post_recv(B(), i + 1, {sge(b(256 * i), 256, b_key_)});
  for (uint32_t i = 0; i < 3; ++i) inject(kSendOnly, b_, kPsn + i, true, payload_.data(), 32);
  Frame f = one_frame();
  EXPECT_EQ(f.opcode, kAck);
  EXPECT_EQ(f.syndrome, kSynAck);
  EXPECT_EQ(f.psn, kPsn + 2);
  EXPECT_EQ(f.msn, 3u);
  EXPECT_EQ(drain_cq(dev_, b_rcq_).size(), 3u);

  // A SEND, then a READ, then a SEND in one burst: the first ACK, the READ's
  // data, then the last SEND's ACK, in PSN order, each with its own MSN.
  for (uint64_t i = 0; i < 2; ++i) post_recv(B(), 10 + i, {sge(b(1024 + 256 * i), 256, b_key_)});
  inject(kSendOnly, b_, kPsn + 3, true, payload_.data(), 32);
  inject(kReadRequest, b_, kPsn + 4, true, reth(b_addr(0), b_key_, 16));
  inject(kSendOnly, b_, kPsn + 5, true, payload_.data(), 32);
  auto frames = step();
  ASSERT_EQ(frames.size(), 3u);
  EXPECT_EQ(frames[0].opcode, kAck);
  EXPECT_EQ(frames[0].psn, kPsn + 3);
  EXPECT_EQ(frames[0].msn, 4u);
  EXPECT_EQ(frames[1].opcode, kReadRespOnly);
  EXPECT_EQ(frames[1].psn, kPsn + 4);
  EXPECT_EQ(frames[2].opcode, kAck);
  EXPECT_EQ(frames[2].psn, kPsn + 5);
  EXPECT_EQ(frames[2].msn, 6u);
}

TEST_F(ResponderTest, NoAckWithoutAckReq) {
  post_recv(B(), 1, {sge(b(0), 256, b_key_)});
  inject(kSendOnly, b_, kPsn, false, payload_.data(), 32);
  EXPECT_TRUE(step().empty());
  EXPECT_EQ(one_cqe(b_rcq_).status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(B().resp_epsn, kPsn + 1);
}

TEST_F(ResponderTest, SendWithImmediateCarriesItToTheCqe) {
  post_recv(B(), 1, {sge(b(0), 256, b_key_)});
  inject(kSendOnlyImm, b_, kPsn, true,
         [](net::Packet& p) { p.hdr<net::ImmDt>(p.info().imm_off)->imm = 0x78563412; },
         payload_.data(), 8);
  EXPECT_EQ(one_frame().syndrome, kSynAck);
  abi::Cqe r = one_cqe(b_rcq_);
  EXPECT_EQ(r.imm_data, 0x78563412u);  // network order, untouched
  EXPECT_NE(r.wc_flags & IBV_WC_WITH_IMM, 0u);
}

TEST_F(ResponderTest, DuplicateSendIsAckedAgainNotDeliveredAgain) {
  post_recv(B(), 1, {sge(b(0), 256, b_key_)});
  post_recv(B(), 2, {sge(b(256), 256, b_key_)});
  inject(kSendOnly, b_, kPsn, true, payload_.data(), 32);
  EXPECT_EQ(one_frame().psn, kPsn);
  inject(kSendOnly, b_, kPsn, true, payload_.data(), 32);  // the ACK was lost
  Frame f = one_frame();
  EXPECT_EQ(f.syndrome, kSynAck);
  EXPECT_EQ(f.psn, kPsn);
  EXPECT_EQ(counters().rx_duplicate, 1u);
  EXPECT_EQ(drain_cq(dev_, b_rcq_).size(), 1u);
  EXPECT_EQ(B().rq.hdr->consumer.load(), 1u);  // the second receive is untouched
}

TEST_F(ResponderTest, PsnAheadIsNakedOncePerGap) {
  post_recv(B(), 1, {sge(b(0), 256, b_key_)});
  inject(kSendOnly, b_, kPsn + 2, true, payload_.data(), 8);
  expect_nak(kSynPsnSeq, kPsn);  // the PSN B expects
  inject(kSendOnly, b_, kPsn + 3, true, payload_.data(), 8);
  EXPECT_TRUE(step().empty());  // IBA C9-112: one NAK until the gap closes
  EXPECT_EQ(counters().rx_out_of_seq, 2u);
  EXPECT_EQ(counters().nak_sent, 1u);
  EXPECT_TRUE(drain_cq(dev_, b_rcq_).empty());
  inject(kSendOnly, b_, kPsn, true, payload_.data(), 8);
  EXPECT_EQ(one_frame().syndrome, kSynAck);
  EXPECT_EQ(one_cqe(b_rcq_).status, uint32_t(IBV_WC_SUCCESS));
  // A new gap gets a new NAK.
  inject(kSendOnly, b_, kPsn + 5, true, payload_.data(), 8);
  expect_nak(kSynPsnSeq, kPsn + 1);
}

TEST_F(ResponderTest, MiddleWithoutFirstIsInvalidRequest) {
  post_recv(B(), 1, {sge(b(0), 4096, b_key_)});
  inject(kSendMiddle, b_, kPsn, true, payload_.data(), 1024);
  expect_nak(kSynInvalid, kPsn);
  EXPECT_EQ(B().state, IBV_QPS_ERR);
  EXPECT_EQ(one_cqe(b_rcq_).status, uint32_t(IBV_WC_WR_FLUSH_ERR));
}

TEST_F(ResponderTest, WriteInsideASendIsInvalidRequest) {
  post_recv(B(), 1, {sge(b(0), 4096, b_key_)});
  inject(kSendFirst, b_, kPsn, false, payload_.data(), 1024);
  EXPECT_TRUE(step().empty());
  inject(kWriteLast, b_, kPsn + 1, true, payload_.data(), 10);
  expect_nak(kSynInvalid, kPsn + 1);
  EXPECT_EQ(B().state, IBV_QPS_ERR);
}

TEST_F(ResponderTest, FirstPacketShorterThanTheMtuIsInvalidRequest) {
  // IBA C9-59: every packet but the last carries exactly one path MTU.
  post_recv(B(), 1, {sge(b(0), 4096, b_key_)});
  inject(kSendFirst, b_, kPsn, true, payload_.data(), 100);
  expect_nak(kSynInvalid, kPsn);
  EXPECT_EQ(B().state, IBV_QPS_ERR);
}

TEST_F(ResponderTest, PayloadOverThePathMtuIsInvalidRequest) {
  post_recv(B(), 1, {sge(b(0), 4096, b_key_)});
  inject(kSendOnly, b_, kPsn, true, payload_.data(), 2048);  // path MTU 1024
  expect_nak(kSynInvalid, kPsn);
}

TEST_F(ResponderTest, WriteLongerThanItsDmaLengthIsInvalidRequest) {
  std::vector<uint8_t> before(b(0), b(200));
  inject(kWriteOnly, b_, kPsn, true, reth(b_addr(0), b_key_, 50), payload_.data(), 100);
  expect_nak(kSynInvalid, kPsn);
  EXPECT_TRUE(std::equal(before.begin(), before.end(), b(0)));
}

TEST_F(ResponderTest, WriteShorterThanItsDmaLengthIsInvalidRequest) {
  inject(kWriteOnly, b_, kPsn, true, reth(b_addr(0), b_key_, 100), payload_.data(), 50);
  expect_nak(kSynInvalid, kPsn);
}

TEST_F(ResponderTest, MultiPacketWriteLandsAtTheRethAddress) {
  inject(kWriteFirst, b_, kPsn, false, reth(b_addr(100), b_key_, 1500), payload_.data(), 1024);
  inject(kWriteLast, b_, kPsn + 1, true, payload_.data() + 1024, 476);
  Frame f = one_frame();
  EXPECT_EQ(f.syndrome, kSynAck);
  EXPECT_EQ(f.psn, kPsn + 1);
  EXPECT_EQ(std::memcmp(b(100), payload_.data(), 1500), 0);
  EXPECT_TRUE(drain_cq(dev_, b_rcq_).empty());
}

TEST_F(ResponderTest, WriteToAnMrOfAnotherPdIsRemoteAccessError) {
  auto pd2 = dev_.alloc_pd(&owner_);
  ASSERT_EQ(pd2.err, 0);
  const uint32_t key2 = reg_mr(b(0), 4096, kAllAccess, pd2.value);
  std::vector<uint8_t> before(b(0), b(64));
  inject(kWriteOnly, b_, kPsn, true, reth(b_addr(0), key2, 64), payload_.data(), 64);
  expect_nak(kSynAccess, kPsn);
  EXPECT_TRUE(std::equal(before.begin(), before.end(), b(0)));
  EXPECT_EQ(B().state, IBV_QPS_ERR);
}

// An MR deregistered between a WRITE's FIRST and LAST packets whose key
// comes back (the index reused, the 8-bit generation wrapped) as an MR of
// another PD: the rest of the WRITE lands nowhere (IBA C10-14), and the
// requester gets a remote access error.
TEST_F(ResponderTest, KeyReusedByAnotherPdMidWriteWritesNothing) {
  std::vector<uint8_t> target(4096, 0), victim(4096, 0x5e);
  const uint32_t key = reg_mr(target.data(), target.size(), kAllAccess);
  inject(kWriteFirst, b_, kPsn, false, reth(reinterpret_cast<uint64_t>(target.data()), key, 2048),
         payload_.data(), 1024);
  step();
  ASSERT_EQ(std::memcmp(target.data(), payload_.data(), 1024), 0);
  ASSERT_EQ(dev_.dereg_mr(&owner_, key), 0);
  auto pd2 = dev_.alloc_pd(&owner_);
  ASSERT_EQ(pd2.err, 0);
  uint32_t reused = 0;
  for (int i = 0; i < 600 && reused != key; ++i) {
    reused = reg_mr(victim.data(), victim.size(), kAllAccess, pd2.value);
    if (reused != key) {
      ASSERT_EQ(dev_.dereg_mr(&owner_, reused), 0);
    }
  }
  ASSERT_EQ(reused, key) << "the key never came back";
  inject(kWriteLast, b_, kPsn + 1, true, payload_.data() + 1024, 1024);
  expect_nak(kSynAccess, kPsn + 1);
  EXPECT_TRUE(std::all_of(target.begin() + 1024, target.end(), [](uint8_t c) { return c == 0; }))
      << "bytes of the WRITE landed through a key that is another PD's now";
  EXPECT_TRUE(std::all_of(victim.begin(), victim.end(), [](uint8_t c) { return c == 0x5e; }));
}

// The same for the responses of a READ still being answered: a READ longer
// than one poll's budget of response packets (kRequesterBudget) is answered
// over several polls; its key reused by another PD in between, the rest of
// the answer reads nothing.
TEST_F(ResponderTest, KeyReusedByAnotherPdMidReadReadsNothing) {
  const uint32_t len = (kRequesterBudget + 4) * 1024;
  std::vector<uint8_t> target(len, 0x11), victim(len, 0x5e);
  const uint32_t key = reg_mr(target.data(), target.size(), kAllAccess);
  inject(kReadRequest, b_, kPsn, true, reth(reinterpret_cast<uint64_t>(target.data()), key, len));
  const auto first = step();
  ASSERT_EQ(first.size(), kRequesterBudget) << "the READ was answered in one poll";
  ASSERT_EQ(dev_.dereg_mr(&owner_, key), 0);
  auto pd2 = dev_.alloc_pd(&owner_);
  ASSERT_EQ(pd2.err, 0);
  uint32_t reused = 0;
  for (int i = 0; i < 600 && reused != key; ++i) {
    reused = reg_mr(victim.data(), victim.size(), kAllAccess, pd2.value);
    if (reused != key) {
      ASSERT_EQ(dev_.dereg_mr(&owner_, reused), 0);
    }
  }
  ASSERT_EQ(reused, key) << "the key never came back";
  const auto rest = step();
  for (const Frame& f : rest)
    EXPECT_TRUE(f.payload.empty()) << "READ response data through a key that is another PD's now";
  ASSERT_FALSE(rest.empty());
  EXPECT_EQ(rest.back().opcode, kAck);
  EXPECT_EQ(rest.back().syndrome, kSynAccess);
  EXPECT_EQ(B().state, IBV_QPS_ERR);
}

TEST_F(ResponderTest, WriteToAReadOnlyMrIsRemoteAccessError) {
  const uint32_t ro = reg_mr(b(0), 4096, IBV_ACCESS_REMOTE_READ);
  inject(kWriteOnly, b_, kPsn, true, reth(b_addr(0), ro, 64), payload_.data(), 64);
  expect_nak(kSynAccess, kPsn);
}

TEST_F(ResponderTest, ReadResponsesAreSegmentedByThePathMtu) {
  inject(kReadRequest, b_, kPsn, true, reth(b_addr(10), b_key_, 2500));
  auto f = step();
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(f[0].opcode, kReadRespFirst);
  EXPECT_EQ(f[1].opcode, kReadRespMiddle);
  EXPECT_EQ(f[2].opcode, kReadRespLast);
  for (uint32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(f[i].psn, kPsn + i);
    EXPECT_EQ(f[i].qpn, a_);
  }
  EXPECT_EQ(f[0].syndrome, kSynAck);  // FIRST and LAST carry an AETH, MIDDLE none
  EXPECT_EQ(f[2].syndrome, kSynAck);
  EXPECT_EQ(f[2].msn, 1u);
  std::vector<uint8_t> got;
  for (const Frame& x : f) got.insert(got.end(), x.payload.begin(), x.payload.end());
  ASSERT_EQ(got.size(), 2500u);
  EXPECT_EQ(std::memcmp(got.data(), b(10), 2500), 0);
  EXPECT_EQ(f[0].payload.size(), 1024u);
  EXPECT_EQ(B().resp_epsn, kPsn + 3);  // a READ uses one PSN per response packet
}

TEST_F(ResponderTest, ZeroLengthReadNeedsNoKey) {
  inject(kReadRequest, b_, kPsn, true, reth(0, 0, 0));
  Frame f = one_frame();
  EXPECT_EQ(f.opcode, kReadRespOnly);
  EXPECT_EQ(f.psn, kPsn);
  EXPECT_TRUE(f.payload.empty());
  EXPECT_EQ(B().state, IBV_QPS_RTS);
}

TEST_F(ResponderTest, ReadBeyondTheMrIsRemoteAccessError) {
  inject(kReadRequest, b_, kPsn, true, reth(b_addr(kBufSize - 10), b_key_, 20));
  expect_nak(kSynAccess, kPsn);
  EXPECT_EQ(B().state, IBV_QPS_ERR);
}

TEST_F(ResponderTest, ReadWithoutRemoteReadOnTheQpIsRemoteAccessError) {
  abi::QpAttr a = default_attr();
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
  ASSERT_EQ(modify(b_, IBV_QP_ACCESS_FLAGS, a), 0);  // RTS -> RTS
  inject(kReadRequest, b_, kPsn, true, reth(b_addr(0), b_key_, 16));
  expect_nak(kSynAccess, kPsn);
}

TEST_F(ResponderTest, DuplicateReadIsAnsweredAgain) {
  inject(kReadRequest, b_, kPsn, true, reth(b_addr(0), b_key_, 100));
  EXPECT_EQ(one_frame().opcode, kReadRespOnly);
  inject(kReadRequest, b_, kPsn, true, reth(b_addr(0), b_key_, 100));
  Frame f = one_frame();
  EXPECT_EQ(f.opcode, kReadRespOnly);
  EXPECT_EQ(f.psn, kPsn);
  EXPECT_EQ(std::memcmp(f.payload.data(), b(0), 100), 0);
  EXPECT_EQ(counters().rx_duplicate, 1u);
}

TEST_F(ResponderTest, AtomicAckCarriesTheOriginalValue) {
  uint64_t* target = reinterpret_cast<uint64_t*>(b(256));
  *target = 42;
  inject(kCompareSwap, b_, kPsn, true, atomic(b_addr(256), b_key_, 99, 42));
  Frame f = one_frame();
  EXPECT_EQ(f.opcode, kAtomicAck);
  EXPECT_EQ(f.psn, kPsn);
  EXPECT_EQ(f.syndrome, kSynAck);
  EXPECT_EQ(f.atomic_orig, 42u);
  EXPECT_EQ(*target, 99u);
  inject(kFetchAdd, b_, kPsn + 1, true, atomic(b_addr(256), b_key_, 1, 0));
  f = one_frame();
  EXPECT_EQ(f.atomic_orig, 99u);
  EXPECT_EQ(*target, 100u);
  // A duplicate is answered from the replay cache, not executed again.
  inject(kFetchAdd, b_, kPsn + 1, true, atomic(b_addr(256), b_key_, 1, 0));
  f = one_frame();
  EXPECT_EQ(f.opcode, kAtomicAck);
  EXPECT_EQ(f.atomic_orig, 99u);
  EXPECT_EQ(*target, 100u);
}

TEST_F(ResponderTest, AtomicWithoutRemoteAtomicOnTheMrIsRemoteAccessError) {
  const uint32_t rw = reg_mr(b(0), 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  uint64_t* target = reinterpret_cast<uint64_t*>(b(0));
  *target = 5;
  inject(kFetchAdd, b_, kPsn, true, atomic(b_addr(0), rw, 1, 0));
  expect_nak(kSynAccess, kPsn);
  EXPECT_EQ(*target, 5u);
}

// ---- ATOMIC WRITE (IBA 1.5 annex A19; rxe_resp.c atomic_write_reply) ----

TEST_F(ResponderTest, AtomicWriteStoresItsBytesAndIsAnsweredByAnEmptyReadResponse) {
  const uint8_t value[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  inject(kAtomicWrite, b_, kPsn, true, reth(b_addr(64), b_key_, 8), value, 8);
  Frame f = one_frame();
  EXPECT_EQ(f.opcode, kReadRespOnly);
  EXPECT_EQ(f.qpn, a_);
  EXPECT_EQ(f.psn, kPsn);
  EXPECT_EQ(f.syndrome, kSynAck);
  EXPECT_EQ(f.msn, 1u);
  EXPECT_TRUE(f.payload.empty());
  EXPECT_EQ(std::memcmp(b(64), value, 8), 0);  // the bytes in the order they came
  EXPECT_EQ(B().resp_epsn, kPsn + 1);
  EXPECT_TRUE(drain_cq(dev_, b_rcq_).empty());  // no receive WQE, no completion
  // A duplicate (its answer was lost) is answered again, not executed again.
  std::memset(b(64), 0, 8);
  inject(kAtomicWrite, b_, kPsn, true, reth(b_addr(64), b_key_, 8), value, 8);
  f = one_frame();
  EXPECT_EQ(f.opcode, kReadRespOnly);
  EXPECT_EQ(f.psn, kPsn);
  EXPECT_EQ(f.syndrome, kSynAck);
  EXPECT_EQ(counters().rx_duplicate, 1u);
  EXPECT_EQ(*reinterpret_cast<uint64_t*>(b(64)), 0u);
}

TEST_F(ResponderTest, AtomicWriteAnswerWaitsBehindReadData) {
  // Responses leave in PSN order (IBA 9.7.5.1.1): READ data first.
  inject(kReadRequest, b_, kPsn, true, reth(b_addr(0), b_key_, 3000));
  const uint64_t value = 0x1122334455667788ull;
  inject(kAtomicWrite, b_, kPsn + 3, true, reth(b_addr(4096), b_key_, 8), &value, 8);
  std::vector<Frame> all;
  for (int i = 0; i < 4 && all.size() < 4; ++i) {
    auto f = step();
    all.insert(all.end(), f.begin(), f.end());
  }
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[0].opcode, kReadRespFirst);
  EXPECT_EQ(all[2].opcode, kReadRespLast);
  EXPECT_EQ(all[3].opcode, kReadRespOnly);
  EXPECT_EQ(all[3].psn, kPsn + 3);
  EXPECT_TRUE(all[3].payload.empty());
  EXPECT_EQ(*reinterpret_cast<uint64_t*>(b(4096)), value);
}

TEST_F(ResponderTest, MisalignedAtomicWriteIsInvalidRequest) {
  const uint64_t before = *reinterpret_cast<uint64_t*>(b(64));
  const uint64_t value = ~0ull;
  inject(kAtomicWrite, b_, kPsn, true, reth(b_addr(68), b_key_, 8), &value, 8);
  expect_nak(kSynInvalid, kPsn);  // rxe: RESPST_ERR_MISALIGNED_ATOMIC, class C
  EXPECT_EQ(*reinterpret_cast<uint64_t*>(b(64)), before);
  EXPECT_EQ(B().state, IBV_QPS_ERR);
}

TEST_F(ResponderTest, AtomicWriteOfOtherThanEightBytesIsInvalidRequest) {
  std::vector<uint8_t> sixteen(16, 0xab);
  std::memset(b(64), 0, 16);
  inject(kAtomicWrite, b_, kPsn, true, reth(b_addr(64), b_key_, 16), sixteen.data(), 16);
  expect_nak(kSynInvalid, kPsn);
  EXPECT_EQ(b(64)[0], 0);
}

TEST_F(ResponderTest, AtomicWriteNeedsRemoteWriteNotRemoteAtomic) {
  // As rxe checks it: IB_ACCESS_REMOTE_WRITE on the QP and the memory.
  const uint32_t atomic_only = reg_mr(b(0), 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
  const uint64_t value = 0x0102030405060708ull;
  std::memset(b(0), 0, 8);
  inject(kAtomicWrite, b_, kPsn, true, reth(b_addr(0), atomic_only, 8), &value, 8);
  expect_nak(kSynAccess, kPsn);
  EXPECT_EQ(*reinterpret_cast<uint64_t*>(b(0)), 0u);
}

TEST_F(ResponderTest, AtomicWriteToAMemoryWithRemoteWriteOnlySucceeds) {
  const uint32_t write_only = reg_mr(b(0), 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  const uint64_t value = 0x0102030405060708ull;
  inject(kAtomicWrite, b_, kPsn, true, reth(b_addr(8), write_only, 8), &value, 8);
  EXPECT_EQ(one_frame().opcode, kReadRespOnly);
  EXPECT_EQ(*reinterpret_cast<uint64_t*>(b(8)), value);
}

TEST_F(ResponderTest, AtomicWriteWithABadRkeyIsRemoteAccessError) {
  const uint64_t value = 1;
  inject(kAtomicWrite, b_, kPsn, true, reth(b_addr(0), b_key_ ^ 0x80, 8), &value, 8);
  expect_nak(kSynAccess, kPsn);
}

TEST_F(ResponderTest, RnrNakCarriesTheMinRnrTimer) {
  inject(kSendOnly, b_, kPsn, true, payload_.data(), 8);
  Frame f = one_frame();
  EXPECT_EQ(f.opcode, kAck);
  EXPECT_EQ(f.syndrome, kSynRnr | default_attr().min_rnr_timer);
  EXPECT_EQ(f.psn, kPsn);
  EXPECT_EQ(B().resp_epsn, kPsn);  // the same PSN is expected again
  EXPECT_EQ(B().state, IBV_QPS_RTS);
  EXPECT_EQ(counters().rnr_nak_sent, 1u);
}

TEST_F(ResponderTest, BadReceiveWqeIsRemoteOperationError) {
  post_recv(B(), 1, {sge(b(0), 64, b_key_ ^ 0x20)});
  inject(kSendOnly, b_, kPsn, true, payload_.data(), 8);
  expect_nak(kSynOpError, kPsn);
  EXPECT_EQ(one_cqe(b_rcq_).status, uint32_t(IBV_WC_LOC_PROT_ERR));
}

TEST_F(ResponderTest, QpNotReadyToReceiveDropsRequests) {
  ASSERT_EQ(to_state(b_, IBV_QPS_ERR), 0);
  inject(kSendOnly, b_, kPsn, true, payload_.data(), 8);
  EXPECT_TRUE(step().empty());
  const uint32_t init = create_qp(IBV_QPT_RC, b_scq_, b_rcq_);
  abi::QpAttr a = default_attr();
  a.qp_state = IBV_QPS_INIT;
  ASSERT_EQ(modify(init, kRcInitMask, a), 0);
  inject(kSendOnly, init, 0, true, payload_.data(), 8);
  EXPECT_TRUE(step().empty());
  EXPECT_EQ(counters().rx_bad_state, 2u);
}

}  // namespace
}  // namespace uroce::device
