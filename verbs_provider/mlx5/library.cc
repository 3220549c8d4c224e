// The drop-in libmlx5.so.1: mlx5 direct verbs on an mlx5-mode uroce device
// (uroced --mlx5, which answers as a ConnectX-5).
//
// This file holds the entry points that work on uroce's own objects: the
// device and port queries, the clock, and the mlx5dv_create_* verbs, which
// check their mlx5 attributes as rdma-core 44's providers/mlx5/verbs.c does
// and then create the object through the verbs; and the mlx5 send operation
// the device has, the DMA copy engine (mlx5dv_wr_memcpy). mlx5dv_init_obj
// hands out PDs, DMs, CQs (whose ring it puts in mlx5's format: cq.cc) and
// the send queues of RC and UC QPs and basic SRQs (init_qp, init_srq: in
// mlx5's formats too); a QP's own receive queue and WQs keep uroce's format
// and are refused (RWQ, AH) with EOPNOTSUPP. unsupported.cc holds
// every other entry point, refused as libmlx5 refuses it on a device
// without the feature. On any other device every entry point fails as
// rdma-core's does on a device that is not mlx5 (EOPNOTSUPP).
#include <infiniband/mlx5dv.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>

#include "uroce/cpu_placement.h"
#include "verbs_provider/mlx5/cq.h"
#include "verbs_provider/mlx5/dv_qp.h"
#include "verbs_provider/mlx5/export.h"
#include "uroce/abi_rings.h"
#include "uroce/mlx5_wqe.h"
#include "uroce/wr_opcodes.h"
#include "verbs_provider/provider.h"

namespace uroce::provider::mlx5 {
namespace {

// rdma-core providers/mlx5/mlx5.c is_mlx5_dev: a device this library drives.
bool is_mlx5_device(const ibv_device* d) {
  return is_uroce_device(d) && reinterpret_cast<const UDevice*>(d)->info.vendor_id == abi::kMlx5VendorId;
}


template <typename T>
T* fail(int err) {
  errno = err;
  return nullptr;
}

// The device's capabilities as mlx5dv_query_device reports them (mlx5.c
// _mlx5dv_query_device): CQE version 1 and 128-byte CQE padding, as a
// ConnectX-5; the real-time completion timestamp uroce's CQs give
// (IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK); the DMA copy engine
// (max_wr_memcpy_length). No CQE compression, multi-packet WQEs, striding
// RQ, tunnel offloads, DCI streams, signature or crypto: their caps stay zero.
constexpr uint64_t kContextFlags =
    MLX5DV_CONTEXT_FLAGS_CQE_V1 | MLX5DV_CONTEXT_FLAGS_CQE_128B_PAD | MLX5DV_CONTEXT_FLAGS_REAL_TIME_TS;

// How often a program must read the clock info again (mlx5's
// overflow_period): uroce's counter has 64 bits and never wraps, but the
// wall clock it maps to may be stepped (NTP, settimeofday).
constexpr uint64_t kClockInfoUpdateNs = 1'000'000'000;

constexpr uint64_t kCqAttrMask = MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE | MLX5DV_CQ_INIT_ATTR_MASK_FLAGS |
                                 MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE;
constexpr uint64_t kQpAttrMask = MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS | MLX5DV_QP_INIT_ATTR_MASK_DC |
                                 MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS |
                                 MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS;
constexpr uint32_t kQpCreateFlags =
    MLX5DV_QP_CREATE_TUNNEL_OFFLOADS | MLX5DV_QP_CREATE_TIR_ALLOW_SELF_LOOPBACK_UC |
    MLX5DV_QP_CREATE_TIR_ALLOW_SELF_LOOPBACK_MC | MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE |
    MLX5DV_QP_CREATE_ALLOW_SCATTER_TO_CQE | MLX5DV_QP_CREATE_PACKET_BASED_CREDIT_MODE |
    MLX5DV_QP_CREATE_SIG_PIPELINING;
// Scatter to CQE puts small receives into the CQE instead of the buffer: a
// placement choice invisible through the verbs, so either flag is taken.
constexpr uint32_t kQpCreateFlagsTaken =
    MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE | MLX5DV_QP_CREATE_ALLOW_SCATTER_TO_CQE;

uint64_t clock_ns(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000u + uint64_t(ts.tv_nsec);
}

int init_pd(const mlx5dv_obj* obj) {
  if (!obj->pd.in || !obj->pd.out || !is_mlx5_context(obj->pd.in->context)) return EOPNOTSUPP;
  obj->pd.out->pdn = obj->pd.in->handle;
  obj->pd.out->comp_mask = 0;
  return 0;
}

int init_dm(const mlx5dv_obj* obj) {
  if (!obj->dm.in || !obj->dm.out || !is_mlx5_context(obj->dm.in->context)) return EOPNOTSUPP;
  const UDm* dm = to_udm(obj->dm.in);
  // The engine's shared mapping of the device memory: stores into it are
  // what ibv_memcpy_to_dm does (mlx5.c mlx5dv_get_dm: buf, length).
  obj->dm.out->buf = dm->map;
  obj->dm.out->length = dm->length;
  obj->dm.out->comp_mask = 0;  // no MLX5DV_DM_MASK_REMOTE_VA (MEMIC's PCI address)
  return 0;
}

}  // namespace

bool is_mlx5_context(const ibv_context* c) { return c && is_mlx5_device(c->device); }

}  // namespace uroce::provider::mlx5

using namespace uroce::provider;
using namespace uroce::provider::mlx5;
namespace abi = uroce::abi;

UROCE_MLX5_EXPORT bool mlx5dv_is_supported(ibv_device* device) { return is_mlx5_device(device); }

