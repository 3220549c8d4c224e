// The shared fixture of the verbs semantics tests, and main().
#include "tests/integration/verbs_fixture.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace vt {

void VerbsTest::SetUp() {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  ASSERT_NE(list, nullptr) << "ibv_get_device_list: " << std::strerror(errno);
  ibv_device* dev = nullptr;
  // UROCE_TEST_DEVICE picks another engine (the two-host test runs one per namespace).
  const char* want = std::getenv("UROCE_TEST_DEVICE");
  if (!want || !*want) want = kDeviceName;
  for (int i = 0; i < n; ++i)
    if (std::strcmp(ibv_get_device_name(list[i]), want) == 0) dev = list[i];
  if (!dev) {
    ibv_free_device_list(list);
    FAIL() << "device " << want << " not found (" << n
           << " devices); run under `uroce run` with an engine started";
  }
  ctx_ = ibv_open_device(dev);
  ibv_free_device_list(list);
  ASSERT_NE(ctx_, nullptr) << "ibv_open_device: " << std::strerror(errno);
  pd_ = ibv_alloc_pd(ctx_);
  ASSERT_NE(pd_, nullptr) << "ibv_alloc_pd: " << std::strerror(errno);
  ASSERT_EQ(ibv_query_gid(ctx_, 1, 0, &gid_), 0);
}

void VerbsTest::TearDown() {
  for (auto it = cleanups_.rbegin(); it != cleanups_.rend(); ++it) (*it)();
  cleanups_.clear();
  for (auto it = objects_.rbegin(); it != objects_.rend(); ++it) {
    int rc = it->destroy();
    EXPECT_EQ(rc, 0) << "destroying " << it->what << ": " << std::strerror(rc);
  }
  objects_.clear();
  if (pd_) { EXPECT_EQ(ibv_dealloc_pd(pd_), 0); }
  pd_ = nullptr;
  if (ctx_) { EXPECT_EQ(ibv_close_device(ctx_), 0); }
  ctx_ = nullptr;
  buffers_.clear();
}

void VerbsTest::track(void* object, const char* what, std::function<int()> destroy) {
  objects_.push_back({object, std::move(destroy), what});
}

void VerbsTest::forget(void* object) {
  for (auto it = objects_.begin(); it != objects_.end(); ++it)
    if (it->object == object) {
      objects_.erase(it);
      return;
    }
}

uint8_t* VerbsTest::buffer(size_t len, uint8_t fill) {
  // Over-aligned so that atomics targets are 8-byte aligned.
  auto* raw = new uint8_t[len + 64];
  buffers_.emplace_back(raw);
  auto* p = reinterpret_cast<uint8_t*>((uintptr_t(raw) + 63) & ~uintptr_t(63));
  std::memset(p, fill, len);
  return p;
}

ibv_mr* VerbsTest::reg(void* addr, size_t len, int access) {
  ibv_mr* mr = ibv_reg_mr(pd_, addr, len, access);
  if (mr) track(mr, "mr", [mr] { return ibv_dereg_mr(mr); });
  return mr;
}

ibv_mr* VerbsTest::reg_buffer(size_t len, int access, uint8_t fill) {
  return reg(buffer(len, fill), len, access);
}

ibv_cq* VerbsTest::make_cq(int cqe, ibv_comp_channel* channel, void* cq_context) {
  ibv_cq* cq = ibv_create_cq(ctx_, cqe, cq_context, channel, 0);
  if (cq) track(cq, "cq", [cq] { return ibv_destroy_cq(cq); });
  return cq;
}

ibv_comp_channel* VerbsTest::make_channel() {
  ibv_comp_channel* ch = ibv_create_comp_channel(ctx_);
  if (ch) track(ch, "channel", [ch] { return ibv_destroy_comp_channel(ch); });
  return ch;
}

