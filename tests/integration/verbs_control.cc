// Verbs semantics, part 2: the control path (QP state machine, queries,
// object lifetimes, memory registration, CQ resize, completion channels and
// the asynchronous event fd).
#include <fcntl.h>
#include <unistd.h>

#include <set>

#include "tests/integration/verbs_fixture.h"

namespace vt {
namespace {

class Control : public VerbsTest {
 protected:
  // An RC pair whose sender completes on `small` (destroyed with it): its
  // QP and the receiver's, connected, with a buffer; n receives posted.
  struct SmallCqPair {
    ibv_qp* qa = nullptr;
    ibv_qp* qb = nullptr;
    ibv_cq* cqb = nullptr;
    ibv_mr* mr = nullptr;
  };
  SmallCqPair small_cq_pair(ibv_cq* small, int n) {
    SmallCqPair p;
    p.cqb = make_cq(256);
    EXPECT_NE(p.cqb, nullptr);
    p.qa = make_qp(IBV_QPT_RC, small, small);
    p.qb = make_qp(IBV_QPT_RC, p.cqb, p.cqb);
    if (!p.qa || !p.qb || !p.cqb) {
      ADD_FAILURE() << "QPs";
      return p;
    }
    forget(p.qa);
    defer([qa = p.qa, small] {
      EXPECT_EQ(ibv_destroy_qp(qa), 0);
      EXPECT_EQ(ibv_destroy_cq(small), 0);
    });
    connect_qp(p.qa, p.qb->qp_num);
    connect_qp(p.qb, p.qa->qp_num);
    p.mr = reg_buffer(4096, IBV_ACCESS_LOCAL_WRITE, 1);
    EXPECT_NE(p.mr, nullptr);
    EXPECT_LE(n, 63);
    for (int i = 0; p.mr && i < n; ++i) EXPECT_EQ(post_recv_mr(p.qb, i, p.mr, 32 * i, 32), 0);
    return p;
  }
};

TEST_F(Control, ModifyQpWithWrongAttributeMaskIsEinval) {
  ibv_cq* cq = make_cq();
  ASSERT_NE(cq, nullptr);
  ibv_qp* qp = make_qp(IBV_QPT_RC, cq, cq);
  ASSERT_NE(qp, nullptr);

  ibv_qp_attr a{};
  // RESET -> INIT without IBV_QP_PORT.
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
  EXPECT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_ACCESS_FLAGS), EINVAL);
  EXPECT_EQ(qp_state(qp), IBV_QPS_RESET);
  // RESET -> RTR skips INIT.
  ibv_qp_attr r{};
  r.qp_state = IBV_QPS_RTR;
  r.path_mtu = IBV_MTU_1024;
  r.dest_qp_num = qp->qp_num;
  r.ah_attr = loopback_av();
  r.max_dest_rd_atomic = 1;
  r.min_rnr_timer = 12;
  const int rtr_mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                       IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  EXPECT_EQ(ibv_modify_qp(qp, &r, rtr_mask), EINVAL);
  EXPECT_EQ(qp_state(qp), IBV_QPS_RESET);
  // RESET -> INIT with an attribute INIT does not take (IBV_QP_PATH_MTU).
  a.path_mtu = IBV_MTU_1024;
  EXPECT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                      IBV_QP_ACCESS_FLAGS | IBV_QP_PATH_MTU),
            EINVAL);
  EXPECT_EQ(qp_state(qp), IBV_QPS_RESET);
  // Correct.
  ASSERT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                      IBV_QP_ACCESS_FLAGS),
            0);
  EXPECT_EQ(qp_state(qp), IBV_QPS_INIT);
  // INIT -> RTR for RC without the address vector.
  EXPECT_EQ(ibv_modify_qp(qp, &r, rtr_mask & ~IBV_QP_AV), EINVAL);
  EXPECT_EQ(qp_state(qp), IBV_QPS_INIT);
  // INIT -> RTS skips RTR.
  ibv_qp_attr s{};
  s.qp_state = IBV_QPS_RTS;
  s.timeout = 14;
  s.retry_cnt = 7;
  s.rnr_retry = 7;
  s.max_rd_atomic = 1;
  const int rts_mask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                       IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
  EXPECT_EQ(ibv_modify_qp(qp, &s, rts_mask), EINVAL);
  EXPECT_EQ(qp_state(qp), IBV_QPS_INIT);
  ASSERT_EQ(ibv_modify_qp(qp, &r, rtr_mask), 0);
  // RTR -> RTS missing IBV_QP_TIMEOUT.
  EXPECT_EQ(ibv_modify_qp(qp, &s, rts_mask & ~IBV_QP_TIMEOUT), EINVAL);
  EXPECT_EQ(qp_state(qp), IBV_QPS_RTR);
  EXPECT_EQ(ibv_modify_qp(qp, &s, rts_mask), 0);
  EXPECT_EQ(qp_state(qp), IBV_QPS_RTS);
  // Any state -> RESET needs nothing else.
  ibv_qp_attr reset{};
  reset.qp_state = IBV_QPS_RESET;
  EXPECT_EQ(ibv_modify_qp(qp, &reset, IBV_QP_STATE), 0);
  EXPECT_EQ(qp_state(qp), IBV_QPS_RESET);
}