UROCE_MLX5_EXPORT ibv_context* mlx5dv_open_device(ibv_device* device, mlx5dv_context_attr* attr) {
  if (!is_mlx5_device(device)) return fail<ibv_context>(EOPNOTSUPP);
  // DevX (raw PRM commands to the device) is what a kernel without it
  // refuses: EOPNOTSUPP, which UCX takes as "open without DevX".
  if (attr && (attr->flags & MLX5DV_CONTEXT_FLAGS_DEVX)) return fail<ibv_context>(EOPNOTSUPP);
  if (attr && (attr->flags || attr->comp_mask)) return fail<ibv_context>(EOPNOTSUPP);
  return ibv_open_device(device);
}

UROCE_MLX5_EXPORT int mlx5dv_query_device(ibv_context* ctx, mlx5dv_context* out) {
  if (!is_mlx5_context(ctx)) return EOPNOTSUPP;
  const uint64_t asked = out->comp_mask;
  uint64_t given = 0;
  out->version = 0;
  out->flags = kContextFlags;
  if (asked & MLX5DV_CONTEXT_MASK_CQE_COMPRESION) {
    out->cqe_comp_caps = {};
    given |= MLX5DV_CONTEXT_MASK_CQE_COMPRESION;
  }
  if (asked & MLX5DV_CONTEXT_MASK_SWP) {
    out->sw_parsing_caps = {};
    given |= MLX5DV_CONTEXT_MASK_SWP;
  }
  if (asked & MLX5DV_CONTEXT_MASK_STRIDING_RQ) {
    out->striding_rq_caps = {};
    given |= MLX5DV_CONTEXT_MASK_STRIDING_RQ;
  }
  if (asked & MLX5DV_CONTEXT_MASK_TUNNEL_OFFLOADS) {
    out->tunnel_offloads_caps = 0;
    given |= MLX5DV_CONTEXT_MASK_TUNNEL_OFFLOADS;
  }
  if (asked & MLX5DV_CONTEXT_MASK_DCI_STREAMS) {
    out->dci_streams_caps = {abi::kDciMaxLogStreams, abi::kDciMaxLogErrored};
    given |= MLX5DV_CONTEXT_MASK_DCI_STREAMS;
  }
  if (asked & MLX5DV_CONTEXT_MASK_DYN_BFREGS) {
    out->max_dynamic_bfregs = 0;
    given |= MLX5DV_CONTEXT_MASK_DYN_BFREGS;
  }
  if (asked & MLX5DV_CONTEXT_MASK_CLOCK_INFO_UPDATE) {
    out->max_clock_info_update_nsec = kClockInfoUpdateNs;
    given |= MLX5DV_CONTEXT_MASK_CLOCK_INFO_UPDATE;
  }
  if (asked & MLX5DV_CONTEXT_MASK_FLOW_ACTION_FLAGS) {
    out->flow_action_flags = 0;
    given |= MLX5DV_CONTEXT_MASK_FLOW_ACTION_FLAGS;
  }
  if (asked & MLX5DV_CONTEXT_MASK_DC_ODP_CAPS) {
    // A DCI is the RC requester and a DCT's contexts RC responders, whose
    // every access reaches an ODP MR as RC's do (verbs_provider/odp.cc);
    // a DCT receives through its SRQ only, as XRC (mlx5's dc_odp_caps).
    out->dc_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_SRQ_RECV | IBV_ODP_SUPPORT_WRITE |
                       IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC;
    given |= MLX5DV_CONTEXT_MASK_DC_ODP_CAPS;
  }
  // MLX5DV_CONTEXT_MASK_HCA_CORE_CLOCK: a mapping of the free-running
  // counter itself, which uroce has not (mlx5 leaves the bit clear without
  // one); mlx5dv_get_clock_info gives the conversion instead.
  // MLX5DV_CONTEXT_MASK_NUM_LAG_PORTS: one port, no LAG (bit clear, as mlx5).
  if (asked & MLX5DV_CONTEXT_MASK_SIGNATURE_OFFLOAD) {
    out->sig_caps = {};
    given |= MLX5DV_CONTEXT_MASK_SIGNATURE_OFFLOAD;
  }
  if (asked & MLX5DV_CONTEXT_MASK_WR_MEMCPY_LENGTH) {
    out->max_wr_memcpy_length = abi::kMaxMemcpyLength;  // the DMA copy engine (device/dma_copy.cc)
    given |= MLX5DV_CONTEXT_MASK_WR_MEMCPY_LENGTH;
  }
  if (asked & MLX5DV_CONTEXT_MASK_CRYPTO_OFFLOAD) {
    out->crypto_caps = {};
    given |= MLX5DV_CONTEXT_MASK_CRYPTO_OFFLOAD;
  }
  out->comp_mask = given;
  return 0;
}

// A port outside the device is EINVAL (the kernel's MLX5_IB_METHOD_QUERY_PORT,
// drivers/infiniband/hw/mlx5/std_types.c: rdma_is_port_valid). Without an
// e-switch in switchdev mode the kernel fills nothing: every field 0.
UROCE_MLX5_EXPORT int _mlx5dv_query_port(ibv_context* ctx, uint32_t port_num, mlx5dv_port* info,
                                         size_t info_len) {
  if (!is_mlx5_context(ctx)) return EOPNOTSUPP;
  if (port_num != 1) return EINVAL;
  std::memset(info, 0, info_len);
  return 0;
}

// The device clock (abi::kDeviceClock, CLOCK_MONOTONIC_RAW in
// abi::kHcaCoreClockKhz = 1 GHz ticks) as the wall clock: mlx5dv_ts_to_ns
// computes nsec + (ts - last_cycles) * mult >> shift, so a pair of readings
// of both clocks, mult 1 and shift 0 map a completion's timestamp to
// real-time nanoseconds, as mlx5's clock info page does.
static_assert(abi::kHcaCoreClockKhz == 1'000'000, "clock info below assumes 1 ns per tick");
UROCE_MLX5_EXPORT int mlx5dv_get_clock_info(ibv_context* ctx, mlx5dv_clock_info* info) {
  if (!is_mlx5_context(ctx)) return EOPNOTSUPP;
  const uint64_t before = clock_ns(abi::kDeviceClock);
  const uint64_t real = clock_ns(CLOCK_REALTIME);
  const uint64_t after = clock_ns(abi::kDeviceClock);
  info->nsec = real;
  info->last_cycles = before + (after - before) / 2;
  info->frac = 0;
  info->mult = 1;
  info->shift = 0;
  info->mask = ~uint64_t(0);
  return 0;
}

