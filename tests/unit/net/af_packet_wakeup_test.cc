// Tests for net/af_packet_wakeup.cc on the loopback interface, with a packet
// socket and RX ring made as DPDK's net_af_packet makes its own (TPACKET_V2)
// and emptied as it empties it: the fd is readable exactly while a frame
// waits in the ring; the engine's filter lets only the frames an engine
// serves into it (RoCEv2 over IPv4 and IPv6, ARP, neighbour discovery), and
// every frame while flow rules want them. Needs CAP_NET_RAW (skipped without).
#include "net/af_packet_wakeup.h"

#include <arpa/inet.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

namespace uroce::net {
namespace {

// Sends one UDP datagram to 127.0.0.1 (a frame on lo, seen as incoming).
// Port 9 (discard) or 4791 (RoCEv2); nobody needs to listen.
void send_udp(uint16_t port = 9) {
  const int s = socket(AF_INET, SOCK_DGRAM, 0);
  ASSERT_GE(s, 0);
  sockaddr_in to = {};
  to.sin_family = AF_INET;
  to.sin_port = htons(port);
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const char msg[] = "wake";
  EXPECT_EQ(sendto(s, msg, sizeof(msg), 0, reinterpret_cast<sockaddr*>(&to), sizeof(to)),
            ssize_t(sizeof(msg)));
  close(s);
}

// The same to ::1; false if this host has no IPv6 on lo.
bool send_udp6(uint16_t port) {
  const int s = socket(AF_INET6, SOCK_DGRAM, 0);
  if (s < 0) return false;
  sockaddr_in6 to = {};
  to.sin6_family = AF_INET6;
  to.sin6_port = htons(port);
  to.sin6_addr = in6addr_loopback;
  const char msg[] = "wake";
  const bool sent = sendto(s, msg, sizeof(msg), 0, reinterpret_cast<sockaddr*>(&to), sizeof(to)) ==
                    ssize_t(sizeof(msg));
  close(s);
  return sent;
}

// Puts one Ethernet frame of `type` (payload after the 14-byte header) out
// of lo through a packet socket; lo hands it back as an incoming frame.
void send_frame(uint16_t type, std::vector<uint8_t> payload) {
  const int s = socket(AF_PACKET, SOCK_RAW, 0);
  ASSERT_GE(s, 0);
  std::vector<uint8_t> frame(14, 0);
  frame[12] = uint8_t(type >> 8);
  frame[13] = uint8_t(type);
  frame.insert(frame.end(), payload.begin(), payload.end());
  frame.resize(std::max<size_t>(frame.size(), 60));
  sockaddr_ll to = {};
  to.sll_family = AF_PACKET;
  to.sll_ifindex = int(if_nametoindex("lo"));
  to.sll_halen = ETH_ALEN;
  EXPECT_EQ(sendto(s, frame.data(), frame.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof(to)),
            ssize_t(frame.size()));
  close(s);
}

// An IPv6 header (40 bytes) with next header nh, then `rest`.
std::vector<uint8_t> ip6(uint8_t nh, std::vector<uint8_t> rest) {
  std::vector<uint8_t> h(40, 0);
  h[0] = 0x60;
  h[4] = uint8_t(rest.size() >> 8);
  h[5] = uint8_t(rest.size());
  h[6] = nh;
  h[7] = 255;
  h.insert(h.end(), rest.begin(), rest.end());
  return h;
}

// An IPv4 header (20 bytes) carrying UDP to dport, with a fragment offset.
std::vector<uint8_t> ip4_udp(uint16_t dport, uint16_t frag_offset) {
  std::vector<uint8_t> h(28, 0);
  h[0] = 0x45;
  h[3] = 28;
  h[6] = uint8_t(frag_offset >> 8);
  h[7] = uint8_t(frag_offset);
  h[8] = 64;
  h[9] = 17;
  h[22] = uint8_t(dport >> 8);
  h[23] = uint8_t(dport);
  return h;
}

// A packet socket on lo with a TPACKET_V2 RX ring, as the PMD's. consume()
// takes every frame the kernel put in the ring and hands the slots back, as
// the PMD's rx_burst does; it returns how many there were.
class RingSocket {
 public:
  static constexpr unsigned kFrameSize = 2048, kBlockSize = 4096, kFrames = 64;
  // "" or the reason (errno tells EPERM).
  std::string open() {
    fd_ = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_ALL));
    if (fd_ < 0) return std::string("AF_PACKET socket: ") + std::strerror(errno);
    const int version = TPACKET_V2;
    tpacket_req req = {kBlockSize, kFrames * kFrameSize / kBlockSize, kFrameSize, kFrames};
    // The frames lo hands back, not their outgoing copies (whose VLAN tags
    // are still in the data): the cases below are about frames received.
    const int one = 1;
    if (setsockopt(fd_, SOL_PACKET, PACKET_VERSION, &version, sizeof(version)) != 0 ||
        setsockopt(fd_, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof(one)) != 0 ||
        setsockopt(fd_, SOL_PACKET, PACKET_RX_RING, &req, sizeof(req)) != 0)
      return std::string("ring: ") + std::strerror(errno);
    ring_ = static_cast<uint8_t*>(mmap(nullptr, kFrames * kFrameSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0));
    if (ring_ == MAP_FAILED) {
      ring_ = nullptr;
      return std::string("mmap: ") + std::strerror(errno);
    }
    sockaddr_ll addr = {};
    addr.sll_family = AF_PACKET;
    addr.sll_protocol = htons(ETH_P_ALL);
    addr.sll_ifindex = int(if_nametoindex("lo"));
    if (bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)
      return std::string("bind: ") + std::strerror(errno);
    return "";
  }
  ~RingSocket() {
    if (ring_) munmap(ring_, kFrames * kFrameSize);
    if (fd_ >= 0) close(fd_);
  }
  int fd() const { return fd_; }
  int consume() {
    int n = 0;
    for (;;) {
      auto* h = reinterpret_cast<tpacket2_hdr*>(ring_ + next_ * kFrameSize);
      if (!(__atomic_load_n(&h->tp_status, __ATOMIC_ACQUIRE) & TP_STATUS_USER)) return n;
      __atomic_store_n(&h->tp_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
      next_ = (next_ + 1) % kFrames;
      ++n;
    }
  }

 private:
  int fd_ = -1;
  uint8_t* ring_ = nullptr;
  unsigned next_ = 0;
};

bool readable(int fd, int timeout_ms) {
  pollfd p = {fd, POLLIN, 0};
  return poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN);
}

