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

  // A's SEND of a rendezvous request for `len` bytes of A's buffer at
  // `off`: TMH(RNDV, tag, app_ctx) + RVH(va, rkey, len), 64 bytes as pyverbs
  // sends it. A has a receive posted for the FIN.
  void send_rndv(uint64_t tag, uint32_t off, uint32_t len, uint32_t rkey, uint32_t app_ctx = 0x5151,
                 bool fin_recv = true) {
    if (fin_recv) post_recv(A(), 900, {sge(a(kFinRecv), 64, a_key_)});
    uint8_t* h = a(kReqOff);
    std::memset(h, 0, 64);
    h[0] = IBV_TMH_RNDV;
    store_be(h + 4, app_ctx, 4);
    store_be(h + 8, tag, 8);
    store_be(h + 16, a_addr(off), 8);
    store_be(h + 24, rkey, 4);
    store_be(h + 28, len, 4);
    post_send(A(), wqe(IBV_WR_SEND, 1), {sge(h, 64, a_key_)});
  }
  static void store_be(uint8_t* d, uint64_t v, int n) {
    for (int i = n - 1; i >= 0; --i, v >>= 8) d[i] = uint8_t(v);
  }
  static constexpr uint32_t kReqOff = 60 * 1024, kFinRecv = 62 * 1024;

  uint32_t tm_cq_ = 0, srq_ = 0;
  Device::SrqOpsResult last_ops_;
};

