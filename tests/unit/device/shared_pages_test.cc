// Tests for registered memory on shared pages (device/memory.h): what the
// engine accepts as a client's memfd, how a transfer splits between shared
// pages and process_vm_*, pinning semantics, atomics, and reg_mr with an fd.
// The "client" is this process: its pages are moved onto a memfd the way
// verbs_provider/shared_pages.cc moves them.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "device/memory.h"
#include "device/test_env.h"

namespace uroce::device {
namespace {

const size_t kPage = size_t(sysconf(_SC_PAGESIZE));

int make_memfd(size_t len, unsigned seals) {
  int fd = memfd_create("uroce-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(ftruncate(fd, off_t(len)), 0);
  if (seals) {
    EXPECT_EQ(fcntl(fd, F_ADD_SEALS, seals), 0);
  }
  return fd;
}

// Three anonymous pages whose middle one is moved onto a sealed memfd.
struct ClientPages {
  ClientPages() {
    base = static_cast<uint8_t*>(
        mmap(nullptr, 3 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    EXPECT_NE(base, MAP_FAILED);
    std::memset(base, 'a', 3 * kPage);
    fd = make_memfd(kPage, F_SEAL_SHRINK | F_SEAL_GROW);
    EXPECT_EQ(pwrite(fd, base + kPage, kPage, 0), ssize_t(kPage));
    EXPECT_NE(mmap(base + kPage, kPage, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0), MAP_FAILED);
  }
  ~ClientPages() {
    munmap(base, 3 * kPage);
    close(fd);
  }
  uint64_t addr(size_t off) const { return uint64_t(uintptr_t(base + off)); }
  uint8_t* base;
  int fd;
};

TEST(SharedPages, RefusesWhatCouldFaultTheEngine) {
  int err = 0;
  const int unsealed = make_memfd(kPage, 0);
  EXPECT_EQ(SharedPages::map(unsealed, 0x10000, kPage, &err, nullptr), nullptr);
  EXPECT_EQ(err, EINVAL) << "without F_SEAL_SHRINK the client could truncate it";
  const int small = make_memfd(kPage, F_SEAL_SHRINK);
  EXPECT_EQ(SharedPages::map(small, 0x10000, 2 * kPage, &err, nullptr), nullptr) << "shorter than the range";
  EXPECT_EQ(SharedPages::map(small, 0x10001, kPage, &err, nullptr), nullptr) << "unaligned start";
  EXPECT_EQ(SharedPages::map(small, 0x10000, 100, &err, nullptr), nullptr) << "not whole pages";
  EXPECT_EQ(SharedPages::map(-1, 0x10000, kPage, &err, nullptr), nullptr);
  EXPECT_EQ(SharedPages::map(small, ~uint64_t(0) - kPage + 1, 2 * kPage, &err, nullptr), nullptr) << "wraps";
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  EXPECT_EQ(SharedPages::map(pipefd[0], 0x10000, kPage, &err, nullptr), nullptr) << "not a memfd";
  auto ok = SharedPages::map(small, 0x10000, kPage, &err, nullptr);
  ASSERT_NE(ok, nullptr);
  EXPECT_EQ(err, 0);
  EXPECT_TRUE(ok->contains(0x10000));
  EXPECT_TRUE(ok->contains(0x10000 + kPage - 1));
  EXPECT_FALSE(ok->contains(0x10000 + kPage));
  for (int fd : {unsealed, small, pipefd[0], pipefd[1]}) close(fd);
}

// Past a client's budget the engine maps nothing and says no error: the MR
// is then registered on process_vm_* alone.
TEST(SharedPages, BudgetLimitsWhatAClientMaps) {
  ClientPages c;
  int err = -1;
  SharedBudget budget{kPage};
  auto first = SharedPages::map(c.fd, c.addr(kPage), kPage, &err, &budget);
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(budget.used, kPage);
  auto second = SharedPages::map(c.fd, c.addr(kPage), kPage, &err, &budget);
  EXPECT_EQ(second, nullptr);
  EXPECT_EQ(err, 0) << "over budget is not an error";
  first.reset();
  EXPECT_EQ(budget.used, 0u);
  EXPECT_NE(SharedPages::map(c.fd, c.addr(kPage), kPage, &err, &budget), nullptr);
  // No MR is larger than kMaxMrSize: a sparse memfd claiming more is refused.
  EXPECT_EQ(SharedPages::map(c.fd, 0x10000, kMaxMrSize * 2, &err, nullptr), nullptr);
  EXPECT_EQ(err, EINVAL);
}

TEST(SharedPages, TransfersSplitBetweenSharedPagesAndProcessVm) {
  ClientPages c;
  int err;
  auto pages = SharedPages::map(c.fd, c.addr(kPage), kPage, &err, nullptr);
  ASSERT_NE(pages, nullptr);
  ProcessMemory mem(getpid());
  // A span from the middle of page 0 to the middle of page 2, as two SGEs.
  std::vector<uint8_t> src(2 * kPage);
  for (size_t i = 0; i < src.size(); ++i) src[i] = uint8_t(i * 7 + 1);
  const RemoteSpan spans[2] = {{c.addr(kPage / 2), kPage, pages.get()},
                               {c.addr(kPage / 2 + kPage), kPage, pages.get()}};
  ASSERT_TRUE(mem.write(spans, 2, src.data()));
  EXPECT_EQ(std::memcmp(c.base + kPage / 2, src.data(), src.size()), 0);
  EXPECT_EQ(c.base[kPage / 2 - 1], 'a');
  EXPECT_EQ(c.base[kPage / 2 + 2 * kPage], 'a');
  std::vector<uint8_t> back(src.size());
  ASSERT_TRUE(mem.read(spans, 2, back.data()));
  EXPECT_EQ(back, src);
}

// Like a NIC's pinned pages: once the client unmaps them, the device still
// reaches the pages it registered, not whatever the address maps next.
TEST(SharedPages, MappingPinsThePagesLikeARegistration) {
  ClientPages c;
  int err;
  auto pages = SharedPages::map(c.fd, c.addr(kPage), kPage, &err, nullptr);
  ASSERT_NE(pages, nullptr);
  ASSERT_NE(mmap(c.base + kPage, kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0),
            MAP_FAILED);
  ProcessMemory mem(getpid());
  const char msg[] = "pinned";
  ASSERT_TRUE(mem.write({c.addr(kPage), sizeof(msg), pages.get()}, msg));
  char in_memfd[sizeof(msg)] = {};
  ASSERT_EQ(pread(c.fd, in_memfd, sizeof(msg), 0), ssize_t(sizeof(msg)));
  EXPECT_STREQ(in_memfd, msg);
  EXPECT_EQ(c.base[kPage], 0) << "the new mapping at that address was written";
}

TEST(SharedPages, AtomicsOnSharedAndUnsharedWords) {
  ClientPages c;
  int err;
  auto pages = SharedPages::map(c.fd, c.addr(kPage), kPage, &err, nullptr);
  ASSERT_NE(pages, nullptr);
  ProcessMemory mem(getpid());
  for (size_t off : {size_t(64), kPage + 64}) {  // page 0 through process_vm, page 1 shared
    auto* word = reinterpret_cast<uint64_t*>(c.base + off);
    *word = 40;
    const RemoteSpan s{c.addr(off), 8, pages.get()};
    uint64_t orig = 0;
    ASSERT_TRUE(mem.fetch_add(s, 2, &orig));
    EXPECT_EQ(orig, 40u);
    EXPECT_EQ(*word, 42u);
    ASSERT_TRUE(mem.compare_swap(s, 41, 7, &orig));  // no match: unchanged
    EXPECT_EQ(orig, 42u);
    EXPECT_EQ(*word, 42u);
    ASSERT_TRUE(mem.compare_swap(s, 42, 7, &orig));
    EXPECT_EQ(orig, 42u);
    EXPECT_EQ(*word, 7u);
  }
}

class SharedMrTest : public DeviceFixture {};

TEST_F(SharedMrTest, RegMrMapsASealedMemfdAndRefusesOthers) {
  ClientPages c;
  abi::RegMrRequest req{};
  req.pd = pd_;
  req.addr = req.iova = c.addr(100);
  req.length = 3 * kPage - 200;
  req.access = kAllAccess;
  req.shared = {c.addr(kPage), kPage};
  const int unsealed = make_memfd(kPage, 0);
  EXPECT_EQ(dev_.reg_mr(&owner_, req, unsealed).err, EINVAL);
  EXPECT_EQ(dev_.reg_mr(&owner_, req, -1).err, EINVAL) << "a shared range needs its fd";
  abi::RegMrRequest far = req;
  far.shared = {c.addr(0) + 64 * kPage, kPage};
  EXPECT_EQ(dev_.reg_mr(&owner_, far, c.fd).err, EINVAL) << "shared pages outside the MR";
  auto r = dev_.reg_mr(&owner_, req, c.fd);
  ASSERT_EQ(r.err, 0);
  const Mr* mr = dev_.find_mr(r.value);
  ASSERT_NE(mr, nullptr);
  ASSERT_NE(mr->pages, nullptr);
  EXPECT_EQ(mr->pages->start(), c.addr(kPage));
  // Rereg to a translation without shared pages drops them.
  abi::ReregMrRequest rr{};
  rr.handle = r.value;
  rr.flags = IBV_REREG_MR_CHANGE_TRANSLATION;
  rr.addr = c.addr(8);
  rr.length = 64;
  uint32_t key;
  ASSERT_EQ(dev_.rereg_mr(&owner_, rr, &key, -1), 0);
  EXPECT_EQ(dev_.find_mr(key)->pages, nullptr);
  close(unsealed);
}

}  // namespace
}  // namespace uroce::device
