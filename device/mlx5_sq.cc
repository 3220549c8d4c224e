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
// and remote address segments, an atomic segment (UD: the control and
// datagram segments), then the data (one 16-byte segment per SGE, or the
// inline bytes after their 4-byte count), as providers/mlx5/verbs.c
// sq_overhead + calc_send_wqe sizes them.
uint32_t bbs_per_wqe(const abi::QpCaps& caps, const Qp& qp) {
  const uint32_t data = std::max<uint32_t>(caps.max_send_sge * mlx5::kSegBytes,
                                 (4 + caps.max_inline_data + mlx5::kSegBytes - 1) / mlx5::kSegBytes * mlx5::kSegBytes);
  // A DCI's: the control and datagram segments, then RC's (mlx5's sq_overhead for DCI).
  const uint32_t overhead = qp.type == IBV_QPT_UD         ? mlx5::kSegBytes + sizeof(mlx5::WqeAv)
                            : qp.dc == DcRole::kInitiator ? 3 * mlx5::kSegBytes + sizeof(mlx5::WqeAv)
                                                          : 3 * mlx5::kSegBytes;
  const uint32_t bytes = std::min<uint32_t>(overhead + data, kMaxWqeBytes);
  return (bytes + kBb - 1) / kBb;
}

uint32_t round_pow2(uint32_t v) {
  uint32_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

// A TAG_MATCHING WQE: the list operation and an append's buffer, run when
// the requester reaches it (Device::tag_list_op).
bool take_tag_wqe(const uint8_t* wqe, uint32_t nbb, const mlx5::CtrlSeg& ctrl, abi::SendWqe& w, uint32_t body) {
  mlx5::DecodedTagOp t;
  if (mlx5::decode_tag_wqe(wqe, size_t(nbb) * kBb, &t)) return false;
  w.opcode = uroce::kWrTagOp;
  if (ctrl.fm_ce_se & mlx5::kCtrlCqUpdate) w.flags |= IBV_SEND_SIGNALED;
  w.tag_op = abi::TagOpArgs{t.op, t.flags, t.index, t.sw_cnt, 0, {}, t.tag, t.mask};
  if (t.has_buffer && body >= sizeof(abi::Sge)) {
    const abi::Sge sge{t.buffer.addr, t.buffer.length, t.buffer.lkey};
    std::memcpy(&w + 1, &sge, sizeof(sge));
    w.num_sge = 1;
  }
  return true;
}

}  // namespace

bool mlx5_sq_posted(const Qp& qp, uint32_t* end) {
  const Qp::Mlx5Queues& sq = *qp.mlx5;
  *end = be32toh(sq.dbrec[1].load(std::memory_order_acquire)) & 0xffff;
  return ((*end - qp.sq_user_fetched) & 0xffff) <= sq.wqe_cnt;
}

