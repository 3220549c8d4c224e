// Shared receive queues (basic and XRC) and XRC domains.
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "verbs_provider/provider.h"

namespace uroce::provider {

namespace {

void attach_ring(USrq* s, const abi::CreateSrqReply& rep, void* map) {
  s->map = map;
  s->map_size = rep.shm_size;
  s->ring.attach(static_cast<uint8_t*>(map));
  s->ring.log2 = rep.log2;
  s->ring.stride = rep.stride;
  s->ring.prod = s->ring.hdr->producer.load();
  s->max_wr = rep.max_wr;
  s->max_sge = rep.max_sge;
}

bool attach_tm(USrq* s, const abi::CreateSrqReply& rep, int fd) {
  void* map = map_queue(fd, rep.tm_shm_size);
  if (!map) return false;
  UTmRing& t = s->tm;
  t.map = map;
  t.map_size = rep.tm_shm_size;
  t.hdr = static_cast<abi::TmOpsHeader*>(map);
  const uint32_t log2_ops = t.hdr->log2_ops;
  const uint32_t log2_freed = t.hdr->log2_freed;
  if (abi::tm_region_size(log2_ops, log2_freed) > rep.tm_shm_size ||
      (1ull << log2_freed) < rep.tm_max_num_tags || (1ull << log2_ops) < rep.tm_max_ops) {
    unmap_queue(map, rep.tm_shm_size);
    t.map = nullptr;
    return false;
  }
  t.ops = reinterpret_cast<abi::SrqOp*>(static_cast<uint8_t*>(map) + abi::kTmOpsOffset);
  t.freed = reinterpret_cast<const uint32_t*>(static_cast<uint8_t*>(map) + abi::tm_freed_offset(log2_ops));
  t.ops_mask = (1u << log2_ops) - 1;
  t.freed_mask = (1u << log2_freed) - 1;
  t.max_num_tags = rep.tm_max_num_tags;
  t.max_ops = rep.tm_max_ops;
  for (uint32_t h = 0; h < t.max_num_tags; ++h) t.free_handles.push_back(h);
  return true;
}

void tm_take_freed(UTmRing& t) {
  const uint32_t f = t.hdr->freed.load(std::memory_order_acquire);
  for (; t.freed_seen != f; ++t.freed_seen) t.free_handles.push_back(t.freed[t.freed_seen & t.freed_mask]);
}

// The list or the op ring looks full: publish what was written, ask the
// engine for its retired count and freed handles as of now, and wait for
// the answer (one trip through the engine's poll loop, no syscall unless it
// sleeps). Only here does ibv_post_srq_ops wait; EIO if the engine is gone.
int tm_refresh(USrq* s) {
  UTmRing& t = s->tm;
  t.hdr->producer.store(t.prod, std::memory_order_release);
  const uint32_t req = ++t.request;
  t.hdr->request.store(req, std::memory_order_release);
  s->ctx->ring_doorbell();
  for (uint32_t spins = 1; t.hdr->answered.load(std::memory_order_acquire) != req; ++spins) {
    if (s->ctx->engine_gone) return EIO;
    if (spins % 4096 == 0) {
      pollfd p{s->ctx->conn.fd(), POLLRDHUP, 0};
      if (p.fd < 0 || (poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR)))) {
        s->ctx->engine_gone = true;
        return EIO;
      }
    }
    sched_yield();
  }
  tm_take_freed(t);
  return 0;
}

// One op's checks, in mlx5_post_srq_ops' order: EINVAL for what no state
// makes valid, ENOMEM for max_ops outstanding or a full list.
int tm_check(USrq* s, const ibv_ops_wr* w) {
  UTmRing& t = s->tm;
  if (w->opcode > IBV_WR_TAG_SYNC || (w->flags & ~uint32_t(IBV_OPS_SIGNALED | IBV_OPS_TM_SYNC))) return EINVAL;
  if (t.prod - t.hdr->retired.load(std::memory_order_acquire) >= t.max_ops) {
    if (int err = tm_refresh(s)) return err;
    if (t.prod - t.hdr->retired.load(std::memory_order_acquire) >= t.max_ops) return ENOMEM;
  }
  if (w->opcode == IBV_WR_TAG_ADD) {
    // More SGEs than tm_caps.max_sge (1) is EINVAL (rdma-core
    // providers/mlx5/qp.c, mlx5_post_srq_ops).
    if (w->tm.add.num_sge > 1) return EINVAL;
    if (t.free_handles.empty()) tm_take_freed(t);
    if (t.free_handles.empty()) {
      if (int err = tm_refresh(s)) return err;
      if (t.free_handles.empty()) return ENOMEM;
    }
  }
  if (w->opcode == IBV_WR_TAG_DEL && w->tm.handle >= t.max_num_tags) return EINVAL;
  return 0;
}

}  // namespace

