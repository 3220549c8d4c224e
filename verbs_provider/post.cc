// The datapath: posting work requests into the shared-memory rings. No
// syscall per work request: the doorbell eventfd is written only when the
// engine has announced that it sleeps.
#include <cerrno>
#include <cstring>

#include "uroce/wr_opcodes.h"
#include "verbs_provider/provider.h"

namespace uroce::provider {

namespace {

// What each transport executes, as the engine reads it (uroce/wr_opcodes.h).
// The only driver QP is a DC initiator the drop-in libmlx5 made: RC's.
uint32_t allowed_ops(ibv_qp_type t) { return allowed_wr_ops(t == IBV_QPT_DRIVER ? IBV_QPT_RC : t); }

bool sq_full(const UQp* qp) {
  return qp->sq.prod - qp->sq.hdr->consumer.load(std::memory_order_acquire) >= qp->sq.size();
}

uint8_t* wqe_body(abi::SendWqe* w) { return reinterpret_cast<uint8_t*>(w + 1); }

int fill_sges(UQp* qp, abi::SendWqe* w, const ibv_sge* sg, int num_sge, bool inl) {
  if (num_sge < 0 || uint32_t(num_sge) > qp->caps.max_send_sge) return EINVAL;
  if (inl) {
    if (is_rd_atomic(w->opcode)) return EINVAL;
    size_t total = 0;
    for (int i = 0; i < num_sge; ++i) total += sg[i].length;
    if (total > qp->caps.max_inline_data) return EINVAL;
    uint8_t* dst = wqe_body(w);
    for (int i = 0; i < num_sge; ++i) {
      std::memcpy(dst, reinterpret_cast<const void*>(uintptr_t(sg[i].addr)), sg[i].length);
      dst += sg[i].length;
    }
    w->inline_len = uint32_t(total);
    w->num_sge = 0;
    return 0;
  }
  auto* out = reinterpret_cast<abi::Sge*>(wqe_body(w));
  for (int i = 0; i < num_sge; ++i) out[i] = {sg[i].addr, sg[i].length, sg[i].lkey};
  w->num_sge = uint32_t(num_sge);
  return 0;
}

// IBV_WR_BIND_MW: the window by its R_Key, the region by its lkey. No
// SGEs (mlx5 ignores the list). A region is needed unless the length is 0.
int fill_bind(abi::SendWqe* w, const ibv_mw* mw, uint32_t rkey, const ibv_mw_bind_info* info) {
  if (!mw || !info || (info->length && !info->mr)) return EINVAL;
  w->bind = {mw->rkey, rkey, info->mr ? info->mr->lkey : 0u, info->mw_access_flags, info->addr,
             info->length};
  return 0;
}

// Opcodes ibv_post_send takes on a QP of `type`. UD and UC QPs take RC's
// too: the ones their transport lacks (RDMA and atomics on UD, READ and
// atomics on UC) complete with IBV_WC_LOC_QP_OP_ERR, as on mlx5 (its
// _mlx5_post_send, providers/mlx5/qp.c, builds no remote-address segment
// for them and the HCA fails the WQE) and rxe (its validate_send_wr does not
// look at the QP type; rxe_req.c's next_opcode finds none).
uint32_t postable_ops(ibv_qp_type t) {
  return t == IBV_QPT_UD || t == IBV_QPT_UC ? allowed_ops(IBV_QPT_RC) : allowed_ops(t);
}

int build_send_wqe(UQp* qp, const ibv_send_wr* wr, abi::SendWqe* w) {
  const ibv_qp_type type = qp->qpx.qp_base.qp_type;
  // DC: a DCT sends nothing; a DCI's work request names its target, which
  // ibv_send_wr has no field for (mlx5dv_wr_set_dc_addr, ibv_wr_* only).
  if (type == IBV_QPT_DRIVER) return EINVAL;
  if (unsigned(wr->opcode) >= 32 || !(postable_ops(type) & (1u << wr->opcode))) return EINVAL;
  const bool carried = allowed_ops(type) & (1u << wr->opcode);
  // ibv_send_wr has no field for ATOMIC WRITE's 8 bytes: ibv_wr_atomic_write
  // only (rxe's ibv_post_send takes the opcode but sends neither the bytes
  // nor the R_Key; mlx5 has no ATOMIC WRITE).
  if (wr->opcode == IBV_WR_ATOMIC_WRITE) return EINVAL;
  std::memset(w, 0, sizeof(*w));
  w->wr_id = wr->wr_id;
  w->opcode = wr->opcode;
  w->flags = wr->send_flags;
  w->imm_data = wr->opcode == IBV_WR_SEND_WITH_INV || wr->opcode == IBV_WR_LOCAL_INV
                    ? wr->invalidate_rkey
                    : wr->imm_data;
  switch (wr->opcode) {
    case IBV_WR_BIND_MW:
      return fill_bind(w, wr->bind_mw.mw, wr->bind_mw.rkey, &wr->bind_mw.bind_info);
    case IBV_WR_LOCAL_INV:
      return 0;  // the R_Key in imm_data, nothing else
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
    case IBV_WR_RDMA_READ:
      w->remote_addr = wr->wr.rdma.remote_addr;
      w->rkey = wr->wr.rdma.rkey;
      break;
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      w->remote_addr = wr->wr.atomic.remote_addr;
      w->rkey = wr->wr.atomic.rkey;
      w->compare_add = wr->wr.atomic.compare_add;
      w->swap = wr->wr.atomic.swap;
      break;
    default:
      break;
  }
  if (type == IBV_QPT_XRC_SEND) w->xrc_remote_srqn = wr->qp_type.xrc.remote_srqn;
  // An opcode the transport cannot carry: the engine completes it with
  // LOC_QP_OP_ERR; wr.ud, a union with wr.rdma, holds no address then.
  if (type == IBV_QPT_UD && carried) {
    if (!wr->wr.ud.ah) return EINVAL;
    w->av = reinterpret_cast<const UAh*>(wr->wr.ud.ah)->av;
    w->remote_qpn = wr->wr.ud.remote_qpn;
    w->remote_qkey = wr->wr.ud.remote_qkey;
  }
  return fill_sges(qp, w, wr->sg_list, wr->num_sge, wr->send_flags & IBV_SEND_INLINE);
}

// ---- ibv_wr_* (extended QP) ------------------------------------------------

abi::SendWqe* begin_wqe(ibv_qp_ex* qpx, ibv_wr_opcode opcode) {
  UQp* qp = to_uqp(qpx);
  if (qp->batch_err) return nullptr;
  if (!(allowed_ops(qpx->qp_base.qp_type) & (1u << opcode))) {
    qp->batch_err = EINVAL;
    return nullptr;
  }
  if (sq_full(qp)) {
    qp->batch_err = ENOMEM;
    return nullptr;
  }
  auto* w = reinterpret_cast<abi::SendWqe*>(qp->sq.slot(qp->sq.prod++));
  std::memset(w, 0, sizeof(*w));
  w->wr_id = qpx->wr_id;
  w->flags = qpx->wr_flags;
  w->opcode = opcode;
  qp->batch_cur = w;
  return w;
}

void wr_send(ibv_qp_ex* q) { begin_wqe(q, IBV_WR_SEND); }
void wr_send_imm(ibv_qp_ex* q, __be32 imm) {
  if (auto* w = begin_wqe(q, IBV_WR_SEND_WITH_IMM)) w->imm_data = imm;
}
void wr_send_inv(ibv_qp_ex* q, uint32_t rkey) {
  if (auto* w = begin_wqe(q, IBV_WR_SEND_WITH_INV)) w->imm_data = rkey;
}
void wr_rdma_write(ibv_qp_ex* q, uint32_t rkey, uint64_t addr) {
  if (auto* w = begin_wqe(q, IBV_WR_RDMA_WRITE)) w->rkey = rkey, w->remote_addr = addr;
}
void wr_rdma_write_imm(ibv_qp_ex* q, uint32_t rkey, uint64_t addr, __be32 imm) {
  if (auto* w = begin_wqe(q, IBV_WR_RDMA_WRITE_WITH_IMM))
    w->rkey = rkey, w->remote_addr = addr, w->imm_data = imm;
}
void wr_rdma_read(ibv_qp_ex* q, uint32_t rkey, uint64_t addr) {
  if (auto* w = begin_wqe(q, IBV_WR_RDMA_READ)) w->rkey = rkey, w->remote_addr = addr;
}
void wr_atomic_cmp_swp(ibv_qp_ex* q, uint32_t rkey, uint64_t addr, uint64_t compare, uint64_t swap) {
  if (auto* w = begin_wqe(q, IBV_WR_ATOMIC_CMP_AND_SWP))
    w->rkey = rkey, w->remote_addr = addr, w->compare_add = compare, w->swap = swap;
}
void wr_atomic_fetch_add(ibv_qp_ex* q, uint32_t rkey, uint64_t addr, uint64_t add) {
  if (auto* w = begin_wqe(q, IBV_WR_ATOMIC_FETCH_AND_ADD))
    w->rkey = rkey, w->remote_addr = addr, w->compare_add = add;
}
void unsupported_op(ibv_qp_ex* q) {
  if (!to_uqp(q)->batch_err) to_uqp(q)->batch_err = EOPNOTSUPP;
}
void wr_bind_mw(ibv_qp_ex* q, ibv_mw* mw, uint32_t rkey, const ibv_mw_bind_info* info) {
  if (auto* w = begin_wqe(q, IBV_WR_BIND_MW))
    if (int e = fill_bind(w, mw, rkey, info)) to_uqp(q)->batch_err = e;
}
void wr_local_inv(ibv_qp_ex* q, uint32_t rkey) {
  if (auto* w = begin_wqe(q, IBV_WR_LOCAL_INV)) w->imm_data = rkey;
}
void wr_send_tso(ibv_qp_ex* q, void*, uint16_t, uint16_t) { unsupported_op(q); }
void wr_atomic_write(ibv_qp_ex* q, uint32_t rkey, uint64_t addr, const void* atomic_wr) {
  // The 8 bytes are taken now, as rxe's wr_atomic_write copies them (no SGE).
  if (auto* w = begin_wqe(q, IBV_WR_ATOMIC_WRITE)) {
    w->rkey = rkey, w->remote_addr = addr;
    std::memcpy(&w->compare_add, atomic_wr, 8);
  }
}
void wr_set_xrc_srqn(ibv_qp_ex* q, uint32_t remote_srqn) {
  UQp* qp = to_uqp(q);
  if (qp->batch_err || !qp->batch_cur) return;
  if (q->qp_base.qp_type != IBV_QPT_XRC_SEND) {
    qp->batch_err = EINVAL;
    return;
  }
  qp->batch_cur->xrc_remote_srqn = remote_srqn;
}

void wr_set_ud_addr(ibv_qp_ex* q, ibv_ah* ah, uint32_t remote_qpn, uint32_t remote_qkey) {
  UQp* qp = to_uqp(q);
  if (qp->batch_err || !qp->batch_cur) return;
  if (!ah) {
    qp->batch_err = EINVAL;
    return;
  }
  qp->batch_cur->av = reinterpret_cast<const UAh*>(ah)->av;
  qp->batch_cur->remote_qpn = remote_qpn;
  qp->batch_cur->remote_qkey = remote_qkey;
}

void wr_set_sge(ibv_qp_ex* q, uint32_t lkey, uint64_t addr, uint32_t length) {
  UQp* qp = to_uqp(q);
  if (qp->batch_err || !qp->batch_cur) return;
  ibv_sge sge{addr, length, lkey};
  if (int e = fill_sges(qp, qp->batch_cur, &sge, 1, false)) qp->batch_err = e;
}

void wr_set_sge_list(ibv_qp_ex* q, size_t num_sge, const ibv_sge* list) {
  UQp* qp = to_uqp(q);
  if (qp->batch_err || !qp->batch_cur) return;
  if (int e = fill_sges(qp, qp->batch_cur, list, int(num_sge), false)) qp->batch_err = e;
}

void wr_set_inline_data_list(ibv_qp_ex* q, size_t num_buf, const ibv_data_buf* bufs) {
  UQp* qp = to_uqp(q);
  if (qp->batch_err || !qp->batch_cur) return;
  abi::SendWqe* w = qp->batch_cur;
  size_t total = 0;
  for (size_t i = 0; i < num_buf; ++i) total += bufs[i].length;
  if (total > qp->caps.max_inline_data || is_rd_atomic(w->opcode)) {
    qp->batch_err = EINVAL;
    return;
  }
  uint8_t* dst = wqe_body(w);
  for (size_t i = 0; i < num_buf; ++i) {
    std::memcpy(dst, bufs[i].addr, bufs[i].length);
    dst += bufs[i].length;
  }
  w->flags |= IBV_SEND_INLINE;
  w->inline_len = uint32_t(total);
  w->num_sge = 0;
}

void wr_set_inline_data(ibv_qp_ex* q, void* addr, size_t length) {
  ibv_data_buf buf{addr, length};
  wr_set_inline_data_list(q, 1, &buf);
}

void wr_start(ibv_qp_ex* q) {
  UQp* qp = to_uqp(q);
  qp->sq_mu.lock();
  qp->batch_start = qp->sq.prod;
  qp->batch_cur = nullptr;
  qp->batch_err = 0;
}

int wr_complete(ibv_qp_ex* q) {
  UQp* qp = to_uqp(q);
  const int err = q->qp_base.state < IBV_QPS_RTS ? EINVAL : qp->sq_vendor_owned ? EOPNOTSUPP : qp->batch_err;
  if (err) {
    qp->sq.prod = qp->batch_start;
  } else if (qp->sq.prod != qp->batch_start) {
    qp->sq.hdr->producer.store(qp->sq.prod, std::memory_order_release);
    qp->ctx->ring_doorbell();
  }
  qp->batch_cur = nullptr;
  qp->sq_mu.unlock();
  return err;
}

void wr_abort(ibv_qp_ex* q) {
  UQp* qp = to_uqp(q);
  qp->sq.prod = qp->batch_start;
  qp->batch_cur = nullptr;
  qp->sq_mu.unlock();
}

}  // namespace

void fill_qp_ex_ops(UQp* qp) {
  ibv_qp_ex& x = qp->qpx;
  x.wr_atomic_cmp_swp = wr_atomic_cmp_swp;
  x.wr_atomic_fetch_add = wr_atomic_fetch_add;
  x.wr_bind_mw = wr_bind_mw;
  x.wr_local_inv = wr_local_inv;
  x.wr_rdma_read = wr_rdma_read;
  x.wr_rdma_write = wr_rdma_write;
  x.wr_rdma_write_imm = wr_rdma_write_imm;
  x.wr_send = wr_send;
  x.wr_send_imm = wr_send_imm;
  x.wr_send_inv = wr_send_inv;
  x.wr_send_tso = wr_send_tso;
  x.wr_set_ud_addr = wr_set_ud_addr;
  x.wr_set_xrc_srqn = wr_set_xrc_srqn;
  x.wr_set_inline_data = wr_set_inline_data;
  x.wr_set_inline_data_list = wr_set_inline_data_list;
  x.wr_set_sge = wr_set_sge;
  x.wr_set_sge_list = wr_set_sge_list;
  x.wr_start = wr_start;
  x.wr_complete = wr_complete;
  x.wr_abort = wr_abort;
  x.wr_atomic_write = wr_atomic_write;
}

int post_send(ibv_qp* ibqp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  UQp* qp = to_uqp(ibqp);
  if (qp->ctx->engine_gone) {
    *bad_wr = wr;
    return EIO;
  }
  if (qp->opened || ibqp->qp_type == IBV_QPT_XRC_RECV ||  // no send queue
      ibqp->state < IBV_QPS_RTS) {  // RESET, INIT, RTR: nothing may be sent yet (mlx5)
    *bad_wr = wr;
    return EINVAL;
  }
  int err = 0;
  std::lock_guard<std::mutex> lock(qp->sq_mu);
  if (qp->sq_vendor_owned) [[unlikely]] {
    *bad_wr = wr;  // its queue holds mlx5 WQEs the program writes (docs/mlx5.md)
    return EOPNOTSUPP;
  }
  const uint32_t start = qp->sq.prod;
  for (; wr; wr = wr->next) {
    if (sq_full(qp)) {
      err = ENOMEM;
      break;
    }
    auto* w = reinterpret_cast<abi::SendWqe*>(qp->sq.slot(qp->sq.prod));
    if ((err = build_send_wqe(qp, wr, w))) break;
    ++qp->sq.prod;
  }
  if (err) *bad_wr = wr;
  if (qp->sq.prod != start) {
    qp->sq.hdr->producer.store(qp->sq.prod, std::memory_order_release);
    qp->ctx->ring_doorbell();
  }
  return err;
}

int post_recv(ibv_qp* ibqp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  UQp* qp = to_uqp(ibqp);
  if (qp->ctx->engine_gone) {
    *bad_wr = wr;
    return EIO;
  }
  // Receives of an SRQ-attached or XRC QP come from an SRQ (rxe: EINVAL).
  // An RSS QP's receives are posted on its WQs (it has no RQ: rdma-core
  // libibverbs/cmd_qp.c).
  if (qp->has_srq || qp->opened || qp->rss || ibqp->qp_type == IBV_QPT_XRC_SEND ||
      ibqp->qp_type == IBV_QPT_XRC_RECV || ibqp->state == IBV_QPS_RESET) {
    *bad_wr = wr;
    return EINVAL;
  }
  int err = 0;
  std::lock_guard<std::mutex> lock(qp->rq_mu);
  if (qp->rq_vendor_owned) [[unlikely]] {
    *bad_wr = wr;  // its queue holds mlx5 WQEs the program writes (docs/mlx5.md)
    return EOPNOTSUPP;
  }
  const uint32_t start = qp->rq.prod;
  for (; wr; wr = wr->next) {
    if (wr->num_sge < 0 || uint32_t(wr->num_sge) > qp->caps.max_recv_sge) {
      err = EINVAL;
      break;
    }
    if (qp->rq.prod - qp->rq.hdr->consumer.load(std::memory_order_acquire) >= qp->rq.size()) {
      err = ENOMEM;
      break;
    }
    uint8_t* slot = qp->rq.slot(qp->rq.prod);
    abi::RecvWqe hdr{wr->wr_id, uint32_t(wr->num_sge), 0};
    std::memcpy(slot, &hdr, sizeof(hdr));
    auto* sge = reinterpret_cast<abi::Sge*>(slot + sizeof(hdr));
    for (int i = 0; i < wr->num_sge; ++i)
      sge[i] = {wr->sg_list[i].addr, wr->sg_list[i].length, wr->sg_list[i].lkey};
    ++qp->rq.prod;
  }
  if (err) *bad_wr = wr;
  if (qp->rq.prod != start) {
    qp->rq.hdr->producer.store(qp->rq.prod, std::memory_order_release);
    qp->ctx->ring_doorbell();
  }
  return err;
}

}  // namespace uroce::provider
