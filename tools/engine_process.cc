#include "tools/engine_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>
#include <set>
#include <stdexcept>
#include <thread>

#include "tools/engine_client.h"
#include "uroce/abi.h"
#include "uroce/runtime_dir.h"

namespace uroce::tool {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr auto kPollInterval = 20ms;
constexpr auto kKillGrace = 2s;  // after SIGKILL, or after SIGTERM of a failed start
constexpr size_t kLogTailLines = 20;
constexpr int kStatusTimeoutMs = 2000;

// ---------------------------------------------------------------------------
// Processes
// ---------------------------------------------------------------------------

// State letter from /proc/PID/stat: 'Z' for a zombie, '?' if unreadable.
char process_state(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return '?';
  auto paren = line.rfind(')');
  if (paren == std::string::npos || paren + 2 >= line.size()) return '?';
  return line[paren + 2];
}

// Alive and not a zombie waiting to be reaped by whoever adopted it.
bool process_alive(pid_t pid) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0 && errno != EPERM) return false;
  char state = process_state(pid);
  return state != 'Z' && state != 'X';
}

// Guards against signalling a recycled pid named in a stale pid file.
bool is_uroced(pid_t pid) {
  std::string proc = "/proc/" + std::to_string(pid);
  std::ifstream comm_file(proc + "/comm");
  std::string comm;
  std::getline(comm_file, comm);
  if (comm == "uroced") return true;
  std::ifstream cmdline(proc + "/cmdline");
  std::string argv0;
  std::getline(cmdline, argv0, '\0');
  return fs::path(argv0).filename() == "uroced";
}

bool wait_until_gone(pid_t pid, Clock::duration limit) {
  auto deadline = Clock::now() + limit;
  while (process_alive(pid)) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(kPollInterval);
  }
  return true;
}

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return std::string("was killed by signal ") + ::strsignal(WTERMSIG(status));
  return "stopped";
}

// Ends a child that never became ready and reaps it.
void terminate_child(pid_t pid) {
  ::kill(pid, SIGTERM);
  auto deadline = Clock::now() + kKillGrace;
  while (::waitpid(pid, nullptr, WNOHANG) == 0) {
    if (Clock::now() >= deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      return;
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

// Marks every descriptor from 3 up close-on-exec, so the daemon holds no pipe
// of whoever ran `uroce start` (ctest would wait for it to close).
void mark_fds_cloexec_from_3() {
  if (::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) == 0) return;
  long max_fd = std::min(::sysconf(_SC_OPEN_MAX), 65536L);
  for (int fd = 3; fd < max_fd; ++fd) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
}

// fork + setsid + exec with stdin from /dev/null and stdout/stderr on log_fd.
// Returns the child's pid, or -1 with *error set if it could not be executed.
pid_t spawn_detached(const std::string& path, const std::vector<std::string>& args,
                     int log_fd, std::string* error) {
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(path.c_str()));
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);

  UniqueFd null_fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  int exec_pipe[2];
  if (!null_fd || ::pipe2(exec_pipe, O_CLOEXEC) != 0) {
    *error = std::string("cannot set up the child: ") + std::strerror(errno);
    return -1;
  }
  std::cout.flush();
  std::cerr.flush();
  pid_t pid = ::fork();
  if (pid < 0) {
    *error = std::string("fork: ") + std::strerror(errno);
    ::close(exec_pipe[0]);
    ::close(exec_pipe[1]);
    return -1;
  }
  if (pid == 0) {
    ::setsid();
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int sig : {SIGPIPE, SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGCHLD}) ::signal(sig, SIG_DFL);
    int err = 0;
    if (::dup2(null_fd.get(), 0) < 0 || ::dup2(log_fd, 1) < 0 || ::dup2(log_fd, 2) < 0) {
      err = errno;
    } else {
      mark_fds_cloexec_from_3();
      ::execv(path.c_str(), argv.data());
      err = errno;
    }
    (void)!::write(exec_pipe[1], &err, sizeof(err));
    ::_exit(127);
  }
  ::close(exec_pipe[1]);
  int err = 0;
  ssize_t n;
  do {
    n = ::read(exec_pipe[0], &err, sizeof(err));
  } while (n < 0 && errno == EINTR);
  ::close(exec_pipe[0]);
  if (n == static_cast<ssize_t>(sizeof(err))) {
    ::waitpid(pid, nullptr, 0);
    *error = "cannot execute " + path + ": " + std::strerror(err);
    return -1;
  }
  return pid;
}

// ---------------------------------------------------------------------------
// Runtime directory files
// ---------------------------------------------------------------------------

// Removes NAME.sock and NAME.pid; true if either existed.
bool remove_engine_files(const std::string& dir, const std::string& name) {
  bool removed = false;
  for (const auto& path : {engine_socket_path(dir, name), engine_pid_path(dir, name)})
    if (::unlink(path.c_str()) == 0) removed = true;
  return removed;
}

