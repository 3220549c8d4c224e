// The provider never throws across its C boundary: a verb whose allocation
// fails returns ENOMEM (NULL with errno, or the error) as a C library must,
// and leaves nothing behind. This binary replaces the global operator new
// (the provider's calls resolve to it, as to any definition the executable
// exports), so that allocations can fail on one thread for one call.
#include <fcntl.h>
#include <infiniband/verbs.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <functional>
#include <new>
#include <string>

#include "tests/integration/verbs_fixture.h"

namespace {
thread_local bool t_fail_allocations = false;

void* allocate(size_t n) { return std::malloc(n ? n : 1); }
}  // namespace

void* operator new(size_t n) {
  if (t_fail_allocations) throw std::bad_alloc();
  if (void* p = allocate(n)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n) { return operator new(n); }
void* operator new(size_t n, const std::nothrow_t&) noexcept { return t_fail_allocations ? nullptr : allocate(n); }
void* operator new[](size_t n, const std::nothrow_t&) noexcept { return t_fail_allocations ? nullptr : allocate(n); }
// Every allocation above is malloc's: free is its match.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }

namespace vt {
namespace {

class AllocationFailure : public VerbsTest {
 protected:
  // Runs `verb` with every operator new of this thread failing; the verb
  // must fail with ENOMEM and throw nothing. `verb` returns the error it
  // got (0: it succeeded).
  void expect_enomem(const std::string& name, const std::function<int()>& verb) {
    int err = 0;
    bool threw = false;
    t_fail_allocations = true;
    try {
      err = verb();
    } catch (...) {
      threw = true;
    }
    t_fail_allocations = false;
    EXPECT_FALSE(threw) << name << ": an exception crossed the C boundary";
    EXPECT_EQ(err, ENOMEM) << name << ": " << std::strerror(err);
  }
};

int null_or_errno(const void* object) { return object ? 0 : errno; }

TEST_F(AllocationFailure, VerbsReturnEnomemAndThrowNothing) {
  ibv_cq* cq = make_cq(16);
  ASSERT_NE(cq, nullptr);
  uint8_t* buf = buffer(4096);
  expect_enomem("ibv_alloc_pd", [&] { return null_or_errno(ibv_alloc_pd(ctx_)); });
  expect_enomem("ibv_create_comp_channel", [&] { return null_or_errno(ibv_create_comp_channel(ctx_)); });
  expect_enomem("ibv_create_cq", [&] { return null_or_errno(ibv_create_cq(ctx_, 16, nullptr, nullptr, 0)); });
  expect_enomem("ibv_reg_mr", [&] { return null_or_errno(ibv_reg_mr(pd_, buf, 4096, IBV_ACCESS_LOCAL_WRITE)); });
  expect_enomem("ibv_alloc_mw", [&] { return null_or_errno(ibv_alloc_mw(pd_, IBV_MW_TYPE_2)); });
  expect_enomem("ibv_open_xrcd", [&] {
    ibv_xrcd_init_attr xa{};
    xa.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
    xa.fd = -1;
    xa.oflags = O_CREAT;
    return null_or_errno(ibv_open_xrcd(ctx_, &xa));
  });
  expect_enomem("ibv_create_srq", [&] {
    ibv_srq_init_attr sa{};
    sa.attr.max_wr = 16;
    sa.attr.max_sge = 1;
    return null_or_errno(ibv_create_srq(pd_, &sa));
  });
  expect_enomem("ibv_create_qp", [&] {
    ibv_qp_init_attr qa{};
    qa.send_cq = qa.recv_cq = cq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap = {16, 16, 1, 1, 0};
    return null_or_errno(ibv_create_qp(pd_, &qa));
  });
  expect_enomem("ibv_create_ah", [&] {
    ibv_ah_attr av = loopback_av();
    return null_or_errno(ibv_create_ah(pd_, &av));
  });
  expect_enomem("ibv_open_device", [&] { return null_or_errno(ibv_open_device(ctx_->device)); });
  expect_enomem("ibv_create_cq_ex", [&] {
    ibv_cq_init_attr_ex ca{};
    ca.cqe = 16;
    ca.wc_flags = IBV_WC_STANDARD_FLAGS;
    return null_or_errno(ibv_create_cq_ex(ctx_, &ca));
  });
  expect_enomem("ibv_create_srq_ex", [&] {
    ibv_srq_init_attr_ex sa{};
    sa.attr.max_wr = 16;
    sa.attr.max_sge = 1;
    sa.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
    sa.srq_type = IBV_SRQT_BASIC;
    sa.pd = pd_;
    return null_or_errno(ibv_create_srq_ex(ctx_, &sa));
  });
  expect_enomem("ibv_create_qp_ex", [&] {
    ibv_qp_init_attr_ex qa{};
    qa.send_cq = qa.recv_cq = cq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap = {16, 16, 1, 1, 0};
    qa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    qa.pd = pd_;
    qa.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE;
    return null_or_errno(ibv_create_qp_ex(ctx_, &qa));
  });
  expect_enomem("ibv_create_wq", [&] {
    ibv_wq_init_attr wa{};
    wa.wq_type = IBV_WQT_RQ;
    wa.max_wr = 16;
    wa.max_sge = 1;
    wa.pd = pd_;
    wa.cq = cq;
    return null_or_errno(ibv_create_wq(ctx_, &wa));
  });
  expect_enomem("ibv_alloc_td", [&] {
    ibv_td_init_attr ta{};
    return null_or_errno(ibv_alloc_td(ctx_, &ta));
  });
  expect_enomem("ibv_alloc_parent_domain", [&] {
    ibv_parent_domain_init_attr pa{};
    pa.pd = pd_;
    return null_or_errno(ibv_alloc_parent_domain(ctx_, &pa));
  });
  expect_enomem("ibv_alloc_dm", [&] {
    ibv_alloc_dm_attr da{};
    da.length = 64;
    return null_or_errno(ibv_alloc_dm(ctx_, &da));
  });
  expect_enomem("ibv_get_device_list", [&] {
    int n = -1;
    ibv_device** list = ibv_get_device_list(&n);
    if (list) ibv_free_device_list(list);
    return list ? 0 : errno;
  });

  // Nothing was left half made: the same verbs work now, and the engine
  // holds no more objects than these (the fixture destroys them; the
  // engine's count is checked by the next test's fresh context).
  ibv_pd* pd = ibv_alloc_pd(ctx_);
  ASSERT_NE(pd, nullptr) << std::strerror(errno);
  ibv_mr* mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr) << std::strerror(errno);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
}

}  // namespace
}  // namespace vt
