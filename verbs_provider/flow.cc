// ibv_create_flow / ibv_destroy_flow (verbs_context ops): the application's
// specs parsed as libibverbs and the kernel parse them (rdma-core libibverbs/cmd.c
// ib_spec_to_kern_spec, the kernel's core/uverbs_cmd.c kern_spec_to_ib_spec_filter)
// into one abi::FlowKey of values and one of masks; the engine checks the
// rule as the kernel and mlx5 do (device/flow_control.cc).
#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

#include "verbs_provider/provider.h"

namespace uroce::provider {

namespace {

struct UFlow {
  ibv_flow flow;
};

// Copies a spec's value and mask into the key at `at` (both network order).
template <typename T>
void put(abi::CreateFlowRequest& r, size_t at, const T& val, const T& mask) {
  auto* v = reinterpret_cast<uint8_t*>(&r.value) + at;
  auto* m = reinterpret_cast<uint8_t*>(&r.mask) + at;
  const auto* sv = reinterpret_cast<const uint8_t*>(&val);
  const auto* sm = reinterpret_cast<const uint8_t*>(&mask);
  for (size_t i = 0; i < sizeof(T); ++i) {
    v[i] = sv[i] & sm[i];
    m[i] = sm[i];
  }
}

#define UROCE_KEY_AT(field) offsetof(abi::FlowKey, field)

// One spec into the request; 0 or the errno of ibv_create_flow.
int add_spec(const ibv_flow_spec& s, abi::CreateFlowRequest& r) {
  auto need = [&](size_t n) { return s.hdr.size >= n; };
  switch (uint32_t(s.hdr.type)) {
    case IBV_FLOW_SPEC_ETH: {
      if (!need(sizeof(s.eth))) return EINVAL;
      const ibv_flow_eth_filter &v = s.eth.val, &m = s.eth.mask;
      put(r, UROCE_KEY_AT(dst_mac), v.dst_mac, m.dst_mac);
      put(r, UROCE_KEY_AT(src_mac), v.src_mac, m.src_mac);
      put(r, UROCE_KEY_AT(ether_type), v.ether_type, m.ether_type);
      put(r, UROCE_KEY_AT(vlan_tag), v.vlan_tag, m.vlan_tag);
      r.protocols |= abi::kFlowEth;
      if (m.vlan_tag) r.protocols |= abi::kFlowVlan;  // mlx5: cvlan_tag 1
      return 0;
    }
    case IBV_FLOW_SPEC_IPV4: {
      if (!need(sizeof(s.ipv4))) return EINVAL;
      put(r, UROCE_KEY_AT(src_ip), s.ipv4.val.src_ip, s.ipv4.mask.src_ip);
      put(r, UROCE_KEY_AT(dst_ip), s.ipv4.val.dst_ip, s.ipv4.mask.dst_ip);
      r.protocols |= abi::kFlowIpv4;
      return 0;
    }
    case IBV_FLOW_SPEC_IPV4_EXT: {
      if (!need(sizeof(s.ipv4_ext))) return EINVAL;
      const ibv_flow_ipv4_ext_filter &v = s.ipv4_ext.val, &m = s.ipv4_ext.mask;
      put(r, UROCE_KEY_AT(src_ip), v.src_ip, m.src_ip);
      put(r, UROCE_KEY_AT(dst_ip), v.dst_ip, m.dst_ip);
      put(r, UROCE_KEY_AT(ip_proto), v.proto, m.proto);
      put(r, UROCE_KEY_AT(tos), v.tos, m.tos);
      put(r, UROCE_KEY_AT(ttl), v.ttl, m.ttl);
      put(r, UROCE_KEY_AT(ip_flags), v.flags, m.flags);
      r.protocols |= abi::kFlowIpv4;
      return 0;
    }
    case IBV_FLOW_SPEC_IPV6: {
      if (!need(sizeof(s.ipv6))) return EINVAL;
      const ibv_flow_ipv6_filter &v = s.ipv6.val, &m = s.ipv6.mask;
      // Kernel: a flow label needs 20 bits at most (kern_spec_to_ib_spec_filter).
      if (ntohl(v.flow_label) >= (1u << 20) || ntohl(m.flow_label) >= (1u << 20)) return EINVAL;
      put(r, UROCE_KEY_AT(src_ip), v.src_ip, m.src_ip);
      put(r, UROCE_KEY_AT(dst_ip), v.dst_ip, m.dst_ip);
      put(r, UROCE_KEY_AT(flow_label), v.flow_label, m.flow_label);
      put(r, UROCE_KEY_AT(ip_proto), v.next_hdr, m.next_hdr);
      put(r, UROCE_KEY_AT(tos), v.traffic_class, m.traffic_class);
      put(r, UROCE_KEY_AT(ttl), v.hop_limit, m.hop_limit);
      r.protocols |= abi::kFlowIpv6;
      return 0;
    }
    case IBV_FLOW_SPEC_TCP:
    case IBV_FLOW_SPEC_UDP: {
      if (!need(sizeof(s.tcp_udp))) return EINVAL;
      const ibv_flow_tcp_udp_filter &v = s.tcp_udp.val, &m = s.tcp_udp.mask;
      put(r, UROCE_KEY_AT(src_port), v.src_port, m.src_port);
      put(r, UROCE_KEY_AT(dst_port), v.dst_port, m.dst_port);
      r.protocols |= s.hdr.type == IBV_FLOW_SPEC_TCP ? abi::kFlowTcp : abi::kFlowUdp;
      return 0;
    }
    case IBV_FLOW_SPEC_ACTION_TAG:
      if (!need(sizeof(s.flow_tag))) return EINVAL;
      if (s.flow_tag.tag_id >= (1u << 24)) return EINVAL;  // mlx5: 24-bit tags
      r.actions |= abi::kFlowActionTag;
      r.tag = s.flow_tag.tag_id;
      return 0;
    case IBV_FLOW_SPEC_ACTION_DROP:
      if (!need(sizeof(s.drop))) return EINVAL;
      r.actions |= abi::kFlowActionDrop;
      return 0;
    // Known to libibverbs, not matched by this device (tunnels, ESP, MPLS,
    // inner headers, flow action handles and counters): as mlx5 without them.
    case IBV_FLOW_SPEC_ESP:
    case IBV_FLOW_SPEC_VXLAN_TUNNEL:
    case IBV_FLOW_SPEC_GRE:
    case IBV_FLOW_SPEC_MPLS:
    case IBV_FLOW_SPEC_ACTION_HANDLE:
    case IBV_FLOW_SPEC_ACTION_COUNT:
      return EOPNOTSUPP;
    default:
      if (s.hdr.type & IBV_FLOW_SPEC_INNER) return EOPNOTSUPP;
      return EINVAL;  // libibverbs: an unknown spec type
  }
}

ibv_flow* create_flow(ibv_qp* qp, ibv_flow_attr* attr) {
  // Kernel: comp_mask must be 0.
  if (attr->comp_mask) {
    errno = EINVAL;
    return nullptr;
  }
  abi::CreateFlowRequest req{};
  req.qp = qp->handle;
  req.type = attr->type;
  req.flags = attr->flags;
  req.priority = attr->priority;
  req.port = attr->port;
  req.num_specs = attr->num_of_specs;
  // The specs follow the attribute in memory, each starting with its type
  // and size; the kernel takes at most 10 (checked by the engine).
  // They are packed from attr + 1 (a 20-byte attribute), so a spec is only
  // 4-byte aligned where ibv_flow_spec wants 8: each is copied out before
  // its fields are read (UBSan: misaligned member access).
  const auto* at = reinterpret_cast<const uint8_t*>(attr + 1);
  for (uint32_t i = 0; i < attr->num_of_specs && i <= 10; ++i) {
    decltype(ibv_flow_spec::hdr) hdr;
    std::memcpy(&hdr, at, sizeof(hdr));
    if (hdr.size < sizeof(hdr)) {
      errno = EINVAL;
      return nullptr;
    }
    ibv_flow_spec spec{};
    std::memcpy(&spec, at, std::min<size_t>(hdr.size, sizeof(spec)));
    if (int err = add_spec(spec, req)) {
      errno = err;
      return nullptr;
    }
    at += hdr.size;
  }
  auto* f = new (std::nothrow) UFlow{};
  if (!f) {
    errno = ENOMEM;
    return nullptr;
  }
  abi::CreateFlowReply rep;
  if (int err = to_uctx(qp->context)->conn.call(abi::CtlOp::kCreateFlow, &req, sizeof(req), &rep,
                                                sizeof(rep))) {
    delete f;
    errno = err;
    return nullptr;
  }
  f->flow.context = qp->context;
  f->flow.handle = uint32_t(rep.handle);
  return &f->flow;
}

int destroy_flow(ibv_flow* flow) {
  abi::HandleRequest req{flow->handle};
  if (int err = to_uctx(flow->context)->conn.call(abi::CtlOp::kDestroyFlow, &req, sizeof(req), nullptr, 0))
    return err;
  delete reinterpret_cast<UFlow*>(flow);
  return 0;
}

}  // namespace

void fill_flow_ops(verbs_context* v) {
  v->ibv_create_flow = create_flow;
  v->ibv_destroy_flow = destroy_flow;
}

}  // namespace uroce::provider
