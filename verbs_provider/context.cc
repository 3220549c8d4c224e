// Opening the device, the queries answered from the engine's device
// description, and asynchronous events.
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <vector>

#include "verbs_provider/provider.h"
#include "verbs_provider/shared_pages.h"

#undef ibv_query_port

namespace uroce::provider {

namespace {

std::mutex g_ctx_mu;
std::vector<UContext*> g_contexts;

// A forked child cannot use its parent's device (as with a real NIC); it
// closes its copy of the control socket so the engine reclaims the parent's
// session when the parent exits, whatever the child does.
void atfork_child() {
  for (UContext* c : g_contexts) {
    c->engine_gone = true;
    c->forked_child = true;
    int fd = c->conn.fd();
    if (fd >= 0) close(fd);
    c->conn.drop_fd_after_fork();
  }
}

// The shared page is MADV_DONTFORK: a child reads the GID table as it was
// at fork() (librdmacm's engine_for asks for it in a forked child too).
void atfork_prepare() {
  std::lock_guard<std::mutex> lock(g_ctx_mu);
  for (UContext* c : g_contexts)
    if (!c->forked_child) c->gids_at_fork = read_gid_table(c);
}

void register_context(UContext* c) {
  static std::once_flag once;
  std::call_once(once, [] {
    install_fork_handlers();  // first: the child's moved pages must be in place before ours runs
    pthread_atfork(atfork_prepare, nullptr, atfork_child);
  });
  std::lock_guard<std::mutex> lock(g_ctx_mu);
  g_contexts.push_back(c);
}

void unregister_context(UContext* c) {
  std::lock_guard<std::mutex> lock(g_ctx_mu);
  std::erase(g_contexts, c);
}

// The context of this process whose control socket `fd` is (another
// descriptor of), or nullptr.
UContext* context_of_socket(int fd) {
  struct stat want, st;
  if (fstat(fd, &want) != 0 || !S_ISSOCK(want.st_mode)) return nullptr;
  std::lock_guard<std::mutex> lock(g_ctx_mu);
  for (UContext* c : g_contexts)
    if (c->conn.fd() >= 0 && fstat(c->conn.fd(), &st) == 0 && st.st_dev == want.st_dev && st.st_ino == want.st_ino)
      return c;
  return nullptr;
}

// Under Yama ptrace_scope=1 the engine may only reach our memory if we say so.
void allow_engine_access(pid_t engine) {
  if (FILE* f = std::fopen("/proc/sys/kernel/yama/ptrace_scope", "r")) {
    int scope = 0;
    if (std::fscanf(f, "%d", &scope) == 1 && scope == 1) prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY);
    std::fclose(f);
  }
  (void)engine;
}

int compat_query_port(ibv_context* ctx, uint8_t port, _compat_ibv_port_attr* attr);
int compat_query_device(ibv_context* ctx, ibv_device_attr* attr);

void fill_device_attr(const abi::DeviceInfo& d, ibv_device_attr* a) {
  std::memset(a, 0, sizeof(*a));
  std::snprintf(a->fw_ver, sizeof(a->fw_ver), "%s", d.fw_ver);
  a->node_guid = d.node_guid;
  a->sys_image_guid = d.sys_image_guid;
  a->max_mr_size = d.max_mr_size;
  a->page_size_cap = d.page_size_cap;
  a->vendor_id = d.vendor_id;
  a->vendor_part_id = d.vendor_part_id;
  a->hw_ver = d.hw_ver;
  a->max_qp = int(d.max_qp);
  a->max_qp_wr = int(d.max_qp_wr);
  a->device_cap_flags = int(d.device_cap_flags);
  a->max_sge = int(d.max_sge);
  a->max_sge_rd = int(d.max_sge);
  a->max_cq = int(d.max_cq);
  a->max_cqe = int(d.max_cqe);
  a->max_mr = int(d.max_mr);
  a->max_pd = int(d.max_pd);
  a->max_mw = int(d.max_mw);
  a->max_qp_rd_atom = int(d.max_qp_rd_atom);
  a->max_qp_init_rd_atom = int(d.max_qp_init_rd_atom);
  a->max_res_rd_atom = int(d.max_res_rd_atom);
  a->atomic_cap = ibv_atomic_cap(d.atomic_cap);
  a->max_ah = int(d.max_ah);
  a->max_srq = int(d.max_srq);
  a->max_srq_wr = int(d.max_srq_wr);
  a->max_srq_sge = int(d.max_srq_sge);
  a->max_raw_ethy_qp = int(d.raw.max_raw_ethy_qp);
  a->max_mcast_grp = int(abi::kMaxMcastGroups);
  a->max_mcast_qp_attach = int(abi::kMaxMcastQpAttach);
  a->max_total_mcast_qp_attach = int(abi::kMaxTotalMcastQpAttach);
  a->max_pkeys = 1;
  a->local_ca_ack_delay = abi::kLocalCaAckDelay;
  a->phys_port_cnt = uint8_t(d.num_ports);
}

}  // namespace