// mlx5dv_set_context_attr(MLX5DV_CTX_ATTR_BUF_ALLOCATORS): mlx5 allocates
// its queue buffers with these. uroce's queues are shared memory the engine
// makes, never the program's allocations, so the allocators are never
// called (as mlx5's for a queue it places in device memory).
UROCE_MLX5_EXPORT int mlx5dv_set_context_attr(ibv_context* ctx, mlx5dv_set_ctx_attr_type type, void* attr) {
  if (!is_mlx5_context(ctx)) return EOPNOTSUPP;
  if (type != MLX5DV_CTX_ATTR_BUF_ALLOCATORS) return ENOTSUP;
  if (!attr) return EINVAL;
  return 0;
}

int init_qp(ibv_qp* ibqp, mlx5dv_qp* out);  // below, with the QP's direct-verbs state

// The UDP source port an AH's datagrams take (verbs.c mlx5_ah_set_udp_sport):
// from the flow label if it has one, else any in RoCEv2's range.
uint16_t ah_udp_sport(uint32_t flow_label) {
  if (flow_label & 0xfffff) return ibv_flow_label_to_udp_sport(flow_label & 0xfffff);
  constexpr uint32_t kMin = 0xc000, kSpan = 0x10000 - kMin;  // IB_ROCE_UDP_ENCAP_VALID_PORT_MIN..MAX
  return uint16_t(kMin + uint32_t(random()) % kSpan);
}

// mlx5dv_init_obj's AH part (mlx5.c mlx5dv_get_av): the address as the
// mlx5_wqe_av libmlx5 keeps for it, which programs copy into their UD WQEs'
// datagram segments (UCX's ud_mlx5 and dc_mlx5), made once and kept in the
// AH. Its rmac stays zero: the engine finds the next hop itself (ARP or
// neighbour discovery on its port), as it does for every RoCE packet.
void init_ah(ibv_ah* ibah, mlx5dv_ah* out) {
  UAh* ah = reinterpret_cast<UAh*>(ibah);
  static_assert(sizeof(ah->vendor_av) == sizeof(mlx5_wqe_av) && sizeof(mlx5_wqe_av) == sizeof(uroce::mlx5::WqeAv));
  auto* av = reinterpret_cast<uroce::mlx5::WqeAv*>(ah->vendor_av);
  static std::mutex made_mu;  // two threads may ask for the same AH's at once
  std::lock_guard<std::mutex> lock(made_mu);
  if (!av->dqp_dct) {  // dqp_dct carries MLX5_EXTENDED_UD_AV in every made AV
    uroce::mlx5::Datagram d{};
    std::memcpy(d.dgid, ah->av.dgid, 16);
    d.flow_label = ah->av.flow_label;
    d.sgid_index = ah->av.sgid_index;
    d.hop_limit = ah->av.hop_limit;
    d.traffic_class = ah->av.traffic_class;
    d.sl = ah->av.sl;
    d.udp_sport = ah_udp_sport(ah->av.flow_label);
    uroce::mlx5::encode_av(d, av);
    av->qkey = 0;  // set per WQE (qp.c _set_datagram_seg)
    av->dqp_dct = htobe32(uroce::mlx5::kExtendedUdAv);
  }
  out->av = reinterpret_cast<mlx5_wqe_av*>(ah->vendor_av);
  out->comp_mask = 0;
}

// Asks the engine for an object's queue in mlx5's format (`op` with a
// HandleRequest; a reply with shm_size, wqe_cnt and stride, and the memfd)
// and maps it, once: kept in the object's vendor_* fields (USrq, UWq).
template <class Reply, class Object>
int map_mlx5_queue(Object* o, abi::CtlOp op, uint32_t handle) {
  if (o->vendor_map) return 0;
  abi::HandleRequest req{handle};
  Reply rep;
  int fd = -1;
  if (int err = o->ctx->conn.call(op, &req, sizeof(req), &rep, sizeof(rep), nullptr, 0, &fd, 1)) return err;
  void* map = map_queue(fd, rep.shm_size);
  close(fd);
  if (!map) return ENOMEM;  // the engine reads a queue no one can write: it receives nothing
  o->vendor_map_size = rep.shm_size;
  o->vendor_wqe_cnt = rep.wqe_cnt;
  o->vendor_stride = rep.stride;
  o->vendor_map = map;
  return 0;
}

// mlx5dv_init_obj's SRQ part (mlx5.c mlx5dv_get_srq): the engine puts a
// basic SRQ's WQEs in mlx5's linked list the first time (kMlx5SrqFormat,
// device/mlx5_srq.cc), each linked to the one after it as libmlx5 leaves
// them, head 0 and tail the last; the program fills and relinks them and
// posts by the count in the doorbell record, as UCX's rc_mlx5 does.
int init_srq(ibv_srq* ibsrq, mlx5dv_srq* out) {
  USrq* s = to_usrq(ibsrq);
  std::lock_guard<std::mutex> lock(s->mu);
  if (int err = map_mlx5_queue<abi::Mlx5SrqFormatReply>(s, abi::CtlOp::kMlx5SrqFormat, ibsrq->handle)) return err;
  auto* base = static_cast<uint8_t*>(s->vendor_map);
  out->buf = base + abi::kMlx5SrqWqesOffset;
  out->dbrec = reinterpret_cast<__be32*>(base + abi::kMlx5SrqDbrecOffset);
  out->stride = s->vendor_stride;
  out->head = 0;
  out->tail = s->vendor_wqe_cnt - 1;
  const uint64_t asked = out->comp_mask;
  out->comp_mask = 0;
  if (asked & MLX5DV_SRQ_MASK_SRQN) {
    out->srqn = s->srqn;
    out->comp_mask |= MLX5DV_SRQ_MASK_SRQN;
  }
  return 0;
}

