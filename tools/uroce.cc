// The uroce command: starts and stops engines, shows their status, and runs
// programs with the drop-in libibverbs provider.
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <chrono>
#include <thread>
#include <csignal>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "uroce/cpu_placement.h"
#include "tools/command_line.h"
#include "tools/device_nodes.h"
#include "tools/engine_client.h"
#include "tools/engine_report.h"
#include "tools/sysfs_view.h"
#include "tools/engine_process.h"
#include "uroce/abi.h"
#include "uroce/runtime_dir.h"

namespace uroce::tool {
namespace {

namespace fs = std::filesystem;

constexpr const char* kProviderLib = "libibverbs.so.1";
constexpr int kRequestTimeoutMs = 5000;

// Directory of this executable, for finding uroced and the provider.
fs::path self_dir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) throw std::runtime_error("cannot read /proc/self/exe: " + ec.message());
  return exe.parent_path();
}

bool has_provider(const fs::path& dir) {
  std::error_code ec;
  return fs::exists(dir / kProviderLib, ec);
}

// $UROCE_PROVIDER_DIR, else <bin>/../provider (build tree), else
// <bin>/../lib/uroce (installed). Throws when none is usable.
std::string provider_dir() {
  if (const char* env = std::getenv("UROCE_PROVIDER_DIR"); env && *env) {
    std::error_code ec;
    if (!fs::is_directory(env, ec))
      throw std::runtime_error(std::string("UROCE_PROVIDER_DIR=") + env + " is not a directory");
    return fs::absolute(env).lexically_normal().string();
  }
  fs::path bin = self_dir();
  fs::path build_tree = (bin / ".." / "provider").lexically_normal();
  fs::path installed = (bin / ".." / "lib" / "uroce").lexically_normal();
  for (const auto& dir : {build_tree, installed})
    if (has_provider(dir)) return dir.string();
  throw std::runtime_error("cannot find uroce's " + std::string(kProviderLib) + " in " +
                           build_tree.string() + " or " + installed.string() +
                           " (build it, or set UROCE_PROVIDER_DIR)");
}

// `dir` first, then the old value without any other copy of `dir`.
std::string prepend_path(const std::string& dir, const char* old_value) {
  std::string result = dir;
  std::string_view rest = old_value ? old_value : "";
  while (!rest.empty()) {
    size_t colon = rest.find(':');
    std::string_view part = rest.substr(0, colon);
    if (!part.empty() && part != dir) result.append(":").append(part);
    if (colon == std::string_view::npos) break;
    rest.remove_prefix(colon + 1);
  }
  return result;
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  return out + "'";
}

// ---------------------------------------------------------------------------
// Subcommands
// ---------------------------------------------------------------------------

struct Context {
  std::string runtime_dir;  // absolute
};

int cmd_start(const Context& ctx, const StartArgs& args) {
  StartOptions o;
  o.runtime_dir = ctx.runtime_dir;
  o.name = args.name;
  o.ip = args.ip;
  o.wait_seconds = args.wait_seconds;
  o.engine_args = args.engine_args;
  if (auto why = check_engine_name(o.runtime_dir, o.name); !why.empty())
    return usage_error("start", "invalid engine name '" + o.name + "': " + why);
  o.engine_path = (self_dir() / "uroced").string();
  ensure_runtime_dir(o.runtime_dir);
  return start_engine(o);
}

int cmd_stop(const Context& ctx, const StopArgs& args) {
  if (args.all) return stop_all_engines(ctx.runtime_dir);
  if (auto why = check_engine_name(ctx.runtime_dir, args.name); !why.empty())
    return usage_error("stop", "invalid engine name '" + args.name + "': " + why);
  return stop_engine(ctx.runtime_dir, args.name);
}

// The one wording of "that engine does not run" (kExitNoEngine).
int not_running(const Context& ctx, const std::string& name) {
  std::cerr << "uroce: " << name << ": not running (no engine " << name << " in " << ctx.runtime_dir
            << "; 'uroce start --name " << name << "' starts one)\n";
  return kExitNoEngine;
}

