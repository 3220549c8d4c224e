#include "net/packet.h"

#include <bit>
#include <cassert>

#include "net/icrc.h"
#include "uroce/gid.h"

namespace uroce::net {

namespace {

constexpr size_t kIpv4FrameHeaders = sizeof(EthHdr) + sizeof(Ipv4Hdr) + sizeof(UdpHdr);

// One's complement sum (RFC 1071) in 64-bit native-order words with
// end-around carry; the byte order is fixed once at the end (RFC 1071 2(B)).
// Every chunk but the last must have an even length.
class InternetSum {
 public:
  void add(const uint8_t* p, size_t len) {
    for (; len >= 8; p += 8, len -= 8) {
      uint64_t w;
      std::memcpy(&w, p, 8);
      add_word(w);
    }
    if (len) {
      uint64_t w = 0;  // the odd byte is padded with zero after it
      std::memcpy(&w, p, len);
      add_word(w);
    }
  }
  // ~sum as a host-order value to store in a be16 field.
  uint16_t complement() const {
    uint64_t s = sum_;
    s = (s & 0xffffffffu) + (s >> 32);
    s = (s & 0xffffffffu) + (s >> 32);
    s = (s & 0xffff) + (s >> 16);
    s = (s & 0xffff) + (s >> 16);
    uint16_t folded = uint16_t(s);
    if constexpr (std::endian::native == std::endian::little) folded = __builtin_bswap16(folded);
    return uint16_t(~folded);
  }

