// Thread domains and parent domains through the verbs (issue 13; mlx5's
// providers/mlx5/verbs.c): ibv_alloc_td / ibv_dealloc_td,
// ibv_alloc_parent_domain with the application's allocator (called for each
// QP's, CQ's and SRQ's provider-side state, with mlx5dv's resource types,
// IBV_ALLOCATOR_USE_DEFAULT and NULL as mlx5 treats them), objects on a
// parent domain working as on its PD, and the deallocation order (EBUSY).
// Objects on a parent domain are destroyed by each test in order: the
// fixture's deferred cleanups run before its tracked objects are destroyed.
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>

#include "verbs_fixture.h"

namespace vt {
namespace {

// mlx5dv.h's MLX5DV_RES_TYPE_QP / SRQ / CQ, which uroce passes too.
constexpr uint64_t kResQp = uint64_t(1) << 32 | 1;
constexpr uint64_t kResSrq = uint64_t(1) << 32 | 4;
constexpr uint64_t kResCq = uint64_t(1) << 32 | 5;

// What the application's allocator saw: calls by resource type, and the
// pointers it gave that were not freed yet.
struct AllocatorLog {
  enum class Mode { kMemalign, kDefault, kRefuse } mode = Mode::kMemalign;
  ibv_pd* parent = nullptr;
  std::map<uint64_t, int> allocs, frees;
  std::map<void*, uint64_t> live;
  int wrong_args = 0;  // a call with another pd, pd_context or a bad alignment
};

void* log_alloc(ibv_pd* pd, void* pd_context, size_t size, size_t alignment, uint64_t type) {
  auto* log = static_cast<AllocatorLog*>(pd_context);
  if (pd != log->parent || alignment == 0 || (alignment & (alignment - 1)) || size == 0) ++log->wrong_args;
  ++log->allocs[type];
  if (log->mode == AllocatorLog::Mode::kDefault) return IBV_ALLOCATOR_USE_DEFAULT;
  if (log->mode == AllocatorLog::Mode::kRefuse) return nullptr;
  void* p = nullptr;
  if (posix_memalign(&p, alignment, size) != 0) return nullptr;
  std::memset(p, 0xa5, size);  // the provider must not count on zeroed memory
  log->live[p] = type;
  return p;
}

void log_free(ibv_pd* pd, void* pd_context, void* ptr, uint64_t type) {
  auto* log = static_cast<AllocatorLog*>(pd_context);
  if (pd != log->parent) ++log->wrong_args;
  ++log->frees[type];
  auto it = log->live.find(ptr);
  if (it == log->live.end() || it->second != type) {
    ++log->wrong_args;
    return;
  }
  log->live.erase(it);
  std::free(ptr);
}

class ParentDomain : public VerbsTest {
 protected:
  ibv_pd* alloc_parent(AllocatorLog* log, ibv_td* td = nullptr) {
    ibv_parent_domain_init_attr attr{};
    attr.pd = pd_;
    attr.td = td;
    if (log) {
      attr.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
      attr.alloc = log_alloc;
      attr.free = log_free;
      attr.pd_context = log;
    }
    ibv_pd* parent = ibv_alloc_parent_domain(ctx_, &attr);
    EXPECT_NE(parent, nullptr) << "ibv_alloc_parent_domain: " << std::strerror(errno);
    if (log) log->parent = parent;
    return parent;
  }
  ibv_cq* cq_on(ibv_pd* parent) {
    ibv_cq_init_attr_ex attr{};
    attr.cqe = 64;
    attr.wc_flags = IBV_WC_STANDARD_FLAGS;
    attr.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD;
    attr.parent_domain = parent;
    ibv_cq_ex* cq = ibv_create_cq_ex(ctx_, &attr);
    return cq ? ibv_cq_ex_to_cq(cq) : nullptr;
  }
  ibv_qp* qp_on(ibv_pd* parent, ibv_cq* cq, ibv_srq* srq = nullptr) {
    ibv_qp_init_attr init{};
    init.send_cq = cq;
    init.recv_cq = cq;
    init.srq = srq;
    init.qp_type = IBV_QPT_RC;
    init.sq_sig_all = 1;
    init.cap = {16, 16, 1, 1, 0};
    return ibv_create_qp(parent, &init);
  }
  ibv_srq* srq_on(ibv_pd* parent) {
    ibv_srq_init_attr init{};
    init.attr.max_wr = 16;
    init.attr.max_sge = 1;
    return ibv_create_srq(parent, &init);
  }
};

// The allocator gives each queue's memory; RC traffic (SEND into an SRQ and
// RDMA WRITE) runs over QPs, CQs, an SRQ and MRs all on the parent domain,
// and every allocation is freed, with the same type, when its queue goes.
TEST_F(ParentDomain, AllocatorGivesQueueMemoryAndTrafficRuns) {
  AllocatorLog log;
  ibv_pd* parent = alloc_parent(&log);
  ASSERT_NE(parent, nullptr);
  EXPECT_EQ(parent->context, ctx_);
  ibv_cq* cq_a = cq_on(parent);
  ibv_cq* cq_b = cq_on(parent);
  ASSERT_TRUE(cq_a && cq_b) << std::strerror(errno);
  ibv_srq* srq = srq_on(parent);
  ASSERT_NE(srq, nullptr) << std::strerror(errno);
  ibv_qp* a = qp_on(parent, cq_a);
  ibv_qp* b = qp_on(parent, cq_b, srq);
  ASSERT_TRUE(a && b) << std::strerror(errno);
  EXPECT_EQ(a->pd, parent);
  EXPECT_EQ(log.allocs[kResCq], 2);
  EXPECT_EQ(log.allocs[kResSrq], 1);
  EXPECT_EQ(log.allocs[kResQp], 2);
  EXPECT_EQ(log.live.size(), 5u);

  uint8_t* src = buffer(4096, 0x3c);
  uint8_t* dst = buffer(4096, 0);
  ibv_mr* src_mr = ibv_reg_mr(parent, src, 4096, IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* dst_mr = ibv_reg_mr(parent, dst, 4096, kRw);
  ASSERT_TRUE(src_mr && dst_mr) << std::strerror(errno);
  EXPECT_EQ(dst_mr->pd, parent);
  connect_qp(a, b->qp_num);
  connect_qp(b, a->qp_num);

  ibv_sge rsge = sge_of(dst_mr, 0, 1024);
  ibv_recv_wr rwr{};
  rwr.wr_id = 5;
  rwr.sg_list = &rsge;
  rwr.num_sge = 1;
  ibv_recv_wr* bad_r = nullptr;
  ASSERT_EQ(ibv_post_srq_recv(srq, &rwr, &bad_r), 0);
  ibv_sge ssge = sge_of(src_mr, 0, 1024);
  ASSERT_EQ(post_send(a, 1, IBV_WR_SEND, &ssge, 1), 0);
  ibv_sge wsge = sge_of(src_mr, 0, 512);
  ASSERT_EQ(post_send(a, 2, IBV_WR_RDMA_WRITE, &wsge, 1, IBV_SEND_SIGNALED, addr_of(dst_mr, 2048),
                      dst_mr->rkey),
            0);
  auto wcs = poll_n(cq_a, 2);
  ASSERT_EQ(wcs.size(), 2u);
  for (const ibv_wc& wc : wcs) EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  ibv_wc wc{};
  VT_POLL_ONE(cq_b, &wc);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(wc.byte_len, 1024u);
  EXPECT_EQ(std::memcmp(dst, src, 1024), 0);
  EXPECT_EQ(std::memcmp(dst + 2048, src, 512), 0);

  EXPECT_EQ(ibv_dereg_mr(src_mr), 0);
  EXPECT_EQ(ibv_dereg_mr(dst_mr), 0);
  EXPECT_EQ(ibv_destroy_qp(a), 0);
  EXPECT_EQ(ibv_destroy_qp(b), 0);
  EXPECT_EQ(ibv_destroy_srq(srq), 0);
  EXPECT_EQ(ibv_destroy_cq(cq_a), 0);
  EXPECT_EQ(ibv_destroy_cq(cq_b), 0);
  EXPECT_EQ(log.frees, log.allocs);
  EXPECT_TRUE(log.live.empty());
  EXPECT_EQ(log.wrong_args, 0);
  EXPECT_EQ(ibv_dealloc_pd(parent), 0);
}

// IBV_ALLOCATOR_USE_DEFAULT: the provider's own memory, free never called;
// NULL: the creation fails with ENOMEM (mlx5_alloc_buf_extern).
TEST_F(ParentDomain, DefaultAndRefusingAllocators) {
  AllocatorLog log;
  log.mode = AllocatorLog::Mode::kDefault;
  ibv_pd* parent = alloc_parent(&log);
  ASSERT_NE(parent, nullptr);
  ibv_cq* cq = cq_on(parent);
  ASSERT_NE(cq, nullptr) << std::strerror(errno);
  ibv_qp* qp = qp_on(parent, cq);
  ASSERT_NE(qp, nullptr) << std::strerror(errno);
  EXPECT_EQ(log.allocs[kResQp], 1);
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
  log.mode = AllocatorLog::Mode::kRefuse;
  errno = 0;
  EXPECT_EQ(qp_on(parent, cq), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  errno = 0;
  EXPECT_EQ(srq_on(parent), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
  EXPECT_TRUE(log.frees.empty());
  EXPECT_EQ(ibv_dealloc_pd(parent), 0);
  // A failed creation holds nothing: the parent domain went.
}

// Without allocators the parent domain is its PD for every object, the AH too.
TEST_F(ParentDomain, WithoutAllocatorsObjectsWorkAsOnThePd) {
  ibv_pd* parent = alloc_parent(nullptr);
  ASSERT_NE(parent, nullptr);
  ibv_cq* cq = make_cq();
  ibv_qp* qp = qp_on(parent, cq);
  ASSERT_NE(qp, nullptr) << std::strerror(errno);
  ibv_ah_attr av = loopback_av();
  ibv_ah* ah = ibv_create_ah(parent, &av);
  ASSERT_NE(ah, nullptr) << std::strerror(errno);
  EXPECT_EQ(ah->pd, parent);
  // An MR of the PD serves a QP of the parent domain: one protection domain.
  ibv_mr* mr = reg_buffer(4096, kRw, 0x11);
  ASSERT_NE(mr, nullptr);
  ibv_qp* peer = make_qp(IBV_QPT_RC, cq, cq);
  ASSERT_NE(peer, nullptr);
  connect_qp(qp, peer->qp_num);
  connect_qp(peer, qp->qp_num);
  ibv_sge s = sge_of(mr, 0, 64);
  ASSERT_EQ(post_send(qp, 9, IBV_WR_RDMA_WRITE, &s, 1, IBV_SEND_SIGNALED, addr_of(mr, 1024), mr->rkey), 0);
  ibv_wc wc{};
  VT_POLL_ONE(cq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(ibv_destroy_ah(ah), 0);
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
  EXPECT_EQ(ibv_dealloc_pd(parent), 0);
}

// mlx5's order: a PD with a parent domain, a parent domain with a queue, a
// TD with a parent domain are EBUSY; in the right order everything goes.
TEST_F(ParentDomain, DeallocationOrder) {
  ibv_td_init_attr td_attr{};
  ibv_td* td = ibv_alloc_td(ctx_, &td_attr);
  ASSERT_NE(td, nullptr) << std::strerror(errno);
  EXPECT_EQ(td->context, ctx_);
  ibv_pd* pd = ibv_alloc_pd(ctx_);
  ASSERT_NE(pd, nullptr);
  ibv_parent_domain_init_attr attr{};
  attr.pd = pd;
  attr.td = td;
  ibv_pd* parent = ibv_alloc_parent_domain(ctx_, &attr);
  ASSERT_NE(parent, nullptr) << std::strerror(errno);
  ibv_cq* cq = cq_on(parent);
  ASSERT_NE(cq, nullptr) << std::strerror(errno);
  EXPECT_EQ(ibv_dealloc_pd(pd), EBUSY);
  EXPECT_EQ(ibv_dealloc_td(td), EBUSY);
  EXPECT_EQ(ibv_dealloc_pd(parent), EBUSY);  // the CQ holds it
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
  ibv_qp* qp = qp_on(parent, make_cq());
  ASSERT_NE(qp, nullptr) << std::strerror(errno);
  EXPECT_EQ(ibv_dealloc_pd(parent), EBUSY);  // the QP holds it
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
  EXPECT_EQ(ibv_dealloc_pd(parent), 0);
  EXPECT_EQ(ibv_dealloc_td(td), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
}

// EINVAL as libibverbs and mlx5 give it: no PD, an unknown comp_mask bit, a
// TD comp_mask, a parent domain over a parent domain; a CQ whose "parent
// domain" is a plain PD.
TEST_F(ParentDomain, BadAttributesAreEinval) {
  ibv_parent_domain_init_attr attr{};
  errno = 0;
  EXPECT_EQ(ibv_alloc_parent_domain(ctx_, &attr), nullptr);
  EXPECT_EQ(errno, EINVAL);
  attr.pd = pd_;
  attr.comp_mask = 1u << 5;
  errno = 0;
  EXPECT_EQ(ibv_alloc_parent_domain(ctx_, &attr), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ibv_td_init_attr td_attr{};
  td_attr.comp_mask = 1;
  errno = 0;
  EXPECT_EQ(ibv_alloc_td(ctx_, &td_attr), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ibv_pd* parent = alloc_parent(nullptr);
  ASSERT_NE(parent, nullptr);
  attr = {};
  attr.pd = parent;
  errno = 0;
  EXPECT_EQ(ibv_alloc_parent_domain(ctx_, &attr), nullptr);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(cq_on(pd_), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(ibv_dealloc_pd(parent), 0);
}

}  // namespace
}  // namespace vt
