// The sysfs tree `uroce run` gives the program it runs: each engine's
// device as a kernel RoCE device shows itself,
//
//   /sys/class/infiniband/<engine>/...   node_guid, fw_ver, ports/1/state,
//       gids/N, gid_attrs/types/N and ndevs/N, hw_counters/, ... (the files
//       the engine keeps in <runtime dir>/<engine>.sysfs, emulator/sysfs_tree.h,
//       mounted here: they follow the engine's GIDs, port state and counters)
//   /sys/class/infiniband/<engine>/device  the interface's own device (a NIC),
//       or a directory holding net/<IF> -> /sys/class/net/<IF>
//   <a NIC's device>/infiniband/<engine>   so /sys/class/net/<IF>/device/
//       infiniband names the RDMA device on that interface (mlx5's layout)
//
// Programs that find devices and their interfaces through sysfs read these:
// rdma-core's ibstat, ibstatus and pyverbs tests (tests/base.py lists
// <dev>/device/net/), UCX's rdma_cm interface discovery (gid_attrs/ndevs/0
// and node_guid), site scripts.
//
// How: /sys cannot be written, and uroce has no kernel device. The entries
// exist in the command's private mount namespace only, the one that
// /dev/infiniband nodes are made in (device_nodes.h): a tmpfs over
// /sys/class/infiniband, or over /sys/class when the host has no
// infiniband class, holding the original entries bound back, plus the
// engines' trees bound in (read-only); likewise over the NIC's device
// directory. The rest of /sys is the host's, and the host sees nothing. An
// interposer of stat/opendir (LD_PRELOAD) was the alternative, rejected: the
// readers are other programs (`ls`, `ip`, python), static binaries and
// direct system calls pass it by, and it would sit in every process of the
// command. Where namespaces are not allowed the program sees no entry (a
// message says so).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace uroce::tool {

// A live engine's tree: <runtime dir>/<engine>.sysfs beside its socket.
struct EngineSysfs {
  std::string engine;
  std::string tree;  // the directory the engine keeps
};
std::vector<EngineSysfs> engine_sysfs_trees(const std::string& runtime_dir);

// Makes /sys/class/infiniband/<engine> (and its interface's link back)
// appear for this process and the programs it execs. "" or a message for
// the user. Call it single-threaded, after provide_uverbs_nodes.
std::string provide_sysfs_view(const std::vector<EngineSysfs>& engines);

}  // namespace uroce::tool
