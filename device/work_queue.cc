// Receive work queues: ibv_create_wq / ibv_modify_wq / ibv_destroy_wq with
// the checks of libibverbs (cmd_wq.c, cmd.c), the kernel
// (drivers/infiniband/core/uverbs_cmd.c) and mlx5 (hw/mlx5/qp.c
// mlx5_ib_create_wq, mlx5_ib_modify_wq), and
// the poll step that flushes a WQ in ERR. The receive itself is in
// device/wq_receive.cc.
#include <algorithm>
#include <cerrno>

#include "device/device.h"
#include "device/mlx5_rq.h"

namespace uroce::device {

namespace {

// RecvWqe header plus max_sge entries, a power of two, as the SRQ ring.
uint32_t wq_stride(uint32_t max_sge) {
  return 1u << log2_ceil(uint32_t(sizeof(abi::RecvWqe) + std::max(max_sge, 1u) * sizeof(abi::Sge)));
}

// The transitions mlx5 firmware takes (kernel hw/mlx5/qp.c
// mlx5_ib_modify_wq) and DPDK/rdma-core use; the rest is EINVAL.
constexpr bool kWqTransition[3][3] = {
    // to:   RESET  RDY    ERR
    /* RESET */ {false, true, false},
    /* RDY   */ {true, true, true},
    /* ERR   */ {true, false, false},
};

}  // namespace

Result<uint32_t> Device::create_wq(Owner* o, const abi::CreateWqRequest& req) {
  if (req.wq_type != IBV_WQT_RQ) return {EINVAL};  // mlx5 kernel
  // Unknown flags are EOPNOTSUPP (libibverbs); all four known ones are
  // advertised, so each is accepted.
  if (req.flags & ~kKnownWqFlags) return {EOPNOTSUPP};
  Pd* pd = pds_.get(req.pd);
  Cq* cq = cqs_.get(req.cq);
  if (!pd || pd->owner != o || !cq || cq->owner != o) return {EINVAL};
  if (req.max_wr == 0 || req.max_wr > kMaxWqWr || req.max_sge > kMaxSge) return {EINVAL};
  if (wqs_.count() >= info_.rss.max_wq_type_rq) return {ENOMEM};
  auto w = std::make_unique<Wq>();
  w->owner = o;
  w->cookie = req.cookie;
  w->pd = uint32_t(req.pd);
  w->cq = uint32_t(req.cq);
  w->flags = req.flags;
  // mlx5 sizes the ring roundup_pow2(max_wr); one slot stays empty here, so
  // one more.
  const uint32_t log2 = log2_ceil(req.max_wr + 1);
  const uint32_t stride = wq_stride(req.max_sge);
  if (int e = w->mem.create("uroce-wq", RingView::bytes(log2, stride))) return {e};
  w->ring.init(w->mem.base(), log2, stride);
  w->max_sge = std::min<uint32_t>((stride - sizeof(abi::RecvWqe)) / sizeof(abi::Sge), kMaxSge);
  ++pd->refs;
  ++cq->refs;
  const uint32_t h = wqs_.insert(std::move(w));
  wqs_.get(h)->wqn = kWqnBase + h;
  return {0, h};
}

int Device::modify_wq(Owner* o, uint32_t handle, const abi::ModifyWqRequest& req) {
  Wq* w = wqs_.get(handle);
  if (!w || w->owner != o) return EINVAL;
  // Kernel ib_uverbs_ex_modify_wq: an empty or unknown mask, a state past ERR.
  if (req.attr_mask == 0 || req.attr_mask >= IBV_WQ_ATTR_RESERVED) return EINVAL;
  const bool to_state = req.attr_mask & IBV_WQ_ATTR_STATE;
  if (to_state && req.wq_state > IBV_WQS_ERR) return EINVAL;
  if (req.attr_mask & IBV_WQ_ATTR_CURR_STATE) {
    if (req.curr_wq_state > IBV_WQS_ERR) return EINVAL;
    if (req.curr_wq_state != w->state) return EINVAL;  // mlx5_modify_wq
  }
  uint32_t flags = w->flags;
  if (req.attr_mask & IBV_WQ_ATTR_FLAGS) {
    if (req.flags_mask & ~kKnownWqFlags) return EOPNOTSUPP;  // libibverbs
    // mlx5_ib_modify_wq: end padding is fixed at creation; scatter FCS and
    // delay drop are silently left as they were; CVLAN stripping toggles.
    if (req.flags_mask & IBV_WQ_FLAGS_PCI_WRITE_END_PADDING) return EOPNOTSUPP;
    if (req.flags_mask & IBV_WQ_FLAGS_CVLAN_STRIPPING)
      flags = (flags & ~uint32_t(IBV_WQ_FLAGS_CVLAN_STRIPPING)) | (req.flags & IBV_WQ_FLAGS_CVLAN_STRIPPING);
  }
  const ibv_wq_state to = to_state ? ibv_wq_state(req.wq_state) : w->state;
  if (to_state && !kWqTransition[w->state][to]) return EINVAL;
  w->flags = flags;
  if (to == w->state) return 0;
  if (to == IBV_WQS_RESET || (w->state == IBV_WQS_RESET && to == IBV_WQS_RDY)) {
    // RESET forgets the ring, and RESET to RDY discards what was posted in
    // RESET (mlx5_modify_wq wipes the ring indices; an mlx5-format WQ's
    // doorbell record and index start again at 0, as mlx5's do).
    if (w->mlx5) {
      w->mlx5->dbrec[0].store(0, std::memory_order_release);
      w->head = 0;
    } else {
      w->head = w->posted();
    }
    w->consumed(w->head);
    drop_held(*w, true);
  }
  if (to == IBV_WQS_ERR) {
    wq_to_error(*w);
  } else {
    w->state = to;
  }
  return 0;
}

void Device::wq_to_error(Wq& w) {
  w.state = IBV_WQS_ERR;
  drop_held(w, true);
  flush_wq(w);
  mark_busy(w.wqn - kWqnBase);  // keeps flushing what is posted later
}

// The device takes a WQ to ERR by itself when one of its receives fails
// (an SGE whose lkey is not valid or that is out of its MR, a buffer too
// short, a corrupt ring, a full CQ): mlx5 writes an error CQE and the RQ
// goes to ERR (DPDK's mlx5 Rx error recovery brings it back through RST),
// and the RQ's WQ_CATAS_ERROR event reaches the application as
// IBV_EVENT_WQ_FATAL (kernel hw/mlx5/qp.c, mlx5_ib_wq_event).
void Device::wq_fatal(Wq& w) {
  if (w.state == IBV_WQS_ERR) return;
  wq_to_error(w);
  w.owner->post_async(IBV_EVENT_WQ_FATAL, w.cookie);
}

int Device::destroy_wq(Owner* o, uint32_t handle) {
  Wq* w = wqs_.get(handle);
  if (!w || w->owner != o) return EINVAL;
  if (w->refs) return EBUSY;  // the kernel's core/verbs.c ib_destroy_wq_user: in a table
  drop_held(*w, false);
  if (Pd* pd = pds_.get(w->pd)) --pd->refs;
  if (Cq* cq = cqs_.get(w->cq)) --cq->refs;
  std::erase(busy_wqs_, handle);
  wqs_.erase(handle);
  return 0;
}

// Every receive posted and not yet taken completes with WR_FLUSH_ERR
// (mlx5 enables flush-in-error on the RQ).
void Device::flush_wq(Wq& w) {
  const uint32_t prod = w.posted();
  if (prod - w.head > w.capacity()) {  // a corrupt index: nothing to trust
    ++counters_.bad_wqes;
    w.head = prod;
  }
  for (; w.head != prod; ++w.head) {
    abi::Cqe cqe{};
    cqe.wr_id = w.mlx5 ? mlx5_rq_wqe_id(w.head) : recv_wqe_id(w.ring, w.head);
    cqe.status = IBV_WC_WR_FLUSH_ERR;
    cqe.opcode = IBV_WC_RECV;
    cqe.qp_num = w.wqn;
    ++w.flushed;
    w.consumed(w.head + 1);
    if (!complete_to(w.cq, cqe, false)) break;
  }
  w.consumed(w.head);
}

// mlx5dv_init_obj on a receive WQ (MLX5DV_OBJ_RWQ): its WQEs in mlx5's format
// from now on, sized as mlx5 sizes an RWQ (verbs.c mlx5_calc_rwq_size:
// roundup_pow2(max_wr) WQEs of 16 bytes per SGE, a power of two), while
// nothing went to uroce's ring.
int Device::wq_to_mlx5(Owner* o, uint32_t handle, abi::Mlx5WqFormatReply* rep, int* fd) {
  Wq* w = wqs_.get(handle);
  if (!w || w->owner != o) return EINVAL;
  if (!config_.mlx5) return EOPNOTSUPP;
  if (w->mlx5) return EINVAL;  // the provider asks once per WQ
  if (w->ring.hdr->producer.load(std::memory_order_acquire) != 0) return EBUSY;
  auto m = std::make_unique<Wq::Mlx5Rq>();
  const uint32_t cnt = 1u << log2_ceil(std::max(w->ring.size(), 1u));
  const uint32_t stride = 1u << log2_ceil(std::max(w->max_sge, 1u) * 16);
  if (int e = m->mem.create("uroce-mlx5-wq", abi::kMlx5WqWqesOffset + size_t(cnt) * stride)) return e;
  m->dbrec = reinterpret_cast<std::atomic<uint32_t>*>(m->mem.base() + abi::kMlx5WqDbrecOffset);
  m->wqes = m->mem.base() + abi::kMlx5WqWqesOffset;
  m->cnt = cnt;
  m->stride = stride;
  *fd = m->mem.release_fd();
  *rep = abi::Mlx5WqFormatReply{m->mem.size(), cnt, stride};
  w->head = 0;
  w->mlx5 = std::move(m);
  return 0;
}

// WQs that need the poll loop: in ERR (flush what is posted), or holding
// frames for delay drop (deliver them as receives come, drop them when
// their time is up).
bool Device::poll_wqs() {
  bool work = false;
  for (size_t i = 0; i < busy_wqs_.size();) {
    Wq* w = wqs_.get(busy_wqs_[i]);
    if (w && w->state == IBV_WQS_ERR) {
      if (w->posted() != w->head) {
        flush_wq(*w);
        work = true;
      }
      ++i;
      continue;
    }
    if (w && w->held_count) {
      work |= release_held(*w);
      if (w->held_count) {
        ++i;
        continue;
      }
    }
    busy_wqs_[i] = busy_wqs_.back();  // nothing left to do for it
    busy_wqs_.pop_back();
  }
  return work;
}

}  // namespace uroce::device
