// The provider/engine ABI: the shared-memory queues (uroce/abi_base.h explains the parts).
#pragma once

#include "uroce/abi_base.h"

namespace uroce::abi {

// ---------------------------------------------------------------------------
// Shared-memory queues
// ---------------------------------------------------------------------------

// Header at offset 0 of every queue region (SQ, RQ, SRQ, CQ). The producer
// publishes with a release store after writing the entry; the consumer reads
// the other side's index with an acquire load.
struct QueueHeader {
  // SQ/RQ: written by the client (post). CQ: written by the engine.
  alignas(kCacheLine) std::atomic<uint32_t> producer;
  // SQ/RQ: written by the engine (slot free again). CQ: written by the client.
  alignas(kCacheLine) std::atomic<uint32_t> consumer;
  // CQ only: arm state written by the client (ibv_req_notify_cq), cleared by
  // the engine with an exchange when it raises the completion event.
  alignas(kCacheLine) std::atomic<uint32_t> notify;
  uint32_t reserved0;
  // Written once by the engine at creation; the engine keeps its own copy.
  uint32_t log2_entries;
  uint32_t stride;
  uint32_t reserved1[12];
};
static_assert(sizeof(QueueHeader) == 3 * kCacheLine);
static_assert(offsetof(QueueHeader, consumer) == kCacheLine);
static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(std::is_standard_layout_v<QueueHeader>);
constexpr size_t kQueueEntriesOffset = sizeof(QueueHeader);

enum CqNotify : uint32_t {
  kCqNotifyNone = 0,
  kCqNotifyNext = 1,       // any next completion raises an event
  kCqNotifySolicited = 2,  // only solicited or error completions
};

struct Sge {
  uint64_t addr;
  uint32_t length;
  uint32_t lkey;
};
static_assert(sizeof(Sge) == 16);

// Address vector carried by UD work requests (the AH lives in the client, as
// on mlx5 where the AV is copied into the WQE).
struct AddressVector {
  uint8_t dgid[16];
  uint32_t flow_label;
  uint8_t sgid_index;
  uint8_t hop_limit;
  uint8_t traffic_class;
  uint8_t sl;
  uint8_t is_global;
  uint8_t port_num;
  // RoCEv2's UDP source port; 0: the engine's per-QP hash (an mlx5 WQE's
  // AV names one: mlx5_wqe_av.rlid).
  uint16_t udp_sport;
  uint8_t reserved[4];
};
static_assert(sizeof(AddressVector) == 32 && offsetof(AddressVector, udp_sport) == 26);

// IBV_WR_BIND_MW (ibv_bind_mw posts one too): which window, onto which
// region, and the range and rights it grants. The window is named by the
// index part of its R_Key (as mlx5's UMR names the mkey to modify); the low
// 8 bits of new_rkey are the key the window has once bound.
struct MwBind {
  uint32_t mw_rkey;   // the window's R_Key as the client knows it
  uint32_t new_rkey;  // ibv_inc_rkey(mw_rkey) for ibv_bind_mw
  uint32_t mr_lkey;   // the region (ignored with length 0)
  uint32_t access;    // enum ibv_access_flags: REMOTE_*, ZERO_BASED
  uint64_t addr;      // in the region's address space (its iova)
  uint64_t length;    // 0: a type 1 window bound to nothing
};
static_assert(sizeof(MwBind) == 32);

// The DMA copy engine's work request (mlx5dv_wr_memcpy, an mlx5-mode QP's
// kWrMemcpy, uroce/wr_opcodes.h): `length` bytes from one local region to
// another of the QP's PD, no packet. Addresses are the regions' (iova).
struct MemcpyArgs {
  uint64_t dst_addr;
  uint64_t src_addr;
  uint32_t dst_lkey;  // needs IBV_ACCESS_LOCAL_WRITE
  uint32_t src_lkey;
  uint32_t length;    // 1 .. kMaxMemcpyLength
  uint32_t reserved;
};
static_assert(sizeof(MemcpyArgs) == 32);
// The largest copy the engine makes in one go (mlx5dv_query_device's
// max_wr_memcpy_length): it runs inside the engine's poll loop.
constexpr uint32_t kMaxMemcpyLength = 1u << 20;

// A memory registration (kWrUmr, uroce/wr_opcodes.h): the layout and rights
// a free indirect mkey takes. Its entries follow the header in the SGE area
// (num_sge counts the 16-byte slots): a list layout, one
// Sge per entry (its bytes, in order); an interleaved one, two slots per
// entry: Sge{addr, bytes_count, lkey}, then Sge{bytes_skip, 0, 0}, the
// entries' bytes taken in turn repeat_count times, each entry's address
// moving on by bytes_count + bytes_skip each time (rdma-core
// providers/mlx5/qp.c umr_strided_seg_create). The mkey is zero-based: an
// SGE's address is an offset into the layout's bytes.
constexpr uint32_t kUmrNoLayout = 0, kUmrList = 1, kUmrInterleaved = 2;
struct UmrArgs {
  uint32_t mkey;          // its lkey (== rkey)
  uint32_t access;        // IBV_ACCESS_LOCAL_WRITE, REMOTE_WRITE/READ/ATOMIC
  uint32_t layout;        // kUmrList, kUmrInterleaved; kUmrNoLayout: none set (no bytes)
  uint32_t repeat_count;  // interleaved: at least 1
  uint32_t num_entries;
  uint32_t reserved[3];
};
static_assert(sizeof(UmrArgs) == 32);

// A tag-list operation (kWrTagOp, uroce/wr_opcodes.h): an mlx5 TAG_MATCHING
// WQE as the engine read it (uroce/mlx5_wqe.h DecodedTagOp); an append's
// buffer is the one Sge in the SGE area. Only in the engine's own copy.
struct TagOpArgs {
  uint8_t op;      // mlx5::kTmNop, kTmAppend, kTmRemove
  uint8_t flags;   // mlx5::kTmFlagSwCnt, kTmFlagCqeReq
  uint16_t index;  // append: the entry the next append fills; remove: the entry
  uint16_t sw_cnt;
  uint16_t reserved0;
  uint32_t reserved1[2];
  uint64_t tag, mask;
};
static_assert(sizeof(TagOpArgs) == 32 && offsetof(TagOpArgs, tag) == 16);

// SendWqe::flags, beside the ibv_send_flags: the WQE came from an mlx5 send
// WQE the program wrote (mlx5dv_wr_raw_wqe), so its completion's opcode is
// MLX5DV_WC_RAW_WQE (IBV_WC_DRIVER2), as mlx5's (providers/mlx5/qp.c raw_wqe_init).
constexpr uint32_t kSendFlagMlx5RawWqe = 1u << 31;
// SendWqe::flags in the engine's own copy only (never taken from a ring):
// an mlx5 WQE's inline bytes (inline_len of them, after the SGEs in the
// copy) come first in the message, then the SGEs' data (device/mlx5_sq.cc).
constexpr uint32_t kSendFlagInlineHead = 1u << 30;

// An mlx5-format CQ (kMlx5CqFormat, mlx5 mode): its memfd holds the
// QueueHeader (the engine's producer index, for reports) at 0, the doorbell
// record (two big-endian words: [0] the consumer index the program has
// polled to, 24 bits; [1] its last arm command) at kMlx5CqDbrecOffset, a
// UAR page of its own whose CQ doorbell (+kMlx5CqDoorbell, 64 bits:
// sn/cmd/ci << 32 | cqn, big-endian, as mlx5's) the engine takes arm
// commands from, and then cqe_cnt CQEs of cqe_size bytes (uroce/mlx5_cqe.h;
// a 128-byte one has its CQE in its last 64 bytes), each op_own 0xF0
// (invalid, owner 0) until written.
constexpr size_t kMlx5CqDbrecOffset = 0x100;
constexpr size_t kMlx5CqUarOffset = 0x1000;
constexpr size_t kMlx5CqDoorbell = 0x20;  // MLX5_CQ_DOORBELL
constexpr size_t kMlx5CqCqesOffset = 0x2000;
constexpr uint32_t kMlx5CqArmSolicited = 1u << 24;  // MLX5_CQ_DB_REQ_NOT_SOL
static_assert(kMlx5CqDbrecOffset >= sizeof(QueueHeader));

// A QP's queues in mlx5's format (kMlx5QpFormat, mlx5 mode): its memfd
// holds the doorbell record (two big-endian words: [0] the receive counter,
// the 16-bit count of receive WQEs posted; [1] the send producer index, the
// 16-bit count of 64-byte basic blocks posted) at kMlx5QpDbrecOffset, a UAR
// page whose BlueFlame register (kMlx5QpBfOffset, kMlx5QpBfSize bytes, and
// the same again after it: programs write the two halves in turn) the
// engine never needs to read (the WQE is in the queue and the doorbell
// record says how far, mlx5's order), then sq_wqe_cnt basic blocks of 64
// bytes holding mlx5 send WQEs (uroce/mlx5_wqe.h), the first at index 0,
// and, for a QP without an SRQ, rq_wqe_cnt receive WQEs of rq_stride bytes
// at rq_offset: data segments (a byte count, an lkey, an address; an lkey
// of kMlx5InvalidLkey ends a WQE early), taken in order, cyclically.
constexpr size_t kMlx5QpDbrecOffset = 0x100;
constexpr size_t kMlx5QpBfOffset = 0x1800;  // MLX5_BF_OFFSET in a UAR page at 0x1000
constexpr uint32_t kMlx5QpBfSize = 256;
constexpr size_t kMlx5QpSqOffset = 0x2000;
constexpr uint32_t kMlx5SendBasicBlock = 64;  // MLX5_SEND_WQE_BB
static_assert(kMlx5QpBfOffset + 2 * kMlx5QpBfSize <= kMlx5QpSqOffset);

// An mlx5-format SRQ (kMlx5SrqFormat, mlx5 mode): its memfd holds the
// doorbell record (one big-endian word: the 16-bit count of WQEs the
// program has posted) at kMlx5SrqDbrecOffset and then wqe_cnt WQEs of
// `stride` bytes: a next segment (mlx5_wqe_srq_next_seg: the big-endian
// index of the next WQE at byte 2; bytes 4-15 the program's own), then data
// segments (a byte count, an lkey, an address; an lkey of
// kMlx5InvalidLkey ends the list early). The device starts at WQE 0 and,
// for each WQE after, follows the next index of the one before, read when
// the next receive is taken (providers/mlx5/srq.c links each WQE to the one
// after it at creation; the engine does the same when it formats the SRQ).
constexpr size_t kMlx5SrqDbrecOffset = 0x100;
constexpr size_t kMlx5SrqWqesOffset = 0x1000;
// An mlx5-format receive WQ (kMlx5WqFormat, mlx5 mode): its memfd holds the
// doorbell record (big-endian words: [0] the 16-bit count of receive WQEs
// the program has posted, mlx5's MLX5_RCV_DBR; [1] unused) at
// kMlx5WqDbrecOffset and then wqe_cnt WQEs of `stride` bytes, each data
// segments as a QP's receive WQE (an lkey of kMlx5InvalidLkey ends one
// early), taken in order, cyclically (providers/mlx5/verbs.c
// mlx5_calc_rwq_size, mlx5_post_wq_recv).
constexpr size_t kMlx5WqDbrecOffset = 0x100;
constexpr size_t kMlx5WqWqesOffset = 0x1000;
constexpr uint32_t kMlx5InvalidLkey = 0x100;  // MLX5_INVALID_LKEY

// Send WQE: a fixed 128-byte header followed by either num_sge Sge entries or
// inline_len bytes of inline data (IBV_SEND_INLINE). IBV_WR_LOCAL_INV names
// the R_Key to invalidate in imm_data, as IBV_WR_SEND_WITH_INV does.
struct SendWqe {
  uint64_t wr_id;
  uint32_t opcode;     // enum ibv_wr_opcode
  uint32_t flags;      // enum ibv_send_flags
  uint32_t imm_data;   // network order, or the rkey to invalidate
  uint32_t num_sge;
  uint32_t inline_len;
  uint32_t rkey;
  uint64_t remote_addr;
  uint64_t compare_add;  // or IBV_WR_ATOMIC_WRITE's 8 bytes, as they were in memory
  uint64_t swap;
  uint32_t remote_qpn;  // UD
  uint32_t remote_qkey; // UD
  uint32_t xrc_remote_srqn;
  uint32_t reserved0;
  union {
    AddressVector av;   // UD
    MwBind bind;        // IBV_WR_BIND_MW (RC, UC, XRC)
    MemcpyArgs copy;    // kWrMemcpy (RC)
    UmrArgs umr;        // kWrUmr (RC)
    TagOpArgs tag_op;   // kWrTagOp (RC, engine only)
  };
  uint64_t dc_key;      // a DCI's: the target DCT's access key (av, remote_qpn: the DCT)
  uint16_t dci_stream;  // a DCI's with streams: the stream (mlx5dv_wr_set_dc_addr_stream)
  uint8_t reserved1[14];
};
static_assert(sizeof(SendWqe) == 128);
static_assert(offsetof(SendWqe, av) == 72);
static_assert(offsetof(SendWqe, bind) == 72);
static_assert(offsetof(SendWqe, copy) == 72);
static_assert(offsetof(SendWqe, umr) == 72);
static_assert(offsetof(SendWqe, tag_op) == 72);
static_assert(offsetof(SendWqe, dc_key) == 104);
static_assert(offsetof(SendWqe, dci_stream) == 112);
static_assert(std::is_standard_layout_v<SendWqe>);

struct RecvWqe {
  uint64_t wr_id;
  uint32_t num_sge;
  uint32_t reserved;
  // followed by num_sge Sge entries
};
static_assert(sizeof(RecvWqe) == 16);

// Completion entry, written by the engine.
struct Cqe {
  uint64_t wr_id;
  uint32_t status;      // enum ibv_wc_status
  uint32_t opcode;      // enum ibv_wc_opcode
  uint32_t vendor_err;
  uint32_t byte_len;
  union {
    uint32_t imm_data;  // network order, or invalidated rkey
    uint32_t flow_tag;  // raw packet receives (no immediate): the steering rule's
                        // IBV_FLOW_SPEC_ACTION_TAG, 0 without one (mlx5 cq.c)
  };
  uint32_t qp_num;
  union {
    uint32_t src_qp;
    uint32_t tm_priv;   // IBV_WC_TM_MATCH: the TMH's app_ctx (RC has no src_qp to give)
  };
  uint32_t wc_flags;    // enum ibv_wc_flags
  uint16_t pkey_index;
  uint16_t slid;
  uint8_t sl;
  uint8_t dlid_path_bits;
  uint16_t cvlan;       // a WQ with CVLAN stripping: the removed 802.1Q TCI, 0 untagged

