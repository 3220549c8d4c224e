// The CM agent's remote half: connections whose peer is beyond this engine
// are IB CM MADs on QP1 (IBA 12.6 connection, 12.11 SIDR), as Linux's
// cm.c and cma.c send them over RoCEv2: the REQ's service ID is rdma_cm's
// port space and port, its private data starts with rdma_cm's IP header
// (cm/cm_mad.h), and every request (REQ, REP, DREQ, SIDR REQ) is sent
// again until answered, max_cm_retries times. Setup path: runs on the
// engine thread, from control requests, received MADs and the poll loop's
// timers. Receiving MADs: cm/cm_wire_receive.cc.
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

// Address resolution's pace (resolve_remote): the cache looked at every
// 5 ms, a request every 200 ms, ADDR_ERROR after one second unanswered.
constexpr uint64_t kNeighbourCheckNs = 5'000'000;
constexpr uint64_t kNeighbourSolicitNs = 200'000'000;
constexpr uint64_t kNeighbourTimeoutNs = 1'000'000'000;

// cma_hdr's addresses: IPv4 in the last four bytes (union cma_ip_addr).
void to_cma_addr(const abi::CmAddr& a, uint8_t out[16]) {
  std::memset(out, 0, 16);
  if (a.family == AF_INET6) std::memcpy(out, a.addr, 16);
  else std::memcpy(out + 12, a.addr, 4);
}

bool is_zero(const uint8_t* p, size_t n) {
  return std::all_of(p, p + n, [](uint8_t b) { return b == 0; });
}

}  // namespace

// ---- the active and passive calls for remote ids ----

// A REQ's (or SIDR REQ's) private data: rdma_cm's IP header, then the
// application's.
size_t CmAgent::request_private(const Id& active, const abi::CmConnParam& p, uint8_t* out) {
  mad::CmaHdr hdr{};
  hdr.cma_version = mad::kCmaVersion;
  hdr.ip_version = uint8_t((active.src.family == AF_INET6 ? 6 : 4) << 4);
  hdr.port = ntohs(active.src.port);
  to_cma_addr(active.src, hdr.src_addr);
  to_cma_addr(active.dst, hdr.dst_addr);
  std::memcpy(out, &hdr, sizeof(hdr));
  std::memcpy(out + sizeof(hdr), p.private_data, p.private_data_len);
  return sizeof(hdr) + p.private_data_len;
}

// The source the kernel's routing would pick toward a remote address: the
// engine's own address of that family (its --ip/--ip6 on the wire port);
// the neighbour is resolved as for any send (ARP/NDP in net/), when the
// first MAD goes out.
int CmAgent::resolve_remote(Id& id, uint64_t h, const abi::CmResolveAddrRequest& r, abi::CmBindReply* rep) {
  // An AF_IB destination is a GID: an IPv4-mapped one is reached from our
  // IPv4 GID, another from our IPv6 one.
  const bool ib = r.dst.family == AF_IB;
  const abi::CmAddr dst = ib ? r.dst : unmapped(r.dst);
  abi::CmAddr ours{};
  ours.family = dst.family;
  if (ib && is_ipv4_mapped(dst.addr)) {
    ipv4_gid(ip_.data(), ours.addr);
  } else if (dst.family == AF_INET) {
    std::memcpy(ours.addr, ip_.data(), 4);
  } else {
    if (is_zero(ip6_.data(), 16)) {  // no IPv6 address: no route
      abi::CmEventRecord ev{};
      ev.event = kAddrError;
      ev.status = -EHOSTUNREACH;
      post(id, h, ev);
      return 0;
    }
    std::memcpy(ours.addr, ip6_.data(), 16);
  }
  if (ib) ours.scope_id = id.ps;  // cma_bind_addr's AF_IB wildcard: the id's port space
  id.dst = dst;
  if (id.state == State::kIdle) {
    abi::CmAddr src = r.src.family ? (ib ? r.src : unmapped(r.src)) : ours;
    if (!r.src.family) src.port = 0;
    if (!r.src.family && ib) std::memset(src.addr, 0, 16);  // cma_bind_addr's AF_IB wildcard
    id.reuseaddr = r.reuseaddr;
    id.afonly = r.afonly;
    if (int err = bind_to(id, src)) return err;
  }
  const bool loopback = ib ? is_zero(id.src.addr, 15) && id.src.addr[15] == 1 : id.src.addr[0] == 127;
  if (is_zero(id.src.addr, 16) || loopback) {  // wildcard or loopback: ours
    const uint16_t port = id.src.port;
    const uint32_t port_space = id.src.scope_id;
    id.src = ours;
    id.src.port = port;
    if (ib) id.src.scope_id = port_space;
  }
  id.remote = true;
  gid_of(id.dst, id.remote_gid);
  id.sgid_index = gid_index_for(id.src);
  fill_local(id, rep);
  if (!wire_.neighbour_known || wire_.neighbour_known(id.remote_gid, true)) {
    address_resolved(id, h);
    return 0;
  }
  const uint64_t now = wire_.now_ns();
  resolving_.push_back({h, now + kNeighbourCheckNs, now + kNeighbourSolicitNs, now + kNeighbourTimeoutNs});
  return 0;
}

