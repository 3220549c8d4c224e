// Control-plane requests from one client: read a message and its fds, check
// it against its method (emulator/methods.cc) and run the handler. Setup
// path: may allocate; nothing reaches the device unchecked.
#include "emulator/session.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "emulator/engine.h"
#include "emulator/methods.h"
#include "emulator/object_table.h"

namespace uroce::emulator {

namespace {

void close_fds(std::vector<int>& fds) {
  for (int fd : fds)
    if (fd >= 0) close(fd);
  fds.clear();
}

bool fd_is(int fd, FdKind kind) {
  if (kind == FdKind::kAny) return true;
  struct stat st;
  if (fstat(fd, &st) != 0) return false;
  return kind == FdKind::kPipe ? S_ISFIFO(st.st_mode) : S_ISREG(st.st_mode);
}

}  // namespace

Session::Session(Engine& engine, SeqPacket::socket socket, uint64_t id)
    : engine_(engine), socket_(std::move(socket)) {
  owner_.id = id;
  // The engine admitted these credentials (Engine::accept_next).
  if (auto peer = peer_credentials(socket_.native_handle())) peer_ = *peer;
  if (peer_.pid > 0) owner_.mem = device::ProcessMemory(peer_.pid);
  std::ifstream comm("/proc/" + std::to_string(peer_.pid) + "/comm");
  std::getline(comm, owner_.comm);
}

Session::~Session() {
  engine_.device().release_owner(&owner_);
  if (owner_.async_fd >= 0) close(owner_.async_fd);
}

void Session::start() { wait_readable(); }

void Session::wait_readable() {
  socket_.async_wait(boost::asio::socket_base::wait_read, [this](const boost::system::error_code& ec) {
    if (ec || !handle_readable()) {
      engine_.close_session(this);
      return;
    }
    wait_readable();
  });
}

bool Session::handle_readable() {
  alignas(8) uint8_t buf[abi::kMaxCtlMsg];
  alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * abi::kMaxCtlFds)];
  iovec iov{buf, sizeof(buf)};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = cbuf;
  msg.msg_controllen = sizeof(cbuf);
  const ssize_t n = recvmsg(socket_.native_handle(), &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (n < 0) return errno == EAGAIN || errno == EINTR;
  if (n == 0) return false;  // client closed: process exited or was killed
  std::vector<int> fds;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        fds.push_back(fd);
      }
    }
  }
  abi::CtlRequestHeader hdr;
  if (size_t(n) < sizeof(hdr) || (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
    close_fds(fds);
    reply_text(EINVAL, "message cut short or too long");
    return hang_up(Verdict::kJunk, nullptr, size_t(n));
  }
  std::memcpy(&hdr, buf, sizeof(hdr));
  if (hdr.len != size_t(n) - sizeof(hdr)) {
    close_fds(fds);
    reply_text(EINVAL, "the header's length is not the message's");
    return hang_up(Verdict::kJunk, &hdr, size_t(n));
  }
  const Verdict v = dispatch(hdr, buf + sizeof(hdr), fds);
  ++engine_.counters().control_messages;
  close_fds(fds);
  return v == Verdict::kServe || hang_up(v, &hdr, size_t(n));
}

bool Session::hang_up(Verdict why, const abi::CtlRequestHeader* hdr, size_t bytes) {
  EngineCounters& c = engine_.counters();
  const uint64_t n = why == Verdict::kFlood ? ++c.clients_flooding : ++c.clients_junk;
  if (n <= 20 || n % 1000 == 0)  // a client reconnecting in a loop must not fill the log
    std::fprintf(stderr, "uroced: client pid %d (%s, uid %u) disconnected: %s (op %u, %zu bytes)\n",
                 int(peer_.pid), owner_.comm.c_str(), unsigned(peer_.uid),
                 why == Verdict::kFlood ? "sent requests without reading the replies"
                                        : "malformed control message",
                 hdr ? hdr->op : 0u, bytes);
  return false;
}

