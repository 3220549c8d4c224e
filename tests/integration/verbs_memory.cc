// Verbs semantics, registered memory on shared pages
// (verbs_provider/shared_pages.h): which memory ibv_reg_mr moves onto a
// memfd, that data moves correctly across shared pages and the partial pages
// around them, that MRs on the same pages share them, and that the last
// ibv_dereg_mr gives them back as ordinary anonymous memory.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "tests/integration/verbs_fixture.h"

namespace vt {
namespace {

const size_t kPage = size_t(sysconf(_SC_PAGESIZE));

// The /proc/self/maps line that covers addr ("" if none).
std::string mapping_of(const void* addr) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  const auto a = uintptr_t(addr);
  while (std::getline(maps, line)) {
    uintptr_t lo, hi;
    if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) == 2 && lo <= a && a < hi) return line;
  }
  return "";
}

bool on_shared_pages(const void* addr) {
  return mapping_of(addr).find("/memfd:uroce-mr") != std::string::npos;
}

class SharedMr : public VerbsTest {
 protected:
  // RDMA WRITE of `len` bytes from src+soff to dst+doff, then an RDMA READ
  // of them back into the cleared source, each checked byte for byte.
  void write_then_read(ibv_qp* qp, ibv_cq* cq, ibv_mr* src, size_t soff, ibv_mr* dst, size_t doff,
                       size_t len) {
    auto* s = static_cast<uint8_t*>(src->addr);
    auto* d = static_cast<uint8_t*>(dst->addr);
    for (size_t i = 0; i < len; ++i) s[soff + i] = uint8_t(i * 13 + 5);
    ibv_sge sge{uint64_t(uintptr_t(s + soff)), uint32_t(len), src->lkey};
    ASSERT_EQ(post_send(qp, 1, IBV_WR_RDMA_WRITE, &sge, 1, IBV_SEND_SIGNALED,
                        uint64_t(uintptr_t(d + doff)), dst->rkey),
              0);
    ibv_wc wc;
    VT_POLL_ONE(cq, &wc);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
    ASSERT_EQ(std::memcmp(d + doff, s + soff, len), 0) << "WRITE landed wrong";
    std::memset(s + soff, 0, len);
    ASSERT_EQ(post_send(qp, 2, IBV_WR_RDMA_READ, &sge, 1, IBV_SEND_SIGNALED,
                        uint64_t(uintptr_t(d + doff)), dst->rkey),
              0);
    VT_POLL_ONE(cq, &wc);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
    ASSERT_EQ(std::memcmp(d + doff, s + soff, len), 0) << "READ returned wrong bytes";
  }
};

TEST_F(SharedMr, HeapBufferMovesOntoSharedPagesAndDataCrossesTheirEdges) {
  Pair p = make_pair();
  ASSERT_FALSE(HasFailure());
  const size_t len = 4 * kPage;
  // Unaligned on purpose: a partial page at each end stays on process_vm_*.
  // The heap may hand out a page-aligned buffer (then there would be no
  // partial first page, and the span across its edge below would start
  // before the MR): 64 bytes on from such a start.
  ibv_mr* a = reg_buffer(len, kRw, 'a');
  uint8_t* bb = buffer(len + 64, 'b');
  if ((uintptr_t(bb) & (kPage - 1)) == 0) bb += 64;
  ibv_mr* b = reg(bb, len, kRw | IBV_ACCESS_REMOTE_ATOMIC);
  ASSERT_TRUE(a && b);
  const uint8_t* first_whole = reinterpret_cast<uint8_t*>((uintptr_t(bb) + kPage - 1) & ~(kPage - 1));
  EXPECT_TRUE(on_shared_pages(first_whole)) << mapping_of(first_whole);
  EXPECT_TRUE(std::all_of(bb, bb + len, [](uint8_t c) { return c == 'b'; }))
      << "moving the pages changed the bytes";
  // The whole buffer, then a span straddling the first page edge.
  write_then_read(p.a.qp, p.a.cq, a, 0, b, 0, len);
  const size_t edge = size_t(first_whole - bb);
  ASSERT_GE(edge, 64u) << "the MR must start inside a page";
  write_then_read(p.a.qp, p.a.cq, a, 100, b, edge - 50, 100);
  // Atomics on a word inside the shared pages.
  auto* word = reinterpret_cast<uint64_t*>(bb + edge + 64);
  *word = 5;
  ibv_sge sge{uint64_t(uintptr_t(a->addr)), 8, a->lkey};
  ASSERT_EQ(post_atomic(p.a.qp, 0, IBV_WR_ATOMIC_FETCH_AND_ADD, &sge, uint64_t(uintptr_t(word)), b->rkey, 37),
            0);
  ibv_wc wc;
  VT_POLL_ONE(p.a.cq, &wc);
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(*word, 42u);
  EXPECT_EQ(*static_cast<uint64_t*>(a->addr), 5u);
}

