// mlx5-format receive queues (mlx5 mode): after mlx5dv_init_obj on a QP that
// has no SRQ the program writes mlx5 receive WQEs (data segments, rq_stride
// bytes each) into its receive queue and counts them in the doorbell
// record's first word, as on a ConnectX (rdma-core providers/mlx5/qp.c
// mlx5_post_recv, UCX's uct_ud_mlx5_iface_post_recv); the engine takes them
// in order, each read once into the same receive in progress as a uroce WQE,
// and a completion carries the WQE's index. Device::qp_to_mlx5 makes the
// queue (device/mlx5_sq.cc); Device::wq_to_mlx5 a receive WQ's
// (mlx5dv_init_obj with MLX5DV_OBJ_RWQ, device/work_queue.cc), the same WQEs.
#pragma once

#include <endian.h>

#include <cstdint>
#include <cstring>

#include "device/qp.h"

namespace uroce::device {

// A receive WQE's data segment (mlx5_wqe_data_seg: byte count, lkey,
// address, big-endian), read from a private copy into *out; false for the
// one that ends the WQE early (an lkey of MLX5_INVALID_LKEY). Shared by the
// receive queues and the SRQs (device/mlx5_srq.cc).
inline bool mlx5_recv_data_seg(const uint8_t* seg, abi::Sge* out) {
  uint32_t count, lkey;
  uint64_t addr;
  std::memcpy(&count, seg, 4);
  std::memcpy(&lkey, seg + 4, 4);
  std::memcpy(&addr, seg + 8, 8);
  if (be32toh(lkey) == abi::kMlx5InvalidLkey) return false;
  *out = abi::Sge{be64toh(addr), be32toh(count), be32toh(lkey)};
  return true;
}

// Receive WQEs the program posted that the engine has not taken (the
// doorbell record's count less Qp::rq_head, 16 bits).
uint32_t mlx5_rq_waiting(const Qp& qp);

// Reads the WQE at rq_head into r (r.wr_id: its 16-bit index): its data
// segments up to the first with kMlx5InvalidLkey or the stride's end (a
// stride holds the QP's max_recv_sge, as mlx5's rq.max_gs, and no more).
void mlx5_take_rq_wqe(Qp& qp, RecvInProgress& r);
// The same for the WQE at `index` of any such queue (a QP's, a WQ's: cnt
// WQEs of `stride` bytes at `wqes`).
void mlx5_take_recv_wqe(const uint8_t* wqes, uint32_t cnt, uint32_t stride, uint32_t index, RecvInProgress& r);

// The wr_id the completion of the WQE at `index` carries: its index.
inline uint64_t mlx5_rq_wqe_id(uint32_t index) { return index & 0xffff; }

}  // namespace uroce::device
