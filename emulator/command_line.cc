// uroced's command line, parsed with CLI11 (command_line.h).
#include "emulator/command_line.h"

#include <arpa/inet.h>
#include <sched.h>

#include <CLI/CLI.hpp>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <iostream>

namespace uroce::emulator {
namespace {

constexpr int kExitUsage = 2;

bool parse_mac(const std::string& s, std::array<uint8_t, 6>& mac) {
  unsigned v[6];
  char extra;
  if (std::sscanf(s.c_str(), "%x:%x:%x:%x:%x:%x%c", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &extra) != 6)
    return false;
  for (int i = 0; i < 6; ++i) {
    if (v[i] > 255) return false;
    mac[i] = uint8_t(v[i]);
  }
  return true;
}

// A CLI11 check from a function that parses a value: empty when it parses,
// else `what`.
CLI::Validator parses(std::function<bool(const std::string&)> parse, const std::string& what) {
  return CLI::Validator([parse, what](std::string& v) { return parse(v) ? std::string() : what; }, "", "");
}

}  // namespace

bool parse_fault(const std::string& spec, net::FaultConfig* out, std::string* err) {
  net::FaultConfig cfg;
  size_t pos = 0;
  while (pos < spec.size()) {
    size_t end = spec.find(',', pos);
    if (end == std::string::npos) end = spec.size();
    const std::string item = spec.substr(pos, end - pos);
    pos = end + 1;
    const size_t eq = item.find('=');
    if (eq == std::string::npos) {
      *err = "'" + item + "' is not key=value";
      return false;
    }
    const std::string key = item.substr(0, eq), val = item.substr(eq + 1);
    char* rest = nullptr;
    const double v = std::strtod(val.c_str(), &rest);
    if (val.empty() || *rest || v < 0) {
      *err = "bad value for " + key;
      return false;
    }
    if (key == "drop") cfg.drop = v;
    else if (key == "duplicate" || key == "dup") cfg.duplicate = v;
    else if (key == "reorder") cfg.reorder = v;
    else if (key == "corrupt") cfg.corrupt = v;
    else if (key == "delay") cfg.delay_us = uint64_t(v);
    else if (key == "seed") cfg.seed = uint64_t(v);
    else {
      *err = "unknown key '" + key + "'";
      return false;
    }
  }
  if (std::string e = net::validate(cfg); !e.empty()) {
    *err = e;
    return false;
  }
  *out = cfg;
  return true;
}

std::optional<EngineConfig> parse_command_line(int argc, const char* const* argv,
                                               const EngineConfig& defaults, int* exit_status) {
  EngineConfig config = defaults;
  device::DeviceConfig& dev = config.device;
  bool mac_given = false;

  CLI::App app("Runs a uroce engine in the foreground until SIGTERM/SIGINT.", "uroced");
  app.add_option("--name", dev.name, "the device name applications see (default " + dev.name + ")")
      ->type_name("NAME")
      ->check(parses([](const std::string& n) { return !n.empty() && n.size() < 64 && n.find('/') == std::string::npos; },
                     "invalid device name"));
  app.add_option("--runtime-dir", config.runtime_dir, "where NAME.sock goes")->type_name("DIR");
  app.add_option_function<std::string>(
         "--ip", [&dev](const std::string& ip) { inet_pton(AF_INET, ip.c_str(), dev.ip.data()); },
         "its IPv4 address")
      ->type_name("A.B.C.D")
      ->check(parses([](const std::string& ip) { in_addr a{}; return inet_pton(AF_INET, ip.c_str(), &a) == 1; },
                     "invalid IPv4 address"));
  app.add_option_function<std::string>(
         "--ip6", [&dev](const std::string& ip) { inet_pton(AF_INET6, ip.c_str(), dev.ip6.data()); },
         "an IPv6 address besides the link-local one")
      ->type_name("ADDR6")
      ->check(parses([](const std::string& ip) { in6_addr a{}; return inet_pton(AF_INET6, ip.c_str(), &a) == 1; },
                     "invalid IPv6 address"));
  app.add_option_function<std::string>(
         "--mac", [&](const std::string& mac) { mac_given = parse_mac(mac, dev.mac); },
         "its MAC address (default: from NAME and the address; with --port on a kernel interface, "
         "one of its own that the interface also accepts; on a DPDK NIC, the NIC's)")
      ->type_name("MAC")
      ->check(parses([](const std::string& mac) { std::array<uint8_t, 6> m; return parse_mac(mac, m); },
                     "invalid MAC address"));
  app.add_option("--port", dev.port_spec,
                 "a DPDK ethdev for the wire: net_af_packet0,iface=eth0, a PCI address, ...")
      ->type_name("DPDK-SPEC");
  auto* netdev = app.add_option("--netdev", dev.netdev,
                 "bind the device to kernel interface IF, as 'rdma link add rxe0 type rxe netdev IF': "
                 "the wire port runs on it (DPDK net_af_packet) and the interface's MAC and "
                 "addresses, as they change, are the device's (its GIDs)")
      ->type_name("IF")
      ->check(parses([](const std::string& n) { return !n.empty() && n.size() < 16 && n.find('/') == std::string::npos; },
                     "invalid interface name"));
  app.add_option("--mtu", dev.port_mtu, "the wire port's MTU")
      ->type_name("N")
      ->check(CLI::Range(576, 9600));
  app.add_option("--vlan", dev.vlan, "an 802.1Q VLAN on the wire port")
      ->type_name("VID")
      ->check(CLI::Range(0, 4094));
  app.add_option("--delay-drop-timeout", dev.delay_drop_timeout_us,
                 "how long a delay-drop WQ holds a frame with no receive posted, in us (mlx5: 100000, the most)")
      ->type_name("US")
      ->check(CLI::Range(1, 100000));
  app.add_option("--cm-response-timeout", dev.cm_response_timeout,
                 "the IB CM's response timeout, 4.096 us * 2^T (rdma_cm's 20: a REQ, REP or DREQ "
                 "unanswered for 6.4 s is sent again)")
      ->type_name("T")
      ->check(CLI::Range(8, 31));
  app.add_option("--cm-retries", dev.cm_max_retries,
                 "how often the IB CM sends an unanswered REQ, REP or DREQ again (rdma_cm's 15)")
      ->type_name("N")
      ->check(CLI::Range(0, 15));
  app.add_flag("--mlx5", dev.mlx5,
               "answer as a ConnectX-5 (mlx5 mode): the drop-in libmlx5 serves mlx5 direct verbs "
               "on the device");
  app.add_flag("--hugepages,!--no-hugepages", dev.use_hugepages,
               "DPDK memory in huge pages when the host has free ones (the default), or never");
  app.add_option_function<std::string>(
         "--fault",
         [&config](const std::string& spec) {
           std::string err;
           config.fault_set = parse_fault(spec, &config.fault, &err);
         },
         "drop=P,duplicate=P,reorder=P,corrupt=P,delay=US,seed=N (P in 0..1)")
      ->type_name("SPEC")
      ->check(CLI::Validator(
          [](std::string& spec) {
            net::FaultConfig scratch;
            std::string err;
            return parse_fault(spec, &scratch, &err) ? std::string() : err;
          },
          "", ""));
  app.add_option_function<std::string>(
         "--users", [&config](const std::string& list) { parse_users(list, &config.access); },
         "other users who may use the engine besides its owner and root: names or uids, "
         "comma-separated, or 'all' (default: none)")
      ->type_name("LIST")
      ->check(CLI::Validator(
          [](std::string& list) {
            AccessPolicy scratch;
            return parse_users(list, &scratch);
          },
          "", ""));
  app.add_option_function<std::string>(
         "--group", [&config](const std::string& name) { parse_group(name, &config.access); },
         "a group whose members may use the engine (its socket becomes 0660 and the group's)")
      ->type_name("NAME")
      ->check(CLI::Validator(
          [](std::string& name) {
            AccessPolicy scratch;
            return parse_group(name, &scratch);
          },
          "", ""));
  app.add_option("--max-dm-size", dev.max_dm_size,
                 "device memory (ibv_alloc_dm) all clients may hold at once, in bytes (K, M "
                 "suffixes; default 256K as mlx5's MEMIC; 0: none)")
      ->type_name("BYTES")
      ->transform(CLI::AsSizeValue(false))
      ->check(CLI::Range(uint64_t(0), device::kMaxDmSizeCeiling));
  app.add_option_function<std::string>(
         "--cpu",
         [&config](const std::string& v) {
           config.cpu = v == "auto" ? EngineConfig::kCpuAuto : v == "none" ? EngineConfig::kCpuNone : std::atoi(v.c_str());
         },
         "the CPU the polling thread is pinned to (default auto: one of its own when the machine "
         "has two or more; none: wherever the scheduler puts it)")
      ->type_name("N|auto|none")
      ->check(parses(
          [](const std::string& v) {
            char* rest = nullptr;
            const long cpu = std::strtol(v.c_str(), &rest, 10);
            return v == "auto" || v == "none" || (!v.empty() && !*rest && cpu >= 0 && cpu < CPU_SETSIZE);
          },
          "--cpu takes a CPU number, auto or none"));

  // The bound interface's addresses are the device's: none of its own.
  for (const char* own : {"--ip", "--ip6", "--port", "--mac"}) netdev->excludes(app.get_option(own));
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    *exit_status = 0;
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    std::cerr << "uroced: " << e.what() << " (see 'uroced --help')\n";
    *exit_status = kExitUsage;
    return std::nullopt;
  }
  if (!dev.netdev.empty()) dev.port_spec = "net_af_packet0,iface=" + dev.netdev;
  // Options of the wire port, on an engine that has none: refused, not ignored.
  for (const char* wire_only : {"--mtu", "--vlan"})
    if (app.get_option(wire_only)->count() && dev.port_spec.empty()) {
      std::cerr << "uroced: " << wire_only << " applies to the wire port, and this engine has none: give --port "
                << "or --netdev (the loopback port's MTU is 4096) (see 'uroced --help')\n";
      *exit_status = kExitUsage;
      return std::nullopt;
    }
  if (!mac_given && !dev.port_spec.empty()) {
    dev.mac_from_port = true;  // the NIC's own MAC
  } else if (!mac_given) {
    // A locally administered MAC (02:75:72:...) from the name and address, so
    // every engine has its own MAC, node GUID and link-local GID.
    uint32_t h = 2166136261u;  // FNV-1a
    for (char c : dev.name) h = (h ^ uint8_t(c)) * 16777619u;
    for (uint8_t b : dev.ip) h = (h ^ b) * 16777619u;
    dev.mac = {0x02, 0x75, 0x72, uint8_t(h >> 16), uint8_t(h >> 8), uint8_t(h)};
  }
  return config;
}

}  // namespace uroce::emulator