 private:
  void add_word(uint64_t w) {
    sum_ += w;
    sum_ += sum_ < w;  // end-around carry
  }
  uint64_t sum_ = 0;
};

uint16_t l3_offset(const Route& route) {
  return uint16_t(sizeof(EthHdr) + (route.vlan ? kVlanTagBytes : 0));
}

void begin_at(Packet& p, uint8_t opcode, uint16_t l3_off, uint16_t bth_off) {
  p.opcode = opcode;
  p.checksummed = true;
  p.framed = false;
  p.l3_off = l3_off;
  p.bth_off = bth_off;
  const OpcodeInfo& info = opcode_info(opcode);
  std::memset(p.data + p.bth_off, 0, info.length);
  p.bth()->opcode = opcode;
  p.payload_off = p.bth_off + info.length;
  p.payload_len = 0;
}

// Moves the transport headers and payload so that the BTH starts at bth_off.
void move_transport(Packet& p, uint16_t bth_off) {
  const size_t n = p.payload_off - p.bth_off + p.payload_len;
  assert(bth_off + n + 3 + kIcrcBytes <= kFrameCapacity);
  std::memmove(p.data + bth_off, p.data + p.bth_off, n);
  p.payload_off = p.payload_off - p.bth_off + bth_off;
  p.bth_off = bth_off;
}

void write_ethernet(Packet& p, const Route& route, uint16_t ethertype) {
  auto* eth = reinterpret_cast<EthHdr*>(p.data);
  std::memcpy(eth->dst, route.dst_mac.data(), 6);
  std::memcpy(eth->src, route.src_mac.data(), 6);
  if (!route.vlan) {
    eth->ethertype = ethertype;
    return;
  }
  eth->ethertype = kEtherTypeVlan;  // 802.1Q: TPID, TCI, then the EtherType
  const uint16_t tci = uint16_t((route.vlan_pcp & 7) << 13 | (route.vlan_id & kVlanIdMask));
  *reinterpret_cast<be16*>(p.data + sizeof(EthHdr)) = tci;
  *reinterpret_cast<be16*>(p.data + sizeof(EthHdr) + 2) = ethertype;
}

void write_ipv4(Packet& p, const Route& route, uint32_t udp_len) {
  auto* ip = reinterpret_cast<Ipv4Hdr*>(p.data + p.l3_off);
  ip->version_ihl = 0x45;
  ip->tos = route.tos;
  ip->total_len = uint16_t(sizeof(Ipv4Hdr) + udp_len);
  ip->id = 0;
  ip->frag_off = 0x4000;  // DF
  ip->ttl = route.ttl;
  ip->protocol = kIpProtoUdp;
  std::memcpy(ip->src, route.src_ip.data(), 4);
  std::memcpy(ip->dst, route.dst_ip.data(), 4);
  ip->checksum = p.checksummed ? ipv4_checksum(*ip) : 0;
}

void write_ipv6(Packet& p, const Route& route, uint32_t udp_len) {
  auto* ip = reinterpret_cast<Ipv6Hdr*>(p.data + p.l3_off);
  ip->version_tc_flow = 6u << 28 | uint32_t(route.tos) << 20 | (route.flow_label & 0xfffff);
  ip->payload_len = uint16_t(udp_len);
  ip->next_header = kIpProtoUdp;
  ip->hop_limit = route.ttl;
  std::memcpy(ip->src, route.src_ip6.data(), 16);
  std::memcpy(ip->dst, route.dst_ip6.data(), 16);
}

// IPv4 header checks; on success *udp_off and *udp_len locate the datagram.
ParseError parse_ipv4(const Packet& p, size_t off, bool check, size_t* udp_off, size_t* udp_len) {
  const auto* ip = reinterpret_cast<const Ipv4Hdr*>(p.data + off);
  if (ip->version_ihl != 0x45) return ParseError::kBadIpHeader;  // no options in RoCEv2
  const size_t ip_total = ip->total_len;
  if (off + ip_total > p.len || ip_total < sizeof(Ipv4Hdr) + sizeof(UdpHdr))
    return ParseError::kBadIpHeader;
  if (check && ipv4_checksum(*ip) != uint16_t(ip->checksum)) return ParseError::kBadIpChecksum;
  if (ip->protocol != kIpProtoUdp) return ParseError::kNotRoce;
  const auto* udp = reinterpret_cast<const UdpHdr*>(p.data + off + sizeof(Ipv4Hdr));
  if (uint16_t(udp->dst_port) != kRoceV2Port) return ParseError::kNotRoce;
  *udp_off = off + sizeof(Ipv4Hdr);
  *udp_len = udp->length;
  if (*udp_len != ip_total - sizeof(Ipv4Hdr)) return ParseError::kBadUdpLength;
  return ParseError::kOk;
}

// IPv6 header checks (RFC 8200), then the UDP checksum when check is set.
ParseError parse_ipv6(const Packet& p, size_t off, bool check, size_t* udp_off, size_t* udp_len) {
  if (p.len < off + sizeof(Ipv6Hdr) + sizeof(UdpHdr) + sizeof(Bth) + kIcrcBytes)
    return ParseError::kTooShort;
  const auto* ip = reinterpret_cast<const Ipv6Hdr*>(p.data + off);
  if (uint32_t(ip->version_tc_flow) >> 28 != 6) return ParseError::kBadIpHeader;
  const size_t payload = ip->payload_len;
  // Payload length 0 is a jumbogram (RFC 2675), which needs a hop-by-hop
  // header: never RoCEv2.
  if (off + sizeof(Ipv6Hdr) + payload > p.len || payload < sizeof(UdpHdr))
    return ParseError::kBadIpHeader;
  // RoCEv2 puts UDP right after the IPv6 header (A17.4): an extension header
  // is not RoCEv2 either.
  if (ip->next_header != kIpProtoUdp) return ParseError::kNotRoce;
  const auto* udp = reinterpret_cast<const UdpHdr*>(p.data + off + sizeof(Ipv6Hdr));
  if (uint16_t(udp->dst_port) != kRoceV2Port) return ParseError::kNotRoce;
  *udp_off = off + sizeof(Ipv6Hdr);
  *udp_len = udp->length;
  if (*udp_len != payload) return ParseError::kBadUdpLength;
  if (*udp_len < sizeof(UdpHdr) + sizeof(Bth) + kIcrcBytes) return ParseError::kTooShort;
  // RFC 8200 8.1 makes the UDP checksum mandatory over IPv6, but Linux rxe and
  // RoCE NICs send 0 and rely on the ICRC (the RFC 6935/6936 tunnel case, as
  // Linux's UDP tunnels accept): 0 is taken as "not computed", any other
  // value must verify.
  if (check && uint16_t(udp->checksum) != 0 &&
      ipv6_l4_checksum(ip->src, ip->dst, kIpProtoUdp, p.data + *udp_off, *udp_len) != 0)
    return ParseError::kBadUdpChecksum;
  return ParseError::kOk;
}

}  // namespace

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

uint16_t ipv6_l4_checksum(const uint8_t src[16], const uint8_t dst[16], uint8_t next_header,
                          const uint8_t* data, size_t len) {
  // Pseudo header: source, destination, 32-bit upper-layer length, three
  // zero bytes and the next header.
  uint8_t pseudo[40];
  std::memcpy(pseudo, src, 16);
  std::memcpy(pseudo + 16, dst, 16);
  const uint32_t l = uint32_t(len);
  const uint8_t tail[8] = {uint8_t(l >> 24), uint8_t(l >> 16), uint8_t(l >> 8), uint8_t(l), 0, 0, 0,
                           next_header};
  std::memcpy(pseudo + 32, tail, 8);
  InternetSum sum;
  sum.add(pseudo, sizeof(pseudo));
  sum.add(data, len);
  return sum.complement();
}

void begin_roce_packet(Packet& p, uint8_t opcode) {
  begin_at(p, opcode, sizeof(EthHdr), kIpv4FrameHeaders);
}

void begin_roce_packet(Packet& p, uint8_t opcode, const Route& route) {
  begin_at(p, opcode, l3_offset(route), bth_offset_for(route));
}

namespace {

// The pad and the BTH's pad count; returns the transport length (BTH to the
// end of the pad).
uint32_t pad_transport(Packet& p) {
  const uint32_t pad = (4 - (p.payload_len & 3)) & 3;
  std::memset(p.payload() + p.payload_len, 0, pad);
  Bth* bth = p.bth();
  bth->flags = uint8_t((bth->flags & 0xc0) | (pad << 4));  // TVer 0
  return p.payload_off - p.bth_off + p.payload_len + pad;
}

// After the headers: the frame's length and, when checksummed, the ICRC and
// (IPv6) the UDP checksum.
void finish_checksums(Packet& p, bool v6, uint32_t transport_len, uint32_t udp_len) {
  auto* udp = reinterpret_cast<UdpHdr*>(p.data + p.bth_off - sizeof(UdpHdr));
  p.len = p.bth_off + transport_len + kIcrcBytes;
  p.framed = true;
  uint8_t* icrc_at = p.data + p.bth_off + transport_len;
  if (!p.checksummed) {
    std::memset(icrc_at, 0, kIcrcBytes);  // no stale bytes for a reader to trust
    return;
  }
  const size_t ip_len = v6 ? sizeof(Ipv6Hdr) : sizeof(Ipv4Hdr);
  const uint32_t icrc = compute_icrc(p.data + p.l3_off, ip_len, transport_len);
  std::memcpy(icrc_at, &icrc, 4);  // little-endian on the wire

  if (v6) {
    // Over IPv6 the UDP checksum is mandatory (RFC 8200 8.1). It covers the
    // ICRC, and the ICRC masks it: computed last. A result of 0 is sent as
    // 0xffff (RFC 768), 0 meaning "no checksum".
    const auto* ip = reinterpret_cast<const Ipv6Hdr*>(p.data + p.l3_off);
    const uint16_t c = ipv6_l4_checksum(ip->src, ip->dst, kIpProtoUdp,
                                        reinterpret_cast<const uint8_t*>(udp), udp_len);
    udp->checksum = c ? c : 0xffff;
  }
}

void write_udp(Packet& p, const Route& route, uint32_t udp_len) {
  auto* udp = reinterpret_cast<UdpHdr*>(p.data + p.bth_off - sizeof(UdpHdr));
  udp->src_port = route.src_port;
  udp->dst_port = kRoceV2Port;
  udp->length = uint16_t(udp_len);
  udp->checksum = 0;  // RoCEv2 over IPv4 sends a zero UDP checksum (A17.3.2)
}

}  // namespace

void finish_roce_packet(Packet& p, const Route& route) {
  const uint16_t bth_off = bth_offset_for(route);
  if (p.bth_off != bth_off) move_transport(p, bth_off);
  p.l3_off = l3_offset(route);
  const bool v6 = route.family == IpFamily::kIpv6;
  const uint32_t transport_len = pad_transport(p);
  const uint32_t udp_len = uint32_t(sizeof(UdpHdr) + transport_len + kIcrcBytes);

  write_ethernet(p, route, v6 ? kEtherTypeIpv6 : kEtherTypeIpv4);
  if (v6)
    write_ipv6(p, route, udp_len);
  else
    write_ipv4(p, route, udp_len);
  write_udp(p, route, udp_len);
  finish_checksums(p, v6, transport_len, udp_len);
}

void make_header_template(const Route& route, HeaderTemplate& t) {
  // The headers of an empty packet laid out for route, lengths then cleared.
  Packet scratch;
  scratch.checksummed = false;
  scratch.l3_off = l3_offset(route);
  scratch.bth_off = bth_offset_for(route);
  const bool v6 = route.family == IpFamily::kIpv6;
  write_ethernet(scratch, route, v6 ? kEtherTypeIpv6 : kEtherTypeIpv4);
  if (v6)
    write_ipv6(scratch, route, 0);
  else
    write_ipv4(scratch, route, 0);
  write_udp(scratch, route, 0);
  t.len = scratch.bth_off;
  std::memcpy(t.bytes.data(), scratch.data, t.len);
  t.ipv4_sum = 0;
  if (!v6) {
    auto* ip = reinterpret_cast<Ipv4Hdr*>(t.bytes.data() + scratch.l3_off);
    ip->total_len = 0;
    ip->checksum = 0;
    // ipv4_checksum gives ~sum; its complement is the sum of every other field.
    t.ipv4_sum = uint16_t(~ipv4_checksum(*ip));
  }
}

void finish_roce_packet(Packet& p, const Route& route, const HeaderTemplate& t) {
  if (p.bth_off != t.len) move_transport(p, t.len);
  p.l3_off = l3_offset(route);
  const bool v6 = route.family == IpFamily::kIpv6;
  const uint32_t transport_len = pad_transport(p);
  const uint32_t udp_len = uint32_t(sizeof(UdpHdr) + transport_len + kIcrcBytes);

  std::memcpy(p.data, t.bytes.data(), t.len);
  if (v6) {
    reinterpret_cast<Ipv6Hdr*>(p.data + p.l3_off)->payload_len = uint16_t(udp_len);
  } else {
    auto* ip = reinterpret_cast<Ipv4Hdr*>(p.data + p.l3_off);
    const uint16_t total_len = uint16_t(sizeof(Ipv4Hdr) + udp_len);
    ip->total_len = total_len;
    if (p.checksummed) {
      uint32_t sum = t.ipv4_sum + total_len;  // RFC 1624: the sum grows by the new field
      sum = (sum & 0xffff) + (sum >> 16);
      ip->checksum = uint16_t(~sum);
    }
  }
  reinterpret_cast<UdpHdr*>(p.data + p.bth_off - sizeof(UdpHdr))->length = uint16_t(udp_len);
  finish_checksums(p, v6, transport_len, udp_len);
}

const char* parse_error_name(ParseError e) {
  static constexpr const char* kNames[] = {"ok",           "too_short",      "not_ip",
                                           "bad_ip_header", "bad_ip_checksum", "not_roce",
                                           "bad_udp_length", "bad_opcode",    "bad_length",
                                           "bad_icrc",      "bad_udp_checksum"};
  static_assert(std::size(kNames) == size_t(ParseError::kCount));
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
    off += kVlanTagBytes;
  }
  size_t udp_off = 0, udp_len = 0;
  ParseError e;
  if (type == kEtherTypeIpv4)
    e = parse_ipv4(p, off, check_icrc, &udp_off, &udp_len);
  else if (type == kEtherTypeIpv6)
    e = parse_ipv6(p, off, check_icrc, &udp_off, &udp_len);
  else
    return ParseError::kNotIp;
  if (e != ParseError::kOk) return e;
  if (udp_len < sizeof(UdpHdr) + sizeof(Bth) + kIcrcBytes) return ParseError::kTooShort;
  p.l3_off = uint16_t(off);
  p.bth_off = uint16_t(udp_off + sizeof(UdpHdr));
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
    if (wire != compute_icrc(p.data + p.l3_off, udp_off - off, transport_len))
      return ParseError::kBadIcrc;
  }
  return ParseError::kOk;
}