TEST_F(Control, QueryQpReturnsWhatWasSet) {
  ibv_cq* cq = make_cq();
  ASSERT_NE(cq, nullptr);
  QpCaps caps;
  caps.max_send_wr = 40;
  caps.max_recv_wr = 20;
  caps.max_send_sge = 3;
  caps.max_recv_sge = 2;
  caps.max_inline_data = 100;
  ibv_qp* qa = make_qp(IBV_QPT_RC, cq, cq, caps, 1);
  ibv_qp* qb = make_qp(IBV_QPT_RC, cq, cq, caps, 1);
  ASSERT_TRUE(qa && qb);
  ConnectOpts o;
  o.access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  o.min_rnr_timer = 9;
  o.timeout = 17;
  o.retry_cnt = 5;
  o.rnr_retry = 3;
  o.max_rd_atomic = 2;
  o.max_dest_rd_atomic = 3;
  o.sq_psn = 0x1234;
  o.rq_psn = 0x4321;
  connect_qp(qa, qb->qp_num, o);
  ASSERT_FALSE(HasFailure());

  ibv_qp_attr a{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(ibv_query_qp(qa, &a, IBV_QP_STATE | IBV_QP_CUR_STATE | IBV_QP_PATH_MTU |
                                     IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_SQ_PSN |
                                     IBV_QP_ACCESS_FLAGS | IBV_QP_AV | IBV_QP_PORT |
                                     IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                     IBV_QP_MIN_RNR_TIMER | IBV_QP_MAX_QP_RD_ATOMIC |
                                     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_CAP,
                         &init),
            0);
  EXPECT_EQ(a.qp_state, IBV_QPS_RTS);
  EXPECT_EQ(a.path_mtu, IBV_MTU_1024);
  EXPECT_EQ(a.dest_qp_num, qb->qp_num);
  EXPECT_EQ(a.rq_psn, 0x4321u);
  EXPECT_EQ(a.sq_psn, 0x1234u);
  EXPECT_EQ(a.qp_access_flags, o.access);
  EXPECT_EQ(a.port_num, 1);
  EXPECT_EQ(a.timeout, 17);
  EXPECT_EQ(a.retry_cnt, 5);
  EXPECT_EQ(a.rnr_retry, 3);
  EXPECT_EQ(a.min_rnr_timer, 9);
  EXPECT_EQ(a.max_rd_atomic, 2);
  EXPECT_EQ(a.max_dest_rd_atomic, 3);
  EXPECT_EQ(a.ah_attr.is_global, 1);
  EXPECT_EQ(std::memcmp(a.ah_attr.grh.dgid.raw, gid_.raw, 16), 0);
  EXPECT_EQ(a.ah_attr.grh.sgid_index, 0);
  EXPECT_EQ(a.ah_attr.grh.hop_limit, 1);
  EXPECT_GE(a.cap.max_send_wr, 40u);
  EXPECT_GE(a.cap.max_recv_wr, 20u);
  EXPECT_GE(a.cap.max_send_sge, 3u);
  EXPECT_GE(a.cap.max_recv_sge, 2u);
  EXPECT_GE(a.cap.max_inline_data, 100u);
  EXPECT_EQ(init.qp_type, IBV_QPT_RC);
  EXPECT_EQ(init.send_cq, cq);
  EXPECT_EQ(init.recv_cq, cq);
  EXPECT_EQ(init.sq_sig_all, 1);
  EXPECT_EQ(init.cap.max_send_wr, a.cap.max_send_wr);
  EXPECT_EQ(qa->state, IBV_QPS_RTS);
}

TEST_F(Control, QueryDeviceAndDeviceEx) {
  ibv_device_attr d{};
  ASSERT_EQ(ibv_query_device(ctx_, &d), 0);
  EXPECT_NE(d.node_guid, 0u);
  EXPECT_NE(d.sys_image_guid, 0u);
  EXPECT_NE(d.fw_ver[0], '\0');
  EXPECT_EQ(d.phys_port_cnt, 1);
  EXPECT_GT(d.max_qp, 0);
  EXPECT_GE(d.max_qp_wr, 1024);
  EXPECT_GE(d.max_sge, 4);
  EXPECT_GT(d.max_cq, 0);
  EXPECT_GE(d.max_cqe, 1024);
  EXPECT_GT(d.max_mr, 0);
  EXPECT_GT(d.max_mr_size, 1u << 20);
  EXPECT_GT(d.max_pd, 0);
  EXPECT_GT(d.max_qp_rd_atom, 0);
  EXPECT_GT(d.max_qp_init_rd_atom, 0);
  EXPECT_NE(d.atomic_cap, IBV_ATOMIC_NONE);
  EXPECT_NE(d.page_size_cap & 4096, 0u);
  // The node GUID is also what the device list reports.
  EXPECT_EQ(ibv_get_device_guid(ctx_->device), d.node_guid);

  ibv_device_attr_ex x{};
  ASSERT_EQ(ibv_query_device_ex(ctx_, nullptr, &x), 0);
  EXPECT_EQ(x.orig_attr.node_guid, d.node_guid);
  EXPECT_EQ(x.orig_attr.max_qp, d.max_qp);
  EXPECT_EQ(x.orig_attr.max_cqe, d.max_cqe);
  EXPECT_EQ(x.orig_attr.phys_port_cnt, 1);
  EXPECT_EQ(std::string(x.orig_attr.fw_ver), std::string(d.fw_ver));
}

TEST_F(Control, QueryPortIsActiveEthernet) {
  ibv_port_attr pa{};
  ASSERT_EQ(ibv_query_port(ctx_, 1, &pa), 0);
  EXPECT_EQ(pa.link_layer, IBV_LINK_LAYER_ETHERNET);
  EXPECT_EQ(pa.state, IBV_PORT_ACTIVE);
  EXPECT_GE(pa.active_mtu, IBV_MTU_1024);
  EXPECT_GE(pa.max_mtu, pa.active_mtu);
  EXPECT_GT(pa.gid_tbl_len, 0);
  EXPECT_GT(pa.max_msg_sz, 1u << 20);
  EXPECT_NE(ibv_query_port(ctx_, 2, &pa), 0) << "the device has one port";
}

TEST_F(Control, GidZeroIsRoceV2) {
  ibv_gid_entry e{};
  ASSERT_EQ(ibv_query_gid_ex(ctx_, 1, 0, &e, 0), 0);
  EXPECT_EQ(e.gid_type, IBV_GID_TYPE_ROCE_V2);
  EXPECT_EQ(e.gid_index, 0u);
  EXPECT_EQ(e.port_num, 1u);
  EXPECT_EQ(std::memcmp(e.gid.raw, gid_.raw, 16), 0);
  const ibv_gid zero{};
  EXPECT_NE(std::memcmp(gid_.raw, zero.raw, 16), 0);
}

TEST_F(Control, CreateCqWithCompVectorOutOfRangeIsEinval) {
  errno = 0;
  ibv_cq* cq = ibv_create_cq(ctx_, 16, nullptr, nullptr, ctx_->num_comp_vectors);
  EXPECT_EQ(cq, nullptr);
  EXPECT_EQ(errno, EINVAL);
  if (cq) ibv_destroy_cq(cq);
  cq = ibv_create_cq(ctx_, 16, nullptr, nullptr, ctx_->num_comp_vectors - 1);
  EXPECT_NE(cq, nullptr);
  if (cq) { EXPECT_EQ(ibv_destroy_cq(cq), 0); }
}

TEST_F(Control, DeallocPdInUseIsEbusy) {
  ibv_pd* pd = ibv_alloc_pd(ctx_);
  ASSERT_NE(pd, nullptr);
  uint8_t* buf = buffer(4096);
  ibv_mr* mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(ibv_dealloc_pd(pd), EBUSY);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
}

TEST_F(Control, DestroyCqWithQpAttachedIsEbusy) {
  ibv_cq* cq = ibv_create_cq(ctx_, 16, nullptr, nullptr, 0);
  ASSERT_NE(cq, nullptr);
  ibv_qp_init_attr init{};
  init.send_cq = cq;
  init.recv_cq = cq;
  init.qp_type = IBV_QPT_RC;
  init.cap = {8, 8, 1, 1, 0};
  ibv_qp* qp = ibv_create_qp(pd_, &init);
  ASSERT_NE(qp, nullptr);
  EXPECT_EQ(ibv_destroy_cq(cq), EBUSY);
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
}

TEST_F(Control, RegMrAccessFlags) {
  uint8_t* buf = buffer(8192);
  errno = 0;
  ibv_mr* mr = ibv_reg_mr(pd_, buf, 4096, IBV_ACCESS_REMOTE_WRITE);
  EXPECT_EQ(mr, nullptr) << "REMOTE_WRITE requires LOCAL_WRITE";
  EXPECT_EQ(errno, EINVAL);
  if (mr) ibv_dereg_mr(mr);
  errno = 0;
  mr = ibv_reg_mr(pd_, buf, 4096, IBV_ACCESS_REMOTE_ATOMIC);
  EXPECT_EQ(mr, nullptr) << "REMOTE_ATOMIC requires LOCAL_WRITE";
  EXPECT_EQ(errno, EINVAL);
  if (mr) ibv_dereg_mr(mr);
  // Optional access flags are hints: accepted.
  mr = ibv_reg_mr(pd_, buf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING);
  EXPECT_NE(mr, nullptr) << std::strerror(errno);
  if (mr) { EXPECT_EQ(ibv_dereg_mr(mr), 0); }
  // Read-only registration is fine.
  mr = ibv_reg_mr(pd_, buf, 4096, 0);
  EXPECT_NE(mr, nullptr) << std::strerror(errno);
  if (mr) {
    EXPECT_EQ(mr->addr, buf);
    EXPECT_EQ(mr->length, 4096u);
    EXPECT_EQ(mr->pd, pd_);
    EXPECT_EQ(ibv_dereg_mr(mr), 0);
  }
}

TEST_F(Control, ReregMrChangesAccessAndTranslation) {
  Pair p = make_pair();
  ASSERT_FALSE(HasFailure());
  ibv_mr* src = reg_buffer(256, IBV_ACCESS_LOCAL_WRITE, 0x3c);
  ASSERT_NE(src, nullptr);
  uint8_t* first = buffer(4096, 0);
  uint8_t* second = buffer(4096, 0);
  // Registered without remote write; rereg adds it.
  ibv_mr* mr = ibv_reg_mr(pd_, first, 4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  ASSERT_EQ(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0,
                         IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE),
            0);
  ibv_sge s{uint64_t(uintptr_t(src->addr)), 64, src->lkey};
  ASSERT_EQ(post_send(p.a.qp, 1, IBV_WR_RDMA_WRITE, &s, 1, IBV_SEND_SIGNALED,
                      uint64_t(uintptr_t(first)), mr->rkey),
            0);
  ibv_wc wc;
  bool ok = poll_one(p.a.cq, &wc);
  EXPECT_TRUE(ok);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(first[63], 0x3c);
  // Move it to another buffer.
  ASSERT_EQ(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, second, 4096, 0), 0);
  EXPECT_EQ(mr->addr, second);
  EXPECT_EQ(mr->length, 4096u);
  ASSERT_EQ(post_send(p.a.qp, 2, IBV_WR_RDMA_WRITE, &s, 1, IBV_SEND_SIGNALED,
                      uint64_t(uintptr_t(second)) + 100, mr->rkey),
            0);
  ok = poll_one(p.a.cq, &wc);
  EXPECT_TRUE(ok);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(second[100], 0x3c);
  EXPECT_EQ(second[163], 0x3c);
  EXPECT_EQ(first[100], 0) << "the old translation is gone";
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
}