// Lets a frame sent on lo reach the ring (lo hands it back at once, but on
// another CPU's softirq now and then).
int settle_and_consume(RingSocket& r, bool expect_some) {
  if (expect_some) readable(r.fd(), 2000);
  else usleep(50 * 1000);
  return r.consume();
}

TEST(AfPacketIface, FromSpec) {
  EXPECT_EQ(af_packet_iface("net_af_packet0,iface=veth0"), "veth0");
  EXPECT_EQ(af_packet_iface("net_af_packet1,qpairs=1,iface=v1,framesz=9216"), "v1");
  EXPECT_EQ(af_packet_iface("net_tap0,iface=tap0"), "");
  EXPECT_EQ(af_packet_iface("0000:03:00.0"), "");
}

TEST(AfPacketWakeup, NotAPacketSocketIsAnError) {
  AfPacketWakeup w;
  EXPECT_NE(w.attach(-1), "");
  EXPECT_FALSE(w.is_attached());
  EXPECT_FALSE(w.arm());
  const int udp = socket(AF_INET, SOCK_DGRAM, 0);
  ASSERT_GE(udp, 0);
  EXPECT_NE(w.attach(udp), "");
  EXPECT_FALSE(w.is_attached());
  close(udp);
}

// Opens ring r on lo and attaches w to it, or skips without CAP_NET_RAW.
#define ATTACH_ON_LO(r, w)                                              \
  do {                                                                  \
    const std::string err = (r).open();                                 \
    if (!err.empty() && (errno == EPERM || errno == EACCES))            \
      GTEST_SKIP() << "needs CAP_NET_RAW: " << err;                     \
    ASSERT_EQ(err, "");                                                 \
    ASSERT_EQ((w).attach((r).fd()), "");                                \
  } while (0)

// The engine's sleep: readable while a frame waits, quiet once the port has
// taken it, readable again for the next one; nothing to drain and no filter
// switched (arming again is a no-op).
TEST(AfPacketWakeup, ReadableWhileAFrameWaitsInTheRing) {
  RingSocket r;
  AfPacketWakeup w;
  ATTACH_ON_LO(r, w);
  EXPECT_TRUE(w.armed());
  EXPECT_FALSE(readable(w.fd(), 50));
  send_udp(4791);
  EXPECT_TRUE(readable(w.fd(), 2000));
  EXPECT_TRUE(readable(w.fd(), 0));  // still there: poll does not take it
  EXPECT_GE(r.consume(), 1);
  EXPECT_FALSE(readable(w.fd(), 0));
  bool switched = true;
  ASSERT_TRUE(w.arm(AfPacketWakeup::Frames::kEngines, &switched));
  EXPECT_FALSE(switched);
  send_udp(4791);
  EXPECT_TRUE(readable(w.fd(), 2000));
  EXPECT_GE(r.consume(), 1);
  EXPECT_FALSE(readable(w.fd(), 0));
}

// An engine bound to a kernel interface leaves the kernel's own traffic
// out of its ring: other UDP never reaches it, RoCEv2 over IPv4 and IPv6 does.
TEST(AfPacketWakeup, OnlyTheEnginesFramesReachTheRing) {
  RingSocket r;
  AfPacketWakeup w;
  ATTACH_ON_LO(r, w);
  send_udp(9);
  send_udp(4792);
  EXPECT_FALSE(readable(w.fd(), 100));
  EXPECT_EQ(r.consume(), 0);
  send_udp(4791);
  EXPECT_GE(settle_and_consume(r, true), 1);
  if (!send_udp6(9)) GTEST_SKIP() << "no IPv6 on lo";
  EXPECT_EQ(settle_and_consume(r, false), 0);
  send_udp6(4791);
  EXPECT_GE(settle_and_consume(r, true), 1);
}

