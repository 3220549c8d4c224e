// Completer: consumes ACKs, NAKs, READ responses and atomic ACKs for RC send
// WQEs, completes them in order, and drives retransmission on NAKs and
// timeouts (IBA 9.7.5 - 9.7.6).
#include <cstring>

#include "device/device.h"
#include "device/wqe.h"

namespace uroce::device {

namespace {

// IBA table 45: RNR NAK timer field to microseconds.
constexpr uint32_t kRnrTimerUs[32] = {655360, 10,    20,    30,    40,    60,    80,    120,
                                      160,    240,   320,   480,   640,   960,   1280,  1920,
                                      2560,   3840,  5120,  7680,  10240, 15360, 20480, 30720,
                                      40960,  61440, 81920, 122880, 163840, 245760, 327680, 491520};

// True if the SQ head WQE has gone out at least once. Not sq_head != sq_next:
// a go-back-N rewind pulls sq_next back to WQEs that are still outstanding,
// and acknowledgements arriving before they are resent still complete them.
bool head_started(Qp& qp) {
  return qp.sq_head != qp.sq_fetched && wqe_state(qp, qp.sq_head).started;
}

// Completes head WQEs that the acknowledged PSN covers. READs and atomics
// complete only through their responses.
void complete_acked(Device& dev, Qp& qp, uint32_t acked_psn) {
  while (head_started(qp) && qp.state != IBV_QPS_ERR) {
    const SendWqeState& st = wqe_state(qp, qp.sq_head);
    if (st.is_rd_atomic) break;
    // A WQE that failed after it started (a gather fault, a local operation
    // that failed): the requester reports it in order.
    if (st.status != IBV_WC_SUCCESS) break;
    const uint32_t last_psn = psn_add(st.first_psn, st.npsn - 1);
    if (psn_diff(last_psn, acked_psn) > 0) break;
    complete_send_head(dev, qp, IBV_WC_SUCCESS);
  }
}

// The responder has everything before next_psn. Only real progress resets
// the retry counters and restarts the timer: duplicate ACKs must not keep a
// lost tail from ever being retransmitted.
void progress(Device& dev, Qp& qp, uint32_t next_psn) {
  if (psn_diff(next_psn, qp.comp_psn) <= 0) return;
  qp.comp_psn = next_psn;
  qp.comp_rewound = false;
  if (qp.rnr_nak_valid && psn_diff(next_psn, qp.rnr_nak_psn) > 0) qp.rnr_nak_valid = false;
  // Acknowledgements can overtake a go-back-N retransmission: never resend
  // what the responder has confirmed.
  if (psn_diff(qp.comp_psn, qp.req_psn) > 0) position_requester(qp, qp.comp_psn);
  qp.retry_left = qp.retry_cnt;
  qp.rnr_retry_left = qp.rnr_retry;
  const bool outstanding = qp.sq_head != qp.sq_next || qp.req_offset;
  qp.retrans_deadline_ns = outstanding && qp.timeout ? dev.now_ns() + (4096ull << qp.timeout) : 0;
}

// How far an ACK or NAK naming `next_psn` acknowledges: everything before
// it, except the responses of a READ or atomic at the head, which only its
// own responses deliver (IBA 9.7.5.1.5). The acknowledgement stops where
// that WQE's data stops, and is noted in acked_psn for when they arrive.
uint32_t ack_limit(Qp& qp, uint32_t next_psn) {
  if (!head_started(qp)) return next_psn;
  const SendWqeState& st = wqe_state(qp, qp.sq_head);
  if (!st.is_rd_atomic) return next_psn;
  const uint32_t limit = psn_diff(qp.comp_psn, st.first_psn) > 0 ? qp.comp_psn : st.first_psn;
  if (psn_diff(next_psn, limit) <= 0) return next_psn;
  const uint32_t acked = psn_add(next_psn, 0xffffff);
  if (!qp.acked_valid || psn_diff(acked, qp.acked_psn) > 0) qp.acked_psn = acked;
  qp.acked_valid = true;
  return limit;
}

// A fatal remote answer: the WQE at the head ends with `status`, the QP errs.
void fail_head(Device& dev, Qp& qp, uint32_t status) {
  if (!head_started(qp) && !qp.req_offset) {  // nothing started: nothing to blame
    dev.qp_to_error(qp);
    return;
  }
  complete_send_head(dev, qp, status);
  dev.qp_to_error(qp);
}

void on_ack(Device& dev, Qp& qp, const net::Packet& p) {
  const uint32_t psn = p.bth()->psn();
  const uint8_t syn = p.hdr<net::Aeth>(p.info().aeth_off)->syndrome();
  switch (syn & net::aeth::kTypeMask) {
    case net::aeth::kAck: {
      if (!qp.acked_valid || psn_diff(psn, qp.acked_psn) > 0) qp.acked_psn = psn;
      qp.acked_valid = true;
      complete_acked(dev, qp, psn);
      // Also when the requester stands at that WQE itself, rewound into it
      // to ask for its lost responses again: the ACK must not carry
      // comp_psn past what is still missing.
      if (head_started(qp)) {
        const SendWqeState& st = wqe_state(qp, qp.sq_head);
        if (st.is_rd_atomic && psn_diff(psn, st.first_psn) >= 0) {
          // An ACK beyond an outstanding READ or atomic: its responses were
          // lost or are late (implicit NAK, IBA 9.7.5.1.5). What came before
          // it arrived (complete_acked just completed it): progress up to
          // the READ, else its responses would all be stale behind a
          // comp_psn left at a completed SEND. Then ask again from what
          // arrived, once per gap: the ACKs of the requests resent behind
          // it must not each start another retransmission.
          progress(dev, qp, ack_limit(qp, psn_add(psn, 1)));
          if (!qp.comp_rewound) {
            qp.comp_rewound = true;
            rewind_requester(dev, qp, qp.comp_psn);
          }
          return;
        }
      }
      progress(dev, qp, psn_add(psn, 1));
      return;
    }
    case net::aeth::kRnrNak: {
      // Everything before the NAKed PSN arrived (IBA 9.7.5.2.8).
      ++dev.counters_mut().rnr_nak_received;
      ++qp.rnr_naks;
      if (psn_diff(psn, qp.comp_psn) < 0) return;  // older than what was acknowledged since
      complete_acked(dev, qp, psn_add(psn, 0xffffff));
      // Resent from the oldest PSN not acknowledged: the NAKed one, or an
      // outstanding READ or atomic before it whose responses were lost.
      progress(dev, qp, ack_limit(qp, psn));
      // The RNR NAK is the authority for `psn` until an acknowledgement
      // passes it: sequence error NAKs for the same PSN (the rest of the
      // message arriving behind the NAKed FIRST) are its echo, not new loss.
      qp.rnr_nak_psn = psn;
      qp.rnr_nak_valid = true;
      if (qp.rnr_retry != 7) {  // 7 means retry forever
        if (qp.rnr_retry_left == 0) {
          ++dev.counters_mut().rnr_retry_exceeded;
          fail_head(dev, qp, IBV_WC_RNR_RETRY_EXC_ERR);
          return;
        }
        --qp.rnr_retry_left;
      }
      rewind_requester(dev, qp, qp.comp_psn);
      qp.rnr_wait_until_ns = dev.now_ns() + uint64_t(kRnrTimerUs[syn & 0x1f]) * 1000;
      qp.retrans_deadline_ns = 0;
      return;
    }
    case net::aeth::kNak:
      break;
    default:
      return;  // reserved syndrome
  }
  complete_acked(dev, qp, psn_add(psn, 0xffffff));
  switch (syn) {
    case net::aeth::kNakPsnSeqError:
      // Go back N from the PSN the responder expects (IBA 9.7.5.2.2); what
      // came before it arrived, which is progress. The responder NAKs once
      // per gap, so a NAK for a PSN already passed, or for the gap already
      // being retried, is a duplicate or a late echo: no second retry.
      // A NAK beyond an outstanding READ or atomic goes back to that WQE.
      if (psn_diff(psn, qp.comp_psn) < 0) return;
      if (qp.rnr_nak_valid && psn == qp.rnr_nak_psn) return;  // the RNR timer decides
      progress(dev, qp, ack_limit(qp, psn));
      if (qp.comp_rewound) return;
      if (qp.retry_left == 0) {
        ++dev.counters_mut().retry_exceeded;
        fail_head(dev, qp, IBV_WC_RETRY_EXC_ERR);
        return;
      }
      --qp.retry_left;
      rewind_requester(dev, qp, qp.comp_psn);
      qp.comp_rewound = true;
      return;
    case net::aeth::kNakInvalidRequest:
      fail_head(dev, qp, IBV_WC_REM_INV_REQ_ERR);
      return;
    case net::aeth::kNakRemoteAccessError:
      fail_head(dev, qp, IBV_WC_REM_ACCESS_ERR);
      return;
    default:
      fail_head(dev, qp, IBV_WC_REM_OP_ERR);
      return;
  }
}

// Places the data of READ response `p` for the READ at `index` and records
// the progress. False if the packet is dropped or the READ failed.
bool place_read_response(Device& dev, Qp& qp, uint32_t index, const net::Packet& p, bool last) {
  const uint32_t psn = p.bth()->psn();
  const SendWqeState& st = wqe_state(qp, index);
  const abi::SendWqe& w = wqe_at(qp, index);
  const uint64_t offset = uint64_t(psn_diff(psn, st.first_psn)) * qp.mtu_bytes();
  // A full MTU until LAST, and LAST/ONLY exactly where the message ends;
  // anything else is dropped (the timer asks again), never a short success.
  if (offset + p.payload_len > st.length || (!last && p.payload_len != qp.mtu_bytes()) ||
      (last && offset + p.payload_len != st.length)) {
    ++dev.counters_mut().rx_stale_response;
    return false;
  }
  if (st.local_key_bad && p.payload_len) {  // the local key, checked now (fetch_wqe)
    fail_head(dev, qp, IBV_WC_LOC_PROT_ERR);
    return false;
  }
  if (p.payload_len && !scatter_sges(dev, *qp.owner, wqe_sges(qp, index), w.num_sge, offset,
                                     p.payload(), p.payload_len)) {
    dev.memory_fault("read response", qp.owner, wqe_sges(qp, index)[0].addr + offset, p.payload_len);
    fail_head(dev, qp, IBV_WC_LOC_PROT_ERR);
    return false;
  }
  progress(dev, qp, psn_add(psn, 1));
  return true;
}

// READ responses and atomic ACKs belong to the oldest outstanding WQE.
void on_read_or_atomic_response(Device& dev, Qp& qp, const net::Packet& p) {
  const uint32_t psn = p.bth()->psn();
  if (psn != qp.comp_psn) {
    ++dev.counters_mut().rx_stale_response;
    // Responses were lost: ask again from the gap, once per gap (the rest of
    // the burst behind it would otherwise each ask again).
    if (psn_diff(psn, qp.comp_psn) > 0 && !qp.comp_rewound) {
      qp.comp_rewound = true;
      rewind_requester(dev, qp, qp.comp_psn);
    }
    return;
  }
  // Responses are in order, so every WQE before this one is acknowledged.
  complete_acked(dev, qp, psn_add(psn, 0xffffff));
  if (!head_started(qp)) {
    ++dev.counters_mut().rx_stale_response;
    return;
  }
  const uint32_t index = qp.sq_head;
  SendWqeState& st = wqe_state(qp, index);
  const abi::SendWqe& w = wqe_at(qp, index);
  if (!st.is_rd_atomic || psn_diff(psn, st.first_psn) < 0 ||
      psn_diff(psn, psn_add(st.first_psn, st.npsn)) >= 0) {
    ++dev.counters_mut().rx_stale_response;
    return;
  }
  const net::OpcodeInfo& info = p.info();
  if (info.has(net::kHasAeth)) {
    const uint8_t syn = p.hdr<net::Aeth>(info.aeth_off)->syndrome();
    if ((syn & net::aeth::kTypeMask) != net::aeth::kAck) return on_ack(dev, qp, p);
  }
  if (info.has(net::kHasAtomicAck)) {
    if (w.opcode != IBV_WR_ATOMIC_CMP_AND_SWP && w.opcode != IBV_WR_ATOMIC_FETCH_AND_ADD) return;
    const uint64_t orig = p.hdr<net::AtomicAckEth>(info.atomicack_off)->orig;
    if (st.local_key_bad) {  // the local key, checked now (fetch_wqe)
      fail_head(dev, qp, IBV_WC_LOC_PROT_ERR);
      return;
    }
    if (!scatter_sges(dev, *qp.owner, wqe_sges(qp, index), w.num_sge, 0,
                      reinterpret_cast<const uint8_t*>(&orig), 8)) {
      dev.memory_fault("atomic response", qp.owner, wqe_sges(qp, index)[0].addr, 8);
      fail_head(dev, qp, IBV_WC_LOC_PROT_ERR);
      return;
    }
    progress(dev, qp, psn_add(psn, 1));
    complete_send_head(dev, qp, IBV_WC_SUCCESS);
    return;
  }
  const bool last = info.has(net::kLast);
  if (w.opcode == IBV_WR_ATOMIC_WRITE) {
    // Acknowledged by an RDMA READ response ONLY of no data (IBA 1.5 annex
    // A19; rxe's send_read_response_ack); anything else is not its answer.
    if (!info.has(net::kOnly) || p.payload_len) {
      ++dev.counters_mut().rx_stale_response;
      return;
    }
    progress(dev, qp, psn_add(psn, 1));
  } else if (w.opcode != IBV_WR_RDMA_READ || !place_read_response(dev, qp, index, p, last)) {
    return;
  }
  if (!last) return;
  complete_send_head(dev, qp, IBV_WC_SUCCESS);
  // An ACK that overtook this READ's (lost) responses still covers the
  // requests after it: they need not be acknowledged again.
  // It stops at the next READ or atomic, which its own responses complete.
  if (qp.acked_valid && psn_diff(qp.acked_psn, psn) > 0) {
    complete_acked(dev, qp, qp.acked_psn);
    progress(dev, qp, ack_limit(qp, psn_add(qp.acked_psn, 1)));
  }
}

}  // namespace

void completer_receive(Device& dev, Qp& qp, net::Packet& p) {
  if (qp.type != IBV_QPT_RC && qp.type != IBV_QPT_XRC_SEND) return;
  if (qp.state != IBV_QPS_RTS && qp.state != IBV_QPS_SQD) {
    ++dev.counters_mut().rx_bad_state;
    return;
  }
  // Only responses to PSNs we sent and have not retired are meaningful.
  const uint32_t psn = p.bth()->psn();
  if (psn_diff(psn, qp.comp_psn) < -1 || psn_diff(psn, qp.req_max_psn) >= 0) {
    ++dev.counters_mut().rx_stale_response;
    return;
  }
  qp.peer_heard = true;
  if (p.info().has(net::kRead) || p.info().has(net::kAtomic))
    on_read_or_atomic_response(dev, qp, p);
  else
    on_ack(dev, qp, p);
}

bool completer_timers(Device& dev, Qp& qp) {
  if (!qp.retrans_deadline_ns || dev.now_ns() < qp.retrans_deadline_ns) return false;
  if (qp.state != IBV_QPS_RTS && qp.state != IBV_QPS_SQD) {
    qp.retrans_deadline_ns = 0;
    return false;
  }
  if (!head_started(qp) && !qp.req_offset) {
    qp.retrans_deadline_ns = 0;
    return false;
  }
  // Local ACK timeout (IBA 9.7.6.1.3): retransmit from the oldest unacknowledged PSN.
  // Before the peer was ever heard from, a retry is free while the peer is
  // a QP of this engine not yet in RTR, for a while (kFirstContactGraceNs,
  // device/params.h); a peer that never answers fails in the IBA's time.
  if (!qp.peer_heard && qp.first_tx_ns && dev.now_ns() - qp.first_tx_ns < dev.first_contact_grace_ns() &&
      dev.local_peer_not_ready(qp)) {
    ++dev.counters_mut().first_contact_retries;
  } else {
    if (qp.retry_left == 0) {
      ++dev.counters_mut().retry_exceeded;
      fail_head(dev, qp, IBV_WC_RETRY_EXC_ERR);
      qp.retrans_deadline_ns = 0;
      return true;
    }
    --qp.retry_left;
  }
  rewind_requester(dev, qp, qp.comp_psn);
  qp.comp_rewound = true;  // this retry covers the gap
  qp.retrans_deadline_ns = dev.now_ns() + (4096ull << qp.timeout);
  return true;
}

}  // namespace uroce::device
