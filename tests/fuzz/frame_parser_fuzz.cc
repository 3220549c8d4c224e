// libFuzzer target: the RoCEv2 frame parser (net/packet.cc) on arbitrary
// bytes, with and without the ICRC check, then every accessor the device
// uses on a frame that parsed; and flow steering's frame matcher
// (net/frame_match.cc) with its checksums on the same bytes. Crashes,
// sanitizer reports and reads outside the frame are the findings.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include "net/frame_match.h"
#include "net/packet.h"

using namespace uroce::net;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static auto p = std::make_unique<Packet>();
  if (size > kFrameCapacity) return -1;  // a port never delivers more
  // Flow steering reads every frame a port receives while rules exist.
  const FrameFields f = frame_fields(data, size);
  if (f.l3_off > size || f.l4_off > size || (f.l4_off && f.l4_off + 4 > size)) __builtin_trap();
  (void)ipv4_l4_checksums_ok(data, size, f);
  std::memcpy(p->data, data, size);
  (void)fill_ipv4_l4_checksums(p->data, size, f);
  for (bool check_icrc : {false, true}) {
    std::memcpy(p->data, data, size);
    p->len = uint32_t(size);
    p->checksummed = check_icrc;
    if (parse_roce_packet(*p, check_icrc) != ParseError::kOk) continue;
    // Everything the device reads off a parsed frame stays inside it.
    if (p->payload_off + p->payload_len > p->len) __builtin_trap();
    uint8_t grh[40];
    roce_grh(*p, grh);
    (void)roce_src_gid(*p);
    (void)roce_dst_gid(*p);
    (void)roce_family(*p);
    (void)vlan_tci(*p);
    const OpcodeInfo& info = p->info();
    if (p->bth_off + info.length > p->payload_off) __builtin_trap();
  }
  return 0;
}
