// The device as sysfs shows a kernel RoCE device: the files Linux makes
// under /sys/class/infiniband/<dev> (drivers/infiniband/core/sysfs.c: the
// device's node_guid, fw_ver, ...; each port's state, rate, gids,
// gid_attrs/types and ndevs, pkeys; rxe's `parent` and hw_counters), with
// the values the device gives through verbs. The engine keeps them as a tree
// of files in <runtime dir>/<name>.sysfs and rewrites a file when its value
// changes (a GID, the port state, a counter); `uroce run` mounts the tree at
// /sys/class/infiniband/<name> in the program's private mount namespace
// (tools/sysfs_view.h). Nothing on the host's /sys changes.
//
// In mlx5 mode (uroced --mlx5) the tree is <runtime dir>/<name>.pci/
// infiniband/<name>, below a PCI function with a ConnectX-5's ids, and
// <name>.sysfs links to it (uroce/runtime_dir.h, engine_pci_path).
//
// Each file is replaced whole (written beside it, then renamed), so a reader
// never sees half a value. Where the kernel answers a read with an error (a
// GID entry's type and netdev when the entry is empty: EINVAL), the file is
// absent.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "device/counters.h"
#include "uroce/abi.h"

namespace uroce::emulator {

// The values as sysfs prints them (core/sysfs.c), for the tree and its tests.
std::string sysfs_guid(uint64_t guid_be);                       // node_guid: "0075:72ff:feeb:d1bd"
std::string sysfs_gid(const uint8_t (&gid)[16]);               // gids/N: "fe80:0000:...:d1bd"
std::string sysfs_port_state(uint32_t state);                   // "4: ACTIVE"
std::string sysfs_phys_state(uint32_t phys_state);             // "5: LinkUp"
std::string sysfs_rate(uint8_t active_width, uint8_t active_speed);  // "100 Gb/sec (4X EDR)"

// A counter of rxe's hw_counters (rxe_hw_counters.c) and the engine counter
// that counts the same thing.
struct SysfsCounter {
  const char* name;
  uint64_t device::Counters::*field;
};
extern const std::array<SysfsCounter, 9> kSysfsCounters;

class SysfsTree {
 public:
  ~SysfsTree() { remove(); }
  // Makes <runtime_dir>/<info.name>.sysfs, replacing what an earlier engine
  // of that name left. `netdev`: the kernel interface the GIDs belong to
  // ("" for a DPDK port with addresses of its own: no ndevs, no device).
  // "" or why not (the engine runs without it: programs then see no tree).
  std::string create(const std::string& runtime_dir, const abi::DeviceInfo& info, const std::string& netdev);
  bool active() const { return !dir_.empty(); }
  // The port's state and GID table as they are now.
  void update_port(const abi::DeviceInfo& info);
  // The hw_counters whose values changed since the last call.
  void update_counters(const device::Counters& c);
  void remove();

 private:
  // Replaces dir_/rel with `value` + "\n".
  void put(const std::string& rel, const std::string& value);
  void drop(const std::string& rel);

  std::string dir_, netdev_;
  std::string link_, pci_;  // mlx5 mode: <name>.sysfs, and the PCI function above dir_
  std::array<uint64_t, kSysfsCounters.size()> written_{};
  bool counters_written_ = false;
  std::array<bool, abi::kMaxGids> gid_attrs_{};  // types/N and ndevs/N exist
};

}  // namespace uroce::emulator
