// Tests for emulator/wire_moderation.h: a burst that came quickly makes the
// engine nap on its timer; a frame or two, or many counted over a long
// awake time (a ping-pong the engine spun through), wait on the socket.
#include "emulator/wire_moderation.h"

#include <gtest/gtest.h>

namespace uroce::emulator {
namespace {

constexpr uint64_t kBurst = WireModeration::kBurstFrames;
constexpr uint64_t kWithin = WireModeration::kBurstWithinNs;

TEST(WireModeration, ABurstInAShortAwakeTimeNaps) {
  EXPECT_EQ(WireModeration::nap_ns(kBurst, 20'000), WireModeration::kNapNs);
  EXPECT_EQ(WireModeration::nap_ns(1000, kWithin), WireModeration::kNapNs);
}

TEST(WireModeration, FewFramesWaitOnTheSocket) {
  EXPECT_EQ(WireModeration::nap_ns(0, 0), 0u);
  EXPECT_EQ(WireModeration::nap_ns(1, 1'000), 0u) << "one-frame ping-pong: woken by each frame";
  EXPECT_EQ(WireModeration::nap_ns(kBurst - 1, 1'000), 0u);
}

TEST(WireModeration, ManyFramesOverALongAwakeTimeWaitOnTheSocket) {
  EXPECT_EQ(WireModeration::nap_ns(5000, kWithin + 1), 0u);
  EXPECT_EQ(WireModeration::nap_ns(5000, 2'000'000'000), 0u);
}

}  // namespace
}  // namespace uroce::emulator
