// UDP sockets that hold the RoCEv2 port (4791) on the interface a device is
// bound to (uroced --netdev), as rxe's kernel UDP tunnel socket does: the
// kernel shares its addresses with the device, and without a socket on the
// port it would answer every RoCE datagram it also sees with an ICMP port
// unreachable. The engine gets its frames from the wire port; what queues
// here is read and discarded (drain()), so the kernel counts the datagrams
// as delivered (UdpInDatagrams), as it does rxe's.
//
// Control path: the engine drains from its event loop when fd is readable.
#pragma once

#include <cstdint>
#include <string>

#include "net/headers.h"  // kRoceV2Port

namespace uroce::net {

class UdpPortGuard {
 public:
  UdpPortGuard() = default;
  UdpPortGuard(const UdpPortGuard&) = delete;
  UdpPortGuard& operator=(const UdpPortGuard&) = delete;
  ~UdpPortGuard();

  // Binds port on every address of iface (now and later: the wildcard with
  // SO_BINDTODEVICE), IPv4 and IPv6. "" or the reason, e.g. EADDRINUSE when
  // a socket bound to every interface has the port (a kernel rxe device:
  // then the kernel answers nothing either).
  std::string open(const std::string& iface, uint16_t port = kRoceV2Port);
  int fd4() const { return fd4_; }
  int fd6() const { return fd6_; }
  // Reads and discards what is queued on fd; returns the datagrams read.
  static uint64_t drain(int fd);

 private:
  int fd4_ = -1, fd6_ = -1;
};

}  // namespace uroce::net