// mlx5dv_init_obj's RWQ part (mlx5.c mlx5dv_get_rwq): the engine puts a
// receive WQ's WQEs in mlx5's format the first time (kMlx5WqFormat,
// device/work_queue.cc); the program writes data segments and counts its
// WQEs in the doorbell record's first word, as mlx5_post_wq_recv does.
int init_rwq(ibv_wq* ibwq, mlx5dv_rwq* out) {
  UWq* w = to_uwq(ibwq);
  std::lock_guard<std::mutex> lock(w->mu);
  if (int err = map_mlx5_queue<abi::Mlx5WqFormatReply>(w, abi::CtlOp::kMlx5WqFormat, ibwq->handle)) return err;
  auto* base = static_cast<uint8_t*>(w->vendor_map);
  out->buf = base + abi::kMlx5WqWqesOffset;
  out->dbrec = reinterpret_cast<__be32*>(base + abi::kMlx5WqDbrecOffset);
  out->wqe_cnt = w->vendor_wqe_cnt;
  out->stride = w->vendor_stride;
  out->comp_mask = 0;
  return 0;
}

namespace {

// A program that reads its CQ in mlx5's format spins on memory, outside the
// library, where ibv_poll_cq would yield the CPU when it finds nothing. The
// provider moved the thread off its engine's CPU (verbs_provider/
// placement.cc), and two such processes (UCX's ucx_perftest server and
// client) would share the one CPU left by scheduler time slices: 4 ms a
// ping-pong on two CPUs. Given back every CPU its `uroce run` command has
// (UROCE_RUN_CPUS), the scheduler spreads them: 0.6-1.1 ms (docs/
// PERFORMANCE.md, "UCX over mlx5 mode").
void unplace_memory_poller() {
  const char* placement = std::getenv("UROCE_POLL_PLACEMENT");
  const char* cpus = std::getenv("UROCE_RUN_CPUS");
  if (!placement || std::strcmp(placement, "1") != 0 || !cpus) return;
  uroce::pin_current_thread(uroce::parse_cpu_list(cpus));  // an empty or bad list changes nothing
}

int init_obj(mlx5dv_obj* obj, uint64_t type) {
  if (!obj) return EINVAL;
  if (type & ~uint64_t(MLX5DV_OBJ_PD | MLX5DV_OBJ_DM | MLX5DV_OBJ_CQ | MLX5DV_OBJ_QP | MLX5DV_OBJ_SRQ |
                       MLX5DV_OBJ_AH | MLX5DV_OBJ_RWQ))
    return EINVAL;
  if (type & MLX5DV_OBJ_RWQ) {
    if (!obj->rwq.in || !obj->rwq.out || !is_mlx5_context(obj->rwq.in->context)) return EINVAL;
    if (int e = init_rwq(obj->rwq.in, obj->rwq.out)) return e;
  }
  if (type & MLX5DV_OBJ_AH) {
    if (!obj->ah.in || !obj->ah.out || !is_mlx5_context(obj->ah.in->context)) return EINVAL;
    init_ah(obj->ah.in, obj->ah.out);
  }
  if (type & MLX5DV_OBJ_SRQ) {
    if (!obj->srq.in || !obj->srq.out || !is_mlx5_context(obj->srq.in->context)) return EINVAL;
    if (int e = init_srq(obj->srq.in, obj->srq.out)) return e;
  }
  if (type & MLX5DV_OBJ_QP) {
    if (!obj->qp.in || !obj->qp.out || !is_mlx5_context(obj->qp.in->context)) return EINVAL;
    if (int e = init_qp(obj->qp.in, obj->qp.out)) return e;
  }
  if (type & MLX5DV_OBJ_CQ) {
    if (!obj->cq.in || !obj->cq.out || !is_mlx5_context(obj->cq.in->context)) return EINVAL;
    if (int e = init_cq(obj->cq.in, obj->cq.out)) return e;
    unplace_memory_poller();
  }
  if (type & MLX5DV_OBJ_PD)
    if (int e = init_pd(obj)) return e;
  if (type & MLX5DV_OBJ_DM)
    if (int e = init_dm(obj)) return e;
  return 0;
}

}  // namespace

// mlx5dv_init_obj@@MLX5_1.2, and the MLX5_1.0 one programs built against
// rdma-core before 1.2 bind to (mlx5.c __mlx5dv_init_obj_1_0: the same, but
// a CQ's cq_uar is where the UAR's address is kept, not the address).
extern "C" __attribute__((visibility("default"), used, symver("mlx5dv_init_obj@@MLX5_1.2"))) int
uroce_mlx5dv_init_obj_1_2(mlx5dv_obj* obj, uint64_t type) {
  return init_obj(obj, type);
}
extern "C" __attribute__((visibility("default"), used, symver("mlx5dv_init_obj@MLX5_1.0"))) int
uroce_mlx5dv_init_obj_1_0(mlx5dv_obj* obj, uint64_t type) {
  const int ret = init_obj(obj, type);
  if (!ret && (type & MLX5DV_OBJ_CQ)) obj->cq.out->cq_uar = cq_uar_slot(obj->cq.in);
  return ret;
}

