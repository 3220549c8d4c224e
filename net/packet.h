// A frame buffer and the RoCEv2 framing around the IBA transport headers:
// build (Ethernet, IPv4, UDP, pad, ICRC) and parse with every check counted.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "net/headers.h"
#include "net/opcode.h"

namespace uroce::net {

constexpr size_t kMaxMtu = 4096;
constexpr size_t kNetHeaderRoom = sizeof(EthHdr) + 4 /*VLAN*/ + sizeof(Ipv6Hdr) + sizeof(UdpHdr);
constexpr size_t kMaxTransportHeaders = 64;
constexpr size_t kFrameCapacity = kNetHeaderRoom + kMaxTransportHeaders + kMaxMtu + 4 + kIcrcBytes;

struct Packet {
  uint32_t len = 0;          // frame bytes
  uint16_t l3_off = 0;       // IP header
  uint16_t bth_off = 0;      // BTH
  uint32_t payload_off = 0;  // after the transport headers
  uint32_t payload_len = 0;  // without pad
  uint8_t opcode = 0;
  alignas(64) uint8_t data[kFrameCapacity];

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

// Recycles frame buffers; the datapath never allocates once warm.
class PacketPool {
 public:
  Packet* get() {
    if (free_.empty()) {
      all_.push_back(std::make_unique<Packet>());
      return all_.back().get();
    }
    Packet* p = free_.back();
    free_.pop_back();
    return p;
  }
  void put(Packet* p) { free_.push_back(p); }
  size_t allocated() const { return all_.size(); }

 private:
  std::vector<std::unique_ptr<Packet>> all_;
  std::vector<Packet*> free_;
};

// Where a frame goes: both ends' L2/L3 addresses (IPv4 for now).
struct Route {
  std::array<uint8_t, 6> src_mac{};
  std::array<uint8_t, 6> dst_mac{};
  std::array<uint8_t, 4> src_ip{};
  std::array<uint8_t, 4> dst_ip{};
  uint16_t src_port = 0xc000;  // flow-hashed UDP source port
  uint8_t ttl = 64;
  uint8_t tos = 0;
};

// Prepares p for a transport packet: sets offsets for Ethernet+IPv4+UDP and
// the opcode's headers, zeroes the BTH and extension headers.
void begin_roce_packet(Packet& p, uint8_t opcode);

// Fills BTH pad count, Ethernet, IPv4 (with checksum), UDP and the ICRC once
// the transport headers and payload_len bytes of payload are in place.
void finish_roce_packet(Packet& p, const Route& route);

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
  kCount,
};
const char* parse_error_name(ParseError e);

// Validates a received frame and fills the offsets. check_icrc is false only
// for the in-engine loopback, whose frames never leave this process.
ParseError parse_roce_packet(Packet& p, bool check_icrc);

uint16_t ipv4_checksum(const Ipv4Hdr& ip);

}  // namespace uroce::net
