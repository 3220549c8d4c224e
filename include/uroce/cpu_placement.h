// Where the engine's polling thread runs, and where clients' polling threads
// run: shared by the engine and the provider (header-only).
//
// The engine is the device: while it has work it busy-polls, like a NIC's
// processor. On a machine with fewer cores than busy pollers (client, server
// and engine on two cores), a polling engine time-sliced against a client
// that spins on memory (ib_write_lat waits for data that way, outside
// ibv_poll_cq) makes every hop wait a whole slice: medians of 1-4 ms instead
// of 1.5 us were measured. So an engine on a machine with two or more CPUs
// pins itself to one CPU, and the threads of a `uroce run` command that poll
// its CQs leave that CPU (verbs_provider/placement.cc). An idle engine sleeps,
// so its CPU is free for anything else, and an engine that finds its CPU
// shared yields it (emulator/idle_policy.h).
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace uroce {

// "0-3,8,10-11" -> {0,1,2,3,8,10,11}; empty on a malformed list.
inline std::vector<int> parse_cpu_list(const std::string& s) {
  std::vector<int> out;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t end = s.find(',', pos);
    if (end == std::string::npos) end = s.size();
    const std::string item = s.substr(pos, end - pos);
    pos = end + 1;
    if (item.empty()) continue;
    int lo, hi;
    char dash;
    if (std::sscanf(item.c_str(), "%d%c%d", &lo, &dash, &hi) == 3 && dash == '-') {
    } else if (std::sscanf(item.c_str(), "%d", &lo) == 1) {
      hi = lo;
    } else {
      return {};
    }
    if (lo < 0 || hi < lo || hi >= CPU_SETSIZE) return {};
    for (int c = lo; c <= hi; ++c) out.push_back(c);
  }
  return out;
}

// The CPUs a process's main thread may run on (/proc/PID/status).
inline std::vector<int> process_cpus(int pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  const std::string key = "Cpus_allowed_list:";
  while (std::getline(f, line))
    if (line.compare(0, key.size(), key) == 0) {
      const size_t at = line.find_first_not_of(" \t", key.size());
      return at == std::string::npos ? std::vector<int>{} : parse_cpu_list(line.substr(at));
    }
  return {};
}

// A process's state letter and session (/proc/PID/stat fields 3 and 6).
struct ProcessStat {
  char state = '?';
  int session = -1;
};
inline ProcessStat process_stat(int pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  std::getline(f, stat);
  const size_t close = stat.rfind(')');  // the command name may hold spaces
  ProcessStat out;
  int ppid, pgrp;
  if (close == std::string::npos ||
      std::sscanf(stat.c_str() + close + 1, " %c %d %d %d", &out.state, &ppid, &pgrp, &out.session) != 4)
    return {};
  return out;
}

// Live (not zombie) processes named uroced.
inline bool is_live_engine(int pid) {
  std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  if (!std::getline(comm, name) || name != "uroced") return false;
  const char state = process_stat(pid).state;
  return state != 'Z' && state != 'X';
}

// Calls fn(pid) for every process of this PID namespace; stops when fn
// returns false.
template <typename Fn>
void for_each_process(Fn fn) {
  DIR* d = opendir("/proc");
  if (!d) return;
  while (dirent* e = readdir(d)) {
    const int pid = std::atoi(e->d_name);
    if (pid > 0 && !fn(pid)) break;
  }
  closedir(d);
}

// Fields first..last of /proc/PID/stat (numbered as proc(5) numbers them,
// from 3: after the command name, which may hold spaces), or {} if the
// process is gone.
inline std::vector<std::string> process_stat_fields(int pid, int first, int last) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  std::getline(f, stat);
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return {};
  std::istringstream rest(stat.substr(close + 1));
  std::vector<std::string> out;
  std::string field;
  for (int i = 3; i <= last && rest >> field; ++i)
    if (i >= first) out.push_back(field);
  if (out.size() != size_t(last - first + 1)) return {};
  return out;
}

// When a process started, in clock ticks since boot (/proc/PID/stat field
// 22); 0 if unknown.
inline unsigned long long process_start_ticks(int pid) {
  const std::vector<std::string> f = process_stat_fields(pid, 22, 22);
  return f.empty() ? 0 : std::strtoull(f[0].c_str(), nullptr, 10);
}

// The CPU time all of a process's threads have used (/proc/PID/stat fields
// 14 and 15, user and system), in nanoseconds; false if the process is gone.
inline bool process_cpu_ns(int pid, uint64_t* out) {
  const std::vector<std::string> f = process_stat_fields(pid, 14, 15);
  if (f.empty()) return false;
  static const long hz = sysconf(_SC_CLK_TCK);
  const uint64_t ticks = std::strtoull(f[0].c_str(), nullptr, 10) + std::strtoull(f[1].c_str(), nullptr, 10);
  *out = ticks * (1'000'000'000 / uint64_t(hz > 0 ? hz : 100));
  return true;
}

// The engines pinned to one CPU: how many, and when the youngest of them
// started (process_start_ticks).
struct CpuEngines {
  size_t count = 0;
  unsigned long long youngest_start = 0;
};

// Running engines (processes named uroced, in any runtime directory or
// network namespace of this PID namespace) pinned to a single CPU, by CPU.
inline std::map<int, CpuEngines> engine_pinned_cpus(int except_pid = 0) {
  std::map<int, CpuEngines> out;
  for_each_process([&](int pid) {
    if (pid == except_pid || !is_live_engine(pid)) return true;
    const std::vector<int> cpus = process_cpus(pid);
    if (cpus.size() != 1) return true;
    CpuEngines& e = out[cpus[0]];
    e.count++;
    e.youngest_start = std::max(e.youngest_start, process_start_ticks(pid));
    return true;
  });
  return out;
}

inline std::vector<int> current_cpus() {
  cpu_set_t set;
  std::vector<int> out;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.push_back(c);
  return out;
}

inline bool pin_current_thread(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) CPU_SET(c, &set);
  return !cpus.empty() && sched_setaffinity(0, sizeof(set), &set) == 0;
}