ibv_srq* create_srq_ex(ibv_context* context, ibv_srq_init_attr_ex* attr) {
  UContext* c = to_uctx(context);
  if (refuse_huge_queue(c, "MLX_SRQ_ALLOC_TYPE")) return nullptr;
  // libibverbs' rules (cmd_srq.c): unknown bits EOPNOTSUPP, PD mandatory,
  // XRC needs its domain and CQ.
  if (attr->comp_mask >= IBV_SRQ_INIT_ATTR_RESERVED) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !attr->pd) {
    errno = EINVAL;
    return nullptr;
  }
  const ibv_srq_type type =
      (attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) ? attr->srq_type : IBV_SRQT_BASIC;
  abi::CreateSrqRequest req{};
  if (type == IBV_SRQT_XRC) {
    if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_XRCD) || !(attr->comp_mask & IBV_SRQ_INIT_ATTR_CQ) ||
        !attr->xrcd || !attr->cq) {
      errno = EINVAL;
      return nullptr;
    }
    req.xrcd = reinterpret_cast<UXrcd*>(attr->xrcd)->handle;
    req.cq = attr->cq->handle;
  } else if (type == IBV_SRQT_TM) {
    // libibverbs cmd_srq.c and mlx5_create_srq_ex: CQ and TM in comp_mask,
    // at least one tag, and an extended CQ ("An extended CQ is required to
    // read TM information from"); the engine checks the limits.
    if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_CQ) || !(attr->comp_mask & IBV_SRQ_INIT_ATTR_TM) ||
        !attr->cq || attr->tm_cap.max_num_tags == 0 || !to_ucq(attr->cq)->extended) {
      errno = EINVAL;
      return nullptr;
    }
    req.cq = attr->cq->handle;
    req.max_num_tags = attr->tm_cap.max_num_tags;
    req.max_ops = attr->tm_cap.max_ops;
  } else if (type != IBV_SRQT_BASIC) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  auto* s = new_queue_object<USrq>(attr->pd, kResourceTypeSrq);
  if (!s) return nullptr;
  if (!track_async_events(c, s)) {
    delete_queue_object(s, kResourceTypeSrq);
    errno = ENOMEM;
    return nullptr;
  }
  req.pd = attr->pd->handle;
  req.cookie = uint64_t(uintptr_t(s));
  req.srq_type = type;
  req.max_wr = attr->attr.max_wr;
  req.max_sge = attr->attr.max_sge;
  req.srq_limit = attr->attr.srq_limit;
  abi::CreateSrqReply rep;
  int fds[2] = {-1, -1};
  if (int err = c->conn.call(abi::CtlOp::kCreateSrq, &req, sizeof(req), &rep, sizeof(rep), nullptr, 0,
                             fds, type == IBV_SRQT_TM ? 2 : 1)) {
    forget_async_events(c, s);
    delete_queue_object(s, kResourceTypeSrq);
    errno = err;
    return nullptr;
  }
  void* map = map_queue(fds[0], rep.shm_size);
  close(fds[0]);
  const bool tm_ok = type != IBV_SRQT_TM || (fds[1] >= 0 && attach_tm(s, rep, fds[1]));
  if (fds[1] >= 0) close(fds[1]);
  if (!map || !tm_ok) {
    if (map) unmap_queue(map, rep.shm_size);
    if (s->tm.map) unmap_queue(s->tm.map, s->tm.map_size);
    abi::HandleRequest d{rep.handle};
    c->conn.call(abi::CtlOp::kDestroySrq, &d, sizeof(d), nullptr, 0);
    forget_async_events(c, s);
    delete_queue_object(s, kResourceTypeSrq);
    errno = ENOMEM;
    return nullptr;
  }
  s->ctx = c;
  s->srqn = rep.srqn;
  s->type = type;
  attach_ring(s, rep, map);
  // The sizes the device really gives are written back (man ibv_create_srq).
  attr->attr.max_wr = rep.max_wr;
  attr->attr.max_sge = rep.max_sge;
  ibv_srq& srq = s->srq;
  srq.context = context;
  srq.srq_context = attr->srq_context;
  srq.pd = attr->pd;
  srq.handle = uint32_t(rep.handle);
  pthread_mutex_init(&srq.mutex, nullptr);
  pthread_cond_init(&srq.cond, nullptr);
  return &srq;
}

