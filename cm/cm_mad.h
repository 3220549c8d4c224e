// IB CM MADs as they cross the wire (IBA vol 1, chapter 12.6 and 12.11;
// 13.4 for the MAD header): the 256-byte MAD, its common header, the fields
// of each CM message at their IBA bit positions, and the 36-byte IP header
// rdma_cm puts at the start of a REQ's and a SIDR REQ's private data
// (Linux drivers/infiniband/core/cma.c, struct cma_hdr). Everything is big
// endian. Fields are a table of (byte, bit, width) as in Linux's
// include/rdma/ibta_vol1_c12.h, so one getter and one setter serve them all.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "device/qp1_agent.h"
#include "net/byteorder.h"

namespace uroce::cm::mad {

using net::be16;
using net::be32;
using net::be64;

// The general services QP and its well-known Q_Key (IBA 13.5.1, C13-23);
// every GSI MAD on RoCE goes with P_Key 0xffff (the default partition).
constexpr uint32_t kGsiQpn = device::kGsiQpn;
constexpr uint32_t kGsiQkey = device::kGsiQkey;
constexpr uint16_t kGsiPkey = device::kGsiPkey;

constexpr size_t kMadBytes = device::kMadBytes;
constexpr uint8_t kBaseVersion = 1;
constexpr uint8_t kMgmtClassCm = 0x07;  // IBA 13.4.4, table 148
constexpr uint8_t kCmClassVersion = 2;
constexpr uint8_t kMethodSend = 0x03;   // every CM message is a Send (12.6.1)

// Attribute IDs of the CM messages (IBA 16.7.2, table 105).
enum class Attr : uint16_t {
  kReq = 0x0010,
  kMra = 0x0011,
  kRej = 0x0012,
  kRep = 0x0013,
  kRtu = 0x0014,
  kDreq = 0x0015,
  kDrep = 0x0016,
  kSidrReq = 0x0017,
  kSidrRep = 0x0018,
};

// The common MAD header (IBA 13.4.2, table 145).
struct MadHdr {
  uint8_t base_version;
  uint8_t mgmt_class;
  uint8_t class_version;
  uint8_t method;
  be16 status;
  be16 class_specific;
  be64 tid;
  be16 attr_id;
  be16 reserved;
  be32 attr_mod;
} __attribute__((packed));
static_assert(sizeof(MadHdr) == 24);

struct Mad {
  MadHdr hdr;
  uint8_t data[kMadBytes - sizeof(MadHdr)];  // the CM message
} __attribute__((packed));
static_assert(sizeof(Mad) == kMadBytes);

// A field of a CM message: `width` bits starting `bit` bits below the most
// significant bit of byte `byte` of the message (byte 0 is MAD byte 24).
struct Field {
  uint16_t byte;
  uint8_t bit;
  uint8_t width;
};
// A byte array of a message (GIDs, private data).
struct Bytes {
  uint16_t byte;
  uint16_t len;
};

constexpr uint64_t get(const Mad& m, Field f) {
  const unsigned span = (f.bit + f.width + 7) / 8;
  uint64_t v = 0;
  for (unsigned i = 0; i < span; ++i) v = v << 8 | m.data[f.byte + i];
  v >>= span * 8 - f.bit - f.width;
  return f.width == 64 ? v : v & ((uint64_t(1) << f.width) - 1);
}

constexpr void set(Mad& m, Field f, uint64_t value) {
  const unsigned span = (f.bit + f.width + 7) / 8;
  const unsigned shift = span * 8 - f.bit - f.width;
  const uint64_t mask = (f.width == 64 ? ~uint64_t(0) : (uint64_t(1) << f.width) - 1) << shift;
  uint64_t v = 0;
  for (unsigned i = 0; i < span; ++i) v = v << 8 | m.data[f.byte + i];
  v = (v & ~mask) | ((value << shift) & mask);
  for (unsigned i = span; i-- > 0; v >>= 8) m.data[f.byte + i] = uint8_t(v);
}

inline uint8_t* at(Mad& m, Bytes b) { return m.data + b.byte; }
inline const uint8_t* at(const Mad& m, Bytes b) { return m.data + b.byte; }

// IBA table 106 (REQ).
namespace req {
constexpr Field kLocalCommId{0, 0, 32};
constexpr Field kServiceId{8, 0, 64};
constexpr Field kLocalCaGuid{16, 0, 64};
constexpr Field kLocalQkey{28, 0, 32};
constexpr Field kLocalQpn{32, 0, 24};
constexpr Field kResponderResources{35, 0, 8};
constexpr Field kLocalEecn{36, 0, 24};
constexpr Field kInitiatorDepth{39, 0, 8};
constexpr Field kRemoteEecn{40, 0, 24};
constexpr Field kRemoteCmResponseTimeout{43, 0, 5};
constexpr Field kTransportServiceType{43, 5, 2};  // 0 RC, 1 UC (12.6.5)
constexpr Field kEndToEndFlowControl{43, 7, 1};
constexpr Field kStartingPsn{44, 0, 24};
constexpr Field kLocalCmResponseTimeout{47, 0, 5};
constexpr Field kRetryCount{47, 5, 3};
constexpr Field kPartitionKey{48, 0, 16};
constexpr Field kPathMtu{50, 0, 4};
constexpr Field kRdcExists{50, 4, 1};
constexpr Field kRnrRetryCount{50, 5, 3};
constexpr Field kMaxCmRetries{51, 0, 4};
constexpr Field kSrq{51, 4, 1};
constexpr Field kExtendedTransportType{51, 5, 3};
constexpr Field kPrimaryLocalLid{52, 0, 16};
constexpr Field kPrimaryRemoteLid{54, 0, 16};
constexpr Bytes kPrimaryLocalGid{56, 16};
constexpr Bytes kPrimaryRemoteGid{72, 16};
constexpr Field kPrimaryFlowLabel{88, 0, 20};
constexpr Field kPrimaryPacketRate{91, 2, 6};
constexpr Field kPrimaryTrafficClass{92, 0, 8};
constexpr Field kPrimaryHopLimit{93, 0, 8};
constexpr Field kPrimarySl{94, 0, 4};
constexpr Field kPrimarySubnetLocal{94, 4, 1};
constexpr Field kPrimaryLocalAckTimeout{95, 0, 5};
constexpr Bytes kPrivateData{140, 92};
// Transport Service Type 3 with Extended Transport Type 1: XRC (cm.c's
// cm_req_set_qp_type for an XRC initiator).
constexpr uint8_t kTransportRc = 0, kTransportUc = 1, kTransportExtended = 3, kExtendedXrc = 1;
}  // namespace req

// IBA table 107 (MRA).
namespace mra {
constexpr Field kLocalCommId{0, 0, 32};
constexpr Field kRemoteCommId{4, 0, 32};
constexpr Field kMessageMraed{8, 0, 2};  // 0 REQ, 1 REP, 2 LAP
constexpr Field kServiceTimeout{9, 0, 5};
constexpr Bytes kPrivateData{10, 222};
}  // namespace mra
constexpr uint8_t kMraMsgReq = 0, kMraMsgRep = 1;

// IBA table 108 (REJ).
namespace rej {
constexpr Field kLocalCommId{0, 0, 32};
constexpr Field kRemoteCommId{4, 0, 32};
constexpr Field kMessageRejected{8, 0, 2};  // 0 REQ, 1 REP, 2 other
constexpr Field kRejectedInfoLength{9, 0, 7};
constexpr Field kReason{10, 0, 16};
constexpr Bytes kAri{12, 72};
constexpr Bytes kPrivateData{84, 148};
}  // namespace rej

// IBA table 110 (REP).
namespace rep {
constexpr Field kLocalCommId{0, 0, 32};
constexpr Field kRemoteCommId{4, 0, 32};
constexpr Field kLocalQkey{8, 0, 32};
constexpr Field kLocalQpn{12, 0, 24};
constexpr Field kLocalEecn{16, 0, 24};
constexpr Field kStartingPsn{20, 0, 24};
constexpr Field kResponderResources{24, 0, 8};
constexpr Field kInitiatorDepth{25, 0, 8};
constexpr Field kTargetAckDelay{26, 0, 5};
constexpr Field kFailoverAccepted{26, 5, 2};
constexpr Field kEndToEndFlowControl{26, 7, 1};
constexpr Field kRnrRetryCount{27, 0, 3};
constexpr Field kSrq{27, 3, 1};
constexpr Field kLocalCaGuid{28, 0, 64};
constexpr Bytes kPrivateData{36, 196};
}  // namespace rep

// IBA tables 111-113 (RTU, DREQ, DREP).
namespace rtu {
constexpr Field kLocalCommId{0, 0, 32};
constexpr Field kRemoteCommId{4, 0, 32};
constexpr Bytes kPrivateData{8, 224};
}  // namespace rtu
namespace dreq {
constexpr Field kLocalCommId{0, 0, 32};
constexpr Field kRemoteCommId{4, 0, 32};
constexpr Field kRemoteQpn{8, 0, 24};
constexpr Bytes kPrivateData{12, 220};
}  // namespace dreq
namespace drep {
constexpr Field kLocalCommId{0, 0, 32};
constexpr Field kRemoteCommId{4, 0, 32};
constexpr Bytes kPrivateData{8, 224};
}  // namespace drep

// IBA tables 119-120 (SIDR REQ, SIDR REP).
namespace sidr_req {
constexpr Field kRequestId{0, 0, 32};
constexpr Field kPartitionKey{4, 0, 16};
constexpr Field kServiceId{8, 0, 64};
constexpr Bytes kPrivateData{16, 216};
}  // namespace sidr_req
namespace sidr_rep {
constexpr Field kRequestId{0, 0, 32};
constexpr Field kStatus{4, 0, 8};
constexpr Field kAddInfoLength{5, 0, 8};
constexpr Field kQpn{8, 0, 24};
constexpr Field kServiceId{12, 0, 64};
constexpr Field kQkey{20, 0, 32};
constexpr Bytes kAddInfo{24, 72};
constexpr Bytes kPrivateData{96, 136};
}  // namespace sidr_rep

// Every message's private data ends where the MAD does (IBA 12.6: REQ 92,
// REP 196, REJ 148, RTU 224, DREQ 220, DREP 224, SIDR REQ 216, SIDR REP 136).
static_assert(req::kPrivateData.byte + req::kPrivateData.len == sizeof(Mad::data));
static_assert(rep::kPrivateData.byte + rep::kPrivateData.len == sizeof(Mad::data));
static_assert(rej::kPrivateData.byte + rej::kPrivateData.len == sizeof(Mad::data));
static_assert(mra::kPrivateData.byte + mra::kPrivateData.len == sizeof(Mad::data));
static_assert(rtu::kPrivateData.byte + rtu::kPrivateData.len == sizeof(Mad::data));
static_assert(dreq::kPrivateData.byte + dreq::kPrivateData.len == sizeof(Mad::data));
static_assert(drep::kPrivateData.byte + drep::kPrivateData.len == sizeof(Mad::data));
static_assert(sidr_req::kPrivateData.byte + sidr_req::kPrivateData.len == sizeof(Mad::data));
static_assert(sidr_rep::kPrivateData.byte + sidr_rep::kPrivateData.len == sizeof(Mad::data));
// REQ fields at their MAD offsets (IBA table 106: byte 24 + the message's).
static_assert(sizeof(MadHdr) + req::kServiceId.byte == 32);
static_assert(sizeof(MadHdr) + req::kStartingPsn.byte == 68);
static_assert(sizeof(MadHdr) + req::kPrimaryLocalGid.byte == 80);
static_assert(sizeof(MadHdr) + req::kPrivateData.byte == 164);

// REJ reasons (IBA 12.6.7.2, table 109) and SIDR REP statuses (table 121)
// this CM sends or reports.
constexpr uint16_t kRejTimeout = 1;
constexpr uint16_t kRejInvalidServiceId = 8;
constexpr uint16_t kRejStaleConn = 10;
constexpr uint16_t kRejConsumerDefined = 28;
constexpr uint8_t kRejMsgReq = 0, kRejMsgRep = 1, kRejMsgOther = 2;
constexpr uint8_t kSidrSuccess = 0, kSidrUnsupported = 1, kSidrReject = 2;

// rdma_cm's service IDs on IB and RoCE: the port space above the port
// (cma_get_service_id: ps << 16 | port; RDMA_IB_IP_PS_TCP / _UDP).
constexpr uint64_t kPsTcp = 0x0106, kPsUdp = 0x0111, kPsIb = 0x013F;
constexpr uint64_t service_id(uint64_t ps, uint16_t port) { return ps << 16 | port; }
constexpr uint64_t kServiceIdPsMask = ~uint64_t(0xffff);

// The flow label rdma_cm gives a RoCEv2 path without one of its own (Linux's
// cma.c, cma_get_roce_udp_flow_label): source port * 31 + destination port,
// its low 20 bits.
constexpr uint32_t roce_flow_label(uint16_t src_port, uint16_t dst_port) {
  return (uint32_t(src_port) * 31 + dst_port) & 0xfffff;
}

// rdma_cm's IP header, the first 36 bytes of a REQ's or SIDR REQ's private
// data (cma.c: struct cma_hdr, CMA_VERSION 0): the active side's port and
// both addresses, IPv4 in the last four bytes of each.
struct CmaHdr {
  uint8_t cma_version;  // 0
  uint8_t ip_version;   // 4 or 6 in the high nibble
  be16 port;            // the active side's (source) port
  uint8_t src_addr[16];
  uint8_t dst_addr[16];
} __attribute__((packed));
static_assert(sizeof(CmaHdr) == 36);
constexpr uint8_t kCmaVersion = 0;
// What rdma_cm leaves the application of each message's private data.
constexpr size_t kReqUserPrivateData = req::kPrivateData.len - sizeof(CmaHdr);            // 56
constexpr size_t kSidrReqUserPrivateData = sidr_req::kPrivateData.len - sizeof(CmaHdr);   // 180

// IBA 12.7.30 and 13.4.6.2: a timeout field t means 4.096 us * 2^t.
constexpr uint64_t timeout_ns(uint8_t t) { return uint64_t(4096) << (t > 31 ? 31 : t); }

}  // namespace uroce::cm::mad