int query_device_ex(ibv_context* ctx, const ibv_query_device_ex_input* input,
                    ibv_device_attr_ex* attr, size_t attr_size) {
  if (input && input->comp_mask) return EINVAL;
  if (attr_size < sizeof(ibv_device_attr)) return EINVAL;
  ibv_device_attr_ex full{};
  fill_device_attr(to_uctx(ctx)->info, &full.orig_attr);
  // The 64-bit superset of the base capability flags (verbs.h).
  full.device_cap_flags_ex = uint32_t(full.orig_attr.device_cap_flags) |
                            to_uctx(ctx)->info.raw.device_cap_flags_ex;
  full.raw_packet_caps = to_uctx(ctx)->info.raw.raw_packet_caps;
  const abi::DeviceInfo::RawCaps& raw = to_uctx(ctx)->info.raw;
  full.packet_pacing_caps = {raw.qp_rate_limit_min, raw.qp_rate_limit_max, raw.pacing_qpts};
  const abi::DeviceInfo::RssCaps& rss = to_uctx(ctx)->info.rss;
  full.rss_caps = {rss.supported_qpts, rss.max_rwq_indirection_tables, rss.max_rwq_indirection_table_size,
                   rss.rx_hash_fields_mask, rss.rx_hash_function};
  full.max_wq_type_rq = rss.max_wq_type_rq;
  full.phys_port_cnt_ex = full.orig_attr.phys_port_cnt;
  full.hca_core_clock = abi::kHcaCoreClockKhz;
  full.completion_timestamp_mask = abi::kCompletionTimestampMask;
  full.max_dm_size = to_uctx(ctx)->info.max_dm_size;
  fill_odp_caps(&full);
  const abi::DeviceInfo::TmCaps& tm = to_uctx(ctx)->info.tm;
  full.tm_caps = {tm.max_rndv_hdr_size, tm.max_num_tags, tm.flags, tm.max_ops, tm.max_sge};
  std::memcpy(attr, &full, std::min(attr_size, sizeof(full)));
  return 0;
}