bool mlx5_take_wqe(Qp& qp, uint32_t end, abi::SendWqe& w, uint32_t body) {
  const Qp::Mlx5Queues& sq = *qp.mlx5;
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
  if ((be32toh(ctrl.opmod_idx_opcode) & 0xff) == mlx5::kOpTagMatching) return take_tag_wqe(wqe, nbb, ctrl, w, body);
  mlx5::DecodedSend d;
  const mlx5::WqeAddress address = qp.type == IBV_QPT_UD         ? mlx5::WqeAddress::kUd
                                   : qp.dc == DcRole::kInitiator ? mlx5::WqeAddress::kDc
                                                                 : mlx5::WqeAddress::kNone;
  if (mlx5::decode_send_wqe(wqe, size_t(nbb) * kBb, &d, address)) return false;
  if (address != mlx5::WqeAddress::kNone) {
    // The datagram segment's address, as a uroce WQE carries its AH's (and
    // a DCI's the DCT's key: mlx5dv_wr_set_dc_addr).
    const mlx5::Datagram& g = d.datagram;
    w.remote_qpn = g.remote_qpn;
    w.remote_qkey = g.qkey;
    w.dc_key = g.dc_key;
    // The control segment's stream (mlx5dv_wr_set_dc_addr_stream, qp.c).
    w.dci_stream = uint16_t(ctrl.stream_id[0] << 8 | ctrl.stream_id[1]);
    std::memcpy(w.av.dgid, g.dgid, 16);
    w.av.flow_label = g.flow_label;
    w.av.sgid_index = g.sgid_index;
    w.av.hop_limit = g.hop_limit;
    w.av.traffic_class = g.traffic_class;
    w.av.sl = g.sl;
    w.av.is_global = 1;
    w.av.port_num = 1;
    w.av.udp_sport = g.udp_sport;
  }
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
  if (!qp || qp->owner != o) return EINVAL;  // RC, UC and UD: the creator's alone
  if (!config_.mlx5) return EOPNOTSUPP;
  if (qp->type != IBV_QPT_RC && qp->type != IBV_QPT_UC && qp->type != IBV_QPT_UD) return EOPNOTSUPP;
  if (qp->mlx5) return EINVAL;  // the provider asks once per QP
  // A ConnectX's queues are in its format from the start; uroce's move there
  // while nothing went to uroce's rings, in whatever state.
  if (qp->sq_fetched != 0 || qp->sq.hdr->producer.load(std::memory_order_acquire) != 0 ||
      qp->rq.hdr->producer.load(std::memory_order_acquire) != 0)
    return EBUSY;
  // Room for max_send_wr of the largest work requests the QP's caps allow
  // (the requester takes no more at a time than its sequence holds).
  // At least 16 (UCX keeps 8 basic blocks spare), at most half the 16-bit
  // index space.
  const uint32_t wqe_cnt =
      std::min(round_pow2(std::max(qp->sq.size() * bbs_per_wqe(qp->caps, *qp), 16u)), 1u << 15);
  // The receive queue (none with an SRQ): max_recv_wr WQEs of 16 bytes per
  // SGE, both powers of two (verbs.c mlx5_calc_rq_size).
  const uint32_t rq_cnt = qp->srq ? 0 : std::min(round_pow2(std::max(qp->rq.size(), 1u)), 1u << 15);
  const uint32_t rq_stride = round_pow2(std::clamp(qp->caps.max_recv_sge, 1u, kMaxSge) * 16);
  const size_t rq_offset = abi::kMlx5QpSqOffset + size_t(wqe_cnt) * abi::kMlx5SendBasicBlock;
  auto m = std::make_unique<Qp::Mlx5Queues>();
  if (int e = m->mem.create("uroce-mlx5-qp", rq_offset + size_t(rq_cnt) * rq_stride)) return e;
  m->bbs = m->mem.base() + abi::kMlx5QpSqOffset;
  m->wqe_cnt = wqe_cnt;
  m->dbrec = reinterpret_cast<std::atomic<uint32_t>*>(m->mem.base() + abi::kMlx5QpDbrecOffset);
  if (rq_cnt) {
    m->rq_wqes = m->mem.base() + rq_offset;
    m->rq_cnt = rq_cnt;
    m->rq_stride = rq_stride;
  }
  *fd = m->mem.release_fd();
  *rep = abi::Mlx5QpFormatReply{};
  rep->shm_size = m->mem.size();
  rep->sq_wqe_cnt = wqe_cnt;
  rep->rq_wqe_cnt = rq_cnt;
  rep->rq_stride = rq_cnt ? rq_stride : 0;
  rep->rq_offset = rq_cnt ? rq_offset : 0;
  qp->sq_user_fetched = qp->sq_user_head = 0;
  if (rq_cnt) {
    qp->rq_head = 0;  // the doorbell record's count starts at 0
    qp->rq_mlx5 = true;
  }
  qp->mlx5 = std::move(m);
  ++mlx5_qps_;
  return 0;
}

}  // namespace uroce::device
