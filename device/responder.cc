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

// Checks the SGEs of the receive being taken and turns them into owner
// addresses. Returns IBV_WC_SUCCESS or the completion status.
uint32_t translate_recv_sges(Device& dev, RecvInProgress& r, uint32_t pd) {
  r.mr_limited = false;
  r.declared_len = 0;
  for (uint32_t i = 0; i < r.num_sge; ++i) r.declared_len += r.sge[i].length;
  for (uint32_t i = 0; i < r.num_sge; ++i) {
    if (r.sge[i].length == 0) continue;
    // Key, PD and access are checked now; bounds only for the bytes a message
    // writes (mlx5 and rxe): an SGE may run past its MR's end as long as the
    // message stops short of it, so the SGE is cut there and ends the list.
    const Mr* mr;
    if (dev.check_mr(r.sge[i].lkey, pd, r.sge[i].addr, 0, IBV_ACCESS_LOCAL_WRITE, false, &mr) !=
        Device::MrCheck::kOk) {
      return IBV_WC_LOC_PROT_ERR;
    }
    const uint64_t room = mr->iova + mr->length - r.sge[i].addr;
    r.sge[i].addr = mr->addr + (r.sge[i].addr - mr->iova);
    if (room < r.sge[i].length) {
      r.sge[i].length = uint32_t(room);
      r.num_sge = i + 1;
      r.mr_limited = true;
      break;
    }
  }
  return IBV_WC_SUCCESS;
}

