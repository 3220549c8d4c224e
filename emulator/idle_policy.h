// What the engine does when it finds no work: spin a while (work usually
// follows within microseconds, and a spinning engine answers at once), or
// sleep until a doorbell, control message or timer wakes it.
//
// Spinning pays only while the engine has its CPU to itself. When another
// busy task shares that CPU, spinning steals it from that task: a client
// that spins on memory outside ibv_poll_cq (ib_write_lat does) in another
// session (another scheduler autogroup, to which sched_yield does not hand
// the CPU) then waits a whole time slice, about 4 ms, for every hop. The
// sign is the engine's own run delay (time runnable but not running, from
// /proc/thread-self/schedstat): a kernel thread now and then costs
// microseconds, a task sharing the CPU milliseconds. While the delay is more
// than a few percent of the time, two windows in a row, the engine sleeps as
// soon as it is idle and clients wake it through the doorbell.
//
// Only the delay the engine meets while awake counts. Waking from a sleep
// is run delay too, and on a VM's idle CPU (a halted virtual CPU the host
// must run again) now and then milliseconds of it, with nobody else on the
// CPU: an engine that napped between a client's control requests (opening
// the device, registering memory) found its idle CPU "shared" that way, and
// then slept between the messages of the latency test that followed
// (ib_send_lat 22 us instead of 5, one run in three on this project's 2-CPU
// VMs). A task that shares the CPU still shows: it delays the engine while
// the engine spins.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>

#include "uroce/cpu_placement.h"

namespace uroce::emulator {

class IdlePolicy {
 public:
  explicit IdlePolicy(uint64_t spin_ns)
      : spin_ns_(spin_ns), schedstat_fd_(open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC)) {}
  ~IdlePolicy() {
    if (schedstat_fd_ >= 0) close(schedstat_fd_);
  }
  IdlePolicy(const IdlePolicy&) = delete;
  IdlePolicy& operator=(const IdlePolicy&) = delete;

  // Whether to keep spinning, idle_ns after the last work.
  bool spin(uint64_t now_ns, uint64_t idle_ns) {
    if (idle_ns >= spin_ns_) return false;
    if (now_ns >= window_end_ns_) {
      const uint64_t delay = run_delay_ns();
      // Two delayed windows in a row: a process starting up there is not sharing.
      const uint64_t grew = delay - window_delay_ns_ - std::min(delay - window_delay_ns_, wake_delay_ns_);
      const bool delayed = window_end_ns_ && grew > kWindowNs / kSharedFraction;
      if (delayed && last_window_delayed_) shared_until_ns_ = now_ns + kSharedHoldNs;
      last_window_delayed_ = delayed;
      window_delay_ns_ = last_read_ns_ = delay;
      wake_delay_ns_ = 0;
      window_end_ns_ = now_ns + kWindowNs;
    }
    return now_ns >= shared_until_ns_;
  }
  // After a sleep: the delay since the last read (the wake-up's, and what
  // little the engine met awake before it slept) is not counted. Read only
  // while the engine is not held as shared (the hold ends by the clock), so
  // a shared engine's nap costs no extra read.
  void woke(uint64_t now_ns) {
    if (now_ns < shared_until_ns_ || !window_end_ns_) return;
    const uint64_t delay = run_delay_ns();
    wake_delay_ns_ += delay >= last_read_ns_ ? delay - last_read_ns_ : 0;
    last_read_ns_ = delay;
  }

 private:
  static constexpr uint64_t kWindowNs = 20'000'000;      // one read per window of spinning
  static constexpr uint64_t kSharedFraction = 20;        // delayed > 5% of it: shared
  static constexpr uint64_t kSharedHoldNs = 50'000'000;  // then try spinning again

  uint64_t run_delay_ns() const {
    SchedStat s;
    return read_schedstat(schedstat_fd_, &s) ? s.delay_ns : window_delay_ns_;
  }

  uint64_t spin_ns_;
  int schedstat_fd_;
  uint64_t window_end_ns_ = 0;
  uint64_t window_delay_ns_ = 0;
  uint64_t shared_until_ns_ = 0;
  uint64_t last_read_ns_ = 0;   // run delay at the last read (window start or wake-up)
  uint64_t wake_delay_ns_ = 0;  // delay around this window's sleeps, not counted
  bool last_window_delayed_ = false;
};

}  // namespace uroce::emulator
