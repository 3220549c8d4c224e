// The Dynamically Connected transport through mlx5 direct verbs, on one
// engine: DCTs and DCIs made by mlx5dv_create_qp and brought up with the
// attribute masks UCX's dc_mlx5 and rdma-core's test_mlx5_dc use, work
// requests through ibv_wr_* with mlx5dv_wr_set_dc_addr. Wire format and
// engine model: docs/mlx5-dc.md.
#include "tests/integration/verbs_mlx5.h"

namespace vt {
namespace {

constexpr uint64_t kDcKey = 0x1ee7a330;  // UCX's UCT_IB_KEY

class Mlx5Dc : public Mlx5Mode {
 protected:
  // A DCT on `srq` delivering into `cq`, in RTR with access key `key`.
  ibv_qp* dct(ibv_cq* cq, ibv_srq* srq, uint64_t key = kDcKey) {
    ibv_qp_init_attr_ex attr{};
    attr.qp_type = IBV_QPT_DRIVER;
    attr.comp_mask = IBV_QP_INIT_ATTR_PD;
    attr.pd = pd_;
    attr.send_cq = attr.recv_cq = cq;
    attr.srq = srq;
    mlx5dv_qp_init_attr dv{};
    dv.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_DC;
    dv.dc_init_attr.dc_type = MLX5DV_DCTYPE_DCT;
    dv.dc_init_attr.dct_access_key = key;
    ibv_qp* qp = mlx5dv_create_qp(ctx_, &attr, &dv);
    if (!qp) return nullptr;
    defer([qp] { ibv_destroy_qp(qp); });
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) return nullptr;
    a = {};
    a.qp_state = IBV_QPS_RTR;
    a.min_rnr_timer = 1;
    a.path_mtu = IBV_MTU_1024;
    a.ah_attr = loopback_av();
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_MIN_RNR_TIMER | IBV_QP_AV | IBV_QP_PATH_MTU)) return nullptr;
    return qp;
  }
  // A DCI sending through ibv_wr_* (SEND, WRITE, READ, atomics), in RTS,
  // brought up as UCX's uct_dc_mlx5_iface_dci_connect does.
  ibv_qp* dci(ibv_cq* cq, uint8_t timeout = 14, uint8_t retry_cnt = 7) {
    ibv_qp_init_attr_ex attr = qp_ex_attr(IBV_QPT_DRIVER, cq,
                                          IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
                                              IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ |
                                              IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD,
                                          {});
    attr.cap.max_recv_wr = attr.cap.max_recv_sge = 0;
    mlx5dv_qp_init_attr dv{};
    dv.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_DC;
    dv.dc_init_attr.dc_type = MLX5DV_DCTYPE_DCI;
    ibv_qp* qp = mlx5dv_create_qp(ctx_, &attr, &dv);
    if (!qp) return nullptr;
    defer([qp] { ibv_destroy_qp(qp); });
    return bring_up_dci(qp, timeout, retry_cnt) ? qp : nullptr;
  }
  static bool bring_up_dci(ibv_qp* qp, uint8_t timeout = 14, uint8_t retry_cnt = 7) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT)) return false;
    a = {};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.ah_attr.port_num = 1;
    a.ah_attr.is_global = 1;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PATH_MTU | IBV_QP_AV)) return false;
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = timeout;
    a.retry_cnt = retry_cnt;
    a.rnr_retry = 7;
    a.max_rd_atomic = 4;
    return ibv_modify_qp(qp, &a,
                         IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                             IBV_QP_MAX_QP_RD_ATOMIC) == 0;
  }
  static int post_srq_recv_mr(ibv_srq* srq, uint64_t wr_id, ibv_mr* mr, size_t offset, uint32_t len) {
    ibv_sge sge = sge_of(mr, offset, len);
    ibv_recv_wr wr{}, *bad = nullptr;
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    return ibv_post_srq_recv(srq, &wr, &bad);
  }
  ibv_ah* target_ah() {
    ibv_ah_attr av = loopback_av();
    return make_ah(&av);
  }
  // One signalled SEND of `sge` from `qp` to the DCT numbered dctn.
  static int dc_send(ibv_qp* qp, uint64_t wr_id, ibv_ah* ah, uint32_t dctn, uint64_t key, ibv_sge sge) {
    ibv_qp_ex* qpx = ibv_qp_to_qp_ex(qp);
    mlx5dv_qp_ex* mqp = mlx5dv_qp_ex_from_ibv_qp_ex(qpx);
    ibv_wr_start(qpx);
    qpx->wr_id = wr_id;
    qpx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_send(qpx);
    mlx5dv_wr_set_dc_addr(mqp, ah, dctn, key);
    ibv_wr_set_sge(qpx, sge.lkey, sge.addr, sge.length);
    return ibv_wr_complete(qpx);
  }
};

