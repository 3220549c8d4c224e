// Verbs semantics: XRC domains, XRC SRQs and XRC QPs within one process,
// ibv_open_qp, traffic through XRC targets and its error cases.

#include "tests/integration/verbs_srq_fixture.h"

namespace vt {
namespace {

using namespace srq_test;

class XrcTest : public SrqTest {
 protected:
  // A domain with an XRC SRQ of 8 on its own CQ, and an initiator (send CQ
  // scq) connected to a target in the domain.
  struct Link {
    ibv_cq* srq_cq = nullptr;
    ibv_cq* scq = nullptr;
    ibv_srq* srq = nullptr;
    uint32_t srqn = 0;
    ibv_qp* ini = nullptr;
    ibv_qp* tgt = nullptr;
  };
  void xrc_link(Link* l, bool wr_api = false) {
    ibv_xrcd* xrcd = open_xrcd(-1, 0);
    l->srq_cq = make_cq();
    l->scq = make_cq();
    ASSERT_TRUE(xrcd && l->srq_cq && l->scq);
    l->srq = make_xrc_srq(xrcd, l->srq_cq, 8);
    ASSERT_NE(l->srq, nullptr);
    ASSERT_EQ(ibv_get_srq_num(l->srq, &l->srqn), 0);
    xrc_pair(xrcd, l->scq, &l->ini, &l->tgt, wr_api);
  }
};

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
// (infiniband/verbs.h; the kernel fills both from one value, and libibverbs copies
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
  // A target QP of the domain does not hold the SRQ (kernel
  // drivers/infiniband/core/verbs.c, ib_destroy_srq_user).
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
  Link l;
  xrc_link(&l);
  ASSERT_FALSE(HasFailure());
  ibv_mr* remote = reg_buffer(8192, kRw, 0);
  ibv_mr* local = reg_buffer(8192, IBV_ACCESS_LOCAL_WRITE, 0);
  ASSERT_TRUE(remote && local);
  ibv_sge rs = sge_of(remote, 4096, 64);
  ASSERT_EQ(post_srq_one(l.srq, 1, &rs, 1), 0);
  fill(local->addr, 3000, 5);
  ibv_sge s = sge_of(local, 0, 3000);
  ASSERT_EQ(post_xrc(l.ini, 1, IBV_WR_RDMA_WRITE, &s, 1, l.srqn, 0, addr_of(remote), remote->rkey), 0);
  ibv_wc wc;
  VT_POLL_ONE(l.scq, &wc);
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(mismatch(remote->addr, 3000, 5), -1);
  ibv_sge back = sge_of(local, 4096, 3000);
  ASSERT_EQ(post_xrc(l.ini, 2, IBV_WR_RDMA_READ, &back, 1, l.srqn, 0, addr_of(remote), remote->rkey), 0);
  VT_POLL_ONE(l.scq, &wc);
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(mismatch(static_cast<uint8_t*>(local->addr) + 4096, 3000, 5), -1);
  EXPECT_TRUE(drain_for(l.srq_cq, 50).empty()) << "WRITE and READ consume no receive";
  // WRITE with immediate does consume one.
  ASSERT_EQ(post_xrc(l.ini, 3, IBV_WR_RDMA_WRITE_WITH_IMM, &s, 1, l.srqn, htonl(77), addr_of(remote),
                     remote->rkey),
            0);
  VT_POLL_ONE(l.scq, &wc);
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  VT_POLL_ONE(l.srq_cq, &wc);
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(ntohl(wc.imm_data), 77u);
  EXPECT_EQ(wc.qp_num, l.tgt->qp_num);
}

// ATOMIC WRITE on XRC (IBA 1.5 annex A19 defines it for XRC as for RC): the
// target's memory key is checked in the named SRQ's PD, and nothing of the
// SRQ is consumed.
TEST_F(XrcTest, AtomicWriteThroughATarget) {
  Link l;
  xrc_link(&l, /*wr_api=*/true);
  ASSERT_FALSE(HasFailure());
  ibv_mr* remote = reg_buffer(4096, kRw, 0x11);
  ASSERT_NE(remote, nullptr);
  ibv_qp_ex* x = ibv_qp_to_qp_ex(l.ini);
  const uint64_t value = 0x0123456789abcdefull;
  ibv_wr_start(x);
  x->wr_id = 5;
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_atomic_write(x, remote->rkey, addr_of(remote, 64), &value);
  ibv_wr_set_xrc_srqn(x, l.srqn);
  ASSERT_EQ(ibv_wr_complete(x), 0);
  ibv_wc wc;
  VT_POLL_ONE(l.scq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(wc.opcode, IBV_WC_ATOMIC_WRITE);
  EXPECT_EQ(std::memcmp(static_cast<uint8_t*>(remote->addr) + 64, &value, 8), 0);
  EXPECT_TRUE(drain_for(l.srq_cq, 50).empty()) << "ATOMIC WRITE consumes no receive";
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
  Link l;
  xrc_link(&l);  // rnr_retry 7: retried forever
  ASSERT_FALSE(HasFailure());
  ibv_mr* mr = reg_buffer(4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  fill(mr->addr, 500, 9);
  ibv_sge s = sge_of(mr, 0, 500);
  ASSERT_EQ(post_xrc(l.ini, 1, IBV_WR_SEND, &s, 1, l.srqn), 0);
  EXPECT_TRUE(drain_for(l.scq, 100).empty()) << "completed with nothing to receive into";
  EXPECT_EQ(qp_state(l.ini), IBV_QPS_RTS);
  ibv_sge r = sge_of(mr, 2048, 1024);
  ASSERT_EQ(post_srq_one(l.srq, 5, &r, 1), 0);
  ibv_wc wc;
  VT_POLL_ONE(l.srq_cq, &wc);
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(wc.wr_id, 5u);
  EXPECT_EQ(wc.qp_num, l.tgt->qp_num);
  EXPECT_EQ(mismatch(static_cast<uint8_t*>(mr->addr) + 2048, 500, 9), -1);
  VT_POLL_ONE(l.scq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
}

// The kernel's ib_open_qp (drivers/infiniband/core/verbs.c) does not care which process
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


}  // namespace
}  // namespace vt
