// The neighbour table ARP (IPv4) and NDP (IPv6) share: address -> MAC with a
// fixed number of entries, the oldest dynamic one evicted when full, dynamic
// entries aging out after max_age (static ones never). The protocols count
// what happened from the results; the cache itself keeps no counters.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace uroce::net {

using MacAddr = std::array<uint8_t, 6>;

template <typename Addr>
class NeighbourCache {
 public:
  struct Entry {
    Addr ip{};
    MacAddr mac{};
    uint64_t updated_ns = 0;
    bool valid = false;
    bool is_static = false;
  };
  enum class Insert : uint8_t {
    kUpdated,  // the address was known
    kLearned,  // a free entry took it
    kEvicted,  // learned in place of the oldest dynamic entry
    kRefused,  // full of static entries
  };

  NeighbourCache(size_t capacity, uint64_t max_age_ns)
      : entries_(std::max<size_t>(capacity, 1)), max_age_ns_(max_age_ns) {}

  Entry* find(const Addr& ip) {
    for (Entry& e : entries_)
      if (e.valid && e.ip == ip) return &e;
    return nullptr;
  }
  const Entry* find(const Addr& ip) const { return const_cast<NeighbourCache*>(this)->find(ip); }

  Insert insert(const Addr& ip, const MacAddr& mac, uint64_t now_ns, bool is_static) {
    Insert result = Insert::kUpdated;
    Entry* e = find(ip);
    if (!e) {
      Entry* oldest = nullptr;
      for (Entry& c : entries_) {
        if (!c.valid) {
          e = &c;
          break;
        }
        if (!c.is_static && (!oldest || c.updated_ns < oldest->updated_ns)) oldest = &c;
      }
      result = Insert::kLearned;
      if (!e) {
        if (!oldest) return Insert::kRefused;  // every entry static: keep them
        e = oldest;
        result = Insert::kEvicted;
      }
      e->ip = ip;
      e->is_static = false;
    }
    e->mac = mac;
    e->updated_ns = now_ns;
    e->valid = true;
    e->is_static = e->is_static || is_static;
    return result;
  }

  // Refreshes ip's dynamic entry (static entries stay as configured); true
  // if it did.
  bool refresh(const Addr& ip, const MacAddr& mac, uint64_t now_ns) {
    Entry* e = find(ip);
    if (!e || e->is_static) return false;
    e->mac = mac;
    e->updated_ns = now_ns;
    return true;
  }

  void remove(const Addr& ip) {
    if (Entry* e = find(ip)) *e = Entry{};
  }

  // Drops the entries past their age; returns how many.
  size_t expire(uint64_t now_ns) {
    size_t n = 0;
    for (Entry& e : entries_) {
      if (e.valid && !fresh(e, now_ns)) {
        e = Entry{};
        ++n;
      }
    }
    return n;
  }

  std::optional<MacAddr> lookup(const Addr& ip, uint64_t now_ns) const {
    const Entry* e = find(ip);
    if (!e || !fresh(*e, now_ns)) return std::nullopt;
    return e->mac;
  }

  size_t size() const {
    return size_t(std::count_if(entries_.begin(), entries_.end(), [](const Entry& e) { return e.valid; }));
  }
  size_t capacity() const { return entries_.size(); }

 private:
  bool fresh(const Entry& e, uint64_t now_ns) const {
    return e.is_static || now_ns - e.updated_ns <= max_age_ns_;
  }

  std::vector<Entry> entries_;
  uint64_t max_age_ns_;
};

}  // namespace uroce::net
