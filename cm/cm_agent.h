// The connection manager's agent: the engine's half of rdma_cm. It holds
// every client's CM ids (their addresses, port spaces and states), binds
// ports, finds the listener a connect is for and carries the connection
// messages between the two ids as the kernel's rdma_cm and IB CM do (REQ,
// REP, RTU, REJ, DREQ/DREP; SIDR REQ/REP for RDMA_PS_UDP: IBA 12.6, 12.11),
// delivering each step as an event record on the receiving id's channel.
// Both ends in this engine (loopback, 127.0.0.0/8, ::1, its addresses): the
// steps go from id to id here (cm_agent.cc). A peer beyond the engine: they
// are IB CM MADs on QP1 over RoCEv2 (cm_wire.cc), so any RoCE device's CM
// (Linux's cm.c and cma.c, another engine) is the other end.
#pragma once

#include <arpa/inet.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <netinet/in.h>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cm/cm_mad.h"
#include "device/qp1_agent.h"
#include "uroce/abi.h"

namespace uroce::cm {

using device::Owner;

// The AF_IB address (abi::CmAddr) of a GID and a service ID.
inline abi::CmAddr cm_ib_address(const uint8_t* gid, uint64_t sid) {
  abi::CmAddr a{};
  a.family = AF_IB;
  a.port = htons(uint16_t(sid));
  a.scope_id = uint32_t(sid >> 16);
  std::memcpy(a.addr, gid, 16);
  return a;
}

// <rdma/rdma_cma.h>'s values (enum rdma_cm_event_type, rdma_port_space),
// spelled here so the engine does not need librdmacm's headers, and the REJ
// reasons and SIDR REP statuses rdma_cm reports as an event's status.
namespace cm_events {
enum CmEvent : uint32_t {
  kAddrResolved = 0,
  kAddrError = 1,
  kRouteResolved = 2,
  kConnectRequest = 4,
  kConnectResponse = 5,
  kUnreachable = 7,
  kRejected = 8,
  kEstablished = 9,
  kDisconnected = 10,
  kAddrChange = 14,
  kTimewaitExit = 15,
};
constexpr uint32_t kPsTcp = 0x0106;
constexpr uint32_t kPsUdp = 0x0111;
constexpr uint32_t kPsIb = 0x013F;  // RC, UC, XRC and UD alike (RDMA_PS_IB)
constexpr int32_t kRejTimeout = mad::kRejTimeout;
constexpr int32_t kRejInvalidServiceId = mad::kRejInvalidServiceId;
constexpr int32_t kRejConsumerDefined = mad::kRejConsumerDefined;
constexpr int32_t kSidrUnsupported = mad::kSidrUnsupported;
constexpr int32_t kSidrReject = mad::kSidrReject;
}  // namespace cm_events

// How the agent reaches the wire: the device's QP1 (cm/device_link.h), unit
// tests a fake. Without it every address beyond the engine is ADDR_ERROR.
struct CmWire {
  // Sends a MAD to the GSI (QPN 1) of the port whose GID is dgid, from our
  // GID sgid_index, as a UD send through the device's ports.
  std::function<void(const uint8_t* dgid, uint8_t sgid_index, const mad::Mad&)> send;
  // The engine reaches addresses beyond its own (it has a wire port).
  std::function<bool()> has_route;
  // Is the neighbour of dgid known (the ARP/NDP cache)? If not and solicit,
  // an ARP request or neighbour solicitation goes out. Unset: always known.
  std::function<bool(const uint8_t* dgid, bool solicit)> neighbour_known;
  std::function<uint64_t()> now_ns;
  // rdma_cm's CM response timeout, packet life time and retries
  // (CMA_CM_RESPONSE_TIMEOUT, CMA_IBOE_PACKET_LIFETIME, CMA_MAX_CM_RETRIES):
  // a MAD unanswered after 2 * 2^18 + 2^20 times 4.096 us (6.4 s, as cm.c's
  // timeout_ms) is sent again, 15 times, then its exchange fails.
  uint8_t cm_response_timeout = 20;
  uint8_t packet_life_time = 18;
  uint8_t max_cm_retries = 15;
  // The service timeout of the MRAs this CM sends (CMA_CM_MRA_SETTING's 24:
  // 2^24 times 4.096 us, 69 s): how much longer the peer waits for our
  // answer while our application has not given it.
  uint8_t mra_service_timeout = 24;
};

// What crossed the wire (`uroce status`).
struct CmWireCounters {
  uint64_t mads_sent = 0, mads_received = 0, mads_retransmitted = 0;
  uint64_t mads_dropped = 0;     // malformed, or for no id of ours
  uint64_t mads_duplicate = 0;   // a retransmission answered again or ignored
  uint64_t timeouts = 0;         // exchanges that ran out of retries
  uint64_t mras_sent = 0, mras_received = 0;  // (12.6.6) our application slow, or the peer's
};

class CmAgent final : public device::Qp1Agent {
 public:
  // The engine's addresses and GID table (they outlive the agent).
  CmAgent(const std::array<uint8_t, 4>& ip, const std::array<uint8_t, 16>& ip6,
          const abi::DeviceInfo& info)
      : ip_(ip), ip6_(ip6), info_(info) {}
  ~CmAgent() override;

