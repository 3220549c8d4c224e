// uroced: the engine daemon. Runs in the foreground; `uroce start` detaches it.
#include <arpa/inet.h>
#include <malloc.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>

#include "emulator/engine.h"
#include "uroce/cpu_placement.h"
#include "uroce/runtime_dir.h"

namespace {

void usage() {
  std::fprintf(stderr,
               "usage: uroced [--name NAME] [--runtime-dir DIR] [--ip A.B.C.D] [--ip6 ADDR6] [--mac MAC]\n"
               "              [--port DPDK-SPEC [--mtu N] [--vlan VID] [--no-hugepages]] [--fault SPEC]\n"
               "              [--cpu N|auto|none]\n"
               "  Runs a uroce engine in the foreground until SIGTERM/SIGINT.\n"
               "  --port   a DPDK ethdev for the wire: net_af_packet0,iface=eth0, a PCI address, ...\n"
               "  --fault  drop=P,duplicate=P,reorder=P,corrupt=P,delay=US,seed=N (P in 0..1)\n"
               "  --cpu    the CPU the polling thread is pinned to (default auto: one of its own\n"
               "           when the machine has two or more; none: wherever the scheduler puts it)\n");
}

bool parse_mac(const std::string& s, std::array<uint8_t, 6>& mac) {
  unsigned v[6];
  if (std::sscanf(s.c_str(), "%x:%x:%x:%x:%x:%x", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]) != 6)
    return false;
  for (int i = 0; i < 6; ++i) {
    if (v[i] > 255) return false;
    mac[i] = uint8_t(v[i]);
  }
  return true;
}

// Completion channels and clients' async pipes cost the engine a descriptor
// each (queues do not: their memfds are closed once passed): take all the
// descriptors the hard limit allows.
void raise_fd_limit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
  }
}

// Each QP's engine-side copy of its send queue can be megabytes; glibc would
// give each such block a mapping of its own, and mappings are what bound the
// queues the device can hold (device/params.h): keep them on the heap.
void keep_allocations_off_mappings() { mallopt(M_MMAP_THRESHOLD, 32 << 20); }

// vm.max_map_count bounds the queues the device can hold (device/params.h).
uint64_t read_max_map_count() {
  std::ifstream f("/proc/sys/vm/max_map_count");
  uint64_t n = 0;
  if (f >> n && n > 0) return n;
  return uroce::device::kDefaultMaxMapCount;
}

}  // namespace

namespace uroce::emulator {

// "drop=0.05,duplicate=0.01,reorder=0.1,corrupt=0,delay=200,seed=7"
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

}  // namespace uroce::emulator

using uroce::emulator::parse_fault;

