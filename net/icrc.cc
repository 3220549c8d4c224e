#include "net/icrc.h"

#include <zlib.h>

#include <cstring>

#include "net/headers.h"

namespace uroce::net {

uint32_t compute_icrc(const uint8_t* ip_hdr, size_t ip_len, size_t transport_len) {
  // Pseudo header: 8 bytes of ones stand for the LRH of native IB.
  uint8_t pseudo[8 + sizeof(Ipv6Hdr) + sizeof(UdpHdr) + sizeof(Bth)];
  std::memset(pseudo, 0xff, 8);
  uint8_t* p = pseudo + 8;
  std::memcpy(p, ip_hdr, ip_len + sizeof(UdpHdr) + sizeof(Bth));
  if (ip_len == sizeof(Ipv4Hdr)) {
    auto* ip = reinterpret_cast<Ipv4Hdr*>(p);
    ip->tos = 0xff;
    ip->ttl = 0xff;
    ip->checksum = 0xffff;
  } else {
    auto* ip = reinterpret_cast<Ipv6Hdr*>(p);
    ip->version_tc_flow = uint32_t(ip->version_tc_flow) | 0x0fffffffu;  // TClass, flow label
    ip->hop_limit = 0xff;
  }
  auto* udp = reinterpret_cast<UdpHdr*>(p + ip_len);
  udp->checksum = 0xffff;
  auto* bth = reinterpret_cast<Bth*>(p + ip_len + sizeof(UdpHdr));
  bth->dest_qp = uint32_t(bth->dest_qp) | 0xff000000u;  // FECN, BECN, Resv6
  const size_t pseudo_len = 8 + ip_len + sizeof(UdpHdr) + sizeof(Bth);
  uLong crc = crc32(0L, pseudo, uInt(pseudo_len));
  const uint8_t* rest = ip_hdr + ip_len + sizeof(UdpHdr) + sizeof(Bth);
  crc = crc32(crc, rest, uInt(transport_len - sizeof(Bth)));
  return uint32_t(crc);
}

}  // namespace uroce::net
