// The control socket's checks (emulator/methods.cc): request size and fd
// count are checked for every operation before its handler, and object
// handles name only live objects of the calling ibv_context.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <functional>
#include <thread>

#include "tests/integration/control_wire.h"
#include "tests/integration/verbs_fixture.h"
#include "uroce/abi.h"

namespace vt {
namespace {

namespace abi = uroce::abi;

// A raw control connection to the engine, as the provider opens one,
// speaking the protocol through tests/integration/control_wire.h.
class RawControl {
 public:
  RawControl() : fd_(uroce::test::connect_engine(kDeviceName)) {}
  ~RawControl() {
    if (fd_ >= 0) close(fd_);
  }
  bool ok() const { return fd_ >= 0; }
  // Sends op with body and fds; returns the reply status (-1: no reply
  // within a bound generous for a loaded machine).
  int call(uint32_t op, const void* body, size_t len, const int* fds = nullptr, size_t nfds = 0) {
    constexpr int kReplyMs = 30000;
    if (!uroce::test::send_request(fd_, abi::CtlOp(op), body, len, std::vector<int>(fds, fds + nfds)))
      return -1;
    uroce::test::Reply r;
    if (!uroce::test::read_reply(fd_, kReplyMs, &r)) return -1;
    for (int fd : r.fds) close(fd);
    last_body_ = std::move(r.body);
    return r.status;
  }
  // Sends a request and does not wait for its reply: false once the
  // socket takes no more (full, or the engine hung up).
  bool send_only(uint32_t op) {
    return uroce::test::send_request(fd_, abi::CtlOp(op), nullptr, 0, {}, MSG_DONTWAIT);
  }
  // Raw bytes as one message (no header of ours).
  bool send_raw(const void* bytes, size_t len) { return send(fd_, bytes, len, MSG_NOSIGNAL) == ssize_t(len); }
  // True once the engine hung up: the replies still queued are read and
  // dropped, then EOF within `ms`.
  bool hung_up(int ms) const {
    const auto end = deadline_after(ms / 1000.0);
    uint8_t buf[abi::kMaxCtlMsg];
    while (Clock::now() < end) {
      pollfd p{fd_, POLLIN, 100};
      if (poll(&p, 1, 100) != 1) continue;
      const ssize_t n = recv(fd_, buf, sizeof(buf), MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
    }
    return false;
  }
  std::string body_text() const { return std::string(last_body_.begin(), last_body_.end()); }
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

// The engine's counter NAME from `uroce stats` (its text reply), -1 if absent.
long engine_counter(const char* name) {
  RawControl ctl;
  if (!ctl.ok() || ctl.call(op(abi::CtlOp::kStats), nullptr, 0) != 0) return -1;
  const std::string text = ctl.body_text();
  const std::string key = std::string("  ") + name + " ";
  const size_t at = text.find(key);
  return at == std::string::npos ? -1 : std::atol(text.c_str() + at + key.size());
}

// A client that has said hello (its async pipe is the engine's) and made a
// PD: once the engine hangs up on it, the pipe's write end is closed with
// the session, which reclaims its objects.
struct Client {
  RawControl ctl;
  Pipe async;
  bool ready = false;
  Client() {
    abi::HelloRequest hello{abi::kMagic, abi::kVersion};
    ready = ctl.ok() && ctl.call(op(abi::CtlOp::kHello), &hello, sizeof(hello), &async.w, 1) == 0 &&
            ctl.call(op(abi::CtlOp::kAllocPd), nullptr, 0) == 0;
    async.close_write();
  }
};

// Junk on the control socket (issue 14): every message a provider never
// sends (cut short, a header whose length is not the message's, an unknown
// operation, a body of the wrong size, the wrong number or kind of fds) gets its
// errno as the reply, then the engine hangs up: the session ends, its
// objects are reclaimed, its fds are closed, and `uroce stats` counts it.
TEST(ControlMessages, JunkGetsItsErrnoThenTheClientIsDisconnected) {
  const long junk_before = engine_counter("clients_junk");
  ASSERT_GE(junk_before, 0) << "no clients_junk counter in uroce stats";
  Client bystander;
  ASSERT_TRUE(bystander.ready);

  struct Junk {
    const char* what;
    std::function<int(RawControl&, Pipe&)> send;
    int status;  // the reply's errno; -1: no reply expected
  };
  abi::HandleRequest h{1};
  uint8_t longer[sizeof(h) + 1] = {};
  abi::HelloRequest hello{abi::kMagic, abi::kVersion};
  const std::vector<Junk> cases = {
      {"body one byte short", [&](RawControl& c, Pipe&) { return c.call(op(abi::CtlOp::kDeallocPd), &h, sizeof(h) - 1); }, EINVAL},
      {"body one byte long", [&](RawControl& c, Pipe&) { return c.call(op(abi::CtlOp::kDeallocPd), longer, sizeof(longer)); }, EINVAL},
      {"a body where none goes", [&](RawControl& c, Pipe&) { return c.call(op(abi::CtlOp::kAllocPd), longer, 1); }, EINVAL},
      {"an fd the operation does not take", [&](RawControl& c, Pipe& p) { return c.call(op(abi::CtlOp::kAllocPd), nullptr, 0, &p.w, 1); }, EINVAL},
      {"too few fds", [&](RawControl& c, Pipe&) { return c.call(op(abi::CtlOp::kHello), &hello, sizeof(hello)); }, EINVAL},
      {"too many fds",
       [&](RawControl& c, Pipe& p) {
         abi::RegMrRequest reg{};
         const int two[2] = {p.w, p.w};
         return c.call(op(abi::CtlOp::kRegMr), &reg, sizeof(reg), two, 2);
       },
       EINVAL},
      {"a pipe where a memfd goes",
       [&](RawControl& c, Pipe& p) {
         abi::RegMrRequest reg{};
         return c.call(op(abi::CtlOp::kRegMr), &reg, sizeof(reg), &p.w, 1);
       },
       EINVAL},
      {"a socket where a completion channel's pipe goes",
       [&](RawControl& c, Pipe& p) {
         int sv[2];
         if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return -2;
         const int st = c.call(op(abi::CtlOp::kCreateCompChannel), nullptr, 0, &sv[0], 1);
         close(sv[0]);
         close(sv[1]);
         (void)p;
         return st;
       },
       EINVAL},
      {"operation 0", [&](RawControl& c, Pipe&) { return c.call(0, nullptr, 0); }, EOPNOTSUPP},
      {"an operation past the last", [&](RawControl& c, Pipe&) { return c.call(op(abi::CtlOp::kCount), nullptr, 0); }, EOPNOTSUPP},
      {"shorter than a header", [&](RawControl& c, Pipe&) { return c.send_raw("abc", 3) ? 0 : -2; }, -1},
      {"a header whose length is not the message's",
       [&](RawControl& c, Pipe&) {
         const abi::CtlRequestHeader hdr{op(abi::CtlOp::kAllocPd), 100};
         return c.send_raw(&hdr, sizeof(hdr)) ? 0 : -2;
       },
       -1},
  };
  for (const Junk& j : cases) {
    SCOPED_TRACE(j.what);
    Client c;
    ASSERT_TRUE(c.ready);
    Pipe passed;  // an fd the junk may carry: the engine must not keep it
    const int status = j.send(c.ctl, passed);
    if (j.status >= 0) EXPECT_EQ(status, j.status);
    else EXPECT_EQ(status, 0) << "could not send";
    EXPECT_TRUE(c.ctl.hung_up(2000)) << "the engine kept talking to a client that sent junk";
    EXPECT_TRUE(c.async.write_end_gone()) << "the session (and its objects) outlived the hang-up";
    passed.close_write();
    EXPECT_TRUE(passed.write_end_gone()) << "the engine kept an fd that came with junk";
  }
  EXPECT_EQ(engine_counter("clients_junk"), junk_before + long(cases.size()));
  // The other client noticed nothing.
  EXPECT_EQ(bystander.ctl.call(op(abi::CtlOp::kAllocPd), nullptr, 0), 0);
  EXPECT_FALSE(bystander.async.write_end_gone());
}

// A flood: requests sent without reading a reply. A provider reads each
// reply before its next request, so once a reply no longer fits in the
// client's socket the engine hangs up (counted as clients_flooding); other
// clients are served meanwhile.
TEST(ControlMessages, AFloodOfRequestsWithoutReadingIsDisconnected) {
  const long before = engine_counter("clients_flooding");
  ASSERT_GE(before, 0) << "no clients_flooding counter in uroce stats";
  Client bystander, flooder;
  ASSERT_TRUE(bystander.ready && flooder.ready);
  size_t sent = 0;
  const auto end = deadline_after(10);
  while (Clock::now() < end && sent < 1000000) {
    if (flooder.ctl.send_only(op(abi::CtlOp::kQueryDevice))) {
      ++sent;
      continue;
    }
    if (errno != EAGAIN) break;  // the engine hung up
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (sent % 64 == 0) {
      EXPECT_EQ(bystander.ctl.call(op(abi::CtlOp::kQueryPort), nullptr, 0), 0);
    }
  }
  EXPECT_TRUE(flooder.ctl.hung_up(3000)) << "still connected after " << sent << " unread requests";
  EXPECT_TRUE(flooder.async.write_end_gone());
  EXPECT_EQ(engine_counter("clients_flooding"), before + 1);
  EXPECT_EQ(bystander.ctl.call(op(abi::CtlOp::kAllocPd), nullptr, 0), 0);
}

// ---- object handles (issue 9) ----------------------------------------------
//
// A corrupted `handle` field names no object of this context: destroying the
// object fails with the kernel's errno (ENOENT: uobj_perform_destroy and the
// ioctl methods' lookup; EINVAL where a write() command says so) and leaves
// the object usable once the handle is restored.

// Far from any handle the engine has given out (they count up from 1).
constexpr uint32_t kCorrupt = 0x5a000000;

class Handles : public VerbsTest {
 protected:
  ibv_qp* raw_qp(ibv_pd* pd, ibv_cq* cq, ibv_srq* srq = nullptr, ibv_qp_type type = IBV_QPT_RC) {
    ibv_qp_init_attr init{};
    init.send_cq = init.recv_cq = cq;
    init.srq = srq;
    init.qp_type = type;
    init.cap = {4, srq ? 0u : 4u, 1, 1, 0};
    return ibv_create_qp(pd, &init);
  }
  // One SEND of 64 bytes from a to b over RC; true if both sides complete.
  void expect_send_works(ibv_qp* a, ibv_cq* acq, ibv_qp* b, ibv_cq* bcq, ibv_mr* mr) {
    ASSERT_EQ(post_recv_mr(b, 1, mr, 0, 64), 0);
    ibv_sge sge = sge_of(mr, 64, 64);
    ASSERT_EQ(post_send(a, 2, IBV_WR_SEND, &sge, 1), 0);
    ibv_wc wc;
    VT_POLL_ONE(acq, &wc);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
    VT_POLL_ONE(bcq, &wc);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  }
};

TEST_F(Handles, CorruptPdHandle) {
  ibv_pd* pd = ibv_alloc_pd(ctx_);
  ASSERT_NE(pd, nullptr);
  ibv_cq* cq = make_cq();
  ASSERT_NE(cq, nullptr);
  uint8_t* buf = buffer(4096);
  const uint32_t saved = pd->handle;
  pd->handle = saved ^ kCorrupt;
  EXPECT_EQ(ibv_dealloc_pd(pd), ENOENT);
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(errno, EINVAL);  // ib_uverbs_reg_mr
  errno = 0;
  EXPECT_EQ(raw_qp(pd, cq), nullptr);
  EXPECT_EQ(errno, ENOENT);  // UVERBS_METHOD_QP_CREATE
  ibv_srq_init_attr sattr{};
  sattr.attr = {4, 1, 0};
  errno = 0;
  EXPECT_EQ(ibv_create_srq(pd, &sattr), nullptr);
  EXPECT_EQ(errno, ENOENT);  // UVERBS_METHOD_SRQ_CREATE
  ibv_ah_attr av = loopback_av();
  errno = 0;
  EXPECT_EQ(ibv_create_ah(pd, &av), nullptr);
  EXPECT_EQ(errno, EINVAL);  // ib_uverbs_create_ah
  // A live handle of another type is EINVAL (rdma_lookup_get_uobject).
  pd->handle = cq->handle;
  EXPECT_EQ(ibv_dealloc_pd(pd), EINVAL);

  pd->handle = saved;
  ibv_mr* mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(ibv_dealloc_pd(pd), EBUSY);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
}

TEST_F(Handles, CorruptMrHandle) {
  Pair p = make_pair();
  ASSERT_NE(p.b.qp, nullptr);
  ibv_mr* mr = reg_buffer(4096, kRw);
  ASSERT_NE(mr, nullptr);
  const uint32_t saved = mr->handle;
  mr->handle = saved ^ kCorrupt;
  EXPECT_EQ(ibv_dereg_mr(mr), ENOENT);
  errno = 0;
  EXPECT_EQ(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0, IBV_ACCESS_LOCAL_WRITE),
            IBV_REREG_MR_ERR_CMD);
  EXPECT_EQ(errno, ENOENT);  // ib_uverbs_rereg_mr: uobj_get_write
  mr->handle = saved;
  expect_send_works(p.a.qp, p.a.cq, p.b.qp, p.b.cq, mr);
}

TEST_F(Handles, CorruptCqHandle) {
  ibv_cq* cq = make_cq();
  ibv_cq* other = make_cq();
  ASSERT_NE(other, nullptr);
  const uint32_t saved = cq->handle;
  cq->handle = saved ^ kCorrupt;
  EXPECT_EQ(ibv_destroy_cq(cq), ENOENT);
  EXPECT_EQ(ibv_resize_cq(cq, 512), EINVAL);  // ib_uverbs_resize_cq
  errno = 0;
  EXPECT_EQ(raw_qp(pd_, cq), nullptr);
  EXPECT_EQ(errno, ENOENT);
  cq->handle = saved;
  ibv_qp* a = make_qp(IBV_QPT_RC, cq, cq);
  ibv_qp* b = make_qp(IBV_QPT_RC, other, other);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  connect_qp(a, b->qp_num);
  connect_qp(b, a->qp_num);
  ibv_mr* mr = reg_buffer(4096, kRw);
  expect_send_works(a, cq, b, other, mr);
}

TEST_F(Handles, CorruptQpHandle) {
  Pair p = make_pair();
  ASSERT_NE(p.b.qp, nullptr);
  const uint32_t saved = p.a.qp->handle;
  p.a.qp->handle = saved ^ kCorrupt;
  EXPECT_EQ(ibv_destroy_qp(p.a.qp), ENOENT);
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  EXPECT_EQ(ibv_query_qp(p.a.qp, &attr, IBV_QP_STATE, &init), EINVAL);  // ib_uverbs_query_qp
  attr.qp_state = IBV_QPS_ERR;
  EXPECT_EQ(ibv_modify_qp(p.a.qp, &attr, IBV_QP_STATE), EINVAL);  // ib_uverbs_modify_qp
  p.a.qp->handle = saved;
  EXPECT_EQ(qp_state(p.a.qp), IBV_QPS_RTS);
  ibv_mr* mr = reg_buffer(4096, kRw);
  expect_send_works(p.a.qp, p.a.cq, p.b.qp, p.b.cq, mr);
}

TEST_F(Handles, CorruptSrqHandle) {
  ibv_srq_init_attr sattr{};
  sattr.attr = {8, 1, 0};
  ibv_srq* srq = ibv_create_srq(pd_, &sattr);
  ASSERT_NE(srq, nullptr);
  defer([srq] { EXPECT_EQ(ibv_destroy_srq(srq), 0); });
  ibv_cq* cq = make_cq();
  const uint32_t saved = srq->handle;
  srq->handle = saved ^ kCorrupt;
  EXPECT_EQ(ibv_destroy_srq(srq), ENOENT);
  ibv_srq_attr attr{};
  EXPECT_EQ(ibv_query_srq(srq, &attr), EINVAL);  // ib_uverbs_query_srq
  attr.srq_limit = 2;
  EXPECT_EQ(ibv_modify_srq(srq, &attr, IBV_SRQ_LIMIT), EINVAL);  // ib_uverbs_modify_srq
  errno = 0;
  EXPECT_EQ(raw_qp(pd_, cq, srq), nullptr);
  EXPECT_EQ(errno, ENOENT);
  srq->handle = saved;
  EXPECT_EQ(ibv_query_srq(srq, &attr), 0);
  EXPECT_EQ(attr.srq_limit, 0u);
  ibv_qp* qp = raw_qp(pd_, cq, srq);
  ASSERT_NE(qp, nullptr) << std::strerror(errno);
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
}

TEST_F(Handles, CorruptAhHandle) {
  Pair p = make_pair(IBV_QPT_UD);
  ASSERT_NE(p.b.qp, nullptr);
  ibv_ah_attr av = loopback_av();
  ibv_ah* ah = make_ah(&av);
  ASSERT_NE(ah, nullptr);
  const uint32_t saved = ah->handle;
  ah->handle = saved ^ kCorrupt;
  EXPECT_EQ(ibv_destroy_ah(ah), ENOENT);
  ah->handle = saved;
  ibv_mr* mr = reg_buffer(4096, kRw);
  ASSERT_EQ(post_recv_mr(p.b.qp, 1, mr, 0, 40 + 64), 0);
  ibv_sge sge = sge_of(mr, 2048, 64);
  ASSERT_EQ(post_ud(p.a.qp, 2, &sge, ah, p.b.qp->qp_num, ConnectOpts{}.qkey), 0);
  ibv_wc wc;
  VT_POLL_ONE(p.a.cq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  VT_POLL_ONE(p.b.cq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
}

TEST_F(Handles, StaleHandleIsNotReused) {
  ibv_pd* pd = ibv_alloc_pd(ctx_);
  ASSERT_NE(pd, nullptr);
  const uint32_t stale = pd->handle;
  ASSERT_EQ(ibv_dealloc_pd(pd), 0);
  ibv_pd* fresh = ibv_alloc_pd(ctx_);  // may reuse the engine's slot, never the handle
  ASSERT_NE(fresh, nullptr);
  EXPECT_NE(fresh->handle, stale);
  const uint32_t saved = fresh->handle;
  fresh->handle = stale;
  EXPECT_EQ(ibv_dealloc_pd(fresh), ENOENT);
  fresh->handle = saved;
  EXPECT_EQ(ibv_dealloc_pd(fresh), 0);
}

// Objects of a second ibv_context (another connection to the engine, as a
// second process would have) name nothing in the first.
TEST_F(Handles, ObjectsOfAnotherContextFail) {
  ibv_context* ctx2 = ibv_open_device(ctx_->device);
  ASSERT_NE(ctx2, nullptr);
  defer([ctx2] { EXPECT_EQ(ibv_close_device(ctx2), 0); });
  ibv_pd* pd2 = ibv_alloc_pd(ctx2);
  ibv_cq* cq2 = ibv_create_cq(ctx2, 16, nullptr, nullptr, 0);
  ibv_comp_channel* ch2 = ibv_create_comp_channel(ctx2);
  ibv_srq_init_attr sattr{};
  sattr.attr = {8, 1, 0};
  ibv_srq* srq2 = ibv_create_srq(pd2, &sattr);
  ASSERT_TRUE(pd2 && cq2 && ch2 && srq2);
  ibv_qp* qp2 = raw_qp(pd2, cq2);
  ASSERT_NE(qp2, nullptr);
  ibv_cq* cq = make_cq();

  // ctx2's objects in requests on the first context.
  errno = 0;
  EXPECT_EQ(raw_qp(pd_, cq2), nullptr);
  EXPECT_EQ(errno, ENOENT);
  errno = 0;
  EXPECT_EQ(raw_qp(pd2, cq), nullptr);  // sent on ctx2: cq is the stranger there
  EXPECT_EQ(errno, ENOENT);
  errno = 0;
  EXPECT_EQ(raw_qp(pd_, cq, srq2), nullptr);
  EXPECT_EQ(errno, ENOENT);
  errno = 0;
  EXPECT_EQ(ibv_create_cq(ctx_, 16, nullptr, ch2, 0), nullptr);
  EXPECT_EQ(errno, EBADF);  // a channel is a file of its context
  uint8_t* buf = buffer(4096);
  ibv_pd* real = pd_;
  // Destroying ctx2's objects through the first context.
  auto through_first = [&](auto* obj, auto destroy) {
    ibv_context* own = obj->context;
    obj->context = ctx_;
    EXPECT_EQ(destroy(obj), ENOENT);
    obj->context = own;
  };
  through_first(qp2, ibv_destroy_qp);
  through_first(srq2, ibv_destroy_srq);
  through_first(cq2, ibv_destroy_cq);
  through_first(pd2, ibv_dealloc_pd);
  EXPECT_EQ(pd_, real);
  // All of them still work in their own context.
  ibv_mr* mr2 = ibv_reg_mr(pd2, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr2, nullptr);
  EXPECT_EQ(ibv_dereg_mr(mr2), 0);
  EXPECT_EQ(ibv_destroy_qp(qp2), 0);
  EXPECT_EQ(ibv_destroy_srq(srq2), 0);
  EXPECT_EQ(ibv_destroy_cq(cq2), 0);
  EXPECT_EQ(ibv_destroy_comp_channel(ch2), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd2), 0);
}

}  // namespace
}  // namespace vt
