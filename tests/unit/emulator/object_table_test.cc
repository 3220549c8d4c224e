// emulator/object_table.h and the method table (emulator/methods.cc).
#include "emulator/object_table.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstddef>

namespace uroce::emulator {
namespace {

TEST(ObjectTable, LooksUpOnlyItsOwnLiveHandlesOfTheRightType) {
  ObjectTable mine, theirs;
  const uint32_t pd = mine.insert(ObjType::kPd, 7);
  const uint32_t other = theirs.insert(ObjType::kPd, 8);
  EXPECT_NE(pd, 0u);
  EXPECT_NE(pd, other);  // one engine-wide counter: never the same handle twice
  uint64_t id = 0;
  EXPECT_EQ(mine.lookup(pd, ObjType::kPd, ENOENT, &id), 0);
  EXPECT_EQ(id, 7u);
  EXPECT_EQ(mine.lookup(other, ObjType::kPd, ENOENT, &id), ENOENT);  // another session's
  EXPECT_EQ(mine.lookup(pd, ObjType::kCq, ENOENT, &id), EINVAL);     // another type
  EXPECT_EQ(mine.lookup(pd, ObjType::kCq, EINVAL, &id), EINVAL);
  EXPECT_EQ(mine.lookup(0, ObjType::kPd, EINVAL, &id), EINVAL);
  EXPECT_EQ(mine.lookup(uint64_t(pd) << 32 | pd, ObjType::kPd, ENOENT, &id), ENOENT);
  mine.erase(pd);
  EXPECT_EQ(mine.lookup(pd, ObjType::kPd, ENOENT, &id), ENOENT);  // stale
  EXPECT_NE(mine.insert(ObjType::kPd, 7), pd);                     // and not reused
}

TEST(Methods, EveryOperationHasOneAndUnknownOnesNone) {
  for (uint32_t op = 1; op < uint32_t(abi::CtlOp::kCount); ++op) {
    const Method* m = find_method(op);
    ASSERT_NE(m, nullptr) << "op " << op;
    EXPECT_NE(m->handler, nullptr);
    for (size_t i = 0; i < m->num_handles; ++i)
      EXPECT_LE(m->handles[i].offset + sizeof(uint64_t), m->req_size) << m->name;
  }
  EXPECT_EQ(find_method(0), nullptr);
  EXPECT_EQ(find_method(uint32_t(abi::CtlOp::kCount)), nullptr);
  EXPECT_EQ(find_method(~0u), nullptr);
  // Destroying is ENOENT for a missing handle; a write() command's argument EINVAL.
  const Method* dealloc = find_method(uint32_t(abi::CtlOp::kDeallocPd));
  EXPECT_TRUE(dealloc->handles[0].destroys);
  EXPECT_EQ(dealloc->handles[0].missing_errno, ENOENT);
  EXPECT_EQ(find_method(uint32_t(abi::CtlOp::kRegMr))->handles[0].missing_errno, EINVAL);
}

}  // namespace
}  // namespace uroce::emulator
