// Tests for net/af_packet_wakeup.cc on the loopback interface: the fd stays
// quiet while disarmed, becomes readable for a frame while armed, and
// disarm() drains it. Needs CAP_NET_RAW (skipped without).
#include "net/af_packet_wakeup.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace uroce::net {
namespace {

// Sends one UDP datagram to 127.0.0.1 (a frame on lo, seen as incoming).
void send_udp() {
  const int s = socket(AF_INET, SOCK_DGRAM, 0);
  ASSERT_GE(s, 0);
  sockaddr_in to = {};
  to.sin_family = AF_INET;
  to.sin_port = htons(9);  // discard; nobody needs to listen
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const char msg[] = "wake";
  EXPECT_EQ(sendto(s, msg, sizeof(msg), 0, reinterpret_cast<sockaddr*>(&to), sizeof(to)),
            ssize_t(sizeof(msg)));
  close(s);
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

TEST(AfPacketWakeup, ReadableOnlyWhileArmed) {
  AfPacketWakeup w;
  const std::string err = w.open("lo");
  if (!err.empty() && (errno == EPERM || errno == EACCES))
    GTEST_SKIP() << "needs CAP_NET_RAW: " << err;
  ASSERT_EQ(err, "");
  send_udp();
  EXPECT_FALSE(readable(w.fd(), 50));  // disarmed: nothing queued
  ASSERT_TRUE(w.arm());
  send_udp();
  EXPECT_TRUE(readable(w.fd(), 2000));
  EXPECT_GE(w.disarm(), 1);
  EXPECT_FALSE(readable(w.fd(), 0));  // drained
  send_udp();
  EXPECT_FALSE(readable(w.fd(), 50));
}

}  // namespace
}  // namespace uroce::net
