// The library's devices and its connection to the engine's CM agent, and the
// small calls that need nothing else (devices, event names, ports).
#include <arpa/inet.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "uroce/cm_addr.h"
#include "uroce/runtime_dir.h"
#include "verbs_provider/rdmacm/rdmacm.h"


namespace uroce::rdmacm {

Library& library() {
  static Library* lib = new Library;  // never freed: ids may outlive static destructors
  return *lib;
}

// rdma-core opens every device once and shares the contexts between ids
// (ucma_init); each device's engine gets a CM session when an id first
// needs it.
int init(Library** out) {
  Library& lib = library();
  std::lock_guard<std::mutex> lock(lib.mu);
  *out = &lib;
  if (lib.initialized) return lib.init_err;
  lib.initialized = true;
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list || n == 0) {
    if (list) ibv_free_device_list(list);
    return lib.init_err = ENODEV;
  }
  lib.contexts = static_cast<ibv_context**>(calloc(size_t(n) + 1, sizeof(ibv_context*)));
  for (int i = 0; i < n; ++i) {
    ibv_context* c = ibv_open_device(list[i]);
    if (!c) continue;
    lib.contexts[lib.num_contexts++] = c;
    auto* e = new Engine;
    e->ctx = c;
    e->socket_path = engine_socket_path(runtime_dir(), ibv_get_device_name(list[i]));
    lib.engines.push_back(e);
  }
  ibv_free_device_list(list);
  if (!lib.num_contexts) return lib.init_err = ENODEV;
  return 0;
}

ibv_pd* device_pd(Engine* e) {
  std::lock_guard<std::mutex> lock(e->pd_mu);
  if (!e->default_pd) e->default_pd = ibv_alloc_pd(e->ctx);
  return e->default_pd;
}

ibv_xrcd* device_xrcd(Engine* e) {
  std::lock_guard<std::mutex> lock(e->pd_mu);
  if (!e->xrcd) {
    ibv_xrcd_init_attr attr{};
    attr.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
    attr.fd = -1;
    attr.oflags = O_CREAT;
    e->xrcd = ibv_open_xrcd(e->ctx, &attr);
  }
  return e->xrcd;
}

Engine* engine_for(const sockaddr* sa) {
  Library& lib = library();
  if (lib.engines.empty()) return nullptr;
  abi::CmAddr a{};
  if (sa && to_cm_addr(sa, &a) == 0) {
    // The engine one of whose GIDs is the address (IPv4 as ::ffff:a.b.c.d):
    // read afresh, as the GIDs follow a bound interface's addresses.
    uint8_t gid[16];
    gid_of(a, gid);
    for (Engine* e : lib.engines) {
      ibv_gid_entry entries[abi::kMaxGids];
      const ssize_t n = ibv_query_gid_table(e->ctx, entries, abi::kMaxGids, 0);
      for (ssize_t i = 0; i < n; ++i)
        if (std::memcmp(entries[i].gid.raw, gid, 16) == 0) return e;
    }
  }
  return lib.engines.front();
}

int call(Engine* e, abi::CtlOp op, const void* req, size_t len, void* rep, size_t rep_len, const int* fds,
         size_t nfds) {
  if (!e) return EINVAL;
  {
    std::lock_guard<std::mutex> lock(e->mu);
    if (e->pid != getpid()) {
      if (e->pid) e->conn.close_fd();  // a forked child's copy of its parent's socket
      e->pid = getpid();
      if (int err = e->conn.connect_to(e->socket_path.c_str())) {
        e->pid = 0;
        return err;
      }
    }
  }
  return e->conn.call(op, req, len, rep, rep_len, fds, nfds);
}

int to_cm_addr(const sockaddr* sa, abi::CmAddr* out) {
  *out = {};
  if (!sa) return 0;
  if (sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    out->family = AF_INET;
    out->port = in->sin_port;
    std::memcpy(out->addr, &in->sin_addr, 4);
    return 0;
  }
  if (sa->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    out->family = AF_INET6;
    out->port = in6->sin6_port;
    out->scope_id = in6->sin6_scope_id;
    std::memcpy(out->addr, &in6->sin6_addr, 16);
    return 0;
  }
  if (sa->sa_family == AF_IB) {  // its GID and its service ID as given
    const auto* ib = reinterpret_cast<const sockaddr_ib*>(sa);
    const uint64_t sid = be64toh(ib->sib_sid);
    out->family = AF_IB;
    out->port = htons(uint16_t(sid));
    out->scope_id = uint32_t(sid >> 16);
    std::memcpy(out->addr, ib->sib_addr.sib_raw, 16);
    return 0;
  }
  return EAFNOSUPPORT;
}

bool ib_wildcard(const uint8_t gid[16]) {
  return std::all_of(gid, gid + 15, [](uint8_t b) { return b == 0; }) && gid[15] <= 1;
}

