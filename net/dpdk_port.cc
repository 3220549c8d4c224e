// DpdkPort control path: EAL initialisation (once per process), device probe,
// queue and MTU setup, statistics. May allocate and log; never exits.
#include "net/dpdk_port.h"
#include "net/dpdk_rx_slots.h"

#include <dirent.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <numeric>
#include <sstream>

#ifdef UROCE_HAVE_DPDK
#include <rte_dev.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_log.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#endif

namespace uroce::net {

namespace {

// RTE_MAX_LCORE of Debian's build: EAL refuses CPU ids at or above it.
constexpr int kMaxEalCpu = 128;

bool is_hex(char c) { return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'f'); }

// "uroce0" -> "uroce0"; anything but [A-Za-z0-9_-] becomes '_' (the prefix
// names files and directories).
std::string sanitize(const std::string& name) {
  std::string out = name.empty() ? "uroce" : name;
  for (char& c : out)
    if (!(isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_')) c = '_';
  return out;
}

std::string driver_name(const std::string& spec) { return spec.substr(0, spec.find(',')); }

bool is_af_packet(const std::string& spec) {
  const std::string drv = driver_name(spec);
  return drv.rfind("net_af_packet", 0) == 0 || drv.rfind("eth_af_packet", 0) == 0;
}

uint16_t sizing_mtu(const DpdkPortConfig& config) {
  return config.mtu ? config.mtu : DpdkPort::kJumboMtu;
}

// The value of devargs key ("iface" in "net_af_packet0,iface=veth0").
std::string devarg(const std::string& spec, const std::string& key) {
  size_t pos = 0;
  while ((pos = spec.find(',', pos)) != std::string::npos) {
    ++pos;
    if (spec.compare(pos, key.size() + 1, key + "=") == 0) {
      const size_t start = pos + key.size() + 1;
      return spec.substr(start, spec.find(',', start) - start);
    }
  }
  return "";
}

// net_af_packet copies frames through a PACKET_MMAP ring whose frame size
// (default 2048) bounds the frames it passes (the kernel puts ~80 bytes of
// tpacket header and alignment before each), and its RX queue wants mbufs
// that hold a whole ring frame.
uint32_t af_packet_frame_size(const DpdkPortConfig& config) {
  const std::string given = devarg(config.spec, "framesz");
  if (!given.empty()) return uint32_t(std::strtoul(given.c_str(), nullptr, 0));
  const uint32_t need = uint32_t(sizing_mtu(config)) + 14 + 4 + 4 + 128;  // L2, VLAN, FCS, tpacket
  return (need + 1023) / 1024 * 1024;
}

// A spec without framesz gets ring frames sized for the MTU, in blocks of
// whole pages (the kernel's rule) holding whole frames.
std::string vdev_devargs(const DpdkPortConfig& config) {
  if (!is_af_packet(config.spec) || !devarg(config.spec, "framesz").empty()) return config.spec;
  const uint32_t frame = af_packet_frame_size(config);
  const uint32_t block = frame * (4096 / std::gcd(frame, 4096u));
  std::string out = config.spec;
  out += ",framesz=" + std::to_string(frame) + ",blocksz=" + std::to_string(block);
  // The RX ring is the port's buffer for the time the engine is off its CPU
  // (a time slice, milliseconds, on a busy host): a burst it cannot hold is
  // dropped (rx_missed). 16 MiB of frames, at least 512: 8192 frames at MTU
  // 1500, 1820 at 9000 (the TX ring is the same size).
  if (devarg(out, "framecnt").empty()) {
    constexpr uint32_t kRingBytes = 16u << 20;
    const uint32_t per_block = block / frame;
    const uint32_t frames = std::max<uint32_t>(512, kRingBytes / frame) / per_block * per_block;
    out += ",framecnt=" + std::to_string(frames);
  }
  return out;
}

// The net_af_packet PMD's socket on iface (it keeps it private): the packet
// socket of this process bound to that interface with a TPACKET_V2 ring.
// -1 if none is found.
int find_af_packet_socket(const std::string& iface) {
  const int ifindex = int(if_nametoindex(iface.c_str()));
  if (ifindex <= 0) return -1;
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  int found = -1;
  while (dirent* e = readdir(d)) {
    const int fd = std::atoi(e->d_name);
    if (fd <= 2 || fd == dirfd(d)) continue;
    sockaddr_ll addr = {};
    socklen_t alen = sizeof(addr);
    int version = -1;
    socklen_t vlen = sizeof(version);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &alen) != 0 ||
        addr.sll_family != AF_PACKET || addr.sll_ifindex != ifindex ||
        getsockopt(fd, SOL_PACKET, PACKET_VERSION, &version, &vlen) != 0 || version != TPACKET_V2)
      continue;
    found = fd;  // the newest such socket: this open's
  }
  closedir(d);
  return found;
}

std::string cpu_list() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::string out;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int cpu = 0; cpu < kMaxEalCpu; ++cpu) {
      if (!CPU_ISSET(cpu, &set)) continue;
      if (!out.empty()) out += ',';
      out += std::to_string(cpu);
    }
  }
  return out.empty() ? "0" : out;
}

