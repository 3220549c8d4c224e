// Verbs semantics: the data path (SEND/RECV, WRITE, READ, atomics, fences,
// ibv_wr_*, ibv_cq_ex); UD and UC are in verbs_transports.cc.
#include <algorithm>

#include "tests/integration/verbs_fixture.h"

namespace vt {
namespace {

// ===========================================================================
// 2. Data path
// ===========================================================================

class DataPath : public VerbsTest {};

TEST_F(DataPath, SendRecvGathersAndScattersSges) {
  Pair p = make_pair();
  ASSERT_FALSE(HasFailure());
  ibv_mr* src = reg_buffer(4096, IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* dst = reg_buffer(4096, IBV_ACCESS_LOCAL_WRITE, 0xee);
  ASSERT_TRUE(src && dst);
  auto* s = static_cast<uint8_t*>(src->addr);
  for (int i = 0; i < 4096; ++i) s[i] = uint8_t(i * 7 + 1);
  // Gather 100 + 1500 + 10 bytes from three places (the message spans two MTUs).
  ibv_sge gather[3] = {sge_of(src, 0, 100), sge_of(src, 1000, 1500), sge_of(src, 3000, 10)};
  // Scatter into 700 + 2000 bytes.
  ibv_sge scatter[2] = {sge_of(dst, 0, 700), sge_of(dst, 1024, 2000)};
  ASSERT_EQ(post_recv(p.b.qp, 500, scatter, 2), 0);
  ASSERT_EQ(post_send(p.a.qp, 501, IBV_WR_SEND, gather, 3), 0);
  ibv_wc wc;
  VT_POLL_ONE(p.a.cq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(wc.opcode, IBV_WC_SEND);
  EXPECT_EQ(wc.wr_id, 501u);
  VT_POLL_ONE(p.b.cq, &wc);
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(wc.opcode, IBV_WC_RECV);
  EXPECT_EQ(wc.wr_id, 500u);
  EXPECT_EQ(wc.byte_len, 1610u);
  EXPECT_EQ(wc.qp_num, p.b.qp->qp_num);
  EXPECT_FALSE(wc.wc_flags & IBV_WC_WITH_IMM);
  std::vector<uint8_t> want;
  want.insert(want.end(), s, s + 100);
  want.insert(want.end(), s + 1000, s + 2500);
  want.insert(want.end(), s + 3000, s + 3010);
  auto* d = static_cast<uint8_t*>(dst->addr);
  std::vector<uint8_t> got(d, d + 700);
  got.insert(got.end(), d + 1024, d + 1024 + 910);
  EXPECT_EQ(got, want);
  EXPECT_EQ(d[1024 + 910], 0xee) << "bytes past the message stay untouched";
  EXPECT_EQ(d[700], 0xee);
}

TEST_F(DataPath, InlineSendCopiesAtPostTime) {
  QpCaps caps;
  caps.max_inline_data = 128;
  Pair p = make_pair(IBV_QPT_RC, {}, caps);
  ASSERT_FALSE(HasFailure());
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(ibv_query_qp(p.a.qp, &attr, IBV_QP_CAP, &init), 0);
  EXPECT_GE(init.cap.max_inline_data, 128u);
  ibv_mr* dst = reg_buffer(256, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(dst, nullptr);
  ASSERT_EQ(post_recv_mr(p.b.qp, 1, dst, 0, 256), 0);
  // Not registered: inline data needs no lkey, and the buffer may be reused at once.
  char msg[100];
  std::memset(msg, 'i', sizeof(msg));
  ibv_sge s{uint64_t(uintptr_t(msg)), sizeof(msg), 0};
  ASSERT_EQ(post_send(p.a.qp, 2, IBV_WR_SEND, &s, 1, IBV_SEND_SIGNALED | IBV_SEND_INLINE), 0);
  std::memset(msg, 'X', sizeof(msg));
  ibv_wc wc;
  VT_POLL_ONE(p.b.cq, &wc);
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(wc.byte_len, 100u);
  auto* d = static_cast<char*>(dst->addr);
  EXPECT_EQ(std::string(d, 100), std::string(100, 'i'));
  VT_POLL_ONE(p.a.cq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
}

TEST_F(DataPath, SendWithImmediate) {
  Pair p = make_pair();
  ASSERT_FALSE(HasFailure());
  ibv_mr* mr = reg_buffer(512, IBV_ACCESS_LOCAL_WRITE, 9);
  ASSERT_NE(mr, nullptr);
  ASSERT_EQ(post_recv_mr(p.b.qp, 1, mr, 256, 256), 0);
  ibv_sge s = sge_of(mr, 0, 40);
  ASSERT_EQ(post_send(p.a.qp, 2, IBV_WR_SEND_WITH_IMM, &s, 1, IBV_SEND_SIGNALED, 0, 0,
                      htonl(0x12345678)),
            0);
  ibv_wc wc;
  VT_POLL_ONE(p.b.cq, &wc);
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(wc.opcode, IBV_WC_RECV);
  EXPECT_TRUE(wc.wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(ntohl(wc.imm_data), 0x12345678u);
  EXPECT_EQ(wc.byte_len, 40u);
  VT_POLL_ONE(p.a.cq, &wc);
  EXPECT_EQ(wc.opcode, IBV_WC_SEND);
}

TEST_F(DataPath, WriteWithImmediateConsumesAReceive) {
  Pair p = make_pair();
  ASSERT_FALSE(HasFailure());
  ibv_mr* src = reg_buffer(3000, IBV_ACCESS_LOCAL_WRITE, 0x31);
  ibv_mr* dst = reg_buffer(4096, kRw, 0);
  ibv_mr* rbuf = reg_buffer(64, IBV_ACCESS_LOCAL_WRITE, 0xcc);
  ASSERT_TRUE(src && dst && rbuf);
  ASSERT_EQ(post_recv_mr(p.b.qp, 70, rbuf, 0, 64), 0);
  ibv_sge s = sge_of(src, 0, 3000);
  ASSERT_EQ(post_send(p.a.qp, 71, IBV_WR_RDMA_WRITE_WITH_IMM, &s, 1, IBV_SEND_SIGNALED,
                      addr_of(dst, 100), dst->rkey, htonl(0xabcdef01)),
            0);
  ibv_wc wc;
  VT_POLL_ONE(p.b.cq, &wc);
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(wc.wr_id, 70u);
  EXPECT_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_TRUE(wc.wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(ntohl(wc.imm_data), 0xabcdef01u);
  EXPECT_EQ(wc.byte_len, 3000u);
  auto* d = static_cast<uint8_t*>(dst->addr);
  EXPECT_EQ(d[99], 0);
  EXPECT_EQ(d[100], 0x31);
  EXPECT_EQ(d[3099], 0x31);
  EXPECT_EQ(d[3100], 0);
  EXPECT_EQ(static_cast<uint8_t*>(rbuf->addr)[0], 0xcc) << "the receive buffer is not written";
  VT_POLL_ONE(p.a.cq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(wc.opcode, IBV_WC_RDMA_WRITE);
}

TEST_F(DataPath, RdmaWriteAndRead) {
  Pair p = make_pair();
  ASSERT_FALSE(HasFailure());
  constexpr uint32_t kLen = 5000;  // five packets at MTU 1024
  ibv_mr* local = reg_buffer(kLen, IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* remote = reg_buffer(kLen, kRw, 0);
  ibv_mr* back = reg_buffer(kLen, IBV_ACCESS_LOCAL_WRITE, 0);
  ASSERT_TRUE(local && remote && back);
  auto* l = static_cast<uint8_t*>(local->addr);
  for (uint32_t i = 0; i < kLen; ++i) l[i] = uint8_t(i ^ (i >> 8));
  ibv_sge s = sge_of(local, 0, kLen);
  ASSERT_EQ(post_send(p.a.qp, 1, IBV_WR_RDMA_WRITE, &s, 1, IBV_SEND_SIGNALED, addr_of(remote),
                      remote->rkey),
            0);
  ibv_wc wc;
  VT_POLL_ONE(p.a.cq, &wc);
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(wc.opcode, IBV_WC_RDMA_WRITE);
  EXPECT_EQ(std::memcmp(remote->addr, local->addr, kLen), 0);
  EXPECT_TRUE(drain_for(p.b.cq, 20).empty()) << "a WRITE consumes no receive";

  ibv_sge r = sge_of(back, 0, kLen);
  ASSERT_EQ(post_send(p.a.qp, 2, IBV_WR_RDMA_READ, &r, 1, IBV_SEND_SIGNALED, addr_of(remote),
                      remote->rkey),
            0);
  VT_POLL_ONE(p.a.cq, &wc);
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(wc.opcode, IBV_WC_RDMA_READ);
  EXPECT_EQ(wc.byte_len, kLen);
  EXPECT_EQ(std::memcmp(back->addr, local->addr, kLen), 0);
}

TEST_F(DataPath, AtomicsReturnTheOriginalValue) {
  Pair p = make_pair();
  ASSERT_FALSE(HasFailure());
  ibv_mr* remote =
      reg_buffer(64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_REMOTE_READ);
  ibv_mr* result = reg_buffer(64, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(remote && result);
  auto* target = static_cast<uint64_t*>(remote->addr);
  auto* orig = static_cast<uint64_t*>(result->addr);
  *target = 100;

  auto atomic = [&](uint64_t id, ibv_wr_opcode op, uint64_t compare_add, uint64_t swap) {
    ibv_sge s = sge_of(result, 0, 8);
    return post_atomic(p.a.qp, id, op, &s, addr_of(remote), remote->rkey, compare_add, swap);
  };
  ibv_wc wc;
  // CAS that matches: swaps.
  ASSERT_EQ(atomic(1, IBV_WR_ATOMIC_CMP_AND_SWP, 100, 555), 0);
  VT_POLL_ONE(p.a.cq, &wc);
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(wc.opcode, IBV_WC_COMP_SWAP);
  EXPECT_EQ(wc.byte_len, 8u);
  EXPECT_EQ(*orig, 100u);
  EXPECT_EQ(*target, 555u);
  // CAS that does not match: memory unchanged, the current value returned.
  ASSERT_EQ(atomic(2, IBV_WR_ATOMIC_CMP_AND_SWP, 100, 777), 0);
  VT_POLL_ONE(p.a.cq, &wc);
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(*orig, 555u);
  EXPECT_EQ(*target, 555u);
  // Fetch and add.
  ASSERT_EQ(atomic(3, IBV_WR_ATOMIC_FETCH_AND_ADD, 10, 0), 0);
  VT_POLL_ONE(p.a.cq, &wc);
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(wc.opcode, IBV_WC_FETCH_ADD);
  EXPECT_EQ(*orig, 555u);
  EXPECT_EQ(*target, 565u);
}

TEST_F(DataPath, UnsignaledSendsOnlyTheSignaledOneCompletes) {
  QpCaps caps;
  caps.max_send_wr = 16;
  caps.max_recv_wr = 64;
  Pair p = make_pair(IBV_QPT_RC, {}, caps, /*sq_sig_all=*/0);
  ASSERT_FALSE(HasFailure());
  ibv_mr* mr = reg_buffer(64 * 64, IBV_ACCESS_LOCAL_WRITE, 1);
  ASSERT_NE(mr, nullptr);
  // Four rounds of 16 (the whole send queue): the slots of unsignaled WRs
  // must be reusable once a later signaled one completed.
  for (int round = 0; round < 4; ++round) {
    for (int i = 0; i < 16; ++i) ASSERT_EQ(post_recv_mr(p.b.qp, 1000 + i, mr, 64 * i, 64), 0);
    for (int i = 0; i < 16; ++i) {
      ibv_sge s = sge_of(mr, 64 * 32, 8);
      const bool last = i == 15;
      ASSERT_EQ(post_send(p.a.qp, round * 100 + i, IBV_WR_SEND, &s, 1,
                          last ? IBV_SEND_SIGNALED : 0),
                0)
          << "round " << round << " wr " << i;
    }
    ibv_wc wc;
    VT_POLL_ONE(p.a.cq, &wc);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
    EXPECT_EQ(wc.wr_id, uint64_t(round * 100 + 15)) << "only the signaled WR completes";
    EXPECT_EQ(poll_n(p.b.cq, 16).size(), 16u);
  }
  EXPECT_TRUE(drain_for(p.a.cq, 50).empty());
}

TEST_F(DataPath, FenceWaitsForAPrecedingRead) {
  Pair p = make_pair();
  ASSERT_FALSE(HasFailure());
  constexpr uint32_t kLen = 4096;
  ibv_mr* src = reg_buffer(kLen, kRw, 0xab);     // remote data to READ
  ibv_mr* stage = reg_buffer(kLen, kRw, 0);      // local buffer the READ fills
  ibv_mr* dst = reg_buffer(kLen, kRw, 0);        // remote target of the fenced WRITE
  ASSERT_TRUE(src && stage && dst);
  // READ src -> stage, then a fenced WRITE stage -> dst: the WRITE may only
  // gather `stage` after the READ's data has arrived.
  ibv_sge rs = sge_of(stage, 0, kLen);
  ibv_sge ws = sge_of(stage, 0, kLen);
  ibv_send_wr read{}, write{};
  read.wr_id = 1;
  read.opcode = IBV_WR_RDMA_READ;
  read.sg_list = &rs;
  read.num_sge = 1;
  read.send_flags = IBV_SEND_SIGNALED;
  read.wr.rdma.remote_addr = addr_of(src);
  read.wr.rdma.rkey = src->rkey;
  read.next = &write;
  write.wr_id = 2;
  write.opcode = IBV_WR_RDMA_WRITE;
  write.sg_list = &ws;
  write.num_sge = 1;
  write.send_flags = IBV_SEND_SIGNALED | IBV_SEND_FENCE;
  write.wr.rdma.remote_addr = addr_of(dst);
  write.wr.rdma.rkey = dst->rkey;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(p.a.qp, &read, &bad), 0);
  std::vector<ibv_wc> wcs = poll_n(p.a.cq, 2);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].wr_id, 1u);
  EXPECT_EQ(wcs[1].wr_id, 2u);
  for (const ibv_wc& wc : wcs) EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  auto* d = static_cast<uint8_t*>(dst->addr);
  EXPECT_TRUE(std::all_of(d, d + kLen, [](uint8_t c) { return c == 0xab; }))
      << "the fenced WRITE carried stale data (first byte " << int(d[0]) << ")";
}

TEST_F(DataPath, WrApiPostsAndAbortLeavesNothing) {
  ibv_cq* cqa = make_cq();
  ibv_cq* cqb = make_cq();
  ASSERT_TRUE(cqa && cqb);
  ibv_qp_init_attr_ex ix = qp_ex_attr(
      IBV_QPT_RC, cqa, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_WRITE,
      {32, 32, 2, 2, 64});
  ibv_qp* qa = make_qp_ex(&ix);
  ASSERT_NE(qa, nullptr) << std::strerror(errno);
  ibv_qp* qb = make_qp(IBV_QPT_RC, cqb, cqb);
  ASSERT_NE(qb, nullptr);
  connect_qp(qa, qb->qp_num);
  connect_qp(qb, qa->qp_num);
  ASSERT_FALSE(HasFailure());
  ibv_qp_ex* x = ibv_qp_to_qp_ex(qa);
  ASSERT_NE(x, nullptr);

  ibv_mr* src = reg_buffer(1024, IBV_ACCESS_LOCAL_WRITE, 0x61);
  ibv_mr* dst = reg_buffer(4096, kRw, 0);
  ASSERT_TRUE(src && dst);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(post_recv_mr(qb, 10 + i, dst, 512 * i, 512), 0);

  ibv_wr_start(x);
  x->wr_id = 1;
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send(x);
  ibv_wr_set_sge(x, src->lkey, addr_of(src), 100);
  x->wr_id = 2;
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send_imm(x, htonl(77));
  ibv_wr_set_sge(x, src->lkey, addr_of(src), 200);
  x->wr_id = 3;
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_rdma_write(x, dst->rkey, addr_of(dst, 3000));
  ibv_wr_set_sge(x, src->lkey, addr_of(src), 50);
  char inl[16] = "inline-payload";
  x->wr_id = 4;
  x->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
  ibv_wr_send(x);
  ibv_wr_set_inline_data(x, inl, sizeof(inl));
  ASSERT_EQ(ibv_wr_complete(x), 0);

  std::vector<ibv_wc> wcs = poll_n(cqa, 4);
  ASSERT_EQ(wcs.size(), 4u);
  const ibv_wc_opcode ops[] = {IBV_WC_SEND, IBV_WC_SEND, IBV_WC_RDMA_WRITE, IBV_WC_SEND};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(wcs[i].wr_id, uint64_t(i + 1));
    EXPECT_EQ(wcs[i].status, IBV_WC_SUCCESS) << describe(wcs[i]);
    EXPECT_EQ(wcs[i].opcode, ops[i]);
  }
  auto m = by_wr_id(poll_n(cqb, 3));
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[10].byte_len, 100u);
  EXPECT_EQ(m[11].byte_len, 200u);
  EXPECT_TRUE(m[11].wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(ntohl(m[11].imm_data), 77u);
  EXPECT_EQ(m[12].byte_len, uint32_t(sizeof(inl)));
  auto* d = static_cast<char*>(dst->addr);
  EXPECT_STREQ(d + 1024, "inline-payload");
  EXPECT_EQ(uint8_t(d[3000]), 0x61);
  EXPECT_EQ(uint8_t(d[3050]), 0);

  // Aborted: nothing is posted.
  ibv_wr_start(x);
  x->wr_id = 50;
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send(x);
  ibv_wr_set_sge(x, src->lkey, addr_of(src), 10);
  ibv_wr_abort(x);
  EXPECT_TRUE(drain_for(cqa, 100).empty());
  EXPECT_TRUE(drain_for(cqb, 10).empty());
  // The next batch is all that arrives.
  ibv_wr_start(x);
  x->wr_id = 51;
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send(x);
  ibv_wr_set_sge(x, src->lkey, addr_of(src), 11);
  ASSERT_EQ(ibv_wr_complete(x), 0);
  ibv_wc wc;
  VT_POLL_ONE(cqa, &wc);
  EXPECT_EQ(wc.wr_id, 51u);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  VT_POLL_ONE(cqb, &wc);
  EXPECT_EQ(wc.wr_id, 13u);
  EXPECT_EQ(wc.byte_len, 11u);
  EXPECT_TRUE(drain_for(cqa, 50).empty());
  EXPECT_TRUE(drain_for(cqb, 10).empty());
}

TEST_F(DataPath, CqExPollingAndReaders) {
  ibv_cq_init_attr_ex ca{};
  ca.cqe = 64;
  ca.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM |
                IBV_WC_EX_WITH_SRC_QP;
  ibv_cq_ex* cqx = make_cq_ex(&ca);
  ASSERT_NE(cqx, nullptr) << std::strerror(errno);
  ibv_cq* cqa = make_cq();
  ASSERT_NE(cqa, nullptr);
  ibv_qp* qa = make_qp(IBV_QPT_RC, cqa, cqa);
  ibv_qp* qb = make_qp(IBV_QPT_RC, ibv_cq_ex_to_cq(cqx), ibv_cq_ex_to_cq(cqx));
  ASSERT_TRUE(qa && qb);
  connect_qp(qa, qb->qp_num);
  connect_qp(qb, qa->qp_num);
  ASSERT_FALSE(HasFailure());

  ibv_poll_cq_attr pa{};
  ASSERT_EQ(ibv_start_poll(cqx, &pa), ENOENT) << "empty CQ";

  ibv_mr* mr = reg_buffer(4096, IBV_ACCESS_LOCAL_WRITE, 5);
  ASSERT_NE(mr, nullptr);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(post_recv_mr(qb, 100 + i, mr, 1024 * (i + 1), 1024), 0);
  ibv_sge s10 = sge_of(mr, 0, 10), s20 = sge_of(mr, 0, 20), s30 = sge_of(mr, 0, 30);
  ASSERT_EQ(post_send(qa, 1, IBV_WR_SEND, &s10, 1), 0);
  ASSERT_EQ(post_send(qa, 2, IBV_WR_SEND_WITH_IMM, &s20, 1, IBV_SEND_SIGNALED, 0, 0, htonl(4242)), 0);
  ASSERT_EQ(post_send(qa, 3, IBV_WR_SEND, &s30, 1), 0);
  // RC sends complete after the responder delivered them.
  ASSERT_EQ(poll_n(cqa, 3).size(), 3u);

  int rc = ENOENT;
  for (auto end = deadline_after(kWaitSeconds); rc == ENOENT && Clock::now() < end;)
    rc = ibv_start_poll(cqx, &pa);
  ASSERT_EQ(rc, 0);
  struct Seen {
    uint64_t wr_id;
    ibv_wc_status status;
    ibv_wc_opcode opcode;
    uint32_t byte_len;
    unsigned flags;
    uint32_t imm;
    uint32_t qp_num;
  };
  std::vector<Seen> seen;
  do {
    seen.push_back({cqx->wr_id, cqx->status, ibv_wc_read_opcode(cqx), ibv_wc_read_byte_len(cqx),
                    ibv_wc_read_wc_flags(cqx), ntohl(ibv_wc_read_imm_data(cqx)),
                    ibv_wc_read_qp_num(cqx)});
  } while (seen.size() < 5 && ibv_next_poll(cqx) == 0);
  ibv_end_poll(cqx);
  ASSERT_EQ(seen.size(), 3u);
  const uint32_t lens[] = {10, 20, 30};
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(seen[i].wr_id, uint64_t(100 + i));
    EXPECT_EQ(seen[i].status, IBV_WC_SUCCESS);
    EXPECT_EQ(seen[i].opcode, IBV_WC_RECV);
    EXPECT_EQ(seen[i].byte_len, lens[i]);
    EXPECT_EQ(seen[i].qp_num, qb->qp_num);
    EXPECT_EQ(bool(seen[i].flags & IBV_WC_WITH_IMM), i == 1);
  }
  EXPECT_EQ(seen[1].imm, 4242u);
  EXPECT_EQ(ibv_start_poll(cqx, &pa), ENOENT) << "everything was consumed by end_poll";
}

TEST_F(DataPath, LargeTransfersKeepEveryByte) {
  Pair p = make_pair();
  ASSERT_FALSE(HasFailure());
  constexpr uint32_t kLen = 4u << 20;  // 4096 packets at MTU 1024
  ibv_mr* a = reg_buffer(kLen, kRw);
  ibv_mr* b = reg_buffer(kLen, kRw, 0);
  ibv_mr* c = reg_buffer(kLen, kRw, 0);
  ASSERT_TRUE(a && b && c);
  auto* src = static_cast<uint32_t*>(a->addr);
  for (uint32_t i = 0; i < kLen / 4; ++i) src[i] = i * 2654435761u;
  ibv_wc wc;

  // SEND into a receive of two SGEs.
  ibv_sge rs[2] = {sge_of(b, 0, 1000), sge_of(b, 1000, kLen - 1000)};
  ASSERT_EQ(post_recv(p.b.qp, 1, rs, 2), 0);
  ibv_sge ss = sge_of(a, 0, kLen);
  ASSERT_EQ(post_send(p.a.qp, 2, IBV_WR_SEND, &ss, 1), 0);
  ASSERT_TRUE(poll_one(p.b.cq, &wc, 20));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(wc.byte_len, kLen);
  EXPECT_EQ(std::memcmp(a->addr, b->addr, kLen), 0) << "SEND";
  ASSERT_TRUE(poll_one(p.a.cq, &wc, 20));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);

  // WRITE.
  ASSERT_EQ(post_send(p.a.qp, 3, IBV_WR_RDMA_WRITE, &ss, 1, IBV_SEND_SIGNALED, addr_of(c),
                      c->rkey),
            0);
  ASSERT_TRUE(poll_one(p.a.cq, &wc, 20));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(std::memcmp(a->addr, c->addr, kLen), 0) << "WRITE";

  // READ back into three SGEs.
  std::memset(b->addr, 0, kLen);
  ibv_sge rd[3] = {sge_of(b, 0, 3), sge_of(b, 3, kLen / 2), sge_of(b, 3 + kLen / 2, kLen / 2 - 3)};
  ASSERT_EQ(post_send(p.a.qp, 4, IBV_WR_RDMA_READ, rd, 3, IBV_SEND_SIGNALED, addr_of(c), c->rkey),
            0);
  ASSERT_TRUE(poll_one(p.a.cq, &wc, 20));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(wc.byte_len, kLen);
  EXPECT_EQ(std::memcmp(a->addr, b->addr, kLen), 0) << "READ";
}

TEST_F(DataPath, PsnWrapsAround) {
  ConnectOpts o;
  o.sq_psn = o.rq_psn = 0xfffff0;  // 16 PSNs before the 24-bit wrap
  Pair p = make_pair(IBV_QPT_RC, o);
  ASSERT_FALSE(HasFailure());
  constexpr uint32_t kLen = 10 * 1024;  // 10 packets each
  ibv_mr* src = reg_buffer(kLen, kRw);
  ibv_mr* dst = reg_buffer(4 * kLen, kRw, 0);
  ASSERT_TRUE(src && dst);
  auto* s = static_cast<uint8_t*>(src->addr);
  for (uint32_t i = 0; i < kLen; ++i) s[i] = uint8_t(i % 251);
  ibv_sge ss = sge_of(src, 0, kLen);
  for (int i = 0; i < 2; ++i) ASSERT_EQ(post_recv_mr(p.b.qp, 10 + i, dst, kLen * i, kLen), 0);
  ASSERT_EQ(post_send(p.a.qp, 1, IBV_WR_SEND, &ss, 1), 0);
  ASSERT_EQ(post_send(p.a.qp, 2, IBV_WR_SEND, &ss, 1), 0);  // crosses 0xffffff -> 0
  ASSERT_EQ(post_send(p.a.qp, 3, IBV_WR_RDMA_WRITE, &ss, 1, IBV_SEND_SIGNALED,
                      addr_of(dst, 2 * kLen), dst->rkey),
            0);
  ibv_sge rs = sge_of(dst, 3 * kLen, kLen);
  ASSERT_EQ(post_send(p.a.qp, 4, IBV_WR_RDMA_READ, &rs, 1, IBV_SEND_SIGNALED, addr_of(src),
                      src->rkey),
            0);
  std::vector<ibv_wc> wcs = poll_n(p.a.cq, 4);
  ASSERT_EQ(wcs.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(wcs[i].wr_id, uint64_t(i + 1));
    EXPECT_EQ(wcs[i].status, IBV_WC_SUCCESS) << describe(wcs[i]);
  }
  EXPECT_EQ(poll_n(p.b.cq, 2).size(), 2u);
  auto* d = static_cast<uint8_t*>(dst->addr);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(std::memcmp(d + i * kLen, s, kLen), 0) << "copy " << i;
  ibv_qp_attr a{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(ibv_query_qp(p.a.qp, &a, IBV_QP_SQ_PSN, &init), 0);
  EXPECT_EQ(a.sq_psn, (0xfffff0u + 40) & 0xffffff) << "four 10-packet messages sent";
}

// A READ followed by a WRITE (no fence): the responder answers the READ
// before it acknowledges the WRITE (IBA 9.7.5.1: responses leave in PSN
// order), so both complete, in post order.
TEST_F(DataPath, ReadFollowedByWriteWithoutFence) {
  Pair p = make_pair();
  ASSERT_FALSE(HasFailure());
  ibv_mr* mr = reg_buffer(8192, kRw, 0x5e);
  ASSERT_NE(mr, nullptr);
  ibv_sge rd = sge_of(mr, 4096, 64), wr_sge = sge_of(mr, 0, 64);
  ibv_send_wr read{}, write{};
  read.wr_id = 1;
  read.opcode = IBV_WR_RDMA_READ;
  read.sg_list = &rd;
  read.num_sge = 1;
  read.send_flags = IBV_SEND_SIGNALED;
  read.wr.rdma = {addr_of(mr, 0), mr->rkey};
  read.next = &write;
  write.wr_id = 2;
  write.opcode = IBV_WR_RDMA_WRITE;
  write.sg_list = &wr_sge;
  write.num_sge = 1;
  write.send_flags = IBV_SEND_SIGNALED;
  write.wr.rdma = {addr_of(mr, 6000), mr->rkey};
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(p.a.qp, &read, &bad), 0);
  std::vector<ibv_wc> wcs = poll_n(p.a.cq, 2);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].wr_id, 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS) << describe(wcs[0]);
  EXPECT_EQ(wcs[1].wr_id, 2u);
  EXPECT_EQ(wcs[1].status, IBV_WC_SUCCESS) << describe(wcs[1]);
}

TEST_F(DataPath, MixedOperationsCompleteInPostOrder) {
  Pair p = make_pair();
  ASSERT_FALSE(HasFailure());
  ibv_mr* mr = reg_buffer(16384, kRw | IBV_ACCESS_REMOTE_ATOMIC, 3);
  ASSERT_NE(mr, nullptr);
  for (int i = 0; i < 2; ++i) ASSERT_EQ(post_recv_mr(p.b.qp, 100 + i, mr, 8192 + 1024 * i, 1024), 0);
  *reinterpret_cast<uint64_t*>(static_cast<uint8_t*>(mr->addr) + 15360) = 7;
  ibv_sge s1 = sge_of(mr, 0, 100), rd = sge_of(mr, 4096, 3000), at = sge_of(mr, 15000, 8);
  std::vector<ibv_send_wr> wrs(5);
  for (size_t i = 0; i < wrs.size(); ++i) {
    wrs[i].wr_id = i + 1;
    wrs[i].send_flags = IBV_SEND_SIGNALED;
    wrs[i].num_sge = 1;
    wrs[i].next = i + 1 < wrs.size() ? &wrs[i + 1] : nullptr;
  }
  wrs[0].opcode = IBV_WR_SEND;
  wrs[0].sg_list = &s1;
  wrs[1].opcode = IBV_WR_RDMA_READ;  // 3 response packets
  wrs[1].sg_list = &rd;
  wrs[1].wr.rdma = {addr_of(mr, 0), mr->rkey};
  wrs[2].opcode = IBV_WR_SEND;
  wrs[2].sg_list = &s1;
  wrs[3].opcode = IBV_WR_RDMA_WRITE;
  wrs[3].sg_list = &s1;
  wrs[3].wr.rdma = {addr_of(mr, 12288), mr->rkey};
  wrs[4].opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
  wrs[4].sg_list = &at;
  wrs[4].wr.atomic.remote_addr = addr_of(mr, 15360);
  wrs[4].wr.atomic.rkey = mr->rkey;
  wrs[4].wr.atomic.compare_add = 5;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(p.a.qp, wrs.data(), &bad), 0);
  std::vector<ibv_wc> wcs = poll_n(p.a.cq, 5);
  ASSERT_EQ(wcs.size(), 5u);
  const ibv_wc_opcode ops[] = {IBV_WC_SEND, IBV_WC_RDMA_READ, IBV_WC_SEND, IBV_WC_RDMA_WRITE,
                               IBV_WC_FETCH_ADD};
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(wcs[i].wr_id, uint64_t(i + 1)) << "completion " << i << " out of order";
    EXPECT_EQ(wcs[i].status, IBV_WC_SUCCESS) << describe(wcs[i]);
    EXPECT_EQ(wcs[i].opcode, ops[i]) << "completion " << i;
  }
  EXPECT_EQ(*reinterpret_cast<uint64_t*>(static_cast<uint8_t*>(mr->addr) + 15000), 7u);
  EXPECT_EQ(*reinterpret_cast<uint64_t*>(static_cast<uint8_t*>(mr->addr) + 15360), 12u);
  EXPECT_EQ(poll_n(p.b.cq, 2).size(), 2u);
}

TEST_F(DataPath, ZeroLengthMessages) {
  Pair p = make_pair();
  ASSERT_FALSE(HasFailure());
  ibv_mr* mr = reg_buffer(256, kRw, 0x11);
  ASSERT_NE(mr, nullptr);
  ASSERT_EQ(post_recv(p.b.qp, 1, nullptr, 0), 0);  // a receive without buffers
  ASSERT_EQ(post_recv_mr(p.b.qp, 2, mr, 0, 64), 0);
  ASSERT_EQ(post_send(p.a.qp, 3, IBV_WR_SEND, nullptr, 0), 0);
  ASSERT_EQ(post_send(p.a.qp, 4, IBV_WR_RDMA_WRITE_WITH_IMM, nullptr, 0, IBV_SEND_SIGNALED, 0, 0,
                      htonl(99)),
            0);
  std::vector<ibv_wc> r = poll_n(p.b.cq, 2);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].wr_id, 1u);
  EXPECT_EQ(r[0].status, IBV_WC_SUCCESS) << describe(r[0]);
  EXPECT_EQ(r[0].opcode, IBV_WC_RECV);
  EXPECT_EQ(r[0].byte_len, 0u);
  EXPECT_EQ(r[1].wr_id, 2u);
  EXPECT_EQ(r[1].status, IBV_WC_SUCCESS) << describe(r[1]);
  EXPECT_EQ(r[1].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(r[1].byte_len, 0u);
  EXPECT_EQ(ntohl(r[1].imm_data), 99u);
  EXPECT_EQ(static_cast<uint8_t*>(mr->addr)[0], 0x11);
  std::vector<ibv_wc> s = poll_n(p.a.cq, 2);
  ASSERT_EQ(s.size(), 2u);
  for (const ibv_wc& wc : s) EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
}