ibv_qp* VerbsTest::make_qp(ibv_qp_type type, ibv_cq* scq, ibv_cq* rcq, const QpCaps& caps,
                           int sq_sig_all, ibv_pd* pd) {
  ibv_qp_init_attr init{};
  init.send_cq = scq;
  init.recv_cq = rcq;
  init.qp_type = type;
  init.sq_sig_all = sq_sig_all;
  init.cap.max_send_wr = caps.max_send_wr;
  init.cap.max_recv_wr = caps.max_recv_wr;
  init.cap.max_send_sge = caps.max_send_sge;
  init.cap.max_recv_sge = caps.max_recv_sge;
  init.cap.max_inline_data = caps.max_inline_data;
  ibv_qp* qp = ibv_create_qp(pd ? pd : pd_, &init);
  if (qp) track(qp, "qp", [qp] { return ibv_destroy_qp(qp); });
  return qp;
}

ibv_qp* VerbsTest::make_qp_ex(ibv_qp_init_attr_ex* attr) {
  ibv_qp* qp = ibv_create_qp_ex(ctx_, attr);
  if (qp) track(qp, "qp", [qp] { return ibv_destroy_qp(qp); });
  return qp;
}

ibv_qp_init_attr_ex VerbsTest::qp_ex_attr(ibv_qp_type type, ibv_cq* cq, uint64_t send_ops,
                                          const QpCaps& caps) const {
  ibv_qp_init_attr_ex ix{};
  ix.qp_type = type;
  ix.send_cq = ix.recv_cq = cq;
  ix.cap = {caps.max_send_wr, caps.max_recv_wr, caps.max_send_sge, caps.max_recv_sge, caps.max_inline_data};
  ix.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  ix.pd = pd_;
  ix.send_ops_flags = send_ops;
  return ix;
}

ibv_cq_ex* VerbsTest::make_cq_ex(ibv_cq_init_attr_ex* attr) {
  ibv_cq_ex* cq = ibv_create_cq_ex(ctx_, attr);
  if (cq) track(cq, "cq", [cq] { return ibv_destroy_cq(ibv_cq_ex_to_cq(cq)); });
  return cq;
}

ibv_ah* VerbsTest::make_ah(ibv_ah_attr* attr) {
  ibv_ah* ah = ibv_create_ah(pd_, attr);
  if (ah) track(ah, "ah", [ah] { return ibv_destroy_ah(ah); });
  return ah;
}

ibv_ah_attr VerbsTest::loopback_av() const {
  ibv_ah_attr av{};
  av.is_global = 1;
  av.grh.dgid = gid_;
  av.grh.sgid_index = 0;
  av.grh.hop_limit = 1;
  av.sl = 0;
  av.src_path_bits = 0;
  av.port_num = 1;
  return av;
}

void VerbsTest::raw_to_rts(ibv_qp* qp) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  ASSERT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PORT), 0);
  a.qp_state = IBV_QPS_RTR;
  ASSERT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
  a.qp_state = IBV_QPS_RTS;
  ASSERT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
}

ibv_flow* VerbsTest::flow_to_mac(ibv_qp* qp, const uint8_t* mac) {
  struct {
    ibv_flow_attr attr;
    ibv_flow_spec_eth eth;
  } __attribute__((packed, aligned(8))) rule{};
  rule.attr.type = IBV_FLOW_ATTR_NORMAL;
  rule.attr.size = sizeof(rule);
  rule.attr.num_of_specs = 1;
  rule.attr.port = 1;
  rule.eth.type = IBV_FLOW_SPEC_ETH;
  rule.eth.size = sizeof(rule.eth);
  std::memcpy(rule.eth.val.dst_mac, mac, 6);
  std::memset(rule.eth.mask.dst_mac, 0xff, 6);
  ibv_flow* f = ibv_create_flow(qp, reinterpret_cast<ibv_flow_attr*>(&rule));
  EXPECT_NE(f, nullptr) << std::strerror(errno);
  if (f) defer([f] { EXPECT_EQ(ibv_destroy_flow(f), 0); });
  return f;
}

void VerbsTest::to_init(ibv_qp* qp, int access) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = 1;
  a.qp_access_flags = access;
  ASSERT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), 0)
      << "RESET->INIT";
}

