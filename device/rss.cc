// Receive indirection tables and RSS QPs: the control verbs with mlx5's
// checks (kernel drivers/infiniband/hw/mlx5/qp.c, create_rss_raw_qp_tir), and
// the datapath step that hashes a frame a flow gave an RSS QP and picks the
// WQ of its indirection table entry.
#include <cerrno>
#include <cstring>

#include "device/device.h"

namespace uroce::device {

namespace {

constexpr uint64_t kIpv4Fields = IBV_RX_HASH_SRC_IPV4 | IBV_RX_HASH_DST_IPV4;
constexpr uint64_t kIpv6Fields = IBV_RX_HASH_SRC_IPV6 | IBV_RX_HASH_DST_IPV6;
constexpr uint64_t kTcpFields = IBV_RX_HASH_SRC_PORT_TCP | IBV_RX_HASH_DST_PORT_TCP;
constexpr uint64_t kUdpFields = IBV_RX_HASH_SRC_PORT_UDP | IBV_RX_HASH_DST_PORT_UDP;
constexpr uint64_t kHashableFields = kIpv4Fields | kIpv6Fields | kTcpFields | kUdpFields;

// One hashable field: its bit, the protocol the frame must have, where it is.
struct HashField {
  uint64_t bit;
  uint32_t proto;  // abi::FlowProto
  size_t offset, len;  // in abi::FlowKey
};
constexpr HashField kHashOrder[] = {
    {IBV_RX_HASH_SRC_IPV4, abi::kFlowIpv4, offsetof(abi::FlowKey, src_ip), 4},
    {IBV_RX_HASH_DST_IPV4, abi::kFlowIpv4, offsetof(abi::FlowKey, dst_ip), 4},
    {IBV_RX_HASH_SRC_IPV6, abi::kFlowIpv6, offsetof(abi::FlowKey, src_ip), 16},
    {IBV_RX_HASH_DST_IPV6, abi::kFlowIpv6, offsetof(abi::FlowKey, dst_ip), 16},
    {IBV_RX_HASH_SRC_PORT_TCP, abi::kFlowTcp, offsetof(abi::FlowKey, src_port), 2},
    {IBV_RX_HASH_DST_PORT_TCP, abi::kFlowTcp, offsetof(abi::FlowKey, dst_port), 2},
    {IBV_RX_HASH_SRC_PORT_UDP, abi::kFlowUdp, offsetof(abi::FlowKey, src_port), 2},
    {IBV_RX_HASH_DST_PORT_UDP, abi::kFlowUdp, offsetof(abi::FlowKey, dst_port), 2},
};

}  // namespace

size_t rss_hash_input(const net::FrameFields& f, uint64_t fields, uint8_t* out) {
  const auto* key = reinterpret_cast<const uint8_t*>(&f.key);
  size_t n = 0;
  for (const HashField& h : kHashOrder) {
    if (!(fields & h.bit) || !(f.protocols & h.proto)) continue;
    std::memcpy(out + n, key + h.offset, h.len);
    n += h.len;
  }
  // A lone port is padded to a whole word (the hash runs over 32-bit words;
  // zero bits add nothing to a Toeplitz hash).
  while (n % 4) out[n++] = 0;
  return n;
}

int check_rss(uint64_t fields, uint32_t function, uint32_t key_len, uint32_t log_size) {
  // mlx5 create_rss_raw_qp_tir, in its order.
  if (fields & IBV_RX_HASH_INNER) return EOPNOTSUPP;  // no tunnel offloads
  if (function != IBV_RX_HASH_FUNC_TOEPLITZ) return EOPNOTSUPP;
  if (key_len != net::kToeplitzKeyBytes) return EINVAL;
  if (fields == 0 && log_size != 0) return EINVAL;  // one WQ needs no hash
  if (fields & ~kHashableFields) return EOPNOTSUPP;
  if ((fields & kIpv4Fields) && (fields & kIpv6Fields)) return EINVAL;
  if ((fields & kTcpFields) && (fields & kUdpFields)) return EINVAL;  // one L4 kind
  return 0;
}

Result<uint32_t> Device::create_rwq_ind_table(Owner* o, uint32_t log_size, const uint32_t* wqs) {
  // Kernel/mlx5: more entries than the table may hold is EINVAL.
  if (log_size > abi::kMaxLogIndTableSize) return {EINVAL};
  const uint32_t n = 1u << log_size;
  for (uint32_t i = 0; i < n; ++i) {
    const Wq* w = wqs_.get(wqs[i]);
    if (!w || w->owner != o) return {EINVAL};
  }
  if (ind_tables_.count() >= kMaxRwqIndTables) return {ENOMEM};
  auto t = std::make_unique<RwqIndTable>();
  t->owner = o;
  t->log_size = log_size;
  t->wqs.assign(wqs, wqs + n);
  for (uint32_t h : t->wqs) ++wqs_.get(h)->refs;  // destroy_wq: EBUSY while listed
  return {0, ind_tables_.insert(std::move(t))};
}

int Device::destroy_rwq_ind_table(Owner* o, uint32_t handle) {
  RwqIndTable* t = ind_tables_.get(handle);
  if (!t || t->owner != o) return EINVAL;
  if (t->refs) return EBUSY;  // an RSS QP uses it (kernel core/verbs.c)
  for (uint32_t h : t->wqs)
    if (Wq* w = wqs_.get(h)) --w->refs;
  ind_tables_.erase(handle);
  return 0;
}

Result<uint32_t> Device::create_rss_qp(Owner* o, const abi::CreateRssQpRequest& req) {
  Pd* pd = pds_.get(req.pd);
  RwqIndTable* t = ind_tables_.get(req.ind_table);
  if (!pd || pd->owner != o || !t || t->owner != o) return {EINVAL};
  // mlx5: an RSS QP has no creation flags and no send side.
  if (req.create_flags || req.send_side) return {EINVAL};
  if (int err = check_rss(req.rx_hash_fields_mask, req.rx_hash_function, req.rx_hash_key_len, t->log_size))
    return {err};
  if (qp_count_ >= info_.max_qp) return {ENOMEM};
  auto qp = std::make_unique<Qp>();
  qp->owner = o;
  qp->cookie = req.cookie;
  qp->type = IBV_QPT_RAW_PACKET;
  qp->transport = transport_for(IBV_QPT_RAW_PACKET);
  qp->pd = uint32_t(req.pd);
  // No state machine: it receives once created (mlx5: a TIR, not a QP).
  qp->state = IBV_QPS_RTR;
  qp->rss = std::make_unique<RssHash>();
  qp->rss->ind_table = uint32_t(req.ind_table);
  qp->rss->fields = req.rx_hash_fields_mask;
  std::memcpy(qp->rss->key, req.rx_hash_key, net::kToeplitzKeyBytes);
  Qp* raw = qp.get();
  release_held_qpns();
  raw->qpn = qps_.insert(std::move(qp)) + kFirstQpn - 1;
  ++pd->refs;
  ++t->refs;
  ++qp_count_;
  return {0, raw->qpn};
}

void Device::rss_deliver(Qp& qp, const net::Packet& p, const net::FrameFields& f, const Flow& rule) {
  const RssHash& h = *qp.rss;
  const RwqIndTable* t = ind_tables_.get(h.ind_table);
  if (!t) return;
  uint32_t entry = 0;
  if (t->log_size) {
    uint8_t input[net::kToeplitzKeyBytes];
    const size_t n = rss_hash_input(f, h.fields, input);
    entry = rss_entry(n ? net::toeplitz_hash(h.key, input, n) : 0, t->log_size);
  }
  ++qp.rx_packets;
  if (Wq* w = wqs_.get(t->wqs[entry])) wq_receive(*w, p.data, p.len, rule.has_tag, rule.tag);
}

}  // namespace uroce::device
