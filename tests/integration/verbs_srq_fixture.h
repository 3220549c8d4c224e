// Shared fixture and helpers of the SRQ and XRC verbs tests (verbs_srq.cc,
// verbs_xrc.cc, verbs_xrc_share.cc). Rules: the man pages ibv_create_srq(3),
// ibv_modify_srq(3), ibv_open_xrcd(3) and ibv_modify_qp(3), rdma-core's
// libibverbs/cmd_srq.c and cmd.c, the kernel's drivers/infiniband/core/verbs.c
// and uverbs_cmd.c. The XRC domain sharing tests start a second process
// (this binary, `--xrc-child`) that opens the same file's domain.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <set>
#include <tuple>
#include <utility>

#include "tests/integration/verbs_fixture.h"

namespace vt::srq_test {


constexpr int kSrqAttrMaskAll = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
                                IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;

// ---------------------------------------------------------------------------
// Asynchronous events
// ---------------------------------------------------------------------------

struct AsyncEv {
  ibv_event_type type;
  void* element;  // the qp, srq or cq the event names (nullptr for port events)
};

inline std::string describe_events(const std::vector<AsyncEv>& evs) {
  std::string s = "[";
  for (const AsyncEv& e : evs) {
    if (s.size() > 1) s += ", ";
    s += ibv_event_type_str(e.type);
  }
  return s + "]";
}

// Reads one async event if one arrives within ms (and acks it).
inline bool read_async(ibv_context* ctx, int ms, AsyncEv* out) {
  if (!fd_readable(ctx->async_fd, ms)) return false;
  ibv_async_event ev{};
  if (ibv_get_async_event(ctx, &ev) != 0) return false;
  out->type = ev.event_type;
  switch (ev.event_type) {
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_SRQ_LIMIT_REACHED: out->element = ev.element.srq; break;
    case IBV_EVENT_CQ_ERR: out->element = ev.element.cq; break;
    case IBV_EVENT_PORT_ACTIVE:
    case IBV_EVENT_PORT_ERR:
    case IBV_EVENT_DEVICE_FATAL: out->element = nullptr; break;
    default: out->element = ev.element.qp; break;
  }
  ibv_ack_async_event(&ev);
  return true;
}

// Every event that arrives within ms.
inline std::vector<AsyncEv> async_events(ibv_context* ctx, int ms) {
  std::vector<AsyncEv> out;
  const auto end = deadline_after(ms / 1000.0);
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count();
    AsyncEv e;
    if (left <= 0 || !read_async(ctx, int(left), &e)) break;
    out.push_back(e);
  }
  return out;
}

// Events until one of type `want` arrived (or kWaitSeconds passed), then
// whatever else arrives within `grace_ms` (to catch a duplicate).
inline std::vector<AsyncEv> events_until(ibv_context* ctx, ibv_event_type want, int grace_ms = 200) {
  std::vector<AsyncEv> out;
  const auto end = deadline_after(kWaitSeconds);
  bool seen = false;
  while (!seen && Clock::now() < end) {
    AsyncEv e;
    if (!read_async(ctx, 50, &e)) continue;
    out.push_back(e);
    seen = e.type == want;
  }
  std::vector<AsyncEv> more = async_events(ctx, grace_ms);
  out.insert(out.end(), more.begin(), more.end());
  return out;
}

inline size_t count_events(const std::vector<AsyncEv>& evs, ibv_event_type type, const void* element) {
  return size_t(std::count_if(evs.begin(), evs.end(), [&](const AsyncEv& e) {
    return e.type == type && e.element == element;
  }));
}

inline bool cq_empty(ibv_cq* cq) {
  ibv_wc wc;
  return ibv_poll_cq(cq, 1, &wc) == 0;
}

// ---------------------------------------------------------------------------
// Data patterns
// ---------------------------------------------------------------------------

inline uint8_t pattern(uint32_t seed, size_t i) { return uint8_t(seed * 131 + i * 7 + (i >> 8)); }

inline void fill(void* p, size_t len, uint32_t seed) {
  auto* b = static_cast<uint8_t*>(p);
  for (size_t i = 0; i < len; ++i) b[i] = pattern(seed, i);
}

// Index of the first byte that differs from the pattern, or -1.
inline long mismatch(const void* p, size_t len, uint32_t seed) {
  const auto* b = static_cast<const uint8_t*>(p);
  for (size_t i = 0; i < len; ++i)
    if (b[i] != pattern(seed, i)) return long(i);
  return -1;
}

