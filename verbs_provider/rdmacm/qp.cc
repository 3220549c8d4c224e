// QPs and SRQs on ids, and the QP attributes of each state
// (rdma_init_qp_attr): what the kernel's rdma_cm and IB CM give rdma-core's
// librdmacm (cma_ib_init_qp_attr, cm_init_qp_{init,rtr,rts}_attr).
#include <algorithm>
#include <cerrno>
#include <cstring>

#include "verbs_provider/rdmacm/rdmacm.h"


namespace uroce::rdmacm {

namespace {

// The RNR NAK timer a connected QP's responder advertises. The kernel's CM
// leaves it 0 (655 ms); 12 (0.64 ms) keeps a receiver that is late to post
// from stalling its sender for most of a second.
constexpr uint8_t kMinRnrTimer = 12;
// Local ACK timeout (4.096 us * 2^n): the kernel's for RoCE is the packet
// life time 18 plus one (cma_resolve_iboe_route, cm_init_qp_rts_attr).
constexpr uint8_t kDefaultAckTimeout = 19;

ibv_pd* pd_for(Id* id, ibv_pd* pd) {
  if (pd) return pd;
  if (id->id.pd) return id->id.pd;
  // One PD per device for the ids that bring none (rdma-core's ucma_get_pd).
  if (!id->engine) {
    errno = EINVAL;
    return nullptr;
  }
  return device_pd(id->engine);
}

int modify(Id* id, ibv_qp_state state) {
  ibv_qp_attr attr{};
  int mask = 0;
  attr.qp_state = state;
  if (rdma_init_qp_attr(&id->id, &attr, &mask) != 0) return errno;
  return ibv_modify_qp(id->id.qp, &attr, mask);
}

}  // namespace

int modify_qp_rtr_rts(Id* id) {
  // INIT again first: the access flags follow the negotiated resources.
  if (int err = modify(id, IBV_QPS_INIT)) return err;
  if (int err = modify(id, IBV_QPS_RTR)) return err;
  return modify(id, IBV_QPS_RTS);
}

int modify_qp_err(Id* id) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  return ibv_modify_qp(id->id.qp, &attr, IBV_QP_STATE);
}

}  // namespace uroce::rdmacm

using namespace uroce;
using namespace uroce::rdmacm;

RDMACM_EXPORT int rdma_init_qp_attr(rdma_cm_id* cm_id, ibv_qp_attr* attr, int* mask) {
  Id* id = to_id(cm_id);
  if (!attr || !mask) return fail(EINVAL);
  const ibv_qp_type type = id->id.qp && id->id.qp->qp_type ? id->id.qp->qp_type : id->id.qp_type;
  const bool ud = type == IBV_QPT_UD;
  // An XRC initiator is RC's sending half, a target its receiving half
  // (cm_init_qp_rtr_attr, cm_init_qp_rts_attr).
  const bool responder = type == IBV_QPT_RC || type == IBV_QPT_XRC_RECV;
  const bool requester = type == IBV_QPT_RC || type == IBV_QPT_XRC_SEND;
  const ibv_qp_state state = attr->qp_state;
  *attr = {};
  attr->qp_state = state;
  switch (state) {
    case IBV_QPS_INIT:
      attr->pkey_index = 0;
      attr->port_num = 1;
      *mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
      if (ud) {
        attr->qkey = RDMA_UDP_QKEY;
        *mask |= IBV_QP_QKEY;
      } else {
        // Before a connection none; once connected remote writes, and reads
        // and atomics if this side offers responder resources (cm_init_qp_init_attr).
        attr->qp_access_flags = 0;
        if (id->have_peer) {
          attr->qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
          if (id->responder_resources) attr->qp_access_flags |= IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
        }
        *mask |= IBV_QP_ACCESS_FLAGS;
      }
      return 0;
    case IBV_QPS_RTR: {
      *mask = IBV_QP_STATE;
      if (ud) return 0;
      if (!id->have_peer) return fail(EINVAL);
      ibv_port_attr port{};
      attr->path_mtu = ibv_query_port(id->id.verbs, 1, &port) == 0 ? port.active_mtu : IBV_MTU_1024;
      attr->dest_qp_num = id->peer_qpn;
      // Each side's REQ or REP carries the PSN it will receive with: the
      // active side's rq_psn is its REQ's Starting PSN and its sq_psn the
      // REP's, the passive side the reverse (Linux's ib_send_cm_req,
      // ib_send_cm_rep, cm_req_handler and cm_rep_handler in
      // drivers/infiniband/core/cm.c, read back by cm_init_qp_rtr_attr and
      // cm_init_qp_rts_attr). Swapped, uroce only ever talked to uroce.
      attr->rq_psn = id->psn;
      attr->ah_attr.is_global = 1;
      attr->ah_attr.port_num = 1;
      std::memcpy(attr->ah_attr.grh.dgid.raw, id->peer_gid, 16);
      attr->ah_attr.grh.sgid_index = id->gid_index;
      attr->ah_attr.grh.hop_limit = 64;
      attr->ah_attr.grh.traffic_class = id->tos;
      *mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
      if (responder) {
        attr->max_dest_rd_atomic = id->responder_resources;
        attr->min_rnr_timer = kMinRnrTimer;
        *mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
      }
      return 0;
    }
    case IBV_QPS_RTS:
      attr->sq_psn = ud ? 0 : id->peer_psn;
      *mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
      if (requester) {
        attr->retry_cnt = id->retry_count;
        attr->rnr_retry = id->rnr_retry_count;
        attr->max_rd_atomic = id->initiator_depth;
        *mask |= IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
      }
      if (requester || responder) {
        attr->timeout = id->ack_timeout ? id->ack_timeout : kDefaultAckTimeout;
        *mask |= IBV_QP_TIMEOUT;
      }
      return 0;
    default:
      return fail(EINVAL);
  }
}