  // Each returns 0 or an errno; handles name the calling owner's objects
  // only (another's, or a stale one, is ENOENT).
  int create_channel(Owner* o, int pipe_fd, uint64_t* handle);
  int destroy_channel(Owner* o, uint64_t handle);
  int create_id(Owner* o, const abi::CmCreateIdRequest& r, uint64_t* handle);
  int destroy_id(Owner* o, uint64_t id);
  int bind(Owner* o, const abi::CmBindRequest& r, abi::CmBindReply* rep);
  int resolve_addr(Owner* o, const abi::CmResolveAddrRequest& r, abi::CmBindReply* rep);
  int resolve_route(Owner* o, uint64_t id);
  int listen(Owner* o, uint64_t id, int backlog);
  int connect(Owner* o, const abi::CmConnectRequest& r);
  int accept(Owner* o, const abi::CmConnectRequest& r);
  int reject(Owner* o, const abi::CmRejectRequest& r);
  int establish(Owner* o, uint64_t id);
  int disconnect(Owner* o, uint64_t id);
  int migrate(Owner* o, uint64_t id, uint64_t channel);
  // The owner is gone (its process exited or was killed): its connections
  // end as when it destroys each id (the peer sees DISCONNECTED or REJECTED).
  void release_owner(Owner* o) override;
  // An address of the bound interface went (its GID is gone): every id
  // bound to it gets ADDR_CHANGE (cma_netdev_change's event for ids bound to
  // an interface whose address changed); what to do is the application's.
  void address_removed(const uint8_t gid[16]) override;

  size_t id_count() const { return ids_.size(); }
  // The ports (host order) ids listen on (`uroce run --wait-listen`).
  std::vector<uint16_t> listening_ports() const;
  uint64_t events_dropped() const { return events_dropped_; }

