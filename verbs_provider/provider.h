// The provider's objects. Each embeds the libibverbs struct as its first
// member (the context: a verbs_context), so the inline verbs in
// <infiniband/verbs.h> reach our ops, and to_*() converts back.
#pragma once

#include <infiniband/verbs.h>
#include <sys/socket.h>

#include <atomic>
#include <cstddef>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>

#include "uroce/abi.h"

#define UROCE_EXPORT extern "C" __attribute__((visibility("default")))

namespace uroce::provider {

// Mirrors rdma-core's struct verbs_device (driver.h): vendor checks such as
// mlx5dv_is_supported() read `ops` through verbs_get_device().
struct UDevice {
  ibv_device device;  // must be first
  const void* ops;    // &kUroceDeviceOps, never a vendor's ops table
  std::atomic<int> refcount;
  void* entry[2];
  void* sysfs;
  uint64_t core_support;
  // ours
  char socket_path[108];
  abi::DeviceInfo info;
  int index;
};

// What UDevice::ops points at: non-null and ours (vendor libraries compare
// verbs_device::ops with theirs); the drop-in libmlx5 tells uroce's devices
// by its name.
struct UroceDeviceOps {
  const char* name;
};
inline constexpr char kUroceDeviceOpsName[] = "uroce";
// A device of ours (a UDevice), as the drop-in libmlx5 checks one it is given.
inline bool is_uroce_device(const ibv_device* d) {
  const void* ops = d ? reinterpret_cast<const UDevice*>(d)->ops : nullptr;
  const char* name = ops ? static_cast<const UroceDeviceOps*>(ops)->name : nullptr;
  return name && __builtin_strcmp(name, kUroceDeviceOpsName) == 0;
}

// Control channel to the engine: one request, one reply, fds alongside.
class Connection {
 public:
  int fd() const { return fd_; }
  // Returns 0 or an errno (EIO once the engine is gone).
  int connect_to(const char* path);
  // Returns 0, or an errno it also leaves in errno (as a refused command
  // system call does).
  int call(abi::CtlOp op, const void* req, size_t req_len, void* rep, size_t rep_len,
           const int* fds_in = nullptr, size_t nfds_in = 0, int* fds_out = nullptr,
           size_t nfds_out = 0);
  void close_fd();
  // In a forked child, before anything else runs: the parent's socket is
  // closed and must never be written again, even if its number is reused.
  void drop_fd_after_fork() { fd_ = -1; }
  // The text the engine sent with the last failed call's status, if any
  // (e.g. why it refuses this user).
  const std::string& error_text() const { return error_text_; }
  // Another descriptor of `sibling`'s socket (ibv_import_device): the two
  // take turns on it, so neither reads the other's reply.
  void adopt(int fd, const Connection& sibling) {
    fd_ = fd;
    mu_ = sibling.mu_;
  }

 private:
  int exchange(abi::CtlOp op, const void* req, size_t req_len, void* rep, size_t rep_len, const int* fds_in,
               size_t nfds_in, int* fds_out, size_t nfds_out);
  // The reply to a request, or -1 when none is there: a refused client may
  // find the engine's answer waiting even though it hung up before the
  // request went out.
  ssize_t receive(void* buf, size_t len, void* cbuf, size_t clen, msghdr* msg, int flags);

  std::shared_ptr<std::mutex> mu_ = std::make_shared<std::mutex>();
  int fd_ = -1;
  std::string error_text_;
};

// Says on stderr, once per engine socket (or directory) and process, that
// an engine refuses this user: `engine_text` is the engine's reason, empty
// when the socket's mode kept us out before the engine could say.
void warn_refused(const std::string& sock, const std::string& engine_text);
// Says on stderr, once per process, that no engine runs in the runtime
// directory it looked in.
void warn_no_engine(const std::string& runtime_dir);

struct UMr;

struct GidTable {
  abi::GidEntry gids[abi::kMaxGids];
  uint32_t ndev_ifindex;
};

struct UContext {
  verbs_context vctx;  // ibv_context is its last member
  UDevice* dev;
  Connection conn;
  abi::DeviceInfo info;
  const abi::EngineShared* shared;
  int doorbell_fd;
  std::atomic<bool> engine_gone;
  std::atomic<bool> fatal_reported;
  // In a forked child: the child's own session for device memory
  // (device_memory.cc), opened on first use.
  bool forked_child = false;
  GidTable gids_at_fork{};  // taken by the parent's fork handler
  std::mutex child_mu;
  Connection* child_session = nullptr;
  // Its MRs by lkey, for ibv_advise_mr (pd_mr.cc, odp.cc).
  std::mutex mrs_mu;
  std::unordered_map<uint32_t, UMr*> mrs;
  // Its live objects that async events name (QPs, CQs, SRQs, WQs), by the
  // cookie the engine was given, each with how many of its events
  // ibv_get_async_event returned (context.cc: track_async_events). Shared
  // with the contexts imported on its session, which share its events.
  struct AsyncEventTargets {
    std::mutex mu;
    std::unordered_map<uint64_t, uint32_t> reported;
  };
  std::shared_ptr<AsyncEventTargets> events = std::make_shared<AsyncEventTargets>();
  // A vendor library's state for this context (the drop-in libmlx5's
  // non-cached UAR page), set once and freed with the context.
  std::atomic<void*> vendor{nullptr};
  void (*vendor_free)(void*) = nullptr;

