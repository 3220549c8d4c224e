// Polling threads off the engine's CPU (include/uroce/cpu_placement.h says
// why). A thread that creates or polls a CQ of a context whose engine polls on
// one CPU leaves that CPU, if it may run elsewhere: only threads that poll
// move, so a command wrapped whole in `uroce run` (a build, a test suite)
// keeps every CPU for everything else. `uroce run` asks for it
// (UROCE_POLL_PLACEMENT=1; `uroce run --all-cpus` does not).
#include <cstdlib>
#include <cstring>
#include <vector>

#include "uroce/cpu_placement.h"
#include "verbs_provider/provider.h"

namespace uroce::provider {

void place_polling_thread(const UContext* ctx) {
  thread_local bool placed = false;
  if (placed) return;
  placed = true;
  static const bool wanted = [] {
    const char* e = std::getenv("UROCE_POLL_PLACEMENT");
    return e && std::strcmp(e, "1") == 0;
  }();
  if (!wanted) return;
  const int engine_cpu = ctx->shared->polling_cpu.load(std::memory_order_relaxed);
  if (engine_cpu < 0) return;
  std::vector<int> others;
  bool on_engine_cpu = false;
  for (int c : current_cpus()) {
    if (c == engine_cpu) on_engine_cpu = true;
    else others.push_back(c);
  }
  if (!on_engine_cpu || others.empty()) return;
  // Two sessions are two scheduler autogroups, and sched_yield does not hand
  // the CPU from one to the other: two pollers started from two terminals
  // that both spin on memory (ib_write_lat's server and client) would take
  // turns on one CPU by whole time slices (4 ms). So beside another session's
  // process alone on the one CPU left, this thread stays where it is, free to
  // run beside the engine, which yields its CPU while it shares it.
  if (others.size() == 1 && other_session_pinned_to(others)) return;
  pin_current_thread(others);
}

}  // namespace uroce::provider