// SEND, SEND with immediate, WRITE, READ and both atomics from a DCI to a
// DCT: the data lands, the DCI completes each in order, the DCT's receives
// name the DCT and, as their source, the DCI.
TEST_F(Mlx5Dc, EveryOperationFromDciToDct) {
  ibv_cq* scq = make_cq(64);
  ibv_cq* rcq = make_cq(64);
  ibv_srq* srq = basic_srq(16);
  ASSERT_NE(srq, nullptr);
  ibv_qp* t = dct(rcq, srq);
  ASSERT_NE(t, nullptr) << std::strerror(errno);
  EXPECT_EQ(t->qp_type, IBV_QPT_DRIVER);
  ibv_qp* i = dci(scq);
  ASSERT_NE(i, nullptr) << std::strerror(errno);
  ibv_ah* ah = target_ah();
  ASSERT_NE(ah, nullptr);

  ibv_mr* src = reg_buffer(4096, kRw, 0x11);
  ibv_mr* dst = reg_buffer(4096, kRw, 0);
  ibv_mr* remote = reg_buffer(4096, kRw | IBV_ACCESS_REMOTE_ATOMIC, 0x22);
  for (int k = 0; k < 2; ++k) {
    ibv_sge r = sge_of(dst, size_t(k) * 1024, 1024);
    ibv_recv_wr wr{}, *bad = nullptr;
    wr.wr_id = 100 + k;
    wr.sg_list = &r;
    wr.num_sge = 1;
    ASSERT_EQ(ibv_post_srq_recv(srq, &wr, &bad), 0);
  }
  uint64_t* atomic = reinterpret_cast<uint64_t*>(static_cast<uint8_t*>(remote->addr) + 3584);
  *atomic = 5;
  ibv_qp_ex* qpx = ibv_qp_to_qp_ex(i);
  mlx5dv_qp_ex* mqp = mlx5dv_qp_ex_from_ibv_qp_ex(qpx);
  ASSERT_NE(mqp, nullptr);
  ASSERT_NE(mqp->wr_set_dc_addr, nullptr);
  ibv_wr_start(qpx);
  qpx->wr_flags = IBV_SEND_SIGNALED;
  auto addr = [&] { mlx5dv_wr_set_dc_addr(mqp, ah, t->qp_num, kDcKey); };
  qpx->wr_id = 1;
  ibv_wr_send(qpx);
  addr();
  ibv_wr_set_sge(qpx, src->lkey, addr_of(src), 1000);
  qpx->wr_id = 2;
  ibv_wr_send_imm(qpx, htobe32(0xabcd));
  addr();
  ibv_wr_set_sge(qpx, src->lkey, addr_of(src), 24);
  qpx->wr_id = 3;
  ibv_wr_rdma_write(qpx, remote->rkey, addr_of(remote));
  addr();
  ibv_wr_set_sge(qpx, src->lkey, addr_of(src), 3000);  // three packets at MTU 1024
  qpx->wr_id = 4;
  ibv_wr_rdma_read(qpx, remote->rkey, addr_of(remote) + 3000);
  addr();
  ibv_wr_set_sge(qpx, dst->lkey, addr_of(dst) + 3000, 16);
  qpx->wr_id = 5;
  ibv_wr_atomic_fetch_add(qpx, remote->rkey, addr_of(remote) + 3584, 7);
  addr();
  ibv_wr_set_sge(qpx, dst->lkey, addr_of(dst) + 2048, 8);
  qpx->wr_id = 6;
  ibv_wr_atomic_cmp_swp(qpx, remote->rkey, addr_of(remote) + 3584, 12, 99);
  addr();
  ibv_wr_set_sge(qpx, dst->lkey, addr_of(dst) + 2056, 8);
  ASSERT_EQ(ibv_wr_complete(qpx), 0);

  std::vector<ibv_wc> sends = poll_n(scq, 6);
  ASSERT_EQ(sends.size(), 6u);
  for (size_t k = 0; k < sends.size(); ++k) {
    EXPECT_EQ(sends[k].status, IBV_WC_SUCCESS) << k << ": " << ibv_wc_status_str(sends[k].status);
    EXPECT_EQ(sends[k].wr_id, k + 1);
    EXPECT_EQ(sends[k].qp_num, i->qp_num);
  }
  std::vector<ibv_wc> recvs = poll_n(rcq, 2);
  ASSERT_EQ(recvs.size(), 2u);
  EXPECT_EQ(recvs[0].wr_id, 100u);
  EXPECT_EQ(recvs[0].byte_len, 1000u);
  EXPECT_EQ(recvs[1].wr_id, 101u);
  EXPECT_EQ(recvs[1].byte_len, 24u);
  EXPECT_TRUE(recvs[1].wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(be32toh(recvs[1].imm_data), 0xabcdu);
  for (const ibv_wc& wc : recvs) {
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.opcode, IBV_WC_RECV);
    EXPECT_EQ(wc.qp_num, t->qp_num);  // the DCT
    EXPECT_EQ(wc.src_qp, i->qp_num);  // the DCI
  }
  const uint8_t* d = static_cast<uint8_t*>(dst->addr);
  const uint8_t* r = static_cast<uint8_t*>(remote->addr);
  EXPECT_EQ(d[0], 0x11);
  EXPECT_EQ(d[999], 0x11);
  EXPECT_EQ(d[1000], 0);
  EXPECT_EQ(d[1024], 0x11);
  EXPECT_EQ(r[0], 0x11);
  EXPECT_EQ(r[1999], 0x11);
  EXPECT_EQ(d[3000], 0x22);  // READ of what WRITE left alone
  uint64_t fetched, compared;
  std::memcpy(&fetched, d + 2048, 8);
  std::memcpy(&compared, d + 2056, 8);
  EXPECT_EQ(fetched, 5u);
  EXPECT_EQ(compared, 12u);
  EXPECT_EQ(*atomic, 99u);
}

