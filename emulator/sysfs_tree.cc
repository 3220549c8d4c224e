// The device's sysfs tree (see sysfs_tree.h).
#include "emulator/sysfs_tree.h"

#include <fcntl.h>
#include <infiniband/verbs.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <vector>

#include "device/params.h"
#include "uroce/runtime_dir.h"

namespace uroce::emulator {

namespace fs = std::filesystem;

namespace {

std::string format(const char* fmt, auto... args) {
  char buf[96];
  std::snprintf(buf, sizeof(buf), fmt, args...);
  return buf;
}

// ibv_port_attr's active_width and active_speed (IBA 14.2.5.6, PortInfo
// LinkWidthActive and LinkSpeedActive; the kernel's enum ib_port_width and
// ib_port_speed: libibverbs has no names for them).
enum : uint8_t { kWidth1x = 1, kWidth4x = 2, kWidth8x = 4, kWidth12x = 8, kWidth2x = 16 };
enum : uint8_t { kSdr = 1, kDdr = 2, kQdr = 4, kFdr10 = 8, kFdr = 16, kEdr = 32, kHdr = 64, kNdr = 128 };

int width_lanes(uint8_t width) {  // ib_width_enum_to_int
  switch (width) {
    case kWidth1x: return 1;
    case kWidth2x: return 2;
    case kWidth4x: return 4;
    case kWidth8x: return 8;
    case kWidth12x: return 12;
    default: return 1;
  }
}

std::string hostname() {
  char h[256] = {};
  if (gethostname(h, sizeof(h) - 1) != 0) return "localhost";
  return h;
}

// Whether the interface has a device of its own below it (a PCI NIC: its
// /sys/class/net/<if>/device); virtual ones (lo, veth, tap) have none.
std::string parent_device(const std::string& netdev) {
  std::error_code ec;
  const fs::path link = "/sys/class/net/" + netdev + "/device";
  if (!fs::exists(link, ec)) return "";
  const fs::path real = fs::canonical(link, ec);
  return ec ? "" : real.string();
}

}  // namespace

const std::array<SysfsCounter, 9> kSysfsCounters = {{
    {"sent_pkts", &device::Counters::tx_packets},
    {"rcvd_pkts", &device::Counters::rx_packets},
    {"duplicate_request", &device::Counters::rx_duplicate},
    {"out_of_seq_request", &device::Counters::rx_out_of_seq},
    {"rcvd_rnr_err", &device::Counters::rnr_nak_received},
    {"send_rnr_err", &device::Counters::rnr_nak_sent},
    {"completer_retry_err", &device::Counters::retransmits},
    {"retry_exceeded_err", &device::Counters::retry_exceeded},
    {"retry_rnr_exceeded_err", &device::Counters::rnr_retry_exceeded},
}};

std::string sysfs_guid(uint64_t guid_be) {
  const uint64_t g = be64toh(guid_be);
  return format("%04x:%04x:%04x:%04x", unsigned(g >> 48), unsigned(g >> 32) & 0xffff, unsigned(g >> 16) & 0xffff,
                unsigned(g) & 0xffff);
}

std::string sysfs_gid(const uint8_t (&gid)[16]) {  // %pI6: eight groups, zeros kept
  std::string out;
  for (int i = 0; i < 16; i += 2) out += format(i ? ":%02x%02x" : "%02x%02x", gid[i], gid[i + 1]);
  return out;
}

std::string sysfs_port_state(uint32_t state) {
  static const char* const names[] = {"NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER"};
  return format("%u: %s", state, state < 6 ? names[state] : "UNKNOWN");
}

std::string sysfs_phys_state(uint32_t phys_state) {  // phys_state_to_str
  static const char* const names[] = {"<unknown>", "Sleep", "Polling", "Disabled", "PortConfigurationTraining",
                                      "LinkUp", "LinkErrorRecovery", "Phy Test"};
  return format("%u: %s", phys_state, phys_state < 8 ? names[phys_state] : "<unknown>");
}

std::string sysfs_rate(uint8_t active_width, uint8_t active_speed) {
  // rate_show: deci-Gb/s per lane, times the lanes.
  const char* speed = " SDR";
  int rate = 25;
  switch (active_speed) {
    case kDdr: speed = " DDR", rate = 50; break;
    case kQdr: speed = " QDR", rate = 100; break;
    case kFdr10: speed = " FDR10", rate = 100; break;
    case kFdr: speed = " FDR", rate = 140; break;
    case kEdr: speed = " EDR", rate = 250; break;
    case kHdr: speed = " HDR", rate = 500; break;
    case kNdr: speed = " NDR", rate = 1000; break;
    default: break;
  }
  const int lanes = width_lanes(active_width);
  rate *= lanes;
  return format("%d%s Gb/sec (%dX%s)", rate / 10, rate % 10 ? ".5" : "", lanes, speed);
}

std::string SysfsTree::create(const std::string& runtime_dir, const abi::DeviceInfo& info,
                              const std::string& netdev) {
  const std::string link = engine_sysfs_path(runtime_dir, info.name);
  const std::string pci = engine_pci_path(runtime_dir, info.name);
  const bool mlx5 = info.vendor_id == device::kMlx5VendorId;
  // mlx5 mode: the tree sits below a PCI function (runtime_dir.h) and
  // <name>.sysfs links to it.
  const std::string dir = mlx5 ? engine_mlx5_ibdev_path(runtime_dir, info.name) : link;
  std::error_code ec;
  fs::remove_all(link, ec);  // an earlier engine's
  fs::remove_all(pci, ec);
  const std::string port = dir + "/ports/1";
  std::vector<std::string> dirs;
  if (mlx5) dirs = {pci, pci + "/infiniband"};
  for (const std::string& d : {dir, dir + "/ports", port, port + "/gids", port + "/gid_attrs",
                               port + "/gid_attrs/types", port + "/gid_attrs/ndevs", port + "/pkeys",
                               port + "/hw_counters"})
    dirs.push_back(d);
  // Readable by whoever may reach the runtime directory (the engine's umask
  // may be tighter): sysfs's modes.
  for (const std::string& d : dirs)
    if ((::mkdir(d.c_str(), 0755) != 0 && errno != EEXIST) || ::chmod(d.c_str(), 0755) != 0)
      return "mkdir " + d + ": " + std::strerror(errno);
  if (mlx5 && ::symlink((std::string(info.name) + ".pci/infiniband/" + info.name).c_str(), link.c_str()) != 0)
    return "symlink " + link + ": " + std::strerror(errno);
  dir_ = dir;
  link_ = mlx5 ? link : "";
  pci_ = mlx5 ? pci : "";
  netdev_ = netdev;
  if (mlx5) {
    // The PCI function's files a ConnectX-5 has (drivers/pci/pci-sysfs.c),
    // and the device's `device` link up to it, as on a host.
    put("../../vendor", format("0x%04x", device::kMlx5PciVendor));
    put("../../device", format("0x%04x", info.vendor_part_id));
    put("../../subsystem_vendor", format("0x%04x", device::kMlx5PciVendor));
    put("../../subsystem_device", "0x0008");
    put("../../class", "0x020000");  // Ethernet controller
    put("../../numa_node", "-1");
    // Absolute: `uroce run` mounts the tree elsewhere (/sys/class/infiniband/<name>).
    if (::symlink(pci.c_str(), (dir + "/device").c_str()) != 0) return "symlink " + dir + "/device: " + std::strerror(errno);
  }
  put("node_guid", sysfs_guid(info.node_guid));
  put("sys_image_guid", sysfs_guid(info.sys_image_guid));
  put("node_type", "1: CA");
  put("node_desc", hostname() + " " + info.name);  // rdma-ndd's default "%h %d"
  put("fw_ver", info.fw_ver);
  put("hw_rev", format("0x%x", info.hw_ver));
  put("hca_type", "uroce");
  put("board_id", "uroce");
  put("ports/1/lid", "0x0");
  put("ports/1/sm_lid", "0x0");
  put("ports/1/sm_sl", "0");
  put("ports/1/lid_mask_count", "0");
  put("ports/1/link_layer", "Ethernet");
  put("ports/1/cap_mask", format("0x%08x", info.port.port_cap_flags));
  put("ports/1/pkeys/0", "0xffff");
  if (!netdev.empty()) {
    put("parent", netdev);  // rxe's: the interface it runs on
    // Where programs look for the device's interface: a NIC's own device
    // below it (as mlx5's `device`, whose net/ holds the interface), else a
    // directory holding just the interface (rdma-core's pyverbs lists
    // <dev>/device/net/).
    const std::string below = mlx5 ? std::string() : parent_device(netdev);
    if (mlx5) {
      // The PCI function's net/ holds the interface, as mlx5's does.
      const std::string net = pci + "/net";
      if ((::mkdir(net.c_str(), 0755) != 0 && errno != EEXIST) || ::chmod(net.c_str(), 0755) != 0 ||
          ::symlink(("/sys/class/net/" + netdev).c_str(), (net + "/" + netdev).c_str()) != 0)
        return "cannot make " + net + "/" + netdev;
    } else if (!below.empty()) {
      if (::symlink(below.c_str(), (dir + "/device").c_str()) != 0) return "symlink " + dir + "/device: " + std::strerror(errno);
    } else {
      const std::string net = dir + "/device/net";
      fs::create_directories(net, ec);
      if (ec || ::chmod((dir + "/device").c_str(), 0755) != 0 || ::chmod(net.c_str(), 0755) != 0 || ::symlink(("/sys/class/net/" + netdev).c_str(), (net + "/" + netdev).c_str()) != 0)
        return "cannot make " + net + "/" + netdev;
    }
  }
  update_port(info);
  update_counters(device::Counters{});
  return "";
}

void SysfsTree::update_port(const abi::DeviceInfo& info) {
  if (!active()) return;
  put("ports/1/state", sysfs_port_state(info.port.state));
  put("ports/1/phys_state", sysfs_phys_state(info.port.phys_state));
  put("ports/1/rate", sysfs_rate(info.port.active_width, info.port.active_speed));
  // gid_tbl_len entries, an empty one all zeros (show_port_gid).
  for (size_t i = 0; i < abi::kMaxGids && i < info.port.gid_tbl_len; ++i) {
    const abi::GidEntry& e = info.gids[i];
    static const uint8_t kZero[16] = {};
    put("ports/1/gids/" + std::to_string(i), sysfs_gid(e.valid ? e.gid : kZero));
    const std::string type = "ports/1/gid_attrs/types/" + std::to_string(i);
    const std::string ndev = "ports/1/gid_attrs/ndevs/" + std::to_string(i);
    if (e.valid) {
      put(type, e.type == IBV_GID_TYPE_ROCE_V1 ? "IB/RoCE v1" : "RoCE v2");
      if (!netdev_.empty()) put(ndev, netdev_);
      gid_attrs_[i] = true;
    } else if (gid_attrs_[i]) {
      drop(type);
      drop(ndev);
      gid_attrs_[i] = false;
    }
  }
}

void SysfsTree::update_counters(const device::Counters& c) {
  if (!active()) return;
  for (size_t i = 0; i < kSysfsCounters.size(); ++i) {
    const uint64_t v = c.*kSysfsCounters[i].field;
    if (counters_written_ && v == written_[i]) continue;
    put(std::string("ports/1/hw_counters/") + kSysfsCounters[i].name, std::to_string(v));
    written_[i] = v;
  }
  counters_written_ = true;
}

void SysfsTree::put(const std::string& rel, const std::string& value) {
  const std::string path = dir_ + "/" + rel;
  const size_t slash = path.rfind('/');
  const std::string tmp = path.substr(0, slash + 1) + "." + path.substr(slash + 1);  // hidden from ls
  const std::string text = value + "\n";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0444);
  if (fd < 0) return;
  const bool ok = ::write(fd, text.data(), text.size()) == ssize_t(text.size()) && ::fchmod(fd, 0444) == 0;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) ::unlink(tmp.c_str());
}

void SysfsTree::drop(const std::string& rel) { ::unlink((dir_ + "/" + rel).c_str()); }

void SysfsTree::remove() {
  if (!active()) return;
  std::error_code ec;
  fs::remove_all(dir_, ec);
  if (!link_.empty()) fs::remove(link_, ec);
  if (!pci_.empty()) fs::remove_all(pci_, ec);
  dir_.clear();
}

}  // namespace uroce::emulator
