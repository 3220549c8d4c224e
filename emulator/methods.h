// The control operations: one handler per abi::CtlOp, grouped by object in
// methods_*.cc, and one table (methods.cc) that states what each request
// carries: its body size, how many file descriptors, and which of its fields
// are object handles. The session checks all of that once, for every
// operation, before any handler runs (the kernel's uverbs method tables:
// drivers/infiniband/core/uverbs_std_types_*.c, DECLARE_UVERBS_NAMED_METHOD).
#pragma once

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include "uroce/abi.h"

namespace uroce::device {
class Device;
struct Owner;
}  // namespace uroce::device

namespace uroce::emulator {

class Engine;
class ObjectTable;

// The object types a handle may name (the kernel's UVERBS_OBJECT_*).
enum class ObjType : uint8_t { kNone, kPd, kMr, kCompChannel, kCq, kQp, kSrq, kXrcd, kAh, kMw, kFlow, kDm, kWq, kRwqIndTable, kMkey, kCount };

// One request handed to a handler: its body (already checked against the
// table, handles already resolved to device ids), its fds, and the reply the
// handler builds. Fds the handler does not take are closed after it returns.
struct Call {
  Engine& engine;
  device::Device& dev;
  device::Owner& owner;
  ObjectTable& objects;  // the session's handles: creators add theirs
  const uint8_t* body;  // at least the method's request size, zero padded
  uint32_t len;         // bytes the client sent
  std::vector<int>& fds;
  // The handles as the client sent them, in the order of the method's
  // HandleAttr list (body holds the device ids they resolved to).
  std::array<uint64_t, 5> client_handles{};

  // Reply.
  alignas(8) uint8_t rep[abi::kMaxCtlMsg - sizeof(abi::CtlReplyHeader)];
  uint32_t rep_len = 0;
  int out_fds[abi::kMaxCtlFds];
  bool close_out[abi::kMaxCtlFds];  // the engine's copy is closed once sent
  size_t nout = 0;

