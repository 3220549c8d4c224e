// RoCEv2 invariant CRC (IBA annex A17.3.3): CRC-32 over the IP/UDP/BTH
// headers with the variant fields masked to ones, then the rest of the
// transport headers, payload and pad; stored little-endian after the payload.
#pragma once

#include <cstddef>
#include <cstdint>

namespace uroce::net {

// Bytes of ones before the IP header in the ICRC's pseudo packet: they stand
// for the LRH of native IB.
constexpr size_t kIcrcPrefixBytes = 8;

// ip_hdr points at the IP header inside a frame; ip_len is the IPv4 or IPv6
// header length; transport_len counts from the BTH to the end of the pad
// (ICRC excluded). Without ISA-L the CRC runs over the frame in place, so
// the kIcrcPrefixBytes before ip_hdr (Ethernet header bytes) and the variant
// fields are overwritten while it runs and restored before it returns.
uint32_t compute_icrc(uint8_t* ip_hdr, size_t ip_len, size_t transport_len);

// CRC-32 of IEEE 802.3 (zlib's crc32(0, data, len)), the CRC under the ICRC.
uint32_t crc32_ieee(const uint8_t* data, size_t len);

}  // namespace uroce::net
