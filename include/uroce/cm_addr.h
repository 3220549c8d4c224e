// rdma_cm addresses (abi::CmAddr) as GIDs, and IPv4-mapped ones as IPv4:
// for the engine's CM and the drop-in librdmacm (the rule: uroce/gid.h).
#pragma once

#include <sys/socket.h>

#include <cstring>

#include "uroce/abi_cm.h"
#include "uroce/gid.h"

namespace uroce {

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