[[maybe_unused]] bool hugepages_available() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  long free_pages = 0;
  while (meminfo >> key) {
    if (key == "HugePages_Free:") {
      meminfo >> free_pages;
      break;
    }
    meminfo.ignore(256, '\n');
  }
  if (free_pages <= 0) return false;
  std::ifstream mounts("/proc/mounts");
  std::string line;
  while (std::getline(mounts, line))
    if (line.find(" hugetlbfs ") != std::string::npos) return true;
  return false;
}

}  // namespace

bool is_pci_spec(const std::string& spec) {
  // [domain:]bus:device.function, hexadecimal: "0000:03:00.0" or "03:00.0".
  const std::string addr = driver_name(spec);
  size_t i = 0;
  auto hex_run = [&](size_t n) {
    for (size_t k = 0; k < n; ++k, ++i)
      if (i >= addr.size() || !is_hex(addr[i])) return false;
    return true;
  };
  if (addr.size() == 12) {
    if (!hex_run(4) || addr[i++] != ':') return false;
  } else if (addr.size() != 7) {
    return false;
  }
  return hex_run(2) && addr[i++] == ':' && hex_run(2) && addr[i++] == '.' && addr[i] >= '0' &&
         addr[i] <= '7';
}

std::vector<std::string> build_eal_args(const DpdkPortConfig& config, bool hugepages) {
  std::vector<std::string> args = {"uroced"};
  args.push_back("--file-prefix=uroce-" + sanitize(config.engine_name));
  // One lcore (the calling engine thread), allowed on every CPU the process
  // may use: EAL would otherwise pin it, and every engine, to CPU 0.
  args.push_back("--lcores=0@(" + cpu_list() + ")");
  args.push_back("--log-level=" + std::to_string(config.log_level));
  args.push_back("--no-telemetry");  // no telemetry socket and thread
  if (config.use_hugepages && hugepages) {
    // No -m: EAL takes hugepages as pools need them, not memory_mb up front.
    args.push_back("--huge-unlink");  // no hugepage files left behind
  } else {
    args.push_back("--no-huge");
    args.push_back("-m");
    args.push_back(std::to_string(config.memory_mb));
    // No shared config files: no secondary processes, no IPC thread, and
    // nothing left in /var/run/dpdk that a later engine could trip over.
    args.push_back("--no-shconf");
  }
  if (is_pci_spec(config.spec)) {
    args.push_back("-a");
    args.push_back(config.spec);
  } else {
    args.push_back("--no-pci");
    args.push_back("--vdev=" + vdev_devargs(config));
  }
  for (const std::string& a : config.extra_eal_args) args.push_back(a);
  return args;
}

#ifdef UROCE_HAVE_DPDK

