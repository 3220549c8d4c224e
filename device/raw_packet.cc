// Raw packet QPs (IBV_QPT_RAW_PACKET): whole Ethernet frames from a send WQE
// to the port, and frames that steering rules give a receive target placed
// whole in its next receive WQE (rdma-core's tests/test_flow.py compares
// them byte for byte). The frame leaves through
// the device's internal switch: local rules first (device/flow_steering.h),
// then the engine itself when it is addressed to the engine's MAC, else the
// wire. Datapath: no exceptions, no allocation.
#include <cstring>

#include "device/device.h"
#include "device/wqe.h"

namespace uroce::device {

namespace {

constexpr size_t kVlanEthOverhead = 18;  // Ethernet header + one 802.1Q tag

bool is_engine_roce(const net::FrameFields& f, const std::array<uint8_t, 6>& mac) {
  return (f.protocols & abi::kFlowUdp) && f.key.dst_port == __builtin_bswap16(net::kRoceV2Port) &&
         std::memcmp(f.key.dst_mac, mac.data(), 6) == 0;
}

}  // namespace

uint32_t Device::max_raw_frame() const {
  const size_t mtu = wire_ ? wire_->mtu() : net::kMaxMtu;
  return uint32_t(std::min(mtu + kVlanEthOverhead, net::kFrameCapacity));
}

// ---- send ----------------------------------------------------------------

bool raw_send_next(Device& dev, Qp& qp) {
  const uint32_t index = qp.sq_next;
  const abi::SendWqe& w = wqe_at(qp, index);
  SendWqeState& st = wqe_state(qp, index);
  net::Packet* p = dev.alloc_packet();
  if (!p) [[unlikely]] return false;  // counted; requester_run checked tx_ready() first
  st.started = true;
  const uint32_t len = uint32_t(st.length);
  bool ok = true;
  if (w.flags & IBV_SEND_INLINE)
    std::memcpy(p->data, wqe_inline(qp, index), len);
  else
    ok = gather_sges(dev, *qp.owner, wqe_sges(qp, index), w.num_sge, 0, p->data, len);
  if (!ok) {
    dev.memory_fault("raw send gather", qp.owner, w.num_sge ? wqe_sges(qp, index)[0].addr : 0, len);
    st.status = IBV_WC_LOC_PROT_ERR;
    dev.free_packet(p);
    return true;
  }
  p->len = len;
  // IBV_SEND_IP_CSUM: the device fills the IPv4 and TCP/UDP checksums
  // (IBV_DEVICE_RAW_IP_CSUM; mlx5 sets the WQE's cs flags).
  if (w.flags & IBV_SEND_IP_CSUM) net::fill_ipv4_l4_checksums(p->data, len, net::frame_fields(p->data, len));
  ++qp.tx_packets;
  if (qp.rate_limit_kbps) {
    // The frame's time on a link of rate_limit kb/s (bits / (kbps * 1000) s),
    // counted from when the last one ended; an idle QP may catch up by a
    // short burst, since the engine wakes up later than it asks when it sleeps.
    const uint64_t now = dev.now_ns();
    const uint64_t start = std::max(qp.pace_next_ns, now > kPaceBurstNs ? now - kPaceBurstNs : 0);
    qp.pace_next_ns = start + uint64_t(len) * 8'000'000 / qp.rate_limit_kbps;
  }
  dev.transmit_raw(qp, p);
  return true;
}

void Device::transmit_raw(Qp& qp, net::Packet* p) {
  ++counters_.raw_tx_frames;
  if (!port_active()) {
    ++counters_.tx_port_down;
    pool_.put(p);
    return;
  }
  const net::FrameFields f = net::frame_fields(p->data, p->len);
  const bool to_engine = std::memcmp(f.key.dst_mac, config_.mac.data(), 6) == 0;
  FlowSteering::Steered s = FlowSteering::Steered::kPass;
  if (steering_.active()) {
    const FlowTarget from{FlowTarget::Kind::kQp, qp.qpn};
    // A frame no rule takes leaves by the port; to the engine's own MAC the
    // port is the engine, whose leftovers the default rules take.
    s = steering_.steer(f, &from, to_engine && !is_engine_roce(f, config_.mac),
                        [&](const Flow& r) { deliver_raw(r, *p, f); });
    if (s == FlowSteering::Steered::kDropped) ++counters_.flow_dropped;
    if (s == FlowSteering::Steered::kTrapped) ++counters_.flow_trapped;
  }
  // A unicast frame a local rule took stays inside, as a NIC's switch keeps
  // traffic between its own functions; multicast also leaves by the port.
  if (s == FlowSteering::Steered::kDropped || (s == FlowSteering::Steered::kTrapped && !f.multicast)) {
    pool_.put(p);
    return;
  }
  if (to_engine) {
    // The engine's own MAC: received by the engine as from the wire (every
    // check applies: the frame is the application's), already steered.
    p->checksummed = true;
    p->steered = true;
    return emit(p, PortId::kLoopback);
  }
  if (!wire_) {
    if (s == FlowSteering::Steered::kPass) ++counters_.raw_tx_no_port;  // nobody got it
    pool_.put(p);
    return;
  }
  ++counters_.tx_packets;
  capture(*p);
  wire_->send(p, pool_);
}

// ---- receive -------------------------------------------------------------

FlowSteering::Steered Device::steer_received(const net::Packet& p) {
  const net::FrameFields f = net::frame_fields(p.data, p.len);
  const FlowSteering::Steered s =
      steering_.steer(f, nullptr, !is_engine_roce(f, config_.mac),
                      [&](const Flow& r) { deliver_raw(r, p, f); });
  if (s == FlowSteering::Steered::kDropped) ++counters_.flow_dropped;
  if (s == FlowSteering::Steered::kTrapped) ++counters_.flow_trapped;
  return s;
}

void Device::sniff_sent(const net::Packet& p) {
  const net::FrameFields f = net::frame_fields(p.data, p.len);
  steering_.sniff([&](const Flow& r) { deliver_raw(r, p, f); });
}

void Device::deliver_raw(const Flow& rule, const net::Packet& p, const net::FrameFields& f) {
  switch (rule.target.kind) {
    case FlowTarget::Kind::kQp:
      if (Qp* q = qp(rule.target.id)) raw_receive(*this, *q, p.data, p.len, f, rule);
      break;
    case FlowTarget::Kind::kRss:
      if (Qp* q = qp(rule.target.id); q && q->rss) rss_deliver(*q, p, f, rule);
      break;
  }
}

void raw_receive(Device& dev, Qp& qp, const uint8_t* frame, uint32_t len,
                 const net::FrameFields& f, const Flow& rule) {
  Counters& c = dev.counters_mut();
  if (qp.state != IBV_QPS_RTR && qp.state != IBV_QPS_RTS) {
    ++c.raw_rx_bad_state;
    return;
  }
  const uint32_t prod = qp.rq.hdr->producer.load(std::memory_order_acquire);
  if (prod == qp.rq_head) {
    ++c.raw_rx_no_recv;
    return;
  }
  if (prod - qp.rq_head > qp.rq.size()) {  // a corrupt producer: IBA 11.6.2
    ++c.bad_wqes;
    dev.post_qp_event(qp, IBV_EVENT_QP_FATAL);
    dev.qp_to_error(qp);
    return;
  }
  RecvInProgress& r = qp.resp_recv;
  r = RecvInProgress{};
  r.cq = qp.recv_cq;
  r.owner = qp.owner;
  uint32_t status = copy_recv_wqe(dev, qp.rq, qp.rq_head, qp.caps.max_recv_sge, r);
  if (status == IBV_WC_SUCCESS) status = translate_recv_sges(dev, r, qp.pd);
  abi::Cqe cqe{};
  cqe.wr_id = r.wr_id;
  cqe.opcode = IBV_WC_RECV;
  cqe.qp_num = qp.qpn;
  // The QP's receive flags shape the frame as a WQ's do (device/wq_receive.cc).
  alignas(64) uint8_t shaped[net::kFrameCapacity + 4];
  ShapedFrame placed{len, 0};
  const uint8_t* data = frame;
  if (qp.raw_rx_flags && status == IBV_WC_SUCCESS) {
    placed = shape_received_frame(qp.raw_rx_flags, frame, std::min<uint32_t>(len, net::kFrameCapacity), shaped);
    data = shaped;
  }
  if (status == IBV_WC_SUCCESS) {
    uint64_t room = 0;
    for (uint32_t i = 0; i < r.num_sge; ++i) room += r.sge[i].length;
    if (placed.len > room) {
      ++c.raw_rx_too_long;
      status = r.mr_limited && placed.len <= r.declared_len ? IBV_WC_LOC_PROT_ERR : IBV_WC_LOC_LEN_ERR;
    } else if (!scatter_sges(dev, *r.owner, r.sge.data(), r.num_sge, 0, data, placed.len)) {
      dev.memory_fault("raw receive", r.owner, r.sge[0].addr, placed.len);
      status = IBV_WC_LOC_PROT_ERR;
    } else if (qp.raw_rx_flags & IBV_WQ_FLAGS_PCI_WRITE_END_PADDING) {
      pad_receive_end(dev, *r.owner, r.sge.data(), r.num_sge, placed.len);
    }
  }
  cqe.status = status;
  if (status == IBV_WC_SUCCESS) {
    cqe.byte_len = placed.len;
    cqe.cvlan = placed.cvlan;
    cqe.flow_tag = rule.has_tag ? rule.tag : 0;
    if (net::ipv4_l4_checksums_ok(frame, len, f)) cqe.wc_flags |= IBV_WC_IP_CSUM_OK;
    ++qp.rx_packets;
    ++c.raw_rx_frames;
  } else {
    cqe.vendor_err = status;
    ++c.local_errors;
  }
  ++qp.rq_head;
  qp.rq.hdr->consumer.store(qp.rq_head, std::memory_order_release);
  if (!dev.complete_to(qp.recv_cq, cqe, false)) {
    dev.post_qp_event(qp, IBV_EVENT_QP_FATAL);
    dev.qp_to_error(qp);
    return;
  }
  if (status != IBV_WC_SUCCESS) dev.qp_to_error(qp);  // a receive error fails the QP (IBA 10.8.3.1)
}

}  // namespace uroce::device
