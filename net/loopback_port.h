// The in-engine loopback port: frames transmitted by one QP are received by
// another QP of the same engine on the next poll, through the same transport
// code a wire port uses. Owned by the engine thread. Its queue is a fixed
// ring (no allocation once built, as a NIC's internal switch has fixed
// buffers): the device stops its senders well before it fills
// (device/params.h kLoopbackDepth), so only frames that are never held back
// (ACKs, NAKs) could find it full; those are dropped and counted, as a
// switch drops, and RC recovers them as any lost frame.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "net/packet.h"

namespace uroce::net {

class LoopbackPort {
 public:
  // Frames the ring holds at most (a power of two).
  static constexpr uint32_t kCapacity = 4096;

  // Takes the frame, or returns false when the ring is full: the caller
  // keeps it.
  bool tx(Packet* p) {
    if (tail_ - head_ == kCapacity) [[unlikely]] return false;
    ring_[tail_++ & (kCapacity - 1)] = p;
    ++tx_packets_;
    tx_bytes_ += p->len;
    return true;
  }
  size_t rx_burst(Packet** out, size_t max) {
    size_t n = 0;
    while (n < max && head_ != tail_) out[n++] = ring_[head_++ & (kCapacity - 1)];
    rx_packets_ += n;
    return n;
  }
  bool pending() const { return head_ != tail_; }
  // Frames waiting to be received.
  size_t depth() const { return tail_ - head_; }
  uint64_t tx_packets() const { return tx_packets_; }
  uint64_t tx_bytes() const { return tx_bytes_; }
  uint64_t rx_packets() const { return rx_packets_; }

 private:
  std::unique_ptr<Packet*[]> ring_{new Packet*[kCapacity]};
  uint32_t head_ = 0, tail_ = 0;  // free-running; tail_ - head_ frames queued
  uint64_t tx_packets_ = 0, tx_bytes_ = 0, rx_packets_ = 0;
};

}  // namespace uroce::net