void CmAgent::address_resolved(Id& id, uint64_t h) {
  id.state = State::kAddrResolved;
  abi::CmEventRecord ev{};
  ev.event = kAddrResolved;
  post(id, h, ev);
}

// Each pending address: its neighbour looked up every few milliseconds,
// asked for again every 200 ms, given up on after a second (EHOSTUNREACH,
// as the kernel's neighbour table fails an address).
bool CmAgent::poll_resolving(uint64_t now) {
  bool work = false;
  for (size_t i = 0; i < resolving_.size();) {
    Resolving& r = resolving_[i];
    auto it = ids_.find(r.handle);
    if (it == ids_.end() || it->second.state != State::kBound) {  // destroyed meanwhile
      resolving_.erase(resolving_.begin() + ptrdiff_t(i));
      continue;
    }
    if (r.next_check_ns > now) {
      ++i;
      continue;
    }
    work = true;
    const bool solicit = r.next_solicit_ns <= now;
    if (solicit) r.next_solicit_ns = now + kNeighbourSolicitNs;
    r.next_check_ns = now + kNeighbourCheckNs;
    if (wire_.neighbour_known(it->second.remote_gid, solicit && now < r.deadline_ns)) {
      address_resolved(it->second, r.handle);
    } else if (now >= r.deadline_ns) {
      post_simple(r.handle, kAddrError, -EHOSTUNREACH);
    } else {
      ++i;
      continue;
    }
    resolving_.erase(resolving_.begin() + ptrdiff_t(i));
  }
  return work;
}

