// /dev/infiniband nodes for `uroce run` (see device_nodes.h).
#include "tools/device_nodes.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "uroce/runtime_dir.h"

namespace uroce::tool {
namespace {

constexpr const char* kDevDir = "/dev";
constexpr const char* kIbDir = "/dev/infiniband";
constexpr const char* kNullDevice = "/dev/null";
constexpr size_t kDevNameMax = 56;  // ibv_device::dev_name[64] less "uverbs-"

std::string node_path(const std::string& name) { return std::string(kIbDir) + "/" + name; }

std::string errno_text(const std::string& what, int err) {
  return what + ": " + std::strerror(err);
}

// What UCX checks (uct_ib_device_is_accessible): a character device, R and W.
bool node_usable(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISCHR(st.st_mode) &&
         ::access(path.c_str(), R_OK | W_OK) == 0;
}

// A file descriptor closed when it goes out of scope.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  // A path that names what fd names, for mount(2) sources: the original
  // tree stays reachable through it after a tmpfs covers its directory.
  std::string path(const std::string& entry = {}) const {
    std::string p = "/proc/self/fd/" + std::to_string(fd);
    return entry.empty() ? p : p + "/" + entry;
  }
};

bool write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
  f.flush();
  return bool(f);
}

// ---- the private namespace -------------------------------------------------

// Root: a mount namespace. Anyone else: a user namespace too, mapping the
// current uid and gid to themselves (setgroups denied, as an unprivileged
// gid_map requires), so files, SO_PEERCRED and the engine's
// process_vm_readv (same uid, the engine in the parent namespace holds
// CAP_SYS_PTRACE over this one) see the same ids as before.
bool enter_namespaces_now(std::string* error) {
  if (::geteuid() == 0) {
    if (::unshare(CLONE_NEWNS) == 0) return true;
    *error = errno_text("unshare(CLONE_NEWNS)", errno);
    return false;
  }
  const uid_t uid = ::geteuid();
  const gid_t gid = ::getegid();
  if (::unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) {
    *error = errno_text("unshare(CLONE_NEWUSER | CLONE_NEWNS)", errno);
    return false;
  }
  if (!write_file("/proc/self/setgroups", "deny") ||
      !write_file("/proc/self/uid_map", std::to_string(uid) + " " + std::to_string(uid) + " 1\n") ||
      !write_file("/proc/self/gid_map", std::to_string(gid) + " " + std::to_string(gid) + " 1\n")) {
    *error = "cannot write the user namespace's id maps";
    return false;
  }
  return true;
}

}  // namespace

bool enter_private_namespace(std::string* error) {
  static bool tried = false, entered = false;
  static std::string first_error;
  if (!tried) {
    tried = true;
    entered = enter_namespaces_now(&first_error);
    // Changes stay in this namespace (the host's / is often shared).
    if (entered && ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      first_error = errno_text("make / private", errno);
      entered = false;
    }
  }
  if (!entered) *error = first_error;
  return entered;
}