namespace {

// mlx5_query_rt_values: unknown mask bits are EINVAL; the raw clock is the
// device clock's ticks, all in tv_nsec (tv_sec 0), as mlx5 returns its cycles.
int query_rt_values(ibv_context*, ibv_values_ex* values) {
  if (values->comp_mask & ~uint32_t(IBV_VALUES_MASK_RAW_CLOCK)) return EINVAL;
  uint32_t answered = 0;
  if (values->comp_mask & IBV_VALUES_MASK_RAW_CLOCK) {
    timespec now;
    clock_gettime(abi::kDeviceClock, &now);
    values->raw_clock.tv_sec = 0;
    values->raw_clock.tv_nsec = long(uint64_t(now.tv_sec) * 1'000'000'000u + uint64_t(now.tv_nsec));
    answered |= IBV_VALUES_MASK_RAW_CLOCK;
  }
  values->comp_mask = answered;
  return 0;
}

}  // namespace

GidTable read_gid_table(const UContext* c) {
  if (c->forked_child) return c->gids_at_fork;
  GidTable t{};
  const abi::EngineShared* sh = c->shared;
  // The engine rewrites the table rarely (an address came or went): retry
  // while it is being written; an engine that died mid-write leaves the
  // sequence odd, and the last copy is taken after a bounded wait.
  for (int tries = 0; tries < 100000; ++tries) {
    const uint32_t before = sh->gid_seq.load(std::memory_order_acquire);
    if (before & 1) continue;
    std::memcpy(t.gids, sh->gids, sizeof(t.gids));
    t.ndev_ifindex = sh->ndev_ifindex;
    std::atomic_thread_fence(std::memory_order_acquire);
    if (sh->gid_seq.load(std::memory_order_relaxed) == before) break;
  }
  return t;
}

int query_port(ibv_context* ctx, uint8_t port, ibv_port_attr* attr, size_t attr_len) {
  UContext* c = to_uctx(ctx);
  if (port != 1) return EINVAL;
  const abi::PortInfo& p = c->info.port;
  ibv_port_attr a{};
  a.state = c->engine_gone ? IBV_PORT_DOWN
                           : ibv_port_state(c->shared->port_state.load(std::memory_order_relaxed));
  a.max_mtu = ibv_mtu(p.max_mtu);
  a.active_mtu = ibv_mtu(p.active_mtu);
  a.gid_tbl_len = int(p.gid_tbl_len);
  a.port_cap_flags = p.port_cap_flags;
  a.max_msg_sz = p.max_msg_sz;
  a.pkey_tbl_len = 1;
  a.max_vl_num = 1;
  a.active_width = p.active_width;
  a.active_speed = p.active_speed;
  a.phys_state = a.state == IBV_PORT_ACTIVE ? p.phys_state : 3 /* Disabled */;
  a.link_layer = IBV_LINK_LAYER_ETHERNET;
  std::memcpy(attr, &a, std::min(attr_len, sizeof(a)));
  return 0;
}

namespace {

int compat_query_port(ibv_context* ctx, uint8_t port, _compat_ibv_port_attr* attr) {
  return query_port(ctx, port, reinterpret_cast<ibv_port_attr*>(attr),
                    offsetof(ibv_port_attr, port_cap_flags2));
}

int compat_query_device(ibv_context* ctx, ibv_device_attr* attr) {
  fill_device_attr(to_uctx(ctx)->info, attr);
  return 0;
}

// The ibv_context of a connected UContext: its fds and its ops.
ibv_context* init_context(UContext* c, int async_fd) {
  ibv_context& ctx = c->vctx.context;
  ctx.device = &c->dev->device;
  ctx.cmd_fd = c->conn.fd();
  ctx.async_fd = async_fd;
  ctx.num_comp_vectors = 1;
  pthread_mutex_init(&ctx.mutex, nullptr);
  ctx.abi_compat = __VERBS_ABI_IS_EXTENDED;
  ctx.ops._compat_query_device = compat_query_device;
  ctx.ops._compat_query_port = compat_query_port;
  ctx.ops.poll_cq = poll_cq;
  ctx.ops.req_notify_cq = req_notify_cq;
  ctx.ops.post_send = post_send;
  ctx.ops.post_recv = post_recv;
  ctx.ops.post_srq_recv = post_srq_recv;
  ctx.ops.alloc_mw = alloc_mw;  // ibv_alloc_mw and the others are inline in verbs.h
  ctx.ops.dealloc_mw = dealloc_mw;
  ctx.ops.bind_mw = bind_mw;
  verbs_context& v = c->vctx;
  v.sz = sizeof(verbs_context);
  v.query_port = query_port;
  v.query_device_ex = query_device_ex;
  v.query_rt_values = query_rt_values;
  v.advise_mr = advise_mr;
  v.create_cq_ex = create_cq_ex;
  v.create_qp_ex = create_qp_ex;
  v.create_srq_ex = create_srq_ex;
  v.get_srq_num = get_srq_num;
  v.post_srq_ops = post_srq_ops;
  v.open_xrcd = open_xrcd;
  v.close_xrcd = close_xrcd;
  v.open_qp = open_qp;
  v.alloc_td = alloc_td;
  v.dealloc_td = dealloc_td;
  v.alloc_parent_domain = alloc_parent_domain;
  fill_dm_ops(&v);
  fill_flow_ops(&v);
  fill_wq_ops(&v);
  register_context(c);
  return &ctx;
}

}  // namespace

}  // namespace uroce::provider

