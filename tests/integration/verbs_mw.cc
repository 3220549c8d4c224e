// Memory windows through the verbs (issue 13; IBA 10.6.7, rxe_mw.c, mlx5):
// ibv_alloc_mw / ibv_dealloc_mw, type 1 windows bound by ibv_bind_mw (a bind
// work request on the QP), type 2 windows bound by IBV_WR_BIND_MW and
// ibv_wr_bind_mw, invalidated by IBV_WR_LOCAL_INV, ibv_wr_local_inv and a
// peer's SEND_WITH_INV, every bind rule (IBV_WC_MW_BIND_ERR), and remote
// WRITE, READ and atomics through a window, allowed and denied (the
// requester gets IBV_WC_REM_ACCESS_ERR as from a NIC). Peer a reaches the
// memory behind b's windows.
#include <cerrno>
#include <cstring>
#include <string>

#include "verbs_fixture.h"

namespace vt {
namespace {

constexpr int kBindable = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND;  // no remote right of its own
constexpr int kAllRemote = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
constexpr size_t kLen = 16384;

class Mw : public VerbsTest {
 protected:
  void SetUp() override {
    VerbsTest::SetUp();
    mr_ = reg_buffer(kLen, kBindable, 0x5a);
    ASSERT_NE(mr_, nullptr);
    src_ = reg_buffer(kLen, kRw, 0xc3);
    ASSERT_NE(src_, nullptr);
  }
  ibv_mw* alloc(ibv_mw_type type, ibv_pd* pd = nullptr) {
    ibv_mw* mw = ibv_alloc_mw(pd ? pd : pd_, type);
    EXPECT_NE(mw, nullptr) << "ibv_alloc_mw: " << std::strerror(errno);
    if (mw) defer([mw] { EXPECT_EQ(ibv_dealloc_mw(mw), 0); });
    return mw;
  }
  // ibv_bind_mw (type 1) on qp; returns the bind's completion status.
  ibv_wc_status bind1(const End& e, ibv_mw* mw, uint64_t offset, uint64_t len, int access, ibv_mr* mr = nullptr) {
    ibv_mw_bind b{};
    b.wr_id = 77;
    b.send_flags = IBV_SEND_SIGNALED;
    b.bind_info = {mr ? mr : mr_, addr_of(mr ? mr : mr_, offset), len, unsigned(access)};
    if (len == 0) b.bind_info = {nullptr, 0, 0, unsigned(access)};
    if (int rc = ibv_bind_mw(e.qp, mw, &b)) {
      ADD_FAILURE() << "ibv_bind_mw: " << std::strerror(rc);
      return IBV_WC_GENERAL_ERR;
    }
    return completion(e.cq, IBV_WC_BIND_MW);
  }
  // IBV_WR_BIND_MW (type 2) through ibv_post_send; *rkey gets the window's new R_Key.
  ibv_wc_status bind2(const End& e, ibv_mw* mw, uint64_t offset, uint64_t len, int access, uint32_t* rkey,
                      ibv_mr* mr = nullptr) {
    ibv_send_wr wr{};
    wr.wr_id = 78;
    wr.opcode = IBV_WR_BIND_MW;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.bind_mw.mw = mw;
    wr.bind_mw.rkey = *rkey = ibv_inc_rkey(mw->rkey);
    wr.bind_mw.bind_info = {mr ? mr : mr_, addr_of(mr ? mr : mr_, offset), len, unsigned(access)};
    ibv_send_wr* bad = nullptr;
    if (int rc = ibv_post_send(e.qp, &wr, &bad)) {
      ADD_FAILURE() << "ibv_post_send(BIND_MW): " << std::strerror(rc);
      return IBV_WC_GENERAL_ERR;
    }
    return completion(e.cq, IBV_WC_BIND_MW);
  }
  ibv_wc_status local_inv(const End& e, uint32_t rkey) {
    ibv_send_wr wr{};
    wr.wr_id = 79;
    wr.opcode = IBV_WR_LOCAL_INV;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.invalidate_rkey = rkey;
    ibv_send_wr* bad = nullptr;
    if (int rc = ibv_post_send(e.qp, &wr, &bad)) {
      ADD_FAILURE() << "ibv_post_send(LOCAL_INV): " << std::strerror(rc);
      return IBV_WC_GENERAL_ERR;
    }
    return completion(e.cq, IBV_WC_LOCAL_INV);
  }
  // One signaled RDMA operation (or atomic) from e's QP against b's memory at `offset`.
  ibv_wc_status rdma(const End& e, ibv_wr_opcode op, uint32_t rkey, uint64_t remote, uint32_t len = 256) {
    ibv_sge sge = sge_of(src_, 0, len);
    int rc;
    if (op == IBV_WR_ATOMIC_FETCH_AND_ADD || op == IBV_WR_ATOMIC_CMP_AND_SWP) {
      sge.length = 8;
      rc = post_atomic(e.qp, 5, op, &sge, remote, rkey, 1, 2);
    } else {
      rc = post_send(e.qp, 5, op, &sge, 1, IBV_SEND_SIGNALED, remote, rkey);
    }
    if (rc) return IBV_WC_GENERAL_ERR;
    ibv_wc wc{};
    if (!poll_one(e.cq, &wc)) return IBV_WC_GENERAL_ERR;
    return wc.status;
  }
  uint64_t at(size_t offset) const { return addr_of(mr_, offset); }
  uint8_t* bytes(size_t offset) const { return static_cast<uint8_t*>(mr_->addr) + offset; }

