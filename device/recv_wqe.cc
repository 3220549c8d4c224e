// Receive WQEs: copied out of their rings (untrusted shared memory), their
// SGEs checked and translated, and completed. One fetch for every receive
// queue the device has (RQs, SRQs, XRC SRQs, raw packet QPs and WQs); the
// responder (device/responder.cc) and tag matching (device/tm_receive.cc)
// fill what it takes.
#include <cstring>

#include "device/device.h"
#include "device/mlx5_rq.h"
#include "device/mlx5_srq.h"
#include "device/responder.h"
#include "net/opcode.h"

namespace uroce::device {

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
  if (hdr.num_sge == 1) [[likely]]
    std::memcpy(r.sge.data(), slot + sizeof(abi::RecvWqe), sizeof(abi::Sge));  // a fixed-size copy, inlined
  else
    std::memcpy(r.sge.data(), slot + sizeof(abi::RecvWqe), hdr.num_sge * sizeof(abi::Sge));
  return IBV_WC_SUCCESS;
}

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
  // mlx5's formats (mlx5 mode, after mlx5dv_init_obj): the SRQ's linked
  // list, or the QP's own queue.
  const bool mlx5 = srq ? bool(srq->mlx5) : qp.rq_mlx5;
  const uint32_t waiting = !mlx5 ? ring.hdr->producer.load(std::memory_order_acquire) - head
                           : srq ? mlx5_srq_waiting(*srq)
                                 : mlx5_rq_waiting(qp);
  if (waiting == 0) return false;
  if (waiting > (mlx5 && !srq ? qp.mlx5->rq_cnt : ring.size())) {
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
  uint32_t fetched = IBV_WC_SUCCESS;
  if (!mlx5) fetched = copy_recv_wqe(dev, ring, head, max_sge, r);
  else if (srq) fetched = mlx5_take_srq_wqe(dev, *srq, r);
  else mlx5_take_rq_wqe(qp, r);
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

uint64_t recv_wqe_id(const RingView& ring, uint32_t index) {
  uint64_t wr_id;  // read once: the client may be rewriting the slot
  std::memcpy(&wr_id, ring.slot(index) + offsetof(abi::RecvWqe, wr_id), sizeof(wr_id));
  return wr_id;
}

namespace {

// A receive SGE through an indirect mkey: it keeps its offset (the scatter
// walks the layout, Device::mkey_spans) and is cut where the layout ends, as
// a region's SGE where its region does. -1 if it names no mkey it may use,
// 1 if it was cut (it ends the list), else 0. Out of line: a region's SGE
// pays nothing for it.
[[gnu::noinline]] int mkey_recv_sge(const Device& dev, RecvInProgress& r, uint32_t i, uint32_t pd) {
  uint64_t room;
  if (!is_mkey_key(r.sge[i].lkey) ||
      dev.check_mkey(r.sge[i].lkey, pd, r.sge[i].addr, 0, IBV_ACCESS_LOCAL_WRITE, &room) != Device::MrCheck::kOk)
    return -1;
  if (room >= r.sge[i].length) return 0;
  r.sge[i].length = uint32_t(room);
  r.num_sge = i + 1;
  r.mr_limited = true;
  return 1;
}

}  // namespace

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
    if (dev.check_mr(r.sge[i].lkey, pd, r.sge[i].addr, 0, IBV_ACCESS_LOCAL_WRITE, &mr) !=
        Device::MrCheck::kOk) {
      const int m = mkey_recv_sge(dev, r, i, pd);
      if (m < 0) return IBV_WC_LOC_PROT_ERR;
      if (m > 0) break;
      continue;
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


Srq* xrc_target_srq(Device& dev, const Qp& qp, const net::Packet& p) {
  const net::OpcodeInfo& info = p.info();
  if (!info.has(net::kHasXrcEth)) return nullptr;
  Srq* srq = dev.srq(p.hdr<net::XrcEth>(info.xrceth_off)->srqn & 0xffffff);
  if (!srq || srq->type != IBV_SRQT_XRC || srq->xrcd != qp.xrcd) return nullptr;
  return srq;
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
    const net::OpcodeInfo& info = p->info();
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

}  // namespace uroce::device