// REQ (IBA 12.6.5), or SIDR REQ (12.11.1) for RDMA_PS_UDP, as cm_format_req
// and cma_connect_ib / cma_resolve_ib_udp fill them for RoCE.
int CmAgent::connect_remote(Id& id, uint64_t h, const abi::CmConnectRequest& r) {
  const bool ud = id.ps == kPsUdp;
  // (connect() checked the private data's length.)
  id.tid = uint64_t(tid_high_) << 32 | comm_id(h);
  mad::Mad m = new_mad(ud ? mad::Attr::kSidrReq : mad::Attr::kReq, id.tid);
  request_private(id, r.param, mad::at(m, ud ? mad::sidr_req::kPrivateData : mad::req::kPrivateData));
  // The port space's and the port (rdma_get_service_id; rdma_cm's port
  // spaces are the IBA's).
  const uint64_t sid = mad::service_id(id.ps, ntohs(id.dst.port));
  if (ud) {
    mad::set(m, mad::sidr_req::kRequestId, comm_id(h));
    mad::set(m, mad::sidr_req::kPartitionKey, mad::kGsiPkey);
    mad::set(m, mad::sidr_req::kServiceId, sid);
  } else {
    using namespace mad::req;
    mad::set(m, kLocalCommId, comm_id(h));
    mad::set(m, kServiceId, sid);
    mad::set(m, kLocalCaGuid, be64toh(info_.node_guid));
    const bool xrc = id.qp_type == IBV_QPT_XRC_SEND;
    mad::set(m, kLocalQpn, r.param.qp_num);
    mad::set(m, kInitiatorDepth, r.param.initiator_depth);
    mad::set(m, kRemoteCmResponseTimeout, wire_.cm_response_timeout);
    mad::set(m, kTransportServiceType, xrc ? kTransportExtended : id.qp_type == IBV_QPT_UC ? kTransportUc : kTransportRc);
    if (xrc) mad::set(m, kExtendedTransportType, kExtendedXrc);
    mad::set(m, kEndToEndFlowControl, r.param.flow_control ? 1 : 0);
    mad::set(m, kStartingPsn, r.param.psn);
    mad::set(m, kLocalCmResponseTimeout, wire_.cm_response_timeout);
    mad::set(m, kPartitionKey, mad::kGsiPkey);
    mad::set(m, kPathMtu, info_.port.active_mtu);
    mad::set(m, kMaxCmRetries, wire_.max_cm_retries);
    if (!xrc) {  // an XRC target neither responds to reads nor sends (cm_format_req)
      mad::set(m, kResponderResources, r.param.responder_resources);
      mad::set(m, kRetryCount, r.param.retry_count);
      mad::set(m, kRnrRetryCount, r.param.rnr_retry_count);
      mad::set(m, kSrq, r.param.srq ? 1 : 0);
    }
    // Routed RoCE: permissive LIDs, hop limit 64, not subnet-local
    // (cm_format_req's "work-around until there's a way to obtain remote LID").
    mad::set(m, kPrimaryLocalLid, 0xffff);
    mad::set(m, kPrimaryRemoteLid, 0xffff);
    std::memcpy(mad::at(m, kPrimaryLocalGid), info_.gids[id.sgid_index].gid, 16);
    std::memcpy(mad::at(m, kPrimaryRemoteGid), id.remote_gid, 16);
    // The flow label Linux's cma gives a RoCEv2 path (cma_resolve_iboe_route,
    // cma_get_roce_udp_flow_label): a hash of the two ports.
    mad::set(m, kPrimaryFlowLabel, mad::roce_flow_label(ntohs(id.src.port), ntohs(id.dst.port)));
    // Packet rate 0, "the port's current rate": the kernel's iboe_get_rate
    // gives it for a netdev of unknown speed (rxe on a tap or virtio-net, as
    // measured against it); a peer such as mlx5 would apply any other value
    // as the QP's static rate.
    mad::set(m, kPrimaryPacketRate, 0);
    mad::set(m, kPrimaryHopLimit, 64);
    mad::set(m, kPrimaryLocalAckTimeout, wire_.packet_life_time + 1);
  }
  id.state = State::kConnecting;
  send_tracked(h, id, m);
  return 0;
}

// REP (12.6.8), or SIDR REP (12.11.2) with the QP and Q_Key.
int CmAgent::accept_remote(Id& id, uint64_t h, const abi::CmConnectRequest& r) {
  if (id.ps == kPsUdp) {
    if (r.param.private_data_len > mad::sidr_rep::kPrivateData.len) return EINVAL;
    send_sidr_rep(id, mad::kSidrSuccess, r.param.qp_num, r.param.qkey, r.param.private_data,
                  r.param.private_data_len);
    id.state = State::kEstablished;  // the passive side keeps no connection (cma_sidr_rep_handler)
    return 0;
  }
  cancel(h);  // its MRA
  mad::Mad m = new_mad(mad::Attr::kRep, id.tid);
  using namespace mad::rep;
  mad::set(m, kLocalCommId, comm_id(h));
  mad::set(m, kRemoteCommId, id.remote_comm_id);
  mad::set(m, kStartingPsn, r.param.psn);
  mad::set(m, kResponderResources, r.param.responder_resources);
  mad::set(m, kRnrRetryCount, r.param.rnr_retry_count);
  mad::set(m, kTargetAckDelay, abi::kLocalCaAckDelay);  // cm_format_rep
  if (id.qp_type == IBV_QPT_XRC_RECV) {
    // An XRC target's QP number goes as the EE context's, with the SRQ bit
    // (cm_format_rep; cm_rep_get_qpn reads it there for an XRC initiator).
    mad::set(m, kLocalEecn, r.param.qp_num);
    mad::set(m, kSrq, 1);
  } else {
    mad::set(m, kLocalQpn, r.param.qp_num);
    mad::set(m, kInitiatorDepth, r.param.initiator_depth);
    mad::set(m, kEndToEndFlowControl, r.param.flow_control ? 1 : 0);
    mad::set(m, kSrq, r.param.srq ? 1 : 0);
  }
  mad::set(m, kLocalCaGuid, be64toh(info_.node_guid));
  std::memcpy(mad::at(m, kPrivateData), r.param.private_data, r.param.private_data_len);
  id.state = State::kRepSent;
  send_tracked(h, id, m);
  return 0;
}