  ibv_mr* mr_ = nullptr;   // b's memory the windows open onto
  ibv_mr* src_ = nullptr;  // a's local buffer

 private:
  ibv_wc_status completion(ibv_cq* cq, ibv_wc_opcode expected) {
    ibv_wc wc{};
    if (!poll_one(cq, &wc)) return IBV_WC_GENERAL_ERR;
    if (wc.status == IBV_WC_SUCCESS) {
      EXPECT_EQ(wc.opcode, expected);
    }
    return wc.status;
  }
};

TEST_F(Mw, DeviceAdvertisesWindowsAndDevinfoShowsThem) {
  ibv_device_attr attr{};
  ASSERT_EQ(ibv_query_device(ctx_, &attr), 0);
  const unsigned flags = IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2A | IBV_DEVICE_MEM_WINDOW_TYPE_2B;
  EXPECT_EQ(unsigned(attr.device_cap_flags) & flags, flags);
  EXPECT_EQ(attr.max_mw, 65536);
  ibv_device_attr_ex ex{};
  ASSERT_EQ(ibv_query_device_ex(ctx_, nullptr, &ex), 0);
  EXPECT_EQ(ex.device_cap_flags_ex & flags, flags);
  std::string out;
  ASSERT_EQ(run_command("ibv_devinfo -v -d uroce0", &out), 0) << out;
  for (const char* s : {"MEM_WINDOW", "MEM_WINDOW_TYPE_2A", "MEM_WINDOW_TYPE_2B", "max_mw:\t\t\t\t65536"})
    EXPECT_NE(out.find(s), std::string::npos) << s << " not in\n" << out;
}

TEST_F(Mw, AllocAndDealloc) {
  ibv_mw* one = alloc(IBV_MW_TYPE_1);
  ibv_mw* two = alloc(IBV_MW_TYPE_2);
  ASSERT_TRUE(one && two);
  EXPECT_EQ(one->type, IBV_MW_TYPE_1);
  EXPECT_EQ(two->pd, pd_);
  EXPECT_NE(one->rkey >> 8, two->rkey >> 8);
  // Neither type 1 nor 2: EINVAL (the kernel's ib_uverbs_alloc_mw).
  errno = 0;
  EXPECT_EQ(ibv_alloc_mw(pd_, ibv_mw_type(3)), nullptr);
  EXPECT_EQ(errno, EINVAL);
  // The PD is busy while it has windows (kernel drivers/infiniband/core/verbs.c).
  ibv_pd* pd = ibv_alloc_pd(ctx_);
  ASSERT_NE(pd, nullptr);
  ibv_mw* mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
  ASSERT_NE(mw, nullptr);
  EXPECT_EQ(ibv_dealloc_pd(pd), EBUSY);
  EXPECT_EQ(ibv_dealloc_mw(mw), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
}

// Type 1: ibv_bind_mw posts a bind with the next 8-bit key; remote WRITE,
// READ and both atomics through the window; each right it lacks is denied.
TEST_F(Mw, Type1WindowServesWriteReadAtomicsWithinItsRights) {
  Pair p = make_pair();
  ibv_mw* mw = alloc(IBV_MW_TYPE_1);
  ASSERT_NE(mw, nullptr);
  const uint32_t before = mw->rkey;
  ASSERT_EQ(bind1(p.b, mw, 4096, 8192, kAllRemote), IBV_WC_SUCCESS);
  EXPECT_EQ(mw->rkey, ibv_inc_rkey(before));  // index kept, key part +1
  EXPECT_EQ(rdma(p.a, IBV_WR_RDMA_WRITE, mw->rkey, at(4096 + 8)), IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(bytes(4096 + 8), src_->addr, 256), 0);
  std::memset(bytes(4096 + 1024), 0x77, 256);
  EXPECT_EQ(rdma(p.a, IBV_WR_RDMA_READ, mw->rkey, at(4096 + 1024)), IBV_WC_SUCCESS);
  EXPECT_EQ(static_cast<uint8_t*>(src_->addr)[255], 0x77);
  uint64_t word = 40;
  std::memcpy(bytes(8192), &word, 8);
  EXPECT_EQ(rdma(p.a, IBV_WR_ATOMIC_FETCH_AND_ADD, mw->rkey, at(8192)), IBV_WC_SUCCESS);
  EXPECT_EQ(rdma(p.a, IBV_WR_ATOMIC_CMP_AND_SWP, mw->rkey, at(8192)), IBV_WC_SUCCESS);  // 41 != 1: no swap
  std::memcpy(&word, bytes(8192), 8);
  EXPECT_EQ(word, 41u);
  // Beyond the window: denied although the region goes on.
  EXPECT_EQ(rdma(p.a, IBV_WR_RDMA_WRITE, mw->rkey, at(4096 + 8192 - 8)), IBV_WC_REM_ACCESS_ERR);

  for (auto [right, denied] : {std::pair{IBV_ACCESS_REMOTE_READ, IBV_WR_RDMA_WRITE},
                               std::pair{IBV_ACCESS_REMOTE_WRITE, IBV_WR_RDMA_READ},
                               std::pair{IBV_ACCESS_REMOTE_READ, IBV_WR_ATOMIC_FETCH_AND_ADD}}) {
    Pair q = make_pair();
    ASSERT_EQ(bind1(q.b, mw, 0, 4096, right), IBV_WC_SUCCESS);
    EXPECT_EQ(rdma(q.a, denied, mw->rkey, at(0), 8), IBV_WC_REM_ACCESS_ERR) << denied;
    EXPECT_EQ(qp_state(q.b.qp), IBV_QPS_ERR);
  }
}

// Access bits that mean nothing to a window (LOCAL_WRITE, MW_BIND: a
// region's flags passed on to the bind) are ignored, as mlx5 and rxe do: the
// window binds with its remote rights, type 1 and type 2 alike, and grants
// no more than those.
TEST_F(Mw, BindIgnoresAccessBitsThatDoNotApplyToAWindow) {
  constexpr int kExtra = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND;
  {
    Pair p = make_pair();
    ibv_mw* mw = alloc(IBV_MW_TYPE_1);
    ASSERT_EQ(bind1(p.b, mw, 0, 4096, kExtra | IBV_ACCESS_REMOTE_WRITE), IBV_WC_SUCCESS);
    EXPECT_EQ(rdma(p.a, IBV_WR_RDMA_WRITE, mw->rkey, at(8)), IBV_WC_SUCCESS);
    EXPECT_EQ(std::memcmp(bytes(8), src_->addr, 256), 0);
    EXPECT_EQ(rdma(p.a, IBV_WR_RDMA_READ, mw->rkey, at(8)), IBV_WC_REM_ACCESS_ERR)
        << "LOCAL_WRITE and MW_BIND grant no remote read";
  }
  {
    Pair p = make_pair();
    ibv_mw* mw = alloc(IBV_MW_TYPE_2);
    uint32_t rkey;
    ASSERT_EQ(bind2(p.b, mw, 4096, 4096, kExtra | IBV_ACCESS_REMOTE_READ, &rkey), IBV_WC_SUCCESS);
    std::memset(bytes(4096), 0x3c, 256);
    EXPECT_EQ(rdma(p.a, IBV_WR_RDMA_READ, rkey, at(4096)), IBV_WC_SUCCESS);
    EXPECT_EQ(static_cast<uint8_t*>(src_->addr)[255], 0x3c);
  }
}

// Doorbell order: a bind posted before ibv_dealloc_mw of its window is done
// first, as on mlx5, where the doorbell reaches the HCA before the command
// (the engine takes posted work before such a verb: emulator/methods_pd_mr.cc).
TEST_F(Mw, BindPostedBeforeDeallocIsDoneFirst) {
  Pair p = make_pair();
  ASSERT_FALSE(HasFailure());
  for (int round = 0; round < 20; ++round) {  // the order must hold every time
    ibv_mw* mw = ibv_alloc_mw(pd_, IBV_MW_TYPE_2);
    ASSERT_NE(mw, nullptr) << std::strerror(errno);
    ibv_send_wr wr{};
    wr.wr_id = 500 + round;
    wr.opcode = IBV_WR_BIND_MW;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.bind_mw.mw = mw;
    wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
    wr.bind_mw.bind_info = {mr_, at(0), 4096, IBV_ACCESS_REMOTE_READ};
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_send(p.b.qp, &wr, &bad), 0);
    ASSERT_EQ(ibv_dealloc_mw(mw), 0);
    ibv_wc wc;
    VT_POLL_ONE(p.b.cq, &wc);
    EXPECT_EQ(wc.wr_id, uint64_t(500 + round));
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << "round " << round << ": " << describe(wc);
    EXPECT_EQ(wc.opcode, IBV_WC_BIND_MW);
  }
  EXPECT_EQ(qp_state(p.b.qp), IBV_QPS_RTS);
}

// The checks libibverbs' inline ibv_bind_mw and the provider make before
// anything is posted.
TEST_F(Mw, BindMwVerbRefusesWhatItCannotPost) {
  Pair p = make_pair();
  ibv_mw* two = alloc(IBV_MW_TYPE_2);
  ibv_mw* one = alloc(IBV_MW_TYPE_1);
  ASSERT_TRUE(one && two);
  ibv_mw_bind b{};
  b.bind_info = {mr_, at(0), 64, IBV_ACCESS_REMOTE_READ};
  EXPECT_EQ(ibv_bind_mw(p.b.qp, two, &b), EINVAL);  // type 2 only through a work request
  b.bind_info = {nullptr, at(0), 64, IBV_ACCESS_REMOTE_READ};
  EXPECT_EQ(ibv_bind_mw(p.b.qp, one, &b), EINVAL);  // a range and no region
  ibv_pd* pd = ibv_alloc_pd(ctx_);
  ASSERT_NE(pd, nullptr);
  ibv_mr* other = ibv_reg_mr(pd, buffer(64), 64, kBindable);
  ASSERT_NE(other, nullptr);
  b.bind_info = {other, addr_of(other), 64, IBV_ACCESS_REMOTE_READ};
  EXPECT_EQ(ibv_bind_mw(p.b.qp, one, &b), EPERM);  // the region of another PD
  EXPECT_EQ(ibv_dereg_mr(other), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
  b.bind_info = {mr_, at(0), 64, IBV_ACCESS_REMOTE_READ | IBV_ACCESS_ZERO_BASED};
  EXPECT_EQ(ibv_bind_mw(p.b.qp, one, &b), EINVAL);  // o10-36.2.2 (mlx5_bind_mw, rxe_bind_mw)
  EXPECT_TRUE(drain_for(p.b.cq, 20).empty());
}

// Each rule the device checks fails the bind with IBV_WC_MW_BIND_ERR.
TEST_F(Mw, BindRulesFailTheBindWithMwBindErr) {
  ibv_mr* unbindable = reg_buffer(4096, kRw);
  ibv_mr* read_only = reg_buffer(4096, IBV_ACCESS_MW_BIND | IBV_ACCESS_REMOTE_READ);
  ASSERT_TRUE(unbindable && read_only);
  ibv_pd* pd = ibv_alloc_pd(ctx_);
  ASSERT_NE(pd, nullptr);
  defer([pd] { EXPECT_EQ(ibv_dealloc_pd(pd), 0); });
  ibv_mw* foreign = alloc(IBV_MW_TYPE_2, pd);
  uint32_t rkey;
  {
    Pair p = make_pair();
    EXPECT_EQ(bind2(p.b, alloc(IBV_MW_TYPE_2), 0, 64, IBV_ACCESS_REMOTE_READ, &rkey, unbindable),
              IBV_WC_MW_BIND_ERR) << "C10-73: the region lacks IBV_ACCESS_MW_BIND";
    EXPECT_EQ(qp_state(p.b.qp), IBV_QPS_ERR);
  }
  {
    Pair p = make_pair();
    EXPECT_EQ(bind1(p.b, alloc(IBV_MW_TYPE_1), 0, 64, IBV_ACCESS_REMOTE_WRITE, read_only), IBV_WC_MW_BIND_ERR)
        << "C10-74: a writable window on a region without LOCAL_WRITE";
  }
  {
    Pair p = make_pair();
    EXPECT_EQ(bind1(p.b, alloc(IBV_MW_TYPE_1), kLen - 32, 64, IBV_ACCESS_REMOTE_READ), IBV_WC_MW_BIND_ERR)
        << "C10-75: past the region's end";
  }
  {
    Pair p = make_pair();
    EXPECT_EQ(bind2(p.b, foreign, 0, 64, IBV_ACCESS_REMOTE_READ, &rkey), IBV_WC_MW_BIND_ERR)
        << "C10-72: a window of another PD than the QP's";
  }
  {
    Pair p = make_pair();
    EXPECT_EQ(bind2(p.b, alloc(IBV_MW_TYPE_2), 0, 0, IBV_ACCESS_REMOTE_READ, &rkey), IBV_WC_MW_BIND_ERR)
        << "o10-37.2.40: a type 2 window of length 0";
  }
  {
    Pair p = make_pair();
    ibv_mw* mw = alloc(IBV_MW_TYPE_2);
    ASSERT_EQ(bind2(p.b, mw, 0, 64, IBV_ACCESS_REMOTE_READ, &rkey), IBV_WC_SUCCESS);
    EXPECT_EQ(bind2(p.b, mw, 0, 64, IBV_ACCESS_REMOTE_READ, &rkey), IBV_WC_MW_BIND_ERR)
        << "o10-37.2.30: a type 2 window that is not free";
  }
}

// Type 2 through ibv_post_send and through ibv_wr_bind_mw: only its QP
// reaches it (2B); LOCAL_INV frees it, after which nothing does; freed, it
// binds again.
TEST_F(Mw, Type2WindowLocalInvalidateAndRebind) {
  Pair p = make_pair();
  Pair other = make_pair();
  ibv_mw* mw = alloc(IBV_MW_TYPE_2);
  uint32_t rkey;
  ASSERT_EQ(bind2(p.b, mw, 0, 4096, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ, &rkey), IBV_WC_SUCCESS);
  EXPECT_EQ(rdma(p.a, IBV_WR_RDMA_WRITE, rkey, at(100)), IBV_WC_SUCCESS);
  EXPECT_EQ(rdma(p.a, IBV_WR_RDMA_READ, rkey, at(100)), IBV_WC_SUCCESS);
  EXPECT_EQ(rdma(other.a, IBV_WR_RDMA_WRITE, rkey, at(100)), IBV_WC_REM_ACCESS_ERR);  // not its QP
  EXPECT_EQ(local_inv(p.b, rkey), IBV_WC_SUCCESS);
  EXPECT_EQ(rdma(p.a, IBV_WR_RDMA_WRITE, rkey, at(100)), IBV_WC_REM_ACCESS_ERR);
  // Free now: invalidating it again fails (on a QP not in error yet).
  Pair third = make_pair();
  EXPECT_EQ(local_inv(third.b, rkey), IBV_WC_LOC_QP_OP_ERR);

  // Bound again with the extended post API, invalidated with ibv_wr_local_inv.
  ibv_cq* cq = make_cq();
  ibv_qp_init_attr_ex init = qp_ex_attr(
      IBV_QPT_RC, cq, IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_RDMA_WRITE,
      {16, 16, 1, 1, 0});
  ibv_qp* qx = make_qp_ex(&init);
  ASSERT_NE(qx, nullptr) << std::strerror(errno);
  ibv_cq* pcq = make_cq();
  ibv_qp* peer = make_qp(IBV_QPT_RC, pcq, pcq);
  connect_qp(qx, peer->qp_num);
  connect_qp(peer, qx->qp_num);
  ibv_qp_ex* x = ibv_qp_to_qp_ex(qx);
  const uint32_t rkey2 = ibv_inc_rkey(rkey);
  const ibv_mw_bind_info info{mr_, at(0), 4096, IBV_ACCESS_REMOTE_WRITE};
  ibv_wr_start(x);
  x->wr_id = 90;
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_bind_mw(x, mw, rkey2, &info);
  ASSERT_EQ(ibv_wr_complete(x), 0);
  ibv_wc wc{};
  VT_POLL_ONE(cq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(wc.opcode, IBV_WC_BIND_MW);
  End pe{peer, pcq}, xe{qx, cq};
  EXPECT_EQ(rdma(pe, IBV_WR_RDMA_WRITE, rkey2, at(200)), IBV_WC_SUCCESS);
  ibv_wr_start(x);
  x->wr_id = 91;
  ibv_wr_local_inv(x, rkey2);
  ASSERT_EQ(ibv_wr_complete(x), 0);
  VT_POLL_ONE(cq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(wc.opcode, IBV_WC_LOCAL_INV);
  EXPECT_EQ(wc.wr_id, 91u);
  EXPECT_EQ(rdma(pe, IBV_WR_RDMA_WRITE, rkey2, at(200)), IBV_WC_REM_ACCESS_ERR);
  (void)xe;
}

TEST_F(Mw, LocalInvalidateOfType1WindowFails) {
  Pair p = make_pair();
  ibv_mw* mw = alloc(IBV_MW_TYPE_1);
  ASSERT_EQ(bind1(p.b, mw, 0, 4096, IBV_ACCESS_REMOTE_WRITE), IBV_WC_SUCCESS);
  EXPECT_EQ(local_inv(p.b, mw->rkey), IBV_WC_LOC_QP_OP_ERR);  // o10-37.2.26 (rxe's status)
  Pair q = make_pair();
  EXPECT_EQ(rdma(q.a, IBV_WR_RDMA_WRITE, mw->rkey, at(0)), IBV_WC_SUCCESS);  // still bound
}

// A type 1 window is unbound by binding it with length 0 (pyverbs'
// test_invalidate_mw_type1 does exactly that).
TEST_F(Mw, ZeroLengthBindUnbindsType1Window) {
  Pair p = make_pair();
  ibv_mw* mw = alloc(IBV_MW_TYPE_1);
  ASSERT_EQ(bind1(p.b, mw, 0, 4096, IBV_ACCESS_REMOTE_WRITE), IBV_WC_SUCCESS);
  EXPECT_EQ(rdma(p.a, IBV_WR_RDMA_WRITE, mw->rkey, at(0)), IBV_WC_SUCCESS);
  ASSERT_EQ(bind1(p.b, mw, 0, 0, 0), IBV_WC_SUCCESS);
  EXPECT_EQ(rdma(p.a, IBV_WR_RDMA_WRITE, mw->rkey, at(0)), IBV_WC_REM_ACCESS_ERR);
}

// The peer invalidates b's window with SEND_WITH_INV: b's receive says so
// (IBV_WC_WITH_INV, invalidated_rkey) and the window is dead after.
TEST_F(Mw, SendWithInvalidateFreesTheWindow) {
  Pair p = make_pair();
  ibv_mw* mw = alloc(IBV_MW_TYPE_2);
  uint32_t rkey;
  ASSERT_EQ(bind2(p.b, mw, 0, 4096, IBV_ACCESS_REMOTE_WRITE, &rkey), IBV_WC_SUCCESS);
  ibv_mr* rbuf = reg_buffer(64, kRw);
  ASSERT_EQ(post_recv_mr(p.b.qp, 1, rbuf, 0, 64), 0);
  ibv_send_wr wr{};
  ibv_sge sge = sge_of(src_, 0, 16);
  wr.wr_id = 2;
  wr.opcode = IBV_WR_SEND_WITH_INV;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.invalidate_rkey = rkey;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(p.a.qp, &wr, &bad), 0);
  ibv_wc wc{};
  VT_POLL_ONE(p.a.cq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  VT_POLL_ONE(p.b.cq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(wc.opcode, IBV_WC_RECV);
  EXPECT_TRUE(wc.wc_flags & IBV_WC_WITH_INV);
  EXPECT_EQ(wc.invalidated_rkey, rkey);
  EXPECT_EQ(rdma(p.a, IBV_WR_RDMA_WRITE, rkey, at(0)), IBV_WC_REM_ACCESS_ERR);
}

// SEND_WITH_INV naming no window b's QP may invalidate (here a region's key):
// b's receive completes IBV_WC_REM_INV_REQ_ERR, a's send the same (rxe).
TEST_F(Mw, SendWithInvalidateOfRegionKeyIsInvalidRequest) {
  Pair p = make_pair();
  ibv_mr* rbuf = reg_buffer(64, kRw);
  ASSERT_EQ(post_recv_mr(p.b.qp, 1, rbuf, 0, 64), 0);
  ibv_send_wr wr{};
  ibv_sge sge = sge_of(src_, 0, 16);
  wr.opcode = IBV_WR_SEND_WITH_INV;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.invalidate_rkey = mr_->rkey;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(p.a.qp, &wr, &bad), 0);
  ibv_wc wc{};
  VT_POLL_ONE(p.a.cq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_REM_INV_REQ_ERR) << describe(wc);
  VT_POLL_ONE(p.b.cq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_REM_INV_REQ_ERR) << describe(wc);
}

// A bound window may be deallocated: its R_Key is dead at once.
TEST_F(Mw, DeallocOfBoundWindowKillsItsKey) {
  Pair p = make_pair();
  ibv_mw* mw = ibv_alloc_mw(pd_, IBV_MW_TYPE_2);
  ASSERT_NE(mw, nullptr);
  uint32_t rkey;
  ASSERT_EQ(bind2(p.b, mw, 0, 4096, IBV_ACCESS_REMOTE_WRITE, &rkey), IBV_WC_SUCCESS);
  EXPECT_EQ(rdma(p.a, IBV_WR_RDMA_WRITE, rkey, at(0)), IBV_WC_SUCCESS);
  ASSERT_EQ(ibv_dealloc_mw(mw), 0);
  EXPECT_EQ(rdma(p.a, IBV_WR_RDMA_WRITE, rkey, at(0)), IBV_WC_REM_ACCESS_ERR);
}

// Deregistering a region with windows bound succeeds as on mlx5 (rxe:
// EINVAL), and the windows reach nothing after.
TEST_F(Mw, DeregOfRegionUnderBoundWindow) {
  Pair p = make_pair();
  ibv_mw* mw = alloc(IBV_MW_TYPE_1);
  ibv_mr* mr = ibv_reg_mr(pd_, buffer(4096), 4096, kBindable);
  ASSERT_NE(mr, nullptr);
  ASSERT_EQ(bind1(p.b, mw, 0, 4096, IBV_ACCESS_REMOTE_WRITE, mr), IBV_WC_SUCCESS);
  const uint64_t where = addr_of(mr);
  EXPECT_EQ(rdma(p.a, IBV_WR_RDMA_WRITE, mw->rkey, where), IBV_WC_SUCCESS);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  Pair q = make_pair();
  EXPECT_EQ(rdma(q.a, IBV_WR_RDMA_WRITE, mw->rkey, where), IBV_WC_REM_ACCESS_ERR);
}

}  // namespace
}  // namespace vt