  void ring_doorbell() const {
    // Pairs with the engine's fence between setting `sleeping` and its last look.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (shared->sleeping.load(std::memory_order_relaxed)) {
      uint64_t one = 1;
      [[maybe_unused]] ssize_t n = ::write(doorbell_fd, &one, sizeof(one));
    }
  }
};

// mlx5 mode (abi::kMlx5VendorId): libmlx5's MLX_CQ_ALLOC_TYPE,
// MLX_QP_ALLOC_TYPE and MLX_SRQ_ALLOC_TYPE set to HUGE put a queue's buffer
// in huge pages and fail its creation when there are none (rdma-core
// providers/mlx5/buf.c, mlx5_alloc_prefered_buf). uroce's queues are the
// engine's shared memory in ordinary pages, never huge ones, so HUGE fails
// the creation with ENOMEM; PREFER_HUGE and the others fall back to
// ordinary pages, as mlx5's do. False (and errno untouched) otherwise.
inline bool refuse_huge_queue(const UContext* c, const char* alloc_type_env) {
  if (c->info.vendor_id != abi::kMlx5VendorId) return false;
  const char* v = std::getenv(alloc_type_env);
  if (!v || __builtin_strcmp(v, "HUGE") != 0) return false;
  errno = ENOMEM;
  return true;
}

// The GID table as the engine has it now: it follows the bound interface's
// addresses (abi::EngineShared, a seqlock), so every query reads it afresh
// (a forked child, without the shared page: the table at fork()).
GidTable read_gid_table(const UContext* c);

// Moves the calling thread, once, off the CPU the context's engine polls on
// when `uroce run` asked for it (verbs_provider/placement.cc).
void place_polling_thread(const UContext* ctx);

// As the kernel does for libibverbs: an object is tracked from its creation;
// an event read for an object no longer tracked (destroyed with the event
// unread) is dropped; and a destroy, once the engine has destroyed the
// object, waits until every event returned for it is acknowledged (*completed
// counts the acks, under mutex, signalled on cond: ibv_ack_async_event), so
// that an ack from another thread never reaches freed memory (UCX's async
// thread: heap-use-after-free under tests/sanitize.sh).
// Tracking starts before the engine makes the object (false: no memory for
// it, ENOMEM); a creation that fails after it forgets the object again.
bool track_async_events(UContext* c, const void* cookie) noexcept;
void forget_async_events(UContext* c, const void* cookie) noexcept;
void untrack_async_events(UContext* c, const void* cookie, pthread_mutex_t* mutex, pthread_cond_t* cond,
                          const uint32_t* completed);

inline UContext* to_uctx(ibv_context* c) {
  return reinterpret_cast<UContext*>(reinterpret_cast<uint8_t*>(c) - offsetof(verbs_context, context));
}

// Objects send the `handle` of their ibv_* struct (as the kernel providers
// do) and their `context` says which connection.
struct UTd;

// A protection domain, or a parent domain (ibv_alloc_parent_domain) over
// one: it carries its PD's handle, so everything created on it is the PD's
// in the engine (libibverbs' ibv_initialize_parent_domain does the same),
// and adds the application's allocator and thread domain (domains.cc).
struct UPd {
  ibv_pd pd;
  // 1 + what holds it, as mlx5_pd's refcount: a PD's parent domains, a
  // parent domain's QPs, CQs and SRQs; ibv_dealloc_pd is EBUSY above 1.
  std::atomic<int> refcount{1};
  UPd* protection_domain = nullptr;  // set: this is a parent domain over it
  UTd* td = nullptr;
  void* (*alloc)(ibv_pd*, void*, size_t, size_t, uint64_t) = nullptr;
  void (*free)(ibv_pd*, void*, void*, uint64_t) = nullptr;
  void* pd_context = nullptr;
};
inline UPd* to_upd(ibv_pd* pd) { return reinterpret_cast<UPd*>(pd); }

