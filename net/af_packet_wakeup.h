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
//   wakeup.arm(which);                  // 1. frames from now on wake us
//   if (!poll_port_once()) wait(fd);    // 2. poll once more, then block
//   wakeup.disarm();                    // 3. back to polling
//
// A frame that landed before arm() is seen by the last poll; one after it
// makes the fd readable. Control path: each call is a system call or two.
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
  // filter could not be switched (then do not block on fd()).
  bool arm(Frames which = Frames::kEngines);
  // Stops queueing frames and drains what was queued. Returns the number of
  // frames drained (a wakeup count, for statistics).
  int disarm();

 private:
  enum class Filter : uint8_t { kNone, kEngines, kAll };
  bool set_filter(Filter f);
  int fd_ = -1;
};

// The iface= value of a net_af_packet spec ("net_af_packet0,iface=veth0"),
// or "" if the spec is not an af_packet vdev.
std::string af_packet_iface(const std::string& spec);

}  // namespace uroce::net
