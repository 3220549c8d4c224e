// The connection manager's agent: the engine's half of rdma_cm. It holds
// every client's CM ids (their addresses, port spaces and states), binds
// ports, finds the listener a connect is for and carries the connection
// messages between the two ids as the kernel's rdma_cm and IB CM do (REQ,
// REP, RTU, REJ, DREQ/DREP; SIDR REQ/REP for RDMA_PS_UDP: IBA 12.6, 12.11),
// delivering each step as an event record on the receiving id's channel.
// This slice serves ids of one engine: both ends of a connection are its
// clients (loopback, 127.0.0.0/8, ::1 and its configured addresses).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <netinet/in.h>

#include "uroce/abi.h"

namespace uroce::device {

struct Owner;

class CmAgent {
 public:
  // The engine's addresses and GID table (they outlive the agent).
  CmAgent(const std::array<uint8_t, 4>& ip, const std::array<uint8_t, 16>& ip6,
          const abi::DeviceInfo& info)
      : ip_(ip), ip6_(ip6), info_(info) {}
  ~CmAgent();

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
  void release_owner(Owner* o);

  size_t id_count() const { return ids_.size(); }
  uint64_t events_dropped() const { return events_dropped_; }

 private:
  // The states of rdma_cm's ids that the agent needs (cma.c enum rdma_cm_state).
  enum class State : uint8_t {
    kIdle, kBound, kAddrResolved, kRouteResolved, kListen,
    kConnecting,   // active: REQ sent
    kRequested,    // passive: REQ received, not yet answered
    kRepSent,      // passive: REP sent, RTU awaited
    kRepReceived,  // active: REP received, RTU not yet sent
    kEstablished,
    kDisconnected,
  };
  struct Id {
    Owner* owner = nullptr;
    uint64_t channel = 0;
    uint32_t ps = 0;
    uint32_t qp_type = 0;
    State state = State::kIdle;
    abi::CmAddr src{}, dst{};
    bool reuseaddr = false, afonly = false;
    bool child = false;  // made for a CONNECT_REQUEST: shares its listener's port
    uint64_t peer = 0;   // the other end while a connection is being set up or is up
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
  void fill_local(const Id& id, abi::CmBindReply* rep) const;
  uint64_t find_listener(uint32_t ps, const abi::CmAddr& dst) const;
  void post(const Id& to, uint64_t to_handle, abi::CmEventRecord ev);
  void post_simple(uint64_t h, uint32_t event, int32_t status);
  // Ends id's side of a connection as destroying it does.
  void abandon(uint64_t h);

  const std::array<uint8_t, 4>& ip_;
  const std::array<uint8_t, 16>& ip6_;
  const abi::DeviceInfo& info_;
  std::map<uint64_t, Id> ids_;
  std::map<uint64_t, Channel> channels_;
  // Ids and channels; never reused. Each engine starts at a random point, so
  // a client of several engines tells their ids apart by handle alone.
  uint64_t next_handle_ = first_handle();
  static uint64_t first_handle();
  uint32_t next_port_ = 0;
  uint64_t events_dropped_ = 0;
};

}  // namespace uroce::device
