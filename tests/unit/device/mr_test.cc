// Tests for the memory-region half of device/device.cc: registration rules
// (reg_mr, rereg_mr, dereg_mr) and the key check every data access goes
// through (Device::check_mr: key, PD, bounds, access; IBA 10.6).
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstdint>
#include <vector>

#include "device/test_env.h"

namespace uroce::device {
namespace {

using MrCheck = Device::MrCheck;

class MrTest : public DeviceFixture {
 protected:
  MrCheck check(uint32_t key, uint64_t va, uint64_t len, uint32_t access, uint32_t pd = 0) {
    const Mr* mr = nullptr;
    const MrCheck r = dev_.check_mr(key, pd ? pd : pd_, va, len, access, &mr);
    if (r == MrCheck::kOk) {
      EXPECT_NE(mr, nullptr);
      if (mr) { EXPECT_EQ(mr->key, key); }
    }
    return r;
  }
  Result<uint32_t> try_reg(uint64_t addr, uint64_t len, uint32_t access, uint64_t iova,
                           uint32_t pd = 0, Owner* o = nullptr) {
    abi::RegMrRequest req{};
    req.pd = pd ? pd : pd_;
    req.addr = addr;
    req.iova = iova;
    req.length = len;
    req.access = access;
    return dev_.reg_mr(o ? o : &owner_, req);
  }
  uint64_t addr(const void* p) { return reinterpret_cast<uint64_t>(p); }

