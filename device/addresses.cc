// The device's addresses (its GID table) and neighbours when it is bound to
// an interface, as a RoCE NIC's GID table follows its netdev (the kernel's
// ib_core roce_gid_mgmt.c). Control path: the engine calls these from its
// event loop when the kernel reports a change.
#include <sys/socket.h>

#include <algorithm>
#include <cstring>

#include "device/device.h"
#include "uroce/gid.h"

namespace uroce::device {

namespace {

constexpr uint32_t kIpv4Index = 0, kLinkLocalIndex = 1, kIpv6Index = 2, kFirstFreeIndex = 3;

net::Ipv6Addr gid_of(const net::IfAddress& a) {
  net::Ipv6Addr g{};
  if (a.family == AF_INET) ipv4_gid(a.addr.data(), g.data());  // ::ffff:a.b.c.d, as the kernel's
  else std::memcpy(g.data(), a.addr.data(), 16);
  return g;
}

}  // namespace

bool Device::set_addresses(const std::vector<net::IfAddress>& addrs) {
  abi::GidEntry before[kGidTableLen];
  std::memcpy(before, info_.gids, sizeof(before));
  std::vector<net::Ipv6Addr> want;
  for (const net::IfAddress& a : addrs) want.push_back(gid_of(a));
  // Gone: every entry but the MAC's link-local GID whose address went.
  for (uint32_t i = 0; i < kGidTableLen; ++i) {
    abi::GidEntry& g = info_.gids[i];
    if (i == kLinkLocalIndex || !g.valid) continue;
    net::Ipv6Addr have;
    std::memcpy(have.data(), g.gid, 16);
    if (std::find(want.begin(), want.end(), have) == want.end()) g = abi::GidEntry{};
  }
  // New: its family's index if free, else the first free one from 3, else
  // the other family's.
  for (size_t k = 0; k < want.size(); ++k) {
    if (is_local_gid(want[k].data())) continue;
    const bool v4 = addrs[k].family == AF_INET;
    const bool link_local = !v4 && want[k][0] == 0xfe && (want[k][1] & 0xc0) == 0x80;
    uint32_t slot = kGidTableLen;
    const uint32_t preferred = v4 ? kIpv4Index : kIpv6Index;
    if (!link_local && !info_.gids[preferred].valid) slot = preferred;
    for (uint32_t i = kFirstFreeIndex; i < kGidTableLen && slot == kGidTableLen; ++i)
      if (!info_.gids[i].valid) slot = i;
    for (uint32_t i = 0; i < kFirstFreeIndex && slot == kGidTableLen; ++i)  // the other family's
      if (!info_.gids[i].valid) slot = i;
    if (slot == kGidTableLen) continue;  // the table is full, as a NIC's can be
    abi::GidEntry& g = info_.gids[slot];
    std::memcpy(g.gid, want[k].data(), 16);
    g.type = IBV_GID_TYPE_ROCE_V2;
    g.valid = 1;
  }
  // The addresses the rest of the device speaks for (ARP/NDP requests, the
  // CM agent, status): GID 0's and GID 2's.
  const abi::GidEntry& g4 = info_.gids[kIpv4Index];
  if (g4.valid) std::memcpy(config_.ip.data(), g4.gid + 12, 4);
  else config_.ip = {};
  const abi::GidEntry& g6 = info_.gids[kIpv6Index];
  if (g6.valid) std::memcpy(config_.ip6.data(), g6.gid, 16);
  else config_.ip6 = {};
  loopback_route_.src_ip = loopback_route_.dst_ip = config_.ip;
  // The CM ids bound to an address that went hear of it (ADDR_CHANGE).
  for (const abi::GidEntry& b : before) {
    if (!b.valid) continue;
    const bool kept = std::any_of(std::begin(info_.gids), std::end(info_.gids), [&](const abi::GidEntry& g) {
      return g.valid && std::memcmp(g.gid, b.gid, 16) == 0;
    });
    if (!kept && qp1_agent_) qp1_agent_->address_removed(b.gid);
  }
  paths_changed();
  return std::memcmp(before, info_.gids, sizeof(before)) != 0;
}

void Device::neighbour_update(const net::Neighbour& n) {
  if (!wire_) return;
  if (n.family == AF_INET) {
    net::Ipv4Addr ip;
    std::memcpy(ip.data(), n.ip.data(), 4);
    if (!n.usable) return arp_.remove(ip);
    arp_.insert(ip, n.mac, now_ns_);
    arp_pending_.resolved(ip, [&](net::Packet* q) {
      std::memcpy(reinterpret_cast<net::EthHdr*>(q->data)->dst, n.mac.data(), 6);
      transmit(q, PortId::kWire);
    });
    return;
  }
  const net::Ipv6Addr& ip6 = n.ip;
  if (!n.usable) return ndp_.remove(ip6);
  ndp_.insert(ip6, n.mac, now_ns_);
  ndp_pending_.resolved(ip6, [&](net::Packet* q) {
    std::memcpy(reinterpret_cast<net::EthHdr*>(q->data)->dst, n.mac.data(), 6);
    transmit(q, PortId::kWire);
  });
}

}  // namespace uroce::device
