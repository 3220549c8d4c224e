// QP1, the general services interface (IBA 13.5): the device has no QP
// object for it. A UD SEND to QPN 1 carries one 256-byte MAD; the CM's
// go to the agent attached (device/qp1_agent.h: the CM, cm/), and the
// agent's MADs leave as UD SENDs from QPN 1 through the ports like any UD
// send (neighbour resolution, capture, fault injection). Control path: CM traffic is a few
// MADs per connection.
#include <cstring>

#include "device/device.h"

namespace uroce::device {

namespace {
constexpr uint8_t kUdSendOnly = net::make_opcode(net::Transport::kUd, 0x04);
}  // namespace

void Device::gsi_receive(const net::Packet& p) {
  const net::OpcodeInfo& info = p.info();
  // C13-23 (IBA 13.5.1): QP1 takes datagrams with the GSI's well-known
  // Q_Key only; one MAD per datagram (13.4.1).
  if (p.opcode != kUdSendOnly || p.payload_len < kMadBytes ||
      uint32_t(p.hdr<net::Deth>(info.deth_off)->qkey) != kGsiQkey || !qp1_agent_) {
    ++counters_.rx_gsi_dropped;
    return;
  }
  const net::Ipv6Addr sgid = net::roce_src_gid(p), dgid = net::roce_dst_gid(p);
  if (!qp1_agent_->receive_mad(sgid.data(), dgid.data(), p.payload())) ++counters_.rx_gsi_dropped;
}

void Device::qp1_send(const uint8_t* dgid, uint8_t sgid_index, const uint8_t* mad) {
  net::Packet* p = alloc_packet();
  if (!p) [[unlikely]] return;  // a lost MAD: the CM retransmits
  net::begin_roce_packet(*p, kUdSendOnly);
  net::Bth* bth = p->bth();
  bth->pkey = kGsiPkey;
  bth->dest_qp = kGsiQpn;
  auto* deth = p->hdr<net::Deth>(p->info().deth_off);
  deth->qkey = kGsiQkey;
  deth->src_qp = kGsiQpn;
  std::memcpy(p->payload(), mad, kMadBytes);
  p->payload_len = kMadBytes;
  abi::AddressVector av{};
  std::memcpy(av.dgid, dgid, 16);
  av.sgid_index = sgid_index;
  av.hop_limit = 64;
  av.is_global = 1;
  av.port_num = 1;
  route_packet(p, av, kGsiQpn);
}

// The CM's address resolution (rdma_resolve_addr): the neighbour cache
// of the wire port, asked for when unknown, as a send to it would.
bool Device::qp1_neighbour_known(const uint8_t* dgid, bool solicit) {
  if (!wire_) return false;
  if (net::gid_is_ipv4_mapped(dgid)) {
    net::Ipv4Addr ip;
    std::memcpy(ip.data(), dgid + 12, 4);
    if (arp_.lookup(ip, now_ns_)) return true;
    if (solicit) send_arp_request(ip);
    return false;
  }
  net::Ipv6Addr ip6;
  std::memcpy(ip6.data(), dgid, 16);
  if (ndp_.lookup(ip6, now_ns_)) return true;
  if (solicit) send_ndp_solicitation(ip6);
  return false;
}

}  // namespace uroce::device