TEST_F(Control, ResizeCqKeepsUnpolledCompletions) {
  ibv_cq* cqa = ibv_create_cq(ctx_, 16, nullptr, nullptr, 0);
  ASSERT_NE(cqa, nullptr);
  defer([cqa] { EXPECT_EQ(ibv_destroy_cq(cqa), 0); });
  ibv_cq* cqb = make_cq();
  ASSERT_NE(cqb, nullptr);
  ibv_qp* qa = make_qp(IBV_QPT_RC, cqa, cqa);
  ibv_qp* qb = make_qp(IBV_QPT_RC, cqb, cqb);
  ASSERT_TRUE(qa && qb);
  // Deferred calls run before the fixture's objects are destroyed, last
  // deferred first: the QPs go, then cqa.
  forget(qa);
  forget(qb);
  defer([qa, qb] {
    EXPECT_EQ(ibv_destroy_qp(qa), 0);
    EXPECT_EQ(ibv_destroy_qp(qb), 0);
  });
  connect_qp(qa, qb->qp_num);
  connect_qp(qb, qa->qp_num);
  ASSERT_FALSE(HasFailure());
  ibv_mr* mr = reg_buffer(4096, IBV_ACCESS_LOCAL_WRITE, 0);
  ASSERT_NE(mr, nullptr);
  for (int i = 0; i < 10; ++i) ASSERT_EQ(post_recv_mr(qb, 100 + i, mr, 64 * i, 64), 0);
  ibv_sge s{uint64_t(uintptr_t(mr->addr)) + 2048, 8, mr->lkey};
  for (int i = 0; i < 5; ++i) ASSERT_EQ(post_send(qa, i, IBV_WR_SEND, &s, 1), 0);
  // Wait until all five are delivered (the receiver's CQ), leaving cqa unpolled.
  ASSERT_EQ(poll_n(cqb, 5).size(), 5u);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));

  ASSERT_EQ(ibv_resize_cq(cqa, 512), 0);
  EXPECT_GE(cqa->cqe, 512);
  std::vector<ibv_wc> wcs = poll_n(cqa, 5);
  ASSERT_EQ(wcs.size(), 5u) << "completions written before the resize survive it";
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(wcs[i].wr_id, uint64_t(i));
    EXPECT_EQ(wcs[i].status, IBV_WC_SUCCESS) << describe(wcs[i]);
  }
  // And the resized CQ keeps working.
  for (int i = 5; i < 10; ++i) ASSERT_EQ(post_send(qa, i, IBV_WR_SEND, &s, 1), 0);
  wcs = poll_n(cqa, 5);
  ASSERT_EQ(wcs.size(), 5u);
  EXPECT_EQ(wcs[4].wr_id, 9u);
  // Shrinking below what is queued is refused or keeps the entries; here
  // nothing is queued, so shrinking succeeds.
  EXPECT_EQ(ibv_resize_cq(cqa, 8), 0);
  EXPECT_GE(cqa->cqe, 8);
}

