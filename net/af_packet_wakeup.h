// Sleeping on a DPDK net_af_packet port, which has no RX interrupts: the
// port's own packet socket (the PMD's, with its TPACKET_V2 RX ring) is the
// engine's wakeup fd. poll() reports it readable while a frame waits in the
// ring (packet_poll in the kernel's net/packet/af_packet.c: the frame before
// the kernel's head is not the kernel's), and tpacket_rcv wakes a sleeper for
// each frame it puts there. Use it like the doorbell protocol:
//
//   wakeup.attach(port_fd);              // once, after the port opened
//   wakeup.arm(which);                   // before each sleep (usually a no-op)
//   if (!poll_port_once()) wait(fd);     // poll once more, then block
//
// A frame that lands before the last poll is found by it; one after it makes
// the fd readable. Nothing to drain: the ring is the queue.
//
// A BPF filter on the socket decides which frames reach the ring at all: the
// ones an engine serves (RoCEv2, ARP, ICMPv6 for neighbour discovery,
// anything VLAN-tagged), or every frame while raw packet QPs have flow rules.
// So the kernel's own traffic on the interface (--netdev) is neither copied
// into the ring nor wakes the engine, and no second socket sees each frame
// (the engine used to sleep on one: its packet_rcv ran per frame on the
// sending CPU). The filter is switched only when flow rules come or go (the
// kernel checks and JIT-compiles each program it is given).
#pragma once

#include <cstdint>
#include <string>

namespace uroce::net {

class AfPacketWakeup {
 public:
  AfPacketWakeup() = default;
  AfPacketWakeup(const AfPacketWakeup&) = delete;
  AfPacketWakeup& operator=(const AfPacketWakeup&) = delete;

  // Takes the port's packet socket (which stays the port's: it closes it)
  // and filters it for the engine's frames. Needs a packet socket with an
  // RX ring. Returns "" or the reason (then do not block on fd()).
  std::string attach(int port_fd);
  // Forgets the socket (call before the port closes it); no system call.
  void detach();
  bool is_attached() const { return fd_ >= 0; }
  // Readable (POLLIN) while a frame waits in the ring.
  int fd() const { return fd_; }

  // Which frames reach the ring (and so wake the engine).
  enum class Frames : uint8_t { kEngines, kAll };
  // Lets `which` frames into the ring from now on. Returns false if the
  // filter could not be switched. `*switched`, when given, tells whether it
  // was switched now (false: it let them in already). Frames already in the
  // ring stay there either way.
  bool arm(Frames which = Frames::kEngines, bool* switched = nullptr);
  bool armed() const { return fd_ >= 0 && filter_ != Filter::kNone; }
  Frames frames() const { return filter_ == Filter::kAll ? Frames::kAll : Frames::kEngines; }

 private:
  enum class Filter : uint8_t { kNone, kEngines, kAll };
  bool set_filter(Filter f);
  int fd_ = -1;
  Filter filter_ = Filter::kNone;  // the filter attached now (kNone: none of ours)
};

// The iface= value of a net_af_packet spec ("net_af_packet0,iface=veth0"),
// or "" if the spec is not an af_packet vdev.
std::string af_packet_iface(const std::string& spec);

}  // namespace uroce::net
