// Receive work queues, receive indirection tables and RSS QPs
// (ibv_create_wq ... ibv_create_qp_ex with an indirection table), with the
// checks libibverbs and mlx5 make in userspace (rdma-core libibverbs/cmd.c,
// cmd_wq.c, cmd_qp.c and providers/mlx5/verbs.c). A WQ's
// receives go through its shared-memory ring like an SRQ's: no message.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>

#include "verbs_provider/provider.h"

namespace uroce::provider {

namespace {

struct UIndTable {
  ibv_rwq_ind_table table;
};

int post_wq_recv(ibv_wq* ibwq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  UWq* w = to_uwq(ibwq);
  if (w->ctx->engine_gone) {
    *bad_wr = wr;
    return EIO;
  }
  // mlx5_post_wq_recv: no state check; too many SGEs EINVAL, a full ring ENOMEM.
  int err = 0;
  std::lock_guard<std::mutex> lock(w->mu);
  if (w->vendor_map) [[unlikely]] {
    *bad_wr = wr;  // its WQEs are mlx5's, which the program writes (docs/mlx5.md)
    return EOPNOTSUPP;
  }
  const uint32_t start = w->ring.prod;
  for (; wr; wr = wr->next) {
    if (wr->num_sge < 0 || uint32_t(wr->num_sge) > w->max_sge) {
      err = EINVAL;
      break;
    }
    // One slot stays empty, as in every ring of the engine.
    if (w->ring.prod - w->ring.hdr->consumer.load(std::memory_order_acquire) >= w->ring.size() - 1) {
      err = ENOMEM;
      break;
    }
    uint8_t* slot = w->ring.slot(w->ring.prod);
    abi::RecvWqe hdr{wr->wr_id, uint32_t(wr->num_sge), 0};
    std::memcpy(slot, &hdr, sizeof(hdr));
    auto* sge = reinterpret_cast<abi::Sge*>(slot + sizeof(hdr));
    for (int i = 0; i < wr->num_sge; ++i) sge[i] = {wr->sg_list[i].addr, wr->sg_list[i].length, wr->sg_list[i].lkey};
    ++w->ring.prod;
  }
  if (err) *bad_wr = wr;
  if (w->ring.prod != start) {
    w->ring.hdr->producer.store(w->ring.prod, std::memory_order_release);
    w->ctx->ring_doorbell();
  }
  return err;
}

ibv_wq* create_wq(ibv_context* context, ibv_wq_init_attr* attr) {
  UContext* c = to_uctx(context);
  // libibverbs (cmd_wq.c): unknown comp_mask bits EINVAL; the flags only
  // with IBV_WQ_INIT_ATTR_FLAGS, an unknown one EOPNOTSUPP. mlx5: max_wr 0
  // is EINVAL.
  if (attr->comp_mask >= IBV_WQ_INIT_ATTR_RESERVED || !attr->pd || !attr->cq || attr->max_wr == 0) {
    errno = EINVAL;
    return nullptr;
  }
  const uint32_t flags = (attr->comp_mask & IBV_WQ_INIT_ATTR_FLAGS) ? attr->create_flags : 0;
  if (flags >= IBV_WQ_FLAGS_RESERVED) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  auto* w = new (std::nothrow) UWq{};
  if (!w) {
    errno = ENOMEM;
    return nullptr;
  }
  if (!track_async_events(c, w)) {
    delete w;
    errno = ENOMEM;
    return nullptr;
  }
  abi::CreateWqRequest req{attr->pd->handle, attr->cq->handle, uint64_t(uintptr_t(w)),
                           uint32_t(attr->wq_type), attr->max_wr, attr->max_sge, flags};
  abi::CreateWqReply rep;
  int fd = -1;
  if (int err = c->conn.call(abi::CtlOp::kCreateWq, &req, sizeof(req), &rep, sizeof(rep), nullptr, 0, &fd, 1)) {
    forget_async_events(c, w);
    delete w;
    errno = err;
    return nullptr;
  }
  w->map = map_queue(fd, rep.shm_size);
  close(fd);
  if (!w->map) {
    abi::HandleRequest d{rep.handle};
    c->conn.call(abi::CtlOp::kDestroyWq, &d, sizeof(d), nullptr, 0);
    forget_async_events(c, w);
    delete w;
    errno = ENOMEM;
    return nullptr;
  }
  w->ctx = c;
  w->map_size = rep.shm_size;
  w->ring.attach(static_cast<uint8_t*>(w->map));
  w->ring.log2 = rep.log2;
  w->ring.stride = rep.stride;
  w->ring.prod = w->ring.hdr->producer.load();
  w->max_sge = (rep.stride - sizeof(abi::RecvWqe)) / sizeof(abi::Sge);
  attr->max_wr = rep.max_wr;  // written back as the kernel answers (mlx5: unchanged)
  attr->max_sge = rep.max_sge;
  ibv_wq& q = w->wq;
  q.context = context;
  q.pd = attr->pd;
  q.cq = attr->cq;
  q.wq_num = rep.wqn;
  q.handle = uint32_t(rep.handle);
  q.state = IBV_WQS_RESET;
  q.wq_type = attr->wq_type;
  q.post_recv = post_wq_recv;
  pthread_mutex_init(&q.mutex, nullptr);  // ibv_ack_async_event(IBV_EVENT_WQ_FATAL) takes them
  pthread_cond_init(&q.cond, nullptr);
  return &q;
}

int modify_wq(ibv_wq* wq, ibv_wq_attr* attr) {
  // libibverbs ibv_cmd_modify_wq: unknown mask bits EINVAL, unknown flags EOPNOTSUPP.
  if (attr->attr_mask >= IBV_WQ_ATTR_RESERVED) return EINVAL;
  if ((attr->attr_mask & IBV_WQ_ATTR_FLAGS) && attr->flags_mask >= IBV_WQ_FLAGS_RESERVED) return EOPNOTSUPP;
  abi::ModifyWqRequest req{wq->handle, attr->attr_mask, uint32_t(attr->wq_state), uint32_t(attr->curr_wq_state),
                           attr->flags, attr->flags_mask, 0};
  const ibv_wq_state was = wq->state;
  if (int err = to_uctx(wq->context)->conn.call(abi::CtlOp::kModifyWq, &req, sizeof(req), nullptr, 0)) return err;
  if (attr->attr_mask & IBV_WQ_ATTR_STATE) {
    wq->state = attr->wq_state;
    // mlx5_modify_wq: RESET to RDY removes the WQ's stale completions.
    if (was == IBV_WQS_RESET && attr->wq_state == IBV_WQS_RDY) cq_clean(wq->cq, wq->wq_num);
  }
  return 0;
}

int destroy_wq(ibv_wq* wq) {
  UWq* w = to_uwq(wq);
  abi::HandleRequest req{wq->handle};
  int err = w->ctx->conn.call(abi::CtlOp::kDestroyWq, &req, sizeof(req), nullptr, 0);
  if (err && err != EIO) return err;
  untrack_async_events(w->ctx, w, &wq->mutex, &wq->cond, &wq->events_completed);
  unmap_queue(w->map, w->map_size);
  if (w->vendor_map) unmap_queue(w->vendor_map, w->vendor_map_size);
  pthread_cond_destroy(&wq->cond);
  pthread_mutex_destroy(&wq->mutex);
  delete w;
  return 0;
}

ibv_rwq_ind_table* create_rwq_ind_table(ibv_context* context, ibv_rwq_ind_table_init_attr* attr) {
  // libibverbs: unknown comp_mask EINVAL; the kernel: a table past its limit EINVAL.
  if (attr->comp_mask >= IBV_CREATE_IND_TABLE_RESERVED || attr->log_ind_tbl_size > abi::kMaxLogIndTableSize ||
      !attr->ind_tbl) {
    errno = EINVAL;
    return nullptr;
  }
  auto* t = new (std::nothrow) UIndTable{};
  auto* req = new (std::nothrow) abi::CreateRwqIndTableRequest{};
  if (!t || !req) {
    delete t;
    delete req;
    errno = ENOMEM;
    return nullptr;
  }
  const uint32_t n = 1u << attr->log_ind_tbl_size;
  req->log_size = attr->log_ind_tbl_size;
  for (uint32_t i = 0; i < n; ++i) req->wqs[i] = attr->ind_tbl[i] ? attr->ind_tbl[i]->handle : 0;
  abi::CreateRwqIndTableReply rep;
  const size_t len = offsetof(abi::CreateRwqIndTableRequest, wqs) + n * sizeof(uint64_t);
  const int err = to_uctx(context)->conn.call(abi::CtlOp::kCreateRwqIndTable, req, len, &rep, sizeof(rep));
  delete req;
  if (err) {
    delete t;
    errno = err;
    return nullptr;
  }
  t->table.context = context;
  t->table.ind_tbl_handle = int(rep.handle);
  t->table.ind_tbl_num = int(rep.ind_tbl_num);
  t->table.comp_mask = 0;
  return &t->table;
}

int destroy_rwq_ind_table(ibv_rwq_ind_table* table) {
  abi::HandleRequest req{uint32_t(table->ind_tbl_handle)};
  int err = to_uctx(table->context)->conn.call(abi::CtlOp::kDestroyRwqIndTable, &req, sizeof(req), nullptr, 0);
  if (err && err != EIO) return err;
  delete reinterpret_cast<UIndTable*>(table);
  return 0;
}

}  // namespace

ibv_qp* create_rss_qp(ibv_context* context, ibv_qp_init_attr_ex* attr) {
  // libibverbs (cmd_qp.c): with an indirection table no receive side of
  // its own; mlx5: raw packet only, and a hash configuration.
  if (!(attr->comp_mask & IBV_QP_INIT_ATTR_RX_HASH) || !attr->rwq_ind_tbl ||
      attr->qp_type != IBV_QPT_RAW_PACKET || attr->cap.max_recv_wr || attr->cap.max_recv_sge ||
      attr->recv_cq || attr->srq || !(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd) {
    errno = EINVAL;
    return nullptr;
  }
  auto* qp = new_queue_object<UQp>(nullptr, kResourceTypeQp);  // ibv_destroy_qp frees it so
  if (!qp) {
    errno = ENOMEM;
    return nullptr;
  }
  if (!track_async_events(to_uctx(context), qp)) {
    delete_queue_object(qp, kResourceTypeQp);
    errno = ENOMEM;
    return nullptr;
  }
  abi::CreateRssQpRequest req{};
  req.pd = attr->pd->handle;
  req.ind_table = uint32_t(attr->rwq_ind_tbl->ind_tbl_handle);
  req.cookie = uint64_t(uintptr_t(qp));
  req.rx_hash_fields_mask = attr->rx_hash_conf.rx_hash_fields_mask;
  req.rx_hash_function = attr->rx_hash_conf.rx_hash_function;
  req.rx_hash_key_len = attr->rx_hash_conf.rx_hash_key_len;
  if (attr->rx_hash_conf.rx_hash_key)
    std::memcpy(req.rx_hash_key, attr->rx_hash_conf.rx_hash_key,
                std::min<uint32_t>(attr->rx_hash_conf.rx_hash_key_len, abi::kRxHashKeyMax));
  req.create_flags = (attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) ? attr->create_flags : 0;
  req.send_side = attr->cap.max_send_wr || attr->cap.max_send_sge || attr->cap.max_inline_data;
  abi::CreateRssQpReply rep;
  if (int err = to_uctx(context)->conn.call(abi::CtlOp::kCreateRssQp, &req, sizeof(req), &rep, sizeof(rep))) {
    forget_async_events(to_uctx(context), qp);
    delete_queue_object(qp, kResourceTypeQp);
    errno = err;
    return nullptr;
  }
  qp->ctx = to_uctx(context);
  qp->qpn = rep.qpn;
  qp->rss = true;
  ibv_qp& q = qp->qpx.qp_base;
  q.context = context;
  q.qp_context = attr->qp_context;
  q.pd = attr->pd;
  q.handle = uint32_t(rep.handle);
  q.qp_num = 0;  // mlx5: an RSS QP is a TIR, numbered 0 to the application
  q.state = IBV_QPS_RTR;
  q.qp_type = IBV_QPT_RAW_PACKET;
  pthread_mutex_init(&q.mutex, nullptr);
  pthread_cond_init(&q.cond, nullptr);
  fill_qp_ex_ops(qp);
  return &q;
}

void fill_wq_ops(verbs_context* v) {
  v->create_wq = create_wq;
  v->modify_wq = modify_wq;
  v->destroy_wq = destroy_wq;
  v->create_rwq_ind_table = create_rwq_ind_table;
  v->destroy_rwq_ind_table = destroy_rwq_ind_table;
}

}  // namespace uroce::provider
