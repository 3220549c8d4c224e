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
#include <sched.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
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

// CPUs that running engines (processes named uroced, in any runtime
// directory or network namespace of this PID namespace) are pinned to.
// Calls fn(pid) for every process; stops when fn returns false.
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

inline std::multiset<int> engine_pinned_cpus(int except_pid = 0) {
  std::multiset<int> out;
  for_each_process([&](int pid) {
    if (pid == except_pid || !is_live_engine(pid)) return true;
    const std::vector<int> cpus = process_cpus(pid);
    if (cpus.size() == 1) out.insert(cpus[0]);
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

// The engine's choice: of the CPUs it may use (at least two, else -1), the
// one fewest other engines are pinned to; on a tie the highest-numbered
// (CPU 0 takes most interrupts).
inline int choose_engine_cpu() {
  const std::vector<int> mine = current_cpus();
  if (mine.size() < 2) return -1;
  const std::multiset<int> taken = engine_pinned_cpus(int(getpid()));
  int best = -1;
  size_t best_count = 0;
  for (int c : mine) {
    const size_t n = taken.count(c);
    if (best < 0 || n <= best_count) {
      best = c;
      best_count = n;
    }
  }
  return best;
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