UROCE_MLX5_EXPORT ibv_cq_ex* mlx5dv_create_cq(ibv_context* ctx, ibv_cq_init_attr_ex* cq_attr,
                                              mlx5dv_cq_init_attr* mlx5_attr) {
  if (!is_mlx5_context(ctx)) return fail<ibv_cq_ex>(EOPNOTSUPP);
  // verbs.c create_cq: the checks and errnos, in its order. The CQE size
  // comes from the attributes, else from MLX5_CQE_SIZE (verbs.c
  // get_cqe_size; libmlx5 reads it for every CQ, this library for those
  // made here).
  uint32_t cqe_size = 64;
  if (mlx5_attr && (mlx5_attr->comp_mask & MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE))
    cqe_size = mlx5_attr->cqe_size;
  else if (const char* env = std::getenv("MLX5_CQE_SIZE"))
    cqe_size = uint32_t(std::atoi(env));
  if (mlx5_attr && (mlx5_attr->comp_mask & ~kCqAttrMask)) return fail<ibv_cq_ex>(EINVAL);
  if (cqe_size != 64 && cqe_size != 128) return fail<ibv_cq_ex>(EINVAL);
  if (mlx5_attr) {
    // No CQE compression on this device (cqe_comp_caps.max_num 0).
    if (mlx5_attr->comp_mask & MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE) return fail<ibv_cq_ex>(EINVAL);
    if (mlx5_attr->comp_mask & MLX5DV_CQ_INIT_ATTR_MASK_FLAGS) {
      if (mlx5_attr->flags & ~uint32_t(MLX5DV_CQ_INIT_ATTR_FLAGS_RESERVED - 1)) return fail<ibv_cq_ex>(EINVAL);
      if ((mlx5_attr->flags & MLX5DV_CQ_INIT_ATTR_FLAGS_CQE_PAD) && cqe_size != 128)
        return fail<ibv_cq_ex>(EINVAL);
    }
  }
  // The CQE size shapes the ring if mlx5dv_init_obj puts it in mlx5's
  // format; until then uroce's ring gives the same completions.
  ibv_cq_ex* cq = ibv_create_cq_ex(ctx, cq_attr);
  if (cq && !remember_cqe_size(cq, cqe_size)) {
    ibv_destroy_cq(ibv_cq_ex_to_cq(cq));
    return fail<ibv_cq_ex>(ENOMEM);
  }
  return cq;
}

namespace {

void free_dv_qp(void* p) {
  auto* d = static_cast<DvQp*>(p);
  if (d->sq_map) unmap_queue(d->sq_map, d->sq_map_size);
  delete d;
}

}  // namespace

DvQp* uroce::provider::mlx5::attach_dv_qp(ibv_qp_ex* qpx) {
  UQp* qp = to_uqp(qpx);
  if (void* v = qp->vendor.load(std::memory_order_acquire)) return static_cast<DvQp*>(v);
  auto* d = new (std::nothrow) DvQp;
  if (!d) return nullptr;
  d->qpx = qpx;
  qp->vendor_free = free_dv_qp;
  void* expected = nullptr;
  if (!qp->vendor.compare_exchange_strong(expected, d, std::memory_order_acq_rel)) {
    delete d;  // another thread attached one first
    return static_cast<DvQp*>(expected);
  }
  return d;
}

// mlx5dv_init_obj's QP part (mlx5.c mlx5dv_get_qp): the engine puts the QP's
// queues in mlx5's formats the first time (kMlx5QpFormat): the send queue's
// 64-byte basic blocks the engine reads at the doorbell record's producer
// index, as a ConnectX does (device/mlx5_sq.cc), and, unless the QP takes
// its receives from an SRQ, a receive queue of data segments counted in the
// doorbell record's first word (device/mlx5_rq.cc). The program writes its
// WQEs there itself, as UCX's rc_mlx5 and ud_mlx5 do. A 256-byte BlueFlame
// register with both halves writable (UCX flips between them), which the
// engine need not read: the WQE is in the queue before the doorbell record
// says so.
int init_qp(ibv_qp* ibqp, mlx5dv_qp* out) {
  UQp* qp = to_uqp(ibqp);
  if (qp->opened || qp->rss) return EOPNOTSUPP;
  DvQp* d = attach_dv_qp(&qp->qpx);
  if (!d) return ENOMEM;
  std::scoped_lock lock(qp->sq_mu, qp->rq_mu);  // nothing posted while the queues change format
  if (!d->sq_map) {
    abi::HandleRequest req{ibqp->handle};
    abi::Mlx5QpFormatReply rep;
    int fd = -1;
    if (int err = qp->ctx->conn.call(abi::CtlOp::kMlx5QpFormat, &req, sizeof(req), &rep, sizeof(rep), nullptr, 0,
                                     &fd, 1))
      return err;
    void* map = map_queue(fd, rep.shm_size);
    close(fd);
    if (!map) return ENOMEM;  // the engine reads a queue no one can write: the QP sends nothing
    d->sq_map = static_cast<uint8_t*>(map);
    d->sq_map_size = rep.shm_size;
    d->sq_wqe_cnt = rep.sq_wqe_cnt;
    d->rq_wqe_cnt = rep.rq_wqe_cnt;
    d->rq_stride = rep.rq_stride;
    d->rq_offset = rep.rq_offset;
    qp->sq_vendor_owned = true;
    qp->rq_vendor_owned = rep.rq_wqe_cnt != 0;
  }
  *out = mlx5dv_qp{};
  out->dbrec = reinterpret_cast<__be32*>(d->sq_map + abi::kMlx5QpDbrecOffset);
  out->sq.buf = d->sq_map + abi::kMlx5QpSqOffset;
  out->sq.wqe_cnt = d->sq_wqe_cnt;
  out->sq.stride = abi::kMlx5SendBasicBlock;
  if (d->rq_wqe_cnt) {
    out->rq.buf = d->sq_map + d->rq_offset;
    out->rq.wqe_cnt = d->rq_wqe_cnt;
    out->rq.stride = d->rq_stride;
  }
  out->bf.reg = d->sq_map + abi::kMlx5QpBfOffset;
  out->bf.size = abi::kMlx5QpBfSize;
  return 0;  // comp_mask 0: no UAR mmap offset, no raw QP handles (mlx5_get_qp clears what it does not fill)
}

