// mlx5-format receive queues: see mlx5_rq.h.
#include "device/mlx5_rq.h"

#include <endian.h>

#include <algorithm>
#include <cstring>

#include "device/device.h"

namespace uroce::device {

namespace {
constexpr uint32_t kSeg = 16;  // mlx5_wqe_data_seg
}  // namespace

uint32_t mlx5_rq_waiting(const Qp& qp) {
  return (be32toh(qp.mlx5->dbrec[0].load(std::memory_order_acquire)) - qp.rq_head) & 0xffff;
}

void mlx5_take_recv_wqe(const uint8_t* wqes, uint32_t cnt, uint32_t stride, uint32_t index, RecvInProgress& r) {
  // A private copy of the WQE: the program may be rewriting it.
  uint8_t wqe[kSeg * kMaxSge];
  const uint32_t bytes = std::min<uint32_t>(stride, sizeof(wqe));
  std::memcpy(wqe, wqes + size_t(index & (cnt - 1)) * stride, bytes);
  r.wr_id = mlx5_rq_wqe_id(index);
  r.num_sge = 0;
  for (uint32_t at = 0; at + kSeg <= bytes && mlx5_recv_data_seg(wqe + at, &r.sge[r.num_sge]); at += kSeg)
    ++r.num_sge;
}

void mlx5_take_rq_wqe(Qp& qp, RecvInProgress& r) {
  const Qp::Mlx5Queues& m = *qp.mlx5;
  mlx5_take_recv_wqe(m.rq_wqes, m.rq_cnt, m.rq_stride, qp.rq_head, r);
}

}  // namespace uroce::device
