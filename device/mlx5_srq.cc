// mlx5-format SRQs: see mlx5_srq.h.
#include "device/mlx5_srq.h"

#include <endian.h>

#include <cstring>

#include "device/device.h"
#include "device/mlx5_rq.h"

namespace uroce::device {

namespace {

constexpr uint32_t kSeg = 16;  // a next or data segment
constexpr size_t kNextIndexAt = 2;  // mlx5_wqe_srq_next_seg.next_wqe_index

uint8_t* wqe_at(Srq::Mlx5List& m, uint32_t index, uint32_t cnt) {
  return const_cast<uint8_t*>(m.wqes) + size_t(index & (cnt - 1)) * m.stride;
}

}  // namespace

uint32_t mlx5_srq_waiting(const Srq& s) {
  return (be32toh(s.mlx5->dbrec->load(std::memory_order_acquire)) - s.head) & 0xffff;
}

uint32_t mlx5_take_srq_wqe(Device& dev, Srq& s, RecvInProgress& r) {
  Srq::Mlx5List& m = *s.mlx5;
  const uint32_t cnt = s.ring.size();
  uint32_t index = 0;
  if (m.started) {
    // The link of the WQE taken last, read now: the program relinks a list's
    // tail before it posts what the new link leads to (UCX's list topology).
    uint16_t next;
    std::memcpy(&next, wqe_at(m, m.last, cnt) + kNextIndexAt, sizeof(next));
    index = be16toh(next) & (cnt - 1);
  }
  m.started = true;
  m.last = index;
  // A private copy of the WQE: the program may be rewriting it.
  uint8_t wqe[16 + kSeg * kMaxSrqSge];
  std::memcpy(wqe, wqe_at(m, index, cnt), std::min<size_t>(m.stride, sizeof(wqe)));
  r.wr_id = index;
  r.num_sge = 0;
  uint32_t status = IBV_WC_SUCCESS;
  abi::Sge sge;
  for (uint32_t at = kSeg; at + kSeg <= m.stride && at + kSeg <= sizeof(wqe) && mlx5_recv_data_seg(wqe + at, &sge);
       at += kSeg) {
    if (r.num_sge == s.max_sge) {
      status = IBV_WC_LOC_LEN_ERR;
      break;
    }
    r.sge[r.num_sge++] = sge;
  }
  if (status != IBV_WC_SUCCESS) {
    ++dev.counters_mut().bad_wqes;
    r.num_sge = 0;
  }
  return status;
}

// ---------------------------------------------------------------- Device

int Device::srq_to_mlx5(Owner* o, uint32_t handle, abi::Mlx5SrqFormatReply* rep, int* fd) {
  Srq* s = srqs_.get(handle);
  if (!s || s->owner != o) return EINVAL;
  if (!config_.mlx5) return EOPNOTSUPP;
  if (s->type != IBV_SRQT_BASIC) return EOPNOTSUPP;
  if (s->mlx5) return EINVAL;  // the provider asks once per SRQ
  if (s->head != 0 || s->ring.hdr->producer.load(std::memory_order_acquire) != 0)
    return EBUSY;  // receives went to uroce's ring already
  const uint32_t cnt = s->ring.size();
  const uint32_t stride = s->ring.stride;  // 16 + 16 * max_sge rounded up, as mlx5's
  auto m = std::make_unique<Srq::Mlx5List>();
  if (int e = m->mem.create("uroce-mlx5-srq", abi::kMlx5SrqWqesOffset + size_t(cnt) * stride)) return e;
  m->wqes = m->mem.base() + abi::kMlx5SrqWqesOffset;
  m->stride = stride;
  m->dbrec = reinterpret_cast<const std::atomic<uint32_t>*>(m->mem.base() + abi::kMlx5SrqDbrecOffset);
  // Each WQE links to the one after it (srq.c mlx5_alloc_srq_buf).
  for (uint32_t i = 0; i < cnt; ++i) {
    const uint16_t next = htobe16(uint16_t((i + 1) & (cnt - 1)));
    std::memcpy(wqe_at(*m, i, cnt) + kNextIndexAt, &next, sizeof(next));
  }
  *fd = m->mem.release_fd();
  rep->shm_size = m->mem.size();
  rep->wqe_cnt = cnt;
  rep->stride = stride;
  s->mlx5 = std::move(m);
  s->head = 0;
  return 0;
}

}  // namespace uroce::device