namespace {

// mlx5dv_wr_memcpy (qp.c mlx5_wr_memcpy): one WQE of the batch, which the
// engine's DMA copy engine executes (device/dma_copy.cc). A length of 0 or
// over max_wr_memcpy_length fails the batch with EINVAL at wr_complete.
void wr_memcpy(mlx5dv_qp_ex* mqp, uint32_t dst_lkey, uint64_t dst_addr, uint32_t src_lkey, uint64_t src_addr,
               size_t length) {
  ibv_qp_ex* qpx = dv_of(mqp)->qpx;
  UQp* qp = to_uqp(qpx);
  if (length == 0 || length > abi::kMaxMemcpyLength) {
    if (!qp->batch_err) qp->batch_err = EINVAL;
    return;
  }
  qpx->wr_send(qpx);  // a slot of the batch, with wr_id and flags, as any WQE
  abi::SendWqe* w = qp->batch_cur;
  if (!w) return;  // the batch already failed (full queue, ...)
  w->opcode = uroce::kWrMemcpy;
  w->copy = {dst_addr, src_addr, dst_lkey, src_lkey, uint32_t(length), 0};
}

// mlx5dv_wr_raw_wqe (qp.c mlx5_wr_raw_wqe): an mlx5 send WQE the program
// built, read back into the work request it describes (uroce/mlx5_wqe.h)
// and posted as one; signalled by its own CQ_UPDATE bit, completed as
// MLX5DV_WC_RAW_WQE. What no work request can say (NOP, UMR, mixed inline
// and pointer data, more data segments than max_send_sge) fails the batch
// with EINVAL, since uroce's send queue is not in mlx5's format.
void wr_raw_wqe(mlx5dv_qp_ex* mqp, const void* wqe) {
  ibv_qp_ex* qpx = dv_of(mqp)->qpx;
  UQp* qp = to_uqp(qpx);
  if (qp->batch_err) return;
  uroce::mlx5::DecodedSend d;
  // A work request's data is inline or by pointer, not both.
  if (uroce::mlx5::decode_send_wqe(wqe, 63 * uroce::mlx5::kSegBytes, &d) != 0 || d.num_sge > qp->caps.max_send_sge ||
      (d.num_inline && d.num_sge)) {
    qp->batch_err = EINVAL;
    return;
  }
  const uint64_t wr_id = qpx->wr_id;
  const unsigned wr_flags = qpx->wr_flags;
  qpx->wr_flags = d.send_flags & ~unsigned(IBV_SEND_INLINE);
  switch (d.opcode) {
    case IBV_WR_SEND: ibv_wr_send(qpx); break;
    case IBV_WR_SEND_WITH_IMM: ibv_wr_send_imm(qpx, d.imm); break;
    case IBV_WR_SEND_WITH_INV: ibv_wr_send_inv(qpx, d.imm); break;
    case IBV_WR_RDMA_WRITE: ibv_wr_rdma_write(qpx, d.rkey, d.remote_addr); break;
    case IBV_WR_RDMA_WRITE_WITH_IMM: ibv_wr_rdma_write_imm(qpx, d.rkey, d.remote_addr, d.imm); break;
    case IBV_WR_RDMA_READ: ibv_wr_rdma_read(qpx, d.rkey, d.remote_addr); break;
    case IBV_WR_ATOMIC_CMP_AND_SWP:
      ibv_wr_atomic_cmp_swp(qpx, d.rkey, d.remote_addr, d.compare_add, d.swap);
      break;
    default: ibv_wr_atomic_fetch_add(qpx, d.rkey, d.remote_addr, d.compare_add); break;
  }
  qpx->wr_flags = wr_flags;
  qpx->wr_id = wr_id;
  if (!qp->batch_cur) return;  // the batch failed (a full queue, ...)
  qp->batch_cur->flags |= abi::kSendFlagMlx5RawWqe;
  if (d.num_inline) ibv_wr_set_inline_data_list(qpx, d.num_inline, d.inline_bufs);
  else ibv_wr_set_sge_list(qpx, d.num_sge, d.sge);
}

// mlx5dv_wr_set_dc_addr (qp.c mlx5_wr_set_dc_addr): the target of the
// batch's current WQE on a DCI: the DCT's number, its key and the address.
void wr_set_dc_addr(mlx5dv_qp_ex* mqp, ibv_ah* ah, uint32_t remote_dctn, uint64_t remote_dc_key) {
  ibv_qp_ex* qpx = dv_of(mqp)->qpx;
  qpx->wr_set_ud_addr(qpx, ah, remote_dctn, 0);  // the address and the DCT's number, as a UD WQE's
  UQp* qp = to_uqp(qpx);
  if (!qp->batch_err && qp->batch_cur) qp->batch_cur->dc_key = remote_dc_key;
}

// The same on one of a DCI's streams (qp.c mlx5_send_wr_set_dc_addr_stream:
// the control segment's dci_stream_channel_id).
void wr_set_dc_addr_stream(mlx5dv_qp_ex* mqp, ibv_ah* ah, uint32_t remote_dctn, uint64_t remote_dc_key,
                           uint16_t stream_id) {
  wr_set_dc_addr(mqp, ah, remote_dctn, remote_dc_key);
  UQp* qp = to_uqp(dv_of(mqp)->qpx);
  if (!qp->batch_err && qp->batch_cur) qp->batch_cur->dci_stream = stream_id;
}

// A DC QP (mlx5dv_create_qp with MLX5DV_QP_INIT_ATTR_MASK_DC on an
// IBV_QPT_DRIVER QP, verbs.c create_qp): the engine makes it from an RC QP
// in RESET (kMlx5QpDc). A DCT takes its receives from its SRQ into its
// receive CQ, both required as mlx5's kernel driver requires them
// (mlx5_ib_create_dct), and has no send queue; a DCI has no receive queue
// and names each work request's target with mlx5dv_wr_set_dc_addr.
ibv_qp* create_dc_qp(ibv_context* ctx, const ibv_qp_init_attr_ex* attr, const mlx5dv_qp_init_attr* dv,
                     uint64_t dv_ops) {
  ibv_qp_init_attr_ex rc = *attr;
  rc.qp_type = IBV_QPT_RC;
  const bool dct = dv->dc_init_attr.dc_type == MLX5DV_DCTYPE_DCT;
  // DCI streams (verbs.c create_qp): within dci_streams_caps, else EINVAL;
  // a DCT ignores them.
  const bool streams = !dct && (dv->comp_mask & MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS);
  if (streams && (dv->dc_init_attr.dci_streams.log_num_concurent > abi::kDciMaxLogStreams ||
                  dv->dc_init_attr.dci_streams.log_num_errored > abi::kDciMaxLogErrored))
    return fail<ibv_qp>(EINVAL);
  if (dct) {
    if (!attr->srq || !attr->recv_cq) return fail<ibv_qp>(EINVAL);
    if (!rc.send_cq) rc.send_cq = rc.recv_cq;
    rc.cap = {1, 0, 1, 0, 0};  // the engine's RC QP needs a send queue; a DCT posts nothing
    rc.comp_mask &= ~uint32_t(IBV_QP_INIT_ATTR_SEND_OPS_FLAGS);
  } else if (dv->dc_init_attr.dc_type == MLX5DV_DCTYPE_DCI) {
    rc.srq = nullptr;  // passed by UCX, unused by a DCI
    if (!rc.recv_cq) rc.recv_cq = rc.send_cq;
    rc.cap.max_recv_wr = rc.cap.max_recv_sge = 0;
  } else {
    return fail<ibv_qp>(EINVAL);
  }
  ibv_qp* qp = ibv_create_qp_ex(ctx, &rc);
  if (!qp) return nullptr;
  abi::Mlx5QpDcRequest req{};
  req.handle = qp->handle;
  req.dc_type = dct ? abi::kDcTarget : abi::kDcInitiator;
  req.access_key = dct ? dv->dc_init_attr.dct_access_key : 0;
  if (streams) {
    req.dci_streams = 1;
    req.log_streams = dv->dc_init_attr.dci_streams.log_num_concurent;
    req.log_errored = dv->dc_init_attr.dci_streams.log_num_errored;
  }
  if (int err = to_uctx(ctx)->conn.call(abi::CtlOp::kMlx5QpDc, &req, sizeof(req), nullptr, 0)) {
    ibv_destroy_qp(qp);
    return fail<ibv_qp>(err);
  }
  qp->qp_type = IBV_QPT_DRIVER;
  if (!dct) {
    DvQp* d = attach_dv_qp(ibv_qp_to_qp_ex(qp));
    if (!d) {
      ibv_destroy_qp(qp);
      return fail<ibv_qp>(ENOMEM);
    }
    d->dv.wr_set_dc_addr = wr_set_dc_addr;
    d->dv.wr_set_dc_addr_stream = wr_set_dc_addr_stream;
    if (dv_ops & MLX5DV_QP_EX_WITH_MEMCPY) d->dv.wr_memcpy = wr_memcpy;
  }
  return qp;
}

// The mlx5 send operations this device has: the DMA copy engine and memory
// registrations (indirect mkeys, mkey.cc) on RC, raw WQEs on RC and UC
// (whose WQEs carry no address segment).
constexpr uint64_t kDvMkeyOps =
    MLX5DV_QP_EX_WITH_MR_INTERLEAVED | MLX5DV_QP_EX_WITH_MR_LIST | MLX5DV_QP_EX_WITH_MKEY_CONFIGURE;
constexpr uint64_t kDvSendOps = MLX5DV_QP_EX_WITH_MEMCPY | MLX5DV_QP_EX_WITH_RAW_WQE | kDvMkeyOps;

}  // namespace

