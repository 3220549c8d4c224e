// The device's poll loop and packet plumbing: requesters, ingress dispatch,
// responders, timers. Datapath: no exceptions, no allocation once warm.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "device/device.h"

namespace uroce::device {

net::Packet* Device::new_packet(Qp& qp, uint8_t opcode, uint32_t psn, bool ack_req) {
  net::Packet* p = alloc_packet();
  if (!p) [[unlikely]] return nullptr;  // counted; senders check tx_ready() first
  // Laid out for the QP's path when it is known (IPv6, VLAN: no headers to
  // move when it is finished), else as IPv4 and moved then.
  if (qp.path.generation == path_generation_ && qp.path.kind != PathKind::kNone) [[likely]]
    net::begin_roce_packet(*p, opcode, qp.path.route);
  else
    net::begin_roce_packet(*p, opcode);
  net::Bth* bth = p->bth();
  bth->pkey = kDefaultPkey;
  bth->dest_qp = qp.dest_qpn;
  bth->ack_psn = (psn & net::Bth::kPsnMask) | (ack_req ? net::Bth::kAckReq : 0);
  return p;
}

void Device::dispatch(net::Packet* p, bool check_icrc) {
  ++counters_.rx_packets;
  // A loopback frame this engine framed, with no checksum to check (no
  // capture, no fault injector): its layout is the builder's, not read back.
  const bool trusted = p->framed && !check_icrc;
  if (!trusted && net::parse_roce_packet(*p, check_icrc) != net::ParseError::kOk) {
    ++counters_.rx_parse_errors;
    return;
  }
  if (p->bth()->qpn() == kMulticastQpn) [[unlikely]] {
    const net::Ipv6Addr dgid = net::roce_dst_gid(*p);
    if (is_multicast_gid(dgid.data())) return deliver_multicast(*p, dgid.data());
  }
  if (check_icrc && !is_local_gid(net::roce_dst_gid(*p).data())) {  // from the wire: ours only
    ++counters_.rx_not_for_us;
    return;
  }
  if (p->bth()->qpn() == kGsiQpn) [[unlikely]]
    return gsi_receive(*p);
  Qp* q = qp(p->bth()->qpn());
  if (!q) {
    ++counters_.rx_no_qp;
    return;
  }
  ++q->rx_packets;
  // DC requests go to their DCT's dispatcher; a DCT's transport is DC's, so
  // an RC request to it fails the responder's transport check, and a DCI's
  // RC responses go to its completer as any RC QP's.
  const uint32_t flags = p->info().flags;
  if (flags & net::kHasDcEth) [[unlikely]]
    return dc_receive(*q, *p);
  if (flags & net::kRequest)
    responder_receive(*this, *q, *p);
  else
    completer_receive(*this, *q, *p);
}

bool Device::poll_rx() {
  net::Packet* burst[kRxBurst];
  const size_t n = loopback_.rx_burst(burst, kRxBurst);
  // Loopback frames were built by this engine, with checksums only when a
  // capture or the fault injector needed them (send_packet): check those.
  for (size_t i = 0; i < n; ++i) {
    net::Packet* p = burst[i];
    // Flow steering sees the port's frames first (no rule: one branch).
    if (steering_.active() && !p->steered) [[unlikely]] {
      if (steer_received(*p) != FlowSteering::Steered::kPass) {
        pool_.put(p);
        continue;
      }
    }
    dispatch(p, p->checksummed);
    pool_.put(p);
  }
  return n != 0 || poll_wire_rx();
}

bool Device::poll_requesters() {
  bool work = false;
  for (size_t i = 0; i < active_qps_.size(); ++i) {
    Qp& q = *active_qps_[i];
    work |= responder_run(*this, q);
    work |= requester_run(*this, q);
  }
  return work;
}

bool Device::poll_timers() {
  bool work = false;
  for (Qp* q : active_qps_) work |= completer_timers(*this, *q);
  return work;
}

bool Device::poll(uint64_t now_ns) {
  now_ns_ = now_ns;
  // TM list operations first: an ADD a client published before posting a
  // send is taken before that send leaves and before any answer to it comes
  // in, as the control message that carried it was (else the answer would
  // find no tag and go unexpected).
  bool work = !tm_srqs_.empty() && poll_tm_ops();
  if (!busy_wqs_.empty()) work |= poll_wqs();
  work |= poll_rx();
  work |= poll_requesters();
  // Frames still queued on the loopback may hold the very ACKs a timer would
  // give up on (the engine was descheduled): receive them first.
  if (!loopback_.pending()) work |= poll_timers();
  work |= poll_port_timers();
  if (qp1_agent_) work |= qp1_agent_->poll_timers(now_ns);
  if (!mlx5_cqs_.empty()) [[unlikely]]
    work |= poll_mlx5_cq_arms();
  return work || loopback_.pending();
}

void Device::take_posted_sends(const Owner* o) {
  for (Qp* q : active_qps_)
    if (q->owner == o) requester_take_posted(*this, *q);
}

uint64_t Device::next_deadline_ns() const {
  uint64_t next = 0;
  auto take = [&](uint64_t t) {
    if (t && (!next || t < next)) next = t;
  };
  for (const Qp* q : active_qps_) {
    if (q->state != IBV_QPS_RTS && q->state != IBV_QPS_SQD) continue;  // no timer runs
    take(q->retrans_deadline_ns);
    take(q->rnr_wait_until_ns);
    if (q->pace_next_ns > now_ns_) take(q->pace_next_ns);
  }
  take(loopback_fault_.next_due_ns());
  take(wire_fault_.next_due_ns());
  take(arp_pending_.next_deadline_ns());
  take(ndp_pending_.next_deadline_ns());
  if (qp1_agent_) take(qp1_agent_->next_deadline_ns());
  if (!busy_wqs_.empty()) take(next_wq_deadline_ns());
  // A program arms an mlx5-format CQ by writing its UAR, and posts to an
  // mlx5-format send queue by writing its doorbell record and BlueFlame
  // register, none of which wakes anyone: a sleeping engine looks every
  // millisecond while such queues exist.
  if (!mlx5_cqs_.empty() || mlx5_qps_)
    take(now_ns_ + (now_ns_ - mlx5_active_ns_ < kMlx5BusyWindowNs ? kMlx5BusyLookNs : kMlx5ArmLookNs));
  return next;
}

void Device::set_port_active(bool up) {
  info_.port.state = up ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
  info_.port.phys_state = up ? 5 /* LinkUp */ : 3 /* Disabled */;
}

void Device::memory_fault(const char* what, const Owner* owner, uint64_t addr, uint64_t len) {
  const int err = errno;
  ++counters_.memory_faults;
  // At most 10 lines a second: a misbehaving client must not flood the log.
  if (now_ns_ - fault_log_window_ns_ > 1'000'000'000) {
    fault_log_window_ns_ = now_ns_;
    fault_logs_in_window_ = 0;
  }
  if (++fault_logs_in_window_ > 10) return;
  std::fprintf(stderr, "uroced: %s: pid %d addr 0x%llx len %llu: %s\n", what,
               owner ? int(owner->mem.pid()) : -1, (unsigned long long)addr,
               (unsigned long long)len, std::strerror(err));
}

std::string Device::status_text() const {
  std::ostringstream os;
  os << "device " << info_.name << "  ip " << int(config_.ip[0]) << '.' << int(config_.ip[1]) << '.'
     << int(config_.ip[2]) << '.' << int(config_.ip[3]) << "  port 1 "
     << (port_active() ? "ACTIVE" : "DOWN") << " (loopback)\n";
  os << "objects: pds " << pds_.count() << ", mrs " << mrs_.count() << ", cqs " << cqs_.count()
     << ", qps " << qps_.count() << ", channels " << channels_.count() << ", dms " << dms_.count()
     << " (" << dm_used_ << " of " << config_.max_dm_size << " bytes)\n";
  static const char* kStates[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR", "UNKNOWN"};
  static const char* kTypes[] = {"", "", "RC", "UC", "UD", "", "", "", "RAW_PACKET"};
  qps_.for_each([&](uint32_t, const Qp& q) {
    os << "  qp " << q.qpn << " " << (q.type <= IBV_QPT_RAW_PACKET ? kTypes[q.type] : "?") << " "
       << kStates[std::min<int>(q.state, 7)] << " pid " << q.owner->mem.pid() << " dest_qp "
       << q.dest_qpn << " tx " << q.tx_packets << " rx " << q.rx_packets << " retrans "
       << q.retransmits << " rnr " << q.rnr_naks << '\n';
  });
  return os.str();
}

std::string Device::stats_text() const {
  std::ostringstream os;
  os << "device " << info_.name << "\n";
#define UROCE_COUNTER_LINE(name, desc) \
  os << "  " << #name << " " << counters_.name << "    # " << desc << '\n';
  UROCE_COUNTERS(UROCE_COUNTER_LINE)
#undef UROCE_COUNTER_LINE
  os << "  loopback_tx_bytes " << loopback_.tx_bytes() << "    # bytes through the loopback port\n";
  auto fault_lines = [&](const char* port, const net::FaultInjector& f) {
    if (!f.counters().frames) return;
#define UROCE_FAULT_LINE(name, desc) \
  os << "  fault_" << port << "_" << #name << " " << f.counters().name << "    # " << desc << '\n';
    UROCE_FAULT_COUNTERS(UROCE_FAULT_LINE)
#undef UROCE_FAULT_LINE
  };
  fault_lines("loopback", loopback_fault_);
  fault_lines("wire", wire_fault_);
  if (wire_) {
    wire_->refresh_hw_counters();  // the driver's (and af_packet ring's) drops
    os << wire_->stats_text();
#define UROCE_ARP_LINE(name, desc) os << "  arp_" << #name << " " << arp_.counters().name << "    # " << desc << '\n';
    UROCE_ARP_COUNTERS(UROCE_ARP_LINE)
#undef UROCE_ARP_LINE
  }
  os << "  packet_buffers " << pool_.allocated()
     << "    # frame buffers allocated (the pool keeps its high-water mark)\n";
  os << "  packet_buffers_in_use " << pool_.in_use()
     << "    # frame buffers holding a frame now (queued, held by delay drop or ARP)\n";
  os << "  packet_buffers_max " << pool_.capacity()
     << "    # the most frame buffers the engine allocates (no_packet_buffer counts refusals)\n";
  os << "  delay_drop_timeout_us " << delay_drop_timeout_ns_ / 1000
     << "    # how long a delay-drop WQ holds a frame with no receive posted\n";
  steering_.for_each([&](uint32_t handle, const Flow& f) {
    os << "  flow " << handle << " qp " << f.target.id << " priority " << f.priority << " frames "
       << f.hits << " dropped " << f.dropped << "    # a steering rule: frames it took, discarded\n";
  });
  wqs_.for_each([&](uint32_t, const Wq& w) {
    os << "  wq " << w.wqn << " received " << w.received << " no_wqe " << w.no_wqe_drops << " not_ready "
       << w.not_ready_drops << " delay_drop_expired " << w.delay_drop_expired << " flushed " << w.flushed
       << "    # a receive WQ: frames placed; dropped: no receive posted, not RDY, held past the"
          " delay-drop timeout; receives flushed\n";
  });
  return os.str();
}

}  // namespace uroce::device