// One DCI alternating between two DCTs (each change a new connection,
// after the previous target's WQEs completed), and a second DCI to the
// first DCT beside it: every message lands once, in order, at the DCT it
// was sent to, with the right source.
TEST_F(Mlx5Dc, DciMovesBetweenTargetsAndTargetsServeManyDcis) {
  ibv_cq* scq = make_cq(256);
  ibv_cq* rcq1 = make_cq(256);
  ibv_cq* rcq2 = make_cq(256);
  ibv_srq* srq1 = basic_srq(128);
  ibv_srq* srq2 = basic_srq(128);
  ASSERT_TRUE(srq1 && srq2);
  ibv_qp* t1 = dct(rcq1, srq1, kDcKey);
  ibv_qp* t2 = dct(rcq2, srq2, kDcKey + 1);
  ibv_qp* i1 = dci(scq);
  ibv_qp* i2 = dci(scq);
  ASSERT_TRUE(t1 && t2 && i1 && i2) << std::strerror(errno);
  ibv_ah* ah = target_ah();
  ibv_mr* src = reg_buffer(64 * 4, kRw, 0);
  ibv_mr* dst = reg_buffer(64 * 128, kRw, 0);
  for (int k = 0; k < 64; ++k) {
    ASSERT_EQ(post_srq_recv_mr(srq1, 1000 + k, dst, size_t(k) * 64, 64), 0);
    ASSERT_EQ(post_srq_recv_mr(srq2, 2000 + k, dst, size_t(64 + k) * 64, 64), 0);
  }
  constexpr int kRounds = 20;
  uint8_t* s = static_cast<uint8_t*>(src->addr);
  for (int k = 0; k < kRounds; ++k) {
    s[0] = uint8_t(k), s[64] = uint8_t(k), s[128] = uint8_t(100 + k);
    ASSERT_EQ(dc_send(i1, k, ah, t1->qp_num, kDcKey, sge_of(src, 0, 8)), 0);
    ASSERT_EQ(dc_send(i1, 100 + k, ah, t2->qp_num, kDcKey + 1, sge_of(src, 64, 8)), 0);
    ASSERT_EQ(dc_send(i2, 200 + k, ah, t1->qp_num, kDcKey, sge_of(src, 128, 8)), 0);
    std::vector<ibv_wc> wcs = poll_n(scq, 3);
    ASSERT_EQ(wcs.size(), 3u) << "round " << k;
    for (const ibv_wc& wc : wcs) ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
  }
  std::vector<ibv_wc> at1 = poll_n(rcq1, 2 * kRounds);
  std::vector<ibv_wc> at2 = poll_n(rcq2, kRounds);
  ASSERT_EQ(at1.size(), size_t(2 * kRounds));
  ASSERT_EQ(at2.size(), size_t(kRounds));
  ibv_wc extra;
  EXPECT_FALSE(poll_one(rcq1, &extra, 0.2));  // nothing delivered twice
  int from1 = 0, from2 = 0;
  const uint8_t* d = static_cast<uint8_t*>(dst->addr);
  for (const ibv_wc& wc : at1) {
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.qp_num, t1->qp_num);
    const uint8_t v = d[(wc.wr_id - 1000) * 64];
    if (wc.src_qp == i1->qp_num) EXPECT_EQ(v, from1++);
    else if (wc.src_qp == i2->qp_num) EXPECT_EQ(v, 100 + from2++);
    else ADD_FAILURE() << "source " << wc.src_qp;
  }
  EXPECT_EQ(from1, kRounds);
  EXPECT_EQ(from2, kRounds);
  for (int k = 0; k < kRounds; ++k) {
    EXPECT_EQ(at2[k].qp_num, t2->qp_num);
    EXPECT_EQ(at2[k].src_qp, i1->qp_num);
    EXPECT_EQ(d[(at2[k].wr_id - 2000 + 64) * 64], k);
  }
}

