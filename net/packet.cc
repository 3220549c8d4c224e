#include "net/packet.h"

#include "net/icrc.h"

namespace uroce::net {

namespace {
constexpr size_t kIpv4FrameHeaders = sizeof(EthHdr) + sizeof(Ipv4Hdr) + sizeof(UdpHdr);
}

uint16_t ipv4_checksum(const Ipv4Hdr& ip) {
  const auto* w = reinterpret_cast<const uint8_t*>(&ip);
  uint32_t sum = 0;
  for (size_t i = 0; i < sizeof(Ipv4Hdr); i += 2) {
    if (i == offsetof(Ipv4Hdr, checksum)) continue;
    sum += uint32_t(w[i]) << 8 | w[i + 1];
  }
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return uint16_t(~sum);
}

void begin_roce_packet(Packet& p, uint8_t opcode) {
  p.opcode = opcode;
  p.l3_off = sizeof(EthHdr);
  p.bth_off = kIpv4FrameHeaders;
  const OpcodeInfo& info = opcode_info(opcode);
  std::memset(p.data + p.bth_off, 0, info.length);
  p.bth()->opcode = opcode;
  p.payload_off = p.bth_off + info.length;
  p.payload_len = 0;
}

void finish_roce_packet(Packet& p, const Route& route) {
  const uint32_t pad = (4 - (p.payload_len & 3)) & 3;
  std::memset(p.payload() + p.payload_len, 0, pad);
  Bth* bth = p.bth();
  bth->flags = uint8_t((bth->flags & 0xc0) | (pad << 4));  // TVer 0
  const uint32_t transport_len = p.payload_off - p.bth_off + p.payload_len + pad;

  auto* eth = reinterpret_cast<EthHdr*>(p.data);
  std::memcpy(eth->dst, route.dst_mac.data(), 6);
  std::memcpy(eth->src, route.src_mac.data(), 6);
  eth->ethertype = kEtherTypeIpv4;

  auto* ip = reinterpret_cast<Ipv4Hdr*>(p.data + p.l3_off);
  ip->version_ihl = 0x45;
  ip->tos = route.tos;
  ip->total_len = uint16_t(sizeof(Ipv4Hdr) + sizeof(UdpHdr) + transport_len + kIcrcBytes);
  ip->id = 0;
  ip->frag_off = 0x4000;  // DF
  ip->ttl = route.ttl;
  ip->protocol = kIpProtoUdp;
  std::memcpy(ip->src, route.src_ip.data(), 4);
  std::memcpy(ip->dst, route.dst_ip.data(), 4);
  ip->checksum = ipv4_checksum(*ip);

  auto* udp = reinterpret_cast<UdpHdr*>(p.data + p.l3_off + sizeof(Ipv4Hdr));
  udp->src_port = route.src_port;
  udp->dst_port = kRoceV2Port;
  udp->length = uint16_t(sizeof(UdpHdr) + transport_len + kIcrcBytes);
  udp->checksum = 0;  // RoCEv2 over IPv4 sends a zero UDP checksum (A17.3.2)

  const uint32_t icrc = compute_icrc(p.data + p.l3_off, sizeof(Ipv4Hdr), transport_len);
  std::memcpy(p.data + p.bth_off + transport_len, &icrc, 4);  // little-endian on the wire
  p.len = p.bth_off + transport_len + kIcrcBytes;
}

const char* parse_error_name(ParseError e) {
  static constexpr const char* kNames[] = {"ok",           "too_short",      "not_ip",
                                           "bad_ip_header", "bad_ip_checksum", "not_roce",
                                           "bad_udp_length", "bad_opcode",    "bad_length",
                                           "bad_icrc"};
  return kNames[size_t(e)];
}

ParseError parse_roce_packet(Packet& p, bool check_icrc) {
  if (p.len < sizeof(EthHdr) + sizeof(Ipv4Hdr) + sizeof(UdpHdr) + sizeof(Bth) + kIcrcBytes)
    return ParseError::kTooShort;
  const auto* eth = reinterpret_cast<const EthHdr*>(p.data);
  size_t off = sizeof(EthHdr);
  uint16_t type = eth->ethertype;
  if (type == kEtherTypeVlan) {
    type = *reinterpret_cast<const be16*>(p.data + off + 2);
    off += 4;
  }
  if (type != kEtherTypeIpv4) return ParseError::kNotIp;  // IPv6: issue 4
  const auto* ip = reinterpret_cast<const Ipv4Hdr*>(p.data + off);
  if (ip->version_ihl != 0x45) return ParseError::kBadIpHeader;
  const size_t ip_total = ip->total_len;
  if (off + ip_total > p.len || ip_total < sizeof(Ipv4Hdr) + sizeof(UdpHdr))
    return ParseError::kBadIpHeader;
  if (check_icrc && ipv4_checksum(*ip) != uint16_t(ip->checksum)) return ParseError::kBadIpChecksum;
  if (ip->protocol != kIpProtoUdp) return ParseError::kNotRoce;
  const auto* udp = reinterpret_cast<const UdpHdr*>(p.data + off + sizeof(Ipv4Hdr));
  if (uint16_t(udp->dst_port) != kRoceV2Port) return ParseError::kNotRoce;
  const size_t udp_len = udp->length;
  if (udp_len != ip_total - sizeof(Ipv4Hdr)) return ParseError::kBadUdpLength;
  if (udp_len < sizeof(UdpHdr) + sizeof(Bth) + kIcrcBytes) return ParseError::kTooShort;
  p.l3_off = uint16_t(off);
  p.bth_off = uint16_t(off + sizeof(Ipv4Hdr) + sizeof(UdpHdr));
  p.opcode = p.bth()->opcode;
  const OpcodeInfo& info = p.info();
  if (!info.valid()) return ParseError::kBadOpcode;
  const size_t transport_len = udp_len - sizeof(UdpHdr) - kIcrcBytes;
  const size_t pad = p.bth()->pad_count();
  if (transport_len < info.length + pad) return ParseError::kBadLength;
  p.payload_off = p.bth_off + info.length;
  p.payload_len = uint32_t(transport_len - info.length - pad);
  if (!info.has(kHasPayload) && p.payload_len != 0) return ParseError::kBadLength;
  if (p.payload_len > kMaxMtu) return ParseError::kBadLength;
  if (check_icrc) {
    uint32_t wire;
    std::memcpy(&wire, p.data + p.bth_off + transport_len, 4);
    if (wire != compute_icrc(p.data + p.l3_off, sizeof(Ipv4Hdr), transport_len))
      return ParseError::kBadIcrc;
  }
  return ParseError::kOk;
}

}  // namespace uroce::net