  // ---- the remote half (cm_wire.cc; MADs received: cm_wire_receive.cc) ----
  void attach_wire(CmWire wire) { wire_ = std::move(wire); }
  // A CM MAD that reached the GSI: sgid is the sender's port GID (its IP
  // source), dgid ours that it was sent to.
  void receive_mad(const uint8_t* sgid, const uint8_t* dgid, const mad::Mad& mad);
  // The device's QP1 (device/qp1_agent.h): a CM MAD goes on to the above,
  // another class is dropped (no other GSI class is served).
  bool receive_mad(const uint8_t* sgid, const uint8_t* dgid, const uint8_t* mad) override;
  // Retransmits what is due and fails exchanges out of retries; true if it
  // did anything.
  bool poll_timers(uint64_t now_ns) override;
  uint64_t next_deadline_ns() const override;  // 0: no MAD awaits an answer, no timer runs
  // How long a disconnected connection stays in time-wait before its id
  // gets TIMEWAIT_EXIT: the packet life time's timeout doubled (cm.c's
  // av.timeout, the packet life time + 1: 2.1 s on RoCE).
  uint64_t timewait_ns() const override { return mad::timeout_ns(uint8_t(wire_.packet_life_time + 1)); }
  const CmWireCounters& wire_counters() const { return wire_counters_; }
  // `uroce status`'s lines and the report's "cm" (cm_report.cc).
  std::string status_text() const;
  void report(nlohmann::json& out) const;

 private:
  // The states of rdma_cm's ids that the agent needs (cma.c enum rdma_cm_state).
  enum class State : uint8_t {
    kIdle, kBound, kAddrResolved, kRouteResolved, kListen,
    kConnecting,   // active: REQ sent
    kRequested,    // passive: REQ received, not yet answered
    kRepSent,      // passive: REP sent, RTU awaited
    kRepReceived,  // active: REP received, RTU not yet sent
    kEstablished,
    kDreqSent,     // remote: DREQ sent, DREP awaited
    kDisconnected,
  };
  struct Id {
    Owner* owner = nullptr;
    uint64_t channel = 0;
    uint32_t ps = 0;
    // The port space its port is taken from: ps, or an AF_IB address's
    // (its service ID's, cma_select_ib_ps: an RDMA_PS_IB id may bind a
    // TCP or UDP service ID).
    uint32_t port_ps = 0;
    uint32_t qp_type = 0;
    State state = State::kIdle;
    abi::CmAddr src{}, dst{};
    bool reuseaddr = false, afonly = false;
    bool child = false;  // made for a CONNECT_REQUEST: shares its listener's port
    uint64_t peer = 0;   // the other end while a connection is being set up or is up
    // A peer beyond the engine (cm_wire.cc): the CM's ids on both sides
    // (ours is comm_id(handle)), where the peer's MADs come from and go.
    bool remote = false;
    uint32_t remote_comm_id = 0;
    uint32_t remote_qpn = 0;
    uint8_t remote_gid[16] = {};
    uint8_t sgid_index = 0;
    uint64_t tid = 0;  // the transaction of the REQ (or SIDR REQ) that began it
    // Passive: the REQ's Remote CM Response Timeout, the time within which
    // the peer expects our REP (or an MRA).
    uint8_t peer_response_timeout = 0;
  };
  // A MAD that awaits its answer (REQ, REP, DREQ, SIDR REQ): sent again at
  // its deadline until the retries run out. handle 0: its id is gone (a
  // destroyed id's DREQ still ends the peer's connection).
  // An address being resolved: its neighbour is asked for until it answers
  // or resolve_deadline passes (ADDR_ERROR), as rdma_resolve_addr waits for
  // the kernel's neighbour subsystem.
  struct Resolving {
    uint64_t handle = 0;
    uint64_t next_check_ns = 0, next_solicit_ns = 0, deadline_ns = 0;
  };
  struct Outstanding {
    uint64_t handle = 0;
    uint32_t comm_id = 0;
    mad::Attr attr{};
    mad::Mad mad{};
    uint8_t dgid[16] = {};
    uint8_t sgid_index = 0;
    uint64_t deadline_ns = 0;
    uint8_t retries_left = 0;
  };
  // An MRA to send at due_ns unless the application has answered by then:
  // the REQ not yet accepted or rejected (msg 0), the REP not yet
  // established or rejected (msg 1).
  struct MraDue {
    uint64_t handle = 0;
    uint64_t due_ns = 0;
    uint8_t msg = 0;
  };
  struct Channel {
    Owner* owner = nullptr;
    int fd = -1;
  };