// A DCI reset and brought up again starts over at PSN 0: the DCT takes it
// as a new connection (a new epoch), not as duplicates of the old one.
TEST_F(Mlx5Dc, DciResetStartsANewConnection) {
  ibv_cq* scq = make_cq(64);
  ibv_cq* rcq = make_cq(64);
  ibv_srq* srq = basic_srq(16);
  ibv_qp* t = dct(rcq, srq);
  ibv_qp* i = dci(scq);
  ASSERT_TRUE(t && i) << std::strerror(errno);
  ibv_ah* ah = target_ah();
  ibv_mr* buf = reg_buffer(256, kRw, 0x33);
  for (int k = 0; k < 4; ++k) ASSERT_EQ(post_srq_recv_mr(srq, k, buf, 128 + size_t(k) * 32, 32), 0);
  ibv_wc wc;
  for (int round = 0; round < 2; ++round) {
    ASSERT_EQ(dc_send(i, round, ah, t->qp_num, kDcKey, sge_of(buf, 0, 16)), 0);
    ASSERT_TRUE(poll_one(scq, &wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
    ASSERT_TRUE(poll_one(rcq, &wc)) << "round " << round;
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.byte_len, 16u);
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RESET;
    ASSERT_EQ(ibv_modify_qp(i, &a, IBV_QP_STATE), 0);
    ASSERT_TRUE(bring_up_dci(i));
  }
}

// The wrong access key: the DCT takes nothing (its receive stays posted)
// and the DCI's request ends in RETRY_EXC_ERR after its retries.
TEST_F(Mlx5Dc, WrongKeyIsNeverAnswered) {
  ibv_cq* scq = make_cq(64);
  ibv_cq* rcq = make_cq(64);
  ibv_srq* srq = basic_srq(16);
  ibv_qp* t = dct(rcq, srq, kDcKey);
  ibv_qp* i = dci(scq, /*timeout=*/8, /*retry_cnt=*/1);  // 1 ms, one retry
  ASSERT_TRUE(t && i) << std::strerror(errno);
  ibv_ah* ah = target_ah();
  ibv_mr* buf = reg_buffer(128, kRw, 0x44);
  ASSERT_EQ(post_srq_recv_mr(srq, 7, buf, 64, 64), 0);
  ASSERT_EQ(dc_send(i, 1, ah, t->qp_num, kDcKey ^ 1, sge_of(buf, 0, 16)), 0);
  ibv_wc wc;
  ASSERT_TRUE(poll_one(scq, &wc));
  EXPECT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR) << ibv_wc_status_str(wc.status);
  EXPECT_FALSE(poll_one(rcq, &wc, 0.2));
  EXPECT_EQ(qp_state(i), IBV_QPS_ERR);
}

