// device/flow_steering: which rules get a frame (man ibv_create_flow(3) and
// the kernel's drivers/infiniband/hw/mlx5/fs.c): priority
// order, DONT_TRAP, DROP, multicast to every rule of the winning priority,
// SNIFFER copies, the default rules, and the sender never getting its own.
#include "device/flow_steering.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace uroce::device {
namespace {

constexpr uint8_t kMac[6] = {0x02, 1, 2, 3, 4, 5};

net::FrameFields frame(bool multicast = false) {
  net::FrameFields f;
  std::memcpy(f.key.dst_mac, kMac, 6);
  f.protocols = abi::kFlowEth;
  f.multicast = multicast;
  return f;
}

class Steering : public ::testing::Test {
 protected:
  uint32_t rule(uint32_t qpn, ibv_flow_attr_type type = IBV_FLOW_ATTR_NORMAL, uint32_t prio = 0,
                bool dont_trap = false, bool drop = false) {
    auto f = std::make_unique<Flow>();
    f->target = {FlowTarget::Kind::kQp, qpn};
    f->type = type;
    f->priority = prio;
    f->dont_trap = dont_trap;
    f->drop = drop;
    if (type == IBV_FLOW_ATTR_NORMAL) {
      std::memcpy(f->match.value.dst_mac, kMac, 6);
      std::memset(f->match.mask.dst_mac, 0xff, 6);
      f->match.protocols = abi::kFlowEth;
    }
    return s_.add(std::move(f));
  }
  // The QPNs that get the frame, in delivery order.
  std::vector<uint32_t> steer(const net::FrameFields& f, uint32_t from = 0, bool leftovers = true) {
    got_.clear();
    const FlowTarget sender{FlowTarget::Kind::kQp, from};
    result_ = s_.steer(f, from ? &sender : nullptr, leftovers,
                       [&](const Flow& r) { got_.push_back(r.target.id); });
    return got_;
  }
  using V = std::vector<uint32_t>;
  FlowSteering s_;
  std::vector<uint32_t> got_;
  FlowSteering::Steered result_{};
};

TEST_F(Steering, LowestPriorityNumberWinsOldestAmongEquals) {
  rule(10, IBV_FLOW_ATTR_NORMAL, 3);
  const uint32_t h = rule(11, IBV_FLOW_ATTR_NORMAL, 1);
  rule(12, IBV_FLOW_ATTR_NORMAL, 1);
  EXPECT_EQ(steer(frame()), V({11}));
  EXPECT_EQ(result_, FlowSteering::Steered::kTrapped);
  EXPECT_EQ(steer(frame(true)), V({11, 12}));  // multicast: the whole priority
  s_.remove(h);
  EXPECT_EQ(steer(frame()), V({12}));
  EXPECT_EQ(s_.rules_on({FlowTarget::Kind::kQp, 10}), 1u);
}

TEST_F(Steering, DontTrapCopiesAndPassesOn) {
  rule(10, IBV_FLOW_ATTR_NORMAL, 0, true);
  EXPECT_EQ(steer(frame()), V({10}));
  EXPECT_EQ(result_, FlowSteering::Steered::kPass);  // the engine still sees it
  rule(11, IBV_FLOW_ATTR_NORMAL, 2);
  EXPECT_EQ(steer(frame()), V({10, 11}));
  EXPECT_EQ(result_, FlowSteering::Steered::kTrapped);
}

TEST_F(Steering, DropEndsTheSearchUnlessDontTrap) {
  rule(10, IBV_FLOW_ATTR_NORMAL, 5);
  rule(11, IBV_FLOW_ATTR_NORMAL, 1, false, true);
  EXPECT_EQ(steer(frame()), V({}));
  EXPECT_EQ(result_, FlowSteering::Steered::kDropped);
}

TEST_F(Steering, SnifferAndDefaults) {
  rule(20, IBV_FLOW_ATTR_SNIFFER);
  rule(21, IBV_FLOW_ATTR_ALL_DEFAULT);
  EXPECT_EQ(steer(frame()), V({20, 21}));
  EXPECT_EQ(result_, FlowSteering::Steered::kTrapped);
  EXPECT_EQ(steer(frame(), 0, false), V({20}));  // the engine's own traffic: no leftovers
  EXPECT_EQ(result_, FlowSteering::Steered::kPass);
  rule(22, IBV_FLOW_ATTR_MC_DEFAULT);
  EXPECT_EQ(steer(frame(true)), V({20, 22}));
  rule(10);
  EXPECT_EQ(steer(frame()), V({20, 10}));
}

TEST_F(Steering, SenderNeverGetsItsOwnFrameAndEachTargetOnce) {
  rule(10, IBV_FLOW_ATTR_NORMAL, 0, true);
  rule(10, IBV_FLOW_ATTR_NORMAL, 1);
  rule(11, IBV_FLOW_ATTR_NORMAL, 2);
  EXPECT_EQ(steer(frame()), V({10}));  // two rules of QP 10: one copy
  EXPECT_EQ(steer(frame(), 10), V({11}));
}

}  // namespace
}  // namespace uroce::device
