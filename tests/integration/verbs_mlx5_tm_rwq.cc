// mlx5 direct verbs, the receive side's other queues in mlx5's own formats:
// a tag-matching SRQ driven through TAG_MATCHING WQEs on a command QP, and
// receive WQs (RSS) handed out by mlx5dv_init_obj, read and written by hand
// as programs that drive a ConnectX do (UCX's rc_mlx5, DPDK's mlx5 driver).
#include "tests/integration/verbs_mlx5.h"

#include <infiniband/tm_types.h>

namespace vt {
namespace {

// mlx5dv_init_obj on a tag-matching SRQ, driven as UCX's rc_mlx5 drives it
// with hardware tag matching (rc_mlx5_common.c, rc_mlx5.inl): its list
// operations are TAG_MATCHING WQEs on a command QP of the program's own (an
// RC QP on the SRQ, connected to itself), whose append fills the entry the
// previous append named; completions are mlx5's tag-matching CQEs: a list
// operation's NO_PACKET CQE with its result, a matched message's with the
// TMH and the entry, an unexpected one's with the SRQ WQE it landed in.
TEST_F(Mlx5Mode, InitObjTmSrqTakesTagMatchingWqesAsOnAConnectX) {
  Mlx5Cq m;
  formatted_cq(63, 64, &m);
  ASSERT_NE(m.cq, nullptr) << std::strerror(errno);
  ibv_srq_init_attr_ex sattr{};
  sattr.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_TM;
  sattr.srq_type = IBV_SRQT_TM;
  sattr.pd = pd_;
  sattr.cq = m.cq;
  sattr.attr.max_wr = 15;
  sattr.attr.max_sge = 1;
  sattr.tm_cap.max_num_tags = 4;
  sattr.tm_cap.max_ops = 16;
  ibv_srq* srq = ibv_create_srq_ex(ctx_, &sattr);
  ASSERT_NE(srq, nullptr) << std::strerror(errno);
  defer([srq] { ibv_destroy_srq(srq); });
  mlx5dv_srq dvsrq{};
  mlx5dv_obj obj{};
  obj.srq.in = srq;
  obj.srq.out = &dvsrq;
  ASSERT_EQ(mlx5dv_init_obj(&obj, MLX5DV_OBJ_SRQ), 0) << "UCX's uct_ib_mlx5_verbs_srq_init";
  EXPECT_EQ(dvsrq.stride, 32u);
  uint32_t srqn = 0;
  ASSERT_EQ(ibv_get_srq_num(srq, &srqn), 0);

  // The command QP (uct_rc_mlx5_verbs_create_cmd_qp): RC, on the SRQ, its
  // completions in the SRQ's CQ, connected to itself.
  ibv_qp_init_attr ca{};
  ca.qp_type = IBV_QPT_RC;
  ca.send_cq = m.cq;
  ca.recv_cq = m.cq;
  ca.srq = srq;
  ca.cap.max_send_wr = 16;
  ca.cap.max_send_sge = 1;
  ibv_qp* cmd = ibv_create_qp(pd_, &ca);
  ASSERT_NE(cmd, nullptr) << std::strerror(errno);
  defer([cmd] { ibv_destroy_qp(cmd); });
  connect_qp(cmd, cmd->qp_num);
  Mlx5Sq sq;
  ASSERT_EQ(sq.take(cmd), 0);

  // B receives on the SRQ; A sends tagged messages to it.
  ibv_cq* send_cq = make_cq(16);
  ASSERT_NE(send_cq, nullptr);
  ibv_qp* a = make_qp(IBV_QPT_RC, send_cq, send_cq);
  ibv_qp_init_attr ba{};
  ba.qp_type = IBV_QPT_RC;
  ba.send_cq = send_cq;
  ba.recv_cq = m.cq;
  ba.srq = srq;
  ba.cap.max_send_wr = 4;
  ba.cap.max_send_sge = 1;
  ibv_qp* b = ibv_create_qp(pd_, &ba);
  ASSERT_TRUE(a && b) << std::strerror(errno);
  defer([b] { ibv_destroy_qp(b); });
  connect_qp(a, b->qp_num);
  connect_qp(b, a->qp_num);
  ibv_mr* src = reg_buffer(256, kRw, 0);
  ibv_mr* dst = reg_buffer(4 * 256, kRw, 0);
  auto* d = static_cast<uint8_t*>(dst->addr);

  uint32_t ci = 0;
  auto next_cqe = [&]() -> mlx5_cqe64* {
    mlx5_cqe64* e = m.wait_cqe(ci);
    if (e) m.dv.dbrec[kCqSetCi] = htobe32(++ci);
    return e;
  };
  // A TAG_MATCHING WQE as uct_rc_mlx5_iface_common_post_srq_op writes it.
  uint16_t unexpected_seen = 0;
  auto list_op = [&](uint8_t op, uint16_t index, uint64_t tag, const ibv_sge* buf) {
    uint8_t segs[48] = {};
    auto* tm = reinterpret_cast<mlx5_wqe_tm_seg*>(segs);
    tm->opcode = uint8_t(op << 4);
    tm->flags = 0xc0;  // MLX5_SRQ_FLAG_TM_CQE_REQ | MLX5_SRQ_FLAG_TM_SW_CNT
    tm->index = htobe16(index);
    tm->sw_cnt = htobe16(unexpected_seen);
    tm->append_tag = htobe64(tag);
    tm->append_mask = htobe64(~0ull);
    if (buf) mlx5dv_set_data_seg(reinterpret_cast<mlx5_wqe_data_seg*>(segs + 32), buf->length, buf->lkey, buf->addr);
    sq.post(MLX5_OPCODE_TAG_MATCHING, 0, segs, buf ? 48 : 32);
  };
  // A tagged EAGER message of 40 bytes of `fill` from A (struct ibv_tmh first).
  auto send_tagged = [&](uint64_t tag, uint32_t app_ctx, uint8_t fill) {
    auto* tmh = static_cast<ibv_tmh*>(src->addr);
    *tmh = ibv_tmh{};
    tmh->opcode = IBV_TMH_EAGER;
    tmh->app_ctx = htobe32(app_ctx);
    tmh->tag = htobe64(tag);
    std::memset(tmh + 1, fill, 40);
    ibv_sge ss = sge_of(src, 0, sizeof(ibv_tmh) + 40);
    ASSERT_EQ(post_send(a, tag, IBV_WR_SEND, &ss, 1), 0);
    ibv_wc wc;
    VT_POLL_ONE(send_cq, &wc);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  };
  auto expect_list_cqe = [&](uint8_t app_op, bool success) {
    mlx5_cqe64* e = next_cqe();
    ASSERT_NE(e, nullptr) << "no CQE for list operation " << int(app_op);
    EXPECT_EQ(mlx5dv_get_cqe_opcode(e), MLX5_CQE_NO_PACKET);
    EXPECT_EQ(e->app, 1) << "MLX5_CQE_APP_TAG_MATCHING";
    EXPECT_EQ(e->app_op, app_op);
    EXPECT_EQ(bool(be32toh(e->tm_cqe.success) & MLX5_TMC_SUCCESS), success);
    EXPECT_EQ(be32toh(e->srqn_uidx) & 0xffffff, srqn);
  };

  // Append entry 0 (naming entry 1 for the next): its CQE (APPEND).
  ibv_sge buf0 = sge_of(dst, 0, 256);
  list_op(1, 1, 0x77, &buf0);
  ASSERT_NO_FATAL_FAILURE(expect_list_cqe(0x5, true));
  // A message with that tag lands in it, without its TMH: CONSUMED_MSG,
  // the TMH in the CQE, entry 0 in app_info.
  ASSERT_NO_FATAL_FAILURE(send_tagged(0x77, 0x1234, 0xab));
  mlx5_cqe64* e = next_cqe();
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(mlx5dv_get_cqe_opcode(e), MLX5_CQE_RESP_SEND);
  EXPECT_EQ(e->app, 1);
  EXPECT_EQ(e->app_op, 0xA) << "MLX5_CQE_APP_OP_TM_CONSUMED_MSG";
  EXPECT_EQ(be16toh(e->app_info), 0);
  EXPECT_EQ(be64toh(e->tmh.tag), 0x77u);
  EXPECT_EQ(be32toh(e->tmh.app_ctx), 0x1234u);
  EXPECT_EQ(be32toh(e->byte_cnt), 40u);
  EXPECT_EQ(be32toh(e->sop_drop_qpn) & 0xffffff, b->qp_num);
  EXPECT_EQ(d[0], 0xab);
  EXPECT_EQ(d[39], 0xab);
  // Removing the consumed entry fails in its CQE (REMOVE without success).
  list_op(2, 0, 0, nullptr);
  ASSERT_NO_FATAL_FAILURE(expect_list_cqe(0x6, false));

  // No entry for tag 0x88: the message lands whole, TMH first, in SRQ WQE 0.
  auto* wqes = static_cast<uint8_t*>(dvsrq.buf);
  mlx5dv_set_data_seg(reinterpret_cast<mlx5_wqe_data_seg*>(wqes + 16), 256, dst->lkey, uintptr_t(d + 256));
  __atomic_thread_fence(__ATOMIC_RELEASE);
  *dvsrq.dbrec = htobe32(1);
  ASSERT_NO_FATAL_FAILURE(send_tagged(0x88, 7, 0xcd));
  e = next_cqe();
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(mlx5dv_get_cqe_opcode(e), MLX5_CQE_RESP_SEND);
  EXPECT_EQ(e->app_op, 0x3) << "MLX5_CQE_APP_OP_TM_UNEXPECTED";
  EXPECT_EQ(be16toh(e->wqe_counter), 0);
  EXPECT_EQ(be32toh(e->byte_cnt), sizeof(ibv_tmh) + 40);
  EXPECT_EQ(d[256], IBV_TMH_EAGER);
  EXPECT_EQ(d[256 + sizeof(ibv_tmh)], 0xcd);
  ++unexpected_seen;

  // Append entry 1 with software's count up to date, then a NOP (sync):
  // a second match names entry 1.
  ibv_sge buf1 = sge_of(dst, 512, 256);
  list_op(1, 2, 0x99, &buf1);
  ASSERT_NO_FATAL_FAILURE(expect_list_cqe(0x5, true));
  list_op(0, 0, 0, nullptr);
  ASSERT_NO_FATAL_FAILURE(expect_list_cqe(0x7, true));
  ASSERT_NO_FATAL_FAILURE(send_tagged(0x99, 9, 0xef));
  e = next_cqe();
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->app_op, 0xA);
  EXPECT_EQ(be16toh(e->app_info), 1);
  EXPECT_EQ(d[512], 0xef);

