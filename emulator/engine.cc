#include "emulator/engine.h"

#include "emulator/wire_moderation.h"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "emulator/session.h"
#include "uroce/runtime_dir.h"

namespace uroce::emulator {

namespace {

uint64_t monotonic_ns() {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
}

}  // namespace

Engine::Engine(EngineConfig config)
    : config_(std::move(config)),
      device_(config_.device),
      // the device's own addresses: they follow a bound interface
      cm_(device_.config().ip, device_.config().ip6, device_.info()),
      acceptor_(io_),
      signals_(io_, SIGINT, SIGTERM),
      doorbell_(io_),
      wire_wakeup_(io_),
      netdev_events_(io_),
      guard4_(io_),
      guard6_(io_),
      idle_(config_.spin_ns) {
  cm::attach_to_device(cm_, device_);  // the CM on the device's QP1
}

Engine::~Engine() {
  sessions_.clear();
  device_.attach_qp1_agent(nullptr);  // the agent goes before the device
  if (shared_) munmap(shared_, 4096);
  if (shared_fd_ >= 0) close(shared_fd_);
  if (doorbell_fd_ >= 0) close(doorbell_fd_);  // doorbell_ holds a dup of its own
  end_wire_wait();
  if (wire_wakeup_fd_ >= 0) close(wire_wakeup_fd_);
  if (migration_schedstat_fd_ >= 0) close(migration_schedstat_fd_);
  remove_files();
}

void Engine::remove_files() {
  if (!socket_path_.empty()) unlink(socket_path_.c_str());
  if (!pid_path_.empty()) unlink(pid_path_.c_str());
  if (!netdev_path_.empty()) unlink(netdev_path_.c_str());
  sysfs_.remove();
  socket_path_.clear();
  pid_path_.clear();
  netdev_path_.clear();
}

void Engine::start() {
  // The DPDK port first: it decides the MAC (and so the GIDs) clients see.
  if (!config_.device.port_spec.empty()) {
    if (std::string err = device_.open_wire_port(); !err.empty())
      throw std::runtime_error("cannot open port '" + config_.device.port_spec + "': " + err);
    if (device_.wire_wakeup_fd() >= 0) wire_wakeup_fd_ = dup(device_.wire_wakeup_fd());
  }
  bind_interface();
  if (config_.fault_set) {
    const auto port = device_.has_wire() ? device::PortId::kWire : device::PortId::kLoopback;
    if (std::string err = device_.set_fault(port, config_.fault); !err.empty())
      throw std::runtime_error("bad --fault: " + err);
  }
  prepare_runtime_dir();
  const std::string& dir = config_.runtime_dir;
  const std::string sock = engine_socket_path(dir, config_.device.name);
  if (sock.size() >= sizeof(sockaddr_un::sun_path))
    throw std::runtime_error("socket path too long: " + sock);

  // Shared engine page (read-only for clients) and the doorbell.
  shared_fd_ = memfd_create("uroce-engine", MFD_CLOEXEC);
  // A memfd is created 0777; only its owner needs to open it again (hello()).
  if (shared_fd_ < 0 || fchmod(shared_fd_, 0600) != 0 || ftruncate(shared_fd_, 4096) != 0)
    throw std::runtime_error(std::string("memfd_create: ") + std::strerror(errno));
  void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, shared_fd_, 0);
  if (p == MAP_FAILED) throw std::runtime_error(std::string("mmap: ") + std::strerror(errno));
  shared_ = new (p) abi::EngineShared{};
  shared_->magic = abi::kMagic;
  shared_->version = abi::kVersion;
  shared_->port_state.store(IBV_PORT_ACTIVE);
  shared_->polling_cpu.store(-1);
  publish_gids();
  doorbell_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (doorbell_fd_ < 0) throw std::runtime_error(std::string("eventfd: ") + std::strerror(errno));
  doorbell_.assign(dup(doorbell_fd_));

