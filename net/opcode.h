// The BTH opcode table (IBA 9.2.1, table 38): one constexpr entry per opcode
// drives packet building, parsing and header offsets, as rxe_opcode.c does.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "net/headers.h"

namespace uroce::net {

// Which headers follow the BTH, and what the packet means.
enum OpFlag : uint32_t {
  kHasDeth = 1u << 0,
  kHasXrcEth = 1u << 1,
  kHasReth = 1u << 2,
  kHasAtomicEth = 1u << 3,
  kHasAeth = 1u << 4,
  kHasAtomicAck = 1u << 5,
  kHasImm = 1u << 6,
  kHasIeth = 1u << 7,
  kHasPayload = 1u << 8,
  kRequest = 1u << 9,    // requester -> responder
  kResponse = 1u << 10,  // responder -> requester (ACK, read response)
  kFirst = 1u << 11,
  kMiddle = 1u << 12,
  kLast = 1u << 13,      // LAST or ONLY: ends a message
  kOnly = kFirst | kLast,
  kSend = 1u << 14,
  kWrite = 1u << 15,
  kRead = 1u << 16,
  kAtomic = 1u << 17,
  kConsumesRecv = 1u << 18,  // takes a receive WQE at the responder
  kCompletes = 1u << 19,     // ends with a receive completion
  kAtomicStore = 1u << 20,   // ATOMIC WRITE: 8 bytes stored at once (IBA 1.5 annex A19)
  kHasDcEth = 1u << 21,      // uroce's DC request (net/headers.h DcEth)
};

// kDc: uroce's Dynamically Connected requests, RC's operations with a DCETH
// (docs/mlx5-dc.md); the DCT answers with RC's responses.
enum class Transport : uint8_t { kRc = 0x00, kUc = 0x20, kRd = 0x40, kUd = 0x60, kXrc = 0xa0, kDc = 0xc0 };

struct OpcodeInfo {
  std::string_view name;  // empty: invalid opcode
  uint32_t flags;
  uint8_t length;         // bytes of BTH plus extension headers
  uint8_t deth_off, xrceth_off, reth_off, atomiceth_off, aeth_off, atomicack_off, imm_off, ieth_off;
  constexpr bool valid() const { return !name.empty(); }
  constexpr bool has(uint32_t f) const { return (flags & f) == f; }
};

// The per-transport operation codes (low 5 bits of the opcode).
namespace op {
constexpr uint8_t kSendFirst = 0x00, kSendMiddle = 0x01, kSendLast = 0x02, kSendLastImm = 0x03,
                  kSendOnly = 0x04, kSendOnlyImm = 0x05, kWriteFirst = 0x06, kWriteMiddle = 0x07,
                  kWriteLast = 0x08, kWriteLastImm = 0x09, kWriteOnly = 0x0a, kWriteOnlyImm = 0x0b,
                  kReadRequest = 0x0c, kReadRespFirst = 0x0d, kReadRespMiddle = 0x0e,
                  kReadRespLast = 0x0f, kReadRespOnly = 0x10, kAck = 0x11, kAtomicAck = 0x12,
                  kCompareSwap = 0x13, kFetchAdd = 0x14, kSendLastInv = 0x16, kSendOnlyInv = 0x17,
                  kAtomicWrite = 0x1d;
}  // namespace op

namespace detail {

constexpr uint32_t base_flags(uint8_t code) {
  using namespace op;
  switch (code) {
    case kSendFirst: return kRequest | kSend | kFirst | kHasPayload | kConsumesRecv;
    case kSendMiddle: return kRequest | kSend | kMiddle | kHasPayload | kConsumesRecv;
    case kSendLast: return kRequest | kSend | kLast | kHasPayload | kConsumesRecv | kCompletes;
    case kSendLastImm:
      return kRequest | kSend | kLast | kHasPayload | kHasImm | kConsumesRecv | kCompletes;
    case kSendOnly: return kRequest | kSend | kOnly | kHasPayload | kConsumesRecv | kCompletes;
    case kSendOnlyImm:
      return kRequest | kSend | kOnly | kHasPayload | kHasImm | kConsumesRecv | kCompletes;
    case kSendLastInv:
      return kRequest | kSend | kLast | kHasPayload | kHasIeth | kConsumesRecv | kCompletes;
    case kSendOnlyInv:
      return kRequest | kSend | kOnly | kHasPayload | kHasIeth | kConsumesRecv | kCompletes;
    case kWriteFirst: return kRequest | kWrite | kFirst | kHasReth | kHasPayload;
    case kWriteMiddle: return kRequest | kWrite | kMiddle | kHasPayload;
    case kWriteLast: return kRequest | kWrite | kLast | kHasPayload;
    case kWriteLastImm:
      return kRequest | kWrite | kLast | kHasPayload | kHasImm | kConsumesRecv | kCompletes;
    case kWriteOnly: return kRequest | kWrite | kOnly | kHasReth | kHasPayload;
    case kWriteOnlyImm:
      return kRequest | kWrite | kOnly | kHasReth | kHasPayload | kHasImm | kConsumesRecv |
             kCompletes;
    case kReadRequest: return kRequest | kRead | kOnly | kHasReth;
    case kReadRespFirst: return kResponse | kRead | kFirst | kHasAeth | kHasPayload;
    case kReadRespMiddle: return kResponse | kRead | kMiddle | kHasPayload;
    case kReadRespLast: return kResponse | kRead | kLast | kHasAeth | kHasPayload;
    case kReadRespOnly: return kResponse | kRead | kOnly | kHasAeth | kHasPayload;
    case kAck: return kResponse | kOnly | kHasAeth;
    case kAtomicAck: return kResponse | kAtomic | kOnly | kHasAeth | kHasAtomicAck;
    case kCompareSwap: return kRequest | kAtomic | kOnly | kHasAtomicEth;
    case kFetchAdd: return kRequest | kAtomic | kOnly | kHasAtomicEth;
    // RETH (dma_len 8) and the 8 bytes; answered by a READ response of no
    // data, as a FLUSH is (IBA 1.5 annex A19; rxe_opcode.c).
    case kAtomicWrite: return kRequest | kAtomicStore | kOnly | kHasReth | kHasPayload;
    default: return 0;
  }
}

constexpr std::string_view kCodeNames[] = {
    "SEND_FIRST", "SEND_MIDDLE", "SEND_LAST", "SEND_LAST_WITH_IMMEDIATE", "SEND_ONLY",
    "SEND_ONLY_WITH_IMMEDIATE", "RDMA_WRITE_FIRST", "RDMA_WRITE_MIDDLE", "RDMA_WRITE_LAST",
    "RDMA_WRITE_LAST_WITH_IMMEDIATE", "RDMA_WRITE_ONLY", "RDMA_WRITE_ONLY_WITH_IMMEDIATE",
    "RDMA_READ_REQUEST", "RDMA_READ_RESPONSE_FIRST", "RDMA_READ_RESPONSE_MIDDLE",
    "RDMA_READ_RESPONSE_LAST", "RDMA_READ_RESPONSE_ONLY", "ACKNOWLEDGE", "ATOMIC_ACKNOWLEDGE",
    "COMPARE_SWAP", "FETCH_ADD", "", "SEND_LAST_WITH_INVALIDATE", "SEND_ONLY_WITH_INVALIDATE",
    "", "", "", "", "", "ATOMIC_WRITE"};

constexpr std::string_view transport_name(uint8_t t) {
  switch (t) {
    case 0x00: return "RC_";
    case 0x20: return "UC_";
    case 0x60: return "UD_";
    case 0xa0: return "XRC_";
    case 0xc0: return "DC_";
    default: return "";
  }
}

// Which operations each transport defines (IBA table 38).
constexpr bool transport_has(uint8_t t, uint8_t code) {
  switch (t) {
    case 0x00:
    case 0xa0: return base_flags(code) != 0;
    case 0x20: return code <= op::kWriteOnlyImm;
    case 0x60: return code == op::kSendOnly || code == op::kSendOnlyImm;
    case 0xc0: return (base_flags(code) & kRequest) != 0;  // a DCI sends requests only
    default: return false;
  }
}

// Extension headers come in this fixed order after the BTH.
constexpr OpcodeInfo make_info(uint8_t opcode) {
  const uint8_t t = opcode & 0xe0, code = opcode & 0x1f;
  OpcodeInfo info{};
  if (!transport_has(t, code)) return info;
  info.flags = base_flags(code);
  if (t == 0x60) info.flags |= kHasDeth;
  if (t == 0xa0 && (info.flags & kRequest)) info.flags |= kHasXrcEth;
  if (t == 0xc0) info.flags |= kHasDcEth;
  info.name = kCodeNames[code];  // transport prefix is added by opcode_name()
  uint8_t off = sizeof(Bth);
  auto place = [&](uint32_t flag, uint8_t& field, uint8_t size) {
    if (info.flags & flag) { field = off; off += size; }
  };
  place(kHasDeth, info.deth_off, sizeof(Deth));
  if (info.flags & kHasDcEth) off += sizeof(DcEth);  // at 12, before the RC headers
  place(kHasXrcEth, info.xrceth_off, sizeof(XrcEth));
  place(kHasReth, info.reth_off, sizeof(Reth));
  place(kHasAtomicEth, info.atomiceth_off, sizeof(AtomicEth));
  place(kHasAeth, info.aeth_off, sizeof(Aeth));
  place(kHasAtomicAck, info.atomicack_off, sizeof(AtomicAckEth));
  place(kHasImm, info.imm_off, sizeof(ImmDt));
  place(kHasIeth, info.ieth_off, sizeof(Ieth));
  info.length = off;
  return info;
}

constexpr std::array<OpcodeInfo, 256> make_table() {
  std::array<OpcodeInfo, 256> table{};
  for (int i = 0; i < 256; ++i) table[i] = make_info(uint8_t(i));
  return table;
}

}  // namespace detail

inline constexpr std::array<OpcodeInfo, 256> kOpcodeTable = detail::make_table();

constexpr const OpcodeInfo& opcode_info(uint8_t opcode) { return kOpcodeTable[opcode]; }
constexpr uint8_t make_opcode(Transport t, uint8_t code) { return uint8_t(t) | code; }

// "RC_SEND_ONLY", as Wireshark and the IBA name them.
std::string opcode_name(uint8_t opcode);

// Invariants the builders rely on (IBA table 38).
static_assert(opcode_info(0x04).length == 12);                     // RC SEND_ONLY
static_assert(opcode_info(0x0b).reth_off == 12 && opcode_info(0x0b).imm_off == 28);
static_assert(opcode_info(0x12).aeth_off == 12 && opcode_info(0x12).atomicack_off == 16);
static_assert(opcode_info(0x13).length == 40);                     // CMP_SWAP: BTH + AtomicETH
static_assert(opcode_info(0x64).deth_off == 12 && opcode_info(0x64).length == 20);
static_assert(opcode_info(0x65).imm_off == 20);                    // UD SEND_ONLY_IMM
static_assert(opcode_info(0xa4).xrceth_off == 12);                 // XRC SEND_ONLY
static_assert(opcode_info(0xaa).reth_off == 16);                   // XRC WRITE_ONLY
static_assert(!opcode_info(0x2c).valid());                         // UC has no READ
static_assert(!opcode_info(0x15).valid());
static_assert(opcode_info(0x1d).reth_off == 12 && opcode_info(0x1d).length == 28);  // ATOMIC_WRITE
static_assert(opcode_info(0xbd).reth_off == 16);                   // XRC ATOMIC_WRITE
static_assert(!opcode_info(0x3d).valid() && !opcode_info(0x1c).valid());  // no UC one; no FLUSH
static_assert(opcode_info(0xc4).length == 32 && opcode_info(0xca).reth_off == 32);  // DC: DCETH at 12
static_assert(opcode_info(0xd3).atomiceth_off == 32 && !opcode_info(0xd1).valid());  // no DC ACK
constexpr uint8_t kDcEthOffset = sizeof(Bth);

}  // namespace uroce::net