  // The verbs' list operations are refused once the program owns the list.
  ibv_ops_wr op{};
  op.opcode = IBV_WR_TAG_SYNC;
  ibv_ops_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_srq_ops(srq, &op, &bad), EOPNOTSUPP);
  EXPECT_EQ(bad, &op);
}

// mlx5dv_init_obj on a receive WQ (MLX5DV_OBJ_RWQ, as DPDK's mlx5 driver
// takes its RX queues when it makes them with the verbs): roundup_pow2(max_wr)
// WQEs of 16 bytes per SGE, written by hand, counted in the doorbell
// record's first word. Frames an RSS QP's flow steers to the WQ land in the
// WQEs in order, each CQE with its WQE's index, the WQ's number and the
// frame's length; a frame with no WQE posted is dropped; the verbs post
// nothing to it; RESET then RDY starts the count again at 0, and ERR
// flushes what is posted, by index.
TEST_F(Mlx5Mode, InitObjRwqIsWrittenByHandAsOnAConnectX) {
  if (geteuid() != 0) GTEST_SKIP() << "raw packet QPs need CAP_NET_RAW (run as root, as the suite does)";
  static constexpr uint8_t kDst[6] = {0x02, 0x50, 0x56, 0x19, 0x20, 0xa7};
  Mlx5Cq m;
  formatted_cq(31, 64, &m);
  ASSERT_NE(m.cq, nullptr) << std::strerror(errno);
  ibv_wq_init_attr wa{};
  wa.wq_type = IBV_WQT_RQ;
  wa.max_wr = 6;
  wa.max_sge = 1;
  wa.pd = pd_;
  wa.cq = m.cq;
  ibv_wq* wq = ibv_create_wq(ctx_, &wa);
  ASSERT_NE(wq, nullptr) << std::strerror(errno);
  defer([wq] { EXPECT_EQ(ibv_destroy_wq(wq), 0); });
  mlx5dv_rwq dvrwq{};
  mlx5dv_obj obj{};
  obj.rwq.in = wq;
  obj.rwq.out = &dvrwq;
  ASSERT_EQ(mlx5dv_init_obj(&obj, MLX5DV_OBJ_RWQ), 0) << "the engine in mlx5 mode formats a WQ";
  EXPECT_EQ(dvrwq.wqe_cnt, 8u) << "roundup_pow2(max_wr)";
  EXPECT_EQ(dvrwq.stride, 16u) << "one data segment";
  ASSERT_TRUE(dvrwq.buf && dvrwq.dbrec);
  ibv_wq_attr st{};
  st.attr_mask = IBV_WQ_ATTR_STATE;
  st.wq_state = IBV_WQS_RDY;
  ASSERT_EQ(ibv_modify_wq(wq, &st), 0);
  ibv_rwq_ind_table_init_attr ta{};
  ta.log_ind_tbl_size = 0;
  ta.ind_tbl = &wq;
  ibv_rwq_ind_table* table = ibv_create_rwq_ind_table(ctx_, &ta);
  ASSERT_NE(table, nullptr) << std::strerror(errno);
  defer([table] { EXPECT_EQ(ibv_destroy_rwq_ind_table(table), 0); });
  static uint8_t key[40] = {1};
  ibv_qp_init_attr_ex qa{};
  qa.qp_type = IBV_QPT_RAW_PACKET;
  qa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH;
  qa.pd = pd_;
  qa.rwq_ind_tbl = table;
  qa.rx_hash_conf.rx_hash_function = IBV_RX_HASH_FUNC_TOEPLITZ;
  qa.rx_hash_conf.rx_hash_key_len = sizeof(key);
  qa.rx_hash_conf.rx_hash_key = key;
  qa.rx_hash_conf.rx_hash_fields_mask = IBV_RX_HASH_SRC_IPV4 | IBV_RX_HASH_DST_IPV4;
  ibv_qp* rss = ibv_create_qp_ex(ctx_, &qa);
  ASSERT_NE(rss, nullptr) << std::strerror(errno);
  defer([rss] { EXPECT_EQ(ibv_destroy_qp(rss), 0); });
  ASSERT_NE(flow_to_mac(rss, kDst), nullptr);

  ibv_cq* tx_cq = make_cq(16);
  ibv_qp* tx = make_qp(IBV_QPT_RAW_PACKET, tx_cq, tx_cq);
  ASSERT_TRUE(tx_cq && tx) << std::strerror(errno);
  ASSERT_NO_FATAL_FAILURE(raw_to_rts(tx));
  ibv_mr* src = reg_buffer(128, kRw, 0);
  ibv_mr* dst = reg_buffer(8 * 128, kRw, 0);
  auto* d = static_cast<uint8_t*>(dst->addr);
  // A frame of `len` bytes to kDst, its payload `tag`.
  auto send_frame = [&](uint8_t tag, uint32_t len) {
    auto* f = static_cast<uint8_t*>(src->addr);
    std::memset(f, tag, len);
    std::memcpy(f, kDst, 6);
    f[12] = 0x88;  // a local experimental ethertype: no L3, hashed as such
    f[13] = 0xb5;
    ibv_sge s = sge_of(src, 0, len);
    ASSERT_EQ(post_send(tx, tag, IBV_WR_SEND, &s, 1, IBV_SEND_SIGNALED), 0);
    ibv_wc wc;
    VT_POLL_ONE(tx_cq, &wc);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  };
  auto* wqes = static_cast<uint8_t*>(dvrwq.buf);
  uint16_t posted = 0;
  auto post = [&](uint32_t i) {
    mlx5dv_set_data_seg(reinterpret_cast<mlx5_wqe_data_seg*>(wqes + (i % dvrwq.wqe_cnt) * dvrwq.stride), 128,
                        dst->lkey, uintptr_t(d + (i % dvrwq.wqe_cnt) * 128));
    __atomic_thread_fence(__ATOMIC_RELEASE);
    *dvrwq.dbrec = htobe32(++posted);
  };
  uint32_t ci = 0;
  auto expect_in = [&](uint8_t tag, uint16_t index, uint32_t len) {
    mlx5_cqe64* e = m.wait_cqe(ci);
    ASSERT_NE(e, nullptr) << "no CQE for WQE " << index;
    EXPECT_EQ(mlx5dv_get_cqe_opcode(e), MLX5_CQE_RESP_SEND);
    EXPECT_EQ(be32toh(e->sop_drop_qpn) & 0xffffff, wq->wq_num);
    EXPECT_EQ(be32toh(e->byte_cnt), len);
    EXPECT_EQ(be16toh(e->wqe_counter), index);
    ++ci;
    m.dv.dbrec[kCqSetCi] = htobe32(ci);
    EXPECT_EQ(d[(index % 8) * 128 + 20], tag) << "not in WQE " << index << "'s buffer";
  };
  post(0);
  post(1);
  ASSERT_NO_FATAL_FAILURE(send_frame(0x11, 60));
  ASSERT_NO_FATAL_FAILURE(expect_in(0x11, 0, 60));
  ASSERT_NO_FATAL_FAILURE(send_frame(0x22, 100));
  ASSERT_NO_FATAL_FAILURE(expect_in(0x22, 1, 100));
  ASSERT_NO_FATAL_FAILURE(send_frame(0x33, 60));  // no WQE: dropped
  usleep(100'000);
  EXPECT_EQ(m.sw_cqe(ci), nullptr) << "a frame with no WQE posted completed";
  // Around the end of the queue: WQEs 2 to 9 (index 8 and 9 are slots 0 and 1).
  for (uint32_t i = 2; i < 10; ++i) post(i);
  for (uint32_t i = 2; i < 10; ++i) {
    ASSERT_NO_FATAL_FAILURE(send_frame(uint8_t(0x40 + i), 64));
    ASSERT_NO_FATAL_FAILURE(expect_in(uint8_t(0x40 + i), uint16_t(i), 64));
  }

  // The verbs post nothing to a queue the program writes.
  ibv_sge rs = sge_of(dst, 0, 64);
  ibv_recv_wr rwr{0, nullptr, &rs, 1}, *bad = nullptr;
  EXPECT_EQ(ibv_post_wq_recv(wq, &rwr, &bad), EOPNOTSUPP);
  EXPECT_EQ(bad, &rwr);

  // RESET, then RDY: the count starts again at 0 (mlx5_modify_wq zeroes it).
  st.wq_state = IBV_WQS_RESET;
  ASSERT_EQ(ibv_modify_wq(wq, &st), 0);
  st.wq_state = IBV_WQS_RDY;
  ASSERT_EQ(ibv_modify_wq(wq, &st), 0);
  EXPECT_EQ(*dvrwq.dbrec, 0u);
  posted = 0;
  post(0);
  ASSERT_NO_FATAL_FAILURE(send_frame(0x55, 60));
  ASSERT_NO_FATAL_FAILURE(expect_in(0x55, 0, 60));
  // ERR flushes the WQEs posted, each by its index.
  post(1);
  post(2);
  st.wq_state = IBV_WQS_ERR;
  ASSERT_EQ(ibv_modify_wq(wq, &st), 0);
  for (uint16_t index = 1; index <= 2; ++index) {
    mlx5_cqe64* e = m.wait_cqe(ci);
    ASSERT_NE(e, nullptr) << "no flush CQE for WQE " << index;
    EXPECT_EQ(mlx5dv_get_cqe_opcode(e), MLX5_CQE_RESP_ERR);
    EXPECT_EQ(be16toh(e->wqe_counter), index);
    ++ci;
    m.dv.dbrec[kCqSetCi] = htobe32(ci);
  }
}

}  // namespace
}  // namespace vt