namespace {

using net::OpcodeInfo;

uint8_t response_opcode(const Qp& qp, uint8_t code) { return net::make_opcode(transport_of(qp), code); }
uint8_t ack_opcode(const Qp& qp) { return response_opcode(qp, net::op::kAck); }

uint32_t aeth_word(const Qp& qp, uint8_t syndrome) {
  return (uint32_t(syndrome) << 24) | (qp.resp_msn & 0xffffff);
}

void emit_aeth(Device& dev, Qp& qp, uint8_t opcode, uint32_t psn, uint8_t syndrome) {
  net::Packet* p = dev.new_packet(qp, opcode, psn, false);
  if (!p) [[unlikely]] return;  // no buffer (counted): lost as on the wire; the requester retries
  p->hdr<net::Aeth>(p->info().aeth_off)->syndrome_msn = aeth_word(qp, syndrome);
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

// ACKs and NAKs go out now unless READ data is still queued: then they wait
// their turn, as responses leave in PSN order.
void send_aeth(Device& dev, Qp& qp, uint32_t psn, uint8_t syndrome, bool fatal = false) {
  if (qp.responses.empty()) {
    emit_aeth(dev, qp, ack_opcode(qp), psn, syndrome);
    if (fatal) dev.qp_to_error(qp);
    return;
  }
  Response r;
  r.kind = Response::Kind::kAeth;
  r.psn = psn;
  r.syndrome = syndrome;
  r.fatal = fatal;
  qp.responses.push_back(r);
  if (fatal) qp.resp_fatal_pending = true;
}

void send_ack(Device& dev, Qp& qp, uint32_t psn) {
  send_aeth(dev, qp, psn, net::aeth::kAck | net::aeth::kCreditInvalid);
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
  for (const Response& r : qp.responses) n += r.kind != Response::Kind::kAeth && !r.replay;
  return n;
}

// Queues a response in PSN order (IBA 9.7.5.1.1): an answer to a duplicate
// goes before the queued answers to later requests, as the requester, gone
// back to the duplicate's PSN, waits for it first.
void enqueue_in_psn_order(Qp& qp, const Response& r) {
  auto it = qp.responses.begin();
  while (it != qp.responses.end() && psn_diff(it->psn, r.psn) <= 0) ++it;
  qp.responses.insert(it, r);
}

// Duplicates may be queued at most this deep; more are dropped (class D,
// the requester's timer asks again), so a flood of them cannot grow the queue.
constexpr size_t kMaxQueuedResponses = 4 * kMaxQpRdAtomic;

// The SRQ an XRC request names in its XRCETH; it must live in the target
// QP's domain (XRC annex: otherwise an invalid request).
Srq* xrc_target_srq(Device& dev, const Qp& qp, const net::Packet& p) {
  const OpcodeInfo& info = p.info();
  if (!info.has(net::kHasXrcEth)) return nullptr;
  Srq* srq = dev.srq(p.hdr<net::XrcEth>(info.xrceth_off)->srqn & 0xffffff);
  if (!srq || srq->type != IBV_SRQT_XRC || srq->xrcd != qp.xrcd) return nullptr;
  return srq;
}

// The PD that memory keys of this request are checked against: the QP's, or
// for an XRC target the named SRQ's (0 when the SRQ is invalid: every check fails).
uint32_t request_pd(Device& dev, const Qp& qp, const net::Packet& p) {
  if (qp.type != IBV_QPT_XRC_RECV) return qp.pd;
  const Srq* srq = xrc_target_srq(dev, qp, p);
  return srq ? srq->pd : 0;
}

}  // namespace

uint32_t copy_recv_wqe(Device& dev, const RingView& ring, uint32_t index, uint32_t max_sge, RecvInProgress& r) {
  abi::RecvWqe hdr;
  const uint8_t* slot = ring.slot(index);
  std::memcpy(&hdr, slot, sizeof(hdr));
  r.wr_id = hdr.wr_id;
  r.num_sge = hdr.num_sge;
  if (hdr.num_sge > max_sge || sizeof(abi::RecvWqe) + hdr.num_sge * sizeof(abi::Sge) > ring.stride) {
    ++dev.counters_mut().bad_wqes;
    r.num_sge = 0;
    return IBV_WC_LOC_LEN_ERR;
  }
  std::memcpy(r.sge.data(), slot + sizeof(abi::RecvWqe), hdr.num_sge * sizeof(abi::Sge));
  return IBV_WC_SUCCESS;
}

namespace {

// take_recv_wqe's status for a receive queue whose producer index is corrupt:
// no WQE to complete, the QP is fatal.
constexpr uint32_t kRecvQueueBroken = ~0u;

// Takes the next receive WQE into qp.resp_recv, from the QP's RQ, its SRQ or
// (XRC) the SRQ the request names, translating each SGE. Returns false if
// none is posted; sets *status for a WQE that cannot be used.
bool take_recv_wqe(Device& dev, Qp& qp, const net::Packet& p, uint32_t* status) {
  *status = IBV_WC_SUCCESS;
  Srq* srq = qp.type == IBV_QPT_XRC_RECV ? xrc_target_srq(dev, qp, p) : dev.srq(qp.srq);
  const uint32_t srq_handle =  // SRQ numbers are their handles
      qp.type == IBV_QPT_XRC_RECV ? p.hdr<net::XrcEth>(p.info().xrceth_off)->srqn & 0xffffff : qp.srq;
  if (qp.type == IBV_QPT_XRC_RECV && !srq) {
    *status = IBV_WC_REM_INV_REQ_ERR;  // caller NAKs: no such SRQ in this domain
    return true;
  }
  const RingView& ring = srq ? srq->ring : qp.rq;
  uint32_t& head = srq ? srq->head : qp.rq_head;
  const uint32_t max_sge = srq ? srq->max_sge : qp.caps.max_recv_sge;
  const uint32_t pd = srq ? srq->pd : qp.pd;
  const uint32_t prod = ring.hdr->producer.load(std::memory_order_acquire);
  if (prod == head) return false;
  if (prod - head > ring.size()) {
    // The client wrote a producer index no ring can hold: there is no WQE to
    // complete (qp.resp_recv is still the last message's), so the queue is
    // broken (IBA 11.6.2 "local work queue catastrophic"; an SRQ's owner also
    // gets IBV_EVENT_SRQ_ERR, IBA 11.6.3.2). The caller fails the QP.
    ++dev.counters_mut().bad_wqes;
    if (srq) srq->owner->post_async(IBV_EVENT_SRQ_ERR, srq->cookie);
    *status = kRecvQueueBroken;
    return true;
  }
  RecvInProgress& r = qp.resp_recv;
  const uint32_t fetched = copy_recv_wqe(dev, ring, head, max_sge, r);
  r.from_srq = srq != nullptr;
  r.discard = false;
  r.srq = srq ? srq_handle : 0;
  // XRC and TM SRQs complete on their own CQ (a TM-SRQ's: rdma-core's
  // Documentation/tag_matching.md).
  r.cq = srq && srq->cq ? srq->cq : qp.recv_cq;
  r.tm_opcode = r.tm_flags = r.tm_status = 0;
  r.tm_matched = false;
  r.tm_skip = 0;
  r.tm_rndv = false;
  r.owner = srq ? srq->owner : qp.owner;
  qp.resp_recv_valid = true;
  if (srq) {
    // An SRQ WQE leaves the queue when a QP takes it (rxe get_srq_wqe).
    ++head;
    ring.hdr->consumer.store(head, std::memory_order_release);
    dev.srq_consumed(*srq);
  }
  *status = fetched == IBV_WC_SUCCESS ? translate_recv_sges(dev, r, pd) : fetched;
  return true;
}

}  // namespace

uint64_t recv_capacity(const RecvInProgress& r) {
  uint64_t total = 0;
  for (uint32_t i = 0; i < r.num_sge; ++i) total += r.sge[i].length;
  return total;
}

// The status of a message of `need` bytes that does not fit its receive:
// longer than the WQE's SGEs (IBA 9.7.5.2.5), or reaching past an MR's end.
uint32_t overflow_status(const RecvInProgress& r, uint64_t need) {
  return r.mr_limited && need <= r.declared_len ? IBV_WC_LOC_PROT_ERR : IBV_WC_LOC_LEN_ERR;
}

namespace {

// RoCEv2 annex A17.4.5.1: a receive completion tells whether the frame was
// IPv4 or IPv6. mlx5 puts the frame's L3 header type in wc.sl (bits 2:0: 1
// IPv6, 2 IPv4; rdma-core providers/mlx5/cq.c copies it from the CQE for
// every responder completion), and UCX's ud_verbs reads it there to find the
// destination GID in the GRH area.
uint8_t l3_header_type(const net::Packet& p) {
  constexpr uint8_t kMlx5L3Ipv6 = 1, kMlx5L3Ipv4 = 2;
  return net::roce_family(p) == net::IpFamily::kIpv6 ? kMlx5L3Ipv6 : kMlx5L3Ipv4;
}

}  // namespace

// Completes the receive WQE being filled and frees its RQ slot.
void complete_recv(Device& dev, Qp& qp, uint32_t status, uint32_t opcode, uint32_t byte_len,
                   const net::Packet* p, bool solicited) {
  abi::Cqe cqe{};
  cqe.wr_id = qp.resp_recv.wr_id;
  cqe.status = status;
  cqe.opcode = opcode;
  cqe.byte_len = byte_len;
  cqe.qp_num = qp.qpn;
  cqe.src_qp = qp.dest_qpn;
  if (p && status == IBV_WC_SUCCESS) {
    const OpcodeInfo& info = p->info();
    cqe.sl = l3_header_type(*p);
    if (info.has(net::kHasImm)) {
      cqe.imm_data = p->hdr<net::ImmDt>(info.imm_off)->imm;
      cqe.wc_flags |= IBV_WC_WITH_IMM;
    }
    if (info.has(net::kHasIeth)) {
      cqe.imm_data = p->hdr<net::Ieth>(info.ieth_off)->rkey;
      cqe.wc_flags |= IBV_WC_WITH_INV;
    }
    if (info.has(net::kHasDeth)) {
      cqe.src_qp = p->hdr<net::Deth>(info.deth_off)->src_qp & kQpnMask;
      cqe.wc_flags |= IBV_WC_GRH;
    }
  }
  const RecvInProgress& r = qp.resp_recv;
  if (r.tm_opcode) [[unlikely]] {
    cqe.opcode = r.tm_opcode;
    cqe.wc_flags |= r.tm_flags;
    if (status == IBV_WC_SUCCESS) status = cqe.status = r.tm_status;
    // Tag and app context only where mlx5's CQE carries them: the match.
    if (r.tm_flags & IBV_WC_TM_MATCH) {
      cqe.tm_tag = r.tm_tag;
      cqe.tm_priv = r.tm_priv;
    }
    if (r.tm_matched)
      if (Srq* s = dev.srq(r.srq); s && s->tm) s->tm->release(r.tm_handle);
  }
  if (status != IBV_WC_SUCCESS) cqe.vendor_err = status;
  qp.resp_recv_valid = false;
  if (!qp.resp_recv.from_srq) {
    ++qp.rq_head;
    qp.rq.hdr->consumer.store(qp.rq_head, std::memory_order_release);
  }
  if (!dev.complete_to(qp.resp_recv.cq, cqe, solicited)) {
    dev.post_qp_event(qp, IBV_EVENT_QP_FATAL);
    dev.qp_to_error(qp);
  }
}

namespace {

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
  if (reth->dma_len) {
    const Mr* mr;
    if (dev.check_rkey(reth->rkey, request_pd(dev, qp, p), qp.qpn, reth->va, reth->dma_len,
                       IBV_ACCESS_REMOTE_READ, &mr, &va) != Device::MrCheck::kOk)
      return;  // class D: silently dropped
    key = mr->key;
  }
  const uint32_t pd = request_pd(dev, qp, p);
  for (Response& q : qp.responses) {
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
    qp.responses.erase(qp.responses.begin() + (&q - qp.responses.data()));
    enqueue_in_psn_order(qp, moved);
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
  enqueue_in_psn_order(qp, r);
}

// ATOMIC WRITE's answer, also to a duplicate of one: an RDMA READ response
// ONLY of no data (IBA 1.5 annex A19; rxe's send_read_response_ack), in PSN
// order behind the responses still queued.
void answer_atomic_write(Device& dev, Qp& qp, uint32_t psn, bool replay) {
  if (qp.responses.empty())
    return emit_aeth(dev, qp, response_opcode(qp, net::op::kReadRespOnly), psn,
                     net::aeth::kAck | net::aeth::kCreditInvalid);
  Response r;  // a READ of no bytes: responder_run sends it as this answer
  r.replay = replay;
  r.psn = psn;
  r.end_psn = psn_add(psn, 1);
  enqueue_in_psn_order(qp, r);
}

void answer_duplicate(Device& dev, Qp& qp, net::Packet& p) {
  ++dev.counters_mut().rx_duplicate;
  const OpcodeInfo& info = p.info();
  const uint32_t psn = p.bth()->psn();
  if (info.has(net::kRead)) return answer_duplicate_read(dev, qp, p);
  if (info.has(net::kAtomicStore)) {
    // Executed once, answered again (rxe replays its resource): its answer
    // was lost. Not twice while the first is still queued.
    for (const Response& q : qp.responses)
      if (q.kind == Response::Kind::kRead && q.psn == psn && q.end_psn == psn_add(psn, 1) && !q.remaining)
        return;
    if (qp.responses.size() >= kMaxQueuedResponses) return;
    return answer_atomic_write(dev, qp, psn, true);
  }
  if (info.has(net::kAtomic)) {
    // Never execute an atomic twice: answer from the replay cache (IBA
    // 9.7.5.1.4). Not in it: too old to be outstanding, dropped.
    for (const AtomicReplay& r : qp.atomic_replay) {
      if (!r.valid || r.psn != psn) continue;
      if (qp.responses.empty()) return emit_atomic_ack(dev, qp, psn, r.orig);
      for (const Response& q : qp.responses)
        if (q.kind == Response::Kind::kAtomicAck && q.psn == psn) return;  // still queued
      if (qp.responses.size() >= kMaxQueuedResponses) return;
      Response resp;
      resp.kind = Response::Kind::kAtomicAck;
      resp.replay = true;
      resp.psn = psn;
      resp.orig = r.orig;
      enqueue_in_psn_order(qp, resp);
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
    if (reth->dma_len) {
      const Mr* mr;
      // IBA 9.7.5.1.3 / C9-88: R_Key, bounds and access checked before any write.
      // Through a window, the rest of the message writes its MR even if the
      // window is invalidated meanwhile (rxe holds the MR for the message).
      if (!(qp.access & IBV_ACCESS_REMOTE_WRITE) ||
          dev.check_rkey(reth->rkey, request_pd(dev, qp, p), qp.qpn, reth->va, reth->dma_len,
                         IBV_ACCESS_REMOTE_WRITE, &mr, &qp.resp_write_va) != Device::MrCheck::kOk) {
        if (is_reliable(qp)) return nak_and_fail(dev, qp, psn, net::aeth::kNakRemoteAccessError);
        qp.resp_msg_dropped = !info.has(net::kLast);
        qp.resp_epsn = psn_add(psn, 1);
        return;
      }
      qp.resp_write_key = mr->key;
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
    const Mr* mr = dev.find_mr(qp.resp_write_key);
    if (mr && mr->pd != request_pd(dev, qp, p)) mr = nullptr;
    if (!mr || !mr->owner->mem.write(mr->span(qp.resp_write_va, p.payload_len), p.payload())) {
      dev.memory_fault("RDMA write", mr ? mr->owner : nullptr, qp.resp_write_va, p.payload_len);
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
  if (len) {
    const Mr* mr;
    if (!(qp.access & IBV_ACCESS_REMOTE_READ) ||
        dev.check_rkey(reth->rkey, request_pd(dev, qp, p), qp.qpn, reth->va, len, IBV_ACCESS_REMOTE_READ,
                       &mr, &va) != Device::MrCheck::kOk)
      return nak_and_fail(dev, qp, psn, net::aeth::kNakRemoteAccessError);
    key = mr->key;
  }
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
  qp.responses.push_back(r);
  qp.resp_epsn = r.end_psn;
  ++qp.resp_msn;
}

// The 8-byte word an atomic or ATOMIC WRITE names: aligned (C9-181; rxe's
// RESPST_ERR_MISALIGNED_ATOMIC for ATOMIC WRITE too), and allowed by the QP
// and by the R_Key's memory (`access`). False with the NAK's syndrome set
// if not; the word's MR and owner address otherwise.
bool atomic_target(Device& dev, const Qp& qp, const net::Packet& p, uint64_t va, uint32_t rkey,
                   uint32_t access, const Mr** mr, uint64_t* addr, uint8_t* syndrome) {
  *syndrome = net::aeth::kNakInvalidRequest;
  if (va & 7) return false;
  *syndrome = net::aeth::kNakRemoteAccessError;
  return (qp.access & access) && dev.check_rkey(rkey, request_pd(dev, qp, p), qp.qpn, va, 8, access, mr,
                                                addr) == Device::MrCheck::kOk;
}

void execute_atomic(Device& dev, Qp& qp, net::Packet& p) {
  const auto* ae = p.hdr<net::AtomicEth>(p.info().atomiceth_off);
  const uint32_t psn = p.bth()->psn();
  const Mr* mr;
  uint64_t addr;
  uint8_t syndrome;
  if (!atomic_target(dev, qp, p, ae->va, ae->rkey, IBV_ACCESS_REMOTE_ATOMIC, &mr, &addr, &syndrome))
    return nak_and_fail(dev, qp, psn, syndrome);
  // The engine thread serialises every atomic of the device (IBV_ATOMIC_HCA).
  uint64_t orig;
  const bool cas = (p.opcode & 0x1f) == net::op::kCompareSwap;
  const bool ok = cas ? mr->owner->mem.compare_swap(mr->span(addr, 8), uint64_t(ae->compare),
                                                     uint64_t(ae->swap_add), &orig)
                      : mr->owner->mem.fetch_add(mr->span(addr, 8), uint64_t(ae->swap_add), &orig);
  if (!ok) {
    dev.memory_fault("atomic", mr->owner, addr, 8);
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
  const Mr* mr;
  uint64_t addr;
  uint8_t syndrome;
  if (!atomic_target(dev, qp, p, reth->va, reth->rkey, IBV_ACCESS_REMOTE_WRITE, &mr, &addr, &syndrome))
    return nak_and_fail(dev, qp, psn, syndrome);
  if (pending_rd_atomic(qp) >= std::max<uint32_t>(1, qp.max_dest_rd_atomic) + 1u)
    return nak_and_fail(dev, qp, psn, net::aeth::kNakInvalidRequest);  // IBA C9-149
  uint64_t value;
  std::memcpy(&value, p.payload(), 8);
  if (!mr->owner->mem.store(mr->span(addr, 8), value)) {
    dev.memory_fault("atomic write", mr->owner, addr, 8);
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
      emit_aeth(dev, qp, ack_opcode(qp), r.psn, r.syndrome);
      qp.responses.erase(qp.responses.begin());
      if (fatal) {
        qp.resp_fatal_pending = false;
        dev.qp_to_error(qp);
        return true;
      }
      continue;
    }
    if (r.kind == Response::Kind::kAtomicAck) {
      emit_atomic_ack(dev, qp, r.psn, r.orig);
      qp.responses.erase(qp.responses.begin());
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
      const Mr* mr = dev.find_mr(r.mr_key);
      if (mr && mr->pd != r.mr_pd) mr = nullptr;  // freed and its key reused: see execute_write
      if (!mr || !mr->owner->mem.read(mr->span(r.va, len), p->payload())) {
        dev.memory_fault("RDMA read response", mr ? mr->owner : nullptr, r.va, len);
        dev.free_packet(p);
        const uint32_t psn = r.psn;
        qp.responses.clear();
        ++dev.counters_mut().nak_sent;
        emit_aeth(dev, qp, ack_opcode(qp), psn, net::aeth::kNakRemoteAccessError);
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
    if (last) qp.responses.erase(qp.responses.begin());
  }
  return true;
}

}  // namespace uroce::device
