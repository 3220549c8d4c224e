// Hardware tag matching (IBV_SRQT_TM), as rdma-core's mlx5 provider
// (providers/mlx5/verbs.c, qp.c mlx5_post_srq_ops, cq.c),
// Documentation/tag_matching.md and tests/test_tag_matching.py have it. A
// client RC QP
// sends TMH-prefixed messages to a server RC QP attached to a TM-SRQ whose
// completions go to an extended CQ read with ibv_start_poll and
// ibv_wc_read_tm_info.
#include <arpa/inet.h>
#include <endian.h>
#include <infiniband/tm_types.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "tests/integration/verbs_srq_fixture.h"
#include "uroce/abi.h"

namespace vt::srq_test {
namespace {

// The engine's control_messages counter (`uroce stats`, a kStats request on
// a connection of its own, read as verbs_handles.cc reads its counters);
// -1 if unreadable. The request itself is counted after its reply.
long control_messages() {
  const char* dir = std::getenv("UROCE_RUNTIME_DIR");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s/%s.sock", dir ? dir : "", kDeviceName);
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  long value = -1;
  const uroce::abi::CtlRequestHeader hdr{uint32_t(uroce::abi::CtlOp::kStats), 0};
  static char buf[uroce::abi::kMaxCtlMsg + 1];
  ssize_t n = -1;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      send(fd, &hdr, sizeof(hdr), MSG_NOSIGNAL) == ssize_t(sizeof(hdr)))
    n = recv(fd, buf, sizeof(buf) - 1, 0);
  close(fd);
  if (n > ssize_t(sizeof(uroce::abi::CtlReplyHeader))) {
    buf[n] = 0;
    const char* at = std::strstr(buf + sizeof(uroce::abi::CtlReplyHeader), "  control_messages ");
    if (at) value = std::atol(at + std::strlen("  control_messages "));
  }
  return value;
}

constexpr uint32_t kTmhSize = 16;

// One completion read through the extended interface.
struct TmWc {
  uint64_t wr_id = 0;
  ibv_wc_status status = IBV_WC_SUCCESS;
  ibv_wc_opcode opcode = IBV_WC_SEND;
  unsigned flags = 0;
  uint32_t byte_len = 0;
  ibv_wc_tm_info tm{};
};

std::string describe(const TmWc& w) {
  return "wr_id " + std::to_string(w.wr_id) + " status " + status_str(w.status) + " opcode " +
         std::to_string(w.opcode) + " flags 0x" + std::to_string(w.flags) + " len " +
         std::to_string(w.byte_len) + " tag " + std::to_string(w.tm.tag);
}

// Polls one completion with ibv_start_poll (ENOENT: none yet), as pyverbs does.
bool poll_tm(ibv_cq_ex* cq, TmWc* out, double seconds = kWaitSeconds) {
  const auto end = deadline_after(seconds);
  ibv_poll_cq_attr attr{};
  while (Clock::now() < end) {
    const int rc = ibv_start_poll(cq, &attr);
    if (rc == ENOENT) continue;
    if (rc != 0) return false;
    out->wr_id = cq->wr_id;
    out->status = cq->status;
    out->opcode = ibv_wc_read_opcode(cq);
    out->flags = ibv_wc_read_wc_flags(cq);
    out->byte_len = ibv_wc_read_byte_len(cq);
    ibv_wc_read_tm_info(cq, &out->tm);
    ibv_end_poll(cq);
    return true;
  }
  return false;
}

bool tm_cq_empty(ibv_cq_ex* cq) {
  ibv_poll_cq_attr attr{};
  if (ibv_start_poll(cq, &attr) == ENOENT) return true;
  ibv_end_poll(cq);
  return false;
}

// struct ibv_tmh, big-endian (tm_types.h).
void write_tmh(uint8_t* p, uint8_t opcode, uint64_t tag, uint32_t app_ctx = 0) {
  std::memset(p, 0, kTmhSize);
  p[0] = opcode;
  const uint32_t ctx = htonl(app_ctx);
  std::memcpy(p + 4, &ctx, 4);
  const uint64_t t = htobe64(tag);
  std::memcpy(p + 8, &t, 8);
}

class TmTest : public SrqTest {
 protected:
  static constexpr uint32_t kBuf = 4096;

  void SetUp() override {
    SrqTest::SetUp();
    if (HasFatalFailure()) return;
    ibv_device_attr_ex dev{};
    ASSERT_EQ(ibv_query_device_ex(ctx_, nullptr, &dev), 0);
    caps_ = dev.tm_caps;
    cq_ = make_tm_cq();
    ASSERT_NE(cq_, nullptr);
  }

  ibv_cq_ex* make_tm_cq(uint64_t wc_flags = uint64_t(IBV_WC_EX_WITH_TM_INFO) | IBV_WC_STANDARD_FLAGS) {
    ibv_cq_init_attr_ex a{};
    a.cqe = 256;
    a.wc_flags = wc_flags;
    return make_cq_ex(&a);
  }

  ibv_srq_init_attr_ex tm_attr(uint32_t max_num_tags, uint32_t max_ops) {
    ibv_srq_init_attr_ex a{};
    a.attr.max_wr = 64;
    a.attr.max_sge = 1;
    a.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_CQ |
                  IBV_SRQ_INIT_ATTR_TM;
    a.srq_type = IBV_SRQT_TM;
    a.pd = pd_;
    a.cq = ibv_cq_ex_to_cq(cq_);
    a.tm_cap.max_num_tags = max_num_tags;
    a.tm_cap.max_ops = max_ops;
    return a;
  }

