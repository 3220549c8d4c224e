// Memory windows (device/mw.cc) at the device level: the bind rules of IBA
// 10.6.7 as the requester executes BIND_MW and LOCAL_INV work requests, the
// responder's checks of a window's R_Key, SEND_WITH_INV, and where a bind
// completes among the requests around it. The test plays both clients.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "device/test_env.h"

namespace uroce::device {
namespace {

constexpr uint32_t kBindable = kAllAccess | IBV_ACCESS_MW_BIND;

class MwTest : public PairFixture {
 protected:
  void SetUp() override {
    PairFixture::SetUp();
    // B's memory, bindable, the region its windows open onto.
    bmw_key_ = reg_mr(b(), kBufSize, kBindable);
  }
  // A window of B's PD; returns its R_Key.
  uint32_t alloc(ibv_mw_type type, uint32_t pd = 0) {
    uint32_t rkey = 0;
    auto r = dev_.alloc_mw(&owner_, pd ? pd : pd_, type, &rkey);
    EXPECT_EQ(r.err, 0);
    mw_index_ = r.value;
    return rkey;
  }
  static abi::SendWqe bind_wqe(uint32_t mw_rkey, uint32_t mr_lkey, uint64_t addr, uint64_t len,
                               uint32_t access, uint64_t wr_id = 50) {
    abi::SendWqe w = wqe(IBV_WR_BIND_MW, wr_id);
    w.bind = {mw_rkey, (mw_rkey & ~0xffu) | ((mw_rkey + 1) & 0xffu), mr_lkey, access, addr, len};
    return w;
  }
  static uint32_t next_key(uint32_t rkey) { return (rkey & ~0xffu) | ((rkey + 1) & 0xffu); }
  // Posts a bind on B's QP and returns its completion.
  abi::Cqe bind_on_b(const abi::SendWqe& w) {
    post_send(B(), w);
    EXPECT_TRUE(run());
    return one_cqe(b_scq_);
  }
  // One RDMA operation from A against B's memory; returns A's completion status.
  uint32_t a_rdma(uint32_t op, uint32_t rkey, uint64_t remote, uint32_t len = 64, uint64_t wr_id = 7) {
    abi::SendWqe w = wqe(op, wr_id);
    w.rkey = rkey;
    w.remote_addr = remote;
    w.compare_add = 1;
    post_send(A(), w, {sge(a(0), op == IBV_WR_ATOMIC_FETCH_AND_ADD ? 8 : len, a_key_)});
    EXPECT_TRUE(run());
    return one_cqe(a_scq_).status;
  }
  // B's send queue: a 3-packet WRITE (wr_id 1), a bind of `mw` over B's
  // first page (2), a 1-packet WRITE (3).
  void post_bind_between_writes(uint32_t mw) {
    abi::SendWqe w1 = wqe(IBV_WR_RDMA_WRITE, 1);
    w1.rkey = a_key_;
    w1.remote_addr = a_addr(32768);
    post_send(B(), w1, {sge(b(0), 3000, b_key_)});
    post_send(B(), bind_wqe(mw, bmw_key_, b_addr(0), 4096, IBV_ACCESS_REMOTE_WRITE, 2));
    abi::SendWqe w3 = w1;
    w3.wr_id = 3;
    post_send(B(), w3, {sge(b(0), 100, b_key_)});
  }
  uint32_t bmw_key_ = 0;
  uint32_t mw_index_ = 0;
};

TEST_F(MwTest, WindowKeysLiveAboveEveryRegionKey) {
  const uint32_t rkey = alloc(IBV_MW_TYPE_1);
  EXPECT_TRUE(is_mw_key(rkey));
  EXPECT_FALSE(is_mw_key(bmw_key_));
  uint32_t ignored;
  EXPECT_EQ(dev_.alloc_mw(&owner_, pd_, 3, &ignored).err, EINVAL);  // neither type 1 nor 2
  EXPECT_EQ(dev_.alloc_mw(&owner_, 999, IBV_MW_TYPE_1, &ignored).err, EINVAL);
  EXPECT_EQ(dev_.dealloc_pd(&owner_, pd_), EBUSY);  // its windows hold it
}

TEST_F(MwTest, Type2BindGrantsItsRightsOnlyThroughItsQp) {
  make_pair(IBV_QPT_RC);
  const uint32_t mw = alloc(IBV_MW_TYPE_2);
  const abi::Cqe c = bind_on_b(bind_wqe(mw, bmw_key_, b_addr(4096), 8192, IBV_ACCESS_REMOTE_WRITE));
  EXPECT_EQ(c.status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(c.opcode, uint32_t(IBV_WC_BIND_MW));
  EXPECT_EQ(c.wr_id, 50u);
  const uint32_t rkey = next_key(mw);
  EXPECT_EQ(a_rdma(IBV_WR_RDMA_WRITE, rkey, b_addr(4096 + 100)), uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(std::memcmp(b(4096 + 100), a(0), 64), 0);
  // The old key part names the window no more (the 8-bit key).
  EXPECT_EQ(a_rdma(IBV_WR_RDMA_WRITE, mw, b_addr(4096)), uint32_t(IBV_WC_REM_ACCESS_ERR));
  // Type 2B: another QP of the same PD does not reach it.
  make_pair(IBV_QPT_RC);
  EXPECT_EQ(a_rdma(IBV_WR_RDMA_WRITE, rkey, b_addr(4096)), uint32_t(IBV_WC_REM_ACCESS_ERR));
}

TEST_F(MwTest, AccessOutsideTheWindowOrItsRightsIsRemoteAccessError) {
  struct Case {
    uint32_t op;
    uint64_t off;
    uint32_t len;
  } cases[] = {
      {IBV_WR_RDMA_WRITE, 4096 - 1, 64},       // starts before the window
      {IBV_WR_RDMA_WRITE, 4096 + 8192 - 8, 64},  // runs past its end
      {IBV_WR_RDMA_READ, 4096, 64},            // a right it lacks
      {IBV_WR_ATOMIC_FETCH_AND_ADD, 4096, 8},  // another
  };
  for (const Case& k : cases) {
    make_pair(IBV_QPT_RC);
    const uint32_t mw = alloc(IBV_MW_TYPE_2);
    ASSERT_EQ(bind_on_b(bind_wqe(mw, bmw_key_, b_addr(4096), 8192, IBV_ACCESS_REMOTE_WRITE)).status,
              uint32_t(IBV_WC_SUCCESS));
    EXPECT_EQ(a_rdma(k.op, next_key(mw), b_addr(k.off), k.len), uint32_t(IBV_WC_REM_ACCESS_ERR))
        << "op " << k.op << " at " << k.off;
    EXPECT_EQ(B().state, IBV_QPS_ERR);
  }
}

TEST_F(MwTest, ReadAndAtomicThroughAZeroBasedWindow) {
  make_pair(IBV_QPT_RC);
  const uint32_t mw = alloc(IBV_MW_TYPE_2);
  ASSERT_EQ(bind_on_b(bind_wqe(mw, bmw_key_, b_addr(8192), 4096,
                               IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_ZERO_BASED))
                .status,
            uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(a_rdma(IBV_WR_RDMA_READ, next_key(mw), 16, 100), uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(std::memcmp(a(0), b(8192 + 16), 100), 0);
  uint64_t before;
  std::memcpy(&before, b(8192 + 64), 8);
  EXPECT_EQ(a_rdma(IBV_WR_ATOMIC_FETCH_AND_ADD, next_key(mw), 64), uint32_t(IBV_WC_SUCCESS));
  uint64_t after, orig;
  std::memcpy(&after, b(8192 + 64), 8);
  std::memcpy(&orig, a(0), 8);
  EXPECT_EQ(orig, before);
  EXPECT_EQ(after, before + 1);
}

// Each broken rule fails the bind with IBV_WC_MW_BIND_ERR (the QP errs).
TEST_F(MwTest, BindRules) {
  std::vector<uint8_t> plain(4096);
  const uint32_t unbindable = reg_mr(plain.data(), plain.size(), kAllAccess);  // no MW_BIND
  std::vector<uint8_t> ro(4096);
  const uint32_t read_only = reg_mr(ro.data(), ro.size(), IBV_ACCESS_MW_BIND | IBV_ACCESS_REMOTE_READ);
  auto other_pd = dev_.alloc_pd(&owner_);
  ASSERT_EQ(other_pd.err, 0);
  struct Case {
    const char* rule;
    ibv_mw_type type;
    uint32_t mw_pd;  // 0: the QP's
    uint32_t mr_key;
    uint64_t addr, len;
    uint32_t access;
  };
  const uint64_t ro_addr = reinterpret_cast<uint64_t>(ro.data());
  const Case cases[] = {
      {"C10-73: the region lacks MW_BIND", IBV_MW_TYPE_2, 0, unbindable,
       reinterpret_cast<uint64_t>(plain.data()), 64, IBV_ACCESS_REMOTE_READ},
      {"C10-74: a writable window on a region without LOCAL_WRITE", IBV_MW_TYPE_2, 0, read_only, ro_addr, 64,
       IBV_ACCESS_REMOTE_WRITE},
      {"C10-75: beyond the region", IBV_MW_TYPE_2, 0, bmw_key_, b_addr(kBufSize - 32), 64,
       IBV_ACCESS_REMOTE_READ},
      {"C10-75: before the region", IBV_MW_TYPE_1, 0, bmw_key_, b_addr(0) - 1, 64, IBV_ACCESS_REMOTE_READ},
      {"C10-72: the window of another PD", IBV_MW_TYPE_2, other_pd.value, bmw_key_, b_addr(0), 64,
       IBV_ACCESS_REMOTE_READ},
      {"o10-37.2.40: a type 2 window bound to nothing", IBV_MW_TYPE_2, 0, bmw_key_, b_addr(0), 0,
       IBV_ACCESS_REMOTE_READ},
      {"o10-36.2.2: a zero-based type 1 window", IBV_MW_TYPE_1, 0, bmw_key_, b_addr(0), 64,
       IBV_ACCESS_REMOTE_READ | IBV_ACCESS_ZERO_BASED},
      // (MW_BIND and LOCAL_WRITE are ignored, as mlx5 and rxe do:
      // Mw.BindIgnoresAccessBitsThatDoNotApplyToAWindow in verbs_mw.cc; a
      // bit the verbs do not define fails, as rxe's RXE_ACCESS_SUPPORTED_MW.)
      {"an access bit the verbs do not define", IBV_MW_TYPE_1, 0, bmw_key_, b_addr(0), 64,
       IBV_ACCESS_REMOTE_READ | (1u << 28)},
      {"a region key that names nothing", IBV_MW_TYPE_2, 0, bmw_key_ ^ 0x80, b_addr(0), 64,
       IBV_ACCESS_REMOTE_READ},
  };
  for (const Case& k : cases) {
    make_pair(IBV_QPT_RC);
    const uint32_t mw = alloc(k.type, k.mw_pd);
    const abi::Cqe c = bind_on_b(bind_wqe(mw, k.mr_key, k.addr, k.len, k.access));
    EXPECT_EQ(c.status, uint32_t(IBV_WC_MW_BIND_ERR)) << k.rule;
    EXPECT_EQ(B().state, IBV_QPS_ERR) << k.rule;
    EXPECT_EQ(dev_.dealloc_mw(&owner_, mw_index_), 0);
  }
}

TEST_F(MwTest, Type2BindsOnlyWhenFreeAndLocalInvalidateFreesIt) {
  make_pair(IBV_QPT_RC);
  const uint32_t mw = alloc(IBV_MW_TYPE_2);
  ASSERT_EQ(bind_on_b(bind_wqe(mw, bmw_key_, b_addr(0), 4096, IBV_ACCESS_REMOTE_WRITE)).status,
            uint32_t(IBV_WC_SUCCESS));
  const uint32_t rkey = next_key(mw);
  // o10-37.2.30: bound, it cannot be bound again.
  EXPECT_EQ(bind_on_b(bind_wqe(rkey, bmw_key_, b_addr(0), 4096, IBV_ACCESS_REMOTE_WRITE)).status,
            uint32_t(IBV_WC_MW_BIND_ERR));
  make_pair(IBV_QPT_RC);
  // Bound to B's first QP (now in error): this one does not reach it.
  EXPECT_EQ(a_rdma(IBV_WR_RDMA_WRITE, rkey, b_addr(0)), uint32_t(IBV_WC_REM_ACCESS_ERR));
  make_pair(IBV_QPT_RC);
  abi::SendWqe inv = wqe(IBV_WR_LOCAL_INV, 60);
  inv.imm_data = rkey;
  post_send(B(), inv);
  ASSERT_TRUE(run());
  abi::Cqe c = one_cqe(b_scq_);
  EXPECT_EQ(c.status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(c.opcode, uint32_t(IBV_WC_LOCAL_INV));
  // Free again: a second invalidation fails, a bind succeeds.
  post_send(B(), inv);
  ASSERT_TRUE(run());
  EXPECT_EQ(one_cqe(b_scq_).status, uint32_t(IBV_WC_LOC_QP_OP_ERR));
  make_pair(IBV_QPT_RC);
  ASSERT_EQ(bind_on_b(bind_wqe(rkey, bmw_key_, b_addr(0), 4096, IBV_ACCESS_REMOTE_WRITE)).status,
            uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(a_rdma(IBV_WR_RDMA_WRITE, next_key(rkey), b_addr(0)), uint32_t(IBV_WC_SUCCESS));
}

TEST_F(MwTest, LocalInvalidateOfType1WindowOrRegionKeyIsLocalQpOpError) {
  make_pair(IBV_QPT_RC);
  const uint32_t mw = alloc(IBV_MW_TYPE_1);
  ASSERT_EQ(bind_on_b(bind_wqe(mw, bmw_key_, b_addr(0), 4096, IBV_ACCESS_REMOTE_WRITE)).status,
            uint32_t(IBV_WC_SUCCESS));
  for (uint32_t key : {next_key(mw), bmw_key_}) {
    make_pair(IBV_QPT_RC);
    abi::SendWqe inv = wqe(IBV_WR_LOCAL_INV, 60);
    inv.imm_data = key;
    post_send(B(), inv);
    ASSERT_TRUE(run());
    EXPECT_EQ(one_cqe(b_scq_).status, uint32_t(IBV_WC_LOC_QP_OP_ERR)) << std::hex << key;
  }
  // The type 1 window is still bound: any QP of its PD reaches it.
  make_pair(IBV_QPT_RC);
  EXPECT_EQ(a_rdma(IBV_WR_RDMA_WRITE, next_key(mw), b_addr(0)), uint32_t(IBV_WC_SUCCESS));
}

TEST_F(MwTest, SendWithInvalidateFreesTheResponderWindow) {
  make_pair(IBV_QPT_RC);
  const uint32_t mw = alloc(IBV_MW_TYPE_2);
  ASSERT_EQ(bind_on_b(bind_wqe(mw, bmw_key_, b_addr(0), 4096, IBV_ACCESS_REMOTE_WRITE)).status,
            uint32_t(IBV_WC_SUCCESS));
  const uint32_t rkey = next_key(mw);
  const abi::Cqe r = send_with_invalidate(rkey);
  EXPECT_EQ(r.status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_NE(r.wc_flags & IBV_WC_WITH_INV, 0u);
  EXPECT_EQ(r.imm_data, rkey);  // ibv_wc.invalidated_rkey
  EXPECT_EQ(a_rdma(IBV_WR_RDMA_WRITE, rkey, b_addr(0)), uint32_t(IBV_WC_REM_ACCESS_ERR));
}

// Type 2B: only the QP a window is bound to may invalidate it remotely.
TEST_F(MwTest, SendWithInvalidateThroughAnotherQpLeavesTheWindowBound) {
  make_pair(IBV_QPT_RC);
  const uint32_t a1 = a_, b1 = b_;
  const uint32_t mw = alloc(IBV_MW_TYPE_2);
  ASSERT_EQ(bind_on_b(bind_wqe(mw, bmw_key_, b_addr(0), 4096, IBV_ACCESS_REMOTE_WRITE)).status,
            uint32_t(IBV_WC_SUCCESS));
  const uint32_t rkey = next_key(mw);
  make_pair(IBV_QPT_RC);
  post_recv(B(), 1, {sge(b(8192), 64, b_key_)});
  abi::SendWqe w = wqe(IBV_WR_SEND_WITH_INV, 2);
  w.imm_data = rkey;
  post_send(A(), w, {sge(a(0), 16, a_key_)});
  ASSERT_TRUE(run());
  EXPECT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_REM_INV_REQ_ERR));
  EXPECT_EQ(one_cqe(b_rcq_).status, uint32_t(IBV_WC_REM_INV_REQ_ERR));
  a_ = a1, b_ = b1;  // the first pair still reaches it
  EXPECT_EQ(a_rdma(IBV_WR_RDMA_WRITE, rkey, b_addr(0)), uint32_t(IBV_WC_SUCCESS));
}

TEST_F(MwTest, SendWithInvalidateOfNoWindowIsInvalidRequest) {
  for (uint32_t key : {0x12345678u, b_key_}) {  // nothing, a region
    make_pair(IBV_QPT_RC);
    post_recv(B(), 1, {sge(b(8192), 64, b_key_)});
    abi::SendWqe w = wqe(IBV_WR_SEND_WITH_INV, 2);
    w.imm_data = key;
    post_send(A(), w, {sge(a(0), 16, a_key_)});
    ASSERT_TRUE(run());
    EXPECT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_REM_INV_REQ_ERR));
    EXPECT_EQ(one_cqe(b_rcq_).status, uint32_t(IBV_WC_REM_INV_REQ_ERR));
    EXPECT_EQ(B().state, IBV_QPS_ERR);
  }
}

TEST_F(MwTest, Type1RebindMovesAndZeroLengthUnbinds) {
  make_pair(IBV_QPT_RC);
  const uint32_t mw = alloc(IBV_MW_TYPE_1);
  // A type 1 window is reachable through any QP of its PD: bind it on A's
  // QP, use it from A against B's QP.
  abi::SendWqe w = bind_wqe(mw, bmw_key_, b_addr(0), 4096, IBV_ACCESS_REMOTE_WRITE);
  post_send(B(), w);
  ASSERT_TRUE(run());
  ASSERT_EQ(one_cqe(b_scq_).status, uint32_t(IBV_WC_SUCCESS));
  uint32_t rkey = next_key(mw);
  EXPECT_EQ(a_rdma(IBV_WR_RDMA_WRITE, rkey, b_addr(100)), uint32_t(IBV_WC_SUCCESS));
  // Rebound elsewhere: the new key reaches the new range only.
  post_send(B(), bind_wqe(rkey, bmw_key_, b_addr(16384), 4096, IBV_ACCESS_REMOTE_WRITE));
  ASSERT_TRUE(run());
  ASSERT_EQ(one_cqe(b_scq_).status, uint32_t(IBV_WC_SUCCESS));
  rkey = next_key(rkey);
  EXPECT_EQ(a_rdma(IBV_WR_RDMA_WRITE, rkey, b_addr(16384)), uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(a_rdma(IBV_WR_RDMA_WRITE, rkey, b_addr(100)), uint32_t(IBV_WC_REM_ACCESS_ERR));
  // Zero length (no region needed): bound to nothing.
  make_pair(IBV_QPT_RC);
  post_send(B(), bind_wqe(rkey, 0, 0, 0, 0));
  ASSERT_TRUE(run());
  ASSERT_EQ(one_cqe(b_scq_).status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(a_rdma(IBV_WR_RDMA_WRITE, next_key(rkey), b_addr(16384)), uint32_t(IBV_WC_REM_ACCESS_ERR));
}

TEST_F(MwTest, DeallocAndDeregKillTheWindow) {
  make_pair(IBV_QPT_RC);
  uint32_t mw = alloc(IBV_MW_TYPE_2);
  ASSERT_EQ(bind_on_b(bind_wqe(mw, bmw_key_, b_addr(0), 4096, IBV_ACCESS_REMOTE_WRITE)).status,
            uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(dev_.dealloc_mw(&owner_, mw_index_), 0);  // bound: allowed
  EXPECT_EQ(a_rdma(IBV_WR_RDMA_WRITE, next_key(mw), b_addr(0)), uint32_t(IBV_WC_REM_ACCESS_ERR));
  // Deregistering the region under a bound window is allowed (mlx5), and
  // the window reaches nothing after; a region registered next does not
  // revive it.
  make_pair(IBV_QPT_RC);
  mw = alloc(IBV_MW_TYPE_2);
  ASSERT_EQ(bind_on_b(bind_wqe(mw, bmw_key_, b_addr(0), 4096, IBV_ACCESS_REMOTE_WRITE)).status,
            uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(dev_.dereg_mr(&owner_, bmw_key_), 0);
  reg_mr(b(), kBufSize, kBindable);
  EXPECT_EQ(a_rdma(IBV_WR_RDMA_WRITE, next_key(mw), b_addr(0)), uint32_t(IBV_WC_REM_ACCESS_ERR));
}

// ibv_rereg_mr under a bound window: the window reaches what the region
// still holds, in the window's PD only.
TEST_F(MwTest, RegionReregisteredUnderAWindow) {
  make_pair(IBV_QPT_RC);
  const uint32_t mw = alloc(IBV_MW_TYPE_1);
  ASSERT_EQ(bind_on_b(bind_wqe(mw, bmw_key_, b_addr(0), 8192, IBV_ACCESS_REMOTE_WRITE)).status,
            uint32_t(IBV_WC_SUCCESS));
  const uint32_t rkey = next_key(mw);
  abi::ReregMrRequest shrink{};
  shrink.handle = bmw_key_;
  shrink.flags = IBV_REREG_MR_CHANGE_TRANSLATION;
  shrink.addr = b_addr(0);
  shrink.length = 4096;
  uint32_t key = 0;
  ASSERT_EQ(dev_.rereg_mr(&owner_, shrink, &key), 0);
  EXPECT_EQ(a_rdma(IBV_WR_RDMA_WRITE, rkey, b_addr(100)), uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(a_rdma(IBV_WR_RDMA_WRITE, rkey, b_addr(4096 + 100)), uint32_t(IBV_WC_REM_ACCESS_ERR));
  make_pair(IBV_QPT_RC);
  auto other = dev_.alloc_pd(&owner_);
  ASSERT_EQ(other.err, 0);
  abi::ReregMrRequest move{};
  move.handle = bmw_key_;
  move.flags = IBV_REREG_MR_CHANGE_PD;
  move.pd = other.value;
  ASSERT_EQ(dev_.rereg_mr(&owner_, move, &key), 0);
  EXPECT_EQ(a_rdma(IBV_WR_RDMA_WRITE, rkey, b_addr(100)), uint32_t(IBV_WC_REM_ACCESS_ERR));
}

// A bind runs when the requester reaches it and completes in order: after
// the WRITE before it is acknowledged, before the WRITE behind it.
TEST_F(MwTest, BindCompletesInOrderBetweenRequests) {
  make_pair(IBV_QPT_RC);
  const uint32_t mw = alloc(IBV_MW_TYPE_2);
  post_bind_between_writes(mw);
  ASSERT_TRUE(run());
  auto cqes = drain_cq(dev_, b_scq_);
  ASSERT_EQ(cqes.size(), 3u);
  for (uint64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(cqes[i].wr_id, i + 1);
    EXPECT_EQ(cqes[i].status, uint32_t(IBV_WC_SUCCESS));
  }
  EXPECT_EQ(cqes[1].opcode, uint32_t(IBV_WC_BIND_MW));
  EXPECT_EQ(a_rdma(IBV_WR_RDMA_WRITE, next_key(mw), b_addr(0)), uint32_t(IBV_WC_SUCCESS));
}

// Go-back-N over a bind steps past it: the window is bound once (a second
// run of a type 2 bind would fail, its window no longer free).
TEST_F(MwTest, RetransmissionDoesNotBindTwice) {
  make_pair(IBV_QPT_RC);
  const uint32_t mw = alloc(IBV_MW_TYPE_2);
  post_bind_between_writes(mw);
  dev_.poll(now_);  // B sends everything; drop it all on the floor
  const auto dropped = DeviceTestPeer::take_in_flight(dev_);
  EXPECT_EQ(dropped.size(), 4u);  // the first WRITE's 3 packets and the last one
  for (net::Packet* p : dropped) DeviceTestPeer::drop(dev_, p);
  EXPECT_TRUE(drain_cq(dev_, b_scq_).empty());
  ASSERT_TRUE(advance(uint64_t(1) << 40));  // the ACK timer resends from the first WRITE
  auto cqes = drain_cq(dev_, b_scq_);
  ASSERT_EQ(cqes.size(), 3u);
  for (const abi::Cqe& c : cqes) EXPECT_EQ(c.status, uint32_t(IBV_WC_SUCCESS)) << c.wr_id;
  EXPECT_EQ(B().retransmits, 1u);
  EXPECT_EQ(cqes[1].opcode, uint32_t(IBV_WC_BIND_MW));
}

TEST_F(MwTest, UcBindsAndUdRefuses) {
  make_pair(IBV_QPT_UC);
  const uint32_t mw = alloc(IBV_MW_TYPE_2);
  EXPECT_EQ(bind_on_b(bind_wqe(mw, bmw_key_, b_addr(0), 4096, IBV_ACCESS_REMOTE_WRITE)).status,
            uint32_t(IBV_WC_SUCCESS));
  const uint32_t ud = create_qp(IBV_QPT_UD, b_scq_, b_rcq_);
  connect(ud, 0);
  post_send(*dev_.qp(ud), bind_wqe(mw, bmw_key_, b_addr(0), 4096, IBV_ACCESS_REMOTE_WRITE));
  ASSERT_TRUE(run());
  EXPECT_EQ(one_cqe(b_scq_).status, uint32_t(IBV_WC_LOC_QP_OP_ERR));
}

}  // namespace
}  // namespace uroce::device
