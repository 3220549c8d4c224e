#include "net/dpdk_rx_slots.h"

#include <algorithm>
#include <cstdlib>
#include <new>
#include <vector>

// rte_pktmbuf_pool_create_extbuf is experimental in DPDK 22.11.
#define ALLOW_EXPERIMENTAL_API
#include <rte_errno.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

namespace uroce::net {

// The driver writes the frame at the mbuf's data offset from its buffer's
// start: Packet::data must sit there.
static_assert(offsetof(Packet, data) == RTE_PKTMBUF_HEADROOM, "Packet::data is not where an mbuf's data starts");

std::string DpdkRxSlots::create(const std::string& name, uint32_t n, uint32_t frame_bytes, int socket,
                                DpdkRxSlots** out) {
  *out = nullptr;
  constexpr size_t kAlign = alignof(Packet);
  const size_t need = std::max(sizeof(Packet), offsetof(Packet, data) + size_t(frame_bytes));
  const size_t slot = (need + kAlign - 1) / kAlign * kAlign;
  if (slot > UINT16_MAX) return "ring frames of " + std::to_string(frame_bytes) + " bytes are too long for an mbuf";
  const size_t bytes = (size_t(n) * slot + 4095) / 4096 * 4096;
  auto* memory = static_cast<uint8_t*>(std::aligned_alloc(4096, bytes));
  if (!memory) return "cannot allocate " + std::to_string(bytes) + " bytes of receive buffers";
  auto* slots = new DpdkRxSlots;
  slots->memory_ = memory;
  slots->slots_ = n;
  slots->low_water_ = n / 4;
  // Default-initialised: the header only; the frame bytes stay untouched
  // (and unpaged) until a frame lands there.
  for (uint32_t i = 0; i < n; ++i) {
    Packet* p = new (memory + size_t(i) * slot) Packet;
    p->loan.lender = slots;
  }
  // net_af_packet never hands a buffer to a device: no IO address.
  rte_pktmbuf_extmem ext = {memory, RTE_BAD_IOVA, size_t(n) * slot, uint16_t(slot)};
  slots->pool_ = rte_pktmbuf_pool_create_extbuf(name.c_str(), n, std::min<uint32_t>(256, n / 2), 0,
                                                uint16_t(slot), socket, &ext, 1);
  if (!slots->pool_) {
    const std::string err = "cannot create a pool of " + std::to_string(n) + " receive buffers: " +
                            rte_strerror(rte_errno);
    std::free(memory);
    delete slots;
    return err;
  }
  *out = slots;
  return "";
}

void DpdkRxSlots::release() {
  if (rte_mempool_in_use_count(pool_) != 0) {
    // The engine still holds frames in some of them: keep everything, for
    // good, where the process (and LeakSanitizer) can still see it.
    static std::vector<DpdkRxSlots*> kept;
    kept.push_back(this);
    released_ = true;
    return;
  }
  rte_mempool_free(pool_);
  std::free(memory_);
  delete this;
}

Packet* DpdkRxSlots::take(rte_mbuf* m) {
  auto* p = static_cast<Packet*>(m->buf_addr);
  if (m->pool != pool_ || m->nb_segs != 1 || rte_pktmbuf_mtod(m, uint8_t*) != p->data ||
      m->pkt_len > kFrameCapacity)
    return nullptr;
  p->loan.handle = m;
  ++lent_;
  set_received(*p, m->pkt_len);
  return p;
}

void DpdkRxSlots::give_back(Packet* p) {
  auto* m = static_cast<rte_mbuf*>(p->loan.handle);
  p->loan.handle = nullptr;
  if (released_ || !m) return;
  --lent_;
  rte_pktmbuf_free(m);
}

}  // namespace uroce::net