TEST_F(DataPath, MrWithIovaIsAddressedByIova) {
  Pair p = make_pair();
  ASSERT_FALSE(HasFailure());
  constexpr uint64_t kIova = 0x100000000ull;  // unrelated to the buffer's address
  uint8_t* remote_buf = buffer(4096, 0);
  uint8_t* local_buf = buffer(4096, 0);
  ibv_mr* remote = ibv_reg_mr_iova(pd_, remote_buf, 4096, kIova, kRw);
  ASSERT_NE(remote, nullptr) << std::strerror(errno);
  defer([remote] { EXPECT_EQ(ibv_dereg_mr(remote), 0); });
  ibv_mr* local = ibv_reg_mr_iova(pd_, local_buf, 4096, kIova + 0x10000, kRw);
  ASSERT_NE(local, nullptr) << std::strerror(errno);
  defer([local] { EXPECT_EQ(ibv_dereg_mr(local), 0); });
  std::memset(local_buf + 100, 'v', 50);
  // Local SGEs and remote addresses are both in the MRs' IOVA space.
  ibv_sge s{kIova + 0x10000 + 100, 50, local->lkey};
  ASSERT_EQ(post_send(p.a.qp, 1, IBV_WR_RDMA_WRITE, &s, 1, IBV_SEND_SIGNALED, kIova + 1000,
                      remote->rkey),
            0);
  ibv_wc wc;
  VT_POLL_ONE(p.a.cq, &wc);
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(remote_buf[1000], 'v');
  EXPECT_EQ(remote_buf[1049], 'v');
  EXPECT_EQ(remote_buf[1050], 0);
  // The buffer's own virtual address is not inside the MR.
  ASSERT_EQ(post_send(p.a.qp, 2, IBV_WR_RDMA_WRITE, &s, 1, IBV_SEND_SIGNALED,
                      uint64_t(uintptr_t(remote_buf)), remote->rkey),
            0);
  VT_POLL_ONE(p.a.cq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR) << describe(wc);
}

