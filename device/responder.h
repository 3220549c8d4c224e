// The responder's receive-WQE helpers shared by its two receive paths:
// plain RQ/SRQ receives (device/responder.cc) and the tag-matching SRQ's
// (device/tm_receive.cc), the receive WQEs themselves in device/recv_wqe.cc.
// Like rxe's rxe_loc.h: internal to device/.
#pragma once
#include <cstdint>

#include "device/device.h"

namespace uroce::device {

// A NAK that ends the connection; `raise_event` when no receive completion
// reports the error (IBA C9-222.1.1).
void nak_and_fail(Device& dev, Qp& qp, uint32_t psn, uint8_t syndrome, bool raise_event = true);
// Holds a receive WQE for the message `p` starts, or handles why there is
// none (RNR NAK, a dropped UC message, an error). True if one is held.
bool acquire_recv_wqe(Device& dev, Qp& qp, const net::Packet& p, uint32_t wc_opcode);
// take_recv_wqe's status for a receive queue whose producer index is corrupt:
// no WQE to complete, the QP is fatal.
constexpr uint32_t kRecvQueueBroken = ~0u;
// Takes the next receive WQE into qp.resp_recv, from the QP's RQ, its SRQ or
// (XRC) the SRQ the request names, translating each SGE. Returns false if
// none is posted; sets *status for a WQE that cannot be used.
bool take_recv_wqe(Device& dev, Qp& qp, const net::Packet& p, uint32_t* status);
// The SRQ an XRC request names in its XRCETH, if it lives in the target QP's
// domain (XRC annex: otherwise an invalid request); nullptr if not.
Srq* xrc_target_srq(Device& dev, const Qp& qp, const net::Packet& p);
// Bytes the receive being filled can take (the sum of its SGEs).
inline uint64_t recv_capacity(const RecvInProgress& r) {
  uint64_t total = 0;
  for (uint32_t i = 0; i < r.num_sge; ++i) total += r.sge[i].length;
  return total;
}
// The status of a message of `need` bytes that does not fit its receive.
uint32_t overflow_status(const RecvInProgress& r, uint64_t need);
// Completes the receive WQE being filled and frees its RQ slot.
void complete_recv(Device& dev, Qp& qp, uint32_t status, uint32_t opcode, uint32_t byte_len,
                   const net::Packet* p, bool solicited);

// Tag matching (device/tm_receive.cc): the first packet of a SEND reaching a
// QP on a TM-SRQ takes a tagged buffer or a plain WQE of the SRQ. True if a
// target is held.
bool acquire_tm_target(Device& dev, Qp& qp, Srq& srq, const net::Packet& p);

}  // namespace uroce::device
