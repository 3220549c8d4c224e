#include "tools/engine_client.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

namespace uroce::tool {

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

namespace {

// Largest reply we accept. Text replies may exceed kMaxCtlMsg; anything
// longer than this is reported as truncated.
constexpr size_t kMaxReply = 1 << 20;

// Non-blocking connect to a SOCK_SEQPACKET Unix socket. On failure returns an
// empty fd and sets *err.
UniqueFd connect_seqpacket(const std::string& path, int* err) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    *err = ENAMETOOLONG;
    return {};
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  UniqueFd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) {
    *err = errno;
    return {};
  }
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    *err = errno;
    return {};
  }
  *err = 0;
  return fd;
}

pid_t peer_pid(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return 0;
  return cred.pid;
}

int remaining_ms(std::chrono::steady_clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return left.count() > 0 ? static_cast<int>(left.count()) : 0;
}

// Waits for `events` on fd until the deadline. False on timeout or error.
bool wait_for(int fd, short events, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, remaining_ms(deadline));
    if (n > 0) return true;
    if (n == 0) return false;
    if (errno != EINTR) return false;
  }
}

void close_passed_fds(msghdr& msg) {
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int passed;
      std::memcpy(&passed, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      ::close(passed);
    }
  }
}

}  // namespace

ProbeResult probe_engine(const std::string& socket_path) {
  ProbeResult result;
  int err = 0;
  UniqueFd fd = connect_seqpacket(socket_path, &err);
  if (fd) {
    result.running = true;
    result.pid = peer_pid(fd.get());
  } else if (err == EAGAIN) {
    result.running = true;  // alive, backlog full
  } else {
    result.error = err;
  }
  return result;
}

namespace {

// One request and its reply on a connected socket.
std::optional<CtlReply> exchange(int fd, abi::CtlOp op, std::string_view body,
                                 std::chrono::steady_clock::time_point deadline, int timeout_ms,
                                 std::string* error) {
  const abi::CtlRequestHeader request_header{static_cast<uint32_t>(op),
                                             static_cast<uint32_t>(body.size())};
  std::string request(reinterpret_cast<const char*>(&request_header), sizeof(request_header));
  request.append(body);
  for (;;) {
    ssize_t n = ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
    if (n == static_cast<ssize_t>(request.size())) break;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN && wait_for(fd, POLLOUT, deadline)) continue;
    // An engine that refuses this user answers and hangs up at once: its
    // answer may be waiting although the request could not go out.
    if (pollfd p{fd, POLLIN, 0}; ::poll(&p, 1, 0) == 1 && (p.revents & POLLIN)) break;
    *error = std::string("cannot send request: ") + std::strerror(n < 0 ? errno : EIO);
    return std::nullopt;
  }

  std::vector<char> buf(kMaxReply);
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * abi::kMaxCtlFds)];
  ssize_t n;
  msghdr msg{};
  bool reset_seen = false;
  for (;;) {
    if (!wait_for(fd, POLLIN, deadline)) {
      *error = "no reply within " + std::to_string(timeout_ms / 1000) + " s";
      return std::nullopt;
    }
    iovec iov{buf.data(), buf.size()};
    msg = msghdr{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    n = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    if (n >= 0) break;
    // An engine that hung up with the request unread (a refusal) reports
    // ECONNRESET once, ahead of the answer it sent before.
    if (errno == ECONNRESET && !reset_seen) {
      reset_seen = true;
      continue;
    }
    if (errno != EINTR && errno != EAGAIN) {
      *error = std::string("cannot receive reply: ") + std::strerror(errno);
      return std::nullopt;
    }
  }
  close_passed_fds(msg);

  if (n == 0) {
    *error = "the engine closed the connection without replying";
    return std::nullopt;
  }
  abi::CtlReplyHeader header;
  if (static_cast<size_t>(n) < sizeof(header)) {
    *error = "malformed reply (" + std::to_string(n) + " bytes)";
    return std::nullopt;
  }
  std::memcpy(&header, buf.data(), sizeof(header));
  size_t have = static_cast<size_t>(n) - sizeof(header);
  CtlReply reply;
  reply.status = header.status;
  reply.body.assign(buf.data() + sizeof(header), std::min<size_t>(have, header.len));
  if (header.len > have || (msg.msg_flags & MSG_TRUNC))
    reply.body += "\n[reply truncated]\n";
  return reply;
}

}  // namespace

std::optional<CtlReply> control_request(const std::string& socket_path, abi::CtlOp op,
                                        int timeout_ms, std::string* error,
                                        std::string_view body) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  int err = 0;
  UniqueFd fd = connect_seqpacket(socket_path, &err);
  if (!fd) {
    *error = std::string("cannot connect: ") + std::strerror(err);
    return std::nullopt;
  }
  return exchange(fd.get(), op, body, deadline, timeout_ms, error);
}

std::optional<std::string> fetch_report(const std::string& socket_path, int timeout_ms,
                                        std::string* error, abi::CtlOp op) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  int err = 0;
  UniqueFd fd = connect_seqpacket(socket_path, &err);
  if (!fd) {
    *error = std::string("cannot connect: ") + std::strerror(err);
    return std::nullopt;
  }
  // One connection: the engine's snapshot (taken at offset 0) belongs to it.
  std::string doc;
  for (;;) {
    abi::ReportRequest req{doc.size()};
    auto reply = exchange(fd.get(), op,
                          std::string_view(reinterpret_cast<const char*>(&req), sizeof(req)),
                          deadline, timeout_ms, error);
    if (!reply) return std::nullopt;
    if (reply->status) {
      *error = reply->body.empty() ? std::strerror(reply->status) : reply->body;
      return std::nullopt;
    }
    abi::ReportReply head;
    if (reply->body.size() < sizeof(head)) {
      *error = "malformed report reply";
      return std::nullopt;
    }
    std::memcpy(&head, reply->body.data(), sizeof(head));
    const size_t piece = reply->body.size() - sizeof(head);
    doc.append(reply->body, sizeof(head), piece);
    if (doc.size() >= head.total) return doc;
    if (piece == 0) {
      *error = "the report stopped short";
      return std::nullopt;
    }
  }
}

}  // namespace uroce::tool
