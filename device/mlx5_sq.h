// mlx5-format send queues (mlx5 mode): after mlx5dv_init_obj on an RC or UC
// QP the program writes mlx5 send WQEs into a queue of 64-byte basic blocks
// and says how far in the doorbell record, as on a ConnectX (rdma-core
// providers/mlx5/qp.c, UCX's uct_ib_mlx5_post_send); the requester takes
// them from there instead of uroce's ring, each read once into the engine's
// send sequence as the work request it describes, so the rest of the
// transport is the same. Device::qp_to_mlx5 makes the queue.
#pragma once

#include <cstdint>

#include "device/qp.h"

namespace uroce::device {

// The end of what the program posted: the doorbell record's producer index
// (16 bits). False if it says more basic blocks wait than the queue holds.
bool mlx5_sq_posted(const Qp& qp, uint32_t* end);

// Reads the WQE at the next basic block into w (its SGEs or inline bytes
// into the `body` bytes after it; what does not fit is left out and
// counted in num_sge / inline_len, which the caller's checks refuse), and
// moves past its basic blocks, never past `end`. w.wr_id is the WQE's index
// (its control segment's), which its completion carries as wqe_counter.
// False if the WQE says nothing a work request can (uroce/mlx5_wqe.h) or
// runs past `end`: it completes with IBV_WC_LOC_QP_OP_ERR.
bool mlx5_take_wqe(Qp& qp, uint32_t end, abi::SendWqe& w, uint32_t body);

}  // namespace uroce::device