TEST_F(Control, CompletionChannelDeliversEvents) {
  ibv_comp_channel* ch = make_channel();
  ASSERT_NE(ch, nullptr);
  int marker = 0;
  ibv_cq* cqb = make_cq(64, ch, &marker);
  ibv_cq* cqa = make_cq();
  ASSERT_TRUE(cqa && cqb);
  ibv_qp* qa = make_qp(IBV_QPT_RC, cqa, cqa);
  ibv_qp* qb = make_qp(IBV_QPT_RC, cqb, cqb);
  ASSERT_TRUE(qa && qb);
  connect_qp(qa, qb->qp_num);
  connect_qp(qb, qa->qp_num);
  ASSERT_FALSE(HasFailure());
  ibv_mr* mr = reg_buffer(4096, IBV_ACCESS_LOCAL_WRITE, 1);
  ASSERT_NE(mr, nullptr);

  // Both are real file descriptors that poll(2) understands.
  pollfd fds[2] = {{ch->fd, POLLIN, 0}, {ctx_->async_fd, POLLIN, 0}};
  ASSERT_EQ(poll(fds, 2, 0), 0) << "no events yet";
  EXPECT_FALSE(fds[0].revents & POLLNVAL);
  EXPECT_FALSE(fds[1].revents & POLLNVAL);

  unsigned events = 0;
  for (int round = 0; round < 3; ++round) {
    ASSERT_EQ(ibv_req_notify_cq(cqb, 0), 0);
    ASSERT_EQ(post_recv_mr(qb, 10 + round, mr, 0, 1024), 0);
    ibv_sge s{uint64_t(uintptr_t(mr->addr)) + 2048, 16, mr->lkey};
    ASSERT_EQ(post_send(qa, round, IBV_WR_SEND, &s, 1), 0);
    ASSERT_TRUE(fd_readable(ch->fd, 5000)) << "no completion event, round " << round;
    ibv_cq* ev_cq = nullptr;
    void* ev_ctx = nullptr;
    ASSERT_EQ(ibv_get_cq_event(ch, &ev_cq, &ev_ctx), 0);
    ++events;
    EXPECT_EQ(ev_cq, cqb);
    EXPECT_EQ(ev_ctx, &marker);
    ibv_wc wc;
    VT_POLL_ONE(cqb, &wc);
    EXPECT_EQ(wc.wr_id, uint64_t(10 + round));
    VT_POLL_ONE(cqa, &wc);
  }
  // Not re-armed: a further completion raises no event.
  ASSERT_EQ(post_recv_mr(qb, 20, mr, 0, 1024), 0);
  ibv_sge s{uint64_t(uintptr_t(mr->addr)) + 2048, 16, mr->lkey};
  ASSERT_EQ(post_send(qa, 20, IBV_WR_SEND, &s, 1), 0);
  ibv_wc wc;
  VT_POLL_ONE(cqb, &wc);
  EXPECT_FALSE(fd_readable(ch->fd, 100)) << "an unarmed CQ raised an event";
  ibv_ack_cq_events(cqb, events);
}