  // CQs created with kCqTimestamps only (else 0): the device clock when the
  // engine wrote the entry (kDeviceClock, in kHcaCoreClockKhz units) and the
  // wall clock (CLOCK_REALTIME ns), each monotonic within the CQ.
  // With IBV_WC_TM_MATCH (tag matching) the wall-clock field carries the
  // TMH's tag instead, and the provider reads such an entry's wall clock
  // from its device-clock stamp (as mlx5 converts its CQE's HCA clock).
  uint64_t timestamp_ns;
  union {
    uint64_t wallclock_ns;
    uint64_t tm_tag;
  };
};
static_assert(sizeof(Cqe) == 64);
static_assert(offsetof(Cqe, cvlan) == 46);
static_assert(std::is_standard_layout_v<Cqe>);

// The device clock, as mlx5's free-running HCA counter: a counter of
// hca_core_clock (kHz) ticks that never steps. uroce's is CLOCK_MONOTONIC_RAW
// in nanoseconds (1 GHz: 1 000 000 kHz), read by the engine when it writes a
// completion and by the provider for ibv_query_rt_values_ex; both sit on one
// host (the queues are shared memory), so they read the same counter.
constexpr clockid_t kDeviceClock = CLOCK_MONOTONIC_RAW;
constexpr uint64_t kHcaCoreClockKhz = 1'000'000;
constexpr uint64_t kCompletionTimestampMask = ~uint64_t(0);  // all 64 bits count

struct GidEntry {
  uint8_t gid[16];
  uint32_t type;  // enum ibv_gid_type: IBV_GID_TYPE_ROCE_V2 etc.
  uint32_t valid;
};

// Engine-wide page shared read-only with every client.
struct EngineShared {
  uint32_t magic;
  uint32_t version;
  // Set by the engine before it sleeps. A client that published work and sees
  // it set writes the doorbell eventfd; otherwise posting costs no syscall.
  alignas(kCacheLine) std::atomic<uint32_t> sleeping;
  alignas(kCacheLine) std::atomic<uint32_t> port_state;  // enum ibv_port_state
  // The CPU the engine polls on (include/uroce/cpu_placement.h), -1: any.
  // A client polling an empty CQ on that CPU backs off to sleep.
  std::atomic<int32_t> polling_cpu;
  uint32_t reserved[14];
  // The GID table as it is now: it follows the addresses of the interface
  // the device is bound to (uroced --netdev; lo by default), as a RoCE
  // NIC's follows its netdev's. A seqlock: the engine makes gid_seq odd,
  // rewrites the entries, makes it even again (release); a reader copies
  // the entries between two equal even loads (acquire). ndev_ifindex is
  // that interface's index (ibv_gid_entry::ndev_ifindex), 0 if none.
  alignas(kCacheLine) std::atomic<uint32_t> gid_seq;
  uint32_t ndev_ifindex;
  GidEntry gids[kMaxGids];
};
static_assert(std::is_standard_layout_v<EngineShared>);
static_assert(offsetof(EngineShared, gid_seq) % kCacheLine == 0);
static_assert(sizeof(EngineShared) <= 4096);

// Records written by the engine into the client's async event pipe and into
// completion channel pipes. Both are under PIPE_BUF, so writes are atomic.
struct AsyncEventRecord {
  uint32_t event_type;  // enum ibv_event_type
  uint32_t reserved;
  uint64_t cookie;      // the client's object pointer given at creation
};
static_assert(sizeof(AsyncEventRecord) == 16);

struct CompEventRecord {
  uint64_t cq_cookie;
};
static_assert(sizeof(CompEventRecord) == 8);

}  // namespace uroce::abi
