// Polling threads off the engine's CPU (include/uroce/cpu_placement.h says
// why). A thread that creates or polls a CQ of a context whose engine polls on
// one CPU leaves that CPU, if it may run elsewhere: only threads that poll
// move, so a command wrapped whole in `uroce run` (a build, a test suite)
// keeps every CPU for everything else. `uroce run` asks for it
// (UROCE_POLL_PLACEMENT=1; `uroce run --all-cpus` does not).
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "uroce/cpu_placement.h"
#include "verbs_provider/provider.h"

namespace uroce::provider {

namespace {

// A poller placed beside another session's process (below) watches whether
// it gets the CPU back when it yields. Two sessions are two scheduler
// autogroups; sched_yield still hands the CPU from one to the other (CFS
// skips the yielding group's entity when the other's vruntime is close), so
// two clients that both poll through the provider (ib_send_lat, ib_send_bw)
// take turns in microseconds, as two of one session do. A process that
// spins on memory without yielding (ib_write_lat waits for its peer's
// RDMA WRITE that way) keeps the CPU until the scheduler's tick takes it, a
// whole time slice (4 ms medians were measured). The sign is this thread's
// run delay per time it was put on the CPU (/proc/thread-self/schedstat:
// time on the CPU, time runnable but waiting, times run): microseconds
// beside a poller that yields, milliseconds beside one that does not. Two
// windows of that in a row, and the thread goes back to the CPUs it had,
// beside the engine, which sleeps when idle on a CPU it shares.
class SharedCpuWatch {
 public:
  void start(std::vector<int> home) {
    home_ = std::move(home);
    active_ = true;
    next_check_ns_ = 0;
  }
  bool active() const { return active_; }
  // Called on each poll while active: one counter; the clock every
  // kCallsPerCheck polls (a poller that waits whole slices polls seldom).
  void tick() {
    if (++calls_ % kCallsPerCheck) return;
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    const uint64_t now_ns = uint64_t(ts.tv_sec) * 1'000'000'000 + uint64_t(ts.tv_nsec);
    if (now_ns < next_check_ns_) return;
    SchedStat stat;
    if (!read_own_schedstat(&stat)) {
      active_ = false;  // no schedstat (kernel without it): stay
      return;
    }
    if (next_check_ns_) {
      const uint64_t window_ns = now_ns - window_start_ns_;
      const uint64_t waited_ns = stat.delay_ns - delay_ns_;
      const uint64_t times = stat.slices - slices_;
      const bool slice_waits = times && waited_ns / times >= kSliceWaitNs && waited_ns * 4 >= window_ns;
      if (slice_waits && last_window_waited_) {
        pin_current_thread(home_);
        active_ = false;
        return;
      }
      last_window_waited_ = slice_waits;
    }
    window_start_ns_ = now_ns;
    delay_ns_ = stat.delay_ns;
    slices_ = stat.slices;
    next_check_ns_ = now_ns + kWindowNs;
  }

 private:
  static constexpr uint32_t kCallsPerCheck = 4;
  static constexpr uint64_t kWindowNs = 2'000'000;
  static constexpr uint64_t kSliceWaitNs = 1'000'000;  // a yield is answered in microseconds

  static bool read_own_schedstat(SchedStat* s) {
    const int fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    const bool ok = read_schedstat(fd, s);
    if (fd >= 0) close(fd);
    return ok;
  }

  std::vector<int> home_;
  bool active_ = false;
  bool last_window_waited_ = false;
  uint32_t calls_ = 0;
  uint64_t next_check_ns_ = 0;
  uint64_t window_start_ns_ = 0;
  uint64_t delay_ns_ = 0;
  uint64_t slices_ = 0;
};

enum class Placed : uint8_t { kNot, kDone, kWatching };
thread_local Placed placed = Placed::kNot;
thread_local SharedCpuWatch shared_cpu_watch;

void place(const UContext* ctx) {
  static const bool wanted = [] {
    const char* e = std::getenv("UROCE_POLL_PLACEMENT");
    return e && std::strcmp(e, "1") == 0;
  }();
  if (!wanted) return;
  const int engine_cpu = ctx->shared->polling_cpu.load(std::memory_order_relaxed);
  if (engine_cpu < 0) return;
  std::vector<int> mine = current_cpus();
  std::vector<int> others;
  bool on_engine_cpu = false;
  for (int c : mine) {
    if (c == engine_cpu) on_engine_cpu = true;
    else others.push_back(c);
  }
  if (!on_engine_cpu || others.empty()) return;
  // Beside another session's process alone on the one CPU left (the other
  // end of a pair started from two terminals), as beside one of this
  // session: off the engine's CPU the engine spins undisturbed and the two
  // hand the CPU to each other on every empty poll. Unless that process
  // turns out not to yield (SharedCpuWatch): then back.
  if (others.size() == 1 && other_session_pinned_to(others)) {
    shared_cpu_watch.start(std::move(mine));
    placed = Placed::kWatching;
  }
  pin_current_thread(others);
}

}  // namespace

void place_polling_thread(const UContext* ctx) {
  if (placed == Placed::kDone) [[likely]] return;
  if (placed == Placed::kWatching) {
    shared_cpu_watch.tick();
    if (!shared_cpu_watch.active()) placed = Placed::kDone;
    return;
  }
  placed = Placed::kDone;
  place(ctx);
}

}  // namespace uroce::provider