// 0 if engine `name` answers, else what the command exits with.
int require_engine(const Context& ctx, const std::string& name) {
  const ProbeResult probe = probe_engine(engine_socket_path(ctx.runtime_dir, name));
  if (probe.running) return 0;
  if (probe_says_absent(probe)) return not_running(ctx, name);
  std::cerr << "uroce: " << name << ": cannot connect: " << std::strerror(probe.error) << '\n';
  return kExitFailure;
}

// Prints one engine's reply to `op` under a heading. False if it failed.
bool show_engine(const Context& ctx, const std::string& name, abi::CtlOp op) {
  const std::string sock = engine_socket_path(ctx.runtime_dir, name);
  ProbeResult probe = probe_engine(sock);
  if (!probe.running) {
    if (probe_says_absent(probe)) {
      std::cout << name << ": not running (stale files)\n";
      return true;
    }
    std::cout << name << ": cannot connect: " << std::strerror(probe.error) << '\n';
    return false;
  }
  std::string error;
  auto text = fetch_report(sock, kRequestTimeoutMs, &error, op);
  std::cout << "== " << name;
  if (probe.pid) std::cout << " (pid " << probe.pid << ")";
  std::cout << '\n';
  if (!text) {
    std::cout << "  error: " << error << '\n';
    return false;
  }
  std::cout << *text;
  if (!text->empty() && text->back() != '\n') std::cout << '\n';
  return true;
}

int show_engines(const Context& ctx, const ShowArgs& o, abi::CtlOp op) {
  std::vector<std::string> names = o.names;
  for (const auto& name : names)
    if (int rc = require_engine(ctx, name)) return rc;
  if (names.empty()) names = list_engine_sockets(ctx.runtime_dir);
  if (names.empty()) {  // a CI step that checks for an engine must not pass without one
    if (o.json) std::cout << "{\"engines\": []}\n";
    std::cerr << "uroce: no engine running in " << ctx.runtime_dir << " ('uroce start' starts one)\n";
    return kExitNoEngine;
  }
  if (o.json) return print_reports_json(ctx.runtime_dir, names);
  if (o.watch) return watch_reports(ctx.runtime_dir, names, o.interval_s, o.count);
  bool ok = true, any_running = false;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) std::cout << '\n';
    any_running |= probe_engine(engine_socket_path(ctx.runtime_dir, names[i])).running;
    ok = show_engine(ctx, names[i], op) && ok;
  }
  if (!any_running) return kExitNoEngine;  // only the stale files of dead ones
  return ok ? 0 : kExitFailure;
}

int cmd_status(const Context& ctx, const ShowArgs& args) {
  return show_engines(ctx, args, abi::CtlOp::kStatus);
}

int cmd_stats(const Context& ctx, const ShowArgs& args) {
  return show_engines(ctx, args, abi::CtlOp::kStats);
}

// One control request with a body; prints the engine's error text on failure.
std::optional<CtlReply> engine_call(const Context& ctx, const std::string& name, abi::CtlOp op,
                                    const void* body, size_t len) {
  std::string error;
  auto reply = control_request(engine_socket_path(ctx.runtime_dir, name), op, 2000, &error,
                               std::string_view(static_cast<const char*>(body), len));
  if (!reply) {
    std::cerr << "uroce: " << name << ": " << error << '\n';
    return std::nullopt;
  }
  if (reply->status) {
    std::cerr << "uroce: " << name << ": "
              << (reply->body.empty() ? std::strerror(reply->status) : reply->body) << '\n';
    return std::nullopt;
  }
  return reply;
}

int cmd_port(const Context& ctx, const PortArgs& args) {
  if (int rc = require_engine(ctx, args.name)) return rc;
  abi::SetPortStateRequest req{args.up ? 4u /* IBV_PORT_ACTIVE */ : 1u /* IBV_PORT_DOWN */, 0};
  if (!engine_call(ctx, args.name, abi::CtlOp::kSetPortState, &req, sizeof(req))) return 1;
  std::cout << args.name << ": port 1 " << (args.up ? "up" : "down") << '\n';
  return 0;
}