TEST_F(SharedMr, MrsOnTheSamePagesShareThemAndOutliveEachOther) {
  Pair p = make_pair();
  ASSERT_FALSE(HasFailure());
  uint8_t* buf = buffer(6 * kPage, 'x');
  ibv_mr* whole = reg(buf, 6 * kPage, kRw);
  ASSERT_NE(whole, nullptr);
  const uint8_t* inner = reinterpret_cast<uint8_t*>((uintptr_t(buf) + kPage - 1) & ~(kPage - 1));
  const std::string before = mapping_of(inner);
  ibv_mr* part = ibv_reg_mr(pd_, const_cast<uint8_t*>(inner) + kPage, 2 * kPage, kRw);
  ASSERT_NE(part, nullptr);
  EXPECT_EQ(mapping_of(inner), before) << "a second MR inside the first moved its pages again";
  // A range that overlaps the first MR's pages and goes beyond them cannot
  // move (that would detach the first): it still works, through process_vm_*.
  uint8_t* other = buffer(2 * kPage, 'y');
  ibv_mr* src = reg(other, 2 * kPage, kRw);
  ASSERT_NE(src, nullptr);
  write_then_read(p.a.qp, p.a.cq, src, 0, part, 0, 2 * kPage);
  ASSERT_EQ(ibv_dereg_mr(whole), 0);
  forget(whole);
  write_then_read(p.a.qp, p.a.cq, src, 10, part, 20, kPage);
  EXPECT_TRUE(on_shared_pages(inner + kPage)) << "the pages went back while an MR still used them";
  ASSERT_EQ(ibv_dereg_mr(part), 0);
  // After the last MR the pages are private anonymous memory again, bytes kept.
  EXPECT_FALSE(on_shared_pages(inner)) << mapping_of(inner);
  EXPECT_EQ(inner[kPage + 20], 5) << "bytes changed after dereg";
}

