// Flow steering (ibv_create_flow): the rules applications attach to raw
// packet QPs, and the decision, per Ethernet frame, of which receive
// targets get it and whether the engine's own path (RoCE, the wire) still
// sees it. Rules from man ibv_create_flow and mlx5 (kernel hw/mlx5/fs.c).
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "device/objects.h"
#include "net/frame_match.h"

namespace uroce::device {

// mlx5: user priorities 0..15 (MLX5_IB_FLOW_LAST_PRIO); beyond is ENOMEM.
constexpr uint32_t kMaxFlowPriority = 15;
constexpr uint32_t kMaxFlowsPerDevice = 1u << 14;
// ibv_create_flow's specs, as the kernel bounds them (ib_uverbs_ex_create_flow).
constexpr uint32_t kMaxFlowSpecs = 10;
constexpr uint32_t kFlowTagMask = 0x00ffffff;  // mlx5 reports 24 bits

// Where a rule delivers: a raw packet QP's receive queue. The receive path
// (device/raw_packet.cc) takes a target, not a QP, so that WQs and RSS
// indirection tables can become targets beside it.
struct FlowTarget {
  enum class Kind : uint8_t { kQp, kRss };
  Kind kind = Kind::kQp;
  uint32_t id = 0;  // the QPN (kRss: of an RSS QP, which hashes to a WQ)
  bool operator==(const FlowTarget&) const = default;
};

struct Flow {
  Owner* owner = nullptr;
  FlowTarget target;
  ibv_flow_attr_type type = IBV_FLOW_ATTR_NORMAL;
  uint32_t priority = 0;
  bool dont_trap = false;
  bool drop = false;
  bool has_tag = false;
  uint32_t tag = 0;
  net::FrameMatch match;
  uint64_t seq = 0;  // creation order: the tie-break at equal priority
  uint64_t hits = 0, dropped = 0;
};

class FlowSteering {
 public:
  bool active() const { return count_ != 0; }
  bool has_sniffers() const { return !sniffers_.empty(); }
  // A frame the engine itself sends out of the wire port: SNIFFER rules see
  // it (mlx5 sniffers see the port's transmitted traffic too).
  template <typename Deliver>
  void sniff(Deliver&& deliver) {
    for (Flow* r : sniffers_) {
      ++r->hits;
      deliver(static_cast<const Flow&>(*r));
    }
  }
  size_t count() const { return count_; }
  uint32_t add(std::unique_ptr<Flow> flow);  // returns the handle
  void remove(uint32_t handle);
  Flow* get(uint32_t handle) const { return flows_.get(handle); }
  uint32_t rules_on(const FlowTarget& t) const;
  template <typename Fn>
  void for_each(Fn fn) const { flows_.for_each(fn); }

  // Decides where one frame goes: deliver(const Flow&) for every rule that
  // gets a copy, at most once per target; `from` (the sending QP of a frame
  // a raw QP sent, or none for a received one) never receives its own frame.
  // leftovers: the default rules (ALL_DEFAULT, MC_DEFAULT) may take it if no
  // NORMAL rule does: a frame the port received, or one sent to the
  // engine's own MAC, that the engine does not serve (not RoCE to it).
  enum class Steered : uint8_t { kPass, kTrapped, kDropped };
  template <typename Deliver>
  Steered steer(const net::FrameFields& f, const FlowTarget* from, bool leftovers,
             Deliver&& deliver);

 private:
  void reorder();

  Table<Flow> flows_;
  size_t count_ = 0;
  uint64_t next_seq_ = 0;
  std::vector<Flow*> normal_;  // by priority, then creation
  std::vector<Flow*> sniffers_, all_default_, mc_default_;
};

template <typename Deliver>
FlowSteering::Steered FlowSteering::steer(const net::FrameFields& f, const FlowTarget* from, bool leftovers,
                         Deliver&& deliver) {
  FlowTarget seen[16];
  size_t nseen = 0;
  auto give = [&](Flow& r) {
    if (from && r.target == *from) return false;
    for (size_t i = 0; i < nseen; ++i)
      if (seen[i] == r.target) return false;
    if (nseen < 16) seen[nseen++] = r.target;
    ++r.hits;
    deliver(static_cast<const Flow&>(r));
    return true;
  };
  // SNIFFER: a copy of everything, received and sent (mlx5 sniffer rules).
  for (Flow* r : sniffers_) give(*r);
  // NORMAL rules, highest priority (lowest number) first. A DONT_TRAP rule
  // takes a copy and lets lower priorities and the engine see the frame; the
  // first trapping priority ends the search. At one priority a multicast
  // frame reaches every matching rule, a unicast one the oldest.
  constexpr uint32_t kNone = ~0u;
  uint32_t trapped_at = kNone;
  for (Flow* r : normal_) {
    if (trapped_at != kNone && r->priority > trapped_at) break;
    if (!net::frame_matches(r->match, f)) continue;
    if (r->drop) {
      ++r->dropped;
      if (!r->dont_trap) return Steered::kDropped;  // nobody else sees it
      continue;
    }
    if (trapped_at != kNone && !r->dont_trap && !f.multicast) continue;
    if (from && r->target == *from) continue;
    give(*r);
    if (!r->dont_trap) trapped_at = r->priority;
  }
  if (trapped_at != kNone) return Steered::kTrapped;
  // Leftovers (ALL_DEFAULT, MC_DEFAULT): what no rule took.
  if (!leftovers) return Steered::kPass;
  const std::vector<Flow*>& defaults =
      f.multicast && !mc_default_.empty() ? mc_default_ : all_default_;
  for (Flow* r : defaults) give(*r);
  return defaults.empty() ? Steered::kPass : Steered::kTrapped;
}

}  // namespace uroce::device