std::set<std::string> names_with_suffix(const std::string& dir,
                                        std::initializer_list<std::string_view> suffixes) {
  std::set<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::string file = entry.path().filename().string();
    for (auto suffix : suffixes) {
      if (file.size() > suffix.size() && file.ends_with(suffix))
        names.insert(file.substr(0, file.size() - suffix.size()));
    }
  }
  return names;
}

std::string timestamp() {
  std::time_t now = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S %z", std::localtime(&now));
  return buf;
}

// Prints the last lines of the log written since `offset` to stderr.
void print_log_tail(const std::string& path, std::streamoff offset) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return;
  in.seekg(offset);
  std::deque<std::string> lines;
  std::string line;
  while (std::getline(in, line)) {
    lines.push_back(line);
    if (lines.size() > kLogTailLines) lines.pop_front();
  }
  std::cerr << "--- last lines of " << path << " ---\n";
  for (const auto& l : lines) std::cerr << l << '\n';
  std::cerr << "---\n";
}

// The engine's address from its status text ("ip A.B.C.D", "ip: A.B.C.D" or
// "ip=A.B.C.D"), empty if it does not say.
std::string ip_from_status(const std::string& socket_path) {
  std::string error;
  auto reply = control_request(socket_path, abi::CtlOp::kStatus, kStatusTimeoutMs, &error);
  if (!reply || reply->status != 0) return {};
  static const std::regex kIp(
      R"((^|[^A-Za-z0-9_])ip[ \t]*[:=]?[ \t]*([0-9]{1,3}(\.[0-9]{1,3}){3}))");
  std::smatch match;
  if (!std::regex_search(reply->body, match, kIp)) return {};
  return match[2].str();
}

enum class StopResult { kStopped, kAbsent, kFailed };

StopResult stop_one(const std::string& dir, const std::string& name) {
  const std::string sock = engine_socket_path(dir, name);
  ProbeResult probe = probe_engine(sock);
  pid_t pid = probe.running ? probe.pid : 0;
  if (pid == 0) {
    auto from_file = read_pid_file(engine_pid_path(dir, name));
    if (from_file && process_alive(*from_file) && is_uroced(*from_file)) pid = *from_file;
  }
  if (pid == 0) {
    if (probe.running) {
      std::cerr << "uroce: " << name << ": the engine answers on " << sock
                << " but its pid is unknown\n";
      return StopResult::kFailed;
    }
    return StopResult::kAbsent;
  }
  if (::kill(pid, SIGTERM) != 0 && errno != ESRCH) {
    std::cerr << "uroce: " << name << ": cannot signal pid " << pid << ": " << std::strerror(errno)
              << (errno == EPERM ? " (only the engine's owner or root may stop it)" : "") << '\n';
    return StopResult::kFailed;
  }
  bool killed = false;
  if (!wait_until_gone(pid, std::chrono::seconds(kStopTimeoutSec))) {
    std::cerr << "uroce: " << name << ": pid " << pid << " did not exit within "
              << kStopTimeoutSec << " s of SIGTERM; sending SIGKILL\n";
    ::kill(pid, SIGKILL);
    killed = true;
    if (!wait_until_gone(pid, kKillGrace)) {
      std::cerr << "uroce: " << name << ": pid " << pid << " is still alive\n";
      return StopResult::kFailed;
    }
  }
  remove_engine_files(dir, name);
  std::cout << name << ": stopped (pid " << pid << (killed ? ", killed" : "") << ")\n";
  return StopResult::kStopped;
}

}  // namespace

// ---------------------------------------------------------------------------
// Public
// ---------------------------------------------------------------------------

std::optional<pid_t> read_pid_file(const std::string& path) {
  std::ifstream in(path);
  long pid = 0;
  if (!(in >> pid) || pid <= 0) return std::nullopt;
  return static_cast<pid_t>(pid);
}

std::string check_engine_name(const std::string& dir, const std::string& name) {
  if (name.empty()) return "the name is empty";
  if (name.size() >= abi::kMaxDeviceName)
    return "the name is longer than " + std::to_string(abi::kMaxDeviceName - 1) + " characters";
  if (name[0] == '.' || name[0] == '-') return "the name may not start with '.' or '-'";
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || c == '.';
    if (!ok) return "the name may contain only letters, digits, '_', '-' and '.'";
  }
  if (engine_socket_path(dir, name).size() >= sizeof(sockaddr_un::sun_path))
    return "the socket path " + engine_socket_path(dir, name) + " is too long for a Unix socket";
  return {};
}

