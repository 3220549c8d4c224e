// uroced: the engine daemon. Runs in the foreground; `uroce start` detaches it.
#include <arpa/inet.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include "emulator/engine.h"
#include "uroce/runtime_dir.h"

namespace {

void usage() {
  std::fprintf(stderr,
               "usage: uroced [--name NAME] [--runtime-dir DIR] [--ip A.B.C.D] [--mac XX:XX:XX:XX:XX:XX]\n"
               "  Runs a uroce engine in the foreground until SIGTERM/SIGINT.\n");
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

}  // namespace

int main(int argc, char** argv) {
  uroce::emulator::EngineConfig config;
  config.runtime_dir = uroce::runtime_dir();
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
    } else if (arg == "--mac") {
      mac_given = true;
      if (!parse_mac(value(), config.device.mac)) {
        std::fprintf(stderr, "uroced: invalid MAC address\n");
        return 2;
      }
    } else if (arg == "--port") {
      std::fprintf(stderr, "uroced: DPDK ports are not supported yet; the engine serves its loopback port only\n");
      return 2;
    } else if (arg == "-h" || arg == "--help") {
      usage();
      return 0;
    } else {
      std::fprintf(stderr, "uroced: unknown option '%s'\n", arg.c_str());
      usage();
      return 2;
    }
  }
  if (!mac_given) {
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
    std::fprintf(stderr, "uroced: %s ready on %s\n", config.device.name.c_str(),
                 uroce::engine_socket_path(config.runtime_dir, config.device.name).c_str());
    engine.run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "uroced: %s\n", e.what());
    return 1;
  }
  return 0;
}