  // A live engine of the same name owns the socket; a stale file is replaced.
  const SeqPacket::endpoint ep = unix_endpoint(sock);
  {
    SeqPacket::socket probe(io_);
    boost::system::error_code ec;
    probe.connect(ep, ec);
    if (!ec) throw std::runtime_error("an engine named " + config_.device.name + " is already running");
  }
  unlink(sock.c_str());
  boost::system::error_code ec;
  acceptor_.open(SeqPacket(AF_UNIX, 0), ec);
  if (!ec) acceptor_.bind(ep, ec);
  if (!ec) acceptor_.listen(64, ec);
  if (ec) throw std::runtime_error("cannot listen on " + sock + ": " + ec.message());
  socket_path_ = sock;
  // Connecting takes write permission on the socket: its mode is the first
  // gate (as a /dev/infiniband node's), the credential check at accept the
  // second (access.h).
  const AccessPolicy& access = config_.access;
  if (access.group && chown(sock.c_str(), uid_t(-1), *access.group) != 0)
    throw std::runtime_error("cannot give " + sock + " to group " + std::to_string(*access.group) + ": " +
                             std::strerror(errno) + " (the engine's user must be a member of it)");
  if (chmod(sock.c_str(), socket_mode(access)) != 0)
    throw std::runtime_error("cannot chmod " + sock + ": " + std::strerror(errno));

  // The interface whose addresses are the GIDs, for the sysfs view `uroce
  // run` gives programs (tools/sysfs_view.h).
  if (!netdev_.name().empty()) {
    netdev_path_ = dir + "/" + config_.device.name + ".netdev";
    std::ofstream f(netdev_path_ + ".tmp");
    f << netdev_.name() << '\n';
    f.close();
    rename((netdev_path_ + ".tmp").c_str(), netdev_path_.c_str());
  }
  // The device as sysfs shows a kernel RoCE device (sysfs_tree.h).
  if (std::string err = sysfs_.create(dir, device_.info(), netdev_.name()); !err.empty())
    std::fprintf(stderr, "uroced: no sysfs view of %s for `uroce run`: %s\n", config_.device.name.c_str(), err.c_str());
  pid_path_ = engine_pid_path(dir, config_.device.name);
  {
    std::ofstream pid(pid_path_ + ".tmp");
    pid << getpid() << '\n';
  }
  rename((pid_path_ + ".tmp").c_str(), pid_path_.c_str());

  signal(SIGPIPE, SIG_IGN);
  signals_.async_wait([this](const boost::system::error_code&, int) { stopping_ = true; });
  accept_next();
  arm_doorbell();
}

// The runtime directory: made 0700 if missing; refused if another user
// could write into it; opened to others (0755, so that they can list the
// engines) only when this engine admits others.
void Engine::prepare_runtime_dir() {
  const std::string& dir = config_.runtime_dir;
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    throw std::runtime_error("cannot create runtime dir " + dir + ": " + std::strerror(errno));
  const uid_t self = geteuid();
  if (std::string why = runtime_dir_problem(dir, self); !why.empty())
    throw std::runtime_error("runtime dir " + dir + " will not do: " + why);
  struct stat st;
  const mode_t want = runtime_dir_mode(config_.access);
  if (stat(dir.c_str(), &st) == 0 && st.st_uid == self && (st.st_mode & want) != want &&
      chmod(dir.c_str(), (st.st_mode & 07777) | want) != 0)
    throw std::runtime_error("cannot chmod runtime dir " + dir + ": " + std::strerror(errno));
}

