// Rendezvous offload of a TM-SRQ: a matched RNDV request (TMH + RVH) is
// pulled by the device itself. The responder hands the match over; this
// file puts an RDMA READ of the RVH's buffer on the QP's own send queue,
// into the tagged buffer, then the FIN, as mlx5 hardware does
// (rdma-core's Documentation/tag_matching.md "HW will also initiate the
// RDMA-Read data transfer and send a notification message when the data
// transfer completes"). The work goes into the engine's send sequence beside the
// user's WQEs (Qp::sq_copy): it takes no slot of the user's ring, so it runs
// with a send queue of size 0 or full, and reports nothing on the user's
// send CQ. Its completions go to the TM-SRQ's CQ:
//   match (TM_RECV, TM_MATCH, tag)            when the request has arrived,
//   data  (TM_RECV, TM_DATA_VALID, byte_len)  when the READ has landed,
// the two completions of mlx5's CONSUMED then EXPECTED CQEs (providers/mlx5
// cq.c). A READ that fails completes the tagged buffer with the READ's own
// status instead of the data completion (a bad rkey in the RVH: the peer's
// NAK makes it IBV_WC_REM_ACCESS_ERR, as mlx5_handle_error_cqe maps
// MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR), and the QP goes to the error state as
// after any failed READ (IBA 9.7.5.2.5 class C). A flush completes it
// IBV_WC_WR_FLUSH_ERR. Every ending releases the tag's handle.
#include <cstring>

#include "device/device.h"
#include "device/tag_matching.h"
#include "device/wqe.h"