int cmd_fault(const Context& ctx, const FaultArgs& args) {
  if (int rc = require_engine(ctx, args.name)) return rc;
  if (args.action == FaultArgs::Action::kShow) return print_fault_settings(ctx.runtime_dir, args.name);
  // kOff: a request of no setting (every probability 0) turns the port's off.
  if (!engine_call(ctx, args.name, abi::CtlOp::kSetFault, &args.request, sizeof(args.request)))
    return kExitFailure;
  const std::string port = args.port.empty() ? "" : " on the " + args.port + " port";
  std::cout << args.name << ": fault injection " << (args.any_set ? "set" : "off") << port << '\n';
  return 0;
}

volatile std::sig_atomic_t g_capture_interrupted = 0;

int cmd_capture(const Context& ctx, const CaptureArgs& args) {
  const std::string& name = args.name;
  if (int rc = require_engine(ctx, name)) return rc;
  abi::CaptureRequest req{};
  req.action = abi::kCaptureStart;
  req.max_frames = args.count;
  const std::string path = fs::absolute(args.file).string();
  if (path.size() >= abi::kMaxCapturePath) return usage_error("capture", "path too long");
  std::memcpy(req.path, path.c_str(), path.size() + 1);
  if (!engine_call(ctx, name, abi::CtlOp::kCapture, &req, sizeof(req))) return 1;
  std::signal(SIGINT, [](int) { g_capture_interrupted = 1; });
  std::signal(SIGTERM, [](int) { g_capture_interrupted = 1; });
  const double limit_s = args.seconds;
  const auto start = std::chrono::steady_clock::now();
  abi::CaptureRequest status{};
  status.action = abi::kCaptureStatus;
  abi::CaptureReply rep{};
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto r = engine_call(ctx, name, abi::CtlOp::kCapture, &status, sizeof(status));
    if (!r || r->body.size() < sizeof(rep)) return 1;
    std::memcpy(&rep, r->body.data(), sizeof(rep));
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!rep.active || g_capture_interrupted || (limit_s > 0 && elapsed >= limit_s)) break;
  }
  if (rep.active) {
    status.action = abi::kCaptureStop;
    if (auto r = engine_call(ctx, name, abi::CtlOp::kCapture, &status, sizeof(status));
        r && r->body.size() >= sizeof(rep))
      std::memcpy(&rep, r->body.data(), sizeof(rep));
  }
  std::cout << name << ": captured " << rep.frames << " frames to " << path << '\n';
  return 0;
}

// Sets the environment that `run` gives a program; returns the values.
std::pair<std::string, std::string> provider_environment(const Context& ctx) {
  std::string ld_path = prepend_path(provider_dir(), std::getenv("LD_LIBRARY_PATH"));
  return {ld_path, ctx.runtime_dir};
}

// A sanitizer build (-DUROCE_SANITIZE) gives an ASan-built provider, which
// programs not built with ASan (perftest, ibverbs-utils, python3) can load
// only if the ASan runtime comes first: it is preloaded for them. Their own
// leaks at exit are not ours to report (LSan cannot tell them apart), so
// leak checking is left to the engine, the tools and the unit tests.
void preload_sanitizer_runtime() {
#ifdef UROCE_SANITIZER_RUNTIME
  ::setenv("LD_PRELOAD", prepend_path(UROCE_SANITIZER_RUNTIME, std::getenv("LD_PRELOAD")).c_str(), 1);
  const char* options = std::getenv("ASAN_OPTIONS");
  std::string asan = options && *options ? std::string(options) + ":" : std::string();
  ::setenv("ASAN_OPTIONS", (asan + "detect_leaks=0").c_str(), 1);
#endif
}

// Whether a socket of this network namespace listens on TCP `port` (the
// kernel's tables, as `ss -ltn` reads them: state 0A is LISTEN). Reading
// them, unlike connecting, does not take the one connection a server such
// as perftest accepts.
bool tcp_port_listens(int port) {
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream f(table);
    std::string line;
    std::getline(f, line);  // the heading
    while (std::getline(f, line)) {
      std::istringstream in(line);
      std::string slot, local, remote, state;
      in >> slot >> local >> remote >> state;
      const size_t colon = local.rfind(':');
      if (state == "0A" && colon != std::string::npos &&
          std::strtoul(local.c_str() + colon + 1, nullptr, 16) == unsigned(port))
        return true;
    }
  }
  return false;
}

