// `uroce status --json`, `uroce stats --json` and `uroce stats --watch`: the
// engines' JSON reports (abi kReport), printed whole or as live rates.
#pragma once

#include <string>
#include <vector>

namespace uroce::tool {

// {"engines": [{"name": ..., "report": {...}} ...]} on stdout. 0, or 1 if an
// engine did not answer (its entry then has "error").
int print_reports_json(const std::string& runtime_dir, const std::vector<std::string>& names);

// Refreshes every interval_s: per engine the port's packet and byte rates,
// retransmissions, NAKs and drops per second, and the busiest QPs. Stops
// after `count` refreshes (0: until interrupted). On a terminal the screen
// is redrawn; otherwise each refresh is appended (for logs and tests).
// `uroce fault` without a setting: each port's fault settings and whether
// they are on, from the engine's report. 0, or 1 if it did not answer.
int print_fault_settings(const std::string& runtime_dir, const std::string& name);

// Whether an rdma_cm id of one of these engines listens on `port` (their
// reports' cm.listening_ports): an rdma_cm server (rping -s) is ready.
bool cm_port_listens(const std::string& runtime_dir, const std::vector<std::string>& names, int port);

int watch_reports(const std::string& runtime_dir, const std::vector<std::string>& names,
                  double interval_s, unsigned count);

}  // namespace uroce::tool
