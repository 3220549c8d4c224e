// The CM agent's remote half, receiving: the MADs that reach QP1 from a
// peer beyond this engine (IBA 12.6 connection, 12.11 SIDR), each routed by
// its attribute to a handler that moves the id it names and queues the
// event rdma_cm gives for it, as Linux's cm.c and cma.c do. Sending, the
// calls for remote ids and the timers: cm/cm_wire.cc. Setup path: runs on
// the engine thread.
#include <arpa/inet.h>
#include <infiniband/verbs.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "cm/cm_agent.h"
#include "uroce/cm_addr.h"

namespace uroce::cm {

using namespace cm_events;

namespace {

// cma_hdr's addresses: IPv4 in the last four bytes (union cma_ip_addr).
abi::CmAddr from_cma_addr(uint8_t ip_version, const uint8_t in[16], uint16_t port_host) {
  abi::CmAddr a{};
  a.port = htons(port_host);
  if (ip_version == 6) {
    a.family = AF_INET6;
    std::memcpy(a.addr, in, 16);
  } else {
    a.family = AF_INET;
    std::memcpy(a.addr, in + 12, 4);
  }
  return a;
}

void copy_private(abi::CmConnParam& param, const uint8_t* data, size_t len) {
  len = std::min(len, sizeof(param.private_data));
  std::memcpy(param.private_data, data, len);
  param.private_data_len = uint8_t(len);
}

}  // namespace

const CmAgent::MadRoute CmAgent::kMadRoutes[] = {
    {mad::Attr::kReq, &CmAgent::on_req},          {mad::Attr::kMra, &CmAgent::on_mra},
    {mad::Attr::kRej, &CmAgent::on_rej},          {mad::Attr::kRep, &CmAgent::on_rep},
    {mad::Attr::kRtu, &CmAgent::on_rtu},          {mad::Attr::kDreq, &CmAgent::on_dreq},
    {mad::Attr::kDrep, &CmAgent::on_drep},        {mad::Attr::kSidrReq, &CmAgent::on_sidr_req},
    {mad::Attr::kSidrRep, &CmAgent::on_sidr_rep},
};

// ---- receiving ----

bool CmAgent::receive_mad(const uint8_t* sgid, const uint8_t* dgid, const uint8_t* bytes) {
  mad::Mad mad;
  std::memcpy(&mad, bytes, sizeof(mad));
  if (mad.hdr.mgmt_class != mad::kMgmtClassCm) return false;  // no other GSI class is served
  receive_mad(sgid, dgid, mad);
  return true;
}

void CmAgent::receive_mad(const uint8_t* sgid, const uint8_t* dgid, const mad::Mad& m) {
  ++wire_counters_.mads_received;
  // A CM Send of class version 2 (IBA 12.6.1, 13.4.2); anything else is
  // not for this agent.
  if (m.hdr.base_version != mad::kBaseVersion || m.hdr.mgmt_class != mad::kMgmtClassCm ||
      m.hdr.class_version != mad::kCmClassVersion || m.hdr.method != mad::kMethodSend) {
    ++wire_counters_.mads_dropped;
    return;
  }
  const uint16_t attr = m.hdr.attr_id;
  for (const MadRoute& r : kMadRoutes) {
    if (uint16_t(r.attr) == attr) return (this->*r.handler)(sgid, dgid, m);
  }
  ++wire_counters_.mads_dropped;  // LAP, APR, ClassPortInfo: not served
}

CmAgent::Id* CmAgent::find_remote(uint32_t our_comm_id, uint64_t* h) {
  *h = handle_of(our_comm_id);
  auto it = ids_.find(*h);
  if (it == ids_.end() || !it->second.remote) {
    ++wire_counters_.mads_dropped;
    return nullptr;
  }
  return &it->second;
}

uint8_t CmAgent::sgid_index_of(const uint8_t* gid) const {
  for (uint8_t i = 0; i < std::size(info_.gids); ++i)
    if (info_.gids[i].valid && std::memcmp(info_.gids[i].gid, gid, 16) == 0) return i;
  return 0;
}

uint64_t CmAgent::request_from_wire(uint64_t lh, const uint8_t* sgid, const uint8_t* dgid, const mad::Mad& m,
                                    const abi::CmAddr& local, const abi::CmAddr& peer, uint32_t remote_comm_id,
                                    bool ud) {
  const Id& listener = ids_.at(lh);
  Id child;
  child.owner = listener.owner;
  child.channel = listener.channel;
  child.ps = listener.ps;
  child.qp_type = IBV_QPT_UD;
  if (!ud) {  // the REQ's transport (cm_req_get_qp_type): an XRC initiator's is for an XRC target
    using namespace mad::req;
    const uint8_t transport = uint8_t(mad::get(m, kTransportServiceType));
    child.qp_type = transport == kTransportUc ? IBV_QPT_UC
                    : transport == kTransportExtended && mad::get(m, kExtendedTransportType) == kExtendedXrc
                        ? IBV_QPT_XRC_RECV
                        : IBV_QPT_RC;
  }
  child.child = true;
  child.state = State::kRequested;
  child.src = local;
  child.dst = peer;
  // What follows rdma_cm's IP header (cma_user_data_offset).
  const size_t skip = sizeof(mad::CmaHdr);
  child.remote = true;
  child.remote_comm_id = remote_comm_id;
  std::memcpy(child.remote_gid, sgid, 16);
  child.sgid_index = sgid_index_of(dgid);
  child.tid = m.hdr.tid;
  abi::CmEventRecord ev{};
  ev.event = kConnectRequest;
  ev.listen_id = lh;
  ev.src = child.src;
  ev.dst = child.dst;
  ev.param.qp_type = uint8_t(child.qp_type);
  std::memcpy(ev.peer_gid, sgid, 16);
  ev.local_gid_index = child.sgid_index;
  if (ud) {
    copy_private(ev.param, mad::at(m, mad::sidr_req::kPrivateData) + skip, mad::sidr_req::kPrivateData.len - skip);
  } else {
    using namespace mad::req;
    child.remote_qpn = uint32_t(mad::get(m, kLocalQpn));
    child.peer_response_timeout = uint8_t(mad::get(m, kRemoteCmResponseTimeout));
    ev.param.qp_num = child.remote_qpn;
    ev.param.psn = uint32_t(mad::get(m, kStartingPsn));
    // The receiver's view, as cm_format_req_event: what the peer may read
    // from us is what we may answer with, and the other way.
    ev.param.responder_resources = uint8_t(mad::get(m, kInitiatorDepth));
    ev.param.initiator_depth = uint8_t(mad::get(m, kResponderResources));
    ev.param.flow_control = uint8_t(mad::get(m, kEndToEndFlowControl));
    ev.param.retry_count = uint8_t(mad::get(m, kRetryCount));
    ev.param.rnr_retry_count = uint8_t(mad::get(m, kRnrRetryCount));
    ev.param.srq = uint8_t(mad::get(m, kSrq));
    copy_private(ev.param, mad::at(m, kPrivateData) + skip, kPrivateData.len - skip);
  }
  const uint64_t ch = next_handle_++;
  Id& made = ids_.emplace(ch, child).first->second;
  post(made, ch, ev);
  if (!ud) schedule_mra(ch, mad::kMraMsgReq, mad::timeout_ns(made.peer_response_timeout));
  return ch;
}

// A REQ: a retransmission of one we hold is answered again (the REP) or
// ignored (not yet accepted); a new one goes to the listener of its
// service ID and cma_hdr address (cm_match_req, cma_find_listener), or is
// rejected: invalid service ID.
void CmAgent::on_req(const uint8_t* sgid, const uint8_t* dgid, const mad::Mad& m) {
  using namespace mad::req;
  const uint32_t remote_comm = uint32_t(mad::get(m, kLocalCommId));
  for (auto& [h, id] : ids_) {
    // (A connection that ended does not hold its IDs: a peer may reuse them.)
    const bool live = id.state == State::kRequested || id.state == State::kRepSent ||
                      id.state == State::kEstablished;
    if (!live || !id.remote || !id.child || id.ps == kPsUdp || id.remote_comm_id != remote_comm ||
        std::memcmp(id.remote_gid, sgid, 16) != 0)
      continue;
    ++wire_counters_.mads_duplicate;
    // Not yet accepted: the peer is told to wait (cm_dup_req_handler's MRA).
    if (awaits_answer(id, mad::kMraMsgReq)) return send_mra(h, id, mad::kMraMsgReq);
    for (const Outstanding& o : outstanding_) {
      if (o.handle != h || o.attr != mad::Attr::kRep) continue;
      ++wire_counters_.mads_sent;
      wire_.send(o.dgid, o.sgid_index, o.mad);
    }
    return;
  }
  const uint8_t sgid_index = sgid_index_of(dgid);
  auto refuse = [&](uint16_t reason) {
    send_rej(sgid, sgid_index, m.hdr.tid, 0, remote_comm, mad::kRejMsgReq, reason);
  };
  // A REQ from a QP that a connection of ours still holds is stale (its
  // sender lost that connection, as in a restart): refused (REJ 10, stale
  // connection) and the connection ended with a DREQ, as cm_match_req does
  // with its table of remote QPNs. A connection in time-wait holds nothing
  // there (cm_enter_timewait takes it out): its QPN may connect again.
  const uint32_t remote_qpn = uint32_t(mad::get(m, kLocalQpn));
  for (auto& [h, id] : ids_) {
    const bool holds = id.state == State::kRequested || id.state == State::kRepSent ||
                       id.state == State::kRepReceived || id.state == State::kEstablished ||
                       id.state == State::kDreqSent;
    if (!holds || !id.remote || id.ps == kPsUdp || id.remote_qpn != remote_qpn ||
        std::memcmp(id.remote_gid, sgid, 16) != 0)
      continue;
    refuse(mad::kRejStaleConn);
    if (id.state == State::kEstablished) disconnect_remote(id, h);  // (ib_send_cm_dreq: established only)
    return;
  }
  const uint64_t sid = mad::get(m, kServiceId);
  // RDMA_PS_TCP's or RDMA_PS_IB's service IDs (cma_get_service_id).
  const uint64_t ps = sid >> 16;
  if (ps != mad::kPsTcp && ps != mad::kPsIb) return refuse(mad::kRejInvalidServiceId);
  abi::CmAddr local, peer;
  if (!ip_request(m, kPrivateData, sid, &local, &peer))
    return refuse(listens_on(sid) ? mad::kRejConsumerDefined : mad::kRejInvalidServiceId);
  const uint64_t lh = find_listener(uint32_t(ps), local);
  if (!lh || !is_local(local)) return refuse(mad::kRejInvalidServiceId);
  if (refuses_ip_requests(lh) || ids_.size() >= kMaxIds) return refuse(mad::kRejConsumerDefined);
  request_from_wire(lh, sgid, dgid, m, local, peer, remote_comm, false);
}

// A request's addresses from rdma_cm's IP header (cma_save_ip_info); false
// when it has none. Over RoCE the kernel takes no request without one: with
// no netdev it is an AF_IB id's, matched to AF_IB listeners only, and their
// new id fails to take the port (cma_ib_acquire_dev: cma_validate_port
// refuses an AF_IB address on a RoCE port); any listener's failure is a
// REJ, consumer defined (a SIDR REP "reject"), where the CM has a listener
// for the service ID.
bool CmAgent::ip_request(const mad::Mad& m, mad::Bytes private_data, uint64_t sid, abi::CmAddr* local,
                         abi::CmAddr* peer) {
  mad::CmaHdr hdr;
  std::memcpy(&hdr, mad::at(m, private_data), sizeof(hdr));
  const uint8_t ipv = hdr.ip_version >> 4;
  if (hdr.cma_version != mad::kCmaVersion || (ipv != 4 && ipv != 6)) return false;
  *local = from_cma_addr(ipv, hdr.dst_addr, uint16_t(sid));
  *peer = from_cma_addr(ipv, hdr.src_addr, hdr.port);
  return true;
}

void CmAgent::on_sidr_req(const uint8_t* sgid, const uint8_t* dgid, const mad::Mad& m) {
  using namespace mad::sidr_req;
  const uint32_t request_id = uint32_t(mad::get(m, kRequestId));
  for (auto& [h, id] : ids_) {
    if (id.remote && id.child && id.ps == kPsUdp && id.state == State::kRequested &&
        id.remote_comm_id == request_id && std::memcmp(id.remote_gid, sgid, 16) == 0) {
      ++wire_counters_.mads_duplicate;  // not answered yet: the answer will do for both
      return;
    }
  }
  const uint8_t sgid_index = sgid_index_of(dgid);
  const uint64_t sid = mad::get(m, kServiceId);
  abi::CmAddr local, peer;
  if (!ip_request(m, kPrivateData, sid, &local, &peer)) {
    send_sidr_status(sgid, sgid_index, m.hdr.tid, request_id, sid,
                     listens_on(sid) ? mad::kSidrReject : mad::kSidrUnsupported);
    return;
  }
  const uint64_t lh = (sid & mad::kServiceIdPsMask) == mad::service_id(mad::kPsUdp, 0) && is_local(local)
                          ? find_listener(kPsUdp, local)
                          : 0;
  if (!lh || refuses_ip_requests(lh) || ids_.size() >= kMaxIds) {
    // cm_sidr_req_handler: no listener is "unsupported" (IBA table 121).
    send_sidr_status(sgid, sgid_index, m.hdr.tid, request_id, sid, lh ? mad::kSidrReject : mad::kSidrUnsupported);
    return;
  }
  request_from_wire(lh, sgid, dgid, m, local, peer, request_id, true);
}

// An MRA: the peer needs longer; the request waits its service timeout
// more before it is sent again (12.6.6).
void CmAgent::on_mra(const uint8_t*, const uint8_t*, const mad::Mad& m) {
  uint64_t h;
  if (!find_remote(uint32_t(mad::get(m, mad::mra::kRemoteCommId)), &h)) return;
  ++wire_counters_.mras_received;
  const uint64_t wait = mad::timeout_ns(uint8_t(mad::get(m, mad::mra::kServiceTimeout))) + retry_interval_ns();
  for (Outstanding& o : outstanding_)
    if (o.handle == h) {
      o.deadline_ns = wire_.now_ns() + wait;
      o.retries_left = wire_.max_cm_retries;
    }
}

// A REP to our REQ: CONNECT_RESPONSE (librdmacm then connects its QP and
// establishes: the RTU). A repeated REP means our RTU was lost: again.
void CmAgent::on_rep(const uint8_t* sgid, const uint8_t*, const mad::Mad& m) {
  using namespace mad::rep;
  uint64_t h;
  Id* id = find_remote(uint32_t(mad::get(m, kRemoteCommId)), &h);
  if (!id) return;
  if (id->state == State::kEstablished) {
    ++wire_counters_.mads_duplicate;
    establish_remote(*id, h);
    return;
  }
  if (id->state != State::kConnecting || id->ps == kPsUdp) {
    ++wire_counters_.mads_duplicate;
    // Our application has not established yet: the peer is told to wait.
    if (awaits_answer(*id, mad::kMraMsgRep)) send_mra(h, *id, mad::kMraMsgRep);
    return;
  }
  cancel(h);
  // The REQ's Local CM Response Timeout is our promise for the RTU.
  schedule_mra(h, mad::kMraMsgRep, mad::timeout_ns(wire_.cm_response_timeout));
  id->remote_comm_id = uint32_t(mad::get(m, kLocalCommId));
  id->remote_qpn = uint32_t(mad::get(m, id->qp_type == IBV_QPT_XRC_SEND ? kLocalEecn : kLocalQpn));
  std::memcpy(id->remote_gid, sgid, 16);
  id->state = State::kRepReceived;
  abi::CmEventRecord ev{};
  ev.event = kConnectResponse;
  ev.param.qp_num = id->remote_qpn;
  ev.param.psn = uint32_t(mad::get(m, kStartingPsn));
  ev.param.responder_resources = uint8_t(mad::get(m, kInitiatorDepth));  // cm_format_rep_event
  ev.param.initiator_depth = uint8_t(mad::get(m, kResponderResources));
  ev.param.flow_control = uint8_t(mad::get(m, kEndToEndFlowControl));
  ev.param.rnr_retry_count = uint8_t(mad::get(m, kRnrRetryCount));
  ev.param.srq = uint8_t(mad::get(m, kSrq));
  copy_private(ev.param, mad::at(m, kPrivateData), kPrivateData.len);
  std::memcpy(ev.peer_gid, sgid, 16);
  ev.local_gid_index = id->sgid_index;
  post(*id, h, ev);
}

void CmAgent::on_rtu(const uint8_t*, const uint8_t*, const mad::Mad& m) {
  uint64_t h;
  Id* id = find_remote(uint32_t(mad::get(m, mad::rtu::kRemoteCommId)), &h);
  if (!id) return;
  if (id->state != State::kRepSent) {
    ++wire_counters_.mads_duplicate;
    return;
  }
  cancel(h);
  id->state = State::kEstablished;
  post_simple(h, kEstablished, 0);
}

// A REJ names us by our communication ID, except the "timeout" REJ of a
// REQ withdrawn before any REP (it knows only its own): then by theirs.
void CmAgent::on_rej(const uint8_t* sgid, const uint8_t*, const mad::Mad& m) {
  using namespace mad::rej;
  const uint32_t ours = uint32_t(mad::get(m, kRemoteCommId));
  const uint32_t theirs = uint32_t(mad::get(m, kLocalCommId));
  uint64_t h = 0;
  Id* id = nullptr;
  if (ours) {
    id = find_remote(ours, &h);
  } else {
    for (auto& [ih, i] : ids_)
      if (i.remote && i.child && i.remote_comm_id == theirs && std::memcmp(i.remote_gid, sgid, 16) == 0) {
        h = ih;
        id = &i;
      }
    if (!id) ++wire_counters_.mads_dropped;
  }
  if (!id) return;
  if (id->state != State::kConnecting && id->state != State::kRequested && id->state != State::kRepSent &&
      id->state != State::kRepReceived) {
    ++wire_counters_.mads_duplicate;
    return;
  }
  cancel(h);
  id->state = id->child ? State::kDisconnected : State::kRouteResolved;
  abi::CmEventRecord ev{};
  ev.event = kRejected;
  ev.status = int32_t(mad::get(m, kReason));
  copy_private(ev.param, mad::at(m, kPrivateData), abi::kCmMaxRejPrivateData);
  post(*id, h, ev);
}

// A DREQ is always answered (a repeated one too: our DREP was lost); the
// connection it ends sees DISCONNECTED once.
void CmAgent::on_dreq(const uint8_t* sgid, const uint8_t* dgid, const mad::Mad& m) {
  using namespace mad::dreq;
  const uint32_t ours = uint32_t(mad::get(m, kRemoteCommId));
  mad::Mad drep = new_mad(mad::Attr::kDrep, m.hdr.tid);
  mad::set(drep, mad::drep::kLocalCommId, ours);
  mad::set(drep, mad::drep::kRemoteCommId, uint32_t(mad::get(m, kLocalCommId)));
  ++wire_counters_.mads_sent;
  wire_.send(sgid, sgid_index_of(dgid), drep);
  const uint64_t h = handle_of(ours);
  auto it = ids_.find(h);
  if (it == ids_.end() || !it->second.remote) return;
  Id& id = it->second;
  if (id.state != State::kEstablished && id.state != State::kRepSent && id.state != State::kRepReceived &&
      id.state != State::kDreqSent) {
    ++wire_counters_.mads_duplicate;
    return;
  }
  cancel(h);
  id.state = State::kDisconnected;
  post_disconnected(h);
}

void CmAgent::on_drep(const uint8_t*, const uint8_t*, const mad::Mad& m) {
  const uint32_t ours = uint32_t(mad::get(m, mad::drep::kRemoteCommId));
  // The DREQ of an id already gone is done.
  std::erase_if(outstanding_, [ours](const Outstanding& o) { return !o.handle && o.comm_id == ours; });
  const uint64_t h = handle_of(ours);
  auto it = ids_.find(h);
  if (it == ids_.end() || !it->second.remote || it->second.state != State::kDreqSent) return;
  cancel(h);
  it->second.state = State::kDisconnected;
  post_disconnected(h);
}

// A SIDR REP: the peer's QP and Q_Key (ESTABLISHED), or its refusal
// (UNREACHABLE with the status, as cma_sidr_rep_handler).
void CmAgent::on_sidr_rep(const uint8_t* sgid, const uint8_t*, const mad::Mad& m) {
  using namespace mad::sidr_rep;
  uint64_t h;
  Id* id = find_remote(uint32_t(mad::get(m, kRequestId)), &h);
  if (!id) return;
  if (id->state != State::kConnecting || id->ps != kPsUdp) {
    ++wire_counters_.mads_duplicate;
    return;
  }
  cancel(h);
  id->state = State::kRouteResolved;
  abi::CmEventRecord ev{};
  const uint8_t status = uint8_t(mad::get(m, kStatus));
  ev.event = status == mad::kSidrSuccess ? kEstablished : kUnreachable;
  ev.status = status;
  ev.param.qp_num = uint32_t(mad::get(m, kQpn));
  ev.param.qkey = uint32_t(mad::get(m, kQkey));
  copy_private(ev.param, mad::at(m, kPrivateData), kPrivateData.len);
  std::memcpy(ev.peer_gid, sgid, 16);
  ev.local_gid_index = id->sgid_index;
  post(*id, h, ev);
}

}  // namespace uroce::cm
