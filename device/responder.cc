// Responder: executes incoming requests against receive WQEs and registered
// memory, and answers with ACKs, NAKs, READ responses and atomic ACKs
// (IBA 9.7.4, 9.7.5). UD and UC share the receive path without the replies.
#include <algorithm>
#include <cstring>

#include "device/device.h"
#include "device/responder.h"
#include "device/wqe.h"
#include "net/opcode.h"

namespace uroce::device {

namespace {

using net::OpcodeInfo;

uint8_t response_opcode(const Qp& qp, uint8_t code) { return net::make_opcode(transport_of(qp), code); }
uint8_t ack_opcode(const Qp& qp) { return response_opcode(qp, net::op::kAck); }

uint32_t aeth_word(uint32_t msn, uint8_t syndrome) { return (uint32_t(syndrome) << 24) | (msn & 0xffffff); }
uint32_t aeth_word(const Qp& qp, uint8_t syndrome) { return aeth_word(qp.resp_msn, syndrome); }

// msn: the MSN as of psn (an ACK that waited in the queue carries the MSN of
// its own PSN, not of requests answered since).
void emit_aeth(Device& dev, Qp& qp, uint8_t opcode, uint32_t psn, uint8_t syndrome, uint32_t msn) {
  net::Packet* p = dev.new_packet(qp, opcode, psn, false);
  if (!p) [[unlikely]] return;  // no buffer (counted): lost as on the wire; the requester retries
  p->hdr<net::Aeth>(p->info().aeth_off)->syndrome_msn = aeth_word(msn, syndrome);
  if ((opcode & 0x1f) == net::op::kAck) ++dev.counters_mut().tx_acks;
  dev.send_packet(qp, p);
}

void emit_atomic_ack(Device& dev, Qp& qp, uint32_t psn, uint64_t orig) {
  net::Packet* a =
      dev.new_packet(qp, response_opcode(qp, net::op::kAtomicAck), psn, false);
  if (!a) [[unlikely]] return;  // as a lost ACK: the requester retries (answered from cache)
  a->hdr<net::Aeth>(a->info().aeth_off)->syndrome_msn =
      aeth_word(qp, net::aeth::kAck | net::aeth::kCreditInvalid);
  a->hdr<net::AtomicAckEth>(a->info().atomicack_off)->orig = orig;
  dev.send_packet(qp, a);
}

constexpr uint8_t kPositiveAck = net::aeth::kAck | net::aeth::kCreditInvalid;

// An ACK covers the one before it: a positive ACK for psn replaces one that
// waits at the end of the queue. False if none waits there.
[[gnu::always_inline]] inline bool merged_into_queued_ack(Qp& qp, uint32_t psn) {
  if (qp.responses.empty()) return false;
  Response& last = qp.responses.back();
  if (last.kind != Response::Kind::kAeth || last.syndrome != kPositiveAck || last.fatal) return false;
  last.psn = psn;
  last.msn = qp.resp_msn;
  return true;
}

// NAKs go out now unless answers are still queued: then they wait their
// turn, as responses leave in PSN order. A positive ACK always waits in the
// queue for responder_run, later in the same Device::poll (receive first,
// then the responders): the ACKs for a burst of requests received together
// coalesce into one (IBA 9.7.5.1.2, C9-105), as a NIC's do, and whatever
// answers follow in the burst queue behind it.
void send_aeth(Device& dev, Qp& qp, uint32_t psn, uint8_t syndrome, bool fatal = false) {
  const bool positive = syndrome == kPositiveAck && !fatal;
  if (qp.responses.empty() && !positive) {
    emit_aeth(dev, qp, ack_opcode(qp), psn, syndrome, qp.resp_msn);
    if (fatal) dev.qp_to_error(qp);
    return;
  }
  if (positive && merged_into_queued_ack(qp, psn)) return;
  if (qp.responses.full()) [[unlikely]] {
    ++dev.counters_mut().response_queue_full;
    if (!fatal) return;  // lost as on the wire: the requester's timer asks again
    qp.responses.clear();  // the QP ends here: its queued answers would be dropped anyway
    emit_aeth(dev, qp, ack_opcode(qp), psn, syndrome, qp.resp_msn);
    dev.qp_to_error(qp);
    return;
  }
  Response r;
  r.kind = Response::Kind::kAeth;
  r.psn = psn;
  r.msn = qp.resp_msn;
  r.syndrome = syndrome;
  r.fatal = fatal;
  qp.responses.push_back(r);
  if (fatal) qp.resp_fatal_pending = true;
}

// Inline: every request that asks for an ACK comes here, and nearly always
// the ACK queued for the request before it takes its PSN (send_aeth).
[[gnu::always_inline]] inline void send_ack(Device& dev, Qp& qp, uint32_t psn) {
  if (!merged_into_queued_ack(qp, psn)) send_aeth(dev, qp, psn, kPositiveAck);
}

}  // namespace

// A NAK that ends the connection: the responder QP goes to error too (class C).
// When no receive completion reports the error, the responder's owner learns
// of it through an affiliated async event (IBA C9-222.1.1; mlx5 and rxe too).
void nak_and_fail(Device& dev, Qp& qp, uint32_t psn, uint8_t syndrome, bool raise_event) {
  ++dev.counters_mut().nak_sent;
  if (raise_event) {
    const ibv_event_type ev = syndrome == net::aeth::kNakRemoteAccessError ? IBV_EVENT_QP_ACCESS_ERR
                              : syndrome == net::aeth::kNakInvalidRequest  ? IBV_EVENT_QP_REQ_ERR
                                                                           : IBV_EVENT_QP_FATAL;
    dev.post_qp_event(qp, ev);
  }
  send_aeth(dev, qp, psn, syndrome, true);
}

namespace {

void send_rnr_nak(Device& dev, Qp& qp, uint32_t psn) {
  // Receiver not ready (IBA 9.7.5.2.8): the requester retries after the timer.
  // The packets behind this one (the rest of its message) are now out of
  // sequence; this NAK is the one NAK of that gap (C9-112, rxe's
  // sent_psn_nak), so they draw no PSN sequence error NAK, which the
  // requester would count against retry_cnt at every RNR round.
  ++dev.counters_mut().rnr_nak_sent;
  qp.resp_nak_sent = true;
  send_aeth(dev, qp, psn, net::aeth::kRnrNak | (qp.min_rnr_timer & 0x1f));
}

// READs and atomics holding a responder resource (C9-149): answers to
// duplicates hold none, the requester counted their requests once.
size_t pending_rd_atomic(const Qp& qp) {
  size_t n = 0;
  for (uint32_t i = 0; i < qp.responses.size(); ++i)
    n += qp.responses[i].kind != Response::Kind::kAeth && !qp.responses[i].replay;
  return n;
}

// Queues a response in PSN order (IBA 9.7.5.1.1): an answer to a duplicate
// goes before the queued answers to later requests, as the requester, gone
// back to the duplicate's PSN, waits for it first.
void enqueue_in_psn_order(Device& dev, Qp& qp, const Response& r) {
  if (qp.responses.full()) [[unlikely]] {
    ++dev.counters_mut().response_queue_full;  // as a lost answer: asked again
    return;
  }
  uint32_t pos = 0;
  while (pos < qp.responses.size() && psn_diff(qp.responses[pos].psn, r.psn) <= 0) ++pos;
  qp.responses.insert(pos, r);
}

// Duplicates may be queued while the queue holds fewer than this; more are
// dropped (class D, the requester's timer asks again), so a flood of them
// cannot fill it: the READs and atomics C9-149 allows and the NAKs behind
// them always find room.
constexpr size_t kMaxQueuedResponses = ResponseQueue::kCapacity - kMaxQpRdAtomic - 8;
static_assert(kMaxQueuedResponses >= 2 * kMaxQpRdAtomic);

// The PD that memory keys of this request are checked against: the QP's, or
// for an XRC target the named SRQ's (0 when the SRQ is invalid: every check fails).
uint32_t request_pd(Device& dev, const Qp& qp, const net::Packet& p) {
  if (qp.type != IBV_QPT_XRC_RECV) return qp.pd;
  const Srq* srq = xrc_target_srq(dev, qp, p);
  return srq ? srq->pd : 0;
}

// ---- UD ----------------------------------------------------------------

void receive_ud(Device& dev, Qp& qp, net::Packet& p) {
  const OpcodeInfo& info = p.info();
  const auto* deth = p.hdr<net::Deth>(info.deth_off);
  if (uint32_t(deth->qkey) != qp.qkey) {  // IBA 10.2.5 Q_Key violation: silently dropped
    ++dev.counters_mut().rx_bad_qkey;
    return;
  }
  uint32_t status;
  if (!take_recv_wqe(dev, qp, p, &status)) {
    ++dev.counters_mut().rx_ud_no_recv;
    return;
  }
  if (status == kRecvQueueBroken) {
    dev.post_qp_event(qp, IBV_EVENT_QP_FATAL);
    dev.qp_to_error(qp);
    return;
  }
  if (status != IBV_WC_SUCCESS) {
    complete_recv(dev, qp, status, IBV_WC_RECV, 0, nullptr, false);
    return;
  }
  // The first 40 bytes receive the GRH: over IPv6 the IPv6 header, over IPv4
  // 20 zero bytes then the IPv4 header (as rxe and mlx5 place it).
  uint8_t grh[40];
  net::roce_grh(p, grh);
  const uint32_t total = 40 + p.payload_len;
  if (total > recv_capacity(qp.resp_recv)) {
    const uint32_t st = overflow_status(qp.resp_recv, total);
    if (st == IBV_WC_LOC_LEN_ERR) ++dev.counters_mut().rx_ud_too_long;
    complete_recv(dev, qp, st, IBV_WC_RECV, 0, nullptr, false);
    return;
  }
  const RecvInProgress& r = qp.resp_recv;
  bool ok = scatter_sges(dev, *r.owner, r.sge.data(), r.num_sge, 0, grh, 40) &&
            (p.payload_len == 0 ||
             scatter_sges(dev, *r.owner, r.sge.data(), r.num_sge, 40, p.payload(), p.payload_len));
  if (!ok) {
    dev.memory_fault("UD receive", r.owner, r.sge[0].addr, p.payload_len);
    complete_recv(dev, qp, IBV_WC_LOC_PROT_ERR, IBV_WC_RECV, 0, nullptr, false);
    return;
  }
  complete_recv(dev, qp, IBV_WC_SUCCESS, IBV_WC_RECV, total, &p, p.bth()->solicited());
}

// The R_Key check of a WRITE or READ (IBA 9.7.5.1.3, C9-88): a region's or a
// window's (*key: the region's; *at: the owner's address of va), or, in
// mlx5 mode, an indirect mkey's (*key: the mkey; *at: va, an offset into its
// zero-based layout, device/mkey.cc).
bool check_remote(Device& dev, const Qp& qp, const net::Packet& p, uint32_t rkey, uint64_t va, uint64_t len,
                  uint32_t access, uint32_t* key, uint64_t* at) {
  if (is_mkey_key(rkey)) [[unlikely]] {
    uint64_t left;
    if (dev.check_mkey(rkey, request_pd(dev, qp, p), va, len, access, &left) != Device::MrCheck::kOk) return false;
    *key = rkey;
    *at = va;
    return true;
  }
  const Mr* mr;
  if (dev.check_rkey(rkey, request_pd(dev, qp, p), qp.qpn, va, len, access, &mr, at) != Device::MrCheck::kOk)
    return false;
  *key = mr->key;
  return true;
}

// ---- RC duplicates (IBA 9.7.5.1.x) ---------------------------------------

// A READ asked again from `psn` (the requester lost some of its responses,
// or the network duplicated the request): executed again from the RETH it
// carries, which may start inside the original READ (IBA 9.7.5.1.3; rxe's
// duplicate_request). If the answer to that READ is still queued, it is
// restarted there instead of queued twice.
void answer_duplicate_read(Device& dev, Qp& qp, net::Packet& p) {
  const auto* reth = p.hdr<net::Reth>(p.info().reth_off);
  const uint32_t psn = p.bth()->psn();
  const uint32_t mtu = qp.mtu_bytes();
  const uint32_t end = psn_add(psn, std::max<uint32_t>(1, (reth->dma_len + mtu - 1) / mtu));
  uint64_t va = 0;
  uint32_t key = 0;
  if (reth->dma_len && !check_remote(dev, qp, p, reth->rkey, reth->va, reth->dma_len, IBV_ACCESS_REMOTE_READ, &key, &va))
    return;  // class D: silently dropped
  const uint32_t pd = request_pd(dev, qp, p);
  for (uint32_t i = 0; i < qp.responses.size(); ++i) {
    Response& q = qp.responses[i];
    if (q.kind != Response::Kind::kRead || q.end_psn != end) continue;
    // The same READ, still being answered: nothing to add if the PSNs asked
    // for are still to go, else it starts again from `psn`.
    if (psn_diff(psn, q.psn) >= 0) return;
    q.first = true;
    q.psn = psn;
    q.remaining = reth->dma_len;
    q.mr_key = key;
    q.mr_pd = pd;
    q.va = va;
    // Keep the queue in PSN order: it may now belong before its neighbour.
    Response moved = q;
    qp.responses.erase(i);
    enqueue_in_psn_order(dev, qp, moved);
    return;
  }
  if (qp.responses.size() >= kMaxQueuedResponses) return;
  Response r;
  r.kind = Response::Kind::kRead;
  r.replay = true;
  r.psn = psn;
  r.end_psn = end;
  r.remaining = reth->dma_len;
  r.mr_key = key;
  r.mr_pd = pd;
  r.va = va;
  enqueue_in_psn_order(dev, qp, r);
}

// ATOMIC WRITE's answer, also to a duplicate of one: an RDMA READ response
// ONLY of no data (IBA 1.5 annex A19; rxe's send_read_response_ack), in PSN
// order behind the responses still queued.
void answer_atomic_write(Device& dev, Qp& qp, uint32_t psn, bool replay) {
  if (qp.responses.empty())
    return emit_aeth(dev, qp, response_opcode(qp, net::op::kReadRespOnly), psn,
                     net::aeth::kAck | net::aeth::kCreditInvalid, qp.resp_msn);
  Response r;  // a READ of no bytes: responder_run sends it as this answer
  r.replay = replay;
  r.psn = psn;
  r.end_psn = psn_add(psn, 1);
  enqueue_in_psn_order(dev, qp, r);
}

void answer_duplicate(Device& dev, Qp& qp, net::Packet& p) {
  ++dev.counters_mut().rx_duplicate;
  const OpcodeInfo& info = p.info();
  const uint32_t psn = p.bth()->psn();
  if (info.has(net::kRead)) return answer_duplicate_read(dev, qp, p);
  if (info.has(net::kAtomicStore)) {
    // Executed once, answered again (rxe replays its resource): its answer
    // was lost. Not twice while the first is still queued.
    for (uint32_t i = 0; i < qp.responses.size(); ++i) {
      const Response& q = qp.responses[i];
      if (q.kind == Response::Kind::kRead && q.psn == psn && q.end_psn == psn_add(psn, 1) && !q.remaining)
        return;
    }
    if (qp.responses.size() >= kMaxQueuedResponses) return;
    return answer_atomic_write(dev, qp, psn, true);
  }
  if (info.has(net::kAtomic)) {
    // Never execute an atomic twice: answer from the replay cache (IBA
    // 9.7.5.1.4). Not in it: too old to be outstanding, dropped.
    for (const AtomicReplay& r : qp.atomic_replay) {
      if (!r.valid || r.psn != psn) continue;
      if (qp.responses.empty()) return emit_atomic_ack(dev, qp, psn, r.orig);
      for (uint32_t i = 0; i < qp.responses.size(); ++i)
        if (qp.responses[i].kind == Response::Kind::kAtomicAck && qp.responses[i].psn == psn)
          return;  // still queued
      if (qp.responses.size() >= kMaxQueuedResponses) return;
      Response resp;
      resp.kind = Response::Kind::kAtomicAck;
      resp.replay = true;
      resp.psn = psn;
      resp.orig = r.orig;
      enqueue_in_psn_order(dev, qp, resp);
      return;
    }
    return;
  }
  // SEND/WRITE: acknowledge up to what we have (coalesced ACK, C9-105).
  send_ack(dev, qp, psn_add(qp.resp_epsn, 0xffffff));
}

// ---- RC/UC requests --------------------------------------------------------

bool check_sequence(Device& dev, Qp& qp, const net::Packet& p) {
  const OpcodeInfo& info = p.info();
  const bool is_send = info.has(net::kSend);
  if (qp.resp_in_msg) {
    const net::OpcodeInfo& prev = net::opcode_info(uint8_t(qp.resp_last_opcode));
    return (info.flags & (net::kMiddle | net::kLast)) && !(info.flags & net::kFirst) &&
           is_send == prev.has(net::kSend) && info.has(net::kWrite) == prev.has(net::kWrite);
  }
  return info.has(net::kFirst);
}

void execute_request(Device& dev, Qp& qp, net::Packet& p);

void receive_connected(Device& dev, Qp& qp, net::Packet& p) {
  const uint32_t psn = p.bth()->psn();
  const int32_t d = psn_diff(psn, qp.resp_epsn);
  if (is_reliable(qp)) {
    if (d < 0) return answer_duplicate(dev, qp, p);
    if (d > 0) {
      // Gap: one NAK per sequence error, then silence until the gap closes (C9-112).
      ++dev.counters_mut().rx_out_of_seq;
      if (!qp.resp_nak_sent) {
        qp.resp_nak_sent = true;
        ++dev.counters_mut().nak_sent;
        send_aeth(dev, qp, qp.resp_epsn, net::aeth::kNakPsnSeqError);
      }
      return;
    }
    qp.resp_nak_sent = false;
  } else if (d != 0) {
    // UC: lost packets end the message in progress (IBA 9.8.3.2); resync on
    // the next FIRST or ONLY.
    qp.resp_in_msg = false;
    qp.resp_msg_dropped = false;
    qp.resp_offset = 0;
    qp.resp_epsn = psn;
  }
  if (qp.type == IBV_QPT_UC && qp.resp_msg_dropped) {
    qp.resp_epsn = psn_add(psn, 1);
    if (p.info().has(net::kLast)) qp.resp_msg_dropped = false;
    return;
  }
  if (!check_sequence(dev, qp, p)) {
    if (is_reliable(qp)) return nak_and_fail(dev, qp, psn, net::aeth::kNakInvalidRequest);
    qp.resp_in_msg = false;
    qp.resp_offset = 0;
    qp.resp_epsn = psn_add(psn, 1);
    qp.resp_msg_dropped = !p.info().has(net::kLast);
    return;
  }
  execute_request(dev, qp, p);
}

}  // namespace

// Holds a receive WQE for the message `p` starts, or handles why there is
// none: RNR NAK (RC), a dropped message (UC), or an error. True if one is held.
bool acquire_recv_wqe(Device& dev, Qp& qp, const net::Packet& p, uint32_t wc_opcode) {
  const uint32_t psn = p.bth()->psn();
  uint32_t status;
  if (!take_recv_wqe(dev, qp, p, &status)) {
    if (is_reliable(qp)) {
      send_rnr_nak(dev, qp, psn);
    } else {
      ++dev.counters_mut().rx_ud_no_recv;
      qp.resp_epsn = psn_add(psn, 1);
      qp.resp_in_msg = false;
      qp.resp_msg_dropped = !p.info().has(net::kLast);
    }
    return false;
  }
  if (status == IBV_WC_REM_INV_REQ_ERR) {  // XRC: no such SRQ in this domain
    nak_and_fail(dev, qp, psn, net::aeth::kNakInvalidRequest);
    return false;
  }
  if (status == kRecvQueueBroken) {
    if (is_reliable(qp)) {
      nak_and_fail(dev, qp, psn, net::aeth::kNakRemoteOpError);  // raises IBV_EVENT_QP_FATAL
    } else {
      dev.post_qp_event(qp, IBV_EVENT_QP_FATAL);
      dev.qp_to_error(qp);
    }
    return false;
  }
  if (status != IBV_WC_SUCCESS) {
    complete_recv(dev, qp, status, wc_opcode, 0, nullptr, false);
    if (is_reliable(qp)) nak_and_fail(dev, qp, psn, net::aeth::kNakRemoteOpError, false);
    else dev.qp_to_error(qp);
    return false;
  }
  return true;
}

namespace {

// The R_Key of a SEND_WITH_INV, at its last packet (rxe invalidates as it
// completes the receive). One naming no window this QP may invalidate (a
// region's key among them: neither rxe nor mlx5 invalidates ibv_reg_mr
// regions) completes the receive IBV_WC_REM_INV_REQ_ERR and errs the QP
// (rxe's class J RESPST_ERR_INVALIDATE_RKEY); the requester sees an invalid
// request NAK. Out of line: SENDs without it pay one flag test.
[[gnu::noinline]] bool invalidate_for_send(Device& dev, Qp& qp, const net::Packet& p) {
  if (dev.remote_invalidate(qp, request_pd(dev, qp, p), p.hdr<net::Ieth>(p.info().ieth_off)->rkey))
    return true;
  complete_recv(dev, qp, IBV_WC_REM_INV_REQ_ERR, IBV_WC_RECV, 0, nullptr, false);
  if (is_reliable(qp)) nak_and_fail(dev, qp, p.bth()->psn(), net::aeth::kNakInvalidRequest, false);
  else dev.qp_to_error(qp);
  return false;
}

void execute_send(Device& dev, Qp& qp, net::Packet& p) {
  const OpcodeInfo& info = p.info();
  const uint32_t psn = p.bth()->psn();
  if (info.has(net::kFirst)) {
    if (!qp.resp_recv_valid) {
      Srq* srq = dev.srq(qp.srq);
      if (srq && srq->tm) [[unlikely]] {
        if (!acquire_tm_target(dev, qp, *srq, p)) return;
      } else if (!acquire_recv_wqe(dev, qp, p, IBV_WC_RECV)) {
        return;
      }
    }
    qp.resp_offset = 0;
  }
  const RecvInProgress& r = qp.resp_recv;
  // A matched eager message places its data without the TMH.
  const uint8_t* data = p.payload();
  uint32_t data_len = p.payload_len;
  if (info.has(net::kFirst) && r.tm_skip) [[unlikely]] {
    const uint32_t skip = std::min(r.tm_skip, data_len);
    data += skip;
    data_len -= skip;
  }
  if (r.discard) {  // its SRQ is gone: take the message, place and report nothing
    qp.resp_offset += p.payload_len;
    if (info.has(net::kLast)) qp.resp_recv_valid = false;
    return;
  }
  if (r.tm_rndv) [[unlikely]] {
    // A matched rendezvous request: its bytes after the RVH (software's
    // meta-data) are not placed; once it is all in, the device's READ is
    // queued and owns the tagged buffer from here on.
    if (info.has(net::kLast)) {
      qp.resp_recv_valid = false;
      tm_rndv_start(dev, qp);  // room was checked at the match, and nothing was queued since
    }
    return;
  }
  if (qp.resp_offset + data_len > recv_capacity(r)) {
    // Message longer than the receive buffer (IBA 9.7.5.2.5, class C for RC),
    // or reaching past the end of an SGE's MR (a protection error).
    const uint32_t st = overflow_status(r, qp.resp_offset + data_len);
    complete_recv(dev, qp, st, IBV_WC_RECV, 0, nullptr, false);
    if (is_reliable(qp))
      nak_and_fail(dev, qp, psn,
                   st == IBV_WC_LOC_LEN_ERR ? net::aeth::kNakInvalidRequest : net::aeth::kNakRemoteOpError,
                   false);
    else dev.qp_to_error(qp);
    return;
  }
  if (data_len && !scatter_sges(dev, *r.owner, r.sge.data(), r.num_sge, qp.resp_offset, data, data_len)) {
    dev.memory_fault("receive", r.owner, r.sge[0].addr, data_len);
    complete_recv(dev, qp, IBV_WC_LOC_PROT_ERR, IBV_WC_RECV, 0, nullptr, false);
    if (is_reliable(qp)) nak_and_fail(dev, qp, psn, net::aeth::kNakRemoteOpError, false);
    else dev.qp_to_error(qp);
    return;
  }
  qp.resp_offset += data_len;
  if (info.has(net::kHasIeth) && !invalidate_for_send(dev, qp, p)) [[unlikely]]
    return;
  if (info.has(net::kLast))
    complete_recv(dev, qp, IBV_WC_SUCCESS, IBV_WC_RECV, uint32_t(qp.resp_offset), &p,
                  p.bth()->solicited());
}

void execute_write(Device& dev, Qp& qp, net::Packet& p) {
  const OpcodeInfo& info = p.info();
  const uint32_t psn = p.bth()->psn();
  // WRITE with immediate consumes a receive WQE: take it before placing data.
  if (info.has(net::kHasImm) && !qp.resp_recv_valid &&
      !acquire_recv_wqe(dev, qp, p, IBV_WC_RECV_RDMA_WITH_IMM))
    return;
  if (info.has(net::kFirst)) {
    const auto* reth = p.hdr<net::Reth>(info.reth_off);
    qp.resp_offset = 0;
    qp.resp_write_left = reth->dma_len;
    qp.resp_write_va = 0;
    // IBA 9.7.5.1.3 / C9-88: R_Key, bounds and access checked before any write.
    // Through a window, the rest of the message writes its MR even if the
    // window is invalidated meanwhile (rxe holds the MR for the message).
    if (reth->dma_len && (!(qp.access & IBV_ACCESS_REMOTE_WRITE) ||
                          !check_remote(dev, qp, p, reth->rkey, reth->va, reth->dma_len, IBV_ACCESS_REMOTE_WRITE,
                                        &qp.resp_write_key, &qp.resp_write_va))) {
      if (is_reliable(qp)) return nak_and_fail(dev, qp, psn, net::aeth::kNakRemoteAccessError);
      qp.resp_msg_dropped = !info.has(net::kLast);
      qp.resp_epsn = psn_add(psn, 1);
      return;
    }
  }
  if (p.payload_len > qp.resp_write_left) {
    if (is_reliable(qp)) return nak_and_fail(dev, qp, psn, net::aeth::kNakInvalidRequest);
    qp.resp_in_msg = false;
    return;
  }
  if (p.payload_len) {
    // The MR may have been deregistered since FIRST: check it still stands.
    // Its key may even name another MR by now (freed, then reused once the
    // 8-bit generation wrapped): one of another PD, maybe another client's,
    // never gets bytes aimed at the first (IBA C10-14: the R_Key is of the
    // QP's PD).
    bool placed;
    const Owner* owner = nullptr;
    if (is_mkey_key(qp.resp_write_key)) [[unlikely]] {
      placed = dev.mkey_io(qp.resp_write_key, request_pd(dev, qp, p), qp.resp_write_va, p.payload(), p.payload_len, true);
    } else {
      const Mr* mr = dev.find_mr(qp.resp_write_key);
      if (mr && mr->pd != request_pd(dev, qp, p)) mr = nullptr;
      owner = mr ? mr->owner : nullptr;
      placed = mr && mr->owner->mem.write(mr->span(qp.resp_write_va, p.payload_len), p.payload());
    }
    if (!placed) {
      dev.memory_fault("RDMA write", owner, qp.resp_write_va, p.payload_len);
      if (is_reliable(qp)) return nak_and_fail(dev, qp, psn, net::aeth::kNakRemoteAccessError);
      return;
    }
  }
  qp.resp_write_va += p.payload_len;
  qp.resp_write_left -= p.payload_len;
  qp.resp_offset += p.payload_len;
  if (info.has(net::kLast) && qp.resp_write_left) {
    // The message ended before the RETH's DMA length (IBA 9.7.4.1.5, C9-94).
    if (is_reliable(qp)) return nak_and_fail(dev, qp, psn, net::aeth::kNakInvalidRequest);
    qp.resp_in_msg = false;
    return;
  }
  if (info.has(net::kLast) && info.has(net::kHasImm) && qp.resp_recv.discard)
    qp.resp_recv_valid = false;  // its SRQ is gone: nothing to report
  else if (info.has(net::kLast) && info.has(net::kHasImm))
    complete_recv(dev, qp, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM, uint32_t(qp.resp_offset), &p,
                  p.bth()->solicited());
}

void execute_read(Device& dev, Qp& qp, net::Packet& p) {
  const auto* reth = p.hdr<net::Reth>(p.info().reth_off);
  const uint32_t psn = p.bth()->psn();
  const uint32_t len = reth->dma_len;
  uint64_t va = 0;
  uint32_t key = 0;
  if (len && (!(qp.access & IBV_ACCESS_REMOTE_READ) ||
              !check_remote(dev, qp, p, reth->rkey, reth->va, len, IBV_ACCESS_REMOTE_READ, &key, &va)))
    return nak_and_fail(dev, qp, psn, net::aeth::kNakRemoteAccessError);
  if (pending_rd_atomic(qp) >= std::max<uint32_t>(1, qp.max_dest_rd_atomic) + 1u)
    return nak_and_fail(dev, qp, psn, net::aeth::kNakInvalidRequest);  // IBA C9-149
  const uint32_t mtu = qp.mtu_bytes();
  Response r;
  r.kind = Response::Kind::kRead;
  r.psn = psn;
  r.end_psn = psn_add(psn, std::max<uint32_t>(1, (len + mtu - 1) / mtu));
  r.remaining = len;
  r.mr_key = key;
  r.mr_pd = request_pd(dev, qp, p);
  r.va = va;
  if (qp.responses.full()) [[unlikely]] return;  // C9-149 above keeps room: never taken
  qp.responses.push_back(r);
  qp.resp_epsn = r.end_psn;
  ++qp.resp_msn;
}

// The 8-byte word an atomic or ATOMIC WRITE names: aligned (C9-181; rxe's
// RESPST_ERR_MISALIGNED_ATOMIC for ATOMIC WRITE too), and allowed by the QP
// and by the R_Key's memory (`access`). False with the NAK's syndrome set
// if not; the word (a region's, or in one piece of an mkey's layout) and
// its owner otherwise.
bool atomic_target(Device& dev, const Qp& qp, const net::Packet& p, uint64_t va, uint32_t rkey,
                   uint32_t access, Owner** owner, RemoteSpan* word, uint8_t* syndrome) {
  *syndrome = net::aeth::kNakInvalidRequest;
  if (va & 7) return false;
  *syndrome = net::aeth::kNakRemoteAccessError;
  if (!(qp.access & access)) return false;
  if (is_mkey_key(rkey)) [[unlikely]] {
    uint64_t left;
    const uint32_t pd = request_pd(dev, qp, p);
    return dev.check_mkey(rkey, pd, va, 8, access, &left) == Device::MrCheck::kOk &&
           dev.mkey_word(rkey, pd, va, word, owner);
  }
  const Mr* mr;
  uint64_t addr;
  if (dev.check_rkey(rkey, request_pd(dev, qp, p), qp.qpn, va, 8, access, &mr, &addr) != Device::MrCheck::kOk)
    return false;
  *owner = mr->owner;
  *word = mr->span(addr, 8);
  return true;
}

void execute_atomic(Device& dev, Qp& qp, net::Packet& p) {
  const auto* ae = p.hdr<net::AtomicEth>(p.info().atomiceth_off);
  const uint32_t psn = p.bth()->psn();
  Owner* owner;
  RemoteSpan word;
  uint8_t syndrome;
  if (!atomic_target(dev, qp, p, ae->va, ae->rkey, IBV_ACCESS_REMOTE_ATOMIC, &owner, &word, &syndrome))
    return nak_and_fail(dev, qp, psn, syndrome);
  // The engine thread serialises every atomic of the device (IBV_ATOMIC_HCA).
  uint64_t orig;
  const bool cas = (p.opcode & 0x1f) == net::op::kCompareSwap;
  const bool ok = cas ? owner->mem.compare_swap(word, uint64_t(ae->compare), uint64_t(ae->swap_add), &orig)
                      : owner->mem.fetch_add(word, uint64_t(ae->swap_add), &orig);
  if (!ok) {
    dev.memory_fault("atomic", owner, word.addr, 8);
    return nak_and_fail(dev, qp, psn, net::aeth::kNakRemoteOpError);
  }
  AtomicReplay& slot = qp.atomic_replay[qp.atomic_replay_next++ % kAtomicReplayDepth];
  slot = {psn, orig, true};
  ++qp.resp_msn;
  qp.resp_epsn = psn_add(psn, 1);
  if (qp.responses.empty()) return emit_atomic_ack(dev, qp, psn, orig);
  Response r;
  r.kind = Response::Kind::kAtomicAck;
  r.psn = psn;
  r.orig = orig;
  if (qp.responses.full()) [[unlikely]] {
    ++dev.counters_mut().response_queue_full;  // its answer lost: a duplicate gets it from the replay cache
    return;
  }
  qp.responses.push_back(r);
}

// ATOMIC WRITE (IBA 1.5 annex A19, rxe's atomic_write_reply): the RETH's
// aligned 8 bytes, remote write access on the QP and the memory as for a
// WRITE, written at once; it holds a responder resource as a READ does.
void execute_atomic_write(Device& dev, Qp& qp, net::Packet& p) {
  const auto* reth = p.hdr<net::Reth>(p.info().reth_off);
  const uint32_t psn = p.bth()->psn();
  // Exactly 8 bytes announced and carried (rxe: RESPST_ERR_LENGTH, class C).
  if (reth->dma_len != 8 || p.payload_len != 8)
    return nak_and_fail(dev, qp, psn, net::aeth::kNakInvalidRequest);
  Owner* owner;
  RemoteSpan word;
  uint8_t syndrome;
  if (!atomic_target(dev, qp, p, reth->va, reth->rkey, IBV_ACCESS_REMOTE_WRITE, &owner, &word, &syndrome))
    return nak_and_fail(dev, qp, psn, syndrome);
  if (pending_rd_atomic(qp) >= std::max<uint32_t>(1, qp.max_dest_rd_atomic) + 1u)
    return nak_and_fail(dev, qp, psn, net::aeth::kNakInvalidRequest);  // IBA C9-149
  uint64_t value;
  std::memcpy(&value, p.payload(), 8);
  if (!owner->mem.store(word, value)) {
    dev.memory_fault("atomic write", owner, word.addr, 8);
    return nak_and_fail(dev, qp, psn, net::aeth::kNakRemoteOpError);
  }
  ++qp.resp_msn;
  qp.resp_epsn = psn_add(psn, 1);
  answer_atomic_write(dev, qp, psn, false);
}

void execute_request(Device& dev, Qp& qp, net::Packet& p) {
  const OpcodeInfo& info = p.info();
  const uint32_t psn = p.bth()->psn();
  // Every packet but the last of a message carries exactly one MTU (C9-59).
  if (info.has(net::kHasPayload) && (p.payload_len > qp.mtu_bytes() ||
                                     (!info.has(net::kLast) && p.payload_len != qp.mtu_bytes()))) {
    if (is_reliable(qp)) return nak_and_fail(dev, qp, psn, net::aeth::kNakInvalidRequest);
    qp.resp_in_msg = false;
    return;
  }
  if (info.has(net::kRead)) {
    if (!is_reliable(qp)) return;
    return execute_read(dev, qp, p);
  }
  if (info.has(net::kAtomic)) {
    if (!is_reliable(qp)) return;
    return execute_atomic(dev, qp, p);
  }
  if (info.has(net::kAtomicStore)) {
    if (!is_reliable(qp)) return;
    return execute_atomic_write(dev, qp, p);
  }
  const uint32_t epsn_before = qp.resp_epsn;
  const uint64_t rnr_before = dev.counters().rnr_nak_sent;
  if (info.has(net::kSend)) execute_send(dev, qp, p);
  else execute_write(dev, qp, p);
  if (qp.state == IBV_QPS_ERR || qp.resp_fatal_pending || dev.counters().rnr_nak_sent != rnr_before ||
      qp.resp_epsn != epsn_before)
    return;  // failed, RNR-NAKed, or dropped: the handlers set what follows
  qp.resp_epsn = psn_add(psn, 1);
  qp.resp_in_msg = !info.has(net::kLast);
  qp.resp_last_opcode = p.opcode;
  if (info.has(net::kLast)) ++qp.resp_msn;
  if (is_reliable(qp) && p.bth()->ack_req()) send_ack(dev, qp, psn);
}

}  // namespace

void responder_receive(Device& dev, Qp& qp, net::Packet& p) {
  if (qp.state != IBV_QPS_RTR && qp.state != IBV_QPS_RTS && qp.state != IBV_QPS_SQD) {
    ++dev.counters_mut().rx_bad_state;
    return;
  }
  if (qp.resp_fatal_pending) return;  // a fatal NAK is on its way out
  const uint8_t transport = p.opcode & 0xe0;
  const uint8_t expected = uint8_t(transport_of(qp));
  if (transport != expected) {
    ++dev.counters_mut().rx_bad_transport;
    return;
  }
  if (qp.type == IBV_QPT_UD) return receive_ud(dev, qp, p);
  receive_connected(dev, qp, p);
}

// Emits queued responses in order, READ data a budget of packets per poll.
bool responder_run(Device& dev, Qp& qp) {
  if (qp.responses.empty()) return false;
  if (qp.state != IBV_QPS_RTR && qp.state != IBV_QPS_RTS && qp.state != IBV_QPS_SQD) {
    qp.responses.clear();
    qp.resp_fatal_pending = false;
    return false;
  }
  const uint32_t mtu = qp.mtu_bytes();
  uint32_t budget = kRequesterBudget;
  while (budget-- && !qp.responses.empty()) {
    Response& r = qp.responses.front();
    if (r.kind == Response::Kind::kAeth) {
      const bool fatal = r.fatal;
      emit_aeth(dev, qp, ack_opcode(qp), r.psn, r.syndrome, r.msn);
      qp.responses.pop_front();
      if (fatal) {
        qp.resp_fatal_pending = false;
        dev.qp_to_error(qp);
        return true;
      }
      continue;
    }
    if (r.kind == Response::Kind::kAtomicAck) {
      emit_atomic_ack(dev, qp, r.psn, r.orig);
      qp.responses.pop_front();
      continue;
    }
    const uint32_t len = std::min(r.remaining, mtu);
    const bool last = len == r.remaining;
    using namespace net::op;
    const uint8_t code = r.first && last ? kReadRespOnly : r.first ? kReadRespFirst
                                                         : last    ? kReadRespLast
                                                                   : kReadRespMiddle;
    // READ data waits while a port's queue is full (back-pressure).
    if (!dev.tx_ready()) break;
    net::Packet* p = dev.new_packet(qp, response_opcode(qp, code), r.psn, false);
    if (!p) [[unlikely]] break;
    const OpcodeInfo& info = p->info();
    if (info.has(net::kHasAeth))
      p->hdr<net::Aeth>(info.aeth_off)->syndrome_msn =
          aeth_word(qp, net::aeth::kAck | net::aeth::kCreditInvalid);
    if (len) {
      bool read;
      const Owner* owner = nullptr;
      if (is_mkey_key(r.mr_key)) [[unlikely]] {
        read = dev.mkey_io(r.mr_key, r.mr_pd, r.va, p->payload(), len, false);
      } else {
        const Mr* mr = dev.find_mr(r.mr_key);
        if (mr && mr->pd != r.mr_pd) mr = nullptr;  // freed and its key reused: see execute_write
        owner = mr ? mr->owner : nullptr;
        read = mr && mr->owner->mem.read(mr->span(r.va, len), p->payload());
      }
      if (!read) {
        dev.memory_fault("RDMA read response", owner, r.va, len);
        dev.free_packet(p);
        const uint32_t psn = r.psn;
        qp.responses.clear();
        ++dev.counters_mut().nak_sent;
        emit_aeth(dev, qp, ack_opcode(qp), psn, net::aeth::kNakRemoteAccessError, qp.resp_msn);
        dev.qp_to_error(qp);
        return true;
      }
    }
    p->payload_len = len;
    dev.send_packet(qp, p);
    r.first = false;
    r.va += len;
    r.remaining -= len;
    r.psn = psn_add(r.psn, 1);
    if (last) qp.responses.pop_front();
  }
  return true;
}

}  // namespace uroce::device