// A thread domain: the promise that one thread at a time uses the QPs and
// CQs of its parent domains. mlx5 gives such a QP a doorbell register of its
// own and drops its locks; uroce has no per-thread doorbell resource and
// keeps its locks (uncontended, they cost little), so a TD changes nothing
// but the reference counts (domains.cc).
struct UTd {
  ibv_td td;
  std::atomic<int> refcount{1};  // 1 + parent domains on it
};

// Where a queue's provider-side state (UQp, UCq, USrq: ring cursors, locks,
// batch state) came from: a parent domain's allocator, as mlx5 takes its
// queue buffers from it, or operator new (domains.cc).
struct QueueMemory {
  UPd* parent = nullptr;  // the parent domain it was made on, held
  bool from_app = false;  // its alloc callback gave the memory
};
// Resource types passed to the allocator: mlx5dv's values (mlx5dv.h
// MLX5DV_RES_TYPE_*), so an allocator written for mlx5 sees the kinds it knows.
constexpr uint64_t kResourceTypeQp = uint64_t(1) << 32 | 1;
constexpr uint64_t kResourceTypeSrq = uint64_t(1) << 32 | 4;
constexpr uint64_t kResourceTypeCq = uint64_t(1) << 32 | 5;
// Memory for one T, from pd's allocator when pd is a parent domain with one
// (holding the parent domain), else from operator new; nullptr when the
// allocator refuses (errno ENOMEM). The object is value-initialised.
// Aligned to a cache line, its locks and cursors apart from other objects'.
constexpr size_t kQueueObjectAlign = 64;
void* alloc_queue_memory(ibv_pd* pd, size_t size, uint64_t type, QueueMemory* out);
void free_queue_memory(void* p, const QueueMemory& m, uint64_t type);
template <typename T>
T* new_queue_object(ibv_pd* pd, uint64_t type) {
  static_assert(alignof(T) <= kQueueObjectAlign);
  QueueMemory m;
  void* p = alloc_queue_memory(pd, sizeof(T), type, &m);
  if (!p) return nullptr;
  T* obj;
  try {
    obj = new (p) T{};  // its members may allocate (USrq's std::deque does)
  } catch (const std::bad_alloc&) {
    free_queue_memory(p, m, type);
    errno = ENOMEM;
    return nullptr;
  }
  obj->qmem = m;
  return obj;
}
template <typename T>
void delete_queue_object(T* obj, uint64_t type) {
  const QueueMemory m = obj->qmem;
  obj->~T();
  free_queue_memory(obj, m, type);
}
// The parent domain a CQ is created on (IBV_CQ_INIT_ATTR_MASK_PD).
bool is_parent_domain(ibv_pd* pd);

struct UMr {
  ibv_mr mr;
  uint64_t shared_lease;  // its pages on a memfd (shared_pages.h), 0: none
  uint64_t iova;          // what its SGEs and the peer address
  unsigned access;        // enum ibv_access_flags
};

struct UChannel {
  ibv_comp_channel ch;
  int write_fd;  // our copy, to raise an event at arm time (see req_notify_cq)
  uint64_t handle;
};

// Client view of one shared-memory ring.
struct URing {
  abi::QueueHeader* hdr = nullptr;
  uint8_t* entries = nullptr;
  uint32_t log2 = 0;
  uint32_t stride = 0;
  uint32_t prod = 0;  // our producer (SQ/RQ) or consumer (CQ) index
  uint32_t mask() const { return (1u << log2) - 1; }
  uint32_t size() const { return 1u << log2; }
  uint8_t* slot(uint32_t i) const { return entries + size_t(i & mask()) * stride; }
  void attach(uint8_t* at) {
    hdr = reinterpret_cast<abi::QueueHeader*>(at);
    entries = at + abi::kQueueEntriesOffset;
  }
};

