// Public libibverbs helpers that do not depend on the device: enum names,
// rate conversions, kernel-struct marshalling, sysfs reads and fork
// handling (IBV_FORK_UNNEEDED); plus the verbs uroce does not support
// (import, ECE, dma-buf MRs), which fail the way rdma-core's dummy ops do.
//
// Semantics follow rdma-core 44 (libibverbs/enum_strs.c, verbs.c,
// marshall.c, sysfs.c, memory.c); the outputs of the pure functions were
// checked against Debian's libibverbs.so.1 for every enum value.

#include <fcntl.h>
#include <infiniband/sa.h>
#include <infiniband/verbs.h>
#include <rdma/ib_user_sa.h>
#include <rdma/ib_user_verbs.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <new>

#define UROCE_EXPORT extern "C" __attribute__((visibility("default")))

// Not declared in any installed header (rdma-core keeps them in driver.h and
// marshall.h), but exported and used by librdmacm.
UROCE_EXPORT const char* ibv_get_sysfs_path(void);
UROCE_EXPORT int ibv_read_sysfs_file(const char* dir, const char* file, char* buf, size_t size);
UROCE_EXPORT void ibv_copy_ah_attr_from_kern(ibv_ah_attr* dst, ib_uverbs_ah_attr* src);
UROCE_EXPORT void ibv_copy_qp_attr_from_kern(ibv_qp_attr* dst, ib_uverbs_qp_attr* src);
UROCE_EXPORT void ibv_copy_path_rec_from_kern(ibv_sa_path_rec* dst, ib_user_path_rec* src);
UROCE_EXPORT void ibv_copy_path_rec_to_kern(ib_user_path_rec* dst, ibv_sa_path_rec* src);

namespace {

template <size_t N>
const char* name_at(const char* const (&names)[N], long index) {
  if (index < 0 || static_cast<size_t>(index) >= N || !names[index]) return "unknown";
  return names[index];
}

}  // namespace

// ---------------------------------------------------------------------------
// Enum names
// ---------------------------------------------------------------------------

UROCE_EXPORT const char* ibv_node_type_str(ibv_node_type node_type) {
  static const char* const kNames[] = {
      nullptr,                       // 0 is not a node type
      "InfiniBand channel adapter",  // IBV_NODE_CA
      "InfiniBand switch",           // IBV_NODE_SWITCH
      "InfiniBand router",           // IBV_NODE_ROUTER
      "iWARP NIC",                   // IBV_NODE_RNIC
      "usNIC",                       // IBV_NODE_USNIC
      "usNIC UDP",                   // IBV_NODE_USNIC_UDP
      "unspecified",                 // IBV_NODE_UNSPECIFIED
  };
  static_assert(IBV_NODE_UNSPECIFIED == 7);
  return name_at(kNames, node_type);
}

UROCE_EXPORT const char* ibv_port_state_str(ibv_port_state port_state) {
  static const char* const kNames[] = {
      "no state change (NOP)",  // IBV_PORT_NOP
      "down",                   // IBV_PORT_DOWN
      "init",                   // IBV_PORT_INIT
      "armed",                  // IBV_PORT_ARMED
      "active",                 // IBV_PORT_ACTIVE
      "active defer",           // IBV_PORT_ACTIVE_DEFER
  };
  static_assert(IBV_PORT_ACTIVE_DEFER == 5);
  return name_at(kNames, port_state);
}