namespace uroce::device {

namespace {

// Where a READ slot keeps the FIN it sends once done: after its one SGE.
uint8_t* fin_bytes(Qp& qp, uint32_t index) {
  return reinterpret_cast<uint8_t*>(wqe_sges(qp, index) + kTmMaxSge);
}
static_assert(sizeof(abi::SendWqe) + kTmMaxSge * sizeof(abi::Sge) + kFinSize <=
                  sizeof(abi::SendWqe) + 64,
              "a READ slot holds its SGE and FIN within the smallest SQ stride (device.cc)");

// Appends internal work at the end of the engine's send sequence.
uint32_t push_internal(Qp& qp, InternalWork kind) {
  const uint32_t index = qp.sq_fetched++;
  ++qp.sq_internal;
  std::memset(&wqe_at(qp, index), 0, qp.sq.stride);
  SendWqeState& st = wqe_state(qp, index);
  st = SendWqeState{};
  st.internal = kind;
  return index;
}

void push_fin(Qp& qp, const uint8_t* fin) {
  const uint32_t index = push_internal(qp, InternalWork::kRndvFin);
  abi::SendWqe& w = wqe_at(qp, index);
  w.opcode = IBV_WR_SEND;
  w.flags = IBV_SEND_INLINE;
  w.inline_len = kFinSize;
  std::memcpy(wqe_inline(qp, index), fin, kFinSize);
  SendWqeState& st = wqe_state(qp, index);
  st.length = kFinSize;
  st.npsn = 1;
}

// The tagged buffer's last completion; its handle is free again.
void complete_tagged(Device& dev, Qp& qp, uint64_t wr_id, uint32_t handle, uint32_t status,
                     uint32_t flags, uint32_t byte_len) {
  Srq* srq = dev.srq(qp.srq);
  if (!srq || !srq->tm) return;
  srq->tm->release(handle);
  abi::Cqe cqe{};
  cqe.wr_id = wr_id;
  cqe.status = status;
  cqe.opcode = IBV_WC_TM_RECV;
  cqe.wc_flags = flags;
  cqe.byte_len = byte_len;
  cqe.qp_num = qp.qpn;
  cqe.src_qp = qp.dest_qpn;
  if (status != IBV_WC_SUCCESS) cqe.vendor_err = status;
  if (!dev.complete_to(srq->cq, cqe, false) && status == IBV_WC_SUCCESS) {
    dev.post_qp_event(qp, IBV_EVENT_QP_FATAL);
    dev.qp_to_error(qp);
  }
}

}  // namespace

// A READ's room and a slot for it. A FIN replaces its READ's slot (the READ
// retires first), so the sequence never holds more than kTmInternalPerQp.
bool tm_rndv_room(const Qp& qp) {
  return qp.sq_internal_reads < kTmRndvPerQp && qp.sq_internal < kTmInternalPerQp;
}

bool tm_rndv_start(Device& dev, Qp& qp) {
  if (!tm_rndv_room(qp)) return false;
  const RecvInProgress& r = qp.resp_recv;
  const uint32_t index = push_internal(qp, InternalWork::kRndvRead);
  ++qp.sq_internal_reads;
  abi::SendWqe& w = wqe_at(qp, index);
  w.wr_id = r.wr_id;  // the tagged buffer's recv_wr_id
  w.opcode = IBV_WR_RDMA_READ;
  w.num_sge = std::min<uint32_t>(r.num_sge, kTmMaxSge);
  w.remote_addr = r.rndv_va;
  w.rkey = r.rndv_rkey;
  // The SGE as the responder translated it (owner addresses); the RVH
  // length fits it (checked at the match).
  std::memcpy(wqe_sges(qp, index), r.sge.data(), w.num_sge * sizeof(abi::Sge));
  const Tmh tmh{IBV_TMH_RNDV, r.tm_priv, r.tm_tag};
  write_fin(fin_bytes(qp, index), tmh, Rvh{r.rndv_va, r.rndv_rkey, r.rndv_len});
  SendWqeState& st = wqe_state(qp, index);
  st.length = r.rndv_len;
  st.is_rd_atomic = true;
  st.npsn = std::max<uint32_t>(1, (r.rndv_len + qp.mtu_bytes() - 1) / qp.mtu_bytes());
  st.tm_handle = r.tm_handle;
  ++dev.counters_mut().tm_rndv_reads;
  return true;
}

void tm_internal_done(Device& dev, Qp& qp, uint32_t index, uint32_t status) {
  const SendWqeState& st = wqe_state(qp, index);
  if (st.internal != InternalWork::kRndvRead) {
    // A FIN has no completion of its own: its data was reported before it
    // left. One that fails (the peer's RNR retries exceeded, its QP gone)
    // fails the QP (the caller does) with no completion to say why: the
    // owner gets an affiliated event instead (IBA 11.6.3.1).
    if (status != IBV_WC_SUCCESS) dev.post_qp_event(qp, IBV_EVENT_QP_FATAL);
    return;
  }
  if (qp.sq_internal_reads) --qp.sq_internal_reads;
  const abi::SendWqe& w = wqe_at(qp, index);
  const uint64_t wr_id = w.wr_id;
  const uint32_t handle = st.tm_handle, len = uint32_t(st.length);
  if (status != IBV_WC_SUCCESS) {
    ++dev.counters_mut().tm_rndv_errors;
    complete_tagged(dev, qp, wr_id, handle, status, 0, 0);
    return;
  }
  // The data is in the tagged buffer: the FIN goes out (copied first: it
  // may take this very slot), and the buffer's second completion.
  uint8_t fin[kFinSize];
  std::memcpy(fin, fin_bytes(qp, index), kFinSize);
  push_fin(qp, fin);
  complete_tagged(dev, qp, wr_id, handle, IBV_WC_SUCCESS, IBV_WC_TM_DATA_VALID, len);
}

void tm_internal_flushed(Device& dev, Qp& qp, uint32_t index) {
  const SendWqeState& st = wqe_state(qp, index);
  if (st.internal != InternalWork::kRndvRead) return;
  complete_tagged(dev, qp, wqe_at(qp, index).wr_id, st.tm_handle, IBV_WC_WR_FLUSH_ERR, 0, 0);
}

// Only as the send sequence is reset (RESET) or goes with its QP.
void tm_internal_drop(Device& dev, Qp& qp) {
  if (qp.resp_recv_valid && qp.resp_recv.tm_matched) {  // a tagged buffer mid-message
    complete_tagged(dev, qp, qp.resp_recv.wr_id, qp.resp_recv.tm_handle, IBV_WC_WR_FLUSH_ERR, 0, 0);
    qp.resp_recv_valid = false;
  }
  for (uint32_t i = qp.sq_head; qp.sq_internal && i != qp.sq_fetched; ++i) {
    if (wqe_state(qp, i).internal == InternalWork::kNone) continue;
    tm_internal_flushed(dev, qp, i);
    wqe_state(qp, i).internal = InternalWork::kNone;
    --qp.sq_internal;
  }
  qp.sq_internal = 0;
  qp.sq_internal_reads = 0;
}

}  // namespace uroce::device
