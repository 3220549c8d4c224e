// Who may use an engine, and who may change it. An engine is its owner's
// (the user it runs as) unless `--users` or `--group` say otherwise, as
// /dev/infiniband/uverbs* nodes are root's unless their mode and group say
// otherwise (rdma-core's udev rules: group rdma, mode 0660). The engine
// checks each connection's credentials (SO_PEERCRED, SO_PEERGROUPS) when it
// accepts it; engine-wide operations (fault injection, capture, the port
// state) are its owner's and root's alone, whoever else may connect.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace uroce::emulator {

// A connected peer as the kernel vouches for it.
struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = uid_t(-1);
  gid_t gid = gid_t(-1);
  std::vector<gid_t> groups;  // supplementary groups (SO_PEERGROUPS)
};

// The credentials of the peer of a connected Unix socket; nullopt if the
// kernel does not say (then nobody is admitted on that connection).
std::optional<PeerCredentials> peer_credentials(int fd);

struct AccessPolicy {
  uid_t owner = 0;            // the engine's user: always admitted
  bool all_users = false;     // --users all
  std::vector<uid_t> users;   // --users LIST
  std::optional<gid_t> group; // --group NAME: its members (primary or supplementary)

  // Others than the owner (and root) may connect.
  bool shared() const { return all_users || !users.empty() || group.has_value(); }
  bool admits(const PeerCredentials& peer) const;
  // Fault injection, capture, the port state: the owner and root.
  bool may_administer(const PeerCredentials& peer) const { return peer.uid == owner || peer.uid == 0; }
  // "its owner (root)", "its owner (alice), users bob, 1005 and group rdma".
  std::string describe() const;
};

// "alice,bob,1005" or "all" into `policy` (names through getpwnam, or
// numbers). Empty on success, else what is wrong.
std::string parse_users(const std::string& list, AccessPolicy* policy);
// A group name or number. Empty on success, else what is wrong.
std::string parse_group(const std::string& name, AccessPolicy* policy);

// The modes the engine gives its files (emulator/engine.cc): the socket is
// 0600 for its owner alone, 0660 with its group for --group, 0666 for
// --users (the credential check decides); the runtime directory is 0700
// unless others may connect (0755: they list it to find the engines).
mode_t socket_mode(const AccessPolicy& policy);
mode_t runtime_dir_mode(const AccessPolicy& policy);

// Why `dir` may not hold an engine's socket, or empty: it must be a directory
// of the engine's own user that nobody else may write into (else another user
// could put a socket of theirs where clients look for the engine).
std::string runtime_dir_problem(const std::string& dir, uid_t owner);

// The user name of a uid, else its number.
std::string user_name(uid_t uid);

}  // namespace uroce::emulator