UROCE_EXPORT const char* ibv_event_type_str(ibv_event_type event) {
  static const char* const kNames[] = {
      "CQ error",                                 // IBV_EVENT_CQ_ERR
      "local work queue catastrophic error",      // IBV_EVENT_QP_FATAL
      "invalid request local work queue error",   // IBV_EVENT_QP_REQ_ERR
      "local access violation work queue error",  // IBV_EVENT_QP_ACCESS_ERR
      "communication established",                // IBV_EVENT_COMM_EST
      "send queue drained",                       // IBV_EVENT_SQ_DRAINED
      "path migrated",                            // IBV_EVENT_PATH_MIG
      "path migration request error",             // IBV_EVENT_PATH_MIG_ERR
      "local catastrophic error",                 // IBV_EVENT_DEVICE_FATAL
      "port active",                              // IBV_EVENT_PORT_ACTIVE
      "port error",                               // IBV_EVENT_PORT_ERR
      "LID change",                               // IBV_EVENT_LID_CHANGE
      "P_Key change",                             // IBV_EVENT_PKEY_CHANGE
      "SM change",                                // IBV_EVENT_SM_CHANGE
      "SRQ catastrophic error",                   // IBV_EVENT_SRQ_ERR
      "SRQ limit reached",                        // IBV_EVENT_SRQ_LIMIT_REACHED
      "last WQE reached",                         // IBV_EVENT_QP_LAST_WQE_REACHED
      "client reregistration",                    // IBV_EVENT_CLIENT_REREGISTER
      "GID table change",                         // IBV_EVENT_GID_CHANGE
      "WQ fatal",                                 // IBV_EVENT_WQ_FATAL
  };
  static_assert(std::size(kNames) == IBV_EVENT_WQ_FATAL + 1);
  return name_at(kNames, event);
}

UROCE_EXPORT const char* ibv_wc_status_str(ibv_wc_status status) {
  static const char* const kNames[] = {
      "success",                            // IBV_WC_SUCCESS
      "local length error",                 // IBV_WC_LOC_LEN_ERR
      "local QP operation error",           // IBV_WC_LOC_QP_OP_ERR
      "local EE context operation error",   // IBV_WC_LOC_EEC_OP_ERR
      "local protection error",             // IBV_WC_LOC_PROT_ERR
      "Work Request Flushed Error",         // IBV_WC_WR_FLUSH_ERR
      "memory management operation error",  // IBV_WC_MW_BIND_ERR
      "bad response error",                 // IBV_WC_BAD_RESP_ERR
      "local access error",                 // IBV_WC_LOC_ACCESS_ERR
      "remote invalid request error",       // IBV_WC_REM_INV_REQ_ERR
      "remote access error",                // IBV_WC_REM_ACCESS_ERR
      "remote operation error",             // IBV_WC_REM_OP_ERR
      "transport retry counter exceeded",   // IBV_WC_RETRY_EXC_ERR
      "RNR retry counter exceeded",         // IBV_WC_RNR_RETRY_EXC_ERR
      "local RDD violation error",          // IBV_WC_LOC_RDD_VIOL_ERR
      "remote invalid RD request",          // IBV_WC_REM_INV_RD_REQ_ERR
      "aborted error",                      // IBV_WC_REM_ABORT_ERR
      "invalid EE context number",          // IBV_WC_INV_EECN_ERR
      "invalid EE context state",           // IBV_WC_INV_EEC_STATE_ERR
      "fatal error",                        // IBV_WC_FATAL_ERR
      "response timeout error",             // IBV_WC_RESP_TIMEOUT_ERR
      "general error",                      // IBV_WC_GENERAL_ERR
      "TM error",                           // IBV_WC_TM_ERR
      "TM software rendezvous",             // IBV_WC_TM_RNDV_INCOMPLETE
  };
  static_assert(std::size(kNames) == IBV_WC_TM_RNDV_INCOMPLETE + 1);
  return name_at(kNames, status);
}

// ---------------------------------------------------------------------------
// Static rate conversions
// ---------------------------------------------------------------------------

