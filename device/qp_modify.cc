// The QP state machine (IBA 10.3, 11.2.5): which attributes each transition
// requires and allows, per transport, as the kernel's qp_state_table encodes.
#include <cerrno>
#include <cstring>

#include "device/device.h"
#include "device/mlx5_rq.h"
#include "device/mlx5_sq.h"
#include "device/wqe.h"

namespace uroce::device {

namespace {

struct Transition {
  bool valid = false;
  uint32_t req[4] = {0, 0, 0, 0};  // RC, UC, UD, RAW_PACKET
  uint32_t opt[4] = {0, 0, 0, 0};
};

int transport_slot(ibv_qp_type t) {
  return t == IBV_QPT_UC ? 1 : t == IBV_QPT_UD ? 2 : t == IBV_QPT_RAW_PACKET ? 3 : 0;
}

constexpr uint32_t S(ibv_qp_attr_mask m) { return uint32_t(m); }

Transition transition(ibv_qp_state cur, ibv_qp_state next) {
  Transition t;
  const uint32_t pkey = S(IBV_QP_PKEY_INDEX), port = S(IBV_QP_PORT), qkey = S(IBV_QP_QKEY),
                 acc = S(IBV_QP_ACCESS_FLAGS), av = S(IBV_QP_AV), mtu = S(IBV_QP_PATH_MTU),
                 dqpn = S(IBV_QP_DEST_QPN), rqpsn = S(IBV_QP_RQ_PSN), sqpsn = S(IBV_QP_SQ_PSN),
                 drd = S(IBV_QP_MAX_DEST_RD_ATOMIC), rnrt = S(IBV_QP_MIN_RNR_TIMER),
                 tmo = S(IBV_QP_TIMEOUT), rcnt = S(IBV_QP_RETRY_CNT), rnr = S(IBV_QP_RNR_RETRY),
                 rd = S(IBV_QP_MAX_QP_RD_ATOMIC), cur_s = S(IBV_QP_CUR_STATE),
                 alt = S(IBV_QP_ALT_PATH), mig = S(IBV_QP_PATH_MIG_STATE),
                 sqd = S(IBV_QP_EN_SQD_ASYNC_NOTIFY);
  auto set = [&](uint32_t rc_req, uint32_t uc_req, uint32_t ud_req, uint32_t rc_opt,
                 uint32_t uc_opt, uint32_t ud_opt) {
    t.valid = true;
    t.req[0] = rc_req, t.req[1] = uc_req, t.req[2] = ud_req;
    t.opt[0] = rc_opt, t.opt[1] = uc_opt, t.opt[2] = ud_opt;
  };
  if (next == IBV_QPS_RESET || next == IBV_QPS_ERR) {
    set(0, 0, 0, 0, 0, 0);
    return t;
  }
  switch (cur) {
    case IBV_QPS_RESET:
      if (next == IBV_QPS_INIT)
        set(pkey | port | acc, pkey | port | acc, pkey | port | qkey, 0, 0, 0);
      break;
    case IBV_QPS_INIT:
      if (next == IBV_QPS_INIT)
        set(0, 0, 0, pkey | port | acc, pkey | port | acc, pkey | port | qkey);
      else if (next == IBV_QPS_RTR)
        set(av | mtu | dqpn | rqpsn | drd | rnrt, av | mtu | dqpn | rqpsn, 0,
            alt | acc | pkey, alt | acc | pkey, pkey | qkey);
      break;
    case IBV_QPS_RTR:
      if (next == IBV_QPS_RTS)
        set(tmo | rcnt | rnr | sqpsn | rd, sqpsn, sqpsn, cur_s | alt | acc | rnrt | mig,
            cur_s | alt | acc | mig, cur_s | qkey);
      break;
    case IBV_QPS_RTS:
      if (next == IBV_QPS_RTS)
        set(0, 0, 0, cur_s | acc | alt | mig | rnrt, cur_s | acc | alt | mig, cur_s | qkey);
      else if (next == IBV_QPS_SQD)
        set(0, 0, 0, sqd, sqd, sqd);
      break;
    case IBV_QPS_SQD:
      if (next == IBV_QPS_RTS)
        set(0, 0, 0, cur_s | alt | acc | rnrt | mig, cur_s | alt | acc | mig, cur_s | qkey);
      else if (next == IBV_QPS_SQD)
        set(0, 0, 0,
            port | av | tmo | rcnt | rnr | rd | drd | alt | acc | pkey | rnrt | mig,
            av | alt | acc | pkey | mig, pkey | qkey);
      break;
    case IBV_QPS_SQE:
      if (next == IBV_QPS_RTS) set(0, 0, 0, 0, cur_s | acc, cur_s | qkey);
      if (next == IBV_QPS_RTS) t.valid = true;  // RC never enters SQE; UC/UD only
      break;
    default:
      break;
  }
  // IB_QPT_RAW_PACKET in the kernel's qp_state_table: INIT needs the port,
  // RTR and RTS nothing, the rate limit is optional from RTR on. The AV is
  // also accepted at RTR for its SL (perftest --raw_qos,
  // src/perftest_resources.c ctx_modify_qp_to_rtr).
  const uint32_t rate = S(IBV_QP_RATE_LIMIT);
  if (cur == IBV_QPS_RESET && next == IBV_QPS_INIT) t.req[3] = port;
  if (cur == IBV_QPS_INIT && next == IBV_QPS_INIT) t.opt[3] = port;
  if (cur == IBV_QPS_INIT && next == IBV_QPS_RTR) t.opt[3] = av;
  if ((cur == IBV_QPS_RTR || cur == IBV_QPS_RTS) && next == IBV_QPS_RTS) t.opt[3] = rate;
  return t;
}

void export_attr(const Qp& qp, abi::QpAttr* a) {
  std::memset(a, 0, sizeof(*a));
  a->qp_state = qp.state;
  a->cur_qp_state = qp.state;
  a->path_mtu = qp.path_mtu;
  a->qkey = qp.qkey;
  a->rq_psn = qp.resp_epsn;
  a->sq_psn = qp.req_psn;
  a->dest_qp_num = qp.dest_qpn;
  a->qp_access_flags = qp.access;
  a->pkey_index = qp.pkey_index;
  a->en_sqd_async_notify = qp.en_sqd_async_notify;
  a->sq_draining = qp.state == IBV_QPS_SQD && (qp.sq_head != qp.sq_next || qp.req_offset);
  a->max_rd_atomic = qp.max_rd_atomic;
  a->max_dest_rd_atomic = qp.max_dest_rd_atomic;
  a->min_rnr_timer = qp.min_rnr_timer;
  a->port_num = qp.port;
  a->timeout = qp.timeout;
  a->retry_cnt = qp.retry_cnt;
  a->rnr_retry = qp.rnr_retry;
  a->sq_sig_all = qp.sq_sig_all;
  a->ah = qp.av;
  a->caps = qp.caps;
  a->rate_limit = qp.rate_limit_kbps;
}

}  // namespace

namespace {
// The creator or a process that opened the (XRC target) QP.
bool holds(const Qp& qp, const Owner* o) {
  if (qp.owner == o) return true;
  for (const Qp::OpenedHandle& h : qp.opened_by)
    if (h.owner == o) return true;
  return false;
}
}  // namespace

int Device::modify_qp(Owner* o, uint32_t qpn, uint32_t mask, const abi::QpAttr& a) {
  Qp* qp = this->qp(qpn);
  if (!qp || !holds(*qp, o)) return EINVAL;
  if (qp->rss) return EOPNOTSUPP;  // mlx5_modify_qp: an RSS QP has no state machine
  // The client's integers are checked before they become enums (out of the
  // enum's range they are no ibv_qp_state).
  const uint32_t cur_raw = (mask & IBV_QP_CUR_STATE) ? a.cur_qp_state : uint32_t(qp->state);
  const uint32_t next_raw = (mask & IBV_QP_STATE) ? a.qp_state : cur_raw;
  if (cur_raw > IBV_QPS_ERR || next_raw > IBV_QPS_ERR) return EINVAL;
  const ibv_qp_state cur = ibv_qp_state(cur_raw), next = ibv_qp_state(next_raw);
  // IBV_QP_CUR_STATE may only name a state the QP could be in (kernel rule).
  if ((mask & IBV_QP_CUR_STATE) && cur != qp->state &&
      !(cur == IBV_QPS_RTS && qp->state == IBV_QPS_SQE))
    return EINVAL;
  Transition t = transition(cur, next);
  if (!t.valid) return EINVAL;
  if (qp->dc != DcRole::kNone) {
    // DC (mlx5's kernel driver: mlx5_ib_modify_dct, and for a DCI no
    // attribute table): a DCT has no RTS; it needs PKEY_INDEX, PORT and
    // ACCESS_FLAGS at INIT, MIN_RNR_TIMER, AV and PATH_MTU at RTR. A DCI's
    // target comes with each work request, so no transition needs one.
    const uint32_t all = ~uint32_t(IBV_QP_STATE);
    if (qp->dc == DcRole::kTarget) {
      if (next == IBV_QPS_RTS || next == IBV_QPS_SQD) return EINVAL;
      const uint32_t init = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
      const uint32_t rtr = IBV_QP_MIN_RNR_TIMER | IBV_QP_AV | IBV_QP_PATH_MTU;
      t.req[0] = cur == IBV_QPS_RESET && next == IBV_QPS_INIT ? init
                 : cur == IBV_QPS_INIT && next == IBV_QPS_RTR ? rtr
                                                              : 0;
    } else {
      t.req[0] = 0;
    }
    t.opt[0] = all;
  }
  if (is_reliable(*qp) && cur == IBV_QPS_SQE) return EINVAL;
  const int slot = transport_slot(qp->type);
  // XRC halves use RC's table minus what they lack; like the kernel, drop
  // those bits first so callers may pass the full RC masks (uverbs modify_qp).
  uint32_t ignored = 0;
  if (qp->type == IBV_QPT_XRC_SEND) ignored = IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  if (qp->type == IBV_QPT_XRC_RECV)
    ignored = IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY;
  mask &= ~ignored;
  const uint32_t attrs = mask & ~uint32_t(IBV_QP_STATE);
  const uint32_t required = t.req[slot] & ~ignored;
  if ((attrs & required) != required) return EINVAL;
  if (attrs & ~(t.req[slot] | t.opt[slot])) return EINVAL;

  // Value checks before anything changes (no half-applied modify).
  if ((mask & IBV_QP_PORT) && a.port_num != 1) return EINVAL;
  if ((mask & IBV_QP_PKEY_INDEX) && a.pkey_index >= kPkeyTableLen) return EINVAL;
  if ((mask & IBV_QP_PATH_MTU) && (a.path_mtu < IBV_MTU_256 || a.path_mtu > info_.port.active_mtu))
    return EINVAL;
  if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && a.max_rd_atomic > kMaxQpRdAtomic) return EINVAL;
  // Packet pacing: 0 (none) or within packet_pacing_caps (mlx5: EINVAL).
  if ((mask & IBV_QP_RATE_LIMIT) && a.rate_limit &&
      (a.rate_limit < kMinRateLimitKbps || a.rate_limit > kMaxRateLimitKbps))
    return EINVAL;
  if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && a.max_dest_rd_atomic > kMaxQpRdAtomic) return EINVAL;
  if ((mask & IBV_QP_TIMEOUT) && a.timeout > 31) return EINVAL;
  if ((mask & IBV_QP_RETRY_CNT) && a.retry_cnt > 7) return EINVAL;
  if ((mask & IBV_QP_RNR_RETRY) && a.rnr_retry > 7) return EINVAL;
  if ((mask & IBV_QP_MIN_RNR_TIMER) && a.min_rnr_timer > 31) return EINVAL;
  // Raw: only its SL is used; DC: only its port, hop limit and traffic class.
  if ((mask & IBV_QP_AV) && qp->type != IBV_QPT_RAW_PACKET && qp->dc == DcRole::kNone) {
    // RoCE: every address carries a GRH (IBA A16.4.1); the source GID must exist.
    if (!a.ah.is_global) return EINVAL;
    if (a.ah.sgid_index >= kGidTableLen || !info_.gids[a.ah.sgid_index].valid) return EINVAL;
  }
  // MW_BIND and ON_DEMAND are accepted and kept (rxe copies the flags, mlx5
  // ignores the bits it does not map): test suites set MW_BIND on every RC QP,
  // and rdma-core's test_odp gives its QPs its MRs' flags, ON_DEMAND included.
  if ((mask & IBV_QP_ACCESS_FLAGS) &&
      (a.qp_access_flags & ~uint32_t(IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                     IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_LOCAL_WRITE |
                                     IBV_ACCESS_MW_BIND | IBV_ACCESS_ON_DEMAND)))
    return EINVAL;

  if (mask & IBV_QP_PKEY_INDEX) qp->pkey_index = a.pkey_index;
  if (mask & IBV_QP_PORT) qp->port = a.port_num;
  if (mask & IBV_QP_QKEY) qp->qkey = a.qkey;
  if (mask & IBV_QP_ACCESS_FLAGS) qp->access = a.qp_access_flags;
  if (mask & IBV_QP_AV) {
    qp->av = a.ah;
    qp->path.generation = 0;  // worked out again at its next packet
    qp->udp_sport = 0;        // a new path: mlx5 sets its source port afresh
  }
  if (mask & IBV_QP_PATH_MTU) qp->path_mtu = ibv_mtu(a.path_mtu);
  if (mask & IBV_QP_DEST_QPN) qp->dest_qpn = a.dest_qp_num & kQpnMask;
  if (mask & IBV_QP_RQ_PSN) qp->resp_epsn = a.rq_psn & 0xffffff;
  if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) qp->max_dest_rd_atomic = a.max_dest_rd_atomic;
  if (mask & IBV_QP_MIN_RNR_TIMER) qp->min_rnr_timer = a.min_rnr_timer;
  if (mask & IBV_QP_TIMEOUT) qp->timeout = a.timeout;
  if (mask & IBV_QP_RETRY_CNT) qp->retry_cnt = a.retry_cnt;
  if (mask & IBV_QP_RNR_RETRY) qp->rnr_retry = a.rnr_retry;
  if (mask & IBV_QP_MAX_QP_RD_ATOMIC) qp->max_rd_atomic = a.max_rd_atomic;
  if (mask & IBV_QP_EN_SQD_ASYNC_NOTIFY) qp->en_sqd_async_notify = a.en_sqd_async_notify;
  if (mask & IBV_QP_SQ_PSN) {
    qp->req_psn = qp->comp_psn = qp->req_max_psn = a.sq_psn & 0xffffff;
    qp->acked_valid = qp->comp_rewound = qp->rnr_nak_valid = false;
    qp->peer_heard = false;
    qp->first_tx_ns = 0;
  }
  if (mask & IBV_QP_RATE_LIMIT) qp->rate_limit_kbps = a.rate_limit;
  if (mask & IBV_QP_RETRY_CNT) qp->retry_left = qp->retry_cnt;
  if (mask & IBV_QP_RNR_RETRY) qp->rnr_retry_left = qp->rnr_retry;

  // A DCT is no responder itself: its contexts are polled, and go when it
  // leaves RTR.
  set_polled(*qp, next != IBV_QPS_RESET && qp->dc != DcRole::kTarget);
  if (qp->dc == DcRole::kTarget && (next == IBV_QPS_RESET || next == IBV_QPS_ERR)) release_dc_contexts(*qp);
  if (qp->dc == DcRole::kInitiator && cur == IBV_QPS_RESET && next == IBV_QPS_INIT) dci_new_epoch(*qp);
  if (next == IBV_QPS_RESET && qp->state != IBV_QPS_RESET) {
    // Back to RESET: rings emptied, transport state cleared (IBA 10.3.1).
    const uint32_t sq_prod = qp->sq.hdr->producer.load(std::memory_order_acquire);
    const uint32_t rq_prod = qp->rq.hdr->producer.load(std::memory_order_acquire);
    tm_internal_drop(*this, *qp);  // rendezvous the device still owed: their tags go back
    qp->sq_head = qp->sq_next = qp->sq_fetched = 0;
    qp->sq_user_head = qp->sq_user_fetched = sq_prod;
    qp->rq_head = rq_prod;
    qp->sq.hdr->consumer.store(sq_prod, std::memory_order_release);
    qp->rq.hdr->consumer.store(rq_prod, std::memory_order_release);
    if (qp->mlx5) {
      // mlx5's RESET zeroes the doorbell record and the queue's indices
      // (providers/mlx5/verbs.c mlx5_modify_qp): the next WQE is at index 0.
      qp->mlx5->dbrec[0].store(0, std::memory_order_relaxed);
      qp->mlx5->dbrec[1].store(0, std::memory_order_release);
      qp->sq_user_fetched = 0;
      if (qp->rq_mlx5) qp->rq_head = 0;
    }
    qp->req_offset = 0;
    qp->rd_atomic_inflight = 0;
    qp->locals_unretired = 0;
    qp->resp_in_msg = qp->resp_recv_valid = qp->resp_nak_sent = false;
    qp->responses.clear();
    qp->rnr_wait_until_ns = qp->retrans_deadline_ns = 0;
    qp->last_wqe_reached_sent = false;
  }
  if (next == IBV_QPS_ERR && qp->state != IBV_QPS_ERR) {
    qp->state = IBV_QPS_ERR;
    flush_qp(*qp);
    return 0;
  }
  if (next == IBV_QPS_SQD && qp->state == IBV_QPS_RTS) {
    // SQ_DRAINED once every started message is acknowledged (IBA 10.3.1.4);
    // the requester finishes the message in progress and then posts it.
    qp->state = next;
    qp->sqd_notify_pending = qp->en_sqd_async_notify;
    if (qp->sqd_notify_pending && qp->sq_head == qp->sq_next && !qp->req_offset) {
      qp->sqd_notify_pending = false;  // already quiet
      post_qp_event(*qp, IBV_EVENT_SQ_DRAINED);
    }
    return 0;
  }
  qp->state = next;
  return 0;
}

