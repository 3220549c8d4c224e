// The uroce command's views of engine reports: JSON as the engine gives it,
// and rates computed from two reports a refresh apart (as `rdma statistic`
// or perfquery users watch counters move).
#include "tools/engine_report.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "tools/engine_client.h"
#include "uroce/runtime_dir.h"

namespace uroce::tool {

namespace {

constexpr int kReportTimeoutMs = 5000;
constexpr size_t kBusiestQps = 10;

std::optional<nlohmann::json> report_of(const std::string& runtime_dir, const std::string& name,
                                        std::string* error) {
  auto text = fetch_report(engine_socket_path(runtime_dir, name), kReportTimeoutMs, error);
  if (!text) return std::nullopt;
  auto doc = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    *error = "the engine's report is not JSON";
    return std::nullopt;
  }
  return doc;
}

uint64_t u64(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number_unsigned() ? it->get<uint64_t>() : 0;
}

// Per second, from two readings `seconds` apart (counters only grow; a
// restarted engine starts again from zero).
double rate(uint64_t now, uint64_t before, double seconds) {
  return now >= before && seconds > 0 ? double(now - before) / seconds : 0.0;
}

std::string human(double v, const char* unit) {
  char buf[32];
  if (v >= 1e9) std::snprintf(buf, sizeof(buf), "%.2f G%s", v / 1e9, unit);
  else if (v >= 1e6) std::snprintf(buf, sizeof(buf), "%.2f M%s", v / 1e6, unit);
  else if (v >= 1e3) std::snprintf(buf, sizeof(buf), "%.2f k%s", v / 1e3, unit);
  else std::snprintf(buf, sizeof(buf), "%.0f %s", v, unit);
  return buf;
}

void print_rates(const std::string& name, const nlohmann::json& now, const nlohmann::json& before) {
  const double dt = double(u64(now, "time_ns") - u64(before, "time_ns")) / 1e9;
  const auto& c = now["counters"];
  const auto& b = before["counters"];
  auto per_s = [&](const char* key) { return rate(u64(c, key), u64(b, key), dt); };
  std::printf("== %s  port %s (%s)  clients %zu  qps %llu\n", name.c_str(),
              now["port"].value("state", "?").c_str(), now["port"].value("kind", "?").c_str(),
              now["clients"].size(), (unsigned long long)u64(now["objects"], "qps"));
  std::printf("  rx %s  tx %s  loopback %s\n", human(per_s("rx_packets"), "pkt/s").c_str(),
              human(per_s("tx_packets"), "pkt/s").c_str(),
              human(rate(u64(now["port"], "loopback_tx_bytes"), u64(before["port"], "loopback_tx_bytes"), dt),
                    "B/s")
                  .c_str());
  if (now.contains("wire")) {
    const auto& w = now["wire"];
    const auto& wb = before.contains("wire") ? before["wire"] : w;
    std::printf("  wire rx %s  tx %s\n", human(rate(u64(w, "rx_bytes"), u64(wb, "rx_bytes"), dt), "B/s").c_str(),
                human(rate(u64(w, "tx_bytes"), u64(wb, "tx_bytes"), dt), "B/s").c_str());
  }
  std::printf("  retransmits %s  naks %s  rnr naks %s  drops %s\n",
              human(per_s("retransmits"), "/s").c_str(), human(per_s("nak_sent"), "/s").c_str(),
              human(per_s("rnr_nak_sent"), "/s").c_str(),
              human(rate(u64(now, "drops"), u64(before, "drops"), dt), "/s").c_str());

  // The busiest QPs of this refresh.
  std::map<uint64_t, const nlohmann::json*> earlier;
  for (const auto& q : before["qps"]) earlier[u64(q, "qpn")] = &q;
  struct Row {
    const nlohmann::json* q;
    double tx, rx, retrans, rnr;
  };
  std::vector<Row> rows;
  for (const auto& q : now["qps"]) {
    auto it = earlier.find(u64(q, "qpn"));
    const nlohmann::json& p = it != earlier.end() ? *it->second : q;
    rows.push_back({&q, rate(u64(q, "tx_packets"), u64(p, "tx_packets"), dt),
                    rate(u64(q, "rx_packets"), u64(p, "rx_packets"), dt),
                    rate(u64(q, "retransmits"), u64(p, "retransmits"), dt),
                    rate(u64(q, "rnr_naks"), u64(p, "rnr_naks"), dt)});
  }
  std::stable_sort(rows.begin(), rows.end(),
                   [](const Row& a, const Row& b) { return a.tx + a.rx > b.tx + b.rx; });
  if (rows.empty()) return;
  std::printf("  %8s %-8s %-5s %8s %14s %14s %12s %10s\n", "qp", "type", "state", "pid", "tx",
              "rx", "retransmits", "rnr");
  for (size_t i = 0; i < rows.size() && i < kBusiestQps; ++i) {
    const auto& q = *rows[i].q;
    std::printf("  %8llu %-8s %-5s %8lld %14s %14s %12s %10s\n", (unsigned long long)u64(q, "qpn"),
                q.value("type", "?").c_str(), q.value("state", "?").c_str(),
                (long long)q.value("pid", 0), human(rows[i].tx, "pkt/s").c_str(),
                human(rows[i].rx, "pkt/s").c_str(), human(rows[i].retrans, "/s").c_str(),
                human(rows[i].rnr, "/s").c_str());
  }
  if (rows.size() > kBusiestQps) std::printf("  ... %zu more QPs\n", rows.size() - kBusiestQps);
}

}  // namespace

