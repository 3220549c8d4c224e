// The control socket's checks (emulator/methods.cc): request size and fd
// count are checked for every operation before its handler, and object
// handles name only live objects of the calling ibv_context.
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>

#include "tests/integration/verbs_fixture.h"
#include "uroce/abi.h"

namespace vt {
namespace {

namespace abi = uroce::abi;

// A raw control connection to the engine, as the provider opens one.
class RawControl {
 public:
  RawControl() {
    const char* dir = std::getenv("UROCE_RUNTIME_DIR");
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s/%s.sock", dir ? dir : "", kDeviceName);
    fd_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd_ >= 0 && connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      close(fd_);
      fd_ = -1;
    }
  }
  ~RawControl() {
    if (fd_ >= 0) close(fd_);
  }
  bool ok() const { return fd_ >= 0; }
  // Sends op with body and fds; returns the reply status (-1: no reply).
  int call(uint32_t op, const void* body, size_t len, const int* fds = nullptr, size_t nfds = 0) {
    uint8_t buf[abi::kMaxCtlMsg];
    const abi::CtlRequestHeader hdr{op, uint32_t(len)};
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
    if (sendmsg(fd_, &msg, MSG_NOSIGNAL) < 0) return -1;
    iovec riov{buf, sizeof(buf)};
    msghdr rmsg{};
    rmsg.msg_iov = &riov;
    rmsg.msg_iovlen = 1;
    rmsg.msg_control = cbuf;
    rmsg.msg_controllen = sizeof(cbuf);
    const ssize_t n = recvmsg(fd_, &rmsg, MSG_CMSG_CLOEXEC);
    if (n < ssize_t(sizeof(abi::CtlReplyHeader))) return -1;
    for (cmsghdr* c = CMSG_FIRSTHDR(&rmsg); c; c = CMSG_NXTHDR(&rmsg, c))
      for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        close(fd);
      }
    abi::CtlReplyHeader rep;
    std::memcpy(&rep, buf, sizeof(rep));
    last_body_.assign(buf + sizeof(rep), buf + n);
    return rep.status;
  }
  template <typename T>
  T body() const {
    T t{};
    std::memcpy(&t, last_body_.data(), std::min(sizeof(T), last_body_.size()));
    return t;
  }

 private:
  int fd_ = -1;
  std::vector<uint8_t> last_body_;
};

uint32_t op(abi::CtlOp o) { return uint32_t(o); }

// A pipe whose write end goes to the engine: once every copy of that end is
// closed, the read end sees EOF.
struct Pipe {
  int r = -1, w = -1;
  Pipe() {
    int p[2];
    if (pipe2(p, O_CLOEXEC) == 0) r = p[0], w = p[1];
  }
  ~Pipe() {
    if (r >= 0) close(r);
    if (w >= 0) close(w);
  }
  void close_write() {
    close(w);
    w = -1;
  }
  // True once the engine closed its copy too (EOF within a second).
  bool write_end_gone() const {
    pollfd p{r, POLLIN, 0};  // EOF shows as POLLHUP
    if (poll(&p, 1, 1000) != 1) return false;
    char c;
    return read(r, &c, 1) == 0;
  }
};

TEST(ControlMessages, WrongSizeOrFdCountIsEinvalAndTheFdsAreClosed) {
  RawControl ctl;
  ASSERT_TRUE(ctl.ok()) << "no engine socket in $UROCE_RUNTIME_DIR";
  // A request body one byte short and one byte long.
  abi::HandleRequest h{1};
  EXPECT_EQ(ctl.call(op(abi::CtlOp::kDeallocPd), &h, sizeof(h) - 1), EINVAL);
  uint8_t longer[sizeof(h) + 1] = {};
  EXPECT_EQ(ctl.call(op(abi::CtlOp::kDeallocPd), longer, sizeof(longer)), EINVAL);
  EXPECT_EQ(ctl.call(op(abi::CtlOp::kAllocPd), longer, 1), EINVAL);
  // An fd an operation does not take: refused, and the engine keeps no copy.
  {
    Pipe p;
    EXPECT_EQ(ctl.call(op(abi::CtlOp::kAllocPd), nullptr, 0, &p.w, 1), EINVAL);
    p.close_write();
    EXPECT_TRUE(p.write_end_gone());
  }
  // Too few fds (Hello takes the async pipe) and too many (two for a memfd slot).
  abi::HelloRequest hello{abi::kMagic, abi::kVersion};
  EXPECT_EQ(ctl.call(op(abi::CtlOp::kHello), &hello, sizeof(hello)), EINVAL);
  {
    Pipe p, q;
    abi::RegMrRequest reg{};
    const int two[2] = {p.w, q.w};
    EXPECT_EQ(ctl.call(op(abi::CtlOp::kRegMr), &reg, sizeof(reg), two, 2), EINVAL);
    p.close_write();
    q.close_write();
    EXPECT_TRUE(p.write_end_gone());
    EXPECT_TRUE(q.write_end_gone());
  }
  // Operations the engine does not know.
  EXPECT_EQ(ctl.call(0, nullptr, 0), EOPNOTSUPP);
  EXPECT_EQ(ctl.call(op(abi::CtlOp::kCount), nullptr, 0), EOPNOTSUPP);
  // The connection still works: a valid request succeeds.
  {
    Pipe p;
    EXPECT_EQ(ctl.call(op(abi::CtlOp::kHello), &hello, sizeof(hello), &p.w, 1), 0);
  }
  EXPECT_EQ(ctl.call(op(abi::CtlOp::kAllocPd), nullptr, 0), 0);
}

}  // namespace
}  // namespace vt
