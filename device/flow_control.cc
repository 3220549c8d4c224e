// ibv_create_flow / ibv_destroy_flow: the checks of the kernel
// (ib_uverbs_ex_create_flow) and of mlx5 (hw/mlx5/fs.c mlx5_ib_create_flow)
// on a rule the provider has already parsed into an abi::FlowKey pair
// (errors as man ibv_create_flow(3) lists them). Control path.
#include <cerrno>

#include "device/device.h"

namespace uroce::device {

namespace {

constexpr uint32_t kKnownFlowFlags = IBV_FLOW_ATTR_FLAGS_DONT_TRAP | IBV_FLOW_ATTR_FLAGS_EGRESS;

int check_flow(const abi::CreateFlowRequest& req) {
  if (req.type > IBV_FLOW_ATTR_SNIFFER) return EINVAL;
  if (req.flags & ~kKnownFlowFlags) return EINVAL;
  if (req.num_specs > kMaxFlowSpecs) return EINVAL;  // kernel: at most 10 specs
  const bool leftovers = req.type == IBV_FLOW_ATTR_ALL_DEFAULT || req.type == IBV_FLOW_ATTR_MC_DEFAULT;
  // Kernel: DONT_TRAP only with NORMAL rules' kin (not the leftovers).
  if ((req.flags & IBV_FLOW_ATTR_FLAGS_DONT_TRAP) && leftovers) return EINVAL;
  if (req.flags & IBV_FLOW_ATTR_FLAGS_EGRESS) {
    // mlx5: egress rules are NORMAL only, and exist for its packet-reformat
    // and IPsec actions, which generic verbs do not reach.
    return req.type == IBV_FLOW_ATTR_NORMAL ? EOPNOTSUPP : EINVAL;
  }
  if (req.port != 1) return EINVAL;
  // mlx5: a flow tag on the leftovers is EINVAL; priority past the last
  // bypass priority is ENOMEM (not EINVAL).
  if ((req.actions & abi::kFlowActionTag) && leftovers) return EINVAL;
  if ((req.actions & abi::kFlowActionTag) && (req.actions & abi::kFlowActionDrop)) return EINVAL;
  if (req.actions & ~uint32_t(abi::kFlowActionTag | abi::kFlowActionDrop)) return EOPNOTSUPP;
  if (req.type == IBV_FLOW_ATTR_NORMAL && req.priority > kMaxFlowPriority) return ENOMEM;
  const uint32_t known = abi::kFlowEth | abi::kFlowVlan | abi::kFlowIpv4 | abi::kFlowIpv6 |
                         abi::kFlowTcp | abi::kFlowUdp;
  if (req.protocols & ~known) return EOPNOTSUPP;
  if ((req.protocols & abi::kFlowIpv4) && (req.protocols & abi::kFlowIpv6)) return EINVAL;
  if ((req.protocols & abi::kFlowTcp) && (req.protocols & abi::kFlowUdp)) return EINVAL;
  return 0;
}

}  // namespace

Result<uint32_t> Device::create_flow(Owner* o, uint32_t qpn, const abi::CreateFlowRequest& req) {
  Qp* q = qp(qpn);
  if (!q || q->owner != o) return {EINVAL};
  // Kernel: steering is for UD and raw packet QPs; mlx5 steers UD only on
  // IPoIB, which a RoCE port has not.
  if (q->type == IBV_QPT_UD) return {EOPNOTSUPP};
  if (q->type != IBV_QPT_RAW_PACKET) return {EINVAL};
  if (int err = check_flow(req)) return {err};
  if (steering_.count() >= kMaxFlowsPerDevice) return {ENOMEM};
  auto f = std::make_unique<Flow>();
  f->owner = o;
  f->target = {q->rss ? FlowTarget::Kind::kRss : FlowTarget::Kind::kQp, qpn};
  f->type = ibv_flow_attr_type(req.type);
  f->priority = req.type == IBV_FLOW_ATTR_NORMAL ? req.priority : 0;
  f->dont_trap = req.flags & IBV_FLOW_ATTR_FLAGS_DONT_TRAP;
  f->drop = req.actions & abi::kFlowActionDrop;
  f->has_tag = req.actions & abi::kFlowActionTag;
  f->tag = req.tag & kFlowTagMask;
  if (req.type == IBV_FLOW_ATTR_NORMAL) {
    // Values compared masked, whatever the client sent.
    const auto* v = reinterpret_cast<const uint8_t*>(&req.value);
    const auto* m = reinterpret_cast<const uint8_t*>(&req.mask);
    auto* mv = reinterpret_cast<uint8_t*>(&f->match.value);
    for (size_t i = 0; i < sizeof(abi::FlowKey); ++i) mv[i] = v[i] & m[i];
    f->match.mask = req.mask;
    f->match.protocols = req.protocols;
  }
  const uint32_t handle = steering_.add(std::move(f));
  wire_frames_changed();  // the first flow opens the port's filter to every frame
  return {0, handle};
}

int Device::destroy_flow(Owner* o, uint32_t handle) {
  const Flow* f = steering_.get(handle);
  if (!f || f->owner != o) return EINVAL;
  steering_.remove(handle);
  wire_frames_changed();
  return 0;
}

}  // namespace uroce::device
