// IPv6 neighbour discovery over Ethernet (RFC 4861), the IPv6 counterpart of
// net/arp.h: Neighbor Solicitation and Advertisement frames, handling them
// for our addresses, the neighbour table, and (NdpPending, the shared
// NeighbourPending of arp.h) the frames waiting for a resolution.
//
// What is implemented: address resolution (4.3, 4.4, 7.2) and the NS/NA
// validity checks (7.1). Not implemented: router discovery and redirects,
// Neighbor Unreachability Detection's states (entries age out as in the ARP
// table instead), duplicate address detection of our own addresses (an NS
// from :: for one of them is answered, 7.2.4), MLD reports for the
// solicited-node groups (a switch doing MLD snooping would not forward them).
//
// Pure logic without I/O or clocks (times are passed in), owned by the engine
// thread; nothing here allocates after construction.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "net/arp.h"
#include "net/headers.h"
#include "net/packet.h"

namespace uroce::net {

constexpr uint8_t kIpProtoIcmpv6 = 58;

// The fixed part of a Neighbor Solicitation or Advertisement (RFC 4861 4.3,
// 4.4): ICMPv6 type, code, checksum, then 32 bits (NA: R, S, O flags; NS:
// reserved) and the target address. Options follow.
struct NdpMsg {
  uint8_t type;
  uint8_t code;  // 0
  be16 checksum;
  be32 flags;
  uint8_t target[16];

  static constexpr uint8_t kSolicitation = 135;
  static constexpr uint8_t kAdvertisement = 136;
  static constexpr uint32_t kRouter = 0x80000000u;     // NA R flag
  static constexpr uint32_t kSolicited = 0x40000000u;  // NA S flag
  static constexpr uint32_t kOverride = 0x20000000u;   // NA O flag
} __attribute__((packed));
static_assert(sizeof(NdpMsg) == 24);

// The source/target link-layer address option for Ethernet (RFC 4861 4.6.1).
struct NdpLinkLayerOption {
  uint8_t type;  // 1 source, 2 target
  uint8_t len;   // in units of 8 bytes: 1
  uint8_t mac[6];

  static constexpr uint8_t kSource = 1;
  static constexpr uint8_t kTarget = 2;
} __attribute__((packed));
static_assert(sizeof(NdpLinkLayerOption) == 8);

// Ethernet + IPv6 + NS or NA with one link-layer address option.
constexpr size_t kNdpFrameLen =
    sizeof(EthHdr) + sizeof(Ipv6Hdr) + sizeof(NdpMsg) + sizeof(NdpLinkLayerOption);
static_assert(kNdpFrameLen == 86);

// RFC 4861 7.1: NDP messages are sent with, and only accepted at, hop limit
// 255, which proves they were not forwarded by a router.
constexpr uint8_t kNdpHopLimit = 255;

// ff02::1, the all-nodes group (RFC 4291 2.7.1).
constexpr Ipv6Addr kAllNodesAddr = {0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};

// The solicited-node multicast address of ip: ff02::1:ff00:0/104 followed by
// ip's low 24 bits (RFC 4291 2.7.1).
Ipv6Addr solicited_node_addr(const Ipv6Addr& ip);
// The Ethernet group address of an IPv6 multicast address: 33:33 followed
// by its low 32 bits (RFC 2464 7).
MacAddr ipv6_multicast_mac(const Ipv6Addr& group);
bool is_ipv6_multicast(const Ipv6Addr& ip);

// Builds a Neighbor Solicitation for target_ip from our_ip, to target_ip's
// solicited-node group and its 33:33:ff:xx:xx:xx MAC, with our source
// link-layer address (RFC 4861 7.2.2).
void build_ndp_solicitation(Packet& p, const MacAddr& our_mac, const Ipv6Addr& our_ip,
                            const Ipv6Addr& target_ip);
// Builds a Neighbor Advertisement "target_ip is at our_mac" from target_ip
// (one of our addresses) to to_mac/to_ip, with the override flag, the
// solicited flag if asked, and our target link-layer address (RFC 4861 7.2.4).
void build_ndp_advertisement(Packet& p, const MacAddr& our_mac, const Ipv6Addr& target_ip,
                             const MacAddr& to_mac, const Ipv6Addr& to_ip, bool solicited);
// True if the frame (after an optional 802.1Q tag) is IPv6 carrying an
// ICMPv6 Neighbor Solicitation or Advertisement. Checks no more than that:
// NdpTable::handle validates the rest.
bool is_ndp_frame(const Packet& p);

#define UROCE_NDP_COUNTERS(X)                                                               \
  X(rx, "NDP frames handled")                                                               \
  X(rx_malformed, "NDP frames dropped: short, bad lengths, code or options, multicast target (RFC 4861 7.1)") \
  X(rx_bad_hop_limit, "NDP frames dropped: IPv6 hop limit not 255 (RFC 4861 7.1)")           \
  X(rx_bad_checksum, "NDP frames dropped: ICMPv6 checksum wrong")                           \
  X(rx_bad_lladdr, "NDP frames dropped: multicast or zero link-layer address")              \
  X(rx_not_for_us, "neighbour solicitations for another address")                           \
  X(rx_na_ignored, "neighbour advertisements that taught nothing: unknown neighbour not answering us, no target link-layer address, or no override of a different address") \
  X(solicitations_answered, "neighbour advertisements sent for our addresses")              \
  X(learned, "neighbour entries added")                                                     \
  X(updated, "neighbour entries refreshed")                                                 \
  X(evicted, "neighbour entries replaced when the table was full")                          \
  X(expired, "neighbour entries removed by age")

struct NdpCounters {
#define UROCE_NDP_COUNTER_FIELD(name, desc) uint64_t name = 0;
  UROCE_NDP_COUNTERS(UROCE_NDP_COUNTER_FIELD)
#undef UROCE_NDP_COUNTER_FIELD
};

// What NdpTable::handle did with a frame.
struct NdpHandled {
  bool reply = false;                 // *reply_out holds an advertisement to send
  std::optional<Ipv6Addr> resolved;   // this neighbour's entry was added or
                                      // refreshed: release frames waiting for it
};

// IPv6 -> MAC with the time each entry was last confirmed, as ArpTable:
// fixed capacity, the oldest dynamic entry replaced when full, static
// entries never age.
class NdpTable {
 public:
  static constexpr uint64_t kDefaultMaxAgeNs = 300'000'000'000;  // 5 minutes

