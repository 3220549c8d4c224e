// Every limit of the emulated HCA in one place (as rxe_param.h).
#pragma once

#include <cstdint>

namespace uroce::device {

constexpr uint32_t kVendorId = 0x5552;  // "UR": neither Mellanox (0x02c9) nor Amazon (0x1d0f)
constexpr uint32_t kVendorPartId = 0x7563;        // "uc"
constexpr uint32_t kHwVer = 1;
constexpr char kFwVer[] = "0.1.0";

constexpr uint32_t kMaxQp = 1u << 16;
constexpr uint32_t kMaxQpWr = 1u << 14;
constexpr uint32_t kMaxSge = 32;
constexpr uint32_t kMaxInlineData = 512;
constexpr uint32_t kMaxCq = 1u << 16;
constexpr uint32_t kMaxCqe = (1u << 20) - 1;
constexpr uint32_t kMaxMr = 1u << 20;
constexpr uint32_t kMaxPd = 1u << 16;
constexpr uint32_t kMaxAh = 1u << 16;
constexpr uint32_t kMaxSrq = 1u << 14;
constexpr uint32_t kMaxSrqWr = 1u << 14;
constexpr uint32_t kMaxSrqSge = 32;
constexpr uint32_t kMaxQpRdAtomic = 16;
constexpr uint64_t kMaxMrSize = 1ull << 40;
// Client memory the engine maps (MRs on shared pages), per client and in all:
// well inside a 128 TiB user address space. Beyond it MRs use process_vm_*.
constexpr uint64_t kMaxSharedBytesPerOwner = 8ull << 40;
constexpr uint64_t kMaxSharedBytes = 32ull << 40;
constexpr uint32_t kMaxMsgSize = 1u << 31;
constexpr uint64_t kPageSizeCap = 0xfffff000;
constexpr uint32_t kGidTableLen = 16;
constexpr uint32_t kPkeyTableLen = 1;
constexpr uint16_t kDefaultPkey = 0xffff;

constexpr uint32_t kFirstQpn = 0x11;       // QPN 0 and 1 are the special QPs
constexpr uint32_t kQpnMask = 0xffffff;

// Transport tuning.
constexpr uint32_t kMaxInflightPackets = 512;  // un-ACKed RC packets per QP (a window the
                                                 // software ports can absorb)
constexpr uint32_t kAckEveryPackets = 64;       // AckReq at least this often
constexpr uint32_t kRxBurst = 32;               // DPDK l3fwd's burst size
constexpr uint32_t kRequesterBudget = 64;       // packets one QP may send per poll
constexpr uint32_t kAtomicReplayDepth = 16;     // atomics answered from cache on duplicates

}  // namespace uroce::device
