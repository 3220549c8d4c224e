// Verbs semantics: IBV_WR_ATOMIC_WRITE (IBA 1.5 annex A19), as rxe offers it:
// ibv_wr_atomic_write on an extended RC QP, the device capability bit, and
// the statuses a bad target gets.
#include "tests/integration/verbs_fixture.h"

namespace vt {
namespace {

// IB_UVERBS_DEVICE_ATOMIC_WRITE (rdma-core 45's ib_user_verbs.h; Debian 12's predates it).
constexpr uint64_t kDeviceAtomicWrite = 1ull << 40;

class AtomicWrite : public VerbsTest {
 protected:
  static constexpr QpCaps kCaps{16, 16, 1, 1, 0};
  // A, an extended RC QP that may post ATOMIC WRITE, connected to B, a plain one.
  void SetUp() override {
    VerbsTest::SetUp();
    if (HasFailure()) return;
    cqa_ = make_cq();
    cqb_ = make_cq();
    ASSERT_TRUE(cqa_ && cqb_);
    ibv_qp_init_attr_ex ix =
        qp_ex_attr(IBV_QPT_RC, cqa_, IBV_QP_EX_WITH_ATOMIC_WRITE | IBV_QP_EX_WITH_RDMA_WRITE, kCaps);
    qa_ = make_qp_ex(&ix);
    ASSERT_NE(qa_, nullptr) << std::strerror(errno);
    qb_ = make_qp(IBV_QPT_RC, cqb_, cqb_);
    ASSERT_NE(qb_, nullptr);
    connect_qp(qa_, qb_->qp_num);
    connect_qp(qb_, qa_->qp_num);
    x_ = ibv_qp_to_qp_ex(qa_);
    ASSERT_NE(x_, nullptr);
  }

  // Posts one signaled ATOMIC WRITE of `value`'s bytes and returns its completion.
  ibv_wc atomic_write(uint32_t rkey, uint64_t remote_addr, const void* value) {
    ibv_wr_start(x_);
    x_->wr_id = ++wr_id_;
    x_->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_atomic_write(x_, rkey, remote_addr, value);
    EXPECT_EQ(ibv_wr_complete(x_), 0);
    ibv_wc wc{};
    EXPECT_TRUE(poll_one(cqa_, &wc)) << "no completion within " << kWaitSeconds << " s";
    EXPECT_EQ(wc.wr_id, wr_id_);
    return wc;
  }

  ibv_cq* cqa_ = nullptr;
  ibv_cq* cqb_ = nullptr;
  ibv_qp* qa_ = nullptr;
  ibv_qp* qb_ = nullptr;
  ibv_qp_ex* x_ = nullptr;
  uint64_t wr_id_ = 0;
};

TEST_F(AtomicWrite, DeviceReportsTheCapability) {
  ibv_device_attr_ex attr{};
  ASSERT_EQ(ibv_query_device_ex(ctx_, nullptr, &attr), 0);
  EXPECT_TRUE(attr.device_cap_flags_ex & kDeviceAtomicWrite);
}

TEST_F(AtomicWrite, PlacesTheEightBytesInAMemoryWithRemoteWrite) {
  // rdma-core's test_qp_ex_rc_atomic_write registers IBV_ACCESS_REMOTE_WRITE
  // only: ATOMIC WRITE is allowed by remote write access, as rxe checks it.
  ibv_mr* dst = reg_buffer(4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, 0x5a);
  ASSERT_NE(dst, nullptr);
  const uint8_t value[8] = {'a', 't', 'o', 'm', 'i', 'c', '!', '\n'};
  ibv_wc wc = atomic_write(dst->rkey, addr_of(dst, 64), value);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(wc.opcode, IBV_WC_ATOMIC_WRITE);
  auto* d = static_cast<uint8_t*>(dst->addr);
  EXPECT_EQ(std::memcmp(d + 64, value, 8), 0);
  EXPECT_EQ(d[63], 0x5a);
  EXPECT_EQ(d[72], 0x5a);
  // Another, then nothing else arrived anywhere.
  const uint64_t next = 0x0102030405060708ull;
  wc = atomic_write(dst->rkey, addr_of(dst, 64), &next);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(std::memcmp(d + 64, &next, 8), 0);
  EXPECT_TRUE(drain_for(cqb_, 20).empty());
  EXPECT_EQ(qp_state(qa_), IBV_QPS_RTS);
}

TEST_F(AtomicWrite, MisalignedAddressIsInvalidRequest) {
  ibv_mr* dst = reg_buffer(4096, kRw, 0x5a);
  ASSERT_NE(dst, nullptr);
  const uint64_t value = ~0ull;
  ibv_wc wc = atomic_write(dst->rkey, addr_of(dst, 68), &value);
  EXPECT_EQ(wc.status, IBV_WC_REM_INV_REQ_ERR) << describe(wc);
  auto* d = static_cast<uint8_t*>(dst->addr);
  EXPECT_EQ(d[68], 0x5a);
  EXPECT_EQ(qp_state(qa_), IBV_QPS_ERR);
}

TEST_F(AtomicWrite, MemoryWithoutRemoteWriteIsRemoteAccessError) {
  ibv_mr* dst = reg_buffer(4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC, 0x5a);
  ASSERT_NE(dst, nullptr);
  const uint64_t value = 1;
  ibv_wc wc = atomic_write(dst->rkey, addr_of(dst, 64), &value);
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR) << describe(wc);
  EXPECT_EQ(static_cast<uint8_t*>(dst->addr)[64], 0x5a);
}

TEST_F(AtomicWrite, WrongRkeyIsRemoteAccessError) {
  ibv_mr* dst = reg_buffer(4096, kRw, 0x5a);
  ASSERT_NE(dst, nullptr);
  const uint64_t value = 1;
  ibv_wc wc = atomic_write(wrong_key(dst->rkey), addr_of(dst, 64), &value);
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR) << describe(wc);
}

TEST_F(AtomicWrite, IbvPostSendHasNoWayToCarryTheBytes) {
  // ibv_send_wr has no field for them: EINVAL at post time, nothing posted.
  ibv_mr* dst = reg_buffer(4096, kRw);
  ASSERT_NE(dst, nullptr);
  ibv_send_wr wr{};
  wr.wr_id = 9;
  wr.opcode = IBV_WR_ATOMIC_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = addr_of(dst, 64);
  wr.wr.rdma.rkey = dst->rkey;
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_send(qa_, &wr, &bad), EINVAL);
  EXPECT_EQ(bad, &wr);
  EXPECT_TRUE(drain_for(cqa_, 50).empty());
}

TEST_F(AtomicWrite, OnlyRcAndXrcQpsOfferIt) {
  ibv_qp_init_attr_ex ix = qp_ex_attr(IBV_QPT_UC, cqa_, IBV_QP_EX_WITH_ATOMIC_WRITE, kCaps);
  errno = 0;
  EXPECT_EQ(make_qp_ex(&ix), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
}

}  // namespace
}  // namespace vt