// A DCI whose send queue is in mlx5's format (mlx5dv_init_obj), written by
// hand as UCX's dc_mlx5 writes it: the control segment, the datagram
// segment (the AV mlx5dv_init_obj gives for an AH, with the DCT's key and
// number in it), then RC's segments. SENDs and a WRITE to two DCTs in
// turn; the DCI's completions in mlx5's format with their WQE indices.
TEST_F(Mlx5Dc, DciInMlx5FormatAsUcxWritesIt) {
  Mlx5Cq scq;
  formatted_cq(64, 64, &scq);
  ASSERT_NE(scq.cq, nullptr);
  ibv_cq* rcq = make_cq(64);
  ibv_srq* srq1 = basic_srq(16);
  ibv_srq* srq2 = basic_srq(16);
  ibv_qp* t1 = dct(rcq, srq1, kDcKey);
  ibv_qp* t2 = dct(rcq, srq2, kDcKey + 2);
  ibv_qp* i = dci(scq.cq);
  ASSERT_TRUE(t1 && t2 && i) << std::strerror(errno);
  Mlx5Sq sq;
  ASSERT_EQ(sq.take(i), 0);
  ASSERT_EQ(sq.dv.sq.stride, 64u);
  ibv_ah* ah = target_ah();
  mlx5dv_ah dah{};
  mlx5dv_obj obj{};
  obj.ah.in = ah;
  obj.ah.out = &dah;
  ASSERT_EQ(mlx5dv_init_obj(&obj, MLX5DV_OBJ_AH), 0);
  ibv_mr* buf = reg_buffer(4096, kRw, 0);
  uint8_t* b = static_cast<uint8_t*>(buf->addr);
  for (int k = 0; k < 4; ++k) {
    ASSERT_EQ(post_srq_recv_mr(srq1, 10 + k, buf, 1024 + size_t(k) * 64, 64), 0);
    ASSERT_EQ(post_srq_recv_mr(srq2, 20 + k, buf, 2048 + size_t(k) * 64, 64), 0);
  }
  // ctrl + AV (48) + data: ds 1 + 3 + 1; a WRITE adds a remote address segment.
  struct SendSegs {
    mlx5_wqe_av av;
    mlx5_wqe_data_seg data;
  };
  struct WriteSegs {
    mlx5_wqe_av av;
    mlx5_wqe_raddr_seg raddr;
    mlx5_wqe_data_seg data;
  };
  auto av_to = [&](ibv_qp* t, uint64_t key) {
    mlx5_wqe_av av = *dah.av;
    av.key.dc_key = htobe64(key);
    av.dqp_dct = htobe32(t->qp_num | MLX5_EXTENDED_UD_AV);
    return av;
  };
  std::vector<uint16_t> indices;
  for (int k = 0; k < 4; ++k) {
    ibv_qp* t = k % 2 ? t2 : t1;
    const uint64_t key = k % 2 ? kDcKey + 2 : kDcKey;
    b[k * 16] = uint8_t(0xa0 + k);
    SendSegs s{};
    s.av = av_to(t, key);
    mlx5dv_set_data_seg(&s.data, 16, buf->lkey, uintptr_t(b + k * 16));
    indices.push_back(sq.post(MLX5_OPCODE_SEND, MLX5_WQE_CTRL_CQ_UPDATE, &s, sizeof(s)));
  }
  WriteSegs w{};
  w.av = av_to(t2, kDcKey + 2);
  w.raddr.raddr = htobe64(uintptr_t(b + 3072));
  w.raddr.rkey = htobe32(buf->rkey);
  std::memset(b + 512, 0x5c, 100);
  mlx5dv_set_data_seg(&w.data, 100, buf->lkey, uintptr_t(b + 512));
  indices.push_back(sq.post(MLX5_OPCODE_RDMA_WRITE, MLX5_WQE_CTRL_CQ_UPDATE, &w, sizeof(w)));

  for (uint32_t k = 0; k < indices.size(); ++k) {
    mlx5_cqe64* e = scq.wait_cqe(k);
    ASSERT_NE(e, nullptr) << "no CQE " << k;
    EXPECT_EQ(mlx5dv_get_cqe_opcode(e), MLX5_CQE_REQ) << "CQE " << k;
    EXPECT_EQ(be16toh(e->wqe_counter), indices[k]);
    EXPECT_EQ(be32toh(e->sop_drop_qpn) & 0xffffff, i->qp_num);
  }
  std::vector<ibv_wc> recvs = poll_n(rcq, 4);
  ASSERT_EQ(recvs.size(), 4u);
  int at1 = 0, at2 = 0;
  for (const ibv_wc& wc : recvs) {
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
    EXPECT_EQ(wc.src_qp, i->qp_num);
    if (wc.qp_num == t1->qp_num) {
      EXPECT_EQ(wc.wr_id, uint64_t(10 + at1));
      EXPECT_EQ(b[1024 + at1 * 64], 0xa0 + 2 * at1);
      ++at1;
    } else {
      EXPECT_EQ(wc.qp_num, t2->qp_num);
      EXPECT_EQ(wc.wr_id, uint64_t(20 + at2));
      EXPECT_EQ(b[2048 + at2 * 64], 0xa1 + 2 * at2);
      ++at2;
    }
  }
  EXPECT_EQ(at1, 2);
  EXPECT_EQ(at2, 2);
  EXPECT_EQ(b[3072], 0x5c);
  EXPECT_EQ(b[3171], 0x5c);
  EXPECT_EQ(b[3172], 0);
}

