// Verbs behaviour that conformance suites (rdma-core's pyverbs) and real
// consumers (UCX, MPI) rely on, each as mlx5 or rxe gives it (issue 9,
// points 3, 4, 7 and 8).
#include <poll.h>

#include <cstring>

#include "tests/integration/verbs_fixture.h"

namespace vt {
namespace {

class Conformance : public VerbsTest {};

// pyverbs sets IBV_QP_INIT_ATTR_CREATE_FLAGS at random, often with no flag.
TEST_F(Conformance, CreateQpExWithCreateFlagsMaskAndNoFlagsIsAnOrdinaryQp) {
  ibv_cq* cq = make_cq();
  ASSERT_NE(cq, nullptr);
  for (ibv_qp_type type : {IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD}) {
    ibv_qp_init_attr_ex attr{};
    attr.qp_type = type;
    attr.send_cq = cq;
    attr.recv_cq = cq;
    attr.cap = {8, 8, 1, 1, 0};
    attr.pd = pd_;
    attr.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
    attr.create_flags = 0;
    ibv_qp* qp = make_qp_ex(&attr);
    ASSERT_NE(qp, nullptr) << "type " << type << ": " << std::strerror(errno);
    EXPECT_EQ(qp->qp_type, type);
    // A flag the device does not implement is refused as mlx5 refuses it.
    attr.create_flags = IBV_QP_CREATE_BLOCK_SELF_MCAST_LB;
    errno = 0;
    EXPECT_EQ(ibv_create_qp_ex(ctx_, &attr), nullptr) << "type " << type;
    EXPECT_EQ(errno, EOPNOTSUPP) << "type " << type;
  }
}

// rxe copies IBV_ACCESS_MW_BIND into the QP, mlx5 accepts it; suites set it.
TEST_F(Conformance, MwBindInQpAccessFlagsIsAccepted) {
  ConnectOpts o;
  o.access |= IBV_ACCESS_MW_BIND;
  Pair p = make_pair(IBV_QPT_RC, o);
  ASSERT_FALSE(HasFailure());
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(ibv_query_qp(p.b.qp, &attr, IBV_QP_ACCESS_FLAGS, &init), 0);
  EXPECT_TRUE(attr.qp_access_flags & IBV_ACCESS_MW_BIND);
  EXPECT_TRUE(attr.qp_access_flags & IBV_ACCESS_REMOTE_WRITE);
  // Changed again in RTS (RTS->RTS allows the access flags).
  attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_MW_BIND;
  ASSERT_EQ(ibv_modify_qp(p.b.qp, &attr, IBV_QP_ACCESS_FLAGS), 0);

  ibv_mr* src = reg_buffer(256, IBV_ACCESS_LOCAL_WRITE, 0x3c);
  ibv_mr* dst = reg_buffer(256, kRw, 0);
  ASSERT_TRUE(src && dst);
  ibv_sge s = sge_of(src, 0, 256);
  ASSERT_EQ(post_send(p.a.qp, 1, IBV_WR_RDMA_WRITE, &s, 1, IBV_SEND_SIGNALED, addr_of(dst),
                      dst->rkey),
            0);
  ibv_wc wc;
  VT_POLL_ONE(p.a.cq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(std::memcmp(src->addr, dst->addr, 256), 0);
}

// mlx5 and rxe check only the bytes a message writes: a receive SGE may run
// past the end of its MR as long as the message stops short of it.
TEST_F(Conformance, ReceiveSgeLongerThanItsMrTakesAMessageThatFits) {
  Pair p = make_pair();
  ASSERT_FALSE(HasFailure());
  ibv_mr* src = reg_buffer(4096, IBV_ACCESS_LOCAL_WRITE, 0);
  ibv_mr* dst = reg_buffer(4096, IBV_ACCESS_LOCAL_WRITE, 0);
  ASSERT_TRUE(src && dst);
  auto* bytes = static_cast<uint8_t*>(src->addr);
  for (int i = 0; i < 4096; ++i) bytes[i] = uint8_t(i * 7 + 1);

  // The SGE covers [3072, 4128): 32 bytes past the MR. A 1 KiB SEND fits.
  ibv_sge r{addr_of(dst, 3072), 1024 + 32, dst->lkey};
  ASSERT_EQ(post_recv(p.b.qp, 10, &r, 1), 0);
  ibv_sge s = sge_of(src, 0, 1024);
  ASSERT_EQ(post_send(p.a.qp, 11, IBV_WR_SEND, &s, 1), 0);
  ibv_wc wc;
  VT_POLL_ONE(p.b.cq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(wc.byte_len, 1024u);
  VT_POLL_ONE(p.a.cq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(std::memcmp(static_cast<uint8_t*>(dst->addr) + 3072, src->addr, 1024), 0);

  // A message that reaches past the MR's end is a protection error there.
  ASSERT_EQ(post_recv(p.b.qp, 12, &r, 1), 0);
  s = sge_of(src, 0, 1024 + 16);
  ASSERT_EQ(post_send(p.a.qp, 13, IBV_WR_SEND, &s, 1), 0);
  VT_POLL_ONE(p.b.cq, &wc);
  EXPECT_EQ(wc.wr_id, 12u);
  EXPECT_EQ(wc.status, IBV_WC_LOC_PROT_ERR) << describe(wc);
  VT_POLL_ONE(p.a.cq, &wc);
  EXPECT_EQ(wc.wr_id, 13u);
  EXPECT_EQ(wc.status, IBV_WC_REM_OP_ERR) << describe(wc);
}

TEST_F(Conformance, UdReceiveSgeLongerThanItsMrTakesADatagramThatFits) {
  Pair p = make_pair(IBV_QPT_UD);
  ASSERT_FALSE(HasFailure());
  ibv_mr* src = reg_buffer(4096, IBV_ACCESS_LOCAL_WRITE, 0x21);
  ibv_mr* dst = reg_buffer(4096, IBV_ACCESS_LOCAL_WRITE, 0);
  ASSERT_TRUE(src && dst);
  ibv_ah_attr av = loopback_av();
  ibv_ah* ah = make_ah(&av);
  ASSERT_NE(ah, nullptr);
  // 40 bytes of GRH + 512 of payload from offset 3072; the SGE asks for 2 KiB.
  ibv_sge r{addr_of(dst, 3072), 2048, dst->lkey};
  ASSERT_EQ(post_recv(p.b.qp, 20, &r, 1), 0);
  ibv_sge s = sge_of(src, 0, 512);
  ASSERT_EQ(post_ud(p.a.qp, 21, &s, ah, p.b.qp->qp_num, ConnectOpts{}.qkey), 0);
  ibv_wc wc;
  VT_POLL_ONE(p.b.cq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(wc.byte_len, 40u + 512u);
  EXPECT_EQ(std::memcmp(static_cast<uint8_t*>(dst->addr) + 3072 + 40, src->addr, 512), 0);
  VT_POLL_ONE(p.a.cq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
}

// mlx5: an "any completion" arm stays in force until the next event; a
// solicited-only request after it does not weaken it.
TEST_F(Conformance, ReqNotifyAnyThenSolicitedOnlyKeepsTheStrongerArm) {
  ibv_comp_channel* ch = make_channel();
  ASSERT_NE(ch, nullptr);
  ibv_cq* cqb = make_cq(64, ch);
  ibv_cq* cqa = make_cq();
  ASSERT_TRUE(cqa && cqb);
  ibv_qp* qa = make_qp(IBV_QPT_RC, cqa, cqa);
  ibv_qp* qb = make_qp(IBV_QPT_RC, cqb, cqb);
  ASSERT_TRUE(qa && qb);
  connect_qp(qa, qb->qp_num);
  connect_qp(qb, qa->qp_num);
  ASSERT_FALSE(HasFailure());
  ibv_mr* mr = reg_buffer(4096, IBV_ACCESS_LOCAL_WRITE, 1);
  ASSERT_NE(mr, nullptr);
  ibv_sge s = sge_of(mr, 2048, 16);
  unsigned events = 0;
  for (int round = 0; round < 2; ++round) {
    ASSERT_EQ(ibv_req_notify_cq(cqb, 0), 0);
    ASSERT_EQ(ibv_req_notify_cq(cqb, 1), 0);
    ASSERT_EQ(post_recv_mr(qb, 10 + round, mr, 0, 1024), 0);
    ASSERT_EQ(post_send(qa, round, IBV_WR_SEND, &s, 1), 0);  // not solicited
    ASSERT_TRUE(fd_readable(ch->fd, 5000)) << "no event for an ordinary completion, round " << round;
    ibv_cq* ev_cq = nullptr;
    void* ev_ctx = nullptr;
    ASSERT_EQ(ibv_get_cq_event(ch, &ev_cq, &ev_ctx), 0);
    ++events;
    EXPECT_EQ(ev_cq, cqb);
    ibv_wc wc;
    VT_POLL_ONE(cqb, &wc);
    VT_POLL_ONE(cqa, &wc);
  }
  // After the event, a solicited-only arm is solicited-only again.
  ASSERT_EQ(ibv_req_notify_cq(cqb, 1), 0);
  ASSERT_EQ(post_recv_mr(qb, 30, mr, 0, 1024), 0);
  ASSERT_EQ(post_send(qa, 30, IBV_WR_SEND, &s, 1), 0);
  ibv_wc wc;
  VT_POLL_ONE(cqb, &wc);
  EXPECT_FALSE(fd_readable(ch->fd, 100)) << "a solicited-only arm fired for an ordinary completion";
  VT_POLL_ONE(cqa, &wc);
  ibv_ack_cq_events(cqb, events);
}

}  // namespace
}  // namespace vt
