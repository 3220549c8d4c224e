// Indirect memory keys (device/mkey.cc) at the device level: registrations
// (kWrUmr) and their rules, a multi-packet message gathered through an
// interleaved layout and scattered through a list, and the mkey freed by
// LOCAL_INV and by SEND_WITH_INV. The test plays both clients.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "device/test_env.h"
#include "device/wqe.h"

namespace uroce::device {
namespace {

class MkeyTest : public PairFixture {
 protected:
  void SetUp() override {
    PairFixture::SetUp();
    make_pair(IBV_QPT_RC);
  }
  uint32_t create(uint32_t flags = 0, uint32_t pd = 0) {
    uint32_t key = 0, desc = 0;
    auto r = dev_.create_mkey(&owner_, pd ? pd : pd_, flags, 3, &key, &desc);
    EXPECT_EQ(r.err, 0);
    EXPECT_EQ(desc, 4u);  // rounded up to 4, as mlx5's num_desc
    EXPECT_TRUE(is_mkey_key(key));
    return key;
  }
  // A registration on qp (its send CQ scq): its completion.
  abi::Cqe register_on(Qp& qp, uint32_t scq, uint32_t key, uint32_t layout, uint32_t repeat, uint32_t entries,
                       std::initializer_list<abi::Sge> slots, uint32_t access = IBV_ACCESS_LOCAL_WRITE) {
    abi::SendWqe w = wqe(kWrUmr, 60);
    w.umr = abi::UmrArgs{key, access, layout, repeat, entries, {}};
    post_send(qp, w, slots);
    EXPECT_TRUE(run());
    return one_cqe(scq);
  }
  static abi::Sge skip(uint64_t bytes) { return abi::Sge{bytes, 0, 0}; }
};

TEST_F(MkeyTest, MessageGatheredInterleavedAndScatteredByListAcrossPackets) {
  // A: 100 bytes at a(0) then skip 50, 150 bytes at a(30000), 20 times:
  // 5000 bytes, five packets of 1024.
  const uint32_t ak = create();
  ASSERT_EQ(register_on(A(), a_scq_, ak, abi::kUmrInterleaved, 20, 2,
                        {sge(a(0), 100, a_key_), skip(50), sge(a(30000), 150, a_key_), skip(0)})
                .status,
            uint32_t(IBV_WC_SUCCESS));
  // B: 2000 bytes at b(0), 2000 at b(10000), 1000 at b(20000).
  const uint32_t bk = create();
  const abi::Cqe reg = register_on(B(), b_scq_, bk, abi::kUmrList, 0, 3,
                                   {sge(b(0), 2000, b_key_), sge(b(10000), 2000, b_key_), sge(b(20000), 1000, b_key_)});
  ASSERT_EQ(reg.status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(reg.opcode, uint32_t(IBV_WC_DRIVER1));  // MLX5DV_WC_UMR
  std::vector<uint8_t> want;
  for (int r = 0; r < 20; ++r) {
    want.insert(want.end(), a(150 * r), a(150 * r + 100));
    want.insert(want.end(), a(30000 + 150 * r), a(30000 + 150 * r + 150));
  }
  ASSERT_EQ(want.size(), 5000u);
  const std::vector<uint8_t> before(b(0), b(kBufSize));
  post_recv(B(), 1, {abi::Sge{0, 5000, bk}});
  post_send(A(), wqe(IBV_WR_SEND, 2), {abi::Sge{0, 5000, ak}});
  ASSERT_TRUE(run());
  EXPECT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_SUCCESS));
  const abi::Cqe r = one_cqe(b_rcq_);
  ASSERT_EQ(r.status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(r.byte_len, 5000u);
  EXPECT_EQ(std::memcmp(b(0), want.data(), 2000), 0);
  EXPECT_EQ(std::memcmp(b(10000), want.data() + 2000, 2000), 0);
  EXPECT_EQ(std::memcmp(b(20000), want.data() + 4000, 1000), 0);
  for (size_t i = 0; i < kBufSize; ++i) {
    const bool placed = i < 2000 || (i >= 10000 && i < 12000) || (i >= 20000 && i < 21000);
    if (!placed) {
      ASSERT_EQ(*b(i), before[i]) << "byte " << i << " was not the layout's";
    }
  }
}

// Each broken rule fails the registration with IBV_WC_MW_BIND_ERR and errs
// the QP (a fresh pair for each).
TEST_F(MkeyTest, RegistrationRules) {
  constexpr uint32_t kErr = IBV_WC_MW_BIND_ERR;
  auto fails = [&](uint32_t key, uint32_t layout, uint32_t repeat, uint32_t entries,
                   std::initializer_list<abi::Sge> slots, uint32_t access = IBV_ACCESS_LOCAL_WRITE) {
    make_pair(IBV_QPT_RC);
    const uint32_t status = register_on(A(), a_scq_, key, layout, repeat, entries, slots, access).status;
    EXPECT_EQ(A().state, IBV_QPS_ERR);
    return status == kErr;
  };
  // More entries than the mkey's 4 (an interleaved layout spends one on its header).
  EXPECT_TRUE(fails(create(), abi::kUmrInterleaved, 1, 4,
                    {sge(a(0), 8, a_key_), skip(0), sge(a(8), 8, a_key_), skip(0)}));
  // An interleaved entry whose last repeat runs past its region.
  EXPECT_TRUE(fails(create(), abi::kUmrInterleaved, 11, 1, {sge(a(kBufSize - 500), 40, a_key_), skip(10)}));  // 540 bytes
  // A region of another PD, an mkey of another PD, a key that names no region.
  auto other = dev_.alloc_pd(&owner_);
  ASSERT_EQ(other.err, 0);
  std::vector<uint8_t> elsewhere(4096);
  const uint32_t other_mr = reg_mr(elsewhere.data(), elsewhere.size(), kAllAccess, other.value);
  EXPECT_TRUE(fails(create(), abi::kUmrList, 0, 1, {sge(elsewhere.data(), 64, other_mr)}));
  EXPECT_TRUE(fails(create(0, other.value), abi::kUmrList, 0, 1, {sge(a(0), 64, a_key_)}));
  EXPECT_TRUE(fails(create(), abi::kUmrList, 0, 1, {sge(a(0), 64, 0x7fff00)}));
  // Rights an mkey cannot have; local write over a region without it.
  EXPECT_TRUE(fails(create(), abi::kUmrList, 0, 1, {sge(a(0), 64, a_key_)}, IBV_ACCESS_MW_BIND));
  const uint32_t read_only = reg_mr(a(0), 4096, IBV_ACCESS_REMOTE_READ);
  EXPECT_TRUE(fails(create(), abi::kUmrList, 0, 1, {sge(a(0), 64, read_only)}));
  // Interleaved with no repeat, an unknown layout.
  EXPECT_TRUE(fails(create(), abi::kUmrInterleaved, 0, 1, {sge(a(0), 8, a_key_), skip(0)}));
  EXPECT_TRUE(fails(create(), 7, 0, 1, {sge(a(0), 8, a_key_)}));
}

TEST_F(MkeyTest, OnlyAFreeMkeyTakesALayoutAndInvalidationFreesIt) {
  const uint32_t k = create();
  ASSERT_EQ(register_on(A(), a_scq_, k, abi::kUmrList, 0, 1, {sge(a(0), 64, a_key_)}).status,
            uint32_t(IBV_WC_SUCCESS));
  abi::SendWqe inv = wqe(IBV_WR_LOCAL_INV, 3);
  inv.imm_data = k;
  post_send(A(), inv);
  ASSERT_TRUE(run());
  EXPECT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_SUCCESS));
  ASSERT_EQ(register_on(A(), a_scq_, k, abi::kUmrList, 0, 1, {sge(a(64), 64, a_key_)}).status,
            uint32_t(IBV_WC_SUCCESS));
  // Valid now: a second layout is refused and the QP errs.
  EXPECT_EQ(register_on(A(), a_scq_, k, abi::kUmrList, 0, 1, {sge(a(0), 64, a_key_)}).status,
            uint32_t(IBV_WC_MW_BIND_ERR));
  EXPECT_EQ(A().state, IBV_QPS_ERR);
}

