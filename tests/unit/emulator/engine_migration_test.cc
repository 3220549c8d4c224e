// Tests for emulator/engine_migration.h: an engine moves off a CPU it shares
// with another engine only while it streams for sleeping clients and waits
// for that CPU, and comes back when any of that ends or it waits away too.
#include "emulator/engine_migration.h"

#include <gtest/gtest.h>

namespace uroce::emulator {
namespace {

using Move = EngineMigration::Move;
constexpr uint64_t kW = EngineMigration::kWindowNs;

// Running totals a test advances window by window.
struct Feed {
  EngineMigration m;
  EngineMigration::Sample s;
  uint64_t clients_total = 0;
  bool clients_known = true;
  bool shares = true;
  int asked = 0;         // times shares_home() was called
  int clients_read = 0;  // times clients_ns() was called

  // One window: frames, run delay and clients' CPU time during it.
  Move window(uint64_t frames, uint64_t delay_ns, uint64_t clients_ns, uint64_t length_ns = kW) {
    s.now_ns += length_ns;
    s.frames += frames;
    s.delay_ns += delay_ns;
    clients_total += clients_ns;
    return m.decide(
        s,
        [this](uint64_t* ns) {
          ++clients_read;
          *ns = clients_total;
          return clients_known;
        },
        [this] {
          ++asked;
          return shares;
        });
  }
  // A window that calls for a move away: a stream, half the window waiting
  // for the CPU, clients asleep.
  Move streaming() { return window(20'000, kW / 2, 0); }
};

TEST(EngineMigration, MovesAwayAfterTwoWindowsOfStreamingForSleepingClients) {
  Feed f;
  EXPECT_EQ(f.window(0, 0, 0), Move::kStay) << "the first sample only starts the count";
  EXPECT_EQ(f.window(100, 0, 0), Move::kStay);
  EXPECT_EQ(f.clients_read, 0) << "no frames: the clients' CPU time is not read";
  EXPECT_EQ(f.streaming(), Move::kStay) << "the first busy window only reads the clients' time";
  EXPECT_EQ(f.streaming(), Move::kStay) << "one window is not enough";
  EXPECT_EQ(f.asked, 0) << "the /proc scan waits until everything else says move";
  EXPECT_EQ(f.streaming(), Move::kAway);
  EXPECT_EQ(f.asked, 1);
  EXPECT_TRUE(f.m.away());
  EXPECT_EQ(f.streaming(), Move::kStay) << "away, still streaming: stays away";
}

TEST(EngineMigration, StaysHomeWithoutAnotherEngineThere) {
  Feed f;
  f.shares = false;
  f.window(0, 0, 0);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(f.streaming(), Move::kStay);
  EXPECT_FALSE(f.m.away());
}

TEST(EngineMigration, StaysHomeWhileItsClientsRunOrItGetsTheCpuOrIsIdle) {
  Feed busy_clients;
  busy_clients.window(0, 0, 0);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(busy_clients.window(20'000, kW / 2, kW / 2), Move::kStay);
  Feed undelayed;
  undelayed.window(0, 0, 0);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(undelayed.window(20'000, kW / 50, 0), Move::kStay);
  Feed idle;
  idle.window(0, 0, 0);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(idle.window(100, kW / 2, 0), Move::kStay);
  Feed unknown_clients;
  unknown_clients.window(0, 0, 0);
  unknown_clients.clients_known = false;
  for (int i = 0; i < 4; ++i) EXPECT_EQ(unknown_clients.streaming(), Move::kStay);
  EXPECT_EQ(busy_clients.asked + undelayed.asked + idle.asked + unknown_clients.asked, 0);
}

TEST(EngineMigration, AStreamBrokenByAQuietWindowStartsTheCountAgain) {
  Feed f;
  f.window(0, 0, 0);
  f.streaming();
  EXPECT_EQ(f.streaming(), Move::kStay);
  EXPECT_EQ(f.window(0, 0, 0), Move::kStay);
  EXPECT_EQ(f.streaming(), Move::kStay);
  EXPECT_EQ(f.streaming(), Move::kStay);
  EXPECT_EQ(f.streaming(), Move::kAway);
}

TEST(EngineMigration, AClientThatLeftCountsAsBusy) {
  Feed f;
  f.clients_total = 1'000'000'000;
  f.window(0, 0, 0);
  f.streaming();
  f.streaming();
  f.clients_total = 0;  // a client's process with all its CPU time gone
  EXPECT_EQ(f.streaming(), Move::kStay);
  EXPECT_EQ(f.streaming(), Move::kStay);
  EXPECT_EQ(f.streaming(), Move::kAway);
}

TEST(EngineMigration, GoesHomeWhenTheStreamEndsOrAClientWakes) {
  Feed ends;
  ends.window(0, 0, 0);
  ends.streaming();
  ends.streaming();
  ASSERT_EQ(ends.streaming(), Move::kAway);
  EXPECT_EQ(ends.window(10, 0, 0), Move::kHome);
  EXPECT_FALSE(ends.m.away());
  ends.streaming();
  ends.streaming();
  EXPECT_EQ(ends.streaming(), Move::kAway) << "no hold after a plain return";

  Feed wakes;
  wakes.window(0, 0, 0);
  wakes.streaming();
  wakes.streaming();
  ASSERT_EQ(wakes.streaming(), Move::kAway);
  EXPECT_EQ(wakes.window(20'000, 0, kW / 2), Move::kHome);
}

TEST(EngineMigration, CrowdedAwayTwiceGoesHomeAndHoldsThereLongerEachTime) {
  Feed f;
  f.window(0, 0, 0);
  f.streaming();
  f.streaming();
  ASSERT_EQ(f.streaming(), Move::kAway);
  EXPECT_EQ(f.window(20'000, kW / 2, 0), Move::kStay) << "one crowded window";
  EXPECT_EQ(f.window(20'000, kW / 2, 0), Move::kHome) << "the second in a row";
  // Held home for 5 s (25 windows), however much it streams.
  for (int i = 0; i < 24; ++i) ASSERT_EQ(f.streaming(), Move::kStay) << "window " << i;
  EXPECT_EQ(f.streaming(), Move::kStay);
  EXPECT_EQ(f.streaming(), Move::kAway) << "after the hold";
  f.streaming();
  ASSERT_EQ(f.window(20'000, kW / 2, 0), Move::kHome);
  // Then 10 s.
  int stayed = 0;
  while (f.streaming() == Move::kStay) ++stayed;
  EXPECT_GE(stayed, 49);
  EXPECT_LE(stayed, 52);
}

TEST(EngineMigration, FiguresAreTakenPerWindowOfTheTimeThatPassed) {
  // An engine that slept 2 s between two looks: 20,000 frames over 10
  // windows is 2,000 a window, busy; 2,000 is 200, not.
  Feed slow;
  slow.window(0, 0, 0);
  EXPECT_EQ(slow.window(20'000, 10 * kW / 2, 0, 10 * kW), Move::kStay);
  EXPECT_EQ(slow.window(20'000, 10 * kW / 2, 0, 10 * kW), Move::kStay);
  EXPECT_EQ(slow.window(20'000, 10 * kW / 2, 0, 10 * kW), Move::kAway);
  Feed quiet;
  quiet.window(0, 0, 0);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(quiet.window(2'000, 10 * kW / 2, 0, 10 * kW), Move::kStay);
}

}  // namespace
}  // namespace uroce::emulator
