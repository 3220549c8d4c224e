// Protocol tests of tag matching in the responder (device/responder.cc with
// device/tag_matching.h): hand-made SENDs with a TMH reach QP B, attached to
// a TM-SRQ, and the SRQ's CQ is read entry by entry (SEMANTICS 3.6).
#include <gtest/gtest.h>
#include <infiniband/tm_types.h>

#include <cstring>
#include <vector>

#include "device/test_env.h"

namespace uroce::device {
namespace {

constexpr uint8_t kSendFirst = 0x00, kSendLast = 0x02, kSendOnly = 0x04, kAck = 0x11;
constexpr uint8_t kSynRnr = 0x20;
constexpr uint32_t kPsn = 1000;   // what B expects first
constexpr uint32_t kMtu = 1024;   // default_attr's path MTU

class TmResponderTest : public PairFixture {
 protected:
  void SetUp() override {
    PairFixture::SetUp();
    tm_cq_ = create_cq();
    abi::CreateSrqRequest s{};
    s.pd = pd_;
    s.cq = tm_cq_;
    s.srq_type = IBV_SRQT_TM;
    s.max_wr = 16;
    s.max_sge = 1;
    s.max_num_tags = 1;
    s.max_ops = 16;
    auto r = dev_.create_srq(&owner_, s);
    ASSERT_EQ(r.err, 0);
    srq_ = r.value;
    a_ = create_qp(IBV_QPT_RC, a_scq_, a_rcq_);
    abi::CreateQpRequest q{};
    q.pd = pd_;
    q.send_cq = b_scq_;
    q.recv_cq = b_rcq_;
    q.srq = srq_;
    q.qp_type = IBV_QPT_RC;
    q.caps = default_caps();
    auto qr = dev_.create_qp(&owner_, q);
    ASSERT_EQ(qr.err, 0);
    b_ = qr.value;
    connect(a_, b_, default_attr(), 1000, 2000);
    connect(b_, a_, default_attr(), 2000, 1000);
  }

  uint32_t add(uint64_t tag, uint64_t recv_wr_id, uint32_t len) {
    abi::SrqOp op{};
    op.opcode = IBV_WR_TAG_ADD;
    op.recv_wr_id = recv_wr_id;
    op.tag = tag;
    op.mask = ~0ull;
    op.num_sge = 1;
    op.sge = {b_addr(0), len, b_key_};
    uint32_t handle = ~0u;
    last_ops_ = dev_.post_srq_ops(&owner_, srq_, &op, 1, &handle);
    return handle;
  }

  std::vector<uint8_t> message(uint8_t tmh_op, uint64_t tag, uint32_t len) {
    std::vector<uint8_t> m(len);
    fill(m, 0x33);
    std::memset(m.data(), 0, 16);
    m[0] = tmh_op;
    for (int i = 0; i < 8; ++i) m[8 + i] = uint8_t(tag >> (56 - 8 * i));
    return m;
  }

  uint32_t tm_cq_ = 0, srq_ = 0;
  Device::SrqOpsResult last_ops_;
};

TEST_F(TmResponderTest, MultiPacketEagerReportsTheMatchAtTheFirstPacketAndTheDataAtTheLast) {
  add(5, 55, 4096);
  ASSERT_EQ(last_ops_.err, 0);
  const std::vector<uint8_t> m = message(IBV_TMH_EAGER, 5, kMtu + 100);
  inject(kSendFirst, b_, kPsn, false, m.data(), kMtu);
  run();
  abi::Cqe c = one_cqe(tm_cq_);
  EXPECT_EQ(c.opcode, uint32_t(IBV_WC_TM_RECV));
  EXPECT_EQ(c.wc_flags, uint32_t(IBV_WC_TM_MATCH));
  EXPECT_EQ(c.wr_id, 55u);
  EXPECT_EQ(c.tm_tag, 5u);
  inject(kSendLast, b_, kPsn + 1, true, m.data() + kMtu, 100);
  run();
  c = one_cqe(tm_cq_);
  EXPECT_EQ(c.status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(c.wc_flags, uint32_t(IBV_WC_TM_DATA_VALID));
  EXPECT_EQ(c.byte_len, kMtu + 100 - 16);
  EXPECT_EQ(std::memcmp(b(0), m.data() + 16, kMtu + 100 - 16), 0);
  EXPECT_TRUE(drain_cq(dev_, b_rcq_).empty()) << "TM receives complete on the SRQ's CQ";
}

TEST_F(TmResponderTest, AFlushedTaggedBufferGivesItsHandleBack) {
  add(5, 55, 4096);
  const std::vector<uint8_t> m = message(IBV_TMH_EAGER, 5, kMtu + 100);
  inject(kSendFirst, b_, kPsn, false, m.data(), kMtu);
  run();
  one_cqe(tm_cq_);  // the match
  add(6, 66, 64);
  EXPECT_EQ(last_ops_.err, ENOMEM) << "a list of one tag, still being filled";
  ASSERT_EQ(to_state(b_, IBV_QPS_ERR), 0);
  run();
  abi::Cqe c = one_cqe(tm_cq_);
  EXPECT_EQ(c.status, uint32_t(IBV_WC_WR_FLUSH_ERR));
  EXPECT_EQ(c.opcode, uint32_t(IBV_WC_TM_RECV));
  EXPECT_EQ(c.wr_id, 55u);
  add(6, 66, 64);
  EXPECT_EQ(last_ops_.err, 0);
}

TEST_F(TmResponderTest, AnUnexpectedMessageWithoutAPlainBufferIsRnrAndNotCounted) {
  const std::vector<uint8_t> m = message(IBV_TMH_EAGER, 9, 64);
  inject(kSendOnly, b_, kPsn, true, m.data(), 64);
  auto f = step();
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].opcode, kAck);
  EXPECT_EQ(f[0].syndrome, kSynRnr | default_attr().min_rnr_timer);
  run();
  // The device counted no unexpected message: a tag added now is eligible
  // at once (its ADD would carry IBV_WC_TM_SYNC_REQ otherwise).
  abi::SrqOp op{};
  op.opcode = IBV_WR_TAG_ADD;
  op.flags = IBV_OPS_SIGNALED;
  op.tag = 9;
  op.mask = ~0ull;
  uint32_t h;
  ASSERT_EQ(dev_.post_srq_ops(&owner_, srq_, &op, 1, &h).err, 0);
  abi::Cqe c = one_cqe(tm_cq_);
  EXPECT_EQ(c.opcode, uint32_t(IBV_WC_TM_ADD));
  EXPECT_EQ(c.wc_flags, 0u);
  EXPECT_EQ(dev_.counters().tm_unexpected, 0u);
}

}  // namespace
}  // namespace uroce::device