// REJ of the REQ (passive, unanswered) or of the REP (active, its QP could
// not be connected); SIDR REP "rejected" for RDMA_PS_UDP.
int CmAgent::reject_remote(Id& id, uint64_t h, const abi::CmRejectRequest& r) {
  cancel(h);
  if (id.ps == kPsUdp) {
    if (id.state == State::kRequested)
      send_sidr_rep(id, mad::kSidrReject, 0, 0, r.private_data,
                    std::min<size_t>(r.private_data_len, mad::sidr_rep::kPrivateData.len));
  } else {
    const uint8_t msg = id.state == State::kRequested ? mad::kRejMsgReq : mad::kRejMsgRep;
    send_rej(id.remote_gid, id.sgid_index, id.tid, comm_id(h), id.remote_comm_id, msg, mad::kRejConsumerDefined,
             r.private_data, r.private_data_len);
  }
  id.state = id.child ? State::kDisconnected : State::kRouteResolved;
  return 0;
}

// RTU (12.6.9): the active side's QP is ready.
int CmAgent::establish_remote(Id& id, uint64_t h) {
  if (id.state == State::kRepReceived) cancel(h);  // its MRA
  mad::Mad m = new_mad(mad::Attr::kRtu, id.tid);
  mad::set(m, mad::rtu::kLocalCommId, comm_id(h));
  mad::set(m, mad::rtu::kRemoteCommId, id.remote_comm_id);
  send(id, m);
  id.state = State::kEstablished;
  return 0;
}

// DREQ (12.6.10); DISCONNECTED comes with the DREP, or when it never does.
int CmAgent::disconnect_remote(Id& id, uint64_t h) {
  if (id.state != State::kEstablished && id.state != State::kRepSent && id.state != State::kRepReceived)
    return EINVAL;
  cancel(h);
  mad::Mad m = new_mad(mad::Attr::kDreq, uint64_t(tid_high_) << 32 | comm_id(h));
  mad::set(m, mad::dreq::kLocalCommId, comm_id(h));
  mad::set(m, mad::dreq::kRemoteCommId, id.remote_comm_id);
  mad::set(m, mad::dreq::kRemoteQpn, id.remote_qpn);
  id.state = State::kDreqSent;
  send_tracked(h, id, m);
  return 0;
}

// The id goes (destroyed, or its process died): the peer learns it as from
// cm_destroy_id: a REQ sent is withdrawn with REJ "timeout", an unanswered
// or half-made connection is rejected, a connection up is ended by a DREQ
// that outlives the id (its retries keep going without it).
void CmAgent::abandon_remote(Id& id, uint64_t h) {
  const bool ud = id.ps == kPsUdp;
  switch (id.state) {
    case State::kConnecting:
      cancel(h);
      if (!ud) send_rej(id.remote_gid, id.sgid_index, id.tid, comm_id(h), 0, mad::kRejMsgReq, mad::kRejTimeout);
      break;
    case State::kRequested:
      if (ud) send_sidr_rep(id, mad::kSidrReject, 0, 0, nullptr, 0);
      else send_rej(id.remote_gid, id.sgid_index, id.tid, comm_id(h), id.remote_comm_id, mad::kRejMsgReq,
                    mad::kRejConsumerDefined);
      break;
    case State::kRepSent:
    case State::kRepReceived:
      cancel(h);
      send_rej(id.remote_gid, id.sgid_index, id.tid, comm_id(h), id.remote_comm_id,
               id.state == State::kRepSent ? mad::kRejMsgOther : mad::kRejMsgRep, mad::kRejConsumerDefined);
      break;
    case State::kEstablished:
      disconnect_remote(id, h);
      break;
    default:
      break;
  }
  std::erase_if(mra_due_, [h](const MraDue& d) { return d.handle == h; });
  for (Outstanding& o : outstanding_)
    if (o.handle == h) o.handle = 0;  // a DREQ goes on alone
}

// ---- sending ----

