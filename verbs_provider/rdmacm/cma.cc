// Event channels, ids and the connection calls: each asks the engine's CM
// agent, and rdma_get_cm_event turns its records into events (rdma-core's
// librdmacm/cma.c is the model for what each call does around the kernel).
#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "verbs_provider/rdmacm/rdmacm.h"


namespace uroce::rdmacm {

namespace {

using abi::CtlOp;

uint32_t random_psn() {
  uint32_t r = 0;
  if (getrandom(&r, sizeof(r), 0) != sizeof(r)) r = uint32_t(rand());
  return r & 0xffffff;
}

// What rdma_cm reports as the private data of each message: the whole
// field, less the IP header rdma_cm puts in a REQ (cma_user_data_offset;
// an AF_IB listener, which would report it all, takes no request over
// RoCE): REQ 92 - 36, SIDR REQ 216 - 36.
constexpr size_t kReqUserPrivateData = 56, kSidrReqUserPrivateData = 180;
size_t reported_private_len(uint32_t event, uint32_t ps) {
  switch (event) {
    case RDMA_CM_EVENT_CONNECT_REQUEST: return ps == RDMA_PS_UDP ? kSidrReqUserPrivateData : kReqUserPrivateData;
    case RDMA_CM_EVENT_REJECTED: return abi::kCmMaxRejPrivateData;
    case RDMA_CM_EVENT_CONNECT_RESPONSE:
    case RDMA_CM_EVENT_ESTABLISHED: return ps == RDMA_PS_UDP ? 136 : abi::kCmMaxPrivateData;
    default: return 0;
  }
}

uint8_t capped(uint8_t want, int device_max) {
  return uint8_t(std::min<int>(want, std::max(device_max, 0)));
}

// librdmacm's ucma_valid_param: over the device's limit is EINVAL (RC port
// space only); RDMA_MAX_RESP_RES / RDMA_MAX_INIT_DEPTH ask for the most.
bool valid_depths(const Id* id, const rdma_conn_param* p, int device_max) {
  if (id->id.ps != RDMA_PS_TCP || !p) return true;
  return (p->responder_resources == RDMA_MAX_RESP_RES || p->responder_resources <= device_max) &&
         (p->initiator_depth == RDMA_MAX_INIT_DEPTH || p->initiator_depth <= device_max);
}

int device_max_rd_atom(ibv_context* ctx) {
  ibv_device_attr attr{};
  return ctx && ibv_query_device(ctx, &attr) == 0 ? attr.max_qp_rd_atom : 16;
}

// An AF_IB source keeps the P_Key, flow label and scope of the address it
// was bound from (the kernel rewrites only its service ID: cma_bind_port).
void keep_ib_fields(Id* id, const sockaddr* from) {
  auto* src = reinterpret_cast<sockaddr_ib*>(&id->id.route.addr.src_storage);
  if (src->sib_family != AF_IB || !from || from->sa_family != AF_IB) return;
  const auto* given = reinterpret_cast<const sockaddr_ib*>(from);
  src->sib_pkey = given->sib_pkey;
  src->sib_flowinfo = given->sib_flowinfo;
  src->sib_scope_id = given->sib_scope_id;
}

void fill_route_src(Id* id, const abi::CmBindReply& rep) {
  from_cm_addr(rep.addr, &id->id.route.addr.src_storage);
  id->gid_index = rep.gid_index;
  std::memcpy(id->id.route.addr.addr.ibaddr.sgid.raw, rep.local_gid, 16);
  id->id.route.addr.addr.ibaddr.pkey = htobe16(0xffff);
}

// The path rdma_resolve_route reports (RoCE: from the addresses, as
// cma_resolve_iboe_route builds it).
void fill_path(Id* id) {
  ibv_sa_path_rec& p = id->path;
  p = {};
  std::memcpy(p.sgid.raw, id->id.route.addr.addr.ibaddr.sgid.raw, 16);
  std::memcpy(p.dgid.raw, id->have_peer ? id->peer_gid : p.sgid.raw, 16);
  std::memcpy(id->id.route.addr.addr.ibaddr.dgid.raw, p.dgid.raw, 16);
  p.pkey = htobe16(0xffff);
  p.hop_limit = 64;
  p.traffic_class = id->tos;
  p.reversible = htobe32(1);
  p.numb_path = 1;
  p.mtu_selector = 2;  // exactly
  ibv_port_attr port{};
  p.mtu = id->id.verbs && ibv_query_port(id->id.verbs, 1, &port) == 0 ? port.active_mtu : IBV_MTU_1024;
  p.rate_selector = 2;
  p.rate = 0;  // IB_RATE_PORT_CURRENT, as the REQ carries it (cm/cm_wire.cc)
  p.packet_life_time_selector = 2;
  p.packet_life_time = 18;  // CMA_IBOE_PACKET_LIFETIME
  id->id.route.path_rec = &id->path;
  id->id.route.num_paths = 1;
}

void to_conn_param(const Id* id, const rdma_conn_param* p, abi::CmConnParam* out) {
  *out = {};
  out->psn = id->psn;
  out->responder_resources = id->responder_resources;
  out->initiator_depth = id->initiator_depth;
  out->retry_count = id->retry_count;
  out->rnr_retry_count = id->rnr_retry_count;
  out->qkey = RDMA_UDP_QKEY;
  if (id->id.qp) {
    out->qp_num = id->id.qp->qp_num;
    out->srq = id->id.srq || id->id.qp->srq || id->id.qp->qp_type == IBV_QPT_XRC_RECV ? 1 : 0;
    out->qp_type = uint8_t(id->id.qp->qp_type);
  } else if (p) {
    out->qp_num = p->qp_num;
    out->srq = p->srq;
  }
  if (p) {
    out->flow_control = p->flow_control;
    if (p->private_data && p->private_data_len) {
      out->private_data_len = p->private_data_len;
      std::memcpy(out->private_data, p->private_data, p->private_data_len);
    }
  }
}

Id* new_id(rdma_event_channel* channel, void* context, rdma_port_space ps, ibv_qp_type qp_type) {
  auto* id = new Id;
  id->id.channel = channel;
  id->id.context = context;
  id->id.ps = ps;
  id->id.qp_type = qp_type;
  id->id.port_num = 1;
  id->psn = random_psn();
  return id;
}

void free_id(Id* id) {
  if (id->id.event) rdma_ack_cm_event(id->id.event);
  if (id->sync && id->id.channel) rdma_destroy_event_channel(id->id.channel);
  delete id;
}

// The id now names its device: its context and the device's PD
// (ucma_get_device), unless it has a PD of its own already (its QP's).
void bind_device(Id* id) {
  id->id.verbs = id->engine->ctx;
  if (!id->id.pd) id->id.pd = device_pd(id->engine);
}

// Whether a bound address names the engine's device (cma_acquire_dev_by_src_ip)
// or, like a wildcard, none yet. The kernel's rdma_cm counts loopback
// addresses as wildcards (cma_any_addr), so libfabric's verbs provider, which
// binds "localhost" to find out, takes a device's own addresses from its
// interfaces instead of offering 127.0.0.1 to a peer on another host. On an
// engine whose own address is the loopback (the default engine, GID 0
// ::ffff:127.0.0.1), the loopback is the device's address and names it.
bool names_device(const Engine* e, const abi::CmAddr& a) {
  if (a.family == AF_IB) return false;  // (only its wildcards bind: no device)
  const bool v4 = a.family == AF_INET;
  const bool mapped = a.family == AF_INET6 && std::all_of(a.addr, a.addr + 10, [](uint8_t b) { return b == 0; }) &&
                      a.addr[10] == 0xff && a.addr[11] == 0xff;
  const uint8_t* ip4 = v4 ? a.addr : mapped ? a.addr + 12 : nullptr;
  static const uint8_t kLoop6[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  const bool loopback = ip4 ? ip4[0] == 127 : std::memcmp(a.addr, kLoop6, 16) == 0;
  if (loopback) {
    ibv_gid gid{};  // GID 0: the engine's IPv4 address
    return ibv_query_gid(e->ctx, 1, 0, &gid) == 0 && gid.raw[12] == 127;
  }
  return !std::all_of(a.addr, a.addr + 16, [](uint8_t b) { return b == 0; });
}

}  // namespace

Channel* create_channel() {
  Library* lib;
  if (int err = init(&lib)) {
    errno = err;
    return nullptr;
  }
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return nullptr;
  auto* c = new Channel{};
  c->ch.fd = fds[0];
  c->write_fd = fds[1];
  return c;
}

// The channel's handle in engine e, handing it its write end on first use
// (Library::mu held).
int channel_in(Channel* c, Engine* e, uint64_t* handle) {
  if (auto it = c->handles.find(e); it != c->handles.end()) {
    *handle = it->second;
    return 0;
  }
  abi::CmHandleReply rep{};
  if (int err = call(e, CtlOp::kCmCreateChannel, nullptr, 0, &rep, sizeof(rep), &c->write_fd, 1)) return err;
  c->handles[e] = rep.handle;
  *handle = rep.handle;
  return 0;
}

// Makes id an id of engine e (Library::mu held): its first bind, resolve
// or listen decides the engine, as the kernel's binds an id to a device.
int attach(Id* id, Engine* e) {
  if (!e) return ENODEV;
  if (id->engine) return id->engine == e ? 0 : EINVAL;
  abi::CmCreateIdRequest req{0, uint32_t(id->id.ps), uint32_t(id->id.qp_type)};
  if (int err = channel_in(reinterpret_cast<Channel*>(id->id.channel), e, &req.channel)) return err;
  abi::CmHandleReply rep{};
  if (int err = call(e, CtlOp::kCmCreateId, &req, sizeof(req), &rep, sizeof(rep))) return err;
  id->engine = e;
  id->handle = rep.handle;
  library().ids[id->handle] = id;
  return 0;
}

int complete(Id* id) {
  if (!id->sync) return 0;
  if (id->id.event) {
    rdma_ack_cm_event(id->id.event);
    id->id.event = nullptr;
  }
  if (rdma_get_cm_event(id->id.channel, &id->id.event) != 0) return -1;
  const rdma_cm_event* ev = id->id.event;
  if (ev->status) {
    if (ev->event == RDMA_CM_EVENT_REJECTED) return fail(ECONNREFUSED);
    return fail(ev->status < 0 ? -ev->status : ev->status);
  }
  if (ev->event == RDMA_CM_EVENT_ADDR_ERROR || ev->event == RDMA_CM_EVENT_ROUTE_ERROR ||
      ev->event == RDMA_CM_EVENT_UNREACHABLE || ev->event == RDMA_CM_EVENT_CONNECT_ERROR)
    return fail(EHOSTUNREACH);
  return 0;
}

}  // namespace uroce::rdmacm

using namespace uroce;
using namespace uroce::rdmacm;

RDMACM_EXPORT rdma_event_channel* rdma_create_event_channel() {
  Channel* c = create_channel();
  return c ? &c->ch : nullptr;
}

RDMACM_EXPORT void rdma_destroy_event_channel(rdma_event_channel* channel) {
  if (!channel) return;
  auto* c = reinterpret_cast<Channel*>(channel);
  c->destroyed = true;  // before the write ends close
  {
    std::lock_guard<std::mutex> lock(library().mu);
    for (const auto& [e, h] : c->handles) {
      abi::CmHandleRequest req{h};
      call(e, abi::CtlOp::kCmDestroyChannel, &req, sizeof(req));
    }
  }
  close(c->write_fd);
  close(c->ch.fd);
}

RDMACM_EXPORT int rdma_create_id(rdma_event_channel* channel, rdma_cm_id** out, void* context,
                                 rdma_port_space ps) {
  Library* lib;
  if (int err = init(&lib)) return fail(err);
  if (!out) return fail(EINVAL);
  const ibv_qp_type qp_type = ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB ? IBV_QPT_UD : IBV_QPT_RC;
  if (ps != RDMA_PS_TCP && ps != RDMA_PS_UDP && ps != RDMA_PS_IPOIB && ps != RDMA_PS_IB) return fail(EINVAL);
  bool sync = false;
  if (!channel) {
    Channel* c = create_channel();
    if (!c) return -1;
    channel = &c->ch;
    sync = true;
  }
  Id* id = new_id(channel, context, ps, qp_type);
  id->sync = sync;
  *out = &id->id;  // the engine's id comes with its address (attach)
  return 0;
}

RDMACM_EXPORT int rdma_destroy_id(rdma_cm_id* cm_id) {
  if (!cm_id) return fail(EINVAL);
  Id* id = to_id(cm_id);
  Library& lib = library();
  {
    std::lock_guard<std::mutex> lock(lib.mu);
    leave_all_groups(id);
    if (id->engine) {
      abi::CmHandleRequest req{id->handle};
      call(id->engine, abi::CtlOp::kCmDestroyId, &req, sizeof(req));
      lib.ids.erase(id->handle);
    }
  }
  free_id(id);
  return 0;
}

RDMACM_EXPORT int rdma_bind_addr(rdma_cm_id* cm_id, sockaddr* addr) {
  Id* id = to_id(cm_id);
  abi::CmBindRequest req{};
  req.id = id->handle;
  if (!addr) return fail(EINVAL);
  if (int err = to_cm_bind_addr(id->id.ps, addr, &req.addr)) return fail(err);
  req.reuseaddr = id->reuseaddr;
  req.afonly = id->afonly;
  abi::CmBindReply rep{};
  std::lock_guard<std::mutex> lock(library().mu);
  if (int err = attach(id, id->engine ? id->engine : engine_for(addr))) return fail(err);
  req.id = id->handle;
  if (int err = call(id->engine, abi::CtlOp::kCmBind, &req, sizeof(req), &rep, sizeof(rep))) return fail(err);
  fill_route_src(id, rep);
  keep_ib_fields(id, addr);
  if (names_device(id->engine, rep.addr)) bind_device(id);
  return 0;
}

RDMACM_EXPORT int rdma_resolve_addr(rdma_cm_id* cm_id, sockaddr* src, sockaddr* dst, int timeout_ms) {
  (void)timeout_ms;  // answered at once on one engine
  Id* id = to_id(cm_id);
  if (!dst) return fail(EINVAL);
  abi::CmResolveAddrRequest req{};
  req.id = id->handle;
  if (int err = to_cm_bind_addr(id->id.ps, src, &req.src)) return fail(err);
  if (int err = to_cm_addr(dst, &req.dst)) return fail(err);
  // An AF_IB destination's P_Key must be in the port's table (cma_resolve_ib_dev's
  // ib_find_cached_pkey; a RoCE port's holds the default 0xffff only),
  // else no device: ENODEV. (Its wildcards resolve to the loopback.)
  if (req.dst.family == AF_IB && (be16toh(reinterpret_cast<const sockaddr_ib*>(dst)->sib_pkey) & 0x7fff) != 0x7fff &&
      !ib_wildcard(req.dst.addr))
    return fail(ENODEV);
  req.reuseaddr = id->reuseaddr;
  req.afonly = id->afonly;
  abi::CmBindReply rep{};
  {
    std::lock_guard<std::mutex> lock(library().mu);
    if (int err = attach(id, id->engine ? id->engine : engine_for(src ? src : dst))) return fail(err);
    req.id = id->handle;
    if (int err = call(id->engine, abi::CtlOp::kCmResolveAddr, &req, sizeof(req), &rep, sizeof(rep)))
      return fail(err);
    fill_route_src(id, rep);
    if (dst->sa_family == AF_IB) {
      // The destination as given (rdma_resolve_addr copies it); a source
      // made for it has its P_Key (cma_bind_addr).
      std::memcpy(&id->id.route.addr.dst_storage, dst, sizeof(sockaddr_ib));
      if (src) keep_ib_fields(id, src);
      else reinterpret_cast<sockaddr_ib*>(&id->id.route.addr.src_storage)->sib_pkey =
          reinterpret_cast<const sockaddr_ib*>(dst)->sib_pkey;
    } else {
      from_cm_addr(req.dst, &id->id.route.addr.dst_storage);
    }
    bind_device(id);
  }
  return complete(id);
}

RDMACM_EXPORT int rdma_resolve_route(rdma_cm_id* cm_id, int timeout_ms) {
  (void)timeout_ms;
  Id* id = to_id(cm_id);
  {
    std::lock_guard<std::mutex> lock(library().mu);
    abi::CmHandleRequest req{id->handle};
    if (int err = call(id->engine, abi::CtlOp::kCmResolveRoute, &req, sizeof(req))) return fail(err);
    fill_path(id);
  }
  return complete(id);
}

RDMACM_EXPORT int rdma_listen(rdma_cm_id* cm_id, int backlog) {
  Id* id = to_id(cm_id);
  std::lock_guard<std::mutex> lock(library().mu);
  if (int err = attach(id, id->engine ? id->engine : engine_for(nullptr))) return fail(err);
  abi::CmListenRequest req{id->handle, backlog, 0};
  if (int err = call(id->engine, abi::CtlOp::kCmListen, &req, sizeof(req))) return fail(err);
  return 0;
}

RDMACM_EXPORT int rdma_connect(rdma_cm_id* cm_id, rdma_conn_param* param) {
  Id* id = to_id(cm_id);
  const int max_rd = device_max_rd_atom(id->id.verbs);
  if (!valid_depths(id, param, max_rd)) return fail(EINVAL);
  if (param) {
    const size_t max_private = id->id.ps == RDMA_PS_UDP ? kSidrReqUserPrivateData : kReqUserPrivateData;
    if (param->private_data_len > max_private) return fail(EINVAL);
    id->responder_resources = capped(param->responder_resources, max_rd);
    id->initiator_depth = capped(param->initiator_depth, max_rd);
    id->retry_count = std::min<uint8_t>(param->retry_count, 7);
    id->rnr_retry_count = std::min<uint8_t>(param->rnr_retry_count, 7);
  } else {
    id->responder_resources = id->initiator_depth = capped(RDMA_MAX_RESP_RES, max_rd);
  }
  abi::CmConnectRequest req{};
  req.id = id->handle;
  to_conn_param(id, param, &req.param);
  {
    std::lock_guard<std::mutex> lock(library().mu);
    if (int err = call(id->engine, abi::CtlOp::kCmConnect, &req, sizeof(req))) return fail(err);
  }
  return complete(id);
}

RDMACM_EXPORT int rdma_accept(rdma_cm_id* cm_id, rdma_conn_param* param) {
  Id* id = to_id(cm_id);
  const int max_rd = device_max_rd_atom(id->id.verbs);
  if (!valid_depths(id, param, max_rd)) return fail(EINVAL);
  // Without parameters (or asking for the most), the request's as far as
  // this device goes: a kernel peer (rxe: 128) asks for more than our 16
  // (librdmacm's rdma_accept).
  if (param && param->responder_resources != RDMA_MAX_RESP_RES)
    id->responder_resources = param->responder_resources;
  else
    id->responder_resources = capped(id->responder_resources, max_rd);
  if (param && param->initiator_depth != RDMA_MAX_INIT_DEPTH)
    id->initiator_depth = param->initiator_depth;
  else
    id->initiator_depth = capped(id->initiator_depth, max_rd);
  if (param) id->rnr_retry_count = std::min<uint8_t>(param->rnr_retry_count, 7);
  if (param && param->private_data_len > (id->id.ps == RDMA_PS_UDP ? 136 : abi::kCmMaxPrivateData))
    return fail(EINVAL);
  if (id->id.qp && id->id.qp_type != IBV_QPT_UD) {
    if (int err = modify_qp_rtr_rts(id)) {
      rdma_reject(cm_id, nullptr, 0);
      return fail(err);
    }
  }
  abi::CmConnectRequest req{};
  req.id = id->handle;
  to_conn_param(id, param, &req.param);
  if (id->id.qp && id->id.qp_type == IBV_QPT_UD) {
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    if (ibv_query_qp(id->id.qp, &attr, IBV_QP_QKEY, &init) == 0) req.param.qkey = attr.qkey;
  }
  {
    std::lock_guard<std::mutex> lock(library().mu);
    if (int err = call(id->engine, abi::CtlOp::kCmAccept, &req, sizeof(req))) return fail(err);
  }
  if (id->id.qp_type == IBV_QPT_UD) return 0;
  return complete(id);
}

RDMACM_EXPORT int rdma_reject(rdma_cm_id* cm_id, const void* private_data, uint8_t private_data_len) {
  Id* id = to_id(cm_id);
  if (private_data_len > abi::kCmMaxRejPrivateData) return fail(EINVAL);
  abi::CmRejectRequest req{};
  req.id = id->handle;
  req.private_data_len = private_data ? private_data_len : 0;
  if (req.private_data_len) std::memcpy(req.private_data, private_data, private_data_len);
  std::lock_guard<std::mutex> lock(library().mu);
  if (int err = call(id->engine, abi::CtlOp::kCmReject, &req, sizeof(req))) return fail(err);
  return 0;
}

RDMACM_EXPORT int rdma_reject_ece(rdma_cm_id* cm_id, const void* private_data, uint8_t private_data_len) {
  return rdma_reject(cm_id, private_data, private_data_len);
}

RDMACM_EXPORT int rdma_establish(rdma_cm_id* cm_id) {
  Id* id = to_id(cm_id);
  if (id->id.qp) return fail(EINVAL);  // a QP's connection completes in rdma_get_cm_event
  abi::CmHandleRequest req{id->handle};
  std::lock_guard<std::mutex> lock(library().mu);
  if (int err = call(id->engine, abi::CtlOp::kCmEstablish, &req, sizeof(req))) return fail(err);
  return 0;
}

RDMACM_EXPORT int rdma_disconnect(rdma_cm_id* cm_id) {
  Id* id = to_id(cm_id);
  // The QP stops first, so nothing more is posted to a closing connection.
  if (id->id.qp && id->id.qp_type != IBV_QPT_UD) modify_qp_err(id);
  abi::CmHandleRequest req{id->handle};
  std::lock_guard<std::mutex> lock(library().mu);
  if (int err = call(id->engine, abi::CtlOp::kCmDisconnect, &req, sizeof(req))) return fail(err);
  return 0;
}

RDMACM_EXPORT int rdma_notify(rdma_cm_id* cm_id, ibv_event_type event) {
  (void)cm_id;
  (void)event;  // the engine's CM needs no hint to complete a connection
  return 0;
}

RDMACM_EXPORT int rdma_migrate_id(rdma_cm_id* cm_id, rdma_event_channel* channel) {
  Id* id = to_id(cm_id);
  bool sync = false;
  if (!channel) {
    Channel* c = create_channel();
    if (!c) return -1;
    channel = &c->ch;
    sync = true;
  }
  rdma_event_channel* old = id->id.channel;
  const bool old_sync = id->sync;
  {
    std::lock_guard<std::mutex> lock(library().mu);
    int err = 0;
    if (id->engine) {  // else nothing of it is in an engine yet
      abi::CmMigrateRequest req{id->handle, 0};
      err = channel_in(reinterpret_cast<Channel*>(channel), id->engine, &req.channel);
      if (!err) err = call(id->engine, abi::CtlOp::kCmMigrate, &req, sizeof(req));
    }
    if (err) {
      if (sync) rdma_destroy_event_channel(channel);
      return fail(err);
    }
    id->id.channel = channel;
    id->sync = sync;
  }
  if (old_sync && old) rdma_destroy_event_channel(old);
  return 0;
}

RDMACM_EXPORT int rdma_set_option(rdma_cm_id* cm_id, int level, int optname, void* optval, size_t optlen) {
  Id* id = to_id(cm_id);
  if (!optval) return fail(EINVAL);
  if (level == RDMA_OPTION_IB && optname == RDMA_OPTION_IB_PATH) return 0;  // RoCE takes its path from the addresses
  if (level != RDMA_OPTION_ID) return fail(ENOSYS);
  switch (optname) {
    case RDMA_OPTION_ID_TOS:
      if (optlen != sizeof(uint8_t)) return fail(EINVAL);
      id->tos = *static_cast<uint8_t*>(optval);
      return 0;
    case RDMA_OPTION_ID_REUSEADDR:
      if (optlen != sizeof(int)) return fail(EINVAL);
      id->reuseaddr = *static_cast<int*>(optval) != 0;
      return 0;
    case RDMA_OPTION_ID_AFONLY:
      if (optlen != sizeof(int)) return fail(EINVAL);
      id->afonly = *static_cast<int*>(optval) != 0;
      return 0;
    case RDMA_OPTION_ID_ACK_TIMEOUT:
      if (optlen != sizeof(uint8_t)) return fail(EINVAL);
      id->ack_timeout = std::min<uint8_t>(*static_cast<uint8_t*>(optval), 31);
      return 0;
    default:
      return fail(ENOSYS);
  }
}

RDMACM_EXPORT int rdma_set_local_ece(rdma_cm_id* cm_id, ibv_ece* ece) {
  if (!cm_id || !ece) return fail(EINVAL);
  to_id(cm_id)->local_ece = *ece;
  return 0;
}

RDMACM_EXPORT int rdma_get_remote_ece(rdma_cm_id* cm_id, ibv_ece* ece) {
  if (!cm_id || !ece) return fail(EINVAL);
  *ece = to_id(cm_id)->remote_ece;  // no ECE is exchanged: zero, as from a peer without it
  return 0;
}

// ---- events ----

namespace {

// A CONNECT_REQUEST's new id, on its listener's channel (a synchronous
// listener's requests each get a channel of their own: ucma_process_conn_req).
Id* accept_new_id(Library& lib, Id* listener, const abi::CmEventRecord& rec) {
  // The QP type the request is for (an XRC initiator's: XRC_RECV), as
  // cma_ib_new_conn_id takes the REQ's.
  Id* id = new_id(listener->id.channel, listener->id.context, listener->id.ps,
                  rec.param.qp_type ? ibv_qp_type(rec.param.qp_type) : listener->id.qp_type);
  id->engine = listener->engine;
  id->handle = rec.id;
  bind_device(id);
  from_cm_addr(rec.src, &id->id.route.addr.src_storage);
  from_cm_addr(rec.dst, &id->id.route.addr.dst_storage);
  id->gid_index = rec.local_gid_index;
  ibv_gid gid{};
  if (ibv_query_gid(id->engine->ctx, 1, id->gid_index, &gid) == 0)
    std::memcpy(id->id.route.addr.addr.ibaddr.sgid.raw, gid.raw, 16);
  id->responder_resources = rec.param.responder_resources;
  id->initiator_depth = rec.param.initiator_depth;
  id->reuseaddr = listener->reuseaddr;
  id->tos = listener->tos;
  lib.ids[id->handle] = id;
  return id;
}

void take_peer(Id* id, const abi::CmEventRecord& rec) {
  id->have_peer = true;
  id->peer_qpn = rec.param.qp_num;
  id->peer_psn = rec.param.psn;
  id->peer_qkey = rec.param.qkey;
  std::memcpy(id->peer_gid, rec.peer_gid, 16);
  fill_path(id);
}

}  // namespace

RDMACM_EXPORT int rdma_get_cm_event(rdma_event_channel* channel, rdma_cm_event** out) {
  if (!channel || !out) return fail(EINVAL);
  Library& lib = library();
  for (;;) {
    abi::CmEventRecord rec;
    const ssize_t n = read(channel->fd, &rec, sizeof(rec));
    if (n < 0) return -1;  // errno: EAGAIN on a non-blocking channel, EINTR
    if (n == 0) {
      // The write end closed. If the channel was destroyed under this
      // reader, it waits forever, as a read of a closed rdma_cm fd does
      // with the kernel (rping's event thread is left so at its exit).
      if (reinterpret_cast<Channel*>(channel)->destroyed)
        for (;;) pause();
      return fail(ENODEV);  // the engine is gone
    }
    if (size_t(n) != sizeof(rec)) return fail(EIO);
    auto* e = static_cast<Event*>(calloc(1, sizeof(Event)));
    if (!e) return fail(ENOMEM);
    rdma_cm_event& ev = e->ev;
    ev.event = rdma_cm_event_type(rec.event);
    ev.status = rec.status;
    Id* id = nullptr;
    Id* migrate_to_own_channel = nullptr;
    {
      std::lock_guard<std::mutex> lock(lib.mu);
      if (rec.event == RDMA_CM_EVENT_CONNECT_REQUEST) {
        auto l = lib.ids.find(rec.listen_id);
        if (l == lib.ids.end()) {
          // The listener is gone: refuse, as its destruction would have, in
          // whichever engine of this channel the request came from.
          for (const auto& [eng, h] : reinterpret_cast<Channel*>(channel)->handles) {
            abi::CmRejectRequest rej{};
            rej.id = rec.id;
            call(eng, abi::CtlOp::kCmReject, &rej, sizeof(rej));
            abi::CmHandleRequest d{rec.id};
            call(eng, abi::CtlOp::kCmDestroyId, &d, sizeof(d));
          }
          free(e);
          continue;
        }
        id = accept_new_id(lib, l->second, rec);
        take_peer(id, rec);
        ev.listen_id = &l->second->id;
        if (l->second->sync) migrate_to_own_channel = id;
      } else {
        auto it = lib.ids.find(rec.id);
        if (it == lib.ids.end()) {  // for an id already destroyed
          free(e);
          continue;
        }
        id = it->second;
      }
      if (rec.event == RDMA_CM_EVENT_CONNECT_RESPONSE) {
        take_peer(id, rec);
        id->responder_resources = rec.param.responder_resources;
        id->initiator_depth = rec.param.initiator_depth;
      } else if (rec.event == RDMA_CM_EVENT_ESTABLISHED && id->id.qp_type == IBV_QPT_UD) {
        take_peer(id, rec);
      }
    }
    ev.id = &id->id;
    if (rec.event == RDMA_CM_EVENT_MULTICAST_JOIN) {
      {
        std::lock_guard<std::mutex> lock(lib.mu);
        multicast_joined(id, rec, &ev);
      }
      *out = &ev;
      return 0;
    }
    if (rec.event == RDMA_CM_EVENT_CONNECT_RESPONSE && id->id.qp) {
      // A QP of the id: connect it and send the RTU; the application sees
      // the connection up (ucma_process_conn_resp).
      int err = modify_qp_rtr_rts(id);
      abi::CmHandleRequest req{id->handle};
      if (!err) err = call(id->engine, abi::CtlOp::kCmEstablish, &req, sizeof(req));
      if (err) {
        abi::CmRejectRequest rej{};
        rej.id = id->handle;
        call(id->engine, abi::CtlOp::kCmReject, &rej, sizeof(rej));
        ev.event = RDMA_CM_EVENT_CONNECT_ERROR;
        ev.status = -err;
      } else {
        ev.event = RDMA_CM_EVENT_ESTABLISHED;
      }
    }
    std::memcpy(e->private_data, rec.param.private_data,
                std::min<size_t>(rec.param.private_data_len, sizeof(e->private_data)));
    const size_t reported = reported_private_len(rec.event, id->id.ps);
    if (id->id.qp_type == IBV_QPT_UD && (ev.event == RDMA_CM_EVENT_ESTABLISHED ||
                                          ev.event == RDMA_CM_EVENT_CONNECT_REQUEST)) {
      rdma_ud_param& ud = ev.param.ud;
      ud.private_data = reported ? e->private_data : nullptr;
      ud.private_data_len = uint8_t(reported);
      ud.qp_num = rec.param.qp_num;
      ud.qkey = rec.param.qkey;
      ud.ah_attr.is_global = 1;
      ud.ah_attr.port_num = 1;
      std::memcpy(ud.ah_attr.grh.dgid.raw, rec.peer_gid, 16);
      ud.ah_attr.grh.sgid_index = id->gid_index;
      ud.ah_attr.grh.hop_limit = 64;
      ud.ah_attr.grh.traffic_class = id->tos;
    } else {
      rdma_conn_param& c = ev.param.conn;
      c.private_data = reported ? e->private_data : nullptr;
      c.private_data_len = uint8_t(reported);
      c.responder_resources = rec.param.responder_resources;
      c.initiator_depth = rec.param.initiator_depth;
      c.flow_control = rec.param.flow_control;
      c.retry_count = rec.param.retry_count;
      c.rnr_retry_count = rec.param.rnr_retry_count;
      c.srq = rec.param.srq;
      c.qp_num = rec.param.qp_num;
    }
    if (migrate_to_own_channel) rdma_migrate_id(&migrate_to_own_channel->id, nullptr);
    *out = &ev;
    return 0;
  }
}

RDMACM_EXPORT int rdma_ack_cm_event(rdma_cm_event* event) {
  if (!event) return fail(EINVAL);
  free(reinterpret_cast<Event*>(event));
  return 0;
}