RDMACM_EXPORT int rdma_create_qp_ex(rdma_cm_id* cm_id, ibv_qp_init_attr_ex* attr) {
  Id* id = to_id(cm_id);
  if (!attr || !id->id.verbs) return fail(EINVAL);
  if (id->id.qp) return fail(EINVAL);
  if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd) {
    attr->pd = pd_for(id, nullptr);
    attr->comp_mask |= IBV_QP_INIT_ATTR_PD;
  }
  if (!attr->pd) return -1;
  // An XRC target QP lives in an XRC domain: the device's if none is given
  // (rdma_create_qp_ex's ucma_get_xrcd).
  if (attr->qp_type == IBV_QPT_XRC_RECV && (!(attr->comp_mask & IBV_QP_INIT_ATTR_XRCD) || !attr->xrcd)) {
    if (!id->engine || !(attr->xrcd = device_xrcd(id->engine))) return fail(errno ? errno : EINVAL);
    attr->comp_mask |= IBV_QP_INIT_ATTR_XRCD;
  }
  // CQs the caller did not give: one each, with a completion channel, for
  // rdma_get_send_comp / rdma_get_recv_comp (ucma_create_cqs).
  if (!attr->send_cq) {
    if (!id->id.send_cq) {
      id->id.send_cq_channel = ibv_create_comp_channel(id->id.verbs);
      if (!id->id.send_cq_channel) return -1;
      id->id.send_cq = ibv_create_cq(id->id.verbs, int(std::max(attr->cap.max_send_wr, 1u)), id,
                                     id->id.send_cq_channel, 0);
      if (!id->id.send_cq) return -1;
      id->own_send_cq = true;
    }
    attr->send_cq = id->id.send_cq;
  }
  if (!attr->recv_cq) {
    if (!id->id.recv_cq) {
      id->id.recv_cq_channel = ibv_create_comp_channel(id->id.verbs);
      if (!id->id.recv_cq_channel) return -1;
      id->id.recv_cq = ibv_create_cq(id->id.verbs, int(std::max(attr->cap.max_recv_wr, 1u)), id,
                                     id->id.recv_cq_channel, 0);
      if (!id->id.recv_cq) return -1;
      id->own_recv_cq = true;
    }
    attr->recv_cq = id->id.recv_cq;
  }
  if (!attr->srq && id->id.srq) attr->srq = id->id.srq;
  ibv_qp* qp = ibv_create_qp_ex(id->id.verbs, attr);
  if (!qp) return -1;
  id->id.qp = qp;
  id->id.qp_type = attr->qp_type;
  id->id.pd = attr->pd;
  // The states the kernel's rdma_cm puts a new QP in: a UD QP ready to send
  // (cma_init_ud_qp), a connected one in INIT until the connection is
  // negotiated (cma_init_conn_qp).
  int err = modify(id, IBV_QPS_INIT);
  if (!err && attr->qp_type == IBV_QPT_UD) err = modify(id, IBV_QPS_RTR);
  if (!err && attr->qp_type == IBV_QPT_UD) err = modify(id, IBV_QPS_RTS);
  if (err) {
    ibv_destroy_qp(qp);
    id->id.qp = nullptr;
    return fail(err);
  }
  return 0;
}

