#include "net/af_packet_wakeup.h"

#include <arpa/inet.h>
#include <linux/filter.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace uroce::net {

std::string af_packet_iface(const std::string& spec) {
  const std::string drv = spec.substr(0, spec.find(','));
  if (drv.rfind("net_af_packet", 0) != 0 && drv.rfind("eth_af_packet", 0) != 0) return "";
  const std::string key = ",iface=";
  const size_t pos = spec.find(key);
  if (pos == std::string::npos) return "";
  const size_t start = pos + key.size();
  return spec.substr(start, spec.find(',', start) - start);
}

std::string AfPacketWakeup::open(const std::string& iface) {
  close();
  const unsigned index = if_nametoindex(iface.c_str());
  if (!index) return "no interface " + iface + ": " + std::strerror(errno);
  // Protocol 0: nothing is queued until bind() below, and by then the
  // drop-all filter is in place.
  fd_ = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd_ < 0) return std::string("AF_PACKET socket: ") + std::strerror(errno);
  std::string err;
  const int one = 1, small = 4096;
  sockaddr_ll addr = {};
  addr.sll_family = AF_PACKET;
  addr.sll_protocol = htons(ETH_P_ALL);
  addr.sll_ifindex = int(index);
  if (!set_filter(false)) {
    err = std::string("SO_ATTACH_FILTER: ") + std::strerror(errno);
  } else if (setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)) != 0) {
    err = std::string("SO_RCVBUF: ") + std::strerror(errno);
  } else if (bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    err = "bind to " + iface + ": " + std::strerror(errno);
  }
  // Frames this host sends (e.g. the DPDK port's own) are no reason to wake.
  if (err.empty()) setsockopt(fd_, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof(one));
  if (!err.empty()) close();
  return err;
}

void AfPacketWakeup::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

bool AfPacketWakeup::set_filter(bool accept) {
  // One BPF instruction: return the snap length (0 drops the frame).
  sock_filter insn = BPF_STMT(BPF_RET | BPF_K, accept ? 1u : 0u);
  sock_fprog prog = {1, &insn};
  return setsockopt(fd_, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof(prog)) == 0;
}

bool AfPacketWakeup::arm() { return fd_ >= 0 && set_filter(true); }

int AfPacketWakeup::disarm() {
  if (fd_ < 0) return 0;
  set_filter(false);
  int n = 0;
  char byte;
  while (recv(fd_, &byte, 1, MSG_DONTWAIT | MSG_TRUNC) >= 0) ++n;
  return n;
}

}  // namespace uroce::net
