// mlx5-format send queues: see mlx5_sq.h.
#include "device/mlx5_sq.h"

#include <endian.h>

#include <algorithm>
#include <cstring>

#include "device/device.h"
#include "uroce/mlx5_wqe.h"
#include "uroce/wr_opcodes.h"

namespace uroce::device {

namespace {

constexpr uint32_t kBb = abi::kMlx5SendBasicBlock;
// The largest WQE: ds is 6 bits of 16-byte units (mlx5_wqe_ctrl_seg.qpn_ds).
constexpr uint32_t kMaxWqeBytes = 63 * mlx5::kSegBytes;

// Basic blocks a WQE of `sq_stride`-sized work requests may need: the control
// and remote address segments, an atomic segment, then the data (one 16-byte
// segment per SGE, or the inline bytes after their 4-byte count), as
// providers/mlx5/verbs.c sq_overhead + calc_send_wqe sizes them.
uint32_t bbs_per_wqe(const abi::QpCaps& caps) {
  const uint32_t data = std::max<uint32_t>(caps.max_send_sge * mlx5::kSegBytes,
                                 (4 + caps.max_inline_data + mlx5::kSegBytes - 1) / mlx5::kSegBytes * mlx5::kSegBytes);
  const uint32_t bytes = std::min<uint32_t>(3 * mlx5::kSegBytes + data, kMaxWqeBytes);
  return (bytes + kBb - 1) / kBb;
}

uint32_t round_pow2(uint32_t v) {
  uint32_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

}  // namespace

bool mlx5_sq_posted(const Qp& qp, uint32_t* end) {
  const Qp::Mlx5Sq& sq = *qp.mlx5_sq;
  *end = be32toh(sq.dbrec[1].load(std::memory_order_acquire)) & 0xffff;
  return ((*end - qp.sq_user_fetched) & 0xffff) <= sq.wqe_cnt;
}

bool mlx5_take_wqe(Qp& qp, uint32_t end, abi::SendWqe& w, uint32_t body) {
  const Qp::Mlx5Sq& sq = *qp.mlx5_sq;
  const uint32_t mask = sq.wqe_cnt - 1;
  const uint32_t first = qp.sq_user_fetched & 0xffff;
  const uint32_t waiting = (end - first) & 0xffff;
  // A private copy, block by block (the WQE may wrap around the queue's end):
  // the program may be rewriting the queue, so nothing is read twice.
  alignas(16) uint8_t wqe[(kMaxWqeBytes + kBb - 1) / kBb * kBb];
  std::memcpy(wqe, sq.bbs + size_t(first & mask) * kBb, kBb);
  mlx5::CtrlSeg ctrl;
  std::memcpy(&ctrl, wqe, sizeof(ctrl));
  const uint32_t ds = be32toh(ctrl.qpn_ds) & 0x3f;
  const uint32_t nbb = std::max(1u, uint32_t((ds * mlx5::kSegBytes + kBb - 1) / kBb));
  std::memset(&w, 0, sizeof(w));
  w.wr_id = (be32toh(ctrl.opmod_idx_opcode) >> 8) & 0xffff;
  if (nbb > waiting) {  // its doorbell did not cover it: take what was rung
    qp.sq_user_fetched = end;
    return false;
  }
  for (uint32_t i = 1; i < nbb; ++i)
    std::memcpy(wqe + size_t(i) * kBb, sq.bbs + size_t((first + i) & mask) * kBb, kBb);
  qp.sq_user_fetched = (first + nbb) & 0xffff;

  if ((be32toh(ctrl.opmod_idx_opcode) & 0xff) == mlx5::kOpNop) {
    // No data: it completes in order, as UCX's flush relies on.
    w.opcode = uroce::kWrNop;
    if (ctrl.fm_ce_se & mlx5::kCtrlCqUpdate) w.flags |= IBV_SEND_SIGNALED;
    return true;
  }
  mlx5::DecodedSend d;
  if (mlx5::decode_send_wqe(wqe, size_t(nbb) * kBb, &d)) return false;
  w.opcode = d.opcode;
  w.flags = d.send_flags;
  w.imm_data = d.imm;
  w.rkey = d.rkey;
  w.remote_addr = d.remote_addr;
  w.compare_add = d.compare_add;
  w.swap = d.swap;
  // The SGEs first, then the inline bytes (all of the data, or the head of
  // it: abi::kSendFlagInlineHead), as far as the copy's body holds them.
  auto* out = reinterpret_cast<uint8_t*>(&w + 1);
  w.num_sge = d.num_sge;
  for (uint32_t i = 0; i < d.num_sge && (i + 1) * sizeof(abi::Sge) <= body; ++i) {
    const abi::Sge sge{d.sge[i].addr, d.sge[i].length, d.sge[i].lkey};
    std::memcpy(out + i * sizeof(abi::Sge), &sge, sizeof(sge));
  }
  uint32_t at = std::min<uint32_t>(d.num_sge * sizeof(abi::Sge), body);
  const uint32_t inline_start = at;
  for (uint32_t i = 0; i < d.num_inline; ++i) {
    const uint32_t len = uint32_t(d.inline_bufs[i].length);
    if (at < body) std::memcpy(out + at, d.inline_bufs[i].addr, std::min(len, body - at));
    at += len;
  }
  w.inline_len = at - inline_start;
  if (d.num_inline && d.num_sge) w.flags |= abi::kSendFlagInlineHead;
  return true;
}

// ---------------------------------------------------------------- Device

int Device::qp_to_mlx5(Owner* o, uint32_t qpn, abi::Mlx5QpFormatReply* rep, int* fd) {
  Qp* qp = this->qp(qpn);
  if (!qp || qp->owner != o) return EINVAL;  // RC and UC: the creator's alone
  if (!config_.mlx5) return EOPNOTSUPP;
  if (qp->type != IBV_QPT_RC && qp->type != IBV_QPT_UC) return EOPNOTSUPP;
  // Receives keep uroce's format: only a QP that takes them from an SRQ
  // can be handed out whole (rc_mlx5's are).
  if (!qp->srq) return EOPNOTSUPP;
  if (qp->mlx5_sq) return EINVAL;  // the provider asks once per QP
  if ((qp->state != IBV_QPS_RESET && qp->state != IBV_QPS_INIT) || qp->sq_fetched != 0 ||
      qp->sq.hdr->producer.load(std::memory_order_acquire) != 0)
    return EBUSY;  // work requests went to uroce's ring already
  // Room for max_send_wr of the largest work requests the QP's caps allow
  // (the requester takes no more at a time than its sequence holds).
  // At least 16 (UCX keeps 8 basic blocks spare), at most half the 16-bit
  // index space.
  const uint32_t wqe_cnt = std::min(round_pow2(std::max(qp->sq.size() * bbs_per_wqe(qp->caps), 16u)), 1u << 15);
  auto sq = std::make_unique<Qp::Mlx5Sq>();
  if (int e = sq->mem.create("uroce-mlx5-sq", abi::kMlx5QpSqOffset + size_t(wqe_cnt) * abi::kMlx5SendBasicBlock))
    return e;
  sq->bbs = sq->mem.base() + abi::kMlx5QpSqOffset;
  sq->wqe_cnt = wqe_cnt;
  sq->dbrec = reinterpret_cast<std::atomic<uint32_t>*>(sq->mem.base() + abi::kMlx5QpDbrecOffset);
  *fd = sq->mem.release_fd();
  rep->shm_size = sq->mem.size();
  rep->sq_wqe_cnt = wqe_cnt;
  qp->sq_user_fetched = qp->sq_user_head = 0;
  qp->mlx5_sq = std::move(sq);
  ++mlx5_qps_;
  return 0;
}

}  // namespace uroce::device