// ---- addresses of a parsed frame ----

IpFamily roce_family(const Packet& p) {
  return (p.data[p.l3_off] >> 4) == 6 ? IpFamily::kIpv6 : IpFamily::kIpv4;
}

namespace {
Ipv6Addr gid_at(const Packet& p, bool dst) {
  if (roce_family(p) == IpFamily::kIpv6) {
    const auto* ip = reinterpret_cast<const Ipv6Hdr*>(p.data + p.l3_off);
    Ipv6Addr a;
    std::memcpy(a.data(), dst ? ip->dst : ip->src, 16);
    return a;
  }
  const auto* ip = reinterpret_cast<const Ipv4Hdr*>(p.data + p.l3_off);
  std::array<uint8_t, 4> v4;
  std::memcpy(v4.data(), dst ? ip->dst : ip->src, 4);
  return ipv4_mapped_gid(v4);
}
}  // namespace

Ipv6Addr roce_src_gid(const Packet& p) { return gid_at(p, false); }
Ipv6Addr roce_dst_gid(const Packet& p) { return gid_at(p, true); }

void roce_grh(const Packet& p, uint8_t grh[40]) {
  if (roce_family(p) == IpFamily::kIpv6) {
    std::memcpy(grh, p.data + p.l3_off, sizeof(Ipv6Hdr));
    return;
  }
  std::memset(grh, 0, 40 - sizeof(Ipv4Hdr));
  Ipv4Hdr ip;
  std::memcpy(&ip, p.data + p.l3_off, sizeof(ip));
  // The header as it was on the wire: a loopback frame is built without its
  // checksum (ports.cc), rxe hands the received header over with it.
  ip.checksum = ipv4_checksum(ip);
  std::memcpy(grh + 40 - sizeof(Ipv4Hdr), &ip, sizeof(ip));
}

