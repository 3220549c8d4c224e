// The Dynamically Connected transport (mlx5 mode; wire format and model:
// docs/mlx5-dc.md). A DCI is an RC requester and completer whose target
// changes between work requests: dci_take_target points it at the next
// WQE's once every earlier WQE has completed, as a ConnectX DCI serves one
// target at a time. A DCT is a dispatcher: each DCI it hears from gets a
// responder context, an RC responder (device/responder.cc, unchanged) whose
// receives come from the DCT's SRQ and whose completions name the DCT.
#include <algorithm>
#include <cerrno>
#include <cstring>

#include "device/device.h"

namespace uroce::device {

namespace {

// A target is a DCT (its GID, number and key) seen from one source GID;
// the rest of an address (traffic class, hop limit, flow label, UDP source
// port) is the connection's path, taken from its first WQE: UCX's dc_mlx5
// sends its flow-control grants with an AV of its own making (rlid 0xC000)
// to the DCT its other WQEs name.
bool same_target(const Qp& qp, const abi::SendWqe& w) {
  return qp.dc_has_target && qp.dest_qpn == (w.remote_qpn & kQpnMask) && qp.dc_key == w.dc_key &&
         std::memcmp(qp.av.dgid, w.av.dgid, 16) == 0 && qp.av.sgid_index == w.av.sgid_index;
}

// A context starts (or starts again) a connection from its DCI: the
// DCI's epoch, the connection's number and first PSN.
void start_connection(Qp& ctx, uint32_t epoch, uint8_t number, uint32_t connect_psn) {
  ctx.state = IBV_QPS_RTR;
  ctx.dc_epoch = epoch;
  ctx.dc_number = number;
  ctx.dc_connect_psn = connect_psn;
  ctx.resp_epsn = connect_psn;
  ctx.resp_msn = 0;
  ctx.resp_in_msg = ctx.resp_recv_valid = ctx.resp_nak_sent = ctx.resp_msg_dropped = false;
  ctx.resp_fatal_pending = ctx.resp_ack_pending = false;
  ctx.responses.clear();
  ctx.atomic_replay = {};
  ctx.atomic_replay_next = 0;
}

}  // namespace

bool Device::dci_take_target(Qp& qp, const abi::SendWqe& w, SendWqeState& st) {
  // A failed stream's work requests complete flushed until it is reset.
  if (qp.dci_failed_streams && !st.started && dci_stream_is_failed(qp, w)) [[unlikely]] {
    st.status = IBV_WC_WR_FLUSH_ERR;
    return true;
  }
  if (same_target(qp, w)) return true;
  if (qp.sq_head != qp.sq_next) return false;  // the old target's WQEs complete first
  // RoCE: the address carries a GRH and names a source GID of this port.
  if (!w.av.is_global || w.av.sgid_index >= kGidTableLen || !info_.gids[w.av.sgid_index].valid) {
    st.status = IBV_WC_LOC_QP_OP_ERR;  // no target (ibv_post_send has no field for one)
    return true;
  }
  qp.av = w.av;
  qp.av.port_num = qp.port;
  qp.dest_qpn = w.remote_qpn & kQpnMask;
  qp.dc_key = w.dc_key;
  qp.dc_has_target = true;
  ++qp.dc_number;
  qp.dc_connect_psn = qp.req_psn;
  qp.path.generation = 0;  // frames built for the new path
  qp.peer_heard = false;   // first contact again (kFirstContactGraceNs)
  qp.first_tx_ns = 0;
  ++counters_.dc_reconnects;
  return true;
}

// DCI streams (mlx5dv_create_qp(3), MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS):
// a work request that failed before it left fails its stream; the stream's
// later work requests complete flushed until mlx5dv_dci_stream_id_reset.
// mlx5 moves the DCI itself to the error state once as many streams have
// failed as it was made to tolerate (log_num_errored): rdma-core's
// tests/test_mlx5_dc.py (test_dc_send_stream_bad_flow_qp) counts that many
// errors, then finds the DCI in ERR. Errors the completer finds (a NAK, a
// retry count spent) fail the DCI, as they do an RC QP.
bool Device::dci_stream_failed(Qp& qp, const abi::SendWqe& w) {
  const uint32_t bit = 1u << (w.dci_stream & ((1u << qp.dci_log_streams) - 1));
  if (qp.dci_failed_streams & bit) return true;  // flushed: its stream failed already
  qp.dci_failed_streams |= bit;
  return ++qp.dci_failed_count < (1u << qp.dci_log_errored);
}

bool Device::dci_stream_is_failed(const Qp& qp, const abi::SendWqe& w) const {
  return qp.dci_failed_streams & (1u << (w.dci_stream & ((1u << qp.dci_log_streams) - 1)));
}

int Device::reset_dci_stream(Owner* o, uint32_t qpn, uint16_t stream) {
  Qp* qp = this->qp(qpn);
  if (!qp || qp->owner != o || qp->dc != DcRole::kInitiator || !qp->dci_streams) return EINVAL;
  if (qp->state != IBV_QPS_RTS) return EINVAL;
  const uint32_t bit = 1u << (stream & ((1u << qp->dci_log_streams) - 1));
  if (!(qp->dci_failed_streams & bit)) return EINVAL;  // the firmware's bad parameter
  qp->dci_failed_streams &= ~bit;
  --qp->dci_failed_count;
  return 0;
}

void Device::dc_write_eth(const Qp& qp, net::Packet& p) {
  auto* e = p.hdr<net::DcEth>(net::kDcEthOffset);
  e->dc_key = qp.dc_key;
  // Connected once the target acknowledged a PSN of this connection: the
  // completer has moved past its first (no test on RC's receive path).
  const bool connected = psn_diff(qp.comp_psn, qp.dc_connect_psn) > 0;
  e->flags_dci = (connected ? 0 : net::DcEth::kConnect) | qp.qpn;
  e->connection = uint32_t(qp.dc_number) << 24 | qp.dc_connect_psn;
  e->dci_epoch = qp.dc_epoch;
}

// A DCI out of RESET is a new incarnation: contexts at its targets that
// served the old one start again at its first connect (device/dc.cc
// dc_receive), whatever its numbers and PSNs.
void Device::dci_new_epoch(Qp& qp) {
  qp.dc_has_target = false;
  qp.dc_number = 0;
  qp.dci_failed_streams = 0;
  qp.dci_failed_count = 0;
  qp.dc_epoch = uint32_t(++dc_epochs_ * 0x9e3779b9u) ^ uint32_t(now_ns_) ^ qp.qpn;
}

void Device::dc_receive(Qp& q, net::Packet& p) {
  if (q.dc != DcRole::kTarget) {  // a DC request to a QP that is no DCT
    ++counters_.rx_bad_transport;
    return;
  }
  if (q.state != IBV_QPS_RTR && q.state != IBV_QPS_RTS) {
    ++counters_.rx_bad_state;
    return;
  }
  const auto* e = p.hdr<net::DcEth>(net::kDcEthOffset);
  if (uint64_t(e->dc_key) != q.dc_key) {
    // Dropped unanswered: the DCI retries and ends in IBV_WC_RETRY_EXC_ERR.
    ++counters_.dc_bad_key;
    return;
  }
  const uint32_t flags_dci = e->flags_dci, connection = e->connection, epoch = e->dci_epoch;
  const uint32_t dci = flags_dci & kQpnMask, connect_psn = connection & 0xffffff;
  const uint8_t number = uint8_t(connection >> 24);
  const bool connect = flags_dci & net::DcEth::kConnect;
  const DcSource source{net::roce_src_gid(p), dci};
  auto found = q.dc_contexts.find(source);
  Qp* ctx = found == q.dc_contexts.end() ? nullptr : found->second.get();
  // Which connection the packet belongs to, against the context's: the same
  // (go on as RC), a later one of the same DCI or the DCI anew (start it:
  // only a connect packet may), or an earlier one (a late duplicate: drop).
  int8_t later = !ctx || ctx->state != IBV_QPS_RTR || ctx->dc_epoch != epoch
                           ? int8_t(1)
                           : int8_t(uint8_t(number - ctx->dc_number));
  if (later < 0) {
    ++counters_.dc_stale;
    return;
  }
  // A context let go while its connection was in use: made again where it
  // stood, so that what it executed is not executed twice.
  if (!ctx) {
    const auto kept = q.dc_tombstones.find(source);
    if (kept != q.dc_tombstones.end() && kept->second.epoch == epoch &&
        int8_t(uint8_t(number - kept->second.number)) < 0) {
      ++counters_.dc_stale;  // of a connection before the one the DCT let go
      return;
    }
    if ((ctx = restore_dc_context(q, p, source, epoch, number))) later = 0;
  }
  if (later > 0) {
    if (!connect) {  // its context is gone: the DCI's retry comes with connect again
      ++counters_.dc_no_context;
      return;
    }
    if (!ctx) ctx = new_dc_context(q, p, source);
    if (!ctx) return;
    q.dc_tombstones.erase(source);  // a new connection: what was kept of an old one is stale
    start_connection(*ctx, epoch, number, connect_psn);
  }
  ctx->dc_last_used = ++q.dc_clock;
  ++ctx->rx_packets;
  // The context is an RC responder: the request goes on as the RC request
  // it carries, the BTH moved up over the DCETH.
  std::memmove(p.data + p.bth_off + sizeof(net::DcEth), p.data + p.bth_off, sizeof(net::Bth));
  p.bth_off = uint16_t(p.bth_off + sizeof(net::DcEth));
  p.opcode = uint8_t(p.opcode & 0x1f);
  p.bth()->opcode = p.opcode;
  responder_receive(*this, *ctx, p);
}

// A context for a DCI not heard from yet: the DCT's attributes, the DCI as
// the destination of its responses. When the DCT has as many as it may
// keep, the least recently used one with nothing in flight goes first.
Qp* Device::new_dc_context(Qp& dct, const net::Packet& p, const DcSource& source) {
  const size_t limit = std::max<size_t>(config_.max_dc_contexts, 1);
  if (dct.dc_contexts.size() >= limit) {
    const DcSource* victim = nullptr;
    uint64_t oldest = 0;
    for (const auto& [key, c] : dct.dc_contexts)
      if (!c->resp_in_msg && c->responses.empty() && (!victim || c->dc_last_used < oldest)) {
        victim = &key;
        oldest = c->dc_last_used;
      }
    if (!victim) {
      ++counters_.dc_no_context;
      return nullptr;
    }
    ++counters_.dc_contexts_evicted;
    // Kept: where its connection stood. Its DCI may still be using it (more
    // DCIs at once than the DCT keeps contexts for), and an ACK of what it
    // executed may have been lost. The tombstones are bounded too: the
    // oldest goes first.
    const Qp& c = *dct.dc_contexts.at(*victim);
    if (c.state == IBV_QPS_RTR) {
      if (dct.dc_tombstones.size() >= limit) {
        auto drop = dct.dc_tombstones.begin();
        for (auto it = dct.dc_tombstones.begin(); it != dct.dc_tombstones.end(); ++it)
          if (it->second.stamp < drop->second.stamp) drop = it;
        dct.dc_tombstones.erase(drop);
      }
      dct.dc_tombstones[*victim] = DcTombstone{c.dc_epoch, c.dc_number, c.dc_connect_psn, c.resp_epsn, c.resp_msn,
                                               ++dct.dc_clock, c.atomic_replay, c.atomic_replay_next};
    }
    release_dc_context(dct, *victim);
  }
  auto ctx = std::make_unique<Qp>();
  Qp& c = *ctx;
  c.owner = dct.owner;
  c.cookie = dct.cookie;
  c.qpn = dct.qpn;  // its completions name the DCT
  c.type = IBV_QPT_RC;
  c.dc = DcRole::kTargetContext;
  c.pd = dct.pd, c.send_cq = dct.send_cq, c.recv_cq = dct.recv_cq, c.srq = dct.srq;
  c.access = dct.access;
  c.path_mtu = dct.path_mtu;
  c.port = dct.port;
  c.min_rnr_timer = dct.min_rnr_timer;
  c.max_dest_rd_atomic = kMaxQpRdAtomic;  // a DCT has no such attribute: the device's most
  c.pkey_index = dct.pkey_index;
  c.dest_qpn = source.dci;
  c.av = dct.av;  // hop limit, traffic class, port
  std::memcpy(c.av.dgid, source.gid.data(), 16);
  c.av.is_global = 1;
  c.av.flow_label = 0;
  c.av.udp_sport = 0;
  // Answers leave from the address the request came to.
  const net::Ipv6Addr dst = net::roce_dst_gid(p);
  for (uint8_t i = 0; i < kGidTableLen; ++i)
    if (info_.gids[i].valid && std::memcmp(info_.gids[i].gid, dst.data(), 16) == 0) {
      c.av.sgid_index = i;
      break;
    }
  dct.dc_contexts.emplace(source, std::move(ctx));
  set_polled(c, true);  // responder_run sends its answers
  ++counters_.dc_contexts_created;
  return &c;
}

// The context of a connection the DCT let go, made again from what it kept
// (new_dc_context), if the request is of that same connection (epoch and
// number); nullptr otherwise.
Qp* Device::restore_dc_context(Qp& dct, const net::Packet& p, const DcSource& source, uint32_t epoch,
                               uint8_t number) {
  auto it = dct.dc_tombstones.find(source);
  if (it == dct.dc_tombstones.end() || it->second.epoch != epoch || it->second.number != number) return nullptr;
  const DcTombstone t = it->second;
  dct.dc_tombstones.erase(it);  // before new_dc_context, which may let another go
  Qp* ctx = new_dc_context(dct, p, source);
  if (!ctx) return nullptr;
  start_connection(*ctx, t.epoch, t.number, t.connect_psn);
  ctx->resp_epsn = t.epsn;
  ctx->resp_msn = t.msn;
  ctx->atomic_replay = t.atomic_replay;
  ctx->atomic_replay_next = t.atomic_replay_next;
  ++counters_.dc_contexts_restored;
  return ctx;
}

void Device::release_dc_context(Qp& dct, const DcSource& source) {
  auto it = dct.dc_contexts.find(source);
  if (it == dct.dc_contexts.end()) return;
  set_polled(*it->second, false);
  dct.dc_contexts.erase(it);
}

void Device::release_dc_contexts(Qp& dct) {
  for (const auto& [key, c] : dct.dc_contexts) set_polled(*c, false);
  dct.dc_contexts.clear();
  dct.dc_tombstones.clear();
}

int Device::make_dc(Owner* o, uint32_t qpn, const abi::Mlx5QpDcRequest& req) {
  Qp* qp = this->qp(qpn);
  if (!qp || qp->owner != o) return EINVAL;
  if (!config_.mlx5) return EOPNOTSUPP;
  if (qp->type != IBV_QPT_RC || qp->state != IBV_QPS_RESET || qp->dc != DcRole::kNone || qp->mlx5)
    return EINVAL;
  const uint32_t dc_type = req.dc_type;
  if (dc_type == abi::kDcInitiator) {
    if (req.dci_streams > 1 || req.log_streams > abi::kDciMaxLogStreams ||
        req.log_errored > abi::kDciMaxLogErrored || (!req.dci_streams && (req.log_streams || req.log_errored)))
      return EINVAL;
    qp->dc = DcRole::kInitiator;
    qp->transport = net::Transport::kDc;  // its requests; its responses come as RC's
    qp->dci_streams = req.dci_streams;
    qp->dci_log_streams = req.log_streams;
    qp->dci_log_errored = req.log_errored;
    return 0;
  }
  const uint64_t access_key = req.access_key;
  if (req.dci_streams || req.log_streams || req.log_errored) return EINVAL;
  if (dc_type != abi::kDcTarget || !qp->srq) return EINVAL;  // a DCT receives through its SRQ
  qp->dc = DcRole::kTarget;
  qp->transport = net::Transport::kDc;  // RC's requests to it fail the responder's transport check
  qp->dc_key = access_key;
  return 0;
}

}  // namespace uroce::device
