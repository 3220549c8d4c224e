// Per-port fault injection for testing applications over uroce: frames on
// their way to a port are dropped, duplicated, reordered or corrupted with
// configured probabilities, and delayed by a fixed time. Settable at start and
// changeable at run time (configure()); a counter per fault kind.
//
// Datapath: owned by the engine thread, no exceptions, no allocation once
// warm (the hold queue is reserved up front; when it is full, frames pass
// undelayed and are counted).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "net/packet.h"

namespace uroce::net {

struct FaultConfig {
  double drop = 0;       // probability that a frame is discarded
  double duplicate = 0;  // ... sent twice
  double reorder = 0;    // ... held back until the next frame has gone out
  double corrupt = 0;    // ... has one byte of its transport part (BTH .. payload) altered
  uint64_t delay_us = 0;  // added to every frame
  // A reordered frame no later frame overtakes within this time goes out
  // anyway (a reorder never stalls a flow for longer).
  uint64_t reorder_max_hold_us = 1000;
  // 0: seeded from the system's entropy; otherwise a fixed sequence (tests).
  uint64_t seed = 0;
};

// Checks ranges (probabilities 0..1, finite); "" if valid.
std::string validate(const FaultConfig& config);

#define UROCE_FAULT_COUNTERS(X)                                                           \
  X(frames, "frames seen by the fault injector")                                          \
  X(dropped, "frames dropped on purpose")                                                  \
  X(duplicated, "extra copies sent")                                                       \
  X(reordered, "frames held back behind the next one")                                    \
  X(corrupted, "frames with a transport byte altered (the receiver's ICRC check drops them)") \
  X(not_corruptible, "frames picked for corruption that are not RoCEv2 (sent unaltered)") \
  X(delayed, "frames held for the configured delay")                                      \
  X(hold_full, "frames sent without their delay: the hold queue was full")

struct FaultCounters {
#define UROCE_FAULT_COUNTER_FIELD(name, desc) uint64_t name = 0;
  UROCE_FAULT_COUNTERS(UROCE_FAULT_COUNTER_FIELD)
#undef UROCE_FAULT_COUNTER_FIELD
};

class FaultInjector {
 public:
  static constexpr size_t kDefaultMaxHeld = 8192;

  explicit FaultInjector(const FaultConfig& config = {}, size_t max_held = kDefaultMaxHeld);

  // Control path: replaces the settings (frames already held keep their
  // release times). A seed other than 0 restarts the random sequence.
  // Returns "" or why the config was refused (then nothing changes).
  std::string configure(const FaultConfig& config);
  const FaultConfig& config() const { return config_; }
  // False when every probability and the delay are zero: the port may skip
  // the injector (frames held from an earlier config still need releasing).
  bool active() const { return active_; }

  // Takes p (built and finished: the frame is final). Appends to out_now the
  // frames to transmit now, in order: p, a copy of it from pool, a frame
  // held for reordering, or nothing; a dropped p goes back to pool.
  void on_tx(Packet* p, uint64_t now_ns, std::vector<Packet*>& out_now, PacketPool& pool);
  // Appends the held frames whose time has come, in release order.
  void release_due(uint64_t now_ns, std::vector<Packet*>& out);
  // Earliest time release_due() has a frame; 0 when none is held.
  uint64_t next_due_ns() const;
  size_t held() const { return heap_.size() + (reorder_slot_ ? 1 : 0); }
  // Shutdown: returns every held frame to pool.
  void discard_held(PacketPool& pool);

  const FaultCounters& counters() const { return counters_; }

 private:
  struct Held {
    uint64_t due_ns;
    uint64_t seq;  // ties keep arrival order
    Packet* p;
  };
  uint64_t next_random();
  bool chance(double probability) {
    return probability > 0 && double(next_random() >> 11) * 0x1.0p-53 < probability;
  }
  void corrupt(Packet& p);
  // Sends p now or holds it for the configured delay.
  void emit(Packet* p, uint64_t now_ns, std::vector<Packet*>& out_now);
  void hold(Packet* p, uint64_t due_ns, std::vector<Packet*>& out_now);

  FaultConfig config_;
  bool active_ = false;
  uint64_t rng_[4] = {};  // xoshiro256**
  size_t max_held_;
  std::vector<Held> heap_;  // min-heap by (due_ns, seq)
  uint64_t seq_ = 0;
  uint64_t last_due_ns_ = 0;  // release times only grow: held frames stay in order
  Packet* reorder_slot_ = nullptr;
  uint64_t reorder_deadline_ns_ = 0;
  FaultCounters counters_;
};

}  // namespace uroce::net
