// DpdkPort datapath: RX bursts in Packet buffers (received in place on
// net_af_packet, copied elsewhere), buffered TX
// (frames copied into mbufs, or lent to them on net_af_packet).
// Engine thread only; no exceptions, no allocation once the PacketPool is
// warm, every dropped frame counted.
#include "net/dpdk_port.h"
#include "net/dpdk_rx_slots.h"

#include <algorithm>
#include <cstring>

#ifdef UROCE_HAVE_DPDK
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#endif

namespace uroce::net {

#ifdef UROCE_HAVE_DPDK

namespace {

// Copies a (possibly chained) mbuf's frame into p.
void copy_from_mbuf(const rte_mbuf* m, Packet* p) {
  uint32_t off = 0;
  for (const rte_mbuf* seg = m; seg; seg = seg->next) {
    std::memcpy(p->data + off, rte_pktmbuf_mtod(seg, const uint8_t*), seg->data_len);
    off += seg->data_len;
  }
  set_received(*p, off);
}

// A VLAN tag the kernel took off (TP_STATUS_VLAN_VALID) reaches us as mbuf
// metadata where the port strips tags (net_af_packet with receive slots:
// the driver's rte_vlan_insert wants a direct mbuf, and theirs are not).
// Put it back where the engine looks for it. False if the frame has no room.
bool restore_vlan_tag(const rte_mbuf* m, Packet* p) {
  return !(m->ol_flags & RTE_MBUF_F_RX_VLAN_STRIPPED) || insert_vlan_tag(*p, m->vlan_tci);
}

}  // namespace

size_t DpdkPort::rx_burst(Packet** out, size_t max, PacketPool& pool) {
  if (!pool_) return 0;
  rte_mbuf* mbufs[kBurst];
  const uint16_t n = rte_eth_rx_burst(port_id_, 0, mbufs, uint16_t(std::min(max, kBurst)));
  // Lend the driver's buffers while it has plenty left; copy otherwise.
  const bool in_place = n && rx_slots_ && !rx_slots_->running_low();
  size_t got = 0;
  for (uint16_t i = 0; i < n; ++i) {
    rte_mbuf* m = mbufs[i];
    Packet* p = in_place ? rx_slots_->take(m) : nullptr;
    const bool lent = p != nullptr;
    if (!lent) {
      if (m->pkt_len > kFrameCapacity) {
        ++counters_.rx_oversize;
      } else if (!(p = pool.get())) [[unlikely]] {
        ++counters_.rx_no_buffer;
      } else {
        copy_from_mbuf(m, p);
      }
    }
    const bool whole = p && restore_vlan_tag(m, p);
    if (!lent) rte_pktmbuf_free(m);  // a lent one goes back with p
    if (!p) continue;
    if (!whole) [[unlikely]] {
      ++counters_.rx_oversize;
      pool.put(p);
      continue;
    }
    counters_.rx_bytes += p->len;
    counters_.rx_in_place += lent;
    out[got++] = p;
  }
  counters_.rx_frames += got;
  return got;
}

void DpdkPort::tx(const Packet* p) {
  if (!pool_) {
    ++counters_.tx_port_closed;
    return;
  }
  if (p->len > mbuf_data_room_) {
    ++counters_.tx_oversize;
    return;
  }
  if (tx_count_ == kTxQueue && flush() == 0) [[unlikely]] {
    ++counters_.tx_ring_full;
    return;
  }
  rte_mbuf* m = rte_pktmbuf_alloc(pool_);
  if (!m) {
    // The pool may be held by the driver's TX ring: push what we have and
    // try once more before dropping.
    flush();
    m = rte_pktmbuf_alloc(pool_);
    if (!m) {
      ++counters_.tx_no_mbuf;
      return;
    }
  }
  std::memcpy(rte_pktmbuf_mtod(m, uint8_t*), p->data, p->len);
  m->data_len = uint16_t(p->len);
  m->pkt_len = p->len;
  tx_len_[tx_count_] = p->len;
  tx_buf_[tx_count_++] = m;
  if (tx_count_ >= kBurst) flush();
}

// A frame lent to an mbuf: the mbuf's shared info for the external buffer
// (its reference count and the callback that ends the loan), and where the
// Packet goes back.
struct DpdkPort::TxLoan {
  rte_mbuf_ext_shared_info shinfo;
  DpdkPort* port;
  Packet* packet;
  PacketPool* pool;
  TxLoan* next_free;
};

// rte_pktmbuf_free's callback when the driver is done with the mbuf.
void DpdkPort::return_loan(void*, void* opaque) {
  TxLoan* loan = static_cast<TxLoan*>(opaque);
  loan->pool->put(loan->packet);
  loan->packet = nullptr;
  loan->next_free = loan->port->free_loans_;
  loan->port->free_loans_ = loan;
}

void DpdkPort::set_up_loans(bool lend) {
  lend_tx_ = lend;
  free_loans_ = nullptr;
  if (!lend) return;
  if (!loans_) loans_.reset(new TxLoan[kTxQueue]);
  for (size_t i = 0; i < kTxQueue; ++i) {
    TxLoan& l = loans_[i];
    l = {};
    l.shinfo.free_cb = return_loan;
    l.shinfo.fcb_opaque = &l;
    l.port = this;
    l.next_free = free_loans_;
    free_loans_ = &l;
  }
}

DpdkPort::DpdkPort() = default;
DpdkPort::~DpdkPort() { close(); }

void DpdkPort::send(Packet* p, PacketPool& pool) {
  TxLoan* loan = free_loans_;
  if (!lend_tx_ || !loan || !pool_ || p->len > mbuf_data_room_ || tx_count_ == kTxQueue) {
    tx(p);
    pool.put(p);
    return;
  }
  rte_mbuf* m = rte_pktmbuf_alloc(pool_);
  if (!m) [[unlikely]] {
    tx(p);  // pushes what is queued, tries again, counts the drop
    pool.put(p);
    return;
  }
  free_loans_ = loan->next_free;
  loan->packet = p;
  loan->pool = &pool;
  rte_mbuf_ext_refcnt_set(&loan->shinfo, 1);
  rte_pktmbuf_attach_extbuf(m, p->data, 0, uint16_t(sizeof(p->data)), &loan->shinfo);
  m->data_len = uint16_t(p->len);
  m->pkt_len = p->len;
  tx_len_[tx_count_] = p->len;
  tx_buf_[tx_count_++] = m;
  if (tx_count_ >= kBurst) flush();
}

size_t DpdkPort::flush() {
  if (!tx_count_) return 0;
  size_t sent = 0;
  // A few tries while the ring takes something; what it refuses waits.
  for (unsigned attempt = 0; attempt < 4 && sent < tx_count_; ++attempt) {
    const uint16_t n = rte_eth_tx_burst(port_id_, 0, tx_buf_ + sent,
                                        uint16_t(std::min<size_t>(tx_count_ - sent, UINT16_MAX)));
    if (n == 0) break;
    sent += n;
  }
  // Sent mbufs belong to the driver now (af_packet frees them at once): the
  // byte count comes from tx_len_.
  for (size_t i = 0; i < sent; ++i) counters_.tx_bytes += tx_len_[i];
  counters_.tx_frames += sent;
  if (sent && sent < tx_count_) {
    std::memmove(tx_buf_, tx_buf_ + sent, (tx_count_ - sent) * sizeof(tx_buf_[0]));
    std::memmove(tx_len_, tx_len_ + sent, (tx_count_ - sent) * sizeof(tx_len_[0]));
  }
  tx_count_ -= sent;
  return sent;
}

#else  // !UROCE_HAVE_DPDK: open() always fails, so nothing flows.

struct DpdkPort::TxLoan {};
DpdkPort::DpdkPort() = default;
DpdkPort::~DpdkPort() { close(); }
void DpdkPort::set_up_loans(bool) {}
size_t DpdkPort::rx_burst(Packet**, size_t, PacketPool&) { return 0; }
void DpdkPort::tx(const Packet*) { ++counters_.tx_port_closed; }
void DpdkPort::send(Packet* p, PacketPool& pool) {
  tx(p);
  pool.put(p);
}
size_t DpdkPort::flush() { return 0; }

#endif  // UROCE_HAVE_DPDK

}  // namespace uroce::net