  // The TM-SRQ, a server RC QP on it (no queues of its own, as in pyverbs)
  // and a client RC QP with its own CQ, connected.
  void make_tm(uint32_t max_num_tags = 16, uint32_t max_ops = 16, bool server_rts = true) {
    ibv_srq_init_attr_ex a = tm_attr(max_num_tags, max_ops);
    srq_ = make_srq_ex(&a);
    ASSERT_NE(srq_, nullptr) << std::strerror(errno);
    ibv_qp_init_attr qa{};
    qa.send_cq = qa.recv_cq = ibv_cq_ex_to_cq(cq_);
    qa.srq = srq_;
    qa.qp_type = IBV_QPT_RC;
    server_ = ibv_create_qp(pd_, &qa);
    ASSERT_NE(server_, nullptr) << std::strerror(errno);
    ibv_qp* s = server_;
    own(s, "server qp", [s] { return ibv_destroy_qp(s); });
    client_cq_ = make_cq();
    client_ = make_qp(IBV_QPT_RC, client_cq_, client_cq_);
    ASSERT_NE(client_, nullptr);
    connect_qp(client_, server_->qp_num);
    if (server_rts) {
      connect_qp(server_, client_->qp_num);
    } else {
      ASSERT_NO_FATAL_FAILURE(server_to_rtr());
    }
    send_mr_ = reg_buffer(kBuf, IBV_ACCESS_LOCAL_WRITE);
    tagged_mr_ = reg_buffer(kBuf, IBV_ACCESS_LOCAL_WRITE);
    plain_mr_ = reg_buffer(kBuf, IBV_ACCESS_LOCAL_WRITE);
  }

  // The server QP to RTR only: it receives, its requester (the device's
  // rendezvous READ) waits for RTS.
  void server_to_rtr() {
    to_init(server_, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE);
    ASSERT_FALSE(HasFatalFailure());
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = client_->qp_num;
    a.ah_attr = loopback_av();
    a.max_dest_rd_atomic = 4;
    a.min_rnr_timer = 12;
    ASSERT_EQ(ibv_modify_qp(server_, &a,
                            IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
              0);
  }
  void server_to_rts() {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 4;
    ASSERT_EQ(ibv_modify_qp(server_, &a,
                            IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC),
              0);
  }

  // A client SEND of a rendezvous request as pyverbs builds it: TMH(RNDV)
  // then RVH(va, rkey, len) naming `src`, 64 bytes.
  void send_rndv(uint64_t tag, ibv_mr* src, uint32_t len, uint32_t rkey, uint32_t app_ctx = 0) {
    auto* b = static_cast<uint8_t*>(send_mr_->addr);
    std::memset(b, 0, 64);
    write_tmh(b, IBV_TMH_RNDV, tag, app_ctx);
    const uint64_t va = htobe64(reinterpret_cast<uint64_t>(src->addr));
    const uint32_t key = htonl(rkey), n = htonl(len);
    std::memcpy(b + 16, &va, 8);
    std::memcpy(b + 24, &key, 4);
    std::memcpy(b + 28, &n, 4);
    ibv_sge sge = sge_of(send_mr_, 0, 64);
    ASSERT_EQ(post_send(client_, 1, IBV_WR_SEND, &sge, 1), 0);
    ibv_wc wc;
    ASSERT_TRUE(poll_one(client_cq_, &wc));
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << vt::describe(wc);
    ASSERT_EQ(wc.opcode, IBV_WC_SEND) << "the SEND completes before the FIN arrives";
  }

  int add(uint64_t tag, uint64_t mask, uint64_t recv_wr_id, ibv_mr* mr, uint32_t off, uint32_t len,
          uint32_t* handle, unsigned flags = IBV_OPS_SIGNALED, uint32_t unexpected_cnt = 0) {
    ibv_sge sge = sge_of(mr, off, len);
    ibv_ops_wr op{};
    op.wr_id = recv_wr_id + 1000;
    op.opcode = IBV_WR_TAG_ADD;
    op.flags = flags;
    op.tm.unexpected_cnt = unexpected_cnt;
    op.tm.add.recv_wr_id = recv_wr_id;
    op.tm.add.sg_list = &sge;
    op.tm.add.num_sge = 1;
    op.tm.add.tag = tag;
    op.tm.add.mask = mask;
    ibv_ops_wr* bad = nullptr;
    const int rc = ibv_post_srq_ops(srq_, &op, &bad);
    if (rc == 0 && handle) *handle = op.tm.handle;
    if (rc) {
      EXPECT_EQ(bad, &op);
    }
    return rc;
  }

  int simple_op(ibv_ops_wr_opcode opcode, uint64_t wr_id, unsigned flags, uint32_t handle = 0,
                uint32_t unexpected_cnt = 0) {
    ibv_ops_wr op{};
    op.wr_id = wr_id;
    op.opcode = opcode;
    op.flags = flags;
    op.tm.handle = handle;
    op.tm.unexpected_cnt = unexpected_cnt;
    ibv_ops_wr* bad = nullptr;
    return ibv_post_srq_ops(srq_, &op, &bad);
  }

  // A client SEND of `len` bytes: TMH then a pattern seeded by `seed`.
  void send_tagged(uint8_t tmh_op, uint64_t tag, uint32_t len, uint32_t seed, uint32_t app_ctx = 0) {
    auto* b = static_cast<uint8_t*>(send_mr_->addr);
    fill(b + kTmhSize, len - kTmhSize, seed);
    write_tmh(b, tmh_op, tag, app_ctx);
    ibv_sge sge = sge_of(send_mr_, 0, len);
    ASSERT_EQ(post_send(client_, seed, IBV_WR_SEND, &sge, 1), 0);
    ibv_wc wc;
    ASSERT_TRUE(poll_one(client_cq_, &wc));
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << vt::describe(wc);
  }

  void post_plain(uint64_t wr_id) {
    ibv_sge sge = sge_of(plain_mr_, 0, kBuf);
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_srq_recv(srq_, &wr, &bad), 0);
  }