bool Session::reply(int status, const void* body, size_t len, const int* fds, size_t nfds) {
  alignas(8) uint8_t buf[abi::kMaxCtlMsg];
  abi::CtlReplyHeader hdr{status, uint32_t(len)};
  std::memcpy(buf, &hdr, sizeof(hdr));
  if (len) std::memcpy(buf + sizeof(hdr), body, len);
  iovec iov{buf, sizeof(hdr) + len};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * abi::kMaxCtlFds)];
  if (nfds) {
    msg.msg_control = cbuf;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
    std::memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
  }
  // A provider reads each reply before it sends its next request, so the
  // socket holds at most one: a reply that does not fit belongs to a client
  // flooding the engine with requests, never to a waiting one. (A client
  // gone meanwhile is no flood: its hang-up ends the session next.)
  const bool sent = sendmsg(socket_.native_handle(), &msg, MSG_DONTWAIT | MSG_NOSIGNAL) >= 0;
  if (!sent && (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS)) reply_failed_ = true;
  return sent;
}

// Checks a request against its method (body size, fd count, handles), then
// runs the handler. Fds the handler did not take are closed by the caller.
Session::Verdict Session::dispatch(const abi::CtlRequestHeader& hdr, const uint8_t* body,
                                  std::vector<int>& fds) {
  const Method* m = find_method(hdr.op);
  if (!m) {
    reply_text(EOPNOTSUPP, "unknown operation " + std::to_string(hdr.op));
    return Verdict::kJunk;
  }
  const bool size_ok = m->size_rule == SizeRule::kExact ? hdr.len == m->req_size : hdr.len <= m->req_size;
  if (!size_ok || fds.size() < m->min_fds || fds.size() > m->max_fds) {
    reply_text(EINVAL, std::string(m->name) + ": " + (size_ok ? "wrong number of fds" : "wrong size"));
    return Verdict::kJunk;
  }
  for (int fd : fds)
    if (!fd_is(fd, m->fd_kind)) {
      reply_text(EINVAL, std::string(m->name) + ": an fd of the wrong kind");
      return Verdict::kJunk;
    }
  if (m->engine_wide && !engine_.access().may_administer(peer_)) {
    ++engine_.counters().engine_ops_refused;
    const uid_t owner = engine_.access().owner;
    reply_text(EPERM, std::string(m->name) + " changes the whole engine: only its owner (" + user_name(owner) +
                          (owner == 0 ? ") may" : ") or root may"));
    return reply_failed_ ? Verdict::kFlood : Verdict::kServe;
  }
  // A body shorter than the largest the method takes reads as zeros.
  alignas(8) uint8_t req[abi::kMaxCtlMsg] = {};
  std::memcpy(req, body, hdr.len);
  // Handles name objects of this session only; each becomes the device id
  // it stands for before the handler sees the request.
  Call call{engine_, engine_.device(), owner_, objects_, req, hdr.len, fds};
  for (size_t i = 0; i < m->num_handles; ++i) {
    const HandleAttr& a = m->handles[i];
    uint64_t h, id = 0;
    std::memcpy(&h, req + a.offset, sizeof(h));
    call.client_handles[i] = h;
    if (h != 0 || !a.optional) {
      if (int err = objects_.lookup(h, a.type, a.missing_errno, &id)) {
        reply(err, nullptr, 0);
        return reply_failed_ ? Verdict::kFlood : Verdict::kServe;
      }
    }
    std::memcpy(req + a.offset, &id, sizeof(id));
  }
  const int status = m->handler(call);
  if (status == 0)
    for (size_t i = 0; i < m->num_handles; ++i)
      if (m->handles[i].destroys) objects_.erase(call.client_handles[i]);
  reply(status, call.rep, call.rep_len, status ? nullptr : call.out_fds, status ? 0 : call.nout);
  for (size_t i = 0; i < call.nout; ++i)
    if (call.close_out[i]) close(call.out_fds[i]);
  return reply_failed_ ? Verdict::kFlood : Verdict::kServe;
}

}  // namespace uroce::emulator
