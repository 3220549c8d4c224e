#include "net/fault_injector.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

namespace uroce::net {

namespace {

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

bool later(const auto& a, const auto& b) {
  return a.due_ns != b.due_ns ? a.due_ns > b.due_ns : a.seq > b.seq;
}

// Offset of the BTH if the frame is RoCEv2 over IPv4 (optionally 802.1Q
// tagged), else 0. Works on any finished frame: offsets are not trusted.
size_t roce_bth_offset(const Packet& p) {
  size_t off = sizeof(EthHdr);
  if (p.len < off) return 0;
  uint16_t type = reinterpret_cast<const EthHdr*>(p.data)->ethertype;
  if (type == kEtherTypeVlan) {
    if (p.len < off + 4) return 0;
    type = *reinterpret_cast<const be16*>(p.data + off + 2);
    off += 4;
  }
  if (type != kEtherTypeIpv4 || p.len < off + sizeof(Ipv4Hdr) + sizeof(UdpHdr)) return 0;
  const auto* ip = reinterpret_cast<const Ipv4Hdr*>(p.data + off);
  const size_t ihl = size_t(ip->version_ihl & 0x0f) * 4;
  if (ip->protocol != kIpProtoUdp || ihl < sizeof(Ipv4Hdr)) return 0;
  off += ihl;
  if (p.len < off + sizeof(UdpHdr)) return 0;
  if (uint16_t(reinterpret_cast<const UdpHdr*>(p.data + off)->dst_port) != kRoceV2Port) return 0;
  off += sizeof(UdpHdr);
  return p.len >= off + sizeof(Bth) + kIcrcBytes ? off : 0;
}

}  // namespace

std::string validate(const FaultConfig& c) {
  const std::pair<const char*, double> probabilities[] = {
      {"drop", c.drop}, {"duplicate", c.duplicate}, {"reorder", c.reorder}, {"corrupt", c.corrupt}};
  for (const auto& [name, v] : probabilities)
    if (!std::isfinite(v) || v < 0 || v > 1)
      return std::string(name) + " probability must be between 0 and 1";
  if (c.delay_us > 10'000'000) return "delay must be at most 10 s";
  if (c.reorder_max_hold_us > 10'000'000) return "reorder hold must be at most 10 s";
  return "";
}

FaultInjector::FaultInjector(const FaultConfig& config, size_t max_held)
    : max_held_(std::max<size_t>(max_held, 1)) {
  heap_.reserve(max_held_);
  FaultConfig c = config;
  if (!validate(c).empty()) c = FaultConfig{.seed = config.seed};
  if (c.seed == 0) c.seed = (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
  uint64_t s = c.seed;
  for (uint64_t& w : rng_) w = splitmix64(s);
  configure(c);
}

std::string FaultInjector::configure(const FaultConfig& config) {
  std::string err = validate(config);
  if (!err.empty()) return err;
  if (config.seed != 0 && config.seed != config_.seed) {
    uint64_t s = config.seed;
    for (uint64_t& w : rng_) w = splitmix64(s);
  }
  config_ = config;
  active_ = config.drop > 0 || config.duplicate > 0 || config.reorder > 0 || config.corrupt > 0 ||
            config.delay_us > 0;
  return "";
}

uint64_t FaultInjector::next_random() {
  const uint64_t result = rotl(rng_[1] * 5, 7) * 9;
  const uint64_t t = rng_[1] << 17;
  rng_[2] ^= rng_[0];
  rng_[3] ^= rng_[1];
  rng_[1] ^= rng_[2];
  rng_[0] ^= rng_[3];
  rng_[2] ^= t;
  rng_[3] = rotl(rng_[3], 45);
  return result;
}

void FaultInjector::corrupt(Packet& p) {
  const size_t bth = roce_bth_offset(p);
  if (!bth) {
    ++counters_.not_corruptible;
    return;
  }
  // Any byte from the BTH to the end of the pad, except BTH byte 4 (FECN,
  // BECN, reserved): the ICRC masks it (IBA A17.3.3), so an error there would
  // go unnoticed. A change within one byte is a burst of at most 8 bits,
  // which a CRC-32 always detects.
  const size_t span = p.len - kIcrcBytes - bth - 1;
  size_t off = bth + size_t(next_random() % span);
  if (off >= bth + 4) ++off;
  const uint8_t flip = uint8_t(1 + next_random() % 255);
  p.data[off] ^= flip;
  ++counters_.corrupted;
}

void FaultInjector::hold(Packet* p, uint64_t due_ns, std::vector<Packet*>& out_now) {
  if (heap_.size() == max_held_) {
    ++counters_.hold_full;
    out_now.push_back(p);
    return;
  }
  heap_.push_back({due_ns, seq_++, p});
  std::push_heap(heap_.begin(), heap_.end(), [](const Held& a, const Held& b) { return later(a, b); });
}

void FaultInjector::emit(Packet* p, uint64_t now_ns, std::vector<Packet*>& out_now) {
  if (config_.delay_us == 0 && heap_.empty()) {
    out_now.push_back(p);
    return;
  }
  // Never before a frame still held from an earlier, longer delay: a delay
  // change alone does not reorder (hold() keeps arrival order on ties).
  if (config_.delay_us) ++counters_.delayed;
  last_due_ns_ = std::max(last_due_ns_, now_ns + config_.delay_us * 1000);
  hold(p, last_due_ns_, out_now);
}

void FaultInjector::on_tx(Packet* p, uint64_t now_ns, std::vector<Packet*>& out_now,
                          PacketPool& pool) {
  ++counters_.frames;
  if (chance(config_.drop)) {
    ++counters_.dropped;
    pool.put(p);
    return;
  }
  if (chance(config_.corrupt)) corrupt(*p);
  Packet* dup = nullptr;
  if (chance(config_.duplicate) && (dup = pool.get())) {
    copy_packet(*dup, *p);
    ++counters_.duplicated;
  }
  // A frame held for reordering goes out right after the next one.
  Packet* behind = reorder_slot_;
  reorder_slot_ = nullptr;
  if (!behind && chance(config_.reorder)) {
    ++counters_.reordered;
    reorder_slot_ = p;
    reorder_deadline_ns_ = now_ns + config_.reorder_max_hold_us * 1000;
  } else {
    emit(p, now_ns, out_now);
  }
  if (dup) emit(dup, now_ns, out_now);
  if (behind) emit(behind, now_ns, out_now);
}

void FaultInjector::release_due(uint64_t now_ns, std::vector<Packet*>& out) {
  if (reorder_slot_ && now_ns >= reorder_deadline_ns_) {
    Packet* p = reorder_slot_;
    reorder_slot_ = nullptr;
    emit(p, now_ns, out);
  }
  auto cmp = [](const Held& a, const Held& b) { return later(a, b); };
  while (!heap_.empty() && heap_.front().due_ns <= now_ns) {
    std::pop_heap(heap_.begin(), heap_.end(), cmp);
    out.push_back(heap_.back().p);
    heap_.pop_back();
  }
}

uint64_t FaultInjector::next_due_ns() const {
  uint64_t next = heap_.empty() ? 0 : heap_.front().due_ns;
  if (reorder_slot_ && (!next || reorder_deadline_ns_ < next)) next = reorder_deadline_ns_;
  return next;
}

void FaultInjector::discard_held(PacketPool& pool) {
  for (const Held& h : heap_) pool.put(h.p);
  heap_.clear();
  if (reorder_slot_) pool.put(reorder_slot_);
  reorder_slot_ = nullptr;
}

}  // namespace uroce::net
