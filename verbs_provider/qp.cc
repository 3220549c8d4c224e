// Queue pairs (create, modify, query, destroy) and address handles.
#include <arpa/inet.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "verbs_provider/provider.h"

namespace uroce::provider {

void to_abi_av(const ibv_ah_attr& in, abi::AddressVector* out) {
  std::memset(out, 0, sizeof(*out));
  std::memcpy(out->dgid, in.grh.dgid.raw, 16);
  out->flow_label = in.grh.flow_label;
  out->sgid_index = in.grh.sgid_index;
  out->hop_limit = in.grh.hop_limit;
  out->traffic_class = in.grh.traffic_class;
  out->sl = in.sl;
  out->is_global = in.is_global;
  out->port_num = in.port_num;
}

namespace {

void from_abi_av(const abi::AddressVector& in, ibv_ah_attr* out) {
  std::memset(out, 0, sizeof(*out));
  std::memcpy(out->grh.dgid.raw, in.dgid, 16);
  out->grh.flow_label = in.flow_label;
  out->grh.sgid_index = in.sgid_index;
  out->grh.hop_limit = in.hop_limit;
  out->grh.traffic_class = in.traffic_class;
  out->sl = in.sl;
  out->is_global = in.is_global;
  out->port_num = in.port_num;
}

constexpr uint64_t kSupportedSendOps =
    IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND |
    IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
    IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_SEND_WITH_INV | IBV_QP_EX_WITH_BIND_MW |
    IBV_QP_EX_WITH_LOCAL_INV;

}  // namespace

ibv_qp* create_qp_ex(ibv_context* context, ibv_qp_init_attr_ex* attr) {
  UContext* c = to_uctx(context);
  if (refuse_huge_queue(c, "MLX_QP_ALLOC_TYPE")) return nullptr;
  const uint32_t known = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_XRCD |
                         IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS |
                         IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH;
  if (attr->comp_mask & ~known) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  // An indirection table makes an RSS QP (wq.cc); a hash without one is EINVAL.
  if (attr->comp_mask & IBV_QP_INIT_ATTR_IND_TABLE) return create_rss_qp(context, attr);
  if (attr->comp_mask & IBV_QP_INIT_ATTR_RX_HASH) {
    errno = EINVAL;
    return nullptr;
  }
  // The creation flags implemented are a raw packet QP's receive flags
  // (the engine checks them); any other is refused as mlx5's
  // process_create_flags refuses one it lacks (EOPNOTSUPP).
  constexpr uint32_t kRawCreateFlags =
      IBV_QP_CREATE_SCATTER_FCS | IBV_QP_CREATE_CVLAN_STRIPPING | IBV_QP_CREATE_PCI_WRITE_END_PADDING;
  const uint32_t create_flags = (attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) ? attr->create_flags : 0;
  if (create_flags && (attr->qp_type != IBV_QPT_RAW_PACKET || (create_flags & ~kRawCreateFlags))) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  const ibv_qp_type type = attr->qp_type;
  if (type != IBV_QPT_RC && type != IBV_QPT_UC && type != IBV_QPT_UD &&
      type != IBV_QPT_XRC_SEND && type != IBV_QPT_XRC_RECV && type != IBV_QPT_RAW_PACKET) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  // libibverbs (cmd_qp.c): an XRC target needs its domain; everything else a PD.
  if (type == IBV_QPT_XRC_RECV) {
    if (!(attr->comp_mask & IBV_QP_INIT_ATTR_XRCD) || !attr->xrcd) {
      errno = EINVAL;
      return nullptr;
    }
  } else if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd || !attr->send_cq ||
             (type != IBV_QPT_XRC_SEND && !attr->recv_cq)) {
    errno = EINVAL;
    return nullptr;
  }
  // ATOMIC WRITE: RC and XRC, on an engine that executes it (rxe: RC).
  const uint64_t send_ops = (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) ? attr->send_ops_flags : 0;
  const bool atomic_write = (c->info.raw.device_cap_flags_ex & abi::kDeviceAtomicWrite) &&
                            (type == IBV_QPT_RC || type == IBV_QPT_XRC_SEND);
  if (send_ops & ~(kSupportedSendOps | (atomic_write ? uint64_t(IBV_QP_EX_WITH_ATOMIC_WRITE) : 0))) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  const bool target = type == IBV_QPT_XRC_RECV;
  // On a parent domain: its allocator gives the QP's provider-side state.
  auto* qp = new_queue_object<UQp>(target ? nullptr : attr->pd, kResourceTypeQp);
  if (!qp) return nullptr;
  if (!track_async_events(c, qp)) {
    delete_queue_object(qp, kResourceTypeQp);
    errno = ENOMEM;
    return nullptr;
  }
  const bool uses_srq = !target && type != IBV_QPT_XRC_SEND && attr->srq;
  abi::CreateQpRequest req{};
  if (target) {
    req.xrcd = reinterpret_cast<UXrcd*>(attr->xrcd)->handle;
  } else {
    req.pd = attr->pd->handle;
    req.send_cq = attr->send_cq->handle;
    if (type != IBV_QPT_XRC_SEND) req.recv_cq = attr->recv_cq->handle;
    if (uses_srq) req.srq = attr->srq->handle;
  }
  req.cookie = uint64_t(uintptr_t(qp));
  req.qp_type = attr->qp_type;
  req.sq_sig_all = attr->sq_sig_all;
  req.create_flags = create_flags;
  req.caps = {attr->cap.max_send_wr, attr->cap.max_recv_wr, attr->cap.max_send_sge,
              attr->cap.max_recv_sge, attr->cap.max_inline_data, 0};
  abi::CreateQpReply rep;
  int fd = -1;
  if (int err = c->conn.call(abi::CtlOp::kCreateQp, &req, sizeof(req), &rep, sizeof(rep), nullptr, 0,
                             &fd, 1)) {
    forget_async_events(c, qp);
    delete_queue_object(qp, kResourceTypeQp);
    errno = err;
    return nullptr;
  }
  qp->map = map_queue(fd, rep.shm_size);
  close(fd);
  if (!qp->map) {
    abi::HandleRequest d{rep.handle};
    c->conn.call(abi::CtlOp::kDestroyQp, &d, sizeof(d), nullptr, 0);
    forget_async_events(c, qp);
    delete_queue_object(qp, kResourceTypeQp);
    errno = ENOMEM;
    return nullptr;
  }
  qp->ctx = c;
  qp->qpn = rep.qpn;
  qp->map_size = rep.shm_size;
  auto* base = static_cast<uint8_t*>(qp->map);
  qp->sq.attach(base + rep.sq_offset);
  qp->sq.log2 = rep.sq_log2;
  qp->sq.stride = rep.sq_stride;
  qp->sq.prod = qp->sq.hdr->producer.load();
  qp->rq.attach(base + rep.rq_offset);
  qp->rq.log2 = rep.rq_log2;
  qp->rq.stride = rep.rq_stride;
  qp->rq.prod = qp->rq.hdr->producer.load();
  qp->caps = rep.caps;
  qp->sq_sig_all = attr->sq_sig_all;
  qp->has_srq = uses_srq;
  attr->cap.max_send_wr = rep.caps.max_send_wr;
  attr->cap.max_recv_wr = rep.caps.max_recv_wr;
  attr->cap.max_send_sge = rep.caps.max_send_sge;
  attr->cap.max_recv_sge = rep.caps.max_recv_sge;
  attr->cap.max_inline_data = rep.caps.max_inline_data;

