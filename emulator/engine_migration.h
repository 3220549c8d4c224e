// Where an engine polls while it receives a stream for clients that sleep:
// off the CPU it shares with another engine, for as long as that lasts.
//
// On a machine with two CPUs, two engines (the two ends of a two-namespace
// test) share one CPU and their clients poll on the other
// (include/uroce/cpu_placement.h says why: under load, and whenever both
// ends' clients spin, it is the placement that holds up). But when one
// engine streams to the other and the receiving side's clients sleep
// (ib_write_bw's server waits in a socket read; any one-sided RDMA target),
// the receiver's work takes CPU time from the sender on their shared CPU,
// while the clients' CPU holds only the sender's client, which yields it on
// every empty poll. There the receiver is better off: measured on the 2-CPU
// VM (docs/PERFORMANCE.md, "An engine that moves while its clients sleep"),
// ib_write_bw 64 KiB between the engines gained a quarter. Both ends' clients
// spinning (raw_ethernet_bw, ib_send_bw, latency tests) keep the engines
// together, where the decision of include/uroce/cpu_placement.h was measured.
//
// So an engine placed beside another one (uroced --cpu auto) looks every
// window at its own figures: wire frames handled, its run delay (time
// runnable but waiting for its CPU), and, while frames come, the CPU time of
// its clients' processes. Busy with frames, waiting for its CPU, its clients asleep, two
// windows in a row, and another engine pinned to its CPU: it moves to the
// other CPUs. It goes back when its frames stop, when a client of its own
// wakes, or when it waits for the CPU there too (then it stays home a while,
// longer each time: a loaded machine is no better elsewhere).
#pragma once

#include <algorithm>
#include <cstdint>

namespace uroce::emulator {

class EngineMigration {
 public:
  static constexpr uint64_t kWindowNs = 200'000'000;
  // Busy: at least this many frames a window (10,000 a second).
  static constexpr uint64_t kBusyFrames = 2'000;
  // Clients asleep: their processes used at most 5 % of a CPU.
  static constexpr uint64_t kClientsIdleNs = kWindowNs / 20;
  // Waiting for the CPU at home: 10 % of the window; away, 25 % is too much.
  static constexpr uint64_t kDelayedHomeNs = kWindowNs / 10;
  static constexpr uint64_t kDelayedAwayNs = kWindowNs / 4;
  static constexpr uint64_t kFirstBackoffNs = 5'000'000'000;
  static constexpr uint64_t kMaxBackoffNs = 60'000'000'000;

  // One window's figures, each a running total (deltas are taken here).
  struct Sample {
    uint64_t now_ns = 0;
    uint64_t frames = 0;      // wire frames received and sent
    uint64_t delay_ns = 0;    // the polling thread's run delay
  };
  enum class Move : uint8_t { kStay, kAway, kHome };

  // Called once a window. clients_ns(&ns) reads the CPU time the clients'
  // processes have used (a file of /proc per client: read only while the
  // engine is busy with frames; false if some client's could not be read).
  // shares_home() says whether another engine is pinned to the home CPU (a
  // scan of /proc: asked only when everything else says move away).
  template <typename ClientsNs, typename SharesHome>
  Move decide(const Sample& s, ClientsNs&& clients_ns, SharesHome&& shares_home) {
    const bool first = !have_last_;
    const Sample last = last_;
    last_ = s;
    have_last_ = true;
    if (first) return Move::kStay;
    // A window runs late while the engine sleeps: the figures are per
    // kWindowNs of the time that passed.
    const uint64_t elapsed = std::max<uint64_t>(s.now_ns - last.now_ns, 1);
    const auto per_window = [elapsed](uint64_t v) { return uint64_t(double(v) * kWindowNs / double(elapsed)); };
    const uint64_t frames = per_window(s.frames - last.frames);
    const uint64_t delay = per_window(s.delay_ns - last.delay_ns);
    // The clients' CPU time over a window needs a reading at both ends: the
    // first busy window only takes one. A total that fell (a client left)
    // counts as busy.
    bool clients_asleep = false;
    const bool busy = frames >= kBusyFrames;
    uint64_t clients = 0;
    const bool clients_read = busy && clients_ns(&clients);
    if (clients_read && have_clients_ && clients >= last_clients_ns_)
      clients_asleep = per_window(clients - last_clients_ns_) <= kClientsIdleNs;
    have_clients_ = clients_read;
    last_clients_ns_ = clients;
    const bool streaming = busy && clients_asleep;
    if (away_) {
      const bool crowded = delay >= kDelayedAwayNs;
      const bool crowded_twice = crowded && last_crowded_;
      last_crowded_ = crowded;
      if (!streaming || crowded_twice) {
        if (crowded_twice) {
          home_until_ns_ = s.now_ns + backoff_ns_;
          backoff_ns_ = std::min(backoff_ns_ * 2, kMaxBackoffNs);
        }
        away_ = false;
        last_wanted_ = false;
        return Move::kHome;
      }
      return Move::kStay;
    }
    const bool wanted = streaming && delay >= kDelayedHomeNs && s.now_ns >= home_until_ns_;
    const bool wanted_twice = wanted && last_wanted_;
    last_wanted_ = wanted;
    if (!wanted_twice || !shares_home()) return Move::kStay;
    away_ = true;
    last_crowded_ = false;
    return Move::kAway;
  }
  bool away() const { return away_; }

 private:
  Sample last_;
  bool have_last_ = false;
  uint64_t last_clients_ns_ = 0;
  bool have_clients_ = false;  // last_clients_ns_ was read in the last window
  bool away_ = false;
  bool last_wanted_ = false;
  bool last_crowded_ = false;
  uint64_t home_until_ns_ = 0;
  uint64_t backoff_ns_ = kFirstBackoffNs;
};

}  // namespace uroce::emulator