UROCE_MLX5_EXPORT ibv_qp* mlx5dv_create_qp(ibv_context* ctx, ibv_qp_init_attr_ex* qp_attr,
                                           mlx5dv_qp_init_attr* mlx5_attr) {
  if (!is_mlx5_context(ctx)) return fail<ibv_qp>(EOPNOTSUPP);
  if (mlx5_attr) {
    // verbs.c create_qp: the checks and errnos, in its order.
    if (mlx5_attr->comp_mask & ~kQpAttrMask) return fail<ibv_qp>(EINVAL);
    if ((mlx5_attr->comp_mask & MLX5DV_QP_INIT_ATTR_MASK_DC) && qp_attr->qp_type != IBV_QPT_DRIVER)
      return fail<ibv_qp>(EINVAL);
    if (mlx5_attr->comp_mask & MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS) {
      const uint32_t f = mlx5_attr->create_flags;
      if (f & ~kQpCreateFlags) return fail<ibv_qp>(EINVAL);
      if ((f & MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE) && (f & MLX5DV_QP_CREATE_ALLOW_SCATTER_TO_CQE))
        return fail<ibv_qp>(EINVAL);
      // Tunnel offloads and self-loopback (RSS TIRs), packet-based credits,
      // signature pipelining: features this device does not report.
      if (f & ~kQpCreateFlagsTaken) return fail<ibv_qp>(EOPNOTSUPP);
    }
  }
  // mlx5's own send operations (qp.c mlx5_qp_fill_wr_pfns, verbs.c
  // qp_init_wr_memcpy): the DMA copy engine on RC; UMR memory keys and raw
  // WQEs are not on this device.
  const uint64_t dv_ops = mlx5_attr && (mlx5_attr->comp_mask & MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS)
                              ? mlx5_attr->send_ops_flags
                              : 0;
  if (dv_ops & ~kDvSendOps) return fail<ibv_qp>(EOPNOTSUPP);
  if ((dv_ops & MLX5DV_QP_EX_WITH_MEMCPY) && qp_attr->qp_type != IBV_QPT_RC && qp_attr->qp_type != IBV_QPT_DRIVER)
    return fail<ibv_qp>(EOPNOTSUPP);
  if ((dv_ops & MLX5DV_QP_EX_WITH_RAW_WQE) && qp_attr->qp_type != IBV_QPT_RC && qp_attr->qp_type != IBV_QPT_UC)
    return fail<ibv_qp>(EOPNOTSUPP);
  if ((dv_ops & kDvMkeyOps) && qp_attr->qp_type != IBV_QPT_RC) return fail<ibv_qp>(EOPNOTSUPP);
  if (dv_ops && !(qp_attr->comp_mask & IBV_QP_INIT_ATTR_PD)) return fail<ibv_qp>(EINVAL);
  if (qp_attr->qp_type == IBV_QPT_DRIVER) {  // only DC is a driver QP
    if (!mlx5_attr || !(mlx5_attr->comp_mask & MLX5DV_QP_INIT_ATTR_MASK_DC)) return fail<ibv_qp>(EINVAL);
    return create_dc_qp(ctx, qp_attr, mlx5_attr, dv_ops);
  }
  ibv_qp* qp;
  if (dv_ops & kDvMkeyOps) {
    // WQEs with room for a registration's layout, as mlx5 sizes a UMR-capable
    // QP's (verbs.c _sq_overhead); the caps it got are the caller's.
    ibv_qp_init_attr_ex sized = *qp_attr;
    sized.cap.max_send_sge = std::max(sized.cap.max_send_sge, kUmrMinSendSge);
    qp = ibv_create_qp_ex(ctx, &sized);
    if (qp) qp_attr->cap = sized.cap;
  } else {
    qp = ibv_create_qp_ex(ctx, qp_attr);
  }
  if (!qp || !dv_ops) return qp;
  DvQp* d = attach_dv_qp(ibv_qp_to_qp_ex(qp));
  if (!d) {
    ibv_destroy_qp(qp);
    return fail<ibv_qp>(ENOMEM);
  }
  if (dv_ops & MLX5DV_QP_EX_WITH_MEMCPY) d->dv.wr_memcpy = wr_memcpy;
  if (dv_ops & MLX5DV_QP_EX_WITH_RAW_WQE) d->dv.wr_raw_wqe = wr_raw_wqe;
  set_mkey_ops(d, dv_ops);
  return qp;
}