// ---------------------------------------------------------------------------
// XRC connection (the masks of the kernel's qp_state_table, core/verbs.c)
// ---------------------------------------------------------------------------

inline ibv_ah_attr av_to(const ibv_gid& gid) {
  ibv_ah_attr av{};
  av.is_global = 1;
  av.grh.dgid = gid;
  av.grh.sgid_index = 0;
  av.grh.hop_limit = 1;
  av.port_num = 1;
  return av;
}

// RESET -> INIT -> RTR -> RTS of an XRC_SEND (initiator) or XRC_RECV
// (target) QP connected to remote_qpn. Returns the first failing verb's error.
inline int connect_xrc(ibv_qp* qp, const ibv_gid& gid, uint32_t remote_qpn, uint32_t sq_psn = 0,
                uint32_t rq_psn = 0) {
  const bool target = qp->qp_type == IBV_QPT_XRC_RECV;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = 1;
  a.qp_access_flags = target ? kRw | IBV_ACCESS_REMOTE_ATOMIC : 0;
  if (int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                         IBV_QP_ACCESS_FLAGS))
    return rc;
  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = remote_qpn;
  a.rq_psn = rq_psn;
  a.ah_attr = av_to(gid);
  int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
  if (target) {
    a.max_dest_rd_atomic = 4;
    a.min_rnr_timer = 12;
    mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  }
  if (int rc = ibv_modify_qp(qp, &a, mask)) return rc;
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.sq_psn = sq_psn;
  mask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN;
  if (!target) {
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 4;
    mask |= IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
  }
  return ibv_modify_qp(qp, &a, mask);
}

// A legacy ibv_post_send on an XRC_SEND QP naming the remote SRQ.
inline int post_xrc(ibv_qp* ini, uint64_t wr_id, ibv_wr_opcode op, ibv_sge* sge, int num_sge,
             uint32_t remote_srqn, uint32_t imm = 0, uint64_t remote_addr = 0, uint32_t rkey = 0) {
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.opcode = op;
  wr.sg_list = sge;
  wr.num_sge = num_sge;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.imm_data = imm;
  wr.wr.rdma.remote_addr = remote_addr;
  wr.wr.rdma.rkey = rkey;
  wr.qp_type.xrc.remote_srqn = remote_srqn;
  ibv_send_wr* bad = nullptr;
  return ibv_post_send(ini, &wr, &bad);
}

inline int post_srq_one(ibv_srq* srq, uint64_t wr_id, ibv_sge* sge, int num_sge) {
  ibv_recv_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = sge;
  wr.num_sge = num_sge;
  ibv_recv_wr* bad = nullptr;
  return ibv_post_srq_recv(srq, &wr, &bad);
}

// ---------------------------------------------------------------------------
// Fixture
// ---------------------------------------------------------------------------

// A sender QP connected to a receiver QP that takes its receives from an SRQ.
struct SrqConn {
  ibv_qp* snd = nullptr;
  ibv_cq* scq = nullptr;
  ibv_qp* rcv = nullptr;
  ibv_cq* rcq = nullptr;  // the receiver's send and recv CQ
};

class SrqTest : public VerbsTest {
 protected:
  void TearDown() override {
    // SRQ users first, then SRQs, then domains; the base class then destroys
    // its own objects (CQs, MRs, plain QPs), the PD and the context.
    for (auto it = own_.rbegin(); it != own_.rend(); ++it) {
      const int rc = it->destroy();
      EXPECT_EQ(rc, 0) << "destroying " << it->what << ": " << std::strerror(rc);
    }
    own_.clear();
    for (const std::string& f : files_) unlink(f.c_str());
    VerbsTest::TearDown();
  }

  void own(void* object, const char* what, std::function<int()> destroy) {
    own_.push_back({object, what, std::move(destroy)});
  }
  // Releases an object early: the test destroys it itself.
  void disown(void* object) {
    for (auto it = own_.begin(); it != own_.end(); ++it)
      if (it->object == object) {
        own_.erase(it);
        return;
      }
  }

  ibv_device_attr device_attr() {
    ibv_device_attr d{};
    EXPECT_EQ(ibv_query_device(ctx_, &d), 0);
    return d;
  }

