// One packed struct per header: Ethernet, IPv4/IPv6, UDP and the IBA
// transport headers RoCEv2 carries (IBA vol 1, chapter 9.2-9.3, annex A17).
#pragma once

#include <cstdint>

#include "net/byteorder.h"

namespace uroce::net {

constexpr uint16_t kEtherTypeIpv4 = 0x0800;
constexpr uint16_t kEtherTypeIpv6 = 0x86dd;
constexpr uint16_t kEtherTypeArp = 0x0806;
constexpr uint16_t kEtherTypeVlan = 0x8100;
constexpr uint16_t kRoceV2Port = 4791;  // IANA, annex A17.2.1
constexpr uint8_t kIpProtoUdp = 17;
constexpr uint32_t kIcrcBytes = 4;

struct EthHdr {
  uint8_t dst[6];
  uint8_t src[6];
  be16 ethertype;
} __attribute__((packed));
static_assert(sizeof(EthHdr) == 14);

struct Ipv4Hdr {
  uint8_t version_ihl;
  uint8_t tos;
  be16 total_len;
  be16 id;
  be16 frag_off;
  uint8_t ttl;
  uint8_t protocol;
  be16 checksum;
  uint8_t src[4];
  uint8_t dst[4];
} __attribute__((packed));
static_assert(sizeof(Ipv4Hdr) == 20);

struct Ipv6Hdr {
  be32 version_tc_flow;
  be16 payload_len;
  uint8_t next_header;
  uint8_t hop_limit;
  uint8_t src[16];
  uint8_t dst[16];
} __attribute__((packed));
static_assert(sizeof(Ipv6Hdr) == 40);

struct UdpHdr {
  be16 src_port;
  be16 dst_port;
  be16 length;
  be16 checksum;
} __attribute__((packed));
static_assert(sizeof(UdpHdr) == 8);

// Base Transport Header (IBA 9.2).
struct Bth {
  uint8_t opcode;
  uint8_t flags;  // SE:1 M:1 PadCnt:2 TVer:4
  be16 pkey;
  be32 dest_qp;   // FECN:1 BECN:1 Resv6:6 DestQP:24
  be32 ack_psn;   // AckReq:1 Resv7:7 PSN:24

  static constexpr uint8_t kSolicited = 0x80;
  static constexpr uint8_t kMigReq = 0x40;
  static constexpr uint32_t kAckReq = 0x80000000u;
  static constexpr uint32_t kQpnMask = 0x00ffffffu;
  static constexpr uint32_t kPsnMask = 0x00ffffffu;

  uint32_t qpn() const { return uint32_t(dest_qp) & kQpnMask; }
  uint32_t psn() const { return uint32_t(ack_psn) & kPsnMask; }
  bool ack_req() const { return uint32_t(ack_psn) & kAckReq; }
  bool solicited() const { return flags & kSolicited; }
  uint32_t pad_count() const { return (flags >> 4) & 3; }
} __attribute__((packed));
static_assert(sizeof(Bth) == 12);

struct Reth {  // RDMA Extended Transport Header
  be64 va;
  be32 rkey;
  be32 dma_len;
} __attribute__((packed));
static_assert(sizeof(Reth) == 16);

struct AtomicEth {
  be64 va;
  be32 rkey;
  be64 swap_add;
  be64 compare;
} __attribute__((packed));
static_assert(sizeof(AtomicEth) == 28);

struct Aeth {  // ACK Extended Transport Header: Syndrome:8 MSN:24
  be32 syndrome_msn;
  uint8_t syndrome() const { return uint8_t(uint32_t(syndrome_msn) >> 24); }
  uint32_t msn() const { return uint32_t(syndrome_msn) & 0x00ffffffu; }
} __attribute__((packed));
static_assert(sizeof(Aeth) == 4);

struct AtomicAckEth {
  be64 orig;
} __attribute__((packed));
static_assert(sizeof(AtomicAckEth) == 8);

struct Deth {  // Datagram Extended Transport Header
  be32 qkey;
  be32 src_qp;  // Resv8:8 SrcQP:24
} __attribute__((packed));
static_assert(sizeof(Deth) == 8);

struct ImmDt {
  uint32_t imm;  // kept in network order end to end, as ibv_wc.imm_data
} __attribute__((packed));
static_assert(sizeof(ImmDt) == 4);

struct Ieth {  // Invalidate Extended Transport Header
  be32 rkey;
} __attribute__((packed));
static_assert(sizeof(Ieth) == 4);

struct XrcEth {
  be32 srqn;  // Resv8:8 XRCSRQ:24
} __attribute__((packed));
static_assert(sizeof(XrcEth) == 4);

// uroce's Dynamically Connected transport (docs/mlx5-dc.md): a DCI's
// request carries it right after the BTH (opcodes 0xC0-0xDF, IBA 9.2's
// manufacturer-specific range). Mellanox's own DC wire format is not public.
struct DcEth {
  be64 dc_key;         // the DCT's access key
  be32 flags_dci;      // Connect:1 Resv:7 DCIQPN:24 (BTH names no source QP)
  be32 connection;     // Number:8 ConnectPSN:24: which connection of the DCI, its first PSN
  be32 dci_epoch;      // the DCI's incarnation: new each time it leaves RESET
  static constexpr uint32_t kConnect = 0x80000000u;
} __attribute__((packed));
static_assert(sizeof(DcEth) == 20);

// AETH syndromes (IBA 9.7.5.2.1, table 44).
namespace aeth {
constexpr uint8_t kTypeMask = 0xe0;
constexpr uint8_t kAck = 0x00;
constexpr uint8_t kRnrNak = 0x20;
constexpr uint8_t kNak = 0x60;
constexpr uint8_t kNakPsnSeqError = 0x60;
constexpr uint8_t kNakInvalidRequest = 0x61;
constexpr uint8_t kNakRemoteAccessError = 0x62;
constexpr uint8_t kNakRemoteOpError = 0x63;
constexpr uint8_t kNakInvalidRdRequest = 0x64;
constexpr uint8_t kCreditInvalid = 0x1f;  // ACK with "no credit count"
}  // namespace aeth

}  // namespace uroce::net
