// The engine's control protocol (include/uroce/abi.h) as test clients speak
// it themselves, so that they can misbehave in ways libibverbs never would:
// tests/integration/hostile_client.cc, tests/stress/control_flood.cc,
// tests/integration/verbs_handles.cc; tests/fuzz/control_fuzz.cc reads its
// sessions' replies with read_reply.
#pragma once

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "uroce/abi.h"
#include "uroce/runtime_dir.h"

namespace uroce::test {

// A socket connected to the engine named device (in UROCE_RUNTIME_DIR);
// -1 if there is none to connect to.
inline int connect_engine(const std::string& device) {
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string path = engine_socket_path(runtime_dir(), device);
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Sends one request (header, len bytes of body, fds attached); false if the
// engine is gone from this socket (or, with MSG_DONTWAIT, it would block).
inline bool send_request(int fd, abi::CtlOp op, const void* body, size_t len, const std::vector<int>& fds,
                         int flags = 0) {
  alignas(8) uint8_t buf[abi::kMaxCtlMsg];
  abi::CtlRequestHeader hdr{uint32_t(op), uint32_t(len)};
  std::memcpy(buf, &hdr, sizeof(hdr));
  if (len) std::memcpy(buf + sizeof(hdr), body, len);
  iovec iov{buf, sizeof(hdr) + len};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * abi::kMaxCtlFds)];
  if (!fds.empty()) {
    msg.msg_control = cbuf;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  return sendmsg(fd, &msg, MSG_NOSIGNAL | flags) >= 0;
}

struct Reply {
  int status = -1;
  uint32_t len = 0;  // the header's body length (body.size() in a well-formed reply)
  std::vector<uint8_t> body;
  std::vector<int> fds;  // the caller's to close
};

// Reads one reply if one comes within timeout_ms; false if none came, the
// socket was closed or the reply is shorter than its header.
inline bool read_reply(int fd, int timeout_ms, Reply* r) {
  pollfd pfd{fd, POLLIN, 0};
  if (poll(&pfd, 1, timeout_ms) != 1) return false;
  alignas(8) uint8_t buf[abi::kMaxCtlMsg];
  alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * abi::kMaxCtlFds)];
  iovec iov{buf, sizeof(buf)};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = cbuf;
  msg.msg_controllen = sizeof(cbuf);
  const ssize_t n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
  if (n < ssize_t(sizeof(abi::CtlReplyHeader))) return false;
  abi::CtlReplyHeader rh;
  std::memcpy(&rh, buf, sizeof(rh));
  r->status = rh.status;
  r->len = rh.len;
  r->body.assign(buf + sizeof(rh), buf + n);
  r->fds.clear();
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
    for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); ++i) {
      int f;
      std::memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      r->fds.push_back(f);
    }
  return true;
}

}  // namespace uroce::test
