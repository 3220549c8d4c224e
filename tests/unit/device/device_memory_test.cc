// Tests for device memory in device/device_memory.cc: allocation against the
// device's limit, the memfd the client maps, DM MRs (zero-based, in bounds,
// holding the memory), and what release_owner frees.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "device/test_env.h"

namespace uroce::device {
namespace {

constexpr uint32_t kDmAccess = IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE |
                               IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

DeviceConfig small_dm() {
  DeviceConfig c;
  c.max_dm_size = 4 * 4096;
  return c;
}

class DeviceMemoryTest : public DeviceFixture {
 protected:
  DeviceMemoryTest() : DeviceFixture(small_dm()) {}
  Result<uint32_t> alloc(uint64_t length, uint32_t log_align = 0) {
    int fd = -1;
    uint64_t map_length = 0;
    auto r = dev_.alloc_dm(&owner_, abi::AllocDmRequest{length, log_align, 0}, &fd, &map_length);
    if (!r.err) {
      fds_[r.value] = fd;
      maps_[r.value] = map_length;
    }
    return r;
  }
  // The client's side: the memfd mapped as the provider maps it.
  uint8_t* map(uint32_t dm) {
    void* p = mmap(nullptr, maps_[dm], PROT_READ | PROT_WRITE, MAP_SHARED, fds_[dm], 0);
    EXPECT_NE(p, MAP_FAILED);
    return static_cast<uint8_t*>(p);
  }
  Result<uint32_t> reg(uint32_t dm, uint8_t* at, uint64_t offset, uint64_t length, uint32_t access = kDmAccess) {
    abi::RegDmMrRequest req{pd_, dm, offset, length, reinterpret_cast<uint64_t>(at), access, 0};
    return dev_.reg_dm_mr(&owner_, req);
  }
  int fds_[16] = {};
  uint64_t maps_[16] = {};
};

TEST_F(DeviceMemoryTest, LimitCountsWholePagesOfEveryAllocation) {
  EXPECT_EQ(dev_.info().max_dm_size, 4u * 4096);
  EXPECT_EQ(alloc(4 * 4096 + 1).err, EINVAL);  // past max_dm_size (mlx5_alloc_dm)
  EXPECT_EQ(alloc(0).err, EINVAL);
  EXPECT_EQ(alloc(64, 13).err, EINVAL);  // more alignment than a page gives
  auto a = alloc(100, 6);
  ASSERT_EQ(a.err, 0);
  EXPECT_EQ(maps_[a.value], 4096u);
  EXPECT_EQ(dev_.dm_used(), 4096u);
  auto b = alloc(3 * 4096);
  ASSERT_EQ(b.err, 0);
  EXPECT_EQ(alloc(4).err, ENOMEM);  // MEMIC used up
  EXPECT_EQ(dev_.free_dm(&owner_, a.value), 0);
  EXPECT_EQ(dev_.free_dm(&owner_, a.value), EINVAL);
  EXPECT_EQ(alloc(4).err, 0);
}

TEST_F(DeviceMemoryTest, MemfdIsZeroedAndSealedAgainstResizing) {
  auto a = alloc(4096);
  ASSERT_EQ(a.err, 0);
  const int fd = fds_[a.value];
  EXPECT_NE(ftruncate(fd, 0), 0);
  EXPECT_NE(ftruncate(fd, 8192), 0);
  uint8_t* p = map(a.value);
  for (int i = 0; i < 4096; ++i) ASSERT_EQ(p[i], 0) << i;
  munmap(p, 4096);
}

TEST_F(DeviceMemoryTest, DmMrIsZeroBasedInBoundsAndHoldsTheMemory) {
  auto a = alloc(100);
  ASSERT_EQ(a.err, 0);
  uint8_t* p = map(a.value);
  EXPECT_EQ(reg(a.value, p, 0, 100, IBV_ACCESS_LOCAL_WRITE).err, EINVAL);  // not zero-based
  EXPECT_EQ(reg(a.value, p, 0, 100, kDmAccess | IBV_ACCESS_MW_BIND).err, EINVAL);
  EXPECT_EQ(reg(a.value, p, 0, 100, IBV_ACCESS_ZERO_BASED | IBV_ACCESS_REMOTE_WRITE).err, EINVAL);
  EXPECT_EQ(reg(a.value, p, 0, 101).err, EINVAL);
  EXPECT_EQ(reg(a.value, p, 100, 1).err, EINVAL);
  EXPECT_EQ(reg(a.value, p + 1, 0, 4).err, EINVAL);  // the mapping starts on a page
  auto mr = reg(a.value, p, 40, 60);
  ASSERT_EQ(mr.err, 0);
  const Mr* m = dev_.find_mr(mr.value);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->iova, 0u);
  EXPECT_EQ(m->addr, reinterpret_cast<uint64_t>(p) + 40);
  ASSERT_NE(m->pages, nullptr);  // the engine maps the memfd: the same bytes
  p[40 + 8] = 0x5e;
  EXPECT_EQ(*m->pages->at(m->addr + 8), 0x5e);
  EXPECT_EQ(dev_.free_dm(&owner_, a.value), EBUSY);
  abi::ReregMrRequest rr{};
  rr.handle = mr.value;
  rr.flags = IBV_REREG_MR_CHANGE_ACCESS;
  rr.access = kDmAccess;
  uint32_t key = 0;
  EXPECT_EQ(dev_.rereg_mr(&owner_, rr, &key), EOPNOTSUPP);
  EXPECT_EQ(dev_.dealloc_pd(&owner_, pd_), EBUSY);
  EXPECT_EQ(dev_.dereg_mr(&owner_, mr.value), 0);
  EXPECT_EQ(dev_.free_dm(&owner_, a.value), 0);
  munmap(p, 4096);
}

TEST_F(DeviceMemoryTest, AnotherOwnersMemoryIsNotReachable) {
  auto a = alloc(4096);
  ASSERT_EQ(a.err, 0);
  Owner other = make_self_owner(2);
  EXPECT_EQ(dev_.free_dm(&other, a.value), EINVAL);
  auto other_pd = dev_.alloc_pd(&other);
  ASSERT_EQ(other_pd.err, 0);
  abi::RegDmMrRequest req{other_pd.value, a.value, 0, 64, 0x10000, kDmAccess, 0};
  EXPECT_EQ(dev_.reg_dm_mr(&other, req).err, EINVAL);
  dev_.release_owner(&other);
}

TEST_F(DeviceMemoryTest, ReleaseOwnerFreesMemoryAfterItsMrs) {
  auto a = alloc(4096);
  auto b = alloc(2 * 4096);
  ASSERT_EQ(a.err | b.err, 0);
  uint8_t* p = map(a.value);
  ASSERT_EQ(reg(a.value, p, 0, 4096).err, 0);
  EXPECT_EQ(dev_.dm_used(), 3u * 4096);
  dev_.release_owner(&owner_);
  EXPECT_EQ(dev_.dm_used(), 0u);
  munmap(p, 4096);
}

}  // namespace
}  // namespace uroce::device
