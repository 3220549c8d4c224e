// Queue pair: attributes, the shared-memory SQ/RQ, and the state of the three
// transport roles (requester, completer, responder) as rxe splits them.
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "device/objects.h"
#include "device/params.h"
#include "device/response_queue.h"
#include "device/work_queue.h"
#include "net/packet.h"
#include "uroce/abi.h"

namespace uroce::device {

// Work the device puts on a QP's send queue by itself: the RDMA READ and
// the FIN of a rendezvous matched on a TM-SRQ (rdma-core Documentation/tag_matching.md "the
// ownership of the QP's Send Queue is passed to the TM-SRQ").
enum class InternalWork : uint8_t { kNone, kRndvRead, kRndvFin };

// Engine-side bookkeeping of one slot of the engine's send sequence.
struct SendWqeState {
  uint64_t length = 0;     // total bytes of the message
  uint32_t first_psn = 0;
  uint32_t npsn = 0;       // PSNs the message uses
  uint32_t status = IBV_WC_SUCCESS;
  bool is_rd_atomic = false;
  // A READ's or atomic's SGE failed its local key check: the request still
  // goes out, and the response that would be placed ends in LOC_PROT_ERR.
  bool local_key_bad = false;
  bool started = false;    // first_psn is valid: at least one packet went out
  // Device-internal work (device/tm_rendezvous.cc): no user WQE behind it and
  // no completion on the user's send CQ.
  InternalWork internal = InternalWork::kNone;
  uint32_t tm_handle = 0;  // kRndvRead: the tagged buffer's handle in its TM-SRQ
  bool is_local = false;   // BIND_MW, LOCAL_INV: done by the device, no packet (npsn 0)
  bool local_done = false; // executed: a go-back-N pass over it must not redo it
};

// Where a connected QP's frames go and the route that frames them, worked
// out from its address vector once (Device::resolve_path) rather than for
// every packet: kept while the device's GID table and port are as they were
// (Device::path_generation_) and the QP's address vector unchanged.
enum class PathKind : uint8_t { kNone, kLoopback, kWire, kMulticast };
struct PathCache {
  uint64_t generation = 0;  // the device's path generation it was worked out in; 0: never
  PathKind kind = PathKind::kNone;
  net::Route route;
  net::HeaderTemplate header;  // route's headers, copied into each frame
};

// The opcodes' transport of a QP type (IBA 9.2.1: XRC's halves share one).
constexpr net::Transport transport_for(ibv_qp_type type) {
  switch (type) {
    case IBV_QPT_UC: return net::Transport::kUc;
    case IBV_QPT_UD: return net::Transport::kUd;
    case IBV_QPT_XRC_SEND:
    case IBV_QPT_XRC_RECV: return net::Transport::kXrc;
    default: return net::Transport::kRc;
  }
}

// The Dynamically Connected transport (device/dc.cc): a DCI, a DCT, or one
// of a DCT's responder contexts (not in the QP table; its qpn the DCT's).
enum class DcRole : uint8_t { kNone, kInitiator, kTarget, kTargetContext };

// Which DCI a DCT's responder context serves: its source GID and QPN.
struct DcSource {
  std::array<uint8_t, 16> gid{};
  uint32_t dci = 0;
  bool operator==(const DcSource&) const = default;
};
struct DcSourceHash {
  size_t operator()(const DcSource& s) const noexcept {
    uint64_t h = 1469598103934665603ull;  // FNV-1a
    for (uint8_t b : s.gid) h = (h ^ b) * 1099511628211ull;
    return size_t((h ^ s.dci) * 1099511628211ull);
  }
};

struct AtomicReplay {
  uint32_t psn = 0;
  uint64_t orig = 0;
  bool valid = false;
};

// What a DCT keeps of a responder context it let go (DcTombstone): enough
// for the DCI's next request of that connection to find its place again
// (device/dc.cc restore_dc_context): a request below the expected PSN is a
// duplicate, answered without being executed twice, an atomic from the
// replay cache.
struct DcTombstone {
  uint32_t epoch = 0;
  uint8_t number = 0;
  uint32_t connect_psn = 0;
  uint32_t epsn = 0;
  uint32_t msn = 0;
  uint64_t stamp = 0;  // the DCT's clock when it was let go (the oldest goes first)
  std::array<AtomicReplay, kAtomicReplayDepth> atomic_replay{};
  uint32_t atomic_replay_next = 0;
};

// The receive WQE the responder is filling.
struct RecvInProgress {
  uint64_t wr_id = 0;
  uint32_t num_sge = 0;
  uint32_t cq = 0;             // where the completion goes
  bool from_srq = false;       // the slot was freed when taken
  bool discard = false;        // its SRQ was destroyed mid-message: place nothing
  uint32_t srq = 0;            // SRQ handle it came from, 0: the QP's RQ
  const Owner* owner = nullptr;  // whose memory the SGEs address
  // An SGE that runs past the end of its MR is cut there and ends the list
  // (mr_limited); declared_len is what the WQE asked for, so a message that
  // fits it but not the cut list is a protection error, not a length error.
  bool mr_limited = false;
  uint64_t declared_len = 0;
  std::array<abi::Sge, kMaxSge> sge{};
  // A message to a TM-SRQ (device/tag_matching.h): the completion's opcode
  // (0: not tag matching, IBV_WC_RECV), flags, and for a matched tagged
  // buffer its handle and the TMH bytes not placed.
  uint32_t tm_opcode = 0;
  uint32_t tm_flags = 0;
  uint32_t tm_status = 0;  // IBV_WC_SUCCESS or IBV_WC_TM_RNDV_INCOMPLETE
  bool tm_matched = false;
  uint32_t tm_handle = 0;
  uint32_t tm_skip = 0;
  uint64_t tm_tag = 0;
  uint32_t tm_priv = 0;
  // A matched rendezvous request the device pulls itself: the message places
  // nothing; at its end the RDMA READ of the RVH goes on the QP's send queue.
  bool tm_rndv = false;
  uint64_t rndv_va = 0;
  uint32_t rndv_rkey = 0, rndv_len = 0;
};

struct Qp {
  Owner* owner = nullptr;
  uint32_t qpn = 0;
  uint64_t cookie = 0;
  ibv_qp_type type = IBV_QPT_RC;
  uint32_t pd = 0, send_cq = 0, recv_cq = 0, srq = 0;
  bool sq_sig_all = false;
  DcRole dc = DcRole::kNone;
  net::Transport transport = net::Transport::kRc;  // of `type` (transport_for), DC's for a DCI
  abi::QpCaps caps{};
  uint32_t xrcd = 0, xrcd_handle = 0;  // XRC_RECV: its domain
  // XRC_RECV QPs opened by other processes (ibv_open_qp): their owners get
  // the QP's events; the QP lives until its last handle is destroyed.
  struct OpenedHandle {
    uint32_t id = 0;  // the high half of the handle ibv_open_qp got
    Owner* owner = nullptr;
    uint64_t cookie = 0;
    uint32_t xrcd_handle = 0;  // its domain handle: busy while this lives
  };
  std::vector<OpenedHandle> opened_by;
  uint32_t next_open_id = 1;
  uint32_t owner_open_id = 0;  // the owner's handle id when it was an heir (0: creator)