  ibv_qp& q = qp->qpx.qp_base;
  q.context = context;
  q.qp_context = attr->qp_context;
  q.pd = target ? nullptr : attr->pd;
  q.send_cq = target ? nullptr : attr->send_cq;
  q.recv_cq = target || type == IBV_QPT_XRC_SEND ? nullptr : attr->recv_cq;
  q.srq = uses_srq ? attr->srq : nullptr;
  q.handle = uint32_t(rep.handle);
  q.qp_num = rep.qpn;
  q.state = IBV_QPS_RESET;
  q.qp_type = attr->qp_type;
  pthread_mutex_init(&q.mutex, nullptr);
  pthread_cond_init(&q.cond, nullptr);
  fill_qp_ex_ops(qp);
  return &q;
}

ibv_qp* open_qp(ibv_context* context, ibv_qp_open_attr* attr) {
  // libibverbs (cmd.c ibv_cmd_open_qp): NUM, XRCD and TYPE are required.
  const uint32_t need = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
  if (attr->comp_mask >= IBV_QP_OPEN_ATTR_RESERVED) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  if ((attr->comp_mask & need) != need || !attr->xrcd || attr->qp_type != IBV_QPT_XRC_RECV) {
    errno = EINVAL;
    return nullptr;
  }
  auto* qp = new_queue_object<UQp>(nullptr, kResourceTypeQp);
  if (!qp) return nullptr;
  if (!track_async_events(to_uctx(context), qp)) {
    delete_queue_object(qp, kResourceTypeQp);
    errno = ENOMEM;
    return nullptr;
  }
  abi::OpenQpRequest req{reinterpret_cast<UXrcd*>(attr->xrcd)->handle, uint64_t(uintptr_t(qp)),
                         attr->qp_num, uint32_t(attr->qp_type)};
  abi::OpenQpReply rep;
  if (int err = to_uctx(context)->conn.call(abi::CtlOp::kOpenQp, &req, sizeof(req), &rep, sizeof(rep))) {
    forget_async_events(to_uctx(context), qp);
    delete_queue_object(qp, kResourceTypeQp);
    errno = err;
    return nullptr;
  }
  qp->ctx = to_uctx(context);
  qp->qpn = attr->qp_num;
  qp->opened = true;
  ibv_qp& q = qp->qpx.qp_base;
  q.context = context;
  q.qp_context = (attr->comp_mask & IBV_QP_OPEN_ATTR_CONTEXT) ? attr->qp_context : nullptr;
  q.handle = uint32_t(rep.handle);
  q.qp_num = attr->qp_num;
  q.qp_type = IBV_QPT_XRC_RECV;
  q.state = IBV_QPS_UNKNOWN;
  pthread_mutex_init(&q.mutex, nullptr);
  pthread_cond_init(&q.cond, nullptr);
  fill_qp_ex_ops(qp);
  return &q;
}

}  // namespace uroce::provider