TEST_F(MkeyTest, SendWithInvalidateFreesOnlyAnMkeyMadeForIt) {
  const uint32_t plain = create();
  const uint32_t remote = create(abi::kMkeyRemoteInvalidate);
  for (uint32_t k : {plain, remote})
    ASSERT_EQ(register_on(B(), b_scq_, k, abi::kUmrList, 0, 1, {sge(b(0), 64, b_key_)}).status,
              uint32_t(IBV_WC_SUCCESS));
  const abi::Cqe r = send_with_invalidate(remote);
  EXPECT_EQ(r.status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_NE(r.wc_flags & IBV_WC_WITH_INV, 0u);
  EXPECT_EQ(r.imm_data, remote);
  // The freed mkey places nothing: the receive fails.
  post_recv(B(), 3, {abi::Sge{0, 64, remote}});
  post_send(A(), wqe(IBV_WR_SEND, 4), {sge(a(0), 16, a_key_)});
  ASSERT_TRUE(run());
  EXPECT_EQ(one_cqe(b_rcq_).status, uint32_t(IBV_WC_LOC_PROT_ERR));
  // One made without remote invalidation: the request is invalid.
  make_pair(IBV_QPT_RC);
  post_recv(B(), 5, {sge(b(8192), 64, b_key_)});
  abi::SendWqe w = wqe(IBV_WR_SEND_WITH_INV, 2);
  w.imm_data = plain;
  post_send(A(), w, {sge(a(0), 16, a_key_)});
  ASSERT_TRUE(run());
  EXPECT_EQ(one_cqe(b_rcq_).status, uint32_t(IBV_WC_REM_INV_REQ_ERR));
}

TEST_F(MkeyTest, DestroyedWithItsOwnerAndHoldsItsPd) {
  create();
  EXPECT_EQ(dev_.dealloc_pd(&owner_, pd_), EBUSY);
  uint32_t key, desc;
  EXPECT_EQ(dev_.create_mkey(&owner_, pd_, 0, 0, &key, &desc).err, EINVAL);      // no entries
  EXPECT_EQ(dev_.create_mkey(&owner_, pd_, 0, 1000, &key, &desc).err, EINVAL);   // over kMaxMkeyEntries
  EXPECT_EQ(dev_.create_mkey(&owner_, pd_, 0x80, 4, &key, &desc).err, EOPNOTSUPP);
}

}  // namespace
}  // namespace uroce::device