  Id* find_id(Owner* o, uint64_t h);
  bool is_local(const abi::CmAddr& a) const;
  abi::CmAddr own_address(uint16_t family) const;
  int port_conflict(const Id& self, const abi::CmAddr& a) const;
  int bind_to(Id& id, abi::CmAddr a);
  uint8_t gid_index_for(const abi::CmAddr& a) const;
  int gid_index_of(const abi::CmAddr& a) const;
  void fill_local(const Id& id, abi::CmBindReply* rep) const;
  // The listener of an (IP) request for port space ps and address dst.
  uint64_t find_listener(uint32_t ps, const abi::CmAddr& dst) const;
  // Does an id listen on service ID sid (the CM's listener that a REQ for
  // it reaches, whatever rdma_cm then makes of the REQ)?
  bool listens_on(uint64_t sid) const;
  // Does the listener refuse IP requests (an AF_IB one: cma_ib_acquire_dev)?
  bool refuses_ip_requests(uint64_t listener) const;
  static bool ip_request(const mad::Mad& m, mad::Bytes private_data, uint64_t sid, abi::CmAddr* local,
                         abi::CmAddr* peer);
  // A request's private data as on the wire, its length returned: rdma_cm's
  // IP header first (cma_user_data_offset), then the application's; a new
  // id reports what follows the header.
  static size_t request_private(const Id& active, const abi::CmConnParam& p, uint8_t* out);
  void post(const Id& to, uint64_t to_handle, abi::CmEventRecord ev);
  void post_simple(uint64_t h, uint32_t event, int32_t status);
  // DISCONNECTED, and TIMEWAIT_EXIT a time-wait later for a connected id
  // still there (cm.c's cm_enter_timewait, cma's RDMA_CM_EVENT_TIMEWAIT_EXIT).
  void post_disconnected(uint64_t h);
  uint64_t now_ns() const;
  bool poll_timewait(uint64_t now);
  // Ids of all clients together: each costs the engine memory, and a client
  // that makes them in a loop must run out before the engine does.
  static constexpr size_t kMaxIds = 1 << 16;
  // Ends id's side of a connection as destroying it does.
  void abandon(uint64_t h);