int Device::query_qp(Owner* o, uint32_t qpn, abi::QpAttr* attr) {
  Qp* qp = this->qp(qpn);
  if (!qp || !holds(*qp, o)) return EINVAL;
  if (qp->rss) return EOPNOTSUPP;  // mlx5_query_qp
  export_attr(*qp, attr);
  return 0;
}

// mlx5dv_modify_qp_udp_sport: RTS2RTS with the udp_sport optional parameter
// (rdma-core providers/mlx5/mlx5.c, _mlx5dv_modify_qp_udp_sport): RC and UC
// QPs in RTS only, on a device that has the capability, which is mlx5 mode's.
int Device::set_qp_udp_sport(Owner* o, uint32_t qpn, uint16_t udp_sport) {
  Qp* qp = this->qp(qpn);
  if (!qp || !holds(*qp, o)) return EINVAL;
  if (!config_.mlx5) return EOPNOTSUPP;
  if (qp->type != IBV_QPT_RC && qp->type != IBV_QPT_UC) return EOPNOTSUPP;
  if (qp->state != IBV_QPS_RTS) return EINVAL;
  qp->udp_sport = udp_sport;
  qp->path.generation = 0;  // its frames' headers built again with the port
  return 0;
}

void Device::qp_to_error(Qp& qp) {
  if (qp.state == IBV_QPS_ERR) return;
  if (qp.dc == DcRole::kTargetContext) {
    // A DC connection that failed (a fatal NAK went): the DCT stays; the
    // context takes nothing until its DCI connects again (device/dc.cc).
    qp.state = IBV_QPS_RESET;
    return;
  }
  qp.state = IBV_QPS_ERR;
  set_polled(qp, true);  // it flushes what is posted from now on
  flush_qp(qp);
}

