// Capabilities of a client process from /proc/<pid>/status ("CapEff:", a hex
// mask of the effective set; proc(5)).
#include "emulator/peer_credentials.h"

#include <cstdio>
#include <cstring>
#include <string>

namespace uroce::emulator {

bool peer_has_capability(pid_t pid, int cap) {
  if (pid <= 0 || cap < 0 || cap > 63) return false;
  const std::string path = "/proc/" + std::to_string(pid) + "/status";
  FILE* f = std::fopen(path.c_str(), "re");
  if (!f) return false;
  char line[256];
  unsigned long long eff = 0;
  bool found = false;
  while (std::fgets(line, sizeof(line), f)) {
    if (std::strncmp(line, "CapEff:", 7) == 0) {
      found = std::sscanf(line + 7, "%llx", &eff) == 1;
      break;
    }
  }
  std::fclose(f);
  return found && (eff >> cap) & 1;
}

}  // namespace uroce::emulator
