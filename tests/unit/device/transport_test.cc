// Transport protocol tests, the data path (SEND, RDMA WRITE, READ, atomics):
// device/requester.cc, responder.cc,
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

// ---- ATOMIC WRITE (IBA 1.5 annex A19) --------------------------------------

TEST_F(TransportTest, AtomicWritePlacesItsEightBytesAtOnce) {
  make_pair(IBV_QPT_RC);
  abi::SendWqe w = wqe(IBV_WR_ATOMIC_WRITE, 70);
  w.remote_addr = b_addr(256);
  w.rkey = b_key_;
  w.compare_add = 0x8877665544332211ull;
  post_send(A(), w);
  w.wr_id = 71;
  w.remote_addr = b_addr(264);
  w.compare_add = 0x0123456789abcdefull;
  post_send(A(), w);
  ASSERT_TRUE(run());
  auto s = drain_cq(dev_, a_scq_);
  ASSERT_EQ(s.size(), 2u);
  for (const abi::Cqe& c : s) {
    EXPECT_EQ(c.status, uint32_t(IBV_WC_SUCCESS));
    EXPECT_EQ(c.opcode, uint32_t(IBV_WC_ATOMIC_WRITE));
    EXPECT_EQ(c.byte_len, 8u);
  }
  EXPECT_EQ(s[0].wr_id, 70u);
  EXPECT_EQ(s[1].wr_id, 71u);
  EXPECT_EQ(*reinterpret_cast<uint64_t*>(b(256)), 0x8877665544332211ull);
  EXPECT_EQ(*reinterpret_cast<uint64_t*>(b(264)), 0x0123456789abcdefull);
  EXPECT_TRUE(drain_cq(dev_, b_rcq_).empty());
  EXPECT_EQ(A().state, IBV_QPS_RTS);
  EXPECT_EQ(B().state, IBV_QPS_RTS);
}

TEST_F(TransportTest, MisalignedAtomicWriteIsInvalidRequest) {
  make_pair(IBV_QPT_RC);
  abi::SendWqe w = wqe(IBV_WR_ATOMIC_WRITE, 1);
  w.remote_addr = b_addr(260);  // not 8-byte aligned: rxe's RESPST_ERR_MISALIGNED_ATOMIC
  w.rkey = b_key_;
  w.compare_add = ~0ull;
  post_send(A(), w);
  ASSERT_TRUE(run());
  abi::Cqe c = one_cqe(a_scq_);
  EXPECT_EQ(c.status, uint32_t(IBV_WC_REM_INV_REQ_ERR));
  EXPECT_EQ(c.opcode, uint32_t(IBV_WC_ATOMIC_WRITE));
  EXPECT_EQ(A().state, IBV_QPS_ERR);
}

TEST_F(TransportTest, AtomicWriteWithAWrongRkeyIsRemoteAccessError) {
  make_pair(IBV_QPT_RC);
  abi::SendWqe w = wqe(IBV_WR_ATOMIC_WRITE, 1);
  w.remote_addr = b_addr(256);
  w.rkey = b_key_ ^ 0x80;
  post_send(A(), w);
  ASSERT_TRUE(run());
  EXPECT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_REM_ACCESS_ERR));
}

}  // namespace
}  // namespace uroce::device