TEST_F(Control, SolicitedOnlyNotification) {
  ibv_comp_channel* ch = make_channel();
  ASSERT_NE(ch, nullptr);
  ibv_cq* cqb = make_cq(64, ch);
  ibv_cq* cqa = make_cq();
  ASSERT_TRUE(cqa && cqb);
  ibv_qp* qa = make_qp(IBV_QPT_RC, cqa, cqa);
  ibv_qp* qb = make_qp(IBV_QPT_RC, cqb, cqb);
  ASSERT_TRUE(qa && qb);
  connect_qp(qa, qb->qp_num);
  connect_qp(qb, qa->qp_num);
  ASSERT_FALSE(HasFailure());
  ibv_mr* mr = reg_buffer(4096, IBV_ACCESS_LOCAL_WRITE, 1);
  ASSERT_NE(mr, nullptr);
  ASSERT_EQ(post_recv_mr(qb, 1, mr, 0, 1024), 0);
  ASSERT_EQ(post_recv_mr(qb, 2, mr, 1024, 1024), 0);
  ASSERT_EQ(ibv_req_notify_cq(cqb, 1), 0);
  ibv_sge s{uint64_t(uintptr_t(mr->addr)) + 2048, 16, mr->lkey};
  // An ordinary SEND: completes, raises no event.
  ASSERT_EQ(post_send(qa, 1, IBV_WR_SEND, &s, 1), 0);
  ibv_wc wc;
  VT_POLL_ONE(cqa, &wc);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_FALSE(fd_readable(ch->fd, 100)) << "event for an unsolicited completion";
  // A solicited SEND: the event fires.
  ASSERT_EQ(post_send(qa, 2, IBV_WR_SEND, &s, 1, IBV_SEND_SIGNALED | IBV_SEND_SOLICITED), 0);
  ASSERT_TRUE(fd_readable(ch->fd, 5000)) << "no event for a solicited completion";
  ibv_cq* ev_cq = nullptr;
  void* ev_ctx = nullptr;
  ASSERT_EQ(ibv_get_cq_event(ch, &ev_cq, &ev_ctx), 0);
  EXPECT_EQ(ev_cq, cqb);
  ibv_ack_cq_events(cqb, 1);
  std::vector<ibv_wc> wcs = poll_n(cqb, 2);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].wr_id, 1u);
  EXPECT_EQ(wcs[1].wr_id, 2u);
  VT_POLL_ONE(cqa, &wc);
}

