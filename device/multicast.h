// UD multicast groups (ibv_attach_mcast / ibv_detach_mcast): which of the
// device's UD QPs receive a datagram sent to a multicast GID. On RoCE there is
// no subnet manager: a group exists while some QP is attached to it, and the
// port receives its Ethernet group address (IBA A17.4.5; rxe_mcast.c).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

namespace uroce::device {

using Gid = std::array<uint8_t, 16>;

// The destination QPN of every multicast packet (IBA 10.5: the "multicast QP").
constexpr uint32_t kMulticastQpn = 0xffffff;

// IPv6 multicast (ff00::/8) or IPv4-mapped IPv4 multicast (::ffff:224.0.0.0/4),
// the kernel's rdma_is_multicast_addr.
bool is_multicast_gid(const uint8_t gid[16]);
// The Ethernet group address of a multicast GID: 01:00:5e + the low 23 bits
// of an IPv4 group (RFC 1112 6.4), 33:33 + the low 32 bits of an IPv6 one
// (RFC 2464 7).
std::array<uint8_t, 6> multicast_mac(const uint8_t gid[16]);

class MulticastGroups {
 public:
  MulticastGroups(uint32_t max_groups, uint32_t max_qps_per_group)
      : max_groups_(max_groups), max_per_group_(max_qps_per_group) {}
  // 0, or ENOMEM when the group table or the group is full. Attaching a QP
  // twice is no error and attaches it once (the kernel keeps one entry).
  int attach(const Gid& gid, uint32_t qpn);
  // 0, or EINVAL when the QP is not attached (ib_uverbs_detach_mcast).
  int detach(const Gid& gid, uint32_t qpn);
  // The QP goes away: out of every group (uverbs detaches on destroy).
  void detach_all(uint32_t qpn);
  // The QPs attached to gid (nullptr: no such group).
  const std::vector<uint32_t>* members(const uint8_t gid[16]) const;
  bool empty() const { return groups_.empty(); }
  size_t groups() const { return groups_.size(); }

 private:
  uint32_t max_groups_, max_per_group_;
  std::map<Gid, std::vector<uint32_t>> groups_;
};

}  // namespace uroce::device