TEST_F(DataPath, ReceivesPostedInInitAreUsed) {
  ibv_cq* cq = make_cq();
  ASSERT_NE(cq, nullptr);
  ibv_qp* qa = make_qp(IBV_QPT_RC, cq, cq);
  ibv_qp* qb = make_qp(IBV_QPT_RC, cq, cq);
  ASSERT_TRUE(qa && qb);
  ibv_mr* mr = reg_buffer(4096, IBV_ACCESS_LOCAL_WRITE, 0);
  ASSERT_NE(mr, nullptr);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
  ASSERT_EQ(ibv_modify_qp(qb, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                      IBV_QP_ACCESS_FLAGS),
            0);
  // As ibv_rc_pingpong does: receives go in before the QP is connected.
  ASSERT_EQ(post_recv_mr(qb, 7, mr, 0, 1024), 0);
  ibv_qp_attr reset{};
  reset.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(ibv_modify_qp(qb, &reset, IBV_QP_STATE), 0);  // ... and RESET drops them
  ASSERT_EQ(ibv_modify_qp(qb, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                      IBV_QP_ACCESS_FLAGS),
            0);
  ASSERT_EQ(post_recv_mr(qb, 8, mr, 1024, 1024), 0);
  connect_qp(qa, qb->qp_num);
  ibv_qp_attr r{};
  r.qp_state = IBV_QPS_RTR;
  r.path_mtu = IBV_MTU_1024;
  r.dest_qp_num = qa->qp_num;
  r.ah_attr = loopback_av();
  r.max_dest_rd_atomic = 1;
  r.min_rnr_timer = 12;
  ASSERT_EQ(ibv_modify_qp(qb, &r, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                      IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                                      IBV_QP_MIN_RNR_TIMER),
            0);
  ASSERT_FALSE(HasFailure());
  ibv_sge s = sge_of(mr, 3000, 20);
  ASSERT_EQ(post_send(qa, 1, IBV_WR_SEND, &s, 1), 0);
  auto m = by_wr_id(poll_n(cq, 2));
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m.count(7), 0u) << "a receive dropped by RESET came back";
  ASSERT_EQ(m.count(8), 1u);
  EXPECT_EQ(m[8].status, IBV_WC_SUCCESS) << describe(m[8]);
  EXPECT_EQ(m[8].byte_len, 20u);
  EXPECT_EQ(m[1].status, IBV_WC_SUCCESS) << describe(m[1]);
  EXPECT_TRUE(drain_for(cq, 50).empty());
}