using namespace uroce;
using namespace uroce::provider;

UROCE_EXPORT ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* init) {
  ibv_qp_init_attr_ex ex{};
  ex.qp_context = init->qp_context;
  ex.send_cq = init->send_cq;
  ex.recv_cq = init->recv_cq;
  ex.srq = init->srq;
  ex.cap = init->cap;
  ex.qp_type = init->qp_type;
  ex.sq_sig_all = init->sq_sig_all;
  ex.comp_mask = IBV_QP_INIT_ATTR_PD;
  ex.pd = pd;
  ibv_qp* qp = create_qp_ex(pd->context, &ex);
  if (qp) init->cap = ex.cap;
  return qp;
}

UROCE_EXPORT ibv_qp_ex* ibv_qp_to_qp_ex(ibv_qp* qp) { return &to_uqp(qp)->qpx; }

UROCE_EXPORT int ibv_modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask) {
  if (to_uqp(qp)->rss) return EOPNOTSUPP;  // mlx5_modify_qp: an RSS QP has no states
  abi::ModifyQpRequest req{};
  req.handle = qp->handle;
  req.attr_mask = uint32_t(attr_mask);
  abi::QpAttr& a = req.attr;
  // Fields outside attr_mask are the caller's garbage (ibv_xsrq_pingpong
  // leaves them unset): an enum must not even be loaded then (UBSan).
  if (attr_mask & IBV_QP_STATE) a.qp_state = attr->qp_state;
  if (attr_mask & IBV_QP_CUR_STATE) a.cur_qp_state = attr->cur_qp_state;
  if (attr_mask & IBV_QP_PATH_MTU) a.path_mtu = attr->path_mtu;
  a.qkey = attr->qkey;
  a.rq_psn = attr->rq_psn;
  a.sq_psn = attr->sq_psn;
  a.dest_qp_num = attr->dest_qp_num;
  a.qp_access_flags = uint32_t(attr->qp_access_flags);
  a.pkey_index = attr->pkey_index;
  a.en_sqd_async_notify = attr->en_sqd_async_notify;
  a.max_rd_atomic = attr->max_rd_atomic;
  a.max_dest_rd_atomic = attr->max_dest_rd_atomic;
  a.min_rnr_timer = attr->min_rnr_timer;
  a.port_num = attr->port_num;
  a.timeout = attr->timeout;
  a.retry_cnt = attr->retry_cnt;
  a.rnr_retry = attr->rnr_retry;
  if (attr_mask & IBV_QP_AV) to_abi_av(attr->ah_attr, &a.ah);
  if (attr_mask & IBV_QP_RATE_LIMIT) a.rate_limit = attr->rate_limit;
  if (int err = to_uctx(qp->context)->conn.call(abi::CtlOp::kModifyQp, &req, sizeof(req), nullptr, 0))
    return err;
  if (attr_mask & IBV_QP_STATE) qp->state = attr->qp_state;
  if ((attr_mask & IBV_QP_STATE) && attr->qp_state == IBV_QPS_RESET) {
    // RESET forgets the QP's work: its completions still in the CQs go too.
    if (qp->send_cq) cq_clean(qp->send_cq, qp->qp_num);
    if (qp->recv_cq && qp->recv_cq != qp->send_cq) cq_clean(qp->recv_cq, qp->qp_num);
  }
  return 0;
}