using namespace uroce;
using namespace uroce::provider;

UROCE_EXPORT ibv_context* ibv_open_device(ibv_device* device) {
  auto* dev = reinterpret_cast<UDevice*>(device);
  auto* c = new (std::nothrow) UContext{};
  if (!c) {
    errno = ENOMEM;
    return nullptr;
  }
  int async_pipe[2] = {-1, -1};
  int fds[2] = {-1, -1};
  int err = c->conn.connect_to(dev->socket_path);
  if (!err && pipe2(async_pipe, O_CLOEXEC) != 0) err = errno;
  abi::HelloReply rep;
  if (!err) {
    abi::HelloRequest req{abi::kMagic, abi::kVersion};
    err = c->conn.call(abi::CtlOp::kHello, &req, sizeof(req), &rep, sizeof(rep), &async_pipe[1], 1,
                       fds, 2);
    close(async_pipe[1]);
    async_pipe[1] = -1;
  }
  void* shared = nullptr;
  if (!err && (fds[0] < 0 || fds[1] < 0)) err = EIO;
  if (!err) {
    shared = mmap(nullptr, 4096, PROT_READ, MAP_SHARED, fds[0], 0);
    if (shared == MAP_FAILED) err = errno;
  }
  if (fds[0] >= 0) close(fds[0]);
  if (err == EACCES) warn_refused(dev->socket_path, c->conn.error_text());
  if (err) {
    if (fds[1] >= 0) close(fds[1]);
    if (async_pipe[0] >= 0) close(async_pipe[0]);
    c->conn.close_fd();
    delete c;
    errno = err == EIO ? ENODEV : err;  // EACCES as open() of a uverbs node we may not use
    return nullptr;
  }
  madvise(shared, 4096, MADV_DONTFORK);
  c->dev = dev;
  c->info = rep.device;
  c->shared = static_cast<const abi::EngineShared*>(shared);
  c->doorbell_fd = fds[1];
  allow_engine_access(pid_t(rep.device.engine_pid));
  place_polling_thread(c);  // the thread that opens a device usually polls it: move it early
  return init_context(c, async_pipe[0]);
}