TEST_F(SharedMr, FileBackedAndStackMemoryStayWhereTheyAre) {
  Pair p = make_pair();
  ASSERT_FALSE(HasFailure());
  char path[] = "/tmp/uroce-mr-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  unlink(path);
  ASSERT_EQ(ftruncate(fd, off_t(4 * kPage)), 0);
  void* file = mmap(nullptr, 4 * kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(file, MAP_FAILED);
  defer([=] {
    munmap(file, 4 * kPage);
    close(fd);
  });
  ibv_mr* fmr = reg(file, 4 * kPage, kRw);
  ASSERT_NE(fmr, nullptr);
  EXPECT_FALSE(on_shared_pages(file)) << mapping_of(file);
  alignas(4096) uint8_t stack_buf[3 * 4096];
  ibv_mr* smr = ibv_reg_mr(pd_, stack_buf, sizeof(stack_buf), kRw);
  ASSERT_NE(smr, nullptr);
  EXPECT_FALSE(on_shared_pages(stack_buf)) << mapping_of(stack_buf);
  write_then_read(p.a.qp, p.a.cq, smr, 0, fmr, 7, sizeof(stack_buf));
  EXPECT_EQ(ibv_dereg_mr(smr), 0);
}

// An MR larger than the chunk the provider moves at a time (64 MiB): every
// page moves, data lands at the far end, and the last dereg gives it back.
TEST_F(SharedMr, LargeMrMovesInChunks) {
  Pair p = make_pair();
  ASSERT_FALSE(HasFailure());
  const size_t len = size_t(80) << 20;
  void* raw = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(raw, MAP_FAILED);
  defer([=] { munmap(raw, len); });
  auto* big = static_cast<uint8_t*>(raw);
  big[0] = 'F';
  big[len - 1] = 'L';  // the rest stays untouched: nothing to copy there
  ibv_mr* mr = reg(big, len, kRw);
  ASSERT_NE(mr, nullptr);
  for (size_t off : {size_t(0), size_t(64) << 20, len - kPage})
    EXPECT_TRUE(on_shared_pages(big + off)) << "offset " << off << ": " << mapping_of(big + off);
  EXPECT_EQ(big[0], 'F');
  EXPECT_EQ(big[len - 1], 'L');
  ibv_mr* src = reg_buffer(2 * kPage, kRw, 's');
  ASSERT_NE(src, nullptr);
  write_then_read(p.a.qp, p.a.cq, src, 0, mr, (size_t(70) << 20) + 123, kPage);
  ASSERT_EQ(ibv_dereg_mr(mr), 0);
  forget(mr);
  EXPECT_FALSE(on_shared_pages(big + (size_t(70) << 20)));
  EXPECT_EQ(big[(size_t(70) << 20) + 123], 5) << "bytes changed after dereg";
  EXPECT_EQ(big[len - 1], 'L');
}

// After the last ibv_dereg_mr the pages behave as the anonymous memory they
// were: MADV_DONTNEED zero-fills them (allocators such as jemalloc count on
// it) and a child forked later shares nothing with the parent.
TEST_F(SharedMr, DeregGivesThePagesBackAsAnonymousMemory) {
  void* raw = mmap(nullptr, 4 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(raw, MAP_FAILED);
  defer([=] { munmap(raw, 4 * kPage); });
  auto* buf = static_cast<uint8_t*>(raw);
  std::memset(buf, 'P', 4 * kPage);
  ibv_mr* mr = ibv_reg_mr(pd_, buf, 4 * kPage, kRw);
  ASSERT_NE(mr, nullptr);
  ASSERT_TRUE(on_shared_pages(buf + kPage));
  buf[kPage] = 'R';  // written while registered: must survive the move back
  ASSERT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_FALSE(on_shared_pages(buf + kPage)) << mapping_of(buf + kPage);
  EXPECT_EQ(buf[kPage], 'R');
  EXPECT_TRUE(std::all_of(buf + kPage + 1, buf + 4 * kPage, [](uint8_t c) { return c == 'P'; }));
  ASSERT_EQ(madvise(buf + 2 * kPage, kPage, MADV_DONTNEED), 0);
  EXPECT_TRUE(std::all_of(buf + 2 * kPage, buf + 3 * kPage, [](uint8_t c) { return c == 0; }))
      << "MADV_DONTNEED did not zero-fill the page";
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const bool same = buf[kPage] == 'R' && buf[0] == 'P';
    std::memset(buf, 'C', 4 * kPage);
    _exit(same ? 0 : 3);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "child died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child's copy differed from the parent's pages";
  EXPECT_EQ(buf[0], 'P') << "the child's writes reached the parent";
  EXPECT_EQ(buf[kPage], 'R') << "the child's writes reached the parent";
}

// A program may free a buffer before it deregisters its MR (UCX's
// registration cache deregisters at close what it freed long before): the
// dereg gives the pages back without reading the freed buffer at its address
// (under tests/sanitize.sh that read was ASan's heap-use-after-free).
TEST_F(SharedMr, DeregAfterTheBufferIsFreed) {
  auto* buf = static_cast<uint8_t*>(std::malloc(8 * kPage));
  ASSERT_NE(buf, nullptr);
  std::memset(buf, 'F', 8 * kPage);
  ibv_mr* mr = ibv_reg_mr(pd_, buf, 8 * kPage, kRw);
  ASSERT_NE(mr, nullptr);
  const auto* inner = reinterpret_cast<const void*>(uintptr_t(buf + 2 * kPage));  // kept past free
  EXPECT_TRUE(on_shared_pages(inner)) << mapping_of(inner);
  std::free(buf);
  ASSERT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_FALSE(on_shared_pages(inner)) << mapping_of(inner);
}

// Doorbell order: sends posted before their MRs are deregistered go out and
// complete, every one, as on mlx5, where the doorbell reaches the HCA before
// the deregistration does (a rendezvous header's short-lived MR, say). The
// engine takes posted work before the control verb (emulator/methods_pd_mr.cc).
class DoorbellOrder : public VerbsTest {};

TEST_F(DoorbellOrder, SendsPostedBeforeTheirMrsAreDeregisteredGoOut) {
  constexpr int kSends = 32;
  constexpr uint32_t kLen = 64 * 1024;
  QpCaps caps;
  caps.max_send_wr = kSends;
  caps.max_recv_wr = kSends;
  Pair p = make_pair(IBV_QPT_RC, {}, caps);
  ASSERT_FALSE(HasFailure());
  ibv_mr* dst = reg_buffer(size_t(kSends) * kLen, kRw, 0);
  ASSERT_NE(dst, nullptr);
  std::vector<ibv_mr*> src;
  for (int i = 0; i < kSends; ++i) {
    src.push_back(reg_buffer(kLen, IBV_ACCESS_LOCAL_WRITE, uint8_t(i + 1)));
    ASSERT_NE(src.back(), nullptr);
  }
  for (int i = 0; i < kSends; ++i) {
    ibv_sge s = sge_of(src[i], 0, kLen);
    ASSERT_EQ(post_send(p.a.qp, i, IBV_WR_SEND, &s, 1), 0);
  }
  // No receive yet: the first send waits on RNR NAKs (rnr_retry 7: for
  // ever), so the others are still queued behind it at the deregistrations.
  for (ibv_mr* mr : src) {
    forget(mr);
    ASSERT_EQ(ibv_dereg_mr(mr), 0);
  }
  for (int i = 0; i < kSends; ++i) ASSERT_EQ(post_recv_mr(p.b.qp, 100 + i, dst, size_t(i) * kLen, kLen), 0);
  auto sent = by_wr_id(poll_n(p.a.cq, kSends));
  ASSERT_EQ(sent.size(), size_t(kSends));
  for (auto& [id, wc] : sent) EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << "send " << id << ": " << describe(wc);
  auto got = by_wr_id(poll_n(p.b.cq, kSends));
  ASSERT_EQ(got.size(), size_t(kSends));
  const auto* bytes = static_cast<const uint8_t*>(dst->addr);
  for (int i = 0; i < kSends; ++i) {
    EXPECT_EQ(got[100 + i].status, IBV_WC_SUCCESS) << describe(got[100 + i]);
    EXPECT_EQ(got[100 + i].byte_len, kLen);
    const uint8_t* m = bytes + size_t(i) * kLen;
    EXPECT_TRUE(std::all_of(m, m + kLen, [&](uint8_t c) { return c == uint8_t(i + 1); })) << "message " << i;
  }
}

}  // namespace
}  // namespace vt
