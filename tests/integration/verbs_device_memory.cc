// Device memory through the verbs (issue 13; mlx5's MEMIC): ibv_alloc_dm
// within max_dm_size (EINVAL past it, ENOMEM once the device's memory is
// used up), ibv_memcpy_to_dm / ibv_memcpy_from_dm with mlx5's bounds
// (EFAULT) and 4-byte alignment (EINVAL), ibv_reg_dm_mr (zero-based only),
// a peer's RDMA WRITE, READ and atomics into the memory, ibv_free_dm EBUSY
// under an MR, and the memory freed with a killed client.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <regex>
#include <string>

#include "verbs_fixture.h"

namespace vt {
namespace {

constexpr uint64_t kDefaultMaxDm = 256 * 1024;  // uroced's default (mlx5's MEMIC)
constexpr unsigned kDmAll = IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                            IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

// "dms N (USED of MAX bytes)" from `uroce status`; -1 if absent.
long long engine_dm_bytes() {
  std::string out;
  run_command("timeout 10 " + uroce_command() + " status", &out);
  std::smatch m;
  if (!std::regex_search(out, m, std::regex("dms [0-9]+ \\(([0-9]+) of [0-9]+ bytes\\)"))) return -1;
  return std::stoll(m[1]);
}

class DeviceMemory : public VerbsTest {
 protected:
  ibv_dm* alloc(size_t length, uint32_t log_align = 0) {
    ibv_alloc_dm_attr attr{length, log_align, 0};
    ibv_dm* dm = ibv_alloc_dm(ctx_, &attr);
    if (dm) defer([dm] { EXPECT_EQ(ibv_free_dm(dm), 0); });
    return dm;
  }
  ibv_mr* reg_dm(ibv_dm* dm, uint64_t offset, size_t length, unsigned access = kDmAll) {
    return ibv_reg_dm_mr(pd_, dm, offset, length, access);
  }
};

TEST_F(DeviceMemory, MaxDmSizeReported) {
  ibv_device_attr_ex ex{};
  ASSERT_EQ(ibv_query_device_ex(ctx_, nullptr, &ex), 0);
  EXPECT_EQ(ex.max_dm_size, kDefaultMaxDm);
  std::string out;
  ASSERT_EQ(run_command("ibv_devinfo -v -d uroce0", &out), 0) << out;
  EXPECT_NE(out.find("maximum available device memory:\t262144Bytes"), std::string::npos) << out;
}

// mlx5_access_dm: past the end EFAULT, unaligned offset or length EINVAL.
TEST_F(DeviceMemory, CopiesInBoundsAndAligned) {
  ibv_dm* dm = alloc(100);
  ASSERT_NE(dm, nullptr) << std::strerror(errno);
  uint8_t in[100], out[100] = {};
  for (int i = 0; i < 100; ++i) in[i] = uint8_t(i * 7 + 1);
  ASSERT_EQ(ibv_memcpy_to_dm(dm, 0, in, 100), 0);
  ASSERT_EQ(ibv_memcpy_from_dm(out, dm, 0, 100), 0);
  EXPECT_EQ(std::memcmp(in, out, 100), 0);
  EXPECT_EQ(ibv_memcpy_to_dm(dm, 96, in, 4), 0);
  EXPECT_EQ(ibv_memcpy_to_dm(dm, 100, in, 4), EFAULT);
  EXPECT_EQ(ibv_memcpy_from_dm(out, dm, 0, 104), EFAULT);
  EXPECT_EQ(ibv_memcpy_from_dm(out, dm, UINT64_MAX - 3, 8), EFAULT);
  EXPECT_EQ(ibv_memcpy_to_dm(dm, 3, in, 4), EINVAL);
  EXPECT_EQ(ibv_memcpy_from_dm(out, dm, 4, 3), EINVAL);
}

// Past max_dm_size EINVAL (mlx5_alloc_dm), an unknown comp_mask EINVAL; the
// device's memory used up ENOMEM, and usable again once freed.
TEST_F(DeviceMemory, AllocationLimits) {
  ibv_alloc_dm_attr attr{kDefaultMaxDm + 1, 0, 0};
  errno = 0;
  EXPECT_EQ(ibv_alloc_dm(ctx_, &attr), nullptr);
  EXPECT_EQ(errno, EINVAL);
  attr = {4096, 0, 1};
  errno = 0;
  EXPECT_EQ(ibv_alloc_dm(ctx_, &attr), nullptr);
  EXPECT_EQ(errno, EINVAL);
  attr = {kDefaultMaxDm / 2, 0, 0};
  ibv_dm* first = ibv_alloc_dm(ctx_, &attr);
  ASSERT_NE(first, nullptr) << std::strerror(errno);
  ibv_dm* second = alloc(kDefaultMaxDm / 2, 6);
  ASSERT_NE(second, nullptr) << std::strerror(errno);
  attr = {4, 0, 0};
  errno = 0;
  EXPECT_EQ(ibv_alloc_dm(ctx_, &attr), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_EQ(engine_dm_bytes(), (long long)kDefaultMaxDm);
  ASSERT_EQ(ibv_free_dm(first), 0);
  EXPECT_NE(alloc(4), nullptr) << std::strerror(errno);
}

// ib_uverbs_reg_dm_mr: zero-based only, inside the allocation; mlx5: no
// MW binding; ibv_free_dm is EBUSY while the MR lives.
TEST_F(DeviceMemory, RegistrationRules) {
  ibv_dm* dm = alloc(100);
  ASSERT_NE(dm, nullptr);
  errno = 0;
  EXPECT_EQ(reg_dm(dm, 0, 100, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(reg_dm(dm, 0, 100, kDmAll | IBV_ACCESS_MW_BIND), nullptr);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(reg_dm(dm, 0, 104), nullptr);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(reg_dm(dm, 96, 8), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ibv_mr* empty = reg_dm(dm, 0, 0, IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(empty, nullptr) << std::strerror(errno);  // pyverbs test_create_dm_mr makes one
  ibv_mr* mr = reg_dm(dm, 96, 4);
  ASSERT_NE(mr, nullptr) << std::strerror(errno);
  EXPECT_EQ(mr->length, 4u);
  EXPECT_EQ(ibv_free_dm(dm), EBUSY);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_EQ(ibv_free_dm(dm), EBUSY);
  EXPECT_EQ(ibv_dereg_mr(empty), 0);
}

// Peer a reaches b's device memory through a zero-based DM MR: RDMA WRITE
// lands where ibv_memcpy_from_dm finds it, RDMA READ returns what
// ibv_memcpy_to_dm put there, and both atomics act on it.
TEST_F(DeviceMemory, PeerWritesReadsAndAtomics) {
  ibv_dm* dm = alloc(8192);
  ASSERT_NE(dm, nullptr);
  constexpr uint64_t kOffset = 1024;  // the MR starts inside the memory
  ibv_mr* dm_mr = reg_dm(dm, kOffset, 4096);
  ASSERT_NE(dm_mr, nullptr) << std::strerror(errno);
  ibv_mr* local = reg_buffer(4096, kRw, 0x77);
  ASSERT_NE(local, nullptr);
  Pair p = make_pair();
  ASSERT_TRUE(p.a.qp && p.b.qp);
  uint8_t* mem = static_cast<uint8_t*>(local->addr);

  // WRITE 256 bytes at MR offset 128 (zero-based: remote_addr is the offset).
  for (int i = 0; i < 256; ++i) mem[i] = uint8_t(i ^ 0x5a);
  ibv_sge s = sge_of(local, 0, 256);
  ASSERT_EQ(post_send(p.a.qp, 1, IBV_WR_RDMA_WRITE, &s, 1, IBV_SEND_SIGNALED, 128, dm_mr->rkey), 0);
  ibv_wc wc{};
  VT_POLL_ONE(p.a.cq, &wc);
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  uint8_t got[256];
  ASSERT_EQ(ibv_memcpy_from_dm(got, dm, kOffset + 128, 256), 0);
  EXPECT_EQ(std::memcmp(got, mem, 256), 0);

  // READ back what the host copied in.
  uint8_t pattern[512];
  for (int i = 0; i < 512; ++i) pattern[i] = uint8_t(255 - i);
  ASSERT_EQ(ibv_memcpy_to_dm(dm, kOffset + 2048, pattern, 512), 0);
  s = sge_of(local, 1024, 512);
  ASSERT_EQ(post_send(p.a.qp, 2, IBV_WR_RDMA_READ, &s, 1, IBV_SEND_SIGNALED, 2048, dm_mr->rkey), 0);
  VT_POLL_ONE(p.a.cq, &wc);
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(std::memcmp(mem + 1024, pattern, 512), 0);

  // FETCH_AND_ADD then CMP_AND_SWP on the 8 bytes at MR offset 3072.
  const uint64_t start = 1000;
  ASSERT_EQ(ibv_memcpy_to_dm(dm, kOffset + 3072, &start, 8), 0);
  s = sge_of(local, 3000, 8);
  ASSERT_EQ(post_atomic(p.a.qp, 3, IBV_WR_ATOMIC_FETCH_AND_ADD, &s, 3072, dm_mr->rkey, 24), 0);
  VT_POLL_ONE(p.a.cq, &wc);
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  uint64_t orig = 0, now = 0;
  std::memcpy(&orig, mem + 3000, 8);
  EXPECT_EQ(orig, start);
  ASSERT_EQ(post_atomic(p.a.qp, 4, IBV_WR_ATOMIC_CMP_AND_SWP, &s, 3072, dm_mr->rkey, 1024, 7), 0);
  VT_POLL_ONE(p.a.cq, &wc);
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  ASSERT_EQ(ibv_memcpy_from_dm(&now, dm, kOffset + 3072, 8), 0);
  EXPECT_EQ(now, 7u);

  // Past the MR's end: a remote access error, as for any MR.
  s = sge_of(local, 0, 64);
  ASSERT_EQ(post_send(p.a.qp, 5, IBV_WR_RDMA_WRITE, &s, 1, IBV_SEND_SIGNALED, 4096 - 32, dm_mr->rkey), 0);
  VT_POLL_ONE(p.a.cq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR) << describe(wc);
  EXPECT_EQ(ibv_dereg_mr(dm_mr), 0);  // before the deferred ibv_free_dm
}

// A client killed while it holds device memory and an MR on it: the engine
// frees both (session teardown) and the memory is the device's again.
TEST_F(DeviceMemory, FreedWithAKilledClient) {
  const long long before = engine_dm_bytes();
  ASSERT_GE(before, 0);
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // A forked child opens a device of its own (the parent's is not its).
    close(ready[0]);
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    ibv_context* ctx = nullptr;
    for (int i = 0; list && i < n && !ctx; ++i)
      if (std::strcmp(ibv_get_device_name(list[i]), kDeviceName) == 0) ctx = ibv_open_device(list[i]);
    ibv_pd* pd = ctx ? ibv_alloc_pd(ctx) : nullptr;
    ibv_alloc_dm_attr attr{64 * 1024, 0, 0};
    ibv_dm* dm = pd ? ibv_alloc_dm(ctx, &attr) : nullptr;
    ibv_mr* mr = dm ? ibv_reg_dm_mr(pd, dm, 0, 4096, kDmAll) : nullptr;
    const char ok = mr ? 'y' : 'n';
    [[maybe_unused]] ssize_t w = write(ready[1], &ok, 1);
    pause();
    _exit(0);
  }
  close(ready[1]);
  char ok = 0;
  ASSERT_EQ(read(ready[0], &ok, 1), 1);
  close(ready[0]);
  EXPECT_EQ(ok, 'y');
  EXPECT_EQ(engine_dm_bytes(), before + 64 * 1024);
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  long long after = -1;
  for (auto until = deadline_after(kWaitSeconds); Clock::now() < until;) {
    if ((after = engine_dm_bytes()) == before) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(after, before);
}

}  // namespace
}  // namespace vt