TEST_F(Control, CqOverflowRaisesCqErrOnTheAsyncFd) {
  // A CQ too small for the work: the overflow is reported as IBV_EVENT_CQ_ERR.
  ibv_cq* small = ibv_create_cq(ctx_, 1, nullptr, nullptr, 0);
  ASSERT_NE(small, nullptr);
  const int capacity = small->cqe;
  const int n = capacity + 8;
  const SmallCqPair p = small_cq_pair(small, n);
  ASSERT_FALSE(HasFailure());
  ibv_sge s{uint64_t(uintptr_t(p.mr->addr)) + 3000, 8, p.mr->lkey};
  for (int i = 0; i < n; ++i) ASSERT_EQ(post_send(p.qa, i, IBV_WR_SEND, &s, 1), 0);

  bool cq_err = false;
  for (auto end = deadline_after(kWaitSeconds); !cq_err && Clock::now() < end;) {
    if (!fd_readable(ctx_->async_fd, 100)) continue;
    ibv_async_event ev{};
    ASSERT_EQ(ibv_get_async_event(ctx_, &ev), 0);
    if (ev.event_type == IBV_EVENT_CQ_ERR) {
      cq_err = true;
      EXPECT_EQ(ev.element.cq, small);
    }
    ibv_ack_async_event(&ev);
  }
  EXPECT_TRUE(cq_err) << "CQ overflow (cqe " << capacity << ", " << n
                      << " completions) raised no IBV_EVENT_CQ_ERR";
}

// IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN (mlx5 takes it): the same overflow
// raises no CQ error, the QPs go on, and the CQ keeps working once polled.
TEST_F(Control, CqWithIgnoreOverrunNeverErrs) {
  ibv_cq_init_attr_ex a{};
  a.cqe = 1;
  a.wc_flags = IBV_WC_STANDARD_FLAGS;
  a.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
  a.flags = IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
  ibv_cq_ex* small_ex = ibv_create_cq_ex(ctx_, &a);
  ASSERT_NE(small_ex, nullptr) << std::strerror(errno);
  ibv_cq* small = ibv_cq_ex_to_cq(small_ex);
  const int capacity = small->cqe;
  const int n = capacity + 8;
  const SmallCqPair p = small_cq_pair(small, n + 1);
  ASSERT_FALSE(HasFailure());
  ibv_qp* qa = p.qa;
  ibv_sge s{uint64_t(uintptr_t(p.mr->addr)) + 3000, 8, p.mr->lkey};
  for (int i = 0; i < n; ++i) ASSERT_EQ(post_send(qa, i, IBV_WR_SEND, &s, 1), 0);
  EXPECT_EQ(poll_n(p.cqb, n).size(), size_t(n)) << "every send arrived";
  EXPECT_FALSE(fd_readable(ctx_->async_fd, 300)) << "an async event (IBV_EVENT_CQ_ERR?) for an ignored overrun";
  EXPECT_EQ(qp_state(qa), IBV_QPS_RTS);
  std::vector<ibv_wc> got = drain_for(small, 100);
  EXPECT_GE(got.size(), size_t(capacity)) << "the CQ held what fit";
  EXPECT_LT(got.size(), size_t(n)) << "and no more: the overrun's entries were dropped";
  // Polled empty, it takes completions again.
  ASSERT_EQ(post_send(qa, 99, IBV_WR_SEND, &s, 1), 0);
  ibv_wc wc;
  VT_POLL_ONE(small, &wc);
  EXPECT_EQ(wc.wr_id, 99u);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
}

