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
// The device's sysfs tree (emulator/sysfs_tree.h), which `uroce run` mounts
// at /sys/class/infiniband/<name>.
inline std::string engine_sysfs_path(const std::string& dir, const std::string& name) {
  return dir + "/" + name + ".sysfs";
}
// An mlx5-mode engine's PCI function: its vendor and device ids, with the
// sysfs tree at infiniband/<name> below it (engine_sysfs_path is then a link
// to it), as /sys/devices/pci*/<BDF>/infiniband/mlx5_0 on a host. The
// provider gives this path as the device's ibdev_path, so that programs that
// look two levels above realpath(ibdev_path) for the PCI ids (UCX 1.13's
// src/uct/ib/base/ib_device.c, uct_ib_device_get_sysfs_path) find them,
// with or without `uroce run`.
inline std::string engine_pci_path(const std::string& dir, const std::string& name) {
  return dir + "/" + name + ".pci";
}
inline std::string engine_mlx5_ibdev_path(const std::string& dir, const std::string& name) {
  return engine_pci_path(dir, name) + "/infiniband/" + name;
}

}  // namespace uroce
