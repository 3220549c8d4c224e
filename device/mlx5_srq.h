// mlx5-format SRQs (mlx5 mode): after mlx5dv_init_obj on a basic SRQ the
// program fills mlx5 receive WQEs and links them itself, as on a ConnectX
// (rdma-core providers/mlx5/srq.c, UCX's rc_mlx5 and dc_mlx5); the engine
// takes them in the order of their links, each read once into the same
// receive in progress as a uroce WQE, and a completion carries the WQE's
// index. Device::srq_to_mlx5 makes the list.
#pragma once

#include <cstdint>

#include "device/qp.h"

namespace uroce::device {

class Device;

// WQEs the program posted that the engine has not taken (the doorbell
// record's count less Srq::head, 16 bits).
uint32_t mlx5_srq_waiting(const Srq& s);

// Takes the next WQE of the list into r (r.wr_id: its index) and counts it
// taken. The completion status it will end with: IBV_WC_SUCCESS, or
// IBV_WC_LOC_LEN_ERR for more data segments than the SRQ's max_sge.
uint32_t mlx5_take_srq_wqe(Device& dev, Srq& s, RecvInProgress& r);

}  // namespace uroce::device