TEST_F(Control, DeallocPdUsedByQpIsEbusy) {
  ibv_pd* pd = ibv_alloc_pd(ctx_);
  ASSERT_NE(pd, nullptr);
  ibv_cq* cq = make_cq();
  ASSERT_NE(cq, nullptr);
  ibv_qp* qp = make_qp(IBV_QPT_RC, cq, cq, {}, 1, pd);
  ASSERT_NE(qp, nullptr);
  forget(qp);
  EXPECT_EQ(ibv_dealloc_pd(pd), EBUSY) << "a QP uses the PD";
  ASSERT_EQ(ibv_destroy_qp(qp), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
}

TEST_F(Control, DeallocPdUsedByAhIsEbusy) {
  ibv_pd* pd = ibv_alloc_pd(ctx_);
  ASSERT_NE(pd, nullptr);
  ibv_ah_attr av = loopback_av();
  ibv_ah* ah = ibv_create_ah(pd, &av);
  ASSERT_NE(ah, nullptr);
  const int rc = ibv_dealloc_pd(pd);
  EXPECT_EQ(rc, EBUSY) << "an AH uses the PD";
  EXPECT_EQ(ibv_destroy_ah(ah), 0);
  if (rc == EBUSY) {
    EXPECT_EQ(ibv_dealloc_pd(pd), 0);
  }
}

TEST_F(Control, DestroyCompChannelInUseIsEbusy) {
  ibv_comp_channel* ch = ibv_create_comp_channel(ctx_);
  ASSERT_NE(ch, nullptr);
  ibv_cq* cq = ibv_create_cq(ctx_, 8, nullptr, ch, 0);
  ASSERT_NE(cq, nullptr);
  EXPECT_EQ(ibv_destroy_comp_channel(ch), EBUSY);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
  EXPECT_EQ(ibv_destroy_comp_channel(ch), 0);
}

TEST_F(Control, CreateBeyondDeviceLimitsIsEinval) {
  ibv_device_attr d{};
  ASSERT_EQ(ibv_query_device(ctx_, &d), 0);
  errno = 0;
  ibv_cq* cq = ibv_create_cq(ctx_, d.max_cqe + 1, nullptr, nullptr, 0);
  EXPECT_EQ(cq, nullptr);
  EXPECT_EQ(errno, EINVAL);
  if (cq) ibv_destroy_cq(cq);
  cq = make_cq();
  ASSERT_NE(cq, nullptr);
  QpCaps caps;
  caps.max_send_wr = uint32_t(d.max_qp_wr) + 1;
  errno = 0;
  ibv_qp* qp = make_qp(IBV_QPT_RC, cq, cq, caps);
  EXPECT_EQ(qp, nullptr);
  EXPECT_EQ(errno, EINVAL);
  caps = {};
  caps.max_send_sge = uint32_t(d.max_sge) + 1;
  errno = 0;
  qp = make_qp(IBV_QPT_RC, cq, cq, caps);
  EXPECT_EQ(qp, nullptr);
  EXPECT_EQ(errno, EINVAL);
}

// rdma-core providers arm any CQ; without a channel no event is delivered.
TEST_F(Control, ReqNotifyOnCqWithoutChannelIsAllowed) {
  ibv_cq* cq = make_cq();
  ASSERT_NE(cq, nullptr);
  EXPECT_EQ(ibv_req_notify_cq(cq, 0), 0);
  EXPECT_EQ(ibv_req_notify_cq(cq, 1), 0);
}

TEST_F(Control, OneChannelManyCqsAndErrorsWakeSolicitedWaiters) {
  ibv_comp_channel* ch = make_channel();
  ASSERT_NE(ch, nullptr);
  int ctx1 = 1, ctx2 = 2;
  ibv_cq* cq1 = make_cq(64, ch, &ctx1);
  ibv_cq* cq2 = make_cq(64, ch, &ctx2);
  ASSERT_TRUE(cq1 && cq2);
  ibv_qp* q1 = make_qp(IBV_QPT_RC, cq1, cq1);
  ibv_qp* q2 = make_qp(IBV_QPT_RC, cq2, cq2);
  ASSERT_TRUE(q1 && q2);
  connect_qp(q1, q2->qp_num);
  connect_qp(q2, q1->qp_num);
  ASSERT_FALSE(HasFailure());
  ibv_mr* mr = reg_buffer(4096, IBV_ACCESS_LOCAL_WRITE, 1);
  ASSERT_NE(mr, nullptr);
  // q1 -> q2: the event names cq2.
  ASSERT_EQ(ibv_req_notify_cq(cq1, 0), 0);
  ASSERT_EQ(ibv_req_notify_cq(cq2, 0), 0);
  ASSERT_EQ(post_recv_mr(q2, 1, mr, 0, 512), 0);
  ibv_sge s = sge_of(mr, 2048, 8);
  ASSERT_EQ(post_send(q1, 2, IBV_WR_SEND, &s, 1), 0);
  // Two events: cq2 (receive) and cq1 (send completion), in either order.
  std::set<ibv_cq*> seen;
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(fd_readable(ch->fd, 5000)) << "event " << i;
    ibv_cq* ev = nullptr;
    void* evctx = nullptr;
    ASSERT_EQ(ibv_get_cq_event(ch, &ev, &evctx), 0);
    seen.insert(ev);
    EXPECT_EQ(evctx, ev == cq1 ? static_cast<void*>(&ctx1) : static_cast<void*>(&ctx2));
  }
  EXPECT_EQ(seen, (std::set<ibv_cq*>{cq1, cq2}));
  ibv_ack_cq_events(cq1, 1);
  ibv_ack_cq_events(cq2, 1);
  ibv_wc wc;
  VT_POLL_ONE(cq1, &wc);
  VT_POLL_ONE(cq2, &wc);

  // Armed for solicited completions only, an error completion still wakes.
  ASSERT_EQ(post_recv_mr(q2, 3, mr, 0, 512), 0);
  ASSERT_EQ(ibv_req_notify_cq(cq2, 1), 0);
  ibv_qp_attr e{};
  e.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(ibv_modify_qp(q2, &e, IBV_QP_STATE), 0);  // flushes receive 3
  ASSERT_TRUE(fd_readable(ch->fd, 5000)) << "an error completion raised no solicited event";
  ibv_cq* ev = nullptr;
  void* evctx = nullptr;
  ASSERT_EQ(ibv_get_cq_event(ch, &ev, &evctx), 0);
  EXPECT_EQ(ev, cq2);
  ibv_ack_cq_events(cq2, 1);
  VT_POLL_ONE(cq2, &wc);
  EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
}