// The mlx5dv_qp_ex of a QP (DvQp): null function pointers for the mlx5
// send operations it was not created with, as mlx5's.
UROCE_MLX5_EXPORT mlx5dv_qp_ex* mlx5dv_qp_ex_from_ibv_qp_ex(ibv_qp_ex* qp) {
  if (!qp || !is_mlx5_context(qp->qp_base.context)) return fail<mlx5dv_qp_ex>(EOPNOTSUPP);
  DvQp* d = attach_dv_qp(qp);
  return d ? &d->dv : fail<mlx5dv_qp_ex>(ENOMEM);
}

UROCE_MLX5_EXPORT ibv_wq* mlx5dv_create_wq(ibv_context* ctx, ibv_wq_init_attr* attr,
                                           mlx5dv_wq_init_attr* mlx5_attr) {
  if (!is_mlx5_context(ctx)) return fail<ibv_wq>(EOPNOTSUPP);
  if (mlx5_attr) {
    if (mlx5_attr->comp_mask & ~uint64_t(MLX5DV_WQ_INIT_ATTR_MASK_STRIDING_RQ)) return fail<ibv_wq>(EINVAL);
    // Striding RQ: striding_rq_caps are zero on this device.
    if (mlx5_attr->comp_mask & MLX5DV_WQ_INIT_ATTR_MASK_STRIDING_RQ) return fail<ibv_wq>(EOPNOTSUPP);
  }
  return ibv_create_wq(ctx, attr);
}

// The UDP source port of an RC or UC QP's frames (RoCEv2's entropy for
// ECMP), instead of the hash of its QPN, until a modify sets its address
// vector again. libmlx5 (mlx5.c _mlx5dv_modify_qp_udp_sport) refuses any
// other QP type or a QP not in RTS with EOPNOTSUPP, then sends RTS2RTS with
// the udp_sport optional parameter; uroce's engine takes it as kSetQpUdpSport.
UROCE_MLX5_EXPORT int mlx5dv_modify_qp_udp_sport(ibv_qp* qp, uint16_t udp_sport) {
  if (!qp || !is_mlx5_context(qp->context)) return EOPNOTSUPP;
  if (qp->qp_type != IBV_QPT_RC && qp->qp_type != IBV_QPT_UC) return EOPNOTSUPP;
  if (qp->state != IBV_QPS_RTS) return EOPNOTSUPP;
  abi::QpUdpSportRequest req{qp->handle, udp_sport, 0};
  return to_uctx(qp->context)->conn.call(abi::CtlOp::kSetQpUdpSport, &req, sizeof(req), nullptr, 0);
}

// A failed stream of a DCI made with streams works again. libmlx5
// (mlx5.c) checks the QP's state, then its type, then sends RTS2RTS with
// the stream through DevX, whose firmware refuses a stream that has not
// failed (EINVAL); uroce's engine takes it as kDciStreamReset.
UROCE_MLX5_EXPORT int mlx5dv_dci_stream_id_reset(ibv_qp* qp, uint16_t stream_id) {
  if (!qp || !is_mlx5_context(qp->context) || qp->state != IBV_QPS_RTS) return EOPNOTSUPP;
  if (qp->qp_type != IBV_QPT_DRIVER) return EINVAL;
  abi::DciStreamResetRequest req{};
  req.handle = qp->handle;
  req.stream = stream_id;
  return to_uctx(qp->context)->conn.call(abi::CtlOp::kDciStreamReset, &req, sizeof(req), nullptr, 0);
}

// MEMIC, the device memory ibv_alloc_dm gives; the steering and header
// modify ICM types belong to the steering engine this device has not.
UROCE_MLX5_EXPORT ibv_dm* mlx5dv_alloc_dm(ibv_context* ctx, ibv_alloc_dm_attr* dm_attr,
                                          mlx5dv_alloc_dm_attr* mlx5_attr) {
  if (!is_mlx5_context(ctx)) return fail<ibv_dm>(EOPNOTSUPP);
  if (mlx5_attr && mlx5_attr->comp_mask) return fail<ibv_dm>(EINVAL);
  if (mlx5_attr && mlx5_attr->type != MLX5DV_DM_TYPE_MEMIC) return fail<ibv_dm>(EOPNOTSUPP);
  return ibv_alloc_dm(ctx, dm_attr);
}
