// The provider's side of the control socket (SOCK_SEQPACKET, fds by SCM_RIGHTS).
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "verbs_provider/provider.h"

namespace uroce::provider {

int errno_from_call(int err) { return err; }

int Connection::connect_to(const char* path) {
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path, sizeof(addr.sun_path) - 1);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    int e = errno;
    close(fd);
    return e == ENOENT || e == ECONNREFUSED ? ENODEV : e;
  }
  fd_ = fd;
  return 0;
}

void Connection::close_fd() {
  std::lock_guard<std::mutex> lock(*mu_);
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

// rdma-core's verbs issue their commands as write() or ioctl() on the
// device (libibverbs/cmd_fallback.c, _execute_cmd_write; cmd_ioctl.c,
// execute_ioctl) and return errno, which the refused system call left set:
// programs print it (perror after a failed ibv_modify_qp, as qperf does), so
// a refusal here sets errno too, and a success leaves it alone.
int Connection::call(abi::CtlOp op, const void* req, size_t req_len, void* rep, size_t rep_len,
                     const int* fds_in, size_t nfds_in, int* fds_out, size_t nfds_out) {
  const int err = exchange(op, req, req_len, rep, rep_len, fds_in, nfds_in, fds_out, nfds_out);
  if (err) errno = err;
  return err;
}

int Connection::exchange(abi::CtlOp op, const void* req, size_t req_len, void* rep, size_t rep_len,
                         const int* fds_in, size_t nfds_in, int* fds_out, size_t nfds_out) {
  std::lock_guard<std::mutex> lock(*mu_);
  if (fd_ < 0) return EIO;
  alignas(8) uint8_t buf[abi::kMaxCtlMsg];
  if (sizeof(abi::CtlRequestHeader) + req_len > sizeof(buf)) return EINVAL;
  abi::CtlRequestHeader hdr{uint32_t(op), uint32_t(req_len)};
  std::memcpy(buf, &hdr, sizeof(hdr));
  if (req_len) std::memcpy(buf + sizeof(hdr), req, req_len);
  iovec iov{buf, sizeof(hdr) + req_len};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * abi::kMaxCtlFds)];
  if (nfds_in) {
    msg.msg_control = cbuf;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds_in);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * nfds_in);
    std::memcpy(CMSG_DATA(c), fds_in, sizeof(int) * nfds_in);
  }
  error_text_.clear();
  ssize_t n;
  do n = sendmsg(fd_, &msg, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  // The engine hung up: an answer it left (a refusal) is still readable.
  n = receive(buf, sizeof(buf), cbuf, sizeof(cbuf), &msg, n < 0 ? MSG_DONTWAIT : 0);
  if (n <= 0) return EIO;  // engine gone
  size_t got_fds = 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      if (got_fds < nfds_out) fds_out[got_fds++] = fd;
      else close(fd);
    }
  }
  for (size_t i = got_fds; i < nfds_out; ++i) fds_out[i] = -1;
  abi::CtlReplyHeader rh;
  if (size_t(n) < sizeof(rh)) return EIO;
  std::memcpy(&rh, buf, sizeof(rh));
  if (rh.status != 0) {
    for (size_t i = 0; i < got_fds; ++i) close(fds_out[i]);
    if (rh.len == size_t(n) - sizeof(rh))
      error_text_.assign(reinterpret_cast<const char*>(buf) + sizeof(rh), rh.len);
    return rh.status;
  }
  if (rh.len != size_t(n) - sizeof(rh) || rh.len < rep_len) return EIO;
  if (rep_len) std::memcpy(rep, buf + sizeof(rh), rep_len);
  return 0;
}

ssize_t Connection::receive(void* buf, size_t len, void* cbuf, size_t clen, msghdr* msg, int flags) {
  iovec iov{buf, len};  // read during the call only
  *msg = {};
  msg->msg_iov = &iov;
  msg->msg_iovlen = 1;
  msg->msg_control = cbuf;
  msg->msg_controllen = clen;
  ssize_t n;
  do n = recvmsg(fd_, msg, MSG_CMSG_CLOEXEC | flags);
  while (n < 0 && errno == EINTR);
  // An engine that hangs up with our request unread leaves ECONNRESET
  // pending; it is reported once, ahead of the answer it sent before.
  if (n < 0 && errno == ECONNRESET) n = recvmsg(fd_, msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  return n;
}

void* map_queue(int fd, size_t size) {
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return nullptr;
  // Queues belong to this process: a forked child must not inherit them and
  // move indices under the parent (rdma-core protects queue buffers the same way).
  madvise(p, size, MADV_DONTFORK);
  return p;
}

void unmap_queue(void* p, size_t size) {
  if (p) munmap(p, size);
}

}  // namespace uroce::provider