  explicit NdpTable(size_t capacity = 256, uint64_t max_age_ns = kDefaultMaxAgeNs);

  // Handles a received NS or NA (is_ndp_frame) for the interface that owns
  // our_ips:
  //  - NS for one of our addresses (7.2.3): learns the sender from its source
  //    link-layer option and writes a solicited NA into *reply_out, to the
  //    sender (or, for a duplicate address probe from ::, an unsolicited one
  //    to all nodes); if the NS came 802.1Q-tagged, so does the reply.
  //  - NA (7.2.5): refreshes the target's entry (a different MAC only with
  //    the override flag), or adds it if the NA is a solicited answer sent to
  //    one of our addresses.
  // reply_out may be null (learn only).
  NdpHandled handle(const Packet& in, const MacAddr& our_mac, std::span<const Ipv6Addr> our_ips,
                    uint64_t now_ns, Packet* reply_out);
  NdpHandled handle(const Packet& in, const MacAddr& our_mac, const Ipv6Addr& our_ip,
                    uint64_t now_ns, Packet* reply_out) {
    return handle(in, our_mac, std::span<const Ipv6Addr>(&our_ip, 1), now_ns, reply_out);
  }

  // The MAC for ip if its entry is younger than max_age (or static).
  std::optional<MacAddr> lookup(const Ipv6Addr& ip, uint64_t now_ns) const;

  // Adds or refreshes an entry (dynamic unless is_static).
  void insert(const Ipv6Addr& ip, const MacAddr& mac, uint64_t now_ns, bool is_static = false);
  void remove(const Ipv6Addr& ip);
  // Removes dynamic entries older than max_age; returns how many.
  size_t expire(uint64_t now_ns);

  size_t size() const;
  size_t capacity() const { return cache_.capacity(); }
  const NdpCounters& counters() const { return counters_; }

 private:
  struct Parsed;
  // Refreshes ip's dynamic entry if it has one; true if it had one.
  bool refresh(const Ipv6Addr& ip, const MacAddr& mac, uint64_t now_ns);
  NdpHandled on_solicitation(const Parsed& m, const MacAddr& our_mac,
                             std::span<const Ipv6Addr> our_ips, uint64_t now_ns, Packet* reply_out);
  NdpHandled on_advertisement(const Parsed& m, std::span<const Ipv6Addr> our_ips, uint64_t now_ns);

  NeighbourCache<Ipv6Addr> cache_;
  NdpCounters counters_;
};

// Frames waiting for a neighbour solicitation's answer.
using NdpPending = NeighbourPending<Ipv6Addr>;
using NdpPendingConfig = NeighbourPendingConfig;

}  // namespace uroce::net