namespace {

// Puts one entry of the original directory (reached through `orig`) back
// into the tmpfs at `dir`: symlinks are copied, everything else is
// bind-mounted (recursively, so mounts below it such as /dev/pts come too,
// and locked mounts of a parent namespace may be bound at all).
bool restore_entry(const Fd& orig, const std::string& dir, const std::string& name,
                   std::string* error) {
  struct stat st;
  if (::fstatat(orig.fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return true;  // gone meanwhile
  const std::string target = dir + "/" + name;
  if (S_ISLNK(st.st_mode)) {
    std::vector<char> link(size_t(st.st_size > 0 ? st.st_size : 255) + 1);
    const ssize_t n = ::readlinkat(orig.fd, name.c_str(), link.data(), link.size() - 1);
    if (n < 0 || ::symlink(std::string(link.data(), size_t(n)).c_str(), target.c_str()) != 0) {
      *error = errno_text("symlink " + target, errno);
      return false;
    }
    return true;
  }
  const int made = S_ISDIR(st.st_mode) ? ::mkdir(target.c_str(), 0755)
                                       : ::close(::open(target.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644));
  if (made != 0 ||
      ::mount(orig.path(name).c_str(), target.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0) {
    *error = errno_text("bind " + target, errno);
    return false;
  }
  return true;
}

}  // namespace

bool cover_with_tmpfs(const std::string& dir, std::string* error) {
  Fd orig(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (orig.fd < 0) {
    *error = errno_text("open " + dir, errno);
    return false;
  }
  if (::mount("tmpfs", dir.c_str(), "tmpfs", MS_NOSUID, "mode=0755") != 0) {
    *error = errno_text("mount tmpfs on " + dir, errno);
    return false;
  }
  std::vector<std::string> entries;
  if (DIR* d = ::fdopendir(::dup(orig.fd))) {
    while (dirent* e = ::readdir(d))
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) entries.push_back(e->d_name);
    ::closedir(d);
  }
  for (const std::string& name : entries)
    if (!restore_entry(orig, dir, name, error)) {
      ::umount2(dir.c_str(), MNT_DETACH);  // back to the original tree
      return false;
    }
  return true;
}

namespace {

// Covers `dir` with a tmpfs holding its original entries and, in
// /dev/infiniband, a bind mount of the null device for each missing node.
bool overlay_with_nodes(const std::string& dir, const std::vector<std::string>& missing,
                        std::string* error) {
  Fd null_dev(::open(kNullDevice, O_PATH | O_CLOEXEC));
  struct stat null_st;
  if (null_dev.fd < 0) {
    *error = errno_text("open " + std::string(kNullDevice), errno);
    return false;
  }
  if (::fstat(null_dev.fd, &null_st) != 0 || !S_ISCHR(null_st.st_mode)) {
    *error = std::string(kNullDevice) + " is not a character device";
    return false;
  }
  if (!cover_with_tmpfs(dir, error)) return false;
  auto undo = [&] { ::umount2(dir.c_str(), MNT_DETACH); };  // back to the original tree
  if (dir != kIbDir && ::mkdir(kIbDir, 0755) != 0) {
    *error = errno_text(std::string("mkdir ") + kIbDir, errno);
    undo();
    return false;
  }
  for (const std::string& name : missing) {
    const std::string target = node_path(name);
    ::unlink(target.c_str());  // a stale entry bound back above is replaced
    if (::close(::open(target.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644)) != 0 ||
        ::mount(null_dev.path().c_str(), target.c_str(), nullptr, MS_BIND, nullptr) != 0) {
      *error = errno_text("bind " + std::string(kNullDevice) + " to " + target, errno);
      undo();
      return false;
    }
  }
  // Not root: the tmpfs belongs to the user, whom /dev does not let write.
  if (::geteuid() != 0) ::mount(nullptr, dir.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID, nullptr);
  return true;
}

// ---- without namespaces ----------------------------------------------------

// Root only: the node on the real /dev, as the null device (1:3), which any
// user may read and write and which nothing opens (uroce's provider talks to
// its engine over a socket).
// On failure nothing is left behind.
bool create_on_host(const std::vector<std::string>& missing, std::string* error) {
  const bool made_dir = ::mkdir(kIbDir, 0755) == 0;
  if (!made_dir && errno != EEXIST) {
    *error = errno_text(std::string("mkdir ") + kIbDir, errno);
    return false;
  }
  std::vector<std::string> made;
  for (const std::string& name : missing) {
    const std::string path = node_path(name);
    ::unlink(path.c_str());
    if (::mknod(path.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0 || ::chmod(path.c_str(), 0666) != 0) {
      *error = errno_text("mknod " + path, errno);
      ::unlink(path.c_str());
      for (const std::string& p : made) ::unlink(p.c_str());
      if (made_dir) ::rmdir(kIbDir);
      return false;
    }
    made.push_back(path);
  }
  return true;
}

std::string joined_paths(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : " ") + node_path(n);
  return out;
}

}  // namespace

std::string mknod_commands(const std::vector<std::string>& names) {
  std::string out = std::string("mkdir -p ") + kIbDir;
  for (const std::string& n : names) out += " && mknod -m 666 " + node_path(n) + " c 1 3";
  return out;
}

std::vector<std::string> uverbs_node_names(const std::string& runtime_dir,
                                           const std::string& default_name) {
  std::vector<std::string> engines = {default_name};
  if (DIR* d = ::opendir(runtime_dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      const std::string n = e->d_name;
      if (n.size() > 5 && n.ends_with(".sock")) engines.push_back(n.substr(0, n.size() - 5));
    }
    ::closedir(d);
  }
  std::vector<std::string> names;
  for (const std::string& e : engines) {
    std::string name = "uverbs-" + e.substr(0, kDevNameMax);
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  return names;
}

std::vector<std::string> missing_uverbs_nodes(const std::vector<std::string>& names) {
  std::vector<std::string> missing;
  for (const std::string& n : names)
    if (!node_usable(node_path(n))) missing.push_back(n);
  return missing;
}

NodeSetupResult provide_uverbs_nodes(const std::vector<std::string>& names) {
  const std::vector<std::string> missing = missing_uverbs_nodes(names);
  if (missing.empty()) return {};
  struct stat st;
  const std::string dir = ::stat(kIbDir, &st) == 0 && S_ISDIR(st.st_mode) ? kIbDir : kDevDir;
  std::string ns_error;
  if (enter_private_namespace(&ns_error) && overlay_with_nodes(dir, missing, &ns_error) &&
      missing_uverbs_nodes(missing).empty())
    return {NodeSetup::kNamespace, {}};
  if (ns_error.empty()) ns_error = "the nodes made are not usable";
  if (::geteuid() == 0) {
    std::string error;
    if (create_on_host(missing, &error))
      return {NodeSetup::kCreatedOnHost,
              "created " + joined_paths(missing) + " on this host (the null device, 1:3): no private mount namespace here (" +
                  ns_error + ")"};
    return {NodeSetup::kUnavailable, "cannot provide " + joined_paths(missing) + ": " + ns_error + "; " + error};
  }
  return {NodeSetup::kUnavailable,
          "programs that look for " + joined_paths(missing) +
              " (UCX, Open MPI) will not list this device: no private namespace here (" + ns_error +
              ") and only root may create the node (" + mknod_commands(missing) + ")"};
}

}  // namespace uroce::tool
