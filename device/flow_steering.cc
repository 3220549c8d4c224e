// Flow steering rules: insertion keeps the NORMAL rules in priority order so
// that steering a frame is one ordered walk (control path: may allocate).
#include "device/flow_steering.h"

#include <algorithm>

namespace uroce::device {

uint32_t FlowSteering::add(std::unique_ptr<Flow> flow) {
  flow->seq = next_seq_++;
  const uint32_t h = flows_.insert(std::move(flow));
  ++count_;
  reorder();
  return h;
}

void FlowSteering::remove(uint32_t handle) {
  if (!flows_.get(handle)) return;
  flows_.erase(handle);
  --count_;
  reorder();
}

uint32_t FlowSteering::rules_on(const FlowTarget& t) const {
  uint32_t n = 0;
  flows_.for_each([&](uint32_t, const Flow& f) { n += f.target == t; });
  return n;
}

void FlowSteering::reorder() {
  normal_.clear();
  sniffers_.clear();
  all_default_.clear();
  mc_default_.clear();
  flows_.for_each([&](uint32_t, Flow& f) {
    switch (f.type) {
      case IBV_FLOW_ATTR_NORMAL: normal_.push_back(&f); break;
      case IBV_FLOW_ATTR_ALL_DEFAULT: all_default_.push_back(&f); break;
      case IBV_FLOW_ATTR_MC_DEFAULT: mc_default_.push_back(&f); break;
      case IBV_FLOW_ATTR_SNIFFER: sniffers_.push_back(&f); break;
    }
  });
  auto by_seq = [](const Flow* a, const Flow* b) { return a->seq < b->seq; };
  std::sort(normal_.begin(), normal_.end(), [](const Flow* a, const Flow* b) {
    return a->priority != b->priority ? a->priority < b->priority : a->seq < b->seq;
  });
  std::sort(sniffers_.begin(), sniffers_.end(), by_seq);
  std::sort(all_default_.begin(), all_default_.end(), by_seq);
  std::sort(mc_default_.begin(), mc_default_.end(), by_seq);
}

}  // namespace uroce::device
