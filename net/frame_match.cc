// Frame field extraction and checksums for flow steering and raw packet QPs.
#include "net/frame_match.h"

#include <cstring>

#include "net/headers.h"

namespace uroce::net {

namespace {

constexpr uint16_t kEtherTypeQinQ = 0x88a8;
constexpr uint8_t kIpProtoTcp = 6;
constexpr size_t kTcpMinHeader = 20;
constexpr size_t kTcpChecksumOffset = 16;
constexpr size_t kUdpChecksumOffset = 6;

uint16_t load_be16(const uint8_t* p) { return uint16_t(p[0] << 8 | p[1]); }

// One's-complement sum of len bytes (RFC 1071), not yet folded.
uint32_t sum_bytes(const uint8_t* p, size_t len, uint32_t sum = 0) {
  for (; len > 1; p += 2, len -= 2) sum += load_be16(p);
  if (len) sum += uint32_t(p[0]) << 8;
  return sum;
}

uint16_t fold(uint32_t sum) {
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return uint16_t(sum);
}

// TCP or UDP over IPv4: the pseudo header (RFC 793 / 768) and the segment.
uint16_t ipv4_l4_sum(const uint8_t* ip, const uint8_t* l4, size_t l4_len, uint8_t proto) {
  uint32_t sum = sum_bytes(ip + 12, 8);  // source and destination addresses
  sum += proto;
  sum += uint32_t(l4_len);
  return fold(sum_bytes(l4, l4_len, sum));
}

// The IPv4 total length bounds the segment (Ethernet may pad short frames).
bool ipv4_segment(const uint8_t* frame, size_t len, const FrameFields& f, size_t* l4_len) {
  const uint8_t* ip = frame + f.l3_off;
  const size_t ihl = size_t(ip[0] & 0x0f) * 4;
  const size_t total = load_be16(ip + 2);
  if (total < ihl || f.l3_off + total > len || f.l4_off != f.l3_off + ihl) return false;
  *l4_len = total - ihl;
  return true;
}

}  // namespace

FrameFields frame_fields(const uint8_t* frame, size_t len) {
  FrameFields f;
  if (len < sizeof(EthHdr)) return f;
  abi::FlowKey& k = f.key;
  std::memcpy(k.dst_mac, frame, 6);
  std::memcpy(k.src_mac, frame + 6, 6);
  f.protocols = abi::kFlowEth;
  f.multicast = frame[0] & 1;
  size_t off = 12;
  uint16_t type = load_be16(frame + off);
  // 802.1Q (and an 802.1ad outer tag): the rule's vlan_tag is the outer
  // TCI, its ether_type the type after the last tag (man ibv_create_flow).
  bool outer = true;
  while ((type == kEtherTypeVlan || type == kEtherTypeQinQ) && off + 6 <= len) {
    if (outer) {
      std::memcpy(&k.vlan_tag, frame + off + 2, 2);
      f.protocols |= abi::kFlowVlan;
      outer = false;
    }
    off += 4;
    type = load_be16(frame + off);
  }
  if (off + 2 > len) return f;
  std::memcpy(&k.ether_type, frame + off, 2);
  off += 2;
  uint8_t proto = 0;
  if (type == kEtherTypeIpv4 && off + sizeof(Ipv4Hdr) <= len) {
    const uint8_t* ip = frame + off;
    const size_t ihl = size_t(ip[0] & 0x0f) * 4;
    if ((ip[0] >> 4) != 4 || ihl < sizeof(Ipv4Hdr) || off + ihl > len) return f;
    f.protocols |= abi::kFlowIpv4;
    f.l3_off = uint16_t(off);
    k.tos = ip[1];
    k.ip_flags = ip[6] >> 5;
    k.ttl = ip[8];
    k.ip_proto = proto = ip[9];
    std::memcpy(k.src_ip, ip + 12, 4);
    std::memcpy(k.dst_ip, ip + 16, 4);
    // Only the first fragment carries the ports.
    if ((load_be16(ip + 6) & 0x1fff) != 0) return f;
    off += ihl;
  } else if (type == kEtherTypeIpv6 && off + sizeof(Ipv6Hdr) <= len) {
    const uint8_t* ip = frame + off;
    if ((ip[0] >> 4) != 6) return f;
    f.protocols |= abi::kFlowIpv6;
    f.l3_off = uint16_t(off);
    const uint32_t vtf = uint32_t(ip[0]) << 24 | uint32_t(ip[1]) << 16 | uint32_t(ip[2]) << 8 | ip[3];
    k.tos = uint8_t(vtf >> 20);
    const uint32_t label = __builtin_bswap32(vtf & 0xfffff);
    std::memcpy(&k.flow_label, &label, 4);
    k.ip_proto = proto = ip[6];
    k.ttl = ip[7];
    std::memcpy(k.src_ip, ip + 8, 16);
    std::memcpy(k.dst_ip, ip + 24, 16);
    off += sizeof(Ipv6Hdr);
  } else {
    return f;
  }
  if ((proto == kIpProtoTcp || proto == kIpProtoUdp) && off + 4 <= len) {
    f.protocols |= proto == kIpProtoTcp ? abi::kFlowTcp : abi::kFlowUdp;
    f.l4_off = uint16_t(off);
    std::memcpy(&k.src_port, frame + off, 2);
    std::memcpy(&k.dst_port, frame + off + 2, 2);
  }
  return f;
}

bool ipv4_l4_checksums_ok(const uint8_t* frame, size_t len, const FrameFields& f) {
  if (!(f.protocols & abi::kFlowIpv4) || !(f.protocols & (abi::kFlowTcp | abi::kFlowUdp)))
    return false;
  const uint8_t* ip = frame + f.l3_off;
  const size_t ihl = size_t(ip[0] & 0x0f) * 4;
  if (fold(sum_bytes(ip, ihl)) != 0xffff) return false;
  size_t l4_len;
  if (!ipv4_segment(frame, len, f, &l4_len)) return false;
  const uint8_t* l4 = frame + f.l4_off;
  if (f.protocols & abi::kFlowUdp) {
    if (l4_len < sizeof(UdpHdr)) return false;
    if (load_be16(l4 + kUdpChecksumOffset) == 0) return true;  // no checksum sent (RFC 768)
    return ipv4_l4_sum(ip, l4, l4_len, kIpProtoUdp) == 0xffff;
  }
  if (l4_len < kTcpMinHeader) return false;
  return ipv4_l4_sum(ip, l4, l4_len, kIpProtoTcp) == 0xffff;
}

bool fill_ipv4_l4_checksums(uint8_t* frame, size_t len, const FrameFields& f) {
  if (!(f.protocols & abi::kFlowIpv4)) return false;
  uint8_t* ip = frame + f.l3_off;
  const size_t ihl = size_t(ip[0] & 0x0f) * 4;
  ip[10] = ip[11] = 0;
  const uint16_t ip_sum = uint16_t(~fold(sum_bytes(ip, ihl)));
  ip[10] = uint8_t(ip_sum >> 8);
  ip[11] = uint8_t(ip_sum);
  size_t l4_len;
  if (!(f.protocols & (abi::kFlowTcp | abi::kFlowUdp)) || !ipv4_segment(frame, len, f, &l4_len))
    return true;  // the IP header alone
  uint8_t* l4 = frame + f.l4_off;
  const bool udp = f.protocols & abi::kFlowUdp;
  const size_t at = udp ? kUdpChecksumOffset : kTcpChecksumOffset;
  if (l4_len < at + 2) return false;
  l4[at] = l4[at + 1] = 0;
  uint16_t sum = uint16_t(~ipv4_l4_sum(ip, l4, l4_len, udp ? kIpProtoUdp : kIpProtoTcp));
  if (udp && sum == 0) sum = 0xffff;  // 0 would mean "no checksum" (RFC 768)
  l4[at] = uint8_t(sum >> 8);
  l4[at + 1] = uint8_t(sum);
  return true;
}

}  // namespace uroce::net