  std::vector<uint8_t> buf_ = std::vector<uint8_t>(8192, 0);
};

TEST_F(MrTest, KeyCheckAcceptsTheWholeRegion) {
  const uint32_t key = reg_mr(buf_.data(), 4096, kAllAccess);
  const uint64_t va = addr(buf_.data());
  EXPECT_EQ(check(key, va, 4096, IBV_ACCESS_REMOTE_WRITE), MrCheck::kOk);
  EXPECT_EQ(check(key, va, 1, IBV_ACCESS_REMOTE_READ), MrCheck::kOk);
  EXPECT_EQ(check(key, va + 4095, 1, IBV_ACCESS_LOCAL_WRITE), MrCheck::kOk);
  EXPECT_EQ(check(key, va + 4096, 0, 0), MrCheck::kOk);  // empty range at the end
  EXPECT_EQ(check(key, va + 100, 3996, kAllAccess), MrCheck::kOk);
  const Mr* mr = dev_.find_mr(key);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(mr->length, 4096u);
  EXPECT_EQ(mr->pd, pd_);
}

TEST_F(MrTest, BadKeyIsRejected) {
  const uint32_t key = reg_mr(buf_.data(), 4096, kAllAccess);
  const uint64_t va = addr(buf_.data());
  EXPECT_EQ(check(key ^ 0x01, va, 8, 0), MrCheck::kBadKey);     // wrong generation
  EXPECT_EQ(check(key + 0x100, va, 8, 0), MrCheck::kBadKey);    // next index, unused
  EXPECT_EQ(check(0, va, 8, 0), MrCheck::kBadKey);
  EXPECT_EQ(check(0xffffff00, va, 8, 0), MrCheck::kBadKey);     // index far past the table
  EXPECT_EQ(check(0xffffffff, va, 8, 0), MrCheck::kBadKey);
  EXPECT_EQ(dev_.find_mr(key ^ 0x01), nullptr);
}

TEST_F(MrTest, WrongPdIsRejected) {
  const uint32_t key = reg_mr(buf_.data(), 4096, kAllAccess);
  auto pd2 = dev_.alloc_pd(&owner_);
  ASSERT_EQ(pd2.err, 0);
  EXPECT_EQ(check(key, addr(buf_.data()), 8, 0, pd2.value), MrCheck::kBadPd);
}

TEST_F(MrTest, BoundsAreChecked) {
  const uint32_t key = reg_mr(buf_.data() + 1024, 4096, kAllAccess);
  const uint64_t va = addr(buf_.data()) + 1024;
  EXPECT_EQ(check(key, va - 1, 1, 0), MrCheck::kBadBounds);        // before
  EXPECT_EQ(check(key, va - 1, 2, 0), MrCheck::kBadBounds);        // straddles the start
  EXPECT_EQ(check(key, va + 4095, 2, 0), MrCheck::kBadBounds);     // straddles the end
  EXPECT_EQ(check(key, va + 4096, 1, 0), MrCheck::kBadBounds);     // just after
  EXPECT_EQ(check(key, va, 4097, 0), MrCheck::kBadBounds);         // longer than the MR
  EXPECT_EQ(check(key, va + 4097, 0, 0), MrCheck::kBadBounds);     // empty, but outside
}

TEST_F(MrTest, BoundsCheckDoesNotOverflow) {
  const uint32_t key = reg_mr(buf_.data(), 4096, kAllAccess);
  const uint64_t va = addr(buf_.data());
  // va + len wraps around to a small number: a naive end check would pass.
  EXPECT_EQ(check(key, va + 16, UINT64_MAX - 8, 0), MrCheck::kBadBounds);
  EXPECT_EQ(check(key, va, UINT64_MAX, 0), MrCheck::kBadBounds);
  EXPECT_EQ(check(key, UINT64_MAX - 7, 16, 0), MrCheck::kBadBounds);
  EXPECT_EQ(check(key, UINT64_MAX, 1, 0), MrCheck::kBadBounds);
  EXPECT_EQ(check(key, va + 8, uint64_t(0) - 8, 0), MrCheck::kBadBounds);
}

TEST_F(MrTest, RegionAtTheTopOfTheIovaSpace) {
  // A peer addresses this MR with an IOVA ending exactly at 2^64.
  const uint64_t iova = uint64_t(0) - 4096;
  auto r = try_reg(addr(buf_.data()), 4096, kAllAccess, iova);
  ASSERT_EQ(r.err, 0);
  const uint32_t key = r.value;
  EXPECT_EQ(check(key, iova, 4096, 0), MrCheck::kOk);
  EXPECT_EQ(check(key, UINT64_MAX, 1, 0), MrCheck::kOk);
  EXPECT_EQ(check(key, UINT64_MAX - 7, 8, 0), MrCheck::kOk);
  EXPECT_EQ(check(key, UINT64_MAX, 2, 0), MrCheck::kBadBounds);       // wraps to 0
  EXPECT_EQ(check(key, UINT64_MAX - 10, 20, 0), MrCheck::kBadBounds);
  EXPECT_EQ(check(key, iova - 1, 1, 0), MrCheck::kBadBounds);
  EXPECT_EQ(check(key, 0, 1, 0), MrCheck::kBadBounds);
  // The IOVA, not the address, is what the check uses.
  EXPECT_EQ(check(key, addr(buf_.data()), 8, 0), MrCheck::kBadBounds);
}

TEST_F(MrTest, AccessBitsAreChecked) {
  const uint32_t ro = reg_mr(buf_.data(), 4096, IBV_ACCESS_REMOTE_READ);
  const uint64_t va = addr(buf_.data());
  EXPECT_EQ(check(ro, va, 8, IBV_ACCESS_REMOTE_READ), MrCheck::kOk);
  EXPECT_EQ(check(ro, va, 8, 0), MrCheck::kOk);  // local read needs no bit
  EXPECT_EQ(check(ro, va, 8, IBV_ACCESS_LOCAL_WRITE), MrCheck::kBadAccess);
  EXPECT_EQ(check(ro, va, 8, IBV_ACCESS_REMOTE_WRITE), MrCheck::kBadAccess);
  EXPECT_EQ(check(ro, va, 8, IBV_ACCESS_REMOTE_ATOMIC), MrCheck::kBadAccess);
  EXPECT_EQ(check(ro, va, 8, IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE),
            MrCheck::kBadAccess);
  const uint32_t lw = reg_mr(buf_.data() + 4096, 4096, IBV_ACCESS_LOCAL_WRITE);
  EXPECT_EQ(check(lw, va + 4096, 8, IBV_ACCESS_LOCAL_WRITE), MrCheck::kOk);
  EXPECT_EQ(check(lw, va + 4096, 8, IBV_ACCESS_REMOTE_READ), MrCheck::kBadAccess);
  const uint32_t at = reg_mr(buf_.data(), 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
  EXPECT_EQ(check(at, va, 8, IBV_ACCESS_REMOTE_ATOMIC), MrCheck::kOk);
  EXPECT_EQ(check(at, va, 8, IBV_ACCESS_REMOTE_WRITE), MrCheck::kBadAccess);
}

TEST_F(MrTest, RemoteWriteOrAtomicWithoutLocalWriteIsEinval) {
  // IBA 10.6.3.1.
  EXPECT_EQ(try_reg(addr(buf_.data()), 64, IBV_ACCESS_REMOTE_WRITE, addr(buf_.data())).err, EINVAL);
  EXPECT_EQ(try_reg(addr(buf_.data()), 64, IBV_ACCESS_REMOTE_ATOMIC, addr(buf_.data())).err, EINVAL);
  EXPECT_EQ(try_reg(addr(buf_.data()), 64, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
                    addr(buf_.data()))
                .err,
            EINVAL);
  EXPECT_EQ(try_reg(addr(buf_.data()), 64, IBV_ACCESS_REMOTE_READ, addr(buf_.data())).err, 0);
  EXPECT_EQ(try_reg(addr(buf_.data()), 64, 0, addr(buf_.data())).err, 0);
}

TEST_F(MrTest, ZeroLengthIsEinval) {
  EXPECT_EQ(try_reg(addr(buf_.data()), 0, IBV_ACCESS_LOCAL_WRITE, addr(buf_.data())).err, EINVAL);
}

TEST_F(MrTest, UnknownAccessBitsAreEinval) {
  EXPECT_EQ(try_reg(addr(buf_.data()), 64, 1u << 14, addr(buf_.data())).err, EINVAL);
}

TEST_F(MrTest, BadOrForeignPdIsEinval) {
  EXPECT_EQ(try_reg(addr(buf_.data()), 64, 0, addr(buf_.data()), 999).err, EINVAL);
  Owner other = make_self_owner(2);
  EXPECT_EQ(try_reg(addr(buf_.data()), 64, 0, addr(buf_.data()), pd_, &other).err, EINVAL);
}

TEST_F(MrTest, UnmappedAddressIsEfault) {
  const long page = sysconf(_SC_PAGESIZE);
  auto* p = static_cast<uint8_t*>(
      mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(p, MAP_FAILED);
  p[0] = 1;
  ASSERT_EQ(munmap(p + page, page), 0);
  // The first page exists, the last byte of the range does not.
  EXPECT_EQ(try_reg(addr(p), 2 * page, IBV_ACCESS_LOCAL_WRITE, addr(p)).err, EFAULT);
  EXPECT_EQ(try_reg(addr(p + page), 16, IBV_ACCESS_LOCAL_WRITE, addr(p + page)).err, EFAULT);
  EXPECT_EQ(try_reg(addr(p), page, IBV_ACCESS_LOCAL_WRITE, addr(p)).err, 0);
  EXPECT_EQ(try_reg(0, 16, 0, 0).err, EFAULT);
  munmap(p, page);
}

// Rereg keeps the keys (mlx5 re-registers in place, and rdma-core's
// test_mr rereg cases keep using the rkey exchanged before) while the new
// access rights apply at once.
TEST_F(MrTest, ReregKeepsTheKeyAndAppliesTheNewAccess) {
  const uint32_t key = reg_mr(buf_.data(), 4096, kAllAccess);
  const uint64_t va = addr(buf_.data());
  abi::ReregMrRequest req{};
  req.handle = key;
  req.flags = IBV_REREG_MR_CHANGE_ACCESS;
  req.access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ;
  uint32_t new_key = 0;
  ASSERT_EQ(dev_.rereg_mr(&owner_, req, &new_key), 0);
  EXPECT_EQ(new_key, key);
  EXPECT_EQ(check(key, va, 8, IBV_ACCESS_REMOTE_READ), MrCheck::kOk);
  EXPECT_EQ(check(key, va, 8, IBV_ACCESS_REMOTE_WRITE), MrCheck::kBadAccess);
  // Remote write without local write is refused and changes nothing.
  req.access = IBV_ACCESS_REMOTE_WRITE;
  EXPECT_EQ(dev_.rereg_mr(&owner_, req, &new_key), EINVAL);
  EXPECT_EQ(check(key, va, 8, IBV_ACCESS_REMOTE_READ), MrCheck::kOk);
  EXPECT_EQ(dev_.dereg_mr(&owner_, key), 0);
  EXPECT_EQ(check(key, va, 8, 0), MrCheck::kBadKey);
}

TEST_F(MrTest, ReregTranslationAndPd) {
  const uint32_t key = reg_mr(buf_.data(), 4096, kAllAccess);
  auto pd2 = dev_.alloc_pd(&owner_);
  ASSERT_EQ(pd2.err, 0);
  abi::ReregMrRequest req{};
  req.handle = key;
  req.flags = IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD;
  req.addr = addr(buf_.data()) + 4096;
  req.length = 2048;
  req.pd = pd2.value;
  uint32_t new_key = 0;
  ASSERT_EQ(dev_.rereg_mr(&owner_, req, &new_key), 0);
  EXPECT_EQ(check(new_key, req.addr, 2048, 0, pd2.value), MrCheck::kOk);
  EXPECT_EQ(check(new_key, req.addr, 2049, 0, pd2.value), MrCheck::kBadBounds);
  EXPECT_EQ(check(new_key, addr(buf_.data()), 8, 0, pd2.value), MrCheck::kBadBounds);
  EXPECT_EQ(check(new_key, req.addr, 8, 0, pd_), MrCheck::kBadPd);
  // The MR now holds a reference on pd2, not on the first PD.
  EXPECT_EQ(dev_.dealloc_pd(&owner_, pd2.value), EBUSY);
  EXPECT_EQ(dev_.dereg_mr(&owner_, new_key), 0);
  EXPECT_EQ(dev_.dealloc_pd(&owner_, pd2.value), 0);
}

TEST_F(MrTest, FailedReregLeavesTheMrAlone) {
  const uint32_t key = reg_mr(buf_.data(), 4096, kAllAccess);
  abi::ReregMrRequest req{};
  req.handle = key;
  uint32_t new_key = 0;
  req.flags = IBV_REREG_MR_CHANGE_ACCESS;
  req.access = IBV_ACCESS_REMOTE_WRITE;  // without local write
  EXPECT_EQ(dev_.rereg_mr(&owner_, req, &new_key), EINVAL);
  req.flags = IBV_REREG_MR_CHANGE_TRANSLATION;
  req.addr = addr(buf_.data());
  req.length = 0;
  EXPECT_EQ(dev_.rereg_mr(&owner_, req, &new_key), EINVAL);
  req.addr = 0;
  req.length = 64;
  EXPECT_EQ(dev_.rereg_mr(&owner_, req, &new_key), EFAULT);
  req.flags = IBV_REREG_MR_CHANGE_PD;
  req.pd = 12345;
  EXPECT_EQ(dev_.rereg_mr(&owner_, req, &new_key), EINVAL);
  EXPECT_EQ(check(key, addr(buf_.data()), 4096, kAllAccess), MrCheck::kOk);
}

TEST_F(MrTest, DeregInvalidatesTheKey) {
  const uint32_t key = reg_mr(buf_.data(), 4096, kAllAccess);
  EXPECT_EQ(dev_.dealloc_pd(&owner_, pd_), EBUSY);  // the MR holds the PD
  Owner other = make_self_owner(2);
  EXPECT_EQ(dev_.dereg_mr(&other, key), EINVAL);
  EXPECT_EQ(dev_.dereg_mr(&owner_, key ^ 1), EINVAL);
  ASSERT_EQ(dev_.dereg_mr(&owner_, key), 0);
  EXPECT_EQ(check(key, addr(buf_.data()), 8, 0), MrCheck::kBadKey);
  EXPECT_EQ(dev_.find_mr(key), nullptr);
  EXPECT_EQ(dev_.dereg_mr(&owner_, key), EINVAL);
  EXPECT_EQ(dev_.dealloc_pd(&owner_, pd_), 0);
}

TEST_F(MrTest, ReusedSlotGetsAFreshKey) {
  const uint32_t k1 = reg_mr(buf_.data(), 4096, kAllAccess);
  ASSERT_EQ(dev_.dereg_mr(&owner_, k1), 0);
  const uint32_t k2 = reg_mr(buf_.data(), 4096, kAllAccess);
  EXPECT_EQ(k1 >> 8, k2 >> 8);  // same table slot
  EXPECT_NE(k1, k2);
  EXPECT_EQ(check(k1, addr(buf_.data()), 8, 0), MrCheck::kBadKey);
  EXPECT_EQ(check(k2, addr(buf_.data()), 8, 0), MrCheck::kOk);
}

TEST_F(MrTest, KeysAreNeverZero) {
  // A zero key is what an uninitialised SGE carries.
  for (int i = 0; i < 300; ++i) {
    const uint32_t k = reg_mr(buf_.data(), 64, 0);
    ASSERT_NE(k, 0u);
    ASSERT_NE(k & 0xff, 0u) << i;
    ASSERT_EQ(dev_.dereg_mr(&owner_, k), 0);
  }
}

}  // namespace
}  // namespace uroce::device
