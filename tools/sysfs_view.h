// The sysfs entries that `uroce run` gives the program it runs for each
// engine bound to a kernel interface (uroced --netdev IF; lo by default):
//
//   /sys/class/infiniband/<engine>/device/net/<IF> -> /sys/class/net/<IF>
//
// as a kernel RoCE device has them (rxe, mlx5): that is where programs find
// a device's netdev and so its IP addresses. rdma-core's pyverbs tests
// (tests/base.py) list that directory with `ls` and read the interface's
// addresses with `ip -j addr show`; without it they skip every rdma_cm test
// ("Device ... doesn't have net interface").
//
// How: /sys cannot be written, and uroce has no kernel device. The entries
// exist in the command's private mount namespace only, the one that
// /dev/infiniband nodes are made in (device_nodes.h): a tmpfs over
// /sys/class/infiniband, or over /sys/class when the host has no
// infiniband class, holding the original entries bound back, plus the
// engines' directories. The rest of /sys is the host's. An interposer of
// stat/opendir (LD_PRELOAD) was the alternative, rejected: the readers are
// other programs (`ls`, `ip`, python), static binaries and direct system
// calls pass it by, and it would sit in every process of the command.
// Where namespaces are not allowed the program sees no entry (a message
// says so): its tests skip as before.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace uroce::tool {

// (engine, interface) for every engine of runtime_dir that is bound to an
// interface (its <name>.netdev file, written by the engine beside its socket).
std::vector<std::pair<std::string, std::string>> bound_interfaces(const std::string& runtime_dir);

// Makes /sys/class/infiniband/<engine>/device/net/<interface> appear for
// this process and the programs it execs. "" or a message for the user.
// Call it single-threaded, after provide_uverbs_nodes.
std::string provide_sysfs_view(const std::vector<std::pair<std::string, std::string>>& bound);

}  // namespace uroce::tool