  ibv_srq* make_srq(uint32_t max_wr, uint32_t max_sge = 1, ibv_pd* pd = nullptr,
                    ibv_srq_init_attr* io = nullptr) {
    ibv_srq_init_attr init{};
    init.srq_context = this;
    init.attr.max_wr = max_wr;
    init.attr.max_sge = max_sge;
    ibv_srq_init_attr& a = io ? *io : init;
    a = init;
    ibv_srq* srq = ibv_create_srq(pd ? pd : pd_, &a);
    if (srq) own(srq, "srq", [srq] { return ibv_destroy_srq(srq); });
    return srq;
  }

  ibv_srq* make_srq_ex(ibv_srq_init_attr_ex* attr) {
    ibv_srq* srq = ibv_create_srq_ex(ctx_, attr);
    if (srq) own(srq, "srq", [srq] { return ibv_destroy_srq(srq); });
    return srq;
  }

  ibv_srq* make_xrc_srq(ibv_xrcd* xrcd, ibv_cq* cq, uint32_t max_wr, ibv_pd* pd = nullptr) {
    ibv_srq_init_attr_ex a{};
    a.attr.max_wr = max_wr;
    a.attr.max_sge = 2;
    a.comp_mask = kSrqAttrMaskAll;
    a.srq_type = IBV_SRQT_XRC;
    a.pd = pd ? pd : pd_;
    a.xrcd = xrcd;
    a.cq = cq;
    return make_srq_ex(&a);
  }

  // A QP whose receives come from `srq`.
  ibv_qp* make_srq_qp(ibv_qp_type type, ibv_cq* scq, ibv_cq* rcq, ibv_srq* srq,
                      uint32_t max_send_wr = 64) {
    ibv_qp_init_attr init{};
    init.send_cq = scq;
    init.recv_cq = rcq;
    init.srq = srq;
    init.qp_type = type;
    init.sq_sig_all = 1;
    init.cap.max_send_wr = max_send_wr;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_wr = 16;  // ignored with an SRQ
    init.cap.max_recv_sge = 1;
    ibv_qp* qp = ibv_create_qp(pd_, &init);
    if (qp) own(qp, "srq qp", [qp] { return ibv_destroy_qp(qp); });
    return qp;
  }

  // A sender of `type` connected to a receiver attached to `srq`.
  SrqConn connect_to_srq(ibv_qp_type type, ibv_srq* srq, ibv_cq* rcq = nullptr,
                         ibv_cq* scq = nullptr, const ConnectOpts& o = {}) {
    SrqConn c;
    c.scq = scq ? scq : make_cq();
    c.rcq = rcq ? rcq : make_cq();
    EXPECT_TRUE(c.scq && c.rcq);
    if (!c.scq || !c.rcq) return c;
    c.snd = make_qp(type, c.scq, c.scq);
    c.rcv = make_srq_qp(type, c.rcq, c.rcq, srq);
    EXPECT_NE(c.snd, nullptr) << std::strerror(errno);
    EXPECT_NE(c.rcv, nullptr) << std::strerror(errno);
    if (!c.snd || !c.rcv) return c;
    connect_qp(c.snd, type == IBV_QPT_UD ? 0 : c.rcv->qp_num, o);
    connect_qp(c.rcv, type == IBV_QPT_UD ? 0 : c.snd->qp_num, o);
    return c;
  }

  // Sends `len` bytes at mr+off on c (RC/UC) and waits for the send and the
  // receive completion; returns the receive completion.
  ibv_wc send_and_receive(const SrqConn& c, ibv_mr* mr, size_t off, uint32_t len,
                          uint64_t wr_id = 1000) {
    ibv_wc rwc{};
    rwc.status = IBV_WC_GENERAL_ERR;
    ibv_sge s = sge_of(mr, off, len);
    EXPECT_EQ(post_send(c.snd, wr_id, IBV_WR_SEND, &s, 1), 0);
    ibv_wc swc;
    EXPECT_TRUE(poll_one(c.scq, &swc)) << "no send completion";
    EXPECT_EQ(swc.status, IBV_WC_SUCCESS) << describe(swc);
    EXPECT_TRUE(poll_one(c.rcq, &rwc)) << "no receive completion";
    return rwc;
  }