mad::Mad CmAgent::new_mad(mad::Attr attr, uint64_t tid) const {
  mad::Mad m{};
  m.hdr.base_version = mad::kBaseVersion;
  m.hdr.mgmt_class = mad::kMgmtClassCm;
  m.hdr.class_version = mad::kCmClassVersion;
  m.hdr.method = mad::kMethodSend;
  m.hdr.tid = tid;
  m.hdr.attr_id = uint16_t(attr);
  return m;
}

void CmAgent::send(const Id& id, const mad::Mad& m) {
  ++wire_counters_.mads_sent;
  wire_.send(id.remote_gid, id.sgid_index, m);
}

uint64_t CmAgent::retry_interval_ns() const {
  return 2 * mad::timeout_ns(wire_.packet_life_time) + mad::timeout_ns(wire_.cm_response_timeout);
}

void CmAgent::send_tracked(uint64_t h, const Id& id, const mad::Mad& m) {
  send(id, m);
  Outstanding o;
  o.handle = h;
  o.comm_id = comm_id(h);
  o.attr = mad::Attr(uint16_t(m.hdr.attr_id));
  o.mad = m;
  std::memcpy(o.dgid, id.remote_gid, 16);
  o.sgid_index = id.sgid_index;
  o.deadline_ns = wire_.now_ns() + retry_interval_ns();
  o.retries_left = wire_.max_cm_retries;
  outstanding_.push_back(o);
}

// Nothing more is sent for h unasked: its requests' retries and its MRAs.
void CmAgent::cancel(uint64_t h) {
  std::erase_if(outstanding_, [h](const Outstanding& o) { return o.handle == h; });
  std::erase_if(mra_due_, [h](const MraDue& d) { return d.handle == h; });
}

// An MRA (12.6.6): our application has not answered the peer's REQ (msg 0)
// or REP (msg 1) yet; the peer waits the service timeout more before it
// sends the message again or gives up (cm.c's ib_send_cm_mra, which
// rdma_cm's cma_req_handler and REP handling ask for).
void CmAgent::send_mra(uint64_t h, const Id& id, uint8_t msg) {
  mad::Mad m = new_mad(mad::Attr::kMra, id.tid);
  mad::set(m, mad::mra::kLocalCommId, comm_id(h));
  mad::set(m, mad::mra::kRemoteCommId, id.remote_comm_id);
  mad::set(m, mad::mra::kMessageMraed, msg);
  mad::set(m, mad::mra::kServiceTimeout, wire_.mra_service_timeout);
  ++wire_counters_.mras_sent;
  send(id, m);
}

bool CmAgent::awaits_answer(const Id& id, uint8_t msg) {
  return id.remote && id.ps != kPsUdp && id.state == (msg == mad::kMraMsgReq ? State::kRequested : State::kRepReceived);
}

// Half the time the peer waits for our answer: if the application has not
// given it by then, an MRA goes, well before the peer's retry.
void CmAgent::schedule_mra(uint64_t h, uint8_t msg, uint64_t peer_wait_ns) {
  mra_due_.push_back({h, wire_.now_ns() + peer_wait_ns / 2, msg});
}

// True if an MRA went (a MAD sent is work, as a retransmission is).
bool CmAgent::poll_mras(uint64_t now) {
  bool work = false;
  std::erase_if(mra_due_, [&](const MraDue& d) {
    if (d.due_ns > now) return false;
    auto it = ids_.find(d.handle);
    if (it != ids_.end() && awaits_answer(it->second, d.msg)) {
      send_mra(d.handle, it->second, d.msg);
      work = true;
    }
    return true;
  });
  return work;
}

void CmAgent::send_rej(const uint8_t* dgid, uint8_t sgid_index, uint64_t tid, uint32_t local_comm,
                       uint32_t remote_comm, uint8_t msg, uint16_t reason, const uint8_t* priv, size_t len) {
  mad::Mad m = new_mad(mad::Attr::kRej, tid);
  mad::set(m, mad::rej::kLocalCommId, local_comm);
  mad::set(m, mad::rej::kRemoteCommId, remote_comm);
  mad::set(m, mad::rej::kMessageRejected, msg);
  mad::set(m, mad::rej::kReason, reason);
  if (reason == mad::kRejTimeout) {  // the ARI of a timeout REJ is our CA GUID (12.6.7.2)
    mad::set(m, mad::rej::kRejectedInfoLength, 8);
    std::memcpy(mad::at(m, mad::rej::kAri), &info_.node_guid, 8);
  }
  if (priv && len) std::memcpy(mad::at(m, mad::rej::kPrivateData), priv, std::min<size_t>(len, mad::rej::kPrivateData.len));
  ++wire_counters_.mads_sent;
  wire_.send(dgid, sgid_index, m);
}