// ---- GIDs and routes ----

// The rule is uroce/gid.h's, which the CM and the drop-in librdmacm read too.
bool gid_is_ipv4_mapped(const uint8_t gid[16]) { return uroce::is_ipv4_mapped(gid); }

Ipv6Addr ipv4_mapped_gid(const std::array<uint8_t, 4>& ip) {
  Ipv6Addr g{};
  uroce::ipv4_gid(ip.data(), g.data());
  return g;
}

bool route_set_gids(Route& route, const uint8_t sgid[16], const uint8_t dgid[16]) {
  const bool s4 = gid_is_ipv4_mapped(sgid), d4 = gid_is_ipv4_mapped(dgid);
  if (s4 != d4) return false;
  if (s4) {
    route.family = IpFamily::kIpv4;
    std::memcpy(route.src_ip.data(), sgid + 12, 4);
    std::memcpy(route.dst_ip.data(), dgid + 12, 4);
  } else {
    route.family = IpFamily::kIpv6;
    std::memcpy(route.src_ip6.data(), sgid, 16);
    std::memcpy(route.dst_ip6.data(), dgid, 16);
  }
  return true;
}

// ---- 802.1Q ----

std::optional<uint16_t> vlan_tci(const Packet& p) {
  if (p.len < sizeof(EthHdr) + kVlanTagBytes) return std::nullopt;
  if (reinterpret_cast<const EthHdr*>(p.data)->ethertype != kEtherTypeVlan) return std::nullopt;
  return uint16_t(*reinterpret_cast<const be16*>(p.data + sizeof(EthHdr)));
}

bool add_vlan_tag(Packet& p, uint16_t tci) {
  if (p.len >= sizeof(EthHdr) && reinterpret_cast<const EthHdr*>(p.data)->ethertype == kEtherTypeVlan) return false;
  return insert_vlan_tag(p, tci);
}

bool insert_vlan_tag(Packet& p, uint16_t tci) {
  if (p.len < sizeof(EthHdr) || p.len + kVlanTagBytes > kFrameCapacity) return false;
  constexpr size_t kTypeOff = offsetof(EthHdr, ethertype);
  std::memmove(p.data + kTypeOff + kVlanTagBytes, p.data + kTypeOff, p.len - kTypeOff);
  *reinterpret_cast<be16*>(p.data + kTypeOff) = kEtherTypeVlan;
  *reinterpret_cast<be16*>(p.data + kTypeOff + 2) = tci;
  p.len += kVlanTagBytes;
  if (p.l3_off) p.l3_off += kVlanTagBytes;
  if (p.bth_off) p.bth_off += kVlanTagBytes;
  if (p.payload_off) p.payload_off += kVlanTagBytes;
  return true;
}

}  // namespace uroce::net
