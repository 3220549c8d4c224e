// Protocol tests for the transport: device/requester.cc, responder.cc,
// completer.cc and datapath.cc. Two QPs of one Device talk through the
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

class TransportTest : public PairFixture {};

// ---- SEND ------------------------------------------------------------------

TEST_F(TransportTest, RcSendSinglePacket) {
  make_pair(IBV_QPT_RC);
  post_recv(B(), 77, {sge(b(0), 256, b_key_)});
  post_send(A(), wqe(IBV_WR_SEND, 55), {sge(a(0), 100, a_key_)});
  ASSERT_TRUE(run());

  abi::Cqe s = one_cqe(a_scq_);
  EXPECT_EQ(s.wr_id, 55u);
  EXPECT_EQ(s.status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(s.opcode, uint32_t(IBV_WC_SEND));
  EXPECT_EQ(s.qp_num, a_);
  abi::Cqe r = one_cqe(b_rcq_);
  EXPECT_EQ(r.wr_id, 77u);
  EXPECT_EQ(r.status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(r.opcode, uint32_t(IBV_WC_RECV));
  EXPECT_EQ(r.byte_len, 100u);
  EXPECT_EQ(r.qp_num, b_);
  EXPECT_EQ(r.src_qp, a_);
  EXPECT_EQ(r.wc_flags & IBV_WC_WITH_IMM, 0u);
  EXPECT_EQ(std::memcmp(b(0), a(0), 100), 0);
  EXPECT_NE(b(0)[100], a(0)[100]);  // nothing past the message
  // Both rings were consumed.
  EXPECT_EQ(A().sq.hdr->consumer.load(), 1u);
  EXPECT_EQ(B().rq.hdr->consumer.load(), 1u);
  EXPECT_TRUE(drain_cq(dev_, a_rcq_).empty());
  EXPECT_TRUE(drain_cq(dev_, b_scq_).empty());
}

TEST_F(TransportTest, RcSendMultiPacketWithScatterGather) {
  make_pair(IBV_QPT_RC);  // path MTU 1024
  // 10000 bytes from three SGEs into two SGEs: 10 packets.
  post_recv(B(), 1, {sge(b(0), 3000, b_key_), sge(b(20000), 8000, b_key_)});
  post_send(A(), wqe(IBV_WR_SEND, 2),
            {sge(a(0), 4000, a_key_), sge(a(10000), 1, a_key_), sge(a(30000), 5999, a_key_)});
  const uint64_t tx_before = counters().tx_packets;
  ASSERT_TRUE(run());
  EXPECT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_SUCCESS));
  abi::Cqe r = one_cqe(b_rcq_);
  EXPECT_EQ(r.status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(r.byte_len, 10000u);

  std::vector<uint8_t> sent;
  sent.insert(sent.end(), a(0), a(4000));
  sent.insert(sent.end(), a(10000), a(10001));
  sent.insert(sent.end(), a(30000), a(35999));
  std::vector<uint8_t> got;
  got.insert(got.end(), b(0), b(3000));
  got.insert(got.end(), b(20000), b(27000));
  EXPECT_EQ(got, sent);
  // Ten request packets and at least one ACK.
  EXPECT_GE(counters().tx_packets - tx_before, 11u);
  EXPECT_EQ(counters().retransmits, 0u);
}

TEST_F(TransportTest, RcSendWithImmAndInline) {
  make_pair(IBV_QPT_RC);
  post_recv(B(), 1, {sge(b(0), 64, b_key_)});
  post_recv(B(), 2, {sge(b(64), 64, b_key_)});
  abi::SendWqe w = wqe(IBV_WR_SEND_WITH_IMM, 10);
  w.imm_data = htonl(0xcafe1234);
  post_send(A(), w, {sge(a(0), 16, a_key_)});
  const char text[] = "inline payload!";
  abi::SendWqe in = wqe(IBV_WR_SEND, 11, IBV_SEND_SIGNALED | IBV_SEND_INLINE);
  in.inline_len = sizeof(text);
  post_send(A(), in, {}, text);
  ASSERT_TRUE(run());
  auto s = drain_cq(dev_, a_scq_);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].wr_id, 10u);
  EXPECT_EQ(s[1].wr_id, 11u);
  auto r = drain_cq(dev_, b_rcq_);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_NE(r[0].wc_flags & IBV_WC_WITH_IMM, 0u);
  EXPECT_EQ(r[0].imm_data, htonl(0xcafe1234));
  EXPECT_EQ(r[0].byte_len, 16u);
  EXPECT_EQ(r[1].status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(r[1].byte_len, sizeof(text));
  EXPECT_EQ(r[1].wc_flags & IBV_WC_WITH_IMM, 0u);
  EXPECT_STREQ(reinterpret_cast<const char*>(b(64)), text);
}