namespace {

// One row per enum ibv_rate value (IBA 9.11.1 StaticRate encoding).
// mult is the rate in multiples of 2.5 Gb/s, or -1 where it is not a whole
// multiple (the FDR/EDR rates with 64b/66b encoding: rdma-core gives those
// no multiple, yet gives 28 Gb/s 11 and 50 Gb/s 20; we keep its table).
struct RateRow {
  ibv_rate rate;
  int mult;
  int mbps;
};

constexpr RateRow kRates[] = {
    {IBV_RATE_2_5_GBPS, 1, 2500},       {IBV_RATE_5_GBPS, 2, 5000},
    {IBV_RATE_10_GBPS, 4, 10000},       {IBV_RATE_20_GBPS, 8, 20000},
    {IBV_RATE_30_GBPS, 12, 30000},      {IBV_RATE_40_GBPS, 16, 40000},
    {IBV_RATE_60_GBPS, 24, 60000},      {IBV_RATE_80_GBPS, 32, 80000},
    {IBV_RATE_120_GBPS, 48, 120000},    {IBV_RATE_14_GBPS, -1, 14062},
    {IBV_RATE_56_GBPS, -1, 56250},      {IBV_RATE_112_GBPS, -1, 112500},
    {IBV_RATE_168_GBPS, -1, 168750},    {IBV_RATE_25_GBPS, -1, 25781},
    {IBV_RATE_100_GBPS, -1, 103125},    {IBV_RATE_200_GBPS, -1, 206250},
    {IBV_RATE_300_GBPS, -1, 309375},    {IBV_RATE_28_GBPS, 11, 28125},
    {IBV_RATE_50_GBPS, 20, 53125},      {IBV_RATE_400_GBPS, 160, 425000},
    {IBV_RATE_600_GBPS, 240, 637500},   {IBV_RATE_800_GBPS, 320, 850000},
    {IBV_RATE_1200_GBPS, 480, 1275000},
};

const RateRow* find_rate(int rate) {
  for (const auto& row : kRates)
    if (row.rate == rate) return &row;
  return nullptr;
}

}  // namespace

UROCE_EXPORT int ibv_rate_to_mult(ibv_rate rate) {
  const RateRow* row = find_rate(rate);
  return row ? row->mult : -1;
}

UROCE_EXPORT ibv_rate mult_to_ibv_rate(int mult) {
  for (const auto& row : kRates)
    if (row.mult > 0 && row.mult == mult) return row.rate;
  return IBV_RATE_MAX;
}

UROCE_EXPORT int ibv_rate_to_mbps(ibv_rate rate) {
  const RateRow* row = find_rate(rate);
  return row ? row->mbps : -1;
}

UROCE_EXPORT ibv_rate mbps_to_ibv_rate(int mbps) {
  for (const auto& row : kRates)
    if (row.mbps == mbps) return row.rate;
  return IBV_RATE_MAX;
}

// ---------------------------------------------------------------------------
// Kernel ABI marshalling (used by librdmacm)
// ---------------------------------------------------------------------------

UROCE_EXPORT void ibv_copy_ah_attr_from_kern(ibv_ah_attr* dst, ib_uverbs_ah_attr* src) {
  memcpy(dst->grh.dgid.raw, src->grh.dgid, sizeof(dst->grh.dgid));
  dst->grh.flow_label = src->grh.flow_label;
  dst->grh.sgid_index = src->grh.sgid_index;
  dst->grh.hop_limit = src->grh.hop_limit;
  dst->grh.traffic_class = src->grh.traffic_class;
  dst->dlid = src->dlid;
  dst->sl = src->sl;
  dst->src_path_bits = src->src_path_bits;
  dst->static_rate = src->static_rate;
  dst->is_global = src->is_global;
  dst->port_num = src->port_num;
}

