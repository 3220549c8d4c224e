#include "net/icrc.h"

#include <cstring>

#include "net/headers.h"

#if defined(UROCE_HAVE_ISAL)
#include <isa-l/crc.h>

#include "net/crc32_vpclmul.h"
#elif defined(UROCE_HAVE_DPDK)
// rte_vect_{get,set}_max_simd_bitwidth are experimental in DPDK 22.11.
#define ALLOW_EXPERIMENTAL_API
#include <rte_net_crc.h>
extern "C" {
#include <rte_vect.h>  // declares its functions without extern "C"
}
#else
#include <zlib.h>
#endif

namespace uroce::net {

namespace {

#if !defined(UROCE_HAVE_ISAL) && defined(UROCE_HAVE_DPDK)
// DPDK picks its CRC code by the EAL's SIMD width limit. That limit is 0 in a
// process that never ran rte_eal_init (a loopback-only engine), which selects
// the byte-table code (~0.5 GB/s, 8x slower than zlib), and 256 after it,
// which rules out the VPCLMULQDQ code (AVX-512, ~50 GB/s against ~9 GB/s for
// the SSE4.2 PCLMULQDQ one). Raise it for the choice only, then put it back
// (0 cannot be set, but rte_eal_init resets it anyway). DPDK falls back to
// SSE4.2, then to the table, on CPUs that lack the instructions.
bool select_fast_crc() {
  const uint16_t limit = rte_vect_get_max_simd_bitwidth();
  rte_vect_set_max_simd_bitwidth(RTE_VECT_SIMD_512);
  rte_net_crc_set_alg(RTE_NET_CRC_AVX512);
  if (limit) rte_vect_set_max_simd_bitwidth(limit);
  return true;
}
#endif

// Sets the variant fields of A17.3.3 to ones in the headers at ip_hdr.
void mask_variant_fields(uint8_t* ip_hdr, size_t ip_len) {
  if (ip_len == sizeof(Ipv4Hdr)) {
    auto* ip = reinterpret_cast<Ipv4Hdr*>(ip_hdr);
    ip->tos = 0xff;
    ip->ttl = 0xff;
    ip->checksum = 0xffff;
  } else {
    auto* ip = reinterpret_cast<Ipv6Hdr*>(ip_hdr);
    ip->version_tc_flow = uint32_t(ip->version_tc_flow) | 0x0fffffffu;  // TClass, flow label
    ip->hop_limit = 0xff;
  }
  reinterpret_cast<UdpHdr*>(ip_hdr + ip_len)->checksum = 0xffff;
  auto* bth = reinterpret_cast<Bth*>(ip_hdr + ip_len + sizeof(UdpHdr));
  bth->dest_qp = uint32_t(bth->dest_qp) | 0xff000000u;  // FECN, BECN, Resv6
}

}  // namespace

#if defined(UROCE_HAVE_ISAL)
// ISA-L (libisal, which Debian's libdpdk-dev depends on) folds eight 16-byte
// lanes at once with PCLMULQDQ, chosen for the CPU at run time: 1.7-1.9x
// DPDK's one-lane rte_net_crc on the 1-4 KiB a frame carries on CPUs without
// AVX-512 (docs/PERFORMANCE.md). Its CRC takes a running value as zlib's
// does, so the pseudo header is built in a copy and the frame is only read.
// Where the CPU folds 256 bits at once without AVX-512, crc32_fold256 does
// the bulk (net/crc32_vpclmul.h).
namespace {
uint32_t crc32_running(uint32_t crc, const uint8_t* data, size_t len) {
  using Crc32Fn = uint32_t (*)(uint32_t, const uint8_t*, size_t);
  static const Crc32Fn fn = crc32_fold256_supported() ? crc32_fold256 : crc32_gzip_refl;
  return fn(crc, data, len);
}
}  // namespace

uint32_t crc32_ieee(const uint8_t* data, size_t len) { return crc32_running(0, data, len); }

uint32_t compute_icrc(uint8_t* ip_hdr, size_t ip_len, size_t transport_len) {
  uint8_t pseudo[kIcrcPrefixBytes + sizeof(Ipv6Hdr) + sizeof(UdpHdr) + sizeof(Bth)];
  const size_t headers = ip_len + sizeof(UdpHdr) + sizeof(Bth);
  std::memset(pseudo, 0xff, kIcrcPrefixBytes);
  std::memcpy(pseudo + kIcrcPrefixBytes, ip_hdr, headers);
  mask_variant_fields(pseudo + kIcrcPrefixBytes, ip_len);
  const uint32_t crc = crc32_gzip_refl(0, pseudo, kIcrcPrefixBytes + headers);
  return crc32_running(crc, ip_hdr + headers, transport_len - sizeof(Bth));
}
#else
uint32_t crc32_ieee(const uint8_t* data, size_t len) {
#ifdef UROCE_HAVE_DPDK
  static const bool selected = select_fast_crc();
  (void)selected;
  return rte_net_crc_calc(data, uint32_t(len), RTE_NET_CRC32_ETH);
#else
  return uint32_t(crc32_z(0, data, len));
#endif
}

uint32_t compute_icrc(uint8_t* ip_hdr, size_t ip_len, size_t transport_len) {
  // The library CRC takes no initial value, so the pseudo packet is made in
  // the frame rather than in a copy of it: the ones go over the Ethernet
  // bytes before the IP header, the masks over the headers, and the saved
  // bytes go back afterwards.
  uint8_t* start = ip_hdr - kIcrcPrefixBytes;
  const size_t head = kIcrcPrefixBytes + ip_len + sizeof(UdpHdr) + sizeof(Bth);
  uint8_t saved[kIcrcPrefixBytes + sizeof(Ipv6Hdr) + sizeof(UdpHdr) + sizeof(Bth)];
  std::memcpy(saved, start, head);
  std::memset(start, 0xff, kIcrcPrefixBytes);
  mask_variant_fields(ip_hdr, ip_len);
  const uint32_t crc = crc32_ieee(start, head - sizeof(Bth) + transport_len);
  std::memcpy(start, saved, head);
  return crc;
}

#endif

}  // namespace uroce::net