void Engine::refuse(SeqPacket::socket sock, const PeerCredentials* peer) {
  ++counters_.clients_refused;
  std::string why = "uroce engine " + config_.device.name + " refuses ";
  why += peer ? "user " + user_name(peer->uid) + " (uid " + std::to_string(peer->uid) + ")"
              : std::string("a peer whose credentials the kernel does not give");
  why += ": it admits only " + config_.access.describe() +
         "; its owner can admit others with 'uroce start --users LIST' or '--group NAME'";
  if (counters_.clients_refused <= 20 || counters_.clients_refused % 1000 == 0)
    std::fprintf(stderr, "uroced: pid %d: %s\n", peer ? int(peer->pid) : 0, why.c_str());
  // The refusal is the reply to whatever the client sends first: it reads it
  // whether its request arrived before we hung up or not (connection.cc).
  alignas(8) uint8_t buf[abi::kMaxCtlMsg];
  const size_t len = std::min(why.size(), sizeof(buf) - sizeof(abi::CtlReplyHeader));
  const abi::CtlReplyHeader hdr{EACCES, uint32_t(len)};
  std::memcpy(buf, &hdr, sizeof(hdr));
  std::memcpy(buf + sizeof(hdr), why.data(), len);
  const int fd = sock.native_handle();
  (void)::send(fd, buf, sizeof(hdr) + len, MSG_DONTWAIT | MSG_NOSIGNAL);
  // What it sent already is dropped unread (fds it passed are closed with
  // it), so that the close does not turn into ECONNRESET ahead of the answer.
  for (int i = 0; i < 4 && ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT) >= 0; ++i) {
  }
}

void Engine::accept_next() {
  acceptor_.async_accept([this](const boost::system::error_code& ec,
                                SeqPacket::socket sock) {
    if (ec) {
      if (ec != boost::asio::error::operation_aborted) accept_next();
      return;
    }
    const std::optional<PeerCredentials> peer = peer_credentials(sock.native_handle());
    if (!peer || !config_.access.admits(*peer)) {
      refuse(std::move(sock), peer ? &*peer : nullptr);
      accept_next();
      return;
    }
    auto s = std::make_unique<Session>(*this, std::move(sock), next_owner_id_++);
    Session* raw = s.get();
    sessions_.emplace(raw, std::move(s));
    raw->start();
    accept_next();
  });
}

void Engine::arm_doorbell() {
  doorbell_.async_wait(boost::asio::posix::descriptor_base::wait_read,
                       [this](const boost::system::error_code& ec) {
                         if (ec) return;
                         uint64_t v;
                         while (::read(doorbell_fd_, &v, sizeof(v)) == sizeof(v)) {
                         }
                         arm_doorbell();
                       });
}

void Engine::drain_device() {
  for (int i = 0; i < 8 && device_.poll(monotonic_ns()); ++i) {
  }
}

void Engine::take_posted_work(const device::Owner& client) {
  device_.take_posted_sends(&client);
  drain_device();
}

// A busy engine brings sysfs's hw_counters up to date once a second, an
// idle one once it has been idle a moment (kSysfsIdleNs): a program reading
// them after its traffic sees all of it, an idle engine writes nothing, and
// an engine that naps between the messages of a ping-pong (two clients of
// two sessions) does not write files at every nap.
constexpr uint64_t kSysfsIdleNs = 20'000'000;

uint64_t Engine::refresh_sysfs_counters(uint64_t now, uint64_t idle_ns) {
  if (!sysfs_counters_stale_) return 0;
  const bool due = idle_ns ? idle_ns >= kSysfsIdleNs : now - sysfs_counters_ns_ >= 1'000'000'000;
  if (!due) return idle_ns ? kSysfsIdleNs - idle_ns : 0;
  sysfs_counters_ns_ = now;
  sysfs_counters_stale_ = false;
  sysfs_.update_counters(device_.counters());
  return 0;
}

