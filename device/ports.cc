// The device's ports: the in-engine loopback and, when configured, a DPDK
// ethdev on the wire. Routing by destination GID, ARP, fault injection and
// capture sit here, between the transport and the ports.
#include <cerrno>
#include <cstring>

#include <sys/socket.h>

#include "device/device.h"

namespace uroce::device {

namespace {

ibv_mtu mtu_for_frames(uint16_t if_mtu) {
  // Room an IP packet needs around an IBA payload: IPv6 40 (IPv4 20), UDP 8,
  // BTH and the largest extension headers 40, ICRC 4.
  constexpr uint16_t kOverhead = 92;
  for (ibv_mtu m : {IBV_MTU_4096, IBV_MTU_2048, IBV_MTU_1024, IBV_MTU_512})
    if (if_mtu >= (128u << m) + kOverhead) return m;
  return IBV_MTU_256;
}

// A locally administered unicast MAC of the interface's and the engine's
// addresses (FNV-1a): stable across restarts, one per address on a link.
std::array<uint8_t, 6> own_mac(const std::array<uint8_t, 6>& port_mac, const std::array<uint8_t, 4>& ip,
                               const std::array<uint8_t, 16>& ip6) {
  uint32_t h = 2166136261u;
  auto mix = [&h](uint8_t b) { h = (h ^ b) * 16777619u; };
  for (uint8_t b : port_mac) mix(b);
  for (uint8_t b : ip) mix(b);
  for (uint8_t b : ip6) mix(b);
  const uint8_t first = uint8_t(((port_mac[0] ^ (h >> 24)) | 0x02) & ~0x01);
  return {first, uint8_t(h >> 16), uint8_t(h >> 8), uint8_t(h), port_mac[4], port_mac[5]};
}

}  // namespace

std::string Device::open_wire_port() {
  net::DpdkPortConfig cfg;
  cfg.engine_name = config_.name;
  cfg.spec = config_.port_spec;
  cfg.mtu = config_.port_mtu;
  cfg.use_hugepages = config_.use_hugepages;
  auto port = std::make_unique<net::DpdkPort>();
  if (std::string err = port->open(cfg); !err.empty()) return err;
  if (config_.mac_from_port) {
    config_.mac = port->mac();
    // An engine with addresses of its own (--ip/--ip6) is a host of its own
    // on the link, as a macvlan is: with the interface's MAC its frames would
    // be the kernel's too, climb its IP stack and be dropped there after a
    // route lookup (a tenth of the sending CPU between two engines on a
    // veth), and its link-local GID would be the kernel's link-local address.
    // Bound to the interface (--netdev), it shares the kernel's MAC as rxe
    // does. Where the interface cannot take a second MAC, the port's.
    if (config_.netdev.empty()) {
      const std::array<uint8_t, 6> own = own_mac(port->mac(), config_.ip, config_.ip6);
      if (port->accept_unicast(own).empty()) config_.mac = own;
    }
  }
  // No fd (not af_packet, or no filter): the engine sleeps in short naps.
  if (port->af_packet_socket() >= 0 && wakeup_.attach(port->af_packet_socket()).empty()) {
    // The driver's socket took every frame on the link from its bind until
    // the filter came: the kernel's chatter of a link just up (neighbour
    // discovery, MLD reports), none of it an engine's yet. Discard what it
    // queued, as libpcap drains a socket once its kernel filter is set
    // (pcap-linux.c, set_kernel_filter).
    net::Packet* burst[kRxBurst];
    for (int bursts = 0; bursts < 256; ++bursts) {
      const size_t n = port->rx_burst(burst, kRxBurst, pool_);
      for (size_t i = 0; i < n; ++i) pool_.put(burst[i]);
      counters_.rx_before_filter += n;
      if (n == 0) break;
    }
  }
  wire_ = std::move(port);
  init_info();
  info_.port.max_mtu = info_.port.active_mtu = mtu_for_frames(wire_->mtu());
  loopback_route_.src_mac = loopback_route_.dst_mac = config_.mac;
  paths_changed();
  return "";
}

std::string Device::set_fault(PortId port, const net::FaultConfig& config) {
  if (port == PortId::kWire && !wire_) return "this engine has no wire port";
  net::FaultInjector& f = port == PortId::kWire ? wire_fault_ : loopback_fault_;
  return f.configure(config);
}

std::string Device::start_capture(const std::string& path, uint64_t max_frames) {
  auto w = std::make_unique<net::PcapWriter>();
  if (std::string err = w->open(path, net::PcapTimestamp::kNano, max_frames); !err.empty())
    return err;
  capture_ = std::move(w);
  captured_ = 0;
  return "";
}

void Device::capture_frame(const net::Packet& p) {
  if (capture_->write(p)) ++captured_;
  if (capture_->limit_reached()) {
    capture_->flush();
    capture_.reset();  // done: the file is complete
  }
}

bool Device::has_ip6() const {
  for (uint8_t b : config_.ip6)
    if (b) return true;
  return false;
}

// UDP to the RoCEv2 port over IPv4 or IPv6 (after an optional 802.1Q tag).
bool Device::is_roce_frame(const net::Packet& p) const {
  size_t off = sizeof(net::EthHdr);
  if (p.len < off) return false;
  uint16_t type = uint16_t(p.data[12] << 8 | p.data[13]);
  if (type == 0x8100 && p.len >= off + net::kVlanTagBytes) {
    type = uint16_t(p.data[16] << 8 | p.data[17]);
    off += net::kVlanTagBytes;
  }
  size_t udp = 0;
  if (type == 0x0800 && p.len >= off + 20 && p.data[off + 9] == 17) udp = off + size_t(p.data[off] & 0x0f) * 4;
  else if (type == 0x86dd && p.len >= off + 40 && p.data[off + 6] == 17) udp = off + 40;
  return udp && p.len >= udp + 8 && uint16_t(p.data[udp + 2] << 8 | p.data[udp + 3]) == net::kRoceV2Port;
}

bool Device::local_peer_not_ready(const Qp& q) const {
  if (!is_local_gid(q.av.dgid)) return false;
  const Qp* peer = qp(q.dest_qpn);
  return peer && (peer->state == IBV_QPS_RESET || peer->state == IBV_QPS_INIT);
}

bool Device::is_local_gid(const uint8_t* gid) const {
  for (const abi::GidEntry& g : info_.gids)
    if (g.valid && std::memcmp(g.gid, gid, 16) == 0) return true;
  return false;
}

// A port that is down sends nothing: the frame is dropped and counted.
bool Device::drop_port_down(net::Packet* p) {
  ++counters_.tx_port_down;
  pool_.put(p);
  return true;
}

void Device::send_packet(Qp& qp, net::Packet* p, const abi::AddressVector* av) {
  if (dropped_port_down(p)) return;
  ++qp.tx_packets;
  if (av) {  // UD: the work request's address vector
    net::Route route;
    const PathKind kind = resolve_path(*av, qp.qpn, route);
    if (av->udp_sport) route.src_port = av->udp_sport;  // an mlx5 AV's (mlx5_wqe_av.rlid)
    return send_on_path(p, kind, route, nullptr, av->dgid);
  }
  if (qp.path.generation != path_generation_) [[unlikely]] {
    qp.path.kind = resolve_path(qp.av, qp.qpn, qp.path.route);
    if (qp.udp_sport) qp.path.route.src_port = qp.udp_sport;
    net::make_header_template(qp.path.route, qp.path.header);
    qp.path.generation = path_generation_;
  }
  send_on_path(p, qp.path.kind, qp.path.route, &qp.path.header, qp.av.dgid);
}

void Device::route_packet(net::Packet* p, const abi::AddressVector& path, uint32_t src_qpn) {
  if (dropped_port_down(p)) return;
  net::Route route;
  send_on_path(p, resolve_path(path, src_qpn, route), route, nullptr, path.dgid);
}

PathKind Device::resolve_path(const abi::AddressVector& path, uint32_t src_qpn, net::Route& route) const {
  route = loopback_route_;
  // RoCEv2 source port: a hash of the flow so ECMP spreads QPs (A17.3.1).
  route.src_port = uint16_t(0xc000 | ((src_qpn * 2654435761u) >> 18));
  route.ttl = path.hop_limit ? path.hop_limit : 64;
  route.tos = path.traffic_class;
  // IPv4 or IPv6 from the GIDs: both IPv4-mapped, or neither (RoCEv2, A17.4.5.2).
  const uint8_t* sgid = info_.gids[path.sgid_index < kGidTableLen ? path.sgid_index : 0].gid;
  if (!net::route_set_gids(route, sgid, path.dgid)) return PathKind::kNone;
  route.flow_label = path.flow_label;
  const bool multicast = is_multicast_gid(path.dgid);
  if (!multicast && is_local_gid(path.dgid)) {
    route.vlan = false;  // the loopback is no VLAN's member
    return PathKind::kLoopback;
  }
  if (!multicast && !wire_) return PathKind::kNone;
  if (config_.vlan >= 0) {
    route.vlan = true;
    route.vlan_id = uint16_t(config_.vlan);
    route.vlan_pcp = uint8_t(path.sl & 7);  // the service level maps to the priority
  }
  return multicast ? PathKind::kMulticast : PathKind::kWire;
}

void Device::send_on_path(net::Packet* p, PathKind kind, const net::Route& path_route,
                          const net::HeaderTemplate* header, const uint8_t* dgid) {
  const auto finish = [&](const net::Route& route) {
    if (header)
      net::finish_roce_packet(*p, route, *header);
    else
      net::finish_roce_packet(*p, route);
  };
  switch (kind) {
    case PathKind::kNone:
      ++counters_.tx_no_route;
      pool_.put(p);
      return;
    case PathKind::kLoopback:
      // A loopback frame never leaves the engine: no checksums, unless a
      // capture must show valid frames or the fault injector may corrupt it
      // (the receiver's ICRC check is what drops a corrupted frame).
      p->checksummed = capture_ || loopback_fault_.active();
      finish(path_route);
      return transmit(p, PortId::kLoopback);
    case PathKind::kMulticast: {
      net::Route route = path_route;
      return send_multicast(p, route, dgid);
    }
    case PathKind::kWire: break;
  }
  // The MAC is outside the ICRC: a frame waiting for resolution is finished
  // now and gets its MAC when the neighbour answers.
  const auto set_dst_mac = [p](const net::MacAddr& mac) { std::memcpy(p->data, mac.data(), 6); };
  if (path_route.family == net::IpFamily::kIpv4) {
    const net::Ipv4Addr ip = path_route.dst_ip;
    const auto mac = arp_.lookup(ip, now_ns_);
    finish(path_route);
    if (mac) {
      set_dst_mac(*mac);
      return transmit(p, PortId::kWire);
    }
    switch (arp_pending_.enqueue(ip, p, now_ns_)) {
      case net::ArpPending::Enqueue::kQueuedSendRequest: send_arp_request(ip); break;
      case net::ArpPending::Enqueue::kQueued: break;
      case net::ArpPending::Enqueue::kRefused: pool_.put(p); break;
    }
    return;
  }
  const net::Ipv6Addr ip6 = path_route.dst_ip6;
  const auto mac = ndp_.lookup(ip6, now_ns_);
  finish(path_route);
  if (mac) {
    set_dst_mac(*mac);
    return transmit(p, PortId::kWire);
  }
  switch (ndp_pending_.enqueue(ip6, p, now_ns_)) {
    case net::NdpPending::Enqueue::kQueuedSendRequest: send_ndp_solicitation(ip6); break;
    case net::NdpPending::Enqueue::kQueued: break;
    case net::NdpPending::Enqueue::kRefused: pool_.put(p); break;
  }
}

// Through the port's fault injector (if set), then out.
void Device::transmit(net::Packet* p, PortId port) {
  net::FaultInjector& fault = port == PortId::kWire ? wire_fault_ : loopback_fault_;
  if (!fault.active()) return emit(p, port);
  fault_out_.clear();
  fault.on_tx(p, now_ns_, fault_out_, pool_);
  for (net::Packet* q : fault_out_) emit(q, port);
}

void Device::emit(net::Packet* p, PortId port) {
  ++counters_.tx_packets;
  capture(*p);
  if (port == PortId::kLoopback) {
    // The loopback keeps the buffer until it is received; a full ring drops
    // the frame as a switch would (only frames never held back get there).
    if (!loopback_.tx(p)) [[unlikely]] {
      ++counters_.loopback_overflow;
      pool_.put(p);
    }
    return;
  }
  // The engine's own frames on the wire (RoCE): SNIFFER rules get a copy.
  // (Loopback frames meet every rule when the loopback hands them back.)
  if (steering_.has_sniffers()) [[unlikely]] sniff_sent(*p);
  wire_->send(p, pool_);  // lent to the driver, or copied
}

void Device::send_arp_request(const net::Ipv4Addr& ip) {
  // Bound to a kernel interface: the kernel resolves, as for its own
  // traffic, and its neighbour table tells us (neighbour_update).
  if (kernel_bound_ && kernel_resolve_ && kernel_resolve_(AF_INET, ip.data())) {
    ++counters_.neigh_kernel_asked;
    return;
  }
  net::Packet* p = alloc_packet();
  if (!p) [[unlikely]] return;  // the pending entry asks again
  ++counters_.neigh_requests_sent;
  net::build_arp_request(*p, config_.mac, config_.ip, ip);
  if (config_.vlan >= 0) net::add_vlan_tag(*p, uint16_t(config_.vlan));
  capture(*p);
  wire_->send(p, pool_);
}

void Device::send_ndp_solicitation(const net::Ipv6Addr& ip) {
  if (kernel_bound_ && kernel_resolve_ && kernel_resolve_(AF_INET6, ip.data())) {
    ++counters_.neigh_kernel_asked;
    return;
  }
  if (!has_ip6()) return;
  net::Packet* p = alloc_packet();
  if (!p) [[unlikely]] return;
  ++counters_.neigh_requests_sent;
  net::build_ndp_solicitation(*p, config_.mac, config_.ip6, ip);
  if (config_.vlan >= 0) net::add_vlan_tag(*p, uint16_t(config_.vlan));
  capture(*p);
  wire_->send(p, pool_);
}

bool Device::poll_wire_rx() {
  if (!wire_) return false;
  net::Packet* burst[kRxBurst];
  const size_t n = wire_->rx_burst(burst, kRxBurst, pool_);
  for (size_t i = 0; i < n; ++i) {
    net::Packet* p = burst[i];
    capture(*p);
    // Flow steering first, as a NIC's receive rules run before its kernel
    // netdev sees a frame; ARP and neighbour discovery still reach the
    // engine (it answers for its own address only).
    const bool trapped = steering_.active() && steer_received(*p) != FlowSteering::Steered::kPass;
    if (net::is_arp_frame(*p)) {
      net::Packet* reply = alloc_packet();
      // Bound to a kernel interface, the kernel answers for the address
      // (and without a buffer nobody does: the asker asks again).
      if (arp_.handle(*p, config_.mac, config_.ip, now_ns_, kernel_bound_ ? nullptr : reply) && reply) {
        if (config_.vlan >= 0) net::add_vlan_tag(*reply, uint16_t(config_.vlan));
        wire_->tx(reply);
      }
      if (reply) pool_.put(reply);
      // The sender is known now: release what waited for it.
      const auto* arp = reinterpret_cast<const net::ArpHdr*>(p->data + sizeof(net::EthHdr));
      net::Ipv4Addr sender;
      std::memcpy(sender.data(), arp->spa, 4);
      if (const auto mac = arp_.lookup(sender, now_ns_)) {
        arp_pending_.resolved(sender, [&](net::Packet* q) {
          std::memcpy(reinterpret_cast<net::EthHdr*>(q->data)->dst, mac->data(), 6);
          transmit(q, PortId::kWire);
        });
      }
      pool_.put(p);
      continue;
    }
    if (net::is_ndp_frame(*p)) {
      net::Packet* reply = alloc_packet();
      const net::NdpHandled h = has_ip6() ? ndp_.handle(*p, config_.mac, config_.ip6, now_ns_,
                                                        kernel_bound_ || !reply ? nullptr : reply)
                                          : net::NdpHandled{};
      if (h.reply && reply) wire_->tx(reply);
      if (reply) pool_.put(reply);
      if (h.resolved) {
        if (const auto mac = ndp_.lookup(*h.resolved, now_ns_)) {
          ndp_pending_.resolved(*h.resolved, [&](net::Packet* q) {
            std::memcpy(reinterpret_cast<net::EthHdr*>(q->data)->dst, mac->data(), 6);
            transmit(q, PortId::kWire);
          });
        }
      }
      pool_.put(p);
      continue;
    }
    if (trapped) {
      pool_.put(p);
      continue;
    }
    // A veth or a switch may hand us other hosts' frames: ours only, and on
    // our VLAN when one is configured.
    const auto tci = net::vlan_tci(*p);
    if ((config_.vlan >= 0) != tci.has_value() ||
        (tci && (*tci & 0x0fff) != uint16_t(config_.vlan))) {
      ++counters_.rx_not_for_us;
      pool_.put(p);
      continue;
    }
    // The kernel's own traffic on the interface it shares with us, bound to
    // it (--netdev) or with an address of our own beside the kernel's (--ip
    // on a port that is also a kernel interface, often with its MAC): not
    // RoCE, so not ours to parse, and no parse error.
    if (!is_roce_frame(*p)) {
      ++counters_.rx_kernel;
      pool_.put(p);
      continue;
    }
    const auto* eth = reinterpret_cast<const net::EthHdr*>(p->data);
    // Group addresses too while a QP of ours is in a multicast group (the
    // datagram's GID decides which, in dispatch).
    const bool to_us = std::memcmp(eth->dst, config_.mac.data(), 6) == 0 ||
                       ((eth->dst[0] & 1) && !multicast_.empty());
    if (p->len < sizeof(net::EthHdr) + sizeof(net::Ipv4Hdr) || !to_us) {
      ++counters_.rx_not_for_us;
      pool_.put(p);
      continue;
    }
    dispatch(p, true);
    pool_.put(p);
  }
  return n != 0;
}

bool Device::poll_port_timers() {
  bool work = false;
  for (net::FaultInjector* f : {&loopback_fault_, &wire_fault_}) {
    if (!f->held()) continue;
    fault_out_.clear();
    f->release_due(now_ns_, fault_out_);
    const PortId port = f == &wire_fault_ ? PortId::kWire : PortId::kLoopback;
    for (net::Packet* q : fault_out_) emit(q, port);
    work |= !fault_out_.empty();
  }
  if (wire_) {
    work |= arp_pending_.tick(
        now_ns_, [&](const net::Ipv4Addr& ip) { send_arp_request(ip); },
        [&](net::Packet* q) { pool_.put(q); });
    work |= ndp_pending_.tick(
        now_ns_, [&](const net::Ipv6Addr& ip) { send_ndp_solicitation(ip); },
        [&](net::Packet* q) { pool_.put(q); });
    work |= wire_->flush() != 0;
  }
  return work;
}

}  // namespace uroce::device