// A second context on the command fd of a context this process opened
// (pyverbs' test_import_dm dups ctx.cmd_fd): both are the same session, so
// each names the other's objects by handle (ibv_import_pd/mr/dm), they share
// its async events, and the session lasts while either descriptor is open,
// as the kernel's uverbs file does. The new context owns cmd_fd. A socket
// this process has no context on (passed from another process) is
// EOPNOTSUPP: the engine reaches a session's memory through the process
// that opened it, so a session does not span two processes.
UROCE_EXPORT ibv_context* ibv_import_device(int cmd_fd) {
  UContext* base = context_of_socket(cmd_fd);
  if (!base) {
    errno = errno == EBADF ? EBADF : EOPNOTSUPP;
    return nullptr;
  }
  auto* c = new (std::nothrow) UContext{};
  if (!c) {
    errno = ENOMEM;
    return nullptr;
  }
  // The engine's page again: a second mapping of the same shared pages.
  void* shared = mremap(const_cast<abi::EngineShared*>(base->shared), 0, 4096, MREMAP_MAYMOVE);
  const int doorbell = fcntl(base->doorbell_fd, F_DUPFD_CLOEXEC, 0);
  const int async_fd = fcntl(base->vctx.context.async_fd, F_DUPFD_CLOEXEC, 0);
  if (shared == MAP_FAILED || doorbell < 0 || async_fd < 0) {
    const int err = errno;
    if (shared != MAP_FAILED) munmap(shared, 4096);
    if (doorbell >= 0) close(doorbell);
    if (async_fd >= 0) close(async_fd);
    delete c;
    errno = err;
    return nullptr;
  }
  madvise(shared, 4096, MADV_DONTFORK);
  c->conn.adopt(cmd_fd, base->conn);
  c->events = base->events;
  c->dev = base->dev;
  c->info = base->info;
  c->shared = static_cast<const abi::EngineShared*>(shared);
  c->doorbell_fd = doorbell;
  return init_context(c, async_fd);
}

UROCE_EXPORT int ibv_close_device(ibv_context* context) {
  UContext* c = to_uctx(context);
  unregister_context(c);
  c->conn.close_fd();  // the engine reclaims whatever is left
  if (c->child_session) c->child_session->close_fd();
  delete c->child_session;
  if (context->async_fd >= 0) close(context->async_fd);
  if (c->doorbell_fd >= 0) close(c->doorbell_fd);
  munmap(const_cast<abi::EngineShared*>(c->shared), 4096);
  if (void* v = c->vendor.load(std::memory_order_acquire)) c->vendor_free(v);
  pthread_mutex_destroy(&context->mutex);
  delete c;
  return 0;
}

UROCE_EXPORT int ibv_query_device(ibv_context* context, ibv_device_attr* attr) {
  return compat_query_device(context, attr);
}

UROCE_EXPORT int ibv_query_port(ibv_context* context, uint8_t port, _compat_ibv_port_attr* attr) {
  return compat_query_port(context, port, attr);
}

UROCE_EXPORT int ibv_query_gid(ibv_context* context, uint8_t port, int index, ibv_gid* gid) {
  UContext* c = to_uctx(context);
  if (port != 1 || index < 0 || index >= int(c->info.port.gid_tbl_len)) return -1;
  const GidTable t = read_gid_table(c);
  const abi::GidEntry& e = t.gids[index];
  std::memcpy(gid->raw, e.gid, 16);
  if (!e.valid) std::memset(gid->raw, 0, 16);
  return 0;
}

UROCE_EXPORT int _ibv_query_gid_ex(ibv_context* context, uint32_t port, uint32_t index,
                                   ibv_gid_entry* entry, uint32_t flags, size_t entry_size) {
  UContext* c = to_uctx(context);
  if (flags || entry_size < sizeof(ibv_gid_entry)) return EINVAL;
  if (port != 1 || index >= c->info.port.gid_tbl_len) return EINVAL;
  const GidTable t = read_gid_table(c);
  const abi::GidEntry& e = t.gids[index];
  if (!e.valid) return ENODATA;
  std::memset(entry, 0, sizeof(*entry));
  std::memcpy(entry->gid.raw, e.gid, 16);
  entry->gid_index = index;
  entry->port_num = port;
  entry->gid_type = e.type;
  entry->ndev_ifindex = t.ndev_ifindex;  // the bound interface (uroced --netdev; lo by default)
  return 0;
}

