// Work-request helpers shared by the requester and completer: the engine's
// validated copy of an SQ slot and the verbs-opcode table per QP type.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

#include "device/qp.h"
#include "net/opcode.h"

namespace uroce::device {

// Which ibv_wr_opcode each transport accepts (IBA 9.4 / 10.7.2.x).
constexpr uint32_t wr_bit(ibv_wr_opcode op) { return 1u << op; }
// Memory-window operations the device performs itself, on RC, UC and XRC
// send queues (mlx5; rxe: RC and UC).
constexpr uint32_t kLocalWrOps = wr_bit(IBV_WR_BIND_MW) | wr_bit(IBV_WR_LOCAL_INV);
constexpr uint32_t kRcWrOps = wr_bit(IBV_WR_SEND) | wr_bit(IBV_WR_SEND_WITH_IMM) |
                              wr_bit(IBV_WR_RDMA_WRITE) | wr_bit(IBV_WR_RDMA_WRITE_WITH_IMM) |
                              wr_bit(IBV_WR_RDMA_READ) | wr_bit(IBV_WR_ATOMIC_CMP_AND_SWP) |
                              wr_bit(IBV_WR_ATOMIC_FETCH_AND_ADD) | wr_bit(IBV_WR_SEND_WITH_INV) |
                              wr_bit(IBV_WR_ATOMIC_WRITE) | kLocalWrOps;
constexpr uint32_t kUcWrOps = wr_bit(IBV_WR_SEND) | wr_bit(IBV_WR_SEND_WITH_IMM) |
                              wr_bit(IBV_WR_RDMA_WRITE) | wr_bit(IBV_WR_RDMA_WRITE_WITH_IMM) |
                              wr_bit(IBV_WR_SEND_WITH_INV) | kLocalWrOps;
constexpr uint32_t kUdWrOps = wr_bit(IBV_WR_SEND) | wr_bit(IBV_WR_SEND_WITH_IMM);
// A raw packet QP sends frames: SEND only (mlx5 adds TSO, not offered here).
constexpr uint32_t kRawWrOps = wr_bit(IBV_WR_SEND);

inline uint32_t allowed_wr_ops(ibv_qp_type t) {
  switch (t) {
    case IBV_QPT_RC:
    case IBV_QPT_XRC_SEND: return kRcWrOps;
    case IBV_QPT_UC: return kUcWrOps;
    case IBV_QPT_UD: return kUdWrOps;
    case IBV_QPT_RAW_PACKET: return kRawWrOps;
    default: return 0;  // XRC_RECV has no send queue
  }
}

// The requests that hold a responder resource and are completed by their
// own response (IBA C9-149): ATOMIC WRITE among them, as in rxe (its
// requester counts it against max_rd_atomic, its responder keeps a resource
// to answer a duplicate without executing it again).
inline bool is_rd_atomic(uint32_t op) {
  return op == IBV_WR_RDMA_READ || op == IBV_WR_ATOMIC_CMP_AND_SWP ||
         op == IBV_WR_ATOMIC_FETCH_AND_ADD || op == IBV_WR_ATOMIC_WRITE;
}

inline bool is_local_op(uint32_t op) { return op < 32 && (kLocalWrOps & (1u << op)); }

inline ibv_wc_opcode wc_opcode_for(uint32_t op) {
  switch (op) {
    case IBV_WR_BIND_MW: return IBV_WC_BIND_MW;
    case IBV_WR_LOCAL_INV: return IBV_WC_LOCAL_INV;
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM: return IBV_WC_RDMA_WRITE;
    case IBV_WR_RDMA_READ: return IBV_WC_RDMA_READ;
    case IBV_WR_ATOMIC_CMP_AND_SWP: return IBV_WC_COMP_SWAP;
    case IBV_WR_ATOMIC_FETCH_AND_ADD: return IBV_WC_FETCH_ADD;
    case IBV_WR_ATOMIC_WRITE: return IBV_WC_ATOMIC_WRITE;
    default: return IBV_WC_SEND;
  }
}

inline abi::SendWqe& wqe_at(Qp& qp, uint32_t index) {
  return *reinterpret_cast<abi::SendWqe*>(qp.sq_copy.data() + size_t(index & qp.sq_mask) * qp.sq.stride);
}
inline abi::Sge* wqe_sges(Qp& qp, uint32_t index) {
  return reinterpret_cast<abi::Sge*>(&wqe_at(qp, index) + 1);
}
inline uint8_t* wqe_inline(Qp& qp, uint32_t index) {
  return reinterpret_cast<uint8_t*>(&wqe_at(qp, index) + 1);
}
inline SendWqeState& wqe_state(Qp& qp, uint32_t index) { return qp.sq_state[index & qp.sq_mask]; }

// Moves data between a packet buffer and a WQE's local SGEs (addresses
// already translated to the owner's, lkeys as posted: they name the MR whose
// shared pages, if any, hold the bytes), starting offset bytes into the message.
bool gather_sges(const Device& dev, const Owner& owner, const abi::Sge* sge, uint32_t num_sge,
                 uint64_t offset, uint8_t* dst, uint32_t len);
bool scatter_sges(const Device& dev, const Owner& owner, const abi::Sge* sge, uint32_t num_sge,
                  uint64_t offset, const uint8_t* src, uint32_t len);

// Completes the SQ head WQE (and publishes the freed slot).
void complete_send_head(Device& dev, Qp& qp, uint32_t status);

}  // namespace uroce::device