RDMACM_EXPORT int rdma_create_qp(rdma_cm_id* cm_id, ibv_pd* pd, ibv_qp_init_attr* init) {
  if (!init) return fail(EINVAL);
  Id* id = to_id(cm_id);
  if (pd && id->id.verbs && pd->context != id->id.verbs) return fail(EINVAL);
  ibv_qp_init_attr_ex ex{};
  std::memcpy(&ex, init, sizeof(*init));
  ex.comp_mask = IBV_QP_INIT_ATTR_PD;
  ex.pd = pd_for(id, pd);
  if (int r = rdma_create_qp_ex(cm_id, &ex)) return r;
  init->cap = ex.cap;
  return 0;
}

RDMACM_EXPORT void rdma_destroy_qp(rdma_cm_id* cm_id) {
  Id* id = to_id(cm_id);
  if (!id->id.qp) return;
  ibv_destroy_qp(id->id.qp);
  id->id.qp = nullptr;
  if (id->own_send_cq) {
    ibv_destroy_cq(id->id.send_cq);
    ibv_destroy_comp_channel(id->id.send_cq_channel);
    id->id.send_cq = nullptr;
    id->id.send_cq_channel = nullptr;
    id->own_send_cq = false;
  }
  if (id->own_recv_cq && !(id->xrc_srq && id->id.srq)) {
    ibv_destroy_cq(id->id.recv_cq);
    ibv_destroy_comp_channel(id->id.recv_cq_channel);
    id->id.recv_cq = nullptr;
    id->id.recv_cq_channel = nullptr;
    id->own_recv_cq = false;
  }
}

RDMACM_EXPORT int rdma_create_srq_ex(rdma_cm_id* cm_id, ibv_srq_init_attr_ex* attr) {
  Id* id = to_id(cm_id);
  if (!attr || !id->id.verbs) return fail(EINVAL);
  if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !attr->pd) {
    attr->pd = pd_for(id, nullptr);
    attr->comp_mask |= IBV_SRQ_INIT_ATTR_PD;
  }
  if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE)) {
    attr->srq_type = id->id.qp_type == IBV_QPT_XRC_RECV ? IBV_SRQT_XRC : IBV_SRQT_BASIC;
    attr->comp_mask |= IBV_SRQ_INIT_ATTR_TYPE;
  }
  // An XRC SRQ: in the device's XRC domain, completing on the id's receive
  // CQ unless given others (rdma_create_srq_ex).
  if (attr->srq_type == IBV_SRQT_XRC) {
    if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_XRCD) || !attr->xrcd) {
      if (!id->engine || !(attr->xrcd = device_xrcd(id->engine))) return fail(errno ? errno : EINVAL);
    }
    if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_CQ) || !attr->cq) {
      if (!id->id.recv_cq) {
        id->id.recv_cq_channel = ibv_create_comp_channel(id->id.verbs);
        if (!id->id.recv_cq_channel) return -1;
        id->id.recv_cq = ibv_create_cq(id->id.verbs, int(std::max(attr->attr.max_wr, 1u)), id,
                                       id->id.recv_cq_channel, 0);
        if (!id->id.recv_cq) return -1;
        id->own_recv_cq = true;
      }
      attr->cq = id->id.recv_cq;
    }
    attr->comp_mask |= IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
  }
  ibv_srq* srq = ibv_create_srq_ex(id->id.verbs, attr);
  if (!srq) return -1;
  id->id.srq = srq;
  id->id.pd = attr->pd;
  id->xrc_srq = attr->srq_type == IBV_SRQT_XRC;
  return 0;
}

RDMACM_EXPORT int rdma_create_srq(rdma_cm_id* cm_id, ibv_pd* pd, ibv_srq_init_attr* init) {
  if (!init) return fail(EINVAL);
  ibv_srq_init_attr_ex ex{};
  ex.srq_context = init->srq_context;
  ex.attr = init->attr;
  ex.comp_mask = IBV_SRQ_INIT_ATTR_PD;  // its type from the id's QP type
  ex.pd = pd_for(to_id(cm_id), pd);
  if (int r = rdma_create_srq_ex(cm_id, &ex)) return r;
  init->attr = ex.attr;
  return 0;
}

RDMACM_EXPORT void rdma_destroy_srq(rdma_cm_id* cm_id) {
  Id* id = to_id(cm_id);
  if (!id->id.srq) return;
  ibv_destroy_srq(id->id.srq);
  id->id.srq = nullptr;
  // An XRC SRQ's receive CQ outlived the QP for it (rdma_destroy_srq's ucma_destroy_cqs).
  if (id->xrc_srq && id->own_recv_cq && !id->id.qp) {
    ibv_destroy_cq(id->id.recv_cq);
    ibv_destroy_comp_channel(id->id.recv_cq_channel);
    id->id.recv_cq = nullptr;
    id->id.recv_cq_channel = nullptr;
    id->own_recv_cq = false;
  }
  id->xrc_srq = false;
}
