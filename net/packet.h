// A frame buffer and the RoCEv2 framing around the IBA transport headers:
// build (Ethernet [+ 802.1Q], IPv4 or IPv6, UDP, pad, ICRC) and parse with
// every check counted (IBA annex A17).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "net/headers.h"
#include "net/opcode.h"

namespace uroce::net {

constexpr size_t kMaxMtu = 4096;
constexpr size_t kNetHeaderRoom = sizeof(EthHdr) + 4 /*VLAN*/ + sizeof(Ipv6Hdr) + sizeof(UdpHdr);
constexpr size_t kMaxTransportHeaders = 64;
constexpr size_t kFrameCapacity = kNetHeaderRoom + kMaxTransportHeaders + kMaxMtu + 4 + kIcrcBytes;

struct Packet;

// Who lends a frame buffer that is not the pool's: a port whose driver
// received the frame straight into it (DpdkPort on net_af_packet). put()
// gives such a buffer back to its lender.
class PacketLender {
 public:
  virtual void give_back(Packet* p) = 0;

 protected:
  ~PacketLender() = default;
};

// A Packet's lender, if any, and the lender's handle for it (an mbuf). It
// belongs to the buffer, not to the frame in it: copying a Packet copies the
// frame and leaves each buffer's loan as it was.
struct PacketLoan {
  PacketLender* lender = nullptr;
  void* handle = nullptr;
  PacketLoan() = default;
  PacketLoan(const PacketLoan&) {}
  PacketLoan& operator=(const PacketLoan&) { return *this; }
};

struct Packet {
  uint32_t len = 0;          // frame bytes
  uint16_t l3_off = 0;       // IP header
  uint16_t bth_off = 0;      // BTH
  uint32_t payload_off = 0;  // after the transport headers
  uint32_t payload_len = 0;  // without pad
  uint8_t opcode = 0;
  // The ICRC, IPv4 header checksum and IPv6 UDP checksum are computed.
  // begin_roce_packet sets it; a sender clears it before finish_roce_packet
  // for a frame that never leaves the engine, and the loopback's receiver
  // then skips the checks. Wire receivers ignore it and always check.
  bool checksummed = true;
  // Flow steering already saw it (a raw QP's frame to the engine's own MAC):
  // the receive path does not steer it twice. The pool clears it.
  bool steered = false;
  // finish_roce_packet laid it out: len, the offsets, payload_len and opcode
  // are the builder's and agree with the bytes, so a receiver of the
  // engine's own loopback frame that checks no checksum need not parse it
  // again (Device::dispatch). begin_roce_packet and the pool clear it.
  bool framed = false;
  PacketLoan loan;  // after the frame's fields: copy_packet copies those before it
  // 128 bytes in, as an mbuf's data is (RTE_PKTMBUF_HEADROOM): a port's
  // driver can receive into a Packet (DpdkPort).
  alignas(128) uint8_t data[kFrameCapacity];

  Bth* bth() { return reinterpret_cast<Bth*>(data + bth_off); }
  const Bth* bth() const { return reinterpret_cast<const Bth*>(data + bth_off); }
  const OpcodeInfo& info() const { return opcode_info(opcode); }
  template <typename H>
  H* hdr(uint8_t off) { return reinterpret_cast<H*>(data + bth_off + off); }
  template <typename H>
  const H* hdr(uint8_t off) const { return reinterpret_cast<const H*>(data + bth_off + off); }
  uint8_t* payload() { return data + payload_off; }
  const uint8_t* payload() const { return data + payload_off; }
};

// A frame of len bytes just received into p, not parsed yet.
inline void set_received(Packet& p, uint32_t len) {
  p.len = len;
  p.l3_off = 0;
  p.bth_off = 0;
  p.payload_off = 0;
  p.payload_len = 0;
  p.opcode = 0;
}

// Copies src's frame (its len bytes, not the whole buffer) and the fields
// that lay it out into dst; dst stays the buffer it was (its loan).
inline void copy_packet(Packet& dst, const Packet& src) {
  std::memcpy(static_cast<void*>(&dst), &src, offsetof(Packet, loan));
  std::memcpy(dst.data, src.data, src.len);
}

// Recycles frame buffers; the datapath never allocates once warm. Like a
// NIC's, the buffers are finite: at most capacity() are ever allocated, and
// get() returns nullptr while all of them are in use (the caller drops the
// frame and counts it; exhausted() counts the refusals). Senders look at
// available() first and wait, so that what a QP posted is not dropped.
class PacketPool {
 public:
  // 8192 buffers of ~4.3 KiB: 36 MiB at most. A working engine holds a few
  // hundred at once (the loopback's queue, frames delay drop holds, frames
  // waiting for ARP); more only if something stopped returning them.
  static constexpr size_t kDefaultCapacity = 8192;

