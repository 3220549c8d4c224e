// Indirect memory keys in the drop-in libmlx5: mlx5dv_create_mkey and
// mlx5dv_destroy_mkey (rdma-core providers/mlx5/verbs.c _mlx5dv_create_mkey,
// which makes them with DevX; here the engine does, kCreateMkey), and the
// work requests that register their layouts: mlx5dv_wr_mr_list,
// mlx5dv_wr_mr_interleaved, mlx5dv_wr_mkey_configure and its setters
// (qp.c mlx5_send_wr_mr_list and after), each one kWrUmr WQE of the batch
// that the engine executes in order (device/mkey.cc). Signature and crypto
// mkeys are refused: this device reports neither.
#include <infiniband/mlx5dv.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

#include "uroce/abi_control.h"
#include "uroce/abi_rings.h"
#include "uroce/wr_opcodes.h"
#include "verbs_provider/mlx5/dv_qp.h"
#include "verbs_provider/mlx5/export.h"
#include "verbs_provider/provider.h"

namespace uroce::provider::mlx5 {
namespace {

struct UMkey {
  mlx5dv_mkey dv;  // first: the program's pointer is this struct's
  ibv_context* ctx;
  uint64_t handle;
  uint32_t num_desc;
};

UMkey* to_umkey(mlx5dv_mkey* m) { return reinterpret_cast<UMkey*>(m); }

constexpr uint32_t kMkeyAccess =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

UQp* qp_of(mlx5dv_qp_ex* mqp) { return to_uqp(dv_of(mqp)->qpx); }

void fail_batch(UQp* qp, int err) {
  if (!qp->batch_err) qp->batch_err = err;
}

// The registration being built: its WQE, or null (and the batch failed)
// when there is none.
abi::SendWqe* building(mlx5dv_qp_ex* mqp) {
  UQp* qp = qp_of(mqp);
  if (qp->batch_err) return nullptr;
  if (!dv_of(mqp)->umr.mkey || !qp->batch_cur || qp->batch_cur->opcode != kWrUmr) {
    fail_batch(qp, EINVAL);  // a setter with no mlx5dv_wr_mkey_configure before it
    return nullptr;
  }
  return qp->batch_cur;
}

void setter_done(mlx5dv_qp_ex* mqp) {
  UmrBuild& b = dv_of(mqp)->umr;
  if (b.setters_left && --b.setters_left == 0) b = UmrBuild{};
}

// mlx5_send_wr_mkey_configure: the WQE, posted with IBV_SEND_INLINE (mlx5
// requires it: EOPNOTSUPP), then num_setters setters fill it.
void wr_mkey_configure(mlx5dv_qp_ex* mqp, mlx5dv_mkey* mkey, uint8_t num_setters, mlx5dv_mkey_conf_attr* attr) {
  ibv_qp_ex* qpx = dv_of(mqp)->qpx;
  UQp* qp = to_uqp(qpx);
  if (qp->batch_err) return;
  if (!(qpx->wr_flags & IBV_SEND_INLINE)) return fail_batch(qp, EOPNOTSUPP);
  if ((attr->conf_flags & ~uint32_t(MLX5DV_MKEY_CONF_FLAG_RESET_SIG_ATTR)) || attr->comp_mask)
    return fail_batch(qp, EOPNOTSUPP);
  qpx->wr_send(qpx);  // a slot of the batch, with wr_id and flags, as any WQE
  abi::SendWqe* w = qp->batch_cur;
  if (!w) return;  // the batch already failed (full queue, ...)
  w->opcode = kWrUmr;
  // The layout travels in the SGE area, never as inline data: the engine
  // reads a local WQE's slots by num_sge.
  w->flags &= ~uint32_t(IBV_SEND_INLINE);
  w->umr = abi::UmrArgs{mkey->lkey, 0, abi::kUmrNoLayout, 0, 0, {}};
  DvQp* d = dv_of(mqp);
  d->umr = UmrBuild{num_setters ? mkey : nullptr, num_setters, false, false};
}

// mlx5_send_wr_set_mkey_access_flags: once per WQE (EINVAL twice).
void wr_set_mkey_access_flags(mlx5dv_qp_ex* mqp, uint32_t access_flags) {
  abi::SendWqe* w = building(mqp);
  if (!w) return;
  UmrBuild& b = dv_of(mqp)->umr;
  if ((access_flags & ~kMkeyAccess) || b.access_set) return fail_batch(qp_of(mqp), EINVAL);
  w->umr.access = access_flags;
  b.access_set = true;
  setter_done(mqp);
}

// mlx5_send_wr_set_mkey_layout: once per WQE (EINVAL twice); more entries
// than the mkey holds (an interleaved layout spends one on its header) or
// the WQE has room for: ENOMEM, as mlx5's max_entries check.
void set_layout(mlx5dv_qp_ex* mqp, uint32_t repeat_count, uint16_t n, const mlx5dv_mr_interleaved* data,
                const ibv_sge* sge) {
  abi::SendWqe* w = building(mqp);
  if (!w) return;
  UQp* qp = qp_of(mqp);
  UmrBuild& b = dv_of(mqp)->umr;
  if (b.layout_set) return fail_batch(qp, EINVAL);
  const uint32_t slots = (qp->sq.stride - uint32_t(sizeof(abi::SendWqe))) / uint32_t(sizeof(abi::Sge));
  const uint32_t desc = to_umkey(b.mkey)->num_desc;
  const uint32_t max = data ? std::min(slots / 2, desc - 1) : std::min(slots, desc);
  if (n > max) return fail_batch(qp, ENOMEM);
  auto* out = reinterpret_cast<abi::Sge*>(w + 1);
  for (uint32_t i = 0; i < n; ++i) {
    if (data) {
      out[2 * i] = abi::Sge{data[i].addr, data[i].bytes_count, data[i].lkey};
      out[2 * i + 1] = abi::Sge{data[i].bytes_skip, 0, 0};
    } else {
      out[i] = abi::Sge{sge[i].addr, sge[i].length, sge[i].lkey};
    }
  }
  w->num_sge = data ? 2u * n : n;
  w->umr.layout = data ? abi::kUmrInterleaved : abi::kUmrList;
  w->umr.repeat_count = data ? repeat_count : 0;
  w->umr.num_entries = n;
  b.layout_set = true;
  setter_done(mqp);
}

void wr_set_mkey_layout_list(mlx5dv_qp_ex* mqp, uint16_t num_sges, const ibv_sge* sge) {
  set_layout(mqp, 0, num_sges, nullptr, sge);
}

void wr_set_mkey_layout_interleaved(mlx5dv_qp_ex* mqp, uint32_t repeat_count, uint16_t num_interleaved,
                                    const mlx5dv_mr_interleaved* data) {
  set_layout(mqp, repeat_count, num_interleaved, data, nullptr);
}

// mlx5_send_wr_mr_list and _mr_interleaved: a configuration with its two
// setters.
void wr_mr_list(mlx5dv_qp_ex* mqp, mlx5dv_mkey* mkey, uint32_t access_flags, uint16_t num_sges, ibv_sge* sge) {
  mlx5dv_mkey_conf_attr attr{};
  wr_mkey_configure(mqp, mkey, 2, &attr);
  wr_set_mkey_access_flags(mqp, access_flags);
  wr_set_mkey_layout_list(mqp, num_sges, sge);
}

void wr_mr_interleaved(mlx5dv_qp_ex* mqp, mlx5dv_mkey* mkey, uint32_t access_flags, uint32_t repeat_count,
                       uint16_t num_interleaved, mlx5dv_mr_interleaved* data) {
  mlx5dv_mkey_conf_attr attr{};
  wr_mkey_configure(mqp, mkey, 2, &attr);
  wr_set_mkey_access_flags(mqp, access_flags);
  wr_set_mkey_layout_interleaved(mqp, repeat_count, num_interleaved, data);
}

// Signature and crypto setters: no mkey here has those contexts.
void wr_set_mkey_sig_block(mlx5dv_qp_ex* mqp, const mlx5dv_sig_block_attr*) { fail_batch(qp_of(mqp), EOPNOTSUPP); }
void wr_set_mkey_crypto(mlx5dv_qp_ex* mqp, const mlx5dv_crypto_attr*) { fail_batch(qp_of(mqp), EOPNOTSUPP); }

}  // namespace

void set_mkey_ops(DvQp* d, uint64_t dv_ops) {
  if (dv_ops & MLX5DV_QP_EX_WITH_MR_LIST) d->dv.wr_mr_list = wr_mr_list;
  if (dv_ops & MLX5DV_QP_EX_WITH_MR_INTERLEAVED) d->dv.wr_mr_interleaved = wr_mr_interleaved;
  if (dv_ops & MLX5DV_QP_EX_WITH_MKEY_CONFIGURE) {
    d->dv.wr_mkey_configure = wr_mkey_configure;
    d->dv.wr_set_mkey_access_flags = wr_set_mkey_access_flags;
    d->dv.wr_set_mkey_layout_list = wr_set_mkey_layout_list;
    d->dv.wr_set_mkey_layout_interleaved = wr_set_mkey_layout_interleaved;
    d->dv.wr_set_mkey_sig_block = wr_set_mkey_sig_block;
    d->dv.wr_set_mkey_crypto = wr_set_mkey_crypto;
  }
}

}  // namespace uroce::provider::mlx5

