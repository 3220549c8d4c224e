// Control-plane requests from one client. Setup path: may allocate; every
// request is validated (size, handles, ownership) before it reaches the device.
#include "emulator/session.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "emulator/engine.h"

namespace uroce::emulator {

namespace {

template <typename T>
bool body_as(uint32_t len, const uint8_t* body, T* out) {
  if (len != sizeof(T)) return false;
  std::memcpy(out, body, sizeof(T));
  return true;
}

void close_fds(std::vector<int>& fds) {
  for (int fd : fds)
    if (fd >= 0) close(fd);
  fds.clear();
}

int take_fd(std::vector<int>& fds, size_t i) {
  if (i >= fds.size()) return -1;
  int fd = fds[i];
  fds[i] = -1;
  return fd;
}

}  // namespace

Session::Session(Engine& engine, SeqPacket::socket socket, uint64_t id)
    : engine_(engine), socket_(std::move(socket)) {
  owner_.id = id;
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (getsockopt(socket_.native_handle(), SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0)
    owner_.mem = device::ProcessMemory(cred.pid);
  std::ifstream comm("/proc/" + std::to_string(cred.pid) + "/comm");
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
    reply(EINVAL, nullptr, 0);
    return true;
  }
  std::memcpy(&hdr, buf, sizeof(hdr));
  if (hdr.len != size_t(n) - sizeof(hdr)) {
    close_fds(fds);
    reply(EINVAL, nullptr, 0);
    return true;
  }
  handle(hdr, buf + sizeof(hdr), fds);
  close_fds(fds);
  return true;
}

void Session::reply(int status, const void* body, size_t len, const int* fds, size_t nfds) {
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
  // A client that stopped reading its socket only hurts itself.
  (void)sendmsg(socket_.native_handle(), &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
}

void Session::reply_srq(uint32_t handle, bool with_fd) {
  const device::Srq* s = engine_.device().srq(handle);
  abi::CreateSrqReply rep{};
  rep.handle = handle;
  rep.srqn = handle;
  rep.max_wr = s->max_wr;
  rep.max_sge = s->max_sge;
  rep.log2 = s->ring.log2;
  rep.stride = s->ring.stride;
  rep.shm_size = s->mem.size();
  int fd = s->mem.fd();
  reply(0, &rep, sizeof(rep), with_fd ? &fd : nullptr, with_fd ? 1 : 0);
}

void Session::handle(const abi::CtlRequestHeader& hdr, const uint8_t* body, std::vector<int>& fds) {
  device::Device& dev = engine_.device();
  const uint32_t len = hdr.len;
  switch (abi::CtlOp(hdr.op)) {
    case abi::CtlOp::kHello: {
      abi::HelloRequest req;
      if (!body_as(len, body, &req) || req.magic != abi::kMagic) return reply(EINVAL, nullptr, 0);
      if (req.version != abi::kVersion) return reply(EPROTO, nullptr, 0);
      int async_fd = take_fd(fds, 0);
      if (async_fd < 0) return reply(EINVAL, nullptr, 0);
      fcntl(async_fd, F_SETFL, fcntl(async_fd, F_GETFL) | O_NONBLOCK);
      if (owner_.async_fd >= 0) close(owner_.async_fd);
      owner_.async_fd = async_fd;
      abi::HelloReply rep{dev.info()};
      // Clients get the engine page read-only.
      const std::string path = "/proc/self/fd/" + std::to_string(engine_.shared_fd());
      int ro = open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (ro < 0) return reply(errno, nullptr, 0);
      int out[2] = {ro, engine_.doorbell_fd()};
      reply(0, &rep, sizeof(rep), out, 2);
      close(ro);
      return;
    }
    case abi::CtlOp::kQueryDevice: {
      abi::HelloReply rep{dev.info()};
      return reply(0, &rep, sizeof(rep));
    }
    case abi::CtlOp::kSetPortState: {
      abi::SetPortStateRequest req;
      if (!body_as(len, body, &req) ||
          (req.state != IBV_PORT_ACTIVE && req.state != IBV_PORT_DOWN))
        return reply(EINVAL, nullptr, 0);
      engine_.set_port_state(req.state == IBV_PORT_ACTIVE);
      return reply(0, nullptr, 0);
    }
    case abi::CtlOp::kQueryPort: {
      abi::QueryPortReply rep{dev.info().port};
      return reply(0, &rep, sizeof(rep));
    }
    case abi::CtlOp::kAllocPd: {
      auto r = dev.alloc_pd(&owner_);
      abi::AllocPdReply rep{r.value};
      return reply(r.err, &rep, r.err ? 0 : sizeof(rep));
    }
    case abi::CtlOp::kDeallocPd: {
      abi::HandleRequest req;
      if (!body_as(len, body, &req) || req.handle > UINT32_MAX) return reply(EINVAL, nullptr, 0);
      return reply(dev.dealloc_pd(&owner_, uint32_t(req.handle)), nullptr, 0);
    }
    case abi::CtlOp::kRegMr: {
      abi::RegMrRequest req;
      if (!body_as(len, body, &req) || req.pd > UINT32_MAX) return reply(EINVAL, nullptr, 0);
      // The memfd of shared pages (if any): mapped by the device, closed after.
      auto r = dev.reg_mr(&owner_, req, fds.empty() ? -1 : fds[0]);
      abi::RegMrReply rep{r.value, r.value, r.value};
      return reply(r.err, &rep, r.err ? 0 : sizeof(rep));
    }
    case abi::CtlOp::kReregMr: {
      abi::ReregMrRequest req;
      if (!body_as(len, body, &req) || req.pd > UINT32_MAX) return reply(EINVAL, nullptr, 0);
      uint32_t key = 0;
      int err = dev.rereg_mr(&owner_, req, &key, fds.empty() ? -1 : fds[0]);
      abi::RegMrReply rep{key, key, key};
      return reply(err, &rep, err ? 0 : sizeof(rep));
    }
    case abi::CtlOp::kDeregMr: {
      abi::HandleRequest req;
      if (!body_as(len, body, &req) || req.handle > UINT32_MAX) return reply(EINVAL, nullptr, 0);
      return reply(dev.dereg_mr(&owner_, uint32_t(req.handle)), nullptr, 0);
    }
    case abi::CtlOp::kCreateCompChannel: {
      int fd = take_fd(fds, 0);
      if (fd < 0) return reply(EINVAL, nullptr, 0);
      fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
      auto r = dev.create_comp_channel(&owner_, fd);
      abi::CreateCompChannelReply rep{r.value};
      return reply(r.err, &rep, r.err ? 0 : sizeof(rep));
    }
    case abi::CtlOp::kDestroyCompChannel: {
      abi::HandleRequest req;
      if (!body_as(len, body, &req) || req.handle > UINT32_MAX) return reply(EINVAL, nullptr, 0);
      return reply(dev.destroy_comp_channel(&owner_, uint32_t(req.handle)), nullptr, 0);
    }
    case abi::CtlOp::kCreateCq: {
      abi::CreateCqRequest req;
      if (!body_as(len, body, &req) || req.channel > UINT32_MAX) return reply(EINVAL, nullptr, 0);
      auto r = dev.create_cq(&owner_, req);
      if (r.err) return reply(r.err, nullptr, 0);
      const device::Cq* cq = dev.cq(r.value);
      abi::CreateCqReply rep{r.value, cq->capacity, cq->ring.log2, cq->mem.size()};
      int fd = cq->mem.fd();
      return reply(0, &rep, sizeof(rep), &fd, 1);
    }
    case abi::CtlOp::kResizeCq: {
      abi::ResizeCqRequest req;
      if (!body_as(len, body, &req) || req.handle > UINT32_MAX) return reply(EINVAL, nullptr, 0);
      // Work posted before the resize completes first (bounded), so the
      // "fewer entries than waiting completions" check sees them.
      engine_.drain_device();
      int err = dev.resize_cq(&owner_, uint32_t(req.handle), req.cqe);
      if (err) return reply(err, nullptr, 0);
      const device::Cq* cq = dev.cq(uint32_t(req.handle));
      abi::ResizeCqReply rep{req.handle, cq->capacity, cq->ring.log2, cq->mem.size()};
      int fd = cq->mem.fd();
      return reply(0, &rep, sizeof(rep), &fd, 1);
    }
    case abi::CtlOp::kDestroyCq: {
      abi::HandleRequest req;
      if (!body_as(len, body, &req) || req.handle > UINT32_MAX) return reply(EINVAL, nullptr, 0);
      return reply(dev.destroy_cq(&owner_, uint32_t(req.handle)), nullptr, 0);
    }
    case abi::CtlOp::kCreateQp: {
      abi::CreateQpRequest req;
      if (!body_as(len, body, &req) || req.pd > UINT32_MAX || req.send_cq > UINT32_MAX ||
          req.recv_cq > UINT32_MAX || req.srq > UINT32_MAX || req.xrcd > UINT32_MAX)
        return reply(EINVAL, nullptr, 0);
      auto r = dev.create_qp(&owner_, req);
      if (r.err) return reply(r.err, nullptr, 0);
      const device::Qp* qp = dev.qp(r.value);
      abi::CreateQpReply rep{};
      rep.handle = r.value;
      rep.qpn = r.value;
      rep.caps = qp->caps;
      rep.sq_log2 = qp->sq.log2;
      rep.sq_stride = qp->sq.stride;
      rep.rq_log2 = qp->rq.log2;
      rep.rq_stride = qp->rq.stride;
      rep.sq_offset = 0;
      rep.rq_offset = uint64_t(reinterpret_cast<uint8_t*>(qp->rq.hdr) - qp->mem.base());
      rep.shm_size = qp->mem.size();
      int fd = qp->mem.fd();
      return reply(0, &rep, sizeof(rep), &fd, 1);
    }
    case abi::CtlOp::kCreateSrq: {
      abi::CreateSrqRequest req;
      if (!body_as(len, body, &req) || req.pd > UINT32_MAX || req.xrcd > UINT32_MAX ||
          req.cq > UINT32_MAX)
        return reply(EINVAL, nullptr, 0);
      auto r = dev.create_srq(&owner_, req);
      if (r.err) return reply(r.err, nullptr, 0);
      return reply_srq(r.value, true);
    }
    case abi::CtlOp::kModifySrq: {
      abi::ModifySrqRequest req;
      if (!body_as(len, body, &req) || req.handle > UINT32_MAX) return reply(EINVAL, nullptr, 0);
      const device::Srq* before = dev.srq(uint32_t(req.handle));
      const int old_fd = before ? before->mem.fd() : -1;
      int err = dev.modify_srq(&owner_, uint32_t(req.handle), req.attr_mask, req.max_wr, req.srq_limit);
      if (err) return reply(err, nullptr, 0);
      return reply_srq(uint32_t(req.handle), dev.srq(uint32_t(req.handle))->mem.fd() != old_fd);
    }
    case abi::CtlOp::kQuerySrq: {
      abi::HandleRequest req;
      if (!body_as(len, body, &req) || req.handle > UINT32_MAX) return reply(EINVAL, nullptr, 0);
      const device::Srq* s = dev.srq(uint32_t(req.handle));
      if (!s || s->owner != &owner_) return reply(EINVAL, nullptr, 0);
      abi::QuerySrqReply rep{s->max_wr, s->max_sge, s->limit, 0};
      return reply(0, &rep, sizeof(rep));
    }
    case abi::CtlOp::kDestroySrq: {
      abi::HandleRequest req;
      if (!body_as(len, body, &req) || req.handle > UINT32_MAX) return reply(EINVAL, nullptr, 0);
      return reply(dev.destroy_srq(&owner_, uint32_t(req.handle)), nullptr, 0);
    }
    case abi::CtlOp::kOpenXrcd: {
      abi::OpenXrcdRequest req;
      if (!body_as(len, body, &req)) return reply(EINVAL, nullptr, 0);
      int fd = req.has_fd ? take_fd(fds, 0) : -1;
      if (req.has_fd && fd < 0) return reply(EBADF, nullptr, 0);
      auto r = dev.open_xrcd(&owner_, fd, req.oflags);
      if (fd >= 0) close(fd);
      abi::OpenXrcdReply rep{r.value};
      return reply(r.err, &rep, r.err ? 0 : sizeof(rep));
    }
    case abi::CtlOp::kCloseXrcd: {
      abi::HandleRequest req;
      if (!body_as(len, body, &req) || req.handle > UINT32_MAX) return reply(EINVAL, nullptr, 0);
      return reply(dev.close_xrcd(&owner_, uint32_t(req.handle)), nullptr, 0);
    }
    case abi::CtlOp::kOpenQp: {
      abi::OpenQpRequest req;
      if (!body_as(len, body, &req) || req.xrcd > UINT32_MAX) return reply(EINVAL, nullptr, 0);
      if (req.qp_type != IBV_QPT_XRC_RECV) return reply(EINVAL, nullptr, 0);
      auto r = dev.open_qp(&owner_, uint32_t(req.xrcd), req.qpn, req.cookie);
      abi::OpenQpReply rep{r.value};
      return reply(r.err, &rep, r.err ? 0 : sizeof(rep));
    }
    case abi::CtlOp::kSetFault: {
      abi::SetFaultRequest req;
      if (!body_as(len, body, &req) || req.port > abi::kFaultPortWire) return reply(EINVAL, nullptr, 0);
      net::FaultConfig cfg;
      cfg.drop = req.drop;
      cfg.duplicate = req.duplicate;
      cfg.reorder = req.reorder;
      cfg.corrupt = req.corrupt;
      cfg.delay_us = req.delay_us;
      cfg.seed = req.seed;
      const device::PortId port =
          req.port == abi::kFaultPortLoopback || (req.port == abi::kFaultPortDefault && !dev.has_wire())
              ? device::PortId::kLoopback
              : device::PortId::kWire;
      const std::string err = dev.set_fault(port, cfg);
      if (!err.empty()) return reply(EINVAL, err.data(), err.size());
      return reply(0, nullptr, 0);
    }
    case abi::CtlOp::kCapture: {
      abi::CaptureRequest req;
      if (!body_as(len, body, &req)) return reply(EINVAL, nullptr, 0);
      req.path[abi::kMaxCapturePath - 1] = 0;
      if (req.action == abi::kCaptureStart) {
        const std::string err = dev.start_capture(req.path, req.max_frames);
        if (!err.empty()) return reply(EIO, err.data(), err.size());
      } else if (req.action == abi::kCaptureStop) {
        dev.stop_capture();
      } else if (req.action != abi::kCaptureStatus) {
        return reply(EINVAL, nullptr, 0);
      }
      abi::CaptureReply rep{dev.captured_frames(), dev.capturing() ? 1u : 0u, 0};
      return reply(0, &rep, sizeof(rep));
    }
    case abi::CtlOp::kModifyQp: {
      abi::ModifyQpRequest req;
      if (!body_as(len, body, &req) || req.handle > UINT32_MAX) return reply(EINVAL, nullptr, 0);
      return reply(dev.modify_qp(&owner_, uint32_t(req.handle), req.attr_mask, req.attr), nullptr, 0);
    }
    case abi::CtlOp::kQueryQp: {
      abi::HandleRequest req;
      if (!body_as(len, body, &req) || req.handle > UINT32_MAX) return reply(EINVAL, nullptr, 0);
      abi::QueryQpReply rep{};
      int err = dev.query_qp(&owner_, uint32_t(req.handle), &rep.attr);
      return reply(err, &rep, err ? 0 : sizeof(rep));
    }
    case abi::CtlOp::kDestroyQp: {
      abi::HandleRequest req;  // a QPN, or id << 32 | QPN for an opened QP
      if (!body_as(len, body, &req)) return reply(EINVAL, nullptr, 0);
      return reply(dev.destroy_qp(&owner_, req.handle), nullptr, 0);
    }
    case abi::CtlOp::kStatus: {
      std::string text = engine_.status_text();
      if (text.size() > abi::kMaxCtlMsg - sizeof(abi::CtlReplyHeader))
        text.resize(abi::kMaxCtlMsg - sizeof(abi::CtlReplyHeader));
      return reply(0, text.data(), text.size());
    }
    case abi::CtlOp::kStats: {
      std::string text = dev.stats_text();
      if (text.size() > abi::kMaxCtlMsg - sizeof(abi::CtlReplyHeader))
        text.resize(abi::kMaxCtlMsg - sizeof(abi::CtlReplyHeader));
      return reply(0, text.data(), text.size());
    }
    default:
      return reply(EOPNOTSUPP, nullptr, 0);
  }
}

}  // namespace uroce::emulator
