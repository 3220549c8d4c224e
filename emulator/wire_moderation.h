// Interrupt moderation for a wire port's wakeups, as a NIC moderates its RX
// interrupts (Linux's net_dim, mlx5's adaptive RX moderation).
//
// An engine sleeping on its af_packet port is woken by the kernel's
// tpacket_rcv, in the sending process's context: every frame the peer sends
// runs epoll's callback while the engine's socket is on epoll, and a frame
// that finds the engine asleep wakes it, across CPUs by an IPI, with
// interrupts off. While a stream arrives the engine drains a few frames,
// sleeps, and is woken again: between two engines on two CPUs it woke every
// 4 frames of ib_write_bw 64 KiB, and the sending engine spent 36 % of its
// CPU in those wake-ups (docs/PERFORMANCE.md, "Wake-ups the sender pays").
// So after a wake-up that brought a burst, the engine naps a fixed time on
// its own timer instead, off epoll: the sender pays nothing, and the nap's
// frames wait in the ring (16 MiB, net/dpdk_port.cc) to be taken in one
// batch. A nap that brings fewer frames than a burst ends it: the next
// sleep waits on the socket again, so a ping-pong of one-frame messages is
// woken by each frame as before.
#pragma once

#include <cstdint>

namespace uroce::emulator {

class WireModeration {
 public:
  // Frames received since the engine last woke, and how long ago that was,
  // as it is about to sleep: how long to nap on a timer instead of waiting
  // on the port's socket (0: wait on the socket). Only a burst that came in
  // a short awake time is a stream: an engine that spun between the
  // messages of a ping-pong for milliseconds counted many, one by one.
  static constexpr uint64_t nap_ns(uint64_t frames_since_wake, uint64_t awake_ns) {
    return frames_since_wake >= kBurstFrames && awake_ns <= kBurstWithinNs ? kNapNs : 0;
  }

  // A burst: more frames than the largest message of a latency test that is
  // one hop's worth (a 2-4 frame message still wakes the engine at once).
  static constexpr uint64_t kBurstFrames = 8;
  // The nap: about what a NIC's adaptive moderation waits under a stream
  // (net_dim's RX profiles reach 64-256 us), short beside an RC ACK timeout.
  static constexpr uint64_t kNapNs = 50'000;
  // The awake time a burst fits in: a few naps' worth of frames handled.
  static constexpr uint64_t kBurstWithinNs = 500'000;
};

}  // namespace uroce::emulator
