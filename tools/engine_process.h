// Engine life cycle for the uroce command: starting uroced detached, stopping
// it, and the files it leaves in the runtime directory (NAME.sock, NAME.pid,
// NAME.log).
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace uroce::tool {

// Seconds `start` waits for the engine to answer on its socket (--wait).
constexpr int kStartTimeoutSec = 10;

struct StartOptions {
  std::string engine_path;  // the uroced binary
  std::string runtime_dir;  // absolute
  std::string name;
  std::string ip;  // shown in the "started" line; empty: ask the engine
  int wait_seconds = kStartTimeoutSec;  // for the engine to answer on its socket
  // Everything after --name/--runtime-dir: --ip, --mac, --port, pass-through.
  std::vector<std::string> engine_args;
};

// Seconds `stop` waits after SIGTERM before it sends SIGKILL.
constexpr int kStopTimeoutSec = 5;

// Returns the process exit code; messages go to stdout/stderr.
int start_engine(const StartOptions& options);
// Stops one engine: 0 if it was running, 1 if there is no such engine.
int stop_engine(const std::string& runtime_dir, const std::string& name);
// Stops every engine in the directory; 0 unless one could not be stopped.
int stop_all_engines(const std::string& runtime_dir);

// Engine names that have a NAME.sock in the directory, sorted.
std::vector<std::string> list_engine_sockets(const std::string& runtime_dir);

// Empty if `name` can be an engine name, else why not.
std::string check_engine_name(const std::string& runtime_dir, const std::string& name);

// Creates the runtime directory (and parents) if missing. Throws on failure.
void ensure_runtime_dir(const std::string& runtime_dir);

std::optional<pid_t> read_pid_file(const std::string& path);

}  // namespace uroce::tool
