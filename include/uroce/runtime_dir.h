// Where engines publish their sockets and clients find them. Shared by the
// engine, the provider and the uroce command (header-only, no dependencies).
#pragma once

#include <cstdlib>
#include <string>
#include <unistd.h>

namespace uroce {

// $UROCE_RUNTIME_DIR, else /run/uroce for root, else $XDG_RUNTIME_DIR/uroce,
// else /tmp/uroce-<uid>.
inline std::string runtime_dir() {
  if (const char* d = std::getenv("UROCE_RUNTIME_DIR"); d && *d) return d;
  if (geteuid() == 0) return "/run/uroce";
  if (const char* x = std::getenv("XDG_RUNTIME_DIR"); x && *x)
    return std::string(x) + "/uroce";
  return "/tmp/uroce-" + std::to_string(geteuid());
}

inline std::string engine_socket_path(const std::string& dir, const std::string& name) {
  return dir + "/" + name + ".sock";
}
inline std::string engine_pid_path(const std::string& dir, const std::string& name) {
  return dir + "/" + name + ".pid";
}
inline std::string engine_log_path(const std::string& dir, const std::string& name) {
  return dir + "/" + name + ".log";
}

}  // namespace uroce
