// The drop-in librdmacm.so.1: rdma-core's rdma_* API on uroce. The engine's
// CM agent (cm/cm_agent.h) keeps the ids and carries the connection
// messages; this library keeps each id's local state, turns the engine's
// event records into struct rdma_cm_event, and moves QPs through their
// states with the attributes rdma_init_qp_attr computes, as rdma-core's
// librdmacm does with the kernel's (librdmacm/cma.c, ucma_modify_qp_*).
#pragma once

#include <infiniband/ib.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "uroce/abi.h"
#include "verbs_provider/provider.h"

// librdmacm's exported functions (librdmacm.map gives their versions).
#define RDMACM_EXPORT extern "C" __attribute__((visibility("default")))

namespace uroce::rdmacm {

// An event channel: the read end of the pipe the engine writes records to.
struct Engine;

// Never freed: a thread still blocked reading a destroyed channel wakes at
// the hang-up and must find it marked (see rdma_get_cm_event).
struct Channel {
  rdma_event_channel ch;  // must be first: applications read ch.fd
  int write_fd = -1;      // ours, handed to each engine an id of it uses
  std::unordered_map<Engine*, uint64_t> handles;  // the channel in each engine (under Library::mu)
  std::atomic<bool> destroyed{false};
};

// One engine (device) and this process's CM session with it, opened on
// first use. An id lives in the engine of its address.
struct Engine {
  ibv_context* ctx = nullptr;
  std::string socket_path;
  provider::Connection conn;
  pid_t pid = 0;  // the process conn was opened by (0: not yet)
  std::mutex mu;  // pid and conn's (re)opening
  ibv_pd* default_pd = nullptr;  // see device_pd()
  ibv_xrcd* xrcd = nullptr;      // see device_xrcd()
  std::mutex pd_mu;               // default_pd's and xrcd's allocation
};

// The device's PD of ids that bring none, allocated on first use: an id
// bound to a device has it as id->pd, as rdma-core's ucma_get_device gives
// cma_dev->pd (pyverbs makes its CMID's PD, and AHs and QPs on it, from it).
ibv_pd* device_pd(Engine* e);
// The device's XRC domain of XRC QPs and SRQs that bring none (ucma_get_xrcd).
ibv_xrcd* device_xrcd(Engine* e);

struct Id {
  rdma_cm_id id{};  // must be first
  Engine* engine = nullptr;  // nullptr until bound, resolved or listening
  uint64_t handle = 0;       // the id in its engine
  bool sync = false;   // made without a channel: each call waits for its event
  uint32_t psn = 0;    // the Starting PSN our REQ/REP carries: our receive queue's
  uint8_t gid_index = 0;
  // rdma_set_option
  uint8_t tos = 0;
  uint8_t ack_timeout = 0;  // 0: the default
  bool reuseaddr = false, afonly = false;
  // This side's connection parameters (rdma_connect / rdma_accept, or the
  // request's when accepting without any).
  uint8_t responder_resources = 0, initiator_depth = 0;
  uint8_t retry_count = 7, rnr_retry_count = 7;
  // The peer's, from its REQ or REP.
  bool have_peer = false;
  uint32_t peer_qpn = 0, peer_psn = 0, peer_qkey = 0;
  uint8_t peer_gid[16] = {};
  // rdma_create_ep with RAI_PASSIVE: what rdma_get_request gives each request.
  ibv_pd* ep_pd = nullptr;
  bool ep_has_qp_attr = false;
  ibv_qp_init_attr ep_qp_attr{};
  // CQs and channels rdma_create_qp made because the caller gave none.
  bool own_send_cq = false, own_recv_cq = false;
  bool xrc_srq = false;  // id->srq is an XRC SRQ on the receive CQ: the CQ goes with it
  ibv_sa_path_rec path{};
  ibv_ece local_ece{}, remote_ece{};
  // Multicast groups joined (verbs_provider/rdmacm/multicast.cc).
  struct Group {
    sockaddr_storage addr;
    ibv_gid mgid;
    void* context;
    bool send_only;
    bool attached;  // its QP is in the group
  };
  std::vector<Group> groups;
};

inline Id* to_id(rdma_cm_id* id) { return reinterpret_cast<Id*>(id); }

// The longest private data an event reports: a REP's (what the engine
// carries).
constexpr size_t kMaxReportedPrivateData = abi::kCmMaxPrivateData;

struct Event {
  rdma_cm_event ev;  // must be first
  uint8_t private_data[kMaxReportedPrivateData];
};

// The library's state: the devices (opened once, shared by every id as in
// rdma-core) and their engines.
struct Library {
  std::mutex mu;  // ids, channels' engine handles, and each operation with its event's effect
  bool initialized = false;
  int init_err = 0;
  ibv_context** contexts = nullptr;  // NULL-terminated
  int num_contexts = 0;
  std::vector<Engine*> engines;  // one per context, in order
  // Engines number their ids apart (each starts at a random point), so
  // one map serves every engine's events.
  std::unordered_map<uint64_t, Id*> ids;
};

// Opens the devices once; 0 or an errno.
int init(Library** lib);
Library& library();
// The engine whose address `addr` is (its --ip or --ip6), else the first
// (the loopback addresses and wildcards: every engine answers those).
Engine* engine_for(const sockaddr* addr);
// A control call on the engine's CM session. A forked child opens a session
// of its own (sharing the parent's socket would cross the replies of the
// two processes; the child's connections end when it does).
int call(Engine* e, abi::CtlOp op, const void* req, size_t len, void* rep = nullptr, size_t rep_len = 0,
         const int* fds = nullptr, size_t nfds = 0);

// -1 with errno set, as every rdma_* call fails.
inline int fail(int err) {
  errno = err;
  return -1;
}

// Socket addresses to and from the engine's form (AF_IB: abi::CmAddr's).
int to_cm_addr(const sockaddr* sa, abi::CmAddr* out);
// Is an AF_IB address's GID a wildcard (the zero GID or ::1: cma_any_addr)?
bool ib_wildcard(const uint8_t gid[16]);
// An address to bind an id of port space ps to: an AF_IB one's service ID
// under its mask names the port space and port (EPROTONOSUPPORT if none);
// an AF_IB GID that is no wildcard is ENODEV (a RoCE port's rdma_cm).
int to_cm_bind_addr(rdma_port_space ps, const sockaddr* sa, abi::CmAddr* out);
void from_cm_addr(const abi::CmAddr& a, sockaddr_storage* out);

// Moves a QP to RTR then RTS from id's peer (ucma_modify_qp_rtr/rts), or to
// the error state (ucma_modify_qp_err).
int modify_qp_rtr_rts(Id* id);
int modify_qp_err(Id* id);
// A new event channel for an id made without one; nullptr with errno.
Channel* create_channel();
// Waits for the next event of a synchronous id (ucma_complete).
int complete(Id* id);
// A MULTICAST_JOIN record into the application's event: the QP attached to
// the group now (ucma_process_join), MULTICAST_ERROR if that failed.
void multicast_joined(Id* id, const abi::CmEventRecord& rec, rdma_cm_event* ev);
// rdma_destroy_id: the id's QP leaves its groups.
void leave_all_groups(Id* id);

}  // namespace uroce::rdmacm
