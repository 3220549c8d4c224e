// Tag-matching receive path (rdma-core's Documentation/tag_matching.md,
// providers/mlx5/cq.c): the first packet of a SEND on a
// QP attached to a TM-SRQ is classified by its TMH and takes the oldest
// matching tagged buffer, or a plain WQE of the SRQ, whole (mlx5's
// tag_matching.md). The rest of the message is placed by the responder.
#include <optional>

#include "device/responder.h"
#include "device/tag_matching.h"
#include "device/wqe.h"
#include "net/opcode.h"

namespace uroce::device {

namespace {

// Tag matching (rdma-core's Documentation/tag_matching.md): the receive
// becomes the matched tagged buffer, placed without the TMH, completed with
// recv_wr_id (mlx5 cq.c), MATCH | DATA_VALID, the tag and the app context.
void take_tagged_buffer(Qp& qp, const Srq& srq, const TagList::Match& m, const Tmh& tmh) {
  RecvInProgress& r = qp.resp_recv;
  r.wr_id = m.buf.recv_wr_id;
  r.num_sge = m.buf.num_sge;
  r.sge[0] = m.buf.sge;
  r.from_srq = true;
  r.discard = false;
  r.srq = qp.srq;
  r.cq = srq.cq;
  r.owner = srq.owner;
  r.tm_opcode = IBV_WC_TM_RECV;
  r.tm_matched = true;
  r.tm_handle = m.handle;
  r.tm_tag = tmh.tag;
  r.tm_priv = tmh.app_ctx;
  r.tm_status = IBV_WC_SUCCESS;
  r.tm_skip = kTmhSize;
  r.tm_flags = IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID;
  r.tm_rndv = false;
}

// A matched RNDV. The device pulls the data itself (tm_rendezvous.cc) when
// the RVH's length fits the tagged buffer: the request places nothing, its
// end queues the READ. Otherwise (a buffer shorter than the RVH length, a
// request without a whole RVH, no room for more device reads on the QP)
// software gets TMH + RVH in the tagged buffer and does the READ and the FIN:
// one completion, IBV_WC_TM_RNDV_INCOMPLETE with MATCH | DATA_VALID (mlx5
// cq.c CONSUMED_MSG_SW_RDNV).
void plan_rendezvous(Device& dev, Qp& qp, const TagList::Match& m, const net::Packet& p) {
  RecvInProgress& r = qp.resp_recv;
  const std::optional<Rvh> rvh = parse_rvh(p.payload(), p.payload_len);
  const uint32_t room = m.buf.num_sge ? m.buf.sge.length : 0;
  if (rvh && rvh->len <= room && tm_rndv_room(qp)) {
    r.tm_rndv = true;
    r.rndv_va = rvh->va;
    r.rndv_rkey = rvh->rkey;
    r.rndv_len = rvh->len;
    return;
  }
  ++dev.counters_mut().tm_rndv_software;
  r.tm_skip = 0;
  r.tm_status = IBV_WC_TM_RNDV_INCOMPLETE;
}

// The match of a tagged buffer whose data lands later (a multi-packet eager
// message, a rendezvous): reported at once, with the tag; the data gets a
// completion of its own, DATA_VALID only (rdma-core Documentation/tag_matching.md, mlx5 cq.c
// CONSUMED then EXPECTED).
void report_match(Device& dev, Qp& qp) {
  RecvInProgress& r = qp.resp_recv;
  abi::Cqe cqe{};
  cqe.wr_id = r.wr_id;
  cqe.opcode = IBV_WC_TM_RECV;
  cqe.wc_flags = IBV_WC_TM_MATCH;
  cqe.qp_num = qp.qpn;
  cqe.src_qp = qp.dest_qpn;
  cqe.tm_tag = r.tm_tag;
  cqe.tm_priv = r.tm_priv;
  dev.complete_to(r.cq, cqe, false);
  r.tm_flags = IBV_WC_TM_DATA_VALID;
}

}  // namespace

// The SEND's first bytes are a TMH. A tagged message (EAGER, RNDV) takes the
// oldest eligible tagged buffer it matches; anything else takes a plain WQE
// of the SRQ, whole. True if a target is held.
bool acquire_tm_target(Device& dev, Qp& qp, Srq& srq, const net::Packet& p) {
  const std::optional<Tmh> tmh = parse_tmh(p.payload(), p.payload_len);
  // FIN, unknown opcodes and messages shorter than a TMH are not taggable:
  // delivered as NO_TAG (mlx5 reports a FIN that way: UCX's
  // src/uct/ib/rc/accel/rc_mlx5.inl looks for it on its NO_TAG path).
  const bool tagged = tmh && (tmh->opcode == IBV_TMH_EAGER || tmh->opcode == IBV_TMH_RNDV);
  if (tagged) {
    if (std::optional<TagList::Match> m = srq.tm->match(tmh->tag)) {
      ++dev.counters_mut().tm_matched;
      take_tagged_buffer(qp, srq, *m, *tmh);
      if (tmh->opcode == IBV_TMH_RNDV) plan_rendezvous(dev, qp, *m, p);
      RecvInProgress& r = qp.resp_recv;
      qp.resp_recv_valid = true;
      uint32_t st = translate_recv_sges(dev, r, srq.pd);
      if (st == IBV_WC_SUCCESS && r.tm_rndv && r.rndv_len > recv_capacity(r))
        st = overflow_status(r, r.rndv_len);  // the buffer's MR ends before the RVH length
      if (st != IBV_WC_SUCCESS) {
        complete_recv(dev, qp, st, IBV_WC_RECV, 0, nullptr, false);
        nak_and_fail(dev, qp, p.bth()->psn(), net::aeth::kNakRemoteOpError, false);
        return false;
      }
      if (r.tm_rndv || (tmh->opcode == IBV_TMH_EAGER && !p.info().has(net::kLast))) report_match(dev, qp);
      return true;
    }
  }
  // No plain WQE: RNR NAK, and the retried message is classified again.
  if (!acquire_recv_wqe(dev, qp, p, IBV_WC_RECV)) return false;
  RecvInProgress& r = qp.resp_recv;
  if (tagged) {
    ++dev.counters_mut().tm_unexpected;
    r.tm_opcode = IBV_WC_TM_RECV;  // unexpected: no MATCH, no DATA_VALID (mlx5 cq.c)
    if (srq.tm->count_unexpected()) {
      ++dev.counters_mut().tm_sync_requests;
      r.tm_flags = IBV_WC_TM_SYNC_REQ;
    }
  } else {
    ++dev.counters_mut().tm_no_tag;
    r.tm_opcode = IBV_WC_TM_NO_TAG;
  }
  return true;
}

}  // namespace uroce::device