TEST_F(TransportTest, UnsignaledSendCompletesWithoutCqe) {
  make_pair(IBV_QPT_RC);
  post_recv(B(), 1, {sge(b(0), 64, b_key_)});
  post_recv(B(), 2, {sge(b(64), 64, b_key_)});
  post_send(A(), wqe(IBV_WR_SEND, 1, 0), {sge(a(0), 8, a_key_)});
  post_send(A(), wqe(IBV_WR_SEND, 2), {sge(a(8), 8, a_key_)});
  ASSERT_TRUE(run());
  abi::Cqe s = one_cqe(a_scq_);
  EXPECT_EQ(s.wr_id, 2u);
  EXPECT_EQ(A().sq.hdr->consumer.load(), 2u);  // both slots are free again
  EXPECT_EQ(drain_cq(dev_, b_rcq_).size(), 2u);
}

TEST_F(TransportTest, ZeroLengthSend) {
  make_pair(IBV_QPT_RC);
  post_recv(B(), 1, {sge(b(0), 64, b_key_)});
  post_send(A(), wqe(IBV_WR_SEND, 1), {});
  ASSERT_TRUE(run());
  EXPECT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_SUCCESS));
  abi::Cqe r = one_cqe(b_rcq_);
  EXPECT_EQ(r.status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(r.byte_len, 0u);
}

TEST_F(TransportTest, PsnWrapsAt24Bits) {
  a_ = create_qp(IBV_QPT_RC, a_scq_, a_rcq_);
  b_ = create_qp(IBV_QPT_RC, b_scq_, b_rcq_);
  connect(a_, b_, default_attr(), 0xfffffd, 0x000005);
  connect(b_, a_, default_attr(), 0x000005, 0xfffffd);
  post_recv(B(), 1, {sge(b(0), 8192, b_key_)});
  post_send(A(), wqe(IBV_WR_SEND, 1), {sge(a(0), 8000, a_key_)});  // 8 packets
  ASSERT_TRUE(run());
  EXPECT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(one_cqe(b_rcq_).byte_len, 8000u);
  EXPECT_EQ(std::memcmp(b(0), a(0), 8000), 0);
  EXPECT_EQ(A().req_psn, 0x000005u);
  EXPECT_EQ(B().resp_epsn, 0x000005u);
}

TEST_F(TransportTest, LargeSendAcrossManyPolls) {
  // 48 KiB at MTU 256: 192 packets, more than one requester budget per poll
  // and more than one AckReq interval.
  abi::QpAttr attr = default_attr();
  attr.path_mtu = IBV_MTU_256;
  make_pair(IBV_QPT_RC, attr, attr);
  post_recv(B(), 1, {sge(b(0), 48 * 1024, b_key_)});
  post_send(A(), wqe(IBV_WR_SEND, 1), {sge(a(0), 48 * 1024, a_key_)});
  ASSERT_TRUE(run());
  EXPECT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(one_cqe(b_rcq_).byte_len, 48u * 1024);
  EXPECT_EQ(std::memcmp(b(0), a(0), 48 * 1024), 0);
}

// ---- RDMA WRITE ----------------------------------------------------------------

