// The direct-verbs side of a QP in the drop-in libmlx5 (library.cc makes
// it, mkey.cc's memory-registration builders use it).
#pragma once

#include <infiniband/mlx5dv.h>

#include <cstddef>
#include <cstdint>

namespace uroce::provider::mlx5 {

// A memory registration being built (mlx5dv_wr_mkey_configure and its
// setters, qp.c's cur_mkey and num_mkey_setters): the WQE is the batch's
// current one until its setters are all called.
struct UmrBuild {
  mlx5dv_mkey* mkey = nullptr;  // null: none being built
  uint32_t setters_left = 0;
  bool access_set = false;
  bool layout_set = false;
};

// mlx5's mlx5_qp.dv_qp: the mlx5dv_qp_ex a program gets from
// mlx5dv_qp_ex_from_ibv_qp_ex, with the function pointers of the mlx5 send
// operations the QP was created with and null for the others
// (providers/mlx5/qp.c mlx5_qp_fill_wr_pfns). Kept in UQp::vendor.
struct DvQp {
  mlx5dv_qp_ex dv{};  // first: the program's pointer is this struct's
  ibv_qp_ex* qpx = nullptr;
  // After mlx5dv_init_obj: the QP's queues in mlx5's formats
  // (abi::kMlx5Qp*Offset; the receive queue unless the QP has an SRQ).
  uint8_t* sq_map = nullptr;
  size_t sq_map_size = 0;
  uint32_t sq_wqe_cnt = 0;
  uint32_t rq_wqe_cnt = 0;
  uint32_t rq_stride = 0;
  uint64_t rq_offset = 0;
  UmrBuild umr;
};

inline DvQp* dv_of(mlx5dv_qp_ex* mqp) { return reinterpret_cast<DvQp*>(mqp); }

// rdma-core providers/mlx5/mlx5.c is_mlx5_dev: a context of a device this
// library drives (library.cc).
bool is_mlx5_context(const ibv_context* c);

// The QP's DvQp, made on first use; nullptr without memory.
DvQp* attach_dv_qp(ibv_qp_ex* qpx);

// The memory-registration builders (mkey.cc) on a QP made with
// MLX5DV_QP_EX_WITH_MR_LIST, _MR_INTERLEAVED or _MKEY_CONFIGURE.
void set_mkey_ops(DvQp* d, uint64_t dv_ops);

// The send-queue slots a QP made with those operations has at least, so
// that a registration's layout fits its WQE (mlx5 sizes such a QP's WQEs
// for a UMR likewise: verbs.c _sq_overhead).
constexpr uint32_t kUmrMinSendSge = 8;

}  // namespace uroce::provider::mlx5