  // Attributes (ibv_modify_qp).
  ibv_qp_state state = IBV_QPS_RESET;
  ibv_mtu path_mtu = IBV_MTU_1024;
  uint32_t qkey = 0, dest_qpn = 0, access = 0;
  uint16_t pkey_index = 0;
  uint8_t port = 1, timeout = 0, retry_cnt = 0, rnr_retry = 0, min_rnr_timer = 0;
  uint8_t max_rd_atomic = 0, max_dest_rd_atomic = 0;
  bool en_sqd_async_notify = false;
  abi::AddressVector av{};
  PathCache path;                // av worked out (Device::send_packet), while current
  uint32_t mtu_bytes() const { return 128u << path_mtu; }

  // Shared memory: SQ then RQ in one region.
  QueueMemory mem;
  RingView sq, rq;
  // The engine's send sequence: the user's WQEs copied out of the SQ ring
  // (untrusted input copied out), with device-internal work interleaved on a
  // QP of a TM-SRQ. Its slots (sq_mask + 1 of them, each sq.stride bytes) are
  // the user ring's plus kTmRndvPerQp when the QP can have internal work.
  std::vector<uint8_t> sq_copy;
  std::vector<SendWqeState> sq_state;
  uint32_t sq_mask = 0;

  // Requester (free-running indices into the engine's send sequence).
  uint32_t sq_head = 0;     // oldest WQE not yet completed
  uint32_t sq_next = 0;     // WQE being sent
  uint32_t sq_fetched = 0;  // end of the sequence: WQEs taken so far
  // The user's ring: its consumer index (published) and the next slot to copy.
  uint32_t sq_user_head = 0;
  uint32_t sq_user_fetched = 0;
  uint32_t sq_internal = 0;  // internal WQEs in [sq_head, sq_fetched)
  uint32_t sq_internal_reads = 0;  // of them, rendezvous READs (kTmRndvPerQp)
  uint32_t req_psn = 0;     // next PSN to send
  uint32_t req_max_psn = 0; // one past the highest PSN ever sent (responses beyond it are stale)
  uint64_t req_offset = 0;  // bytes of sq_next already sent
  uint32_t rd_atomic_inflight = 0;
  uint32_t locals_unretired = 0;  // BIND_MW/LOCAL_INV done, not yet completed (hint: may be stale high)
  uint32_t retry_left = 0, rnr_retry_left = 0;
  uint64_t rnr_wait_until_ns = 0;  // requester paused by an RNR NAK
  uint32_t rnr_nak_psn = 0;        // the PSN the last RNR NAK named ...
  bool rnr_nak_valid = false;      // ... until an acknowledgement passes it
  uint64_t retrans_deadline_ns = 0;
  // First contact (kFirstContactGraceNs): whether a response came since the
  // send PSN was set, and when the first request after it left.
  bool peer_heard = false;
  uint64_t first_tx_ns = 0;
  uint32_t packets_since_ack_req = 0;
  // Raw packet QPs: packet pacing (IBV_QP_RATE_LIMIT). The next frame may
  // leave at pace_next_ns.
  uint32_t rate_limit_kbps = 0;
  uint64_t pace_next_ns = 0;

