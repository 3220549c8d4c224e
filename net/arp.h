// ARP for IPv4 over Ethernet (RFC 826): frame building and handling, the
// neighbour table, and the policy for frames waiting for a resolution (shared
// with IPv6 neighbour discovery, net/ndp.h).
// Pure logic without I/O or clocks (times are passed in), owned by the engine
// thread; nothing here allocates after construction.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "net/headers.h"
#include "net/neighbour_cache.h"
#include "net/packet.h"

namespace uroce::net {

using Ipv4Addr = std::array<uint8_t, 4>;  // network order, as Route::src_ip

constexpr MacAddr kBroadcastMac = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};

// The ARP packet for Ethernet/IPv4 (RFC 826, "Packet format").
struct ArpHdr {
  be16 htype;  // 1: Ethernet
  be16 ptype;  // 0x0800: IPv4
  uint8_t hlen;  // 6
  uint8_t plen;  // 4
  be16 oper;     // 1 request, 2 reply
  uint8_t sha[6];
  uint8_t spa[4];
  uint8_t tha[6];
  uint8_t tpa[4];

  static constexpr uint16_t kHtypeEthernet = 1;
  static constexpr uint16_t kRequest = 1;
  static constexpr uint16_t kReply = 2;
} __attribute__((packed));
static_assert(sizeof(ArpHdr) == 28);

// Ethernet header + ARP, padded to the 60-byte Ethernet minimum (64 with the
// FCS the NIC appends); the pad is zero.
constexpr size_t kArpFrameLen = 60;

// Builds a broadcast "who has target_ip? tell our_ip" request.
void build_arp_request(Packet& p, const MacAddr& our_mac, const Ipv4Addr& our_ip,
                       const Ipv4Addr& target_ip);
// Builds "our_ip is at our_mac", sent to to_mac/to_ip.
void build_arp_reply(Packet& p, const MacAddr& our_mac, const Ipv4Addr& our_ip,
                     const MacAddr& to_mac, const Ipv4Addr& to_ip);
// True if the frame's EtherType (after an optional 802.1Q tag) is ARP.
bool is_arp_frame(const Packet& p);

#define UROCE_ARP_COUNTERS(X)                                                           \
  X(rx, "ARP frames handled")                                                            \
  X(rx_malformed, "ARP frames dropped: short, or not Ethernet/IPv4 ARP")                \
  X(rx_bad_sender, "ARP frames dropped: broadcast, multicast or zero sender MAC")       \
  X(rx_not_for_us, "ARP requests for another address (sender refreshed if known)")      \
  X(requests_answered, "ARP replies sent for our address")                              \
  X(learned, "neighbour entries added")                                                 \
  X(updated, "neighbour entries refreshed")                                             \
  X(evicted, "neighbour entries replaced when the table was full")                      \
  X(expired, "neighbour entries removed by age")

struct ArpCounters {
#define UROCE_ARP_COUNTER_FIELD(name, desc) uint64_t name = 0;
  UROCE_ARP_COUNTERS(UROCE_ARP_COUNTER_FIELD)
#undef UROCE_ARP_COUNTER_FIELD
};

// IP -> MAC with the time each entry was last confirmed. Fixed capacity: when
// full, the oldest dynamic entry is replaced. Static entries never age.
class ArpTable {
 public:
  static constexpr uint64_t kDefaultMaxAgeNs = 300'000'000'000;  // 5 minutes

  explicit ArpTable(size_t capacity = 256, uint64_t max_age_ns = kDefaultMaxAgeNs);

  // Handles a received ARP frame (RFC 826, "Packet Reception"): refreshes the
  // sender's entry if it has one; if the frame targets our_ip, adds the
  // sender, and if it is a request, writes the reply into *reply_out and
  // returns true. A request from 0.0.0.0 (an RFC 5227 probe) is answered but
  // not learnt. reply_out may be null (learn only).
  bool handle(const Packet& in, const MacAddr& our_mac, const Ipv4Addr& our_ip, uint64_t now_ns,
              Packet* reply_out);

  // The MAC for ip if its entry is younger than max_age (or static).
  std::optional<MacAddr> lookup(const Ipv4Addr& ip, uint64_t now_ns) const;

  // Adds or refreshes an entry (dynamic unless is_static).
  void insert(const Ipv4Addr& ip, const MacAddr& mac, uint64_t now_ns, bool is_static = false);
  void remove(const Ipv4Addr& ip);
  // Removes dynamic entries older than max_age; returns how many.
  size_t expire(uint64_t now_ns);

  size_t size() const;
  size_t capacity() const { return cache_.capacity(); }
  const ArpCounters& counters() const { return counters_; }

 private:
  void count(NeighbourCache<Ipv4Addr>::Insert result);

  NeighbourCache<Ipv4Addr> cache_;
  ArpCounters counters_;
};

// Frames waiting for an address resolution (as Linux's neighbour queue), for
// ARP (ArpPending) and IPv6 neighbour discovery (NdpPending, net/ndp.h): at
// most max_per_dest frames per destination (more are refused: the caller
// drops them), a request (ARP request or Neighbor Solicitation) when the
// first frame queues, then every retry_interval until max_requests were
// sent; one retry_interval after the last request the waiting frames are
// dropped. Fixed capacity after construction.
struct NeighbourPendingConfig {
  size_t max_dests = 64;
  size_t max_per_dest = 16;
  uint64_t retry_interval_ns = 100'000'000;  // 100 ms
  unsigned max_requests = 3;  // RFC 4861 10: MAX_MULTICAST_SOLICIT is 3 too
};
using ArpPendingConfig = NeighbourPendingConfig;