  template <typename T>
  T request() const {
    T t;
    std::memcpy(&t, body, sizeof(T));
    return t;
  }
  // The request fd at index i, now the handler's (-1 if none).
  int take_fd(size_t i) {
    if (i >= fds.size()) return -1;
    const int fd = fds[i];
    fds[i] = -1;
    return fd;
  }
  template <typename T>
  int reply(const T& body) {
    static_assert(sizeof(T) <= sizeof(rep));
    std::memcpy(rep, &body, sizeof(T));
    rep_len = sizeof(T);
    return 0;
  }
  // A text body (status, stats, or why an operation failed), cut to fit.
  void reply_text(std::string_view text) {
    rep_len = uint32_t(std::min(text.size(), sizeof(rep)));
    std::memcpy(rep, text.data(), rep_len);
  }
  // An fd sent with a successful reply; close_after: the engine lets go of
  // its copy once it is sent.
  void pass_fd(int fd, bool close_after) {
    out_fds[nout] = fd;
    close_out[nout] = close_after;
    ++nout;
  }
};

// Returns 0 or the errno of the reply.
using Handler = int (*)(Call&);

// A request field that names an object of the calling session.
struct HandleAttr {
  uint16_t offset = 0;   // of a uint64_t in the request body
  ObjType type = ObjType::kNone;
  bool optional = false;  // 0 means "none" and is allowed
  // What a handle that names no live object of this type and session gets.
  // The kernel's lookup (rdma_lookup_get_uobject) gives ENOENT, and so do the
  // ioctl methods rdma-core uses to create CQs, QPs and SRQs and to destroy
  // anything; the write() commands that take an object they do not destroy
  // turn a failed lookup into EINVAL (ib_uverbs_reg_mr, ib_uverbs_modify_qp,
  // ib_uverbs_resize_cq, ...: "if (!pd) { ret = -EINVAL; ...").
  uint8_t missing_errno = ENOENT;
  // The method destroys the object: once it succeeded the handle is gone.
  bool destroys = false;
};

enum class SizeRule : uint8_t { kExact, kUpTo };

// What the fds of a request must be (the provider never sends another kind):
// a pipe (the async event pipe, a completion channel), a regular file (a
// memfd, which the device checks further), or any file (an XRC domain's).
enum class FdKind : uint8_t { kAny, kPipe, kRegularFile };

struct Method {
  const char* name = nullptr;  // nullptr: no such operation (EOPNOTSUPP)
  Handler handler = nullptr;
  uint32_t req_size = 0;
  SizeRule size_rule = SizeRule::kExact;
  uint8_t min_fds = 0, max_fds = 0;
  FdKind fd_kind = FdKind::kAny;
  std::array<HandleAttr, 5> handles{};
  uint8_t num_handles = 0;
  // It changes the engine for every client (fault injection, capture, the
  // port state): its owner's and root's alone (emulator/access.h).
  bool engine_wide = false;
};

// The method of an operation code, or nullptr.
const Method* find_method(uint32_t op);

// ---- handlers, by object ----
// methods_device.cc: connection, device and port
int hello(Call& c);
int query_device(Call& c);
int query_port(Call& c);
int set_port_state(Call& c);
// methods_pd_mr.cc
int alloc_pd(Call& c);
int dealloc_pd(Call& c);
int reg_mr(Call& c);
int rereg_mr(Call& c);
int dereg_mr(Call& c);
int alloc_mw(Call& c);
int dealloc_mw(Call& c);
int create_mkey(Call& c);
int destroy_mkey(Call& c);
int import_pd(Call& c);
int import_mr(Call& c);
// methods_dm.cc: device memory
int alloc_dm(Call& c);
int free_dm(Call& c);
int reg_dm_mr(Call& c);
int import_dm(Call& c);
// methods_cq.cc: completion channels and CQs
int create_comp_channel(Call& c);
int destroy_comp_channel(Call& c);
int create_cq(Call& c);
int resize_cq(Call& c);
int destroy_cq(Call& c);
int mlx5_cq_format(Call& c);
int mlx5_qp_format(Call& c);
int mlx5_qp_dc(Call& c);
int dci_stream_reset(Call& c);
int mlx5_srq_format(Call& c);
// methods_qp.cc
int create_qp(Call& c);
int modify_qp(Call& c);
int query_qp(Call& c);
int set_qp_udp_sport(Call& c);
int destroy_qp(Call& c);
// methods_srq_xrc.cc: SRQs, XRC domains and opened XRC target QPs
int create_srq(Call& c);
int modify_srq(Call& c);
int query_srq(Call& c);
int destroy_srq(Call& c);
int open_xrcd(Call& c);
int close_xrcd(Call& c);
int open_qp(Call& c);
// methods_flow.cc: flow steering rules
int create_flow(Call& c);
int destroy_flow(Call& c);
// methods_mcast.cc
int attach_mcast(Call& c);
int detach_mcast(Call& c);
// methods_wq.cc: receive WQs, indirection tables, RSS QPs
int create_wq(Call& c);
int modify_wq(Call& c);
int mlx5_wq_format(Call& c);
int destroy_wq(Call& c);
int create_rwq_ind_table(Call& c);
int destroy_rwq_ind_table(Call& c);
int create_rss_qp(Call& c);
// methods_ah.cc
int create_ah(Call& c);
int destroy_ah(Call& c);
// methods_cm.cc: the connection manager (librdmacm)
int cm_create_channel(Call& c);
int cm_destroy_channel(Call& c);
int cm_create_id(Call& c);
int cm_destroy_id(Call& c);
int cm_bind(Call& c);
int cm_resolve_addr(Call& c);
int cm_resolve_route(Call& c);
int cm_listen(Call& c);
int cm_connect(Call& c);
int cm_accept(Call& c);
int cm_reject(Call& c);
int cm_establish(Call& c);
int cm_disconnect(Call& c);
int cm_migrate(Call& c);
// methods_tools.cc: what the uroce command asks
int set_fault(Call& c);
int capture(Call& c);
int status(Call& c);
int stats(Call& c);
int report(Call& c);

}  // namespace uroce::emulator