TEST_F(TransportTest, RcRdmaWrite) {
  make_pair(IBV_QPT_RC);
  abi::SendWqe w = wqe(IBV_WR_RDMA_WRITE, 9);
  w.remote_addr = b_addr(5000);
  w.rkey = b_key_;
  post_send(A(), w, {sge(a(100), 3000, a_key_)});
  const uint8_t before = *b(8000);
  ASSERT_TRUE(run());
  abi::Cqe s = one_cqe(a_scq_);
  EXPECT_EQ(s.wr_id, 9u);
  EXPECT_EQ(s.status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(s.opcode, uint32_t(IBV_WC_RDMA_WRITE));
  EXPECT_EQ(std::memcmp(b(5000), a(100), 3000), 0);
  EXPECT_EQ(*b(8000), before);
  EXPECT_TRUE(drain_cq(dev_, b_rcq_).empty());  // plain WRITE consumes no receive
}

TEST_F(TransportTest, RcRdmaWriteWithImm) {
  make_pair(IBV_QPT_RC);
  post_recv(B(), 31, {});  // WRITE_WITH_IMM consumes a receive, data goes to the RETH address
  abi::SendWqe w = wqe(IBV_WR_RDMA_WRITE_WITH_IMM, 30);
  w.remote_addr = b_addr(1000);
  w.rkey = b_key_;
  w.imm_data = htonl(0x01020304);
  post_send(A(), w, {sge(a(0), 2500, a_key_)});
  ASSERT_TRUE(run());
  abi::Cqe s = one_cqe(a_scq_);
  EXPECT_EQ(s.status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(s.opcode, uint32_t(IBV_WC_RDMA_WRITE));
  abi::Cqe r = one_cqe(b_rcq_);
  EXPECT_EQ(r.wr_id, 31u);
  EXPECT_EQ(r.status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(r.opcode, uint32_t(IBV_WC_RECV_RDMA_WITH_IMM));
  EXPECT_NE(r.wc_flags & IBV_WC_WITH_IMM, 0u);
  EXPECT_EQ(r.imm_data, htonl(0x01020304));
  EXPECT_EQ(r.byte_len, 2500u);
  EXPECT_EQ(std::memcmp(b(1000), a(0), 2500), 0);
}

TEST_F(TransportTest, RdmaWriteNeedsRemoteWriteOnTheResponderQp) {
  abi::QpAttr attr_b = default_attr();
  attr_b.qp_access_flags = IBV_ACCESS_REMOTE_READ;  // no remote write
  make_pair(IBV_QPT_RC, default_attr(), attr_b);
  abi::SendWqe w = wqe(IBV_WR_RDMA_WRITE, 1);
  w.remote_addr = b_addr(0);
  w.rkey = b_key_;
  std::vector<uint8_t> before(b(0), b(64));
  post_send(A(), w, {sge(a(0), 64, a_key_)});
  ASSERT_TRUE(run());
  EXPECT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_REM_ACCESS_ERR));
  EXPECT_TRUE(std::equal(before.begin(), before.end(), b(0)));
}

// ---- RDMA READ ------------------------------------------------------------------

TEST_F(TransportTest, RcRdmaReadMultiPacket) {
  make_pair(IBV_QPT_RC);
  abi::SendWqe w = wqe(IBV_WR_RDMA_READ, 40);
  w.remote_addr = b_addr(7);
  w.rkey = b_key_;
  // 5000 bytes: 5 response packets, scattered into two local SGEs.
  post_send(A(), w, {sge(a(0), 1500, a_key_), sge(a(40000), 3500, a_key_)});
  ASSERT_TRUE(run());
  abi::Cqe s = one_cqe(a_scq_);
  EXPECT_EQ(s.wr_id, 40u);
  EXPECT_EQ(s.status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(s.opcode, uint32_t(IBV_WC_RDMA_READ));
  EXPECT_EQ(s.byte_len, 5000u);
  EXPECT_EQ(std::memcmp(a(0), b(7), 1500), 0);
  EXPECT_EQ(std::memcmp(a(40000), b(7 + 1500), 3500), 0);
  EXPECT_TRUE(drain_cq(dev_, b_rcq_).empty());
}

// Regression (fixed in 4ad2f3a): B receives the READ request (PSN P, 3
// response PSNs), the SEND (P+3) and the second READ (P+4) in one RX burst.
// The ACK for the SEND must not overtake the READ responses (IBA 9.7.5:
// responses in PSN order), or A retires the READ's PSNs early and the READ
// ends with IBV_WC_RETRY_EXC_ERR.
TEST_F(TransportTest, ReadsAndSendsCompleteInOrder) {
  make_pair(IBV_QPT_RC);
  post_recv(B(), 1, {sge(b(30000), 64, b_key_)});
  abi::SendWqe r = wqe(IBV_WR_RDMA_READ, 1);
  r.remote_addr = b_addr(0);
  r.rkey = b_key_;
  post_send(A(), r, {sge(a(0), 3000, a_key_)});
  post_send(A(), wqe(IBV_WR_SEND, 2), {sge(a(5000), 64, a_key_)});
  abi::SendWqe r2 = r;
  r2.wr_id = 3;
  r2.remote_addr = b_addr(10000);
  post_send(A(), r2, {sge(a(10000), 100, a_key_)});
  ASSERT_TRUE(run());
  auto s = drain_cq(dev_, a_scq_);
  ASSERT_EQ(s.size(), 3u);
  for (uint32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(s[i].wr_id, i + 1);
    EXPECT_EQ(s[i].status, uint32_t(IBV_WC_SUCCESS));
  }
  EXPECT_EQ(std::memcmp(a(0), b(0), 3000), 0);
  EXPECT_EQ(std::memcmp(a(10000), b(10000), 100), 0);
  EXPECT_EQ(std::memcmp(b(30000), a(5000), 64), 0);
}

// Regression: the same as ReadsAndSendsCompleteInOrder, in its smallest
// form: one READ then one SEND posted together.
TEST_F(TransportTest, ReadFollowedBySend) {
  make_pair(IBV_QPT_RC);
  post_recv(B(), 1, {sge(b(30000), 64, b_key_)});
  abi::SendWqe r = wqe(IBV_WR_RDMA_READ, 1);
  r.remote_addr = b_addr(0);
  r.rkey = b_key_;
  post_send(A(), r, {sge(a(0), 2000, a_key_)});
  post_send(A(), wqe(IBV_WR_SEND, 2), {sge(a(5000), 64, a_key_)});
  ASSERT_TRUE(run());
  auto s = drain_cq(dev_, a_scq_);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].wr_id, 1u);
  EXPECT_EQ(s[0].status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(s[1].status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(std::memcmp(a(0), b(0), 2000), 0);
  EXPECT_EQ(counters().rx_stale_response, 0u);
}

TEST_F(TransportTest, ReadFollowedBySendInSeparatePolls) {
  // The same pair of WQEs works when the READ's responses are out first.
  make_pair(IBV_QPT_RC);
  post_recv(B(), 1, {sge(b(30000), 64, b_key_)});
  abi::SendWqe r = wqe(IBV_WR_RDMA_READ, 1);
  r.remote_addr = b_addr(0);
  r.rkey = b_key_;
  post_send(A(), r, {sge(a(0), 2000, a_key_)});
  ASSERT_TRUE(run());
  post_send(A(), wqe(IBV_WR_SEND, 2), {sge(a(5000), 64, a_key_)});
  ASSERT_TRUE(run());
  auto s = drain_cq(dev_, a_scq_);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(s[1].status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(std::memcmp(a(0), b(0), 2000), 0);
}

// ---- atomics ------------------------------------------------------------------

TEST_F(TransportTest, AtomicCompareAndSwap) {
  make_pair(IBV_QPT_RC);
  uint64_t* target = reinterpret_cast<uint64_t*>(b(64));
  *target = 0x1111222233334444ull;
  abi::SendWqe w = wqe(IBV_WR_ATOMIC_CMP_AND_SWP, 50);
  w.remote_addr = b_addr(64);
  w.rkey = b_key_;
  w.compare_add = 0x1111222233334444ull;
  w.swap = 0xaaaabbbbccccddddull;
  post_send(A(), w, {sge(a(0), 8, a_key_)});
  ASSERT_TRUE(run());
  abi::Cqe s = one_cqe(a_scq_);
  EXPECT_EQ(s.status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(s.opcode, uint32_t(IBV_WC_COMP_SWAP));
  EXPECT_EQ(s.byte_len, 8u);
  uint64_t orig;
  std::memcpy(&orig, a(0), 8);
  EXPECT_EQ(orig, 0x1111222233334444ull);
  EXPECT_EQ(*target, 0xaaaabbbbccccddddull);

  // A compare that does not match leaves memory alone and still returns it.
  w.wr_id = 51;
  w.compare_add = 0x5;
  w.swap = 0x6;
  post_send(A(), w, {sge(a(8), 8, a_key_)});
  ASSERT_TRUE(run());
  EXPECT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_SUCCESS));
  std::memcpy(&orig, a(8), 8);
  EXPECT_EQ(orig, 0xaaaabbbbccccddddull);
  EXPECT_EQ(*target, 0xaaaabbbbccccddddull);
}

TEST_F(TransportTest, AtomicFetchAndAdd) {
  make_pair(IBV_QPT_RC);
  uint64_t* target = reinterpret_cast<uint64_t*>(b(128));
  *target = 0xfffffffffffffff0ull;
  abi::SendWqe w = wqe(IBV_WR_ATOMIC_FETCH_AND_ADD, 60);
  w.remote_addr = b_addr(128);
  w.rkey = b_key_;
  w.compare_add = 0x20;
  post_send(A(), w, {sge(a(0), 8, a_key_)});
  w.wr_id = 61;
  post_send(A(), w, {sge(a(8), 8, a_key_)});
  ASSERT_TRUE(run());
  auto s = drain_cq(dev_, a_scq_);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(s[0].opcode, uint32_t(IBV_WC_FETCH_ADD));
  EXPECT_EQ(s[1].status, uint32_t(IBV_WC_SUCCESS));
  uint64_t r0, r1;
  std::memcpy(&r0, a(0), 8);
  std::memcpy(&r1, a(8), 8);
  EXPECT_EQ(r0, 0xfffffffffffffff0ull);
  EXPECT_EQ(r1, 0x10ull);  // wrapped
  EXPECT_EQ(*target, 0x30ull);
}

TEST_F(TransportTest, MisalignedAtomicIsInvalidRequest) {
  make_pair(IBV_QPT_RC);
  abi::SendWqe w = wqe(IBV_WR_ATOMIC_FETCH_AND_ADD, 1);
  w.remote_addr = b_addr(130);  // not 8-byte aligned (IBA C9-181)
  w.rkey = b_key_;
  w.compare_add = 1;
  post_send(A(), w, {sge(a(0), 8, a_key_)});
  ASSERT_TRUE(run());
  EXPECT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_REM_INV_REQ_ERR));
}