#define UROCE_NEIGHBOUR_PENDING_COUNTERS(X)                                              \
  X(queued, "frames queued for an address resolution")                                   \
  X(released, "queued frames released when the address resolved")                       \
  X(dropped_queue_full, "frames refused: max_per_dest frames already wait for that address") \
  X(dropped_no_slot, "frames refused: max_dests addresses already being resolved")       \
  X(dropped_timeout, "queued frames dropped: no answer after max_requests requests")     \
  X(requests, "resolution requests (ARP requests or neighbour solicitations) asked for") \
  X(failed_resolutions, "addresses given up on after max_requests requests")
#define UROCE_ARP_PENDING_COUNTERS(X) UROCE_NEIGHBOUR_PENDING_COUNTERS(X)

struct NeighbourPendingCounters {
#define UROCE_NEIGHBOUR_PENDING_FIELD(name, desc) uint64_t name = 0;
  UROCE_NEIGHBOUR_PENDING_COUNTERS(UROCE_NEIGHBOUR_PENDING_FIELD)
#undef UROCE_NEIGHBOUR_PENDING_FIELD
};
using ArpPendingCounters = NeighbourPendingCounters;

enum class PendingEnqueue : uint8_t {
  kQueuedSendRequest,  // queued; the first for this address: send a request now
  kQueued,             // queued behind others; a request is already out
  kRefused,            // not queued (counted): the caller drops the frame
};

// Addr is the protocol address: Ipv4Addr for ARP, Ipv6Addr for NDP.
template <typename Addr>
class NeighbourPending {
 public:
  using Enqueue = PendingEnqueue;

  explicit NeighbourPending(const NeighbourPendingConfig& config = {});

  // Queues p (the caller's until then; ours until released or dropped).
  Enqueue enqueue(const Addr& ip, Packet* p, uint64_t now_ns);

  // ip resolved: calls send(Packet*) for each waiting frame in arrival order
  // (the caller sets the destination MAC and transmits) and frees the slot.
  // Returns the number of frames released.
  template <typename Send>
  size_t resolved(const Addr& ip, Send&& send);

  // Housekeeping: calls request(const Addr&) for each address due for
  // another request, and drop(Packet*) for every frame of an address given
  // up on (the caller returns it to its pool). Returns whether anything
  // happened.
  template <typename Request, typename Drop>
  bool tick(uint64_t now_ns, Request&& request, Drop&& drop);

  // Earliest time tick() has something to do; 0 when nothing waits.
  uint64_t next_deadline_ns() const;
  bool waiting(const Addr& ip) const { return find(ip) != nullptr; }
  size_t frames_waiting() const;
  const NeighbourPendingCounters& counters() const { return counters_; }

 private:
  struct Dest {
    Addr ip{};
    bool used = false;
    unsigned requests = 0;     // requests sent so far
    uint64_t next_ns = 0;      // next request, or give-up time after the last
    size_t head = 0, count = 0;  // ring of frames in frames_[slot * max_per_dest ...]
  };
  Dest* find(const Addr& ip);
  const Dest* find(const Addr& ip) const;
  Packet*& frame(size_t slot, size_t i) { return frames_[slot * config_.max_per_dest + i]; }
  size_t slot_of(const Dest& d) const { return size_t(&d - dests_.data()); }
  template <typename F>
  void drain(Dest& d, F&& f);

  NeighbourPendingConfig config_;
  std::vector<Dest> dests_;
  std::vector<Packet*> frames_;
  NeighbourPendingCounters counters_;
};

// The non-template members are in arp.cc, instantiated for both families.
extern template class NeighbourPending<Ipv4Addr>;
extern template class NeighbourPending<Ipv6Addr>;

using ArpPending = NeighbourPending<Ipv4Addr>;

// ---- template members ----

template <typename Addr>
template <typename F>
void NeighbourPending<Addr>::drain(Dest& d, F&& f) {
  const size_t slot = slot_of(d);
  for (size_t i = 0; i < d.count; ++i) f(frame(slot, (d.head + i) % config_.max_per_dest));
  d = Dest{};
}

template <typename Addr>
template <typename Send>
size_t NeighbourPending<Addr>::resolved(const Addr& ip, Send&& send) {
  Dest* d = find(ip);
  if (!d) return 0;
  const size_t n = d->count;
  counters_.released += n;
  drain(*d, send);
  return n;
}

template <typename Addr>
template <typename Request, typename Drop>
bool NeighbourPending<Addr>::tick(uint64_t now_ns, Request&& request, Drop&& drop) {
  bool work = false;
  for (Dest& d : dests_) {
    if (!d.used || now_ns < d.next_ns) continue;
    work = true;
    if (d.requests < config_.max_requests) {
      ++d.requests;
      ++counters_.requests;
      d.next_ns = now_ns + config_.retry_interval_ns;
      request(static_cast<const Addr&>(d.ip));
    } else {
      ++counters_.failed_resolutions;
      counters_.dropped_timeout += d.count;
      drain(d, drop);
    }
  }
  return work;
}

}  // namespace uroce::net
