// The uroce command: starts and stops engines, shows their status, and runs
// programs with the drop-in libibverbs provider.
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <chrono>
#include <thread>
#include <csignal>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "tools/device_nodes.h"
#include "tools/engine_client.h"
#include "tools/engine_report.h"
#include "tools/engine_process.h"
#include "uroce/abi.h"
#include "uroce/runtime_dir.h"

namespace uroce::tool {
namespace {

namespace fs = std::filesystem;

constexpr const char* kDefaultName = "uroce0";
constexpr const char* kProviderLib = "libibverbs.so.1";
constexpr int kExitUsage = 2;
constexpr int kExitNotFound = 127;     // as the shell does for a missing command
constexpr int kExitCannotExec = 126;   // as the shell does for a non-executable one
constexpr int kRequestTimeoutMs = 5000;

constexpr const char* kUsage = R"USAGE(usage: uroce [--runtime-dir DIR] COMMAND [ARGS]

Commands:
  start [--name NAME] [--ip A.B.C.D] [--mac MAC] [--port SPEC] [FLAGS...]
                      start engine NAME (uroced) in the background; other
                      flags are passed on to uroced
  stop [--name NAME | --all]
                      stop engine NAME, or every engine
  status [--json]     show every engine in the runtime directory
  stats [--name NAME] [--json | --watch [--interval S] [--count N]]
                      the counters of one engine, or of every engine;
                      --watch: live rates (packets, bytes, retransmissions,
                      NAKs, drops per second, the busiest QPs) every S seconds
                      (default 1); --json: status and counters as JSON
  run [--all-cpus] [--] CMD [ARGS...]
                      run CMD with uroce's libibverbs.so.1 (LD_LIBRARY_PATH);
                      its threads that poll CQs leave the engine's CPU
                      (--all-cpus: they do not)
  env                 print the exports that 'run' sets, for eval "$(uroce env)"
  fault [--name NAME] [--port loopback|wire] [drop=P] [duplicate=P] [reorder=P]
        [corrupt=P] [delay=US] [seed=N]
                      set fault injection on a port (no settings: turn it off)
  capture [--name NAME] -w FILE.pcap [--count N] [--seconds S]
                      write the frames crossing the engine's ports (loopback
                      included) to FILE until N frames, S seconds or Ctrl-C
  port [--name NAME] up|down
                      take the engine's port down or up: clients get
                      IBV_EVENT_PORT_ERR / IBV_EVENT_PORT_ACTIVE, traffic stops
  bench [--quick] [--out DIR]
                      run perftest through engines of its own beside the
                      baselines (memcpy, shared memory, TCP); table, JSON, SVG
  help                show this text

NAME defaults to uroce0; applications see the engine as the device NAME.
The runtime directory holds NAME.sock, NAME.pid and NAME.log. It is DIR, else
$UROCE_RUNTIME_DIR, else /run/uroce for root, $XDG_RUNTIME_DIR/uroce or
/tmp/uroce-UID. $UROCE_PROVIDER_DIR overrides where 'run' finds the provider.
)USAGE";

// A bad command line: the message, then the whole usage text only when the
// command itself is missing or unknown.
int usage_error(const std::string& message, bool full_usage = false) {
  std::cerr << "uroce: " << message << '\n';
  if (full_usage)
    std::cerr << '\n' << kUsage;
  else
    std::cerr << "(see 'uroce help')\n";
  return kExitUsage;
}

using Args = std::span<const std::string>;

// Matches "--flag VALUE" or "--flag=VALUE" at args[i]; advances i past it.
// Throws std::invalid_argument when the value is missing.
bool take_option(Args args, size_t& i, std::string_view flag, std::string* value) {
  const std::string& arg = args[i];
  if (arg == flag) {
    if (i + 1 >= args.size()) throw std::invalid_argument(std::string(flag) + " needs a value");
    *value = args[i + 1];
    i += 2;
    return true;
  }
  if (arg.size() > flag.size() && arg.starts_with(flag) && arg[flag.size()] == '=') {
    *value = arg.substr(flag.size() + 1);
    i += 1;
    return true;
  }
  return false;
}

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

