// The engine's access policy (access.h). Setup path: may allocate.
#include "emulator/access.h"

#include <grp.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace uroce::emulator {

namespace {

// A decimal id, or nullopt.
std::optional<unsigned long> number(const std::string& s) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos || s.size() > 10)
    return std::nullopt;
  return std::strtoul(s.c_str(), nullptr, 10);
}

std::string group_name(gid_t gid) {
  if (const group* g = getgrgid(gid)) return g->gr_name;
  return std::to_string(gid);
}

}  // namespace

std::optional<PeerCredentials> peer_credentials(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return std::nullopt;
  PeerCredentials peer{cred.pid, cred.uid, cred.gid, {}};
  // The groups the peer had when it connected (Linux 4.13).
  std::vector<gid_t> groups(64);
  for (int attempt = 0; attempt < 4; ++attempt) {
    socklen_t glen = socklen_t(groups.size() * sizeof(gid_t));
    if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &glen) == 0) {
      groups.resize(glen / sizeof(gid_t));
      peer.groups = std::move(groups);
      break;
    }
    if (errno != ERANGE) break;
    groups.resize(glen / sizeof(gid_t) + 1);
  }
  return peer;
}

bool AccessPolicy::admits(const PeerCredentials& peer) const {
  if (peer.uid == owner || peer.uid == 0 || all_users) return true;
  if (std::find(users.begin(), users.end(), peer.uid) != users.end()) return true;
  if (group && (peer.gid == *group ||
                std::find(peer.groups.begin(), peer.groups.end(), *group) != peer.groups.end()))
    return true;
  return false;
}

std::string AccessPolicy::describe() const {
  std::string s = "its owner (" + user_name(owner) + ")";
  if (all_users) return s + " and every user";
  std::vector<std::string> parts;
  if (!users.empty()) {
    std::string u = users.size() == 1 ? "user" : "users";
    for (size_t i = 0; i < users.size(); ++i) u += (i ? ", " : " ") + user_name(users[i]);
    parts.push_back(u);
  }
  if (group) parts.push_back("members of group " + group_name(*group));
  for (size_t i = 0; i < parts.size(); ++i) s += (i + 1 == parts.size() ? " and " : ", ") + parts[i];
  return s + (owner == 0 ? "" : " (and root)");
}

std::string parse_users(const std::string& list, AccessPolicy* policy) {
  if (list == "all" || list == "*") {
    policy->all_users = true;
    return {};
  }
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t end = list.find(',', pos);
    if (end == std::string::npos) end = list.size();
    const std::string item = list.substr(pos, end - pos);
    pos = end + 1;
    if (item.empty()) return "an empty user name in '" + list + "'";
    if (const passwd* pw = getpwnam(item.c_str())) {
      policy->users.push_back(pw->pw_uid);
    } else if (auto n = number(item)) {
      policy->users.push_back(uid_t(*n));  // a uid without a name is a user too
    } else {
      return "no user named '" + item + "'";
    }
  }
  return {};
}

std::string parse_group(const std::string& name, AccessPolicy* policy) {
  if (const group* g = getgrnam(name.c_str())) {
    policy->group = g->gr_gid;
    return {};
  }
  if (auto n = number(name)) {
    policy->group = gid_t(*n);
    return {};
  }
  return "no group named '" + name + "'";
}

mode_t socket_mode(const AccessPolicy& policy) {
  if (policy.all_users || !policy.users.empty()) return 0666;
  return policy.group ? 0660 : 0600;
}

mode_t runtime_dir_mode(const AccessPolicy& policy) { return policy.shared() ? 0755 : 0700; }

std::string runtime_dir_problem(const std::string& dir, uid_t owner) {
  struct stat st;
  if (lstat(dir.c_str(), &st) != 0) return std::string("cannot stat it: ") + std::strerror(errno);
  if (!S_ISDIR(st.st_mode)) return "it is not a directory";
  if (st.st_uid != owner)
    return "it belongs to " + user_name(st.st_uid) + ", not to " + user_name(owner) +
           " (another user could put a socket of theirs where clients look for the engine)";
  if (st.st_mode & (S_IWGRP | S_IWOTH)) return "others may write into it (mode " +
                                               [&] {
                                                 char m[8];
                                                 std::snprintf(m, sizeof(m), "%04o", st.st_mode & 07777);
                                                 return std::string(m);
                                               }() + ")";
  return {};
}

std::string user_name(uid_t uid) {
  if (const passwd* pw = getpwuid(uid)) return pw->pw_name;
  return std::to_string(uid);
}

}  // namespace uroce::emulator