void Engine::wait_wire_wakeup() {
  if (wire_wakeup_fd_ < 0) return;
  // On epoll from the first sleep until the engine has been busy a while
  // (run()): registered, the socket's wait queue holds epoll's entry and
  // tpacket_rcv runs its callback (two IRQ-saving locks) for every frame,
  // also while the engine polls the ring itself; taken off and put back on
  // every nap, a message's round trip would pay two epoll_ctl per sleep.
  if (!wire_wakeup_.is_open()) wire_wakeup_.assign(wire_wakeup_fd_);
  if (wire_wait_pending_) return;
  wire_wait_pending_ = true;
  wire_wakeup_.async_wait(boost::asio::posix::descriptor_base::wait_read,
                          [this](const boost::system::error_code& ec) {
                            if (ec) return;  // aborted by end_wire_wait()
                            wire_wait_pending_ = false;
                            wire_frame_seen_ = true;  // a frame waits in the port's ring
                          });
}

void Engine::end_wire_wait() {
  // Off epoll (the fd stays ours); a wait still pending is aborted.
  if (!wire_wakeup_.is_open()) return;
  wire_wakeup_.release();
  wire_wait_pending_ = false;
}

void Engine::close_session(Session* s) {
  // Defer destruction: we may be inside one of the session's own handlers.
  auto it = sessions_.find(s);
  if (it == sessions_.end()) return;
  snapshots_.erase(s->owner().id);
  std::shared_ptr<Session> doomed(std::move(it->second));
  sessions_.erase(it);
  boost::asio::post(io_, [doomed] {});
}

void Engine::announce_polling_cpu(int cpu) {
  if (shared_) shared_->polling_cpu.store(cpu, std::memory_order_release);
}

void Engine::enable_migration(int home, std::vector<int> away) {
  if (away.empty() || !device_.has_wire()) return;  // a stream comes over a wire port
  // The polling thread's own statistics: this runs on it, before run().
  migration_schedstat_fd_ = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
  if (migration_schedstat_fd_ < 0) return;
  home_cpu_ = home;
  away_cpus_ = std::move(away);
  migration_.emplace();
}

// Clients keep the CPU the engine announced (polling_cpu, its home): a move
// is the engine's while it lasts, and its clients' threads stay off home.
void Engine::check_migration(uint64_t now) {
  next_migration_ns_ = now + EngineMigration::kWindowNs;
  EngineMigration::Sample s;
  s.now_ns = now;
  const device::Counters& c = device_.counters();
  s.frames = c.rx_packets + c.tx_packets;
  SchedStat stat;
  if (!read_schedstat(migration_schedstat_fd_, &stat)) {
    migration_.reset();  // no schedstat: stay where the engine is
    return;
  }
  s.delay_ns = stat.delay_ns;
  const auto clients_ns = [this](uint64_t* total) {
    *total = 0;
    for (const auto& [_, session] : sessions_) {
      uint64_t ns = 0;
      const pid_t pid = session->owner().mem.pid();
      if (pid <= 0 || !process_cpu_ns(pid, &ns)) return false;
      *total += ns;
    }
    return true;
  };
  const auto shares_home = [this] { return engine_pinned_cpus(int(getpid())).count(home_cpu_) > 0; };
  switch (migration_->decide(s, clients_ns, shares_home)) {
    case EngineMigration::Move::kAway:
      if (pin_current_thread(away_cpus_)) ++counters_.cpu_moves_away;
      break;
    case EngineMigration::Move::kHome:
      if (pin_current_thread({home_cpu_})) ++counters_.cpu_moves_home;
      break;
    case EngineMigration::Move::kStay:
      break;
  }
}

