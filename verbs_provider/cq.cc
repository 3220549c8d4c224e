// Completion queues (shared-memory rings the engine fills), completion
// channels (pipes the engine writes CQ events into) and the ibv_cq_ex reader.
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "verbs_provider/provider.h"

namespace uroce::provider {

namespace {

// empty_poll: nap after this long without a completion, for this long.
constexpr uint64_t kNapAfterNs = 50'000;
constexpr uint64_t kNapNs = 20'000;
constexpr uint32_t kNapCheckPolls = 16;
// How often a thread that finds its CQ empty looks whether the engine is gone.
constexpr uint64_t kEngineCheckNs = 100'000'000;

constexpr uint64_t kSupportedWcFlags =
    IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_SRC_QP |
    IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL | IBV_WC_EX_WITH_DLID_PATH_BITS |
    IBV_WC_EX_WITH_COMPLETION_TIMESTAMP | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK |
    IBV_WC_EX_WITH_TM_INFO | IBV_WC_EX_WITH_FLOW_TAG | IBV_WC_EX_WITH_CVLAN;
// The engine stamps entries only of CQs that ask (abi::kCqTimestamps).
constexpr uint64_t kTimestampWcFlags =
    IBV_WC_EX_WITH_COMPLETION_TIMESTAMP | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;

const abi::Cqe* peek(UCq* cq) {
  const uint32_t prod = cq->ring.hdr->producer.load(std::memory_order_acquire);
  if (prod == cq->ring.prod) return nullptr;
  return reinterpret_cast<const abi::Cqe*>(cq->ring.slot(cq->ring.prod));
}

void to_wc(const abi::Cqe& e, ibv_wc* wc) {
  wc->wr_id = e.wr_id;
  wc->status = ibv_wc_status(e.status);
  wc->opcode = ibv_wc_opcode(e.opcode);
  wc->vendor_err = e.vendor_err;
  wc->byte_len = e.byte_len;
  wc->imm_data = e.imm_data;
  wc->qp_num = e.qp_num;
  wc->src_qp = e.src_qp;
  wc->wc_flags = e.wc_flags;
  wc->pkey_index = e.pkey_index;
  wc->slid = e.slid;
  wc->sl = e.sl;
  wc->dlid_path_bits = e.dlid_path_bits;
}

uint64_t monotonic_ns() {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return uint64_t(now.tv_sec) * 1'000'000'000u + uint64_t(now.tv_nsec);
}

// A CQ stays empty for good once the engine is gone (killed or stopped), and
// a program that polls without reading async events would spin forever: a
// thread polling an empty CQ looks, every kEngineCheckNs, whether the
// engine's end of the control socket hung up (one poll(), nothing read:
// requests and replies never cross here). Then the context is dead, as after
// IBV_EVENT_DEVICE_FATAL, and the poll fails.
bool engine_is_gone(UContext* ctx, uint64_t now_ns) {
  thread_local uint64_t last_check_ns = 0;
  if (ctx->engine_gone) return true;
  if (now_ns - last_check_ns < kEngineCheckNs) return false;
  last_check_ns = now_ns;
  pollfd p{ctx->conn.fd(), POLLRDHUP, 0};
  if (p.fd >= 0 && poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR))) ctx->engine_gone = true;
  return ctx->engine_gone;
}

// After a poll (empty: found nothing), through ibv_poll_cq or ibv_start_poll
// alike. An empty poll yields, so that a client sharing the CPU runs: the two
// clients of a `uroce run` pair share the CPUs the engine left, and one that
// spins without yielding keeps its CPU a whole time slice, milliseconds,
// while its peer waits there to answer. But the engine runs in a session of
// its own, and sched_yield does not hand the CPU to another session's
// autogroup: a client that keeps polling an empty CQ on the engine's CPU
// takes half of that CPU from the device that would fill it. So a thread
// that has found nothing for a while there naps instead (the engine keeps
// its own CPU while it works; placed by `uroce run`, clients rarely land
// there).
// False when the engine is gone (engine_is_gone).
bool empty_poll(UContext* ctx, bool empty) {
  thread_local uint32_t empty_polls = 0;
  thread_local uint64_t empty_since_ns = 0;
  if (!empty) {
    empty_polls = 0;
    return true;
  }
  // The clock and the CPU are read once every kNapCheckPolls empty polls.
  if (++empty_polls % kNapCheckPolls == 0) {
    const uint64_t now_ns = monotonic_ns();
    if (engine_is_gone(ctx, now_ns)) return false;
    if (empty_polls == kNapCheckPolls) empty_since_ns = now_ns;
    const int engine_cpu = ctx->shared->polling_cpu.load(std::memory_order_relaxed);
    if (engine_cpu >= 0 && now_ns - empty_since_ns > kNapAfterNs && sched_getcpu() == engine_cpu) {
      const timespec nap{0, long(kNapNs)};
      nanosleep(&nap, nullptr);
      return true;
    }
  }
  sched_yield();
  return true;
}