  explicit PacketPool(size_t capacity = kDefaultCapacity) : capacity_(capacity) {}
  PacketPool(const PacketPool&) = delete;
  PacketPool& operator=(const PacketPool&) = delete;

  Packet* get() {
    if (free_.empty()) {
      if (all_.size() >= capacity_) [[unlikely]] {
        ++exhausted_;
        return nullptr;
      }
      all_.push_back(std::make_unique<Packet>());
      return all_.back().get();
    }
    Packet* p = free_.back();
    free_.pop_back();
    return p;
  }
  // Also takes a buffer a port lent (Packet::loan) and gives it back.
  void put(Packet* p) {
    p->steered = false;
    p->framed = false;
    if (p->loan.lender) {
      p->loan.lender->give_back(p);
      return;
    }
    free_.push_back(p);
  }
  size_t allocated() const { return all_.size(); }
  size_t in_use() const { return all_.size() - free_.size(); }
  size_t capacity() const { return capacity_; }
  // Buffers get() can still hand out.
  size_t available() const { return capacity_ - in_use(); }
  uint64_t exhausted() const { return exhausted_; }

 private:
  size_t capacity_;
  std::vector<std::unique_ptr<Packet>> all_;
  std::vector<Packet*> free_;
  uint64_t exhausted_ = 0;
};

using Ipv6Addr = std::array<uint8_t, 16>;  // network order; also a GID's 16 bytes

enum class IpFamily : uint8_t { kIpv4, kIpv6 };

constexpr uint16_t kVlanIdMask = 0x0fff;  // 802.1Q TCI: PCP:3 DEI:1 VID:12
constexpr size_t kVlanTagBytes = 4;       // TPID 0x8100 + TCI

// Where a frame goes: both ends' L2/L3 addresses. The IPv4 fields are used
// when family is kIpv4 (the default, as before IPv6), the IPv6 ones when it
// is kIpv6. ttl and tos serve both families: IPv4 TTL / IPv6 hop limit, IPv4
// TOS / IPv6 traffic class (DSCP and ECN in both).
struct Route {
  std::array<uint8_t, 6> src_mac{};
  std::array<uint8_t, 6> dst_mac{};
  std::array<uint8_t, 4> src_ip{};  // IPv4
  std::array<uint8_t, 4> dst_ip{};
  uint16_t src_port = 0xc000;  // flow-hashed UDP source port
  uint8_t ttl = 64;            // IPv4 TTL, IPv6 hop limit
  uint8_t tos = 0;             // IPv4 TOS, IPv6 traffic class
  IpFamily family = IpFamily::kIpv4;
  Ipv6Addr src_ip6{};      // IPv6
  Ipv6Addr dst_ip6{};
  uint32_t flow_label = 0;  // IPv6 flow label (20 bits)
  bool vlan = false;        // add an 802.1Q tag
  uint16_t vlan_id = 0;     // VID (12 bits; 0: priority tag only)
  uint8_t vlan_pcp = 0;     // priority code point (3 bits)
};

// Frame bytes before the BTH: Ethernet [+ 802.1Q] + IPv4 or IPv6 + UDP.
constexpr uint16_t bth_offset_for(IpFamily family, bool vlan) {
  return uint16_t(sizeof(EthHdr) + (vlan ? kVlanTagBytes : 0) +
                  (family == IpFamily::kIpv6 ? sizeof(Ipv6Hdr) : sizeof(Ipv4Hdr)) +
                  sizeof(UdpHdr));
}
inline uint16_t bth_offset_for(const Route& r) { return bth_offset_for(r.family, r.vlan); }
static_assert(bth_offset_for(IpFamily::kIpv6, true) == kNetHeaderRoom);

// Prepares p for a transport packet: sets offsets for Ethernet+IPv4+UDP and
// the opcode's headers, zeroes the BTH and extension headers, sets
// p.checksummed.
void begin_roce_packet(Packet& p, uint8_t opcode);
// Same, with the BTH where route's headers end (IPv6 and/or 802.1Q), so that
// finish_roce_packet(p, route) has nothing to move.
void begin_roce_packet(Packet& p, uint8_t opcode, const Route& route);

// Fills BTH pad count, Ethernet [+ 802.1Q], IPv4 (with header checksum) or
// IPv6, UDP (checksum 0 over IPv4, computed over IPv6) and the ICRC once the
// transport headers and payload_len bytes of payload are in place (without
// p.checksummed, the three checksums are left 0). If p was begun for another
// layout (e.g. the IPv4 default and an IPv6 route), the transport headers and
// payload are first moved to bth_offset_for(route).
void finish_roce_packet(Packet& p, const Route& route);

// A route's frame bytes before the BTH (Ethernet [+ 802.1Q], IP, UDP) with
// the lengths and checksums left 0, made once per route (a connected QP's
// path, Device::resolve_path) so that finishing a packet copies them and
// fills in the lengths rather than writing every field of every header.
struct HeaderTemplate {
  std::array<uint8_t, kNetHeaderRoom> bytes{};
  uint16_t len = 0;       // bth_offset_for(route) once made
  uint32_t ipv4_sum = 0;  // IPv4: the header's one's complement sum without its total length
};
void make_header_template(const Route& route, HeaderTemplate& t);
// finish_roce_packet(p, route) with route's template t (made from route):
// the same frame.
void finish_roce_packet(Packet& p, const Route& route, const HeaderTemplate& t);

enum class ParseError : uint8_t {
  kOk,
  kTooShort,
  kNotIp,
  kBadIpHeader,
  kBadIpChecksum,
  kNotRoce,
  kBadUdpLength,
  kBadOpcode,
  kBadLength,
  kBadIcrc,
  kBadUdpChecksum,  // IPv6 only: IPv4 RoCEv2 sends 0 (A17.3.2)
  kCount,
};
const char* parse_error_name(ParseError e);

// Validates a received frame and fills the offsets. check_icrc (which also
// covers the IPv4 header and IPv6 UDP checksums) is false only for an
// in-engine loopback frame built without them (!p.checksummed).
ParseError parse_roce_packet(Packet& p, bool check_icrc);

uint16_t ipv4_checksum(const Ipv4Hdr& ip);

// The Internet checksum (RFC 1071) of an upper-layer packet over IPv6: the
// pseudo header of RFC 8200 8.1 (addresses, upper-layer length, next header)
// then len bytes of data, as stored in the UDP or ICMPv6 checksum field (the
// caller zeroes that field first). Run over data that holds its checksum, it
// returns 0 when the checksum is right.
uint16_t ipv6_l4_checksum(const uint8_t src[16], const uint8_t dst[16], uint8_t next_header,
                          const uint8_t* data, size_t len);

// ---- a parsed (or finished) frame's addresses ----
// Valid after parse_roce_packet returned kOk or after finish_roce_packet.

IpFamily roce_family(const Packet& p);
// The source and destination addresses in GID form: IPv6 as is, IPv4 as the
// IPv4-mapped ::ffff:a.b.c.d (the RoCEv2 GID of an IPv4 address).
Ipv6Addr roce_src_gid(const Packet& p);
Ipv6Addr roce_dst_gid(const Packet& p);
// The 40-byte GRH a UD receive places before the payload (as rxe and mlx5):
// over IPv6 the IPv6 header itself, over IPv4 20 zero bytes then the IPv4
// header with its checksum (also when the frame was built without one).
void roce_grh(const Packet& p, uint8_t grh[40]);

// ---- GIDs and routes ----

bool gid_is_ipv4_mapped(const uint8_t gid[16]);
Ipv6Addr ipv4_mapped_gid(const std::array<uint8_t, 4>& ip);
// Sets route's family and addresses from a source and destination GID:
// IPv4 if both are IPv4-mapped, IPv6 if neither is. A mixed pair is no route
// (false, route unchanged).
bool route_set_gids(Route& route, const uint8_t sgid[16], const uint8_t dgid[16]);

// ---- 802.1Q ----

// The TCI of an 802.1Q-tagged frame (any frame, parsed or not); nullopt if
// untagged or too short.
std::optional<uint16_t> vlan_tci(const Packet& p);
// Tags an untagged frame (e.g. one from build_arp_request or an NDP builder)
// by moving everything after the MAC addresses 4 bytes on; the offsets move
// with it. False (frame unchanged) if it is already tagged or would not fit.
bool add_vlan_tag(Packet& p, uint16_t tci);
// The same whatever follows the MACs: a tag the kernel took off a received
// frame goes back in front of any it left (DpdkPort's receive).
bool insert_vlan_tag(Packet& p, uint16_t tci);

}  // namespace uroce::net
