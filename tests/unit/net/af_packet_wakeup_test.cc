// Tests for net/af_packet_wakeup.cc on the loopback interface: the fd stays
// quiet while disarmed, becomes readable for a frame while armed, and
// disarm() drains it; arming an armed one changes nothing; drain() empties
// it and leaves it armed; armed for the
// engine's frames, only RoCEv2 (IPv4 and IPv6) wakes it, not other UDP.
// Needs CAP_NET_RAW (skipped without).
#include "net/af_packet_wakeup.h"

#include <arpa/inet.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
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

bool readable(int fd, int timeout_ms) {
  pollfd p = {fd, POLLIN, 0};
  return poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN);
}

TEST(AfPacketIface, FromSpec) {
  EXPECT_EQ(af_packet_iface("net_af_packet0,iface=veth0"), "veth0");
  EXPECT_EQ(af_packet_iface("net_af_packet1,qpairs=1,iface=v1,framesz=9216"), "v1");
  EXPECT_EQ(af_packet_iface("net_tap0,iface=tap0"), "");
  EXPECT_EQ(af_packet_iface("0000:03:00.0"), "");
}

TEST(AfPacketWakeup, UnknownInterfaceIsAnError) {
  AfPacketWakeup w;
  EXPECT_NE(w.open("no-such-if0"), "");
  EXPECT_FALSE(w.is_open());
  EXPECT_FALSE(w.arm());
}

// Opens w on lo, or skips the test without CAP_NET_RAW.
#define OPEN_ON_LO(w)                                                   \
  do {                                                                  \
    const std::string err = (w).open("lo");                             \
    if (!err.empty() && (errno == EPERM || errno == EACCES))            \
      GTEST_SKIP() << "needs CAP_NET_RAW: " << err;                     \
    ASSERT_EQ(err, "");                                                 \
  } while (0)

TEST(AfPacketWakeup, ReadableOnlyWhileArmed) {
  AfPacketWakeup w;
  OPEN_ON_LO(w);
  send_udp(4791);
  EXPECT_FALSE(readable(w.fd(), 50));  // disarmed: nothing queued
  ASSERT_TRUE(w.arm());
  send_udp(4791);
  EXPECT_TRUE(readable(w.fd(), 2000));
  EXPECT_GE(w.disarm(), 1);
  EXPECT_FALSE(readable(w.fd(), 0));  // drained
  send_udp(4791);
  EXPECT_FALSE(readable(w.fd(), 50));
}

// An engine bound to a kernel interface sleeps through the kernel's own
// traffic: other UDP does not wake it, RoCEv2 over IPv4 and IPv6 does.
TEST(AfPacketWakeup, ArmedForTheEngineOnlyRoceWakesIt) {
  AfPacketWakeup w;
  OPEN_ON_LO(w);
  ASSERT_TRUE(w.arm(AfPacketWakeup::Frames::kEngines));
  send_udp(9);
  send_udp(4792);
  EXPECT_FALSE(readable(w.fd(), 100));
  send_udp(4791);
  EXPECT_TRUE(readable(w.fd(), 2000));
  EXPECT_EQ(w.disarm(), 1);
  if (!send_udp6(9)) GTEST_SKIP() << "no IPv6 on lo";
  ASSERT_TRUE(w.arm(AfPacketWakeup::Frames::kEngines));
  send_udp6(9);
  EXPECT_FALSE(readable(w.fd(), 100));
  send_udp6(4791);
  EXPECT_TRUE(readable(w.fd(), 2000));
  EXPECT_EQ(w.disarm(), 1);
}