std::vector<uint8_t> cat(std::vector<uint8_t> a, const std::vector<uint8_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Every branch of the engine's filter, with frames made by hand: RoCE, ARP,
// neighbour discovery and a double VLAN tag get in; LLDP, an ICMPv6 echo, a
// later IPv4 fragment and other UDP do not.
TEST(AfPacketWakeup, EngineFilterBranches) {
  RingSocket r;
  AfPacketWakeup w;
  ATTACH_ON_LO(r, w);
  struct Case {
    const char* what;
    uint16_t type;
    std::vector<uint8_t> payload;
    bool taken;
  };
  const Case cases[] = {
      {"ARP", 0x0806, std::vector<uint8_t>(28, 0), true},
      // The kernel moves one VLAN tag to metadata before a packet socket
      // sees the frame: the filter sees the inner frame...
      {"802.1Q RoCE", 0x8100, cat({0x00, 0x05, 0x08, 0x00}, ip4_udp(4791, 0)), true},
      {"802.1Q UDP 53", 0x8100, cat({0x00, 0x05, 0x08, 0x00}, ip4_udp(53, 0)), false},
      // ... and a second tag, left in the data, is accepted whole.
      {"802.1ad + 802.1Q", 0x88a8, cat({0x00, 0x05, 0x81, 0x00, 0x00, 0x06, 0x08, 0x00}, ip4_udp(53, 0)),
       true},
      {"LLDP", 0x88cc, std::vector<uint8_t>(20, 0), false},
      {"IPv4 UDP 4791", 0x0800, ip4_udp(4791, 0), true},
      {"IPv4 UDP 4791, more fragments", 0x0800, ip4_udp(4791, 0x2000), true},
      {"IPv4 later fragment", 0x0800, ip4_udp(4791, 0x0010), false},
      {"IPv4 UDP 53", 0x0800, ip4_udp(53, 0), false},
      {"IPv6 NS", 0x86dd, ip6(58, {135, 0, 0, 0}), true},
      {"IPv6 NA", 0x86dd, ip6(58, {136, 0, 0, 0}), true},
      {"IPv6 echo", 0x86dd, ip6(58, {128, 0, 0, 0}), false},
      {"IPv6 UDP 4791", 0x86dd, ip6(17, {0x30, 0x39, 0x12, 0xb7, 0, 8, 0, 0}), true},
      {"IPv6 UDP 4792", 0x86dd, ip6(17, {0x30, 0x39, 0x12, 0xb8, 0, 8, 0, 0}), false},
      {"IPv6 TCP", 0x86dd, ip6(6, std::vector<uint8_t>(20, 0)), false},
  };
  for (const Case& c : cases) {
    send_frame(c.type, c.payload);
    const int n = settle_and_consume(r, c.taken);
    if (c.taken) EXPECT_GE(n, 1) << c.what;
    else EXPECT_EQ(n, 0) << c.what;
  }
}

// Flow rules came: every frame gets in from now on, and what was in the ring
// stays there; they went: the engine's frames only again.
TEST(AfPacketWakeup, ArmedForAllFramesAnyFrameGetsIn) {
  RingSocket r;
  AfPacketWakeup w;
  ATTACH_ON_LO(r, w);
  send_udp(4791);
  EXPECT_TRUE(readable(w.fd(), 2000));
  bool switched = false;
  ASSERT_TRUE(w.arm(AfPacketWakeup::Frames::kAll, &switched));
  EXPECT_TRUE(switched);
  EXPECT_EQ(w.frames(), AfPacketWakeup::Frames::kAll);
  EXPECT_TRUE(readable(w.fd(), 0));  // the RoCE datagram is still there
  EXPECT_GE(r.consume(), 1);
  send_udp(9);
  EXPECT_GE(settle_and_consume(r, true), 1);
  ASSERT_TRUE(w.arm(AfPacketWakeup::Frames::kEngines, &switched));
  EXPECT_TRUE(switched);
  send_udp(9);
  EXPECT_EQ(settle_and_consume(r, false), 0);
}

// detach() forgets the socket without touching it: the port closes it.
TEST(AfPacketWakeup, DetachLeavesTheSocketToThePort) {
  RingSocket r;
  AfPacketWakeup w;
  ATTACH_ON_LO(r, w);
  w.detach();
  EXPECT_FALSE(w.is_attached());
  EXPECT_EQ(w.fd(), -1);
  int version = -1;
  socklen_t len = sizeof(version);
  EXPECT_EQ(getsockopt(r.fd(), SOL_PACKET, PACKET_VERSION, &version, &len), 0);
}

}  // namespace
}  // namespace uroce::net
