#include "net/ndp.h"

#include <algorithm>
#include <cstring>

namespace uroce::net {

namespace {

constexpr size_t kMsgOff = sizeof(Ipv6Hdr);  // from the IPv6 header
constexpr MacAddr kAllNodesMac = {0x33, 0x33, 0, 0, 0, 1};

// Offset of the IPv6 header if the frame's EtherType (after an optional
// 802.1Q tag) is IPv6, else 0.
size_t ipv6_offset(const Packet& p) {
  if (p.len < sizeof(EthHdr)) return 0;
  const auto* eth = reinterpret_cast<const EthHdr*>(p.data);
  if (eth->ethertype == kEtherTypeIpv6) return sizeof(EthHdr);
  if (eth->ethertype == kEtherTypeVlan && p.len >= sizeof(EthHdr) + kVlanTagBytes &&
      *reinterpret_cast<const be16*>(p.data + sizeof(EthHdr) + 2) == kEtherTypeIpv6)
    return sizeof(EthHdr) + kVlanTagBytes;
  return 0;
}

bool bad_lladdr(const MacAddr& mac) { return (mac[0] & 1) || mac == MacAddr{}; }

Ipv6Addr addr(const uint8_t* bytes) {
  Ipv6Addr a;
  std::memcpy(a.data(), bytes, 16);
  return a;
}

MacAddr mac_at(const uint8_t* bytes) {
  MacAddr m;
  std::memcpy(m.data(), bytes, 6);
  return m;
}

void build(Packet& p, const MacAddr& eth_dst, const MacAddr& eth_src, const Ipv6Addr& src,
           const Ipv6Addr& dst, uint8_t type, uint32_t flags, const Ipv6Addr& target,
           uint8_t option, const MacAddr& option_mac) {
  std::memset(p.data, 0, kNdpFrameLen);
  auto* eth = reinterpret_cast<EthHdr*>(p.data);
  std::memcpy(eth->dst, eth_dst.data(), 6);
  std::memcpy(eth->src, eth_src.data(), 6);
  eth->ethertype = kEtherTypeIpv6;
  auto* ip = reinterpret_cast<Ipv6Hdr*>(p.data + sizeof(EthHdr));
  ip->version_tc_flow = 6u << 28;
  ip->payload_len = uint16_t(sizeof(NdpMsg) + sizeof(NdpLinkLayerOption));
  ip->next_header = kIpProtoIcmpv6;
  ip->hop_limit = kNdpHopLimit;
  std::memcpy(ip->src, src.data(), 16);
  std::memcpy(ip->dst, dst.data(), 16);
  auto* msg = reinterpret_cast<NdpMsg*>(p.data + sizeof(EthHdr) + kMsgOff);
  msg->type = type;
  msg->code = 0;
  msg->flags = flags;
  std::memcpy(msg->target, target.data(), 16);
  auto* opt = reinterpret_cast<NdpLinkLayerOption*>(msg + 1);
  opt->type = option;
  opt->len = 1;
  std::memcpy(opt->mac, option_mac.data(), 6);
  msg->checksum = 0;
  msg->checksum = ipv6_l4_checksum(ip->src, ip->dst, kIpProtoIcmpv6,
                                   reinterpret_cast<const uint8_t*>(msg), ip->payload_len);
  p.len = kNdpFrameLen;
  p.l3_off = sizeof(EthHdr);
  p.bth_off = 0;
  p.payload_off = 0;
  p.payload_len = 0;
  p.opcode = 0;
}

}  // namespace

Ipv6Addr solicited_node_addr(const Ipv6Addr& ip) {
  Ipv6Addr a = {0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xff, 0, 0, 0};
  std::memcpy(a.data() + 13, ip.data() + 13, 3);
  return a;
}

MacAddr ipv6_multicast_mac(const Ipv6Addr& group) {
  return {0x33, 0x33, group[12], group[13], group[14], group[15]};
}

bool is_ipv6_multicast(const Ipv6Addr& ip) { return ip[0] == 0xff; }

void build_ndp_solicitation(Packet& p, const MacAddr& our_mac, const Ipv6Addr& our_ip,
                            const Ipv6Addr& target_ip) {
  const Ipv6Addr group = solicited_node_addr(target_ip);
  build(p, ipv6_multicast_mac(group), our_mac, our_ip, group, NdpMsg::kSolicitation, 0, target_ip,
        NdpLinkLayerOption::kSource, our_mac);
}

void build_ndp_advertisement(Packet& p, const MacAddr& our_mac, const Ipv6Addr& target_ip,
                             const MacAddr& to_mac, const Ipv6Addr& to_ip, bool solicited) {
  const uint32_t flags = NdpMsg::kOverride | (solicited ? NdpMsg::kSolicited : 0);
  build(p, to_mac, our_mac, target_ip, to_ip, NdpMsg::kAdvertisement, flags, target_ip,
        NdpLinkLayerOption::kTarget, our_mac);
}

bool is_ndp_frame(const Packet& p) {
  const size_t off = ipv6_offset(p);
  if (!off || p.len < off + sizeof(Ipv6Hdr) + 1) return false;
  const auto* ip = reinterpret_cast<const Ipv6Hdr*>(p.data + off);
  const uint8_t type = p.data[off + kMsgOff];
  return ip->next_header == kIpProtoIcmpv6 &&
         (type == NdpMsg::kSolicitation || type == NdpMsg::kAdvertisement);
}

// ---- NdpTable ----

// A received NS or NA that passed the checks of RFC 4861 7.1.
struct NdpTable::Parsed {
  uint8_t type = 0;
  uint32_t flags = 0;
  Ipv6Addr src{}, dst{}, target{};
  MacAddr eth_src{};
  std::optional<MacAddr> source_lladdr, target_lladdr;
  std::optional<uint16_t> tci;
};

NdpTable::NdpTable(size_t capacity, uint64_t max_age_ns) : cache_(capacity, max_age_ns) {}

void NdpTable::insert(const Ipv6Addr& ip, const MacAddr& mac, uint64_t now_ns, bool is_static) {
  using Insert = NeighbourCache<Ipv6Addr>::Insert;
  const Insert result = cache_.insert(ip, mac, now_ns, is_static);
  if (result == Insert::kUpdated) ++counters_.updated;
  if (result == Insert::kLearned || result == Insert::kEvicted) ++counters_.learned;
  if (result == Insert::kEvicted) ++counters_.evicted;
}

bool NdpTable::refresh(const Ipv6Addr& ip, const MacAddr& mac, uint64_t now_ns) {
  if (!cache_.find(ip)) return false;
  if (cache_.refresh(ip, mac, now_ns)) ++counters_.updated;  // static entries stay as configured
  return true;
}

void NdpTable::remove(const Ipv6Addr& ip) { cache_.remove(ip); }

size_t NdpTable::expire(uint64_t now_ns) {
  const size_t n = cache_.expire(now_ns);
  counters_.expired += n;
  return n;
}

size_t NdpTable::size() const { return cache_.size(); }

std::optional<MacAddr> NdpTable::lookup(const Ipv6Addr& ip, uint64_t now_ns) const {
  return cache_.lookup(ip, now_ns);
}

NdpHandled NdpTable::handle(const Packet& in, const MacAddr& our_mac,
                            std::span<const Ipv6Addr> our_ips, uint64_t now_ns, Packet* reply_out) {
  const size_t off = ipv6_offset(in);
  if (!off || in.len < off + sizeof(Ipv6Hdr) + sizeof(NdpMsg)) {
    ++counters_.rx_malformed;
    return {};
  }
  ++counters_.rx;
  const auto* ip = reinterpret_cast<const Ipv6Hdr*>(in.data + off);
  const size_t icmp_len = ip->payload_len;
  const auto* msg = reinterpret_cast<const NdpMsg*>(in.data + off + kMsgOff);
  // RFC 4861 7.1.1 / 7.1.2: "ICMP length (derived from the IP length) is 24
  // or more octets" (and the IP length within the frame).
  if (uint32_t(ip->version_tc_flow) >> 28 != 6 || ip->next_header != kIpProtoIcmpv6 ||
      icmp_len < sizeof(NdpMsg) || off + sizeof(Ipv6Hdr) + icmp_len > in.len ||
      (msg->type != NdpMsg::kSolicitation && msg->type != NdpMsg::kAdvertisement)) {
    ++counters_.rx_malformed;
    return {};
  }
  // "The IP Hop Limit field has a value of 255".
  if (ip->hop_limit != kNdpHopLimit) {
    ++counters_.rx_bad_hop_limit;
    return {};
  }
  // "ICMP Checksum is valid".
  if (ipv6_l4_checksum(ip->src, ip->dst, kIpProtoIcmpv6, reinterpret_cast<const uint8_t*>(msg),
                       icmp_len) != 0) {
    ++counters_.rx_bad_checksum;
    return {};
  }
  Parsed m;
  m.type = msg->type;
  m.flags = msg->flags;
  m.src = addr(ip->src);
  m.dst = addr(ip->dst);
  m.target = addr(msg->target);
  m.eth_src = mac_at(reinterpret_cast<const EthHdr*>(in.data)->src);
  m.tci = vlan_tci(in);
  // "ICMP Code is 0", "Target Address is not a multicast address"; a source
  // address is never multicast (RFC 4291 2.7).
  bool ok = msg->code == 0 && !is_ipv6_multicast(m.target) && !is_ipv6_multicast(m.src);
  // "All included options have a length that is greater than zero."
  const uint8_t* opt = reinterpret_cast<const uint8_t*>(msg + 1);
  const uint8_t* end = reinterpret_cast<const uint8_t*>(msg) + icmp_len;
  while (ok && opt < end) {
    if (end - opt < 2 || opt[1] == 0 || end - opt < opt[1] * 8) {
      ok = false;
      break;
    }
    if (opt[0] == NdpLinkLayerOption::kSource || opt[0] == NdpLinkLayerOption::kTarget) {
      // Ethernet's link-layer address option is 8 bytes (RFC 2464 8); Linux
      // drops other lengths too.
      if (opt[1] != 1) {
        ok = false;
        break;
      }
      const MacAddr mac = mac_at(opt + 2);
      if (bad_lladdr(mac)) {
        ++counters_.rx_bad_lladdr;
        return {};
      }
      (opt[0] == NdpLinkLayerOption::kSource ? m.source_lladdr : m.target_lladdr) = mac;
    }
    opt += opt[1] * 8;  // unknown options are skipped (RFC 4861 4.6)
  }
  if (m.type == NdpMsg::kSolicitation && m.src == Ipv6Addr{}) {
    // "If the IP source address is the unspecified address, the IP
    // destination address is a solicited-node multicast address" and "there
    // is no source link-layer address option".
    ok = ok && m.dst == solicited_node_addr(m.target) && !m.source_lladdr;
  }
  // NA: "If the IP Destination Address is a multicast address the
  // Solicited flag is zero."
  if (m.type == NdpMsg::kAdvertisement && is_ipv6_multicast(m.dst))
    ok = ok && !(m.flags & NdpMsg::kSolicited);
  if (!ok) {
    ++counters_.rx_malformed;
    return {};
  }
  if (m.type == NdpMsg::kSolicitation)
    return on_solicitation(m, our_mac, our_ips, now_ns, reply_out);
  return on_advertisement(m, our_ips, now_ns);
}

// RFC 4861 7.2.3, "Receipt of Neighbor Solicitations".
NdpHandled NdpTable::on_solicitation(const Parsed& m, const MacAddr& our_mac,
                                     std::span<const Ipv6Addr> our_ips, uint64_t now_ns,
                                     Packet* reply_out) {
  // "If the Target Address is not a valid "unicast" or anycast address
  // assigned to the receiving interface ..., the solicitation is silently
  // discarded."
  if (std::find(our_ips.begin(), our_ips.end(), m.target) == our_ips.end()) {
    ++counters_.rx_not_for_us;
    return {};
  }
  NdpHandled out;
  const bool dad = m.src == Ipv6Addr{};
  // "If the Source Address is not the unspecified address and ... the
  // solicitation includes a Source Link-Layer Address option, then the
  // recipient SHOULD create or update the Neighbor Cache entry".
  if (!dad && m.source_lladdr) {
    if (!refresh(m.src, *m.source_lladdr, now_ns)) insert(m.src, *m.source_lladdr, now_ns);
    out.resolved = m.src;
  }
  if (!reply_out) return out;
  // 7.2.4: to the source, or to all nodes (S clear) for a probe from ::.
  // Without a source link-layer option (a unicast NS), the frame's source MAC.
  if (dad) {
    build_ndp_advertisement(*reply_out, our_mac, m.target, kAllNodesMac, kAllNodesAddr, false);
  } else {
    const MacAddr to = m.source_lladdr ? *m.source_lladdr : m.eth_src;
    if (bad_lladdr(to)) {
      ++counters_.rx_bad_lladdr;
      return out;
    }
    build_ndp_advertisement(*reply_out, our_mac, m.target, to, m.src, true);
  }
  if (m.tci) add_vlan_tag(*reply_out, *m.tci);  // answered on the VLAN asked on
  ++counters_.solicitations_answered;
  out.reply = true;
  return out;
}

// RFC 4861 7.2.5, "Receipt of Neighbor Advertisements", without the NUD
// states: an advertisement refreshes a known neighbour (a different MAC only
// with the override flag) and adds one that answers our solicitation.
NdpHandled NdpTable::on_advertisement(const Parsed& m, std::span<const Ipv6Addr> our_ips,
                                      uint64_t now_ns) {
  if (!m.target_lladdr) {
    ++counters_.rx_na_ignored;
    return {};
  }
  const MacAddr& mac = *m.target_lladdr;
  if (const auto* e = cache_.find(m.target)) {
    if (e->mac != mac && !(m.flags & NdpMsg::kOverride)) {
      ++counters_.rx_na_ignored;
      return {};
    }
    refresh(m.target, mac, now_ns);
    return {false, m.target};
  }
  // "If no entry exists, the advertisement SHOULD be silently discarded":
  // our pending resolutions are not entries yet, so a solicited NA sent to
  // one of our addresses is taken as the answer to our solicitation.
  const bool to_us = std::find(our_ips.begin(), our_ips.end(), m.dst) != our_ips.end();
  if (!to_us || !(m.flags & NdpMsg::kSolicited)) {
    ++counters_.rx_na_ignored;
    return {};
  }
  insert(m.target, mac, now_ns);
  return {false, m.target};
}

}  // namespace uroce::net
