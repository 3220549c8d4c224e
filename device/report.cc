// The device as data: the JSON report behind `uroce status --json`,
// `uroce stats --json` and `uroce stats --watch`. Control path (allocates).
#include <nlohmann/json.hpp>

#include <string_view>

#include "device/device.h"
#include "net/dpdk_port.h"

namespace uroce::device {

namespace {

const char* qp_type_name(ibv_qp_type t) {
  switch (t) {
    case IBV_QPT_RC: return "RC";
    case IBV_QPT_UC: return "UC";
    case IBV_QPT_UD: return "UD";
    case IBV_QPT_XRC_SEND: return "XRC_SEND";
    case IBV_QPT_XRC_RECV: return "XRC_RECV";
    case IBV_QPT_RAW_PACKET: return "RAW_PACKET";
    default: return "?";
  }
}

const char* qp_state_name(ibv_qp_state s) {
  static const char* kStates[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
  return unsigned(s) < 7 ? kStates[s] : "UNKNOWN";
}

// Whether a counter counts frames or messages thrown away (its description
// says so: counters.h writes every drop reason as "... dropped: why").
constexpr bool is_drop(std::string_view desc) { return desc.find("dropped") != desc.npos; }

}  // namespace

void Device::report(nlohmann::json& out) const {
  using nlohmann::json;
  out["device"] = info_.name;
  out["ip"] = std::to_string(config_.ip[0]) + '.' + std::to_string(config_.ip[1]) + '.' +
              std::to_string(config_.ip[2]) + '.' + std::to_string(config_.ip[3]);
  out["port"] = {{"state", port_active() ? "ACTIVE" : "DOWN"},
                 {"kind", wire_ ? "wire" : "loopback"},
                 {"loopback_tx_bytes", loopback_.tx_bytes()}};
  out["objects"] = {{"pds", pds_.count()},     {"mrs", mrs_.count()}, {"mws", mws_.count()}, {"mkeys", mkeys_.count()}, {"dms", dms_.count()}, {"cqs", cqs_.count()},
                    {"qps", qps_.count()},     {"srqs", srqs_.count()},
                    {"channels", channels_.count()}, {"flows", steering_.count()}};

  json counters = json::object();
  uint64_t drops = 0;
#define UROCE_REPORT_COUNTER(name, desc) \
  counters[#name] = counters_.name;      \
  if (is_drop(desc)) drops += counters_.name;
  UROCE_COUNTERS(UROCE_REPORT_COUNTER)
#undef UROCE_REPORT_COUNTER
  out["counters"] = counters;
  out["drops"] = drops;  // the sum of every drop counter above

  json faults = json::object();
  auto fault_counters = [&](const char* port, const net::FaultInjector& f) {
    json c = json::object();
#define UROCE_REPORT_FAULT(name, desc) c[#name] = f.counters().name;
    UROCE_FAULT_COUNTERS(UROCE_REPORT_FAULT)
#undef UROCE_REPORT_FAULT
    const net::FaultConfig& cfg = f.config();  // what `uroce fault` shows
    c["settings"] = {{"active", f.active()},  {"drop", cfg.drop},         {"duplicate", cfg.duplicate},
                     {"reorder", cfg.reorder}, {"corrupt", cfg.corrupt}, {"delay_us", cfg.delay_us},
                     {"seed", cfg.seed}};
    faults[port] = c;
  };
  fault_counters("loopback", loopback_fault_);
  fault_counters("wire", wire_fault_);
  out["fault"] = faults;
  out["packet_buffers"] = {{"allocated", pool_.allocated()},
                           {"in_use", pool_.in_use()},
                           {"max", pool_.capacity()}};
  if (wire_) {
    wire_->refresh_hw_counters();
    json w = json::object();
#define UROCE_REPORT_WIRE(name, desc) w[#name] = wire_->counters().name;
    UROCE_DPDK_PORT_COUNTERS(UROCE_REPORT_WIRE)
#undef UROCE_REPORT_WIRE
    out["wire"] = w;
  }

  // Per QP, capped so that a report stays readable with tens of thousands.
  constexpr size_t kMaxQpsReported = 1024;
  json qps = json::array();
  size_t omitted = 0;
  qps_.for_each([&](uint32_t, const Qp& q) {
    if (qps.size() >= kMaxQpsReported) {
      ++omitted;
      return;
    }
    qps.push_back({{"qpn", q.qpn},
                   {"type", qp_type_name(q.type)},
                   {"state", qp_state_name(q.state)},
                   {"pid", q.owner ? q.owner->mem.pid() : 0},
                   {"dest_qp", q.dest_qpn},
                   {"tx_packets", q.tx_packets},
                   {"rx_packets", q.rx_packets},
                   {"retransmits", q.retransmits},
                   {"rnr_naks", q.rnr_naks}});
  });
  out["qps"] = qps;
  out["qps_omitted"] = omitted;

  // Flow steering rules: what each took and what its DROP action discarded.
  static const char* kFlowTypes[] = {"NORMAL", "ALL_DEFAULT", "MC_DEFAULT", "SNIFFER"};
  json flows = json::array();
  steering_.for_each([&](uint32_t handle, const Flow& f) {
    if (flows.size() >= kMaxQpsReported) return;
    flows.push_back({{"handle", handle},
                     {"qpn", f.target.id},
                     {"type", kFlowTypes[f.type & 3]},
                     {"priority", f.priority},
                     {"dont_trap", f.dont_trap},
                     {"frames", f.hits},
                     {"dropped", f.dropped}});
  });
  out["flows"] = flows;

  // Receive WQs: what each placed and why it dropped what it did not.
  json wqs = json::array();
  wqs_.for_each([&](uint32_t, const Wq& w) {
    if (wqs.size() >= kMaxQpsReported) return;
    wqs.push_back({{"wqn", w.wqn},
                   {"state", w.state == IBV_WQS_RDY ? "RDY" : w.state == IBV_WQS_ERR ? "ERR" : "RESET"},
                   {"flags", w.flags},
                   {"received", w.received},
                   {"no_wqe_drops", w.no_wqe_drops},
                   {"not_ready_drops", w.not_ready_drops},
                   {"delay_drop_expired", w.delay_drop_expired},
                   {"delay_drop_held", w.held_count},
                   {"flushed", w.flushed},
                   {"errors", w.errors}});
  });
  out["wqs"] = wqs;
}

}  // namespace uroce::device
