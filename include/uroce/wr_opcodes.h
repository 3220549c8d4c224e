// The work-request opcodes each transport takes, and their classes: one
// table that the provider (what ibv_post_send accepts) and the engine (what
// it executes) both read, so the two cannot disagree. IBA 9.4 and 10.7.2.x;
// memory-window operations as mlx5 (RC, UC, XRC).
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

namespace uroce {

constexpr uint32_t wr_bit(ibv_wr_opcode op) { return 1u << op; }
// Memory-window operations the device performs itself, no packet.
constexpr uint32_t kLocalWrOps = wr_bit(IBV_WR_BIND_MW) | wr_bit(IBV_WR_LOCAL_INV);
constexpr uint32_t kUdWrOps = wr_bit(IBV_WR_SEND) | wr_bit(IBV_WR_SEND_WITH_IMM);
constexpr uint32_t kUcWrOps = kUdWrOps | wr_bit(IBV_WR_RDMA_WRITE) | wr_bit(IBV_WR_RDMA_WRITE_WITH_IMM) |
                              wr_bit(IBV_WR_SEND_WITH_INV) | kLocalWrOps;
constexpr uint32_t kRcWrOps = kUcWrOps | wr_bit(IBV_WR_RDMA_READ) | wr_bit(IBV_WR_ATOMIC_CMP_AND_SWP) |
                              wr_bit(IBV_WR_ATOMIC_FETCH_AND_ADD) | wr_bit(IBV_WR_ATOMIC_WRITE);
// A raw packet QP sends whole frames: SEND only (mlx5's TSO is not offered).
constexpr uint32_t kRawWrOps = wr_bit(IBV_WR_SEND);

// The opcodes a QP of type t executes (an XRC target has no send queue).
constexpr uint32_t allowed_wr_ops(ibv_qp_type t) {
  switch (t) {
    case IBV_QPT_RC:
    case IBV_QPT_XRC_SEND: return kRcWrOps;
    case IBV_QPT_UC: return kUcWrOps;
    case IBV_QPT_UD: return kUdWrOps;
    case IBV_QPT_RAW_PACKET: return kRawWrOps;
    default: return 0;
  }
}

// The requests that hold a responder resource and are completed by their
// own response (IBA C9-149): ATOMIC WRITE among them, as in rxe (its
// requester counts it against max_rd_atomic, its responder keeps a resource
// to answer a duplicate without executing it again). None carries inline data.
constexpr bool is_rd_atomic(uint32_t op) {
  return op == IBV_WR_RDMA_READ || op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD ||
         op == IBV_WR_ATOMIC_WRITE;
}

// mlx5dv_wr_memcpy: a copy between two local regions by the device's DMA
// engine (mlx5's MMO DMA WQE), no packet. Not an ibv_wr_opcode, so never
// accepted from ibv_post_send or ibv_wr_*: only the drop-in libmlx5 posts
// it, on an RC QP made with MLX5DV_QP_EX_WITH_MEMCPY (rdma-core
// providers/mlx5/qp.c mlx5_wr_memcpy; DCIs too, once DC exists).
constexpr uint32_t kWrMemcpy = 16;
static_assert(kWrMemcpy > IBV_WR_ATOMIC_WRITE && kWrMemcpy < 32);

// An mlx5 NOP WQE (MLX5_OPCODE_NOP) in an mlx5-format send queue (device/
// mlx5_sq.cc): nothing to do, a completion in order if signalled (UCX's
// flush posts one). Never posted through the verbs.
constexpr uint32_t kWrNop = 17;
static_assert(kWrNop > kWrMemcpy && kWrNop < 32);

// A memory registration (mlx5dv_wr_mr_list, mlx5dv_wr_mr_interleaved,
// mlx5dv_wr_mkey_configure: mlx5's UMR WQE) on an RC QP made with those
// send operations: it gives a free indirect mkey its layout and rights
// (SendWqe::umr, the layout in the SGE area: abi_rings.h), no packet.
// Only the drop-in libmlx5 posts it.
constexpr uint32_t kWrUmr = 18;
static_assert(kWrUmr > kWrNop && kWrUmr < 32);

// A tag-list operation (an mlx5 TAG_MATCHING WQE, SendWqe::tag_op, an
// append's buffer in the SGE area) on the tag-matching SRQ of the RC QP it
// is posted to: its command QP (UCX's rc_mlx5 with hardware tag matching),
// no packet. Only read from an mlx5-format send queue (device/mlx5_sq.cc).
constexpr uint32_t kWrTagOp = 19;
static_assert(kWrTagOp > kWrUmr && kWrTagOp < 32);

// What the engine executes on a QP of type t: the posted opcodes and the
// device's own (kWrMemcpy, kWrNop, kWrUmr, kWrTagOp).
constexpr uint32_t executable_wr_ops(ibv_qp_type t) {
  return allowed_wr_ops(t) | (t == IBV_QPT_RC ? 1u << kWrMemcpy | 1u << kWrUmr | 1u << kWrTagOp : 0) |
         (t == IBV_QPT_RC || t == IBV_QPT_UC ? 1u << kWrNop : 0);
}

constexpr bool is_local_op(uint32_t op) {
  return op < 32 && ((kLocalWrOps | 1u << kWrMemcpy | 1u << kWrNop | 1u << kWrUmr | 1u << kWrTagOp) & (1u << op));
}

static_assert((kUdWrOps & ~kUcWrOps) == 0 && (kUcWrOps & ~kRcWrOps) == 0, "each transport's set grows");
static_assert(is_rd_atomic(IBV_WR_ATOMIC_WRITE) && !is_rd_atomic(IBV_WR_RDMA_WRITE));

}  // namespace uroce
