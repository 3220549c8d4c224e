// mlx5-format CQs of the drop-in libmlx5 (cq.cc).
#pragma once

#include <infiniband/mlx5dv.h>

#include <cstdint>

namespace uroce::provider::mlx5 {

// The CQE size mlx5dv_create_cq chose for cq, used if mlx5dv_init_obj puts
// it in mlx5's format later; false without memory.
bool remember_cqe_size(ibv_cq_ex* cq, uint32_t cqe_size);

// mlx5dv_init_obj's CQ part: the CQ's ring in mlx5's format (the first time),
// and where its buffer, doorbell record and UAR are. 0 or an errno.
int init_cq(ibv_cq* cq, mlx5dv_cq* out);

// Where a formatted CQ keeps its UAR's address: mlx5dv_init_obj@MLX5_1.0's
// cq_uar.
void* cq_uar_slot(ibv_cq* cq);

}  // namespace uroce::provider::mlx5
