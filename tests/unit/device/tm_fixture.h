// The fixture of the tag-matching protocol tests (tag_matching_responder_test.cc,
// tm_rendezvous_test.cc): QP A, a plain RC QP, connected to QP B on a TM-SRQ
// with a list of one tag, whose completions go to the SRQ's own CQ; A sends
// hand-made or real tagged SENDs, the CQs are read entry by entry.
#pragma once

#include <gtest/gtest.h>
#include <infiniband/tm_types.h>

#include <cstring>
#include <vector>

#include "device/test_env.h"

namespace uroce::device {

class TmFixture : public PairFixture {
 protected:
  static constexpr uint8_t kSendFirst = 0x00, kSendLast = 0x02, kSendOnly = 0x04, kAck = 0x11;
  static constexpr uint8_t kSynRnr = 0x20;
  static constexpr uint32_t kPsn = 1000;   // what B expects first
  static constexpr uint32_t kMtu = 1024;   // default_attr's path MTU

  void SetUp() override {
    PairFixture::SetUp();
    tm_cq_ = create_cq();
    srq_ = create_tm_srq(1, 16);
    a_ = create_qp(IBV_QPT_RC, a_scq_, a_rcq_);
    b_ = create_qp_on_srq(srq_);
    connect(a_, b_, default_attr(), 1000, 2000);
    connect(b_, a_, default_attr(), 2000, 1000);
  }

  // A TM-SRQ whose completions go to tm_cq_ (0 if it cannot be made: the
  // test fails).
  uint32_t create_tm_srq(uint32_t max_num_tags, uint32_t max_ops) {
    abi::CreateSrqRequest s{};
    s.pd = pd_;
    s.cq = tm_cq_;
    s.srq_type = IBV_SRQT_TM;
    s.max_wr = 16;
    s.max_sge = 1;
    s.max_num_tags = max_num_tags;
    s.max_ops = max_ops;
    auto r = dev_.create_srq(&owner_, s);
    EXPECT_EQ(r.err, 0);
    return r.value;
  }

  // An RC QP of B's CQs that receives through `srq`.
  uint32_t create_qp_on_srq(uint32_t srq) {
    abi::CreateQpRequest q{};
    q.pd = pd_;
    q.send_cq = b_scq_;
    q.recv_cq = b_rcq_;
    q.srq = srq;
    q.qp_type = IBV_QPT_RC;
    q.caps = default_caps();
    auto r = dev_.create_qp(&owner_, q);
    EXPECT_EQ(r.err, 0);
    return r.value;
  }

  // The provider allocates tag handles (abi::TmOpsHeader): the lowest free one.
  uint32_t free_handle(uint32_t srq) {
    const TagList& l = *dev_.srq(srq)->tm;
    uint32_t h = 0;
    while (h < l.max_num_tags() && !l.is_free(h)) ++h;
    return h;
  }

  uint32_t add(uint64_t tag, uint64_t recv_wr_id, uint32_t len) {
    abi::SrqOp op{};
    op.opcode = IBV_WR_TAG_ADD;
    op.recv_wr_id = recv_wr_id;
    op.tag = tag;
    op.mask = ~0ull;
    op.num_sge = 1;
    op.sge = {b_addr(0), len, b_key_};
    op.handle = free_handle(srq_);
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

  // A's SEND of a rendezvous request for `len` bytes of A's buffer at
  // `off`: TMH(RNDV, tag, app_ctx) + RVH(va, rkey, len), 64 bytes as pyverbs
  // sends it. A has a receive posted for the FIN.
  void send_rndv(uint64_t tag, uint32_t off, uint32_t len, uint32_t rkey, uint32_t app_ctx = 0x5151,
                 bool fin_recv = true) {
    if (fin_recv) post_recv(A(), 900, {sge(a(kFinRecv), 64, a_key_)});
    send_rndv_on(A(), 1, kReqOff, tag, off, len, rkey, app_ctx);
  }
  // The same request SENT on `qp` (A's side) with its 64 bytes at a(hdr_off).
  void send_rndv_on(Qp& qp, uint64_t wr_id, uint32_t hdr_off, uint64_t tag, uint32_t off, uint32_t len,
                    uint32_t rkey, uint32_t app_ctx) {
    uint8_t* h = a(hdr_off);
    std::memset(h, 0, 64);
    h[0] = IBV_TMH_RNDV;
    store_be(h + 4, app_ctx, 4);
    store_be(h + 8, tag, 8);
    store_be(h + 16, a_addr(off), 8);
    store_be(h + 24, rkey, 4);
    store_be(h + 28, len, 4);
    post_send(qp, wqe(IBV_WR_SEND, wr_id), {sge(h, 64, a_key_)});
  }
  static void store_be(uint8_t* d, uint64_t v, int n) {
    for (int i = n - 1; i >= 0; --i, v >>= 8) d[i] = uint8_t(v);
  }
  static constexpr uint32_t kReqOff = 60 * 1024, kFinRecv = 62 * 1024;

  uint32_t tm_cq_ = 0, srq_ = 0;
  Device::SrqOpsResult last_ops_;
};

}  // namespace uroce::device
