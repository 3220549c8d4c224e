#include "device/multicast.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace uroce::device {

bool is_multicast_gid(const uint8_t gid[16]) {
  if (gid[0] == 0xff) return true;
  static constexpr uint8_t kV4Mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::memcmp(gid, kV4Mapped, 12) == 0 && (gid[12] & 0xf0) == 0xe0;
}

std::array<uint8_t, 6> multicast_mac(const uint8_t gid[16]) {
  if (gid[0] == 0xff) return {0x33, 0x33, gid[12], gid[13], gid[14], gid[15]};
  return {0x01, 0x00, 0x5e, uint8_t(gid[13] & 0x7f), gid[14], gid[15]};
}

int MulticastGroups::attach(const Gid& gid, uint32_t qpn) {
  auto it = groups_.find(gid);
  if (it == groups_.end()) {
    if (groups_.size() >= max_groups_) return ENOMEM;
    groups_[gid].push_back(qpn);
    return 0;
  }
  std::vector<uint32_t>& qps = it->second;
  if (std::find(qps.begin(), qps.end(), qpn) != qps.end()) return 0;
  if (qps.size() >= max_per_group_) return ENOMEM;
  qps.push_back(qpn);
  return 0;
}

int MulticastGroups::detach(const Gid& gid, uint32_t qpn) {
  auto it = groups_.find(gid);
  if (it == groups_.end()) return EINVAL;
  std::vector<uint32_t>& qps = it->second;
  auto q = std::find(qps.begin(), qps.end(), qpn);
  if (q == qps.end()) return EINVAL;
  qps.erase(q);
  if (qps.empty()) groups_.erase(it);
  return 0;
}

void MulticastGroups::detach_all(uint32_t qpn) {
  for (auto it = groups_.begin(); it != groups_.end();) {
    std::erase(it->second, qpn);
    it = it->second.empty() ? groups_.erase(it) : std::next(it);
  }
}

const std::vector<uint32_t>* MulticastGroups::members(const uint8_t gid[16]) const {
  Gid key;
  std::memcpy(key.data(), gid, 16);
  auto it = groups_.find(key);
  return it == groups_.end() ? nullptr : &it->second;
}

}  // namespace uroce::device

// ---- the device's side ----------------------------------------------------

#include "device/device.h"

namespace uroce::device {

// ib_attach_mcast: a multicast GID and a UD QP, else EINVAL (the MLID is
// not checked on an Ethernet port).
int Device::attach_mcast(Owner* o, uint32_t qpn, const Gid& gid) {
  Qp* q = qp(qpn);
  if (!q || q->owner != o) return EINVAL;
  if (q->type != IBV_QPT_UD || !is_multicast_gid(gid.data())) return EINVAL;
  return multicast_.attach(gid, qpn);
}

int Device::detach_mcast(Owner* o, uint32_t qpn, const Gid& gid) {
  Qp* q = qp(qpn);
  if (!q || q->owner != o) return EINVAL;
  if (q->type != IBV_QPT_UD || !is_multicast_gid(gid.data())) return EINVAL;
  return multicast_.detach(gid, qpn);
}

void Device::send_multicast(net::Packet* p, net::Route& route, const uint8_t* dgid) {
  const bool local = multicast_.members(dgid) != nullptr;
  if (local) {
    // A NIC's multicast reaches its own function's members too (mlx5 unless
    // IBV_QP_CREATE_BLOCK_SELF_MCAST_LB, rxe always): a copy for the loopback.
    net::Packet* l = p;
    if (wire_) {
      l = alloc_packet();
      if (l) *l = *p;
    }
    if (l) {
      net::Route r = route;
      r.vlan = false;
      l->checksummed = capture_ || loopback_fault_.active();
      net::finish_roce_packet(*l, r);
      transmit(l, PortId::kLoopback);
    }
    if (!wire_) return;
  }
  if (!wire_) {  // nobody to receive it: gone, as on a port with no peer
    pool_.put(p);
    return;
  }
  route.dst_mac = multicast_mac(dgid);  // no neighbour to resolve
  net::finish_roce_packet(*p, route);
  transmit(p, PortId::kWire);
}

// IBA 10.5: a copy of the datagram for each QP attached to the group; each
// checks its Q_Key and takes a receive of its own.
void Device::deliver_multicast(net::Packet& p, const uint8_t* dgid) {
  const std::vector<uint32_t>* qps = multicast_.members(dgid);
  if (!qps || !p.info().has(net::kHasDeth)) {
    ++counters_.rx_mcast_no_group;
    return;
  }
  for (uint32_t qpn : *qps) {
    Qp* q = qp(qpn);
    if (!q) continue;
    ++q->rx_packets;
    responder_receive(*this, *q, p);
  }
}

}  // namespace uroce::device
