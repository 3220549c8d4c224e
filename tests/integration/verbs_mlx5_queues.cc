// mlx5 direct verbs, the queues in mlx5's own formats: CQs, send queues,
// basic SRQs and UD QPs handed out by mlx5dv_init_obj, read and written by
// hand as programs that drive a ConnectX (UCX's rc_mlx5) do, and through the
// verbs. Tag-matching SRQs and receive WQs: verbs_mlx5_tm_rwq.cc.
#include "tests/integration/verbs_mlx5.h"

namespace vt {
namespace {

// mlx5dv_init_obj on a CQ: its ring in mlx5's format, read by hand as a
// program driving a ConnectX reads it (UCX's rc_mlx5 does): owner bits that
// flip on each pass, opcodes, QPN, byte count, the consumer index written
// back to the doorbell record; armed through the UAR, it raises its event.
TEST_F(Mlx5Mode, InitObjCqIsReadByHandAsOnAConnectX) {
  for (uint32_t cqe_size : {64u, 128u}) {
    SCOPED_TRACE(cqe_size);
    ibv_comp_channel* ch = make_channel();
    ASSERT_NE(ch, nullptr);
    mlx5dv_cq_init_attr cq_dv{};
    cq_dv.comp_mask = MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE;
    cq_dv.cqe_size = cqe_size;
    ibv_cq_init_attr_ex attr{};
    attr.cqe = 7;
    attr.channel = ch;
    attr.wc_flags = IBV_WC_STANDARD_FLAGS;
    ibv_cq_ex* cqx = mlx5dv_create_cq(ctx_, &attr, &cq_dv);
    ASSERT_NE(cqx, nullptr) << std::strerror(errno);
    defer([cqx] { ibv_destroy_cq(ibv_cq_ex_to_cq(cqx)); });
    Mlx5Cq m{ibv_cq_ex_to_cq(cqx)};
    mlx5dv_obj obj{};
    obj.cq.in = m.cq;
    obj.cq.out = &m.dv;
    ASSERT_EQ(mlx5dv_init_obj(&obj, MLX5DV_OBJ_CQ), 0);
    EXPECT_EQ(m.dv.cqe_cnt, 8u);  // cqe + 1, a power of two (mlx5's align_queue_size)
    EXPECT_EQ(m.dv.cqe_size, cqe_size);
    ASSERT_TRUE(m.dv.buf && m.dv.dbrec && m.dv.cq_uar);
    for (uint32_t i = 0; i < 8; ++i) EXPECT_EQ(m.sw_cqe(i), nullptr) << "a CQE before any completion";

    ibv_qp *a, *b;
    ASSERT_TRUE(dv_pair(m.cq, nullptr, &a, &b)) << std::strerror(errno);
    ibv_mr* src = reg_buffer(64, kRw, 0x7e);
    ibv_mr* dst = reg_buffer(64, kRw, 0);
    // Ten SEND/receive pairs: 20 CQEs through a ring of 8, owner bits flipping.
    uint32_t ci = 0;
    for (uint32_t round = 0; round < 10; ++round) {
      ibv_sge rs = sge_of(dst, 0, 64);
      ASSERT_EQ(post_recv(b, 100 + round, &rs, 1), 0);
      ibv_sge ss = sge_of(src, 0, 40);
      ASSERT_EQ(post_send(a, round, IBV_WR_SEND, &ss, 1), 0);
      bool saw_req = false, saw_resp = false;
      for (int k = 0; k < 2; ++k, ++ci) {
        mlx5_cqe64* e = m.wait_cqe(ci);
        ASSERT_NE(e, nullptr) << "no CQE at index " << ci;
        const uint32_t qpn = be32toh(e->sop_drop_qpn) & 0xffffff;
        switch (mlx5dv_get_cqe_opcode(e)) {
          case MLX5_CQE_REQ:
            saw_req = true;
            EXPECT_EQ(qpn, a->qp_num);
            EXPECT_EQ(be32toh(e->sop_drop_qpn) >> 24, uint32_t(MLX5_OPCODE_SEND));
            break;
          case MLX5_CQE_RESP_SEND:
            saw_resp = true;
            EXPECT_EQ(qpn, b->qp_num);
            EXPECT_EQ(be32toh(e->byte_cnt), 40u);
            EXPECT_EQ(be32toh(e->flags_rqpn) & 0xffffff, a->qp_num);
            break;
          default:
            ADD_FAILURE() << "CQE opcode " << int(mlx5dv_get_cqe_opcode(e));
        }
        EXPECT_NE(be64toh(e->timestamp), 0u);
      }
      EXPECT_TRUE(saw_req && saw_resp);
      m.dv.dbrec[kCqSetCi] = htobe32(ci & 0xffffff);
    }
    EXPECT_EQ(static_cast<uint8_t*>(dst->addr)[39], 0x7e);

    // Armed by hand for the next CQE: the channel gets the CQ's event.
    m.arm_by_hand(ci);
    EXPECT_FALSE(fd_readable(ch->fd, 50)) << "an event with no CQE past the arm";
    ibv_sge ss = sge_of(src, 0, 8);
    ASSERT_EQ(post_send(a, 77, IBV_WR_RDMA_WRITE, &ss, 1, IBV_SEND_SIGNALED, uint64_t(uintptr_t(dst->addr)),
                        dst->rkey),
              0);
    ASSERT_TRUE(fd_readable(ch->fd, 5000)) << "no completion event after an arm through the UAR";
    ibv_cq* ev_cq = nullptr;
    void* ev_ctx = nullptr;
    ASSERT_EQ(ibv_get_cq_event(ch, &ev_cq, &ev_ctx), 0);
    EXPECT_EQ(ev_cq, m.cq);
    ibv_ack_cq_events(ev_cq, 1);
    mlx5_cqe64* e = m.wait_cqe(ci);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(mlx5dv_get_cqe_opcode(e), MLX5_CQE_REQ);
    EXPECT_EQ(be32toh(e->sop_drop_qpn) >> 24, uint32_t(MLX5_OPCODE_RDMA_WRITE));
    ++ci;
    m.dv.dbrec[kCqSetCi] = htobe32(ci & 0xffffff);
    // An arm for CQEs already there raises the event at once (the engine
    // looks at the UAR between completions too).
    ASSERT_EQ(post_send(a, 78, IBV_WR_RDMA_WRITE, &ss, 1, IBV_SEND_SIGNALED, uint64_t(uintptr_t(dst->addr)),
                        dst->rkey),
              0);
    ASSERT_NE(m.wait_cqe(ci), nullptr);
    m.arm_by_hand(ci);
    ASSERT_TRUE(fd_readable(ch->fd, 5000)) << "no event for a CQE already written when armed";
    ASSERT_EQ(ibv_get_cq_event(ch, &ev_cq, &ev_ctx), 0);
    ibv_ack_cq_events(ev_cq, 1);
    ++ci;
    m.dv.dbrec[kCqSetCi] = htobe32(ci & 0xffffff);
  }
}

// Segments after the control segment, as mlx5dv.h lays them out.
struct RaddrData {
  mlx5_wqe_raddr_seg raddr;
  mlx5_wqe_data_seg data;
};
RaddrData raddr_data(ibv_mr* local, uint32_t loff, uint32_t len, ibv_mr* remote, uint32_t roff) {
  RaddrData s{};
  s.raddr.raddr = htobe64(uint64_t(uintptr_t(remote->addr)) + roff);
  s.raddr.rkey = htobe32(remote->rkey);
  mlx5dv_set_data_seg(&s.data, len, local->lkey, uintptr_t(local->addr) + loff);
  return s;
}

// mlx5dv_init_obj on an RC QP whose receives come from an SRQ: its send
// queue in mlx5's format, written by hand as on a ConnectX (UCX's rc_mlx5
// does): WRITE, SEND with inline data over two basic blocks, an unsignalled
// WRITE then a signalled READ (one CQE, the READ's index), fetch-and-add, a
// signalled NOP, WQEs wrapping around the queue's end many times; each
// completion in an mlx5-format CQ with its WQE index (wqe_counter) and WQE
// opcode. The verbs post nothing to it. A WQE with an opcode the device
// does not run ends in a local QP operation error, and what was posted
// behind it is flushed, each with its own index.
TEST_F(Mlx5Mode, InitObjQpSendQueueIsWrittenByHandAsOnAConnectX) {
  Mlx5Cq m;
  formatted_cq(255, 64, &m);
  ASSERT_NE(m.cq, nullptr) << std::strerror(errno);
  ibv_srq* srq = basic_srq(64);
  ASSERT_NE(srq, nullptr);
  auto rc_on_srq = [&] {
    ibv_qp_init_attr_ex attr = qp_ex_attr(IBV_QPT_RC, m.cq, 0, {});
    attr.comp_mask = IBV_QP_INIT_ATTR_PD;
    attr.srq = srq;
    attr.cap.max_inline_data = 128;
    mlx5dv_qp_init_attr dv{};
    ibv_qp* qp = mlx5dv_create_qp(ctx_, &attr, &dv);
    if (qp) defer([qp] { ibv_destroy_qp(qp); });
    return qp;
  };
  ibv_qp* a = rc_on_srq();
  ibv_qp* b = rc_on_srq();
  ASSERT_TRUE(a && b) << std::strerror(errno);
  Mlx5Sq sq;
  ASSERT_EQ(sq.take(a), 0) << "an RC QP on an SRQ";
  // What UCX's uct_ib_mlx5_txwq_init checks.
  EXPECT_EQ(sq.dv.sq.stride, uint32_t(MLX5_SEND_WQE_BB));
  ASSERT_GT(sq.dv.sq.wqe_cnt, 8u);
  EXPECT_EQ(sq.dv.sq.wqe_cnt & (sq.dv.sq.wqe_cnt - 1), 0u) << "a power of two";
  EXPECT_EQ(sq.dv.bf.size, 256u);
  EXPECT_EQ(sq.dv.rq.wqe_cnt, 0u) << "receives come from the SRQ";
  ASSERT_TRUE(sq.dv.dbrec && sq.dv.sq.buf && sq.dv.bf.reg);
  connect_qp(a, b->qp_num);
  connect_qp(b, a->qp_num);

  ibv_mr* src = reg_buffer(4096, kRw, 0);
  ibv_mr* dst = reg_buffer(4096, kRw | IBV_ACCESS_REMOTE_ATOMIC, 0);
  auto* s = static_cast<uint8_t*>(src->addr);
  auto* d = static_cast<uint8_t*>(dst->addr);
  uint32_t ci = 0;
  // The next CQE, which must be a's requester completion of WQE `index`.
  auto expect_req = [&](uint16_t index, uint8_t wqe_opcode) {
    mlx5_cqe64* e = m.wait_cqe(ci);
    ASSERT_NE(e, nullptr) << "no CQE for WQE " << index;
    EXPECT_EQ(mlx5dv_get_cqe_opcode(e), MLX5_CQE_REQ) << "syndrome "
                                                      << int(reinterpret_cast<mlx5_err_cqe*>(e)->syndrome);
    EXPECT_EQ(be32toh(e->sop_drop_qpn) & 0xffffff, a->qp_num);
    EXPECT_EQ(be32toh(e->sop_drop_qpn) >> 24, uint32_t(wqe_opcode));
    EXPECT_EQ(be16toh(e->wqe_counter), index);
    ++ci;
    m.dv.dbrec[kCqSetCi] = htobe32(ci & 0xffffff);
  };

  // RDMA WRITE of 100 bytes: control, remote address, data (one basic block).
  for (int i = 0; i < 100; ++i) s[i] = uint8_t(i * 7 + 1);
  RaddrData w = raddr_data(src, 0, 100, dst, 0);
  uint16_t idx = sq.post(MLX5_OPCODE_RDMA_WRITE, MLX5_WQE_CTRL_CQ_UPDATE, &w, sizeof(w));
  expect_req(idx, MLX5_OPCODE_RDMA_WRITE);
  EXPECT_EQ(std::memcmp(d, s, 100), 0) << "the WRITE's bytes";

  // SEND with 80 inline bytes (control + 84 bytes: two basic blocks) into the SRQ.
  ibv_sge rs = sge_of(dst, 1024, 256);
  ibv_recv_wr rwr{};
  rwr.wr_id = 500;
  rwr.sg_list = &rs;
  rwr.num_sge = 1;
  ibv_recv_wr* bad_rwr = nullptr;
  ASSERT_EQ(ibv_post_srq_recv(srq, &rwr, &bad_rwr), 0);
  uint8_t inl[96] = {};
  const uint32_t inl_count = htobe32(80 | MLX5_INLINE_SEG);
  std::memcpy(inl, &inl_count, 4);
  for (int i = 0; i < 80; ++i) inl[4 + i] = uint8_t(0xa0 + i);
  idx = sq.post(MLX5_OPCODE_SEND, MLX5_WQE_CTRL_CQ_UPDATE, inl, 4 + 80);
  for (int k = 0; k < 2; ++k) {  // the receive's and the send's, in either order
    mlx5_cqe64* e = m.wait_cqe(ci);
    ASSERT_NE(e, nullptr);
    if (mlx5dv_get_cqe_opcode(e) == MLX5_CQE_RESP_SEND) {
      EXPECT_EQ(be32toh(e->sop_drop_qpn) & 0xffffff, b->qp_num);
      EXPECT_EQ(be32toh(e->byte_cnt), 80u);
      ++ci;
      m.dv.dbrec[kCqSetCi] = htobe32(ci & 0xffffff);
    } else {
      expect_req(idx, MLX5_OPCODE_SEND);
    }
  }
  EXPECT_EQ(d[1024], 0xa0);
  EXPECT_EQ(d[1024 + 79], uint8_t(0xa0 + 79));

  // An unsignalled WRITE, then a signalled READ: one CQE, the READ's index.
  s[200] = 0x5a;
  w = raddr_data(src, 200, 1, dst, 300);
  sq.post(MLX5_OPCODE_RDMA_WRITE, 0, &w, sizeof(w));
  w = raddr_data(src, 400, 1, dst, 300);
  idx = sq.post(MLX5_OPCODE_RDMA_READ, MLX5_WQE_CTRL_CQ_UPDATE, &w, sizeof(w));
  expect_req(idx, MLX5_OPCODE_RDMA_READ);
  EXPECT_EQ(s[400], 0x5a) << "the READ brought back what the WRITE before it wrote";

  // Fetch-and-add: control, remote address, atomic, data (64 bytes).
  uint64_t* word = reinterpret_cast<uint64_t*>(d + 512);
  *word = 40;
  struct {
    mlx5_wqe_raddr_seg raddr;
    mlx5_wqe_atomic_seg atomic;
    mlx5_wqe_data_seg data;
  } fa{};
  fa.raddr.raddr = htobe64(uint64_t(uintptr_t(word)));
  fa.raddr.rkey = htobe32(dst->rkey);
  fa.atomic.swap_add = htobe64(2);
  mlx5dv_set_data_seg(&fa.data, 8, src->lkey, uintptr_t(s + 512));
  idx = sq.post(MLX5_OPCODE_ATOMIC_FA, MLX5_WQE_CTRL_CQ_UPDATE, &fa, sizeof(fa));
  expect_req(idx, MLX5_OPCODE_ATOMIC_FA);
  EXPECT_EQ(*word, 42u);
  uint64_t fetched;
  std::memcpy(&fetched, s + 512, 8);
  EXPECT_EQ(fetched, 40u) << "the value before the add, in host order";

  // A signalled NOP (UCX's flush): completes in order, WQE opcode NOP.
  idx = sq.post(MLX5_OPCODE_NOP, MLX5_WQE_CTRL_CQ_UPDATE, nullptr, 0);
  expect_req(idx, MLX5_OPCODE_NOP);

  // Around the queue several times, one- and two-block WQEs, so some wrap
  // at its end; each completes with its own index.
  const uint32_t rounds = 3 * sq.dv.sq.wqe_cnt / 2;
  for (uint32_t i = 0; i < rounds; ++i) {
    s[1000] = uint8_t(i);
    if (i % 3 == 2) {
      // WRITE with 64 bytes inline: control, remote address, 68 bytes: two blocks.
      uint8_t segs[16 + 80] = {};
      mlx5_wqe_raddr_seg r{};
      r.raddr = htobe64(uint64_t(uintptr_t(d + 2000)));
      r.rkey = htobe32(dst->rkey);
      std::memcpy(segs, &r, 16);
      const uint32_t count = htobe32(64 | MLX5_INLINE_SEG);
      std::memcpy(segs + 16, &count, 4);
      std::memset(segs + 20, int(i & 0xff), 64);
      idx = sq.post(MLX5_OPCODE_RDMA_WRITE, MLX5_WQE_CTRL_CQ_UPDATE, segs, 16 + 4 + 64);
      ASSERT_NO_FATAL_FAILURE(expect_req(idx, MLX5_OPCODE_RDMA_WRITE));
      ASSERT_EQ(d[2000 + 63], uint8_t(i)) << "round " << i;
    } else {
      w = raddr_data(src, 1000, 1, dst, 1000);
      idx = sq.post(MLX5_OPCODE_RDMA_WRITE, MLX5_WQE_CTRL_CQ_UPDATE, &w, sizeof(w));
      ASSERT_NO_FATAL_FAILURE(expect_req(idx, MLX5_OPCODE_RDMA_WRITE));
      ASSERT_EQ(d[1000], uint8_t(i)) << "round " << i;
    }
  }
  EXPECT_GT(uint32_t(sq.pi), sq.dv.sq.wqe_cnt) << "the queue wrapped";

  // The verbs post nothing to a queue the program writes.
  ibv_sge ss = sge_of(src, 0, 8);
  EXPECT_EQ(post_send(a, 1, IBV_WR_RDMA_WRITE, &ss, 1, IBV_SEND_SIGNALED, uint64_t(uintptr_t(d)), dst->rkey),
            EOPNOTSUPP);

  // An opcode the device does not run (UMR), then a WRITE behind it: a local
  // QP operation error for the first, a flush for the second, each with its
  // own index.
  const uint16_t bad = sq.post(MLX5_OPCODE_UMR, MLX5_WQE_CTRL_CQ_UPDATE, &w, sizeof(w));
  const uint16_t behind = sq.post(MLX5_OPCODE_RDMA_WRITE, MLX5_WQE_CTRL_CQ_UPDATE, &w, sizeof(w));
  for (uint16_t want : {bad, behind}) {
    mlx5_cqe64* e = m.wait_cqe(ci);
    ASSERT_NE(e, nullptr) << "no CQE for WQE " << want;
    ASSERT_EQ(mlx5dv_get_cqe_opcode(e), MLX5_CQE_REQ_ERR);
    auto* err = reinterpret_cast<mlx5_err_cqe*>(e);
    EXPECT_EQ(err->syndrome, want == bad ? MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR : MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
    EXPECT_EQ(be16toh(e->wqe_counter), want);
    ++ci;
  }
  ibv_qp_attr qa{};
  ibv_qp_init_attr qia{};
  ASSERT_EQ(ibv_query_qp(a, &qa, IBV_QP_STATE, &qia), 0);
  EXPECT_EQ(qa.qp_state, IBV_QPS_ERR);
}

// mlx5dv_init_obj on a basic SRQ: its WQEs in mlx5's linked list, filled
// and posted by hand as UCX's rc_mlx5 does (a data segment after each next
// segment, the count in the doorbell record); the device takes WQE 0 first,
// then follows each WQE's link as it stands when the next receive is taken,
// so a link the program changed (UCX relinks freed WQEs) is followed; each
// receive completes in an mlx5-format CQ with its WQE's index.
TEST_F(Mlx5Mode, InitObjSrqIsFilledAndLinkedByHandAsOnAConnectX) {
  Mlx5Cq m;
  formatted_cq(31, 64, &m);
  ASSERT_NE(m.cq, nullptr) << std::strerror(errno);
  ibv_srq* srq = basic_srq(15);
  ASSERT_NE(srq, nullptr);
  mlx5dv_srq dvsrq{};
  dvsrq.comp_mask = MLX5DV_SRQ_MASK_SRQN;
  mlx5dv_obj obj{};
  obj.srq.in = srq;
  obj.srq.out = &dvsrq;
  ASSERT_EQ(mlx5dv_init_obj(&obj, MLX5DV_OBJ_SRQ), 0);
  // What UCX's uct_ib_mlx5_verbs_srq_init checks.
  EXPECT_EQ(dvsrq.head, 0u);
  EXPECT_EQ(dvsrq.tail, 15u) << "max_wr + 1 WQEs, a power of two";
  EXPECT_EQ(dvsrq.stride, 32u) << "a next segment and one data segment";
  ASSERT_TRUE(dvsrq.buf && dvsrq.dbrec);
  uint32_t srqn = 0;
  ASSERT_EQ(ibv_get_srq_num(srq, &srqn), 0);
  EXPECT_EQ(dvsrq.comp_mask, uint64_t(MLX5DV_SRQ_MASK_SRQN));
  EXPECT_EQ(dvsrq.srqn, srqn);
  auto* wqes = static_cast<uint8_t*>(dvsrq.buf);
  auto* first_next = reinterpret_cast<mlx5_wqe_srq_next_seg*>(wqes);
  EXPECT_EQ(be16toh(first_next->next_wqe_index), 1) << "WQE 0 links to WQE 1, as libmlx5 leaves it";

  ibv_cq* send_cq = make_cq(16);
  ASSERT_NE(send_cq, nullptr);
  ibv_qp* a = make_qp(IBV_QPT_RC, send_cq, send_cq);
  ibv_qp_init_attr_ex attr = qp_ex_attr(IBV_QPT_RC, m.cq, 0, {});
  attr.comp_mask = IBV_QP_INIT_ATTR_PD;
  attr.srq = srq;
  ibv_qp* b = mlx5dv_create_qp(ctx_, &attr, nullptr);
  ASSERT_TRUE(a && b) << std::strerror(errno);
  defer([b] { ibv_destroy_qp(b); });
  connect_qp(a, b->qp_num);
  connect_qp(b, a->qp_num);
  ibv_mr* src = reg_buffer(64, kRw, 0);
  ibv_mr* dst = reg_buffer(16 * 64, kRw, 0);
  auto* d = static_cast<uint8_t*>(dst->addr);
  auto fill = [&](uint32_t i) {
    mlx5dv_set_data_seg(reinterpret_cast<mlx5_wqe_data_seg*>(wqes + i * dvsrq.stride + 16), 64, dst->lkey,
                        uintptr_t(d + i * 64));
  };
  uint16_t posted = 0;
  auto post = [&] {
    __atomic_thread_fence(__ATOMIC_RELEASE);
    *dvsrq.dbrec = htobe32(++posted);
  };
  uint32_t ci = 0;
  // A SEND of 40 bytes of `tag` from a, which must land in WQE `index`.
  auto send_into = [&](uint8_t tag, uint16_t index) {
    std::memset(src->addr, tag, 40);
    ibv_sge ss = sge_of(src, 0, 40);
    ASSERT_EQ(post_send(a, tag, IBV_WR_SEND, &ss, 1), 0);
    ibv_wc wc;
    VT_POLL_ONE(send_cq, &wc);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
    mlx5_cqe64* e = m.wait_cqe(ci);
    ASSERT_NE(e, nullptr) << "no receive CQE for WQE " << index;
    EXPECT_EQ(mlx5dv_get_cqe_opcode(e), MLX5_CQE_RESP_SEND);
    EXPECT_EQ(be32toh(e->sop_drop_qpn) & 0xffffff, b->qp_num);
    EXPECT_EQ(be32toh(e->byte_cnt), 40u);
    EXPECT_EQ(be16toh(e->wqe_counter), index);
    ++ci;
    m.dv.dbrec[kCqSetCi] = htobe32(ci);
    EXPECT_EQ(d[index * 64], tag) << "not in WQE " << index << "'s buffer";
    EXPECT_EQ(d[index * 64 + 39], tag);
  };
  fill(0);
  fill(1);
  post();
  post();
  ASSERT_NO_FATAL_FAILURE(send_into(0x11, 0));
  ASSERT_NO_FATAL_FAILURE(send_into(0x22, 1));
  // WQE 1, taken last, now links to WQE 5: the next receive follows it.
  auto* next1 = reinterpret_cast<mlx5_wqe_srq_next_seg*>(wqes + 1 * dvsrq.stride);
  next1->next_wqe_index = htobe16(5);
  fill(5);
  post();
  ASSERT_NO_FATAL_FAILURE(send_into(0x33, 5));
  fill(6);  // WQE 5 still links to 6
  post();
  ASSERT_NO_FATAL_FAILURE(send_into(0x44, 6));
  EXPECT_EQ(d[2 * 64], 0) << "WQE 2 was skipped";

  // The verbs post nothing to a list the program writes.
  ibv_sge rs = sge_of(dst, 0, 64);
  ibv_recv_wr rwr{};
  rwr.sg_list = &rs;
  rwr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_srq_recv(srq, &rwr, &bad), EOPNOTSUPP);
  EXPECT_EQ(bad, &rwr);
}

// mlx5dv_init_obj on UD QPs (UCX's ud_mlx5): the send queue takes WQEs with
// a datagram segment (the AH's mlx5_wqe_av, which mlx5dv_init_obj hands out,
// with the destination QP and Q_Key set per WQE), the QP's own receive
// queue is mlx5's (data segments, an invalid lkey ending a WQE early, the
// count in doorbell record word 0). A receive completes with its WQE's
// index, the 40 bytes of GRH first in its buffer (the byte count says so),
// the sender's QPN and "GRH in the buffer" in flags_rqpn; the verbs post to
// neither queue; the error state flushes the receives left, by index.
TEST_F(Mlx5Mode, InitObjUdQpSendsAndReceivesInMlx5Formats) {
  Mlx5Cq m;
  formatted_cq(63, 64, &m);
  ASSERT_NE(m.cq, nullptr) << std::strerror(errno);
  auto ud_qp = [&](uint32_t max_recv_sge) {
    QpCaps caps;
    caps.max_recv_sge = max_recv_sge;
    ibv_qp_init_attr_ex attr = qp_ex_attr(IBV_QPT_UD, m.cq, 0, caps);
    attr.comp_mask = IBV_QP_INIT_ATTR_PD;
    ibv_qp* qp = mlx5dv_create_qp(ctx_, &attr, nullptr);
    if (qp) defer([qp] { ibv_destroy_qp(qp); });
    return qp;
  };
  ibv_qp* a = ud_qp(1);
  ibv_qp* b = ud_qp(2);
  ASSERT_TRUE(a && b) << std::strerror(errno);
  Mlx5Sq sq;
  ASSERT_EQ(sq.take(a), 0) << "a UD QP";
  EXPECT_EQ(sq.dv.rq.stride, 16u) << "one SGE: what UCX's uct_ib_mlx5_get_rxwq requires";
  mlx5dv_qp rq{};
  mlx5dv_obj obj{};
  obj.qp.in = b;
  obj.qp.out = &rq;
  ASSERT_EQ(mlx5dv_init_obj(&obj, MLX5DV_OBJ_QP), 0);
  // 16 bytes per SGE the QP holds (its max_recv_sge, 2 or more), a power of two.
  EXPECT_GE(rq.rq.stride, 32u);
  EXPECT_EQ(rq.rq.stride & (rq.rq.stride - 1), 0u);
  ASSERT_GE(rq.rq.wqe_cnt, 64u) << "max_recv_wr";
  EXPECT_EQ(rq.rq.wqe_cnt & (rq.rq.wqe_cnt - 1), 0u) << "a power of two";
  ASSERT_TRUE(rq.rq.buf && rq.dbrec);
  connect_qp(a, 0);
  connect_qp(b, 0);

  // The AH as libmlx5 keeps it: the GID, the SGID index, the extended-AV
  // flag, a RoCEv2 source port in rlid.
  ibv_ah_attr ah_attr = loopback_av();
  ibv_ah* ah = make_ah(&ah_attr);
  ASSERT_NE(ah, nullptr);
  mlx5dv_ah dah{};
  obj = {};
  obj.ah.in = ah;
  obj.ah.out = &dah;
  ASSERT_EQ(mlx5dv_init_obj(&obj, MLX5DV_OBJ_AH), 0);
  ASSERT_NE(dah.av, nullptr);
  EXPECT_TRUE(be32toh(dah.av->dqp_dct) & MLX5_EXTENDED_UD_AV);
  EXPECT_EQ(std::memcmp(dah.av->rgid, ah_attr.grh.dgid.raw, 16), 0);
  EXPECT_EQ((be32toh(dah.av->grh_gid_fl) >> 20) & 0xff, ah_attr.grh.sgid_index);
  EXPECT_GE(be16toh(dah.av->rlid), 0xc000) << "a RoCEv2 source port";

  // Three receives by hand: a data segment, then an invalid lkey (the WQE
  // holds more).
  ibv_mr* rbuf = reg_buffer(4096, kRw, 0);
  for (uint32_t i = 0; i < 3; ++i) {
    auto* segs = reinterpret_cast<mlx5_wqe_data_seg*>(static_cast<uint8_t*>(rq.rq.buf) + i * rq.rq.stride);
    mlx5dv_set_data_seg(&segs[0], 40 + 256, rbuf->lkey, uintptr_t(rbuf->addr) + 512 * i);
    mlx5dv_set_data_seg(&segs[1], 0, MLX5_INVALID_LKEY, 0);
  }
  __atomic_thread_fence(__ATOMIC_RELEASE);
  rq.dbrec[MLX5_RCV_DBR] = htobe32(3);

  // A SEND with 20 inline bytes: control, datagram, inline (one block + 16).
  struct {
    mlx5_wqe_datagram_seg dgram;
    uint8_t inl[32];
  } ws{};
  auto address = [&] {
    std::memcpy(&ws.dgram.av, dah.av, sizeof(ws.dgram.av));
    ws.dgram.av.dqp_dct = htobe32(b->qp_num | MLX5_EXTENDED_UD_AV);
    ws.dgram.av.key.qkey.qkey = htobe32(ConnectOpts{}.qkey);
  };
  address();
  const uint32_t inl_count = htobe32(20 | MLX5_INLINE_SEG);
  std::memcpy(ws.inl, &inl_count, 4);
  for (int i = 0; i < 20; ++i) ws.inl[4 + i] = uint8_t(0x30 + i);
  const uint16_t first = sq.post(MLX5_OPCODE_SEND, MLX5_WQE_CTRL_CQ_UPDATE, &ws, sizeof(ws.dgram) + 4 + 20);
  // A SEND with immediate of 200 bytes by pointer.
  ibv_mr* sbuf = reg_buffer(4096, kRw, 0x6c);
  struct {
    mlx5_wqe_datagram_seg dgram;
    mlx5_wqe_data_seg data;
  } wp{};
  std::memcpy(&wp.dgram, &ws.dgram, sizeof(wp.dgram));
  mlx5dv_set_data_seg(&wp.data, 200, sbuf->lkey, uintptr_t(sbuf->addr));
  const uint16_t second = sq.post(MLX5_OPCODE_SEND_IMM, MLX5_WQE_CTRL_CQ_UPDATE, &wp, sizeof(wp), htobe32(0xabcd));

  uint32_t ci = 0;
  uint32_t sends = 0, receives = 0;
  for (int k = 0; k < 4; ++k, ++ci) {
    mlx5_cqe64* e = m.wait_cqe(ci);
    ASSERT_NE(e, nullptr) << "CQE " << k;
    const uint8_t op = mlx5dv_get_cqe_opcode(e);
    if (op == MLX5_CQE_REQ) {
      EXPECT_EQ(be32toh(e->sop_drop_qpn) & 0xffffff, a->qp_num);
      EXPECT_EQ(be16toh(e->wqe_counter), sends == 0 ? first : second);
      ++sends;
      continue;
    }
    ASSERT_TRUE(op == MLX5_CQE_RESP_SEND || op == MLX5_CQE_RESP_SEND_IMM)
        << "CQE opcode " << int(op) << " syndrome " << int(reinterpret_cast<mlx5_err_cqe*>(e)->syndrome);
    EXPECT_EQ(be32toh(e->sop_drop_qpn) & 0xffffff, b->qp_num);
    EXPECT_EQ(be16toh(e->wqe_counter), receives);
    EXPECT_EQ(be32toh(e->flags_rqpn) & 0xffffff, a->qp_num);
    EXPECT_TRUE(be32toh(e->flags_rqpn) & (1u << 28)) << "the GRH is in the buffer";
    const auto* got = static_cast<uint8_t*>(rbuf->addr) + 512 * receives;
    if (receives == 0) {
      EXPECT_EQ(op, MLX5_CQE_RESP_SEND);
      EXPECT_EQ(be32toh(e->byte_cnt), 40u + 20u);
      EXPECT_EQ(got[40], 0x30);
      EXPECT_EQ(got[40 + 19], 0x30 + 19);
    } else {
      EXPECT_EQ(op, MLX5_CQE_RESP_SEND_IMM);
      EXPECT_EQ(be32toh(e->byte_cnt), 40u + 200u);
      EXPECT_EQ(e->imm_inval_pkey, htobe32(0xabcd));
      EXPECT_EQ(got[40], 0x6c);
      EXPECT_EQ(got[40 + 199], 0x6c);
    }
    ++receives;
  }
  EXPECT_EQ(sends, 2u);
  EXPECT_EQ(receives, 2u);
  m.dv.dbrec[kCqSetCi] = htobe32(ci & 0xffffff);

  // The verbs post to neither queue.
  ibv_sge ss = sge_of(sbuf, 0, 8);
  EXPECT_EQ(post_recv(b, 1, &ss, 1), EOPNOTSUPP);
  EXPECT_EQ(post_ud(a, 1, &ss, ah, b->qp_num, ConnectOpts{}.qkey), EOPNOTSUPP);

  // The error state flushes the receive left, by its index.
  ibv_qp_attr err{};
  err.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(ibv_modify_qp(b, &err, IBV_QP_STATE), 0);
  mlx5_cqe64* e = m.wait_cqe(ci);
  ASSERT_NE(e, nullptr) << "no flush of the third receive";
  EXPECT_EQ(mlx5dv_get_cqe_opcode(e), MLX5_CQE_RESP_ERR);
  EXPECT_EQ(reinterpret_cast<mlx5_err_cqe*>(e)->syndrome, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
  EXPECT_EQ(be16toh(e->wqe_counter), 2u);
}

// A receive or a send posted through the verbs before mlx5dv_init_obj: the
// queues cannot change format under them (EBUSY).
TEST_F(Mlx5Mode, InitObjQpRefusesWhatItCannotHandOut) {
  ibv_cq* cq = make_cq(16);
  ASSERT_NE(cq, nullptr);
  ibv_qp* received = dv_qp(cq, nullptr);
  ASSERT_NE(received, nullptr);
  connect_qp(received, received->qp_num);
  ibv_mr* buf = reg_buffer(64, kRw, 0);
  ibv_sge rs = sge_of(buf, 0, 64);
  ASSERT_EQ(post_recv(received, 1, &rs, 1), 0);
  mlx5dv_qp dvqp{};
  mlx5dv_obj obj{};
  obj.qp.in = received;
  obj.qp.out = &dvqp;
  EXPECT_EQ(mlx5dv_init_obj(&obj, MLX5DV_OBJ_QP), EBUSY) << "a receive went to uroce's queue already";
  ibv_srq* srq = basic_srq(4);
  ASSERT_NE(srq, nullptr);
  ibv_qp_init_attr_ex attr = qp_ex_attr(IBV_QPT_RC, cq, 0, {});
  attr.comp_mask = IBV_QP_INIT_ATTR_PD;
  attr.srq = srq;
  ibv_qp* posted = mlx5dv_create_qp(ctx_, &attr, nullptr);
  ASSERT_NE(posted, nullptr) << std::strerror(errno);
  defer([posted] { ibv_destroy_qp(posted); });
  connect_qp(posted, posted->qp_num);
  ibv_sge none{};
  ASSERT_EQ(post_send(posted, 1, IBV_WR_RDMA_WRITE, &none, 0, IBV_SEND_SIGNALED, 0, 0), 0);
  ibv_wc wc;
  VT_POLL_ONE(cq, &wc);
  obj.qp.in = posted;
  EXPECT_EQ(mlx5dv_init_obj(&obj, MLX5DV_OBJ_QP), EBUSY) << "work requests went to uroce's queue already";
}

// After mlx5dv_init_obj the verbs still read and arm the CQ, now through
// mlx5 CQEs: ibv_poll_cq, the ibv_cq_ex reader, error syndromes, events;
// resizing it is refused (the program reads its ring in place).
TEST_F(Mlx5Mode, InitObjCqStillWorksThroughTheVerbs) {
  ibv_comp_channel* ch = make_channel();
  ASSERT_NE(ch, nullptr);
  ibv_cq_init_attr_ex attr{};
  attr.cqe = 16;
  attr.channel = ch;
  attr.wc_flags = uint64_t(IBV_WC_STANDARD_FLAGS) | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
  ibv_cq_ex* cqx = make_cq_ex(&attr);
  ASSERT_NE(cqx, nullptr) << std::strerror(errno);
  ibv_cq* cq = ibv_cq_ex_to_cq(cqx);
  mlx5dv_cq dv{};
  mlx5dv_obj obj{};
  obj.cq.in = cq;
  obj.cq.out = &dv;
  ASSERT_EQ(mlx5dv_init_obj(&obj, MLX5DV_OBJ_CQ), 0);
  EXPECT_EQ(dv.cqe_size, 64u);
  EXPECT_EQ(dv.cqe_cnt, 32u);
  EXPECT_EQ(ibv_resize_cq(cq, 64), EOPNOTSUPP);

  ibv_qp *a, *b;
  ASSERT_TRUE(dv_pair(cq, nullptr, &a, &b)) << std::strerror(errno);
  ibv_mr* src = reg_buffer(64, kRw, 0x11);
  ibv_mr* dst = reg_buffer(64, kRw, 0);
  ibv_sge rs = sge_of(dst, 0, 64);
  ASSERT_EQ(post_recv(b, 9, &rs, 1), 0);
  ibv_sge ss = sge_of(src, 0, 24);
  ASSERT_EQ(ibv_req_notify_cq(cq, 0), 0);
  ASSERT_EQ(post_send(a, 8, IBV_WR_SEND, &ss, 1, IBV_SEND_SIGNALED, 0, 0, htobe32(0xabcd)), 0);
  ASSERT_TRUE(fd_readable(ch->fd, 5000)) << "no event after ibv_req_notify_cq";
  ibv_cq* ev_cq = nullptr;
  void* ev_ctx = nullptr;
  ASSERT_EQ(ibv_get_cq_event(ch, &ev_cq, &ev_ctx), 0);
  EXPECT_EQ(ev_cq, cq);
  ibv_ack_cq_events(ev_cq, 1);
  const auto wcs = by_wr_id(poll_n(cq, 2));
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs.at(8).status, IBV_WC_SUCCESS);
  EXPECT_EQ(wcs.at(8).opcode, IBV_WC_SEND);
  EXPECT_EQ(wcs.at(8).qp_num, a->qp_num);
  EXPECT_EQ(wcs.at(9).opcode, IBV_WC_RECV);
  EXPECT_EQ(wcs.at(9).byte_len, 24u);
  EXPECT_EQ(wcs.at(9).src_qp, a->qp_num);
  EXPECT_EQ(dv.dbrec[kCqSetCi], htobe32(2)) << "the consumer index written back";

  // A bad lkey: the error travels as its syndrome and reads back as the status.
  ibv_sge bad = ss;
  bad.lkey ^= 0x5a5a00;
  ASSERT_EQ(post_send(a, 10, IBV_WR_RDMA_WRITE, &bad, 1, IBV_SEND_SIGNALED, uint64_t(uintptr_t(dst->addr)),
                      dst->rkey),
            0);
  ibv_wc wc{};
  ASSERT_TRUE(poll_one(cq, &wc));
  EXPECT_EQ(wc.wr_id, 10u);
  EXPECT_EQ(wc.status, IBV_WC_LOC_PROT_ERR) << ibv_wc_status_str(wc.status);

  // The extended reader on a fresh pair (the QP above is in error now).
  ibv_qp *c, *d;
  ASSERT_TRUE(dv_pair(cq, nullptr, &c, &d));
  ASSERT_EQ(post_send(c, 11, IBV_WR_RDMA_WRITE, &ss, 1, IBV_SEND_SIGNALED, uint64_t(uintptr_t(dst->addr)),
                      dst->rkey),
            0);
  ibv_poll_cq_attr pa{};
  int ret = ENOENT;
  for (int spin = 0; spin < 5000 && ret == ENOENT; ++spin) {
    ret = ibv_start_poll(cqx, &pa);
    if (ret == ENOENT) usleep(1000);
  }
  ASSERT_EQ(ret, 0);
  EXPECT_EQ(cqx->wr_id, 11u);
  EXPECT_EQ(cqx->status, IBV_WC_SUCCESS);
  EXPECT_EQ(ibv_wc_read_opcode(cqx), IBV_WC_RDMA_WRITE);
  EXPECT_EQ(ibv_wc_read_qp_num(cqx), c->qp_num);
  EXPECT_NE(ibv_wc_read_completion_ts(cqx), 0u);
  EXPECT_EQ(ibv_next_poll(cqx), ENOENT);
  ibv_end_poll(cqx);
  EXPECT_EQ(static_cast<uint8_t*>(dst->addr)[23], 0x11);
}

}  // namespace
}  // namespace vt
