// A DPDK ethdev port: a NIC by PCI address or any vdev (net_af_packet,
// net_tap, net_memif, ...), one RX and one TX queue, polled by the engine
// thread. Frames are copied between mbufs and net::Packet buffers, so the rest
// of the engine never sees DPDK types and only net/ needs DPDK's headers;
// on net_af_packet, whose driver copies each frame between its ring and an
// mbuf with the CPU, neither side copies again: a frame sent is lent to the
// mbuf (send()), and the RX mbufs' buffers are Packets (net/dpdk_rx_slots.h).
//
// Control path (open, close, stats): net/dpdk_port.cc; may allocate and log.
// Datapath (rx_burst, tx, flush): net/dpdk_port_datapath.cc; no exceptions, no
// allocation once the PacketPool is warm, a counter for every drop.
//
// EAL initialises once per process (the first open() builds its arguments from
// that port's config); the engine thread that calls open() becomes EAL's main
// lcore and must be the only thread that calls the datapath functions.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "net/packet.h"

struct rte_mbuf;
struct rte_mempool;

namespace uroce::net {

class DpdkRxSlots;

struct DpdkPortConfig {
  // Names the EAL file prefix ("uroce-<engine_name>"), so several engines run
  // on one host at once.
  std::string engine_name = "uroce0";
  // "net_af_packet0,iface=veth0" (any vdev: driver name, comma, devargs) or a
  // PCI address ("0000:03:00.0", "03:00.0", optionally ",devargs").
  std::string spec;
  // Ethernet MTU to set on the port; 0 keeps the port's current MTU.
  uint16_t mtu = 0;
  // Back EAL memory with hugepages when the host has free ones; otherwise
  // (and by default) --no-huge with memory_mb of ordinary memory.
  bool use_hugepages = false;
  uint32_t memory_mb = 256;
  uint16_t rx_descriptors = 1024;
  uint16_t tx_descriptors = 1024;
  uint32_t mbufs = 4095;  // 2^n - 1 suits rte_mempool best
  // DPDK log level for every component (RTE_LOG_ERR = 4, RTE_LOG_DEBUG = 8).
  uint32_t log_level = 4;
  // Appended to the EAL arguments as they are (e.g. "--iova-mode=va").
  std::vector<std::string> extra_eal_args;
};

// What the port counted. The datapath updates the software counters; the
// hardware ones (rx_missed, rx_errors, rx_no_mbuf, tx_errors) are the
// driver's, read by DpdkPort::refresh_hw_counters().
#define UROCE_DPDK_PORT_COUNTERS(X)                                                          \
  X(rx_frames, "frames received and handed to the engine")                                   \
  X(rx_bytes, "bytes of the frames received")                                                 \
  X(rx_in_place, "frames the driver received straight into a packet buffer (net_af_packet: no copy)") \
  X(rx_oversize, "received frames dropped: longer than a packet buffer (kFrameCapacity)")    \
  X(tx_frames, "frames the driver accepted for transmission")                                 \
  X(tx_bytes, "bytes of the frames transmitted")                                              \
  X(rx_no_buffer, "received frames dropped: every packet buffer of the engine in use")       \
  X(tx_ring_full, "frames dropped: the TX queue was full (senders wait before it is; ACKs and\
 replies do not)")                                                                           \
  X(tx_no_mbuf, "frames dropped: the mbuf pool was empty")                                    \
  X(tx_oversize, "frames dropped: longer than an mbuf's data room")                           \
  X(tx_port_closed, "frames dropped: the port is not open")                                   \
  X(rx_missed, "frames dropped for want of RX descriptors: the NIC's imissed, or the af_packet\
 ring's drops (PACKET_STATISTICS tp_drops: the engine did not empty it in time)")             \
  X(rx_errors, "driver: erroneous received frames (ierrors)")                                 \
  X(rx_no_mbuf, "driver: RX mbuf allocation failures (rx_nombuf)")                            \
  X(tx_errors, "driver: failed transmissions (oerrors)")

struct DpdkPortCounters {
#define UROCE_DPDK_COUNTER_FIELD(name, desc) uint64_t name = 0;
  UROCE_DPDK_PORT_COUNTERS(UROCE_DPDK_COUNTER_FIELD)
#undef UROCE_DPDK_COUNTER_FIELD
};

// The EAL argument vector open() would use for this config (argv[0]
// included), without touching EAL: for tests and for the engine's log.
// hugepages_available says whether the host has free hugepages.
std::vector<std::string> build_eal_args(const DpdkPortConfig& config, bool hugepages_available);

// True if the spec names a PCI device rather than a vdev.
bool is_pci_spec(const std::string& spec);

class DpdkPort {
 public:
  static constexpr size_t kBurst = 32;           // RX burst; TX flushes at this many
  // Frames the TX queue holds while the driver's ring is full: the device's
  // senders wait at half of it (Device::tx_ready), so only frames nobody
  // holds back (ACKs, ARP) can find it full.
  static constexpr size_t kTxQueue = 512;
  static constexpr uint16_t kJumboMtu = 9000;    // sizing when the MTU is kept

