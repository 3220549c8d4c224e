// Verbs semantics: shared receive queues (basic and XRC), XRC domains, XRC
// QPs and ibv_open_qp (issue 3; /work/shared/SEMANTICS.md sections 1, 2, 5).
//
// Each test opens uroce0 and connects QPs of this process through the
// engine's loopback port, as the other verbs_*.cc tests do. The XRC domain
// sharing tests start a second process (this binary, `--xrc-child`) that
// opens the same file's domain.
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

namespace vt {
namespace {

constexpr int kSrqAttrMaskAll = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
                                IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;

// ---------------------------------------------------------------------------
// Asynchronous events
// ---------------------------------------------------------------------------

struct AsyncEv {
  ibv_event_type type;
  void* element;  // the qp, srq or cq the event names (nullptr for port events)
};

std::string describe_events(const std::vector<AsyncEv>& evs) {
  std::string s = "[";
  for (const AsyncEv& e : evs) {
    if (s.size() > 1) s += ", ";
    s += ibv_event_type_str(e.type);
  }
  return s + "]";
}

// Reads one async event if one arrives within ms (and acks it).
bool read_async(ibv_context* ctx, int ms, AsyncEv* out) {
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
std::vector<AsyncEv> async_events(ibv_context* ctx, int ms) {
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
std::vector<AsyncEv> events_until(ibv_context* ctx, ibv_event_type want, int grace_ms = 200) {
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

size_t count_events(const std::vector<AsyncEv>& evs, ibv_event_type type, const void* element) {
  return size_t(std::count_if(evs.begin(), evs.end(), [&](const AsyncEv& e) {
    return e.type == type && e.element == element;
  }));
}

bool cq_empty(ibv_cq* cq) {
  ibv_wc wc;
  return ibv_poll_cq(cq, 1, &wc) == 0;
}

// ---------------------------------------------------------------------------
// Data patterns
// ---------------------------------------------------------------------------

uint8_t pattern(uint32_t seed, size_t i) { return uint8_t(seed * 131 + i * 7 + (i >> 8)); }

void fill(void* p, size_t len, uint32_t seed) {
  auto* b = static_cast<uint8_t*>(p);
  for (size_t i = 0; i < len; ++i) b[i] = pattern(seed, i);
}

// Index of the first byte that differs from the pattern, or -1.
long mismatch(const void* p, size_t len, uint32_t seed) {
  const auto* b = static_cast<const uint8_t*>(p);
  for (size_t i = 0; i < len; ++i)
    if (b[i] != pattern(seed, i)) return long(i);
  return -1;
}

// ---------------------------------------------------------------------------
// XRC connection (the masks of SEMANTICS.md 2.4 / the kernel's qp_state_table)
// ---------------------------------------------------------------------------

ibv_ah_attr av_to(const ibv_gid& gid) {
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
int connect_xrc(ibv_qp* qp, const ibv_gid& gid, uint32_t remote_qpn, uint32_t sq_psn = 0,
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
int post_xrc(ibv_qp* ini, uint64_t wr_id, ibv_wr_opcode op, ibv_sge* sge, int num_sge,
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

int post_srq_one(ibv_srq* srq, uint64_t wr_id, ibv_sge* sge, int num_sge) {
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
                         IBV_QP_EX_WITH_RDMA_WRITE;
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

TEST_F(SrqTest, CreateRoundsUpAndWritesBackWhatQueryReports) {
  ibv_srq_init_attr init{};
  ibv_srq* srq = make_srq(100, 1, nullptr, &init);
  ASSERT_NE(srq, nullptr) << std::strerror(errno);
  EXPECT_EQ(init.attr.max_wr, 127u) << "100 rounds to a ring of 128 with one slot empty (rxe, mlx5)";
  EXPECT_GE(init.attr.max_sge, 1u);
  EXPECT_EQ(srq->context, ctx_);
  EXPECT_EQ(srq->pd, pd_);
  EXPECT_EQ(srq->srq_context, this);
  ibv_srq_attr q{};
  ASSERT_EQ(ibv_query_srq(srq, &q), 0);
  EXPECT_EQ(q.max_wr, init.attr.max_wr) << "create's write-back and query must agree";
  EXPECT_EQ(q.max_sge, init.attr.max_sge);
  EXPECT_EQ(q.srq_limit, 0u) << "not armed";

  // More SGEs and an exact power of two minus one.
  ibv_srq_init_attr init2{};
  ibv_srq* srq2 = make_srq(255, 3, nullptr, &init2);
  ASSERT_NE(srq2, nullptr) << std::strerror(errno);
  EXPECT_EQ(init2.attr.max_wr, 255u);
  EXPECT_GE(init2.attr.max_sge, 3u);
  ASSERT_EQ(ibv_query_srq(srq2, &q), 0);
  EXPECT_EQ(q.max_wr, init2.attr.max_wr);
  EXPECT_EQ(q.max_sge, init2.attr.max_sge);

  // ibv_create_srq_ex writes back into attr_ex.attr too.
  ibv_srq_init_attr_ex x{};
  x.attr.max_wr = 1000;
  x.attr.max_sge = 2;
  x.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
  x.srq_type = IBV_SRQT_BASIC;
  x.pd = pd_;
  ibv_srq* srq3 = make_srq_ex(&x);
  ASSERT_NE(srq3, nullptr) << std::strerror(errno);
  EXPECT_EQ(x.attr.max_wr, 1023u);
  EXPECT_GE(x.attr.max_sge, 2u);
  ASSERT_EQ(ibv_query_srq(srq3, &q), 0);
  EXPECT_EQ(q.max_wr, x.attr.max_wr);
  EXPECT_EQ(q.max_sge, x.attr.max_sge);
}

TEST_F(SrqTest, CreateBeyondDeviceLimitsIsEinvalAndLeavesNothing) {
  const ibv_device_attr d = device_attr();
  ASSERT_GT(d.max_srq_wr, 0);
  ASSERT_GT(d.max_srq_sge, 0);
  // A PD of its own: a failed create must leave no reference on it.
  ibv_pd* pd = ibv_alloc_pd(ctx_);
  ASSERT_NE(pd, nullptr);
  struct Case {
    const char* what;
    uint32_t max_wr, max_sge;
  } cases[] = {
      {"max_wr 0", 0, 1},
      {"max_wr = max_srq_wr + 1", uint32_t(d.max_srq_wr) + 1, 1},
      {"max_wr huge", 0x80000000u, 1},
      {"max_sge = max_srq_sge + 1", 16, uint32_t(d.max_srq_sge) + 1},
  };
  for (const Case& c : cases) {
    ibv_srq_init_attr init{};
    init.attr.max_wr = c.max_wr;
    init.attr.max_sge = c.max_sge;
    errno = 0;
    ibv_srq* srq = ibv_create_srq(pd, &init);
    EXPECT_EQ(srq, nullptr) << c.what;
    EXPECT_EQ(errno, EINVAL) << c.what << ": " << std::strerror(errno);
    if (srq) ibv_destroy_srq(srq);
  }
  // The limits themselves are accepted.
  ibv_srq_init_attr init{};
  init.attr.max_wr = uint32_t(d.max_srq_wr);
  init.attr.max_sge = uint32_t(d.max_srq_sge);
  ibv_srq* srq = ibv_create_srq(pd, &init);
  EXPECT_NE(srq, nullptr) << "max_wr = max_srq_wr, max_sge = max_srq_sge: " << std::strerror(errno);
  if (srq) {
    EXPECT_GE(init.attr.max_wr, uint32_t(d.max_srq_wr));
    EXPECT_GE(init.attr.max_sge, uint32_t(d.max_srq_sge));
    EXPECT_EQ(ibv_destroy_srq(srq), 0);
  }
  EXPECT_EQ(ibv_dealloc_pd(pd), 0) << "a failed or destroyed SRQ still holds the PD";
}

TEST_F(SrqTest, CreateSrqExCompMaskRules) {
  // PD only: behaves as ibv_create_srq (fields outside the mask are ignored:
  // srq_type says XRC, xrcd and cq are garbage).
  ibv_srq_init_attr_ex x{};
  x.attr.max_wr = 100;
  x.attr.max_sge = 1;
  x.comp_mask = IBV_SRQ_INIT_ATTR_PD;
  x.pd = pd_;
  x.srq_type = IBV_SRQT_XRC;
  x.xrcd = reinterpret_cast<ibv_xrcd*>(uintptr_t(0xdead0000));
  x.cq = reinterpret_cast<ibv_cq*>(uintptr_t(0xbeef0000));
  ibv_srq* srq = make_srq_ex(&x);
  ASSERT_NE(srq, nullptr) << std::strerror(errno);
  EXPECT_EQ(x.attr.max_wr, 127u);
  uint32_t n = 0;
  EXPECT_EQ(ibv_get_srq_num(srq, &n), 0);

  // The provider's path (a CQ bit is set) still ignores the type outside the mask.
  ibv_cq* cq = make_cq();
  ASSERT_NE(cq, nullptr);
  x = {};
  x.attr.max_wr = 10;
  x.attr.max_sge = 1;
  x.comp_mask = IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_CQ;
  x.pd = pd_;
  x.cq = cq;
  x.srq_type = IBV_SRQT_TM;  // not in the mask: basic
  x.xrcd = reinterpret_cast<ibv_xrcd*>(uintptr_t(0xdead0000));
  ibv_srq* srq2 = make_srq_ex(&x);
  EXPECT_NE(srq2, nullptr) << "PD|CQ, type outside the mask: " << std::strerror(errno);
  if (srq2) { EXPECT_EQ(x.attr.max_wr, 15u); }

  struct Case {
    const char* what;
    uint32_t comp_mask;
    ibv_srq_type type;
    int err;
  } cases[] = {
      {"unknown bit IBV_SRQ_INIT_ATTR_RESERVED", IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_RESERVED,
       IBV_SRQT_BASIC, EOPNOTSUPP},
      {"bit 31", IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE | 0x80000000u, IBV_SRQT_BASIC,
       EOPNOTSUPP},
      {"no PD bit (TYPE only)", IBV_SRQ_INIT_ATTR_TYPE, IBV_SRQT_BASIC, EINVAL},
      {"comp_mask 0", 0, IBV_SRQT_BASIC, EINVAL},
      {"no PD bit (TYPE|CQ)", IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_CQ, IBV_SRQT_BASIC, EINVAL},
      {"tag matching (not supported yet)",
       IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_TM,
       IBV_SRQT_TM, EOPNOTSUPP},
  };
  for (const Case& c : cases) {
    ibv_srq_init_attr_ex a{};
    a.attr.max_wr = 16;
    a.attr.max_sge = 1;
    a.comp_mask = c.comp_mask;
    a.srq_type = c.type;
    a.pd = pd_;
    a.cq = cq;
    a.tm_cap.max_num_tags = 16;
    a.tm_cap.max_ops = 16;
    errno = 0;
    ibv_srq* s = ibv_create_srq_ex(ctx_, &a);
    EXPECT_EQ(s, nullptr) << c.what;
    EXPECT_EQ(errno, c.err) << c.what << ": " << std::strerror(errno);
    if (s) ibv_destroy_srq(s);
  }
}

TEST_F(SrqTest, GetSrqNumGivesDistinctNumbers) {
  ibv_srq* a = make_srq(8);
  ibv_srq* b = make_srq(8);
  ASSERT_TRUE(a && b);
  uint32_t na = 0xffffffff, nb = 0xffffffff;
  ASSERT_EQ(ibv_get_srq_num(a, &na), 0);
  ASSERT_EQ(ibv_get_srq_num(b, &nb), 0);
  EXPECT_NE(na, nb);
  EXPECT_LT(na, 1u << 24) << "an SRQ number is 24 bits";
  EXPECT_LT(nb, 1u << 24);
  uint32_t again = 0;
  ASSERT_EQ(ibv_get_srq_num(a, &again), 0);
  EXPECT_EQ(again, na);
}

TEST_F(SrqTest, DeallocPdWithSrqAliveIsEbusy) {
  ibv_pd* pd = ibv_alloc_pd(ctx_);
  ASSERT_NE(pd, nullptr);
  ibv_srq_init_attr init{};
  init.attr.max_wr = 4;
  init.attr.max_sge = 1;
  ibv_srq* srq = ibv_create_srq(pd, &init);
  ASSERT_NE(srq, nullptr) << std::strerror(errno);
  EXPECT_EQ(ibv_dealloc_pd(pd), EBUSY);
  // The SRQ still works after the refused dealloc.
  ibv_srq_attr q{};
  EXPECT_EQ(ibv_query_srq(srq, &q), 0);
  EXPECT_EQ(ibv_destroy_srq(srq), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
}

// ===========================================================================
// 2. Posting receives
// ===========================================================================

TEST_F(SrqTest, PostBeyondMaxWrIsEnomemWithBadWr) {
  ibv_srq_init_attr init{};
  ibv_srq* srq = make_srq(8, 1, nullptr, &init);
  ASSERT_NE(srq, nullptr);
  const uint32_t depth = init.attr.max_wr;
  ASSERT_EQ(depth, 15u);
  ibv_mr* mr = reg_buffer(64 * (depth + 2), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  for (uint32_t i = 0; i + 1 < depth; ++i) {
    ibv_sge s = sge_of(mr, 64 * i, 64);
    ASSERT_EQ(post_srq_one(srq, i, &s, 1), 0) << "WR " << i;
  }
  // One slot left: a chain of two posts the first and stops at the second.
  ibv_sge s1 = sge_of(mr, 64 * (depth - 1), 64), s2 = sge_of(mr, 64 * depth, 64);
  ibv_recv_wr w2{};
  w2.wr_id = depth;
  w2.sg_list = &s2;
  w2.num_sge = 1;
  ibv_recv_wr w1{};
  w1.wr_id = depth - 1;
  w1.sg_list = &s1;
  w1.num_sge = 1;
  w1.next = &w2;
  ibv_recv_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_srq_recv(srq, &w1, &bad), ENOMEM);
  EXPECT_EQ(bad, &w2) << "bad_wr must name the first WR not posted";
  // And a single one more: ENOMEM, bad_wr = it.
  bad = nullptr;
  w2.next = nullptr;
  EXPECT_EQ(ibv_post_srq_recv(srq, &w2, &bad), ENOMEM);
  EXPECT_EQ(bad, &w2);

  // The max_wr posted WQEs are consumed in order, and then there is room again.
  SrqConn c = connect_to_srq(IBV_QPT_RC, srq);
  ASSERT_FALSE(HasFailure());
  ibv_mr* src = reg_buffer(64, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(src, nullptr);
  for (uint32_t i = 0; i < depth; ++i) {
    fill(src->addr, 64, i);
    ibv_wc wc = send_and_receive(c, src, 0, 64);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
    EXPECT_EQ(wc.wr_id, i) << "FIFO";
    EXPECT_EQ(mismatch(static_cast<uint8_t*>(mr->addr) + 64 * i, 64, i), -1) << "message " << i;
  }
  bad = nullptr;
  EXPECT_EQ(ibv_post_srq_recv(srq, &w2, &bad), 0) << "the SRQ drained: room again";
}

TEST_F(SrqTest, ChainWithTooManySgesStopsAtThatWr) {
  ibv_srq_init_attr init{};
  ibv_srq* srq = make_srq(16, 2, nullptr, &init);
  ASSERT_NE(srq, nullptr);
  const uint32_t max_sge = init.attr.max_sge;
  ibv_mr* mr = reg_buffer(8192, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  // WR 1, 2: two SGEs each (128 + 128 bytes); WR 3: max_sge + 1 SGEs; WR 4: fine.
  std::vector<ibv_sge> sges;
  for (uint32_t i = 0; i < max_sge + 1; ++i) sges.push_back(sge_of(mr, 4096 + 16 * i, 16));
  ibv_sge a[2] = {sge_of(mr, 0, 128), sge_of(mr, 128, 128)};
  ibv_sge b[2] = {sge_of(mr, 256, 128), sge_of(mr, 384, 128)};
  ibv_sge d = sge_of(mr, 512, 256);
  ibv_recv_wr w[4]{};
  w[0] = {1, &w[1], a, 2};
  w[1] = {2, &w[2], b, 2};
  w[2] = {3, &w[3], sges.data(), int(sges.size())};
  w[3] = {4, nullptr, &d, 1};
  ibv_recv_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_srq_recv(srq, &w[0], &bad), EINVAL);
  EXPECT_EQ(bad, &w[2]) << "bad_wr must be the WR with " << max_sge + 1 << " SGEs";

  // The first two were posted and are consumed normally; the 3rd and 4th were not.
  SrqConn c = connect_to_srq(IBV_QPT_RC, srq);
  ASSERT_FALSE(HasFailure());
  ibv_mr* src = reg_buffer(256, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(src, nullptr);
  auto* base = static_cast<uint8_t*>(mr->addr);
  for (uint32_t i = 0; i < 2; ++i) {
    fill(src->addr, 200, 50 + i);
    ibv_wc wc = send_and_receive(c, src, 0, 200);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
    EXPECT_EQ(wc.wr_id, i + 1u);
    EXPECT_EQ(wc.byte_len, 200u);
    EXPECT_EQ(mismatch(base + 256 * i, 200, 50 + i), -1) << "scattered over two SGEs";
  }
  ibv_sge e = sge_of(mr, 2048, 256);
  ASSERT_EQ(post_srq_one(srq, 99, &e, 1), 0);
  fill(src->addr, 10, 99);
  ibv_wc wc = send_and_receive(c, src, 0, 10);
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(wc.wr_id, 99u) << "WRs 3 and 4 must not have been posted";
}

TEST_F(SrqTest, ZeroSgeReceiveTakesAnEmptyMessageOnly) {
  ibv_srq* srq = make_srq(8);
  ASSERT_NE(srq, nullptr);
  SrqConn c = connect_to_srq(IBV_QPT_RC, srq);
  ASSERT_FALSE(HasFailure());
  ibv_mr* mr = reg_buffer(256, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  ASSERT_EQ(post_srq_one(srq, 1, nullptr, 0), 0) << "num_sge 0 is legal";
  ASSERT_EQ(post_srq_one(srq, 2, nullptr, 0), 0);
  ibv_wc wc = send_and_receive(c, mr, 0, 0);
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.byte_len, 0u);
  // A message with payload does not fit in it: a local length error.
  ibv_sge s = sge_of(mr, 0, 32);
  ASSERT_EQ(post_send(c.snd, 3, IBV_WR_SEND, &s, 1), 0);
  VT_POLL_ONE(c.rcq, &wc);
  EXPECT_EQ(wc.wr_id, 2u);
  EXPECT_EQ(wc.status, IBV_WC_LOC_LEN_ERR) << describe(wc);
}

TEST_F(SrqTest, PostRecvOnQpWithSrqIsEinval) {
  ibv_srq* srq = make_srq(8);
  ibv_cq* cq = make_cq();
  ASSERT_TRUE(srq && cq);
  ibv_qp* qp = make_srq_qp(IBV_QPT_RC, cq, cq, srq);
  ASSERT_NE(qp, nullptr) << std::strerror(errno);
  EXPECT_EQ(qp->srq, srq);
  ConnectOpts o;
  connect_qp(qp, qp->qp_num, o);  // any state from INIT accepts receives
  ibv_mr* mr = reg_buffer(64, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  ibv_sge s = sge_of(mr, 0, 64);
  ibv_recv_wr wr{};
  wr.wr_id = 1;
  wr.sg_list = &s;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_recv(qp, &wr, &bad), EINVAL);
  EXPECT_EQ(bad, &wr);
  ibv_qp_attr a{};
  ibv_qp_init_attr qi{};
  ASSERT_EQ(ibv_query_qp(qp, &a, IBV_QP_CAP, &qi), 0);
  EXPECT_EQ(qi.srq, srq);
}

// ===========================================================================
// 3. Modify: the limit event, resize
// ===========================================================================

TEST_F(SrqTest, LimitEventFiresOnceThenRearms) {
  ibv_srq* srq = make_srq(10);
  ASSERT_NE(srq, nullptr);
  SrqConn c = connect_to_srq(IBV_QPT_RC, srq);
  ASSERT_FALSE(HasFailure());
  ibv_mr* mr = reg_buffer(64 * 16, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  for (uint32_t i = 0; i < 10; ++i) {
    ibv_sge s = sge_of(mr, 64 * i, 64);
    ASSERT_EQ(post_srq_one(srq, i, &s, 1), 0);
  }
  ibv_srq_attr a{};
  a.srq_limit = 7;
  ASSERT_EQ(ibv_modify_srq(srq, &a, IBV_SRQ_LIMIT), 0);
  ibv_srq_attr q{};
  ASSERT_EQ(ibv_query_srq(srq, &q), 0);
  EXPECT_EQ(q.srq_limit, 7u);

  uint64_t expect_wr = 0;
  auto consume = [&](int n) {
    for (int i = 0; i < n; ++i) {
      ibv_wc wc = send_and_receive(c, mr, 64 * 15, 8);
      ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
      ASSERT_EQ(wc.wr_id, expect_wr++);
    }
  };
  consume(3);  // 7 left: not below the limit
  ASSERT_FALSE(HasFailure());
  std::vector<AsyncEv> evs = async_events(ctx_, 200);
  EXPECT_TRUE(evs.empty()) << "7 posted is not below a limit of 7: " << describe_events(evs);

  consume(1);  // 6 < 7
  ASSERT_FALSE(HasFailure());
  evs = events_until(ctx_, IBV_EVENT_SRQ_LIMIT_REACHED);
  ASSERT_EQ(evs.size(), 1u) << "exactly one event, and nothing else: " << describe_events(evs);
  EXPECT_EQ(evs[0].type, IBV_EVENT_SRQ_LIMIT_REACHED);
  EXPECT_EQ(evs[0].element, srq) << "element.srq";
  ASSERT_EQ(ibv_query_srq(srq, &q), 0);
  EXPECT_EQ(q.srq_limit, 0u) << "disarmed once fired";
  EXPECT_EQ(q.max_wr, 15u);

  consume(2);  // 4 left, disarmed: nothing
  ASSERT_FALSE(HasFailure());
  evs = async_events(ctx_, 200);
  EXPECT_TRUE(evs.empty()) << "fired again without being re-armed: " << describe_events(evs);

  a.srq_limit = 3;  // re-arm below the posted count
  ASSERT_EQ(ibv_modify_srq(srq, &a, IBV_SRQ_LIMIT), 0);
  ASSERT_EQ(ibv_query_srq(srq, &q), 0);
  EXPECT_EQ(q.srq_limit, 3u);
  consume(1);  // 3 left
  ASSERT_FALSE(HasFailure());
  evs = async_events(ctx_, 200);
  EXPECT_TRUE(evs.empty()) << describe_events(evs);
  consume(1);  // 2 < 3
  ASSERT_FALSE(HasFailure());
  evs = events_until(ctx_, IBV_EVENT_SRQ_LIMIT_REACHED);
  ASSERT_EQ(evs.size(), 1u) << "re-armed: fires again, once: " << describe_events(evs);
  EXPECT_EQ(evs[0].type, IBV_EVENT_SRQ_LIMIT_REACHED);
  EXPECT_EQ(evs[0].element, srq);
  ASSERT_EQ(ibv_query_srq(srq, &q), 0);
  EXPECT_EQ(q.srq_limit, 0u);
}

TEST_F(SrqTest, PostingNeverFiresTheLimitEvent) {
  ibv_srq* srq = make_srq(32);
  ASSERT_NE(srq, nullptr);
  ibv_srq_attr a{};
  a.srq_limit = 5;
  ASSERT_EQ(ibv_modify_srq(srq, &a, IBV_SRQ_LIMIT), 0);
  ibv_mr* mr = reg_buffer(64, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  for (int i = 0; i < 8; ++i) {
    ibv_sge s = sge_of(mr, 0, 64);
    ASSERT_EQ(post_srq_one(srq, i, &s, 1), 0);
  }
  std::vector<AsyncEv> evs = async_events(ctx_, 200);
  EXPECT_TRUE(evs.empty()) << "only consumption fires the event: " << describe_events(evs);
  ibv_srq_attr q{};
  ASSERT_EQ(ibv_query_srq(srq, &q), 0);
  EXPECT_EQ(q.srq_limit, 5u);
}

TEST_F(SrqTest, ModifyLimitAboveMaxWrIsEinvalAndChangesNothing) {
  const ibv_device_attr d = device_attr();
  ibv_srq* srq = make_srq(100);  // 127
  ASSERT_NE(srq, nullptr);
  ibv_srq_attr a{};
  a.srq_limit = 10;
  ASSERT_EQ(ibv_modify_srq(srq, &a, IBV_SRQ_LIMIT), 0);
  ibv_srq_attr q{};
  for (uint32_t bad : {128u, 1000u, uint32_t(d.max_srq_wr) + 1}) {
    a.srq_limit = bad;
    EXPECT_EQ(ibv_modify_srq(srq, &a, IBV_SRQ_LIMIT), EINVAL) << "limit " << bad;
    ASSERT_EQ(ibv_query_srq(srq, &q), 0);
    EXPECT_EQ(q.srq_limit, 10u) << "a refused modify changed the limit";
    EXPECT_EQ(q.max_wr, 127u);
  }
  // Both bits, the new size valid but the limit not: nothing changes (atomic).
  a.max_wr = 500;
  a.srq_limit = 1000;
  EXPECT_EQ(ibv_modify_srq(srq, &a, IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT), EINVAL);
  ASSERT_EQ(ibv_query_srq(srq, &q), 0);
  EXPECT_EQ(q.max_wr, 127u) << "resized although the limit was refused";
  EXPECT_EQ(q.srq_limit, 10u);
  // A mask of 0 is a no-op.
  a.max_wr = 1;
  a.srq_limit = 1;
  EXPECT_EQ(ibv_modify_srq(srq, &a, 0), 0);
  ASSERT_EQ(ibv_query_srq(srq, &q), 0);
  EXPECT_EQ(q.max_wr, 127u);
  EXPECT_EQ(q.srq_limit, 10u);
  // Limit 0 disarms.
  a.srq_limit = 0;
  EXPECT_EQ(ibv_modify_srq(srq, &a, IBV_SRQ_LIMIT), 0);
  ASSERT_EQ(ibv_query_srq(srq, &q), 0);
  EXPECT_EQ(q.srq_limit, 0u);
}

TEST_F(SrqTest, ResizeGrowKeepsPostedWqesInOrder) {
  const ibv_device_attr d = device_attr();
  ASSERT_TRUE(d.device_cap_flags & IBV_DEVICE_SRQ_RESIZE)
      << "the engine resizes SRQs; it must say so";
  ibv_srq* srq = make_srq(15);
  ASSERT_NE(srq, nullptr);
  SrqConn c = connect_to_srq(IBV_QPT_RC, srq);
  ASSERT_FALSE(HasFailure());
  constexpr uint32_t kSlot = 128, kTotal = 60;
  ibv_mr* mr = reg_buffer(kSlot * kTotal, IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* src = reg_buffer(kSlot, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(mr && src);
  uint32_t next_post = 0, next_recv = 0;
  auto post = [&](uint32_t n) {
    for (uint32_t i = 0; i < n; ++i, ++next_post) {
      ibv_sge s = sge_of(mr, kSlot * next_post, kSlot);
      ASSERT_EQ(post_srq_one(srq, next_post, &s, 1), 0) << "WR " << next_post;
    }
  };
  auto consume = [&](uint32_t n) {
    for (uint32_t i = 0; i < n; ++i, ++next_recv) {
      fill(src->addr, 100, next_recv);
      ibv_wc wc = send_and_receive(c, src, 0, 100);
      ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
      ASSERT_EQ(wc.wr_id, next_recv) << "WQEs out of order after a resize";
      ASSERT_EQ(mismatch(static_cast<uint8_t*>(mr->addr) + kSlot * next_recv, 100, next_recv), -1);
    }
  };
  // Fill the ring, take 5 and post 5 more so that the posted WQEs wrap
  // around the end of the old ring, then grow.
  post(15);
  consume(5);
  post(5);
  ASSERT_FALSE(HasFailure());
  ibv_srq_attr a{};
  a.max_wr = 40;
  ASSERT_EQ(ibv_modify_srq(srq, &a, IBV_SRQ_MAX_WR), 0);
  ibv_srq_attr q{};
  ASSERT_EQ(ibv_query_srq(srq, &q), 0);
  EXPECT_EQ(q.max_wr, 63u) << "query must show the new depth";
  // The new room is usable: 15 posted now, 40 more fit beside them.
  post(40);
  ASSERT_FALSE(HasFailure());
  consume(kTotal - 5);
}

TEST_F(SrqTest, ResizeBelowOutstandingIsEinval) {
  ibv_srq* srq = make_srq(100);  // 127
  ASSERT_NE(srq, nullptr);
  ibv_mr* mr = reg_buffer(64 * 20, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  for (uint32_t i = 0; i < 20; ++i) {
    ibv_sge s = sge_of(mr, 64 * i, 64);
    ASSERT_EQ(post_srq_one(srq, i, &s, 1), 0);
  }
  const ibv_device_attr d = device_attr();
  ibv_srq_attr a{}, q{};
  for (uint32_t bad : {5u, 19u, 0u, uint32_t(d.max_srq_wr) + 1}) {
    a.max_wr = bad;
    EXPECT_EQ(ibv_modify_srq(srq, &a, IBV_SRQ_MAX_WR), EINVAL) << "max_wr " << bad;
    ASSERT_EQ(ibv_query_srq(srq, &q), 0);
    EXPECT_EQ(q.max_wr, 127u);
  }
  // Below an armed limit: EINVAL too.
  a.srq_limit = 50;
  ASSERT_EQ(ibv_modify_srq(srq, &a, IBV_SRQ_LIMIT), 0);
  a.max_wr = 30;  // 31 < 50
  EXPECT_EQ(ibv_modify_srq(srq, &a, IBV_SRQ_MAX_WR), EINVAL);
  ASSERT_EQ(ibv_query_srq(srq, &q), 0);
  EXPECT_EQ(q.max_wr, 127u);
  EXPECT_EQ(q.srq_limit, 50u);
  a.srq_limit = 0;
  ASSERT_EQ(ibv_modify_srq(srq, &a, IBV_SRQ_LIMIT), 0);
  // Shrinking to exactly what is posted works, and keeps them.
  a.max_wr = 20;
  ASSERT_EQ(ibv_modify_srq(srq, &a, IBV_SRQ_MAX_WR), 0);
  ASSERT_EQ(ibv_query_srq(srq, &q), 0);
  EXPECT_EQ(q.max_wr, 31u);
  SrqConn c = connect_to_srq(IBV_QPT_RC, srq);
  ASSERT_FALSE(HasFailure());
  ibv_mr* src = reg_buffer(64, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(src, nullptr);
  for (uint32_t i = 0; i < 20; ++i) {
    ibv_wc wc = send_and_receive(c, src, 0, 32);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
    ASSERT_EQ(wc.wr_id, i);
  }
}

// ===========================================================================
// 4. Destroy, attached QPs, LAST_WQE_REACHED
// ===========================================================================

TEST_F(SrqTest, DestroyWithQpAttachedIsEbusy) {
  ibv_srq* srq = make_srq(8);
  ibv_cq* cq = make_cq();
  ASSERT_TRUE(srq && cq);
  ibv_qp* q1 = make_srq_qp(IBV_QPT_RC, cq, cq, srq);
  ibv_qp* q2 = make_srq_qp(IBV_QPT_UD, cq, cq, srq);
  ASSERT_TRUE(q1 && q2) << std::strerror(errno);
  EXPECT_EQ(ibv_destroy_srq(srq), EBUSY);
  // Still usable after the refusal.
  ibv_mr* mr = reg_buffer(64, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  ibv_sge s = sge_of(mr, 0, 64);
  EXPECT_EQ(post_srq_one(srq, 1, &s, 1), 0);
  ibv_srq_attr q{};
  EXPECT_EQ(ibv_query_srq(srq, &q), 0);
  disown(q1);
  ASSERT_EQ(ibv_destroy_qp(q1), 0);
  EXPECT_EQ(ibv_destroy_srq(srq), EBUSY) << "one QP is still attached";
  disown(q2);
  ASSERT_EQ(ibv_destroy_qp(q2), 0);
  disown(srq);
  EXPECT_EQ(ibv_destroy_srq(srq), 0) << "no QP attached any more (posted WQEs are discarded)";
}

TEST_F(SrqTest, LastWqeReachedWhenQpGoesToErrorByModify) {
  ibv_srq* srq = make_srq(16);
  ASSERT_NE(srq, nullptr);
  SrqConn c1 = connect_to_srq(IBV_QPT_RC, srq);
  SrqConn c2 = connect_to_srq(IBV_QPT_RC, srq);
  ASSERT_FALSE(HasFailure());
  ibv_mr* mr = reg_buffer(64 * 4, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  for (uint32_t i = 0; i < 2; ++i) {
    ibv_sge s = sge_of(mr, 64 * i, 64);
    ASSERT_EQ(post_srq_one(srq, i, &s, 1), 0);
  }
  ibv_qp_attr err{};
  err.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(ibv_modify_qp(c1.rcv, &err, IBV_QP_STATE), 0);
  std::vector<AsyncEv> evs = events_until(ctx_, IBV_EVENT_QP_LAST_WQE_REACHED);
  EXPECT_EQ(count_events(evs, IBV_EVENT_QP_LAST_WQE_REACHED, c1.rcv), 1u)
      << "exactly one LAST_WQE_REACHED for the QP: " << describe_events(evs);
  EXPECT_EQ(evs.size(), 1u) << "and nothing else: " << describe_events(evs);
  // ERR -> ERR again: no second event.
  ASSERT_EQ(ibv_modify_qp(c1.rcv, &err, IBV_QP_STATE), 0);
  evs = async_events(ctx_, 200);
  EXPECT_TRUE(evs.empty()) << describe_events(evs);
  // The SRQ's WQEs belong to no QP: none is flushed on the erring QP's CQ ...
  std::vector<ibv_wc> flushed = drain_for(c1.rcq, 100);
  EXPECT_TRUE(flushed.empty()) << "an SRQ WQE was flushed: " << describe(flushed[0]);
  // ... and the other QP sharing the SRQ takes them, in order.
  for (uint64_t i = 0; i < 2; ++i) {
    ibv_wc wc = send_and_receive(c2, mr, 64 * 3, 16);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
    EXPECT_EQ(wc.wr_id, i);
    EXPECT_EQ(wc.qp_num, c2.rcv->qp_num);
  }
}

TEST_F(SrqTest, LastWqeReachedWhenQpGoesToErrorByTransportError) {
  ibv_srq* srq = make_srq(16);
  ASSERT_NE(srq, nullptr);
  SrqConn c1 = connect_to_srq(IBV_QPT_RC, srq);
  SrqConn c2 = connect_to_srq(IBV_QPT_RC, srq);
  ASSERT_FALSE(HasFailure());
  ibv_mr* mr = reg_buffer(4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  ibv_sge small = sge_of(mr, 0, 16), big = sge_of(mr, 1024, 1024);
  ASSERT_EQ(post_srq_one(srq, 0, &small, 1), 0);
  ASSERT_EQ(post_srq_one(srq, 1, &big, 1), 0);
  // 100 bytes into a 16-byte receive: the receiving QP errs (LOC_LEN_ERR).
  ibv_sge s = sge_of(mr, 2048, 100);
  ASSERT_EQ(post_send(c1.snd, 7, IBV_WR_SEND, &s, 1), 0);
  ibv_wc wc;
  VT_POLL_ONE(c1.rcq, &wc);
  EXPECT_EQ(wc.wr_id, 0u);
  EXPECT_EQ(wc.status, IBV_WC_LOC_LEN_ERR) << describe(wc);
  VT_POLL_ONE(c1.scq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_REM_INV_REQ_ERR) << describe(wc);
  std::vector<AsyncEv> evs = events_until(ctx_, IBV_EVENT_QP_LAST_WQE_REACHED);
  EXPECT_EQ(count_events(evs, IBV_EVENT_QP_LAST_WQE_REACHED, c1.rcv), 1u) << describe_events(evs);
  EXPECT_EQ(qp_state(c1.rcv), IBV_QPS_ERR);
  // The other QP is undisturbed and takes the next WQE.
  wc = send_and_receive(c2, mr, 2048, 100);
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(wc.wr_id, 1u);
}

// ===========================================================================
// 5. Traffic: RC, UC and UD on one SRQ; many QPs
// ===========================================================================

TEST_F(SrqTest, RcUcAndUdQpsTakeReceivesFromOneSrq) {
  ibv_srq* srq = make_srq(16);
  ASSERT_NE(srq, nullptr);
  SrqConn rc = connect_to_srq(IBV_QPT_RC, srq);
  SrqConn uc = connect_to_srq(IBV_QPT_UC, srq);
  SrqConn ud = connect_to_srq(IBV_QPT_UD, srq);
  ASSERT_FALSE(HasFailure());
  ibv_ah_attr av = loopback_av();
  ibv_ah* ah = make_ah(&av);
  ASSERT_NE(ah, nullptr);
  constexpr uint32_t kSlot = 512;
  ibv_mr* mr = reg_buffer(kSlot * 6, IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* src = reg_buffer(kSlot, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(mr && src);
  auto* base = static_cast<uint8_t*>(mr->addr);
  for (uint32_t i = 0; i < 6; ++i) {
    ibv_sge s = sge_of(mr, kSlot * i, kSlot);
    ASSERT_EQ(post_srq_one(srq, i, &s, 1), 0);
  }
  struct Step {
    SrqConn* c;
    uint32_t len;
  } steps[] = {{&rc, 300}, {&uc, 200}, {&ud, 100}, {&ud, 50}, {&uc, 20}, {&rc, 10}};
  for (uint32_t i = 0; i < 6; ++i) {
    const Step& st = steps[i];
    const bool is_ud = st.c == &ud;
    fill(src->addr, st.len, 70 + i);
    ibv_sge s = sge_of(src, 0, st.len);
    if (is_ud) {
      ibv_send_wr wr{};
      wr.wr_id = i;
      wr.opcode = IBV_WR_SEND;
      wr.sg_list = &s;
      wr.num_sge = 1;
      wr.send_flags = IBV_SEND_SIGNALED;
      wr.wr.ud.ah = ah;
      wr.wr.ud.remote_qpn = ud.rcv->qp_num;
      wr.wr.ud.remote_qkey = ConnectOpts{}.qkey;
      ibv_send_wr* bad;
      ASSERT_EQ(ibv_post_send(ud.snd, &wr, &bad), 0);
    } else {
      ASSERT_EQ(post_send(st.c->snd, i, IBV_WR_SEND, &s, 1), 0);
    }
    ibv_wc wc;
    VT_POLL_ONE(st.c->scq, &wc);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
    VT_POLL_ONE(st.c->rcq, &wc);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << "step " << i << ": " << describe(wc);
    EXPECT_EQ(wc.wr_id, i) << "step " << i << ": the oldest SRQ WQE";
    EXPECT_EQ(wc.qp_num, st.c->rcv->qp_num) << "step " << i;
    EXPECT_EQ(wc.opcode, IBV_WC_RECV);
    if (is_ud) {
      EXPECT_EQ(wc.byte_len, 40 + st.len) << "UD: 40-byte GRH plus the payload";
      EXPECT_TRUE(wc.wc_flags & IBV_WC_GRH);
      EXPECT_EQ(wc.src_qp, ud.snd->qp_num);
      EXPECT_EQ(base[kSlot * i + 20] >> 4, 4) << "IPv4 header in the GRH's last 20 bytes";
      EXPECT_EQ(mismatch(base + kSlot * i + 40, st.len, 70 + i), -1) << "step " << i;
    } else {
      EXPECT_EQ(wc.byte_len, st.len);
      EXPECT_EQ(mismatch(base + kSlot * i, st.len, 70 + i), -1) << "step " << i;
    }
    // Nothing landed on the other receivers' CQs.
    for (SrqConn* other : {&rc, &uc, &ud})
      if (other != st.c) { EXPECT_TRUE(cq_empty(other->rcq)); }
  }
}

TEST_F(SrqTest, SixteenRcQpsShareOneSrqInOrderPerQp) {
  constexpr uint32_t kQps = 16, kMsgs = 32, kSlot = 4096;
  constexpr uint32_t kTotal = kQps * kMsgs;
  // Every 4th message spans three packets (MTU 1024), so multi-packet
  // messages of different QPs interleave on the SRQ.
  auto len_of = [](uint32_t seq) { return seq % 4 == 3 ? 2500u : 64u + seq; };
  ibv_srq_init_attr init{};
  ibv_srq* srq = make_srq(kTotal, 1, nullptr, &init);
  ASSERT_NE(srq, nullptr);
  ibv_cq* scq = make_cq(int(kTotal) + 16);
  ASSERT_NE(scq, nullptr);
  std::vector<SrqConn> conns;
  for (uint32_t i = 0; i < kQps; ++i) {
    conns.push_back(connect_to_srq(IBV_QPT_RC, srq, nullptr, scq));
    ASSERT_FALSE(HasFailure());
  }
  ibv_mr* dst = reg_buffer(size_t(kSlot) * kTotal, IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* src = reg_buffer(size_t(kSlot) * kTotal, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(dst && src);
  auto* d = static_cast<uint8_t*>(dst->addr);
  auto* s = static_cast<uint8_t*>(src->addr);
  for (uint32_t w = 0; w < kTotal; ++w) {
    ibv_sge sg = sge_of(dst, size_t(kSlot) * w, kSlot);
    ASSERT_EQ(post_srq_one(srq, w, &sg, 1), 0) << "WR " << w;
  }
  // Round robin over the QPs: message `seq` of QP i is slot i * kMsgs + seq
  // of src, tagged with (i, seq) in its first 8 bytes.
  for (uint32_t seq = 0; seq < kMsgs; ++seq)
    for (uint32_t i = 0; i < kQps; ++i) {
      const size_t off = size_t(kSlot) * (i * kMsgs + seq);
      fill(s + off, len_of(seq), i * kMsgs + seq);
      std::memcpy(s + off, &i, 4);
      std::memcpy(s + off + 4, &seq, 4);
      ibv_sge sg = sge_of(src, off, len_of(seq));
      ASSERT_EQ(post_send(conns[i].snd, (uint64_t(i) << 32) | seq, IBV_WR_SEND, &sg, 1), 0);
    }
  std::vector<ibv_wc> sent = poll_n(scq, kTotal, 30);
  ASSERT_EQ(sent.size(), kTotal) << "send completions";
  for (const ibv_wc& wc : sent) EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);

  std::set<uint64_t> used;
  for (uint32_t i = 0; i < kQps; ++i) {
    std::vector<ibv_wc> got = poll_n(conns[i].rcq, kMsgs, 10);
    ASSERT_EQ(got.size(), kMsgs) << "QP " << i << ": receive completions";
    EXPECT_TRUE(cq_empty(conns[i].rcq)) << "QP " << i << ": extra completions";
    uint64_t last_wr = 0;
    for (uint32_t seq = 0; seq < kMsgs; ++seq) {
      const ibv_wc& wc = got[seq];
      ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << "QP " << i << ": " << describe(wc);
      EXPECT_EQ(wc.qp_num, conns[i].rcv->qp_num) << "QP " << i;
      EXPECT_EQ(wc.opcode, IBV_WC_RECV);
      EXPECT_EQ(wc.byte_len, len_of(seq)) << "QP " << i << " message " << seq;
      ASSERT_LT(wc.wr_id, kTotal);
      EXPECT_TRUE(used.insert(wc.wr_id).second) << "SRQ WQE " << wc.wr_id << " completed twice";
      if (seq) { EXPECT_GT(wc.wr_id, last_wr) << "QP " << i << ": later message, earlier WQE"; }
      last_wr = wc.wr_id;
      const uint8_t* m = d + size_t(kSlot) * wc.wr_id;
      uint32_t tag_qp, tag_seq;
      std::memcpy(&tag_qp, m, 4);
      std::memcpy(&tag_seq, m + 4, 4);
      EXPECT_EQ(tag_qp, i) << "message landed on the wrong QP";
      EXPECT_EQ(tag_seq, seq) << "QP " << i << ": out of order";
      EXPECT_EQ(std::memcmp(m, s + size_t(kSlot) * (i * kMsgs + seq), len_of(seq)), 0)
          << "QP " << i << " message " << seq << ": payload differs";
    }
  }
  EXPECT_EQ(used.size(), size_t(kTotal)) << "every message once, every WQE once";
}

// Four threads post to one SRQ while a sender consumes it (an empty SRQ is
// RNR-NAKed and retried forever): every WQE completes exactly once, each
// poster's WQEs in the order it posted them.
TEST_F(SrqTest, ConcurrentPostersWhileConsumingLoseNothing) {
  constexpr uint32_t kThreads = 4, kPerThread = 100, kTotal = kThreads * kPerThread;
  ibv_srq* srq = make_srq(63);
  ASSERT_NE(srq, nullptr);
  ibv_cq* rcq = make_cq(int(kTotal) + 16);
  ASSERT_NE(rcq, nullptr);
  SrqConn c = connect_to_srq(IBV_QPT_RC, srq, rcq);
  ASSERT_FALSE(HasFailure());
  ibv_mr* mr = reg_buffer(64 * kThreads, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  std::atomic<int> post_errors{0};
  std::vector<std::thread> posters;
  for (uint32_t t = 0; t < kThreads; ++t)
    posters.emplace_back([&, t] {
      for (uint32_t i = 0; i < kPerThread;) {
        ibv_sge s = sge_of(mr, 64 * t, 64);
        const int rc = post_srq_one(srq, uint64_t(t) << 32 | i, &s, 1);
        if (rc == 0) {
          ++i;
        } else if (rc == ENOMEM) {
          std::this_thread::sleep_for(std::chrono::microseconds(200));  // full: wait for room
        } else {
          ++post_errors;
          return;
        }
        if (i % 16 == 0) std::this_thread::yield();
      }
    });
  // Sends in batches as the send queue allows.
  uint32_t sent = 0, done = 0;
  ibv_sge s = sge_of(mr, 0, 8);
  const auto end = deadline_after(30);
  while (done < kTotal && Clock::now() < end) {
    while (sent < kTotal && sent - done < 32) {
      if (post_send(c.snd, sent, IBV_WR_SEND, &s, 1) != 0) break;
      ++sent;
    }
    ibv_wc wc[16];
    const int n = ibv_poll_cq(c.scq, 16, wc);
    for (int k = 0; k < n; ++k) EXPECT_EQ(wc[k].status, IBV_WC_SUCCESS) << describe(wc[k]);
    if (n > 0) done += uint32_t(n);
  }
  for (std::thread& t : posters) t.join();
  EXPECT_EQ(post_errors.load(), 0);
  ASSERT_EQ(done, kTotal) << "send completions";
  std::vector<ibv_wc> got = poll_n(rcq, kTotal);
  ASSERT_EQ(got.size(), size_t(kTotal));
  std::set<uint64_t> seen;
  std::vector<int64_t> last(kThreads, -1);
  for (const ibv_wc& wc : got) {
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
    const uint32_t t = uint32_t(wc.wr_id >> 32), i = uint32_t(wc.wr_id);
    ASSERT_LT(t, kThreads);
    EXPECT_TRUE(seen.insert(wc.wr_id).second) << "WQE " << t << "/" << i << " completed twice";
    EXPECT_EQ(int64_t(i), last[t] + 1) << "poster " << t << ": its WQEs out of order";
    last[t] = i;
  }
  EXPECT_EQ(seen.size(), size_t(kTotal));
  EXPECT_TRUE(cq_empty(rcq));
}

// ===========================================================================
// 6. XRC domains
// ===========================================================================

class XrcTest : public SrqTest {};

TEST_F(XrcTest, DeviceReportsXrcAndSrqLimits) {
  ibv_device_attr d{};
  ASSERT_EQ(ibv_query_device(ctx_, &d), 0);
  EXPECT_TRUE(d.device_cap_flags & IBV_DEVICE_XRC);
  EXPECT_TRUE(d.device_cap_flags & IBV_DEVICE_SRQ_RESIZE);
  EXPECT_GT(d.max_srq, 0);
  EXPECT_GT(d.max_srq_wr, 0);
  EXPECT_GT(d.max_srq_sge, 0);
  ibv_device_attr_ex x{};
  ASSERT_EQ(ibv_query_device_ex(ctx_, nullptr, &x), 0);
  EXPECT_EQ(x.orig_attr.max_srq, d.max_srq);
  EXPECT_EQ(x.orig_attr.max_srq_wr, d.max_srq_wr);
  EXPECT_EQ(x.orig_attr.max_srq_sge, d.max_srq_sge);
  EXPECT_TRUE(x.orig_attr.device_cap_flags & IBV_DEVICE_XRC);
}

// device_cap_flags_ex is the 64-bit superset of orig_attr.device_cap_flags
// (H:verbs.h; the kernel fills both from one value, and libibverbs copies
// resp.device_cap_flags_ex): it must carry IBV_DEVICE_XRC and SRQ_RESIZE too.
TEST_F(XrcTest, DeviceCapFlagsExIsASupersetOfTheBaseFlags) {
  ibv_device_attr_ex x{};
  ASSERT_EQ(ibv_query_device_ex(ctx_, nullptr, &x), 0);
  EXPECT_EQ(x.device_cap_flags_ex & 0xffffffffull, uint64_t(x.orig_attr.device_cap_flags));
  EXPECT_TRUE(x.device_cap_flags_ex & IBV_DEVICE_XRC);
  EXPECT_TRUE(x.device_cap_flags_ex & IBV_DEVICE_SRQ_RESIZE);
}

TEST_F(XrcTest, OpenXrcdRules) {
  // fd -1: a new private domain each time.
  ibv_xrcd* p1 = open_xrcd(-1, 0);
  ibv_xrcd* p2 = open_xrcd(-1, O_CREAT);
  ASSERT_NE(p1, nullptr) << std::strerror(errno);
  ASSERT_NE(p2, nullptr) << std::strerror(errno);
  EXPECT_NE(p1, p2);
  EXPECT_EQ(p1->context, ctx_);

  const std::string path = temp_file();
  const int fd = open_file(path);
  ASSERT_GE(fd, 0);
  errno = 0;
  EXPECT_EQ(open_xrcd(fd, 0), nullptr);
  EXPECT_EQ(errno, EAGAIN) << "no domain for the file and no O_CREAT";
  ibv_xrcd* f1 = open_xrcd(fd, O_CREAT);
  ASSERT_NE(f1, nullptr) << std::strerror(errno);
  errno = 0;
  EXPECT_EQ(open_xrcd(fd, O_CREAT | O_EXCL), nullptr);
  EXPECT_EQ(errno, EINVAL) << "O_CREAT|O_EXCL on an existing domain";
  ibv_xrcd* f2 = open_xrcd(fd, 0);
  EXPECT_NE(f2, nullptr) << "the domain exists now: " << std::strerror(errno);
  // Another fd on the same inode (a hard link) finds it too.
  const std::string link_path = path + "-link";
  ASSERT_EQ(link(path.c_str(), link_path.c_str()), 0) << std::strerror(errno);
  defer([link_path] { unlink(link_path.c_str()); });
  const int fd2 = open_file(link_path);
  ibv_xrcd* f3 = open_xrcd(fd2, 0);
  EXPECT_NE(f3, nullptr) << "same inode through a link: " << std::strerror(errno);

  // comp_mask rules (libibverbs' ibv_cmd_open_xrcd).
  ibv_xrcd_init_attr a{};
  a.fd = fd;
  a.oflags = O_CREAT;
  a.comp_mask = IBV_XRCD_INIT_ATTR_FD;
  errno = 0;
  ibv_xrcd* x = ibv_open_xrcd(ctx_, &a);
  EXPECT_EQ(x, nullptr);
  EXPECT_EQ(errno, EINVAL) << "OFLAGS bit missing";
  if (x) ibv_close_xrcd(x);
  a.comp_mask = IBV_XRCD_INIT_ATTR_OFLAGS;
  errno = 0;
  x = ibv_open_xrcd(ctx_, &a);
  EXPECT_EQ(x, nullptr);
  EXPECT_EQ(errno, EINVAL) << "FD bit missing";
  if (x) ibv_close_xrcd(x);
  a.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS | IBV_XRCD_INIT_ATTR_RESERVED;
  errno = 0;
  x = ibv_open_xrcd(ctx_, &a);
  EXPECT_EQ(x, nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP) << "unknown comp_mask bit";
  if (x) ibv_close_xrcd(x);

  // A bad fd: EBADF.
  int closed_fd = open(path.c_str(), O_RDONLY);
  ASSERT_GE(closed_fd, 0);
  close(closed_fd);
  errno = 0;
  EXPECT_EQ(open_xrcd(closed_fd, O_CREAT), nullptr);
  EXPECT_EQ(errno, EBADF);

  // Closing every handle frees the domain: the file has none again.
  disown(f1);
  disown(f2);
  disown(f3);
  EXPECT_EQ(ibv_close_xrcd(f1), 0);
  if (f2) { EXPECT_EQ(ibv_close_xrcd(f2), 0); }
  if (f3) { EXPECT_EQ(ibv_close_xrcd(f3), 0); }
  errno = 0;
  EXPECT_EQ(open_xrcd(fd, 0), nullptr) << "the last close must free the domain";
  EXPECT_EQ(errno, EAGAIN);
}

TEST_F(XrcTest, CloseXrcdWithObjectsAliveIsEbusy) {
  ibv_xrcd* xrcd = open_xrcd(-1, 0);
  ibv_cq* cq = make_cq();
  ASSERT_TRUE(xrcd && cq);
  ibv_srq* srq = make_xrc_srq(xrcd, cq, 16);
  ASSERT_NE(srq, nullptr) << std::strerror(errno);
  EXPECT_EQ(ibv_close_xrcd(xrcd), EBUSY) << "an XRC SRQ lives in it";
  // A target QP of the domain does not hold the SRQ (SEMANTICS.md 1.7).
  ibv_qp* tgt0 = make_xrc_tgt(xrcd);
  ASSERT_NE(tgt0, nullptr) << std::strerror(errno);
  disown(srq);
  ASSERT_EQ(ibv_destroy_srq(srq), 0) << "an XRC_RECV QP must not keep the SRQ alive";
  disown(tgt0);
  ASSERT_EQ(ibv_destroy_qp(tgt0), 0);
  ibv_qp* tgt = make_xrc_tgt(xrcd);
  ASSERT_NE(tgt, nullptr) << std::strerror(errno);
  EXPECT_EQ(ibv_close_xrcd(xrcd), EBUSY) << "an XRC_RECV QP lives in it";
  disown(tgt);
  ASSERT_EQ(ibv_destroy_qp(tgt), 0);
  disown(xrcd);
  EXPECT_EQ(ibv_close_xrcd(xrcd), 0);
}

// ===========================================================================
// 7. XRC SRQs and QPs: bad input
// ===========================================================================

TEST_F(XrcTest, XrcSrqNeedsDomainAndCq) {
  ibv_xrcd* xrcd = open_xrcd(-1, 0);
  ibv_cq* cq = make_cq();
  ASSERT_TRUE(xrcd && cq);
  struct Case {
    const char* what;
    uint32_t mask;
  } cases[] = {
      {"without the CQ bit", kSrqAttrMaskAll & ~IBV_SRQ_INIT_ATTR_CQ},
      {"without the XRCD bit", kSrqAttrMaskAll & ~IBV_SRQ_INIT_ATTR_XRCD},
      {"without the PD bit", kSrqAttrMaskAll & ~IBV_SRQ_INIT_ATTR_PD},
  };
  for (const Case& c : cases) {
    ibv_srq_init_attr_ex a{};
    a.attr.max_wr = 16;
    a.attr.max_sge = 1;
    a.comp_mask = c.mask;
    a.srq_type = IBV_SRQT_XRC;
    a.pd = pd_;
    a.xrcd = xrcd;
    a.cq = cq;
    errno = 0;
    ibv_srq* s = ibv_create_srq_ex(ctx_, &a);
    EXPECT_EQ(s, nullptr) << c.what;
    EXPECT_EQ(errno, EINVAL) << c.what << ": " << std::strerror(errno);
    if (s) ibv_destroy_srq(s);
  }
  // Nothing half-made: the domain and the CQ are free.
  disown(xrcd);
  EXPECT_EQ(ibv_close_xrcd(xrcd), 0);
}

TEST_F(XrcTest, XrcSrqCannotServeAnRcQp) {
  ibv_xrcd* xrcd = open_xrcd(-1, 0);
  ibv_cq* cq = make_cq();
  ASSERT_TRUE(xrcd && cq);
  ibv_srq* srq = make_xrc_srq(xrcd, cq, 16);
  ASSERT_NE(srq, nullptr) << std::strerror(errno);
  for (ibv_qp_type t : {IBV_QPT_RC, IBV_QPT_UD}) {
    errno = 0;
    ibv_qp* qp = make_srq_qp(t, cq, cq, srq);
    EXPECT_EQ(qp, nullptr) << "qp type " << t;
    EXPECT_EQ(errno, EINVAL) << std::strerror(errno);
    if (qp) {
      disown(qp);
      ibv_destroy_qp(qp);
    }
  }
  disown(srq);
  EXPECT_EQ(ibv_destroy_srq(srq), 0) << "a refused QP left a reference on the SRQ";
}

TEST_F(XrcTest, XrcQpCreationRules) {
  ibv_xrcd* xrcd = open_xrcd(-1, 0);
  ibv_cq* cq = make_cq();
  ASSERT_TRUE(xrcd && cq);
  // XRC_RECV needs its domain.
  ibv_qp_init_attr_ex a{};
  a.qp_type = IBV_QPT_XRC_RECV;
  a.comp_mask = IBV_QP_INIT_ATTR_PD;
  a.pd = pd_;
  a.xrcd = xrcd;
  errno = 0;
  ibv_qp* qp = ibv_create_qp_ex(ctx_, &a);
  EXPECT_EQ(qp, nullptr);
  EXPECT_EQ(errno, EINVAL) << "XRC_RECV without IBV_QP_INIT_ATTR_XRCD";
  if (qp) ibv_destroy_qp(qp);
  // XRC_SEND needs a PD.
  a = {};
  a.qp_type = IBV_QPT_XRC_SEND;
  a.send_cq = cq;
  a.cap.max_send_wr = 8;
  a.cap.max_send_sge = 1;
  a.comp_mask = 0;
  errno = 0;
  qp = ibv_create_qp_ex(ctx_, &a);
  EXPECT_EQ(qp, nullptr);
  EXPECT_EQ(errno, EINVAL) << "XRC_SEND without a PD";
  if (qp) ibv_destroy_qp(qp);

  // Good ones: an initiator has no receive queue, a target no queue at all.
  ibv_qp* ini = make_xrc_ini(cq);
  ASSERT_NE(ini, nullptr) << std::strerror(errno);
  EXPECT_EQ(ini->qp_type, IBV_QPT_XRC_SEND);
  EXPECT_EQ(ini->recv_cq, nullptr);
  EXPECT_EQ(ini->srq, nullptr);
  ibv_qp_attr qa{};
  ibv_qp_init_attr qi{};
  ASSERT_EQ(ibv_query_qp(ini, &qa, IBV_QP_CAP, &qi), 0);
  EXPECT_GE(qa.cap.max_send_wr, 64u);
  EXPECT_EQ(qa.cap.max_recv_wr, 0u) << "an initiator has no receive queue";
  EXPECT_EQ(qa.cap.max_recv_sge, 0u);
  ibv_qp* tgt = make_xrc_tgt(xrcd);
  ASSERT_NE(tgt, nullptr) << std::strerror(errno);
  EXPECT_EQ(tgt->qp_type, IBV_QPT_XRC_RECV);
  EXPECT_EQ(tgt->pd, nullptr);
  EXPECT_EQ(tgt->send_cq, nullptr);
  EXPECT_EQ(tgt->recv_cq, nullptr);
  EXPECT_NE(tgt->qp_num, ini->qp_num);
  ASSERT_EQ(connect_xrc(ini, gid_, tgt->qp_num), 0);
  ASSERT_EQ(connect_xrc(tgt, gid_, ini->qp_num), 0);
  // Neither posts receives; a target posts no sends.
  ibv_mr* mr = reg_buffer(64, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  ibv_sge s = sge_of(mr, 0, 64);
  ibv_recv_wr rwr{};
  rwr.sg_list = &s;
  rwr.num_sge = 1;
  ibv_recv_wr* rbad = nullptr;
  EXPECT_NE(ibv_post_recv(ini, &rwr, &rbad), 0);
  EXPECT_NE(ibv_post_recv(tgt, &rwr, &rbad), 0);
  ibv_send_wr swr{};
  swr.opcode = IBV_WR_SEND;
  swr.sg_list = &s;
  swr.num_sge = 1;
  ibv_send_wr* sbad = nullptr;
  EXPECT_NE(ibv_post_send(tgt, &swr, &sbad), 0);
}

TEST_F(XrcTest, OpenQpRules) {
  ibv_xrcd* xrcd = open_xrcd(-1, 0);
  ibv_cq* cq = make_cq();
  ASSERT_TRUE(xrcd && cq);
  ibv_qp* rc = make_qp(IBV_QPT_RC, cq, cq);
  ASSERT_NE(rc, nullptr);
  struct Case {
    const char* what;
    uint32_t comp_mask, qp_num;
    ibv_qp_type type;
    int err;
  } cases[] = {
      {"a QP number that does not exist",
       IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE, 0xfffff0,
       IBV_QPT_XRC_RECV, EINVAL},
      {"an RC QP's number",
       IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE, rc->qp_num,
       IBV_QPT_XRC_RECV, EINVAL},
      {"without the TYPE bit", IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD, 0xfffff0,
       IBV_QPT_XRC_RECV, EINVAL},
      {"unknown bit",
       IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE |
           IBV_QP_OPEN_ATTR_RESERVED,
       0xfffff0, IBV_QPT_XRC_RECV, EOPNOTSUPP},
  };
  for (const Case& c : cases) {
    ibv_qp_open_attr a{};
    a.comp_mask = c.comp_mask;
    a.qp_num = c.qp_num;
    a.xrcd = xrcd;
    a.qp_type = c.type;
    errno = 0;
    ibv_qp* qp = ibv_open_qp(ctx_, &a);
    EXPECT_EQ(qp, nullptr) << c.what;
    EXPECT_EQ(errno, c.err) << c.what << ": " << std::strerror(errno);
    if (qp) ibv_destroy_qp(qp);
  }
  // A target QP of another domain cannot be opened through this one.
  ibv_xrcd* other = open_xrcd(-1, 0);
  ASSERT_NE(other, nullptr);
  ibv_qp* tgt = make_xrc_tgt(other);
  ASSERT_NE(tgt, nullptr);
  ibv_qp_open_attr a{};
  a.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
  a.qp_num = tgt->qp_num;
  a.xrcd = xrcd;
  a.qp_type = IBV_QPT_XRC_RECV;
  errno = 0;
  ibv_qp* qp = ibv_open_qp(ctx_, &a);
  EXPECT_EQ(qp, nullptr) << "target QP of another domain";
  EXPECT_EQ(errno, EINVAL);
  if (qp) ibv_destroy_qp(qp);
}

// ===========================================================================
// 8. XRC traffic
// ===========================================================================

TEST_F(XrcTest, TwoInitiatorsDeliverIntoOneSrqLegacyAndWrApi) {
  // The SRQ and the targets are made through two handles on one file's
  // domain (one of them through a hard link): same inode, same domain.
  const std::string path = temp_file();
  const int fd = open_file(path);
  ibv_xrcd* xrcd = open_xrcd(fd, O_CREAT);
  ASSERT_NE(xrcd, nullptr) << std::strerror(errno);
  const std::string link_path = path + "-l";
  ASSERT_EQ(link(path.c_str(), link_path.c_str()), 0);
  defer([link_path] { unlink(link_path.c_str()); });
  ibv_xrcd* xrcd2 = open_xrcd(open_file(link_path), 0);
  ASSERT_NE(xrcd2, nullptr) << std::strerror(errno);

  ibv_cq* srq_cq = make_cq();
  ibv_cq* scq1 = make_cq();
  ibv_cq* scq2 = make_cq();
  ASSERT_TRUE(srq_cq && scq1 && scq2);
  ibv_srq* srq = make_xrc_srq(xrcd, srq_cq, 32);
  ASSERT_NE(srq, nullptr) << std::strerror(errno);
  uint32_t srqn = 0;
  ASSERT_EQ(ibv_get_srq_num(srq, &srqn), 0);
  ibv_qp *ini1, *tgt1, *ini2, *tgt2;
  xrc_pair(xrcd2, scq1, &ini1, &tgt1, false);
  ASSERT_FALSE(HasFailure());
  xrc_pair(xrcd, scq2, &ini2, &tgt2, true);
  ASSERT_FALSE(HasFailure());

  constexpr uint32_t kSlot = 4096;
  ibv_mr* dst = reg_buffer(kSlot * 8, IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* src = reg_buffer(kSlot * 8, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(dst && src);
  for (uint32_t i = 0; i < 8; ++i) {
    ibv_sge s = sge_of(dst, kSlot * i, kSlot);
    ASSERT_EQ(post_srq_one(srq, i, &s, 1), 0);
  }
  auto* d = static_cast<uint8_t*>(dst->addr);
  auto* sb = static_cast<uint8_t*>(src->addr);
  struct Msg {
    bool wr_api;
    uint32_t len;
    bool imm;
  } msgs[] = {{false, 100, false}, {true, 3000, false}, {false, 2500, true},
              {true, 1, true},     {false, 0, false},   {true, 1024, false}};
  for (uint32_t i = 0; i < 6; ++i) {
    const Msg& m = msgs[i];
    fill(sb + kSlot * i, m.len, 200 + i);
    ibv_sge s = sge_of(src, kSlot * i, m.len);
    ibv_qp* ini = m.wr_api ? ini2 : ini1;
    ibv_cq* scq = m.wr_api ? scq2 : scq1;
    if (m.wr_api) {
      ibv_qp_ex* x = ibv_qp_to_qp_ex(ini);
      ASSERT_NE(x, nullptr);
      ibv_wr_start(x);
      x->wr_id = 100 + i;
      x->wr_flags = IBV_SEND_SIGNALED;
      if (m.imm)
        ibv_wr_send_imm(x, htonl(0xabc000 + i));
      else
        ibv_wr_send(x);
      ibv_wr_set_xrc_srqn(x, srqn);
      ibv_wr_set_sge(x, s.lkey, s.addr, s.length);
      ASSERT_EQ(ibv_wr_complete(x), 0) << "message " << i;
    } else {
      ASSERT_EQ(post_xrc(ini, 100 + i, m.imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND, &s, m.len ? 1 : 0,
                         srqn, htonl(0xabc000 + i)),
                0)
          << "message " << i;
    }
    ibv_wc wc;
    VT_POLL_ONE(scq, &wc);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << "message " << i << ": " << describe(wc);
    EXPECT_EQ(wc.wr_id, 100u + i);
    EXPECT_EQ(wc.qp_num, ini->qp_num);
    VT_POLL_ONE(srq_cq, &wc);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << "message " << i << ": " << describe(wc);
    EXPECT_EQ(wc.wr_id, i) << "FIFO";
    EXPECT_EQ(wc.opcode, IBV_WC_RECV);
    EXPECT_EQ(wc.byte_len, m.len) << "message " << i;
    EXPECT_EQ(wc.qp_num, (m.wr_api ? tgt2 : tgt1)->qp_num) << "qp_num is the target QP's";
    if (m.imm) {
      EXPECT_TRUE(wc.wc_flags & IBV_WC_WITH_IMM);
      EXPECT_EQ(ntohl(wc.imm_data), 0xabc000u + i);
    } else {
      EXPECT_FALSE(wc.wc_flags & IBV_WC_WITH_IMM);
    }
    EXPECT_EQ(mismatch(d + kSlot * i, m.len, 200 + i), -1) << "message " << i;
  }
  // The initiators' CQs hold nothing else; receives went only to the SRQ's CQ.
  EXPECT_TRUE(drain_for(scq1, 50).empty());
  EXPECT_TRUE(cq_empty(scq2));
  EXPECT_TRUE(cq_empty(srq_cq));
}

// One XRC_RECV target QP serving two initiators. A target is connected to
// one initiator at a time (its responder keeps that initiator's PSNs, its
// ACKs go to dest_qp_num), so the initiators take turns: the target is
// re-connected (RESET -> RTS) between them. The first posts with the legacy
// remote_srqn, the second with ibv_wr_set_xrc_srqn; every receive completes
// on the SRQ's CQ with the one target's qp_num.
TEST_F(XrcTest, OneTargetServesTwoInitiatorsInTurn) {
  ibv_xrcd* xrcd = open_xrcd(-1, 0);
  ibv_cq* srq_cq = make_cq();
  ibv_cq* scq1 = make_cq();
  ibv_cq* scq2 = make_cq();
  ASSERT_TRUE(xrcd && srq_cq && scq1 && scq2);
  ibv_srq* srq = make_xrc_srq(xrcd, srq_cq, 16);
  ASSERT_NE(srq, nullptr) << std::strerror(errno);
  uint32_t srqn = 0;
  ASSERT_EQ(ibv_get_srq_num(srq, &srqn), 0);
  ibv_qp* ini1 = make_xrc_ini(scq1, false);
  ibv_qp* ini2 = make_xrc_ini(scq2, true);
  ibv_qp* tgt = make_xrc_tgt(xrcd);
  ASSERT_TRUE(ini1 && ini2 && tgt) << std::strerror(errno);
  ASSERT_EQ(connect_xrc(ini1, gid_, tgt->qp_num, 100, 0), 0);
  ASSERT_EQ(connect_xrc(tgt, gid_, ini1->qp_num, 0, 100), 0);
  ibv_mr* dst = reg_buffer(1024 * 4, IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* src = reg_buffer(1024 * 4, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(dst && src);
  for (uint32_t i = 0; i < 4; ++i) {
    ibv_sge r = sge_of(dst, 1024 * i, 1024);
    ASSERT_EQ(post_srq_one(srq, i, &r, 1), 0);
    fill(static_cast<uint8_t*>(src->addr) + 1024 * i, 600 + i, 400 + i);
  }
  auto expect_recv = [&](uint32_t i, bool imm) {
    ibv_wc wc;
    VT_POLL_ONE(srq_cq, &wc);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << "message " << i << ": " << describe(wc);
    EXPECT_EQ(wc.wr_id, i);
    EXPECT_EQ(wc.qp_num, tgt->qp_num);
    EXPECT_EQ(wc.opcode, IBV_WC_RECV);
    EXPECT_EQ(wc.byte_len, 600 + i);
    EXPECT_EQ(bool(wc.wc_flags & IBV_WC_WITH_IMM), imm);
    if (imm) {
      EXPECT_EQ(ntohl(wc.imm_data), 4000 + i);
    }
    EXPECT_EQ(mismatch(static_cast<uint8_t*>(dst->addr) + 1024 * i, 600 + i, 400 + i), -1);
  };
  for (uint32_t i = 0; i < 2; ++i) {
    ibv_sge s = sge_of(src, 1024 * i, 600 + i);
    ASSERT_EQ(post_xrc(ini1, i, i ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND, &s, 1, srqn, htonl(4000 + i)),
              0);
    ibv_wc wc;
    VT_POLL_ONE(scq1, &wc);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
    expect_recv(i, i == 1);
  }
  ASSERT_FALSE(HasFailure());
  // The target turns to the second initiator.
  ibv_qp_attr reset{};
  reset.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(ibv_modify_qp(tgt, &reset, IBV_QP_STATE), 0);
  ASSERT_EQ(connect_xrc(ini2, gid_, tgt->qp_num, 500, 0), 0);
  ASSERT_EQ(connect_xrc(tgt, gid_, ini2->qp_num, 0, 500), 0);
  ibv_qp_ex* x = ibv_qp_to_qp_ex(ini2);
  ASSERT_NE(x, nullptr);
  for (uint32_t i = 2; i < 4; ++i) {
    ibv_wr_start(x);
    x->wr_id = i;
    x->wr_flags = IBV_SEND_SIGNALED;
    if (i == 3)
      ibv_wr_send_imm(x, htonl(4000 + i));
    else
      ibv_wr_send(x);
    ibv_wr_set_xrc_srqn(x, srqn);
    ibv_wr_set_sge(x, src->lkey, addr_of(src, 1024 * i), 600 + i);
    ASSERT_EQ(ibv_wr_complete(x), 0);
    ibv_wc wc;
    VT_POLL_ONE(scq2, &wc);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
    EXPECT_EQ(wc.qp_num, ini2->qp_num);
    expect_recv(i, i == 3);
  }
  EXPECT_TRUE(cq_empty(scq1));
}

TEST_F(XrcTest, RdmaWriteAndReadThroughATargetConsumeNoSrqWqe) {
  ibv_xrcd* xrcd = open_xrcd(-1, 0);
  ibv_cq* srq_cq = make_cq();
  ibv_cq* scq = make_cq();
  ASSERT_TRUE(xrcd && srq_cq && scq);
  ibv_srq* srq = make_xrc_srq(xrcd, srq_cq, 8);
  ASSERT_NE(srq, nullptr);
  uint32_t srqn = 0;
  ASSERT_EQ(ibv_get_srq_num(srq, &srqn), 0);
  ibv_qp *ini, *tgt;
  xrc_pair(xrcd, scq, &ini, &tgt);
  ASSERT_FALSE(HasFailure());
  ibv_mr* remote = reg_buffer(8192, kRw, 0);
  ibv_mr* local = reg_buffer(8192, IBV_ACCESS_LOCAL_WRITE, 0);
  ASSERT_TRUE(remote && local);
  ibv_sge rs = sge_of(remote, 4096, 64);
  ASSERT_EQ(post_srq_one(srq, 1, &rs, 1), 0);
  fill(local->addr, 3000, 5);
  ibv_sge s = sge_of(local, 0, 3000);
  ASSERT_EQ(post_xrc(ini, 1, IBV_WR_RDMA_WRITE, &s, 1, srqn, 0, addr_of(remote), remote->rkey), 0);
  ibv_wc wc;
  VT_POLL_ONE(scq, &wc);
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(mismatch(remote->addr, 3000, 5), -1);
  ibv_sge back = sge_of(local, 4096, 3000);
  ASSERT_EQ(post_xrc(ini, 2, IBV_WR_RDMA_READ, &back, 1, srqn, 0, addr_of(remote), remote->rkey), 0);
  VT_POLL_ONE(scq, &wc);
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(mismatch(static_cast<uint8_t*>(local->addr) + 4096, 3000, 5), -1);
  EXPECT_TRUE(drain_for(srq_cq, 50).empty()) << "WRITE and READ consume no receive";
  // WRITE with immediate does consume one.
  ASSERT_EQ(post_xrc(ini, 3, IBV_WR_RDMA_WRITE_WITH_IMM, &s, 1, srqn, htonl(77), addr_of(remote),
                     remote->rkey),
            0);
  VT_POLL_ONE(scq, &wc);
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  VT_POLL_ONE(srq_cq, &wc);
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(ntohl(wc.imm_data), 77u);
  EXPECT_EQ(wc.qp_num, tgt->qp_num);
}

TEST_F(XrcTest, SendNamingAWrongSrqIsRemoteInvalidRequest) {
  ibv_xrcd* xrcd = open_xrcd(-1, 0);
  ibv_xrcd* other = open_xrcd(-1, 0);
  ibv_cq* srq_cq = make_cq();
  ASSERT_TRUE(xrcd && other && srq_cq);
  ibv_srq* srq = make_xrc_srq(xrcd, srq_cq, 8);
  ibv_srq* foreign = make_xrc_srq(other, srq_cq, 8);  // another domain
  ibv_srq* basic = make_srq(8);                       // not an XRC SRQ
  ASSERT_TRUE(srq && foreign && basic);
  uint32_t srqn, foreign_n, basic_n;
  ASSERT_EQ(ibv_get_srq_num(srq, &srqn), 0);
  ASSERT_EQ(ibv_get_srq_num(foreign, &foreign_n), 0);
  ASSERT_EQ(ibv_get_srq_num(basic, &basic_n), 0);
  ibv_mr* mr = reg_buffer(4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  for (ibv_srq* s : {srq, foreign, basic}) {
    ibv_sge sg = sge_of(mr, 0, 256);
    ASSERT_EQ(post_srq_one(s, 1, &sg, 1), 0);
  }
  struct Case {
    const char* what;
    uint32_t n;
  } cases[] = {{"a number no SRQ has", (srqn + 4000) & 0xffffff},
               {"an XRC SRQ of another domain", foreign_n},
               {"a basic SRQ", basic_n}};
  for (const Case& c : cases) {
    ibv_cq* scq = make_cq();
    ASSERT_NE(scq, nullptr);
    ibv_qp *ini, *tgt;
    xrc_pair(xrcd, scq, &ini, &tgt);
    ASSERT_FALSE(HasFailure());
    ibv_sge s = sge_of(mr, 1024, 64);
    ASSERT_EQ(post_xrc(ini, 9, IBV_WR_SEND, &s, 1, c.n), 0);
    ibv_wc wc;
    ASSERT_TRUE(poll_one(scq, &wc)) << c.what << ": no send completion";
    EXPECT_EQ(wc.status, IBV_WC_REM_INV_REQ_ERR) << c.what << ": " << describe(wc);
    EXPECT_EQ(wc.wr_id, 9u);
    EXPECT_EQ(qp_state(ini), IBV_QPS_ERR) << c.what;
  }
  // No receive was consumed anywhere.
  EXPECT_TRUE(drain_for(srq_cq, 50).empty());
  // The right SRQ still works through a fresh pair.
  ibv_cq* scq = make_cq();
  ibv_qp *ini, *tgt;
  xrc_pair(xrcd, scq, &ini, &tgt);
  ASSERT_FALSE(HasFailure());
  ibv_sge s = sge_of(mr, 1024, 64);
  ASSERT_EQ(post_xrc(ini, 10, IBV_WR_SEND, &s, 1, srqn), 0);
  ibv_wc wc;
  VT_POLL_ONE(scq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  VT_POLL_ONE(srq_cq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(wc.qp_num, tgt->qp_num);
}

TEST_F(XrcTest, EmptyXrcSrqIsReceiverNotReadyThenDelivers) {
  ibv_xrcd* xrcd = open_xrcd(-1, 0);
  ibv_cq* srq_cq = make_cq();
  ibv_cq* scq = make_cq();
  ASSERT_TRUE(xrcd && srq_cq && scq);
  ibv_srq* srq = make_xrc_srq(xrcd, srq_cq, 8);
  ASSERT_NE(srq, nullptr);
  uint32_t srqn = 0;
  ASSERT_EQ(ibv_get_srq_num(srq, &srqn), 0);
  ibv_qp *ini, *tgt;
  xrc_pair(xrcd, scq, &ini, &tgt);  // rnr_retry 7: retried forever
  ASSERT_FALSE(HasFailure());
  ibv_mr* mr = reg_buffer(4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  fill(mr->addr, 500, 9);
  ibv_sge s = sge_of(mr, 0, 500);
  ASSERT_EQ(post_xrc(ini, 1, IBV_WR_SEND, &s, 1, srqn), 0);
  EXPECT_TRUE(drain_for(scq, 100).empty()) << "completed with nothing to receive into";
  EXPECT_EQ(qp_state(ini), IBV_QPS_RTS);
  ibv_sge r = sge_of(mr, 2048, 1024);
  ASSERT_EQ(post_srq_one(srq, 5, &r, 1), 0);
  ibv_wc wc;
  VT_POLL_ONE(srq_cq, &wc);
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(wc.wr_id, 5u);
  EXPECT_EQ(wc.qp_num, tgt->qp_num);
  EXPECT_EQ(mismatch(static_cast<uint8_t*>(mr->addr) + 2048, 500, 9), -1);
  VT_POLL_ONE(scq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
}

// The kernel's ib_open_qp (K:core/verbs.c) does not care which process
// asks: the creator may open its own target QP too, and gets a second handle
// on the same QP.
TEST_F(XrcTest, OpenQpOfOwnTargetGivesASecondHandle) {
  ibv_xrcd* xrcd = open_xrcd(-1, 0);
  ibv_cq* srq_cq = make_cq();
  ibv_cq* scq = make_cq();
  ASSERT_TRUE(xrcd && srq_cq && scq);
  ibv_qp *ini, *tgt;
  xrc_pair(xrcd, scq, &ini, &tgt);
  ASSERT_FALSE(HasFailure());
  ibv_qp_open_attr oa{};
  oa.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
  oa.qp_num = tgt->qp_num;
  oa.xrcd = xrcd;
  oa.qp_type = IBV_QPT_XRC_RECV;
  ibv_qp* opened = ibv_open_qp(ctx_, &oa);
  ASSERT_NE(opened, nullptr) << std::strerror(errno);
  own(opened, "opened qp", [opened] { return ibv_destroy_qp(opened); });
  EXPECT_NE(opened, tgt);
  EXPECT_EQ(opened->qp_num, tgt->qp_num);
  EXPECT_EQ(qp_state(opened), IBV_QPS_RTS);
  disown(opened);
  EXPECT_EQ(ibv_destroy_qp(opened), 0);
  EXPECT_EQ(qp_state(tgt), IBV_QPS_RTS) << "dropping the second handle left the QP";
}

// An XRC SRQ (and then its CQ) destroyed while a long message is being
// received into one of its WQEs through a target QP (targets do not hold
// SRQs, so the destroy succeeds). Whatever becomes of the message, its
// completion must not appear on a CQ created afterwards, which the device is
// free to give the destroyed CQ's number: that CQ never had anything to do
// with the SRQ (with two processes, it belongs to another client).
TEST_F(XrcTest, SrqDestroyedMidMessageCompletesOnNoOtherCq) {
  constexpr size_t kLen = 32u << 20;
  ibv_xrcd* xrcd = open_xrcd(-1, 0);
  ibv_cq* scq = make_cq();
  ASSERT_TRUE(xrcd && scq);
  ibv_cq* srq_cq = ibv_create_cq(ctx_, 16, nullptr, nullptr, 0);
  ASSERT_NE(srq_cq, nullptr);
  ibv_srq_init_attr_ex sa{};
  sa.attr.max_wr = 4;
  sa.attr.max_sge = 1;
  sa.comp_mask = kSrqAttrMaskAll;
  sa.srq_type = IBV_SRQT_XRC;
  sa.pd = pd_;
  sa.xrcd = xrcd;
  sa.cq = srq_cq;
  ibv_srq* srq = ibv_create_srq_ex(ctx_, &sa);
  ASSERT_NE(srq, nullptr) << std::strerror(errno);
  uint32_t srqn = 0;
  ASSERT_EQ(ibv_get_srq_num(srq, &srqn), 0);
  ibv_qp *ini, *tgt;
  xrc_pair(xrcd, scq, &ini, &tgt);
  ASSERT_FALSE(HasFailure());
  ibv_mr* src = reg_buffer(kLen, IBV_ACCESS_LOCAL_WRITE, 0x5a);
  ibv_mr* dst = reg_buffer(kLen, IBV_ACCESS_LOCAL_WRITE, 0);
  ASSERT_TRUE(src && dst);
  ibv_sge r = sge_of(dst, 0, uint32_t(kLen));
  ASSERT_EQ(post_srq_one(srq, 0, &r, 1), 0);
  ibv_sge s = sge_of(src, 0, uint32_t(kLen));
  ASSERT_EQ(post_xrc(ini, 1, IBV_WR_SEND, &s, 1, srqn), 0);
  auto* d = static_cast<volatile uint8_t*>(dst->addr);
  const auto end = deadline_after(kWaitSeconds);
  while (d[0] == 0 && Clock::now() < end) {
  }
  ASSERT_NE(d[0], 0) << "the message did not start";
  const bool finished = d[kLen - 1] != 0;
  ASSERT_EQ(ibv_destroy_srq(srq), 0) << "a target QP does not hold the SRQ";
  ASSERT_EQ(ibv_destroy_cq(srq_cq), 0) << "the SRQ is gone: its CQ is free";
  ibv_cq* fresh = make_cq();
  ASSERT_NE(fresh, nullptr);
  if (finished) GTEST_SKIP() << "the message completed before the destroy: nothing to check";
  ibv_wc wc;
  ASSERT_TRUE(poll_one(scq, &wc, 10)) << "no send completion";
  std::vector<ibv_wc> stray = drain_for(fresh, 200);
  EXPECT_TRUE(stray.empty()) << "the destroyed SRQ's receive completed on a new CQ: "
                             << describe(stray[0]);
  // The device is still sound: a new SRQ and pair work.
  ibv_cq* cq2 = make_cq();
  ASSERT_NE(cq2, nullptr);
  ibv_srq* srq2 = make_xrc_srq(xrcd, cq2, 4);
  ASSERT_NE(srq2, nullptr);
  uint32_t srqn2 = 0;
  ASSERT_EQ(ibv_get_srq_num(srq2, &srqn2), 0);
  ibv_qp *ini2, *tgt2;
  xrc_pair(xrcd, scq, &ini2, &tgt2);
  ASSERT_FALSE(HasFatalFailure());
  ibv_sge r2 = sge_of(dst, 0, 64);
  ASSERT_EQ(post_srq_one(srq2, 5, &r2, 1), 0);
  ibv_sge s2 = sge_of(src, 0, 64);
  ASSERT_EQ(post_xrc(ini2, 6, IBV_WR_SEND, &s2, 1, srqn2), 0);
  VT_POLL_ONE(cq2, &wc);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(wc.wr_id, 5u);
}

TEST_F(XrcTest, DestroyingTheSrqCqIsEbusyWhileTheSrqExists) {
  ibv_xrcd* xrcd = open_xrcd(-1, 0);
  ASSERT_NE(xrcd, nullptr);
  ibv_cq* cq = ibv_create_cq(ctx_, 16, nullptr, nullptr, 0);
  ASSERT_NE(cq, nullptr);
  ibv_srq* srq = make_xrc_srq(xrcd, cq, 8);
  ASSERT_NE(srq, nullptr) << std::strerror(errno);
  EXPECT_EQ(ibv_destroy_cq(cq), EBUSY);
  disown(srq);
  ASSERT_EQ(ibv_destroy_srq(srq), 0);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
}

// ===========================================================================
// 9. One domain, two processes (the child is this binary: --xrc-child)
// ===========================================================================

bool write_all(int fd, const void* p, size_t n) { return write(fd, p, n) == ssize_t(n); }

bool read_all(int fd, void* p, size_t n, int timeout_ms) {
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
uint32_t child_seed(uint32_t k) { return 300 + k; }

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

TEST_F(XrcShare, ChildProcessSrqReceivesThroughParentsTargetAndOpensIt) {
  const std::string path = temp_file();
  ibv_xrcd* xrcd = open_xrcd(open_file(path), O_CREAT);
  ASSERT_NE(xrcd, nullptr) << std::strerror(errno);
  ChildHello hello{};
  start_child(path, &hello);
  ASSERT_FALSE(HasFailure());

  // The parent's initiator and target; the target lives in the shared
  // domain, the SRQ its messages name is the child's.
  ibv_cq* scq = make_cq();
  ASSERT_NE(scq, nullptr);
  ibv_qp *ini, *tgt;
  xrc_pair(xrcd, scq, &ini, &tgt);
  ASSERT_FALSE(HasFailure());
  send_to_child(ini, scq, hello.srqn, 0, kChildMsgs);
  ASSERT_FALSE(HasFailure());
  const ParentGo go{tgt->qp_num, ini->qp_num, kChildMsgs, kChildLen};
  ASSERT_TRUE(write_all(to_child_, &go, sizeof(go)));

  ChildReport rep{};
  ASSERT_TRUE(read_all(from_child_, &rep, sizeof(rep), 15000)) << "no report from the child";
  EXPECT_EQ(rep.received, kChildMsgs) << "on the child's SRQ CQ: " << rep.first_problem;
  EXPECT_EQ(rep.good, kChildMsgs) << rep.first_problem;
  EXPECT_EQ(rep.open_errno, 0) << "ibv_open_qp of the parent's target in the child: "
                               << std::strerror(rep.open_errno);
  EXPECT_EQ(rep.query_err, 0) << "ibv_query_qp through the opened handle";
  // The same QP seen from both processes.
  ibv_qp_attr a{};
  ibv_qp_init_attr ia{};
  ASSERT_EQ(ibv_query_qp(tgt, &a, IBV_QP_STATE | IBV_QP_DEST_QPN | IBV_QP_PATH_MTU | IBV_QP_RQ_PSN,
                         &ia),
            0);
  EXPECT_EQ(a.qp_state, IBV_QPS_RTS);
  if (rep.open_errno == 0 && rep.query_err == 0) {
    EXPECT_EQ(rep.state, uint32_t(a.qp_state));
    EXPECT_EQ(rep.dest_qpn, a.dest_qp_num);
    EXPECT_EQ(rep.dest_qpn, ini->qp_num);
    EXPECT_EQ(rep.path_mtu, uint32_t(a.path_mtu));
    EXPECT_EQ(rep.rq_psn, a.rq_psn);
    EXPECT_EQ(rep.qp_type, uint32_t(IBV_QPT_XRC_RECV));
  }
  EXPECT_EQ(finish_child(), 0) << "the child's exit status (non-zero: a release failed)";

  // The child's handles are gone; the parent's target still stands. A send
  // to the SRQ the child took with it is an invalid request.
  EXPECT_EQ(qp_state(tgt), IBV_QPS_RTS);
  ibv_sge s = sge_of(src_, 0, 16);
  ASSERT_EQ(post_xrc(ini, 99, IBV_WR_SEND, &s, 1, hello.srqn), 0);
  ibv_wc wc;
  VT_POLL_ONE(scq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_REM_INV_REQ_ERR) << "SRQ of an exited process: " << describe(wc);
}

// SEMANTICS.md 2.4: the creator's ibv_destroy_qp drops its handle; the
// target QP lives on for the process that opened it, and keeps delivering.
TEST_F(XrcShare, TargetQpOutlivesItsCreatorWhileOpenedElsewhere) {
  const std::string path = temp_file();
  ibv_xrcd* xrcd = open_xrcd(open_file(path), O_CREAT);
  ASSERT_NE(xrcd, nullptr) << std::strerror(errno);
  ChildHello hello{};
  start_child(path, &hello);
  ASSERT_FALSE(HasFailure());
  ibv_cq* scq = make_cq();
  ASSERT_NE(scq, nullptr);
  ibv_qp *ini, *tgt;
  xrc_pair(xrcd, scq, &ini, &tgt);
  ASSERT_FALSE(HasFailure());
  const ParentGo go{tgt->qp_num, ini->qp_num, 0, kChildLen};
  ASSERT_TRUE(write_all(to_child_, &go, sizeof(go)));
  ChildReport rep{};
  ASSERT_TRUE(read_all(from_child_, &rep, sizeof(rep), 15000));
  ASSERT_EQ(rep.open_errno, 0) << std::strerror(rep.open_errno);

  disown(tgt);
  ASSERT_EQ(ibv_destroy_qp(tgt), 0) << "the creator drops its handle";
  send_to_child(ini, scq, hello.srqn, 0, kChildMsgs);
  ASSERT_FALSE(HasFailure()) << "the target QP died with its creator's handle";
  const char more = 'M';
  const ParentGo go2{go.tgt_qpn, go.ini_qpn, kChildMsgs, kChildLen};
  ASSERT_TRUE(write_all(to_child_, &more, 1));
  ASSERT_TRUE(write_all(to_child_, &go2, sizeof(go2)));
  ChildStatus st{};
  ASSERT_TRUE(read_all(from_child_, &st, sizeof(st), 15000));
  EXPECT_EQ(st.received, kChildMsgs) << st.first_problem;
  EXPECT_EQ(st.good, kChildMsgs) << st.first_problem;
  EXPECT_EQ(st.query_err, 0);
  EXPECT_EQ(st.state, uint32_t(IBV_QPS_RTS));
  EXPECT_EQ(finish_child(), 0);
}

// SEMANTICS.md 2.2 / K:core/uverbs_cmd.c (ib_uverbs_open_qp takes a reference
// on the domain handle): ibv_close_xrcd is EBUSY while a QP opened through
// that handle exists.
TEST_F(XrcShare, CloseXrcdWithAnOpenedQpIsEbusy) {
  const std::string path = temp_file();
  ibv_xrcd* xrcd = open_xrcd(open_file(path), O_CREAT);
  ASSERT_NE(xrcd, nullptr) << std::strerror(errno);
  ChildHello hello{};
  start_child(path, &hello);
  ASSERT_FALSE(HasFailure());
  ibv_cq* scq = make_cq();
  ASSERT_NE(scq, nullptr);
  ibv_qp *ini, *tgt;
  xrc_pair(xrcd, scq, &ini, &tgt);
  ASSERT_FALSE(HasFailure());
  const ParentGo go{tgt->qp_num, ini->qp_num, 0, 0};  // no messages
  ASSERT_TRUE(write_all(to_child_, &go, sizeof(go)));
  ChildReport rep{};
  ASSERT_TRUE(read_all(from_child_, &rep, sizeof(rep), 15000));
  ASSERT_EQ(rep.open_errno, 0) << std::strerror(rep.open_errno);
  EXPECT_EQ(rep.close_busy_err, EBUSY)
      << "ibv_close_xrcd of the handle the QP was opened through: "
      << std::strerror(rep.close_busy_err);
  EXPECT_EQ(finish_child(), 0);
}

// A process destroys its XRC SRQ and the SRQ's CQ while a long message from
// another process is being received into it (through that process's target
// QP, which does not hold the SRQ). Whatever becomes of the message, its
// completion must not land on a CQ of the other client, which the engine is
// free to give the destroyed CQ's number; and the engine must carry on.
TEST_F(XrcShare, SrqDestroyedMidMessageByItsOwnerDisturbsNoOtherClient) {
  constexpr uint32_t kLen = 32u << 20;  // the child's receive buffer is as big
  const std::string path = temp_file();
  ibv_xrcd* xrcd = open_xrcd(open_file(path), O_CREAT);
  ASSERT_NE(xrcd, nullptr) << std::strerror(errno);
  ChildHello hello{};
  start_child(path, &hello, "big");
  ASSERT_FALSE(HasFailure());
  ibv_cq* scq = make_cq();
  ASSERT_NE(scq, nullptr);
  ibv_qp *ini, *tgt;
  xrc_pair(xrcd, scq, &ini, &tgt);
  ASSERT_FALSE(HasFailure());
  ibv_mr* src = reg_buffer(kLen, IBV_ACCESS_LOCAL_WRITE, 0x5a);
  ASSERT_NE(src, nullptr);
  ibv_sge s = sge_of(src, 0, kLen);
  ASSERT_EQ(post_xrc(ini, 1, IBV_WR_SEND, &s, 1, hello.srqn), 0);
  struct {
    char code;
    int32_t destroy_srq, destroy_cq;
  } st{};
  ASSERT_TRUE(read_all(from_child_, &st, sizeof(st), 10000)) << "the child saw no data arrive";
  if (st.code == 'F') GTEST_SKIP() << "the message completed before the destroy: nothing to check";
  ASSERT_EQ(st.code, 'S');
  EXPECT_EQ(st.destroy_srq, 0) << "a target QP does not hold the SRQ";
  EXPECT_EQ(st.destroy_cq, 0);
  std::vector<ibv_cq*> fresh;
  for (int i = 0; i < 4; ++i) {
    fresh.push_back(make_cq());
    ASSERT_NE(fresh.back(), nullptr);
  }
  ibv_wc wc;
  ASSERT_TRUE(poll_one(scq, &wc, 10)) << "no send completion";
  for (ibv_cq* cq : fresh) {
    std::vector<ibv_wc> stray = drain_for(cq, 100);
    EXPECT_TRUE(stray.empty()) << "the other client's receive completed on this client's new CQ: "
                               << describe(stray[0]);
  }
  // The engine carries on: it answers, and a plain RC pair works.
  std::string out;
  EXPECT_EQ(run_command("timeout 10 " + uroce_command() + " status", &out), 0) << out;
  Pair p = make_pair();
  ASSERT_FALSE(HasFatalFailure());
  ibv_mr* mr = reg_buffer(64, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  ASSERT_EQ(post_recv_mr(p.b.qp, 1, mr, 0, 64), 0);
  ibv_sge s2 = sge_of(mr, 0, 16);
  ASSERT_EQ(post_send(p.a.qp, 2, IBV_WR_SEND, &s2, 1), 0);
  VT_POLL_ONE(p.b.cq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
}

}  // namespace

// Mode "big" of the child: one XRC SRQ with a single 32 MiB receive; after
// the hello it waits for the first byte to arrive, destroys the SRQ and its
// CQ (the MR stays), reports {'S' or 'F' (finished already), results} and
// waits to be killed.
int xrc_big_child(ibv_pd* pd, ibv_srq* srq, ibv_cq* cq, int wfd) {
  constexpr size_t kLen = 32u << 20;
  auto* buf = static_cast<uint8_t*>(calloc(1, kLen));
  ibv_mr* mr = buf ? ibv_reg_mr(pd, buf, kLen, IBV_ACCESS_LOCAL_WRITE) : nullptr;
  ChildHello hello{'R', 0, 0};
  if (!mr) hello.code = 'm';
  ibv_sge s{uint64_t(uintptr_t(buf)), uint32_t(kLen), mr ? mr->lkey : 0};
  if (mr && post_srq_one(srq, 0, &s, 1)) hello.code = 'r';
  if (ibv_get_srq_num(srq, &hello.srqn)) hello.code = 'n';
  if (!write_all(wfd, &hello, sizeof(hello)) || hello.code != 'R') return 1;
  auto* b = static_cast<volatile uint8_t*>(buf);
  const auto end = deadline_after(10);
  while (b[0] == 0 && Clock::now() < end) {
  }
  if (b[0] == 0) return 1;
  struct {
    char code;
    int32_t destroy_srq, destroy_cq;
  } st{b[kLen - 1] ? 'F' : 'S', 0, 0};
  st.destroy_srq = ibv_destroy_srq(srq);
  st.destroy_cq = ibv_destroy_cq(cq);
  if (!write_all(wfd, &st, sizeof(st))) return 1;
  for (int i = 0; i < 600; ++i) usleep(100000);
  return 0;
}

// The child of the XrcShare tests:
//   verbs_semantics --xrc-child FILE WRITE_FD READ_FD [share|big]
// Opens FILE's XRC domain *without* O_CREAT (it must be the parent's),
// creates an XRC SRQ with its CQ, posts 2 * kChildMsgs receives and reports
// its SRQ number. On ParentGo it checks `count` receive completions, opens
// the parent's target QP through a second handle on the domain, queries it,
// tries to close that second handle (EBUSY expected) and reports. 'M'
// checks another batch and queries the opened QP again. 'q' releases
// everything; the exit status says whether every release succeeded.
int xrc_child_main(int argc, char** argv) {
  if (argc != 5 && argc != 6) return 2;
  const bool big = argc == 6 && std::strcmp(argv[5], "big") == 0;
  const char* file = argv[2];
  const int wfd = std::atoi(argv[3]), rfd = std::atoi(argv[4]);
  auto fail = [wfd](char code) {
    ChildHello h{code, errno, 0};
    write_all(wfd, &h, sizeof(h));
    return 1;
  };
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  ibv_device* dev = nullptr;
  // The parent's device (UROCE_TEST_DEVICE names another engine's, as in the fixture).
  const char* want = std::getenv("UROCE_TEST_DEVICE");
  if (!want || !*want) want = kDeviceName;
  for (int i = 0; list && i < n; ++i)
    if (std::strcmp(ibv_get_device_name(list[i]), want) == 0) dev = list[i];
  if (!dev) return fail('d');
  ibv_context* ctx = ibv_open_device(dev);
  ibv_free_device_list(list);
  if (!ctx) return fail('c');
  ibv_pd* pd = ibv_alloc_pd(ctx);
  if (!pd) return fail('p');
  ibv_cq* cq = ibv_create_cq(ctx, 64, nullptr, nullptr, 0);
  if (!cq) return fail('q');
  const int fd = open(file, O_RDONLY);
  if (fd < 0) return fail('f');
  ibv_xrcd_init_attr xa{};
  xa.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
  xa.fd = fd;
  xa.oflags = 0;  // no O_CREAT: only the parent's domain will do
  ibv_xrcd* xrcd = ibv_open_xrcd(ctx, &xa);
  if (!xrcd) return fail('o');
  ibv_srq_init_attr_ex sa{};
  sa.attr.max_wr = 2 * kChildMsgs;
  sa.attr.max_sge = 1;
  sa.comp_mask = kSrqAttrMaskAll;
  sa.srq_type = IBV_SRQT_XRC;
  sa.pd = pd;
  sa.xrcd = xrcd;
  sa.cq = cq;
  ibv_srq* srq = ibv_create_srq_ex(ctx, &sa);
  if (!srq) return fail('s');
  if (big) return xrc_big_child(pd, srq, cq, wfd);
  static uint8_t buf[size_t(kChildSlot) * kChildMsgs * 2];
  ibv_mr* mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
  if (!mr) return fail('m');
  for (uint32_t i = 0; i < 2 * kChildMsgs; ++i) {
    ibv_sge s{uint64_t(uintptr_t(buf + size_t(kChildSlot) * i)), kChildSlot, mr->lkey};
    if (post_srq_one(srq, i, &s, 1)) return fail('r');
  }
  ChildHello hello{'R', 0, 0};
  if (ibv_get_srq_num(srq, &hello.srqn)) return fail('n');
  if (!write_all(wfd, &hello, sizeof(hello))) return 1;

  // Checks `go.count` completions numbered from *next; returns (received, good).
  uint32_t next = 0;
  auto check_batch = [&](const ParentGo& go, char* problem, size_t problem_len) {
    auto note = [&](const std::string& s) {
      if (!problem[0]) std::snprintf(problem, problem_len, "%s", s.c_str());
    };
    std::vector<ibv_wc> got = poll_n(cq, go.count, kWaitSeconds);
    uint32_t good = 0;
    for (const ibv_wc& wc : got) {
      const uint32_t k = next++;
      if (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RECV || wc.qp_num != go.tgt_qpn ||
          wc.byte_len != go.len || wc.wr_id != k) {
        note("completion " + std::to_string(k) + " (target QP " + std::to_string(go.tgt_qpn) +
             "): " + describe(wc));
      } else if (mismatch(buf + size_t(kChildSlot) * k, go.len, child_seed(k)) != -1) {
        note("message " + std::to_string(k) + ": data differs");
      } else {
        ++good;
      }
    }
    if (got.size() < go.count) note("only " + std::to_string(got.size()) + " completions");
    if (!drain_for(cq, 50).empty()) note("extra completions");
    return std::make_pair(uint32_t(got.size()), good);
  };

  ParentGo go{};
  if (!read_all(rfd, &go, sizeof(go), 20000)) return 3;
  ChildReport rep{};
  std::tie(rep.received, rep.good) = check_batch(go, rep.first_problem, sizeof(rep.first_problem));

  // A second handle on the domain; open the parent's target through it.
  ibv_xrcd* xrcd2 = ibv_open_xrcd(ctx, &xa);
  ibv_qp* opened = nullptr;
  if (!xrcd2) {
    rep.open_errno = errno ? errno : -1;
  } else {
    ibv_qp_open_attr oa{};
    oa.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE |
                   IBV_QP_OPEN_ATTR_CONTEXT;
    oa.qp_num = go.tgt_qpn;
    oa.xrcd = xrcd2;
    oa.qp_type = IBV_QPT_XRC_RECV;
    oa.qp_context = &rep;
    errno = 0;
    opened = ibv_open_qp(ctx, &oa);
    rep.open_errno = opened ? 0 : (errno ? errno : -1);
  }
  auto query = [&](uint32_t* state, ibv_qp_attr* a, ibv_qp_init_attr* ia) {
    const int err = ibv_query_qp(opened, a, IBV_QP_STATE | IBV_QP_DEST_QPN | IBV_QP_PATH_MTU |
                                                IBV_QP_RQ_PSN, ia);
    *state = a->qp_state;
    return err;
  };
  if (opened) {
    if (opened->qp_num != go.tgt_qpn && !rep.first_problem[0])
      std::snprintf(rep.first_problem, sizeof(rep.first_problem), "opened QP has another qp_num");
    ibv_qp_attr a{};
    ibv_qp_init_attr ia{};
    rep.query_err = query(&rep.state, &a, &ia);
    rep.dest_qpn = a.dest_qp_num;
    rep.path_mtu = a.path_mtu;
    rep.rq_psn = a.rq_psn;
    rep.qp_type = ia.qp_type;
    rep.close_busy_err = ibv_close_xrcd(xrcd2);
    if (rep.close_busy_err == 0) xrcd2 = nullptr;
  }
  if (!write_all(wfd, &rep, sizeof(rep))) return 1;

  for (;;) {
    char cmd = 0;
    if (!read_all(rfd, &cmd, 1, 20000)) return 4;
    if (cmd == 'q') break;
    if (cmd != 'M' || !read_all(rfd, &go, sizeof(go), 5000)) return 4;
    ChildStatus st{};
    std::tie(st.received, st.good) = check_batch(go, st.first_problem, sizeof(st.first_problem));
    if (opened) {
      ibv_qp_attr a{};
      ibv_qp_init_attr ia{};
      st.query_err = query(&st.state, &a, &ia);
    } else {
      st.query_err = -1;
    }
    if (!write_all(wfd, &st, sizeof(st))) return 1;
  }
  int rc = 0;
  if (opened && ibv_destroy_qp(opened)) rc = 5;
  if (xrcd2 && ibv_close_xrcd(xrcd2)) rc = 6;
  if (ibv_destroy_srq(srq)) rc = 7;
  if (ibv_close_xrcd(xrcd)) rc = 8;
  close(fd);
  if (ibv_dereg_mr(mr) || ibv_destroy_cq(cq) || ibv_dealloc_pd(pd)) rc = 9;
  if (ibv_close_device(ctx)) rc = 10;
  return rc;
}

}  // namespace vt
