// mlx5-format CQs: mlx5dv_init_obj on a CQ of an mlx5-mode device asks the
// engine for the CQ's ring in mlx5's format (abi::kMlx5Cq*Offset; the engine
// writes uroce/mlx5_cqe.h's CQEs with owner bits, device/cq.cc), hands out
// its buffer, doorbell record and UAR as mlx5dv_cq, and from then on reads
// and arms it for the verbs as libmlx5 does (providers/mlx5/cq.c: the owner
// bit and opcode of the CQE at the consumer index, the consumer index in
// doorbell record word 0, arm commands in word 1 and the UAR's CQ doorbell).
// A program may read the ring by hand instead, as on a ConnectX.
#include "verbs_provider/mlx5/cq.h"

#include <endian.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>

#include "uroce/abi.h"
#include "uroce/mlx5_cqe.h"
#include "verbs_provider/provider.h"

namespace uroce::provider::mlx5 {
namespace {

namespace m5 = uroce::mlx5;

// The libmlx5 side of a CQ, kept in UCq::vendor.
struct DvCq {
  uint32_t cqe_size = 0;  // mlx5dv_create_cq's; 0: MLX5_CQE_SIZE's or 64 at init_obj
  bool formatted = false;
  uint8_t* cqes = nullptr;
  uint32_t cqe_cnt = 0;
  std::atomic<uint32_t>* dbrec = nullptr;
  uint8_t* uar = nullptr;
  uint32_t cqn = 0;
  uint32_t ci = 0;  // the consumer index (free-running)
};

void free_dv_cq(void* p) { delete static_cast<DvCq*>(p); }

DvCq* attach_dv_cq(UCq* cq) {
  if (void* v = cq->vendor.load(std::memory_order_acquire)) return static_cast<DvCq*>(v);
  auto* d = new (std::nothrow) DvCq;
  if (!d) return nullptr;
  cq->vendor_free = free_dv_cq;
  void* expected = nullptr;
  if (!cq->vendor.compare_exchange_strong(expected, d, std::memory_order_acq_rel)) {
    delete d;
    return static_cast<DvCq*>(expected);
  }
  return d;
}

DvCq* dv_of(UCq* cq) { return static_cast<DvCq*>(cq->vendor.load(std::memory_order_relaxed)); }

uint64_t clock_ns(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000u + uint64_t(ts.tv_nsec);
}

// The CQE at the consumer index if software owns it (cq.c get_sw_cqe).
const uint8_t* sw_cqe(const DvCq* d) {
  const uint8_t* e = d->cqes + size_t(d->ci & (d->cqe_cnt - 1)) * d->cqe_size + d->cqe_size - 64;
  const uint8_t op_own = std::atomic_ref<const uint8_t>(e[63]).load(std::memory_order_acquire);
  if ((op_own >> 4) == m5::kCqeInvalid || bool(op_own & 1) != m5::owner_for_index(d->ci, d->cqe_cnt))
    return nullptr;
  return e;
}

// UCq::vendor_take: the next CQE as uroce's completion entry.
int take(UCq* cq, abi::Cqe* out) {
  DvCq* d = dv_of(cq);
  const uint8_t* e = sw_cqe(d);
  if (!e) return ENOENT;
  m5::Cqe64 q;
  std::memcpy(&q, e, sizeof(q));
  m5::Completion c;
  if (!m5::decode_cqe(q, &c)) return ENOENT;  // a CQE no completion has: the ring stops here
  ++d->ci;
  *out = {};
  out->wr_id = c.wr_id;
  out->status = c.status;
  out->opcode = c.opcode;
  out->vendor_err = c.vendor_err;
  out->byte_len = c.byte_len;
  out->imm_data = c.imm;
  out->qp_num = c.qp_num;
  out->src_qp = c.src_qp;
  out->wc_flags = c.wc_flags;
  out->pkey_index = c.pkey_index;
  out->slid = c.slid;
  out->sl = c.sl;
  out->dlid_path_bits = c.dlid_path_bits;
  // The CQE carries the device clock; the wall clock of that moment is the
  // one now less the time since (mlx5dv_ts_to_ns does the same).
  out->timestamp_ns = c.timestamp;
  if (c.wc_flags & IBV_WC_TM_MATCH) {  // the tag where the wall clock would be (abi::Cqe)
    out->tm_priv = c.tm_priv;
    out->tm_tag = c.tm_tag;
    return 0;
  }
  const uint64_t dev_now = clock_ns(abi::kDeviceClock);
  out->wallclock_ns = clock_ns(CLOCK_REALTIME) - (dev_now > c.timestamp ? dev_now - c.timestamp : 0);
  return 0;
}

// UCq::vendor_consumed (cq.c update_cons_index).
void consumed(UCq* cq) {
  DvCq* d = dv_of(cq);
  d->dbrec[0].store(htobe32(d->ci & 0xffffff), std::memory_order_release);
  cq->ring.hdr->consumer.store(d->ci, std::memory_order_release);
}

// UCq::vendor_arm (cq.c mlx5_arm_cq): the command in doorbell record word 1,
// then with the CQ number to the UAR's CQ doorbell. The sequence number
// stays 0: the engine takes every doorbell write as a command.
int arm(UCq* cq, int solicited_only) {
  DvCq* d = dv_of(cq);
  uint32_t ci;
  {
    std::lock_guard<std::mutex> lock(cq->mu);
    ci = d->ci & 0xffffff;
  }
  const uint32_t cmd = (solicited_only ? abi::kMlx5CqArmSolicited : 0) | ci;
  d->dbrec[1].store(htobe32(cmd), std::memory_order_release);
  std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(d->uar + abi::kMlx5CqDoorbell))
      .store(htobe64(uint64_t(cmd) << 32 | d->cqn), std::memory_order_release);
  cq->ctx->ring_doorbell();  // a sleeping engine looks now, not at its next nap
  return 0;
}

uint32_t default_cqe_size() {
  const char* env = std::getenv("MLX5_CQE_SIZE");  // verbs.c get_cqe_size
  return env && std::atoi(env) == 128 ? 128 : 64;
}

}  // namespace