// ---- local errors -----------------------------------------------------------

TEST_F(TransportTest, BadLkeyIsLocalProtectionErrorAndFlushesTheRest) {
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

TEST_F(TransportTest, LkeyOutOfBoundsOrWithoutLocalWriteForRead) {
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

TEST_F(TransportTest, NumSgeBeyondCapsIsAnError) {
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

TEST_F(TransportTest, HugeNumSgeIsAnError) {
  make_pair(IBV_QPT_RC);
  abi::SendWqe w = wqe(IBV_WR_SEND, 1);
  w.num_sge = 0xffffffffu;
  post_send(A(), w, {sge(a(0), 8, a_key_)});
  ASSERT_TRUE(run());
  EXPECT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_LOC_LEN_ERR));
}

TEST_F(TransportTest, InlineLongerThanCapsIsAnError) {
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

TEST_F(TransportTest, OpcodeNotOfTheTransportIsLocalQpOpError) {
  make_pair(IBV_QPT_RC);
  post_send(A(), wqe(IBV_WR_LOCAL_INV, 1), {});
  ASSERT_TRUE(run());
  EXPECT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_LOC_QP_OP_ERR));
  post_send(A(), wqe(0xdeadbeef, 2), {});  // flushed: the QP is in error now
  ASSERT_TRUE(run());
  EXPECT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_WR_FLUSH_ERR));
}