// ---- ibv_cq_ex reader -----------------------------------------------------

int take_current(UCq* cq) {
  if (cq->vendor_take) [[unlikely]] {
    if (int err = cq->vendor_take(cq, &cq->cur)) return err;
  } else {
    const abi::Cqe* e = peek(cq);
    if (!e) return ENOENT;
    cq->cur = *e;
    ++cq->ring.prod;
  }
  cq->ex.wr_id = cq->cur.wr_id;
  cq->ex.status = ibv_wc_status(cq->cur.status);
  return 0;
}

int start_poll(ibv_cq_ex* ex, ibv_poll_cq_attr* attr) {
  if (attr && attr->comp_mask) return EINVAL;
  UCq* cq = to_ucq(ex);
  place_polling_thread(cq->ctx);
  cq->mu.lock();
  int err = take_current(cq);
  if (err) cq->mu.unlock();  // the caller does not call end_poll after ENOENT
  if (!empty_poll(cq->ctx, err == ENOENT)) err = EIO;  // nothing will ever come
  return err;
}

int next_poll(ibv_cq_ex* ex) { return take_current(to_ucq(ex)); }

void end_poll(ibv_cq_ex* ex) {
  UCq* cq = to_ucq(ex);
  if (cq->vendor_consumed) [[unlikely]]
    cq->vendor_consumed(cq);
  else
    cq->ring.hdr->consumer.store(cq->ring.prod, std::memory_order_release);
  cq->mu.unlock();
}

ibv_wc_opcode read_opcode(ibv_cq_ex* ex) { return ibv_wc_opcode(to_ucq(ex)->cur.opcode); }
uint32_t read_vendor_err(ibv_cq_ex* ex) { return to_ucq(ex)->cur.vendor_err; }
uint32_t read_byte_len(ibv_cq_ex* ex) { return to_ucq(ex)->cur.byte_len; }
__be32 read_imm_data(ibv_cq_ex* ex) { return to_ucq(ex)->cur.imm_data; }
uint32_t read_qp_num(ibv_cq_ex* ex) { return to_ucq(ex)->cur.qp_num; }
// The steering rule's IBV_FLOW_SPEC_ACTION_TAG of a raw packet receive, 0
// without one (mlx5 reads the CQE's flow tag the same way).
uint32_t read_flow_tag(ibv_cq_ex* ex) {
  const abi::Cqe& e = to_ucq(ex)->cur;
  return e.opcode == IBV_WC_RECV && !(e.wc_flags & IBV_WC_WITH_IMM) ? e.flow_tag : 0;
}
// The TCI a WQ with CVLAN stripping removed, 0 for an untagged frame
// (rdma-core providers/mlx5/cq.c, mlx5_cq_read_wc_cvlan).
uint16_t read_cvlan(ibv_cq_ex* ex) { return to_ucq(ex)->cur.cvlan; }
uint32_t read_src_qp(ibv_cq_ex* ex) { return to_ucq(ex)->cur.src_qp; }
unsigned int read_wc_flags(ibv_cq_ex* ex) { return to_ucq(ex)->cur.wc_flags; }
uint32_t read_slid(ibv_cq_ex* ex) { return to_ucq(ex)->cur.slid; }
uint8_t read_sl(ibv_cq_ex* ex) { return to_ucq(ex)->cur.sl; }
uint8_t read_dlid_path_bits(ibv_cq_ex* ex) { return to_ucq(ex)->cur.dlid_path_bits; }
// Device clock ticks (abi::kHcaCoreClockKhz), as mlx5's raw CQE timestamp.
uint64_t read_completion_ts(ibv_cq_ex* ex) { return to_ucq(ex)->cur.timestamp_ns; }
// The engine's wall-clock stamp, or for a tag-matching entry (whose field
// holds the tag: abi::Cqe) its device-clock stamp moved to the wall clock by
// the clocks' offset now, as mlx5 converts its CQE's HCA clock; never before
// an earlier reading of the CQ.
uint64_t read_completion_wallclock_ns(ibv_cq_ex* ex) {
  UCq* cq = to_ucq(ex);
  uint64_t ns = cq->cur.wallclock_ns;
  if (cq->cur.wc_flags & IBV_WC_TM_MATCH) {
    timespec real, dev;
    clock_gettime(CLOCK_REALTIME, &real);
    clock_gettime(abi::kDeviceClock, &dev);
    const int64_t offset = (int64_t(real.tv_sec) - dev.tv_sec) * 1'000'000'000 + (real.tv_nsec - dev.tv_nsec);
    ns = uint64_t(int64_t(cq->cur.timestamp_ns) + offset);
  }
  cq->last_wallclock_ns = std::max(cq->last_wallclock_ns, ns);
  return cq->last_wallclock_ns;
}
// Tag and app context only on a match completion, 0 on every other (as the
// mlx5 CQE carries them; rdma-core tests/test_tag_matching.py checks the zeros).
void read_tm_info(ibv_cq_ex* ex, ibv_wc_tm_info* info) {
  const abi::Cqe& e = to_ucq(ex)->cur;
  const bool match = e.wc_flags & IBV_WC_TM_MATCH;
  info->tag = match ? e.tm_tag : 0;
  info->priv = match ? e.tm_priv : 0;
}