// --netdev IF: the kernel interface's addresses are the GIDs and follow it.
// No port: the device is bound to lo (127.0.0.1 and ::1, as its loopback
// port reaches them). A port with --ip/--ip6: those addresses, no interface.
void Engine::bind_interface() {
  const device::DeviceConfig& dev = config_.device;
  std::vector<net::IfAddress> addrs;
  if (!dev.netdev.empty()) {
    if (std::string err = netdev_.open(dev.netdev); !err.empty())
      throw std::runtime_error("cannot bind to interface " + dev.netdev + ": " + err);
    addrs = netdev_.addresses();
    device_.bind_to_kernel([this](int family, const uint8_t* ip) { return netdev_.resolve(family, ip); });
    netdev_.dump_neighbours([this](const net::Neighbour& n) { device_.neighbour_update(n); });
    netdev_events_.assign(dup(netdev_.fd()));
    arm_netdev_events();
    if (std::string err = port_guard_.open(dev.netdev); !err.empty())
      std::fprintf(stderr, "uroced: no UDP socket on the RoCE port of %s (%s): the kernel may answer RoCE "
                   "datagrams with ICMP port unreachable\n", dev.netdev.c_str(), err.c_str());
    if (port_guard_.fd4() >= 0) arm_port_guard(guard4_, port_guard_.fd4());
    if (port_guard_.fd6() >= 0) arm_port_guard(guard6_, port_guard_.fd6());
  } else {
    net::IfAddress a4{AF_INET, {}};
    std::memcpy(a4.addr.data(), dev.ip.data(), 4);
    addrs.push_back(a4);
    net::IfAddress a6{AF_INET6, {}};
    std::memcpy(a6.addr.data(), dev.ip6.data(), 16);
    if (dev.port_spec.empty() && a6.addr == std::array<uint8_t, 16>{}) a6.addr[15] = 1;  // ::1
    if (a6.addr != std::array<uint8_t, 16>{}) addrs.push_back(a6);
    if (dev.port_spec.empty()) netdev_.open_static("lo");  // no lo here: ndev_ifindex 0
  }
  device_.set_ndev_ifindex(uint32_t(netdev_.ifindex()));
  device_.set_addresses(addrs);
}

void Engine::publish_gids() {
  if (!shared_) return;
  const uint32_t seq = shared_->gid_seq.load(std::memory_order_relaxed);
  shared_->gid_seq.store(seq + 1, std::memory_order_relaxed);  // odd: being written
  std::atomic_thread_fence(std::memory_order_release);
  shared_->ndev_ifindex = device_.ndev_ifindex();
  std::memcpy(shared_->gids, device_.info().gids, sizeof(shared_->gids));
  shared_->gid_seq.store(seq + 2, std::memory_order_release);
  sysfs_.update_port(device_.info());
}

void Engine::arm_netdev_events() {
  netdev_events_.async_wait(boost::asio::posix::descriptor_base::wait_read, [this](const boost::system::error_code& ec) {
    if (ec) return;
    const bool moved = netdev_.read_events([this](const net::Neighbour& n) { device_.neighbour_update(n); });
    if (moved && device_.set_addresses(netdev_.addresses())) {
      publish_gids();
      ++counters_.gid_changes;
      for (auto& [raw, s] : sessions_) s->post_port_event(IBV_EVENT_GID_CHANGE);
    }
    arm_netdev_events();
  });
}

void Engine::arm_port_guard(boost::asio::posix::stream_descriptor& sd, int fd) {
  if (!sd.is_open()) sd.assign(dup(fd));
  sd.async_wait(boost::asio::posix::descriptor_base::wait_read, [this, &sd, fd](const boost::system::error_code& ec) {
    if (ec) return;
    counters_.roce_port_datagrams += net::UdpPortGuard::drain(fd);
    arm_port_guard(sd, fd);
  });
}

void Engine::set_port_state(bool up) {
  if (device_.port_active() == up) return;
  device_.set_port_active(up);
  shared_->port_state.store(up ? IBV_PORT_ACTIVE : IBV_PORT_DOWN, std::memory_order_release);
  sysfs_.update_port(device_.info());
  for (auto& [raw, s] : sessions_)
    s->post_port_event(up ? IBV_EVENT_PORT_ACTIVE : IBV_EVENT_PORT_ERR);
}