UROCE_EXPORT ssize_t _ibv_query_gid_table(ibv_context* context, ibv_gid_entry* entries,
                                          size_t max_entries, uint32_t flags, size_t entry_size) {
  UContext* c = to_uctx(context);
  if (flags || entry_size < sizeof(ibv_gid_entry)) return -EINVAL;
  size_t n = 0;
  const GidTable t = read_gid_table(c);  // one snapshot for the whole table
  for (uint32_t i = 0; i < c->info.port.gid_tbl_len; ++i) {
    const abi::GidEntry& g = t.gids[i];
    if (!g.valid) continue;
    if (n == max_entries) return -EINVAL;
    auto* e = reinterpret_cast<ibv_gid_entry*>(reinterpret_cast<uint8_t*>(entries) + n * entry_size);
    std::memset(e, 0, sizeof(ibv_gid_entry));
    std::memcpy(e->gid.raw, g.gid, 16);
    e->gid_index = i;
    e->port_num = 1;
    e->gid_type = g.type;
    e->ndev_ifindex = t.ndev_ifindex;
    ++n;
  }
  return ssize_t(n);
}

// enum ibv_gid_type_sysfs (rdma-core driver.h): 0 IB/RoCE v1, 1 RoCE v2.
UROCE_EXPORT int ibv_query_gid_type(ibv_context* context, uint8_t port, unsigned int index,
                                    int* type) {
  UContext* c = to_uctx(context);
  const GidTable t = read_gid_table(c);
  if (port != 1 || index >= c->info.port.gid_tbl_len || !t.gids[index].valid) {
    errno = EINVAL;
    return -1;
  }
  *type = t.gids[index].type == IBV_GID_TYPE_ROCE_V2 ? 1 : 0;
  return 0;
}

UROCE_EXPORT int ibv_query_pkey(ibv_context* context, uint8_t port, int index, __be16* pkey) {
  if (port != 1 || index != 0) return -1;
  *pkey = 0xffff;
  return 0;
}

UROCE_EXPORT int ibv_get_pkey_index(ibv_context* context, uint8_t port, __be16 pkey) {
  if (port != 1) return -EINVAL;
  return pkey == 0xffff ? 0 : -ENOENT;
}

namespace uroce::provider {

bool track_async_events(UContext* c, const void* cookie) noexcept {
  try {
    std::lock_guard<std::mutex> lock(c->events->mu);
    c->events->reported[uint64_t(uintptr_t(cookie))] = 0;
    return true;
  } catch (const std::exception&) {  // no memory for its entry
    return false;
  }
}

void forget_async_events(UContext* c, const void* cookie) noexcept {
  std::lock_guard<std::mutex> lock(c->events->mu);
  c->events->reported.erase(uint64_t(uintptr_t(cookie)));
}

void untrack_async_events(UContext* c, const void* cookie, pthread_mutex_t* mutex, pthread_cond_t* cond,
                          const uint32_t* completed) {
  uint32_t reported = 0;
  {
    std::lock_guard<std::mutex> lock(c->events->mu);
    auto it = c->events->reported.find(uint64_t(uintptr_t(cookie)));
    if (it == c->events->reported.end()) return;
    reported = it->second;
    c->events->reported.erase(it);
  }
  pthread_mutex_lock(mutex);
  while (*completed != reported) pthread_cond_wait(cond, mutex);
  pthread_mutex_unlock(mutex);
}

namespace {

// What an async event is about (IBA 11.6.3): one list for reading,
// counting and acknowledging events.
enum class EventElement { kQp, kCq, kSrq, kWq, kPort, kDevice, kUnknown };

EventElement element_of(uint32_t type) {
  switch (ibv_event_type(type)) {
    case IBV_EVENT_CQ_ERR: return EventElement::kCq;
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED: return EventElement::kQp;
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_SRQ_LIMIT_REACHED: return EventElement::kSrq;
    case IBV_EVENT_WQ_FATAL: return EventElement::kWq;
    case IBV_EVENT_PORT_ACTIVE:
    case IBV_EVENT_PORT_ERR:
    case IBV_EVENT_LID_CHANGE:
    case IBV_EVENT_PKEY_CHANGE:
    case IBV_EVENT_SM_CHANGE:
    case IBV_EVENT_CLIENT_REREGISTER:
    case IBV_EVENT_GID_CHANGE: return EventElement::kPort;
    case IBV_EVENT_DEVICE_FATAL: return EventElement::kDevice;
  }
  // Not an ibv_event_type: handed on with the cookie as a QP's (the
  // engine's cookies name objects), never acknowledged (libibverbs ignores it).
  return EventElement::kUnknown;
}

// Whether the record names an object (not a port or the device).
bool names_object(uint32_t type) {
  const EventElement e = element_of(type);
  return e != EventElement::kPort && e != EventElement::kDevice;
}

// ibv_ack_async_event's count on the event's object, and the wake-up of a
// destroy waiting for it.
template <typename Obj>
void count_acked(Obj* o, uint32_t Obj::*completed) {
  pthread_mutex_lock(&o->mutex);
  ++(o->*completed);
  pthread_cond_signal(&o->cond);
  pthread_mutex_unlock(&o->mutex);
}

// Counts the record as returned for its object; false if the object is gone.
bool count_reported(UContext* c, const abi::AsyncEventRecord& rec) {
  if (!names_object(rec.event_type)) return true;
  std::lock_guard<std::mutex> lock(c->events->mu);
  auto it = c->events->reported.find(rec.cookie);
  if (it == c->events->reported.end()) return false;
  ++it->second;
  return true;
}

}  // namespace
}  // namespace uroce::provider

