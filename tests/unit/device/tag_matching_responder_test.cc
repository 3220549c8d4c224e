// Protocol tests of tag matching in the responder (device/responder.cc with
// device/tag_matching.h): hand-made SENDs with a TMH reach QP B, attached to
// a TM-SRQ, and the SRQ's CQ is read entry by entry (rdma-core's
// Documentation/tag_matching.md and providers/mlx5/cq.c).
#include "device/tm_fixture.h"

namespace uroce::device {
namespace {

using TmResponderTest = TmFixture;

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
  EXPECT_EQ(free_handle(srq_), 1u) << "a list of one tag, still being filled: no handle free";
  ASSERT_EQ(to_state(b_, IBV_QPS_ERR), 0);
  run();
  abi::Cqe c = one_cqe(tm_cq_);
  EXPECT_EQ(c.status, uint32_t(IBV_WC_WR_FLUSH_ERR));
  EXPECT_EQ(c.opcode, uint32_t(IBV_WC_TM_RECV));
  EXPECT_EQ(c.wr_id, 55u);
  EXPECT_EQ(free_handle(srq_), 0u);
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
  op.handle = free_handle(srq_);
  uint32_t h;
  ASSERT_EQ(dev_.post_srq_ops(&owner_, srq_, &op, 1, &h).err, 0);
  abi::Cqe c = one_cqe(tm_cq_);
  EXPECT_EQ(c.opcode, uint32_t(IBV_WC_TM_ADD));
  EXPECT_EQ(c.wc_flags, 0u);
  EXPECT_EQ(dev_.counters().tm_unexpected, 0u);
}

// ibv_post_srq_ops' path (abi::TmOpsHeader): ops the provider writes into the
// TM-SRQ's ring are taken by the engine's poll loop, no device call and no
// control message; handles come back through the freed ring (after a DEL or
// the consuming message), and a request is answered with the ops retired as
// of the CQ's consumer.
TEST_F(TmResponderTest, ListOpsPublishedInTheRingAreTakenByThePollLoop) {
  Srq& s = *dev_.srq(srq_);
  uint8_t* base = s.tm_mem.base();
  auto& h = *reinterpret_cast<abi::TmOpsHeader*>(base);
  auto* ops = reinterpret_cast<abi::SrqOp*>(base + abi::kTmOpsOffset);
  const auto* freed = reinterpret_cast<const uint32_t*>(base + abi::tm_freed_offset(h.log2_ops));
  ASSERT_GE(1u << h.log2_ops, 16u) << "room for max_ops";
  ASSERT_GE(1u << h.log2_freed, 1u) << "room for max_num_tags";
  EXPECT_TRUE(run()) << "an idle ring is no work";
  uint32_t prod = 0, request = 0;
  auto publish = [&](uint32_t opcode, uint32_t flags, uint64_t wr_id) {
    abi::SrqOp op{};
    op.wr_id = wr_id;
    op.opcode = opcode;
    op.flags = flags;
    op.handle = 0;  // the list's only tag
    op.recv_wr_id = wr_id + 100;
    op.tag = 5;
    op.mask = ~0ull;
    op.num_sge = 1;
    op.sge = {b_addr(0), 64, b_key_};
    ops[prod++ & ((1u << h.log2_ops) - 1)] = op;
    h.producer.store(prod, std::memory_order_release);
  };
  auto ask = [&] {
    h.request.store(++request, std::memory_order_release);
    EXPECT_TRUE(dev_.poll(now_)) << "a request is work";
    EXPECT_EQ(h.answered.load(), request);
  };

  publish(IBV_WR_TAG_ADD, IBV_OPS_SIGNALED, 1);
  publish(IBV_WR_TAG_SYNC, 0, 2);  // unsignaled: retires with the next signaled op
  publish(IBV_WR_TAG_DEL, IBV_OPS_SIGNALED, 3);
  EXPECT_TRUE(dev_.poll(now_)) << "published ops are work";
  EXPECT_EQ(h.consumer.load(), 3u);
  ask();
  EXPECT_EQ(h.retired.load(), 0u) << "no completion polled yet";
  EXPECT_EQ(h.freed.load(), 1u) << "the DEL gave handle 0 back";
  EXPECT_EQ(freed[0], 0u);
  auto cqes = drain_cq(dev_, tm_cq_);
  ASSERT_EQ(cqes.size(), 2u);
  EXPECT_EQ(cqes[0].opcode, uint32_t(IBV_WC_TM_ADD));
  EXPECT_EQ(cqes[1].opcode, uint32_t(IBV_WC_TM_DEL));
  EXPECT_EQ(cqes[1].status, uint32_t(IBV_WC_SUCCESS));
  ask();
  EXPECT_EQ(h.retired.load(), 3u) << "both signaled completions polled";

  // The handle again; a message consumes it and gives it back.
  publish(IBV_WR_TAG_ADD, IBV_OPS_SIGNALED, 4);
  run();
  EXPECT_EQ(one_cqe(tm_cq_).wr_id, 4u);
  const std::vector<uint8_t> m = message(IBV_TMH_EAGER, 5, 64);
  inject(kSendOnly, b_, kPsn, true, m.data(), 64);
  run();
  abi::Cqe c = one_cqe(tm_cq_);
  EXPECT_EQ(c.wr_id, 104u);
  EXPECT_EQ(c.wc_flags & IBV_WC_TM_MATCH, unsigned(IBV_WC_TM_MATCH));
  ask();
  EXPECT_EQ(h.freed.load(), 2u);
  EXPECT_EQ(freed[1 & ((1u << h.log2_freed) - 1)], 0u);
  EXPECT_EQ(h.retired.load(), 4u);
  // A taken handle is refused (a bad client): no completion, retired at once.
  publish(IBV_WR_TAG_ADD, IBV_OPS_SIGNALED, 5);
  publish(IBV_WR_TAG_ADD, IBV_OPS_SIGNALED, 6);
  ask();
  EXPECT_EQ(one_cqe(tm_cq_).wr_id, 5u);
  EXPECT_EQ(h.consumer.load(), prod);
  EXPECT_EQ(h.retired.load(), 5u);
}

}  // namespace
}  // namespace uroce::device
