// The fixture and helpers of verbs_mlx5 (tests/integration/verbs_mlx5*.cc):
// mlx5 direct verbs against a real engine started with --mlx5.
#pragma once

#include <infiniband/mlx5dv.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "tests/integration/verbs_fixture.h"

namespace vt {


inline uint64_t realtime_ns() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000u + uint64_t(ts.tv_nsec);
}

// The words of a CQ's doorbell record (libmlx5's MLX5_CQ_SET_CI and
// MLX5_CQ_ARM_DB, in its private mlx5.h).
constexpr int kCqSetCi = 0;
constexpr int kCqArmDb = 1;

// A CQ in mlx5's format, as mlx5dv_init_obj hands it out.
struct Mlx5Cq {
  ibv_cq* cq = nullptr;
  mlx5dv_cq dv{};
  // The CQE at free-running index i (the last 64 bytes of its slot), or
  // nullptr while hardware (the engine) still owns it (cq.c get_sw_cqe).
  mlx5_cqe64* sw_cqe(uint32_t i) const {
    auto* e = reinterpret_cast<mlx5_cqe64*>(static_cast<uint8_t*>(dv.buf) + size_t(i & (dv.cqe_cnt - 1)) * dv.cqe_size +
                                            dv.cqe_size - 64);
    const uint8_t op_own = __atomic_load_n(&e->op_own, __ATOMIC_ACQUIRE);
    if ((op_own >> 4) == MLX5_CQE_INVALID || bool(op_own & MLX5_CQE_OWNER_MASK) != bool(i & dv.cqe_cnt))
      return nullptr;
    return e;
  }
  mlx5_cqe64* wait_cqe(uint32_t i) const {
    for (int spin = 0; spin < 5000; ++spin) {
      if (mlx5_cqe64* e = sw_cqe(i)) return e;
      usleep(1000);
    }
    return nullptr;
  }
  // UCX's uct_ib_mlx5dv_arm_cq: the command in the doorbell record, then to the UAR.
  void arm_by_hand(uint32_t ci) const {
    const uint32_t cmd = ci & 0xffffff;  // sn 0, MLX5_CQ_DB_REQ_NOT
    dv.dbrec[kCqArmDb] = htobe32(cmd);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    const uint64_t db = htobe64(uint64_t(cmd) << 32 | dv.cqn);
    __atomic_store_n(reinterpret_cast<uint64_t*>(static_cast<uint8_t*>(dv.cq_uar) + MLX5_CQ_DOORBELL), db,
                     __ATOMIC_RELEASE);
  }
};

// An mlx5-format send queue written as UCX's rc_mlx5 writes it
// (ib_mlx5.inl uct_ib_mlx5_post_send): the WQE in place at the producer
// index, a store fence, the index in doorbell record word 1, then 8 bytes
// to the BlueFlame register, whose halves alternate.
struct Mlx5Sq {
  mlx5dv_qp dv{};
  uint32_t qpn = 0;
  uint16_t pi = 0;  // basic blocks posted (free-running, 16 bits)
  uint32_t bf_half = 0;
  // mlx5dv_init_obj on qp: its queues handed over.
  int take(ibv_qp* qp) {
    qpn = qp->qp_num;
    mlx5dv_obj obj{};
    obj.qp.in = qp;
    obj.qp.out = &dv;
    return mlx5dv_init_obj(&obj, MLX5DV_OBJ_QP);
  }
  // The basic block at free-running index i.
  uint8_t* bb(uint32_t i) const {
    return static_cast<uint8_t*>(dv.sq.buf) + size_t(i & (dv.sq.wqe_cnt - 1)) * MLX5_SEND_WQE_BB;
  }
  // Writes `bytes` of WQE (its segments after the control one, in 16-byte
  // units) at the producer index, wrapping at the queue's end as a WQE
  // does, and rings the doorbell. Returns the WQE's index.
  uint16_t post(uint8_t opcode, uint8_t fm_ce_se, const void* segs, uint32_t seg_bytes, uint32_t imm = 0) {
    const uint32_t ds = 1 + (seg_bytes + 15) / 16;
    uint8_t wqe[4 * MLX5_SEND_WQE_BB] = {};
    mlx5dv_set_ctrl_seg(reinterpret_cast<mlx5_wqe_ctrl_seg*>(wqe), pi, opcode, 0, qpn, fm_ce_se, uint8_t(ds), 0, imm);
    if (seg_bytes) std::memcpy(wqe + 16, segs, seg_bytes);
    const uint32_t nbb = (ds * 16 + MLX5_SEND_WQE_BB - 1) / MLX5_SEND_WQE_BB;
    for (uint32_t i = 0; i < nbb; ++i) std::memcpy(bb(pi + i), wqe + i * MLX5_SEND_WQE_BB, MLX5_SEND_WQE_BB);
    const uint16_t index = pi;
    pi = uint16_t(pi + nbb);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    dv.dbrec[MLX5_SND_DBR] = htobe32(pi);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    uint64_t first8;
    std::memcpy(&first8, wqe, 8);
    __atomic_store_n(reinterpret_cast<uint64_t*>(static_cast<uint8_t*>(dv.bf.reg) + bf_half), first8,
                     __ATOMIC_RELEASE);
    bf_half ^= 0x100;
    return index;
  }
};

