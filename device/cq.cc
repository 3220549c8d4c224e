// Completion channels and CQs: their objects, and posting a completion
// entry to a CQ's ring (the one place CQEs are written: overrun, the
// timestamp, the event to a channel).
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "device/device.h"
#include "device/params.h"
#include "uroce/mlx5_cqe.h"

namespace uroce::device {

Result<uint32_t> Device::create_comp_channel(Owner* o, int fd) {
  auto ch = std::make_unique<CompChannel>();
  ch->owner = o;
  ch->fd = fd;
  return {0, channels_.insert(std::move(ch))};
}

int Device::destroy_comp_channel(Owner* o, uint32_t handle) {
  CompChannel* ch = channels_.get(handle);
  if (!ch || ch->owner != o) return EINVAL;
  if (ch->refs) return EBUSY;
  channels_.erase(handle);
  return 0;
}

Result<uint32_t> Device::create_cq(Owner* o, const abi::CreateCqRequest& req) {
  if (req.cqe < 1 || req.cqe > kMaxCqe) return {EINVAL};
  if (req.flags & ~uint32_t(abi::kCqTimestamps | abi::kCqIgnoreOverrun)) return {EINVAL};
  if (cqs_.count() >= info_.max_cq) return {ENOMEM};
  CompChannel* ch = nullptr;
  if (req.channel) {
    ch = channels_.get(req.channel);
    if (!ch || ch->owner != o) return {EINVAL};
  }
  auto cq = std::make_unique<Cq>();
  cq->owner = o;
  cq->cookie = req.cookie;
  cq->timestamps = req.flags & abi::kCqTimestamps;
  cq->ignore_overrun = req.flags & abi::kCqIgnoreOverrun;
  const uint32_t log2 = log2_ceil(req.cqe + 1);
  if (int e = cq->mem.create("uroce-cq", RingView::bytes(log2, sizeof(abi::Cqe)))) return {e};
  cq->ring.init(cq->mem.base(), log2, sizeof(abi::Cqe));
  cq->capacity = (1u << log2) - 1;
  cq->channel = uint32_t(req.channel);
  if (ch) ++ch->refs;
  return {0, cqs_.insert(std::move(cq))};
}

int Device::resize_cq(Owner* o, uint32_t handle, uint32_t cqe) {
  Cq* cq = cqs_.get(handle);
  if (!cq || cq->owner != o) return EINVAL;
  if (cqe < 1 || cqe > kMaxCqe) return EINVAL;
  if (cq->mlx5) return EOPNOTSUPP;  // its ring is the program's to read now (mlx5dv_init_obj)
  const uint32_t cons = cq->ring.hdr->consumer.load(std::memory_order_acquire);
  const uint32_t pending = cq->prod - cons;
  if (pending > cq->ring.size()) return EINVAL;  // client corrupted its index
  // Smaller than the completions still waiting: EINVAL (rdma-core test_cq).
  if (cqe < pending) return EINVAL;
  const uint32_t log2 = log2_ceil(cqe + 1);
  QueueMemory mem;
  if (int e = mem.create("uroce-cq", RingView::bytes(log2, sizeof(abi::Cqe)))) return e;
  RingView ring;
  ring.init(mem.base(), log2, sizeof(abi::Cqe));
  for (uint32_t i = 0; i < pending; ++i)
    std::memcpy(ring.slot(i), cq->ring.slot(cons + i), sizeof(abi::Cqe));
  ring.hdr->producer.store(pending, std::memory_order_release);
  ring.hdr->notify.store(cq->ring.hdr->notify.load());
  cq->mem = std::move(mem);
  cq->ring = ring;
  cq->prod = pending;
  cq->capacity = (1u << log2) - 1;
  return 0;
}

int Device::destroy_cq(Owner* o, uint32_t handle) {
  Cq* cq = cqs_.get(handle);
  if (!cq || cq->owner != o) return EINVAL;
  if (cq->refs) return EBUSY;
  if (CompChannel* ch = channels_.get(cq->channel)) --ch->refs;
  if (cq->mlx5) std::erase(mlx5_cqs_, handle);
  cqs_.erase(handle);
  return 0;
}

bool Device::complete(Qp& qp, bool send_cq, const abi::Cqe& cqe, bool solicited) {
  return complete_to(send_cq ? qp.send_cq : qp.recv_cq, cqe, solicited, send_cq);
}

namespace {

uint64_t clock_ns(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000u + uint64_t(ts.tv_nsec);
}

// Completion timestamps (IBV_WC_EX_WITH_COMPLETION_TIMESTAMP[_WALLCLOCK]),
// taken as the entry is written, as mlx5's CQE carries the HCA clock at
// completion. The device clock (abi::kDeviceClock) never steps back and the
// engine writes a CQ's entries in order, so they are monotonic per CQ; the
// wall clock may step back (settimeofday, NTP), so it is held at the CQ's last.
// Out of line: inlined, its two calls cost complete_to register spills on
// every completion, stamped or not.
[[gnu::noinline]] void stamp(Cq& cq, abi::Cqe* e) {
  e->timestamp_ns = clock_ns(abi::kDeviceClock);
  if (e->wc_flags & IBV_WC_TM_MATCH) return;  // the field holds the tag (abi::Cqe)
  cq.last_wallclock_ns = std::max(cq.last_wallclock_ns, clock_ns(CLOCK_REALTIME));
  e->wallclock_ns = cq.last_wallclock_ns;
}

}  // namespace

bool Device::complete_to(uint32_t cq_handle, const abi::Cqe& cqe, bool solicited, bool send) {
  Cq* cq = cqs_.get(cq_handle);
  if (!cq || cq->error) return false;
  if (cq->mlx5) [[unlikely]]
    return complete_mlx5(*cq, cqe, solicited, send);
  const uint32_t cons = cq->ring.hdr->consumer.load(std::memory_order_acquire);
  if (cq->prod - cons >= cq->ring.size()) {
    // IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN: no error, the entry is lost (mlx5's
    // CQ overwrites instead; either way the consumer misses completions).
    if (cq->ignore_overrun) {
      ++counters_.cq_overruns_ignored;
      return true;
    }
    // Overflow (IBA 11.4.2.1): the CQ is in error and so are QPs feeding it.
    cq->error = true;
    ++counters_.cq_overflows;
    cq->owner->post_async(IBV_EVENT_CQ_ERR, cq->cookie);
    return false;
  }
  std::memcpy(cq->ring.slot(cq->prod), &cqe, sizeof(cqe));
  if (cq->timestamps) [[unlikely]]
    stamp(*cq, reinterpret_cast<abi::Cqe*>(cq->ring.slot(cq->prod)));
  cq->ring.hdr->producer.store(++cq->prod, std::memory_order_release);
  ++cq->completions;
  // Pairs with the fence in the provider's req_notify_cq (store notify, then
  // load producer): without it the CPU may read `notify` before our producer
  // store is visible, both sides miss each other and the event is lost.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  const uint32_t armed = cq->ring.hdr->notify.load(std::memory_order_acquire);
  if (armed == abi::kCqNotifyNext ||
      (armed == abi::kCqNotifySolicited && (solicited || cqe.status != IBV_WC_SUCCESS))) {
    if (cq->ring.hdr->notify.exchange(abi::kCqNotifyNone) != abi::kCqNotifyNone) raise_cq_event(*cq);
  }
  return true;
}

void Device::raise_cq_event(Cq& cq) {
  if (CompChannel* ch = channels_.get(cq.channel)) {
    abi::CompEventRecord rec{cq.cookie};
    if (::write(ch->fd, &rec, sizeof(rec)) != ssize_t(sizeof(rec))) ++counters_.async_events_dropped;
  }
}

// ---------------------------------------------------------------- mlx5 CQs
//
// A CQ in mlx5's format (mlx5 mode, after mlx5dv_init_obj): the program reads
// CQEs itself, by their owner bit, and writes back only its consumer index
// (doorbell record word 0; a program built without assertions may never
// write it, and then asks for IGNORE_OVERRUN) and arm commands, as to a
// ConnectX: the command word in doorbell record word 1, then the same with
// the CQ number to the UAR's CQ doorbell, which is what arms it
// (providers/mlx5/cq.c mlx5_arm_cq; UCX's uct_ib_mlx5dv_arm_cq).

int Device::cq_to_mlx5(Owner* o, uint32_t handle, uint32_t cqe_size, abi::Mlx5CqFormatReply* rep, int* fd) {
  Cq* cq = cqs_.get(handle);
  if (!cq || cq->owner != o) return EINVAL;
  if (!config_.mlx5) return EOPNOTSUPP;
  if (cqe_size != 64 && cqe_size != 128) return EINVAL;
  if (cq->mlx5) return EINVAL;  // the provider asks once per CQ
  const uint32_t cons = cq->ring.hdr->consumer.load(std::memory_order_acquire);
  if (cq->prod != cons) return EBUSY;  // completions wait in uroce's format
  const uint32_t log2 = cq->ring.log2;
  const uint32_t cnt = 1u << log2;
  QueueMemory mem;
  if (int e = mem.create("uroce-cq", abi::kMlx5CqCqesOffset + size_t(cnt) * cqe_size)) return e;
  auto m = std::make_unique<Cq::Mlx5Ring>();
  m->cqes = mem.base() + abi::kMlx5CqCqesOffset;
  m->cqe_size = cqe_size;
  m->dbrec = reinterpret_cast<std::atomic<uint32_t>*>(mem.base() + abi::kMlx5CqDbrecOffset);
  m->doorbell = reinterpret_cast<std::atomic<uint64_t>*>(mem.base() + abi::kMlx5CqUarOffset + abi::kMlx5CqDoorbell);
  for (uint32_t i = 0; i < cnt; ++i) m->cqes[size_t(i) * cqe_size + cqe_size - 1] = mlx5::kCqeInvalid << 4;
  RingView ring;
  ring.init(mem.base(), log2, cqe_size);  // the header: the producer index, for reports
  *fd = mem.release_fd();
  rep->shm_size = mem.size();
  rep->cqe_cnt = cnt;
  rep->cqn = handle;
  cq->mem = std::move(mem);
  cq->ring = ring;
  cq->prod = 0;
  cq->mlx5 = std::move(m);
  mlx5_cqs_.push_back(handle);
  return 0;
}

namespace {

mlx5::Completion completion_of(const abi::Cqe& e, bool send) {
  mlx5::Completion c;
  c.status = ibv_wc_status(e.status);
  c.opcode = ibv_wc_opcode(e.opcode);
  c.wc_flags = e.wc_flags;
  c.vendor_err = e.vendor_err;
  c.byte_len = e.byte_len;
  c.imm = e.imm_data;
  c.qp_num = e.qp_num;
  c.src_qp = e.src_qp;
  c.slid = e.slid;
  c.pkey_index = e.pkey_index;
  c.sl = e.sl;
  c.dlid_path_bits = e.dlid_path_bits;
  c.send = send;
  c.wr_id = e.wr_id;
  if (mlx5::is_tm_opcode(e.opcode)) [[unlikely]] {
    c.tm_tag = e.tm_tag;
    c.tm_priv = e.tm_priv;
    // An mlx5-format TM-SRQ's entries carry their number as wr_id
    // (Device::tag_list_op): a match's CQE names it.
    c.tm_entry = uint16_t(e.wr_id);
  }
  return c;
}

// Whether 24-bit index a is at or past b (mlx5's indices wrap at 2^24).
bool at_or_past(uint32_t a, uint32_t b) { return ((a - b) & 0xffffff) < 0x800000; }

}  // namespace

bool Device::complete_mlx5(Cq& cq, const abi::Cqe& cqe, bool solicited, bool send) {
  Cq::Mlx5Ring& m = *cq.mlx5;
  const uint32_t cnt = cq.ring.size();
  if (!cq.ignore_overrun) {
    const uint32_t ci = be32toh(m.dbrec[0].load(std::memory_order_acquire)) & 0xffffff;
    if (((cq.prod - ci) & 0xffffff) >= cnt) {
      cq.error = true;  // overflow, as complete_to's
      ++counters_.cq_overflows;
      cq.owner->post_async(IBV_EVENT_CQ_ERR, cq.cookie);
      return false;
    }
  }
  mlx5::Completion c = completion_of(cqe, send);
  c.timestamp = clock_ns(abi::kDeviceClock);  // a ConnectX stamps every CQE
  // A WQE of an mlx5-format send queue: its index, which the engine carried
  // as the work request's id (device/mlx5_sq.cc), as a ConnectX reports it.
  // So does a receive from an mlx5-format SRQ, receive queue or receive WQ
  // (device/mlx5_srq.cc, device/mlx5_rq.cc, device/work_queue.cc).
  if (const Qp* q = qp(cqe.qp_num)) {
    c.srqn = q->srq;
    if (send ? bool(q->mlx5)
             : q->rq_mlx5 || (q->srq && q->type != IBV_QPT_XRC_RECV && srqs_.get(q->srq) && srqs_.get(q->srq)->mlx5))
      c.wqe_counter = uint16_t(cqe.wr_id);
  } else if (cqe.qp_num >= kWqnBase && !send) {
    if (const Wq* w = wqs_.get(cqe.qp_num - kWqnBase); w && w->mlx5) c.wqe_counter = uint16_t(cqe.wr_id);
  }
  // A list operation by ibv_post_srq_ops names its SRQ (Device::post_srq_ops).
  if ((cqe.opcode == IBV_WC_TM_ADD || cqe.opcode == IBV_WC_TM_DEL || cqe.opcode == IBV_WC_TM_SYNC) && !c.srqn)
    c.srqn = cqe.qp_num;
  mlx5::Cqe64 q;
  mlx5::encode_cqe(c, mlx5::owner_for_index(cq.prod, cnt), &q);
  uint8_t* slot = m.cqes + size_t(cq.prod & (cnt - 1)) * m.cqe_size;
  if (m.cqe_size == 128) std::memset(slot, 0, 64);  // nothing scattered to the CQE
  uint8_t* e = slot + m.cqe_size - 64;
  // The reader checks op_own first: the rest must be there before it.
  std::memcpy(e, &q, sizeof(q) - 1);
  std::atomic_ref<uint8_t>(e[63]).store(q.op_own, std::memory_order_release);
  ++cq.prod;
  cq.ring.hdr->producer.store(cq.prod, std::memory_order_release);
  ++cq.completions;
  mlx5_activity();
  if (solicited || cqe.status != IBV_WC_SUCCESS) m.solicited_end = cq.prod & 0xffffff;
  take_mlx5_arm(cq);
  fire_mlx5_arm(cq);
  return true;
}

// An arm command the program wrote to the UAR since the last look.
void Device::take_mlx5_arm(Cq& cq) {
  Cq::Mlx5Ring& m = *cq.mlx5;
  if (m.doorbell->load(std::memory_order_relaxed) == 0) return;
  const uint64_t v = be64toh(m.doorbell->exchange(0, std::memory_order_acquire));
  const uint32_t cmd = uint32_t(v >> 32);
  m.armed = true;
  m.solicited_only = cmd & abi::kMlx5CqArmSolicited;
  m.arm_ci = cmd & 0xffffff;
}

// An armed CQ with a CQE (a solicited one, if so armed) at or past the arm's
// index raises its event once, as mlx5's; true if it did.
bool Device::fire_mlx5_arm(Cq& cq) {
  Cq::Mlx5Ring& m = *cq.mlx5;
  if (!m.armed) return false;
  const uint32_t end = m.solicited_only ? m.solicited_end : cq.prod & 0xffffff;
  if (end == m.arm_ci || !at_or_past(end, m.arm_ci)) return false;
  m.armed = false;
  raise_cq_event(cq);
  return true;
}

// The engine's look at arm commands between completions: a command for
// CQEs already written raises the event at once.
bool Device::poll_mlx5_cq_arms() {
  bool fired = false;
  for (uint32_t handle : mlx5_cqs_) {
    Cq* cq = cqs_.get(handle);
    if (!cq || !cq->mlx5) continue;  // destroy_cq takes it off this list; never trust a handle
    take_mlx5_arm(*cq);
    fired |= fire_mlx5_arm(*cq);
  }
  return fired;
}

// ---------------------------------------------------------------- QP

}  // namespace uroce::device