  // ibv_open_xrcd with FD|OFLAGS, tracked; nullptr (errno set) on failure.
  ibv_xrcd* open_xrcd(int fd, int oflags) {
    ibv_xrcd_init_attr a{};
    a.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
    a.fd = fd;
    a.oflags = oflags;
    ibv_xrcd* x = ibv_open_xrcd(ctx_, &a);
    if (x) own(x, "xrcd", [x] { return ibv_close_xrcd(x); });
    return x;
  }

  // A new empty file (removed at the end of the test); its path.
  std::string temp_file() {
    char path[] = "/tmp/uroce-xrcd-XXXXXX";
    const int fd = mkstemp(path);
    EXPECT_GE(fd, 0) << std::strerror(errno);
    if (fd >= 0) close(fd);
    files_.push_back(path);
    return path;
  }
  // An fd on `path`, closed at the end of the test.
  int open_file(const std::string& path) {
    const int fd = open(path.c_str(), O_RDONLY);
    EXPECT_GE(fd, 0) << path << ": " << std::strerror(errno);
    if (fd >= 0) defer([fd] { close(fd); });
    return fd;
  }

  ibv_qp* make_xrc_ini(ibv_cq* scq, bool wr_api = false, uint32_t max_send_wr = 64) {
    ibv_qp_init_attr_ex a{};
    a.qp_type = IBV_QPT_XRC_SEND;
    a.send_cq = scq;
    a.sq_sig_all = 1;
    a.cap.max_send_wr = max_send_wr;
    a.cap.max_send_sge = 2;
    a.comp_mask = IBV_QP_INIT_ATTR_PD;
    a.pd = pd_;
    if (wr_api) {
      a.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
      a.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
                         IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_ATOMIC_WRITE;
    }
    ibv_qp* qp = ibv_create_qp_ex(ctx_, &a);
    if (qp) own(qp, "xrc_send qp", [qp] { return ibv_destroy_qp(qp); });
    return qp;
  }

  ibv_qp* make_xrc_tgt(ibv_xrcd* xrcd) {
    ibv_qp_init_attr_ex a{};
    a.qp_type = IBV_QPT_XRC_RECV;
    a.comp_mask = IBV_QP_INIT_ATTR_XRCD;
    a.xrcd = xrcd;
    ibv_qp* qp = ibv_create_qp_ex(ctx_, &a);
    if (qp) own(qp, "xrc_recv qp", [qp] { return ibv_destroy_qp(qp); });
    return qp;
  }

  // An initiator (send CQ scq) connected to a new target in xrcd.
  void xrc_pair(ibv_xrcd* xrcd, ibv_cq* scq, ibv_qp** ini, ibv_qp** tgt, bool wr_api = false) {
    *ini = make_xrc_ini(scq, wr_api);
    ASSERT_NE(*ini, nullptr) << "XRC_SEND: " << std::strerror(errno);
    *tgt = make_xrc_tgt(xrcd);
    ASSERT_NE(*tgt, nullptr) << "XRC_RECV: " << std::strerror(errno);
    ASSERT_EQ(connect_xrc(*ini, gid_, (*tgt)->qp_num), 0) << "connecting the initiator";
    ASSERT_EQ(connect_xrc(*tgt, gid_, (*ini)->qp_num), 0) << "connecting the target";
  }

 private:
  struct Owned {
    void* object;
    const char* what;
    std::function<int()> destroy;
  };
  std::vector<Owned> own_;
  std::vector<std::string> files_;
};

// ===========================================================================
// 1. Basic SRQ: creation
// ===========================================================================

inline bool write_all(int fd, const void* p, size_t n) { return write(fd, p, n) == ssize_t(n); }

inline bool read_all(int fd, void* p, size_t n, int timeout_ms) {
  auto* c = static_cast<uint8_t*>(p);
  while (n) {
    if (!fd_readable(fd, timeout_ms)) return false;
    const ssize_t r = read(fd, c, n);
    if (r <= 0) return false;
    c += r;
    n -= size_t(r);
  }
  return true;
}