TEST_F(TransportTest, GarbageOpcodeIsLocalQpOpError) {
  make_pair(IBV_QPT_RC);
  post_send(A(), wqe(0xdeadbeef, 2), {});
  ASSERT_TRUE(run());
  EXPECT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_LOC_QP_OP_ERR));
  EXPECT_EQ(counters().bad_wqes, 1u);
}

TEST_F(TransportTest, AtomicWithWrongLengthIsLocalLengthError) {
  make_pair(IBV_QPT_RC);
  abi::SendWqe w = wqe(IBV_WR_ATOMIC_FETCH_AND_ADD, 1);
  w.remote_addr = b_addr(0);
  w.rkey = b_key_;
  post_send(A(), w, {sge(a(0), 4, a_key_)});
  ASSERT_TRUE(run());
  EXPECT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_LOC_LEN_ERR));
}

// ---- hostile ring indices -------------------------------------------------------

TEST_F(TransportTest, HostileSqProducerPutsTheQpInError) {
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

TEST_F(TransportTest, HostileSqProducerBehindTheConsumer) {
  make_pair(IBV_QPT_RC);
  post_recv(B(), 1, {sge(b(0), 64, b_key_)});
  post_send(A(), wqe(IBV_WR_SEND, 1), {sge(a(0), 8, a_key_)});
  ASSERT_TRUE(run());
  ASSERT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_SUCCESS));
  A().sq.hdr->producer.store(A().sq.hdr->consumer.load() - 1);
  ASSERT_TRUE(run());
  EXPECT_EQ(A().state, IBV_QPS_ERR);
}

