// Micro-benchmark of the RoCEv2 ICRC, run by hand (not a test):
//   build/bin/uroce-icrc-bench
// Times net::compute_icrc on finished IPv4 frames of a few payload sizes
// against the zlib implementation it replaced (the masked headers copied to
// a pseudo header, then two crc32 calls), and the bare CRC-32 against zlib's.
#include <zlib.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>

#ifdef UROCE_HAVE_ISAL
#include <isa-l/crc.h>

#include "net/crc32_vpclmul.h"
#endif
#include "net/headers.h"
#include "net/icrc.h"
#include "net/packet.h"

namespace {

using uroce::net::Bth;
using uroce::net::Ipv4Hdr;
using uroce::net::UdpHdr;

// net/icrc.cc before rte_net_crc, IPv4 only.
uint32_t zlib_icrc(uint8_t* ip_hdr, size_t ip_len, size_t transport_len) {
  uint8_t pseudo[8 + sizeof(Ipv4Hdr) + sizeof(UdpHdr) + sizeof(Bth)];
  std::memset(pseudo, 0xff, 8);
  std::memcpy(pseudo + 8, ip_hdr, ip_len + sizeof(UdpHdr) + sizeof(Bth));
  auto* ip = reinterpret_cast<Ipv4Hdr*>(pseudo + 8);
  ip->tos = ip->ttl = 0xff;
  ip->checksum = 0xffff;
  reinterpret_cast<UdpHdr*>(pseudo + 8 + ip_len)->checksum = 0xffff;
  auto* bth = reinterpret_cast<Bth*>(pseudo + 8 + ip_len + sizeof(UdpHdr));
  bth->dest_qp = uint32_t(bth->dest_qp) | 0xff000000u;
  uLong crc = crc32(0L, pseudo, uInt(sizeof(pseudo)));
  return uint32_t(crc32(crc, ip_hdr + sizeof(pseudo) - 8, uInt(transport_len - sizeof(Bth))));
}

template <typename F>
void time_it(const char* what, size_t bytes, F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto limit = t0 + std::chrono::milliseconds(300);
  uint64_t n = 0;
  uint32_t sink = 0;
  auto t = t0;
  while (t < limit) {
    for (int i = 0; i < 1000; ++i) sink += f();
    n += 1000;
    t = std::chrono::steady_clock::now();
  }
  const double s = std::chrono::duration<double>(t - t0).count();
  std::printf("%-28s %6zu B  %8.1f ns  %6.2f GB/s  (%08x)\n", what, bytes, s / double(n) * 1e9,
              double(bytes) * double(n) / s / 1e9, sink);
}

}  // namespace

int main() {
  using namespace uroce::net;
  auto p = std::make_unique<Packet>();
  for (uint32_t payload : {64u, 1024u, 4096u}) {
    begin_roce_packet(*p, 0x0a);  // RC RDMA_WRITE_ONLY
    std::memset(p->payload(), 0x5a, payload);
    p->payload_len = payload;
    Route r;
    finish_roce_packet(*p, r);
    uint8_t* ip = p->data + p->l3_off;
    const size_t transport = p->len - p->bth_off - kIcrcBytes;
    const size_t covered = kIcrcPrefixBytes + p->len - p->l3_off - kIcrcBytes;
    if (zlib_icrc(ip, sizeof(Ipv4Hdr), transport) != compute_icrc(ip, sizeof(Ipv4Hdr), transport)) {
      std::printf("ICRC mismatch at payload %u\n", payload);
      return 1;
    }
    time_it("ICRC, zlib (before)", covered, [&] { return zlib_icrc(ip, sizeof(Ipv4Hdr), transport); });
    time_it("ICRC, compute_icrc (now)", covered,
            [&] { return compute_icrc(ip, sizeof(Ipv4Hdr), transport); });
  }
  static uint8_t buf[4096];
  std::memset(buf, 0xa5, sizeof(buf));
  time_it("CRC-32, zlib crc32_z", sizeof(buf), [&] { return uint32_t(crc32_z(0, buf, sizeof(buf))); });
  time_it("CRC-32, crc32_ieee", sizeof(buf), [&] { return crc32_ieee(buf, sizeof(buf)); });
#ifdef UROCE_HAVE_ISAL
  // The two CRC-32s crc32_ieee chooses between, alternately.
  for (size_t len : {size_t(1024), size_t(4096)}) {
    for (int round = 0; round < 2; ++round) {
      time_it("CRC-32, ISA-L alone", len, [&] { return uint32_t(crc32_gzip_refl(0, buf, len)); });
      if (crc32_fold256_supported())
        time_it("CRC-32, crc32_fold256", len, [&] { return crc32_fold256(0, buf, len); });
    }
  }
#endif
  return 0;
}