// qp_state is not copied, as in rdma-core: callers take it from elsewhere.
UROCE_EXPORT void ibv_copy_qp_attr_from_kern(ibv_qp_attr* dst, ib_uverbs_qp_attr* src) {
  dst->cur_qp_state = static_cast<ibv_qp_state>(src->cur_qp_state);
  dst->path_mtu = static_cast<ibv_mtu>(src->path_mtu);
  dst->path_mig_state = static_cast<ibv_mig_state>(src->path_mig_state);
  dst->qkey = src->qkey;
  dst->rq_psn = src->rq_psn;
  dst->sq_psn = src->sq_psn;
  dst->dest_qp_num = src->dest_qp_num;
  dst->qp_access_flags = src->qp_access_flags;

  dst->cap.max_send_wr = src->max_send_wr;
  dst->cap.max_recv_wr = src->max_recv_wr;
  dst->cap.max_send_sge = src->max_send_sge;
  dst->cap.max_recv_sge = src->max_recv_sge;
  dst->cap.max_inline_data = src->max_inline_data;

  ibv_copy_ah_attr_from_kern(&dst->ah_attr, &src->ah_attr);
  ibv_copy_ah_attr_from_kern(&dst->alt_ah_attr, &src->alt_ah_attr);

  dst->pkey_index = src->pkey_index;
  dst->alt_pkey_index = src->alt_pkey_index;
  dst->en_sqd_async_notify = src->en_sqd_async_notify;
  dst->sq_draining = src->sq_draining;
  dst->max_rd_atomic = src->max_rd_atomic;
  dst->max_dest_rd_atomic = src->max_dest_rd_atomic;
  dst->min_rnr_timer = src->min_rnr_timer;
  dst->port_num = src->port_num;
  dst->timeout = src->timeout;
  dst->retry_cnt = src->retry_cnt;
  dst->rnr_retry = src->rnr_retry;
  dst->alt_port_num = src->alt_port_num;
  dst->alt_timeout = src->alt_timeout;
}

namespace {

// The two path record layouts share field names; only order and widths
// differ, so one template copies either way.
template <typename Dst, typename Src>
void copy_path_rec_fields(Dst* dst, const Src* src) {
  dst->dlid = src->dlid;
  dst->slid = src->slid;
  dst->raw_traffic = src->raw_traffic;
  dst->flow_label = src->flow_label;
  dst->hop_limit = src->hop_limit;
  dst->traffic_class = src->traffic_class;
  dst->reversible = src->reversible;
  dst->numb_path = src->numb_path;
  dst->pkey = src->pkey;
  dst->sl = src->sl;
  dst->mtu_selector = src->mtu_selector;
  dst->mtu = src->mtu;
  dst->rate_selector = src->rate_selector;
  dst->rate = src->rate;
  dst->packet_life_time = src->packet_life_time;
  dst->preference = src->preference;
  dst->packet_life_time_selector = src->packet_life_time_selector;
}

}  // namespace

UROCE_EXPORT void ibv_copy_path_rec_from_kern(ibv_sa_path_rec* dst, ib_user_path_rec* src) {
  memcpy(dst->dgid.raw, src->dgid, sizeof(dst->dgid));
  memcpy(dst->sgid.raw, src->sgid, sizeof(dst->sgid));
  copy_path_rec_fields(dst, src);
}

UROCE_EXPORT void ibv_copy_path_rec_to_kern(ib_user_path_rec* dst, ibv_sa_path_rec* src) {
  memcpy(dst->dgid, src->dgid.raw, sizeof(src->dgid));
  memcpy(dst->sgid, src->sgid.raw, sizeof(src->sgid));
  copy_path_rec_fields(dst, src);
}

// ---------------------------------------------------------------------------
// sysfs
// ---------------------------------------------------------------------------

namespace {

struct SysfsPath {
  char path[IBV_SYSFS_PATH_MAX + 1] = "/sys";

  SysfsPath() {
    // Honour SYSFS_PATH only when not running set-uid, like rdma-core.
    const char* env = getuid() == geteuid() ? getenv("SYSFS_PATH") : nullptr;
    if (!env) return;
    size_t len = strnlen(env, IBV_SYSFS_PATH_MAX);
    while (len > 0 && env[len - 1] == '/') --len;
    memcpy(path, env, len);
    path[len] = '\0';
  }
};

}  // namespace

