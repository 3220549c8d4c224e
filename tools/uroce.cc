// The uroce command: starts and stops engines, shows their status, and runs
// programs with the drop-in libibverbs provider.
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <chrono>
#include <thread>
#include <csignal>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

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
constexpr int kExitNotFound = 127;     // as the shell does for a missing command
constexpr int kExitCannotExec = 126;   // as the shell does for a non-executable one
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

// Prints one engine's reply to `op` under a heading. False if it failed.
bool show_engine(const Context& ctx, const std::string& name, abi::CtlOp op) {
  const std::string sock = engine_socket_path(ctx.runtime_dir, name);
  ProbeResult probe = probe_engine(sock);
  if (!probe.running) {
    if (probe_says_absent(probe)) {
      std::cout << name << ": not running (stale)\n";
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
  for (const auto& name : names) {
    if (!probe_engine(engine_socket_path(ctx.runtime_dir, name)).running) {
      std::cerr << "uroce: " << name << ": not running\n";
      return 1;
    }
  }
  if (names.empty()) names = list_engine_sockets(ctx.runtime_dir);
  if (o.json) return print_reports_json(ctx.runtime_dir, names);
  if (names.empty()) {
    std::cout << "no engines running\n";
    return 0;
  }
  if (o.watch) return watch_reports(ctx.runtime_dir, names, o.interval_s, o.count);
  bool ok = true;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) std::cout << '\n';
    ok = show_engine(ctx, names[i], op) && ok;
  }
  return ok ? 0 : 1;
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
  abi::SetPortStateRequest req{args.up ? 4u /* IBV_PORT_ACTIVE */ : 1u /* IBV_PORT_DOWN */, 0};
  if (!engine_call(ctx, args.name, abi::CtlOp::kSetPortState, &req, sizeof(req))) return 1;
  std::cout << args.name << ": port 1 " << (args.up ? "up" : "down") << '\n';
  return 0;
}

int cmd_fault(const Context& ctx, const FaultArgs& args) {
  if (!engine_call(ctx, args.name, abi::CtlOp::kSetFault, &args.request, sizeof(args.request)))
    return 1;
  std::cout << args.name << ": fault injection " << (args.any_set ? "set" : "off") << '\n';
  return 0;
}

volatile std::sig_atomic_t g_capture_interrupted = 0;

int cmd_capture(const Context& ctx, const CaptureArgs& args) {
  const std::string& name = args.name;
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

int cmd_run(const Context& ctx, const RunArgs& args) {
  // Its polling threads off the CPU their engine polls on
  // (verbs_provider/placement.cc), unless told not to.
  if (args.all_cpus) ::unsetenv("UROCE_POLL_PLACEMENT");
  else ::setenv("UROCE_POLL_PLACEMENT", "1", 1);
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