ibv_cq_ex* create_cq(ibv_context* context, uint32_t cqe, void* cq_context, ibv_comp_channel* channel,
                     uint32_t comp_vector, uint64_t wc_flags, ibv_pd* parent_domain = nullptr,
                     bool ignore_overrun = false) {
  UContext* c = to_uctx(context);
  if (comp_vector >= uint32_t(context->num_comp_vectors) || cqe == 0 || cqe > c->info.max_cqe) {
    errno = EINVAL;
    return nullptr;
  }
  if (refuse_huge_queue(c, "MLX_CQ_ALLOC_TYPE")) return nullptr;
  place_polling_thread(c);  // the thread that makes a CQ usually polls it
  auto* cq = new_queue_object<UCq>(parent_domain, kResourceTypeCq);
  if (!cq) return nullptr;
  if (!track_async_events(c, cq)) {
    delete_queue_object(cq, kResourceTypeCq);
    errno = ENOMEM;
    return nullptr;
  }
  UChannel* ch = reinterpret_cast<UChannel*>(channel);
  uint32_t flags = wc_flags & kTimestampWcFlags ? uint32_t(abi::kCqTimestamps) : 0u;
  if (ignore_overrun) flags |= abi::kCqIgnoreOverrun;
  abi::CreateCqRequest req{cqe, flags, ch ? ch->handle : 0, uint64_t(uintptr_t(cq))};
  abi::CreateCqReply rep;
  int fd = -1;
  if (int err = c->conn.call(abi::CtlOp::kCreateCq, &req, sizeof(req), &rep, sizeof(rep), nullptr, 0,
                             &fd, 1)) {
    forget_async_events(c, cq);
    delete_queue_object(cq, kResourceTypeCq);
    errno = err;
    return nullptr;
  }
  cq->map = map_queue(fd, rep.shm_size);
  close(fd);
  if (!cq->map) {
    abi::HandleRequest d{rep.handle};
    c->conn.call(abi::CtlOp::kDestroyCq, &d, sizeof(d), nullptr, 0);
    forget_async_events(c, cq);
    delete_queue_object(cq, kResourceTypeCq);
    errno = ENOMEM;
    return nullptr;
  }
  cq->ctx = c;
  cq->map_size = rep.shm_size;
  cq->ring.attach(static_cast<uint8_t*>(cq->map));
  cq->ring.log2 = rep.log2_entries;
  cq->ring.stride = sizeof(abi::Cqe);
  cq->ring.prod = cq->ring.hdr->consumer.load();
  cq->channel = ch;
  cq->wc_flags = wc_flags;
  ibv_cq_ex& ex = cq->ex;
  ex.context = context;
  ex.channel = channel;
  ex.cq_context = cq_context;
  ex.handle = uint32_t(rep.handle);
  ex.cqe = int(rep.cqe);
  pthread_mutex_init(&ex.mutex, nullptr);
  pthread_cond_init(&ex.cond, nullptr);
  fill_cq_ex_ops(cq);
  if (ch) ++ch->ch.refcnt;
  return &ex;
}

}  // namespace

