// The RoCE v2 GID of an IP address, and back: IPv6 as it is, IPv4 as
// ::ffff:a.b.c.d (IBA annex A17.4.5.2; the kernel's rdma_ip2gid builds them
// with ipv6_addr_set_v4mapped). One spelling for net/'s routes, the engine's
// GID table, its CM and the drop-in librdmacm (rdma_cm addresses:
// uroce/cm_addr.h).
#pragma once

#include <cstdint>
#include <cstring>


namespace uroce {

inline constexpr uint8_t kV4MappedPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

inline void ipv4_gid(const uint8_t ip[4], uint8_t gid[16]) {
  std::memcpy(gid, kV4MappedPrefix, 12);
  std::memcpy(gid + 12, ip, 4);
}

inline bool is_ipv4_mapped(const uint8_t gid[16]) { return std::memcmp(gid, kV4MappedPrefix, 12) == 0; }

}  // namespace uroce
