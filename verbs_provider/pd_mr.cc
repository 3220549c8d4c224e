// Protection domains and memory regions.
#include <cerrno>

#include "verbs_provider/provider.h"
#include "verbs_provider/shared_pages.h"

#undef ibv_reg_mr
#undef ibv_reg_mr_iova

using namespace uroce;
using namespace uroce::provider;

namespace {

ibv_mr* reg_mr(ibv_pd* pd, void* addr, size_t length, uint64_t iova, unsigned access) {
  UContext* c = to_uctx(pd->context);
  if (length == 0) {
    errno = EINVAL;
    return nullptr;
  }
  auto* mr = new (std::nothrow) UMr{};
  if (!mr) {
    errno = ENOMEM;
    return nullptr;
  }
  // On-demand paging registers address space, not pages: nothing to move.
  const SharedLease lease = access & IBV_ACCESS_ON_DEMAND ? SharedLease{} : share_pages(addr, length);
  abi::RegMrRequest req{pd->handle, uint64_t(uintptr_t(addr)), length, iova,
                        access, 0, lease.range};
  abi::RegMrReply rep;
  if (int err = c->conn.call(abi::CtlOp::kRegMr, &req, sizeof(req), &rep, sizeof(rep), &lease.fd,
                             lease.id ? 1 : 0)) {
    release_pages(lease.id);
    delete mr;
    errno = err;
    return nullptr;
  }
  mr->shared_lease = lease.id;
  mr->iova = iova;
  mr->access = access;
  mr->mr.context = pd->context;
  mr->mr.pd = pd;
  mr->mr.addr = addr;
  mr->mr.length = length;
  mr->mr.handle = uint32_t(rep.handle);
  mr->mr.lkey = rep.lkey;
  mr->mr.rkey = rep.rkey;
  std::lock_guard<std::mutex> lock(c->mrs_mu);
  c->mrs[mr->mr.lkey] = mr;
  return &mr->mr;
}

}  // namespace

UROCE_EXPORT ibv_pd* ibv_alloc_pd(ibv_context* context) {
  UContext* c = to_uctx(context);
  abi::AllocPdReply rep;
  if (int err = c->conn.call(abi::CtlOp::kAllocPd, nullptr, 0, &rep, sizeof(rep))) {
    errno = err;
    return nullptr;
  }
  auto* pd = new UPd{};
  pd->pd.context = context;
  pd->pd.handle = uint32_t(rep.handle);
  return &pd->pd;
}

UROCE_EXPORT int ibv_dealloc_pd(ibv_pd* pd) {
  auto* u = reinterpret_cast<UPd*>(pd);
  abi::HandleRequest req{pd->handle};
  int err = to_uctx(pd->context)->conn.call(abi::CtlOp::kDeallocPd, &req, sizeof(req), nullptr, 0);
  if (err && err != EIO) return err;
  delete u;
  return 0;
}

UROCE_EXPORT ibv_mr* ibv_reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
  return reg_mr(pd, addr, length, uint64_t(uintptr_t(addr)), unsigned(access));
}

UROCE_EXPORT ibv_mr* ibv_reg_mr_iova(ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                                     int access) {
  return reg_mr(pd, addr, length, iova, unsigned(access));
}

UROCE_EXPORT ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                                      unsigned int access) {
  return reg_mr(pd, addr, length, iova, access);
}

UROCE_EXPORT int ibv_rereg_mr(ibv_mr* mr, int flags, ibv_pd* pd, void* addr, size_t length,
                              int access) {
  auto* u = reinterpret_cast<UMr*>(mr);
  if (flags & ~IBV_REREG_MR_FLAGS_SUPPORTED) return IBV_REREG_MR_ERR_INPUT;
  if (!(flags & (IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD |
                 IBV_REREG_MR_CHANGE_ACCESS)))
    return IBV_REREG_MR_ERR_INPUT;
  if ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) && (!addr || !length)) return IBV_REREG_MR_ERR_INPUT;
  if ((flags & IBV_REREG_MR_CHANGE_PD) && !pd) return IBV_REREG_MR_ERR_INPUT;
  abi::ReregMrRequest req{};
  req.handle = mr->handle;
  req.flags = uint32_t(flags);
  req.access = uint32_t(access);
  req.pd = (flags & IBV_REREG_MR_CHANGE_PD) ? pd->handle : 0;
  req.addr = uint64_t(uintptr_t(addr));
  req.length = length;
  // An MR on demand stays off shared pages: it follows the process's mapping.
  const unsigned new_access = flags & IBV_REREG_MR_CHANGE_ACCESS ? unsigned(access) : u->access;
  const bool odp = new_access & IBV_ACCESS_ON_DEMAND;
  const SharedLease lease = (flags & IBV_REREG_MR_CHANGE_TRANSLATION) && !odp
                                ? share_pages(addr, length)
                                : SharedLease{};
  req.shared = lease.range;
  abi::RegMrReply rep;
  if (int err = to_uctx(mr->context)->conn.call(abi::CtlOp::kReregMr, &req, sizeof(req), &rep,
                                                sizeof(rep), &lease.fd, lease.id ? 1 : 0)) {
    release_pages(lease.id);
    errno = err;
    return IBV_REREG_MR_ERR_CMD;
  }
  if ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) || odp) {
    release_pages(u->shared_lease);  // the engine no longer maps them
    u->shared_lease = lease.id;
  }
  UContext* c = to_uctx(mr->context);
  std::lock_guard<std::mutex> lock(c->mrs_mu);  // advise_mr reads these
  c->mrs.erase(mr->lkey);
  u->access = new_access;
  mr->lkey = rep.lkey;
  mr->rkey = rep.rkey;
  if (flags & IBV_REREG_MR_CHANGE_PD) mr->pd = pd;
  if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
    mr->addr = addr;
    mr->length = length;
    u->iova = uint64_t(uintptr_t(addr));
  }
  c->mrs[mr->lkey] = u;
  return 0;
}

UROCE_EXPORT int ibv_dereg_mr(ibv_mr* mr) {
  auto* u = reinterpret_cast<UMr*>(mr);
  abi::HandleRequest req{mr->handle};
  int err = to_uctx(mr->context)->conn.call(abi::CtlOp::kDeregMr, &req, sizeof(req), nullptr, 0);
  if (err && err != EIO) return err;
  {
    UContext* c = to_uctx(mr->context);
    std::lock_guard<std::mutex> lock(c->mrs_mu);
    c->mrs.erase(mr->lkey);
  }
  release_pages(u->shared_lease);
  delete u;
  return 0;
}