TEST_F(Control, NonBlockingChannelAndAsyncFd) {
  ibv_comp_channel* ch = make_channel();
  ASSERT_NE(ch, nullptr);
  ibv_cq* cq = make_cq(16, ch);
  ASSERT_NE(cq, nullptr);
  // As the rdma-core man pages show: make the fds non-blocking, then the
  // calls return -1/EAGAIN instead of waiting.
  ASSERT_EQ(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK), 0);
  ASSERT_EQ(fcntl(ctx_->async_fd, F_SETFL, fcntl(ctx_->async_fd, F_GETFL) | O_NONBLOCK), 0);
  ibv_cq* ev = nullptr;
  void* evctx = nullptr;
  errno = 0;
  EXPECT_EQ(ibv_get_cq_event(ch, &ev, &evctx), -1);
  EXPECT_EQ(errno, EAGAIN);
  ibv_async_event aev{};
  errno = 0;
  EXPECT_EQ(ibv_get_async_event(ctx_, &aev), -1);
  EXPECT_EQ(errno, EAGAIN);
}

// `uroce port down|up` sets the administrative link state: every client
// gets IBV_EVENT_PORT_ERR / IBV_EVENT_PORT_ACTIVE for port 1, and
// ibv_query_port reports the state, as when a real link drops and returns.
TEST_F(Control, PortDownAndUpRaisePortEvents) {
  auto next_port_event = [&](ibv_event_type want) {
    for (int waited = 0; waited < 3000; waited += 100) {
      if (!fd_readable(ctx_->async_fd, 100)) continue;
      ibv_async_event ev{};
      if (ibv_get_async_event(ctx_, &ev) != 0) return false;
      const bool match = ev.event_type == want && ev.element.port_num == 1;
      ibv_ack_async_event(&ev);
      if (match) return true;
    }
    return false;
  };
  std::string out;
  ASSERT_EQ(run_command("timeout 10 " + uroce_command() + " port down", &out), 0) << out;
  EXPECT_TRUE(next_port_event(IBV_EVENT_PORT_ERR));
  ibv_port_attr pa{};
  ASSERT_EQ(ibv_query_port(ctx_, 1, &pa), 0);
  EXPECT_EQ(pa.state, IBV_PORT_DOWN);
  ASSERT_EQ(run_command("timeout 10 " + uroce_command() + " port up", &out), 0) << out;
  EXPECT_TRUE(next_port_event(IBV_EVENT_PORT_ACTIVE));
  ASSERT_EQ(ibv_query_port(ctx_, 1, &pa), 0);
  EXPECT_EQ(pa.state, IBV_PORT_ACTIVE);
}

}  // namespace
}  // namespace vt
