// RoCEv2 invariant CRC (IBA annex A17.3.3): CRC-32 over the IP/UDP/BTH
// headers with the variant fields masked to ones, then the rest of the
// transport headers, payload and pad; stored little-endian after the payload.
#pragma once

#include <cstddef>
#include <cstdint>

namespace uroce::net {

// frame points at the IP header; ip_len is the IPv4 or IPv6 header length;
// transport_len counts from the BTH to the end of the pad (ICRC excluded).
uint32_t compute_icrc(const uint8_t* ip_hdr, size_t ip_len, size_t transport_len);

}  // namespace uroce::net