TEST_F(TransportTest, HostileRqProducerPutsTheResponderInError) {
  make_pair(IBV_QPT_RC);
  B().rq.hdr->producer.store(B().rq.hdr->consumer.load() + 5 * B().rq.size());
  post_send(A(), wqe(IBV_WR_SEND, 1), {sge(a(0), 8, a_key_)});
  ASSERT_TRUE(run());
  EXPECT_EQ(B().state, IBV_QPS_ERR);
  EXPECT_GE(counters().bad_wqes, 1u);
  abi::Cqe s = one_cqe(a_scq_);
  EXPECT_NE(s.status, uint32_t(IBV_WC_SUCCESS));
}

TEST_F(TransportTest, RecvNumSgeBeyondCapsIsAnError) {
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

TEST_F(TransportTest, RecvWithBadLkeyIsLocalProtectionError) {
  make_pair(IBV_QPT_RC);
  post_recv(B(), 5, {sge(b(0), 64, b_key_ + 0x100)});
  post_send(A(), wqe(IBV_WR_SEND, 1), {sge(a(0), 8, a_key_)});
  ASSERT_TRUE(run());
  abi::Cqe r = one_cqe(b_rcq_);
  EXPECT_EQ(r.status, uint32_t(IBV_WC_LOC_PROT_ERR));
  EXPECT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_REM_OP_ERR));
}

// ---- remote errors ------------------------------------------------------------

TEST_F(TransportTest, BadRkeyIsRemoteAccessError) {
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

TEST_F(TransportTest, LongWriteWithBadRkeyIsRemoteAccessError) {
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

TEST_F(TransportTest, RemoteAccessOutOfBoundsAndReadWithoutRights) {
  make_pair(IBV_QPT_RC);
  abi::SendWqe w = wqe(IBV_WR_RDMA_READ, 1);
  w.remote_addr = b_addr(kBufSize - 100);
  w.rkey = b_key_;
  post_send(A(), w, {sge(a(0), 200, a_key_)});  // 100 bytes past B's MR
  ASSERT_TRUE(run());
  EXPECT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_REM_ACCESS_ERR));
}

TEST_F(TransportTest, ReceiveBufferTooSmall) {
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

TEST_F(TransportTest, ReceiveBufferTooSmallForALaterPacket) {
  make_pair(IBV_QPT_RC);
  post_recv(B(), 7, {sge(b(0), 1500, b_key_)});
  post_send(A(), wqe(IBV_WR_SEND, 8), {sge(a(0), 3000, a_key_)});  // fails on the 2nd packet
  ASSERT_TRUE(run());
  EXPECT_EQ(one_cqe(b_rcq_).status, uint32_t(IBV_WC_LOC_LEN_ERR));
  EXPECT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_REM_INV_REQ_ERR));
}

// ---- RNR ---------------------------------------------------------------------