  TmWc expect_wc() {
    TmWc w;
    EXPECT_TRUE(poll_tm(cq_, &w)) << "no completion";
    return w;
  }

  ibv_tm_caps caps_{};
  ibv_cq_ex* cq_ = nullptr;
  ibv_srq* srq_ = nullptr;
  ibv_qp* server_ = nullptr;
  ibv_qp* client_ = nullptr;
  ibv_cq* client_cq_ = nullptr;
  ibv_mr *send_mr_ = nullptr, *tagged_mr_ = nullptr, *plain_mr_ = nullptr;
};

TEST_F(TmTest, DeviceReportsTmCaps) {
  EXPECT_EQ(caps_.max_rndv_hdr_size, 64u);
  EXPECT_GT(caps_.max_num_tags, 0u);
  EXPECT_GT(caps_.max_ops, 0u);
  EXPECT_EQ(caps_.max_sge, 1u);
}

TEST_F(TmTest, CreateIsValidatedAsMlx5Does) {
  ibv_srq_init_attr_ex a = tm_attr(0, 4);
  errno = 0;
  EXPECT_EQ(ibv_create_srq_ex(ctx_, &a), nullptr);  // no tags
  EXPECT_EQ(errno, EINVAL);
  a = tm_attr(4, 4);
  a.comp_mask &= ~IBV_SRQ_INIT_ATTR_CQ;
  EXPECT_EQ(ibv_create_srq_ex(ctx_, &a), nullptr);
  EXPECT_EQ(errno, EINVAL);
  a = tm_attr(4, 4);
  a.comp_mask &= ~IBV_SRQ_INIT_ATTR_TM;
  EXPECT_EQ(ibv_create_srq_ex(ctx_, &a), nullptr);
  EXPECT_EQ(errno, EINVAL);
  a = tm_attr(caps_.max_num_tags + 1, 4);
  EXPECT_EQ(ibv_create_srq_ex(ctx_, &a), nullptr);
  EXPECT_EQ(errno, EINVAL);
  a = tm_attr(4, caps_.max_ops + 1);
  EXPECT_EQ(ibv_create_srq_ex(ctx_, &a), nullptr);
  EXPECT_EQ(errno, EINVAL);
  // mlx5: "An extended CQ is required to read TM information from".
  a = tm_attr(4, 4);
  a.cq = make_cq();
  EXPECT_EQ(ibv_create_srq_ex(ctx_, &a), nullptr);
  EXPECT_EQ(errno, EINVAL);
  a = tm_attr(caps_.max_num_tags, 10);  // what pyverbs asks
  EXPECT_NE(make_srq_ex(&a), nullptr) << std::strerror(errno);
  // A TM-SRQ takes RC QPs only.
  ibv_qp_init_attr qa{};
  qa.send_cq = qa.recv_cq = ibv_cq_ex_to_cq(cq_);
  qa.srq = srq_ = make_srq_ex(&a);
  ASSERT_NE(srq_, nullptr);
  qa.qp_type = IBV_QPT_UC;
  qa.cap.max_send_wr = 1;
  qa.cap.max_send_sge = 1;
  EXPECT_EQ(ibv_create_qp(pd_, &qa), nullptr);
}

TEST_F(TmTest, PostSrqOpsOnABasicSrqIsEinvalWithBadOp) {
  ibv_srq* basic = make_srq(8);
  ASSERT_NE(basic, nullptr);
  ibv_ops_wr op{};
  op.opcode = IBV_WR_TAG_SYNC;
  ibv_ops_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_srq_ops(basic, &op, &bad), EINVAL);
  EXPECT_EQ(bad, &op);
}