int cmd_start(const Context& ctx, Args args) {
  StartOptions o;
  o.runtime_dir = ctx.runtime_dir;
  o.name = kDefaultName;
  for (size_t i = 0; i < args.size();) {
    std::string value;
    if (take_option(args, i, "--name", &o.name)) continue;
    if (take_option(args, i, "--ip", &value)) {
      o.ip = value;
      o.engine_args.insert(o.engine_args.end(), {"--ip", value});
      continue;
    }
    if (take_option(args, i, "--mac", &value)) {
      o.engine_args.insert(o.engine_args.end(), {"--mac", value});
      continue;
    }
    if (take_option(args, i, "--port", &value)) {
      o.engine_args.insert(o.engine_args.end(), {"--port", value});
      continue;
    }
    if (args[i] == "--") {  // everything after goes to uroced verbatim
      o.engine_args.insert(o.engine_args.end(), args.begin() + i + 1, args.end());
      break;
    }
    o.engine_args.push_back(args[i++]);
  }
  if (auto why = check_engine_name(o.runtime_dir, o.name); !why.empty())
    return usage_error("invalid engine name '" + o.name + "': " + why);
  o.engine_path = (self_dir() / "uroced").string();
  ensure_runtime_dir(o.runtime_dir);
  return start_engine(o);
}

int cmd_stop(const Context& ctx, Args args) {
  std::string name = kDefaultName;
  bool all = false, named = false;
  for (size_t i = 0; i < args.size();) {
    if (take_option(args, i, "--name", &name)) {
      named = true;
    } else if (args[i] == "--all") {
      all = true;
      ++i;
    } else {
      return usage_error("stop: unknown argument '" + args[i] + "'");
    }
  }
  if (all && named) return usage_error("stop: give either --name or --all");
  if (all) return stop_all_engines(ctx.runtime_dir);
  if (auto why = check_engine_name(ctx.runtime_dir, name); !why.empty())
    return usage_error("invalid engine name '" + name + "': " + why);
  return stop_engine(ctx.runtime_dir, name);
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
  auto reply = control_request(sock, op, kRequestTimeoutMs, &error);
  std::cout << "== " << name;
  if (probe.pid) std::cout << " (pid " << probe.pid << ")";
  std::cout << '\n';
  if (!reply) {
    std::cout << "  error: " << error << '\n';
    return false;
  }
  if (reply->status != 0) {
    std::cout << "  error: " << std::strerror(reply->status) << '\n';
    return false;
  }
  std::cout << reply->body;
  if (!reply->body.empty() && reply->body.back() != '\n') std::cout << '\n';
  return true;
}

// The options `status` and `stats` share: which engines, and how to show them.
struct ShowOptions {
  std::vector<std::string> names;  // empty: every engine of the runtime directory
  bool json = false;
  bool watch = false;
  double interval_s = 1.0;
  unsigned count = 0;  // --watch refreshes (0: until interrupted)
};

ShowOptions show_options(Args args, bool allow_name, bool allow_watch) {
  ShowOptions o;
  for (size_t i = 0; i < args.size();) {
    std::string value;
    if (allow_name && take_option(args, i, "--name", &value)) {
      o.names.push_back(value);
      continue;
    }
    if (args[i] == "--json") {
      o.json = true;
      ++i;
      continue;
    }
    if (allow_watch && args[i] == "--watch") {
      o.watch = true;
      ++i;
      continue;
    }
    if (allow_watch && take_option(args, i, "--interval", &value)) {
      o.interval_s = std::stod(value);
      if (!(o.interval_s >= 0.1 && o.interval_s <= 3600))
        throw std::invalid_argument("--interval: 0.1 to 3600 seconds");
      continue;
    }
    if (allow_watch && take_option(args, i, "--count", &value)) {
      o.count = unsigned(std::stoul(value));
      continue;
    }
    throw std::invalid_argument("unknown argument '" + args[i] + "'");
  }
  if (o.json && o.watch) throw std::invalid_argument("--json and --watch do not go together");
  return o;
}

