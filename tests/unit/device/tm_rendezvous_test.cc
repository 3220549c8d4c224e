// Protocol tests of the rendezvous offload (device/tm_rendezvous.cc): A
// sends a real RNDV request (TMH + RVH naming A's buffer) to B on a TM-SRQ;
// B's device READs the data into the tagged buffer on B's own send queue and
// sends the FIN back (rdma-core's Documentation/tag_matching.md). Frames
// are lost, QPs fail, and the tagged buffer still ends exactly once, its tag
// free again.
#include "device/tm_fixture.h"

namespace uroce::device {
namespace {

using TmRendezvousTest = TmFixture;

TEST_F(TmRendezvousTest, RendezvousReadsIntoTheTaggedBufferThenSendsTheFin) {
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
TEST_F(TmRendezvousTest, RendezvousSurvivesALostReadRequestResponseAndFin) {
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
TEST_F(TmRendezvousTest, AFinThePeerNeverTakesFailsTheQpWithAnEvent) {
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

// Random loss over several rendezvous in a row (two READs and FINs in
// flight at once, losses in a retransmission too): every one completes.
TEST_F(TmRendezvousTest, RendezvousUnderRandomLossAllComplete) {
  uint64_t seed = 12345;
  auto coin = [&](uint32_t per_mille) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return (seed >> 33) % 1000 < per_mille;
  };
  constexpr int kMessages = 6;
  uint32_t handles_done = 0, data_done = 0;
  for (int m = 0; m < kMessages; ++m) {
    add(100 + m, 100 + m, 8192);
    ASSERT_EQ(last_ops_.err, 0) << m;
    send_rndv(100 + m, 8192 * (m % 4), 8000, a_key_);
    for (int i = 0; i < 2000; ++i) {
      const bool work = dev_.poll(now_);
      for (net::Packet* p : DeviceTestPeer::take_in_flight(dev_)) {
        if (coin(40)) DeviceTestPeer::drop(dev_, p);
        else DeviceTestPeer::requeue(dev_, p);
      }
      if (!work && !DeviceTestPeer::in_flight(dev_)) now_ += 100'000'000;
      for (const abi::Cqe& c : drain_cq(dev_, tm_cq_)) {
        ASSERT_EQ(c.status, uint32_t(IBV_WC_SUCCESS)) << "message " << m << " wr_id " << c.wr_id;
        if (c.wc_flags & IBV_WC_TM_DATA_VALID) ++data_done;
      }
      if (data_done == uint32_t(m + 1)) break;
    }
    ASSERT_EQ(data_done, uint32_t(m + 1)) << "message " << m << " never completed; B in state " << B().state;
    ++handles_done;
  }
  EXPECT_EQ(B().state, IBV_QPS_RTS);
  EXPECT_EQ(counters().retry_exceeded, 0u);
}

// A QP holds at most kTmRndvPerQp rendezvous reads of the device's: past
// them a matched RNDV is left to software, as one whose buffer is short.
TEST_F(TmRendezvousTest, PastKTmRndvPerQpReadsARendezvousIsLeftToSoftware) {
  const uint32_t srq2 = create_tm_srq(64, 128);
  abi::QpCaps caps = default_caps();
  caps.max_send_wr = 64;
  const uint32_t c = create_qp(IBV_QPT_RC, a_scq_, a_rcq_, caps);
  const uint32_t d = create_qp_on_srq(srq2);
  ASSERT_FALSE(HasFailure()) << "the TM-SRQ or the QP on it was not made";
  connect(c, d, default_attr(), 3000, 4000);
  abi::QpAttr at = default_attr();  // D only to RTR: its requester waits, the reads queue
  at.dest_qp_num = c;
  at.rq_psn = 3000;
  at.qp_state = IBV_QPS_INIT;
  ASSERT_EQ(modify(d, kRcInitMask, at), 0);
  at.qp_state = IBV_QPS_RTR;
  ASSERT_EQ(modify(d, kRcRtrMask, at), 0);
  const uint32_t n = kTmRndvPerQp + 1;
  for (uint32_t i = 0; i < n; ++i) {
    abi::SrqOp op{};
    op.opcode = IBV_WR_TAG_ADD;
    op.recv_wr_id = i;
    op.tag = i;
    op.mask = ~0ull;
    op.num_sge = 1;
    op.sge = {b_addr(1024 * i), 1024, b_key_};
    op.handle = free_handle(srq2);
    uint32_t h;
    ASSERT_EQ(dev_.post_srq_ops(&owner_, srq2, &op, 1, &h).err, 0);
    send_rndv_on(*dev_.qp(c), i, 40960 + 64 * i, i, 0, 512, a_key_, 0);
  }
  ASSERT_TRUE(run());
  auto tm = drain_cq(dev_, tm_cq_);
  ASSERT_EQ(tm.size(), n);
  for (uint32_t i = 0; i + 1 < n; ++i) {
    EXPECT_EQ(tm[i].wr_id, i);
    EXPECT_EQ(tm[i].wc_flags, uint32_t(IBV_WC_TM_MATCH)) << i;
  }
  EXPECT_EQ(tm[n - 1].wr_id, n - 1);
  EXPECT_EQ(tm[n - 1].status, uint32_t(IBV_WC_TM_RNDV_INCOMPLETE));
  EXPECT_EQ(tm[n - 1].wc_flags, uint32_t(IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID));
  EXPECT_EQ(std::memcmp(b(1024 * (n - 1)), a(40960 + 64 * (n - 1)), 64), 0) << "TMH + RVH for software";
  EXPECT_EQ(counters().tm_rndv_reads, uint64_t(kTmRndvPerQp));
  EXPECT_EQ(counters().tm_rndv_software, 1u);
}

// The FINs of reads done take no room of the reads while their ACKs are on
// the way: the sender may post its next RNDV as soon as it has a FIN, before
// the FIN's ACK is back. kTmRndvPerQp reads, then their FINs unacknowledged,
// and one more RNDV is still offloaded (it went to software when FINs and
// reads shared one count, which a window of 32 tags hit under load).
TEST_F(TmRendezvousTest, FinsAwaitingTheirAckTakeNoRoomOfTheReads) {
  const uint32_t srq2 = create_tm_srq(64, 128);
  abi::QpCaps caps = default_caps();
  caps.max_send_wr = 64;
  caps.max_recv_wr = 64;
  const uint32_t c = create_qp(IBV_QPT_RC, a_scq_, a_rcq_, caps);
  const uint32_t d = create_qp_on_srq(srq2);
  ASSERT_FALSE(HasFailure()) << "the TM-SRQ or the QP on it was not made";
  connect(c, d, default_attr(), 3000, 4000);
  abi::QpAttr at = default_attr();  // D at RTR first: all the reads queue before any runs
  at.dest_qp_num = c;
  at.rq_psn = 3000;
  at.qp_state = IBV_QPS_INIT;
  ASSERT_EQ(modify(d, kRcInitMask, at), 0);
  at.qp_state = IBV_QPS_RTR;
  ASSERT_EQ(modify(d, kRcRtrMask, at), 0);
  auto rndv = [&](uint32_t i) {
    abi::SrqOp op{};
    op.opcode = IBV_WR_TAG_ADD;
    op.recv_wr_id = i;
    op.tag = i;
    op.mask = ~0ull;
    op.num_sge = 1;
    op.sge = {b_addr(1024 * i), 1024, b_key_};
    op.handle = free_handle(srq2);
    uint32_t h;
    ASSERT_EQ(dev_.post_srq_ops(&owner_, srq2, &op, 1, &h).err, 0);
    post_recv(*dev_.qp(c), 900 + i, {sge(a(kFinRecv), 64, a_key_)});
    send_rndv_on(*dev_.qp(c), i, 40960 + 64 * i, i, 0, 512, a_key_, 0);
  };
  // Every ACK to D is lost (the clock stands, so nothing is retransmitted).
  auto run_without_acks_to_d = [&]() {
    for (int i = 0; i < 20000; ++i) {
      const bool work = dev_.poll(now_);
      bool moved = false;
      for (net::Packet* p : DeviceTestPeer::take_in_flight(dev_)) {
        moved = true;
        if (p->opcode == 0x11 && p->bth()->qpn() == d) DeviceTestPeer::drop(dev_, p);
        else DeviceTestPeer::requeue(dev_, p);
      }
      if (!work && !moved) return;
    }
  };
  for (uint32_t i = 0; i < kTmRndvPerQp; ++i) rndv(i);
  run_without_acks_to_d();
  at.qp_state = IBV_QPS_RTS;
  at.sq_psn = 4000;
  ASSERT_EQ(modify(d, kRcRtsMask, at), 0);
  run_without_acks_to_d();
  EXPECT_EQ(dev_.qp(d)->sq_internal, kTmRndvPerQp) << "every read done, every FIN unacknowledged";
  rndv(kTmRndvPerQp);
  run_without_acks_to_d();
  EXPECT_EQ(counters().tm_rndv_software, 0u);
  EXPECT_EQ(counters().tm_rndv_reads, uint64_t(kTmRndvPerQp + 1));
  ASSERT_TRUE(advance(100'000'000));  // the FINs again, acknowledged now
  ASSERT_TRUE(advance(100'000'000));
  uint32_t data = 0;
  for (const abi::Cqe& e : drain_cq(dev_, tm_cq_)) {
    EXPECT_EQ(e.status, uint32_t(IBV_WC_SUCCESS)) << e.wr_id;
    data += (e.wc_flags & IBV_WC_TM_DATA_VALID) != 0;
  }
  EXPECT_EQ(data, kTmRndvPerQp + 1);
  EXPECT_EQ(dev_.qp(d)->sq_internal, 0u);
}

TEST_F(TmRendezvousTest, RendezvousRunsBesideAFullUserSendQueue) {
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

TEST_F(TmRendezvousTest, ABadRkeyInTheRvhFailsTheTaggedBufferWithTheReadsStatus) {
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

TEST_F(TmRendezvousTest, AQpInErrorWithItsReadOutstandingFlushesTheTaggedBuffer) {
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

TEST_F(TmRendezvousTest, AQpDestroyedWithItsReadQueuedGivesTheBufferBack) {
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

}  // namespace
}  // namespace uroce::device