class Mlx5Mode : public VerbsTest {
 protected:
  // A CQ made by mlx5dv_create_cq with CQEs of cqe_size bytes, in mlx5's
  // format (mlx5dv_init_obj); m->cq null if either failed.
  void formatted_cq(int cqe, uint32_t cqe_size, Mlx5Cq* m) {
    mlx5dv_cq_init_attr cq_dv{};
    cq_dv.comp_mask = MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE;
    cq_dv.cqe_size = cqe_size;
    ibv_cq_init_attr_ex attr{};
    attr.cqe = cqe;
    attr.wc_flags = IBV_WC_STANDARD_FLAGS;
    ibv_cq_ex* cqx = mlx5dv_create_cq(ctx_, &attr, &cq_dv);
    m->cq = nullptr;
    if (!cqx) return;
    defer([cqx] { ibv_destroy_cq(ibv_cq_ex_to_cq(cqx)); });
    mlx5dv_obj obj{};
    obj.cq.in = ibv_cq_ex_to_cq(cqx);
    obj.cq.out = &m->dv;
    if (mlx5dv_init_obj(&obj, MLX5DV_OBJ_CQ) == 0) m->cq = ibv_cq_ex_to_cq(cqx);
  }
  // A basic SRQ of pd_ with one SGE a WQE, destroyed at the end.
  ibv_srq* basic_srq(uint32_t max_wr) {
    ibv_srq_init_attr attr{};
    attr.attr.max_wr = max_wr;
    attr.attr.max_sge = 1;
    ibv_srq* srq = ibv_create_srq(pd_, &attr);
    if (srq) defer([srq] { ibv_destroy_srq(srq); });
    return srq;
  }
  ibv_cq_ex* dv_cq(mlx5dv_cq_init_attr* dv, uint64_t wc_flags = IBV_WC_STANDARD_FLAGS) {
    ibv_cq_init_attr_ex attr{};
    attr.cqe = 64;
    attr.wc_flags = wc_flags;
    ibv_cq_ex* cq = mlx5dv_create_cq(ctx_, &attr, dv);
    if (cq) defer([cq] { ibv_destroy_cq(ibv_cq_ex_to_cq(cq)); });
    return cq;
  }
  // An extended CQ and an RC QP on it made with mlx5 send operations `ops`.
  ibv_qp* dv_ops_qp(uint64_t ops, ibv_cq_ex** cq_out) {
    ibv_cq_init_attr_ex cq_attr{};
    cq_attr.cqe = 32;
    cq_attr.wc_flags = IBV_WC_STANDARD_FLAGS;
    ibv_cq_ex* cq = make_cq_ex(&cq_attr);
    *cq_out = cq;
    if (!cq) return nullptr;
    mlx5dv_qp_init_attr dv{};
    dv.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS;
    dv.send_ops_flags = ops;
    ibv_qp_init_attr_ex attr = qp_ex_attr(IBV_QPT_RC, ibv_cq_ex_to_cq(cq), IBV_QP_EX_WITH_SEND, {});
    ibv_qp* qp = mlx5dv_create_qp(ctx_, &attr, &dv);
    if (qp) defer([qp] { ibv_destroy_qp(qp); });
    return qp;
  }
  // Two RC QPs made by mlx5dv_create_qp on `cq` (dv may be null), connected
  // to each other; false if either was not made.
  bool dv_pair(ibv_cq* cq, mlx5dv_qp_init_attr* dv, ibv_qp** a, ibv_qp** b) {
    *a = dv_qp(cq, dv);
    *b = dv_qp(cq, dv);
    if (!*a || !*b) return false;
    connect_qp(*a, (*b)->qp_num);
    connect_qp(*b, (*a)->qp_num);
    return true;
  }
  ibv_qp* dv_qp(ibv_cq* cq, mlx5dv_qp_init_attr* dv, ibv_qp_type type = IBV_QPT_RC) {
    ibv_qp_init_attr_ex attr = qp_ex_attr(type, cq, 0, {});
    attr.comp_mask = IBV_QP_INIT_ATTR_PD;
    ibv_qp* qp = mlx5dv_create_qp(ctx_, &attr, dv);
    if (qp) defer([qp] { ibv_destroy_qp(qp); });
    return qp;
  }
};

}  // namespace vt