TEST_F(TmTest, AddDelSyncCompleteWithTheirOpcodesAndAFullListIsEnomem) {
  ASSERT_NO_FATAL_FAILURE(make_tm(3, 16));
  std::set<uint32_t> handles;
  for (uint64_t t = 1; t <= 3; ++t) {
    uint32_t h = ~0u;
    ASSERT_EQ(add(t, 0xffff, t, tagged_mr_, 0, 64, &h), 0);
    handles.insert(h);
    TmWc w = expect_wc();
    EXPECT_EQ(w.status, IBV_WC_SUCCESS) << describe(w);
    EXPECT_EQ(w.opcode, IBV_WC_TM_ADD);
    EXPECT_EQ(w.wr_id, t + 1000);
    EXPECT_EQ(w.flags, 0u);
    EXPECT_EQ(w.tm.tag, 0u);
  }
  EXPECT_EQ(handles.size(), 3u);
  EXPECT_EQ(add(4, 0xffff, 4, tagged_mr_, 0, 64, nullptr), ENOMEM);
  // Two ops in one call: the DEL passes, the ADD after it takes its place.
  ibv_ops_wr del{}, again{};
  ibv_sge sge = sge_of(tagged_mr_, 0, 64);
  del.wr_id = 50;
  del.opcode = IBV_WR_TAG_DEL;
  del.flags = IBV_OPS_SIGNALED;
  del.tm.handle = *handles.begin();
  del.next = &again;
  again.wr_id = 51;
  again.opcode = IBV_WR_TAG_ADD;
  again.tm.add.sg_list = &sge;
  again.tm.add.num_sge = 1;
  again.tm.add.tag = 9;
  again.tm.add.mask = ~0ull;
  ibv_ops_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_srq_ops(srq_, &del, &bad), 0);
  TmWc w = expect_wc();
  EXPECT_EQ(w.opcode, IBV_WC_TM_DEL);
  EXPECT_EQ(w.status, IBV_WC_SUCCESS) << describe(w);
  EXPECT_EQ(w.wr_id, 50u);
  EXPECT_TRUE(tm_cq_empty(cq_)) << "an unsignaled ADD completed";
  // A SYNC with TM_SYNC, as pyverbs posts it.
  ASSERT_EQ(simple_op(IBV_WR_TAG_SYNC, 27, IBV_OPS_SIGNALED | IBV_OPS_TM_SYNC), 0);
  w = expect_wc();
  EXPECT_EQ(w.opcode, IBV_WC_TM_SYNC);
  EXPECT_EQ(w.wr_id, 27u);
  EXPECT_EQ(w.flags, 0u);
  // Two SGEs are more than tm_caps.max_sge.
  ibv_sge two[2] = {sge, sge};
  ibv_ops_wr big{};
  big.opcode = IBV_WR_TAG_ADD;
  big.tm.add.sg_list = two;
  big.tm.add.num_sge = 2;
  EXPECT_EQ(ibv_post_srq_ops(srq_, &big, &bad), EINVAL);
  EXPECT_EQ(bad, &big);
}

// ibv_post_srq_ops goes through the TM-SRQ's ring (abi::TmOpsHeader): a list
// of 4 tags turned over 100 times, with max_ops 2 (so the provider must ask
// the engine for retired ops and freed handles), and not one control message.
TEST_F(TmTest, ListOperationsSendNoControlMessage) {
  ASSERT_NO_FATAL_FAILURE(make_tm(4, 2));
  const long before = control_messages();
  ASSERT_GE(before, 0) << "no control_messages counter in uroce stats";
  for (uint64_t i = 0; i < 100; ++i) {
    uint32_t h = ~0u;
    ASSERT_EQ(add(i, ~0ull, i, tagged_mr_, 0, 64, &h), 0) << i;
    TmWc w = expect_wc();
    ASSERT_EQ(w.opcode, IBV_WC_TM_ADD);
    ASSERT_EQ(w.wr_id, i + 1000);
    ASSERT_EQ(simple_op(IBV_WR_TAG_DEL, i, IBV_OPS_SIGNALED, h), 0) << i;
    w = expect_wc();
    ASSERT_EQ(w.opcode, IBV_WC_TM_DEL);
    ASSERT_EQ(w.status, IBV_WC_SUCCESS) << describe(w);
  }
  EXPECT_EQ(control_messages() - before, 1) << "only the first stats request";
}

TEST_F(TmTest, MoreThanMaxOpsOutstandingIsEnomemUntilCompletionsArePolled) {
  ASSERT_NO_FATAL_FAILURE(make_tm(16, 3));
  for (int i = 0; i < 3; ++i) ASSERT_EQ(simple_op(IBV_WR_TAG_SYNC, i, IBV_OPS_SIGNALED), 0);
  EXPECT_EQ(simple_op(IBV_WR_TAG_SYNC, 3, IBV_OPS_SIGNALED), ENOMEM);
  TmWc w = expect_wc();
  EXPECT_EQ(w.wr_id, 0u);
  EXPECT_EQ(simple_op(IBV_WR_TAG_SYNC, 4, IBV_OPS_SIGNALED), 0);  // one retired
  EXPECT_EQ(simple_op(IBV_WR_TAG_SYNC, 5, IBV_OPS_SIGNALED), ENOMEM);
}

TEST_F(TmTest, EagerMessageLandsWithoutItsTmhInTheMatchedBuffer) {
  ASSERT_NO_FATAL_FAILURE(make_tm());
  post_plain(0);
  uint32_t h;
  ASSERT_EQ(add(5, 0xffff, 77, tagged_mr_, 100, 1024, &h), 0);
  expect_wc();
  send_tagged(IBV_TMH_EAGER, 5, 600, 3, 0xabcd);
  TmWc w = expect_wc();
  EXPECT_EQ(w.status, IBV_WC_SUCCESS) << describe(w);
  EXPECT_EQ(w.opcode, IBV_WC_TM_RECV);
  EXPECT_EQ(w.wr_id, 77u);
  EXPECT_EQ(w.flags, unsigned(IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID));
  EXPECT_EQ(w.tm.tag, 5u);
  EXPECT_EQ(w.tm.priv, 0xabcdu);
  EXPECT_EQ(w.byte_len, 600 - kTmhSize);
  EXPECT_EQ(mismatch(static_cast<uint8_t*>(tagged_mr_->addr) + 100, 600 - kTmhSize, 3), -1);
  // The entry was consumed: its DEL completes in error.
  ASSERT_EQ(simple_op(IBV_WR_TAG_DEL, 9, IBV_OPS_SIGNALED, h), 0);
  w = expect_wc();
  EXPECT_EQ(w.opcode, IBV_WC_TM_DEL);
  EXPECT_EQ(w.status, IBV_WC_TM_ERR) << describe(w);
}