// cma_select_ib_ps: the port space an AF_IB address's service ID names
// under its mask (an RDMA_PS_IB id may take any of rdma_cm's three, another
// id only its own) and the port (the service ID under the mask); the engine
// takes the port from that space.
int to_cm_bind_addr(rdma_port_space id_ps, const sockaddr* sa, abi::CmAddr* out) {
  if (int err = to_cm_addr(sa, out)) return err;
  if (!sa || sa->sa_family != AF_IB) return 0;
  const auto* ib = reinterpret_cast<const sockaddr_ib*>(sa);
  // A GID names no device on a RoCE port (cma_validate_port), before the
  // service ID is looked at; the zero GID and ::1 are wildcards (cma_any_addr).
  if (!ib_wildcard(ib->sib_addr.sib_raw)) return ENODEV;
  const uint64_t given_mask = be64toh(ib->sib_sid_mask);
  const uint64_t mask = given_mask & RDMA_IB_IP_PS_MASK;
  const uint64_t sid = be64toh(ib->sib_sid) & mask;
  constexpr uint64_t kPsIb = 0x013F0000;  // RDMA_IB_IP_PS_IB (the kernel's)
  for (const uint64_t space : {kPsIb, uint64_t(RDMA_IB_IP_PS_TCP), uint64_t(RDMA_IB_IP_PS_UDP)}) {
    const auto ps = rdma_port_space(space >> 16);
    if ((id_ps == RDMA_PS_IB || id_ps == ps) && sid == (space & mask)) {
      out->scope_id = uint32_t(ps);
      out->port = htons(uint16_t(be64toh(ib->sib_sid) & given_mask));
      return 0;
    }
  }
  return EPROTONOSUPPORT;
}

void from_cm_addr(const abi::CmAddr& a, sockaddr_storage* out) {
  std::memset(out, 0, sizeof(*out));
  if (a.family == AF_INET) {
    auto* in = reinterpret_cast<sockaddr_in*>(out);
    in->sin_family = AF_INET;
    in->sin_port = a.port;
    std::memcpy(&in->sin_addr, a.addr, 4);
  } else if (a.family == AF_INET6) {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(out);
    in6->sin6_family = AF_INET6;
    in6->sin6_port = a.port;
    in6->sin6_scope_id = a.scope_id;
    std::memcpy(&in6->sin6_addr, a.addr, 16);
  } else if (a.family == AF_IB) {
    // A bound address's service ID is whole (mask all ones, cma_bind_port);
    // a peer's has none (cma_save_ib_info). The default partition's P_Key.
    auto* ib = reinterpret_cast<sockaddr_ib*>(out);
    ib->sib_family = AF_IB;
    ib->sib_pkey = htobe16(0xffff);
    std::memcpy(ib->sib_addr.sib_raw, a.addr, 16);
    const uint64_t sid = uint64_t(a.scope_id) << 16 | ntohs(a.port);
    ib->sib_sid = htobe64(sid);
    ib->sib_sid_mask = sid ? htobe64(~uint64_t(0)) : 0;
  }
}

}  // namespace uroce::rdmacm

using namespace uroce::rdmacm;

RDMACM_EXPORT ibv_context** rdma_get_devices(int* num_devices) {
  Library* lib;
  const int err = init(&lib);
  const int n = err == ENODEV ? 0 : lib->num_contexts;
  auto** list = static_cast<ibv_context**>(calloc(size_t(n) + 1, sizeof(ibv_context*)));
  if (!list) {
    errno = ENOMEM;
    return nullptr;
  }
  for (int i = 0; i < n; ++i) list[i] = lib->contexts[i];
  if (num_devices) *num_devices = n;
  return list;
}

// The contexts stay open for every id that uses them (as rdma-core's).
RDMACM_EXPORT void rdma_free_devices(ibv_context** list) { free(list); }

RDMACM_EXPORT const char* rdma_event_str(rdma_cm_event_type event) {
  static const char* const kNames[] = {
      "RDMA_CM_EVENT_ADDR_RESOLVED",  "RDMA_CM_EVENT_ADDR_ERROR",      "RDMA_CM_EVENT_ROUTE_RESOLVED",
      "RDMA_CM_EVENT_ROUTE_ERROR",    "RDMA_CM_EVENT_CONNECT_REQUEST", "RDMA_CM_EVENT_CONNECT_RESPONSE",
      "RDMA_CM_EVENT_CONNECT_ERROR",  "RDMA_CM_EVENT_UNREACHABLE",     "RDMA_CM_EVENT_REJECTED",
      "RDMA_CM_EVENT_ESTABLISHED",    "RDMA_CM_EVENT_DISCONNECTED",    "RDMA_CM_EVENT_DEVICE_REMOVAL",
      "RDMA_CM_EVENT_MULTICAST_JOIN", "RDMA_CM_EVENT_MULTICAST_ERROR", "RDMA_CM_EVENT_ADDR_CHANGE",
      "RDMA_CM_EVENT_TIMEWAIT_EXIT"};
  const unsigned e = unsigned(event);
  return e < sizeof(kNames) / sizeof(kNames[0]) ? kNames[e] : "UNKNOWN EVENT";
}

namespace {
__be16 port_of(const sockaddr* sa) {
  if (sa->sa_family == AF_INET) return reinterpret_cast<const sockaddr_in*>(sa)->sin_port;
  if (sa->sa_family == AF_INET6) return reinterpret_cast<const sockaddr_in6*>(sa)->sin6_port;
  // AF_IB: the service ID's low 16 bits (librdmacm's ucma_get_port)
  if (sa->sa_family == AF_IB) return htobe16(uint16_t(be64toh(reinterpret_cast<const sockaddr_ib*>(sa)->sib_sid)));
  return 0;
}
}  // namespace

RDMACM_EXPORT __be16 rdma_get_src_port(rdma_cm_id* id) { return port_of(&id->route.addr.src_addr); }
RDMACM_EXPORT __be16 rdma_get_dst_port(rdma_cm_id* id) { return port_of(&id->route.addr.dst_addr); }