void fill_cq_ex_ops(UCq* cq) {
  ibv_cq_ex& ex = cq->ex;
  ex.start_poll = start_poll;
  ex.next_poll = next_poll;
  ex.end_poll = end_poll;
  ex.read_opcode = read_opcode;
  ex.read_vendor_err = read_vendor_err;
  ex.read_byte_len = read_byte_len;
  ex.read_imm_data = read_imm_data;
  ex.read_qp_num = read_qp_num;
  ex.read_src_qp = read_src_qp;
  ex.read_wc_flags = read_wc_flags;
  ex.read_slid = read_slid;
  ex.read_sl = read_sl;
  ex.read_dlid_path_bits = read_dlid_path_bits;
  ex.read_completion_ts = read_completion_ts;
  ex.read_completion_wallclock_ns = read_completion_wallclock_ns;
  ex.read_tm_info = read_tm_info;
  ex.read_flow_tag = read_flow_tag;
  ex.read_cvlan = read_cvlan;
}

void cq_clean(ibv_cq* ibcq, uint32_t qpn) {
  UCq* cq = to_ucq(ibcq);
  std::lock_guard<std::mutex> lock(cq->mu);
  // A CQ in a vendor's format belongs to the program that reads it: mlx5
  // leaves a direct-verbs CQ's entries alone (MLX5_CQ_FLAGS_DV_OWNED).
  if (cq->vendor_take) return;
  // The engine only appends past `producer`: entries up to the snapshot are
  // ours to compact. Keep the others in order, packed against the producer,
  // and move the consumer index past the gap.
  const uint32_t prod = cq->ring.hdr->producer.load(std::memory_order_acquire);
  const uint32_t cons = cq->ring.prod;
  if (prod - cons > cq->ring.size()) return;
  uint32_t dst = prod;
  for (uint32_t i = prod; i != cons;) {
    --i;
    const auto* e = reinterpret_cast<const abi::Cqe*>(cq->ring.slot(i));
    if (e->qp_num == qpn) continue;
    --dst;
    if (dst != i) std::memcpy(cq->ring.slot(dst), e, sizeof(abi::Cqe));
  }
  cq->ring.prod = dst;
  cq->ring.hdr->consumer.store(dst, std::memory_order_release);
}

int poll_cq(ibv_cq* ibcq, int num_entries, ibv_wc* wc) {
  UCq* cq = to_ucq(ibcq);
  if (num_entries < 0) return -1;
  place_polling_thread(cq->ctx);
  int n = 0;
  {
    std::lock_guard<std::mutex> lock(cq->mu);
    if (cq->vendor_take) [[unlikely]] {
      abi::Cqe e;
      while (n < num_entries && cq->vendor_take(cq, &e) == 0) to_wc(e, &wc[n++]);
      if (n) cq->vendor_consumed(cq);
    } else {
      while (n < num_entries) {
        const abi::Cqe* e = peek(cq);
        if (!e) break;
        to_wc(*e, &wc[n++]);
        ++cq->ring.prod;
      }
      if (n) cq->ring.hdr->consumer.store(cq->ring.prod, std::memory_order_release);
    }
  }
  if (!empty_poll(cq->ctx, n == 0)) return -1;  // nothing will ever come
  return n;
}

