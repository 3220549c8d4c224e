// A file descriptor that becomes readable when a frame arrives on a kernel
// network interface, so that an engine polling a DPDK net_af_packet port
// (which has no RX interrupts) can sleep in poll/epoll when idle instead of
// spinning or sleeping blind.
//
// It is a second AF_PACKET socket on the interface whose BPF filter the
// engine switches: "drop everything" while awake (the kernel runs a one-
// instruction filter per frame and queues nothing), "accept 1 byte" while
// asleep. While asleep it accepts only the frames the engine serves (RoCEv2,
// ARP, ICMPv6 for neighbour discovery, anything VLAN-tagged) unless raw
// packet QPs have flows (then every frame): an engine bound to a busy kernel
// interface (--netdev) is not woken by the kernel's own traffic. Use it like
// the doorbell protocol:
//
//   wakeup.arm(which);                  // 1. once: frames from now on queue
//   wakeup.drain();                     // 2. before each sleep: forget them
//   if (!poll_port_once()) wait(fd);    // 3. poll once more, then block
//
// A frame that landed before drain() is seen by the last poll; one after it
// makes the fd readable. The socket stays armed while the engine works: the
// kernel queues at most SO_RCVBUF's worth (a few frames) and then drops each
// frame after the filter without copying it, so a busy engine makes no
// system call here and a sleep costs one drain (a few recv calls). Switching
// the filter is the costly part (the kernel checks and JIT-compiles each
// program it is given, and frees the old one through a worker): it happens
// only when the frames that should wake the engine change (flow rules), not
// per nap. disarm() (drop everything) is for a user that stops sleeping on it.
#pragma once

#include <cstdint>
#include <string>

namespace uroce::net {

class AfPacketWakeup {
 public:
  AfPacketWakeup() = default;
  AfPacketWakeup(const AfPacketWakeup&) = delete;
  AfPacketWakeup& operator=(const AfPacketWakeup&) = delete;
  ~AfPacketWakeup() { close(); }

  // Opens the socket on iface (in the calling thread's network namespace),
  // disarmed. Needs CAP_NET_RAW. Returns "" or the reason.
  std::string open(const std::string& iface);
  void close();
  bool is_open() const { return fd_ >= 0; }
  // Readable (POLLIN) while armed and a frame has arrived.
  int fd() const { return fd_; }

  // Which frames wake the engine.
  enum class Frames : uint8_t { kEngines, kAll };
  // Frames received from now on make fd() readable. Returns false if the
  // filter could not be switched (then do not block on fd()). `*switched`,
  // when given, tells whether it was switched now (false: it was armed for
  // `which` already, and a frame since then has made fd() readable).
  bool arm(Frames which = Frames::kEngines, bool* switched = nullptr);
  bool armed() const { return filter_ != Filter::kNone; }
  // Empties the queue: fd() is readable again only for a frame that arrives
  // after. Returns the number of frames drained.
  int drain();
  // Stops queueing frames and drains what was queued (nothing when not
  // armed). Returns the number of frames drained (a wakeup count).
  int disarm();

 private:
  enum class Filter : uint8_t { kNone, kEngines, kAll };
  bool set_filter(Filter f);
  int fd_ = -1;
  Filter filter_ = Filter::kNone;  // the filter attached now
};

// The iface= value of a net_af_packet spec ("net_af_packet0,iface=veth0"),
// or "" if the spec is not an af_packet vdev.
std::string af_packet_iface(const std::string& spec);

}  // namespace uroce::net
