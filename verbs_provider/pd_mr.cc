// Protection domains, memory regions and memory windows.
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
  // Allocated first: a failure then leaves no PD in the engine behind.
  auto* pd = new (std::nothrow) UPd{};
  if (!pd) {
    errno = ENOMEM;
    return nullptr;
  }
  abi::AllocPdReply rep;
  if (int err = c->conn.call(abi::CtlOp::kAllocPd, nullptr, 0, &rep, sizeof(rep))) {
    delete pd;
    errno = err;
    return nullptr;
  }
  pd->pd.context = context;
  pd->pd.handle = uint32_t(rep.handle);
  return &pd->pd;
}

UROCE_EXPORT int ibv_dealloc_pd(ibv_pd* pd) {
  UPd* u = to_upd(pd);
  if (u->protection_domain) return dealloc_parent_domain(u);
  if (u->refcount.load() > 1) return EBUSY;  // a parent domain uses it (mlx5_free_pd)
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

// ---- imports: objects of the session named by an imported context's
// handles (context.cc: ibv_import_device). Unimport frees our struct only;
// the object stays, as ibv_unimport_* leaves the kernel's.

UROCE_EXPORT ibv_pd* ibv_import_pd(ibv_context* context, uint32_t pd_handle) {
  abi::HandleRequest req{pd_handle};
  if (int err = to_uctx(context)->conn.call(abi::CtlOp::kImportPd, &req, sizeof(req), nullptr, 0)) {
    errno = err;
    return nullptr;
  }
  auto* pd = new (std::nothrow) UPd{};
  if (!pd) {
    errno = ENOMEM;
    return nullptr;
  }
  pd->pd.context = context;
  pd->pd.handle = pd_handle;
  return &pd->pd;
}

UROCE_EXPORT void ibv_unimport_pd(ibv_pd* pd) { delete to_upd(pd); }

UROCE_EXPORT ibv_mr* ibv_import_mr(ibv_pd* pd, uint32_t mr_handle) {
  UContext* c = to_uctx(pd->context);
  abi::HandleRequest req{mr_handle};
  abi::ImportMrReply rep;
  if (int err = c->conn.call(abi::CtlOp::kImportMr, &req, sizeof(req), &rep, sizeof(rep))) {
    errno = err;
    return nullptr;
  }
  auto* mr = new (std::nothrow) UMr{};
  if (!mr) {
    errno = ENOMEM;
    return nullptr;
  }
  mr->shared_lease = 0;  // its pages stay the registering context's
  mr->iova = rep.iova;
  mr->access = rep.access;
  mr->mr.context = pd->context;
  mr->mr.pd = pd;
  mr->mr.addr = reinterpret_cast<void*>(uintptr_t(rep.iova));  // the kernel reports the iova only
  mr->mr.length = rep.length;
  mr->mr.handle = mr_handle;
  mr->mr.lkey = rep.lkey;
  mr->mr.rkey = rep.rkey;
  std::lock_guard<std::mutex> lock(c->mrs_mu);
  c->mrs[mr->mr.lkey] = mr;
  return &mr->mr;
}

UROCE_EXPORT void ibv_unimport_mr(ibv_mr* mr) {
  UContext* c = to_uctx(mr->context);
  {
    std::lock_guard<std::mutex> lock(c->mrs_mu);
    c->mrs.erase(mr->lkey);
  }
  delete reinterpret_cast<UMr*>(mr);
}

// ---- memory windows (ibv_alloc_mw, ibv_dealloc_mw, ibv_bind_mw are inline
// in verbs.h and call these through the context's ops) ----

namespace uroce::provider {

ibv_mw* alloc_mw(ibv_pd* pd, ibv_mw_type type) {
  auto* mw = new (std::nothrow) ibv_mw{};
  if (!mw) {
    errno = ENOMEM;
    return nullptr;
  }
  abi::AllocMwRequest req{pd->handle, uint32_t(type), 0};
  abi::AllocMwReply rep;
  if (int err = to_uctx(pd->context)->conn.call(abi::CtlOp::kAllocMw, &req, sizeof(req), &rep, sizeof(rep))) {
    delete mw;
    errno = err;
    return nullptr;
  }
  mw->context = pd->context;
  mw->pd = pd;
  mw->rkey = rep.rkey;
  mw->handle = uint32_t(rep.handle);
  mw->type = type;
  return mw;
}

int dealloc_mw(ibv_mw* mw) {
  abi::HandleRequest req{mw->handle};
  int err = to_uctx(mw->context)->conn.call(abi::CtlOp::kDeallocMw, &req, sizeof(req), nullptr, 0);
  if (err && err != EIO) return err;
  delete mw;
  return 0;
}

// Type 1 (the inline ibv_bind_mw refused type 2 and a PD mismatch): posted
// as an IBV_WR_BIND_MW work request with the next key, as mlx5_bind_mw and
// rxe_bind_mw do; the window's rkey is the new one at once (the caller
// undoes it if the bind completes in error).
int bind_mw(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* mw_bind) {
  // o10-36.2.2: a type 1 window is never zero-based (mlx5 and rxe: EINVAL).
  if (mw_bind->bind_info.mw_access_flags & IBV_ACCESS_ZERO_BASED) return errno = EINVAL;
  ibv_send_wr wr{};
  wr.wr_id = mw_bind->wr_id;
  wr.opcode = IBV_WR_BIND_MW;
  wr.send_flags = mw_bind->send_flags;
  wr.bind_mw.mw = mw;
  wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
  wr.bind_mw.bind_info = mw_bind->bind_info;
  ibv_send_wr* bad = nullptr;
  if (int err = post_send(qp, &wr, &bad)) return errno = err;
  mw->rkey = wr.bind_mw.rkey;
  return 0;
}

}  // namespace uroce::provider
