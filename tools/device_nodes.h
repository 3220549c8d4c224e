// The /dev/infiniband nodes that `uroce run` gives the program it runs.
//
// Some consumers list an ibverbs device only if /dev/infiniband/<dev_name>
// (ibv_device::dev_name, "uverbs-<name>" for uroce) is a character device the
// user may read and write: UCX's uct_ib_device_is_accessible() does stat,
// S_ISCHR and access(R_OK | W_OK). uroce has no kernel device, so `run` makes
// such a node appear for the command alone, without touching the host: a
// private mount namespace (and a user namespace of the same ids when not
// root) in which /dev (or /dev/infiniband) is a tmpfs holding the original
// entries, bind-mounted back, plus the missing nodes, each a bind mount of
// /dev/null. Where namespaces are not allowed, root creates the node on the
// real /dev (the null device, 1:3) and says so; anyone else is told what is
// missing.
#pragma once

#include <string>
#include <vector>

namespace uroce::tool {

// The dev_name of every engine whose socket is in runtime_dir, and of the
// default engine (one started later is found too), as the provider names
// them (verbs_provider/device_list.cc).
std::vector<std::string> uverbs_node_names(const std::string& runtime_dir,
                                           const std::string& default_name);

// The names in `names` whose /dev/infiniband node is missing or not a
// character device this process may read and write.
std::vector<std::string> missing_uverbs_nodes(const std::vector<std::string>& names);

// The shell commands that create the nodes on the host, as root.
std::string mknod_commands(const std::vector<std::string>& names);

enum class NodeSetup {
  kPresent,       // every node was there already
  kNamespace,     // they exist in this process's private mount namespace
  kCreatedOnHost, // root without namespaces: created on the real /dev
  kUnavailable,   // none of the above; `message` says why
};

struct NodeSetupResult {
  NodeSetup how = NodeSetup::kPresent;
  std::string message;  // for the user, when how is kCreatedOnHost or kUnavailable
};

// Enters the private mount namespace (and, when not root, a user namespace
// mapping the user's ids to themselves) with / made private, once per
// process: later calls give the first answer. Call it single-threaded.
bool enter_private_namespace(std::string* error);
// In that namespace: covers dir with a tmpfs holding its original entries
// (symlinks copied, everything else bind-mounted back), so entries can be
// added to it.
bool cover_with_tmpfs(const std::string& dir, std::string* error);

// Makes /dev/infiniband/<name> a readable and writable character device for
// this process and the programs it execs, for every name that is missing.
// Call it single-threaded (unshare(CLONE_NEWUSER) requires that).
NodeSetupResult provide_uverbs_nodes(const std::vector<std::string>& names);

}  // namespace uroce::tool
