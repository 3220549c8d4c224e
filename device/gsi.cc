// QP1, the general services interface (IBA 13.5): the device has no QP
// object for it. A UD SEND to QPN 1 carries one 256-byte MAD; the CM's
// (management class 7) go to the CM agent, and the agent's MADs leave as
// UD SENDs from QPN 1 through the ports like any UD send (neighbour
// resolution, capture, fault injection). Control path: CM traffic is a few
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
  if (p.opcode != kUdSendOnly || p.payload_len < net::cm::kMadBytes ||
      uint32_t(p.hdr<net::Deth>(info.deth_off)->qkey) != net::cm::kGsiQkey) {
    ++counters_.rx_gsi_dropped;
    return;
  }
  net::cm::Mad mad;
  std::memcpy(&mad, p.payload(), sizeof(mad));
  if (mad.hdr.mgmt_class != net::cm::kMgmtClassCm) {  // no other GSI class is served
    ++counters_.rx_gsi_dropped;
    return;
  }
  const net::Ipv6Addr sgid = net::roce_src_gid(p), dgid = net::roce_dst_gid(p);
  cm_.receive_mad(sgid.data(), dgid.data(), mad);
}

void Device::gsi_send(const uint8_t* dgid, uint8_t sgid_index, const net::cm::Mad& mad) {
  net::Packet* p = pool_.get();
  net::begin_roce_packet(*p, kUdSendOnly);
  net::Bth* bth = p->bth();
  bth->pkey = net::cm::kGsiPkey;
  bth->dest_qp = net::cm::kGsiQpn;
  auto* deth = p->hdr<net::Deth>(p->info().deth_off);
  deth->qkey = net::cm::kGsiQkey;
  deth->src_qp = net::cm::kGsiQpn;
  std::memcpy(p->payload(), &mad, sizeof(mad));
  p->payload_len = sizeof(mad);
  abi::AddressVector av{};
  std::memcpy(av.dgid, dgid, 16);
  av.sgid_index = sgid_index;
  av.hop_limit = 64;
  av.is_global = 1;
  av.port_num = 1;
  route_packet(p, av, net::cm::kGsiQpn);
}

}  // namespace uroce::device