void ensure_runtime_dir(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) throw std::runtime_error(dir + " exists and is not a directory");
    return;
  }
  fs::path path(dir);
  std::error_code ec;
  if (path.has_parent_path()) fs::create_directories(path.parent_path(), ec);
  // The owner's alone; an engine that admits others opens it (uroced).
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    throw std::runtime_error("cannot create " + dir + ": " + std::strerror(errno));
}

std::vector<std::string> list_engine_sockets(const std::string& dir) {
  auto names = names_with_suffix(dir, {".sock"});
  return {names.begin(), names.end()};
}

int start_engine(const StartOptions& o) {
  const std::string& dir = o.runtime_dir;
  const std::string sock = engine_socket_path(dir, o.name);
  const std::string pid_file = engine_pid_path(dir, o.name);
  const std::string log_file = engine_log_path(dir, o.name);

  ProbeResult probe = probe_engine(sock);
  if (probe.running) {
    std::cerr << "uroce: " << o.name << ": already running";
    if (probe.pid) std::cerr << " (pid " << probe.pid << ")";
    std::cerr << '\n';
    return 1;
  }
  if (!probe_says_absent(probe)) {
    std::cerr << "uroce: " << o.name << ": cannot connect to " << sock << ": "
              << std::strerror(probe.error) << "; not starting\n";
    return 1;
  }
  if (auto pid = read_pid_file(pid_file); pid && process_alive(*pid) && is_uroced(*pid)) {
    std::cerr << "uroce: " << o.name << ": engine pid " << *pid
              << " is alive but does not answer on " << sock
              << "; stop it with 'uroce stop --name " << o.name << "'\n";
    return 1;
  }
  if (remove_engine_files(dir, o.name))
    std::cerr << "uroce: " << o.name << ": removed stale files of a dead engine\n";

  // The log names the engine's clients: its owner's alone.
  UniqueFd log(::open(log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  if (!log) {
    std::cerr << "uroce: cannot open " << log_file << ": " << std::strerror(errno) << '\n';
    return 1;
  }
  off_t offset = ::lseek(log.get(), 0, SEEK_END);
  std::vector<std::string> args = {"--name", o.name, "--runtime-dir", dir};
  args.insert(args.end(), o.engine_args.begin(), o.engine_args.end());
  std::string header = "=== " + timestamp() + " uroce start: " + o.engine_path;
  for (const auto& a : args) header += " " + a;
  header += "\n";
  (void)!::write(log.get(), header.data(), header.size());

  std::string error;
  pid_t pid = spawn_detached(o.engine_path, args, log.get(), &error);
  log.reset();
  if (pid < 0) {
    std::cerr << "uroce: " << o.name << ": " << error << '\n';
    return 1;
  }

  auto deadline = Clock::now() + std::chrono::seconds(o.wait_seconds);
  for (;;) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      std::cerr << "uroce: " << o.name << ": uroced " << describe_wait_status(status)
                << " before it was ready\n";
      print_log_tail(log_file, offset);
      remove_engine_files(dir, o.name);
      return 1;
    }
    if (fs::exists(pid_file) && probe_engine(sock).running) break;
    if (Clock::now() >= deadline) {
      std::cerr << "uroce: " << o.name << ": uroced (pid " << pid << ") did not answer on " << sock
                << " within " << o.wait_seconds << " s (uroce start --wait); stopping it\n";
      terminate_child(pid);
      print_log_tail(log_file, offset);
      remove_engine_files(dir, o.name);
      return 1;
    }
    std::this_thread::sleep_for(kPollInterval);
  }

  std::string ip = o.ip.empty() ? ip_from_status(sock) : o.ip;
  std::cout << o.name << ": started (pid " << pid << (ip.empty() ? "" : ", ip " + ip) << ")\n";
  return 0;
}

int stop_engine(const std::string& dir, const std::string& name) {
  switch (stop_one(dir, name)) {
    case StopResult::kStopped:
      return 0;
    case StopResult::kFailed:
      return 1;
    case StopResult::kAbsent:
      break;
  }
  // Stopping an engine that does not run leaves what was asked for, as
  // `stop --all` with none: exit 0, and said.
  bool stale = remove_engine_files(dir, name);
  std::cout << name << ": not running" << (stale ? " (removed its stale files)" : "") << '\n';
  return 0;
}

int stop_all_engines(const std::string& dir) {
  auto names = names_with_suffix(dir, {".sock", ".pid"});
  if (names.empty()) {
    std::cout << "no engines running\n";
    return 0;
  }
  int rc = 0;
  for (const auto& name : names) {
    switch (stop_one(dir, name)) {
      case StopResult::kStopped:
        break;
      case StopResult::kFailed:
        rc = 1;
        break;
      case StopResult::kAbsent:
        remove_engine_files(dir, name);
        std::cout << name << ": not running (removed stale files)\n";
        break;
    }
  }
  return rc;
}

}  // namespace uroce::tool
