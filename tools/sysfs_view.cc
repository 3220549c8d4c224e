// /sys/class/infiniband entries for `uroce run` (see sysfs_view.h).
#include "tools/sysfs_view.h"

#include <dirent.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "tools/device_nodes.h"
#include "uroce/runtime_dir.h"

namespace uroce::tool {
namespace {

constexpr const char* kClassDir = "/sys/class";
constexpr const char* kIbClassDir = "/sys/class/infiniband";

bool is_dir(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string net_dir(const std::string& engine) { return std::string(kIbClassDir) + "/" + engine + "/device/net"; }

bool make_dirs(const std::string& path) {
  for (size_t pos = 1; pos != std::string::npos;) {
    pos = path.find('/', pos + 1);
    const std::string prefix = path.substr(0, pos);
    if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) return false;
  }
  return true;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> bound_interfaces(const std::string& runtime_dir) {
  std::vector<std::pair<std::string, std::string>> out;
  DIR* d = ::opendir(runtime_dir.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n.size() <= 7 || !n.ends_with(".netdev")) continue;
    const std::string engine = n.substr(0, n.size() - 7);
    std::ifstream f(runtime_dir + "/" + n);
    std::string iface;
    // A file left by an engine that is gone names nothing: its socket is gone too.
    if (std::getline(f, iface) && !iface.empty() && iface.find('/') == std::string::npos &&
        ::access(engine_socket_path(runtime_dir, engine).c_str(), F_OK) == 0)
      out.emplace_back(engine, iface);
  }
  ::closedir(d);
  return out;
}

std::string provide_sysfs_view(const std::vector<std::pair<std::string, std::string>>& bound) {
  std::vector<std::pair<std::string, std::string>> missing;
  for (const auto& b : bound)
    if (!is_dir(net_dir(b.first) + "/" + b.second)) missing.push_back(b);
  if (missing.empty()) return "";
  std::string error;
  const std::string covered = is_dir(kIbClassDir) ? kIbClassDir : kClassDir;
  if (!enter_private_namespace(&error) || !cover_with_tmpfs(covered, &error))
    return "programs that look for a device's network interface in " + std::string(kIbClassDir) +
           " (rdma-core's tests) will not find it: " + error;
  for (const auto& [engine, iface] : missing) {
    const std::string dir = net_dir(engine);
    const std::string link = dir + "/" + iface;
    ::unlink(link.c_str());  // an entry of the host's of that name, bound back, gives way
    if (!make_dirs(dir) || ::symlink(("/sys/class/net/" + iface).c_str(), link.c_str()) != 0)
      return "cannot make " + link + ": " + std::strerror(errno);
  }
  // Not root: the tmpfs is the user's, whom /sys does not let write.
  if (::geteuid() != 0)
    ::mount(nullptr, covered.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID, nullptr);
  return "";
}

}  // namespace uroce::tool
