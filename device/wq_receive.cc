// A frame given to a receive WQ (by an RSS QP): placed in the WQ's next
// receive WQE as the WQ's flags say (man ibv_create_wq(3); rdma-core
// providers/mlx5/cq.c), or held for delay
// drop, or dropped and counted. Datapath: no allocation (held frames take
// buffers from the packet pool), no exceptions.
#include <algorithm>
#include <cstring>

#include "device/device.h"
#include "device/mlx5_rq.h"
#include "device/wqe.h"
#include "net/icrc.h"

namespace uroce::device {

namespace {

constexpr size_t kMacBytes = 12;
constexpr size_t kVlanTagBytes = 4;
constexpr size_t kFcsBytes = 4;

}  // namespace

ShapedFrame shape_received_frame(uint32_t flags, const uint8_t* frame, uint32_t len, uint8_t* out) {
  ShapedFrame p;
  const bool tagged = len >= kMacBytes + kVlanTagBytes + 2 && frame[12] == 0x81 && frame[13] == 0x00;
  if ((flags & IBV_WQ_FLAGS_CVLAN_STRIPPING) && tagged) {
    // The 802.1Q tag leaves the data; its TCI goes to the completion
    // (man ibv_create_wq; mlx5_cq_read_wc_cvlan).
    p.cvlan = uint16_t(frame[14] << 8 | frame[15]);
    std::memcpy(out, frame, kMacBytes);
    std::memcpy(out + kMacBytes, frame + kMacBytes + kVlanTagBytes, len - kMacBytes - kVlanTagBytes);
    p.len = len - uint32_t(kVlanTagBytes);
  } else {
    std::memcpy(out, frame, len);
    p.len = len;
  }
  if (flags & IBV_WQ_FLAGS_SCATTER_FCS) {
    // The port hands frames without their FCS: the device computes the one
    // the frame had on the wire (tag included), little-endian as 802.3
    // transmits it, and counts it in byte_len (DPDK subtracts it).
    const uint32_t fcs = net::crc32_ieee(frame, len);
    for (size_t i = 0; i < kFcsBytes; ++i) out[p.len + i] = uint8_t(fcs >> (8 * i));
    p.len += uint32_t(kFcsBytes);
  }
  return p;
}

bool raw_qp_rx_flags(uint32_t create_flags, uint32_t* wq_flags) {
  static constexpr struct {
    uint32_t qp_flag, wq_flag;
  } kMap[] = {
      {IBV_QP_CREATE_CVLAN_STRIPPING, IBV_WQ_FLAGS_CVLAN_STRIPPING},
      {IBV_QP_CREATE_SCATTER_FCS, IBV_WQ_FLAGS_SCATTER_FCS},
      {IBV_QP_CREATE_PCI_WRITE_END_PADDING, IBV_WQ_FLAGS_PCI_WRITE_END_PADDING},
  };
  *wq_flags = 0;
  for (const auto& m : kMap)
    if (create_flags & m.qp_flag) {
      *wq_flags |= m.wq_flag;
      create_flags &= ~m.qp_flag;
    }
  return create_flags == 0;
}

// PCI write end padding: zeros from the end of the frame to the next
// 64-byte boundary of the buffer, never past the SGE the frame ends in.
void pad_receive_end(const Device& dev, const Owner& owner, const abi::Sge* sge, uint32_t num_sge, uint32_t len) {
  static const uint8_t kZeros[kEndPaddingAlign] = {};
  uint64_t left = len;
  for (uint32_t i = 0; i < num_sge; ++i) {
    if (left > sge[i].length) {
      left -= sge[i].length;
      continue;
    }
    const uint64_t end = sge[i].addr + left;
    const uint64_t line_end = (end + kEndPaddingAlign - 1) & ~uint64_t(kEndPaddingAlign - 1);
    const uint64_t pad = std::min<uint64_t>(line_end - end, sge[i].length - left);
    if (pad) {
      abi::Sge rest = sge[i];
      rest.addr = end;
      rest.length = uint32_t(pad);
      scatter_sges(dev, owner, &rest, 1, 0, kZeros, uint32_t(pad));
    }
    return;
  }
}

void Device::wq_receive(Wq& w, const uint8_t* frame, uint32_t len, bool has_tag, uint32_t tag) {
  if (w.state != IBV_WQS_RDY) {
    // Only RDY receives. A frame steered to a WQ in RESET or
    // ERR is dropped at once, delay drop or not, as mlx5 does: its delay drop
    // holds frames only while an RQ's WQEs are depleted (IB/mlx5 "dropless
    // RQ", kernel commit 03404e8ae652), and the netdev steers traffic to a
    // drop RQ when it is down, moved to RDY only so that its out_of_buffer
    // counter counts them (mlx5e_open_drop_rq: "rx_if_down_packets won't be
    // counted" otherwise): an RQ not in RDY drops them, holding nothing.
    ++w.not_ready_drops;
    ++counters_.wq_rx_not_ready;
    return;
  }
  const uint32_t prod = w.posted();
  // Held frames go first: a later frame may not overtake them.
  if (w.held_count == 0 && prod != w.head) {
    place_in_wq(w, frame, len, has_tag, tag);
    return;
  }
  net::Packet* p = nullptr;
  if ((w.flags & IBV_WQ_FLAGS_DELAY_DROP) && w.held_count < kDelayDropFrames && (p = alloc_packet())) {
    std::memcpy(p->data, frame, len);
    p->len = len;
    HeldFrame& h = w.held[(w.held_first + w.held_count++) % kDelayDropFrames];
    h = {p, tag, has_tag, now_ns_ + delay_drop_timeout_ns_};
    mark_busy(uint32_t(w.wqn - kWqnBase));
    return;
  }
  ++w.no_wqe_drops;
  ++counters_.wq_rx_no_recv;
}

void Device::place_in_wq(Wq& w, const uint8_t* frame, uint32_t len, bool has_tag, uint32_t tag) {
  const uint32_t prod = w.posted();
  if (prod - w.head > w.capacity()) {  // a corrupt producer: nothing posted to trust
    ++counters_.bad_wqes;
    ++w.not_ready_drops;
    ++counters_.wq_rx_not_ready;
    wq_fatal(w);
    return;
  }
  RecvInProgress r{};
  r.cq = w.cq;
  r.owner = w.owner;
  uint32_t status = IBV_WC_SUCCESS;
  if (w.mlx5) [[unlikely]]
    mlx5_take_recv_wqe(w.mlx5->wqes, w.mlx5->cnt, w.mlx5->stride, w.head, r);
  else
    status = copy_recv_wqe(*this, w.ring, w.head, w.max_sge, r);
  if (status == IBV_WC_SUCCESS) status = translate_recv_sges(*this, r, w.pd);
  abi::Cqe cqe{};
  cqe.wr_id = r.wr_id;
  cqe.opcode = IBV_WC_RECV;
  cqe.qp_num = w.wqn;  // the WQ's number, as in mlx5's CQE
  alignas(64) uint8_t out[net::kFrameCapacity + kFcsBytes];
  ShapedFrame placed;
  if (status == IBV_WC_SUCCESS) {
    placed = shape_received_frame(w.flags, frame, std::min<uint32_t>(len, net::kFrameCapacity), out);
    uint64_t room = 0;
    for (uint32_t i = 0; i < r.num_sge; ++i) room += r.sge[i].length;
    if (placed.len > room) {
      ++counters_.raw_rx_too_long;
      status = r.mr_limited && placed.len <= r.declared_len ? IBV_WC_LOC_PROT_ERR : IBV_WC_LOC_LEN_ERR;
    } else if (!scatter_sges(*this, *r.owner, r.sge.data(), r.num_sge, 0, out, placed.len)) {
      memory_fault("wq receive", r.owner, r.sge[0].addr, placed.len);
      status = IBV_WC_LOC_PROT_ERR;
    } else if (w.flags & IBV_WQ_FLAGS_PCI_WRITE_END_PADDING) {
      pad_receive_end(*this, *r.owner, r.sge.data(), r.num_sge, placed.len);
    }
  }
  cqe.status = status;
  if (status == IBV_WC_SUCCESS) {
    cqe.byte_len = placed.len;
    cqe.flow_tag = has_tag ? tag : 0;
    cqe.cvlan = placed.cvlan;
    ++w.received;
    ++counters_.wq_rx_frames;
  } else {
    cqe.vendor_err = status;
    ++counters_.local_errors;
    ++w.errors;
  }
  ++w.head;
  w.consumed(w.head);
  // A receive that failed (bad SGE, buffer too short) or whose completion
  // found no room takes the WQ to ERR, as an error CQE does an mlx5 RQ.
  if (!complete_to(w.cq, cqe, false) || status != IBV_WC_SUCCESS) wq_fatal(w);
}

// Delay drop: held frames take receives as they are posted, in order; those
// whose time is up are dropped and counted (mlx5's firmware drops the
// stalled packets when its timeout fires).
bool Device::release_held(Wq& w) {
  bool work = false;
  while (w.held_count) {
    const HeldFrame h = w.held[w.held_first];
    const bool posted = w.state == IBV_WQS_RDY && w.posted() != w.head;
    if (!posted && now_ns_ < h.expires_ns) break;
    // Off the queue before it is placed: a failed receive empties the rest.
    w.held[w.held_first] = HeldFrame{};
    w.held_first = (w.held_first + 1) % kDelayDropFrames;
    --w.held_count;
    if (posted) {
      place_in_wq(w, h.p->data, h.p->len, h.has_tag, h.tag);
    } else {
      ++w.delay_drop_expired;
      ++counters_.wq_delay_drop_expired;
    }
    free_packet(h.p);
    work = true;
  }
  return work;
}

// Held frames of a WQ leaving RDY (or destroyed): dropped; counted as
// frames a WQ not in RDY dropped when `count`.
void Device::drop_held(Wq& w, bool count) {
  for (; w.held_count; --w.held_count) {
    HeldFrame& h = w.held[w.held_first];
    free_packet(h.p);
    h = HeldFrame{};
    if (count) {
      ++w.not_ready_drops;
      ++counters_.wq_rx_not_ready;
    }
    w.held_first = (w.held_first + 1) % kDelayDropFrames;
  }
}

void Device::mark_busy(uint32_t handle) {
  if (std::find(busy_wqs_.begin(), busy_wqs_.end(), handle) == busy_wqs_.end()) busy_wqs_.push_back(handle);
}

uint64_t Device::next_wq_deadline_ns() const {
  uint64_t next = 0;
  for (uint32_t h : busy_wqs_) {
    const Wq* w = wqs_.get(h);
    if (!w || !w->held_count) continue;
    uint64_t t = w->held[w->held_first].expires_ns;
    // A program posts to an mlx5-format WQ by its doorbell record, which
    // wakes no one: a sleeping engine looks for its WQEs every millisecond.
    if (w->mlx5) t = std::min(t, now_ns_ + kMlx5ArmLookNs);
    if (!next || t < next) next = t;
  }
  return next;
}

}  // namespace uroce::device