int req_notify_cq(ibv_cq* ibcq, int solicited_only) {
  UCq* cq = to_ucq(ibcq);
  if (cq->vendor_arm) [[unlikely]]
    return cq->vendor_arm(cq, solicited_only);
  // Arming a CQ without a channel is allowed (mlx5, rxe): nobody is told.
  // The stronger request stays in force until the next event (mlx5: a
  // solicited-only arm after an "any completion" arm does not weaken it).
  if (solicited_only) {
    uint32_t none = abi::kCqNotifyNone;
    cq->ring.hdr->notify.compare_exchange_strong(none, abi::kCqNotifySolicited,
                                                 std::memory_order_seq_cst);
  } else {
    cq->ring.hdr->notify.store(abi::kCqNotifyNext, std::memory_order_seq_cst);
  }
  // As mlx5 does when armed with completions still unpolled, raise the event
  // now rather than lose the wakeup (the engine only looks when it adds one).
  std::lock_guard<std::mutex> lock(cq->mu);
  const uint32_t prod = cq->ring.hdr->producer.load(std::memory_order_seq_cst);
  if (cq->channel && prod != cq->ring.prod && !solicited_only &&
      cq->ring.hdr->notify.exchange(abi::kCqNotifyNone) != abi::kCqNotifyNone) {
    abi::CompEventRecord rec{uint64_t(uintptr_t(cq))};
    [[maybe_unused]] ssize_t n = write(cq->channel->write_fd, &rec, sizeof(rec));
  }
  return 0;
}

ibv_cq_ex* create_cq_ex(ibv_context* context, ibv_cq_init_attr_ex* attr) {
  if (attr->comp_mask & ~uint32_t(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD)) {
    errno = EINVAL;
    return nullptr;
  }
  // mlx5_create_cq: the PD of a CQ must be a parent domain (its allocator and
  // thread domain are what it is for). IBV_CREATE_CQ_ATTR_SINGLE_THREADED and
  // a thread domain let mlx5 drop the CQ's lock; uroce keeps it.
  ibv_pd* parent = attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD ? attr->parent_domain : nullptr;
  if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) && !is_parent_domain(parent)) {
    errno = EINVAL;
    return nullptr;
  }
  const uint32_t flags = attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS ? attr->flags : 0;
  if (flags & ~uint32_t(IBV_CREATE_CQ_ATTR_SINGLE_THREADED | IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN)) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  if (attr->wc_flags & ~kSupportedWcFlags) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  ibv_cq_ex* cq = create_cq(context, attr->cqe, attr->cq_context, attr->channel, attr->comp_vector,
                            attr->wc_flags, parent, flags & IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN);
  if (cq) to_ucq(cq)->extended = true;
  return cq;
}

}  // namespace uroce::provider

using namespace uroce;
using namespace uroce::provider;

UROCE_EXPORT ibv_comp_channel* ibv_create_comp_channel(ibv_context* context) {
  UContext* c = to_uctx(context);
  auto* ch = new (std::nothrow) UChannel{};  // first: a failure leaves the engine nothing
  if (!ch) {
    errno = ENOMEM;
    return nullptr;
  }
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) {
    delete ch;
    return nullptr;
  }
  abi::CreateCompChannelReply rep;
  if (int err = c->conn.call(abi::CtlOp::kCreateCompChannel, nullptr, 0, &rep, sizeof(rep), &p[1], 1)) {
    close(p[0]);
    close(p[1]);
    delete ch;
    errno = err;
    return nullptr;
  }
  ch->ch.context = context;
  ch->ch.fd = p[0];
  ch->ch.refcnt = 0;
  ch->write_fd = p[1];
  ch->handle = rep.handle;
  return &ch->ch;
}

UROCE_EXPORT int ibv_destroy_comp_channel(ibv_comp_channel* channel) {
  auto* ch = reinterpret_cast<UChannel*>(channel);
  if (channel->refcnt) return EBUSY;
  abi::HandleRequest req{ch->handle};
  int err = to_uctx(channel->context)->conn.call(abi::CtlOp::kDestroyCompChannel, &req, sizeof(req),
                                                 nullptr, 0);
  if (err && err != EIO) return err;
  close(ch->ch.fd);
  close(ch->write_fd);
  delete ch;
  return 0;
}