std::string Engine::status_text(const device::Owner* asking) const {
  std::ostringstream os;
  // The CM's lines right after the device's objects, where they have been.
  std::string dev = device_.status_text();
  const size_t objects = dev.find("\nobjects: ");
  const size_t after = objects == std::string::npos ? std::string::npos : dev.find('\n', objects + 1);
  dev.insert(after == std::string::npos ? dev.size() : after + 1, cm_.status_text());
  os << dev;
  const int cpu = shared_ ? shared_->polling_cpu.load(std::memory_order_relaxed) : -1;
  if (cpu >= 0) os << "engine: polling on CPU " << cpu << '\n';
  else os << "engine: polling on any CPU\n";
  os << "engine: admits " << config_.access.describe() << '\n';
  // The tool asking is not one of the clients it asks about (nor is its
  // probe of a moment ago, whose hang-up may not be read yet: same process).
  auto is_asking = [asking](const Session& s) { return asking && s.owner().mem.pid() == asking->mem.pid(); };
  size_t clients = 0;
  for (const auto& [raw, s] : sessions_) clients += !is_asking(*s);
  os << "clients: " << clients << '\n';
  for (const auto& [raw, s] : sessions_)
    if (!is_asking(*s))
      os << "  pid " << s->owner().mem.pid() << " " << s->owner().comm << " (" << user_name(s->peer().uid)
       << ")\n";
  return os.str();
}

std::string Engine::stats_text() const {
  // Right under the device's first line (an ABI 10 tool, which reads one
  // message of it, still sees them).
  std::string text = device_.stats_text();
  std::ostringstream os;
#define UROCE_ENGINE_COUNTER_LINE(name, desc) \
  os << "  " << #name << " " << counters_.name << "    # " << desc << '\n';
  UROCE_ENGINE_COUNTERS(UROCE_ENGINE_COUNTER_LINE)
#undef UROCE_ENGINE_COUNTER_LINE
  const size_t first_line = text.find('\n');
  text.insert(first_line == std::string::npos ? text.size() : first_line + 1, os.str());
  return text;
}

std::string Engine::report_json(const device::Owner* asking) const {
  nlohmann::json j;
  device_.report(j);
  cm_.report(j["cm"]);
#define UROCE_ENGINE_COUNTER_JSON(name, desc) j["counters"][#name] = counters_.name;
  UROCE_ENGINE_COUNTERS(UROCE_ENGINE_COUNTER_JSON)
#undef UROCE_ENGINE_COUNTER_JSON
  const int cpu = shared_ ? shared_->polling_cpu.load(std::memory_order_relaxed) : -1;
  j["engine"] = {{"pid", int(getpid())}, {"polling_cpu", cpu}, {"admits", config_.access.describe()}};
  nlohmann::json clients = nlohmann::json::array();
  for (const auto& [raw, s] : sessions_)
    if (!asking || s->owner().mem.pid() != asking->mem.pid())
      clients.push_back({{"pid", int(s->owner().mem.pid())}, {"comm", s->owner().comm}, {"uid", s->peer().uid}});
  j["clients"] = clients;
  j["time_ns"] = monotonic_ns();
  return j.dump();
}

const std::string& Engine::snapshot(const device::Owner& client, Snapshot kind, bool fresh) {
  std::string& snap = snapshots_[client.id][size_t(kind)];
  if (fresh) {
    switch (kind) {
      case Snapshot::kReport: snap = report_json(&client); break;
      case Snapshot::kStatus: snap = status_text(&client); break;
      case Snapshot::kStats: snap = stats_text(); break;
      case Snapshot::kCount: break;
    }
  }
  return snap;
}