  // Completer.
  uint32_t comp_psn = 0;  // oldest PSN not yet acknowledged
  uint32_t acked_psn = 0; // highest PSN a plain ACK covered (READs excepted)
  bool acked_valid = false;
  bool comp_rewound = false;  // already went back for the gap at comp_psn: later
                              // NAKs and gaps at the same PSN wait for that retry

  // Responder.
  uint32_t resp_epsn = 0;
  uint32_t resp_msn = 0;
  bool resp_nak_sent = false;    // one PSN sequence error NAK per gap (C9-112)
  bool resp_in_msg = false;      // between FIRST and LAST of a multi-packet message
  bool resp_recv_valid = false;
  bool resp_msg_dropped = false; // UC: discard the rest of a broken message
  bool resp_fatal_pending = false; // a fatal NAK is queued: accept nothing more
  bool rq_mlx5 = false;          // receives come from mlx5->rq_wqes (device/mlx5_rq.h)
  uint32_t resp_last_opcode = 0;
  RecvInProgress resp_recv;
  uint64_t resp_offset = 0;      // bytes placed so far in this message
  uint64_t resp_write_va = 0;    // WRITE: next address in the owner's space
  uint32_t resp_write_key = 0;
  uint64_t resp_write_left = 0;
  uint32_t rq_head = 0;          // RQ consumer (engine)
  ResponseQueue responses;        // answers not yet sent, in PSN order
  std::array<AtomicReplay, kAtomicReplayDepth> atomic_replay{};
  uint32_t atomic_replay_next = 0;
  uint32_t resp_ack_pending_psn = 0;
  bool resp_ack_pending = false;

