// The responder's fixed ring of queued answers (device/response_queue.h) and
// the loopback port's frame ring (net/loopback_port.h): order kept across
// the wrap, inserts and erases in the middle, a full ring refusing more.
#include <gtest/gtest.h>

#include "device/response_queue.h"
#include "net/loopback_port.h"

namespace uroce::device {
namespace {

Response at_psn(uint32_t psn) {
  Response r;
  r.psn = psn;
  return r;
}

std::vector<uint32_t> psns(const ResponseQueue& q) {
  std::vector<uint32_t> out;
  for (uint32_t i = 0; i < q.size(); ++i) out.push_back(q[i].psn);
  return out;
}

TEST(ResponseQueue, KeepsOrderAcrossTheWrap) {
  ResponseQueue q;
  EXPECT_TRUE(q.empty());
  // Walk the head most of the way round so later entries wrap.
  for (uint32_t i = 0; i < ResponseQueue::kCapacity - 3; ++i) {
    q.push_back(at_psn(i));
    q.pop_front();
  }
  for (uint32_t psn = 100; psn < 110; ++psn) q.push_back(at_psn(psn));
  EXPECT_EQ(q.size(), 10u);
  EXPECT_EQ(q.front().psn, 100u);
  EXPECT_EQ(q.back().psn, 109u);
  q.insert(2, at_psn(7));  // in the middle, across the wrap
  q.erase(0);
  EXPECT_EQ(psns(q), (std::vector<uint32_t>{101, 7, 102, 103, 104, 105, 106, 107, 108, 109}));
  q.erase(q.size() - 1);
  q.insert(q.size(), at_psn(200));
  EXPECT_EQ(q.back().psn, 200u);
  q.clear();
  EXPECT_TRUE(q.empty());
}

TEST(ResponseQueue, FullAtCapacity) {
  ResponseQueue q;
  for (uint32_t i = 0; i < ResponseQueue::kCapacity; ++i) {
    EXPECT_FALSE(q.full());
    q.push_back(at_psn(i));
  }
  EXPECT_TRUE(q.full());
  q.pop_front();
  EXPECT_FALSE(q.full());
  q.insert(0, at_psn(999));
  EXPECT_EQ(q.front().psn, 999u);
  EXPECT_EQ(q[1].psn, 1u);
  EXPECT_EQ(q.back().psn, ResponseQueue::kCapacity - 1);
}

TEST(LoopbackPort, FullRingRefusesAndKeepsOrder) {
  net::LoopbackPort port;
  constexpr uint32_t kCap = net::LoopbackPort::kCapacity;
  std::vector<net::Packet> frames(16);  // queued again and again: the order is by position
  auto frame = [&](uint32_t i) { return &frames[i % frames.size()]; };
  for (uint32_t i = 0; i < kCap; ++i) ASSERT_TRUE(port.tx(frame(i)));
  EXPECT_FALSE(port.tx(frame(kCap)));  // full: the caller keeps it
  EXPECT_EQ(port.depth(), kCap);
  EXPECT_EQ(port.tx_packets(), kCap);
  net::Packet* out[8];
  ASSERT_EQ(port.rx_burst(out, 8), 8u);
  for (uint32_t i = 0; i < 8; ++i) EXPECT_EQ(out[i], frame(i));
  EXPECT_TRUE(port.tx(frame(kCap)));  // room again, behind the rest
  uint32_t total = 8;
  for (size_t n; (n = port.rx_burst(out, 8)) != 0; total += uint32_t(n))
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], frame(total + uint32_t(i)));
  EXPECT_EQ(total, kCap + 1);
  EXPECT_EQ(port.rx_packets(), kCap + 1);
  EXPECT_FALSE(port.pending());
}

}  // namespace
}  // namespace uroce::device