  DpdkPort();
  DpdkPort(const DpdkPort&) = delete;
  DpdkPort& operator=(const DpdkPort&) = delete;
  ~DpdkPort();

  // Control path. Initialises EAL if this process has not yet (a failed EAL
  // initialisation is final for the process: later calls return the same
  // error), probes the device, configures one RX and one TX queue, disables
  // promiscuous mode, sets the MTU and starts the port. Returns "" on
  // success, otherwise a one-line reason; never exits the process.
  std::string open(const DpdkPortConfig& config);
  // Flushes the TX buffer, stops and closes the device. Idempotent.
  void close();
  bool is_open() const { return pool_ != nullptr; }

  // ---- datapath (engine thread only) ----

  // Receives up to max (at most kBurst) frames, each in a Packet (len set,
  // offsets zero): on net_af_packet the one the driver received it into
  // (lent until pool.put() gives it back), elsewhere, or while few of those
  // are left, a copy in a Packet from pool. The caller owns the returned
  // packets and returns them to pool.
  size_t rx_burst(Packet** out, size_t max, PacketPool& pool);
  // Copies p's frame (p->len bytes) into an mbuf and queues it; kBurst
  // queued frames are flushed. p stays the caller's. Dropped (tx_ring_full)
  // only when kTxQueue frames are already waiting for the driver.
  void tx(const Packet* p);
  // Sends p and gives it back to pool. On net_af_packet p's buffer is
  // attached to the mbuf as an external buffer (the driver copies it into
  // its ring and frees the mbuf within the flush, which puts p back): no
  // copy here. Elsewhere (a NIC's DMA cannot reach engine memory) tx() and
  // pool.put(p).
  void send(Packet* p, PacketPool& pool);
  // Hands the queued frames to the driver; what its full ring refuses stays
  // queued, in order, for the next flush (back-pressure, not loss). Returns
  // the frames sent. Call once per poll-loop iteration.
  size_t flush();
  size_t tx_pending() const { return tx_count_; }

  // ---- control path ----

  const DpdkPortCounters& counters() const { return counters_; }
  // Reads the driver's statistics into the hardware counters.
  void refresh_hw_counters();
  // Link state as the driver reports it now (no wait).
  bool link_up() const;
  // "uroce stats" lines: name, value and description per counter.
  std::string stats_text() const;

  const std::array<uint8_t, 6>& mac() const { return mac_; }
  // net_af_packet: has the interface accept frames to mac besides its own
  // (PACKET_MR_UNICAST: the kernel adds it to the NIC's unicast filter, or
  // turns on promiscuous mode where there is none, as for a macvlan; held
  // while the port is open). "" or the reason.
  std::string accept_unicast(const std::array<uint8_t, 6>& mac);
  // net_af_packet: the PMD's packet socket (its RX ring's), which the engine
  // sleeps on (net/af_packet_wakeup.h); -1 for other ports. The port's: it
  // closes it.
  int af_packet_socket() const { return af_packet_fd_; }
  uint16_t mtu() const { return mtu_; }
  uint16_t port_id() const { return port_id_; }
  const std::string& device_name() const { return device_name_; }
  // Notes from open() worth a log line (e.g. hugepages asked for but absent).
  const std::string& notes() const { return notes_; }
  // The EAL arguments this process was initialised with.
  static std::vector<std::string> eal_args();

 private:
  struct TxLoan;  // a Packet lent to an mbuf (net/dpdk_port_datapath.cc)
  static void return_loan(void* addr, void* loan);
  void set_up_loans(bool lend);
  rte_mempool* pool_ = nullptr;
  // net_af_packet: the RX queue's pool, whose buffers are Packets
  // (net/dpdk_rx_slots.h); nullptr elsewhere (RX mbufs come from pool_).
  DpdkRxSlots* rx_slots_ = nullptr;
  uint16_t port_id_ = 0;
  uint16_t mtu_ = 0;
  uint32_t mbuf_data_room_ = 0;  // bytes a single-segment mbuf can hold
  std::array<uint8_t, 6> mac_{};
  std::string device_name_;
  std::string notes_;
  rte_mbuf* tx_buf_[kTxQueue] = {};
  uint32_t tx_len_[kTxQueue] = {};
  size_t tx_count_ = 0;
  // Lending frames to mbufs (net_af_packet): one loan per frame the TX queue
  // can hold, on a free list; none left (a driver that keeps mbufs) copies.
  bool lend_tx_ = false;
  std::unique_ptr<TxLoan[]> loans_;
  TxLoan* free_loans_ = nullptr;
  // net_af_packet: the PMD's packet socket, whose ring drops (tp_drops) are
  // the port's rx_missed; -1 otherwise.
  int af_packet_fd_ = -1;
  uint64_t af_packet_drops_ = 0;
  DpdkPortCounters counters_;
};

}  // namespace uroce::net