// What mlx5 refuses: a DCT without an SRQ; a DC type that is neither; a
// DCT in RTS; ibv_post_send on a DCI, whose work request cannot name a
// target (ibv_wr_* with mlx5dv_wr_set_dc_addr only).
TEST_F(Mlx5Dc, Refusals) {
  ibv_cq* cq = make_cq(16);
  ibv_qp_init_attr_ex attr{};
  attr.qp_type = IBV_QPT_DRIVER;
  attr.comp_mask = IBV_QP_INIT_ATTR_PD;
  attr.pd = pd_;
  attr.send_cq = attr.recv_cq = cq;
  mlx5dv_qp_init_attr dv{};
  dv.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_DC;
  dv.dc_init_attr.dc_type = MLX5DV_DCTYPE_DCT;
  errno = 0;
  EXPECT_EQ(mlx5dv_create_qp(ctx_, &attr, &dv), nullptr);
  EXPECT_EQ(errno, EINVAL);
  dv.dc_init_attr.dc_type = mlx5dv_dc_type(7);
  attr.srq = basic_srq(4);
  errno = 0;
  EXPECT_EQ(mlx5dv_create_qp(ctx_, &attr, &dv), nullptr);
  EXPECT_EQ(errno, EINVAL);
  dv.comp_mask = 0;  // a driver QP that is not DC
  errno = 0;
  EXPECT_EQ(mlx5dv_create_qp(ctx_, &attr, &dv), nullptr);
  EXPECT_EQ(errno, EINVAL);

  ibv_qp* t = dct(cq, attr.srq);
  ASSERT_NE(t, nullptr);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTS;
  EXPECT_EQ(ibv_modify_qp(t, &a, IBV_QP_STATE), EINVAL);
  ibv_qp* i = dci(cq);
  ASSERT_NE(i, nullptr);
  ibv_mr* buf = reg_buffer(64, kRw);
  ibv_sge sge = sge_of(buf, 0, 8);
  EXPECT_EQ(post_send(i, 1, IBV_WR_SEND, &sge, 1), EINVAL);
}

}  // namespace
}  // namespace vt