UROCE_EXPORT const char* ibv_get_sysfs_path(void) {
  static const SysfsPath sysfs;  // computed once, on first use
  return sysfs.path;
}

// Reads <dir>/<file> into buf as a NUL-terminated string with one trailing
// newline removed. Returns the string length, or -1 with errno set (also
// when the contents do not fit in size - 1 bytes plus the terminator).
UROCE_EXPORT int ibv_read_sysfs_file(const char* dir, const char* file, char* buf, size_t size) {
  char* path = nullptr;
  if (asprintf(&path, "%s/%s", dir, file) < 0) return -1;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  int saved_errno = errno;
  free(path);
  if (fd < 0) {
    errno = saved_errno;
    return -1;
  }
  ssize_t len = read(fd, buf, size);
  saved_errno = errno;
  close(fd);
  errno = saved_errno;
  if (len <= 0) return static_cast<int>(len);

  if (buf[len - 1] == '\n') {
    buf[--len] = '\0';
  } else if (static_cast<size_t>(len) < size) {
    buf[len] = '\0';
  } else {
    errno = EOVERFLOW;  // no room for the terminator; rdma-core fails too
    return -1;
  }
  return static_cast<int>(len);
}

// ---------------------------------------------------------------------------
// fork()
// ---------------------------------------------------------------------------
//
// The engine reaches registered memory by process id with process_vm_readv /
// process_vm_writev, never through pinned pages: after fork() the kernel's
// copy-on-write gives the child its own copies and the engine keeps reaching
// the parent's. That is what rdma-core calls IBV_FORK_UNNEEDED (the kernel
// copy-on-fork case), and there rdma-core's ibv_fork_init() succeeds without
// tracking ranges and ibv_dontfork_range()/ibv_dofork_range() do nothing.
// RDMAV_FORK_SAFE / IBV_FORK_SAFE therefore need no handling either.

UROCE_EXPORT int ibv_fork_init(void) { return 0; }

UROCE_EXPORT ibv_fork_status ibv_is_fork_initialized(void) { return IBV_FORK_UNNEEDED; }

UROCE_EXPORT int ibv_dontfork_range(void*, size_t) { return 0; }

UROCE_EXPORT int ibv_dofork_range(void*, size_t) { return 0; }

// ---------------------------------------------------------------------------
// Verbs uroce does not support
// ---------------------------------------------------------------------------
//
// Same results as rdma-core's dummy ops for a provider without the feature.

namespace {

template <typename T>
T* null_not_supported() {
  errno = EOPNOTSUPP;
  return nullptr;
}

}  // namespace

// rdma-core returns a negative errno here (-EINVAL, -EHOSTUNREACH, ...).
UROCE_EXPORT int ibv_resolve_eth_l2_from_gid(ibv_context* context, ibv_ah_attr* attr,
                                             uint8_t eth_mac[ETHERNET_LL_SIZE], uint16_t* vid) {
  errno = EOPNOTSUPP;
  return -EOPNOTSUPP;
}

UROCE_EXPORT ibv_mr* ibv_reg_dmabuf_mr(ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova,
                                       int fd, int access) {
  return null_not_supported<ibv_mr>();
}

// Enhanced Connection Establishment. librdmacm calls both on every connect
// and treats exactly EOPNOTSUPP (positive) as "no ECE", so keep it so.
UROCE_EXPORT int ibv_query_ece(ibv_qp* qp, ibv_ece* ece) {
  errno = EOPNOTSUPP;
  return EOPNOTSUPP;
}

UROCE_EXPORT int ibv_set_ece(ibv_qp* qp, ibv_ece* ece) {
  errno = EOPNOTSUPP;
  return EOPNOTSUPP;
}

// 0: no guarantee that RDMA data lands in order (only mlx5 reports 1).
UROCE_EXPORT int ibv_query_qp_data_in_order(ibv_qp* qp, ibv_wr_opcode op, uint32_t flags) {
  return 0;
}