struct UCq {
  ibv_cq_ex ex;  // ibv_cq is its prefix
  UContext* ctx;
  void* map;
  size_t map_size;
  URing ring;  // ring.prod is our consumer index
  std::mutex mu;
  UChannel* channel;
  uint64_t wc_flags;  // ibv_create_cq_ex: fields the reader may ask for
  abi::Cqe cur;       // the entry start_poll/next_poll stand on
  uint64_t last_wallclock_ns = 0;  // wall clocks read from this CQ never step back
  bool extended = false;  // made by ibv_create_cq_ex (a TM-SRQ needs one, as on mlx5)
  QueueMemory qmem;
  // A vendor library's state for this CQ (the drop-in libmlx5's), set once
  // and freed with the CQ through vendor_free; and once that library has
  // put the CQ's ring in its own format (mlx5dv_init_obj), how the pollers
  // read it (vendor_take: the next entry, ENOENT if none; vendor_consumed:
  // tell the device how far; both with mu held) and how it is armed.
  std::atomic<void*> vendor{nullptr};
  void (*vendor_free)(void*) = nullptr;
  int (*vendor_take)(UCq* cq, abi::Cqe* out) = nullptr;
  void (*vendor_consumed)(UCq* cq) = nullptr;
  int (*vendor_arm)(UCq* cq, int solicited_only) = nullptr;
};

inline UCq* to_ucq(ibv_cq* cq) { return reinterpret_cast<UCq*>(cq); }
inline UCq* to_ucq(ibv_cq_ex* cq) { return reinterpret_cast<UCq*>(cq); }

struct UAh {
  ibv_ah ah;
  abi::AddressVector av;
  // A vendor library's view of the address, which it hands to programs
  // (the drop-in libmlx5's mlx5_wqe_av, mlx5dv_init_obj): filled by it,
  // freed with the AH.
  alignas(16) uint8_t vendor_av[48];
};

struct UQp {
  ibv_qp_ex qpx;  // ibv_qp is its prefix
  UContext* ctx;
  uint32_t qpn;
  void* map;
  size_t map_size;
  URing sq, rq;
  std::mutex sq_mu, rq_mu;
  abi::QpCaps caps;
  bool sq_sig_all;
  // ibv_wr_* batch state (between wr_start and wr_complete/wr_abort).
  uint32_t batch_start;
  abi::SendWqe* batch_cur;
  int batch_err;
  bool has_srq;  // receives come from an SRQ: ibv_post_recv is refused
  bool opened;   // from ibv_open_qp: no queues of its own
  QueueMemory qmem;
  bool rss;      // an RSS QP (wq.cc): no queues, no state machine
  // A vendor library's state for this QP (the drop-in libmlx5's
  // mlx5dv_qp_ex), set once and freed with the QP through vendor_free.
  std::atomic<void*> vendor;
  void (*vendor_free)(void*);
  // The send queue is in the vendor's format and the program writes it
  // (mlx5dv_init_obj): the verbs post nothing to it (set with sq_mu held).
  bool sq_vendor_owned;
  // Likewise the receive queue (set with rq_mu held).
  bool rq_vendor_owned;
};

inline UQp* to_uqp(ibv_qp* qp) { return reinterpret_cast<UQp*>(qp); }

// IBV_SRQT_TM: the provider's side of the list-operation ring
// (abi::TmOpsHeader) and the tag handles it allocates, as mlx5 does.
struct UTmRing {
  void* map = nullptr;
  size_t map_size = 0;
  abi::TmOpsHeader* hdr = nullptr;
  abi::SrqOp* ops = nullptr;
  const uint32_t* freed = nullptr;
  uint32_t ops_mask = 0, freed_mask = 0;
  uint32_t max_num_tags = 0, max_ops = 0;
  uint32_t prod = 0;        // ops written
  uint32_t freed_seen = 0;  // handles taken back from the freed ring
  uint32_t request = 0;     // last request for an answer
  std::deque<uint32_t> free_handles;  // FIFO: a handle given back is reused last
};

struct USrq {
  ibv_srq srq;
  UContext* ctx;
  uint32_t srqn;
  ibv_srq_type type;
  void* map;
  size_t map_size;
  URing ring;
  std::mutex mu;
  uint32_t max_wr, max_sge;
  UTmRing tm;
  QueueMemory qmem;
  // The WQEs in a vendor's format, which the program writes (the drop-in
  // libmlx5's mlx5dv_init_obj): their mapping, unmapped with the SRQ, and
  // its geometry; the verbs post nothing to it (set with mu held).
  void* vendor_map;
  size_t vendor_map_size;
  uint32_t vendor_wqe_cnt, vendor_stride;
};
int post_srq_ops(ibv_srq* srq, ibv_ops_wr* op, ibv_ops_wr** bad_op);

inline USrq* to_usrq(ibv_srq* s) { return reinterpret_cast<USrq*>(s); }