int show_engines(const Context& ctx, Args args, abi::CtlOp op, bool allow_name) {
  const ShowOptions o = show_options(args, allow_name, /*allow_watch=*/op == abi::CtlOp::kStats);
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

int cmd_status(const Context& ctx, Args args) {
  return show_engines(ctx, args, abi::CtlOp::kStatus, false);
}

int cmd_stats(const Context& ctx, Args args) {
  return show_engines(ctx, args, abi::CtlOp::kStats, true);
}

int cmd_port(const Context& ctx, Args args) {
  std::string name = kDefaultName, state;
  for (size_t i = 0; i < args.size();) {
    if (take_option(args, i, "--name", &name)) continue;
    if (!state.empty()) return usage_error("port: unexpected argument '" + args[i] + "'");
    state = args[i++];
  }
  if (state != "up" && state != "down") return usage_error("port: say 'up' or 'down'");
  abi::SetPortStateRequest req{state == "up" ? 4u /* IBV_PORT_ACTIVE */ : 1u /* IBV_PORT_DOWN */, 0};
  std::string error;
  auto reply = control_request(engine_socket_path(ctx.runtime_dir, name), abi::CtlOp::kSetPortState,
                               2000, &error,
                               std::string_view(reinterpret_cast<const char*>(&req), sizeof(req)));
  if (!reply) {
    std::cerr << "uroce: " << name << ": " << error << '\n';
    return 1;
  }
  if (reply->status) {
    std::cerr << "uroce: " << name << ": " << std::strerror(reply->status) << '\n';
    return 1;
  }
  std::cout << name << ": port 1 " << state << '\n';
  return 0;
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

int cmd_fault(const Context& ctx, Args args) {
  std::string name = kDefaultName, port;
  abi::SetFaultRequest req{};
  for (size_t i = 0; i < args.size();) {
    if (take_option(args, i, "--name", &name)) continue;
    if (take_option(args, i, "--port", &port)) continue;
    const std::string& kv = args[i++];
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) return usage_error("fault: '" + kv + "' is not key=value");
    const std::string key = kv.substr(0, eq);
    char* rest = nullptr;
    const double v = std::strtod(kv.c_str() + eq + 1, &rest);
    if (*rest || eq + 1 == kv.size()) return usage_error("fault: bad value in '" + kv + "'");
    if (key == "drop") req.drop = v;
    else if (key == "duplicate" || key == "dup") req.duplicate = v;
    else if (key == "reorder") req.reorder = v;
    else if (key == "corrupt") req.corrupt = v;
    else if (key == "delay") req.delay_us = uint64_t(v);
    else if (key == "seed") req.seed = uint64_t(v);
    else return usage_error("fault: unknown setting '" + key + "'");
  }
  if (port == "loopback") req.port = abi::kFaultPortLoopback;
  else if (port == "wire") req.port = abi::kFaultPortWire;
  else if (!port.empty()) return usage_error("fault: --port is loopback or wire");
  if (!engine_call(ctx, name, abi::CtlOp::kSetFault, &req, sizeof(req))) return 1;
  std::cout << name << ": fault injection " << (req.drop || req.duplicate || req.reorder ||
                                                        req.corrupt || req.delay_us
                                                    ? "set"
                                                    : "off")
            << '\n';
  return 0;
}

volatile std::sig_atomic_t g_capture_interrupted = 0;

int cmd_capture(const Context& ctx, Args args) {
  std::string name = kDefaultName, file, count = "0", seconds = "0";
  for (size_t i = 0; i < args.size();) {
    if (take_option(args, i, "--name", &name)) continue;
    if (take_option(args, i, "-w", &file)) continue;
    if (take_option(args, i, "--count", &count)) continue;
    if (take_option(args, i, "--seconds", &seconds)) continue;
    return usage_error("capture: unknown argument '" + args[i] + "'");
  }
  if (file.empty()) return usage_error("capture: -w FILE is required");
  abi::CaptureRequest req{};
  req.action = abi::kCaptureStart;
  req.max_frames = std::strtoull(count.c_str(), nullptr, 10);
  const std::string path = fs::absolute(file).string();
  if (path.size() >= abi::kMaxCapturePath) return usage_error("capture: path too long");
  std::memcpy(req.path, path.c_str(), path.size() + 1);
  if (!engine_call(ctx, name, abi::CtlOp::kCapture, &req, sizeof(req))) return 1;
  std::signal(SIGINT, [](int) { g_capture_interrupted = 1; });
  std::signal(SIGTERM, [](int) { g_capture_interrupted = 1; });
  const double limit_s = std::strtod(seconds.c_str(), nullptr);
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

int cmd_run(const Context& ctx, Args args) {
  // Its polling threads off the CPU their engine polls on
  // (verbs_provider/placement.cc), unless told not to.
  bool keep_cpus = false;
  if (!args.empty() && args[0] == "--all-cpus") {
    keep_cpus = true;
    args = args.subspan(1);
  }
  if (!args.empty() && args[0] == "--") args = args.subspan(1);
  if (args.empty()) return usage_error("run: no command given");
  if (keep_cpus) ::unsetenv("UROCE_POLL_PLACEMENT");
  else ::setenv("UROCE_POLL_PLACEMENT", "1", 1);
  auto [ld_path, runtime_dir] = provider_environment(ctx);
  ::setenv("LD_LIBRARY_PATH", ld_path.c_str(), 1);
  ::setenv("UROCE_RUNTIME_DIR", runtime_dir.c_str(), 1);
  // UCX lists a device only beside its /dev/infiniband node (device_nodes.h).
  const NodeSetupResult nodes = provide_uverbs_nodes(uverbs_node_names(ctx.runtime_dir, kDefaultName));
  if (!nodes.message.empty()) std::cerr << "uroce: " << nodes.message << '\n';
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::cout.flush();
  ::execvp(argv[0], argv.data());
  int err = errno;
  if (err == ENOENT) {
    std::cerr << "uroce: " << args[0] << ": command not found\n";
    return kExitNotFound;
  }
  std::cerr << "uroce: " << args[0] << ": " << std::strerror(err) << '\n';
  return kExitCannotExec;
}

int cmd_env(const Context& ctx, Args args) {
  if (!args.empty()) return usage_error("env: unknown argument '" + args[0] + "'");
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

int cmd_help(const Context&, Args) {
  std::cout << kUsage;
  return 0;
}

// Execs the bench script (tools/bench/uroce_bench.py): installed under
// <bin>/../share/uroce/bench, else the source tree's copy (build tree).
int cmd_bench(const Context&, Args args) {
  fs::path script = (self_dir() / ".." / "share" / "uroce" / "bench" / "uroce_bench.py").lexically_normal();
  std::error_code ec;
  if (!fs::exists(script, ec)) script = UROCE_BENCH_SCRIPT;
  const std::string self = (self_dir() / "uroce").string();
  std::vector<std::string> words = {"python3", script.string(), "--uroce", self};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  std::cout.flush();
  ::execvp(argv[0], argv.data());
  int err = errno;
  std::cerr << "uroce: bench: python3: " << std::strerror(err) << '\n';
  return err == ENOENT ? kExitNotFound : kExitCannotExec;
}

int run_main(const std::vector<std::string>& argv) {
  Args args(argv);
  std::string runtime_dir;
  size_t i = 0;
  while (i < args.size() && args[i].starts_with("-")) {
    if (take_option(args, i, "--runtime-dir", &runtime_dir)) continue;
    if (args[i] == "-h" || args[i] == "--help") return cmd_help({}, {});
    if (args[i] == "--version") {
      std::cout << "uroce " << UROCE_VERSION << '\n';
      return 0;
    }
    return usage_error("unknown option '" + args[i] + "'");
  }
  if (i == args.size()) return usage_error("no command given", true);
  if (runtime_dir.empty()) runtime_dir = uroce::runtime_dir();
  Context ctx{fs::absolute(runtime_dir).lexically_normal().string()};
  while (ctx.runtime_dir.size() > 1 && ctx.runtime_dir.back() == '/') ctx.runtime_dir.pop_back();

  const std::string& command = args[i];
  Args rest = args.subspan(i + 1);
  using Handler = std::function<int(const Context&, Args)>;
  static const std::map<std::string, Handler> kCommands = {
      {"start", cmd_start}, {"stop", cmd_stop}, {"status", cmd_status},
      {"stats", cmd_stats}, {"run", cmd_run},   {"env", cmd_env},
      {"help", cmd_help},   {"port", cmd_port},   {"fault", cmd_fault},
      {"capture", cmd_capture}, {"bench", cmd_bench},
  };
  auto it = kCommands.find(command);
  if (it == kCommands.end()) return usage_error("unknown command '" + command + "'", true);
  return it->second(ctx, rest);
}

}  // namespace
}  // namespace uroce::tool

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    return uroce::tool::run_main(args);
  } catch (const std::invalid_argument& e) {
    return uroce::tool::usage_error(e.what());
  } catch (const std::exception& e) {
    std::cerr << "uroce: " << e.what() << '\n';
    return 1;
  }
}