UROCE_EXPORT int ibv_query_qp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask, ibv_qp_init_attr* init) {
  UQp* u = to_uqp(qp);
  if (u->rss) return EOPNOTSUPP;  // mlx5_query_qp
  abi::HandleRequest req{qp->handle};
  abi::QueryQpReply rep;
  if (int err = to_uctx(qp->context)->conn.call(abi::CtlOp::kQueryQp, &req, sizeof(req), &rep, sizeof(rep)))
    return err;
  const abi::QpAttr& a = rep.attr;
  std::memset(attr, 0, sizeof(*attr));
  attr->qp_state = ibv_qp_state(a.qp_state);
  attr->cur_qp_state = ibv_qp_state(a.cur_qp_state);
  attr->path_mtu = ibv_mtu(a.path_mtu);
  attr->path_mig_state = IBV_MIG_MIGRATED;
  attr->qkey = a.qkey;
  attr->rq_psn = a.rq_psn;
  attr->sq_psn = a.sq_psn;
  attr->dest_qp_num = a.dest_qp_num;
  attr->qp_access_flags = int(a.qp_access_flags);
  attr->cap.max_send_wr = a.caps.max_send_wr;
  attr->cap.max_recv_wr = a.caps.max_recv_wr;
  attr->cap.max_send_sge = a.caps.max_send_sge;
  attr->cap.max_recv_sge = a.caps.max_recv_sge;
  attr->cap.max_inline_data = a.caps.max_inline_data;
  from_abi_av(a.ah, &attr->ah_attr);
  attr->pkey_index = a.pkey_index;
  attr->en_sqd_async_notify = a.en_sqd_async_notify;
  attr->sq_draining = a.sq_draining;
  attr->max_rd_atomic = a.max_rd_atomic;
  attr->max_dest_rd_atomic = a.max_dest_rd_atomic;
  attr->min_rnr_timer = a.min_rnr_timer;
  attr->port_num = a.port_num;
  attr->timeout = a.timeout;
  attr->retry_cnt = a.retry_cnt;
  attr->rnr_retry = a.rnr_retry;
  qp->state = attr->qp_state;
  if (init) {
    std::memset(init, 0, sizeof(*init));
    init->qp_context = qp->qp_context;
    init->send_cq = qp->send_cq;
    init->recv_cq = qp->recv_cq;
    init->srq = qp->srq;
    init->cap = attr->cap;
    init->qp_type = qp->qp_type;
    init->sq_sig_all = u->sq_sig_all;
  }
  (void)attr_mask;
  return 0;
}

UROCE_EXPORT int ibv_destroy_qp(ibv_qp* qp) {
  UQp* u = to_uqp(qp);
  abi::HandleRequest req{qp->handle};
  int err = to_uctx(qp->context)->conn.call(abi::CtlOp::kDestroyQp, &req, sizeof(req), nullptr, 0);
  if (err && err != EIO) return err;
  untrack_async_events(u->ctx, u, &qp->mutex, &qp->cond, &qp->events_completed);
  if (u->map) unmap_queue(u->map, u->map_size);
  if (void* v = u->vendor.load()) u->vendor_free(v);
  pthread_cond_destroy(&qp->cond);
  pthread_mutex_destroy(&qp->mutex);
  delete_queue_object(u, kResourceTypeQp);
  return 0;
}

