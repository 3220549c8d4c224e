// Work-request helpers shared by the requester and completer: the engine's
// validated copy of an SQ slot and the verbs-opcode table per QP type.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

#include "device/qp.h"
#include "net/opcode.h"
#include "uroce/wr_opcodes.h"

namespace uroce::device {

// The opcode table and its classes, shared with the provider.
using uroce::allowed_wr_ops;
using uroce::executable_wr_ops;
using uroce::kWrMemcpy;
using uroce::kWrNop;
using uroce::kWrUmr;
using uroce::is_local_op;
using uroce::is_rd_atomic;
using uroce::kLocalWrOps;
using uroce::wr_bit;

inline ibv_wc_opcode wc_opcode_for(uint32_t op) {
  switch (op) {
    case IBV_WR_BIND_MW: return IBV_WC_BIND_MW;
    case IBV_WR_LOCAL_INV: return IBV_WC_LOCAL_INV;
    case kWrMemcpy: return IBV_WC_DRIVER3;  // MLX5DV_WC_MEMCPY
    case kWrNop: return IBV_WC_DRIVER2;     // an mlx5 CQE's WQE opcode NOP (uroce/mlx5_cqe.h)
    case kWrUmr: return IBV_WC_DRIVER1;     // MLX5DV_WC_UMR
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
