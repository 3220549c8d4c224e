// The provider/engine ABI: the control messages (uroce/abi_base.h explains the parts).
#pragma once

#include "uroce/abi_rings.h"

namespace uroce::abi {

// ---------------------------------------------------------------------------
// Control messages (SOCK_SEQPACKET; one request, one reply, fds attached)
// ---------------------------------------------------------------------------

enum class CtlOp : uint32_t {
  kHello = 1,
  kQueryPort,
  kAllocPd,
  kDeallocPd,
  kRegMr,
  kReregMr,
  kDeregMr,
  kCreateCompChannel,
  kDestroyCompChannel,
  kCreateCq,
  kResizeCq,
  kDestroyCq,
  kCreateQp,
  kModifyQp,
  kQueryQp,
  kDestroyQp,
  kStatus,  // text reply: devices, clients, objects
  kStats,   // text reply: counters
  kQueryDevice,  // reply: DeviceInfo; no session state (device discovery)
  kSetPortState, // administrative link up/down (uroce port): raises port events
  kCreateSrq,
  kModifySrq,
  kQuerySrq,
  kDestroySrq,
  kOpenXrcd,
  kCloseXrcd,
  kOpenQp,
  kSetFault,  // fault injection on a port (uroce fault)
  kCapture,   // pcap capture of a port's frames (uroce capture)
  kCreateAh,
  kDestroyAh,
  kReport,  // ReportRequest: the engine's state and counters as JSON, in pieces
  kUnusedPostSrqOps,  // versions 4-7 only: TM list ops now go through TmOpsHeader's ring
  kAllocMw,     // AllocMwRequest: a memory window (bound later by a WQE)
  kDeallocMw,   // HandleRequest
  kCreateFlow,   // CreateFlowRequest: a steering rule on a raw packet QP
  kDestroyFlow,  // HandleRequest
  // The connection manager (librdmacm's rdma_* calls; cm/cm_agent.h).
  kCmCreateChannel,  // fds: [event pipe write end]; reply CmHandleReply
  kCmDestroyChannel, // CmHandleRequest
  kCmCreateId,       // CmCreateIdRequest; reply CmHandleReply
  kCmDestroyId,      // CmHandleRequest
  kCmBind,           // CmBindRequest; reply CmBindReply
  kCmResolveAddr,    // CmResolveAddrRequest; reply CmBindReply; then ADDR_RESOLVED/ADDR_ERROR
  kCmResolveRoute,   // CmHandleRequest; then ROUTE_RESOLVED
  kCmListen,         // CmListenRequest
  kCmConnect,        // CmConnectRequest (REQ, or SIDR REQ for RDMA_PS_UDP)
  kCmAccept,         // CmConnectRequest (REP, or SIDR REP)
  kCmReject,         // CmRejectRequest (REJ)
  kCmEstablish,      // CmHandleRequest (RTU)
  kCmDisconnect,     // CmHandleRequest (DREQ)
  kCmMigrate,        // CmMigrateRequest: the id's events go to another channel
  // Device memory (device/device_memory.cc).
  kAllocDm,   // AllocDmRequest; reply AllocDmReply, fds: [the memory's memfd]
  kFreeDm,    // HandleRequest
  kRegDmMr,   // RegDmMrRequest; reply RegMrReply
  // UD multicast groups (device/multicast.cc).
  kAttachMcast,      // McastRequest: a UD QP joins a multicast group (ibv_attach_mcast)
  kDetachMcast,      // McastRequest
  // Receive work queues and RSS (device/work_queue.h).
  kCreateWq,           // CreateWqRequest; reply CreateWqReply, fds: [ring memfd]
  kModifyWq,           // ModifyWqRequest
  kDestroyWq,          // HandleRequest
  kCreateRwqIndTable,  // CreateRwqIndTableRequest; reply CreateRwqIndTableReply
  kDestroyRwqIndTable, // HandleRequest
  kCreateRssQp,        // CreateRssQpRequest; reply CreateRssQpReply (destroyed by kDestroyQp)
  // Objects of the session named again by an imported context (ibv_import_*).
  kImportPd,  // HandleRequest
  kImportMr,  // HandleRequest; reply ImportMrReply
  kImportDm,  // HandleRequest; reply ImportDmReply, fds: [the memory's memfd]
  // mlx5 mode (uroced --mlx5).
  kSetQpUdpSport,  // QpUdpSportRequest (mlx5dv_modify_qp_udp_sport)
  kMlx5CqFormat,   // Mlx5CqFormatRequest; reply Mlx5CqFormatReply, fds: [the new ring's memfd]
  kMlx5QpFormat,   // HandleRequest; reply Mlx5QpFormatReply, fds: [the queues' memfd]
  kMlx5SrqFormat,  // HandleRequest; reply Mlx5SrqFormatReply, fds: [the SRQ's memfd]
  kMlx5QpDc,       // Mlx5QpDcRequest (mlx5dv_create_qp with MLX5DV_QP_INIT_ATTR_MASK_DC)
  kCreateMkey,     // CreateMkeyRequest; reply CreateMkeyReply (mlx5dv_create_mkey)
  kDestroyMkey,    // HandleRequest
  kDciStreamReset, // DciStreamResetRequest (mlx5dv_dci_stream_id_reset)
  kMlx5WqFormat,   // HandleRequest; reply Mlx5WqFormatReply, fds: [the WQ's memfd]
  kCount,
};

struct CtlRequestHeader {
  uint32_t op;   // CtlOp
  uint32_t len;  // bytes of body after this header
};

struct CtlReplyHeader {
  int32_t status;  // 0 or a positive errno
  uint32_t len;    // bytes of body after this header
};

struct PortInfo {
  uint32_t state;       // enum ibv_port_state
  uint32_t max_mtu;     // enum ibv_mtu
  uint32_t active_mtu;  // enum ibv_mtu
  uint32_t gid_tbl_len;
  uint32_t port_cap_flags;
  uint32_t max_msg_sz;
  uint8_t active_width;
  uint8_t active_speed;
  uint8_t phys_state;
  uint8_t reserved[5];
};

// DeviceInfo::vendor_id and vendor_part_id of an engine in mlx5 mode (uroced
// --mlx5): a ConnectX-5 (IEEE OUI 0x02c9; PCI device 0x1017 = 4119, rdma-core
// providers/mlx5/mlx5.c hca_table). The provider and the drop-in libmlx5 tell
// mlx5 mode by them.
constexpr uint32_t kMlx5VendorId = 0x02c9;
constexpr uint32_t kMlx5VendorPartId = 0x1017;

struct DeviceInfo {
  char name[kMaxDeviceName];
  uint64_t node_guid;  // network order
  uint64_t sys_image_guid;
  char fw_ver[64];
  uint32_t vendor_id;
  uint32_t vendor_part_id;
  uint32_t hw_ver;
  uint32_t engine_pid;
  uint64_t max_mr_size;
  uint64_t page_size_cap;
  uint32_t max_qp;
  uint32_t max_qp_wr;
  uint32_t device_cap_flags;
  uint32_t max_sge;
  uint32_t max_cq;
  uint32_t max_cqe;
  uint32_t max_mr;
  uint32_t max_pd;
  uint32_t max_qp_rd_atom;
  uint32_t max_qp_init_rd_atom;
  uint32_t max_res_rd_atom;
  uint32_t max_srq;
  uint32_t max_srq_wr;
  uint32_t max_srq_sge;
  uint32_t max_ah;
  uint32_t max_inline_data;
  uint32_t atomic_cap;  // enum ibv_atomic_cap
  uint32_t num_ports;
  uint8_t mac[6];
  uint8_t reserved[2];
  PortInfo port;
  GidEntry gids[kMaxGids];
  // Hardware tag matching (struct ibv_tm_caps); all 0 when the device has none.
  struct TmCaps {
    uint32_t max_rndv_hdr_size;
    uint32_t max_num_tags;
    uint32_t flags;  // enum ibv_tm_cap_flags
    uint32_t max_ops;
    uint32_t max_sge;
    uint32_t reserved;
  } tm;
  // Memory windows (type 1, 2A and 2B: IBV_DEVICE_MEM_WINDOW* in device_cap_flags).
  uint32_t max_mw;
  uint32_t reserved_mw;
  // Raw packet QPs and flow steering (ibv_device_attr_ex); all 0: none.
  struct RawCaps {
    uint32_t max_raw_ethy_qp;
    uint32_t raw_packet_caps;        // enum ibv_raw_packet_caps
    uint64_t device_cap_flags_ex;    // bits above the 32 of device_cap_flags;
                                     // kDeviceAtomicWrite: IBV_WR_ATOMIC_WRITE
    // Packet pacing (struct ibv_packet_pacing_caps): rate limits in kbps.
    uint32_t qp_rate_limit_min;
    uint32_t qp_rate_limit_max;
    uint32_t pacing_qpts;            // 1 << IBV_QPT_RAW_PACKET
    uint32_t reserved;
  } raw;
  // Device memory (ibv_alloc_dm): bytes all clients may hold at once; 0: none.
  uint64_t max_dm_size;
  // Receive WQs and RSS (struct ibv_rss_caps, max_wq_type_rq); all 0: none.
  struct RssCaps {
    uint32_t supported_qpts;  // 1 << IBV_QPT_RAW_PACKET
    uint32_t max_rwq_indirection_tables;
    uint32_t max_rwq_indirection_table_size;
    uint32_t max_wq_type_rq;
    uint64_t rx_hash_fields_mask;  // enum ibv_rx_hash_fields
    uint8_t rx_hash_function;      // enum ibv_rx_hash_function_flags
    uint8_t reserved[7];
  } rss;
};
static_assert(sizeof(DeviceInfo::RssCaps) == 32);
static_assert(offsetof(DeviceInfo, max_dm_size) % 8 == 0 &&
              sizeof(DeviceInfo) == offsetof(DeviceInfo, rss) + sizeof(DeviceInfo::RssCaps));

// kHello. Request fds: [async event pipe write end].
// Reply fds: [EngineShared memfd (read-only), doorbell eventfd].
struct HelloRequest {
  uint32_t magic;
  uint32_t version;
};
struct HelloReply {
  DeviceInfo device;
};

// Handles name objects of the calling connection only: the engine gives each
// object a handle of its session when it is created (the `handle` field of
// the ibv_* object, as the kernel's uobject handles), separate from QPNs, SRQ
// numbers and keys. Another connection's handle or a stale one is ENOENT
// (EINVAL for the operations whose kernel command says so: see
// emulator/methods.cc).
struct HandleRequest {  // kDeallocPd, kDeregMr, kDestroy*, kQueryQp
  uint64_t handle;
};

struct AllocPdReply {
  uint64_t handle;
};

// Registered memory on shared pages: the provider may move the whole pages of
// an MR onto a memfd (verbs_provider/shared_pages.cc). Then the request
// carries that memfd as its one fd, sealed against shrinking, whose bytes
// [0, length) are the client's pages [start, start + length); the engine maps
// it and moves data with plain loads and stores. Bytes of the MR outside it
// (partial pages at either end, or every byte when length is 0) go through
// process_vm_readv/writev.
struct SharedRange {
  uint64_t start;   // page-aligned client address
  uint64_t length;  // page multiple; 0: no fd, nothing shared
};
static_assert(sizeof(SharedRange) == 16);

// kRegMr. Request fds: [memfd] when shared.length != 0.
struct RegMrRequest {
  uint64_t pd;
  uint64_t addr;
  uint64_t length;
  uint64_t iova;
  uint32_t access;  // enum ibv_access_flags
  uint32_t reserved;
  SharedRange shared;
};
static_assert(sizeof(RegMrRequest) == 56);
struct RegMrReply {
  uint64_t handle;
  uint32_t lkey;
  uint32_t rkey;
};

// kReregMr. Request fds: [memfd] when IBV_REREG_MR_CHANGE_TRANSLATION and
// shared.length != 0 (as kRegMr).
struct ReregMrRequest {
  uint64_t handle;
  uint32_t flags;  // enum ibv_rereg_mr_flags
  uint32_t access;
  uint64_t pd;
  uint64_t addr;
  uint64_t length;
  SharedRange shared;
};
static_assert(sizeof(ReregMrRequest) == 56);

// kAllocMw: a window of the PD, unbound (type 1) or free (type 2); its
// R_Key's index names it in bind WQEs, the handle in kDeallocMw.
struct AllocMwRequest {
  uint64_t pd;
  uint32_t type;  // enum ibv_mw_type
  uint32_t reserved;
};
struct AllocMwReply {
  uint64_t handle;
  uint32_t rkey;
  uint32_t reserved;
};

// kAllocDm: device memory (ibv_alloc_dm) on a memfd of the engine, sealed
// against resizing, which the client maps read-write: ibv_memcpy_to_dm and
// ibv_memcpy_from_dm are the client's loads and stores, as mlx5's on its
// MEMIC BAR. `map_length` is the memfd's size (whole pages).
struct AllocDmRequest {
  uint64_t length;
  uint32_t log_align_req;
  uint32_t reserved;
};
static_assert(sizeof(AllocDmRequest) == 16);
struct AllocDmReply {
  uint64_t handle;
  uint64_t map_length;
};
static_assert(sizeof(AllocDmReply) == 16);

// kImportMr: what ibv_import_mr fills in (the kernel's UVERBS_METHOD_QUERY_MR).
struct ImportMrReply {
  uint64_t iova;
  uint64_t length;
  uint32_t lkey;
  uint32_t rkey;
  uint32_t access;  // enum ibv_access_flags
  uint32_t reserved;
};
static_assert(sizeof(ImportMrReply) == 32);
// kImportDm: the memory's memfd again, to map it once more.
struct ImportDmReply {
  uint64_t length;      // what ibv_alloc_dm asked for
  uint64_t map_length;  // the memfd's size
};
static_assert(sizeof(ImportDmReply) == 16);

// kRegDmMr: a zero-based MR over [offset, offset + length) of a device
// memory; `client_addr` is where the client mapped it (the MR's addr).
struct RegDmMrRequest {
  uint64_t pd;
  uint64_t dm;
  uint64_t offset;
  uint64_t length;
  uint64_t client_addr;
  uint32_t access;  // enum ibv_access_flags
  uint32_t reserved;
};
static_assert(sizeof(RegDmMrRequest) == 48);

// kCreateCompChannel. Request fds: [pipe write end].
struct CreateCompChannelReply {
  uint64_t handle;
};

enum CreateCqFlags : uint32_t {
  // Write Cqe::timestamp_ns and wallclock_ns (IBV_WC_EX_WITH_COMPLETION_TIMESTAMP*).
  // Other CQs pay no clock read per completion.
  kCqTimestamps = 1,
  // IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN: a completion that finds the CQ full
  // is dropped (counted) and the CQ never errs for it.
  kCqIgnoreOverrun = 2,
};

struct CreateCqRequest {
  uint32_t cqe;
  uint32_t flags;  // CreateCqFlags (was reserved, 0)
  uint64_t channel;  // 0: none
  uint64_t cookie;
};
// Reply fds: [queue memfd].
struct CreateCqReply {
  uint64_t handle;
  uint32_t cqe;  // usable entries
  uint32_t log2_entries;
  uint64_t shm_size;
};

struct ResizeCqRequest {
  uint64_t handle;
  uint32_t cqe;
  uint32_t reserved;
};
using ResizeCqReply = CreateCqReply;  // fds: [new queue memfd]

struct QpCaps {
  uint32_t max_send_wr;
  uint32_t max_recv_wr;
  uint32_t max_send_sge;
  uint32_t max_recv_sge;
  uint32_t max_inline_data;
  uint32_t reserved;
};

struct CreateQpRequest {
  uint64_t pd;
  uint64_t send_cq;
  uint64_t recv_cq;
  uint64_t srq;  // 0: none
  uint64_t cookie;
  uint32_t qp_type;  // enum ibv_qp_type
  uint32_t sq_sig_all;
  QpCaps caps;
  uint64_t xrcd;  // IBV_QPT_XRC_RECV: the domain handle
  uint32_t create_flags;  // enum ibv_qp_create_flags (IBV_QPT_RAW_PACKET only)
  uint32_t reserved;
};
static_assert(sizeof(CreateQpRequest) == 88);
// Reply fds: [queue memfd holding the SQ then the RQ].
struct CreateQpReply {
  uint64_t handle;
  uint32_t qpn;
  uint32_t reserved;
  QpCaps caps;
  uint32_t sq_log2;
  uint32_t sq_stride;
  uint32_t rq_log2;
  uint32_t rq_stride;
  uint64_t sq_offset;
  uint64_t rq_offset;
  uint64_t shm_size;
};

// Fixed-layout copy of struct ibv_qp_attr (the fields the device uses).
struct QpAttr {
  uint32_t qp_state;
  uint32_t cur_qp_state;
  uint32_t path_mtu;
  uint32_t qkey;
  uint32_t rq_psn;
  uint32_t sq_psn;
  uint32_t dest_qp_num;
  uint32_t qp_access_flags;
  uint16_t pkey_index;
  uint8_t en_sqd_async_notify;
  uint8_t sq_draining;
  uint8_t max_rd_atomic;
  uint8_t max_dest_rd_atomic;
  uint8_t min_rnr_timer;
  uint8_t port_num;
  uint8_t timeout;
  uint8_t retry_cnt;
  uint8_t rnr_retry;
  uint8_t sq_sig_all;
  AddressVector ah;
  QpCaps caps;
  uint32_t rate_limit;  // kbps, 0: none (IBV_QP_RATE_LIMIT, raw packet QPs' packet pacing)
};
static_assert(sizeof(QpAttr) % 8 == 0);  // no uninitialised padding crosses the socket

struct ModifyQpRequest {
  uint64_t handle;
  uint32_t attr_mask;  // enum ibv_qp_attr_mask
  uint32_t reserved;
  QpAttr attr;
};

// kSetQpUdpSport: the UDP source port of an RC/UC QP in RTS, in place of
// the hash of its QPN, until the next modify that sets its address vector
// (mlx5's RTS2RTS with the udp_sport optional parameter).
struct QpUdpSportRequest {
  uint64_t handle;
  uint32_t udp_sport;  // 16 bits
  uint32_t reserved;
};

// kMlx5QpDc: an RC QP just created, still in RESET, becomes a DC initiator
// (DCI: its send queue's work requests each name their target, SendWqe::av,
// remote_qpn and dc_key) or a DC target (DCT: it takes requests from any
// DCI that presents access_key, into its SRQ, which it must have). The
// Dynamically Connected transport of uroce: docs/mlx5-dc.md.
// A DCI made with streams (MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS) has
// 2^log_streams of them, named by SendWqe::dci_stream modulo their number: a
// work request that fails before it leaves (a local error) fails its stream,
// not the DCI, whose later work requests on that stream complete flushed
// until kDciStreamReset; the DCI fails when 2^log_errored streams have.
constexpr uint32_t kDcInitiator = 1, kDcTarget = 2;
// dci_streams_caps (mlx5dv_query_device): the most a DCI may ask for.
constexpr uint8_t kDciMaxLogStreams = 4, kDciMaxLogErrored = 3;
struct Mlx5QpDcRequest {
  uint64_t handle;
  uint32_t dc_type;  // kDcInitiator or kDcTarget
  uint8_t dci_streams;  // DCI: 1 when made with streams, then:
  uint8_t log_streams;  // at most kDciMaxLogStreams
  uint8_t log_errored;  // at most kDciMaxLogErrored
  uint8_t reserved;
  uint64_t access_key;  // DCT: the key a DCI must present
};
static_assert(sizeof(Mlx5QpDcRequest) == 24);

// kDciStreamReset: a failed stream of a DCI made with streams works again;
// EINVAL when the stream has not failed or the QP is no such DCI.
struct DciStreamResetRequest {
  uint64_t handle;
  uint16_t stream;
  uint8_t reserved[6];
};
static_assert(sizeof(DciStreamResetRequest) == 16);

// kCreateMkey: an indirect memory key of the PD (mlx5dv_create_mkey with
// MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT), free until a memory-registration
// WQE (kWrUmr) gives it a layout; its lkey and rkey are one key. num_desc:
// the entries it may hold, max_entries rounded up to 4 as mlx5's.
constexpr uint32_t kMkeyRemoteInvalidate = 1;  // MLX5DV_MKEY_INIT_ATTR_FLAGS_REMOTE_INVALIDATE
struct CreateMkeyRequest {
  uint64_t pd;
  uint32_t flags;  // kMkeyRemoteInvalidate
  uint32_t max_entries;
};
struct CreateMkeyReply {
  uint64_t handle;
  uint32_t key;
  uint32_t num_desc;
};

// kMlx5CqFormat: the CQ's ring in mlx5's format from now on (mlx5dv_init_obj
// on an mlx5-mode device): a new memfd laid out as abi_rings.h's
// kMlx5Cq*Offset say. EBUSY while completions wait in the old ring.
struct Mlx5CqFormatRequest {
  uint64_t handle;
  uint32_t cqe_size;  // 64 or 128
  uint32_t reserved;
};
struct Mlx5CqFormatReply {
  uint64_t shm_size;
  uint32_t cqe_cnt;  // a power of two
  uint32_t cqn;
};

// kMlx5QpFormat: the QP's send queue, and its receive queue unless it takes
// receives from an SRQ, in mlx5's formats from now on (mlx5dv_init_obj on an
// mlx5-mode device): a new memfd laid out as abi_rings.h's kMlx5Qp*Offset
// say. An RC, UC or UD QP with nothing posted to either queue yet (EBUSY
// otherwise); other types EOPNOTSUPP.
struct Mlx5QpFormatReply {
  uint64_t shm_size;
  uint32_t sq_wqe_cnt;  // 64-byte basic blocks, a power of two
  uint32_t rq_wqe_cnt;  // a power of two; 0: receives come from an SRQ
  uint32_t rq_stride;   // bytes per receive WQE: 16 per SGE, a power of two
  uint32_t reserved;
  uint64_t rq_offset;   // where the receive WQEs start in the memfd
};

// kMlx5SrqFormat: a basic SRQ's WQEs in mlx5's format from now on (the
// linked list of mlx5_wqe_srq_next_seg + data segments, as abi_rings.h's
// kMlx5Srq*Offset say), while nothing was posted to it (EBUSY otherwise);
// XRC and TM SRQs EOPNOTSUPP.
struct Mlx5SrqFormatReply {
  uint64_t shm_size;
  uint32_t wqe_cnt;  // a power of two; tail = wqe_cnt - 1
  uint32_t stride;   // 16 + 16 * max_sge, a power of two
};

// kMlx5WqFormat: a receive WQ's WQEs in mlx5's format from now on
// (mlx5dv_init_obj with MLX5DV_OBJ_RWQ), laid out as abi_rings.h's
// kMlx5Wq*Offset say, while nothing was posted to it (EBUSY otherwise).
struct Mlx5WqFormatReply {
  uint64_t shm_size;
  uint32_t wqe_cnt;  // a power of two
  uint32_t stride;   // 16 per SGE, a power of two
};

struct QueryQpReply {
  QpAttr attr;
};

// kQueryPort: reply.
struct QueryPortReply {
  PortInfo port;
};

struct SetPortStateRequest {
  uint32_t state;  // IBV_PORT_ACTIVE or IBV_PORT_DOWN
  uint32_t reserved;
};

// Shared receive queues. The ring holds RecvWqe entries like a QP's RQ.
struct CreateSrqRequest {
  uint64_t pd;
  uint64_t xrcd;  // IBV_SRQT_XRC
  uint64_t cq;    // IBV_SRQT_XRC: completions go here
  uint64_t cookie;
  uint32_t srq_type;  // enum ibv_srq_type
  uint32_t max_wr;
  uint32_t max_sge;
  uint32_t srq_limit;
  uint32_t max_num_tags;  // IBV_SRQT_TM: tm_cap (cq: the SRQ's completions)
  uint32_t max_ops;
};

// ibv_post_srq_ops on a TM-SRQ: the ops go through a ring in a second
// shared region of the SRQ (no control message), read by the engine's poll
// loop as the SQs are. As mlx5_post_srq_ops (rdma-core providers/mlx5/qp.c)
// the provider allocates the tag handles and refuses a full list or
// max_ops outstanding ops itself; the engine gives handles back through the
// `freed` ring (DEL done, or the consuming message's last completion out)
// and reports ops retired (mlx5's command-QP tail: a signaled op retires,
// with the unsignaled ones before it, once its completion is polled).
struct SrqOp {
  uint64_t wr_id;
  uint32_t opcode;          // enum ibv_ops_wr_opcode
  uint32_t flags;           // enum ibv_ops_flags
  uint32_t unexpected_cnt;  // with IBV_OPS_TM_SYNC
  uint32_t handle;          // TAG_DEL; TAG_ADD: the provider's choice, free in the engine
  uint64_t recv_wr_id;      // TAG_ADD from here on
  uint64_t tag;
  uint64_t mask;
  uint32_t num_sge;
  uint32_t reserved;
  Sge sge;
};
static_assert(sizeof(SrqOp) == 72);
// At offset 0 of the TM region; then 2^log2_ops SrqOp, then 2^log2_freed
// uint32_t handles (kTmOpsOffset, tm_freed_offset()).
struct TmOpsHeader {
  // Written by the client: ops published (release), and a request counter
  // it bumps when it needs the engine's up-to-date retired/freed (a full
  // list or max_ops reached): the engine answers by storing it in `answered`.
  alignas(kCacheLine) std::atomic<uint32_t> producer;
  std::atomic<uint32_t> request;
  // Written by the engine.
  alignas(kCacheLine) std::atomic<uint32_t> consumer;  // ops taken
  std::atomic<uint32_t> retired;                       // ops retired, ever
  std::atomic<uint32_t> freed;                         // handles pushed into the freed ring, ever
  std::atomic<uint32_t> answered;                      // last request served (stored last)
  // Written once by the engine at creation; the engine keeps its own copy.
  alignas(kCacheLine) uint32_t log2_ops;
  uint32_t log2_freed;
  uint32_t reserved[14];
};
static_assert(sizeof(TmOpsHeader) == 3 * kCacheLine);
static_assert(offsetof(TmOpsHeader, consumer) == kCacheLine);
static_assert(offsetof(TmOpsHeader, log2_ops) == 2 * kCacheLine);
static_assert(std::is_standard_layout_v<TmOpsHeader>);
constexpr size_t kTmOpsOffset = sizeof(TmOpsHeader);
constexpr size_t tm_freed_offset(uint32_t log2_ops) {
  return kTmOpsOffset + (size_t(1) << log2_ops) * sizeof(SrqOp);
}
constexpr size_t tm_region_size(uint32_t log2_ops, uint32_t log2_freed) {
  return tm_freed_offset(log2_ops) + (size_t(1) << log2_freed) * sizeof(uint32_t);
}
static_assert(kTmOpsOffset % alignof(SrqOp) == 0 && tm_freed_offset(0) % alignof(uint32_t) == 0);
// Reply fds: [queue memfd], then for IBV_SRQT_TM at creation [TM region memfd]
// (tm_shm_size bytes; tm_max_num_tags, tm_max_ops as the engine took them).
struct CreateSrqReply {
  uint64_t handle;
  uint32_t srqn;
  uint32_t max_wr;   // usable depth (ring slots - 1)
  uint32_t max_sge;
  uint32_t log2;
  uint32_t stride;
  uint32_t reserved;
  uint64_t shm_size;
  uint64_t tm_shm_size;  // IBV_SRQT_TM, at creation: 0 otherwise
  uint32_t tm_max_num_tags;
  uint32_t tm_max_ops;
};

struct ModifySrqRequest {
  uint64_t handle;
  uint32_t attr_mask;  // IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT
  uint32_t max_wr;
  uint32_t srq_limit;
  uint32_t reserved;
};
// Reply: CreateSrqReply; with IBV_SRQ_MAX_WR, fds: [the new queue memfd].
using ModifySrqReply = CreateSrqReply;

struct QuerySrqReply {
  uint32_t max_wr;
  uint32_t max_sge;
  uint32_t srq_limit;
  uint32_t reserved;
};

// kOpenXrcd. Request fds: [the file] unless has_fd is 0 (a private domain).
struct OpenXrcdRequest {
  uint32_t has_fd;
  uint32_t oflags;  // O_CREAT, O_EXCL
};
struct OpenXrcdReply {
  uint64_t handle;
};

struct OpenQpRequest {
  uint64_t xrcd;
  uint64_t cookie;
  uint32_t qpn;
  uint32_t qp_type;
};
struct OpenQpReply {
  uint64_t handle;
};

enum FaultPort : uint32_t { kFaultPortDefault = 0, kFaultPortLoopback = 1, kFaultPortWire = 2 };

struct SetFaultRequest {
  uint32_t port;  // FaultPort; default: the wire port if any, else the loopback
  uint32_t reserved;
  double drop, duplicate, reorder, corrupt;  // probabilities 0..1
  uint64_t delay_us;
  uint64_t seed;  // 0: from the clock
};

enum CaptureAction : uint32_t { kCaptureStart = 1, kCaptureStop = 2, kCaptureStatus = 3 };
constexpr size_t kMaxCapturePath = 256;
struct CaptureRequest {
  uint32_t action;  // CaptureAction
  uint32_t reserved;
  uint64_t max_frames;  // 0: until stopped
  char path[kMaxCapturePath];  // NUL-terminated, absolute (the engine opens it)
};
struct CaptureReply {
  uint64_t frames;
  uint32_t active;
  uint32_t reserved;
};

// kCreateAh: the address vector stays in the client (it travels in each UD
// work request); the engine counts AHs against max_ah and holds their PD.
struct CreateAhRequest {
  uint64_t pd;
};
struct CreateAhReply {
  uint64_t handle;
};

// kReport: the engine's state and counters as one JSON document (uroce
// status/stats --json, --watch), read in pieces that fit a control message:
// offset 0 takes a new snapshot for the connection, later offsets read the
// same snapshot. Reply: ReportReply, then up to the rest of the message of
// the document from `offset`.
struct ReportRequest {
  uint64_t offset;
};
struct ReportReply {
  uint64_t total;  // bytes of the whole document
};

// kCreateFlow: ibv_create_flow. The provider turns the application's specs
// (struct ibv_flow_spec_*, libibverbs' layout) into one FlowKey of values
// and one of masks over the fields a rule may match, plus the protocols the
// specs name (an IPv4 spec matches IPv4 frames only, whatever its masks: mlx5
// sets the ethertype / IP protocol implicitly). All multi-byte fields are in
// network order, as in the specs and in the frame.
struct FlowKey {
  uint8_t dst_mac[6];
  uint8_t src_mac[6];
  uint16_t ether_type;  // the EtherType after the last VLAN tag
  uint16_t vlan_tag;    // the (outer) 802.1Q TCI
  uint8_t src_ip[16];   // IPv4: the first 4 bytes, the rest 0
  uint8_t dst_ip[16];
  uint32_t flow_label;  // IPv6, low 20 bits
  uint8_t ip_proto;     // IPv4 protocol / IPv6 next header
  uint8_t tos;          // IPv4 TOS / IPv6 traffic class
  uint8_t ttl;          // IPv4 TTL / IPv6 hop limit
  uint8_t ip_flags;     // IPv4 flags (3 bits)
  uint16_t src_port;    // TCP/UDP
  uint16_t dst_port;
  uint32_t reserved;
};
static_assert(sizeof(FlowKey) == 64);
static_assert(offsetof(FlowKey, src_ip) == 16 && offsetof(FlowKey, flow_label) == 48);

enum FlowProto : uint32_t {  // FlowRule::protocols
  kFlowEth = 1,
  kFlowVlan = 2,  // an ETH spec with a vlan_tag mask: tagged frames only (mlx5 cvlan_tag)
  kFlowIpv4 = 4,
  kFlowIpv6 = 8,
  kFlowTcp = 16,
  kFlowUdp = 32,
};
enum FlowAction : uint32_t {  // FlowRule::actions
  kFlowActionTag = 1,   // IBV_FLOW_SPEC_ACTION_TAG
  kFlowActionDrop = 2,  // IBV_FLOW_SPEC_ACTION_DROP
};

struct CreateFlowRequest {
  uint64_t qp;          // handle
  uint32_t type;        // enum ibv_flow_attr_type
  uint32_t flags;       // enum ibv_flow_flags
  uint32_t priority;
  uint32_t port;
  uint32_t protocols;   // FlowProto bits
  uint32_t actions;     // FlowAction bits
  uint32_t tag;         // kFlowActionTag
  uint32_t num_specs;   // as the application gave them (SNIFFER/defaults: 0)
  FlowKey value;        // already masked
  FlowKey mask;
};
static_assert(sizeof(CreateFlowRequest) == 40 + 2 * sizeof(FlowKey));
struct CreateFlowReply {
  uint64_t handle;
};

// kAttachMcast / kDetachMcast. The group limits are rxe's
// (RXE_MAX_MCAST_GRP, RXE_MAX_MCAST_QP_ATTACH, RXE_MAX_TOT_MCAST_QP_ATTACH).
constexpr uint32_t kMaxMcastGroups = 8192;
constexpr uint32_t kMaxMcastQpAttach = 56;
constexpr uint32_t kMaxTotalMcastQpAttach = kMaxMcastGroups * kMaxMcastQpAttach;
struct McastRequest {
  uint64_t qp;      // the QP's handle
  uint8_t gid[16];  // the group's MGID
  uint16_t lid;     // MLID: unused on RoCE
  uint8_t reserved[6];
};
static_assert(sizeof(McastRequest) == 32);

// kStatus / kStats: reply body is UTF-8 text (not NUL terminated).

// Receive work queues (ibv_create_wq): a ring of RecvWqe like an SRQ's,
// posted to without a message; its receives complete on `cq` with qp_num =
// wqn, as in mlx5's CQE.
struct CreateWqRequest {
  uint64_t pd;
  uint64_t cq;
  uint64_t cookie;
  uint32_t wq_type;  // enum ibv_wq_type
  uint32_t max_wr;
  uint32_t max_sge;
  uint32_t flags;    // enum ibv_wq_flags (comp_mask IBV_WQ_INIT_ATTR_FLAGS), else 0
};
static_assert(sizeof(CreateWqRequest) == 40);
struct CreateWqReply {
  uint64_t handle;
  uint32_t wqn;
  uint32_t max_wr;   // as asked (mlx5 echoes the request)
  uint32_t max_sge;
  uint32_t log2;
  uint32_t stride;
  uint32_t reserved;
  uint64_t shm_size;
};
static_assert(sizeof(CreateWqReply) == 40);
struct ModifyWqRequest {
  uint64_t handle;
  uint32_t attr_mask;  // enum ibv_wq_attr_mask
  uint32_t wq_state;
  uint32_t curr_wq_state;
  uint32_t flags;
  uint32_t flags_mask;
  uint32_t reserved;
};
static_assert(sizeof(ModifyWqRequest) == 32);

// ibv_create_rwq_ind_table: 2^log_size WQ handles follow the header (the
// engine resolves each one itself: the method table's handles are fixed).
constexpr uint32_t kMaxLogIndTableSize = 8;
struct CreateRwqIndTableRequest {
  uint32_t log_size;
  uint32_t reserved;
  uint64_t wqs[1u << kMaxLogIndTableSize];
};
static_assert(sizeof(CreateRwqIndTableRequest) == 8 + 8 * 256);
struct CreateRwqIndTableReply {
  uint64_t handle;
  uint32_t ind_tbl_num;
  uint32_t reserved;
};

// ibv_create_qp_ex with IBV_QP_INIT_ATTR_IND_TABLE | RX_HASH: a receive-only
// raw packet QP that spreads what its flows take over the table's WQs.
constexpr uint32_t kRxHashKeyMax = 128;
struct CreateRssQpRequest {
  uint64_t pd;
  uint64_t ind_table;
  uint64_t cookie;
  uint64_t rx_hash_fields_mask;  // enum ibv_rx_hash_fields
  uint32_t rx_hash_function;     // enum ibv_rx_hash_function_flags
  uint32_t rx_hash_key_len;      // as the application gave it (the engine checks it)
  uint32_t create_flags;
  uint32_t send_side;            // the application asked for send WRs or a send CQ
  uint8_t rx_hash_key[kRxHashKeyMax];
};
static_assert(sizeof(CreateRssQpRequest) == 48 + kRxHashKeyMax);
struct CreateRssQpReply {
  uint64_t handle;
  uint32_t qpn;  // the engine's number; the application sees 0, as on mlx5
  uint32_t reserved;
};

}  // namespace uroce::abi
