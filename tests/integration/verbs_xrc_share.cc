// Verbs semantics: XRC domains shared by two processes (a child of this
// binary in `--xrc-child` mode opens the same file's domain).

#include "tests/integration/verbs_srq_fixture.h"

namespace vt {
namespace {

using namespace srq_test;

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

// The creator's ibv_destroy_qp drops its handle (the shared QPs of kernel
// drivers/infiniband/core/verbs.c); the target QP lives on for the process
// that opened it, and keeps delivering.
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

// Kernel drivers/infiniband/core/uverbs_cmd.c (ib_uverbs_open_qp takes a
// reference on the domain handle): ibv_close_xrcd is EBUSY while a QP opened
// through that handle exists.
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

using namespace srq_test;


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