namespace {

struct EalState {
  std::mutex mu;
  bool tried = false;
  bool ok = false;
  std::string error;
  std::vector<std::string> args;
  std::vector<std::string> log;  // DPDK's last lines since clear_log(), for error messages
  unsigned pools = 0;    // mempool names must be unique
};

EalState& eal() {
  static EalState* s = new EalState;  // never destroyed: EAL threads may log at exit
  return *s;
}

// DPDK logs go to stderr (the engine's log), not to stdout and syslog as
// EAL's default stream does; the last lines are kept for error messages.
ssize_t log_write(void*, const char* buf, size_t size) {
  (void)!::write(STDERR_FILENO, buf, size);
  std::string line(buf, size);
  while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.pop_back();
  if (!line.empty()) {
    std::lock_guard<std::mutex> lock(eal().mu);
    std::vector<std::string>& log = eal().log;
    if (log.size() == 3) log.erase(log.begin());
    log.push_back(line.substr(0, 200));
  }
  return ssize_t(size);
}

void clear_log() {
  std::lock_guard<std::mutex> lock(eal().mu);
  eal().log.clear();
}

// msg, then what DPDK logged since clear_log() (its reasons are often there).
std::string with_log(std::string msg) {
  std::lock_guard<std::mutex> lock(eal().mu);
  for (size_t i = 0; i < eal().log.size(); ++i)
    msg += (i ? " | " : " (DPDK: ") + eal().log[i];
  if (!eal().log.empty()) msg += ")";
  return msg;
}

constexpr uint32_t kEthOverhead = RTE_ETHER_HDR_LEN + RTE_ETHER_CRC_LEN;  // as ethdev counts

// Reads the kernel interface's MTU into mtu, first setting it to want if
// want is not 0 and differs.
std::string kernel_mtu(const std::string& iface, uint16_t want, uint16_t& mtu) {
  if (iface.empty() || iface.size() >= IFNAMSIZ) return "af_packet spec without a valid iface=";
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::string("socket: ") + std::strerror(errno);
  ifreq ifr = {};
  std::memcpy(ifr.ifr_name, iface.c_str(), iface.size());
  std::string err;
  if (ioctl(fd, SIOCGIFMTU, &ifr) != 0) {
    err = "cannot read the MTU of " + iface + ": " + std::strerror(errno);
  } else if (want && ifr.ifr_mtu != want) {
    ifr.ifr_mtu = want;
    if (ioctl(fd, SIOCSIFMTU, &ifr) != 0)
      err = "cannot set MTU " + std::to_string(want) + " on " + iface + ": " + std::strerror(errno);
  }
  if (err.empty()) mtu = uint16_t(ifr.ifr_mtu);
  ::close(fd);
  return err;
}

std::string init_eal(const DpdkPortConfig& config, std::string& notes) {
  EalState& s = eal();
  if (s.tried) return s.ok ? "" : s.error;
  s.tried = true;
  const bool huge = hugepages_available();
  if (config.use_hugepages && !huge)
    notes += "hugepages requested but none free (or no hugetlbfs mount): running with --no-huge; ";
  s.args = build_eal_args(config, huge);

  cookie_io_functions_t io = {};
  io.write = log_write;
  if (FILE* f = fopencookie(nullptr, "w", io)) {
    setvbuf(f, nullptr, _IOLBF, 0);
    rte_openlog_stream(f);
  }
  std::vector<char*> argv;
  std::vector<std::string> copy = s.args;  // EAL may permute argv
  for (std::string& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int ret = rte_eal_init(int(argv.size() - 1), argv.data());
  const int eal_errno = rte_errno;
  // Without shared config EAL leaves its runtime directory
  // (/var/run/dpdk/<prefix>) empty: remove it rather than leave one behind
  // per engine name.
  if (std::find(s.args.begin(), s.args.end(), "--no-shconf") != s.args.end())
    ::rmdir(rte_eal_get_runtime_dir());
  if (ret < 0) {
    s.error = with_log(std::string("DPDK EAL initialisation failed: ") + rte_strerror(eal_errno));
    return s.error;
  }
  s.ok = true;
  return "";
}

// Stops and closes an ethdev port; a vdev is also removed, so that opening
// the same spec again probes it afresh.
void release_device(uint16_t pid) {
  rte_eth_dev_info info;
  rte_device* dev = rte_eth_dev_info_get(pid, &info) == 0 ? info.device : nullptr;
  char name[RTE_ETH_NAME_MAX_LEN] = {};
  rte_eth_dev_get_name_by_port(pid, name);
  rte_eth_dev_stop(pid);
  rte_eth_dev_close(pid);
  if (dev && !is_pci_spec(name)) rte_dev_remove(dev);
}

std::string port_error(const std::string& what, int ret) {
  return with_log(what + ": " + rte_strerror(ret < 0 ? -ret : ret));
}

// The ethdev the spec names, probing it if EAL did not (a second port in one
// process, or the same port opened again after close()).
std::string find_port(const DpdkPortConfig& config, uint16_t& port_id) {
  std::string name = driver_name(config.spec);
  if (is_pci_spec(config.spec) && name.size() == 7) name = "0000:" + name;
  if (rte_eth_dev_get_port_by_name(name.c_str(), &port_id) == 0) return "";
  if (is_pci_spec(config.spec)) {
    // Some PMDs name their ports otherwise: take the one port EAL found.
    if (rte_eth_dev_count_avail() == 1) {
      uint16_t pid;
      RTE_ETH_FOREACH_DEV(pid) {
        port_id = pid;
        return "";
      }
    }
  }
  const std::string devargs = is_pci_spec(config.spec) ? config.spec : vdev_devargs(config);
  const int ret = rte_dev_probe(devargs.c_str());
  if (ret < 0) return port_error("cannot probe device '" + devargs + "'", ret);
  if (rte_eth_dev_get_port_by_name(name.c_str(), &port_id) == 0) return "";
  return with_log("no ethdev port for '" + config.spec + "' (is the driver or device right?)");
}

}  // namespace

std::vector<std::string> DpdkPort::eal_args() { return eal().args; }

std::string DpdkPort::open(const DpdkPortConfig& config) {
  if (is_open()) return "port already open";
  if (config.spec.empty()) return "no port spec (e.g. net_af_packet0,iface=veth0 or a PCI address)";
  notes_.clear();
  clear_log();
  std::string err = init_eal(config, notes_);
  if (!err.empty()) return err;
  uint16_t pid = 0;
  err = find_port(config, pid);
  if (!err.empty()) return err;

  rte_eth_dev_info info;
  int ret = rte_eth_dev_info_get(pid, &info);
  if (ret != 0) return port_error("cannot query device", ret);
  // The MTU of the link; ethdev_mtu is what ethdev is told.
  uint16_t mtu = config.mtu, ethdev_mtu = config.mtu;
  const bool af_packet = is_af_packet(config.spec);
  if (af_packet) {
    // net_af_packet (DPDK 22.11) reports a 1518-byte maximum frame and so
    // refuses any ethdev MTU above 1500, yet passes every frame its ring
    // frames hold: the kernel interface's MTU is the real one. Set and read
    // that, and give ethdev the most it accepts.
    err = kernel_mtu(devarg(config.spec, "iface"), config.mtu, mtu);
    if (!err.empty()) return err;
    const uint32_t ethdev_max =
        info.max_rx_pktlen > kEthOverhead ? info.max_rx_pktlen - kEthOverhead : RTE_ETHER_MTU;
    ethdev_mtu = uint16_t(std::min<uint32_t>({mtu, ethdev_max, info.max_mtu}));
  } else {
    if (mtu == 0 && rte_eth_dev_get_mtu(pid, &mtu) != 0) mtu = RTE_ETHER_MTU;
    if (mtu < info.min_mtu || mtu > info.max_mtu)
      return "MTU " + std::to_string(mtu) + " outside the device's range " +
             std::to_string(info.min_mtu) + ".." + std::to_string(info.max_mtu);
    ethdev_mtu = mtu;
  }

  // One frame per mbuf: room for the largest frame the MTU allows (with a
  // VLAN tag and FCS), and at least for the largest packet buffer.
  uint32_t frame_max = std::max<uint32_t>(uint32_t(mtu) + 14 + 4 + 4, kFrameCapacity);
  if (af_packet) frame_max = std::max(frame_max, af_packet_frame_size(config));
  const uint32_t room = RTE_PKTMBUF_HEADROOM + (frame_max + 63) / 64 * 64;
  if (room > UINT16_MAX) return "MTU too large for an mbuf";
  std::string pool_name;
  {
    std::lock_guard<std::mutex> lock(eal().mu);
    pool_name = "uroce_pool" + std::to_string(eal().pools++);
  }
  // Without hugepages all memory is one anonymous mapping: any socket.
  const int dev_socket = rte_eth_dev_socket_id(pid);
  const int socket =
      (dev_socket < 0 || rte_eal_has_hugepages() == 0) ? int(SOCKET_ID_ANY) : dev_socket;
  rte_mempool* pool = rte_pktmbuf_pool_create(pool_name.c_str(), config.mbufs, 256, 0,
                                              uint16_t(room), socket);
  if (!pool)
    return with_log("cannot create an mbuf pool of " + std::to_string(config.mbufs) + " x " +
                    std::to_string(room) + " bytes: " + rte_strerror(rte_errno) +
                    " (raise DpdkPortConfig::memory_mb?)");

  // net_af_packet receives into Packets (net/dpdk_rx_slots.h): slots as
  // long as its ring's frames, a quarter of the mbufs (the engine holds few
  // received frames at once, and copies while it holds many).
  DpdkRxSlots* rx_slots = nullptr;
  if (af_packet) {
    std::string slots_name;
    {
      std::lock_guard<std::mutex> lock(eal().mu);
      slots_name = "uroce_rx" + std::to_string(eal().pools++);
    }
    const uint32_t slots = std::max<uint32_t>(config.mbufs / 4, 2 * kBurst);
    if (std::string e = DpdkRxSlots::create(slots_name, slots, af_packet_frame_size(config), socket, &rx_slots);
        !e.empty()) {
      rte_mempool_free(pool);
      return with_log(e);
    }
  }
  auto fail = [&](const std::string& what, int r) {
    std::string e = port_error(what, r);
    release_device(pid);
    if (rx_slots) rx_slots->release();
    rte_mempool_free(pool);
    return e;
  };
  rte_eth_conf conf = {};
  conf.rxmode.mtu = ethdev_mtu;
  // The receive slots' mbufs are not direct, so net_af_packet could not put
  // a VLAN tag the kernel took off back into the frame (it would log an
  // error per frame): it leaves the tag in the metadata and rx_burst puts
  // it back.
  if (rx_slots) conf.rxmode.offloads |= RTE_ETH_RX_OFFLOAD_VLAN_STRIP;
  ret = rte_eth_dev_configure(pid, 1, 1, &conf);
  if (ret != 0) return fail("cannot configure device", ret);
  uint16_t nb_rxd = config.rx_descriptors, nb_txd = config.tx_descriptors;
  ret = rte_eth_dev_adjust_nb_rx_tx_desc(pid, &nb_rxd, &nb_txd);
  if (ret != 0) return fail("cannot adjust ring sizes", ret);
  if (config.mtu != 0 && !af_packet) {
    ret = rte_eth_dev_set_mtu(pid, config.mtu);
    if (ret != 0) return fail("cannot set MTU " + std::to_string(config.mtu), ret);
  }
  ret = rte_eth_rx_queue_setup(pid, 0, nb_rxd, socket, nullptr, rx_slots ? rx_slots->pool() : pool);
  if (ret != 0) return fail("cannot set up the RX queue", ret);
  ret = rte_eth_tx_queue_setup(pid, 0, nb_txd, socket, nullptr);
  if (ret != 0) return fail("cannot set up the TX queue", ret);
  ret = rte_eth_dev_start(pid);
  if (ret != 0) return fail("cannot start device", ret);
  ret = rte_eth_promiscuous_disable(pid);
  if (ret != 0) notes_ += "promiscuous mode cannot be disabled (" + std::string(rte_strerror(-ret)) + "); ";
  rte_ether_addr mac;
  ret = rte_eth_macaddr_get(pid, &mac);
  if (ret != 0) return fail("cannot read the MAC address", ret);

  std::copy(mac.addr_bytes, mac.addr_bytes + 6, mac_.begin());
  mtu_ = mtu;
  if (!af_packet) rte_eth_dev_get_mtu(pid, &mtu_);
  char name[RTE_ETH_NAME_MAX_LEN] = {};
  rte_eth_dev_get_name_by_port(pid, name);
  device_name_ = name;
  port_id_ = pid;
  mbuf_data_room_ = room - RTE_PKTMBUF_HEADROOM;
  counters_ = {};
  tx_count_ = 0;
  af_packet_fd_ = af_packet ? find_af_packet_socket(devarg(config.spec, "iface")) : -1;
  af_packet_drops_ = 0;
  pool_ = pool;
  rx_slots_ = rx_slots;
  // net_af_packet copies each frame into its ring with the CPU and frees
  // the mbuf at once: engine frames can be lent to it (send()).
  set_up_loans(af_packet);
  return "";
}

void DpdkPort::close() {
  if (!is_open()) return;
  flush();
  if (tx_count_) {
    rte_pktmbuf_free_bulk(tx_buf_, unsigned(tx_count_));
    counters_.tx_ring_full += tx_count_;
    tx_count_ = 0;
  }
  release_device(port_id_);
  // Frees the receive slots, or keeps them while the engine holds some.
  if (rx_slots_) rx_slots_->release();
  rx_slots_ = nullptr;
  rte_mempool_free(pool_);
  pool_ = nullptr;
  af_packet_fd_ = -1;  // the PMD closed it
}

std::string DpdkPort::accept_unicast(const std::array<uint8_t, 6>& mac) {
  if (af_packet_fd_ < 0) return "not a net_af_packet port";
  sockaddr_ll addr = {};
  socklen_t alen = sizeof(addr);
  if (getsockname(af_packet_fd_, reinterpret_cast<sockaddr*>(&addr), &alen) != 0)
    return std::string("getsockname: ") + std::strerror(errno);
  packet_mreq mr = {};
  mr.mr_ifindex = addr.sll_ifindex;
  mr.mr_type = PACKET_MR_UNICAST;
  mr.mr_alen = 6;
  std::copy(mac.begin(), mac.end(), mr.mr_address);
  if (setsockopt(af_packet_fd_, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mr, sizeof(mr)) != 0)
    return std::string("PACKET_ADD_MEMBERSHIP: ") + std::strerror(errno);
  return "";
}

void DpdkPort::refresh_hw_counters() {
  if (!is_open()) return;
  rte_eth_stats st;
  if (rte_eth_stats_get(port_id_, &st) != 0) return;
  // net_af_packet (DPDK 22.11) reports no imissed: the kernel counts what
  // its RX ring had no room for (reading the statistics resets them).
  if (af_packet_fd_ >= 0) {
    tpacket_stats ts = {};
    socklen_t len = sizeof(ts);
    if (getsockopt(af_packet_fd_, SOL_PACKET, PACKET_STATISTICS, &ts, &len) == 0)
      af_packet_drops_ += ts.tp_drops;
  }
  counters_.rx_missed = st.imissed + af_packet_drops_;
  counters_.rx_errors = st.ierrors;
  counters_.rx_no_mbuf = st.rx_nombuf;
  counters_.tx_errors = st.oerrors;
}

bool DpdkPort::link_up() const {
  if (!is_open()) return false;
  rte_eth_link link = {};
  if (rte_eth_link_get_nowait(port_id_, &link) != 0) return false;
  return link.link_status == RTE_ETH_LINK_UP;
}

#else  // !UROCE_HAVE_DPDK

std::vector<std::string> DpdkPort::eal_args() { return {}; }

std::string DpdkPort::open(const DpdkPortConfig&) {
  return "this uroce was built without DPDK (install libdpdk-dev and reconfigure)";
}
void DpdkPort::close() {}
void DpdkPort::refresh_hw_counters() {}
bool DpdkPort::link_up() const { return false; }
std::string DpdkPort::accept_unicast(const std::array<uint8_t, 6>&) { return "built without DPDK"; }

#endif  // UROCE_HAVE_DPDK

std::string DpdkPort::stats_text() const {
  std::ostringstream os;
  os << "port " << (device_name_.empty() ? "dpdk" : device_name_) << '\n';
#define UROCE_DPDK_COUNTER_LINE(name, desc) \
  os << "  " << #name << ' ' << counters_.name << "    # " << desc << '\n';
  UROCE_DPDK_PORT_COUNTERS(UROCE_DPDK_COUNTER_LINE)
#undef UROCE_DPDK_COUNTER_LINE
  return os.str();
}

}  // namespace uroce::net