TEST_F(TransportTest, RnrRetryZeroFailsOnTheFirstRnrNak) {
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

TEST_F(TransportTest, RnrRetriesWaitForTheRnrTimer) {
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

TEST_F(TransportTest, RnrRecoversOnceAReceiveIsPosted) {
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

TEST_F(TransportTest, RnrOnWriteWithImmResumesAtTheLastPacket) {
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

TEST_F(TransportTest, PeerDestroyedGivesRetryExceededAfterRetryCntTimeouts) {
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

TEST_F(TransportTest, LostRequestIsRetransmittedAfterTheTimeout) {
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

TEST_F(TransportTest, LostMiddlePacketIsRecoveredByGoBackN) {
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

TEST_F(TransportTest, DuplicateAtomicIsNotExecutedTwice) {
  abi::QpAttr attr_a = default_attr();
  attr_a.timeout = 10;
  make_pair(IBV_QPT_RC, attr_a, default_attr());
  uint64_t* target = reinterpret_cast<uint64_t*>(b(0));
  *target = 100;
  abi::SendWqe w = wqe(IBV_WR_ATOMIC_FETCH_AND_ADD, 1);
  w.remote_addr = b_addr(0);
  w.rkey = b_key_;
  w.compare_add = 5;
  post_send(A(), w, {sge(a(0), 8, a_key_)});
  dev_.poll(now_);  // request out
  dev_.poll(now_);  // executed at B, atomic ACK out
  auto frames = DeviceTestPeer::take_in_flight(dev_);
  ASSERT_EQ(frames.size(), 1u);
  DeviceTestPeer::drop(dev_, frames[0]);  // the ACK is lost
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

TEST_F(TransportTest, LostReadResponseIsRequestedAgain) {
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

TEST_F(TransportTest, WorkPostedInErrorIsFlushed) {
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

// ---- UC -------------------------------------------------------------------------

TEST_F(TransportTest, UcSendAndWrite) {
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

TEST_F(TransportTest, UcReadIsLocalQpOpError) {
  make_pair(IBV_QPT_UC);
  abi::SendWqe w = wqe(IBV_WR_RDMA_READ, 1);
  w.remote_addr = b_addr(0);
  w.rkey = b_key_;
  post_send(A(), w, {sge(a(0), 8, a_key_)});
  ASSERT_TRUE(run());
  EXPECT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_LOC_QP_OP_ERR));
}

TEST_F(TransportTest, UcSendWithoutReceiveIsDropped) {
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

TEST_F(TransportTest, UcLostPacketDropsOnlyThatMessage) {
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

TEST_F(TransportTest, SendWithInvalidateReportsTheRkey) {
  make_pair(IBV_QPT_RC);
  post_recv(B(), 1, {sge(b(0), 64, b_key_)});
  abi::SendWqe w = wqe(IBV_WR_SEND_WITH_INV, 1);
  w.imm_data = 0x12345678;  // the rkey to invalidate
  post_send(A(), w, {sge(a(0), 16, a_key_)});
  ASSERT_TRUE(run());
  EXPECT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_SUCCESS));
  abi::Cqe r = one_cqe(b_rcq_);
  EXPECT_EQ(r.status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_NE(r.wc_flags & IBV_WC_WITH_INV, 0u);
  EXPECT_EQ(r.imm_data, 0x12345678u);
  EXPECT_EQ(r.byte_len, 16u);
}

TEST_F(TransportTest, ZeroLengthWriteAndReadNeedNoKey) {
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

TEST_F(TransportTest, RingsWrapAround) {
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
  void SetUp() override {
    PairFixture::SetUp();
    abi::QpAttr attr = default_attr();
    attr.qkey = kQkey;
    a_ = create_qp(IBV_QPT_UD, a_scq_, a_rcq_);
    b_ = create_qp(IBV_QPT_UD, b_scq_, b_rcq_);
    connect(a_, 0, attr);
    connect(b_, 0, attr);
  }
  abi::SendWqe ud_wqe(uint64_t wr_id, uint32_t qkey) {
    abi::SendWqe w = wqe(IBV_WR_SEND, wr_id);
    w.remote_qpn = b_;
    w.remote_qkey = qkey;
    w.av.is_global = 1;
    w.av.port_num = 1;
    std::memcpy(w.av.dgid, dev_.info().gids[0].gid, 16);
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

TEST_F(TransportTest, MalformedFramesAreCountedAndDropped) {
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

TEST_F(TransportTest, FramesForUnknownQpsOrTheWrongTransportAreCounted) {
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

TEST_F(TransportTest, StatsTextListsEveryCounter) {
  const std::string s = dev_.stats_text();
  for (const char* name : {"rx_parse_errors", "rx_bad_qkey", "rnr_nak_sent", "retry_exceeded",
                           "bad_wqes", "memory_faults"})
    EXPECT_NE(s.find(name), std::string::npos) << name;
}

}  // namespace
}  // namespace uroce::device
