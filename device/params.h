// Every limit of the emulated HCA in one place (as rxe_param.h).
#pragma once

#include <cstdint>

#include "uroce/abi.h"

namespace uroce::device {

// A requester that has not yet heard from its peer (no ACK, NAK or response
// since it was given its send PSN), and whose peer is a QP of the same
// engine still in RESET or INIT, retransmits on every local ACK timeout but
// uses up no retry for this long after its first send: the peer's process
// has not moved its QP to RTR yet (a packet to a QP in INIT is dropped
// without an answer, IBA 10.3.1). On a NIC that window is the microseconds
// of a modify_qp; here it is the time the peer's process waits for a CPU,
// which on a loaded machine passes the 0.5 s budget of retry_cnt 7 at
// timeout 14 and ended ibv_xsrq_pingpong (whose server sends first, as soon
// as its own QPs are connected) in a hang. A peer on the wire, or one that
// does not exist, has no grace: a peer that never answers fails after
// (retry_cnt + 1) x 4.096 us x 2^timeout, as the IBA says (issue 25).
constexpr uint64_t kFirstContactGraceNs = 2'000'000'000;

constexpr uint32_t kVendorId = 0x5552;  // "UR": neither Mellanox (0x02c9) nor Amazon (0x1d0f)
constexpr uint32_t kVendorPartId = 0x7563;        // "uc"
constexpr uint32_t kHwVer = 1;
constexpr char kFwVer[] = "0.1.0";
// mlx5 mode (abi::kMlx5VendorId): a ConnectX-5, whose PCI function sysfs
// shows with vendor 0x15b3.
constexpr uint32_t kMlx5VendorId = abi::kMlx5VendorId;
constexpr uint32_t kMlx5VendorPartId = abi::kMlx5VendorPartId;
constexpr uint32_t kMlx5HwVer = 0;
constexpr uint32_t kMlx5PciVendor = 0x15b3;
// How long a sleeping engine may miss an arm command written to an
// mlx5-format CQ's UAR (device/cq.cc) or a WQE posted to an mlx5-format
// queue (device/mlx5_sq.cc): writes to those pages wake nobody.
constexpr uint64_t kMlx5ArmLookNs = 1'000'000;
// ... and for kMlx5BusyWindowNs after the last WQE taken from or CQE written
// to such a queue, when the engine sleeps because it shares its CPU with
// programs that poll: a ping-pong over mlx5 queues then waits tens of
// microseconds a hop, not a millisecond, at the cost of a few hundred
// wake-ups right after traffic (none once quiet).
constexpr uint64_t kMlx5BusyLookNs = 20'000;
constexpr uint64_t kMlx5BusyWindowNs = 20'000'000;

// Objects per device (all clients together). One past any of them is ENOMEM,
// as mlx5 reports a firmware limit (MLX5_CMD_STAT_LIM_ERR / EXCEED_LIM).
// QPs, CQs and SRQs: see queue_limits() below; these are their ceilings.
constexpr uint32_t kMaxQpCeiling = 1u << 16;
constexpr uint32_t kMaxQpWr = 1u << 14;
constexpr uint32_t kMaxSge = 32;
constexpr uint32_t kMaxInlineData = 512;
constexpr uint32_t kMaxCqCeiling = 1u << 16;
constexpr uint32_t kMaxCqe = (1u << 20) - 1;
constexpr uint32_t kMaxMr = 1u << 16;  // a control message each: all of them within seconds
constexpr uint32_t kMaxPd = 1u << 16;
// Memory windows. A key is index << 8 | an 8-bit key part (rxe's rkey
// layout); windows take the indices from kMwIndexBase up, regions the ones
// below (< kMaxMr + 1), so bit 31 of any R_Key says which table names it
// and a region's key never costs a window lookup (rxe: RXE_MIN_MW_INDEX).
constexpr uint32_t kMaxMw = 1u << 16;
constexpr uint32_t kMwIndexBase = 1u << 23;
constexpr bool is_mw_key(uint32_t key) { return key >> 31; }
static_assert(!is_mw_key(kMaxMr << 8 | 0xff) && is_mw_key(kMwIndexBase << 8));
static_assert(kMwIndexBase + kMaxMw < (1u << 24));
// Indirect memory keys (mlx5dv_create_mkey, device/mkey.cc): the indices
// after the windows', so a window's lookup finds none of them and refuses
// their R_Keys (remote access through an indirect mkey is not offered).
constexpr uint32_t kMaxMkey = 1u << 14;
constexpr uint32_t kMkeyIndexBase = kMwIndexBase + kMaxMw;
constexpr bool is_mkey_key(uint32_t key) { return (key >> 8) >= kMkeyIndexBase; }
static_assert(kMkeyIndexBase + kMaxMkey < (1u << 24) && is_mw_key(kMkeyIndexBase << 8));
// The entries an mkey may hold (mlx5dv_mkey_init_attr.max_entries, rounded
// up to 4); a registration's are bounded by its QP's WQE size too.
constexpr uint32_t kMaxMkeyEntries = 256;
constexpr uint32_t kMaxAh = 1u << 16;
// Device memory (ibv_alloc_dm): the bytes all clients may hold at once,
// mlx5's MEMIC size on ConnectX-5/6 (256 KiB) unless uroced --max-dm-size
// says otherwise; each allocation counts as the whole pages of its memfd.
constexpr uint64_t kDefaultMaxDmSize = 256u << 10;
constexpr uint64_t kMaxDmSizeCeiling = 1ull << 30;
constexpr uint32_t kMaxSrqCeiling = 1u << 14;
constexpr uint32_t kMaxSrqWr = 1u << 14;
constexpr uint32_t kMaxSrqSge = 32;
constexpr uint32_t kMaxQpRdAtomic = 16;
// Responder contexts (DCIs served at once) a DCT keeps (device/dc.cc): a
// few KiB each, found by a hash of the DCI's GID and QPN.
constexpr size_t kMaxDcContexts = 4096;
// Hardware tag matching (struct ibv_tm_caps). mlx5 reports
// 2^log_tag_matching_list_sz - 1 tags (one list slot is a sentinel) and
// 2^log_max_qp_sz operations (its command QP's depth); max_sge 1 and a
// 64-byte rendezvous header as mlx5 (kernel hw/mlx5/main.c).
constexpr uint32_t kTmMaxNumTags = (1u << 16) - 1;
constexpr uint32_t kTmMaxOps = 1u << 15;
constexpr uint32_t kTmMaxSge = 1;
constexpr uint32_t kTmMaxRndvHdrSize = 64;
// IBV_TM_CAP_RC in tm_caps.flags: what applications (UCX, pyverbs) test
// before using tag matching at all. mlx5 sets it only with rendezvous
// offload, which the device has (device/tm_rendezvous.cc).
constexpr bool kTmAdvertised = true;
// Rendezvous reads the device may have queued on one QP's send queue at once,
// beside a full user ring; a matched RNDV past it is left to software
// (IBV_WC_TM_RNDV_INCOMPLETE), as one whose buffer is short.
constexpr uint32_t kTmRndvPerQp = 32;
// The device's send-queue room for those reads and for the FINs of reads
// done whose ACK has not come back yet: a FIN is no read, so it must not
// take a read's room. With one count for both, whether a window of 32 tags
// was offloaded hung on the peer's ACK timing (the sender may post its next
// RNDV as soon as it has the FIN, before its ACK reaches the device).
constexpr uint32_t kTmInternalPerQp = 2 * kTmRndvPerQp;
// Software must sync at least every 16 K unexpected messages: past it their
// completions carry IBV_WC_TM_SYNC_REQ (mlx5 cq.c, UCX the same bound).
constexpr uint32_t kTmSyncReqUnexpected = 0x3fff;
constexpr uint64_t kMaxMrSize = 1ull << 40;
// Client memory the engine maps (MRs on shared pages), per client and in all:
// well inside a 128 TiB user address space. Beyond it MRs use process_vm_*.
constexpr uint64_t kMaxSharedBytesPerOwner = 8ull << 40;
constexpr uint64_t kMaxSharedBytes = 32ull << 40;
constexpr uint32_t kMaxMsgSize = 1u << 31;

// Each QP, CQ and SRQ is one shared mapping of its memfd in the engine and
// again in the client that made it, and the kernel bounds the mappings of a
// process (vm.max_map_count, 65530 by default). The engine maps every
// client's queues, so max_qp + max_cq + max_srq must fit with room left for
// the rest of the process (libraries, DPDK, heaps) and for MRs on shared
// pages; a client that makes all of them needs the same room. The engine
// reads vm.max_map_count at start and advertises what fits.
constexpr uint64_t kDefaultMaxMapCount = 65530;
constexpr uint32_t kMappingsReserved = 8192;  // everything but queues
// Of those: the engine's mappings of MRs on shared pages. Past it MRs work
// through process_vm_* (as past the byte budget), so queues never run out.
constexpr uint32_t kMaxSharedMrMappings = 4096;

struct QueueLimits {
  uint32_t max_qp, max_cq, max_srq;
};
constexpr QueueLimits queue_limits(uint64_t max_map_count) {
  const uint64_t budget = max_map_count > 2 * kMappingsReserved ? max_map_count - kMappingsReserved
                                                                : max_map_count / 2;
  // Half for QPs, a quarter for CQs, an eighth for SRQs; whole thousands.
  auto fit = [](uint64_t n, uint32_t ceiling) {
    if (n >= 4096) n &= ~uint64_t(1023);
    return uint32_t(n < ceiling ? n : ceiling);
  };
  return {fit(budget / 2, kMaxQpCeiling), fit(budget / 4, kMaxCqCeiling), fit(budget / 8, kMaxSrqCeiling)};
}
static_assert(queue_limits(kDefaultMaxMapCount).max_qp == 27648);
static_assert(queue_limits(kDefaultMaxMapCount).max_qp + queue_limits(kDefaultMaxMapCount).max_cq +
                  queue_limits(kDefaultMaxMapCount).max_srq + kMappingsReserved <=
              kDefaultMaxMapCount);
static_assert(queue_limits(1u << 20).max_qp == kMaxQpCeiling);
constexpr uint64_t kPageSizeCap = 0xfffff000;
constexpr uint32_t kGidTableLen = 16;
constexpr uint32_t kPkeyTableLen = 1;
constexpr uint16_t kDefaultPkey = 0xffff;

// Packet pacing of raw packet QPs (IBV_QP_RATE_LIMIT, kbps): mlx5 reports
// its firmware's range; 1 Mb/s to 100 Gb/s covers what a software port does.
constexpr uint32_t kMinRateLimitKbps = 1000;
constexpr uint32_t kMaxRateLimitKbps = 100'000'000;
constexpr uint64_t kPaceBurstNs = 100'000;  // credit an idle paced QP may send at once

constexpr uint32_t kFirstQpn = 0x11;       // QPN 0 and 1 are the special QPs
constexpr uint32_t kQpnMask = 0xffffff;

// Transport tuning.
constexpr uint32_t kMaxInflightPackets = 512;  // un-ACKed RC packets per QP (a window the
                                                 // software ports can absorb)
constexpr uint32_t kAckEveryPackets = 64;       // AckReq at least this often
constexpr uint32_t kRxBurst = 32;               // DPDK l3fwd's burst size
constexpr uint32_t kRequesterBudget = 64;       // packets one QP may send per poll
constexpr uint32_t kAtomicReplayDepth = 16;     // atomics answered from cache on duplicates
// Back-pressure (Device::tx_ready): senders (requesters, READ responses, raw
// QPs) wait while the loopback holds this many frames, while the wire port's
// TX queue is half full, or while fewer than kPoolReserve packet buffers are
// left (for what is not held back: ACKs, received frames). A NIC's send
// queues wait for its ports in the same way; they do not drop.
constexpr uint32_t kLoopbackDepth = 1024;
constexpr uint32_t kPoolReserve = 512;

}  // namespace uroce::device