// Completes every outstanding send and receive WQE with IBV_WC_WR_FLUSH_ERR.
void Device::flush_qp(Qp& qp) {
  if (qp.state != IBV_QPS_ERR) return;
  auto flush_send = [&](uint64_t wr_id) {
    abi::Cqe cqe{};
    cqe.wr_id = wr_id;
    cqe.status = IBV_WC_WR_FLUSH_ERR;
    cqe.opcode = IBV_WC_SEND;
    cqe.qp_num = qp.qpn;
    complete(qp, true, cqe, false);  // a CQ in error loses it; the slot is freed anyway
  };
  // The engine's sequence first (the user's WQEs it took, in order, and its
  // own rendezvous work), then what the user posted beyond it.
  for (; qp.sq_head != qp.sq_fetched; ++qp.sq_head) {
    if (wqe_state(qp, qp.sq_head).internal != InternalWork::kNone) {
      tm_internal_flushed(*this, qp, qp.sq_head);
      continue;
    }
    flush_send(wqe_at(qp, qp.sq_head).wr_id);
    ++qp.sq_user_head;
  }
  qp.sq_internal = 0;
  qp.sq_internal_reads = 0;
  if (qp.mlx5) [[unlikely]] {
    // What the program posted and the engine did not take, each WQE by its
    // index (read into the free slot at the sequence's head: scratch).
    uint32_t end;
    if (mlx5_sq_posted(qp, &end)) {
      abi::SendWqe& scratch = wqe_at(qp, qp.sq_head);
      while (qp.sq_user_fetched != end) {
        mlx5_take_wqe(qp, end, scratch, qp.sq.stride - uint32_t(sizeof(abi::SendWqe)));
        flush_send(scratch.wr_id);
      }
    } else {
      ++counters_.bad_wqes;
      qp.sq_user_fetched = end;
    }
  } else if (const uint32_t sq_prod = qp.sq.hdr->producer.load(std::memory_order_acquire);
             sq_prod - qp.sq_user_head <= qp.sq.size()) {
    for (; qp.sq_user_head != sq_prod; ++qp.sq_user_head)
      flush_send(reinterpret_cast<const abi::SendWqe*>(qp.sq.slot(qp.sq_user_head))->wr_id);
  } else {
    ++counters_.bad_wqes;
    qp.sq_user_head = sq_prod;
  }
  qp.sq_next = qp.sq_fetched = qp.sq_head;
  if (!qp.mlx5) qp.sq_user_fetched = qp.sq_user_head;
  qp.sq.hdr->consumer.store(qp.sq_user_head, std::memory_order_release);
  qp.req_offset = 0;
  qp.rnr_wait_until_ns = qp.retrans_deadline_ns = 0;  // no timer outlives the error
  qp.sqd_notify_pending = false;
  qp.rd_atomic_inflight = 0;
  qp.locals_unretired = 0;
  qp.responses.clear();
  if (qp.resp_recv_valid) {
    // The receive a message was filling ends flushed; from an SRQ only this
    // one does (the SRQ's other WQEs belong to no QP).
    abi::Cqe cqe{};
    cqe.wr_id = qp.resp_recv.wr_id;
    cqe.status = IBV_WC_WR_FLUSH_ERR;
    cqe.opcode = IBV_WC_RECV;
    cqe.qp_num = qp.qpn;
    if (qp.resp_recv.tm_matched) {
      // A tagged buffer being filled: its handle is free again once flushed.
      cqe.opcode = IBV_WC_TM_RECV;
      if (Srq* s = srq(qp.resp_recv.srq); s && s->tm) s->tm->release(qp.resp_recv.tm_handle);
    }
    complete_to(qp.resp_recv.cq, cqe, false);
    qp.resp_recv_valid = false;
    if (!qp.resp_recv.from_srq) ++qp.rq_head;
  }
  if (qp.srq && !qp.last_wqe_reached_sent) {
    // IBA 11.6.3.1: the QP will take no more WQEs from its SRQ.
    qp.last_wqe_reached_sent = true;
    post_qp_event(qp, IBV_EVENT_QP_LAST_WQE_REACHED);
  }
  // The receives posted and not taken: uroce's ring's, or an mlx5-format
  // queue's, each by its index.
  const uint32_t rq_prod = qp.rq_mlx5 ? qp.rq_head + mlx5_rq_waiting(qp)
                                      : qp.rq.hdr->producer.load(std::memory_order_acquire);
  if (rq_prod - qp.rq_head <= (qp.rq_mlx5 ? qp.mlx5->rq_cnt : qp.rq.size())) {
    for (; qp.rq_head != rq_prod; ++qp.rq_head) {
      abi::Cqe cqe{};
      cqe.wr_id = qp.rq_mlx5 ? mlx5_rq_wqe_id(qp.rq_head) : recv_wqe_id(qp.rq, qp.rq_head);
      cqe.status = IBV_WC_WR_FLUSH_ERR;
      cqe.opcode = IBV_WC_RECV;
      cqe.qp_num = qp.qpn;
      complete(qp, false, cqe, false);
    }
  } else {
    qp.rq_head = rq_prod;
  }
  qp.rq.hdr->consumer.store(qp.rq_head, std::memory_order_release);
  qp.resp_in_msg = false;
}

}  // namespace uroce::device
