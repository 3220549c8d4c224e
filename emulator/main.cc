// uroced: the engine daemon. Runs in the foreground; `uroce start` detaches it.
#include <malloc.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "emulator/command_line.h"
#include "emulator/engine.h"
#include "uroce/cpu_placement.h"
#include "uroce/runtime_dir.h"

namespace {

// Completion channels and clients' async pipes cost the engine a descriptor
// each (queues do not: their memfds are closed once passed): take all the
// descriptors the hard limit allows.
void raise_fd_limit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
  }
}

// Each QP's engine-side copy of its send queue can be megabytes; glibc would
// give each such block a mapping of its own, and mappings are what bound the
// queues the device can hold (device/params.h): keep them on the heap.
void keep_allocations_off_mappings() { mallopt(M_MMAP_THRESHOLD, 32 << 20); }

// vm.max_map_count bounds the queues the device can hold (device/params.h).
uint64_t read_max_map_count() {
  std::ifstream f("/proc/sys/vm/max_map_count");
  uint64_t n = 0;
  if (f >> n && n > 0) return n;
  return uroce::device::kDefaultMaxMapCount;
}

}  // namespace

int main(int argc, char** argv) {
  // The engine's files (pid file, captures) are its owner's alone; the
  // socket gets the mode the access policy gives it (emulator/access.h).
  umask(077);
  uroce::emulator::EngineConfig config;
  config.runtime_dir = uroce::runtime_dir();
  config.access.owner = geteuid();
  config.device.max_map_count = read_max_map_count();
  raise_fd_limit();
  keep_allocations_off_mappings();
  int exit_status = 0;
  const auto parsed = uroce::emulator::parse_command_line(argc, argv, config, &exit_status);
  if (!parsed) return exit_status;
  config = *parsed;
  try {
    uroce::emulator::Engine engine(config);
    engine.start();
    // After start(): DPDK's EAL sets the thread's affinity when it initialises.
    // Chosen and pinned under the placement lock: an engine starting at the
    // same moment sees this one's CPU.
    const bool auto_cpu = config.cpu == uroce::emulator::EngineConfig::kCpuAuto;
    std::optional<uroce::PlacementLock> placement;
    if (auto_cpu) placement.emplace();
    const std::vector<int> allowed = uroce::current_cpus();
    const int cpu = auto_cpu ? uroce::choose_engine_cpu() : config.cpu;
    const bool pinned = cpu >= 0 && uroce::pin_current_thread({cpu});
    const int pin_errno = errno;
    placement.reset();
    if (cpu >= 0 && !pinned)
      std::fprintf(stderr, "uroced: cannot pin to CPU %d: %s\n", cpu, std::strerror(pin_errno));
    else if (cpu >= 0) {
      std::fprintf(stderr, "uroced: polling on CPU %d\n", cpu);
      engine.announce_polling_cpu(cpu);
      if (auto_cpu) {
        std::vector<int> away;
        for (int c : allowed)
          if (c != cpu) away.push_back(c);
        engine.enable_migration(cpu, std::move(away));
      }
    }
    std::fprintf(stderr, "uroced: %s ready on %s\n", config.device.name.c_str(),
                 uroce::engine_socket_path(config.runtime_dir, config.device.name).c_str());
    engine.run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "uroced: %s\n", e.what());
    return 1;
  }
  return 0;
}
