// /sys/class/infiniband entries for `uroce run` (see sysfs_view.h).
#include "tools/sysfs_view.h"

#include <dirent.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

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

std::string read_link(const std::string& path) {
  char buf[4096];
  const ssize_t n = ::readlink(path.c_str(), buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, size_t(n)) : std::string();
}

std::string errno_text(const std::string& what) { return what + ": " + std::strerror(errno); }

// Remounts a bind mount read-only, keeping the flags a user namespace may
// not drop (those of the mount it was bound from).
void read_only(const std::string& dir) {
  unsigned long flags = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID;
  struct statvfs sv;
  if (::statvfs(dir.c_str(), &sv) == 0) {
    if (sv.f_flag & ST_NODEV) flags |= MS_NODEV;
    if (sv.f_flag & ST_NOEXEC) flags |= MS_NOEXEC;
  }
  ::mount(nullptr, dir.c_str(), nullptr, flags, nullptr);
}

// Not root: a tmpfs made here belongs to the user, whom /sys does not let
// write; read-only, as the rest of /sys.
void seal(const std::string& dir) {
  if (::geteuid() != 0) read_only(dir);
}

// <nic>/infiniband/<engine> -> /sys/class/infiniband/<engine>, in a tmpfs
// over <nic>/infiniband (the NIC has RDMA devices of its own) or over <nic>.
std::string link_from_nic(const std::string& nic, const std::string& engine) {
  const std::string ib = nic + "/infiniband";
  std::string error;
  if (is_dir(ib)) {
    if (!cover_with_tmpfs(ib, &error)) return error;
  } else {
    if (!cover_with_tmpfs(nic, &error)) return error;
    if (::mkdir(ib.c_str(), 0755) != 0) return errno_text("mkdir " + ib);
    seal(nic);
  }
  const std::string link = ib + "/" + engine;
  ::unlink(link.c_str());
  if (::symlink((std::string(kIbClassDir) + "/" + engine).c_str(), link.c_str()) != 0)
    return errno_text("symlink " + link);
  seal(ib);
  return "";
}

}  // namespace

std::vector<EngineSysfs> engine_sysfs_trees(const std::string& runtime_dir) {
  std::vector<EngineSysfs> out;
  DIR* d = ::opendir(runtime_dir.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n.size() <= 6 || !n.ends_with(".sysfs")) continue;
    const std::string engine = n.substr(0, n.size() - 6);
    // A tree left by an engine that is gone names nothing: its socket is gone too.
    if (is_dir(runtime_dir + "/" + n) && ::access(engine_socket_path(runtime_dir, engine).c_str(), F_OK) == 0)
      out.push_back({engine, runtime_dir + "/" + n});
  }
  ::closedir(d);
  return out;
}

std::string provide_sysfs_view(const std::vector<EngineSysfs>& engines) {
  std::vector<EngineSysfs> missing;
  // Already there: a `uroce run` inside another's namespace.
  for (const EngineSysfs& e : engines)
    if (!is_dir(std::string(kIbClassDir) + "/" + e.engine + "/ports")) missing.push_back(e);
  if (missing.empty()) return "";
  std::string error;
  const std::string covered = is_dir(kIbClassDir) ? kIbClassDir : kClassDir;
  if (!enter_private_namespace(&error) || !cover_with_tmpfs(covered, &error))
    return "programs that read devices from " + std::string(kIbClassDir) +
           " (ibstat, rdma-core's tests, UCX's interface discovery) will not find them: " + error;
  if (covered == kClassDir && ::mkdir(kIbClassDir, 0755) != 0 && errno != EEXIST)
    return errno_text(std::string("mkdir ") + kIbClassDir);
  std::vector<std::pair<std::string, std::string>> nics;  // (device dir, engine)
  for (const EngineSysfs& e : missing) {
    const std::string dir = std::string(kIbClassDir) + "/" + e.engine;
    ::unlink(dir.c_str());  // an entry of the host's of that name, bound back, gives way
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return errno_text("mkdir " + dir);
    if (::mount(e.tree.c_str(), dir.c_str(), nullptr, MS_BIND, nullptr) != 0) return errno_text("bind " + e.tree);
    // The program reads the engine's files; it does not write them.
    read_only(dir);
    // A NIC's device below the engine's interface gets the engine under its
    // infiniband/; an mlx5-mode engine's own PCI function already has it.
    const std::string nic = read_link(e.tree + "/device");
    if (!nic.empty() && nic[0] == '/' &&
        nic != engine_pci_path(e.tree.substr(0, e.tree.rfind('/')), e.engine))
      nics.emplace_back(nic, e.engine);
  }
  seal(covered);
  for (const auto& [nic, engine] : nics)
    if (std::string err = link_from_nic(nic, engine); !err.empty())
      return "no " + nic + "/infiniband/" + engine + ": " + err;
  return "";
}

}  // namespace uroce::tool