// An engine that refuses this user (its socket's mode, or its runtime
// directory's: EACCES) runs too: the provider then says why the program sees
// no device.
bool any_engine_running(const Context& ctx) {
  // A runtime directory this user may not read holds another user's engines.
  if (::access(ctx.runtime_dir.c_str(), R_OK | X_OK) != 0 && errno == EACCES) return true;
  for (const std::string& name : list_engine_sockets(ctx.runtime_dir))
    if (!probe_says_absent(probe_engine(engine_socket_path(ctx.runtime_dir, name)))) return true;
  return false;
}

int cmd_run(const Context& ctx, const RunArgs& args) {
  // A program started without an engine finds no device and may pass
  // silently (a CI job that skips its RDMA tests): say so instead.
  if (!args.without_engine && !any_engine_running(ctx)) {
    std::cerr << "uroce: no engine running in " << ctx.runtime_dir
              << ": 'uroce start' starts one (or 'uroce run --without-engine' runs "
              << (args.command.empty() ? std::string("the command") : args.command[0]) << " anyway)\n";
    return kExitNoEngine;
  }
  if (args.wait_listen) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(args.wait_seconds);
    const std::vector<std::string> engines = list_engine_sockets(ctx.runtime_dir);
    while (!tcp_port_listens(args.wait_listen) && !cm_port_listens(ctx.runtime_dir, engines, args.wait_listen)) {
      if (std::chrono::steady_clock::now() > deadline) {
        std::cerr << "uroce: nothing listens on TCP or rdma_cm port " << args.wait_listen << " after " << args.wait_seconds
                  << " s; not starting " << args.command[0] << '\n';
        return kExitFailure;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  // Its polling threads off the CPU their engine polls on
  // (verbs_provider/placement.cc), unless told not to.
  if (args.all_cpus) ::unsetenv("UROCE_POLL_PLACEMENT");
  else ::setenv("UROCE_POLL_PLACEMENT", "1", 1);
  // The CPUs the command was given, which a thread that polls in memory
  // gets back (verbs_provider/mlx5/library.cc unplace_memory_poller).
  std::string run_cpus;
  for (int c : uroce::current_cpus()) run_cpus += (run_cpus.empty() ? "" : ",") + std::to_string(c);
  ::setenv("UROCE_RUN_CPUS", run_cpus.c_str(), 1);
  auto [ld_path, runtime_dir] = provider_environment(ctx);
  ::setenv("LD_LIBRARY_PATH", ld_path.c_str(), 1);
  preload_sanitizer_runtime();
  ::setenv("UROCE_RUNTIME_DIR", runtime_dir.c_str(), 1);
  // UCX lists a device only beside its /dev/infiniband node (device_nodes.h).
  const NodeSetupResult nodes = provide_uverbs_nodes(uverbs_node_names(ctx.runtime_dir, kDefaultName));
  if (!nodes.message.empty()) std::cerr << "uroce: " << nodes.message << '\n';
  // Each engine's device in /sys/class/infiniband, as a kernel RoCE device's (sysfs_view.h).
  // (Said once: where the nodes could not be given, the reason is the same.)
  if (const std::string msg = provide_sysfs_view(engine_sysfs_trees(ctx.runtime_dir));
      !msg.empty() && nodes.how != NodeSetup::kUnavailable)
    std::cerr << "uroce: " << msg << '\n';
  std::vector<char*> argv;
  for (const auto& a : args.command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::cout.flush();
  ::execvp(argv[0], argv.data());
  int err = errno;
  if (err == ENOENT) {
    std::cerr << "uroce: " << args.command[0] << ": command not found\n";
    return kExitNotFound;
  }
  std::cerr << "uroce: " << args.command[0] << ": " << std::strerror(err) << '\n';
  return kExitCannotExec;
}

int cmd_env(const Context& ctx) {
  auto [ld_path, runtime_dir] = provider_environment(ctx);
  std::cout << "export LD_LIBRARY_PATH=" << shell_quote(ld_path) << '\n';
  std::cout << "export UROCE_RUNTIME_DIR=" << shell_quote(runtime_dir) << '\n';
  std::cout << "export UROCE_POLL_PLACEMENT=1\n";
  // A shell cannot be moved into a namespace of its own: say which nodes its
  // programs will miss (UCX lists no device without one) and what gives them.
  if (auto missing = missing_uverbs_nodes(uverbs_node_names(ctx.runtime_dir, kDefaultName)); !missing.empty())
    std::cerr << "uroce: note: no " << (missing.size() == 1 ? "node /dev/infiniband/" + missing[0] : "/dev/infiniband nodes")
              << " here, so UCX and Open MPI will not list the device in this shell; 'uroce run CMD' provides "
              << (missing.size() == 1 ? "it" : "them") << " for CMD (or, as root: " << mknod_commands(missing) << ")\n";
  return 0;
}

// Execs the bench script (tools/bench/uroce_bench.py): installed under
// <bin>/../share/uroce/bench, else the source tree's copy (build tree).
int cmd_bench(const BenchArgs& args) {
  fs::path script = (self_dir() / ".." / "share" / "uroce" / "bench" / "uroce_bench.py").lexically_normal();
  std::error_code ec;
  if (!fs::exists(script, ec)) script = UROCE_BENCH_SCRIPT;
  const std::string self = (self_dir() / "uroce").string();
  std::vector<std::string> words = {"python3", script.string(), "--uroce", self};
  words.insert(words.end(), args.script_args.begin(), args.script_args.end());
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  std::cout.flush();
  ::execvp(argv[0], argv.data());
  int err = errno;
  std::cerr << "uroce: bench: python3: " << std::strerror(err) << '\n';
  return err == ENOENT ? kExitNotFound : kExitCannotExec;
}

int run_main(const CommandLine& cl) {
  std::string runtime_dir = cl.runtime_dir.empty() ? uroce::runtime_dir() : cl.runtime_dir;
  Context ctx{fs::absolute(runtime_dir).lexically_normal().string()};
  while (ctx.runtime_dir.size() > 1 && ctx.runtime_dir.back() == '/') ctx.runtime_dir.pop_back();

  // The subcommands command_line.cc declares, each with its arguments.
  using Handler = int (*)(const Context&, const CommandLine&);
  static constexpr std::pair<std::string_view, Handler> kCommands[] = {
      {"start", [](const Context& c, const CommandLine& line) { return cmd_start(c, line.start); }},
      {"stop", [](const Context& c, const CommandLine& line) { return cmd_stop(c, line.stop); }},
      {"status", [](const Context& c, const CommandLine& line) { return cmd_status(c, line.show); }},
      {"stats", [](const Context& c, const CommandLine& line) { return cmd_stats(c, line.show); }},
      {"run", [](const Context& c, const CommandLine& line) { return cmd_run(c, line.run); }},
      {"env", [](const Context& c, const CommandLine&) { return cmd_env(c); }},
      {"fault", [](const Context& c, const CommandLine& line) { return cmd_fault(c, line.fault); }},
      {"capture", [](const Context& c, const CommandLine& line) { return cmd_capture(c, line.capture); }},
      {"port", [](const Context& c, const CommandLine& line) { return cmd_port(c, line.port); }},
      {"bench", [](const Context&, const CommandLine& line) { return cmd_bench(line.bench); }},
  };
  for (const auto& [name, handler] : kCommands)
    if (name == cl.command) return handler(ctx, cl);
  throw std::logic_error("no handler for command '" + cl.command + "'");
}

}  // namespace
}  // namespace uroce::tool

int main(int argc, char** argv) {
  int exit_status = 0;
  auto command_line = uroce::tool::parse_command_line(argc, argv, &exit_status);
  if (!command_line) return exit_status;
  try {
    return uroce::tool::run_main(*command_line);
  } catch (const std::exception& e) {
    std::cerr << "uroce: " << e.what() << '\n';
    return 1;
  }
}
