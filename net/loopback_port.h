// The in-engine loopback port: frames transmitted by one QP are received by
// another QP of the same engine on the next poll, through the same transport
// code a wire port uses. Owned by the engine thread. Its queue is unbounded
// here: the device stops its senders at kLoopbackDepth frames (device/params.h),
// as a NIC's internal switch back-pressures its send queues.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>

#include "net/packet.h"

namespace uroce::net {

class LoopbackPort {
 public:
  void tx(Packet* p) {
    queue_.push_back(p);
    ++tx_packets_;
    tx_bytes_ += p->len;
  }
  size_t rx_burst(Packet** out, size_t max) {
    size_t n = 0;
    while (n < max && !queue_.empty()) {
      out[n++] = queue_.front();
      queue_.pop_front();
    }
    rx_packets_ += n;
    return n;
  }
  bool pending() const { return !queue_.empty(); }
  // Frames waiting to be received.
  size_t depth() const { return queue_.size(); }
  uint64_t tx_packets() const { return tx_packets_; }
  uint64_t tx_bytes() const { return tx_bytes_; }
  uint64_t rx_packets() const { return rx_packets_; }

 private:
  std::deque<Packet*> queue_;
  uint64_t tx_packets_ = 0, tx_bytes_ = 0, rx_packets_ = 0;
};

}  // namespace uroce::net