int post_srq_recv(ibv_srq* ibsrq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  USrq* s = to_usrq(ibsrq);
  if (s->ctx->engine_gone) {
    *bad_wr = wr;
    return EIO;
  }
  int err = 0;
  std::lock_guard<std::mutex> lock(s->mu);
  if (s->vendor_map) [[unlikely]] {
    *bad_wr = wr;  // its WQEs are mlx5's, which the program writes (docs/mlx5.md)
    return EOPNOTSUPP;
  }
  const uint32_t start = s->ring.prod;
  for (; wr; wr = wr->next) {
    if (wr->num_sge < 0 || uint32_t(wr->num_sge) > s->max_sge) {
      err = EINVAL;
      break;
    }
    if (s->ring.prod - s->ring.hdr->consumer.load(std::memory_order_acquire) >= s->max_wr) {
      err = ENOMEM;
      break;
    }
    uint8_t* slot = s->ring.slot(s->ring.prod);
    abi::RecvWqe hdr{wr->wr_id, uint32_t(wr->num_sge), 0};
    std::memcpy(slot, &hdr, sizeof(hdr));
    auto* sge = reinterpret_cast<abi::Sge*>(slot + sizeof(hdr));
    for (int i = 0; i < wr->num_sge; ++i)
      sge[i] = {wr->sg_list[i].addr, wr->sg_list[i].length, wr->sg_list[i].lkey};
    ++s->ring.prod;
  }
  if (err) *bad_wr = wr;
  if (s->ring.prod != start) {
    s->ring.hdr->producer.store(s->ring.prod, std::memory_order_release);
    s->ctx->ring_doorbell();
  }
  return err;
}

// ibv_post_srq_ops (verbs.h: an inline reaching verbs_context.post_srq_ops):
// each op is written into the TM-SRQ's op ring and published at the end,
// with a doorbell, as post_srq_recv does; the engine's poll loop takes them.
// Handles of TAG_ADD come from the provider's free list (mlx5's tm_head).
int post_srq_ops(ibv_srq* ibsrq, ibv_ops_wr* op, ibv_ops_wr** bad_op) {
  USrq* s = to_usrq(ibsrq);
  if (s->type != IBV_SRQT_TM) {
    *bad_op = op;
    return EINVAL;
  }
  if (s->ctx->engine_gone) {
    *bad_op = op;
    return EIO;
  }
  UTmRing& t = s->tm;
  std::lock_guard<std::mutex> lock(s->mu);
  // In mlx5's format (mlx5dv_init_obj) the program posts its list operations
  // as TAG_MATCHING WQEs on a command QP of its own, and names the entries
  // itself: the verbs' ring is no longer read (device/mlx5_srq.cc).
  if (s->vendor_map) [[unlikely]] {
    *bad_op = op;
    return EOPNOTSUPP;
  }
  const uint32_t start = t.prod;
  int err = 0;
  for (; op; op = op->next) {
    if ((err = tm_check(s, op))) break;
    abi::SrqOp o{};
    o.wr_id = op->wr_id;
    o.opcode = op->opcode;
    o.flags = uint32_t(op->flags);
    o.unexpected_cnt = op->tm.unexpected_cnt;
    o.handle = op->tm.handle;
    if (op->opcode == IBV_WR_TAG_ADD) {
      o.handle = t.free_handles.front();
      t.free_handles.pop_front();
      op->tm.handle = o.handle;
      o.recv_wr_id = op->tm.add.recv_wr_id;
      o.tag = op->tm.add.tag;
      o.mask = op->tm.add.mask;
      o.num_sge = op->tm.add.num_sge;
      if (op->tm.add.num_sge >= 1 && op->tm.add.sg_list)
        o.sge = {op->tm.add.sg_list[0].addr, op->tm.add.sg_list[0].length, op->tm.add.sg_list[0].lkey};
    }
    t.ops[t.prod & t.ops_mask] = o;
    ++t.prod;
  }
  if (err) *bad_op = op;
  if (t.prod != start) {
    t.hdr->producer.store(t.prod, std::memory_order_release);
    s->ctx->ring_doorbell();
  }
  return err;
}

int get_srq_num(ibv_srq* srq, uint32_t* srq_num) {
  *srq_num = to_usrq(srq)->srqn;
  return 0;
}

