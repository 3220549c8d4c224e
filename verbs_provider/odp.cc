// On-demand paging: the capabilities advertised in ibv_query_device_ex and
// ibv_advise_mr.
//
// The engine reaches an ODP MR through process_vm_readv/writev on the
// process's mapping as it is at each access (device/memory.h), never through
// pages held since registration: memory may be mapped after ibv_reg_mr,
// remapped, or never touched until the device touches it, exactly as a NIC's
// page-fault path sees it. Every transport operation goes through that path,
// so every one supports ODP.
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>

#include "verbs_provider/provider.h"

namespace uroce::provider {

namespace {

constexpr uint32_t kOdpSendRecv = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_SRQ_RECV;
constexpr uint32_t kOdpRdmaAtomic = IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC;

// What one MR says to ibv_advise_mr, copied under the context's lock.
struct MrView {
  bool found = false;
  ibv_pd* pd = nullptr;
  unsigned access = 0;
  uint64_t iova = 0, addr = 0, length = 0;
};

MrView find_mr(UContext* c, uint32_t lkey) {
  std::lock_guard<std::mutex> lock(c->mrs_mu);
  auto it = c->mrs.find(lkey);
  if (it == c->mrs.end()) return {};
  const UMr* m = it->second;
  return {true, m->mr.pd, m->access, m->iova, uint64_t(uintptr_t(m->mr.addr)), m->mr.length};
}

// ib_access_writable(): the access flags that make an umem writable.
bool writable(unsigned access) {
  return access & (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC |
                   IBV_ACCESS_MW_BIND);
}

// mlx5's pagefault_mr(): [addr, addr + length) in the MR's iova space must
// lie within it (EFAULT), and, unless the advice is NO_FAULT (a snapshot of
// what is mapped), its pages are faulted in now: EFAULT where none is mapped.
int prefetch(const MrView& mr, ibv_advise_mr_advice advice, const ibv_sge& sge) {
  if (sge.addr < mr.iova || sge.length > mr.length || sge.addr - mr.iova > mr.length - sge.length)
    return EFAULT;
  if (advice == IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT || sge.length == 0) return 0;
  const uint64_t page = uint64_t(sysconf(_SC_PAGESIZE));
  const uint64_t start = mr.addr + (sge.addr - mr.iova);
  const uint64_t first = start & ~(page - 1);
  const uint64_t end = (start + sge.length + page - 1) & ~(page - 1);
  // A read fault maps the zero page; a write fault (PREFETCH_WRITE) pages in
  // for writing, as mlx5 maps the pages writable.
  const int how = advice == IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE ? MADV_POPULATE_WRITE : MADV_POPULATE_READ;
  if (madvise(reinterpret_cast<void*>(first), end - first, how) == 0) return 0;
  if (errno == EINVAL) return 0;  // a kernel before 5.14: the engine faults pages at access
  return EFAULT;  // ENOMEM (not mapped) or EFAULT (no access): hmm_range_fault's -EFAULT
}

// get_prefetchable_mr(): a key that is not an ODP MR of this context is
// ENOENT; another PD's, or PREFETCH_WRITE on an MR that cannot be written, EPERM.
int prefetchable(UContext* c, ibv_pd* pd, ibv_advise_mr_advice advice, uint32_t lkey, MrView* out) {
  *out = find_mr(c, lkey);
  if (!out->found || !(out->access & IBV_ACCESS_ON_DEMAND)) return ENOENT;
  if (out->pd != pd) return EPERM;
  if (advice == IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE && !writable(out->access)) return EPERM;
  return 0;
}

}  // namespace

void fill_odp_caps(ibv_device_attr_ex* attr) {
  attr->odp_caps.general_caps = IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT;
  attr->odp_caps.per_transport_caps.rc_odp_caps = kOdpSendRecv | kOdpRdmaAtomic;
  // UC: no READ or atomics on the transport at all (IBA 9.7.4).
  attr->odp_caps.per_transport_caps.uc_odp_caps = kOdpSendRecv | IBV_ODP_SUPPORT_WRITE;
  attr->odp_caps.per_transport_caps.ud_odp_caps = kOdpSendRecv;
  // XRC receives only through SRQs.
  attr->xrc_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_SRQ_RECV | kOdpRdmaAtomic;
}

// As mlx5 (kernel: uverbs ADVISE_MR, then mlx5_ib_advise_mr): no SGE or an
// unknown flag is EINVAL, an unknown advice EOPNOTSUPP. With
// IBV_ADVISE_MR_FLAG_FLUSH each SGE is checked and its pages faulted before
// the call returns, the first error returned; without it mlx5 checks every
// SGE, queues the faulting and reports nothing more, so here the pages are
// faulted at once and their errors dropped.
int advise_mr(ibv_pd* pd, ibv_advise_mr_advice advice, uint32_t flags, ibv_sge* sg_list,
              uint32_t num_sge) {
  if (num_sge == 0 || !sg_list) return EINVAL;
  if (flags & ~uint32_t(IBV_ADVISE_MR_FLAG_FLUSH)) return EINVAL;
  if (advice != IBV_ADVISE_MR_ADVICE_PREFETCH && advice != IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE &&
      advice != IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT)
    return EOPNOTSUPP;
  UContext* c = to_uctx(pd->context);
  MrView mr;
  if (flags & IBV_ADVISE_MR_FLAG_FLUSH) {
    for (uint32_t i = 0; i < num_sge; ++i) {
      if (int err = prefetchable(c, pd, advice, sg_list[i].lkey, &mr)) return err;
      if (int err = prefetch(mr, advice, sg_list[i])) return err;
    }
    return 0;
  }
  for (uint32_t i = 0; i < num_sge; ++i)
    if (int err = prefetchable(c, pd, advice, sg_list[i].lkey, &mr)) return err;
  for (uint32_t i = 0; i < num_sge; ++i)
    if (prefetchable(c, pd, advice, sg_list[i].lkey, &mr) == 0) (void)prefetch(mr, advice, sg_list[i]);
  return 0;
}

}  // namespace uroce::provider