using uroce::provider::mlx5::UMkey;

// _mlx5dv_create_mkey's checks in its order: flags it does not know are
// EOPNOTSUPP (UPDATE_TAG among them: no MKEY_UPDATE_TAG_SUPPORTED), then a
// signature or crypto context this device cannot make (EOPNOTSUPP).
UROCE_MLX5_EXPORT mlx5dv_mkey* mlx5dv_create_mkey(mlx5dv_mkey_init_attr* attr) {
  using namespace uroce::provider;
  ibv_pd* pd = attr ? attr->pd : nullptr;
  if (!pd || !mlx5::is_mlx5_context(pd->context)) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  constexpr uint32_t kFlags = MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT | MLX5DV_MKEY_INIT_ATTR_FLAGS_BLOCK_SIGNATURE |
                              MLX5DV_MKEY_INIT_ATTR_FLAGS_CRYPTO | MLX5DV_MKEY_INIT_ATTR_FLAGS_REMOTE_INVALIDATE;
  if (!attr->create_flags || (attr->create_flags & ~kFlags) ||
      (attr->create_flags & (MLX5DV_MKEY_INIT_ATTR_FLAGS_BLOCK_SIGNATURE | MLX5DV_MKEY_INIT_ATTR_FLAGS_CRYPTO))) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  auto* m = new (std::nothrow) UMkey{};
  if (!m) {
    errno = ENOMEM;
    return nullptr;
  }
  const uint32_t flags =
      attr->create_flags & MLX5DV_MKEY_INIT_ATTR_FLAGS_REMOTE_INVALIDATE ? uroce::abi::kMkeyRemoteInvalidate : 0;
  uroce::abi::CreateMkeyRequest req{pd->handle, flags, attr->max_entries};
  uroce::abi::CreateMkeyReply rep{};
  if (int err = to_uctx(pd->context)->conn.call(uroce::abi::CtlOp::kCreateMkey, &req, sizeof(req), &rep,
                                                 sizeof(rep))) {
    delete m;
    errno = err;
    return nullptr;
  }
  m->dv = mlx5dv_mkey{rep.key, rep.key};
  m->ctx = pd->context;
  m->handle = rep.handle;
  m->num_desc = rep.num_desc;
  attr->max_entries = uint16_t(rep.num_desc);  // mlx5 gives back the rounded count
  return &m->dv;
}

UROCE_MLX5_EXPORT int mlx5dv_destroy_mkey(mlx5dv_mkey* dv_mkey) {
  using namespace uroce::provider;
  UMkey* m = mlx5::to_umkey(dv_mkey);
  uroce::abi::HandleRequest req{m->handle};
  int err = to_uctx(m->ctx)->conn.call(uroce::abi::CtlOp::kDestroyMkey, &req, sizeof(req), nullptr, 0);
  if (err && err != EIO) return err;  // EIO: the engine is gone, and the mkey with it
  delete m;
  return 0;
}