std::vector<uint8_t> cat(std::vector<uint8_t> a, const std::vector<uint8_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Every branch of the engine's filter, with frames made by hand: RoCE, ARP,
// neighbour discovery and a double VLAN tag wake; LLDP, an ICMPv6 echo, a
// later IPv4 fragment and other UDP do not.
TEST(AfPacketWakeup, EngineFilterBranches) {
  AfPacketWakeup w;
  OPEN_ON_LO(w);
  struct Case {
    const char* what;
    uint16_t type;
    std::vector<uint8_t> payload;
    bool wakes;
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
    ASSERT_TRUE(w.arm(AfPacketWakeup::Frames::kEngines));
    send_frame(c.type, c.payload);
    EXPECT_EQ(readable(w.fd(), c.wakes ? 2000 : 100), c.wakes) << c.what;
    EXPECT_EQ(w.disarm(), c.wakes ? 1 : 0) << c.what;
  }
}

// Arming an armed socket for the same frames switches nothing (an idle
// engine's nap that ended without a frame sleeps again as it was) and keeps
// what arrived meanwhile; arming it for all frames (flow rules came while it
// slept) switches the filter and still keeps what was queued.
TEST(AfPacketWakeup, StaysArmedUntilDisarmed) {
  AfPacketWakeup w;
  OPEN_ON_LO(w);
  bool switched = false;
  EXPECT_FALSE(w.armed());
  ASSERT_TRUE(w.arm(AfPacketWakeup::Frames::kEngines, &switched));
  EXPECT_TRUE(switched);
  EXPECT_TRUE(w.armed());
  EXPECT_FALSE(readable(w.fd(), 50));
  ASSERT_TRUE(w.arm(AfPacketWakeup::Frames::kEngines, &switched));
  EXPECT_FALSE(switched);
  send_udp(4791);
  EXPECT_TRUE(readable(w.fd(), 2000));
  ASSERT_TRUE(w.arm(AfPacketWakeup::Frames::kAll, &switched));
  EXPECT_TRUE(switched);
  EXPECT_TRUE(readable(w.fd(), 0));  // the RoCE datagram is still queued
  EXPECT_EQ(w.disarm(), 1);
  EXPECT_FALSE(w.armed());
  EXPECT_EQ(w.disarm(), 0);  // disarmed already: nothing to do
  send_udp(4791);
  EXPECT_FALSE(readable(w.fd(), 50));
}

// The engine's use: armed once, drained before each sleep. A drain forgets
// what was queued (the busy engine polled those frames) and leaves the
// socket armed, so the next frame makes it readable again, without any
// filter switched.
TEST(AfPacketWakeup, DrainKeepsItArmedForTheNextFrame) {
  AfPacketWakeup w;
  OPEN_ON_LO(w);
  bool switched = false;
  ASSERT_TRUE(w.arm(AfPacketWakeup::Frames::kEngines, &switched));
  EXPECT_TRUE(switched);
  for (int i = 0; i < 3; ++i) send_udp(4791);
  EXPECT_TRUE(readable(w.fd(), 2000));
  EXPECT_GE(w.drain(), 1);
  EXPECT_FALSE(readable(w.fd(), 0));
  EXPECT_TRUE(w.armed());
  ASSERT_TRUE(w.arm(AfPacketWakeup::Frames::kEngines, &switched));
  EXPECT_FALSE(switched);
  send_udp(9);  // still only the engine's frames
  EXPECT_FALSE(readable(w.fd(), 100));
  send_udp(4791);
  EXPECT_TRUE(readable(w.fd(), 2000));
  EXPECT_EQ(w.drain(), 1);
  EXPECT_EQ(w.drain(), 0);
}

// With flow rules a raw packet QP may want any frame.
TEST(AfPacketWakeup, ArmedForAllFramesAnyFrameWakesIt) {
  AfPacketWakeup w;
  OPEN_ON_LO(w);
  ASSERT_TRUE(w.arm(AfPacketWakeup::Frames::kAll));
  send_udp(9);
  EXPECT_TRUE(readable(w.fd(), 2000));
  EXPECT_GE(w.disarm(), 1);  // the datagram, and lo's ICMP port unreachable
}

}  // namespace
}  // namespace uroce::net
