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
#include <iterator>

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

std::string AfPacketWakeup::attach(int port_fd) {
  detach();
  int version = -1;
  socklen_t len = sizeof(version);
  if (port_fd < 0) return "the port has no packet socket";
  if (getsockopt(port_fd, SOL_PACKET, PACKET_VERSION, &version, &len) != 0)
    return std::string("not a packet socket: ") + std::strerror(errno);
  fd_ = port_fd;
  if (!set_filter(Filter::kEngines)) {
    const std::string err = std::string("SO_ATTACH_FILTER: ") + std::strerror(errno);
    detach();
    return err;
  }
  return "";
}

void AfPacketWakeup::detach() {
  fd_ = -1;
  filter_ = Filter::kNone;
}

namespace {

// Snap lengths: the whole frame into the ring, or none of it.
constexpr uint32_t kAccept = UINT32_MAX, kDrop = 0;

// Classic BPF over the frame from its Ethernet header: accept the frames an
// engine serves (RoCEv2 over IPv4 or IPv6, ARP, IPv6 neighbour discovery),
// drop the rest. Jump offsets count from the next instruction. The kernel
// moves a frame's VLAN tag to metadata before the filter runs; a second tag
// left in the data is accepted whole rather than parsed (rare, and a
// spurious wakeup costs one poll).
constexpr sock_filter kEngineFrames[] = {
    BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 12),                 // 0: ethertype
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x0800, 5, 0),      // 1: IPv4 -> 7
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x86dd, 11, 0),     // 2: IPv6 -> 14
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x0806, 18, 0),     // 3: ARP -> 22
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x8100, 17, 0),     // 4: 802.1Q -> 22
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x88a8, 16, 0),     // 5: 802.1ad -> 22
    BPF_STMT(BPF_RET | BPF_K, kDrop),                       // 6
    BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 14 + 9),             // 7: IPv4 protocol
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 17, 0, 14),         // 8: UDP, else -> 23
    BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 14 + 6),             // 9: flags + fragment offset
    BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, 0x1fff, 12, 0),    // 10: a later fragment -> 23
    BPF_STMT(BPF_LDX | BPF_B | BPF_MSH, 14),                // 11: X = IPv4 header length
    BPF_STMT(BPF_LD | BPF_H | BPF_IND, 14 + 2),             // 12: UDP destination port
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 4791, 8, 9),        // 13: RoCEv2 -> 22, else 23
    BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 14 + 6),             // 14: IPv6 next header
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 17, 4, 0),          // 15: UDP -> 20
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 58, 0, 6),          // 16: ICMPv6, else -> 23
    BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 14 + 40),            // 17: ICMPv6 type
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 135, 3, 0),         // 18: neighbour solicitation -> 22
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 136, 2, 3),         // 19: advertisement -> 22, else 23
    BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 14 + 40 + 2),        // 20: UDP destination port
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 4791, 0, 1),        // 21: RoCEv2 -> 22, else 23
    BPF_STMT(BPF_RET | BPF_K, kAccept),                     // 22
    BPF_STMT(BPF_RET | BPF_K, kDrop),                       // 23
};

}  // namespace

bool AfPacketWakeup::set_filter(Filter f) {
  if (fd_ < 0) return false;
  if (f == Filter::kAll) {
    // No filter at all: the kernel runs none per frame.
    const int unused = 0;  // the kernel wants an int's length for any option
    if (filter_ != Filter::kNone && setsockopt(fd_, SOL_SOCKET, SO_DETACH_FILTER, &unused, sizeof(unused)) != 0)
      return false;
  } else {
    sock_fprog prog = {uint16_t(std::size(kEngineFrames)), const_cast<sock_filter*>(kEngineFrames)};
    if (setsockopt(fd_, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof(prog)) != 0) return false;
  }
  filter_ = f;
  return true;
}

bool AfPacketWakeup::arm(Frames which, bool* switched) {
  const Filter f = which == Frames::kAll ? Filter::kAll : Filter::kEngines;
  const bool change = fd_ >= 0 && filter_ != f;
  if (switched) *switched = change;
  if (!change) return fd_ >= 0;
  return set_filter(f);
}

}  // namespace uroce::net