TEST_F(DataPath, QpIsReusableAfterErrAndReset) {
  Pair p = make_pair();
  ASSERT_FALSE(HasFailure());
  ibv_mr* mr = reg_buffer(4096, IBV_ACCESS_LOCAL_WRITE, 0x44);
  ASSERT_NE(mr, nullptr);
  ibv_sge bad{addr_of(mr), 16, wrong_key(mr->lkey)};
  ASSERT_EQ(post_send(p.a.qp, 1, IBV_WR_SEND, &bad, 1), 0);
  ibv_wc wc;
  VT_POLL_ONE(p.a.cq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_LOC_PROT_ERR) << describe(wc);
  ASSERT_EQ(qp_state(p.a.qp), IBV_QPS_ERR);
  // Recover both ends: RESET, then connect again (fresh PSNs).
  ibv_qp_attr reset{};
  reset.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(ibv_modify_qp(p.a.qp, &reset, IBV_QP_STATE), 0);
  ASSERT_EQ(ibv_modify_qp(p.b.qp, &reset, IBV_QP_STATE), 0);
  ConnectOpts o;
  o.sq_psn = o.rq_psn = 0x777;
  connect_qp(p.a.qp, p.b.qp->qp_num, o);
  connect_qp(p.b.qp, p.a.qp->qp_num, o);
  ASSERT_FALSE(HasFailure());
  for (int i = 0; i < 3; ++i) ASSERT_EQ(post_recv_mr(p.b.qp, 10 + i, mr, 1024 * i, 1024), 0);
  ibv_sge s = sge_of(mr, 3072, 1024);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(post_send(p.a.qp, 20 + i, IBV_WR_SEND, &s, 1), 0);
  std::vector<ibv_wc> sw = poll_n(p.a.cq, 3), rw = poll_n(p.b.cq, 3);
  ASSERT_EQ(sw.size(), 3u);
  ASSERT_EQ(rw.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(sw[i].wr_id, uint64_t(20 + i));
    EXPECT_EQ(sw[i].status, IBV_WC_SUCCESS) << describe(sw[i]);
    EXPECT_EQ(rw[i].wr_id, uint64_t(10 + i));
    EXPECT_EQ(rw[i].status, IBV_WC_SUCCESS) << describe(rw[i]);
  }
}

}  // namespace
}  // namespace vt
