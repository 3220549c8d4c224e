// On-demand paging (issue 13): IBV_ACCESS_ON_DEMAND MRs over memory not yet
// touched, unmapped or remapped after registration, implicit ODP (the whole
// address space), odp_caps, and ibv_advise_mr with mlx5's errors. An ODP MR
// follows the process's mapping as it is when the device accesses it; a page
// not mapped then fails the work request as on mlx5: IBV_WC_REM_ACCESS_ERR at
// the requester for a remote access, IBV_WC_LOC_PROT_ERR for a local SGE
// (and for a receive, whose sender sees IBV_WC_REM_OP_ERR).
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>

#include "verbs_fixture.h"

namespace vt {
namespace {

const size_t kPage = size_t(sysconf(_SC_PAGESIZE));
constexpr int kOdpRw = kRw | IBV_ACCESS_ON_DEMAND | IBV_ACCESS_REMOTE_ATOMIC;

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

bool resident(const void* page) {
  unsigned char v = 0;
  return mincore(const_cast<void*>(page), kPage, &v) == 0 && (v & 1);
}

class Odp : public VerbsTest {
 protected:
  // Fresh anonymous pages nobody has touched; unmapped at the end. The
  // tests unmap some of them and map them again at the same address, so they
  // sit in an address range of their own, far below where mmap() places the
  // process's other mappings (top-down from below the stack): a hole left
  // among those is where the next one lands (an allocator's, or ASan's stack
  // depot's: CI's sanitizer run lost a depot chunk to these tests' munmap and
  // MAP_FIXED there, and crashed a test later). 0x5000'0000'0000 is above
  // ASan's shadow and below its allocator's space.
  uint8_t* fresh_pages(size_t pages) {
    static uintptr_t next = uintptr_t(0x500000000000);
    const size_t len = pages * kPage;
    void* p = MAP_FAILED;
    for (int tries = 0; tries < 64 && p == MAP_FAILED; ++tries) {
      p = mmap(reinterpret_cast<void*>(next), len, PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
      next += len + 16 * kPage;  // a gap: one test's pages never touch another's
    }
    EXPECT_NE(p, MAP_FAILED) << std::strerror(errno);
    if (p == MAP_FAILED) return nullptr;
    defer([=] { munmap(p, len); });
    return static_cast<uint8_t*>(p);
  }
  ibv_mr* reg_odp(void* addr, size_t len, int access = kOdpRw) {
    ibv_mr* mr = reg(addr, len, access);
    EXPECT_NE(mr, nullptr) << "ibv_reg_mr(ON_DEMAND): " << std::strerror(errno);
    return mr;
  }
  // One signaled RDMA operation from a's QP; returns its completion status.
  ibv_wc_status rdma(const Pair& p, ibv_wr_opcode op, ibv_sge sge, uint64_t remote, uint32_t rkey) {
    if (post_send(p.a.qp, 1, op, &sge, 1, IBV_SEND_SIGNALED, remote, rkey) != 0) return IBV_WC_GENERAL_ERR;
    ibv_wc wc{};
    if (!poll_one(p.a.cq, &wc)) return IBV_WC_GENERAL_ERR;
    return wc.status;
  }
};

TEST_F(Odp, DeviceAdvertisesOdpForEveryTransportOperation) {
  ibv_device_attr_ex attr{};
  ASSERT_EQ(ibv_query_device_ex(ctx_, nullptr, &attr), 0);
  const auto& c = attr.odp_caps;
  EXPECT_EQ(c.general_caps, uint64_t(IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT));
  const uint32_t all = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
                       IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV;
  EXPECT_EQ(c.per_transport_caps.rc_odp_caps, all);
  EXPECT_EQ(c.per_transport_caps.uc_odp_caps,
            uint32_t(IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
                     IBV_ODP_SUPPORT_SRQ_RECV));
  EXPECT_EQ(c.per_transport_caps.ud_odp_caps,
            uint32_t(IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_SRQ_RECV));
}

// Untouched pages: registration neither faults them in nor moves them onto
// shared pages; WRITE, READ, SEND and RECV through the MR all work.
TEST_F(Odp, UntouchedMemoryServesWriteReadSendAndRecv) {
  Pair p = make_pair();
  ASSERT_NE(p.a.qp, nullptr);
  uint8_t* mem = fresh_pages(4);
  ASSERT_NE(mem, nullptr);
  ibv_mr* odp = reg_odp(mem, 4 * kPage);
  ASSERT_NE(odp, nullptr);
  EXPECT_EQ(mapping_of(mem).find("memfd:"), std::string::npos) << mapping_of(mem);
  for (size_t i = 0; i < 4; ++i) EXPECT_FALSE(resident(mem + i * kPage)) << "page " << i << " faulted in";
  ibv_mr* local = reg_buffer(4 * kPage, kRw, 0);
  auto* l = static_cast<uint8_t*>(local->addr);

  for (size_t i = 0; i < 100; ++i) l[i] = uint8_t(i + 1);
  ASSERT_EQ(rdma(p, IBV_WR_RDMA_WRITE, sge_of(local, 0, 100), uint64_t(uintptr_t(mem + kPage + 10)), odp->rkey),
            IBV_WC_SUCCESS);
  for (size_t i = 0; i < 100; ++i) ASSERT_EQ(mem[kPage + 10 + i], uint8_t(i + 1)) << i;

  std::memset(l, 0xee, 64);
  ASSERT_EQ(rdma(p, IBV_WR_RDMA_READ, sge_of(local, 0, 64), uint64_t(uintptr_t(mem + 2 * kPage)), odp->rkey),
            IBV_WC_SUCCESS);
  for (size_t i = 0; i < 64; ++i) ASSERT_EQ(l[i], 0) << "an untouched page reads as zeros";

  // SEND from untouched ODP memory on b's side into an ODP receive on a's.
  ASSERT_EQ(post_recv_mr(p.a.qp, 7, odp, 3 * kPage, 256), 0);
  ibv_sge from{uint64_t(uintptr_t(mem)), 256, odp->lkey};
  mem[0] = 'x';  // the first byte only
  ASSERT_EQ(post_send(p.b.qp, 8, IBV_WR_SEND, &from, 1), 0);
  ibv_wc wc{};
  VT_POLL_ONE(p.b.cq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  VT_POLL_ONE(p.a.cq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(wc.byte_len, 256u);
  EXPECT_EQ(mem[3 * kPage], 'x');
}

// Registered over an unmapped range (a normal MR is EFAULT there), mapped
// afterwards, then replaced by another mapping at the same address: the
// device sees each mapping as it is at the access.
TEST_F(Odp, FollowsMappingsMadeAndReplacedAfterRegistration) {
  uint8_t* mem = fresh_pages(2);
  ASSERT_NE(mem, nullptr);
  ASSERT_EQ(munmap(mem, 2 * kPage), 0);
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd_, mem, 2 * kPage, kRw), nullptr) << "a pinned MR needs its pages";
  EXPECT_EQ(errno, EFAULT);
  ibv_mr* odp = reg_odp(mem, 2 * kPage);
  ASSERT_NE(odp, nullptr);

  Pair p = make_pair();
  ASSERT_NE(p.a.qp, nullptr);
  ibv_mr* local = reg_buffer(kPage, kRw, 0);
  auto* l = static_cast<uint8_t*>(local->addr);

  // Mapped after registration.
  void* m = mmap(mem, 2 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  ASSERT_EQ(m, static_cast<void*>(mem));
  std::memset(mem, 'A', 2 * kPage);
  ASSERT_EQ(rdma(p, IBV_WR_RDMA_READ, sge_of(local, 0, 32), uint64_t(uintptr_t(mem + kPage)), odp->rkey),
            IBV_WC_SUCCESS);
  EXPECT_EQ(l[0], 'A');
  EXPECT_EQ(l[31], 'A');

  // munmap + mmap at the same address: new pages, which the device uses.
  ASSERT_EQ(munmap(mem, 2 * kPage), 0);
  m = mmap(mem, 2 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  ASSERT_EQ(m, static_cast<void*>(mem));
  std::memset(mem, 'B', 2 * kPage);
  ASSERT_EQ(rdma(p, IBV_WR_RDMA_READ, sge_of(local, 0, 32), uint64_t(uintptr_t(mem + kPage)), odp->rkey),
            IBV_WC_SUCCESS);
  EXPECT_EQ(l[0], 'B') << "the device read the pages of the old mapping";
  std::memset(l, 'W', 32);
  ASSERT_EQ(rdma(p, IBV_WR_RDMA_WRITE, sge_of(local, 0, 32), uint64_t(uintptr_t(mem + 100)), odp->rkey),
            IBV_WC_SUCCESS);
  EXPECT_EQ(mem[100], 'W') << "the device wrote into the pages of the old mapping";
  EXPECT_EQ(mem[131], 'W');
  EXPECT_EQ(mem[132], 'B');
}

// ibv_reg_mr(pd, NULL, SIZE_MAX, ON_DEMAND): one key for the whole address
// space, whatever is mapped wherever, as lkey and as rkey.
TEST_F(Odp, ImplicitMrServesWriteAndReadAnywhere) {
  ibv_mr* implicit = ibv_reg_mr(pd_, nullptr, SIZE_MAX, kOdpRw);
  ASSERT_NE(implicit, nullptr) << std::strerror(errno);
  defer([=] { ibv_dereg_mr(implicit); });
  EXPECT_EQ(implicit->addr, nullptr);
  EXPECT_EQ(implicit->length, SIZE_MAX);
  Pair p = make_pair();
  ASSERT_NE(p.a.qp, nullptr);

  static uint8_t in_data[256];
  uint8_t on_stack[256];
  auto heap = std::make_unique<uint8_t[]>(1 << 20);  // a malloc'd range of its own
  uint8_t* pages = fresh_pages(8);
  ASSERT_NE(pages, nullptr);
  uint8_t* targets[] = {in_data, on_stack, heap.get() + 12345, pages + 5 * kPage - 20 /* two pages */};
  uint8_t source[64];
  for (size_t t = 0; t < std::size(targets); ++t) {
    for (size_t i = 0; i < sizeof(source); ++i) source[i] = uint8_t(t * 50 + i);
    std::memset(targets[t], 0, 64);
    // The local SGE goes through the implicit MR too.
    ibv_sge s{uint64_t(uintptr_t(source)), 64, implicit->lkey};
    ASSERT_EQ(rdma(p, IBV_WR_RDMA_WRITE, s, uint64_t(uintptr_t(targets[t])), implicit->rkey), IBV_WC_SUCCESS)
        << "target " << t;
    EXPECT_EQ(std::memcmp(targets[t], source, 64), 0) << "target " << t;
    std::memset(source, 0, sizeof(source));
    ASSERT_EQ(rdma(p, IBV_WR_RDMA_READ, s, uint64_t(uintptr_t(targets[t])), implicit->rkey), IBV_WC_SUCCESS)
        << "target " << t;
    EXPECT_EQ(std::memcmp(targets[t], source, 64), 0) << "target " << t;
  }
  // Atomics too.
  alignas(8) static uint64_t counter = 40;
  alignas(8) uint64_t orig = 0;
  ibv_sge o{uint64_t(uintptr_t(&orig)), 8, implicit->lkey};
  ASSERT_EQ(post_atomic(p.a.qp, 3, IBV_WR_ATOMIC_FETCH_AND_ADD, &o, uint64_t(uintptr_t(&counter)),
                        implicit->rkey, 2),
            0);
  ibv_wc wc{};
  VT_POLL_ONE(p.a.cq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(orig, 40u);
  EXPECT_EQ(counter, 42u);
}

// rdma-core's test_odp gives its QPs its MRs' access flags, ON_DEMAND and
// LOCAL_WRITE included: mlx5 ignores the bits it does not map.
TEST_F(Odp, QpAccessFlagsMayCarryOnDemand) {
  ConnectOpts o;
  o.access = kOdpRw | IBV_ACCESS_LOCAL_WRITE;
  Pair p = make_pair(IBV_QPT_RC, o);
  ASSERT_NE(p.a.qp, nullptr);
  ASSERT_EQ(qp_state(p.a.qp), IBV_QPS_RTS);
  ASSERT_EQ(qp_state(p.b.qp), IBV_QPS_RTS);
  uint8_t* mem = fresh_pages(1);
  ibv_mr* odp = reg_odp(mem, kPage);
  ASSERT_NE(odp, nullptr);
  ibv_mr* local = reg_buffer(64, kRw, 'q');
  EXPECT_EQ(rdma(p, IBV_WR_RDMA_WRITE, sge_of(local, 0, 64), uint64_t(uintptr_t(mem)), odp->rkey),
            IBV_WC_SUCCESS);
  EXPECT_EQ(mem[63], 'q');
}

TEST_F(Odp, ImplicitNeedsOnDemandAndTheWholeRange) {
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd_, nullptr, SIZE_MAX, kRw), nullptr) << "not on demand: no MR that large";
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(ibv_reg_mr_iova(pd_, nullptr, SIZE_MAX, 4096, kOdpRw), nullptr) << "implicit with an iova";
  EXPECT_EQ(errno, EINVAL);
}

// A page unmapped at the time of access: remote READ and WRITE fail at the
// requester with IBV_WC_REM_ACCESS_ERR (the responder NAKs with a remote
// access error, as mlx5 after a page fault it cannot resolve); a local SGE
// over it fails with IBV_WC_LOC_PROT_ERR.
TEST_F(Odp, UnmappedPageAtAccessIsAnAccessError) {
  uint8_t* mem = fresh_pages(3);
  ASSERT_NE(mem, nullptr);
  ibv_mr* odp = reg_odp(mem, 3 * kPage);
  ASSERT_NE(odp, nullptr);
  ASSERT_EQ(munmap(mem + kPage, kPage), 0);
  ibv_mr* local = reg_buffer(kPage, kRw, 1);
  const uint64_t hole = uint64_t(uintptr_t(mem + kPage + 8));
  {
    Pair p = make_pair();
    ASSERT_NE(p.a.qp, nullptr);
    EXPECT_EQ(rdma(p, IBV_WR_RDMA_WRITE, sge_of(local, 0, 16), hole, odp->rkey), IBV_WC_REM_ACCESS_ERR);
  }
  {
    Pair p = make_pair();
    ASSERT_NE(p.a.qp, nullptr);
    EXPECT_EQ(rdma(p, IBV_WR_RDMA_READ, sge_of(local, 0, 16), hole, odp->rkey), IBV_WC_REM_ACCESS_ERR);
  }
  {
    Pair p = make_pair();
    ASSERT_NE(p.a.qp, nullptr);
    ibv_sge s{hole, 16, odp->lkey};
    EXPECT_EQ(rdma(p, IBV_WR_RDMA_WRITE, s, addr_of(local), local->rkey), IBV_WC_LOC_PROT_ERR);
  }
  {
    // A receive into the hole: the receiver's WQE completes with
    // IBV_WC_LOC_PROT_ERR and the sender's with IBV_WC_REM_OP_ERR.
    Pair p = make_pair();
    ASSERT_NE(p.a.qp, nullptr);
    ASSERT_EQ(post_recv_mr(p.b.qp, 5, odp, kPage + 8, 64), 0);
    ibv_sge s = sge_of(local, 0, 16);
    ASSERT_EQ(post_send(p.a.qp, 6, IBV_WR_SEND, &s, 1), 0);
    ibv_wc wc{};
    VT_POLL_ONE(p.b.cq, &wc);
    EXPECT_EQ(wc.status, IBV_WC_LOC_PROT_ERR) << describe(wc);
    VT_POLL_ONE(p.a.cq, &wc);
    EXPECT_EQ(wc.status, IBV_WC_REM_OP_ERR) << describe(wc);
  }
  {
    // The pages around the hole still work.
    Pair p = make_pair();
    ASSERT_NE(p.a.qp, nullptr);
    EXPECT_EQ(rdma(p, IBV_WR_RDMA_WRITE, sge_of(local, 0, 16), uint64_t(uintptr_t(mem + 2 * kPage)), odp->rkey),
              IBV_WC_SUCCESS);
    EXPECT_EQ(mem[2 * kPage], 1);
  }
}

// ibv_rereg_mr to ON_DEMAND: the MR leaves its shared pages and follows the
// mapping from then on; back to pinned, its pages must exist (EFAULT).
TEST_F(Odp, ReregToOnDemandAndBack) {
  uint8_t* mem = fresh_pages(4);
  ASSERT_NE(mem, nullptr);
  std::memset(mem, 'P', 4 * kPage);
  ibv_mr* mr = ibv_reg_mr(pd_, mem, 4 * kPage, kRw);
  ASSERT_NE(mr, nullptr) << std::strerror(errno);
  defer([=] { ibv_dereg_mr(mr); });
  ASSERT_NE(mapping_of(mem + kPage).find("memfd:uroce-mr"), std::string::npos) << "on shared pages";
  ASSERT_EQ(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0, kOdpRw), 0);
  EXPECT_EQ(mapping_of(mem + kPage).find("memfd:"), std::string::npos) << mapping_of(mem + kPage);
  EXPECT_EQ(mem[kPage], 'P');

  Pair p = make_pair();
  ASSERT_NE(p.a.qp, nullptr);
  ibv_mr* local = reg_buffer(64, kRw, 0);
  ASSERT_EQ(munmap(mem, 4 * kPage), 0);
  void* m = mmap(mem, 4 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  ASSERT_EQ(m, static_cast<void*>(mem));
  std::memset(mem, 'N', 4 * kPage);
  ASSERT_EQ(rdma(p, IBV_WR_RDMA_READ, sge_of(local, 0, 64), uint64_t(uintptr_t(mem + kPage)), mr->rkey),
            IBV_WC_SUCCESS);
  auto* l = static_cast<uint8_t*>(local->addr);
  EXPECT_EQ(l[0], 'N') << "the rereg'd MR still reads the pages it had pinned";

  ASSERT_EQ(munmap(mem + 3 * kPage, kPage), 0);
  errno = 0;
  EXPECT_EQ(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0, kRw), IBV_REREG_MR_ERR_CMD);
  EXPECT_EQ(errno, EFAULT) << "pinned again over a page that is not mapped";
  // An ODP MR moves onto a range nothing is mapped in yet.
  uint8_t* gone = fresh_pages(2);
  ASSERT_EQ(munmap(gone, 2 * kPage), 0);
  EXPECT_EQ(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, gone, 2 * kPage, 0), 0);
}

TEST_F(Odp, AdviseMrRejectsAsMlx5Does) {
  uint8_t* mem = fresh_pages(4);
  ASSERT_NE(mem, nullptr);
  ibv_mr* odp = reg_odp(mem, 4 * kPage);
  ASSERT_NE(odp, nullptr);
  ibv_sge sge{uint64_t(uintptr_t(mem)), uint32_t(kPage), odp->lkey};
  const auto kPrefetch = IBV_ADVISE_MR_ADVICE_PREFETCH;
  const auto kWrite = IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE;
  const uint32_t kFlush = IBV_ADVISE_MR_FLAG_FLUSH;
  EXPECT_EQ(ibv_advise_mr(pd_, kPrefetch, kFlush, &sge, 0), EINVAL) << "no SGE";
  EXPECT_EQ(ibv_advise_mr(pd_, kPrefetch, 1u << 5, &sge, 1), EINVAL) << "unknown flag";
  EXPECT_EQ(ibv_advise_mr(pd_, ibv_advise_mr_advice(17), kFlush, &sge, 1), EOPNOTSUPP) << "unknown advice";

  ibv_mr* pinned = reg_buffer(kPage, kRw);
  ibv_sge not_odp = sge_of(pinned, 0, 64);
  EXPECT_EQ(ibv_advise_mr(pd_, kPrefetch, kFlush, &not_odp, 1), ENOENT) << "not an ODP MR";
  ibv_sge bad_key = sge;
  bad_key.lkey = wrong_key(odp->lkey);
  EXPECT_EQ(ibv_advise_mr(pd_, kPrefetch, kFlush, &bad_key, 1), ENOENT);
  EXPECT_EQ(ibv_advise_mr(pd_, kPrefetch, 0, &bad_key, 1), ENOENT) << "checked before queueing too";

  ibv_pd* other = ibv_alloc_pd(ctx_);
  ASSERT_NE(other, nullptr);
  defer([=] { ibv_dealloc_pd(other); });
  EXPECT_EQ(ibv_advise_mr(other, kPrefetch, kFlush, &sge, 1), EPERM) << "another PD's MR";

  ibv_mr* read_only = reg(mem, 4 * kPage, IBV_ACCESS_ON_DEMAND | IBV_ACCESS_REMOTE_READ);
  ASSERT_NE(read_only, nullptr);
  ibv_sge ro{sge.addr, sge.length, read_only->lkey};
  EXPECT_EQ(ibv_advise_mr(pd_, kWrite, kFlush, &ro, 1), EPERM) << "PREFETCH_WRITE on a read-only MR";
  EXPECT_EQ(ibv_advise_mr(pd_, kPrefetch, kFlush, &ro, 1), 0);

  ibv_sge beyond{uint64_t(uintptr_t(mem + 3 * kPage)), uint32_t(2 * kPage), odp->lkey};
  EXPECT_EQ(ibv_advise_mr(pd_, kPrefetch, kFlush, &beyond, 1), EFAULT) << "past the MR's end";
  EXPECT_EQ(ibv_advise_mr(pd_, kPrefetch, 0, &beyond, 1), 0) << "queued: nothing reported";

  ASSERT_EQ(munmap(mem + 2 * kPage, kPage), 0);
  ibv_sge hole{uint64_t(uintptr_t(mem + 2 * kPage)), 64, odp->lkey};
  EXPECT_EQ(ibv_advise_mr(pd_, kPrefetch, kFlush, &hole, 1), EFAULT) << "nothing mapped to fault in";
  EXPECT_EQ(ibv_advise_mr(pd_, IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT, kFlush, &hole, 1), 0)
      << "NO_FAULT takes what is mapped";
  EXPECT_EQ(ibv_advise_mr(pd_, kWrite, 0, &hole, 1), 0);
}

TEST_F(Odp, AdviseMrPrefetchWriteFaultsThePagesIn) {
  uint8_t* mem = fresh_pages(4);
  ASSERT_NE(mem, nullptr);
  ibv_mr* odp = reg_odp(mem, 4 * kPage);
  ASSERT_NE(odp, nullptr);
  ASSERT_FALSE(resident(mem + kPage));
  ibv_sge two[2] = {{uint64_t(uintptr_t(mem + kPage)), uint32_t(kPage), odp->lkey},
                    {uint64_t(uintptr_t(mem + 3 * kPage + 100)), 50, odp->lkey}};
  ASSERT_EQ(ibv_advise_mr(pd_, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH, two, 2), 0);
  EXPECT_TRUE(resident(mem + kPage));
  EXPECT_TRUE(resident(mem + 3 * kPage));
  EXPECT_FALSE(resident(mem)) << "only the advised pages";
  EXPECT_FALSE(resident(mem + 2 * kPage)) << "only the advised pages";

  // The implicit MR: any address.
  ibv_mr* implicit = ibv_reg_mr(pd_, nullptr, SIZE_MAX, kOdpRw);
  ASSERT_NE(implicit, nullptr) << std::strerror(errno);
  defer([=] { ibv_dereg_mr(implicit); });
  ibv_sge any{uint64_t(uintptr_t(mem)), 8, implicit->lkey};
  EXPECT_EQ(ibv_advise_mr(pd_, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH, &any, 1), 0);
  EXPECT_TRUE(resident(mem));
}

}  // namespace
}  // namespace vt