void VerbsTest::connect_qp(ibv_qp* qp, uint32_t remote_qpn, const ConnectOpts& o) {
  ibv_qp_attr a{};
  if (qp->qp_type == IBV_QPT_UD) {
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = 1;
    a.qkey = o.qkey;
    ASSERT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY), 0)
        << "RESET->INIT";
  } else {
    to_init(qp, o.access);
    if (HasFatalFailure()) return;
  }

  a = {};
  a.qp_state = IBV_QPS_RTR;
  int mask = IBV_QP_STATE;
  if (qp->qp_type != IBV_QPT_UD) {
    a.path_mtu = o.mtu;
    a.dest_qp_num = remote_qpn;
    a.rq_psn = o.rq_psn;
    a.ah_attr = loopback_av();
    mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
    if (qp->qp_type == IBV_QPT_RC) {
      a.max_dest_rd_atomic = o.max_dest_rd_atomic;
      a.min_rnr_timer = o.min_rnr_timer;
      mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    }
  }
  ASSERT_EQ(ibv_modify_qp(qp, &a, mask), 0) << "INIT->RTR";

  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = o.sq_psn;
  mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
  if (qp->qp_type == IBV_QPT_RC) {
    a.timeout = o.timeout;
    a.retry_cnt = o.retry_cnt;
    a.rnr_retry = o.rnr_retry;
    a.max_rd_atomic = o.max_rd_atomic;
    mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
  }
  ASSERT_EQ(ibv_modify_qp(qp, &a, mask), 0) << "RTR->RTS";
}

Pair VerbsTest::make_pair(ibv_qp_type type, const ConnectOpts& o, const QpCaps& caps,
                          int sq_sig_all) {
  Pair p;
  p.a.cq = make_cq();
  p.b.cq = make_cq();
  EXPECT_NE(p.a.cq, nullptr);
  EXPECT_NE(p.b.cq, nullptr);
  if (!p.a.cq || !p.b.cq) return p;
  p.a.qp = make_qp(type, p.a.cq, p.a.cq, caps, sq_sig_all);
  p.b.qp = make_qp(type, p.b.cq, p.b.cq, caps, sq_sig_all);
  EXPECT_NE(p.a.qp, nullptr) << std::strerror(errno);
  EXPECT_NE(p.b.qp, nullptr) << std::strerror(errno);
  if (!p.a.qp || !p.b.qp) return p;
  connect_qp(p.a.qp, p.b.qp->qp_num, o);
  connect_qp(p.b.qp, p.a.qp->qp_num, o);
  return p;
}

ibv_qp_state VerbsTest::qp_state(ibv_qp* qp) {
  ibv_qp_attr a{};
  ibv_qp_init_attr init{};
  int rc = ibv_query_qp(qp, &a, IBV_QP_STATE, &init);
  EXPECT_EQ(rc, 0) << "ibv_query_qp: " << std::strerror(rc);
  return rc ? IBV_QPS_UNKNOWN : a.qp_state;
}

int VerbsTest::post_send(ibv_qp* qp, uint64_t wr_id, ibv_wr_opcode op, ibv_sge* sge, int num_sge,
                         unsigned flags, uint64_t remote_addr, uint32_t rkey, uint32_t imm) {
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.opcode = op;
  wr.sg_list = sge;
  wr.num_sge = num_sge;
  wr.send_flags = flags;
  wr.imm_data = imm;
  wr.wr.rdma.remote_addr = remote_addr;
  wr.wr.rdma.rkey = rkey;
  ibv_send_wr* bad = nullptr;
  return ibv_post_send(qp, &wr, &bad);
}

int VerbsTest::post_atomic(ibv_qp* qp, uint64_t wr_id, ibv_wr_opcode op, ibv_sge* sge,
                           uint64_t remote_addr, uint32_t rkey, uint64_t compare_add, uint64_t swap) {
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.opcode = op;
  wr.sg_list = sge;
  wr.num_sge = 1;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.atomic.remote_addr = remote_addr;
  wr.wr.atomic.rkey = rkey;
  wr.wr.atomic.compare_add = compare_add;
  wr.wr.atomic.swap = swap;
  ibv_send_wr* bad = nullptr;
  return ibv_post_send(qp, &wr, &bad);
}

