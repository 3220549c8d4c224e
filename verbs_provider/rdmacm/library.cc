// The library's devices and its connection to the engine's CM agent, and the
// small calls that need nothing else (devices, event names, ports).
#include <arpa/inet.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "uroce/runtime_dir.h"
#include "verbs_provider/rdmacm/rdmacm.h"

#define RDMACM_EXPORT extern "C" __attribute__((visibility("default")))

namespace uroce::rdmacm {

Library& library() {
  static Library* lib = new Library;  // never freed: ids may outlive static destructors
  return *lib;
}

// rdma-core opens every device once and shares the contexts between ids
// (ucma_init). The CM engine is the first device's: one engine per process
// in this slice.
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
  for (int i = 0; i < n; ++i)
    if (ibv_context* c = ibv_open_device(list[i])) lib.contexts[lib.num_contexts++] = c;
  const std::string name = lib.num_contexts ? ibv_get_device_name(lib.contexts[0]->device) : "";
  ibv_free_device_list(list);
  if (!lib.num_contexts) return lib.init_err = ENODEV;
  lib.cm_ctx = lib.contexts[0];
  lib.socket_path = engine_socket_path(runtime_dir(), name);
  lib.pid = getpid();
  if (int err = lib.conn.connect_to(lib.socket_path.c_str())) return lib.init_err = err;
  return 0;
}

provider::Connection& connection() {
  Library& lib = library();
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  if (lib.pid && lib.pid != getpid()) {
    lib.conn.close_fd();  // the child's copy of the parent's socket
    lib.pid = getpid();
    lib.conn.connect_to(lib.socket_path.c_str());  // failing: calls fail with EIO
  }
  return lib.conn;
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
  return EAFNOSUPPORT;  // AF_IB is not served
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
  return 0;
}
}  // namespace

RDMACM_EXPORT __be16 rdma_get_src_port(rdma_cm_id* id) { return port_of(&id->route.addr.src_addr); }
RDMACM_EXPORT __be16 rdma_get_dst_port(rdma_cm_id* id) { return port_of(&id->route.addr.dst_addr); }