// A CQ with every completion field mlx5 offers and IGNORE_OVERRUN, as a
// program written for mlx5 asks for it: tag-matched eager and rendezvous
// traffic through it, every field read. The tag and the wall clock each
// have their own value (the engine's entry carries the tag where the wall
// clock would be; the provider reads a match's wall clock from its device
// stamp).
TEST_F(TmTest, EveryCompletionFieldMlx5OffersOnOneCq) {
  ibv_cq_init_attr_ex c{};
  c.cqe = 256;
  c.wc_flags = IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_TM_INFO | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
               IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK | IBV_WC_EX_WITH_CVLAN |
               IBV_WC_EX_WITH_FLOW_TAG;
  c.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
  c.flags = IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
  cq_ = make_cq_ex(&c);
  ASSERT_NE(cq_, nullptr) << std::strerror(errno);
  ASSERT_NO_FATAL_FAILURE(make_tm());
  constexpr uint32_t kLen = 1u << 16;
  ibv_mr* src = reg_buffer(kLen, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  ibv_mr* dst = reg_buffer(kLen, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(src && dst);
  fill(src->addr, kLen, 5);
  ASSERT_EQ(add(5, 0xffff, 77, tagged_mr_, 100, 1024, nullptr), 0);
  expect_wc();
  ASSERT_EQ(add(10, 0xffff, 100, dst, 0, kLen, nullptr), 0);
  expect_wc();
  ASSERT_EQ(post_recv_mr(client_, 7, send_mr_, 2048, 64), 0);  // for the FIN
  send_tagged(IBV_TMH_EAGER, 5, 600, 3, 0xabcd);
  ASSERT_NO_FATAL_FAILURE(send_rndv(10, src, kLen, src->rkey, 0x77));

  struct Seen {
    uint64_t wr_id, tag, ts, wallclock;
    unsigned flags;
    uint32_t byte_len, qp_num, priv;
  };
  std::vector<Seen> seen;
  timespec before;
  clock_gettime(CLOCK_REALTIME, &before);
  const auto end = deadline_after(kWaitSeconds);
  ibv_poll_cq_attr attr{};
  while (seen.size() < 3 && Clock::now() < end) {
    if (ibv_start_poll(cq_, &attr) != 0) continue;
    ASSERT_EQ(cq_->status, IBV_WC_SUCCESS);
    ibv_wc_tm_info tm{};
    ibv_wc_read_tm_info(cq_, &tm);
    // Every reader the flags ask for, as such a program calls them.
    (void)ibv_wc_read_imm_data(cq_);
    (void)ibv_wc_read_src_qp(cq_);
    (void)ibv_wc_read_slid(cq_);
    (void)ibv_wc_read_sl(cq_);
    (void)ibv_wc_read_dlid_path_bits(cq_);
    EXPECT_EQ(ibv_wc_read_cvlan(cq_), 0u);
    EXPECT_EQ(ibv_wc_read_flow_tag(cq_), 0u);
    seen.push_back({cq_->wr_id, tm.tag, ibv_wc_read_completion_ts(cq_), ibv_wc_read_completion_wallclock_ns(cq_),
                    ibv_wc_read_wc_flags(cq_), ibv_wc_read_byte_len(cq_), ibv_wc_read_qp_num(cq_), tm.priv});
    ibv_end_poll(cq_);
  }
  ASSERT_EQ(seen.size(), 3u) << "the eager match, the rendezvous match, its data";
  const uint64_t now = uint64_t(before.tv_sec) * 1'000'000'000u + uint64_t(before.tv_nsec);
  for (size_t i = 0; i < seen.size(); ++i) {
    const Seen& s = seen[i];
    EXPECT_NE(s.ts, 0u) << i;
    EXPECT_LT(s.wallclock > now ? s.wallclock - now : now - s.wallclock, 10'000'000'000u)
        << i << ": the wall clock within 10 s of now, not a tag";
    if (i) {
      EXPECT_GE(s.ts, seen[i - 1].ts) << i;
      EXPECT_GE(s.wallclock, seen[i - 1].wallclock) << i;
    }
    EXPECT_EQ(s.qp_num, server_->qp_num) << i;
  }
  EXPECT_EQ(seen[0].wr_id, 77u);
  EXPECT_EQ(seen[0].flags, unsigned(IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID));
  EXPECT_EQ(seen[0].tag, 5u);
  EXPECT_EQ(seen[0].priv, 0xabcdu);
  EXPECT_EQ(seen[0].byte_len, 600 - kTmhSize);
  EXPECT_EQ(seen[1].wr_id, 100u);
  EXPECT_EQ(seen[1].flags, unsigned(IBV_WC_TM_MATCH));
  EXPECT_EQ(seen[1].tag, 10u);
  EXPECT_EQ(seen[1].priv, 0x77u);
  EXPECT_EQ(seen[2].wr_id, 100u);
  EXPECT_EQ(seen[2].flags, unsigned(IBV_WC_TM_DATA_VALID));
  EXPECT_EQ(seen[2].byte_len, kLen);
  EXPECT_EQ(mismatch(dst->addr, kLen, 5), -1);
}

TEST_F(TmTest, MultiPacketEagerReportsTheMatchThenTheData) {
  ASSERT_NO_FATAL_FAILURE(make_tm());
  ASSERT_EQ(add(8, 0xffff, 88, tagged_mr_, 0, kBuf, nullptr), 0);
  expect_wc();
  send_tagged(IBV_TMH_EAGER, 8, 3000, 4);  // path MTU 1024: three packets
  TmWc m = expect_wc(), d = expect_wc();
  EXPECT_EQ(m.opcode, IBV_WC_TM_RECV);
  EXPECT_EQ(m.flags, unsigned(IBV_WC_TM_MATCH));
  EXPECT_EQ(m.wr_id, 88u);
  EXPECT_EQ(m.tm.tag, 8u);
  EXPECT_EQ(d.opcode, IBV_WC_TM_RECV);
  EXPECT_EQ(d.flags, unsigned(IBV_WC_TM_DATA_VALID));
  EXPECT_EQ(d.wr_id, 88u);
  EXPECT_EQ(d.tm.tag, 0u);
  EXPECT_EQ(d.byte_len, 3000 - kTmhSize);
  EXPECT_EQ(mismatch(tagged_mr_->addr, 3000 - kTmhSize, 4), -1);
}

TEST_F(TmTest, MaskSelectsBitsAndTheOldestEligibleEntryWins) {
  ASSERT_NO_FATAL_FAILURE(make_tm());
  ASSERT_EQ(add(0x100, 0xff00, 1, tagged_mr_, 0, 512, nullptr), 0);  // 0x1?? 
  ASSERT_EQ(add(0x1ab, ~0ull, 2, tagged_mr_, 512, 512, nullptr), 0);  // exactly 0x1ab
  expect_wc();
  expect_wc();
  send_tagged(IBV_TMH_EAGER, 0x1ab, 64, 1);
  EXPECT_EQ(expect_wc().wr_id, 1u) << "the older entry wins";
  send_tagged(IBV_TMH_EAGER, 0x1ab, 64, 2);
  EXPECT_EQ(expect_wc().wr_id, 2u);
}

TEST_F(TmTest, UnexpectedAndNoTagMessagesLandWholeInPlainBuffers) {
  ASSERT_NO_FATAL_FAILURE(make_tm());
  ASSERT_EQ(add(1, 0xffff, 1, tagged_mr_, 0, 512, nullptr), 0);
  expect_wc();
  post_plain(500);
  send_tagged(IBV_TMH_EAGER, 0x1234, 300, 6);
  TmWc w = expect_wc();
  EXPECT_EQ(w.status, IBV_WC_SUCCESS) << describe(w);
  EXPECT_EQ(w.opcode, IBV_WC_TM_RECV);
  EXPECT_EQ(w.flags, 0u);
  EXPECT_EQ(w.wr_id, 500u);
  EXPECT_EQ(w.tm.tag, 0u);
  EXPECT_EQ(w.byte_len, 300u);
  const auto* plain = static_cast<const uint8_t*>(plain_mr_->addr);
  EXPECT_EQ(plain[0], IBV_TMH_EAGER);
  EXPECT_EQ(plain[15], 0x34);
  EXPECT_EQ(mismatch(plain + kTmhSize, 300 - kTmhSize, 6), -1);

  post_plain(501);
  send_tagged(IBV_TMH_NO_TAG, 1, 100, 7);  // tag 1 is posted but NO_TAG never matches
  w = expect_wc();
  EXPECT_EQ(w.opcode, IBV_WC_TM_NO_TAG);
  EXPECT_EQ(w.wr_id, 501u);
  EXPECT_EQ(w.flags, 0u);
  EXPECT_EQ(w.byte_len, 100u);
  EXPECT_EQ(mismatch(plain + kTmhSize, 100 - kTmhSize, 7), -1);

  post_plain(502);
  send_tagged(IBV_TMH_FIN, 1, 32, 8);  // a FIN is reported as NO_TAG, as mlx5
  EXPECT_EQ(expect_wc().opcode, IBV_WC_TM_NO_TAG);
}

TEST_F(TmTest, TagsAddedBeforeSoftwareSyncsDoNotMatch) {
  ASSERT_NO_FATAL_FAILURE(make_tm());
  post_plain(600);
  post_plain(601);
  send_tagged(IBV_TMH_EAGER, 3, 64, 1);  // unexpected: the device counts 1
  EXPECT_EQ(expect_wc().wr_id, 600u);
  // Added while software has synced 0 of 1: held, and the ADD asks for a sync.
  ASSERT_EQ(add(3, 0xffff, 33, tagged_mr_, 0, 512, nullptr), 0);
  TmWc w = expect_wc();
  EXPECT_EQ(w.opcode, IBV_WC_TM_ADD);
  EXPECT_EQ(w.flags, unsigned(IBV_WC_TM_SYNC_REQ));
  send_tagged(IBV_TMH_EAGER, 3, 64, 2);
  w = expect_wc();
  EXPECT_EQ(w.wr_id, 601u) << "a held tag matched";
  EXPECT_EQ(w.flags, 0u);
  // Software has now seen both: the held tag becomes eligible.
  ASSERT_EQ(simple_op(IBV_WR_TAG_SYNC, 27, IBV_OPS_SIGNALED | IBV_OPS_TM_SYNC, 0, 2), 0);
  EXPECT_EQ(expect_wc().opcode, IBV_WC_TM_SYNC);
  send_tagged(IBV_TMH_EAGER, 3, 64, 3);
  w = expect_wc();
  EXPECT_EQ(w.wr_id, 33u) << describe(w);
  EXPECT_EQ(w.flags, unsigned(IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID));
}

TEST_F(TmTest, LegacyPollCqSeesTheSameOpcodesAndFlags) {
  ASSERT_NO_FATAL_FAILURE(make_tm());
  ASSERT_EQ(add(2, 0xffff, 22, tagged_mr_, 0, 512, nullptr), 0);
  ibv_wc wc;
  ASSERT_TRUE(poll_one(ibv_cq_ex_to_cq(cq_), &wc));
  EXPECT_EQ(wc.opcode, IBV_WC_TM_ADD);
  send_tagged(IBV_TMH_EAGER, 2, 80, 5);
  ASSERT_TRUE(poll_one(ibv_cq_ex_to_cq(cq_), &wc));
  EXPECT_EQ(wc.opcode, IBV_WC_TM_RECV);
  EXPECT_EQ(wc.wr_id, 22u);
  EXPECT_EQ(wc.wc_flags, unsigned(IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID));
  EXPECT_TRUE(wc.opcode & IBV_WC_RECV);
}

TEST_F(TmTest, RendezvousOfOneMebibyteIsPulledByTheDeviceThenFinished) {
  ASSERT_NO_FATAL_FAILURE(make_tm());
  constexpr uint32_t kLen = 1u << 20;
  ibv_mr* src = reg_buffer(kLen, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  ibv_mr* dst = reg_buffer(kLen, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(src, nullptr);
  ASSERT_NE(dst, nullptr);
  fill(src->addr, kLen, 21);
  ASSERT_EQ(add(10, 0xffff, 100, dst, 0, kLen, nullptr), 0);
  expect_wc();
  ASSERT_EQ(post_recv_mr(client_, 7, send_mr_, 2048, 64), 0);  // for the FIN
  ASSERT_NO_FATAL_FAILURE(send_rndv(10, src, kLen, src->rkey, 0x77));
  TmWc m = expect_wc();
  EXPECT_EQ(m.status, IBV_WC_SUCCESS) << describe(m);
  EXPECT_EQ(m.opcode, IBV_WC_TM_RECV);
  EXPECT_EQ(m.flags, unsigned(IBV_WC_TM_MATCH));
  EXPECT_EQ(m.wr_id, 100u);
  EXPECT_EQ(m.tm.tag, 10u);
  EXPECT_EQ(m.tm.priv, 0x77u);
  ibv_wc wc;
  ASSERT_TRUE(poll_one(client_cq_, &wc)) << "no FIN";
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << vt::describe(wc);
  EXPECT_EQ(wc.opcode, IBV_WC_RECV);
  EXPECT_EQ(wc.wr_id, 7u);
  EXPECT_EQ(wc.byte_len, 32u);
  const auto* fin = static_cast<const uint8_t*>(send_mr_->addr) + 2048;
  EXPECT_EQ(fin[0], IBV_TMH_FIN);
  EXPECT_EQ(std::memcmp(fin + 1, static_cast<const uint8_t*>(send_mr_->addr) + 1, 31), 0) << "the request's TMH and RVH";
  TmWc d = expect_wc();
  EXPECT_EQ(d.status, IBV_WC_SUCCESS) << describe(d);
  EXPECT_EQ(d.opcode, IBV_WC_TM_RECV);
  EXPECT_EQ(d.flags, unsigned(IBV_WC_TM_DATA_VALID));
  EXPECT_EQ(d.wr_id, 100u);
  EXPECT_EQ(d.tm.tag, 0u);
  EXPECT_EQ(d.byte_len, kLen);
  EXPECT_EQ(mismatch(dst->addr, kLen, 21), -1);
  EXPECT_TRUE(tm_cq_empty(cq_)) << "the device's READ and FIN completed on no CQ";
}

TEST_F(TmTest, ABufferShorterThanTheRvhLengthIsLeftToSoftware) {
  // As mlx5 (CONSUMED_MSG_SW_RDNV): one completion, TM_RNDV_INCOMPLETE with
  // MATCH | DATA_VALID, TMH + RVH in the tagged buffer for software to do
  // the READ and the FIN; the device sends nothing.
  ASSERT_NO_FATAL_FAILURE(make_tm());
  ibv_mr* src = reg_buffer(kBuf, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  ASSERT_NE(src, nullptr);
  ASSERT_EQ(add(4, 0xffff, 44, tagged_mr_, 0, 512, nullptr), 0);
  expect_wc();
  ASSERT_EQ(post_recv_mr(client_, 7, send_mr_, 2048, 64), 0);
  ASSERT_NO_FATAL_FAILURE(send_rndv(4, src, 513, src->rkey));
  TmWc w = expect_wc();
  EXPECT_EQ(w.status, IBV_WC_TM_RNDV_INCOMPLETE) << describe(w);
  EXPECT_EQ(w.opcode, IBV_WC_TM_RECV);
  EXPECT_EQ(w.wr_id, 44u);
  EXPECT_EQ(w.flags, unsigned(IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID));
  EXPECT_EQ(w.tm.tag, 4u);
  EXPECT_EQ(w.byte_len, 64u);
  EXPECT_EQ(std::memcmp(tagged_mr_->addr, send_mr_->addr, 64), 0);
  ibv_wc wc;
  EXPECT_FALSE(poll_one(client_cq_, &wc, 0.2)) << "a FIN for a rendezvous left to software";
  EXPECT_TRUE(tm_cq_empty(cq_)) << "a second completion for a rendezvous left to software";
}

TEST_F(TmTest, ABadRkeyInTheRvhEndsTheTaggedBufferInARemoteAccessError) {
  ASSERT_NO_FATAL_FAILURE(make_tm(16, 32));
  ibv_mr* src = reg_buffer(kBuf, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  ASSERT_NE(src, nullptr);
  ASSERT_EQ(add(4, 0xffff, 44, tagged_mr_, 0, kBuf, nullptr), 0);
  expect_wc();
  ASSERT_NO_FATAL_FAILURE(send_rndv(4, src, 1000, src->rkey ^ 0x100));
  EXPECT_EQ(expect_wc().flags, unsigned(IBV_WC_TM_MATCH));
  TmWc w = expect_wc();
  EXPECT_EQ(w.status, IBV_WC_REM_ACCESS_ERR) << describe(w);
  EXPECT_EQ(w.opcode, IBV_WC_TM_RECV);
  EXPECT_EQ(w.wr_id, 44u);
  EXPECT_EQ(qp_state(server_), IBV_QPS_ERR);
  // Its tag is free again: the list of 16 takes 16 more.
  for (uint64_t t = 0; t < 16; ++t) ASSERT_EQ(add(t, ~0ull, t, tagged_mr_, 0, 64, nullptr, 0), 0);
}

TEST_F(TmTest, AQpInErrorWithARendezvousReadOutstandingFlushesTheTaggedBuffer) {
  // The server's READ goes out after the client stopped answering; the
  // server QP is moved to the error state while it waits.
  ASSERT_NO_FATAL_FAILURE(make_tm(16, 16, /*server_rts=*/false));
  ibv_mr* src = reg_buffer(kBuf, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  ASSERT_NE(src, nullptr);
  ASSERT_EQ(add(4, 0xffff, 44, tagged_mr_, 0, kBuf, nullptr), 0);
  expect_wc();
  ASSERT_NO_FATAL_FAILURE(send_rndv(4, src, 1000, src->rkey));
  EXPECT_EQ(expect_wc().flags, unsigned(IBV_WC_TM_MATCH));
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(ibv_modify_qp(client_, &a, IBV_QP_STATE), 0);
  ASSERT_NO_FATAL_FAILURE(server_to_rts());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the READ is out, unanswered
  EXPECT_TRUE(tm_cq_empty(cq_));
  ASSERT_EQ(ibv_modify_qp(server_, &a, IBV_QP_STATE), 0);
  TmWc w = expect_wc();
  EXPECT_EQ(w.status, IBV_WC_WR_FLUSH_ERR) << describe(w);
  EXPECT_EQ(w.opcode, IBV_WC_TM_RECV);
  EXPECT_EQ(w.wr_id, 44u);
  EXPECT_TRUE(tm_cq_empty(cq_)) << "the device's READ flushed on no CQ";
}

TEST_F(TmTest, AQpDestroyedWithARendezvousQueuedGivesTheBufferBackBeforeItsSrqGoes) {
  ASSERT_NO_FATAL_FAILURE(make_tm(4, 8, /*server_rts=*/false));
  ibv_mr* src = reg_buffer(kBuf, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  ASSERT_NE(src, nullptr);
  for (uint64_t t = 1; t <= 4; ++t) ASSERT_EQ(add(t, ~0ull, t, tagged_mr_, 0, kBuf, nullptr, 0), 0);
  ASSERT_NO_FATAL_FAILURE(send_rndv(2, src, 1000, src->rkey));
  EXPECT_EQ(expect_wc().flags, unsigned(IBV_WC_TM_MATCH));
  disown(server_);
  ASSERT_EQ(ibv_destroy_qp(server_), 0);
  TmWc w = expect_wc();
  EXPECT_EQ(w.status, IBV_WC_WR_FLUSH_ERR) << describe(w);
  EXPECT_EQ(w.wr_id, 2u);
  disown(srq_);
  EXPECT_EQ(ibv_destroy_srq(srq_), 0);
}

TEST_F(TmTest, SendWithImmMatchesAndCarriesItsImmediate) {
  ASSERT_NO_FATAL_FAILURE(make_tm());
  ASSERT_EQ(add(6, 0xffff, 66, tagged_mr_, 0, 512, nullptr), 0);
  expect_wc();
  auto* b = static_cast<uint8_t*>(send_mr_->addr);
  write_tmh(b, IBV_TMH_EAGER, 6);
  fill(b + kTmhSize, 100, 11);
  ibv_sge sge = sge_of(send_mr_, 0, kTmhSize + 100);
  ASSERT_EQ(post_send(client_, 1, IBV_WR_SEND_WITH_IMM, &sge, 1, IBV_SEND_SIGNALED, 0, 0, htonl(0x5566)), 0);
  ibv_wc wc;
  ASSERT_TRUE(poll_one(client_cq_, &wc));
  ASSERT_TRUE(poll_one(ibv_cq_ex_to_cq(cq_), &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << vt::describe(wc);
  EXPECT_EQ(wc.opcode, IBV_WC_TM_RECV);
  EXPECT_EQ(wc.wr_id, 66u);
  EXPECT_EQ(wc.wc_flags, unsigned(IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID | IBV_WC_WITH_IMM));
  EXPECT_EQ(ntohl(wc.imm_data), 0x5566u);
  EXPECT_EQ(mismatch(tagged_mr_->addr, 100, 11), -1);
}

TEST_F(TmTest, ATmSrqWithTagsPostedIsDestroyedAfterItsQp) {
  ASSERT_NO_FATAL_FAILURE(make_tm(4, 8));
  for (uint64_t t = 1; t <= 4; ++t) ASSERT_EQ(add(t, ~0ull, t, tagged_mr_, 0, 64, nullptr, 0), 0);
  EXPECT_EQ(ibv_destroy_srq(srq_), EBUSY) << "its QP is still attached";
  disown(server_);
  ASSERT_EQ(ibv_destroy_qp(server_), 0);
  disown(srq_);
  EXPECT_EQ(ibv_destroy_srq(srq_), 0);
}

}  // namespace
}  // namespace vt::srq_test