int VerbsTest::post_ud(ibv_qp* qp, uint64_t wr_id, ibv_sge* sge, ibv_ah* ah, uint32_t remote_qpn,
                       uint32_t remote_qkey) {
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.opcode = IBV_WR_SEND;
  wr.sg_list = sge;
  wr.num_sge = 1;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.ud.ah = ah;
  wr.wr.ud.remote_qpn = remote_qpn;
  wr.wr.ud.remote_qkey = remote_qkey;
  ibv_send_wr* bad;
  return ibv_post_send(qp, &wr, &bad);
}

int VerbsTest::post_recv(ibv_qp* qp, uint64_t wr_id, ibv_sge* sge, int num_sge) {
  ibv_recv_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = sge;
  wr.num_sge = num_sge;
  ibv_recv_wr* bad = nullptr;
  return ibv_post_recv(qp, &wr, &bad);
}

int VerbsTest::post_recv_mr(ibv_qp* qp, uint64_t wr_id, ibv_mr* mr, size_t offset, uint32_t len) {
  ibv_sge sge{uint64_t(uintptr_t(mr->addr)) + offset, len, mr->lkey};
  return post_recv(qp, wr_id, &sge, 1);
}

bool poll_one(ibv_cq* cq, ibv_wc* wc, double seconds) {
  const auto end = deadline_after(seconds);
  do {
    int n = ibv_poll_cq(cq, 1, wc);
    if (n < 0) return false;
    if (n == 1) return true;
  } while (Clock::now() < end);
  return false;
}

std::vector<ibv_wc> poll_n(ibv_cq* cq, size_t n, double seconds) {
  std::vector<ibv_wc> out;
  const auto end = deadline_after(seconds);
  ibv_wc wc[16];
  while (out.size() < n && Clock::now() < end) {
    int got = ibv_poll_cq(cq, int(std::min<size_t>(16, n - out.size())), wc);
    if (got < 0) break;
    out.insert(out.end(), wc, wc + got);
  }
  return out;
}

std::vector<ibv_wc> drain_for(ibv_cq* cq, int ms) {
  std::vector<ibv_wc> out;
  const auto end = deadline_after(ms / 1000.0);
  ibv_wc wc[16];
  while (Clock::now() < end) {
    int got = ibv_poll_cq(cq, 16, wc);
    if (got < 0) break;
    out.insert(out.end(), wc, wc + got);
    if (!got) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return out;
}

bool fd_readable(int fd, int ms) {
  pollfd p{fd, POLLIN, 0};
  int rc;
  do rc = poll(&p, 1, ms);
  while (rc < 0 && errno == EINTR);
  return rc == 1 && (p.revents & POLLIN);
}

std::string describe(const ibv_wc& wc) {
  std::ostringstream os;
  os << "wc{wr_id " << wc.wr_id << ", status " << status_str(wc.status) << " (" << wc.status
     << "), opcode " << wc.opcode << ", byte_len " << wc.byte_len << ", qp " << wc.qp_num << "}";
  return os.str();
}

std::string uroce_command() {
  const char* build = std::getenv("UROCE_BUILD_DIR");
  return std::string(build && *build ? build : "build") + "/bin/uroce";
}

int run_command(const std::string& cmd, std::string* output) {
  FILE* f = popen((cmd + " 2>&1").c_str(), "r");
  if (!f) return -1;
  char buf[4096];
  size_t n;
  std::string out;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  int status = pclose(f);
  if (output) *output = out;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Defined in verbs_lifecycle.cc: the child side of the session test.
int session_child_main(int argc, char** argv);
// Defined in verbs_srq.cc: the child of the XRC domain sharing tests.
int xrc_child_main(int argc, char** argv);

}  // namespace vt

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "--session-child") == 0)
    return vt::session_child_main(argc, argv);
  if (argc >= 2 && std::strcmp(argv[1], "--xrc-child") == 0) return vt::xrc_child_main(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
