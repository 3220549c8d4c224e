// Verbs semantics: basic shared receive queues (creation rules, posting,
// the limit event, resize, LAST_WQE_REACHED, traffic through RC/UC/UD QPs).

#include "tests/integration/verbs_srq_fixture.h"

namespace vt {
namespace {

using namespace srq_test;

TEST_F(SrqTest, CreateRoundsUpAndWritesBackWhatQueryReports) {
  ibv_srq_init_attr init{};
  ibv_srq* srq = make_srq(100, 1, nullptr, &init);
  ASSERT_NE(srq, nullptr) << std::strerror(errno);
  EXPECT_EQ(init.attr.max_wr, 127u) << "100 rounds to a ring of 128 with one slot empty (rxe, mlx5)";
  EXPECT_GE(init.attr.max_sge, 1u);
  EXPECT_EQ(srq->context, ctx_);
  EXPECT_EQ(srq->pd, pd_);
  EXPECT_EQ(srq->srq_context, this);
  ibv_srq_attr q{};
  ASSERT_EQ(ibv_query_srq(srq, &q), 0);
  EXPECT_EQ(q.max_wr, init.attr.max_wr) << "create's write-back and query must agree";
  EXPECT_EQ(q.max_sge, init.attr.max_sge);
  EXPECT_EQ(q.srq_limit, 0u) << "not armed";

  // More SGEs and an exact power of two minus one.
  ibv_srq_init_attr init2{};
  ibv_srq* srq2 = make_srq(255, 3, nullptr, &init2);
  ASSERT_NE(srq2, nullptr) << std::strerror(errno);
  EXPECT_EQ(init2.attr.max_wr, 255u);
  EXPECT_GE(init2.attr.max_sge, 3u);
  ASSERT_EQ(ibv_query_srq(srq2, &q), 0);
  EXPECT_EQ(q.max_wr, init2.attr.max_wr);
  EXPECT_EQ(q.max_sge, init2.attr.max_sge);

  // ibv_create_srq_ex writes back into attr_ex.attr too.
  ibv_srq_init_attr_ex x{};
  x.attr.max_wr = 1000;
  x.attr.max_sge = 2;
  x.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
  x.srq_type = IBV_SRQT_BASIC;
  x.pd = pd_;
  ibv_srq* srq3 = make_srq_ex(&x);
  ASSERT_NE(srq3, nullptr) << std::strerror(errno);
  EXPECT_EQ(x.attr.max_wr, 1023u);
  EXPECT_GE(x.attr.max_sge, 2u);
  ASSERT_EQ(ibv_query_srq(srq3, &q), 0);
  EXPECT_EQ(q.max_wr, x.attr.max_wr);
  EXPECT_EQ(q.max_sge, x.attr.max_sge);
}

TEST_F(SrqTest, CreateBeyondDeviceLimitsIsEinvalAndLeavesNothing) {
  const ibv_device_attr d = device_attr();
  ASSERT_GT(d.max_srq_wr, 0);
  ASSERT_GT(d.max_srq_sge, 0);
  // A PD of its own: a failed create must leave no reference on it.
  ibv_pd* pd = ibv_alloc_pd(ctx_);
  ASSERT_NE(pd, nullptr);
  struct Case {
    const char* what;
    uint32_t max_wr, max_sge;
  } cases[] = {
      {"max_wr 0", 0, 1},
      {"max_wr = max_srq_wr + 1", uint32_t(d.max_srq_wr) + 1, 1},
      {"max_wr huge", 0x80000000u, 1},
      {"max_sge = max_srq_sge + 1", 16, uint32_t(d.max_srq_sge) + 1},
  };
  for (const Case& c : cases) {
    ibv_srq_init_attr init{};
    init.attr.max_wr = c.max_wr;
    init.attr.max_sge = c.max_sge;
    errno = 0;
    ibv_srq* srq = ibv_create_srq(pd, &init);
    EXPECT_EQ(srq, nullptr) << c.what;
    EXPECT_EQ(errno, EINVAL) << c.what << ": " << std::strerror(errno);
    if (srq) ibv_destroy_srq(srq);
  }
  // The limits themselves are accepted.
  ibv_srq_init_attr init{};
  init.attr.max_wr = uint32_t(d.max_srq_wr);
  init.attr.max_sge = uint32_t(d.max_srq_sge);
  ibv_srq* srq = ibv_create_srq(pd, &init);
  EXPECT_NE(srq, nullptr) << "max_wr = max_srq_wr, max_sge = max_srq_sge: " << std::strerror(errno);
  if (srq) {
    EXPECT_GE(init.attr.max_wr, uint32_t(d.max_srq_wr));
    EXPECT_GE(init.attr.max_sge, uint32_t(d.max_srq_sge));
    EXPECT_EQ(ibv_destroy_srq(srq), 0);
  }
  EXPECT_EQ(ibv_dealloc_pd(pd), 0) << "a failed or destroyed SRQ still holds the PD";
}

TEST_F(SrqTest, CreateSrqExCompMaskRules) {
  // PD only: behaves as ibv_create_srq (fields outside the mask are ignored:
  // srq_type says XRC, xrcd and cq are garbage).
  ibv_srq_init_attr_ex x{};
  x.attr.max_wr = 100;
  x.attr.max_sge = 1;
  x.comp_mask = IBV_SRQ_INIT_ATTR_PD;
  x.pd = pd_;
  x.srq_type = IBV_SRQT_XRC;
  x.xrcd = reinterpret_cast<ibv_xrcd*>(uintptr_t(0xdead0000));
  x.cq = reinterpret_cast<ibv_cq*>(uintptr_t(0xbeef0000));
  ibv_srq* srq = make_srq_ex(&x);
  ASSERT_NE(srq, nullptr) << std::strerror(errno);
  EXPECT_EQ(x.attr.max_wr, 127u);
  uint32_t n = 0;
  EXPECT_EQ(ibv_get_srq_num(srq, &n), 0);

  // The provider's path (a CQ bit is set) still ignores the type outside the mask.
  ibv_cq* cq = make_cq();
  ASSERT_NE(cq, nullptr);
  x = {};
  x.attr.max_wr = 10;
  x.attr.max_sge = 1;
  x.comp_mask = IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_CQ;
  x.pd = pd_;
  x.cq = cq;
  x.srq_type = IBV_SRQT_TM;  // not in the mask: basic
  x.xrcd = reinterpret_cast<ibv_xrcd*>(uintptr_t(0xdead0000));
  ibv_srq* srq2 = make_srq_ex(&x);
  EXPECT_NE(srq2, nullptr) << "PD|CQ, type outside the mask: " << std::strerror(errno);
  if (srq2) { EXPECT_EQ(x.attr.max_wr, 15u); }

  struct Case {
    const char* what;
    uint32_t comp_mask;
    ibv_srq_type type;
    int err;
  } cases[] = {
      {"unknown bit IBV_SRQ_INIT_ATTR_RESERVED", IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_RESERVED,
       IBV_SRQT_BASIC, EOPNOTSUPP},
      {"bit 31", IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE | 0x80000000u, IBV_SRQT_BASIC,
       EOPNOTSUPP},
      {"no PD bit (TYPE only)", IBV_SRQ_INIT_ATTR_TYPE, IBV_SRQT_BASIC, EINVAL},
      {"comp_mask 0", 0, IBV_SRQT_BASIC, EINVAL},
      {"no PD bit (TYPE|CQ)", IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_CQ, IBV_SRQT_BASIC, EINVAL},
      // mlx5: "An extended CQ is required to read TM information from" (verbs_tm.cc).
      {"tag matching on a CQ from ibv_create_cq",
       IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_TM,
       IBV_SRQT_TM, EINVAL},
  };
  for (const Case& c : cases) {
    ibv_srq_init_attr_ex a{};
    a.attr.max_wr = 16;
    a.attr.max_sge = 1;
    a.comp_mask = c.comp_mask;
    a.srq_type = c.type;
    a.pd = pd_;
    a.cq = cq;
    a.tm_cap.max_num_tags = 16;
    a.tm_cap.max_ops = 16;
    errno = 0;
    ibv_srq* s = ibv_create_srq_ex(ctx_, &a);
    EXPECT_EQ(s, nullptr) << c.what;
    EXPECT_EQ(errno, c.err) << c.what << ": " << std::strerror(errno);
    if (s) ibv_destroy_srq(s);
  }
}

TEST_F(SrqTest, GetSrqNumGivesDistinctNumbers) {
  ibv_srq* a = make_srq(8);
  ibv_srq* b = make_srq(8);
  ASSERT_TRUE(a && b);
  uint32_t na = 0xffffffff, nb = 0xffffffff;
  ASSERT_EQ(ibv_get_srq_num(a, &na), 0);
  ASSERT_EQ(ibv_get_srq_num(b, &nb), 0);
  EXPECT_NE(na, nb);
  EXPECT_LT(na, 1u << 24) << "an SRQ number is 24 bits";
  EXPECT_LT(nb, 1u << 24);
  uint32_t again = 0;
  ASSERT_EQ(ibv_get_srq_num(a, &again), 0);
  EXPECT_EQ(again, na);
}

TEST_F(SrqTest, DeallocPdWithSrqAliveIsEbusy) {
  ibv_pd* pd = ibv_alloc_pd(ctx_);
  ASSERT_NE(pd, nullptr);
  ibv_srq_init_attr init{};
  init.attr.max_wr = 4;
  init.attr.max_sge = 1;
  ibv_srq* srq = ibv_create_srq(pd, &init);
  ASSERT_NE(srq, nullptr) << std::strerror(errno);
  EXPECT_EQ(ibv_dealloc_pd(pd), EBUSY);
  // The SRQ still works after the refused dealloc.
  ibv_srq_attr q{};
  EXPECT_EQ(ibv_query_srq(srq, &q), 0);
  EXPECT_EQ(ibv_destroy_srq(srq), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
}

// ===========================================================================
// 2. Posting receives
// ===========================================================================

TEST_F(SrqTest, PostBeyondMaxWrIsEnomemWithBadWr) {
  ibv_srq_init_attr init{};
  ibv_srq* srq = make_srq(8, 1, nullptr, &init);
  ASSERT_NE(srq, nullptr);
  const uint32_t depth = init.attr.max_wr;
  ASSERT_EQ(depth, 15u);
  ibv_mr* mr = reg_buffer(64 * (depth + 2), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  for (uint32_t i = 0; i + 1 < depth; ++i) {
    ibv_sge s = sge_of(mr, 64 * i, 64);
    ASSERT_EQ(post_srq_one(srq, i, &s, 1), 0) << "WR " << i;
  }
  // One slot left: a chain of two posts the first and stops at the second.
  ibv_sge s1 = sge_of(mr, 64 * (depth - 1), 64), s2 = sge_of(mr, 64 * depth, 64);
  ibv_recv_wr w2{};
  w2.wr_id = depth;
  w2.sg_list = &s2;
  w2.num_sge = 1;
  ibv_recv_wr w1{};
  w1.wr_id = depth - 1;
  w1.sg_list = &s1;
  w1.num_sge = 1;
  w1.next = &w2;
  ibv_recv_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_srq_recv(srq, &w1, &bad), ENOMEM);
  EXPECT_EQ(bad, &w2) << "bad_wr must name the first WR not posted";
  // And a single one more: ENOMEM, bad_wr = it.
  bad = nullptr;
  w2.next = nullptr;
  EXPECT_EQ(ibv_post_srq_recv(srq, &w2, &bad), ENOMEM);
  EXPECT_EQ(bad, &w2);

  // The max_wr posted WQEs are consumed in order, and then there is room again.
  SrqConn c = connect_to_srq(IBV_QPT_RC, srq);
  ASSERT_FALSE(HasFailure());
  ibv_mr* src = reg_buffer(64, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(src, nullptr);
  for (uint32_t i = 0; i < depth; ++i) {
    fill(src->addr, 64, i);
    ibv_wc wc = send_and_receive(c, src, 0, 64);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
    EXPECT_EQ(wc.wr_id, i) << "FIFO";
    EXPECT_EQ(mismatch(static_cast<uint8_t*>(mr->addr) + 64 * i, 64, i), -1) << "message " << i;
  }
  bad = nullptr;
  EXPECT_EQ(ibv_post_srq_recv(srq, &w2, &bad), 0) << "the SRQ drained: room again";
}

TEST_F(SrqTest, ChainWithTooManySgesStopsAtThatWr) {
  ibv_srq_init_attr init{};
  ibv_srq* srq = make_srq(16, 2, nullptr, &init);
  ASSERT_NE(srq, nullptr);
  const uint32_t max_sge = init.attr.max_sge;
  ibv_mr* mr = reg_buffer(8192, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  // WR 1, 2: two SGEs each (128 + 128 bytes); WR 3: max_sge + 1 SGEs; WR 4: fine.
  std::vector<ibv_sge> sges;
  for (uint32_t i = 0; i < max_sge + 1; ++i) sges.push_back(sge_of(mr, 4096 + 16 * i, 16));
  ibv_sge a[2] = {sge_of(mr, 0, 128), sge_of(mr, 128, 128)};
  ibv_sge b[2] = {sge_of(mr, 256, 128), sge_of(mr, 384, 128)};
  ibv_sge d = sge_of(mr, 512, 256);
  ibv_recv_wr w[4]{};
  w[0] = {1, &w[1], a, 2};
  w[1] = {2, &w[2], b, 2};
  w[2] = {3, &w[3], sges.data(), int(sges.size())};
  w[3] = {4, nullptr, &d, 1};
  ibv_recv_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_srq_recv(srq, &w[0], &bad), EINVAL);
  EXPECT_EQ(bad, &w[2]) << "bad_wr must be the WR with " << max_sge + 1 << " SGEs";

  // The first two were posted and are consumed normally; the 3rd and 4th were not.
  SrqConn c = connect_to_srq(IBV_QPT_RC, srq);
  ASSERT_FALSE(HasFailure());
  ibv_mr* src = reg_buffer(256, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(src, nullptr);
  auto* base = static_cast<uint8_t*>(mr->addr);
  for (uint32_t i = 0; i < 2; ++i) {
    fill(src->addr, 200, 50 + i);
    ibv_wc wc = send_and_receive(c, src, 0, 200);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
    EXPECT_EQ(wc.wr_id, i + 1u);
    EXPECT_EQ(wc.byte_len, 200u);
    EXPECT_EQ(mismatch(base + 256 * i, 200, 50 + i), -1) << "scattered over two SGEs";
  }
  ibv_sge e = sge_of(mr, 2048, 256);
  ASSERT_EQ(post_srq_one(srq, 99, &e, 1), 0);
  fill(src->addr, 10, 99);
  ibv_wc wc = send_and_receive(c, src, 0, 10);
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(wc.wr_id, 99u) << "WRs 3 and 4 must not have been posted";
}

TEST_F(SrqTest, ZeroSgeReceiveTakesAnEmptyMessageOnly) {
  ibv_srq* srq = make_srq(8);
  ASSERT_NE(srq, nullptr);
  SrqConn c = connect_to_srq(IBV_QPT_RC, srq);
  ASSERT_FALSE(HasFailure());
  ibv_mr* mr = reg_buffer(256, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  ASSERT_EQ(post_srq_one(srq, 1, nullptr, 0), 0) << "num_sge 0 is legal";
  ASSERT_EQ(post_srq_one(srq, 2, nullptr, 0), 0);
  ibv_wc wc = send_and_receive(c, mr, 0, 0);
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.byte_len, 0u);
  // A message with payload does not fit in it: a local length error.
  ibv_sge s = sge_of(mr, 0, 32);
  ASSERT_EQ(post_send(c.snd, 3, IBV_WR_SEND, &s, 1), 0);
  VT_POLL_ONE(c.rcq, &wc);
  EXPECT_EQ(wc.wr_id, 2u);
  EXPECT_EQ(wc.status, IBV_WC_LOC_LEN_ERR) << describe(wc);
}

TEST_F(SrqTest, PostRecvOnQpWithSrqIsEinval) {
  ibv_srq* srq = make_srq(8);
  ibv_cq* cq = make_cq();
  ASSERT_TRUE(srq && cq);
  ibv_qp* qp = make_srq_qp(IBV_QPT_RC, cq, cq, srq);
  ASSERT_NE(qp, nullptr) << std::strerror(errno);
  EXPECT_EQ(qp->srq, srq);
  ConnectOpts o;
  connect_qp(qp, qp->qp_num, o);  // any state from INIT accepts receives
  ibv_mr* mr = reg_buffer(64, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  ibv_sge s = sge_of(mr, 0, 64);
  ibv_recv_wr wr{};
  wr.wr_id = 1;
  wr.sg_list = &s;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_recv(qp, &wr, &bad), EINVAL);
  EXPECT_EQ(bad, &wr);
  ibv_qp_attr a{};
  ibv_qp_init_attr qi{};
  ASSERT_EQ(ibv_query_qp(qp, &a, IBV_QP_CAP, &qi), 0);
  EXPECT_EQ(qi.srq, srq);
}

// ===========================================================================
// 3. Modify: the limit event, resize
// ===========================================================================

TEST_F(SrqTest, LimitEventFiresOnceThenRearms) {
  ibv_srq* srq = make_srq(10);
  ASSERT_NE(srq, nullptr);
  SrqConn c = connect_to_srq(IBV_QPT_RC, srq);
  ASSERT_FALSE(HasFailure());
  ibv_mr* mr = reg_buffer(64 * 16, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  for (uint32_t i = 0; i < 10; ++i) {
    ibv_sge s = sge_of(mr, 64 * i, 64);
    ASSERT_EQ(post_srq_one(srq, i, &s, 1), 0);
  }
  ibv_srq_attr a{};
  a.srq_limit = 7;
  ASSERT_EQ(ibv_modify_srq(srq, &a, IBV_SRQ_LIMIT), 0);
  ibv_srq_attr q{};
  ASSERT_EQ(ibv_query_srq(srq, &q), 0);
  EXPECT_EQ(q.srq_limit, 7u);

  uint64_t expect_wr = 0;
  auto consume = [&](int n) {
    for (int i = 0; i < n; ++i) {
      ibv_wc wc = send_and_receive(c, mr, 64 * 15, 8);
      ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
      ASSERT_EQ(wc.wr_id, expect_wr++);
    }
  };
  consume(3);  // 7 left: not below the limit
  ASSERT_FALSE(HasFailure());
  std::vector<AsyncEv> evs = async_events(ctx_, 200);
  EXPECT_TRUE(evs.empty()) << "7 posted is not below a limit of 7: " << describe_events(evs);

  consume(1);  // 6 < 7
  ASSERT_FALSE(HasFailure());
  evs = events_until(ctx_, IBV_EVENT_SRQ_LIMIT_REACHED);
  ASSERT_EQ(evs.size(), 1u) << "exactly one event, and nothing else: " << describe_events(evs);
  EXPECT_EQ(evs[0].type, IBV_EVENT_SRQ_LIMIT_REACHED);
  EXPECT_EQ(evs[0].element, srq) << "element.srq";
  ASSERT_EQ(ibv_query_srq(srq, &q), 0);
  EXPECT_EQ(q.srq_limit, 0u) << "disarmed once fired";
  EXPECT_EQ(q.max_wr, 15u);

  consume(2);  // 4 left, disarmed: nothing
  ASSERT_FALSE(HasFailure());
  evs = async_events(ctx_, 200);
  EXPECT_TRUE(evs.empty()) << "fired again without being re-armed: " << describe_events(evs);

  a.srq_limit = 3;  // re-arm below the posted count
  ASSERT_EQ(ibv_modify_srq(srq, &a, IBV_SRQ_LIMIT), 0);
  ASSERT_EQ(ibv_query_srq(srq, &q), 0);
  EXPECT_EQ(q.srq_limit, 3u);
  consume(1);  // 3 left
  ASSERT_FALSE(HasFailure());
  evs = async_events(ctx_, 200);
  EXPECT_TRUE(evs.empty()) << describe_events(evs);
  consume(1);  // 2 < 3
  ASSERT_FALSE(HasFailure());
  evs = events_until(ctx_, IBV_EVENT_SRQ_LIMIT_REACHED);
  ASSERT_EQ(evs.size(), 1u) << "re-armed: fires again, once: " << describe_events(evs);
  EXPECT_EQ(evs[0].type, IBV_EVENT_SRQ_LIMIT_REACHED);
  EXPECT_EQ(evs[0].element, srq);
  ASSERT_EQ(ibv_query_srq(srq, &q), 0);
  EXPECT_EQ(q.srq_limit, 0u);
}

TEST_F(SrqTest, PostingNeverFiresTheLimitEvent) {
  ibv_srq* srq = make_srq(32);
  ASSERT_NE(srq, nullptr);
  ibv_srq_attr a{};
  a.srq_limit = 5;
  ASSERT_EQ(ibv_modify_srq(srq, &a, IBV_SRQ_LIMIT), 0);
  ibv_mr* mr = reg_buffer(64, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  for (int i = 0; i < 8; ++i) {
    ibv_sge s = sge_of(mr, 0, 64);
    ASSERT_EQ(post_srq_one(srq, i, &s, 1), 0);
  }
  std::vector<AsyncEv> evs = async_events(ctx_, 200);
  EXPECT_TRUE(evs.empty()) << "only consumption fires the event: " << describe_events(evs);
  ibv_srq_attr q{};
  ASSERT_EQ(ibv_query_srq(srq, &q), 0);
  EXPECT_EQ(q.srq_limit, 5u);
}

TEST_F(SrqTest, ModifyLimitAboveMaxWrIsEinvalAndChangesNothing) {
  const ibv_device_attr d = device_attr();
  ibv_srq* srq = make_srq(100);  // 127
  ASSERT_NE(srq, nullptr);
  ibv_srq_attr a{};
  a.srq_limit = 10;
  ASSERT_EQ(ibv_modify_srq(srq, &a, IBV_SRQ_LIMIT), 0);
  ibv_srq_attr q{};
  for (uint32_t bad : {128u, 1000u, uint32_t(d.max_srq_wr) + 1}) {
    a.srq_limit = bad;
    EXPECT_EQ(ibv_modify_srq(srq, &a, IBV_SRQ_LIMIT), EINVAL) << "limit " << bad;
    ASSERT_EQ(ibv_query_srq(srq, &q), 0);
    EXPECT_EQ(q.srq_limit, 10u) << "a refused modify changed the limit";
    EXPECT_EQ(q.max_wr, 127u);
  }
  // Both bits, the new size valid but the limit not: nothing changes (atomic).
  a.max_wr = 500;
  a.srq_limit = 1000;
  EXPECT_EQ(ibv_modify_srq(srq, &a, IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT), EINVAL);
  ASSERT_EQ(ibv_query_srq(srq, &q), 0);
  EXPECT_EQ(q.max_wr, 127u) << "resized although the limit was refused";
  EXPECT_EQ(q.srq_limit, 10u);
  // A mask of 0 is a no-op.
  a.max_wr = 1;
  a.srq_limit = 1;
  EXPECT_EQ(ibv_modify_srq(srq, &a, 0), 0);
  ASSERT_EQ(ibv_query_srq(srq, &q), 0);
  EXPECT_EQ(q.max_wr, 127u);
  EXPECT_EQ(q.srq_limit, 10u);
  // Limit 0 disarms.
  a.srq_limit = 0;
  EXPECT_EQ(ibv_modify_srq(srq, &a, IBV_SRQ_LIMIT), 0);
  ASSERT_EQ(ibv_query_srq(srq, &q), 0);
  EXPECT_EQ(q.srq_limit, 0u);
}

TEST_F(SrqTest, ResizeGrowKeepsPostedWqesInOrder) {
  const ibv_device_attr d = device_attr();
  ASSERT_TRUE(d.device_cap_flags & IBV_DEVICE_SRQ_RESIZE)
      << "the engine resizes SRQs; it must say so";
  ibv_srq* srq = make_srq(15);
  ASSERT_NE(srq, nullptr);
  SrqConn c = connect_to_srq(IBV_QPT_RC, srq);
  ASSERT_FALSE(HasFailure());
  constexpr uint32_t kSlot = 128, kTotal = 60;
  ibv_mr* mr = reg_buffer(kSlot * kTotal, IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* src = reg_buffer(kSlot, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(mr && src);
  uint32_t next_post = 0, next_recv = 0;
  auto post = [&](uint32_t n) {
    for (uint32_t i = 0; i < n; ++i, ++next_post) {
      ibv_sge s = sge_of(mr, kSlot * next_post, kSlot);
      ASSERT_EQ(post_srq_one(srq, next_post, &s, 1), 0) << "WR " << next_post;
    }
  };
  auto consume = [&](uint32_t n) {
    for (uint32_t i = 0; i < n; ++i, ++next_recv) {
      fill(src->addr, 100, next_recv);
      ibv_wc wc = send_and_receive(c, src, 0, 100);
      ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
      ASSERT_EQ(wc.wr_id, next_recv) << "WQEs out of order after a resize";
      ASSERT_EQ(mismatch(static_cast<uint8_t*>(mr->addr) + kSlot * next_recv, 100, next_recv), -1);
    }
  };
  // Fill the ring, take 5 and post 5 more so that the posted WQEs wrap
  // around the end of the old ring, then grow.
  post(15);
  consume(5);
  post(5);
  ASSERT_FALSE(HasFailure());
  ibv_srq_attr a{};
  a.max_wr = 40;
  ASSERT_EQ(ibv_modify_srq(srq, &a, IBV_SRQ_MAX_WR), 0);
  ibv_srq_attr q{};
  ASSERT_EQ(ibv_query_srq(srq, &q), 0);
  EXPECT_EQ(q.max_wr, 63u) << "query must show the new depth";
  // The new room is usable: 15 posted now, 40 more fit beside them.
  post(40);
  ASSERT_FALSE(HasFailure());
  consume(kTotal - 5);
}

TEST_F(SrqTest, ResizeBelowOutstandingIsEinval) {
  ibv_srq* srq = make_srq(100);  // 127
  ASSERT_NE(srq, nullptr);
  ibv_mr* mr = reg_buffer(64 * 20, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  for (uint32_t i = 0; i < 20; ++i) {
    ibv_sge s = sge_of(mr, 64 * i, 64);
    ASSERT_EQ(post_srq_one(srq, i, &s, 1), 0);
  }
  const ibv_device_attr d = device_attr();
  ibv_srq_attr a{}, q{};
  for (uint32_t bad : {5u, 19u, 0u, uint32_t(d.max_srq_wr) + 1}) {
    a.max_wr = bad;
    EXPECT_EQ(ibv_modify_srq(srq, &a, IBV_SRQ_MAX_WR), EINVAL) << "max_wr " << bad;
    ASSERT_EQ(ibv_query_srq(srq, &q), 0);
    EXPECT_EQ(q.max_wr, 127u);
  }
  // Below an armed limit: EINVAL too.
  a.srq_limit = 50;
  ASSERT_EQ(ibv_modify_srq(srq, &a, IBV_SRQ_LIMIT), 0);
  a.max_wr = 30;  // 31 < 50
  EXPECT_EQ(ibv_modify_srq(srq, &a, IBV_SRQ_MAX_WR), EINVAL);
  ASSERT_EQ(ibv_query_srq(srq, &q), 0);
  EXPECT_EQ(q.max_wr, 127u);
  EXPECT_EQ(q.srq_limit, 50u);
  a.srq_limit = 0;
  ASSERT_EQ(ibv_modify_srq(srq, &a, IBV_SRQ_LIMIT), 0);
  // Shrinking to exactly what is posted works, and keeps them.
  a.max_wr = 20;
  ASSERT_EQ(ibv_modify_srq(srq, &a, IBV_SRQ_MAX_WR), 0);
  ASSERT_EQ(ibv_query_srq(srq, &q), 0);
  EXPECT_EQ(q.max_wr, 31u);
  SrqConn c = connect_to_srq(IBV_QPT_RC, srq);
  ASSERT_FALSE(HasFailure());
  ibv_mr* src = reg_buffer(64, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(src, nullptr);
  for (uint32_t i = 0; i < 20; ++i) {
    ibv_wc wc = send_and_receive(c, src, 0, 32);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
    ASSERT_EQ(wc.wr_id, i);
  }
}

// ===========================================================================
// 4. Destroy, attached QPs, LAST_WQE_REACHED
// ===========================================================================

TEST_F(SrqTest, DestroyWithQpAttachedIsEbusy) {
  ibv_srq* srq = make_srq(8);
  ibv_cq* cq = make_cq();
  ASSERT_TRUE(srq && cq);
  ibv_qp* q1 = make_srq_qp(IBV_QPT_RC, cq, cq, srq);
  ibv_qp* q2 = make_srq_qp(IBV_QPT_UD, cq, cq, srq);
  ASSERT_TRUE(q1 && q2) << std::strerror(errno);
  EXPECT_EQ(ibv_destroy_srq(srq), EBUSY);
  // Still usable after the refusal.
  ibv_mr* mr = reg_buffer(64, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  ibv_sge s = sge_of(mr, 0, 64);
  EXPECT_EQ(post_srq_one(srq, 1, &s, 1), 0);
  ibv_srq_attr q{};
  EXPECT_EQ(ibv_query_srq(srq, &q), 0);
  disown(q1);
  ASSERT_EQ(ibv_destroy_qp(q1), 0);
  EXPECT_EQ(ibv_destroy_srq(srq), EBUSY) << "one QP is still attached";
  disown(q2);
  ASSERT_EQ(ibv_destroy_qp(q2), 0);
  disown(srq);
  EXPECT_EQ(ibv_destroy_srq(srq), 0) << "no QP attached any more (posted WQEs are discarded)";
}

TEST_F(SrqTest, LastWqeReachedWhenQpGoesToErrorByModify) {
  ibv_srq* srq = make_srq(16);
  ASSERT_NE(srq, nullptr);
  SrqConn c1 = connect_to_srq(IBV_QPT_RC, srq);
  SrqConn c2 = connect_to_srq(IBV_QPT_RC, srq);
  ASSERT_FALSE(HasFailure());
  ibv_mr* mr = reg_buffer(64 * 4, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  for (uint32_t i = 0; i < 2; ++i) {
    ibv_sge s = sge_of(mr, 64 * i, 64);
    ASSERT_EQ(post_srq_one(srq, i, &s, 1), 0);
  }
  ibv_qp_attr err{};
  err.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(ibv_modify_qp(c1.rcv, &err, IBV_QP_STATE), 0);
  std::vector<AsyncEv> evs = events_until(ctx_, IBV_EVENT_QP_LAST_WQE_REACHED);
  EXPECT_EQ(count_events(evs, IBV_EVENT_QP_LAST_WQE_REACHED, c1.rcv), 1u)
      << "exactly one LAST_WQE_REACHED for the QP: " << describe_events(evs);
  EXPECT_EQ(evs.size(), 1u) << "and nothing else: " << describe_events(evs);
  // ERR -> ERR again: no second event.
  ASSERT_EQ(ibv_modify_qp(c1.rcv, &err, IBV_QP_STATE), 0);
  evs = async_events(ctx_, 200);
  EXPECT_TRUE(evs.empty()) << describe_events(evs);
  // The SRQ's WQEs belong to no QP: none is flushed on the erring QP's CQ ...
  std::vector<ibv_wc> flushed = drain_for(c1.rcq, 100);
  EXPECT_TRUE(flushed.empty()) << "an SRQ WQE was flushed: " << describe(flushed[0]);
  // ... and the other QP sharing the SRQ takes them, in order.
  for (uint64_t i = 0; i < 2; ++i) {
    ibv_wc wc = send_and_receive(c2, mr, 64 * 3, 16);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
    EXPECT_EQ(wc.wr_id, i);
    EXPECT_EQ(wc.qp_num, c2.rcv->qp_num);
  }
}

TEST_F(SrqTest, LastWqeReachedWhenQpGoesToErrorByTransportError) {
  ibv_srq* srq = make_srq(16);
  ASSERT_NE(srq, nullptr);
  SrqConn c1 = connect_to_srq(IBV_QPT_RC, srq);
  SrqConn c2 = connect_to_srq(IBV_QPT_RC, srq);
  ASSERT_FALSE(HasFailure());
  ibv_mr* mr = reg_buffer(4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  ibv_sge small = sge_of(mr, 0, 16), big = sge_of(mr, 1024, 1024);
  ASSERT_EQ(post_srq_one(srq, 0, &small, 1), 0);
  ASSERT_EQ(post_srq_one(srq, 1, &big, 1), 0);
  // 100 bytes into a 16-byte receive: the receiving QP errs (LOC_LEN_ERR).
  ibv_sge s = sge_of(mr, 2048, 100);
  ASSERT_EQ(post_send(c1.snd, 7, IBV_WR_SEND, &s, 1), 0);
  ibv_wc wc;
  VT_POLL_ONE(c1.rcq, &wc);
  EXPECT_EQ(wc.wr_id, 0u);
  EXPECT_EQ(wc.status, IBV_WC_LOC_LEN_ERR) << describe(wc);
  VT_POLL_ONE(c1.scq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_REM_INV_REQ_ERR) << describe(wc);
  std::vector<AsyncEv> evs = events_until(ctx_, IBV_EVENT_QP_LAST_WQE_REACHED);
  EXPECT_EQ(count_events(evs, IBV_EVENT_QP_LAST_WQE_REACHED, c1.rcv), 1u) << describe_events(evs);
  EXPECT_EQ(qp_state(c1.rcv), IBV_QPS_ERR);
  // The other QP is undisturbed and takes the next WQE.
  wc = send_and_receive(c2, mr, 2048, 100);
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(wc.wr_id, 1u);
}

// ===========================================================================
// 5. Traffic: RC, UC and UD on one SRQ; many QPs
// ===========================================================================

TEST_F(SrqTest, RcUcAndUdQpsTakeReceivesFromOneSrq) {
  ibv_srq* srq = make_srq(16);
  ASSERT_NE(srq, nullptr);
  SrqConn rc = connect_to_srq(IBV_QPT_RC, srq);
  SrqConn uc = connect_to_srq(IBV_QPT_UC, srq);
  SrqConn ud = connect_to_srq(IBV_QPT_UD, srq);
  ASSERT_FALSE(HasFailure());
  ibv_ah_attr av = loopback_av();
  ibv_ah* ah = make_ah(&av);
  ASSERT_NE(ah, nullptr);
  constexpr uint32_t kSlot = 512;
  ibv_mr* mr = reg_buffer(kSlot * 6, IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* src = reg_buffer(kSlot, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(mr && src);
  auto* base = static_cast<uint8_t*>(mr->addr);
  for (uint32_t i = 0; i < 6; ++i) {
    ibv_sge s = sge_of(mr, kSlot * i, kSlot);
    ASSERT_EQ(post_srq_one(srq, i, &s, 1), 0);
  }
  struct Step {
    SrqConn* c;
    uint32_t len;
  } steps[] = {{&rc, 300}, {&uc, 200}, {&ud, 100}, {&ud, 50}, {&uc, 20}, {&rc, 10}};
  for (uint32_t i = 0; i < 6; ++i) {
    const Step& st = steps[i];
    const bool is_ud = st.c == &ud;
    fill(src->addr, st.len, 70 + i);
    ibv_sge s = sge_of(src, 0, st.len);
    if (is_ud) {
      ibv_send_wr wr{};
      wr.wr_id = i;
      wr.opcode = IBV_WR_SEND;
      wr.sg_list = &s;
      wr.num_sge = 1;
      wr.send_flags = IBV_SEND_SIGNALED;
      wr.wr.ud.ah = ah;
      wr.wr.ud.remote_qpn = ud.rcv->qp_num;
      wr.wr.ud.remote_qkey = ConnectOpts{}.qkey;
      ibv_send_wr* bad;
      ASSERT_EQ(ibv_post_send(ud.snd, &wr, &bad), 0);
    } else {
      ASSERT_EQ(post_send(st.c->snd, i, IBV_WR_SEND, &s, 1), 0);
    }
    ibv_wc wc;
    VT_POLL_ONE(st.c->scq, &wc);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
    VT_POLL_ONE(st.c->rcq, &wc);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << "step " << i << ": " << describe(wc);
    EXPECT_EQ(wc.wr_id, i) << "step " << i << ": the oldest SRQ WQE";
    EXPECT_EQ(wc.qp_num, st.c->rcv->qp_num) << "step " << i;
    EXPECT_EQ(wc.opcode, IBV_WC_RECV);
    if (is_ud) {
      EXPECT_EQ(wc.byte_len, 40 + st.len) << "UD: 40-byte GRH plus the payload";
      EXPECT_TRUE(wc.wc_flags & IBV_WC_GRH);
      EXPECT_EQ(wc.src_qp, ud.snd->qp_num);
      EXPECT_EQ(base[kSlot * i + 20] >> 4, 4) << "IPv4 header in the GRH's last 20 bytes";
      EXPECT_EQ(mismatch(base + kSlot * i + 40, st.len, 70 + i), -1) << "step " << i;
    } else {
      EXPECT_EQ(wc.byte_len, st.len);
      EXPECT_EQ(mismatch(base + kSlot * i, st.len, 70 + i), -1) << "step " << i;
    }
    // Nothing landed on the other receivers' CQs.
    for (SrqConn* other : {&rc, &uc, &ud})
      if (other != st.c) { EXPECT_TRUE(cq_empty(other->rcq)); }
  }
}

TEST_F(SrqTest, SixteenRcQpsShareOneSrqInOrderPerQp) {
  constexpr uint32_t kQps = 16, kMsgs = 32, kSlot = 4096;
  constexpr uint32_t kTotal = kQps * kMsgs;
  // Every 4th message spans three packets (MTU 1024), so multi-packet
  // messages of different QPs interleave on the SRQ.
  auto len_of = [](uint32_t seq) { return seq % 4 == 3 ? 2500u : 64u + seq; };
  ibv_srq_init_attr init{};
  ibv_srq* srq = make_srq(kTotal, 1, nullptr, &init);
  ASSERT_NE(srq, nullptr);
  ibv_cq* scq = make_cq(int(kTotal) + 16);
  ASSERT_NE(scq, nullptr);
  std::vector<SrqConn> conns;
  for (uint32_t i = 0; i < kQps; ++i) {
    conns.push_back(connect_to_srq(IBV_QPT_RC, srq, nullptr, scq));
    ASSERT_FALSE(HasFailure());
  }
  ibv_mr* dst = reg_buffer(size_t(kSlot) * kTotal, IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* src = reg_buffer(size_t(kSlot) * kTotal, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(dst && src);
  auto* d = static_cast<uint8_t*>(dst->addr);
  auto* s = static_cast<uint8_t*>(src->addr);
  for (uint32_t w = 0; w < kTotal; ++w) {
    ibv_sge sg = sge_of(dst, size_t(kSlot) * w, kSlot);
    ASSERT_EQ(post_srq_one(srq, w, &sg, 1), 0) << "WR " << w;
  }
  // Round robin over the QPs: message `seq` of QP i is slot i * kMsgs + seq
  // of src, tagged with (i, seq) in its first 8 bytes.
  for (uint32_t seq = 0; seq < kMsgs; ++seq)
    for (uint32_t i = 0; i < kQps; ++i) {
      const size_t off = size_t(kSlot) * (i * kMsgs + seq);
      fill(s + off, len_of(seq), i * kMsgs + seq);
      std::memcpy(s + off, &i, 4);
      std::memcpy(s + off + 4, &seq, 4);
      ibv_sge sg = sge_of(src, off, len_of(seq));
      ASSERT_EQ(post_send(conns[i].snd, (uint64_t(i) << 32) | seq, IBV_WR_SEND, &sg, 1), 0);
    }
  std::vector<ibv_wc> sent = poll_n(scq, kTotal, 30);
  ASSERT_EQ(sent.size(), kTotal) << "send completions";
  for (const ibv_wc& wc : sent) EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);

  std::set<uint64_t> used;
  for (uint32_t i = 0; i < kQps; ++i) {
    std::vector<ibv_wc> got = poll_n(conns[i].rcq, kMsgs, 10);
    ASSERT_EQ(got.size(), kMsgs) << "QP " << i << ": receive completions";
    EXPECT_TRUE(cq_empty(conns[i].rcq)) << "QP " << i << ": extra completions";
    uint64_t last_wr = 0;
    for (uint32_t seq = 0; seq < kMsgs; ++seq) {
      const ibv_wc& wc = got[seq];
      ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << "QP " << i << ": " << describe(wc);
      EXPECT_EQ(wc.qp_num, conns[i].rcv->qp_num) << "QP " << i;
      EXPECT_EQ(wc.opcode, IBV_WC_RECV);
      EXPECT_EQ(wc.byte_len, len_of(seq)) << "QP " << i << " message " << seq;
      ASSERT_LT(wc.wr_id, kTotal);
      EXPECT_TRUE(used.insert(wc.wr_id).second) << "SRQ WQE " << wc.wr_id << " completed twice";
      if (seq) { EXPECT_GT(wc.wr_id, last_wr) << "QP " << i << ": later message, earlier WQE"; }
      last_wr = wc.wr_id;
      const uint8_t* m = d + size_t(kSlot) * wc.wr_id;
      uint32_t tag_qp, tag_seq;
      std::memcpy(&tag_qp, m, 4);
      std::memcpy(&tag_seq, m + 4, 4);
      EXPECT_EQ(tag_qp, i) << "message landed on the wrong QP";
      EXPECT_EQ(tag_seq, seq) << "QP " << i << ": out of order";
      EXPECT_EQ(std::memcmp(m, s + size_t(kSlot) * (i * kMsgs + seq), len_of(seq)), 0)
          << "QP " << i << " message " << seq << ": payload differs";
    }
  }
  EXPECT_EQ(used.size(), size_t(kTotal)) << "every message once, every WQE once";
}

// Four threads post to one SRQ while a sender consumes it (an empty SRQ is
// RNR-NAKed and retried forever): every WQE completes exactly once, each
// poster's WQEs in the order it posted them.
TEST_F(SrqTest, ConcurrentPostersWhileConsumingLoseNothing) {
  constexpr uint32_t kThreads = 4, kPerThread = 100, kTotal = kThreads * kPerThread;
  ibv_srq* srq = make_srq(63);
  ASSERT_NE(srq, nullptr);
  ibv_cq* rcq = make_cq(int(kTotal) + 16);
  ASSERT_NE(rcq, nullptr);
  SrqConn c = connect_to_srq(IBV_QPT_RC, srq, rcq);
  ASSERT_FALSE(HasFailure());
  ibv_mr* mr = reg_buffer(64 * kThreads, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  std::atomic<int> post_errors{0};
  std::vector<std::thread> posters;
  for (uint32_t t = 0; t < kThreads; ++t)
    posters.emplace_back([&, t] {
      for (uint32_t i = 0; i < kPerThread;) {
        ibv_sge s = sge_of(mr, 64 * t, 64);
        const int rc = post_srq_one(srq, uint64_t(t) << 32 | i, &s, 1);
        if (rc == 0) {
          ++i;
        } else if (rc == ENOMEM) {
          std::this_thread::sleep_for(std::chrono::microseconds(200));  // full: wait for room
        } else {
          ++post_errors;
          return;
        }
        if (i % 16 == 0) std::this_thread::yield();
      }
    });
  // Sends in batches as the send queue allows.
  uint32_t sent = 0, done = 0;
  ibv_sge s = sge_of(mr, 0, 8);
  const auto end = deadline_after(30);
  while (done < kTotal && Clock::now() < end) {
    while (sent < kTotal && sent - done < 32) {
      if (post_send(c.snd, sent, IBV_WR_SEND, &s, 1) != 0) break;
      ++sent;
    }
    ibv_wc wc[16];
    const int n = ibv_poll_cq(c.scq, 16, wc);
    for (int k = 0; k < n; ++k) EXPECT_EQ(wc[k].status, IBV_WC_SUCCESS) << describe(wc[k]);
    if (n > 0) done += uint32_t(n);
  }
  for (std::thread& t : posters) t.join();
  EXPECT_EQ(post_errors.load(), 0);
  ASSERT_EQ(done, kTotal) << "send completions";
  std::vector<ibv_wc> got = poll_n(rcq, kTotal);
  ASSERT_EQ(got.size(), size_t(kTotal));
  std::set<uint64_t> seen;
  std::vector<int64_t> last(kThreads, -1);
  for (const ibv_wc& wc : got) {
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
    const uint32_t t = uint32_t(wc.wr_id >> 32), i = uint32_t(wc.wr_id);
    ASSERT_LT(t, kThreads);
    EXPECT_TRUE(seen.insert(wc.wr_id).second) << "WQE " << t << "/" << i << " completed twice";
    EXPECT_EQ(int64_t(i), last[t] + 1) << "poster " << t << ": its WQEs out of order";
    last[t] = i;
  }
  EXPECT_EQ(seen.size(), size_t(kTotal));
  EXPECT_TRUE(cq_empty(rcq));
}

// ===========================================================================
// 6. XRC domains
// ===========================================================================


}  // namespace
}  // namespace vt
