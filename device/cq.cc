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
  cqs_.erase(handle);
  return 0;
}

bool Device::complete(Qp& qp, bool send_cq, const abi::Cqe& cqe, bool solicited) {
  return complete_to(send_cq ? qp.send_cq : qp.recv_cq, cqe, solicited);
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

bool Device::complete_to(uint32_t cq_handle, const abi::Cqe& cqe, bool solicited) {
  Cq* cq = cqs_.get(cq_handle);
  if (!cq || cq->error) return false;
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
    if (cq->ring.hdr->notify.exchange(abi::kCqNotifyNone) != abi::kCqNotifyNone) {
      if (CompChannel* ch = channels_.get(cq->channel)) {
        abi::CompEventRecord rec{cq->cookie};
        if (::write(ch->fd, &rec, sizeof(rec)) != ssize_t(sizeof(rec)))
          ++counters_.async_events_dropped;
      }
    }
  }
  return true;
}

// ---------------------------------------------------------------- QP

}  // namespace uroce::device
