// Shared receive queues (basic and XRC) and XRC domains: the control verbs.
// The datapath side (taking a WQE, the limit event) is in responder.cc.
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "device/device.h"
#include "device/mlx5_srq.h"
#include "device/params.h"

namespace uroce::device {

namespace {

// RecvWqe header plus max_sge entries, a power of two (mlx5 rounds the same
// way, so asking for 2 SGEs reports 3).
uint32_t srq_stride(uint32_t max_sge) {
  return 1u << log2_ceil(uint32_t(sizeof(abi::RecvWqe) + std::max(max_sge, 1u) * sizeof(abi::Sge)));
}

uint32_t posted(const Srq& s) {
  if (s.mlx5) return std::min(mlx5_srq_waiting(s), s.ring.size());
  const uint32_t prod = s.ring.hdr->producer.load(std::memory_order_acquire);
  const uint32_t n = prod - s.head;
  return n > s.ring.size() ? 0 : n;  // a corrupt index counts as empty
}

}  // namespace

Result<uint32_t> Device::create_srq(Owner* o, const abi::CreateSrqRequest& req) {
  // The client's integer is checked before it becomes an enum: a value outside
  // the enum's range is undefined as one (found by tests/fuzz/control_fuzz.cc).
  if (req.srq_type != IBV_SRQT_BASIC && req.srq_type != IBV_SRQT_XRC && req.srq_type != IBV_SRQT_TM)
    return {EOPNOTSUPP};
  const ibv_srq_type type = ibv_srq_type(req.srq_type);
  Pd* pd = pds_.get(req.pd);
  if (!pd || pd->owner != o) return {EINVAL};
  XrcdHandle* xh = nullptr;
  Cq* cq = nullptr;
  if (type == IBV_SRQT_XRC) {
    xh = xrcd_handles_.get(req.xrcd);
    cq = cqs_.get(req.cq);
    if (!xh || xh->owner != o || !cq || cq->owner != o) return {EINVAL};
  }
  if (type == IBV_SRQT_TM) {
    // mlx5_create_srq_ex / kernel mlx5_ib_create_srq: a CQ of its own, at
    // least one tag, no more tags or ops than tm_caps gives.
    cq = cqs_.get(req.cq);
    if (!cq || cq->owner != o) return {EINVAL};
    if (req.max_num_tags == 0 || req.max_num_tags > kTmMaxNumTags) return {EINVAL};
    if (req.max_ops == 0 || req.max_ops > kTmMaxOps) return {EINVAL};
  }
  // Zero or over-limit sizes are EINVAL (rxe_srq_chk_init; man
  // ibv_create_srq). In mlx5 mode max_wr 0 is taken, as a ConnectX takes it
  // (providers/mlx5/srq.c: a ring of align_queue_size(max_wr + 1), reported
  // max_wr 0); rdma-core's test_mlx5_huge_page creates such SRQs.
  if ((req.max_wr == 0 && !config_.mlx5) || req.max_wr > kMaxSrqWr - 1 || req.max_sge > kMaxSrqSge)
    return {EINVAL};
  if (srqs_.count() >= info_.max_srq) return {ENOMEM};
  auto srq = std::make_unique<Srq>();
  srq->owner = o;
  srq->cookie = req.cookie;
  srq->type = type;
  srq->pd = uint32_t(req.pd);
  const uint32_t log2 = log2_ceil(req.max_wr + 1);
  const uint32_t stride = srq_stride(req.max_sge);
  if (int e = srq->mem.create("uroce-srq", RingView::bytes(log2, stride))) return {e};
  srq->ring.init(srq->mem.base(), log2, stride);
  srq->max_wr = (1u << log2) - 1;
  srq->max_sge = std::min<uint32_t>((stride - sizeof(abi::RecvWqe)) / sizeof(abi::Sge), kMaxSrqSge);
  // srq_limit is ignored at creation (man ibv_create_srq; mlx5 does the same).
  ++pd->refs;
  if (xh) {
    srq->xrcd = xh->xrcd;
    srq->xrcd_handle = uint32_t(req.xrcd);
    srq->cq = uint32_t(req.cq);
    ++xh->objects;
    ++xrcds_.get(xh->xrcd)->users;
    ++cq->refs;
  }
  if (type == IBV_SRQT_TM) {
    srq->cq = uint32_t(req.cq);
    srq->tm = std::make_unique<TagList>(req.max_num_tags, req.max_ops);
    // The op ring holds every op not yet retired (at most max_ops), the
    // freed ring every handle not yet taken back (at most max_num_tags).
    srq->tm_log2_ops = log2_ceil(req.max_ops);
    srq->tm_log2_freed = log2_ceil(req.max_num_tags);
    if (int e = srq->tm_mem.create("uroce-tm-srq", abi::tm_region_size(srq->tm_log2_ops, srq->tm_log2_freed)))
      return {e};
    srq->tm_hdr = reinterpret_cast<abi::TmOpsHeader*>(srq->tm_mem.base());
    srq->tm_hdr->log2_ops = srq->tm_log2_ops;
    srq->tm_hdr->log2_freed = srq->tm_log2_freed;
    srq->tm->attach_freed(reinterpret_cast<uint32_t*>(srq->tm_mem.base() + abi::tm_freed_offset(srq->tm_log2_ops)),
                          (1u << srq->tm_log2_freed) - 1, &srq->tm_hdr->freed);
    ++cq->refs;
  }
  const uint32_t n = srqs_.insert(std::move(srq));
  if (type == IBV_SRQT_TM) tm_srqs_.push_back(n);
  return {0, n};
}

int Device::modify_srq(Owner* o, uint32_t handle, uint32_t mask, uint32_t max_wr, uint32_t limit) {
  Srq* s = srqs_.get(handle);
  if (!s || s->owner != o) return EINVAL;
  if (mask & ~uint32_t(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT)) return EINVAL;
  const uint32_t outstanding = posted(*s);
  // Validate everything before changing anything (man ibv_modify_srq).
  uint32_t new_log2 = s->ring.log2;
  if (mask & IBV_SRQ_MAX_WR) {
    if (max_wr == 0 || max_wr > kMaxSrqWr - 1 || max_wr < outstanding) return EINVAL;
    new_log2 = log2_ceil(max_wr + 1);
  }
  const uint32_t new_max_wr = (1u << new_log2) - 1;
  if ((mask & IBV_SRQ_LIMIT) && limit > new_max_wr) return EINVAL;
  if ((mask & IBV_SRQ_MAX_WR) && !(mask & IBV_SRQ_LIMIT) && s->limit > new_max_wr) return EINVAL;
  if ((mask & IBV_SRQ_MAX_WR) && new_log2 != s->ring.log2) {
    // Resize (IBV_DEVICE_SRQ_RESIZE): a new ring, the posted WQEs kept in order.
    QueueMemory mem;
    if (int e = mem.create("uroce-srq", RingView::bytes(new_log2, s->ring.stride))) return e;
    RingView ring;
    ring.init(mem.base(), new_log2, s->ring.stride);
    for (uint32_t i = 0; i < outstanding; ++i)
      std::memcpy(ring.slot(i), s->ring.slot(s->head + i), s->ring.stride);
    ring.hdr->producer.store(outstanding, std::memory_order_release);
    ring.hdr->consumer.store(0, std::memory_order_release);
    s->mem = std::move(mem);
    s->ring = ring;
    s->head = 0;
    s->max_wr = new_max_wr;
  }
  if (mask & IBV_SRQ_LIMIT) s->limit = limit;  // 0 disarms
  return 0;
}

void Device::srq_consumed(Srq& s) {
  ++s.consumed;
  if (s.limit && posted(s) < s.limit) {
    s.limit = 0;  // one event, then disarmed until armed again
    s.owner->post_async(IBV_EVENT_SRQ_LIMIT_REACHED, s.cookie);
  }
}

int Device::destroy_srq(Owner* o, uint32_t handle) {
  Srq* s = srqs_.get(handle);
  if (!s || s->owner != o) return EINVAL;
  if (s->refs) return EBUSY;  // man ibv_create_srq NOTES: QPs still attached
  // An XRC target QP may be filling a WQE of this SRQ: the rest of that
  // message is accepted but placed nowhere, and no completion follows.
  for (Qp* q : active_qps_)
    if (q->resp_recv_valid && q->resp_recv.srq == handle) q->resp_recv.discard = true;
  if (Pd* pd = pds_.get(s->pd)) --pd->refs;
  if (s->type == IBV_SRQT_TM) {
    if (Cq* cq = cqs_.get(s->cq)) --cq->refs;
    std::erase(tm_srqs_, handle);
  }
  if (s->type == IBV_SRQT_XRC) {
    if (Cq* cq = cqs_.get(s->cq)) --cq->refs;
    if (XrcdHandle* h = xrcd_handles_.get(s->xrcd_handle)) --h->objects;
    if (Xrcd* x = xrcds_.get(s->xrcd); x && --x->users == 0 && x->handles == 0) xrcds_.erase(s->xrcd);
  }
  srqs_.erase(handle);
  return 0;
}

// ibv_post_srq_ops: each op in order until one fails (mlx5_post_srq_ops).
// Signaled ops complete on the SRQ's CQ at once: the list lives in the
// engine, so an op is done when the engine has taken it.
Device::SrqOpsResult Device::post_srq_ops(Owner* o, uint32_t handle, const abi::SrqOp* ops, uint32_t n,
                                          uint32_t* handles) {
  SrqOpsResult res;
  Srq* s = srqs_.get(handle);
  // An SRQ in mlx5's format takes its list operations as WQEs on its
  // command QP (Device::tag_list_op) only.
  if (!s || s->owner != o || !s->tm || s->tm->program_managed()) {
    res.err = EINVAL;
    return res;
  }
  for (; res.done < n; ++res.done) {
    Cq* cq = cqs_.get(s->cq);
    const uint32_t cons = cq ? cq->ring.hdr->consumer.load(std::memory_order_acquire) : 0;
    TagList::OpResult r = s->tm->post(ops[res.done], cq ? cq->prod : 0, cons);
    if (r.err) {
      res.err = r.err;
      break;
    }
    handles[res.done] = r.handle;
    if (r.signaled) {
      r.cqe.qp_num = handle;  // the SRQ number stands for mlx5's command QP
      complete_to(s->cq, r.cqe, false);
    }
  }
  return res;
}

// The list-operation rings of the TM-SRQs (abi::TmOpsHeader): the ops the
// provider published since the last look; the ops retired as the SRQ's CQ
// is polled (so the provider seldom has to ask); an answer if it asked.
// Freed handles reach the provider as they are freed (TagList::attach_freed).
// Everything read from the ring is the client's and is checked as a control
// message would be.
bool Device::poll_tm_ops() {
  bool work = false;
  for (uint32_t n : tm_srqs_) {
    Srq& s = *srqs_.get(n);
    abi::TmOpsHeader& h = *s.tm_hdr;
    const uint32_t prod = h.producer.load(std::memory_order_acquire);
    const uint32_t request = h.request.load(std::memory_order_acquire);
    const Cq* cq = cqs_.get(s.cq);
    const uint32_t cq_consumed = cq ? cq->ring.hdr->consumer.load(std::memory_order_acquire) : 0;
    if (prod == s.tm_consumer && request == s.tm_answered && cq_consumed == s.tm_cq_seen) continue;
    s.tm_cq_seen = cq_consumed;
    if (prod != s.tm_consumer || request != s.tm_answered) work = true;
    // A client publishing more than the ring holds gets the last ring's worth.
    const uint32_t ring = 1u << s.tm_log2_ops;
    if (prod - s.tm_consumer > ring) s.tm_consumer = prod - ring;
    const auto* ops = reinterpret_cast<const abi::SrqOp*>(s.tm_mem.base() + abi::kTmOpsOffset);
    for (; s.tm_consumer != prod; ++s.tm_consumer) {
      const abi::SrqOp op = ops[s.tm_consumer & (ring - 1)];  // a copy: the client may rewrite it
      uint32_t handle;
      post_srq_ops(s.owner, n, &op, 1, &handle);  // a refused op retires at once
    }
    h.consumer.store(s.tm_consumer, std::memory_order_release);
    s.tm->retire(cq ? cq->ring.hdr->consumer.load(std::memory_order_acquire) : 0);
    h.retired.store(s.tm->retired(), std::memory_order_release);
    if (request != s.tm_answered) {
      s.tm_answered = request;
      h.answered.store(request, std::memory_order_release);
    }
  }
  return work;
}

Result<uint32_t> Device::open_xrcd(Owner* o, int fd, uint32_t oflags) {
  uint32_t domain = 0;
  if (fd >= 0) {
    struct stat st;
    if (fstat(fd, &st) != 0) return {EBADF};
    xrcds_.for_each([&](uint32_t i, Xrcd& x) {
      if (x.has_inode && x.dev == uint64_t(st.st_dev) && x.ino == uint64_t(st.st_ino)) domain = i;
    });
    // man ibv_open_xrcd: O_CREAT|O_EXCL on an existing domain fails; without
    // O_CREAT a missing domain is EAGAIN (the kernel's answers).
    if (domain && (oflags & O_EXCL) && (oflags & O_CREAT)) return {EINVAL};
    if (!domain && !(oflags & O_CREAT)) return {EAGAIN};
    if (!domain) {
      auto x = std::make_unique<Xrcd>();
      x->has_inode = true;
      x->dev = uint64_t(st.st_dev);
      x->ino = uint64_t(st.st_ino);
      domain = xrcds_.insert(std::move(x));
    }
  } else {
    domain = xrcds_.insert(std::make_unique<Xrcd>());  // private to this handle
  }
  ++xrcds_.get(domain)->handles;
  auto h = std::make_unique<XrcdHandle>();
  h->owner = o;
  h->xrcd = domain;
  return {0, xrcd_handles_.insert(std::move(h))};
}

int Device::close_xrcd(Owner* o, uint32_t handle) {
  XrcdHandle* h = xrcd_handles_.get(handle);
  if (!h || h->owner != o) return EINVAL;
  if (h->objects) return EBUSY;
  const uint32_t domain = h->xrcd;
  xrcd_handles_.erase(handle);
  if (Xrcd* x = xrcds_.get(domain); x && --x->handles == 0 && x->users == 0) xrcds_.erase(domain);
  return 0;
}

}  // namespace uroce::device