ibv_xrcd* open_xrcd(ibv_context* context, ibv_xrcd_init_attr* attr) {
  // libibverbs (cmd.c ibv_cmd_open_xrcd): unknown bits EOPNOTSUPP, FD and
  // OFLAGS both required.
  if (attr->comp_mask >= IBV_XRCD_INIT_ATTR_RESERVED) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  if (!(attr->comp_mask & IBV_XRCD_INIT_ATTR_FD) || !(attr->comp_mask & IBV_XRCD_INIT_ATTR_OFLAGS)) {
    errno = EINVAL;
    return nullptr;
  }
  if (attr->oflags & ~(O_CREAT | O_EXCL)) {
    errno = EINVAL;
    return nullptr;
  }
  // An fd that is not open, or opened O_PATH (which needs no permission on
  // the file): the kernel's fdget() takes neither (ib_uverbs_open_xrcd).
  if (attr->fd != -1 && (fcntl(attr->fd, F_GETFD) < 0 || (fcntl(attr->fd, F_GETFL) & O_PATH))) {
    errno = EBADF;
    return nullptr;
  }
  auto* x = new (std::nothrow) UXrcd{};  // first: a failure leaves the engine nothing
  if (!x) {
    errno = ENOMEM;
    return nullptr;
  }
  abi::OpenXrcdRequest req{attr->fd != -1 ? 1u : 0u, uint32_t(attr->oflags)};
  abi::OpenXrcdReply rep;
  if (int err = to_uctx(context)->conn.call(abi::CtlOp::kOpenXrcd, &req, sizeof(req), &rep,
                                            sizeof(rep), &attr->fd, attr->fd != -1 ? 1 : 0)) {
    delete x;
    errno = err;
    return nullptr;
  }
  x->xrcd.context = context;
  x->handle = rep.handle;
  return &x->xrcd;
}

int close_xrcd(ibv_xrcd* xrcd) {
  auto* x = reinterpret_cast<UXrcd*>(xrcd);
  abi::HandleRequest req{x->handle};
  int err = to_uctx(xrcd->context)->conn.call(abi::CtlOp::kCloseXrcd, &req, sizeof(req), nullptr, 0);
  if (err && err != EIO) return err;
  delete x;
  return 0;
}

}  // namespace uroce::provider

using namespace uroce;
using namespace uroce::provider;

UROCE_EXPORT ibv_srq* ibv_create_srq(ibv_pd* pd, ibv_srq_init_attr* init) {
  ibv_srq_init_attr_ex ex{};
  ex.srq_context = init->srq_context;
  ex.attr = init->attr;
  ex.comp_mask = IBV_SRQ_INIT_ATTR_PD;
  ex.pd = pd;
  ibv_srq* srq = create_srq_ex(pd->context, &ex);
  if (srq) init->attr = ex.attr;
  return srq;
}

UROCE_EXPORT int ibv_modify_srq(ibv_srq* ibsrq, ibv_srq_attr* attr, int attr_mask) {
  USrq* s = to_usrq(ibsrq);
  if (attr_mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT)) return EINVAL;
  if (!attr_mask) return 0;
  std::lock_guard<std::mutex> lock(s->mu);
  abi::ModifySrqRequest req{ibsrq->handle, uint32_t(attr_mask), attr->max_wr, attr->srq_limit, 0};
  abi::ModifySrqReply rep;
  int fd = -1;
  if (int err = to_uctx(ibsrq->context)->conn.call(abi::CtlOp::kModifySrq, &req, sizeof(req), &rep, sizeof(rep),
                                  nullptr, 0, &fd, 1))
    return err;
  if (fd >= 0) {
    // Resized: the engine moved the posted WQEs into a new ring.
    void* map = map_queue(fd, rep.shm_size);
    close(fd);
    if (!map) return ENOMEM;
    unmap_queue(s->map, s->map_size);
    attach_ring(s, rep, map);
  }
  return 0;
}

UROCE_EXPORT int ibv_query_srq(ibv_srq* ibsrq, ibv_srq_attr* attr) {
  abi::HandleRequest req{ibsrq->handle};
  abi::QuerySrqReply rep;
  if (int err = to_uctx(ibsrq->context)->conn.call(abi::CtlOp::kQuerySrq, &req, sizeof(req), &rep, sizeof(rep)))
    return err;
  attr->max_wr = rep.max_wr;
  attr->max_sge = rep.max_sge;
  attr->srq_limit = rep.srq_limit;
  return 0;
}

UROCE_EXPORT int ibv_destroy_srq(ibv_srq* ibsrq) {
  USrq* s = to_usrq(ibsrq);
  abi::HandleRequest req{ibsrq->handle};
  int err = to_uctx(ibsrq->context)->conn.call(abi::CtlOp::kDestroySrq, &req, sizeof(req), nullptr, 0);
  if (err && err != EIO) return err;
  untrack_async_events(to_uctx(ibsrq->context), s, &ibsrq->mutex, &ibsrq->cond, &ibsrq->events_completed);
  unmap_queue(s->map, s->map_size);
  if (s->tm.map) unmap_queue(s->tm.map, s->tm.map_size);
  if (s->vendor_map) unmap_queue(s->vendor_map, s->vendor_map_size);
  pthread_cond_destroy(&ibsrq->cond);
  pthread_mutex_destroy(&ibsrq->mutex);
  delete_queue_object(s, kResourceTypeSrq);
  return 0;
}
