// The engine: owns the device, serves client sessions on a Unix socket with
// Boost.Asio, and runs the poll loop that busy-polls while there is work and
// sleeps (woken by a doorbell eventfd, a control message or a timer) when idle.
#pragma once

#include <utility>  // Boost 1.74 asio needs std::exchange declared first

#include <boost/asio.hpp>

#include "emulator/seq_packet.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include <unordered_map>

#include "cm/cm_agent.h"
#include "cm/device_link.h"
#include "device/device.h"
#include "emulator/access.h"
#include "emulator/engine_migration.h"
#include "emulator/idle_policy.h"
#include "emulator/sysfs_tree.h"
#include "net/netdev.h"
#include "net/udp_port_guard.h"
#include "uroce/abi.h"

namespace uroce::emulator {

class Session;

// Clients the engine turned away or hung up on, and control messages served
// (emulator/session.cc), shown by `uroce stats` beside the device's counters.
#define UROCE_ENGINE_COUNTERS(X)                                                          \
  X(clients_refused, "connections refused: user not admitted (uroced --users/--group)")  \
  X(clients_junk, "clients disconnected: malformed control message (size, operation, fds)") \
  X(clients_flooding, "clients disconnected: requests sent without reading the replies") \
  X(engine_ops_refused, "fault/capture/port requests refused: not the owner or root") \
  X(control_messages, "control messages served (the data path, TM list ops included, sends none)") \
  X(gid_changes, "GID table changes: the bound interface's addresses came or went (IBV_EVENT_GID_CHANGE)") \
  X(roce_port_datagrams, "RoCE datagrams the kernel also delivered to the engine's UDP 4791 sockets on the bound interface, discarded (--netdev)") \
  X(wire_moderated_naps, "naps on a timer instead of the wire port's wakeup, while a stream arrives (emulator/wire_moderation.h)") \
  X(cpu_moves_away, "moves off the CPU shared with another engine while streaming for sleeping clients (emulator/engine_migration.h)") \
  X(cpu_moves_home, "moves back to the engine's own CPU")

struct EngineCounters {
#define UROCE_ENGINE_COUNTER_FIELD(name, desc) uint64_t name = 0;
  UROCE_ENGINE_COUNTERS(UROCE_ENGINE_COUNTER_FIELD)
#undef UROCE_ENGINE_COUNTER_FIELD
};

struct EngineConfig {
  device::DeviceConfig device;
  std::string runtime_dir;
  // The CPU the polling thread is pinned to: kCpuAuto chooses one
  // (include/uroce/cpu_placement.h), kCpuNone leaves it to the scheduler.
  static constexpr int kCpuAuto = -2, kCpuNone = -1;
  int cpu = kCpuAuto;
  // How long the loop keeps spinning after the last work before it sleeps.
  uint64_t spin_ns = 2'000'000;
  // Longest sleep when the wire port cannot wake the engine (no af_packet fd).
  uint64_t wire_nap_ns = 1'000'000;
  // Longest sleep with a wire port even when its fd can wake us: a missed
  // wakeup must cost less than an RC ACK timeout (67 ms at timeout 14).
  uint64_t wire_max_sleep_ns = 50'000'000;
  net::FaultConfig fault;  // applied at start to the wire port, else the loopback
  bool fault_set = false;
  AccessPolicy access;  // who may connect besides the owner (--users, --group)
};

class Engine {
 public:
  explicit Engine(EngineConfig config);
  ~Engine();

  // Binds the socket and writes the pid file; throws std::runtime_error with a
  // clear message if the engine cannot start.
  void start();
  // Tells clients the CPU the engine thread is pinned to (after start()).
  void announce_polling_cpu(int cpu);
  // The engine chose home (uroced --cpu auto) of the CPUs it may use, the
  // rest being away: it may move there while it streams for sleeping
  // clients (emulator/engine_migration.h).
  void enable_migration(int home, std::vector<int> away);
  // Runs until SIGTERM/SIGINT.
  void run();

