// The DMA copy engine (mlx5dv_wr_memcpy, kWrMemcpy): a send WQE that copies
// between two local regions of the QP's PD and sends nothing. mlx5 executes
// it as an MMO DMA WQE (rdma-core providers/mlx5/qp.c mlx5_wr_memcpy); its
// keys are checked as a local SGE's are, a failure completes the WQE with
// IBV_WC_LOC_PROT_ERR and the QP goes to error, as any send WQE's does.
#include <algorithm>

#include "device/device.h"
#include "device/wqe.h"

namespace uroce::device {

uint32_t Device::dma_copy(const Qp& qp, const abi::MemcpyArgs& copy) {
  // The provider refuses these at posting (mlx5: EINVAL from wr_complete);
  // a WQE written into the ring by hand still cannot make the engine copy more.
  if (copy.length == 0 || copy.length > abi::kMaxMemcpyLength) return IBV_WC_LOC_LEN_ERR;
  const Mr* src;
  const Mr* dst;
  if (check_mr(copy.src_lkey, qp.pd, copy.src_addr, copy.length, 0, &src) != MrCheck::kOk ||
      check_mr(copy.dst_lkey, qp.pd, copy.dst_addr, copy.length, IBV_ACCESS_LOCAL_WRITE, &dst) != MrCheck::kOk ||
      src->owner != qp.owner || dst->owner != qp.owner)
    return IBV_WC_LOC_PROT_ERR;
  // Both in the owner's address space, staged through the engine in chunks
  // (gather_sges and scatter_sges take shared pages directly, anything else
  // through process_vm_*).
  abi::Sge from{src->addr + (copy.src_addr - src->iova), copy.length, copy.src_lkey};
  abi::Sge to{dst->addr + (copy.dst_addr - dst->iova), copy.length, copy.dst_lkey};
  constexpr uint32_t kChunk = 64 * 1024;
  thread_local uint8_t staging[kChunk];
  for (uint32_t done = 0; done < copy.length;) {
    const uint32_t n = std::min(kChunk, copy.length - done);
    if (!gather_sges(*this, *qp.owner, &from, 1, done, staging, n) ||
        !scatter_sges(*this, *qp.owner, &to, 1, done, staging, n))
      return IBV_WC_LOC_PROT_ERR;  // a page the owner no longer maps
    done += n;
  }
  return IBV_WC_SUCCESS;
}

}  // namespace uroce::device
