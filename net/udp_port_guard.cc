// UdpPortGuard (see udp_port_guard.h). Control path.
#include "net/udp_port_guard.h"

#include <netinet/in.h>
#include <netinet/udp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#ifndef UDP_NO_CHECK6_RX
#define UDP_NO_CHECK6_RX 102
#endif

namespace uroce::net {
namespace {

// Room for a burst between two drains: as much as the kernel lets us have
// (SO_RCVBUFFORCE with CAP_NET_ADMIN, else up to net.core.rmem_max).
constexpr int kRcvBufBytes = 8 << 20;

int bound_socket(int family, const std::string& iface, uint16_t port, std::string* err) {
  const int fd = ::socket(family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *err = std::string("socket: ") + std::strerror(errno);
    return -1;
  }
  const int one = 1;
  if (family == AF_INET6) {
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    // RoCEv2 senders may leave the UDP checksum 0 over IPv6 too (rxe does);
    // without this the kernel would count such datagrams as errors.
    ::setsockopt(fd, IPPROTO_UDP, UDP_NO_CHECK6_RX, &one, sizeof(one));
  }
  if (::setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &kRcvBufBytes, sizeof(kRcvBufBytes)) != 0)
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &kRcvBufBytes, sizeof(kRcvBufBytes));
  if (::setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, iface.c_str(), socklen_t(iface.size())) != 0) {
    *err = "SO_BINDTODEVICE " + iface + ": " + std::strerror(errno);
    ::close(fd);
    return -1;
  }
  sockaddr_storage ss{};
  socklen_t len;
  if (family == AF_INET) {
    auto* in = reinterpret_cast<sockaddr_in*>(&ss);
    in->sin_family = AF_INET;
    in->sin_port = htons(port);
    len = sizeof(*in);
  } else {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&ss);
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(port);
    len = sizeof(*in6);
  }
  if (::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    *err = std::string(family == AF_INET ? "UDP" : "UDPv6") + " port " + std::to_string(port) + " on " + iface +
           ": " + std::strerror(errno);
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

UdpPortGuard::~UdpPortGuard() {
  if (fd4_ >= 0) ::close(fd4_);
  if (fd6_ >= 0) ::close(fd6_);
}

std::string UdpPortGuard::open(const std::string& iface, uint16_t port) {
  std::string err4, err6;
  fd4_ = bound_socket(AF_INET, iface, port, &err4);
  fd6_ = bound_socket(AF_INET6, iface, port, &err6);  // fails where IPv6 is off: fine
  if (fd4_ < 0) return err4;
  return "";
}

uint64_t UdpPortGuard::drain(int fd) {
  constexpr unsigned kBatch = 64;
  mmsghdr msgs[kBatch];
  iovec iov[kBatch];
  uint8_t byte[kBatch];
  uint64_t total = 0;
  for (;;) {
    for (unsigned i = 0; i < kBatch; ++i) {
      iov[i] = {&byte[i], 1};  // the payload is the engine's, from the wire port: truncate
      msgs[i] = {};
      msgs[i].msg_hdr.msg_iov = &iov[i];
      msgs[i].msg_hdr.msg_iovlen = 1;
    }
    const int n = ::recvmmsg(fd, msgs, kBatch, MSG_DONTWAIT, nullptr);
    if (n <= 0) return total;
    total += unsigned(n);
    if (unsigned(n) < kBatch) return total;
  }
}

}  // namespace uroce::net