int print_reports_json(const std::string& runtime_dir, const std::vector<std::string>& names) {
  nlohmann::json out = {{"engines", nlohmann::json::array()}};
  int rc = 0;
  for (const auto& name : names) {
    std::string error;
    auto r = report_of(runtime_dir, name, &error);
    if (r) {
      out["engines"].push_back({{"name", name}, {"report", *r}});
    } else {
      out["engines"].push_back({{"name", name}, {"error", error}});
      rc = 1;
    }
  }
  std::cout << out.dump(2) << '\n';
  return rc;
}

int watch_reports(const std::string& runtime_dir, const std::vector<std::string>& names,
                  double interval_s, unsigned count) {
  const bool tty = isatty(STDOUT_FILENO);
  std::map<std::string, nlohmann::json> previous;
  for (const auto& name : names) {
    std::string error;
    if (auto r = report_of(runtime_dir, name, &error)) previous[name] = *r;
  }
  for (unsigned refresh = 0; count == 0 || refresh < count; ++refresh) {
    std::this_thread::sleep_for(std::chrono::duration<double>(interval_s));
    if (tty) std::printf("\033[H\033[2J");  // redraw in place
    for (const auto& name : names) {
      std::string error;
      auto r = report_of(runtime_dir, name, &error);
      if (!r) {
        std::printf("== %s  %s\n", name.c_str(), error.c_str());
        previous.erase(name);
        continue;
      }
      auto it = previous.find(name);
      print_rates(name, *r, it != previous.end() ? it->second : *r);
      previous[name] = std::move(*r);
    }
    if (!tty) std::printf("\n");
    std::fflush(stdout);
  }
  return 0;
}

int print_fault_settings(const std::string& runtime_dir, const std::string& name) {
  std::string error;
  auto doc = report_of(runtime_dir, name, &error);
  if (!doc) {
    std::cerr << "uroce: " << name << ": " << error << '\n';
    return 1;
  }
  const nlohmann::json& faults = (*doc)["fault"];
  for (const char* port : {"loopback", "wire"}) {
    if (!faults.contains(port) || !faults[port].contains("settings")) continue;
    const nlohmann::json& s = faults[port]["settings"];
    std::cout << name << ": " << port << ": ";
    if (!s.value("active", false)) {
      std::cout << "off\n";
      continue;
    }
    std::cout << "drop=" << s.value("drop", 0.0) << " duplicate=" << s.value("duplicate", 0.0)
              << " reorder=" << s.value("reorder", 0.0) << " corrupt=" << s.value("corrupt", 0.0)
              << " delay=" << s.value("delay_us", uint64_t(0));
    if (uint64_t seed = s.value("seed", uint64_t(0))) std::cout << " seed=" << seed;
    std::cout << '\n';
  }
  return 0;
}

bool cm_port_listens(const std::string& runtime_dir, const std::vector<std::string>& names, int port) {
  for (const std::string& name : names) {
    std::string error;
    auto doc = report_of(runtime_dir, name, &error);
    if (!doc || !doc->contains("cm")) continue;
    const nlohmann::json& ports = (*doc)["cm"].value("listening_ports", nlohmann::json::array());
    for (const auto& p : ports)
      if (p.is_number_integer() && p.get<int>() == port) return true;
  }
  return false;
}

}  // namespace uroce::tool
