// mlx5dv_devx_alloc_uar and mlx5dv_devx_free_uar: a UAR page of the
// program's own, which a ConnectX hands out without DevX too (rdma-core 44
// providers/mlx5/verbs.c _mlx5dv_devx_alloc_uar: a dedicated page through
// the kernel's UAR object for MLX5DV_UAR_ALLOC_TYPE_BF, the context's one
// non-cached page for _NC, freed by nothing). Without DevX no queue can be
// made to ring it, so on uroce it is a page whose doorbells go nowhere, as
// a ConnectX's unused UAR: `reg_addr` is its BlueFlame register
// (MLX5_BF_OFFSET into the page), `page_id` an index of this process's
// own, and `mmap_off` 0 (there is no device file to map it from again).
#include <infiniband/mlx5dv.h>
#include <sys/mman.h>

#include <atomic>
#include <cerrno>
#include <new>

#include "verbs_provider/mlx5/dv_qp.h"
#include "verbs_provider/mlx5/export.h"
#include "verbs_provider/provider.h"

namespace uroce::provider::mlx5 {
namespace {

constexpr size_t kUarPageSize = 4096;
constexpr size_t kBfOffset = 0x800;  // MLX5_BF_OFFSET (providers/mlx5/mlx5.h)

struct UarPage {
  mlx5dv_devx_uar dv{};  // first: the pointer programs hold is the page's
  bool singleton = false;
};

std::atomic<uint32_t> next_page_id{1};

UarPage* new_page(bool singleton) {
  void* base = mmap(nullptr, kUarPageSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) {
    errno = ENOMEM;
    return nullptr;
  }
  auto* u = new (std::nothrow) UarPage;
  if (!u) {
    munmap(base, kUarPageSize);
    errno = ENOMEM;
    return nullptr;
  }
  u->dv.base_addr = base;
  u->dv.reg_addr = static_cast<uint8_t*>(base) + kBfOffset;
  u->dv.page_id = next_page_id.fetch_add(1, std::memory_order_relaxed);
  u->dv.mmap_off = 0;
  u->dv.comp_mask = 0;
  u->singleton = singleton;
  return u;
}

void free_page(void* p) {
  auto* u = static_cast<UarPage*>(p);
  munmap(u->dv.base_addr, kUarPageSize);
  delete u;
}

// The context's non-cached page (mlx5_get_singleton_nc_uar), made once.
UarPage* nc_page(UContext* c) {
  if (void* v = c->vendor.load(std::memory_order_acquire)) return static_cast<UarPage*>(v);
  UarPage* u = new_page(true);
  if (!u) return nullptr;
  void* expected = nullptr;
  if (!c->vendor.compare_exchange_strong(expected, u, std::memory_order_acq_rel)) {
    free_page(u);
    return static_cast<UarPage*>(expected);
  }
  c->vendor_free = free_page;
  return u;
}

}  // namespace

}  // namespace uroce::provider::mlx5

using namespace uroce::provider;

UROCE_MLX5_EXPORT mlx5dv_devx_uar* mlx5dv_devx_alloc_uar(ibv_context* context, uint32_t flags) {
  if (!mlx5::is_mlx5_context(context)) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  if (flags & ~uint32_t(MLX5DV_UAR_ALLOC_TYPE_NC)) {  // check_comp_mask
    errno = EOPNOTSUPP;
    return nullptr;
  }
  mlx5::UarPage* u =
      flags & MLX5DV_UAR_ALLOC_TYPE_NC ? mlx5::nc_page(to_uctx(context)) : mlx5::new_page(false);
  return u ? &u->dv : nullptr;
}

UROCE_MLX5_EXPORT void mlx5dv_devx_free_uar(mlx5dv_devx_uar* devx_uar) {
  if (!devx_uar) return;
  auto* u = reinterpret_cast<mlx5::UarPage*>(devx_uar);
  if (u->singleton) return;  // the context's, freed with it (_mlx5dv_devx_free_uar: nc_mode)
  mlx5::free_page(u);
}