// A receive work queue (verbs_provider/wq.cc).
struct UWq {
  ibv_wq wq;
  UContext* ctx;
  void* map;
  size_t map_size;
  URing ring;
  std::mutex mu;
  uint32_t max_sge;
  // Its WQEs in a vendor's format, which the program writes (the drop-in
  // libmlx5's mlx5dv_init_obj on an RWQ), as USrq's.
  void* vendor_map = nullptr;
  size_t vendor_map_size = 0;
  uint32_t vendor_wqe_cnt = 0, vendor_stride = 0;
};
inline UWq* to_uwq(ibv_wq* w) { return reinterpret_cast<UWq*>(w); }

struct UXrcd {
  ibv_xrcd xrcd;
  uint64_t handle;
};
inline UQp* to_uqp(ibv_qp_ex* qp) { return reinterpret_cast<UQp*>(qp); }

// Shared helpers.
int errno_from_call(int err);  // maps transport failures to EIO
void* map_queue(int fd, size_t size);
void unmap_queue(void* p, size_t size);
void fill_qp_ex_ops(UQp* qp);
int post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr);
int post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);
int poll_cq(ibv_cq* cq, int num_entries, ibv_wc* wc);
int req_notify_cq(ibv_cq* cq, int solicited_only);
void fill_cq_ex_ops(UCq* cq);
// Drops a QP's unpolled completions from a CQ (modify to RESET, as mlx5 does).
void cq_clean(ibv_cq* cq, uint32_t qpn);
ibv_cq_ex* create_cq_ex(ibv_context* ctx, ibv_cq_init_attr_ex* attr);
ibv_qp* create_qp_ex(ibv_context* ctx, ibv_qp_init_attr_ex* attr);
int query_device_ex(ibv_context* ctx, const ibv_query_device_ex_input* input,
                    ibv_device_attr_ex* attr, size_t attr_size);
int query_port(ibv_context* ctx, uint8_t port, ibv_port_attr* attr, size_t attr_len);
void to_abi_av(const ibv_ah_attr& in, abi::AddressVector* out);
ibv_srq* create_srq_ex(ibv_context* ctx, ibv_srq_init_attr_ex* attr);
int post_srq_recv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);
int get_srq_num(ibv_srq* srq, uint32_t* srq_num);
ibv_xrcd* open_xrcd(ibv_context* ctx, ibv_xrcd_init_attr* attr);
int close_xrcd(ibv_xrcd* xrcd);
ibv_qp* open_qp(ibv_context* ctx, ibv_qp_open_attr* attr);
// Memory windows (pd_mr.cc): the context's alloc_mw, dealloc_mw, bind_mw.
ibv_mw* alloc_mw(ibv_pd* pd, ibv_mw_type type);
int dealloc_mw(ibv_mw* mw);
int bind_mw(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* mw_bind);
// Receive WQs, indirection tables (wq.cc): the context's ops; an RSS QP
// for create_qp_ex when it has an indirection table.
void fill_wq_ops(verbs_context* v);
ibv_qp* create_rss_qp(ibv_context* ctx, ibv_qp_init_attr_ex* attr);
// Flow steering (flow.cc): ibv_create_flow / ibv_destroy_flow.
void fill_flow_ops(verbs_context* v);
// Thread and parent domains (domains.cc): the context's alloc_td,
// dealloc_td, alloc_parent_domain; ibv_dealloc_pd of a parent domain.
ibv_td* alloc_td(ibv_context* ctx, ibv_td_init_attr* attr);
int dealloc_td(ibv_td* td);
ibv_pd* alloc_parent_domain(ibv_context* ctx, ibv_parent_domain_init_attr* attr);
int dealloc_parent_domain(UPd* pd);
// Device memory (device_memory.cc): alloc_dm, free_dm, reg_dm_mr. Its
// bytes are shared memory mapped here (map), which mlx5dv_init_obj hands
// out as mlx5dv_dm::buf (verbs_provider/mlx5/).
struct UDm {
  ibv_dm dm;  // must be first
  Connection* conn = nullptr;  // the session it was allocated in
  uint8_t* map = nullptr;
  size_t map_length = 0;
  uint64_t length = 0;  // what was asked for: the bounds of copies and MRs
};
inline UDm* to_udm(ibv_dm* dm) { return reinterpret_cast<UDm*>(dm); }

void fill_dm_ops(verbs_context* v);
// On-demand paging (odp.cc).
void fill_odp_caps(ibv_device_attr_ex* attr);
int advise_mr(ibv_pd* pd, ibv_advise_mr_advice advice, uint32_t flags, ibv_sge* sg_list,
              uint32_t num_sge);

}  // namespace uroce::provider