int main(int argc, char** argv) {
  uroce::emulator::EngineConfig config;
  config.runtime_dir = uroce::runtime_dir();
  config.device.max_map_count = read_max_map_count();
  raise_fd_limit();
  keep_allocations_off_mappings();
  bool mac_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "uroced: %s needs a value\n", arg.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--name") {
      config.device.name = value();
      if (config.device.name.empty() || config.device.name.size() >= 64 ||
          config.device.name.find('/') != std::string::npos) {
        std::fprintf(stderr, "uroced: invalid device name\n");
        return 2;
      }
    } else if (arg == "--runtime-dir") {
      config.runtime_dir = value();
    } else if (arg == "--ip") {
      const std::string ip = value();
      in_addr a{};
      if (inet_pton(AF_INET, ip.c_str(), &a) != 1) {
        std::fprintf(stderr, "uroced: invalid IPv4 address '%s'\n", ip.c_str());
        return 2;
      }
      std::memcpy(config.device.ip.data(), &a, 4);
    } else if (arg == "--ip6") {
      const std::string ip = value();
      in6_addr a{};
      if (inet_pton(AF_INET6, ip.c_str(), &a) != 1) {
        std::fprintf(stderr, "uroced: invalid IPv6 address '%s'\n", ip.c_str());
        return 2;
      }
      std::memcpy(config.device.ip6.data(), &a, 16);
    } else if (arg == "--mac") {
      mac_given = true;
      if (!parse_mac(value(), config.device.mac)) {
        std::fprintf(stderr, "uroced: invalid MAC address\n");
        return 2;
      }
    } else if (arg == "--port") {
      config.device.port_spec = value();
    } else if (arg == "--mtu") {
      const int mtu = std::atoi(value().c_str());
      if (mtu < 576 || mtu > 9600) {
        std::fprintf(stderr, "uroced: --mtu must be 576..9600\n");
        return 2;
      }
      config.device.port_mtu = uint16_t(mtu);
    } else if (arg == "--vlan") {
      const int vid = std::atoi(value().c_str());
      if (vid < 0 || vid > 4094) {
        std::fprintf(stderr, "uroced: --vlan must be 0..4094\n");
        return 2;
      }
      config.device.vlan = vid;
    } else if (arg == "--hugepages") {
      config.device.use_hugepages = true;
    } else if (arg == "--no-hugepages") {
      config.device.use_hugepages = false;
    } else if (arg == "--fault") {
      std::string err;
      if (!parse_fault(value(), &config.fault, &err)) {
        std::fprintf(stderr, "uroced: --fault: %s\n", err.c_str());
        return 2;
      }
      config.fault_set = true;
    } else if (arg == "--cpu") {
      const std::string v = value();
      char* rest = nullptr;
      const long cpu = std::strtol(v.c_str(), &rest, 10);
      if (v == "auto") config.cpu = uroce::emulator::EngineConfig::kCpuAuto;
      else if (v == "none") config.cpu = uroce::emulator::EngineConfig::kCpuNone;
      else if (!v.empty() && !*rest && cpu >= 0 && cpu < CPU_SETSIZE) config.cpu = int(cpu);
      else {
        std::fprintf(stderr, "uroced: --cpu takes a CPU number, auto or none\n");
        return 2;
      }
    } else if (arg == "-h" || arg == "--help") {
      usage();
      return 0;
    } else {
      std::fprintf(stderr, "uroced: unknown option '%s'\n", arg.c_str());
      usage();
      return 2;
    }
  }
  if (!mac_given && !config.device.port_spec.empty()) {
    config.device.mac_from_port = true;  // the NIC's own MAC
  } else if (!mac_given) {
    // A locally administered MAC (02:75:72:...) from the name and address, so
    // every engine has its own MAC, node GUID and link-local GID.
    uint32_t h = 2166136261u;  // FNV-1a
    for (char c : config.device.name) h = (h ^ uint8_t(c)) * 16777619u;
    for (uint8_t b : config.device.ip) h = (h ^ b) * 16777619u;
    config.device.mac = {0x02, 0x75, 0x72, uint8_t(h >> 16), uint8_t(h >> 8), uint8_t(h)};
  }
  try {
    uroce::emulator::Engine engine(config);
    engine.start();
    // After start(): DPDK's EAL sets the thread's affinity when it initialises.
    const int cpu = config.cpu == uroce::emulator::EngineConfig::kCpuAuto ? uroce::choose_engine_cpu()
                                                                          : config.cpu;
    if (cpu >= 0 && !uroce::pin_current_thread({cpu}))
      std::fprintf(stderr, "uroced: cannot pin to CPU %d: %s\n", cpu, std::strerror(errno));
    else if (cpu >= 0) {
      std::fprintf(stderr, "uroced: polling on CPU %d\n", cpu);
      engine.announce_polling_cpu(cpu);
    }
    std::fprintf(stderr, "uroced: %s ready on %s\n", config.device.name.c_str(),
                 uroce::engine_socket_path(config.runtime_dir, config.device.name).c_str());
    engine.run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "uroced: %s\n", e.what());
    return 1;
  }
  return 0;
}
