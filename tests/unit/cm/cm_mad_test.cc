// Tests for cm/cm_mad.h: the CM field table's getter and setter against
// bytes placed by hand from IBA chapter 12's tables.
#include "cm/cm_mad.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>

namespace uroce::cm::mad {
namespace {

TEST(CmMadTest, FieldsReadBackWhatWasWrittenWithoutTouchingNeighbours) {
  Mad m{};
  set(m, req::kRemoteCmResponseTimeout, 31);
  set(m, req::kTransportServiceType, 2);
  set(m, req::kEndToEndFlowControl, 1);
  EXPECT_EQ(m.data[43], 0xfd);  // 11111 10 1 (table 106, byte 43)
  set(m, req::kTransportServiceType, 0);
  EXPECT_EQ(get(m, req::kRemoteCmResponseTimeout), 31u);
  EXPECT_EQ(get(m, req::kEndToEndFlowControl), 1u);
  set(m, req::kServiceId, service_id(kPsTcp, 4791));
  EXPECT_EQ(get(m, req::kServiceId), 0x00000000010612b7ull);
  set(m, req::kPrimaryFlowLabel, 0xfffff);
  set(m, req::kPrimaryPacketRate, 0x3f);
  EXPECT_EQ(m.data[90], 0xf0);  // 20 bits of flow label, then 4 reserved
  EXPECT_EQ(m.data[91], 0x3f);  // 2 reserved, then 6 bits of rate
}

TEST(CmMadTest, TwentyFourBitFieldsLeaveTheByteAfterThem) {
  Mad m{};
  set(m, req::kResponderResources, 0xab);
  set(m, req::kLocalQpn, 0xffffff);
  EXPECT_EQ(m.data[35], 0xab);
  set(m, req::kLocalQpn, 0x123456);
  EXPECT_EQ(m.data[32], 0x12);
  EXPECT_EQ(m.data[33], 0x34);
  EXPECT_EQ(m.data[34], 0x56);
  EXPECT_EQ(get(m, req::kResponderResources), 0xabu);
}

TEST(CmMadTest, SidrRepAndRejFieldsSitAtTheirTableOffsets) {
  uint8_t bytes[kMadBytes] = {};
  bytes[24 + 4] = 2;                                     // SIDR REP status: rejected
  bytes[24 + 8] = 0x00, bytes[24 + 9] = 0x12, bytes[24 + 10] = 0x34;  // QPN
  bytes[24 + 20] = 0x80, bytes[24 + 23] = 0x01;           // Q_Key
  Mad m;
  std::memcpy(&m, bytes, sizeof(m));
  EXPECT_EQ(get(m, sidr_rep::kStatus), 2u);
  EXPECT_EQ(get(m, sidr_rep::kQpn), 0x1234u);
  EXPECT_EQ(get(m, sidr_rep::kQkey), 0x80000001u);
  Mad rej{};
  set(rej, rej::kMessageRejected, kRejMsgRep);
  set(rej, rej::kRejectedInfoLength, 8);
  set(rej, rej::kReason, kRejConsumerDefined);
  const auto* b = reinterpret_cast<const uint8_t*>(&rej);
  EXPECT_EQ(b[24 + 8], 0x40);  // 2 bits: REP
  EXPECT_EQ(b[24 + 9], 0x10);  // 7 bits: 8
  EXPECT_EQ(b[24 + 10] << 8 | b[24 + 11], 28);
}

TEST(CmMadTest, CmaHdrAndTimeouts) {
  static_assert(offsetof(CmaHdr, src_addr) == 4 && offsetof(CmaHdr, dst_addr) == 20);
  EXPECT_EQ(kReqUserPrivateData, 56u);
  EXPECT_EQ(kSidrReqUserPrivateData, 180u);
  EXPECT_EQ(timeout_ns(0), 4096u);
  EXPECT_EQ(timeout_ns(20), 4096ull << 20);  // 4.29 s: rdma_cm's CM response timeout
}

}  // namespace
}  // namespace uroce::cm::mad