void CmAgent::send_sidr_status(const uint8_t* dgid, uint8_t sgid_index, uint64_t tid, uint32_t request_id,
                               uint64_t sid, uint8_t status) {
  mad::Mad m = new_mad(mad::Attr::kSidrRep, tid);
  mad::set(m, mad::sidr_rep::kRequestId, request_id);
  mad::set(m, mad::sidr_rep::kStatus, status);
  mad::set(m, mad::sidr_rep::kServiceId, sid);
  ++wire_counters_.mads_sent;
  wire_.send(dgid, sgid_index, m);
}

void CmAgent::send_sidr_rep(const Id& id, uint8_t status, uint32_t qpn, uint32_t qkey, const uint8_t* priv,
                            size_t len) {
  mad::Mad m = new_mad(mad::Attr::kSidrRep, id.tid);
  mad::set(m, mad::sidr_rep::kRequestId, id.remote_comm_id);
  mad::set(m, mad::sidr_rep::kStatus, status);
  mad::set(m, mad::sidr_rep::kQpn, qpn);
  mad::set(m, mad::sidr_rep::kServiceId, mad::service_id(mad::kPsUdp, ntohs(id.src.port)));
  mad::set(m, mad::sidr_rep::kQkey, qkey);
  if (priv && len) std::memcpy(mad::at(m, mad::sidr_rep::kPrivateData), priv, len);
  send(id, m);
}

// ---- timers ----

bool CmAgent::poll_timers(uint64_t now) {
  bool work = !resolving_.empty() && poll_resolving(now);
  if (!timewait_.empty()) poll_timewait(now);  // events written: nothing for the engine to spin for
  if (!mra_due_.empty()) work |= poll_mras(now);
  if (outstanding_.empty()) return work;
  std::vector<Outstanding> expired;
  for (Outstanding& o : outstanding_) {
    if (o.deadline_ns > now) continue;
    work = true;
    if (o.retries_left == 0) {
      expired.push_back(o);
      continue;
    }
    --o.retries_left;
    o.deadline_ns = now + retry_interval_ns();
    ++wire_counters_.mads_retransmitted;
    ++wire_counters_.mads_sent;
    wire_.send(o.dgid, o.sgid_index, o.mad);
  }
  if (expired.empty()) return work;
  std::erase_if(outstanding_, [now](const Outstanding& o) { return o.deadline_ns <= now && o.retries_left == 0; });
  for (const Outstanding& o : expired) give_up(o);
  return work;
}

uint64_t CmAgent::next_deadline_ns() const {
  uint64_t next = 0;
  for (const Outstanding& o : outstanding_)
    if (!next || o.deadline_ns < next) next = o.deadline_ns;
  for (const Resolving& r : resolving_)
    if (!next || r.next_check_ns < next) next = r.next_check_ns;
  for (const MraDue& d : mra_due_)
    if (!next || d.due_ns < next) next = d.due_ns;
  if (!timewait_.empty() && (!next || timewait_.front().due_ns < next)) next = timewait_.front().due_ns;
  return next;
}

// A request out of retries: cma.c reports a REQ's or a REP's as
// UNREACHABLE (-ETIMEDOUT), a DREQ's as DISCONNECTED.
void CmAgent::give_up(const Outstanding& o) {
  ++wire_counters_.timeouts;
  auto it = ids_.find(o.handle);
  if (!o.handle || it == ids_.end()) return;
  Id& id = it->second;
  switch (o.attr) {
    case mad::Attr::kReq:
    case mad::Attr::kSidrReq:
      id.state = State::kRouteResolved;
      post_simple(o.handle, kUnreachable, -ETIMEDOUT);
      break;
    case mad::Attr::kRep:
      id.state = State::kDisconnected;
      post_simple(o.handle, kUnreachable, -ETIMEDOUT);
      break;
    case mad::Attr::kDreq:
      id.state = State::kDisconnected;
      post_disconnected(o.handle);
      break;
    default:
      break;
  }
}

}  // namespace uroce::cm