  device::Device& device() { return device_; }
  cm::CmAgent& cm() { return cm_; }
  int shared_fd() const { return shared_fd_; }
  int doorbell_fd() const { return doorbell_fd_; }
  void close_session(Session* s);
  // A few datapath passes from a control handler (bounded).
  void drain_device();
  // Doorbell order before a control verb that destroys what posted work may
  // name (an MR, a window): the client's posted sends are taken, then run
  // as far as they can (device/requester.cc requester_take_posted).
  void take_posted_work(const device::Owner& client);
  // Link up/down: device state, the clients' shared page, and a port event
  // (IBV_EVENT_PORT_ACTIVE / IBV_EVENT_PORT_ERR) to every client.
  void set_port_state(bool up);
  // Without `asking`, the session that asks (a tool) among the clients.
  std::string status_text(const device::Owner* asking = nullptr) const;
  // The device's counters and the engine's (UROCE_ENGINE_COUNTERS).
  std::string stats_text() const;
  const AccessPolicy& access() const { return config_.access; }
  EngineCounters& counters() { return counters_; }
  // A document a connection reads in pieces (kReport's JSON, kStatus's and
  // kStats's text): a new snapshot when `fresh`, else the one taken at its
  // offset 0, so its pieces agree.
  enum class Snapshot : uint8_t { kReport, kStatus, kStats, kCount };
  const std::string& snapshot(const device::Owner& client, Snapshot kind, bool fresh);

 private:
  std::string report_json(const device::Owner* asking = nullptr) const;
  void accept_next();
  // Tells a peer the policy does not admit why, and hangs up.
  void refuse(SeqPacket::socket sock, const PeerCredentials* peer);
  void prepare_runtime_dir();
  void arm_doorbell();
  // Waits for the af_packet wakeup fd (once: the wait stays pending across
  // naps that end without a frame); end_wire_wait() takes it off epoll.
  void wait_wire_wakeup();
  void end_wire_wait();
  void remove_files();
  // The interface the device is bound to (device/addresses.cc): its
  // addresses as GIDs, its netlink news, the UDP sockets on the RoCE port.
  void bind_interface();
  void publish_gids();
  void arm_netdev_events();
  void arm_port_guard(boost::asio::posix::stream_descriptor& sd, int fd);

  EngineConfig config_;
  device::Device device_;
  // The connection manager, QP1's agent on the device (cm/): after device_,
  // whose info and QP1 it uses; sessions_ (below) go first, releasing their ids.
  cm::CmAgent cm_;
  boost::asio::io_context io_;
  boost::asio::basic_socket_acceptor<SeqPacket> acceptor_;
  boost::asio::signal_set signals_;
  boost::asio::posix::stream_descriptor doorbell_;
  // af_packet: readable while a frame waits in the port's ring. A dup of the
  // port's socket, on epoll while the engine sleeps and works in short bursts
  // (wait_wire_wakeup).
  boost::asio::posix::stream_descriptor wire_wakeup_;
  int wire_wakeup_fd_ = -1;
  bool wire_wait_pending_ = false;  // an async_wait on wire_wakeup_ is outstanding
  // Busy this long after a sleep, the engine takes the wakeup fd off epoll.
  static constexpr uint64_t kWireWaitKeepNs = 50'000;
  uint64_t woke_ns_ = 0;  // when the last sleep ended
  uint64_t frames_at_wake_ = 0;  // the device's rx_packets when the last sleep or nap ended
  bool wire_frame_seen_ = false;    // it completed during the last sleep: a frame woke us
  net::Netdev netdev_;
  net::UdpPortGuard port_guard_;
  boost::asio::posix::stream_descriptor netdev_events_, guard4_, guard6_;
  std::string netdev_path_;  // <runtime dir>/<name>.netdev: the interface, for `uroce run`
  SysfsTree sysfs_;          // <runtime dir>/<name>.sysfs, for `uroce run`
  uint64_t sysfs_counters_ns_ = 0;  // when its hw_counters were last brought up to date
  bool sysfs_counters_stale_ = false;  // the device worked since
  // Brings sysfs's hw_counters up to date when they are stale and the engine
  // has been idle kSysfsIdleNs (idle_ns) or busy a second. Returns how long
  // a sleeping engine may wait before it is due (0: nothing due).
  uint64_t refresh_sysfs_counters(uint64_t now, uint64_t idle_ns);
  std::unordered_map<Session*, std::unique_ptr<Session>> sessions_;
  std::string socket_path_, pid_path_;
  int shared_fd_ = -1, doorbell_fd_ = -1;
  abi::EngineShared* shared_ = nullptr;
  bool stopping_ = false;
  uint64_t next_owner_id_ = 1;
  // By Owner::id, one of each kind.
  std::unordered_map<uint64_t, std::array<std::string, size_t(Snapshot::kCount)>> snapshots_;
  IdlePolicy idle_;
  // Moving off a CPU shared with another engine (enable_migration).
  void check_migration(uint64_t now);
  std::optional<EngineMigration> migration_;
  int home_cpu_ = -1;
  std::vector<int> away_cpus_;
  uint64_t next_migration_ns_ = 0;
  int migration_schedstat_fd_ = -1;
  EngineCounters counters_;
};

}  // namespace uroce::emulator