TEST_F(TmResponderTest, RendezvousReadsIntoTheTaggedBufferThenSendsTheFin) {
  add(7, 77, 8192);
  ASSERT_EQ(last_ops_.err, 0);
  send_rndv(7, 4096, 3000, a_key_);  // three READ responses at path MTU 1024
  ASSERT_TRUE(run());
  auto tm = drain_cq(dev_, tm_cq_);
  ASSERT_EQ(tm.size(), 2u);
  EXPECT_EQ(tm[0].opcode, uint32_t(IBV_WC_TM_RECV));
  EXPECT_EQ(tm[0].wc_flags, uint32_t(IBV_WC_TM_MATCH));
  EXPECT_EQ(tm[0].wr_id, 77u);
  EXPECT_EQ(tm[0].tm_tag, 7u);
  EXPECT_EQ(tm[0].tm_priv, 0x5151u);
  EXPECT_EQ(tm[1].status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(tm[1].opcode, uint32_t(IBV_WC_TM_RECV));
  EXPECT_EQ(tm[1].wc_flags, uint32_t(IBV_WC_TM_DATA_VALID));
  EXPECT_EQ(tm[1].wr_id, 77u);
  EXPECT_EQ(tm[1].tm_tag, 0u);
  EXPECT_EQ(tm[1].byte_len, 3000u);
  EXPECT_EQ(std::memcmp(b(0), a(4096), 3000), 0);
  // The FIN: TMH and RVH of the request, opcode FIN, on A's receive queue.
  auto fin = drain_cq(dev_, a_rcq_);
  ASSERT_EQ(fin.size(), 1u);
  EXPECT_EQ(fin[0].status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(fin[0].wr_id, 900u);
  EXPECT_EQ(fin[0].byte_len, 32u);
  EXPECT_EQ(a(kFinRecv)[0], IBV_TMH_FIN);
  EXPECT_EQ(std::memcmp(a(kFinRecv) + 1, a(kReqOff) + 1, 31), 0);
  EXPECT_EQ(drain_cq(dev_, a_scq_).size(), 1u) << "A's SEND";
  EXPECT_TRUE(drain_cq(dev_, b_scq_).empty()) << "the device's READ and FIN reach no user CQ";
  EXPECT_EQ(counters().tm_rndv_reads, 1u);
  add(8, 88, 64);
  EXPECT_EQ(last_ops_.err, 0) << "the tag's handle is free again";
}

// The device's READ and FIN are retransmitted like any WQE: lose the first
// READ request, the first READ response and the first FIN, and the ACK
// timer brings each back.
TEST_F(TmResponderTest, RendezvousSurvivesALostReadRequestResponseAndFin) {
  add(7, 77, 8192);
  send_rndv(7, 4096, 3000, a_key_);
  bool lost_request = false, lost_response = false, lost_fin = false;
  for (int i = 0; i < 200; ++i) {
    const bool work = dev_.poll(now_);
    for (net::Packet* p : DeviceTestPeer::take_in_flight(dev_)) {
      ASSERT_EQ(net::parse_roce_packet(*p, p->checksummed), net::ParseError::kOk);
      bool drop = false;
      if (p->opcode == 0x0c && !lost_request) drop = lost_request = true;  // READ request
      if (p->opcode == 0x0d && !lost_response) drop = lost_response = true;  // READ response FIRST
      if (p->opcode == 0x04 && p->payload_len == 32 && p->payload()[0] == IBV_TMH_FIN && !lost_fin)
        drop = lost_fin = true;
      if (drop) DeviceTestPeer::drop(dev_, p);
      else DeviceTestPeer::requeue(dev_, p);
    }
    if (!work && !DeviceTestPeer::in_flight(dev_)) now_ += 100'000'000;  // past the ACK timeout
  }
  EXPECT_TRUE(lost_request && lost_response && lost_fin);
  ASSERT_TRUE(run());
  auto tm = drain_cq(dev_, tm_cq_);
  ASSERT_EQ(tm.size(), 2u);
  EXPECT_EQ(tm[1].status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(tm[1].wc_flags, uint32_t(IBV_WC_TM_DATA_VALID));
  EXPECT_EQ(std::memcmp(b(0), a(4096), 3000), 0);
  auto fin = drain_cq(dev_, a_rcq_);
  ASSERT_EQ(fin.size(), 1u) << "one FIN, however often it was sent";
  EXPECT_EQ(fin[0].status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_TRUE(drain_cq(dev_, b_scq_).empty());
  EXPECT_EQ(B().sq_internal, 0u) << "the device's work all completed";
  EXPECT_GE(counters().retransmits, 3u);
}

// A FIN the peer cannot take (no receive posted, RNR retries exceeded) fails
// the QP with no completion to tell of it: the owner gets IBV_EVENT_QP_FATAL.
TEST_F(TmResponderTest, AFinThePeerNeverTakesFailsTheQpWithAnEvent) {
  Pipe p;
  owner_.async_fd = p.wr;
  abi::QpAttr a = default_attr();
  a.rnr_retry = 1;
  ASSERT_EQ(to_state(b_, IBV_QPS_RESET), 0);
  connect(b_, a_, a, 2000, kPsn);
  B().cookie = 0xb0b;
  add(7, 77, 8192);
  send_rndv(7, 0, 2048, a_key_, 0, /*fin_recv=*/false);
  for (int i = 0; i < 20 && B().state != IBV_QPS_ERR; ++i) ASSERT_TRUE(advance(1'000'000));
  EXPECT_EQ(B().state, IBV_QPS_ERR);
  auto tm = drain_cq(dev_, tm_cq_);
  ASSERT_EQ(tm.size(), 2u);
  EXPECT_EQ(tm[1].wc_flags, uint32_t(IBV_WC_TM_DATA_VALID)) << "the data was in before the FIN went";
  EXPECT_TRUE(drain_cq(dev_, b_scq_).empty());
  bool fatal = false;
  for (const abi::AsyncEventRecord& e : p.read_all<abi::AsyncEventRecord>())
    fatal |= e.event_type == IBV_EVENT_QP_FATAL && e.cookie == 0xb0b;
  EXPECT_TRUE(fatal);
  EXPECT_GE(counters().rnr_retry_exceeded, 1u);
  owner_.async_fd = -1;
  close(p.wr);
}

TEST_F(TmResponderTest, RendezvousRunsBesideAFullUserSendQueue) {
  add(7, 77, 8192);
  // B's ring is full of WRITEs to A when the request arrives.
  const uint32_t depth = B().sq.size();
  for (uint32_t i = 0; i < depth; ++i) {
    abi::SendWqe w = wqe(IBV_WR_RDMA_WRITE, 500 + i);
    w.remote_addr = a_addr(32 * 1024 + 64 * i);
    w.rkey = a_key_;
    post_send(B(), w, {sge(b(16 * 1024 + 64 * i), 64, b_key_)});
  }
  send_rndv(7, 0, 2048, a_key_);
  ASSERT_TRUE(run());
  auto tm = drain_cq(dev_, tm_cq_);
  ASSERT_EQ(tm.size(), 2u);
  EXPECT_EQ(tm[1].wc_flags, uint32_t(IBV_WC_TM_DATA_VALID));
  EXPECT_EQ(std::memcmp(b(0), a(0), 2048), 0);
  auto sends = drain_cq(dev_, b_scq_);
  ASSERT_EQ(sends.size(), depth) << "exactly the user's WRITEs";
  for (uint32_t i = 0; i < depth; ++i) {
    EXPECT_EQ(sends[i].wr_id, 500u + i);
    EXPECT_EQ(sends[i].status, uint32_t(IBV_WC_SUCCESS));
  }
  EXPECT_EQ(drain_cq(dev_, a_rcq_).size(), 1u) << "the FIN";
}

TEST_F(TmResponderTest, ABufferShorterThanTheRvhLengthIsLeftToSoftware) {
  add(7, 77, 1000);
  send_rndv(7, 0, 1001, a_key_);
  ASSERT_TRUE(run());
  abi::Cqe c = one_cqe(tm_cq_);
  EXPECT_EQ(c.status, uint32_t(IBV_WC_TM_RNDV_INCOMPLETE));
  EXPECT_EQ(c.wc_flags, uint32_t(IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID));
  EXPECT_EQ(c.byte_len, 64u);
  EXPECT_EQ(std::memcmp(b(0), a(kReqOff), 64), 0) << "TMH + RVH for software";
  EXPECT_TRUE(drain_cq(dev_, a_rcq_).empty()) << "no FIN from the device";
  EXPECT_EQ(counters().tm_rndv_reads, 0u);
  EXPECT_EQ(counters().tm_rndv_software, 1u);
}

TEST_F(TmResponderTest, AnUnexpectedRendezvousLandsWholeInAPlainBufferForSoftware) {
  add(8, 88, 8192);  // another tag: the request is unexpected
  abi::RecvWqe w{600, 1, 0};
  Srq& srq = *dev_.srq(srq_);
  const uint32_t prod = srq.ring.hdr->producer.load();
  std::memcpy(srq.ring.slot(prod), &w, sizeof(w));
  const abi::Sge plain = sge(b(16 * 1024), 256, b_key_);
  std::memcpy(srq.ring.slot(prod) + sizeof(w), &plain, sizeof(plain));
  srq.ring.hdr->producer.store(prod + 1);
  send_rndv(7, 0, 2048, a_key_);
  ASSERT_TRUE(run());
  abi::Cqe c = one_cqe(tm_cq_);
  EXPECT_EQ(c.status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(c.opcode, uint32_t(IBV_WC_TM_RECV));
  EXPECT_EQ(c.wc_flags, 0u);
  EXPECT_EQ(c.wr_id, 600u);
  EXPECT_EQ(c.byte_len, 64u);
  EXPECT_EQ(std::memcmp(b(16 * 1024), a(kReqOff), 64), 0) << "TMH + RVH for software";
  EXPECT_EQ(counters().tm_rndv_reads, 0u);
  EXPECT_EQ(counters().tm_unexpected, 1u);
  EXPECT_TRUE(drain_cq(dev_, a_rcq_).empty()) << "no FIN from the device";
}

TEST_F(TmResponderTest, ABadRkeyInTheRvhFailsTheTaggedBufferWithTheReadsStatus) {
  add(7, 77, 8192);
  send_rndv(7, 0, 2048, a_key_ ^ 0x100);
  ASSERT_TRUE(run());
  auto tm = drain_cq(dev_, tm_cq_);
  ASSERT_EQ(tm.size(), 2u);
  EXPECT_EQ(tm[0].wc_flags, uint32_t(IBV_WC_TM_MATCH));
  EXPECT_EQ(tm[1].status, uint32_t(IBV_WC_REM_ACCESS_ERR));
  EXPECT_EQ(tm[1].opcode, uint32_t(IBV_WC_TM_RECV));
  EXPECT_EQ(tm[1].wr_id, 77u);
  EXPECT_EQ(B().state, IBV_QPS_ERR);
  EXPECT_EQ(A().state, IBV_QPS_ERR) << "A's responder NAKed an invalid READ (class C)";
  EXPECT_TRUE(drain_cq(dev_, b_scq_).empty());
  EXPECT_EQ(counters().tm_rndv_errors, 1u);
  add(8, 88, 64);
  EXPECT_EQ(last_ops_.err, 0) << "the tag's handle is free again";
}

TEST_F(TmResponderTest, AQpInErrorWithItsReadOutstandingFlushesTheTaggedBuffer) {
  add(7, 77, 8192);
  send_rndv(7, 0, 2048, a_key_);
  // Run until B's READ request is on the wire, and lose it.
  bool read_sent = false;
  for (int i = 0; i < 50 && !read_sent; ++i) {
    dev_.poll(now_);
    for (net::Packet* p : DeviceTestPeer::take_in_flight(dev_)) {
      const bool read = net::parse_roce_packet(*p, p->checksummed) == net::ParseError::kOk &&
                        p->opcode == 0x0c;  // RC RDMA READ request
      read_sent |= read;
      if (read) DeviceTestPeer::drop(dev_, p);
      else DeviceTestPeer::requeue(dev_, p);
    }
  }
  ASSERT_TRUE(read_sent);
  abi::Cqe c = one_cqe(tm_cq_);
  EXPECT_EQ(c.wc_flags, uint32_t(IBV_WC_TM_MATCH));
  ASSERT_EQ(to_state(b_, IBV_QPS_ERR), 0);
  ASSERT_TRUE(run());
  c = one_cqe(tm_cq_);
  EXPECT_EQ(c.status, uint32_t(IBV_WC_WR_FLUSH_ERR));
  EXPECT_EQ(c.opcode, uint32_t(IBV_WC_TM_RECV));
  EXPECT_EQ(c.wr_id, 77u);
  EXPECT_TRUE(drain_cq(dev_, b_scq_).empty()) << "the device's READ is no user WQE";
  add(8, 88, 64);
  EXPECT_EQ(last_ops_.err, 0) << "the tag's handle is free again";
}

TEST_F(TmResponderTest, AQpDestroyedWithItsReadQueuedGivesTheBufferBack) {
  // B only in RTR: its requester does not run, the READ waits in its queue.
  abi::QpAttr a = default_attr();
  a.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(modify(b_, IBV_QP_STATE, a), 0);
  a.dest_qp_num = a_;
  a.rq_psn = kPsn;
  a.qp_state = IBV_QPS_INIT;
  ASSERT_EQ(modify(b_, kRcInitMask, a), 0);
  a.qp_state = IBV_QPS_RTR;
  ASSERT_EQ(modify(b_, kRcRtrMask, a), 0);
  add(7, 77, 8192);
  send_rndv(7, 0, 2048, a_key_);
  ASSERT_TRUE(run());
  EXPECT_EQ(one_cqe(tm_cq_).wc_flags, uint32_t(IBV_WC_TM_MATCH));
  ASSERT_EQ(dev_.destroy_qp(&owner_, b_), 0);
  abi::Cqe c = one_cqe(tm_cq_);
  EXPECT_EQ(c.status, uint32_t(IBV_WC_WR_FLUSH_ERR));
  EXPECT_EQ(c.wr_id, 77u);
  add(8, 88, 64);
  EXPECT_EQ(last_ops_.err, 0) << "the tag's handle is free again";
}

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
