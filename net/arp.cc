#include "net/arp.h"

#include <algorithm>
#include <cstring>

namespace uroce::net {

namespace {

constexpr size_t kArpOff = sizeof(EthHdr);

void build(Packet& p, uint16_t oper, const MacAddr& eth_dst, const MacAddr& sha,
           const Ipv4Addr& spa, const MacAddr& tha, const Ipv4Addr& tpa) {
  std::memset(p.data, 0, kArpFrameLen);
  auto* eth = reinterpret_cast<EthHdr*>(p.data);
  std::memcpy(eth->dst, eth_dst.data(), 6);
  std::memcpy(eth->src, sha.data(), 6);
  eth->ethertype = kEtherTypeArp;
  auto* arp = reinterpret_cast<ArpHdr*>(p.data + kArpOff);
  arp->htype = ArpHdr::kHtypeEthernet;
  arp->ptype = kEtherTypeIpv4;
  arp->hlen = 6;
  arp->plen = 4;
  arp->oper = oper;
  std::memcpy(arp->sha, sha.data(), 6);
  std::memcpy(arp->spa, spa.data(), 4);
  std::memcpy(arp->tha, tha.data(), 6);
  std::memcpy(arp->tpa, tpa.data(), 4);
  p.len = kArpFrameLen;
  p.l3_off = kArpOff;
  p.bth_off = 0;
  p.payload_off = 0;
  p.payload_len = 0;
  p.opcode = 0;
}

// Offset of the ARP header, or 0 if the frame is not ARP.
size_t arp_offset(const Packet& p) {
  if (p.len < sizeof(EthHdr)) return 0;
  const auto* eth = reinterpret_cast<const EthHdr*>(p.data);
  if (eth->ethertype == kEtherTypeArp) return kArpOff;
  if (eth->ethertype == kEtherTypeVlan && p.len >= kArpOff + 4 &&
      *reinterpret_cast<const be16*>(p.data + kArpOff + 2) == kEtherTypeArp)
    return kArpOff + 4;
  return 0;
}

bool zero_ip(const uint8_t* ip) { return !(ip[0] | ip[1] | ip[2] | ip[3]); }

}  // namespace

void build_arp_request(Packet& p, const MacAddr& our_mac, const Ipv4Addr& our_ip,
                       const Ipv4Addr& target_ip) {
  // RFC 826 leaves the target hardware address of a request open; zero is
  // what Linux sends.
  build(p, ArpHdr::kRequest, kBroadcastMac, our_mac, our_ip, MacAddr{}, target_ip);
}

void build_arp_reply(Packet& p, const MacAddr& our_mac, const Ipv4Addr& our_ip,
                     const MacAddr& to_mac, const Ipv4Addr& to_ip) {
  build(p, ArpHdr::kReply, to_mac, our_mac, our_ip, to_mac, to_ip);
}

bool is_arp_frame(const Packet& p) { return arp_offset(p) != 0; }

// ---- ArpTable ----

ArpTable::ArpTable(size_t capacity, uint64_t max_age_ns) : cache_(capacity, max_age_ns) {}

void ArpTable::count(NeighbourCache<Ipv4Addr>::Insert result) {
  using Insert = NeighbourCache<Ipv4Addr>::Insert;
  if (result == Insert::kUpdated) ++counters_.updated;
  if (result == Insert::kLearned || result == Insert::kEvicted) ++counters_.learned;
  if (result == Insert::kEvicted) ++counters_.evicted;
}

void ArpTable::insert(const Ipv4Addr& ip, const MacAddr& mac, uint64_t now_ns, bool is_static) {
  count(cache_.insert(ip, mac, now_ns, is_static));
}

void ArpTable::remove(const Ipv4Addr& ip) { cache_.remove(ip); }

size_t ArpTable::expire(uint64_t now_ns) {
  const size_t n = cache_.expire(now_ns);
  counters_.expired += n;
  return n;
}

size_t ArpTable::size() const { return cache_.size(); }

std::optional<MacAddr> ArpTable::lookup(const Ipv4Addr& ip, uint64_t now_ns) const {
  return cache_.lookup(ip, now_ns);
}

bool ArpTable::handle(const Packet& in, const MacAddr& our_mac, const Ipv4Addr& our_ip,
                      uint64_t now_ns, Packet* reply_out) {
  const size_t off = arp_offset(in);
  if (!off || in.len < off + sizeof(ArpHdr)) {
    ++counters_.rx_malformed;
    return false;
  }
  const auto* arp = reinterpret_cast<const ArpHdr*>(in.data + off);
  ++counters_.rx;
  // RFC 826: "?Do I have the hardware type in ar$hrd? ... the protocol type
  // in ar$pro?" (and the lengths that go with them).
  if (arp->htype != ArpHdr::kHtypeEthernet || arp->ptype != kEtherTypeIpv4 || arp->hlen != 6 ||
      arp->plen != 4 || (arp->oper != ArpHdr::kRequest && arp->oper != ArpHdr::kReply)) {
    ++counters_.rx_malformed;
    return false;
  }
  MacAddr sha;
  Ipv4Addr spa, tpa;
  std::memcpy(sha.data(), arp->sha, 6);
  std::memcpy(spa.data(), arp->spa, 4);
  std::memcpy(tpa.data(), arp->tpa, 4);
  // A group or zero sender address is never a neighbour's (RFC 1812 3.3.2).
  if ((sha[0] & 1) || sha == MacAddr{}) {
    ++counters_.rx_bad_sender;
    return false;
  }
  const bool probe = zero_ip(arp->spa);
  // "If the pair <protocol type, sender protocol address> is already in my
  // translation table, update the sender hardware address field" ...
  // (static entries stay as configured).
  const bool merged = !probe && cache_.find(spa) != nullptr;
  if (merged && cache_.refresh(spa, sha, now_ns)) ++counters_.updated;
  // "?Am I the target protocol address?"
  if (tpa != our_ip) {
    ++counters_.rx_not_for_us;
    return false;
  }
  // "If Merge_flag is false, add the triplet to the translation table."
  if (!probe && !merged) insert(spa, sha, now_ns);
  // "?Is the opcode ares_op$REQUEST? ... swap hardware and protocol fields".
  if (arp->oper != ArpHdr::kRequest || !reply_out) return false;
  build_arp_reply(*reply_out, our_mac, our_ip, sha, spa);
  ++counters_.requests_answered;
  return true;
}

// ---- NeighbourPending ----

template <typename Addr>
NeighbourPending<Addr>::NeighbourPending(const NeighbourPendingConfig& config) : config_(config) {
  config_.max_dests = std::max<size_t>(config_.max_dests, 1);
  config_.max_per_dest = std::max<size_t>(config_.max_per_dest, 1);
  config_.max_requests = std::max(config_.max_requests, 1u);
  dests_.resize(config_.max_dests);
  frames_.resize(config_.max_dests * config_.max_per_dest, nullptr);
}

template <typename Addr>
typename NeighbourPending<Addr>::Dest* NeighbourPending<Addr>::find(const Addr& ip) {
  for (Dest& d : dests_)
    if (d.used && d.ip == ip) return &d;
  return nullptr;
}

template <typename Addr>
const typename NeighbourPending<Addr>::Dest* NeighbourPending<Addr>::find(const Addr& ip) const {
  return const_cast<NeighbourPending*>(this)->find(ip);
}

template <typename Addr>
PendingEnqueue NeighbourPending<Addr>::enqueue(const Addr& ip, Packet* p, uint64_t now_ns) {
  Dest* d = find(ip);
  bool first = false;
  if (!d) {
    for (Dest& c : dests_) {
      if (!c.used) {
        d = &c;
        break;
      }
    }
    if (!d) {
      ++counters_.dropped_no_slot;
      return Enqueue::kRefused;
    }
    *d = Dest{};
    d->ip = ip;
    d->used = true;
    d->requests = 1;  // the caller sends the first one now
    d->next_ns = now_ns + config_.retry_interval_ns;
    ++counters_.requests;
    first = true;
  }
  if (d->count == config_.max_per_dest) {
    ++counters_.dropped_queue_full;
    return Enqueue::kRefused;
  }
  frame(slot_of(*d), (d->head + d->count) % config_.max_per_dest) = p;
  ++d->count;
  ++counters_.queued;
  return first ? Enqueue::kQueuedSendRequest : Enqueue::kQueued;
}

template <typename Addr>
uint64_t NeighbourPending<Addr>::next_deadline_ns() const {
  uint64_t next = 0;
  for (const Dest& d : dests_)
    if (d.used && (!next || d.next_ns < next)) next = d.next_ns;
  return next;
}

template <typename Addr>
size_t NeighbourPending<Addr>::frames_waiting() const {
  size_t n = 0;
  for (const Dest& d : dests_)
    if (d.used) n += d.count;
  return n;
}

template class NeighbourPending<Ipv4Addr>;
template class NeighbourPending<Ipv6Addr>;

}  // namespace uroce::net