bool remember_cqe_size(ibv_cq_ex* cq, uint32_t cqe_size) {
  DvCq* d = attach_dv_cq(to_ucq(cq));
  if (!d) return false;
  d->cqe_size = cqe_size;
  return true;
}

int init_cq(ibv_cq* ibcq, mlx5dv_cq* out) {
  UCq* cq = to_ucq(ibcq);
  DvCq* d = attach_dv_cq(cq);
  if (!d) return ENOMEM;
  std::lock_guard<std::mutex> lock(cq->mu);
  if (!d->formatted) {
    if (!d->cqe_size) d->cqe_size = default_cqe_size();
    abi::Mlx5CqFormatRequest req{ibcq->handle, d->cqe_size, 0};
    abi::Mlx5CqFormatReply rep;
    int fd = -1;
    if (int err = cq->ctx->conn.call(abi::CtlOp::kMlx5CqFormat, &req, sizeof(req), &rep, sizeof(rep), nullptr, 0,
                                     &fd, 1))
      return err;
    void* map = map_queue(fd, rep.shm_size);
    close(fd);
    if (!map) return ENOMEM;  // the engine's ring stays as it is, unread: the CQ is lost
    unmap_queue(cq->map, cq->map_size);
    cq->map = map;
    cq->map_size = rep.shm_size;
    auto* base = static_cast<uint8_t*>(map);
    cq->ring.attach(base);
    d->cqes = base + abi::kMlx5CqCqesOffset;
    d->cqe_cnt = rep.cqe_cnt;
    d->dbrec = reinterpret_cast<std::atomic<uint32_t>*>(base + abi::kMlx5CqDbrecOffset);
    d->uar = base + abi::kMlx5CqUarOffset;
    d->cqn = rep.cqn;
    d->ci = 0;
    d->formatted = true;
    cq->vendor_consumed = consumed;
    cq->vendor_arm = arm;
    cq->vendor_take = take;  // last: pollers look at it
  }
  out->buf = d->cqes;
  out->dbrec = reinterpret_cast<__be32*>(d->dbrec);
  out->cqe_cnt = d->cqe_cnt;
  out->cqe_size = d->cqe_size;
  out->cq_uar = d->uar;
  out->cqn = d->cqn;
  out->comp_mask = 0;
  return 0;
}

void* cq_uar_slot(ibv_cq* cq) { return &dv_of(to_ucq(cq))->uar; }

}  // namespace uroce::provider::mlx5