UROCE_EXPORT ibv_cq* ibv_create_cq(ibv_context* context, int cqe, void* cq_context,
                                   ibv_comp_channel* channel, int comp_vector) {
  if (cqe <= 0 || comp_vector < 0) {
    errno = EINVAL;
    return nullptr;
  }
  return ibv_cq_ex_to_cq(create_cq(context, uint32_t(cqe), cq_context, channel,
                                   uint32_t(comp_vector), IBV_WC_STANDARD_FLAGS));
}

UROCE_EXPORT int ibv_resize_cq(ibv_cq* ibcq, int cqe) {
  UCq* cq = to_ucq(ibcq);
  if (cqe <= 0) return EINVAL;
  std::lock_guard<std::mutex> lock(cq->mu);
  if (cq->vendor_take) return EOPNOTSUPP;  // the program reads its ring in place (the engine refuses too)
  // The engine copies the unpolled entries into the new ring.
  cq->ring.hdr->consumer.store(cq->ring.prod, std::memory_order_release);
  abi::ResizeCqRequest req{ibcq->handle, uint32_t(cqe), 0};
  abi::ResizeCqReply rep;
  int fd = -1;
  if (int err = to_uctx(ibcq->context)->conn.call(abi::CtlOp::kResizeCq, &req, sizeof(req), &rep, sizeof(rep),
                                   nullptr, 0, &fd, 1))
    return err;
  void* map = map_queue(fd, rep.shm_size);
  close(fd);
  if (!map) return ENOMEM;
  unmap_queue(cq->map, cq->map_size);
  cq->map = map;
  cq->map_size = rep.shm_size;
  cq->ring.attach(static_cast<uint8_t*>(map));
  cq->ring.log2 = rep.log2_entries;
  cq->ring.prod = 0;
  ibcq->cqe = int(rep.cqe);
  return 0;
}

UROCE_EXPORT int ibv_destroy_cq(ibv_cq* ibcq) {
  UCq* cq = to_ucq(ibcq);
  abi::HandleRequest req{ibcq->handle};
  int err = to_uctx(ibcq->context)->conn.call(abi::CtlOp::kDestroyCq, &req, sizeof(req), nullptr, 0);
  if (err && err != EIO) return err;
  untrack_async_events(cq->ctx, cq, &ibcq->mutex, &ibcq->cond, &ibcq->async_events_completed);
  if (cq->channel) --cq->channel->ch.refcnt;
  if (void* v = cq->vendor.load()) cq->vendor_free(v);
  unmap_queue(cq->map, cq->map_size);
  pthread_cond_destroy(&ibcq->cond);
  pthread_mutex_destroy(&ibcq->mutex);
  delete_queue_object(cq, kResourceTypeCq);
  return 0;
}

UROCE_EXPORT int ibv_get_cq_event(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context) {
  // We hold a write end of the channel ourselves, so the engine's exit does
  // not show as EOF: wait on the control socket's hang-up as well.
  if (!(fcntl(channel->fd, F_GETFL) & O_NONBLOCK)) {
    pollfd p[2] = {{channel->fd, POLLIN, 0}, {channel->context->cmd_fd, POLLRDHUP, 0}};
    while (poll(p, 2, -1) < 0 && errno == EINTR) {
    }
    if (!(p[0].revents & POLLIN) && (p[1].revents & (POLLHUP | POLLRDHUP | POLLERR | POLLNVAL))) {
      errno = EIO;
      return -1;
    }
  }
  abi::CompEventRecord rec;
  ssize_t n;
  do n = read(channel->fd, &rec, sizeof(rec));
  while (n < 0 && errno == EINTR);
  if (n == 0) {
    errno = EIO;  // the engine is gone
    return -1;
  }
  if (n != ssize_t(sizeof(rec))) return -1;
  auto* u = reinterpret_cast<UCq*>(uintptr_t(rec.cq_cookie));
  *cq = ibv_cq_ex_to_cq(&u->ex);
  *cq_context = u->ex.cq_context;
  return 0;
}

UROCE_EXPORT void ibv_ack_cq_events(ibv_cq* cq, unsigned int nevents) {
  pthread_mutex_lock(&cq->mutex);
  cq->comp_events_completed += nevents;
  pthread_cond_signal(&cq->cond);
  pthread_mutex_unlock(&cq->mutex);
}