  uint32_t bound_windows = 0;  // type 2 MWs bound to it (destroy unbinds them)
  bool last_wqe_reached_sent = false;
  bool sqd_notify_pending = false;  // SQ_DRAINED owed once the SQ is quiet
  uint64_t tx_packets = 0, rx_packets = 0, retransmits = 0, rnr_naks = 0;
  // An RSS QP (device/rss.cc): no queues, no state machine; what its flows
  // take goes to the WQs of its indirection table.
  std::unique_ptr<RssHash> rss;
  // A raw packet QP's receive flags (IBV_QP_CREATE_SCATTER_FCS, ...), as
  // enum ibv_wq_flags bits.
  uint32_t raw_rx_flags = 0;

  // mlx5 mode (here at the end: the fields the datapath reads on every
  // packet keep their places).
  uint16_t udp_sport = 0;  // mlx5dv_modify_qp_udp_sport's source port; 0: the QPN's hash
  // After mlx5dv_init_obj (Device::qp_to_mlx5, device/mlx5_sq.cc): the
  // queues the program writes mlx5 WQEs into, as on a ConnectX
  // (abi::kMlx5Qp*Offset). sq_user_fetched then counts the send queue's
  // 64-byte basic blocks (16 bits, as the doorbell record's producer index);
  // a QP without an SRQ takes its receives from rq_wqes (device/mlx5_rq.cc),
  // rq_head counting them.
  struct Mlx5Queues {
    QueueMemory mem;
    const uint8_t* bbs = nullptr;
    uint32_t wqe_cnt = 0;                      // basic blocks, a power of two
    std::atomic<uint32_t>* dbrec = nullptr;    // [0] receives, [1] sends: producer indices, big-endian
    const uint8_t* rq_wqes = nullptr;          // null: receives come from an SRQ
    uint32_t rq_cnt = 0;                       // receive WQEs, a power of two
    uint32_t rq_stride = 0;                    // bytes per receive WQE
  };
  std::unique_ptr<Mlx5Queues> mlx5;

  // DC (device/dc.cc). DCI: its current target (av, dest_qpn, dc_key),
  // that connection's number and first PSN (connected once comp_psn has
  // passed it). DCT: its key and its responder contexts. Context: which
  // connection of which DCI it serves.
  bool dc_has_target = false;
  uint8_t dc_number = 0;       // DCI: its connections since RESET; context: its connection's
  uint32_t dc_epoch = 0;       // DCI: its incarnation (net::DcEth); context: its DCI's
  uint32_t dc_connect_psn = 0;
  uint64_t dc_key = 0;
  uint64_t dc_clock = 0;     // DCT: stamps contexts as they are used
  uint64_t dc_last_used = 0; // context: its last stamp (least recently used goes first)
  // A DCI made with streams (abi::Mlx5QpDcRequest): 2^dci_log_streams of
  // them, which of them failed (a bit each), and how many failed since
  // RESET or their reset (the DCI fails at 2^dci_log_errored).
  bool dci_streams = false;
  uint8_t dci_log_streams = 0;
  uint8_t dci_log_errored = 0;
  uint8_t dci_failed_count = 0;
  uint32_t dci_failed_streams = 0;
  std::unordered_map<DcSource, std::unique_ptr<Qp>, DcSourceHash> dc_contexts;  // DCT
  std::unordered_map<DcSource, DcTombstone, DcSourceHash> dc_tombstones;        // DCT: contexts let go
};

}  // namespace uroce::device
