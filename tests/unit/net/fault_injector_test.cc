// Tests for net/fault_injector.cc: rates within statistical bounds for a
// fixed seed, corruption the ICRC check catches, reordering, delay release
// order, run-time changes and the bounded hold queue.
#include "net/fault_injector.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <vector>

#include "net/arp.h"

namespace uroce::net {
namespace {

constexpr uint64_t kUs = 1000;

// RC SEND ONLY frames numbered by PSN, so order is visible on the way out.
struct Frames {
  PacketPool pool;
  Packet* make(uint32_t psn, uint32_t payload = 64) {
    Packet* p = pool.get();
    begin_roce_packet(*p, 0x04);
    p->bth()->pkey = 0xffff;
    p->bth()->dest_qp = 0x11;
    p->bth()->ack_psn = psn;
    for (uint32_t i = 0; i < payload; ++i) p->payload()[i] = uint8_t(psn + i);
    p->payload_len = payload;
    Route r;
    r.src_ip = {10, 0, 0, 1};
    r.dst_ip = {10, 0, 0, 2};
    finish_roce_packet(*p, r);
    return p;
  }
};

std::vector<uint32_t> psns(const std::vector<Packet*>& ps) {
  std::vector<uint32_t> out;
  for (const Packet* p : ps) out.push_back(p->bth()->psn());
  return out;
}

// |count - n p| within 5 standard deviations of a binomial(n, p).
void expect_binomial(uint64_t count, uint64_t n, double p, const char* what) {
  const double mean = double(n) * p, sd = std::sqrt(double(n) * p * (1 - p));
  EXPECT_NEAR(double(count), mean, 5 * sd + 1) << what;
}

TEST(FaultInjector, InactiveConfigPassesFramesThrough) {
  Frames f;
  FaultInjector fi;
  EXPECT_FALSE(fi.active());
  std::vector<Packet*> out;
  for (uint32_t i = 0; i < 100; ++i) fi.on_tx(f.make(i), i, out, f.pool);
  ASSERT_EQ(out.size(), 100u);
  for (uint32_t i = 0; i < 100; ++i) EXPECT_EQ(out[i]->bth()->psn(), i);
  EXPECT_EQ(fi.held(), 0u);
  EXPECT_EQ(fi.next_due_ns(), 0u);
}

TEST(FaultInjector, ValidateRejectsOutOfRangeProbabilities) {
  EXPECT_EQ(validate(FaultConfig{}), "");
  EXPECT_NE(validate(FaultConfig{.drop = 1.5}), "");
  EXPECT_NE(validate(FaultConfig{.duplicate = -0.1}), "");
  EXPECT_NE(validate(FaultConfig{.corrupt = std::numeric_limits<double>::quiet_NaN()}), "");
  FaultInjector fi(FaultConfig{.drop = 0.5, .seed = 1});
  EXPECT_NE(fi.configure(FaultConfig{.reorder = 2}), "");
  EXPECT_EQ(fi.config().drop, 0.5);  // unchanged
}

TEST(FaultInjector, DropRateWithinBounds) {
  Frames f;
  FaultInjector fi(FaultConfig{.drop = 0.1, .seed = 42});
  std::vector<Packet*> out;
  constexpr uint64_t kN = 20000;
  for (uint32_t i = 0; i < kN; ++i) {
    fi.on_tx(f.make(i, 0), 0, out, f.pool);
    for (Packet* p : out) f.pool.put(p);
    out.clear();
  }
  expect_binomial(fi.counters().dropped, kN, 0.1, "dropped");
  EXPECT_EQ(fi.counters().frames, kN);
  // Dropped frames went back to the pool: it never grew past a few buffers.
  EXPECT_LE(f.pool.allocated(), 2u);
}

TEST(FaultInjector, DuplicatesAreExactCopiesSentAfterTheOriginal) {
  Frames f;
  FaultInjector fi(FaultConfig{.duplicate = 0.25, .seed = 7});
  constexpr uint64_t kN = 20000;
  uint64_t extra = 0;
  std::vector<Packet*> out;
  for (uint32_t i = 0; i < kN; ++i) {
    fi.on_tx(f.make(i), 0, out, f.pool);
    ASSERT_GE(out.size(), 1u);
    ASSERT_LE(out.size(), 2u);
    if (out.size() == 2) {
      ++extra;
      ASSERT_NE(out[0], out[1]);
      ASSERT_EQ(out[0]->len, out[1]->len);
      ASSERT_EQ(std::memcmp(out[0]->data, out[1]->data, out[0]->len), 0);
      ASSERT_EQ(parse_roce_packet(*out[1], true), ParseError::kOk);
    }
    for (Packet* p : out) f.pool.put(p);
    out.clear();
  }
  EXPECT_EQ(extra, fi.counters().duplicated);
  expect_binomial(extra, kN, 0.25, "duplicated");
}

TEST(FaultInjector, EveryCorruptedFrameFailsTheReceiverCheck) {
  Frames f;
  FaultInjector fi(FaultConfig{.corrupt = 0.3, .seed = 99});
  constexpr uint64_t kN = 20000;
  uint64_t bad = 0;
  std::vector<Packet*> out;
  for (uint32_t i = 0; i < kN; ++i) {
    fi.on_tx(f.make(i, i % 200), 0, out, f.pool);
    ASSERT_EQ(out.size(), 1u);
    if (parse_roce_packet(*out[0], true) != ParseError::kOk) ++bad;
    f.pool.put(out[0]);
    out.clear();
  }
  // Exactly the corrupted frames fail: none slips through, none extra.
  EXPECT_EQ(bad, fi.counters().corrupted);
  expect_binomial(bad, kN, 0.3, "corrupted");
}

TEST(FaultInjector, CorruptionLeavesEthernetIpAndUdpIntact) {
  Frames f;
  FaultInjector fi(FaultConfig{.corrupt = 1, .seed = 3});
  std::vector<Packet*> out;
  for (uint32_t i = 0; i < 500; ++i) {
    Packet* p = f.make(i, 32);
    Packet before = *p;
    fi.on_tx(p, 0, out, f.pool);
    ASSERT_EQ(std::memcmp(before.data, p->data, before.bth_off), 0);
    ASSERT_NE(std::memcmp(before.data, p->data, before.len), 0);
    f.pool.put(p);
    out.clear();
  }
}

TEST(FaultInjector, NonRoceFramesAreNotCorrupted) {
  Frames f;
  FaultInjector fi(FaultConfig{.corrupt = 1, .seed = 3});
  Packet* arp = f.pool.get();
  build_arp_request(*arp, {2, 0, 0, 0, 0, 1}, {10, 0, 0, 1}, {10, 0, 0, 2});
  Packet before = *arp;
  std::vector<Packet*> out;
  fi.on_tx(arp, 0, out, f.pool);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(std::memcmp(before.data, arp->data, arp->len), 0);
  EXPECT_EQ(fi.counters().not_corruptible, 1u);
  EXPECT_EQ(fi.counters().corrupted, 0u);
}

TEST(FaultInjector, ReorderedFrameGoesOutAfterTheNextOne) {
  Frames f;
  FaultInjector fi(FaultConfig{.reorder = 1, .reorder_max_hold_us = 50, .seed = 5});
  std::vector<Packet*> out;
  fi.on_tx(f.make(1), 0, out, f.pool);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(fi.held(), 1u);
  fi.on_tx(f.make(2), 1 * kUs, out, f.pool);  // 2 overtakes 1
  EXPECT_EQ(psns(out), (std::vector<uint32_t>{2, 1}));
  out.clear();
  fi.on_tx(f.make(3), 2 * kUs, out, f.pool);  // held, nothing follows
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(fi.next_due_ns(), 52 * kUs);
  fi.release_due(51 * kUs, out);
  EXPECT_TRUE(out.empty());
  fi.release_due(52 * kUs, out);
  EXPECT_EQ(psns(out), std::vector<uint32_t>{3});
  EXPECT_EQ(fi.counters().reordered, 2u);
}

TEST(FaultInjector, ReorderRateWithinBoundsAndNothingLost) {
  Frames f;
  FaultInjector fi(FaultConfig{.reorder = 0.1, .seed = 11});
  constexpr uint32_t kN = 20000;
  std::vector<Packet*> out;
  std::vector<uint32_t> seen;
  for (uint32_t i = 0; i < kN; ++i) {
    fi.on_tx(f.make(i, 0), i * kUs, out, f.pool);
    fi.release_due(i * kUs, out);
    for (Packet* p : out) {
      seen.push_back(p->bth()->psn());
      f.pool.put(p);
    }
    out.clear();
  }
  fi.release_due(uint64_t(kN) * kUs + 1'000'000 * kUs, out);
  for (Packet* p : out) seen.push_back(p->bth()->psn());
  ASSERT_EQ(seen.size(), kN);
  EXPECT_EQ(std::set<uint32_t>(seen.begin(), seen.end()).size(), size_t(kN));
  uint64_t inversions = 0;
  for (size_t i = 1; i < seen.size(); ++i) inversions += seen[i] < seen[i - 1];
  EXPECT_EQ(inversions, fi.counters().reordered);
  // A frame right after a reordered one is never itself reordered: p' = p(1-p) per frame.
  expect_binomial(fi.counters().reordered, kN, 0.1 / 1.1, "reordered");
}

TEST(FaultInjector, DelayedFramesReleaseInOrderAtTheirTime) {
  Frames f;
  FaultInjector fi(FaultConfig{.delay_us = 100, .seed = 1});
  std::vector<Packet*> out;
  for (uint32_t i = 0; i < 5; ++i) fi.on_tx(f.make(i), i * 10 * kUs, out, f.pool);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(fi.held(), 5u);
  EXPECT_EQ(fi.next_due_ns(), 100 * kUs);
  fi.release_due(99 * kUs, out);
  EXPECT_TRUE(out.empty());
  fi.release_due(125 * kUs, out);
  EXPECT_EQ(psns(out), (std::vector<uint32_t>{0, 1, 2}));
  out.clear();
  fi.release_due(1000 * kUs, out);
  EXPECT_EQ(psns(out), (std::vector<uint32_t>{3, 4}));
  EXPECT_EQ(fi.counters().delayed, 5u);
  EXPECT_EQ(fi.next_due_ns(), 0u);
}

TEST(FaultInjector, ShorterDelayAtRunTimeDoesNotReorder) {
  Frames f;
  FaultInjector fi(FaultConfig{.delay_us = 1000, .seed = 1});
  std::vector<Packet*> out;
  fi.on_tx(f.make(1), 0, out, f.pool);
  ASSERT_EQ(fi.configure(FaultConfig{.delay_us = 10}), "");
  fi.on_tx(f.make(2), 1 * kUs, out, f.pool);
  fi.release_due(500 * kUs, out);
  EXPECT_TRUE(out.empty());  // 2 waits behind 1
  fi.release_due(1000 * kUs, out);
  EXPECT_EQ(psns(out), (std::vector<uint32_t>{1, 2}));
  // Switched off: frames pass at once again.
  ASSERT_EQ(fi.configure(FaultConfig{}), "");
  EXPECT_FALSE(fi.active());
  out.clear();
  fi.on_tx(f.make(3), 2000 * kUs, out, f.pool);
  EXPECT_EQ(psns(out), std::vector<uint32_t>{3});
}

TEST(FaultInjector, FullHoldQueueSendsAtOnceAndCounts) {
  Frames f;
  FaultInjector fi(FaultConfig{.delay_us = 100, .seed = 1}, /*max_held=*/2);
  std::vector<Packet*> out;
  for (uint32_t i = 0; i < 3; ++i) fi.on_tx(f.make(i), 0, out, f.pool);
  EXPECT_EQ(psns(out), std::vector<uint32_t>{2});
  EXPECT_EQ(fi.counters().hold_full, 1u);
  fi.discard_held(f.pool);
  EXPECT_EQ(fi.held(), 0u);
}

TEST(FaultInjector, SameSeedSameDecisions) {
  auto run = [](uint64_t seed) {
    Frames f;
    FaultInjector fi(FaultConfig{.drop = 0.2, .duplicate = 0.2, .reorder = 0.2, .corrupt = 0.2,
                                 .seed = seed});
    std::vector<Packet*> out;
    std::vector<uint32_t> trace;
    for (uint32_t i = 0; i < 2000; ++i) {
      fi.on_tx(f.make(i, 16), i * kUs, out, f.pool);
      fi.release_due(i * kUs, out);
      for (Packet* p : out) {
        trace.push_back(p->bth()->psn() << 1 | (parse_roce_packet(*p, true) != ParseError::kOk));
        f.pool.put(p);
      }
      out.clear();
    }
    return trace;
  };
  EXPECT_EQ(run(1234), run(1234));
  EXPECT_NE(run(1234), run(4321));
}

TEST(FaultInjector, EverythingAtOnceConservesFrames) {
  Frames f;
  FaultInjector fi(FaultConfig{.drop = 0.05, .duplicate = 0.05, .reorder = 0.1, .corrupt = 0.05,
                               .delay_us = 20, .seed = 77});
  constexpr uint32_t kN = 10000;
  std::vector<Packet*> out;
  uint64_t emitted = 0;
  for (uint32_t i = 0; i < kN; ++i) {
    fi.on_tx(f.make(i, 8), i * kUs, out, f.pool);
    fi.release_due(i * kUs, out);
    emitted += out.size();
    for (Packet* p : out) f.pool.put(p);
    out.clear();
  }
  fi.release_due(uint64_t(kN + 10'000) * kUs, out);
  emitted += out.size();
  const FaultCounters& c = fi.counters();
  EXPECT_EQ(emitted, kN - c.dropped + c.duplicated);
  EXPECT_EQ(fi.held(), 0u);
}

}  // namespace
}  // namespace uroce::net
