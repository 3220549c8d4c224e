// Tests for net/opcode.h and net/opcode.cc: the 256-entry BTH opcode table.
// Expected values are written out from IBA vol 1 table 38 (opcodes) and
// 9.3 (extension header sizes), not derived from the table under test.
#include "net/opcode.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace uroce::net {
namespace {

// Sizes of the extension headers, from the IBA (not from headers.h).
constexpr int kBth = 12, kDeth = 8, kXrcEth = 4, kReth = 16, kAtomicEth = 28, kAeth = 4,
              kAtomicAckEth = 8, kImm = 4, kIeth = 4;

struct Known {
  uint8_t opcode;
  const char* name;
  int length;
};

// Header lengths for a selection across every transport, by hand.
constexpr Known kKnown[] = {
    {0x00, "RC_SEND_FIRST", kBth},
    {0x03, "RC_SEND_LAST_WITH_IMMEDIATE", kBth + kImm},
    {0x04, "RC_SEND_ONLY", kBth},
    {0x05, "RC_SEND_ONLY_WITH_IMMEDIATE", kBth + kImm},
    {0x06, "RC_RDMA_WRITE_FIRST", kBth + kReth},
    {0x07, "RC_RDMA_WRITE_MIDDLE", kBth},
    {0x09, "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", kBth + kImm},
    {0x0a, "RC_RDMA_WRITE_ONLY", kBth + kReth},
    {0x0b, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", kBth + kReth + kImm},
    {0x0c, "RC_RDMA_READ_REQUEST", kBth + kReth},
    {0x0d, "RC_RDMA_READ_RESPONSE_FIRST", kBth + kAeth},
    {0x0e, "RC_RDMA_READ_RESPONSE_MIDDLE", kBth},
    {0x0f, "RC_RDMA_READ_RESPONSE_LAST", kBth + kAeth},
    {0x10, "RC_RDMA_READ_RESPONSE_ONLY", kBth + kAeth},
    {0x11, "RC_ACKNOWLEDGE", kBth + kAeth},
    {0x12, "RC_ATOMIC_ACKNOWLEDGE", kBth + kAeth + kAtomicAckEth},
    {0x13, "RC_COMPARE_SWAP", kBth + kAtomicEth},
    {0x14, "RC_FETCH_ADD", kBth + kAtomicEth},
    {0x16, "RC_SEND_LAST_WITH_INVALIDATE", kBth + kIeth},
    {0x17, "RC_SEND_ONLY_WITH_INVALIDATE", kBth + kIeth},
    {0x1d, "RC_ATOMIC_WRITE", kBth + kReth},  // IBA 1.5 annex A19: RETH, then 8 bytes of payload
    {0x20, "UC_SEND_FIRST", kBth},
    {0x25, "UC_SEND_ONLY_WITH_IMMEDIATE", kBth + kImm},
    {0x2a, "UC_RDMA_WRITE_ONLY", kBth + kReth},
    {0x2b, "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", kBth + kReth + kImm},
    {0x64, "UD_SEND_ONLY", kBth + kDeth},
    {0x65, "UD_SEND_ONLY_WITH_IMMEDIATE", kBth + kDeth + kImm},
    {0xa0, "XRC_SEND_FIRST", kBth + kXrcEth},
    {0xa4, "XRC_SEND_ONLY", kBth + kXrcEth},
    {0xaa, "XRC_RDMA_WRITE_ONLY", kBth + kXrcEth + kReth},
    {0xac, "XRC_RDMA_READ_REQUEST", kBth + kXrcEth + kReth},
    {0xb1, "XRC_ACKNOWLEDGE", kBth + kAeth},  // responses carry no XRCETH
    {0xb3, "XRC_COMPARE_SWAP", kBth + kXrcEth + kAtomicEth},
    {0xbd, "XRC_ATOMIC_WRITE", kBth + kXrcEth + kReth},
};

TEST(OpcodeTable, KnownOpcodesHaveIbaNamesAndLengths) {
  for (const Known& k : kKnown) {
    SCOPED_TRACE(k.name);
    const OpcodeInfo& info = opcode_info(k.opcode);
    EXPECT_TRUE(info.valid());
    EXPECT_EQ(opcode_name(k.opcode), k.name);
    EXPECT_EQ(info.length, k.length);
  }
}

TEST(OpcodeTable, ValidOpcodesPerTransport) {
  // RC and XRC: 0x00-0x14 plus the two SEND_*_WITH_INVALIDATE (table 38)
  // and ATOMIC WRITE (0x1d, IBA 1.5 annex A19; FLUSH, 0x1c, is not
  // implemented). UC: SEND and RDMA WRITE only (0x00-0x0b). UD: SEND_ONLY
  // and SEND_ONLY_IMM. uroce's DC (0xc0, in the manufacturer range): RC's
  // requests. RD (0x40) and the rest of the manufacturer range are not implemented.
  std::set<int> expected;
  for (int base : {0x00, 0xa0}) {
    for (int c = 0; c <= 0x14; ++c) expected.insert(base + c);
    expected.insert(base + 0x16);
    expected.insert(base + 0x17);
    expected.insert(base + 0x1d);
  }
  for (int c = 0; c <= 0x0b; ++c) expected.insert(0x20 + c);
  expected.insert(0x64);
  expected.insert(0x65);
  for (int c : {0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x13, 0x14, 0x16,
                0x17, 0x1d})
    expected.insert(0xc0 + c);
  for (int op = 0; op < 256; ++op) {
    SCOPED_TRACE(op);
    EXPECT_EQ(opcode_info(uint8_t(op)).valid(), expected.count(op) == 1);
  }
  EXPECT_EQ(expected.size(), 24u + 24u + 12u + 2u + 18u);
  EXPECT_EQ(opcode_name(0xc4), "DC_SEND_ONLY");
}

TEST(OpcodeTable, InvalidOpcodesAreNamedAndEmpty) {
  EXPECT_EQ(opcode_name(0x15), "INVALID_21");
  EXPECT_EQ(opcode_name(0x1c), "INVALID_28");  // FLUSH: not implemented
  EXPECT_EQ(opcode_name(0x3d), "INVALID_61");  // UC has no ATOMIC WRITE
  EXPECT_EQ(opcode_name(0x2c), "INVALID_44");  // UC has no READ
  EXPECT_EQ(opcode_name(0x44), "INVALID_68");  // RD
  EXPECT_EQ(opcode_name(0xff), "INVALID_255");
  EXPECT_EQ(opcode_info(0x2c).length, 0);
  EXPECT_EQ(opcode_info(0x2c).flags, 0u);
}

TEST(OpcodeTable, OffsetsFollowIbaHeaderOrder) {
  // Extension headers appear in the order DETH/XRCETH, RETH, AtomicETH, AETH,
  // AtomicAckETH, ImmDt, IETH right after the BTH; the length is their sum.
  for (int op = 0; op < 256; ++op) {
    const OpcodeInfo& info = opcode_info(uint8_t(op));
    if (!info.valid()) continue;
    SCOPED_TRACE(opcode_name(uint8_t(op)));
    int off = kBth + ((info.flags & kHasDcEth) ? int(sizeof(DcEth)) : 0);  // DC: the DCETH first
    auto expect_at = [&](uint32_t flag, uint8_t actual, int size) {
      if (!(info.flags & flag)) return;
      EXPECT_EQ(actual, off);
      off += size;
    };
    expect_at(kHasDeth, info.deth_off, kDeth);
    expect_at(kHasXrcEth, info.xrceth_off, kXrcEth);
    expect_at(kHasReth, info.reth_off, kReth);
    expect_at(kHasAtomicEth, info.atomiceth_off, kAtomicEth);
    expect_at(kHasAeth, info.aeth_off, kAeth);
    expect_at(kHasAtomicAck, info.atomicack_off, kAtomicAckEth);
    expect_at(kHasImm, info.imm_off, kImm);
    expect_at(kHasIeth, info.ieth_off, kIeth);
    EXPECT_EQ(info.length, off);
  }
}

TEST(OpcodeTable, SemanticFlagsAreConsistent) {
  for (int op = 0; op < 256; ++op) {
    const OpcodeInfo& info = opcode_info(uint8_t(op));
    if (!info.valid()) continue;
    SCOPED_TRACE(opcode_name(uint8_t(op)));
    // Exactly one direction.
    EXPECT_NE(info.has(kRequest), info.has(kResponse));
    // FIRST, MIDDLE, LAST: MIDDLE excludes the others; ONLY is FIRST|LAST.
    if (info.has(kMiddle)) { EXPECT_FALSE(info.flags & (kFirst | kLast)); }
    EXPECT_TRUE(info.flags & (kFirst | kMiddle | kLast));
    // A completing request always ends a message and consumes a receive WQE.
    if (info.has(kCompletes)) {
      EXPECT_TRUE(info.has(kLast));
      EXPECT_TRUE(info.has(kConsumesRecv));
    }
    // Immediate data is carried only on the packet that completes.
    if (info.has(kHasImm)) { EXPECT_TRUE(info.has(kCompletes)); }
    // RETH starts a WRITE (FIRST/ONLY) or is a READ request.
    if (info.has(kHasReth)) { EXPECT_TRUE(info.has(kRequest) && info.has(kFirst)); }
    if (info.has(kWrite) && info.has(kFirst)) { EXPECT_TRUE(info.has(kHasReth)); }
    // READ requests and atomics carry no payload; everything else that moves data does.
    if (info.has(kAtomic) || (info.has(kRead) && info.has(kRequest))) {
      EXPECT_FALSE(info.has(kHasPayload));
    }
    if (info.has(kSend) || info.has(kWrite)) { EXPECT_TRUE(info.has(kHasPayload)); }
    // ATOMIC WRITE: one request packet with a RETH and its 8 bytes, neither a
    // WRITE (it holds a responder resource) nor an AtomicETH atomic.
    if (info.has(kAtomicStore)) {
      EXPECT_TRUE(info.has(kRequest | kOnly | kHasReth | kHasPayload));
      EXPECT_FALSE(info.flags & (kWrite | kAtomic | kHasAtomicEth | kConsumesRecv));
    }
    // UD always carries a DETH, nothing else does.
    EXPECT_EQ(info.has(kHasDeth), (op & 0xe0) == 0x60);
    // XRC requests carry an XRCETH, XRC responses do not.
    EXPECT_EQ(info.has(kHasXrcEth), (op & 0xe0) == 0xa0 && info.has(kRequest));
  }
}

TEST(OpcodeTable, MakeOpcodeCombinesTransportAndCode) {
  EXPECT_EQ(make_opcode(Transport::kRc, op::kSendOnly), 0x04);
  EXPECT_EQ(make_opcode(Transport::kUc, op::kWriteLastImm), 0x29);
  EXPECT_EQ(make_opcode(Transport::kUd, op::kSendOnlyImm), 0x65);
  EXPECT_EQ(make_opcode(Transport::kXrc, op::kFetchAdd), 0xb4);
  EXPECT_EQ(make_opcode(Transport::kRc, op::kAck), 0x11);
}

}  // namespace
}  // namespace uroce::net