// The child's protocol (all over two pipes):
//   child -> parent  ChildHello             set up, here is my SRQ number
//   parent -> child  ParentGo               `count` messages were sent to it
//   child -> parent  ChildReport            what arrived; the opened target QP
//   parent -> child  'M' + ParentGo         `count` more messages were sent
//   child -> parent  ChildStatus            what arrived; the opened QP now
//   parent -> child  'q'                    release everything and exit 0
struct ChildHello {
  char code;  // 'R': ready; otherwise the step that failed
  int32_t err;
  uint32_t srqn;
};
struct ParentGo {
  uint32_t tgt_qpn, ini_qpn, count, len;
};
struct ChildReport {
  uint32_t received;   // receive completions on the child's SRQ CQ
  uint32_t good;       // ... with the right status, opcode, qp_num, length, data, wr_id
  int32_t open_errno;  // ibv_open_qp of the parent's target (0: worked)
  int32_t query_err;   // ibv_query_qp through the opened handle
  uint32_t state, dest_qpn, path_mtu, rq_psn, qp_type;
  int32_t close_busy_err;  // ibv_close_xrcd of the handle the QP was opened through
  char first_problem[160];
};
struct ChildStatus {
  uint32_t received, good;
  int32_t query_err;
  uint32_t state;
  char first_problem[160];
};

constexpr uint32_t kChildMsgs = 8;     // messages per batch
constexpr uint32_t kChildSlot = 4096;  // receive buffer size
constexpr uint32_t kChildLen = 1500;   // message size (two packets)

// Message k (over all batches) carries pattern(300 + k).
inline uint32_t child_seed(uint32_t k) { return 300 + k; }

class XrcShare : public SrqTest {
 protected:
  // Starts the child on the domain file (the fixture kills and reaps it if
  // the test ends early) and reads its hello.
  void start_child(const std::string& file, ChildHello* hello, const char* mode = "share") {
    int down[2], up[2];
    ASSERT_EQ(pipe(down), 0);
    ASSERT_EQ(pipe(up), 0);
    fcntl(down[1], F_SETFD, FD_CLOEXEC);
    fcntl(up[0], F_SETFD, FD_CLOEXEC);
    pid_ = fork();
    ASSERT_GE(pid_, 0);
    if (pid_ == 0) {
      const std::string w = std::to_string(up[1]), r = std::to_string(down[0]);
      execl("/proc/self/exe", "verbs_semantics", "--xrc-child", file.c_str(), w.c_str(), r.c_str(),
            mode, static_cast<char*>(nullptr));
      _exit(127);
    }
    close(down[0]);
    close(up[1]);
    to_child_ = down[1];
    from_child_ = up[0];
    defer([this] {
      if (!reaped_) {
        kill(pid_, SIGKILL);
        waitpid(pid_, nullptr, 0);
      }
      close(to_child_);
      close(from_child_);
    });
    ASSERT_TRUE(read_all(from_child_, hello, sizeof(*hello), 10000)) << "the child said nothing";
    ASSERT_EQ(hello->code, 'R')
        << "the child failed at step '" << hello->code << "': " << std::strerror(hello->err)
        << (hello->code == 'o' ? " (ibv_open_xrcd without O_CREAT: the domain is not shared)" : "");
  }

  // Tells the child to release everything; its exit status (-1: still running).
  int finish_child() {
    const char quit = 'q';
    if (!write_all(to_child_, &quit, 1)) return -1;
    const auto end = deadline_after(10);
    int status = 0;
    while (Clock::now() < end) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        reaped_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -1;
  }

  // Sends `count` messages numbered from `first` to the child's SRQ and waits
  // for their send completions.
  void send_to_child(ibv_qp* ini, ibv_cq* scq, uint32_t srqn, uint32_t first, uint32_t count) {
    if (!src_) src_ = reg_buffer(size_t(kChildLen) * kChildMsgs * 2, IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(src_, nullptr);
    for (uint32_t k = first; k < first + count; ++k) {
      uint8_t* p = static_cast<uint8_t*>(src_->addr) + size_t(kChildLen) * k;
      fill(p, kChildLen, child_seed(k));
      ibv_sge s = sge_of(src_, size_t(kChildLen) * k, kChildLen);
      ASSERT_EQ(post_xrc(ini, k, IBV_WR_SEND, &s, 1, srqn), 0);
    }
    std::vector<ibv_wc> sent = poll_n(scq, count);
    ASSERT_EQ(sent.size(), count) << "send completions";
    for (const ibv_wc& wc : sent) EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  }

  pid_t pid_ = -1;
  int to_child_ = -1, from_child_ = -1;
  bool reaped_ = false;
  ibv_mr* src_ = nullptr;
};


}  // namespace vt::srq_test
