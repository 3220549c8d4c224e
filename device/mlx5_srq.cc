// mlx5-format SRQs: see mlx5_srq.h.
#include "device/mlx5_srq.h"

#include <endian.h>

#include <cstring>

#include "device/device.h"
#include "device/mlx5_rq.h"
#include "device/tag_matching.h"
#include "uroce/mlx5_wqe.h"

namespace uroce::device {

namespace {

constexpr uint32_t kSeg = 16;  // a next or data segment
constexpr size_t kNextIndexAt = 2;  // mlx5_wqe_srq_next_seg.next_wqe_index

uint8_t* wqe_at(Srq::Mlx5List& m, uint32_t index, uint32_t cnt) {
  return const_cast<uint8_t*>(m.wqes) + size_t(index & (cnt - 1)) * m.stride;
}

}  // namespace

uint32_t mlx5_srq_waiting(const Srq& s) {
  return (be32toh(s.mlx5->dbrec->load(std::memory_order_acquire)) - s.head) & 0xffff;
}

uint32_t mlx5_take_srq_wqe(Device& dev, Srq& s, RecvInProgress& r) {
  Srq::Mlx5List& m = *s.mlx5;
  const uint32_t cnt = s.ring.size();
  uint32_t index = 0;
  if (m.started) {
    // The link of the WQE taken last, read now: the program relinks a list's
    // tail before it posts what the new link leads to (UCX's list topology).
    uint16_t next;
    std::memcpy(&next, wqe_at(m, m.last, cnt) + kNextIndexAt, sizeof(next));
    index = be16toh(next) & (cnt - 1);
  }
  m.started = true;
  m.last = index;
  // A private copy of the WQE: the program may be rewriting it.
  uint8_t wqe[16 + kSeg * kMaxSrqSge];
  std::memcpy(wqe, wqe_at(m, index, cnt), std::min<size_t>(m.stride, sizeof(wqe)));
  r.wr_id = index;
  r.num_sge = 0;
  uint32_t status = IBV_WC_SUCCESS;
  abi::Sge sge;
  for (uint32_t at = kSeg; at + kSeg <= m.stride && at + kSeg <= sizeof(wqe) && mlx5_recv_data_seg(wqe + at, &sge);
       at += kSeg) {
    if (r.num_sge == s.max_sge) {
      status = IBV_WC_LOC_LEN_ERR;
      break;
    }
    r.sge[r.num_sge++] = sge;
  }
  if (status != IBV_WC_SUCCESS) {
    ++dev.counters_mut().bad_wqes;
    r.num_sge = 0;
  }
  return status;
}

// ---------------------------------------------------------------- Device

int Device::srq_to_mlx5(Owner* o, uint32_t handle, abi::Mlx5SrqFormatReply* rep, int* fd) {
  Srq* s = srqs_.get(handle);
  if (!s || s->owner != o) return EINVAL;
  if (!config_.mlx5) return EOPNOTSUPP;
  if (s->type != IBV_SRQT_BASIC && s->type != IBV_SRQT_TM) return EOPNOTSUPP;
  if (s->mlx5) return EINVAL;  // the provider asks once per SRQ
  if (s->head != 0 || s->ring.hdr->producer.load(std::memory_order_acquire) != 0)
    return EBUSY;  // receives went to uroce's ring already
  // A TM-SRQ's list operations come as TAG_MATCHING WQEs from then on;
  // its list must not hold what ibv_post_srq_ops put there.
  if (s->tm && (s->tm->live() || s->tm->outstanding_ops())) return EBUSY;
  const uint32_t cnt = s->ring.size();
  const uint32_t stride = s->ring.stride;  // 16 + 16 * max_sge rounded up, as mlx5's
  auto m = std::make_unique<Srq::Mlx5List>();
  if (int e = m->mem.create("uroce-mlx5-srq", abi::kMlx5SrqWqesOffset + size_t(cnt) * stride)) return e;
  m->wqes = m->mem.base() + abi::kMlx5SrqWqesOffset;
  m->stride = stride;
  m->dbrec = reinterpret_cast<const std::atomic<uint32_t>*>(m->mem.base() + abi::kMlx5SrqDbrecOffset);
  // Each WQE links to the one after it (srq.c mlx5_alloc_srq_buf).
  for (uint32_t i = 0; i < cnt; ++i) {
    const uint16_t next = htobe16(uint16_t((i + 1) & (cnt - 1)));
    std::memcpy(wqe_at(*m, i, cnt) + kNextIndexAt, &next, sizeof(next));
  }
  *fd = m->mem.release_fd();
  rep->shm_size = m->mem.size();
  rep->wqe_cnt = cnt;
  rep->stride = stride;
  s->mlx5 = std::move(m);
  s->head = 0;
  if (s->tm) {
    s->tm->adopt_mlx5_format();
    s->tm_append_slot = 0;
  }
  return 0;
}

// kWrTagOp: a TAG_MATCHING WQE on the command QP of an mlx5-format TM-SRQ
// (the SRQ the QP receives on), as a ConnectX runs it: an append fills the
// entry the previous append named and names the next; a remove takes the
// entry out, or fails in its CQE if a message consumed it; a NOP only
// syncs. With MLX5_SRQ_FLAG_TM_SW_CNT, sw_cnt is software's count of
// unexpected messages (the sync of rdma-core's Documentation/
// tag_matching.md); with MLX5_SRQ_FLAG_TM_CQE_REQ the SRQ's CQ gets a CQE
// (providers/mlx5/cq.c handle_tag_matching). A WQE that names an entry the
// list does not have, or an append to an entry in use, is a bad WQE.
uint32_t Device::tag_list_op(const Qp& qp, const abi::TagOpArgs& t, const abi::Sge* buffer) {
  Srq* s = srqs_.get(qp.srq);
  if (!s || !s->tm || !s->mlx5 || s->owner != qp.owner) {
    ++counters_.bad_wqes;
    return IBV_WC_LOC_QP_OP_ERR;
  }
  abi::SrqOp op{};
  op.opcode = t.op == mlx5::kTmAppend ? IBV_WR_TAG_ADD : t.op == mlx5::kTmRemove ? IBV_WR_TAG_DEL : IBV_WR_TAG_SYNC;
  if (t.flags & mlx5::kTmFlagCqeReq) op.flags |= IBV_OPS_SIGNALED;
  if (t.flags & mlx5::kTmFlagSwCnt) op.flags |= IBV_OPS_TM_SYNC;
  op.unexpected_cnt = t.sw_cnt;
  if (t.op == mlx5::kTmAppend) {
    if (t.index >= s->tm->slots() || t.index == s->tm_append_slot) {
      ++counters_.bad_wqes;
      return IBV_WC_LOC_QP_OP_ERR;
    }
    op.handle = s->tm_append_slot;
    op.tag = t.tag;
    op.mask = t.mask;
    // The entry's number stands for its wr_id: a match's CQE names the
    // entry (app_info), which is all a program of mlx5's format reads.
    op.recv_wr_id = op.handle;
    if (buffer) {
      op.num_sge = 1;
      op.sge = *buffer;
    }
  } else if (t.op == mlx5::kTmRemove) {
    op.handle = t.index;
  }
  TagList::OpResult r = s->tm->post(op, 0, 0);
  if (r.err) {
    ++counters_.bad_wqes;
    return IBV_WC_LOC_QP_OP_ERR;
  }
  if (t.op == mlx5::kTmAppend) s->tm_append_slot = t.index;
  if (r.signaled) {
    r.cqe.qp_num = qp.qpn;
    complete_to(s->cq, r.cqe, false);
  }
  return IBV_WC_SUCCESS;
}

}  // namespace uroce::device