UROCE_EXPORT int ibv_get_async_event(ibv_context* context, ibv_async_event* event) {
  UContext* c = to_uctx(context);
  abi::AsyncEventRecord rec;
  ssize_t n;
  do n = read(context->async_fd, &rec, sizeof(rec));
  while ((n < 0 && errno == EINTR) || (n == ssize_t(sizeof(rec)) && !count_reported(c, rec)));
  if (n == 0) {
    // The engine closed its end: it stopped or died.
    c->engine_gone = true;
    if (c->fatal_reported.exchange(true)) {
      errno = ENODEV;
      return -1;
    }
    std::memset(event, 0, sizeof(*event));
    event->event_type = IBV_EVENT_DEVICE_FATAL;
    return 0;
  }
  if (n != ssize_t(sizeof(rec))) return -1;
  event->event_type = ibv_event_type(rec.event_type);
  using uroce::provider::EventElement;
  switch (uroce::provider::element_of(rec.event_type)) {
    case EventElement::kCq:
      event->element.cq = reinterpret_cast<ibv_cq*>(rec.cookie);
      break;
    case EventElement::kSrq:
      event->element.srq = reinterpret_cast<ibv_srq*>(rec.cookie);
      break;
    case EventElement::kWq:
      event->element.wq = reinterpret_cast<ibv_wq*>(rec.cookie);
      break;
    case EventElement::kPort:
      event->element.port_num = int(rec.cookie);
      break;
    case EventElement::kDevice:
      break;
    case EventElement::kQp:
    case EventElement::kUnknown:
      event->element.qp = reinterpret_cast<ibv_qp*>(rec.cookie);
      break;
  }
  return 0;
}

UROCE_EXPORT void ibv_ack_async_event(ibv_async_event* event) {
  using uroce::provider::count_acked;
  using uroce::provider::EventElement;
  switch (uroce::provider::element_of(event->event_type)) {
    case EventElement::kCq: return count_acked(event->element.cq, &ibv_cq::async_events_completed);
    case EventElement::kQp: return count_acked(event->element.qp, &ibv_qp::events_completed);
    case EventElement::kSrq: return count_acked(event->element.srq, &ibv_srq::events_completed);
    case EventElement::kWq: return count_acked(event->element.wq, &ibv_wq::events_completed);
    case EventElement::kPort:
    case EventElement::kDevice:
    case EventElement::kUnknown: return;
  }
}