  // ---- the remote half (cm_wire.cc; MADs received: cm_wire_receive.cc) ----
  bool wire_up() const { return wire_.send && wire_.has_route && wire_.has_route(); }
  int resolve_remote(Id& id, uint64_t h, const abi::CmResolveAddrRequest& r, abi::CmBindReply* rep);
  int connect_remote(Id& id, uint64_t h, const abi::CmConnectRequest& r);
  int accept_remote(Id& id, uint64_t h, const abi::CmConnectRequest& r);
  int reject_remote(Id& id, uint64_t h, const abi::CmRejectRequest& r);
  int establish_remote(Id& id, uint64_t h);
  int disconnect_remote(Id& id, uint64_t h);
  void abandon_remote(Id& id, uint64_t h);
  uint32_t comm_id(uint64_t h) const { return uint32_t(h) ^ comm_id_operand_; }
  uint64_t handle_of(uint32_t comm) const { return handle_base_ | (comm ^ comm_id_operand_); }
  // The remote id a message names by our communication ID, or nullptr.
  Id* find_remote(uint32_t our_comm_id, uint64_t* h);
  mad::Mad new_mad(mad::Attr attr, uint64_t tid) const;
  void send(const Id& id, const mad::Mad& m);
  void send_tracked(uint64_t h, const Id& id, const mad::Mad& m);
  void cancel(uint64_t h);
  // MRAs (12.6.6): of the REQ (msg 0) or the REP (msg 1) id has not yet
  // answered; schedule_mra sends one at half the time the peer waits.
  void send_mra(uint64_t h, const Id& id, uint8_t msg);
  void schedule_mra(uint64_t h, uint8_t msg, uint64_t peer_wait_ns);
  static bool awaits_answer(const Id& id, uint8_t msg);
  bool poll_mras(uint64_t now);
  void give_up(const Outstanding& o);
  bool poll_resolving(uint64_t now);
  void address_resolved(Id& id, uint64_t h);
  uint64_t retry_interval_ns() const;
  void send_rej(const uint8_t* dgid, uint8_t sgid_index, uint64_t tid, uint32_t local_comm, uint32_t remote_comm,
                uint8_t msg, uint16_t reason, const uint8_t* priv = nullptr, size_t len = 0);
  void send_sidr_rep(const Id& id, uint8_t status, uint32_t qpn, uint32_t qkey, const uint8_t* priv, size_t len);
  void send_sidr_status(const uint8_t* dgid, uint8_t sgid_index, uint64_t tid, uint32_t request_id,
                        uint64_t sid, uint8_t status);
  uint8_t sgid_index_of(const uint8_t* gid) const;
  // One handler per message (IBA 12.6), by attribute ID.
  using MadHandler = void (CmAgent::*)(const uint8_t* sgid, const uint8_t* dgid, const mad::Mad& m);
  struct MadRoute {
    mad::Attr attr;
    MadHandler handler;
  };
  static const MadRoute kMadRoutes[];
  void on_req(const uint8_t* sgid, const uint8_t* dgid, const mad::Mad& m);
  void on_sidr_req(const uint8_t* sgid, const uint8_t* dgid, const mad::Mad& m);
  void on_mra(const uint8_t* sgid, const uint8_t* dgid, const mad::Mad& m);
  void on_rej(const uint8_t* sgid, const uint8_t* dgid, const mad::Mad& m);
  void on_rep(const uint8_t* sgid, const uint8_t* dgid, const mad::Mad& m);
  void on_rtu(const uint8_t* sgid, const uint8_t* dgid, const mad::Mad& m);
  void on_dreq(const uint8_t* sgid, const uint8_t* dgid, const mad::Mad& m);
  void on_drep(const uint8_t* sgid, const uint8_t* dgid, const mad::Mad& m);
  void on_sidr_rep(const uint8_t* sgid, const uint8_t* dgid, const mad::Mad& m);
  // A new passive id for a request from the wire, and its CONNECT_REQUEST.
  uint64_t request_from_wire(uint64_t listener, const uint8_t* sgid, const uint8_t* dgid,
                             const mad::Mad& m, const abi::CmAddr& local, const abi::CmAddr& peer,
                             uint32_t remote_comm_id, bool ud);

  const std::array<uint8_t, 4>& ip_;
  const std::array<uint8_t, 16>& ip6_;
  const abi::DeviceInfo& info_;
  std::map<uint64_t, Id> ids_;
  std::map<uint64_t, Channel> channels_;
  // Ids and channels; never reused. Each engine starts at a random point, so
  // a client of several engines tells their ids apart by handle alone.
  uint64_t next_handle_ = first_handle();
  static uint64_t first_handle();
  const uint64_t handle_base_ = next_handle_ & ~uint64_t(0xffffffff);
  // Communication IDs are the handles' low halves scrambled (as cm.c's
  // random_id_operand), and TIDs start at a random point: an engine that
  // restarts does not reuse its predecessor's.
  const uint32_t comm_id_operand_ = uint32_t(first_handle() >> 32);
  const uint32_t tid_high_ = uint32_t(first_handle() >> 32);
  uint32_t next_port_ = 0;
  uint64_t events_dropped_ = 0;
  CmWire wire_;
  CmWireCounters wire_counters_;
  std::vector<Outstanding> outstanding_;
  std::vector<Resolving> resolving_;
  std::vector<MraDue> mra_due_;
  struct TimewaitDue {
    uint64_t handle = 0;
    uint64_t due_ns = 0;
  };
  std::vector<TimewaitDue> timewait_;  // in due order (one time-wait for all)
};

}  // namespace uroce::cm
