// The uroce command line (CLI11): its subcommands, their options, and what a
// parse gives the subcommands to run (tools/uroce.cc). Help, --version and
// every bad command line are answered here, the same way for every
// subcommand: CLI11's message on one line, exit status kExitUsage.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tools/engine_process.h"
#include "uroce/abi.h"

namespace uroce::tool {

inline constexpr const char* kDefaultName = "uroce0";

// The exit statuses of every uroce command, one meaning each (uroce.1, EXIT
// STATUS): 0 done; 1 it failed (the message says why); 2 a bad command line;
// 3 no engine runs that it needs (run, status, stats, and the commands that
// name an engine); `run` adds the shell's 126 (CMD cannot be executed) and
// 127 (CMD not found), and otherwise exits as CMD does.
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitNoEngine = 3;
inline constexpr int kExitCannotExec = 126;
inline constexpr int kExitNotFound = 127;

struct StartArgs {
  std::string name = kDefaultName;
  std::string ip;
  int wait_seconds = kStartTimeoutSec;  // how long start waits for the engine to answer
  // For uroced: --ip, --mac, --port as given, then every flag uroce does not
  // know, in order (`--` and what follows it included, without the `--`).
  std::vector<std::string> engine_args;
};

struct StopArgs {
  std::string name = kDefaultName;
  bool all = false;
};

// `status` and `stats`: which engines, and how to show them.
struct ShowArgs {
  std::vector<std::string> names;  // empty: every engine of the runtime directory
  bool json = false;
  bool watch = false;
  double interval_s = 1.0;
  unsigned count = 0;  // --watch refreshes (0: until interrupted)
};

struct RunArgs {
  bool all_cpus = false;
  bool without_engine = false;  // run CMD even when no engine runs
  int wait_listen = 0;          // a TCP port CMD's server listens on: wait for it first (0: none)
  double wait_seconds = 30;
  std::vector<std::string> command;  // CMD and its arguments, untouched
};

struct FaultArgs {
  std::string name = kDefaultName;
  enum class Action { kShow, kSet, kOff } action = Action::kShow;  // no setting, KEY=VALUE..., off
  std::string port;                // "loopback", "wire" or "" (the engine's default)
  abi::SetFaultRequest request{};  // port and KEY=VALUE settings
  bool any_set = false;            // some fault is switched on
};

struct CaptureArgs {
  std::string name = kDefaultName;
  std::string file;
  uint64_t count = 0;    // frames; 0: no limit
  double seconds = 0;    // 0: no limit
};

struct PortArgs {
  std::string name = kDefaultName;
  bool up = false;
};

struct BenchArgs {
  std::vector<std::string> script_args;  // for tools/bench/uroce_bench.py
};

struct CommandLine {
  std::string runtime_dir;  // --runtime-dir as given; empty: the default
  std::string command;      // start, stop, status, ...
  StartArgs start;
  StopArgs stop;
  ShowArgs show;  // status and stats
  RunArgs run;
  FaultArgs fault;
  CaptureArgs capture;
  PortArgs port;
  BenchArgs bench;
};

// Parses uroce's arguments (argv[0] included). Without a command to run
// (help, --version, a bad command line) it prints what there is to print and
// sets `exit_status`.
std::optional<CommandLine> parse_command_line(int argc, const char* const* argv, int* exit_status);

// The overview `uroce help` and `uroce --help` print.
const char* usage_text();

// A usage error found after parsing (e.g. an engine name the runtime
// directory cannot hold), in the same form as the parser's: one line, then
// kExitUsage.
int usage_error(const std::string& command, const std::string& message);

}  // namespace uroce::tool
