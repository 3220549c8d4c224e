// The tag list of a TM-SRQ (device/tag_matching.h): list operations, the
// matching rules, the phase rule and the outstanding-op limit, without
// packets (rdma-core's man ibv_post_srq_ops(3), providers/mlx5/qp.c
// mlx5_post_srq_ops and cq.c, Documentation/tag_matching.md).
#include "device/tag_matching.h"

#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <atomic>
#include <set>

namespace uroce::device {
namespace {

abi::SrqOp add_op(uint64_t tag, uint64_t mask, uint64_t recv_wr_id, uint32_t flags = IBV_OPS_SIGNALED) {
  abi::SrqOp op{};
  op.wr_id = recv_wr_id + 100;
  op.opcode = IBV_WR_TAG_ADD;
  op.flags = flags;
  op.recv_wr_id = recv_wr_id;
  op.tag = tag;
  op.mask = mask;
  op.num_sge = 1;
  op.sge = {0x1000, 64, 7};
  return op;
}

abi::SrqOp simple_op(uint32_t opcode, uint32_t flags, uint32_t handle = 0, uint32_t cnt = 0) {
  abi::SrqOp op{};
  op.opcode = opcode;
  op.flags = flags;
  op.handle = handle;
  op.unexpected_cnt = cnt;
  return op;
}

// Posts with every earlier completion already polled; a TAG_ADD takes the
// lowest free handle, as the provider would give one (max_num_tags: none).
TagList::OpResult post(TagList& l, abi::SrqOp op) {
  static uint32_t pos = 0;
  ++pos;
  if (op.opcode == IBV_WR_TAG_ADD)
    for (op.handle = 0; op.handle < l.max_num_tags() && !l.is_free(op.handle);) ++op.handle;
  return l.post(op, pos, pos);
}

std::vector<uint32_t> freed(TagList& l) {
  std::vector<uint32_t> v;
  l.take_freed([&](uint32_t h) { v.push_back(h); });
  return v;
}

TEST(TagMatchingTest, ParsesTheBigEndianTmh) {
  const uint8_t b[16] = {3, 0, 0, 0, 0x12, 0x34, 0x56, 0x78, 0, 0, 0, 0, 0, 0, 0x12, 0x34};
  const auto h = parse_tmh(b, sizeof(b));
  ASSERT_TRUE(h);
  EXPECT_EQ(h->opcode, IBV_TMH_EAGER);
  EXPECT_EQ(h->app_ctx, 0x12345678u);
  EXPECT_EQ(h->tag, 0x1234u);
  EXPECT_FALSE(parse_tmh(b, 15));
}

TEST(TagMatchingTest, AddTakesTheGivenFreeHandleAndATakenOneIsEinval) {
  TagList l(3, 100);
  std::set<uint32_t> handles;
  for (int i = 0; i < 3; ++i) {
    auto r = post(l, add_op(i, ~0ull, i));
    ASSERT_EQ(r.err, 0);
    EXPECT_TRUE(r.signaled);
    EXPECT_EQ(r.cqe.opcode, uint32_t(IBV_WC_TM_ADD));
    EXPECT_EQ(r.cqe.wc_flags, 0u);
    handles.insert(r.handle);
  }
  EXPECT_EQ(handles.size(), 3u);
  // The provider refuses a full list (ENOMEM); a handle it did not own is a bad client.
  EXPECT_EQ(post(l, add_op(9, ~0ull, 9)).err, EINVAL);
  auto taken = add_op(9, ~0ull, 9);
  taken.handle = *handles.begin();
  EXPECT_EQ(l.post(taken, 0, 0).err, EINVAL);
  EXPECT_TRUE(freed(l).empty());
  EXPECT_EQ(post(l, simple_op(IBV_WR_TAG_DEL, IBV_OPS_SIGNALED, *handles.begin())).cqe.status,
            uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(freed(l), std::vector<uint32_t>{*handles.begin()}) << "a DEL gives its handle back";
  EXPECT_EQ(post(l, add_op(9, ~0ull, 9)).err, 0);
  EXPECT_EQ(post(l, simple_op(7, 0)).err, EINVAL);                      // no such opcode
  EXPECT_EQ(post(l, simple_op(IBV_WR_TAG_DEL, 0, 3)).err, EINVAL);      // no such handle
  auto two = add_op(1, 1, 1);
  two.num_sge = 2;
  EXPECT_EQ(post(l, two).err, EINVAL);
}

TEST(TagMatchingTest, MaskedCompareAndOldestFirst) {
  TagList l(8, 100);
  post(l, add_op(0x100, 0xff00, 1));
  post(l, add_op(0x1ab, ~0ull, 2));
  EXPECT_FALSE(l.match(0x2ab));
  auto m = l.match(0x1ab);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->buf.recv_wr_id, 1u);
  m = l.match(0x1ab);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->buf.recv_wr_id, 2u);
  EXPECT_FALSE(l.match(0x1ab));
}

TEST(TagMatchingTest, DelOfAConsumedEntryIsTmErrAndTheHandleComesBackAfterRelease) {
  TagList l(1, 100);
  const uint32_t h = post(l, add_op(5, ~0ull, 5)).handle;
  auto m = l.match(5);
  ASSERT_TRUE(m);
  auto del = post(l, simple_op(IBV_WR_TAG_DEL, 0, h));
  EXPECT_EQ(del.cqe.status, uint32_t(IBV_WC_TM_ERR));
  EXPECT_TRUE(del.signaled) << "an error completes even unsignaled";
  EXPECT_EQ(post(l, add_op(6, ~0ull, 6)).err, EINVAL) << "consumed, not yet released";
  EXPECT_TRUE(freed(l).empty());
  l.release(m->handle);
  EXPECT_EQ(freed(l), std::vector<uint32_t>{h});
  EXPECT_EQ(post(l, add_op(6, ~0ull, 6)).err, 0);
}

TEST(TagMatchingTest, TagsAddedOutOfSyncWaitForTheSync) {
  TagList l(8, 100);
  post(l, add_op(1, ~0ull, 1));
  EXPECT_FALSE(l.count_unexpected());
  auto r = post(l, add_op(2, ~0ull, 2));
  EXPECT_EQ(r.cqe.wc_flags, uint32_t(IBV_WC_TM_SYNC_REQ));
  EXPECT_FALSE(l.match(2)) << "held until software syncs";
  EXPECT_TRUE(l.match(1)) << "entries from before the unexpected message stay eligible";
  post(l, simple_op(IBV_WR_TAG_SYNC, IBV_OPS_TM_SYNC, 0, 1));
  EXPECT_TRUE(l.match(2));
}

TEST(TagMatchingTest, SyncIsRequestedPast16KUnexpected) {
  TagList l(1, 100);
  for (uint32_t i = 0; i < 0x3fff; ++i) ASSERT_FALSE(l.count_unexpected());
  EXPECT_TRUE(l.count_unexpected());
}

TEST(TagMatchingTest, OutstandingOpsRetireWhenTheirSignaledCompletionIsPolled) {
  TagList l(8, 3);
  // Completions written at CQ positions 0, 1, 2; the consumer still at 0.
  EXPECT_EQ(l.post(simple_op(IBV_WR_TAG_SYNC, 0), 0, 0).err, 0);
  EXPECT_EQ(l.post(simple_op(IBV_WR_TAG_SYNC, IBV_OPS_SIGNALED), 0, 0).err, 0);
  EXPECT_EQ(l.post(simple_op(IBV_WR_TAG_SYNC, IBV_OPS_SIGNALED), 1, 0).err, 0);
  EXPECT_EQ(l.post(simple_op(IBV_WR_TAG_SYNC, IBV_OPS_SIGNALED), 2, 0).err, ENOMEM);
  // The first signaled one polled: it and the unsignaled one before it retire.
  EXPECT_EQ(l.post(simple_op(IBV_WR_TAG_SYNC, IBV_OPS_SIGNALED), 2, 1).err, 0);
  EXPECT_EQ(l.outstanding_ops(), 2u);
}

// A TM-SRQ in mlx5's format: the program names the entries (max_num_tags
// + 1 of them, as mlx5's list), posts as many operations as its command QP
// holds, and keeps its own free list: nothing goes to the freed ring.
TEST(TagMatchingTest, ProgramManagedListHasOneMoreEntryNoOpLimitAndNoFreedRing) {
  TagList l(2, 1);
  uint32_t ring[4] = {};
  std::atomic<uint32_t> count{0};
  l.attach_freed(ring, 3, &count);
  l.adopt_mlx5_format();
  EXPECT_EQ(l.slots(), 3u);
  for (uint32_t h = 0; h < 3; ++h) {
    abi::SrqOp op = add_op(h, ~0ull, h, 0);  // unsignaled: no op would retire
    op.handle = h;
    EXPECT_EQ(l.post(op, 0, 0).err, 0) << h;
  }
  EXPECT_EQ(l.post(simple_op(IBV_WR_TAG_DEL, IBV_OPS_SIGNALED, 2), 0, 0).cqe.status, IBV_WC_SUCCESS);
  ASSERT_TRUE(l.match(0).has_value());
  l.release(0);
  EXPECT_EQ(count.load(), 0u);
  EXPECT_TRUE(freed(l).empty());
  EXPECT_TRUE(l.is_free(0) && l.is_free(2));
}

}  // namespace
}  // namespace uroce::device