// The engine's choice, of the CPUs it may use (at least two, else -1).
// Clients' polling threads leave their engine's CPU
// (verbs_provider/placement.cc), so at least one CPU should stay free of
// engines for them: a client spinning on another engine's CPU makes every
// hop through that engine wait for a time slice. So an engine takes a CPU
// no engine is pinned to only while that leaves another such CPU (the
// highest-numbered: CPU 0 takes most interrupts); else it shares the CPU of
// the youngest engine, the one most likely started with it to talk to it
// (the two ends of a two-namespace test). On two CPUs two engines thus poll
// on one CPU and their clients on the other. Measured on the 2-core VM, two
// engines over a veth, load 8 to 10: engines on CPUs 1 and 0 (clients each
// on the other engine's CPU), ib_send_lat -n 2000 did not finish in 60 s
// (twice), ib_write_bw 194 and 211 MB/s, ibv_rc_pingpong with drop=0.04 2
// of 6 (9 RETRY_EXC_ERR); both on CPU 1, ib_send_lat 600 us average (178
// typical), ib_write_bw 330 MB/s, ibv_rc_pingpong 4 of 6.
inline int choose_engine_cpu() {
  const std::vector<int> mine = current_cpus();
  if (mine.size() < 2) return -1;
  const std::map<int, CpuEngines> taken = engine_pinned_cpus(int(getpid()));
  std::vector<int> free;
  int youngest = -1;
  unsigned long long youngest_start = 0;
  for (int c : mine) {
    const auto it = taken.find(c);
    if (it == taken.end()) {
      free.push_back(c);
    } else if (youngest < 0 || it->second.youngest_start >= youngest_start) {
      youngest = c;
      youngest_start = it->second.youngest_start;
    }
  }
  if (free.size() >= 2 || youngest < 0) return free.back();
  return youngest;
}

// Held while an engine chooses its CPU and pins itself to it, so that two
// engines starting at once do not both choose before either is pinned: an
// flock on a file every engine of the machine can open (/tmp, mode 0644,
// whoever made it first). Waits at most about 2 s (a process of another
// user could hold it for ever), then goes on without it; no lock at all if
// the file cannot be opened.
class PlacementLock {
 public:
  static constexpr const char* kPath = "/tmp/.uroce-cpu-placement.lock";
  PlacementLock() {
    // Open without O_CREAT first: with fs.protected_regular, O_CREAT fails
    // on another user's file in a sticky directory even when it exists.
    fd_ = ::open(kPath, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd_ < 0 && errno == ENOENT) {
      fd_ = ::open(kPath, O_RDONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
      if (fd_ >= 0) ::fchmod(fd_, 0644);  // whatever the umask
      else fd_ = ::open(kPath, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);  // lost the race to make it
    }
    if (fd_ < 0) return;
    for (int i = 0; i < 200; ++i) {
      if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) {
        locked_ = true;
        return;
      }
      if (errno != EWOULDBLOCK && errno != EINTR) break;
      ::usleep(10'000);
    }
  }
  ~PlacementLock() {
    if (fd_ >= 0) ::close(fd_);  // releases the lock
  }
  PlacementLock(const PlacementLock&) = delete;
  PlacementLock& operator=(const PlacementLock&) = delete;
  bool locked() const { return locked_; }

 private:
  int fd_ = -1;
  bool locked_ = false;
};

// The calling thread's scheduler statistics, from an open
// /proc/thread-self/schedstat (read from offset 0 each time): time on the
// CPU, time runnable but waiting for it (the run delay), and how many times
// it was put on it. The engine's idle policy and the provider's placement
// both judge from them whether their CPU is shared.
struct SchedStat {
  uint64_t run_ns = 0;
  uint64_t delay_ns = 0;
  uint64_t slices = 0;
};
inline bool read_schedstat(int fd, SchedStat* out) {
  char buf[96];
  const ssize_t n = fd >= 0 ? pread(fd, buf, sizeof(buf) - 1, 0) : -1;
  if (n <= 0) return false;
  buf[n] = '\0';
  unsigned long long run = 0, delay = 0, slices = 0;
  if (std::sscanf(buf, "%llu %llu %llu", &run, &delay, &slices) != 3) return false;
  *out = SchedStat{run, delay, slices};
  return true;
}

// Whether a process of another session is pinned to exactly `cpus`: a
// command that `uroce run` placed there from another terminal.
inline bool other_session_pinned_to(const std::vector<int>& cpus) {
  const int my_sid = int(getsid(0));
  bool found = false;
  for_each_process([&](int pid) {
    if (pid == int(getpid()) || process_cpus(pid) != cpus) return true;
    const ProcessStat st = process_stat(pid);
    if (st.state == 'Z' || st.state == 'X' || is_live_engine(pid)) return true;
    found = st.session > 0 && st.session != my_sid;
    return !found;
  });
  return found;
}

}  // namespace uroce
