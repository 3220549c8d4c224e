// The RoCE v2 GID of an IP address, and back: IPv6 as it is, IPv4 as
// ::ffff:a.b.c.d (IBA annex A17.4.5.2; the kernel's rdma_ip2gid builds them
// with ipv6_addr_set_v4mapped). One spelling for the engine's GID table, its
// CM and the drop-in librdmacm.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <cstring>

#include "uroce/abi.h"

namespace uroce {

inline constexpr uint8_t kV4MappedPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

inline void ipv4_gid(const uint8_t ip[4], uint8_t gid[16]) {
  std::memcpy(gid, kV4MappedPrefix, 12);
  std::memcpy(gid + 12, ip, 4);
}

inline bool is_ipv4_mapped(const uint8_t gid[16]) { return std::memcmp(gid, kV4MappedPrefix, 12) == 0; }

// The GID of an rdma_cm address: AF_INET mapped, AF_INET6 and AF_IB (a GID
// already) as they are.
inline void gid_of(const abi::CmAddr& a, uint8_t gid[16]) {
  if (a.family == AF_INET) ipv4_gid(a.addr, gid);
  else std::memcpy(gid, a.addr, 16);
}

// ::ffff:a.b.c.d as a.b.c.d, so both spellings of one IPv4 address match.
inline abi::CmAddr unmapped(abi::CmAddr a) {
  if (a.family == AF_INET6 && is_ipv4_mapped(a.addr)) {
    a.family = AF_INET;
    std::memmove(a.addr, a.addr + 12, 4);
    std::memset(a.addr + 4, 0, 12);
  }
  return a;
}

}  // namespace uroce