// ---- address handles --------------------------------------------------------

UROCE_EXPORT ibv_ah* ibv_create_ah(ibv_pd* pd, ibv_ah_attr* attr) {
  UContext* c = to_uctx(pd->context);
  // RoCE: an address without a GRH cannot be routed (IBA A16.4.1), as every
  // RoCE provider answers.
  if (!attr->is_global || attr->port_num != 1 || attr->grh.sgid_index >= c->info.port.gid_tbl_len ||
      !read_gid_table(c).gids[attr->grh.sgid_index].valid) {
    errno = EINVAL;
    return nullptr;
  }
  auto* ah = new (std::nothrow) UAh{};
  if (!ah) {
    errno = ENOMEM;
    return nullptr;
  }
  // The engine counts it against max_ah and holds the PD (mlx5 makes a
  // kernel AH for RoCE too, to resolve the MAC).
  abi::CreateAhRequest req{pd->handle};
  abi::CreateAhReply rep;
  if (int err = c->conn.call(abi::CtlOp::kCreateAh, &req, sizeof(req), &rep, sizeof(rep))) {
    delete ah;
    errno = err;
    return nullptr;
  }
  ah->ah.context = pd->context;
  ah->ah.pd = pd;
  ah->ah.handle = uint32_t(rep.handle);
  to_abi_av(*attr, &ah->av);
  return &ah->ah;
}

UROCE_EXPORT int ibv_destroy_ah(ibv_ah* ah) {
  abi::HandleRequest req{ah->handle};
  int err = to_uctx(ah->context)->conn.call(abi::CtlOp::kDestroyAh, &req, sizeof(req), nullptr, 0);
  if (err && err != EIO) return err;
  delete reinterpret_cast<UAh*>(ah);
  return 0;
}

UROCE_EXPORT int ibv_init_ah_from_wc(ibv_context* context, uint8_t port_num, ibv_wc* wc,
                                     ibv_grh* grh, ibv_ah_attr* ah_attr) {
  UContext* c = to_uctx(context);
  std::memset(ah_attr, 0, sizeof(*ah_attr));
  ah_attr->port_num = port_num;
  ah_attr->dlid = wc->slid;
  ah_attr->sl = wc->sl;
  ah_attr->src_path_bits = wc->dlid_path_bits;
  if (!(wc->wc_flags & IBV_WC_GRH)) return 0;
  ah_attr->is_global = 1;
  uint8_t local[16] = {};
  const auto* raw = reinterpret_cast<const uint8_t*>(grh);
  if ((raw[20] >> 4) == 4 && raw[0] == 0) {
    // RoCEv2 over IPv4: the IPv4 header fills the GRH's last 20 bytes.
    auto& d = ah_attr->grh.dgid.raw;
    std::memset(d, 0, 16);
    d[10] = d[11] = 0xff;
    std::memcpy(d + 12, raw + 20 + 12, 4);  // source address
    local[10] = local[11] = 0xff;
    std::memcpy(local + 12, raw + 20 + 16, 4);  // destination address
    ah_attr->grh.traffic_class = raw[20 + 1];
  } else {
    ah_attr->grh.dgid = grh->sgid;
    std::memcpy(local, grh->dgid.raw, 16);
    const uint32_t vtf = ntohl(grh->version_tclass_flow);
    ah_attr->grh.flow_label = vtf & 0xfffff;
    ah_attr->grh.traffic_class = uint8_t(vtf >> 20);
  }
  ah_attr->grh.hop_limit = 0xff;
  const GidTable t = read_gid_table(c);
  for (uint32_t i = 0; i < c->info.port.gid_tbl_len; ++i) {
    if (t.gids[i].valid && std::memcmp(t.gids[i].gid, local, 16) == 0) {
      ah_attr->grh.sgid_index = uint8_t(i);
      return 0;
    }
  }
  errno = ENOENT;
  return -1;
}

UROCE_EXPORT ibv_ah* ibv_create_ah_from_wc(ibv_pd* pd, ibv_wc* wc, ibv_grh* grh, uint8_t port_num) {
  ibv_ah_attr attr;
  if (ibv_init_ah_from_wc(pd->context, port_num, wc, grh, &attr)) return nullptr;
  return ibv_create_ah(pd, &attr);
}
