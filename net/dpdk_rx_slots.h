// Zero-copy receive on net_af_packet: an mbuf pool whose buffers are engine
// Packets. The driver allocates an mbuf per frame and copies the frame from
// its ring to the mbuf's data (eth_af_packet_rx in DPDK's
// drivers/net/af_packet/rte_eth_af_packet.c), which is Packet::data here, so
// the frame lands where the engine parses it and no second copy is made. The
// mbuf stays out of the pool while the engine holds the Packet; PacketPool's
// put() gives it back (Packet::loan).
//
// Each mbuf's buffer is one slot: a Packet, and room behind it for the
// longest frame the ring holds (the driver refuses a pool whose data room is
// shorter than its ring frames; a frame longer than a Packet holds lands
// there and is dropped as too long, as before).
//
// Control path: create() and release() (DpdkPort::open/close). Datapath:
// take() and give_back(), engine thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "net/packet.h"

struct rte_mbuf;
struct rte_mempool;

namespace uroce::net {

class DpdkRxSlots final : public PacketLender {
 public:
  // n slots holding frames of up to frame_bytes (a driver's ring frame's
  // data). "" or the reason. Needs EAL.
  static std::string create(const std::string& name, uint32_t n, uint32_t frame_bytes, int socket,
                            DpdkRxSlots** out);
  // Frees the pool and the slots, or, while the engine still holds some of
  // them, keeps both (and this) for good and gives nothing back any more:
  // a held Packet's memory must stay valid. The port is stopped.
  void release();

  rte_mempool* pool() const { return pool_; }
  // The Packet m's frame is in, lent to the caller (len and offsets set), or
  // nullptr if the frame is not at Packet::data (a driver that prepends a
  // header moves it) or is longer than a Packet holds: the caller copies it.
  Packet* take(rte_mbuf* m);
  // Below this many free slots the port copies frames instead of lending
  // them, so that what the engine holds never stops the driver receiving.
  bool running_low() const { return lent_ + low_water_ >= slots_; }
  void give_back(Packet* p) override;

 private:
  DpdkRxSlots() = default;
  ~DpdkRxSlots() = default;
  rte_mempool* pool_ = nullptr;
  uint8_t* memory_ = nullptr;
  uint32_t slots_ = 0;
  uint32_t low_water_ = 0;
  // Taken and not given back; counted here, as the pool's count walks
  // every lcore's cache.
  uint32_t lent_ = 0;
  bool released_ = false;
};

}  // namespace uroce::net
