// Thread domains and parent domains (ibv_alloc_td, ibv_dealloc_td,
// ibv_alloc_parent_domain; ibv_dealloc_pd of a parent domain), as mlx5 has
// them (providers/mlx5/verbs.c): a parent domain is a PD in everything the
// engine sees, plus the application's allocator and a thread domain.
//
// The allocator: mlx5 asks it for each QP's, CQ's and SRQ's buffers (the
// rings the HCA reads). uroce's rings are memfds the engine creates and both
// sides map, which no application memory can stand in for, so the allocator
// is asked for what the provider keeps of each queue beside the rings: its
// UQp, UCq or USrq (cursors, locks, the ibv_qp_ex/ibv_cq_ex the application
// holds), with mlx5dv's resource types. IBV_ALLOCATOR_USE_DEFAULT falls back
// to the provider's own memory, NULL fails the creation (ENOMEM), and free is
// called with what alloc gave, as mlx5_alloc_buf_extern/mlx5_free_buf_extern.
#include <cerrno>
#include <cstdlib>

#include "verbs_provider/provider.h"

namespace uroce::provider {

namespace {

bool from_allocator(const UPd* pd) { return pd && pd->protection_domain && pd->alloc && pd->free; }

}  // namespace

bool is_parent_domain(ibv_pd* pd) { return pd && to_upd(pd)->protection_domain; }

void* alloc_queue_memory(ibv_pd* pd, size_t size, uint64_t type, QueueMemory* out) {
  UPd* u = pd ? to_upd(pd) : nullptr;
  *out = {};
  void* p = nullptr;
  if (from_allocator(u)) {
    p = u->alloc(pd, u->pd_context, size, kQueueObjectAlign, type);
    if (!p) {
      errno = ENOMEM;
      return nullptr;
    }
    out->from_app = p != IBV_ALLOCATOR_USE_DEFAULT;
  }
  if (!out->from_app) {
    p = ::operator new(size, std::align_val_t(kQueueObjectAlign), std::nothrow);
    if (!p) {
      errno = ENOMEM;
      return nullptr;
    }
  }
  // mlx5: each QP, CQ and SRQ on a parent domain holds it.
  if (u && u->protection_domain) {
    u->refcount.fetch_add(1);
    out->parent = u;
  }
  return p;
}

void free_queue_memory(void* p, const QueueMemory& m, uint64_t type) {
  if (m.from_app)
    m.parent->free(&m.parent->pd, m.parent->pd_context, p, type);
  else
    ::operator delete(p, std::align_val_t(kQueueObjectAlign));
  if (m.parent) m.parent->refcount.fetch_sub(1);
}

ibv_td* alloc_td(ibv_context* context, ibv_td_init_attr* attr) {
  if (attr->comp_mask) {  // mlx5_alloc_td
    errno = EINVAL;
    return nullptr;
  }
  auto* td = new (std::nothrow) UTd{};
  if (!td) {
    errno = ENOMEM;
    return nullptr;
  }
  td->td.context = context;
  return &td->td;
}

int dealloc_td(ibv_td* td) {
  auto* u = reinterpret_cast<UTd*>(td);
  if (u->refcount.load() > 1) return EBUSY;  // a parent domain still uses it (mlx5_dealloc_td)
  delete u;
  return 0;
}

ibv_pd* alloc_parent_domain(ibv_context* context, ibv_parent_domain_init_attr* attr) {
  // libibverbs' ibv_check_alloc_parent_domain, then mlx5's comp_mask check.
  // A parent domain over a parent domain is refused too: its PD would be a
  // wrapper, not a PD (mlx5 does not check and misbehaves).
  const uint32_t known = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
  if (!attr->pd || attr->pd->context != context || (attr->td && attr->td->context != context) ||
      (attr->comp_mask & ~known) || is_parent_domain(attr->pd)) {
    errno = EINVAL;
    return nullptr;
  }
  auto* pd = new (std::nothrow) UPd{};
  if (!pd) {
    errno = ENOMEM;
    return nullptr;
  }
  pd->protection_domain = to_upd(attr->pd);
  pd->protection_domain->refcount.fetch_add(1);
  if (attr->td) {
    pd->td = reinterpret_cast<UTd*>(attr->td);
    pd->td->refcount.fetch_add(1);
  }
  if (attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS) {
    pd->alloc = attr->alloc;
    pd->free = attr->free;
  }
  if (attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT) pd->pd_context = attr->pd_context;
  pd->pd.context = context;
  pd->pd.handle = attr->pd->handle;
  return &pd->pd;
}

// mlx5_dealloc_parent_domain: EBUSY while a QP, CQ or SRQ is on it.
int dealloc_parent_domain(UPd* pd) {
  if (pd->refcount.load() > 1) return EBUSY;
  pd->protection_domain->refcount.fetch_sub(1);
  if (pd->td) pd->td->refcount.fetch_sub(1);
  delete pd;
  return 0;
}

}  // namespace uroce::provider