void Engine::run() {
  uint64_t last_work = monotonic_ns();
  uint32_t iterations = 0;
  while (!stopping_) {
    // Control messages are cheap to check but cost a syscall: every 64 busy
    // iterations, and always before sleeping.
    if ((++iterations & 63) == 0) io_.poll();
    const uint64_t now = monotonic_ns();
    if ((iterations & 1023) == 0) refresh_sysfs_counters(now, 0);
    if (migration_ && now >= next_migration_ns_) check_migration(now);
    if (device_.poll(now)) {
      last_work = now;
      sysfs_counters_stale_ = true;
      if (wire_wakeup_.is_open() && now - woke_ns_ > kWireWaitKeepNs) end_wire_wait();
      continue;
    }
    io_.poll();
    if (idle_.spin(now, now - last_work)) {
      // Clients often busy-poll their CQs; on a machine with few cores let
      // them run rather than spin against them.
      sched_yield();
      continue;
    }

    const uint64_t sysfs_due_ns = refresh_sysfs_counters(now, std::max<uint64_t>(now - last_work, 1));
    // A stream from the wire: nap on a timer, off the port's socket, rather
    // than have the sender wake us for every few frames (emulator/wire_moderation.h).
    // Clients are not told we sleep: a doorbell waits for the nap's end.
    if (device_.has_wire()) {
      const uint64_t frames = device_.counters().rx_packets;
      const uint64_t nap_ns = WireModeration::nap_ns(frames - frames_at_wake_, now - woke_ns_);
      if (nap_ns) {
        end_wire_wait();
        const timespec nap{0, long(nap_ns)};
        nanosleep(&nap, nullptr);
        ++counters_.wire_moderated_naps;
        woke_ns_ = monotonic_ns();
        idle_.woke(woke_ns_);
        frames_at_wake_ = frames;
        continue;
      }
    }
    // A wire port wakes us through its af_packet socket, readable while a
    // frame waits in its ring: a frame before the last look below is found by
    // it, one after it makes the fd readable. No filter is switched per nap
    // (net/af_packet_wakeup.h).
    const bool wire_armed = device_.has_wire() && device_.arm_wire_wakeup();
    wire_frame_seen_ = false;
    // Going to sleep: announce it, then look once more so a doorbell that
    // raced with the announcement is not lost (the client checks `sleeping`
    // after publishing; both sides fence).
    shared_->sleeping.store(1, std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (device_.poll(monotonic_ns())) {
      shared_->sleeping.store(0, std::memory_order_relaxed);
      last_work = monotonic_ns();
      sysfs_counters_stale_ = true;
      continue;
    }
    // Counters due for sysfs: wake for them, unless a wire port's nap
    // (wire_max_sleep_ns) brings the engine round soon enough anyway.
    uint64_t wait_ns = sysfs_due_ns && !device_.has_wire() ? sysfs_due_ns : 1'000'000'000;
    if (uint64_t deadline = device_.next_deadline_ns()) {
      const uint64_t t = monotonic_ns();
      wait_ns = deadline > t ? std::min(wait_ns, deadline - t) : 0;
    }
    // Without the fd (not af_packet, or the filter failed), nap briefly.
    if (device_.has_wire()) {
      if (wire_armed) {
        wait_wire_wakeup();
        wait_ns = std::min(wait_ns, config_.wire_max_sleep_ns);
      } else {
        wait_ns = std::min(wait_ns, config_.wire_nap_ns);
      }
    }
    if (wait_ns) io_.run_one_for(std::chrono::nanoseconds(wait_ns));
    woke_ns_ = monotonic_ns();
    idle_.woke(woke_ns_);
    frames_at_wake_ = device_.counters().rx_packets;
    if (wire_frame_seen_) device_.count_wire_wakeup();
    if (io_.stopped()) io_.restart();
    shared_->sleeping.store(0, std::memory_order_relaxed);
    // No last_work update: if the wakeup brought work, the next poll finds it
    // and the loop spins again; a timer or nap with nothing to do sleeps at once.
  }
  acceptor_.close();
  sessions_.clear();  // closes every client socket and async pipe: DEVICE_FATAL for them
  remove_files();
}

}  // namespace uroce::emulator
