// The emulated HCA: object tables, the control verbs the engine's sessions
// call, and the datapath poll (requester, ingress, responder, completer,
// timers). Single-threaded: everything here runs on the engine thread.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "device/qp1_agent.h"
#include "device/counters.h"
#include "device/flow_steering.h"
#include "device/multicast.h"
#include "device/objects.h"
#include "device/qp.h"
#include "net/af_packet_wakeup.h"
#include "net/arp.h"
#include "net/dpdk_port.h"
#include "net/fault_injector.h"
#include "net/loopback_port.h"
#include "net/ndp.h"
#include "net/netdev.h"
#include "net/packet.h"
#include "net/pcap_writer.h"
#include "uroce/abi.h"

namespace uroce::device {

struct DeviceConfig {
  std::string name = "uroce0";
  std::array<uint8_t, 4> ip{127, 0, 0, 1};
  // An IPv6 address for RoCEv2 over IPv6 (GID index 2); all zero: none.
  std::array<uint8_t, 16> ip6{};
  std::array<uint8_t, 6> mac{0x02, 0x75, 0x72, 0x00, 0x00, 0x01};
  bool mac_from_port = false;  // take the wire port's MAC (no --mac given)
  // DPDK ethdev for the wire ("net_af_packet0,iface=veth0", a PCI address);
  // empty: the engine has its loopback port only.
  std::string port_spec;
  uint16_t port_mtu = 0;  // 0: keep the interface's MTU
  int vlan = -1;          // 802.1Q VID on the wire port (-1: untagged)
  bool use_hugepages = true;  // when the host has free ones (EAL falls back to --no-huge)
  // vm.max_map_count of the host: bounds the queues the device advertises
  // (device/params.h, queue_limits).
  uint64_t max_map_count = kDefaultMaxMapCount;
  // The kernel interface the device is bound to (uroced --netdev IF): the
  // wire port runs on it, its addresses are the GIDs, and the kernel answers
  // ARP/NDP for them and resolves the device's neighbours. Empty: the
  // device has addresses of its own (--ip/--ip6, or lo's by default).
  std::string netdev;
  // Device memory all clients may hold at once (0: no device memory).
  uint64_t max_dm_size = kDefaultMaxDmSize;
  // How long delay drop holds a frame that finds no receive posted
  // (mlx5's debugfs delay_drop/timeout: 100 ms by default and at most).
  uint32_t delay_drop_timeout_us = kDelayDropTimeoutNs / 1000;
  // The IB CM's response timeout (4.096 us * 2^t, rdma_cm's 20) and MAD
  // retries (rdma_cm's 15): how long a REQ, REP or DREQ waits for its
  // answer before it is sent again, and how often (uroced --cm-*).
  int cm_response_timeout = 20;
  int cm_max_retries = 15;
  // mlx5 mode (uroced --mlx5): the device answers as a ConnectX-5 (vendor and
  // part ids, a PCI parent in its sysfs tree), so that the drop-in libmlx5
  // (verbs_provider/mlx5/) serves mlx5 direct verbs on it.
  bool mlx5 = false;
  // The responder contexts a DCT keeps (and contexts it remembers having let
  // go): kMaxDcContexts; tests lower it to reach the limit.
  size_t max_dc_contexts = kMaxDcContexts;
};

enum class PortId : uint8_t { kLoopback, kWire };

template <typename T>
struct Result {
  int err = 0;  // errno
  T value{};
};

class Device {
 public:
  explicit Device(const DeviceConfig& config);
  ~Device();

  const abi::DeviceInfo& info() const { return info_; }
  const DeviceConfig& config() const { return config_; }

  // ---- control plane (errno results) ----
  Result<uint32_t> alloc_pd(Owner* o);
  int dealloc_pd(Owner* o, uint32_t pd);
  // shared_fd: the memfd of req.shared (-1: none); the caller keeps it.
  Result<uint32_t> reg_mr(Owner* o, const abi::RegMrRequest& req, int shared_fd = -1);  // returns key
  int rereg_mr(Owner* o, const abi::ReregMrRequest& req, uint32_t* new_key, int shared_fd = -1);
  int dereg_mr(Owner* o, uint32_t key);
  // Memory windows (device/mw.cc). alloc_mw returns the window's index.
  Result<uint32_t> alloc_mw(Owner* o, uint32_t pd, uint32_t type, uint32_t* rkey);
  int dealloc_mw(Owner* o, uint32_t index);
  // Indirect memory keys (device/mkey.cc). create_mkey returns the index.
  Result<uint32_t> create_mkey(Owner* o, uint32_t pd, uint32_t flags, uint32_t max_entries, uint32_t* key,
                               uint32_t* num_desc);
  int destroy_mkey(Owner* o, uint32_t index);
  // Device memory (device/device_memory.cc). alloc_dm returns the index and
  // the memfd (the device's: the caller passes it without closing it).
  Result<uint32_t> alloc_dm(Owner* o, const abi::AllocDmRequest& req, int* fd, uint64_t* map_length);
  int free_dm(Owner* o, uint32_t index);
  Result<uint32_t> reg_dm_mr(Owner* o, const abi::RegDmMrRequest& req);  // returns key
  uint64_t dm_used() const { return dm_used_; }
  Result<uint32_t> create_ah(Owner* o, uint32_t pd);
  int destroy_ah(Owner* o, uint32_t handle);
  Result<uint32_t> create_comp_channel(Owner* o, int fd);
  int destroy_comp_channel(Owner* o, uint32_t handle);
  Result<uint32_t> create_cq(Owner* o, const abi::CreateCqRequest& req);
  int resize_cq(Owner* o, uint32_t handle, uint32_t cqe);
  int destroy_cq(Owner* o, uint32_t handle);
  // mlx5 mode: the CQ's ring in mlx5's format from now on (kMlx5CqFormat);
  // *fd is the new ring's memfd, for the client.
  int cq_to_mlx5(Owner* o, uint32_t handle, uint32_t cqe_size, abi::Mlx5CqFormatReply* rep, int* fd);
  Cq* cq(uint32_t handle) const { return cqs_.get(handle); }
  Result<uint32_t> create_qp(Owner* o, const abi::CreateQpRequest& req);  // returns qpn
  int modify_qp(Owner* o, uint32_t qpn, uint32_t mask, const abi::QpAttr& attr);
  int query_qp(Owner* o, uint32_t qpn, abi::QpAttr* attr);
  int set_qp_udp_sport(Owner* o, uint32_t qpn, uint16_t udp_sport);
  // The Dynamically Connected transport (device/dc.cc): an RC QP in RESET
  // becomes a DCI or a DCT (kMlx5QpDc).
  int make_dc(Owner* o, uint32_t qpn, const abi::Mlx5QpDcRequest& req);
  int make_dc(Owner* o, uint32_t qpn, uint32_t dc_type, uint64_t access_key) {
    abi::Mlx5QpDcRequest req{};
    req.dc_type = dc_type;
    req.access_key = access_key;
    return make_dc(o, qpn, req);
  }
  // DCI streams (device/dc.cc): a work request of `w`'s stream failed before
  // it left; false when the DCI fails with it (too many streams failed).
  bool dci_stream_failed(Qp& qp, const abi::SendWqe& w);
  bool dci_stream_is_failed(const Qp& qp, const abi::SendWqe& w) const;
  int reset_dci_stream(Owner* o, uint32_t qpn, uint16_t stream);
  // DCI: points the QP at w's target when w is the next to start; false
  // while WQEs to the previous target are outstanding (st.status set if
  // w names none).
  bool dci_take_target(Qp& qp, const abi::SendWqe& w, SendWqeState& st);
  // DCI: the DCETH of a request packet it built.
  void dc_write_eth(const Qp& qp, net::Packet& p);
  // DCI: leaves RESET as a new incarnation (net::DcEth::dci_epoch).
  void dci_new_epoch(Qp& qp);
  // A packet to a DCI or a DCT (datapath.cc dispatch).
  void dc_receive(Qp& q, net::Packet& p);
  // A DCT's responder contexts go (the DCT leaves RTR or is destroyed).
  void release_dc_contexts(Qp& dct);
  // mlx5 mode: the QP's send queue in mlx5's format from now on
  // (kMlx5QpFormat, device/mlx5_sq.cc); *fd is its memfd, for the client.
  int qp_to_mlx5(Owner* o, uint32_t qpn, abi::Mlx5QpFormatReply* rep, int* fd);
  int wq_to_mlx5(Owner* o, uint32_t handle, abi::Mlx5WqFormatReply* rep, int* fd);
  // Traffic through an mlx5-format queue now: a sleeping engine looks at
  // their doorbells often for a while (kMlx5BusyWindowNs).
  void mlx5_activity() { mlx5_active_ns_ = now_ns_; }
  // mlx5 mode: a basic SRQ's WQEs in mlx5's linked list from now on
  // (kMlx5SrqFormat, device/mlx5_srq.cc); *fd is its memfd, for the client.
  int srq_to_mlx5(Owner* o, uint32_t handle, abi::Mlx5SrqFormatReply* rep, int* fd);
  // handle: a QPN (the creator's handle) or, from open_qp, id << 32 | QPN.
  int destroy_qp(Owner* o, uint64_t handle);
  Qp* qp(uint32_t qpn) const {  // inline: every received frame looks its QP up
    return qpn < kFirstQpn ? nullptr : qps_.get(qpn - kFirstQpn + 1);
  }
  Result<uint32_t> create_srq(Owner* o, const abi::CreateSrqRequest& req);  // returns handle
  int modify_srq(Owner* o, uint32_t handle, uint32_t mask, uint32_t max_wr, uint32_t limit);
  Srq* srq(uint32_t handle) const { return srqs_.get(handle); }
  struct SrqOpsResult {
    uint32_t done = 0;
    int err = 0;
  };
  SrqOpsResult post_srq_ops(Owner* o, uint32_t srq, const abi::SrqOp* ops, uint32_t n, uint32_t* handles);
  int destroy_srq(Owner* o, uint32_t handle);
  // fd < 0: a private domain; else the file decides which domain (O_CREAT, O_EXCL).
  Result<uint32_t> open_xrcd(Owner* o, int fd, uint32_t oflags);  // returns a handle
  int close_xrcd(Owner* o, uint32_t handle);
  Result<uint64_t> open_qp(Owner* o, uint32_t xrcd_handle, uint32_t qpn, uint64_t cookie);
  // ---- flow steering (device/flow_control.cc) ----
  // ibv_create_flow on the raw packet QP qpn; returns the rule's handle.
  Result<uint32_t> create_flow(Owner* o, uint32_t qpn, const abi::CreateFlowRequest& req);
  int destroy_flow(Owner* o, uint32_t handle);
  const FlowSteering& steering() const { return steering_; }
  // ---- UD multicast (device/multicast.cc) ----
  int attach_mcast(Owner* o, uint32_t qpn, const Gid& gid);
  int detach_mcast(Owner* o, uint32_t qpn, const Gid& gid);
  const MulticastGroups& multicast() const { return multicast_; }
  // ---- receive work queues and RSS (device/work_queue.cc, device/rss.cc) ----
  Result<uint32_t> create_wq(Owner* o, const abi::CreateWqRequest& req);  // returns a handle
  int modify_wq(Owner* o, uint32_t handle, const abi::ModifyWqRequest& req);
  int destroy_wq(Owner* o, uint32_t handle);
  Wq* wq(uint32_t handle) const { return wqs_.get(handle); }
  // wqs: 2^log_size WQ handles.
  Result<uint32_t> create_rwq_ind_table(Owner* o, uint32_t log_size, const uint32_t* wqs);
  int destroy_rwq_ind_table(Owner* o, uint32_t handle);
  Result<uint32_t> create_rss_qp(Owner* o, const abi::CreateRssQpRequest& req);  // returns the QPN
  // Delay drop's timeout (mlx5: 100 ms, the default and the maximum).
  // kFirstContactGraceNs (device/params.h); 0: none (unit tests of the
  // retry counter).
  void set_first_contact_grace_ns(uint64_t ns) { first_contact_grace_ns_ = ns; }
  uint64_t first_contact_grace_ns() const { return first_contact_grace_ns_; }
  // qp's destination is a QP of this engine still in RESET or INIT (its
  // process has not moved it to RTR yet), so it drops what qp sends.
  bool local_peer_not_ready(const Qp& qp) const;
  void set_delay_drop_timeout_ns(uint64_t ns) { delay_drop_timeout_ns_ = std::min(ns, kDelayDropTimeoutNs); }
  // Events of a QP reach every process holding a handle on it.
  void post_qp_event(Qp& qp, ibv_event_type type);
  // ---- ports (device/ports.cc) ----
  // Opens the DPDK port of config().port_spec; "" or the reason it failed.
  std::string open_wire_port();
  bool has_wire() const { return wire_ != nullptr; }
  // An fd that is readable while a frame waits in an af_packet port's ring,
  // so the engine can sleep; -1 when the port has none. Its filter lets in
  // the frames the engine serves, or all while flow rules may claim any
  // (net/af_packet_wakeup.h); the engine calls this before each sleep.
  int wire_wakeup_fd() const { return wakeup_.fd(); }
  bool arm_wire_wakeup() { return wakeup_.is_attached() && wakeup_.arm(wire_frames()); }
  bool wire_wakeup_armed() const { return wakeup_.armed(); }
  // The frames the wire port's ring takes: every frame while flow rules may
  // claim any, else the engine's own. Switched when flows come and go.
  net::AfPacketWakeup::Frames wire_frames() const {
    return steering_.active() ? net::AfPacketWakeup::Frames::kAll : net::AfPacketWakeup::Frames::kEngines;
  }
  void wire_frames_changed() {
    if (wakeup_.is_attached()) wakeup_.arm(wire_frames());
  }
  void count_wire_wakeup() { ++counters_.wire_wakeups; }
  std::string set_fault(PortId port, const net::FaultConfig& config);
  // Writes every frame crossing a port (loopback frames once) to a pcap file.
  std::string start_capture(const std::string& path, uint64_t max_frames);
  void stop_capture() { capture_.reset(); }
  bool capturing() const { return capture_ != nullptr; }
  uint64_t captured_frames() const { return captured_; }

  // ---- addresses and neighbours (device/addresses.cc) ----
  // Rebuilds the GID table from the interface's addresses: IPv4 as
  // ::ffff:a.b.c.d. An address keeps its index while it stays; a new one
  // takes its family's usual index (IPv4 0, IPv6 2) if free, else the first
  // free one from 3, else any. GID 1 is always the link-local GID of the
  // MAC. True if the table changed.
  bool set_addresses(const std::vector<net::IfAddress>& addrs);
  // The index of the interface the GIDs belong to (ibv_gid_entry::ndev_ifindex).
  void set_ndev_ifindex(uint32_t ifindex) { ndev_ifindex_ = ifindex; }
  uint32_t ndev_ifindex() const { return ndev_ifindex_; }
  // Bound to a kernel interface (--netdev): the kernel owns the addresses,
  // so the device answers no ARP/NDP and leaves frames that are not RoCE to
  // the kernel; `resolve` asks the kernel to resolve a neighbour (false:
  // it refused, the device sends its own request).
  using ResolveFn = std::function<bool(int family, const uint8_t* ip)>;
  void bind_to_kernel(ResolveFn resolve) {
    kernel_resolve_ = std::move(resolve);
    kernel_bound_ = true;
  }
  bool kernel_bound() const { return kernel_bound_; }
  // A kernel neighbour entry of the interface came, changed or went.
  void neighbour_update(const net::Neighbour& n);

  // Administrative link state of port 1. While down, the port drops every
  // frame (peers see timeouts, as on a pulled cable).
  void set_port_active(bool up);
  bool port_active() const { return info_.port.state == IBV_PORT_ACTIVE; }
  // Frees everything the owner still holds (client exited or was killed).
  void release_owner(Owner* o);
  // QP1's agent (the connection manager, cm/: the engine attaches it), and
  // what the device offers it: MADs sent from QP1, the neighbour cache.
  void attach_qp1_agent(Qp1Agent* agent) { qp1_agent_ = agent; }
  void qp1_send(const uint8_t* dgid, uint8_t sgid_index, const uint8_t* mad);  // kMadBytes
  bool qp1_neighbour_known(const uint8_t* dgid, bool solicit);

  // ---- datapath ----
  // One pass of the poll loop; returns true if it did any work.
  bool poll(uint64_t now_ns);
  // Takes every send WQE the owner has posted to its QPs in RTS (doorbell
  // order: before a control verb that destroys what they name).
  void take_posted_sends(const Owner* o);
  // Earliest timer deadline (0: none), so the engine knows how long it may sleep.
  uint64_t next_deadline_ns() const;

  // ---- observability ----
  const Counters& counters() const { return counters_; }
  std::string status_text() const;
  std::string stats_text() const;
  // The device's state and counters, for `uroce status/stats --json` and
  // `--watch` (device/report.cc).
  void report(nlohmann::json& out) const;
  size_t qp_count() const { return qp_count_; }

  // Transport internals, shared by requester/responder/completer.
  enum class MrCheck { kOk, kBadKey, kBadPd, kBadBounds, kBadAccess };
  // Inline: every message checks a key on each side.
  MrCheck check_mr(uint32_t key, uint32_t pd, uint64_t va, uint64_t len, uint32_t access,
                   const Mr** out) const {
    const Mr* mr = find_mr(key);
    if (!mr) return MrCheck::kBadKey;
    if (mr->pd != pd) return MrCheck::kBadPd;
    // IBA 10.6.3: [va, va+len) within [iova, iova+length).
    if (va < mr->iova || len > mr->length || va - mr->iova > mr->length - len) return MrCheck::kBadBounds;
    if ((mr->access & access) != access) return MrCheck::kBadAccess;
    *out = mr;
    return MrCheck::kOk;
  }
  const Mr* find_mr(uint32_t key) const {
    const Mr* mr = mrs_.get(key >> 8);
    return mr && mr->key == key ? mr : nullptr;
  }
  const Dm* find_dm(uint32_t index) const { return dms_.get(index); }
  // Remote access through an R_Key: an MR's, or a memory window's bound to
  // one (a window's key costs an MR's nothing: is_mw_key is one bit). On
  // success *mr holds the bytes and *owner_addr is va in its owner's space.
  MrCheck check_rkey(uint32_t rkey, uint32_t pd, uint32_t qpn, uint64_t va, uint64_t len,
                     uint32_t access, const Mr** mr, uint64_t* owner_addr) const {
    if (is_mw_key(rkey)) [[unlikely]]
      return check_mw(rkey, pd, qpn, va, len, access, mr, owner_addr);
    const MrCheck c = check_mr(rkey, pd, va, len, access, mr);
    if (c == MrCheck::kOk) *owner_addr = (*mr)->addr + (va - (*mr)->iova);
    return c;
  }
  // The work requests the device does itself (device/mw.cc): the completion
  // status of IBV_WR_BIND_MW / IBV_WR_LOCAL_INV posted on qp.
  uint32_t bind_mw(Qp& qp, const abi::MwBind& bind);
  uint32_t local_invalidate(const Qp& qp, uint32_t rkey);
  // kWrMemcpy, the DMA copy engine (device/dma_copy.cc): a completion status.
  uint32_t dma_copy(const Qp& qp, const abi::MemcpyArgs& copy);
  // kWrUmr, a memory registration (device/mkey.cc): a completion status.
  uint32_t register_mkey(const Qp& qp, const abi::UmrArgs& umr, const abi::Sge* layout, uint32_t slots);
  // kWrTagOp, a tag-list operation on the QP's mlx5-format TM-SRQ (device/
  // mlx5_srq.cc): a completion status.
  uint32_t tag_list_op(const Qp& qp, const abi::TagOpArgs& op, const abi::Sge* buffer);
  // A local SGE through an indirect mkey (device/mkey.cc): [offset, offset +
  // len) of the mkey in the PD with `access`, or kBadBounds for bytes past
  // its layout; *length_left: the layout's bytes from offset on.
  MrCheck check_mkey(uint32_t key, uint32_t pd, uint64_t offset, uint64_t len, uint32_t access,
                     uint64_t* length_left) const;
  // The owner's bytes that [offset, offset + len) of an mkey are, appended
  // to out[*n..room); false if they need more spans or a region is gone.
  bool mkey_spans(const Owner& owner, uint32_t key, uint64_t offset, uint64_t len, RemoteSpan* out, int* n,
                  int room) const;
  // Remote access through an mkey's R_Key (device/mkey.cc; the rights and
  // bounds checked by check_mkey first): bytes [offset, offset + len) of its
  // layout read into or written from data; the 8-byte word at offset for an
  // atomic. False if the mkey or a region of its layout is gone meanwhile.
  bool mkey_io(uint32_t key, uint32_t pd, uint64_t offset, uint8_t* data, uint64_t len, bool to_memory) const;
  bool mkey_word(uint32_t key, uint32_t pd, uint64_t offset, RemoteSpan* span, Owner** owner) const;
  // SEND_WITH_INV arriving at qp: true if it invalidated a window.
  bool remote_invalidate(const Qp& qp, uint32_t pd, uint32_t rkey);
  net::Packet* new_packet(Qp& qp, uint8_t opcode, uint32_t psn, bool ack_req);
  // Frames the packet for the QP's path (or, for UD, the work request's
  // address vector) and hands it to the port that reaches the destination.
  void send_packet(Qp& qp, net::Packet* p, const abi::AddressVector* av = nullptr);
  // The same for a packet of no client QP (the GSI's): src_qpn spreads flows.
  void route_packet(net::Packet* p, const abi::AddressVector& path, uint32_t src_qpn);
  // Where frames on `path` go and the route that frames them (no MAC yet).
  PathKind resolve_path(const abi::AddressVector& path, uint32_t src_qpn, net::Route& route) const;
  // Every cached path (Qp::path) is worked out again: the GID table or the
  // port changed.
  void paths_changed() { ++path_generation_; }
  void free_packet(net::Packet* p) { pool_.put(p); }
  // A buffer, or nullptr when the pool is exhausted (counted: the caller
  // drops what it would have built).
  net::Packet* alloc_packet() {
    net::Packet* p = pool_.get();
    if (!p) [[unlikely]] ++counters_.no_packet_buffer;
    return p;
  }
  // Whether a sender may build another frame now: the ports have room and
  // buffers are left (params.h kLoopbackDepth). False is back-pressure: the
  // work request stays posted and goes on a later poll.
  bool tx_ready() {
    if (loopback_.depth() < kLoopbackDepth && pool_.available() > kPoolReserve &&
        (!wire_ || wire_->tx_pending() < net::DpdkPort::kTxQueue / 2)) [[likely]]
      return true;
    ++counters_.tx_backpressure;
    return false;
  }
  const net::PacketPool& packet_pool() const { return pool_; }
  // Raw packet QPs (device/raw_packet.cc): a frame a raw QP sent goes to the
  // rules of this device, then to the engine or the wire.
  void transmit_raw(Qp& qp, net::Packet* p);
  uint32_t max_raw_frame() const;
  // Completion queue entry for qp's send or recv CQ; false if the CQ overflowed.
  bool complete(Qp& qp, bool send_cq, const abi::Cqe& cqe, bool solicited);
  bool complete_to(uint32_t cq, const abi::Cqe& cqe, bool solicited, bool send = false);
  // Called after a WQE left an SRQ: fires IBV_EVENT_SRQ_LIMIT_REACHED once
  // when the posted count drops below an armed limit (IBA 10.2.9.3).
  void srq_consumed(Srq& srq);
  void qp_to_error(Qp& qp);
  void flush_qp(Qp& qp);
  uint64_t now_ns() const { return now_ns_; }
  // Counts a failed access to client memory and logs it at a limited rate.
  void memory_fault(const char* what, const Owner* owner, uint64_t addr, uint64_t len);
  Counters& counters_mut() { return counters_; }

 private:
  friend class DeviceTestPeer;
  void init_info();
  MrCheck check_mw(uint32_t rkey, uint32_t pd, uint32_t qpn, uint64_t va, uint64_t len,
                   uint32_t access, const Mr** mr, uint64_t* owner_addr) const;
  Mw* find_mw(uint32_t rkey) const;  // by the index part only
  Mkey* find_mkey(uint32_t key) const;  // the whole key
  // Frees a valid mkey (device/mkey.cc); owner null: any (a remote peer's).
  bool invalidate_mkey(const Owner* owner, uint32_t pd, uint32_t key, bool remote);
  bool invalidate(Mw& mw);
  void unbind_windows_of(Qp& qp);
  void detach_windows_of(Mr& mr);
  bool poll_requesters();
  bool poll_rx();
  bool poll_timers();
  // mlx5-format CQs (device/cq.cc): an entry written, arm commands taken
  // from their UAR doorbells, completion events raised.
  bool complete_mlx5(Cq& cq, const abi::Cqe& cqe, bool solicited, bool send);
  bool poll_mlx5_cq_arms();
  void take_mlx5_arm(Cq& cq);
  bool fire_mlx5_arm(Cq& cq);
  void raise_cq_event(Cq& cq);
  void dispatch(net::Packet* p, bool check_icrc);
  // QP1, the GSI (device/gsi.cc): MADs to and from its agent.
  void gsi_receive(const net::Packet& p);
  // A received frame through the steering rules (device/raw_packet.cc).
  FlowSteering::Steered steer_received(const net::Packet& p);
  void sniff_sent(const net::Packet& p);
  void deliver_raw(const Flow& rule, const net::Packet& p, const net::FrameFields& f);
  bool poll_wire_rx();
  // A datagram to a multicast GID: to every attached QP of this engine (the
  // loopback) and out of the wire port (device/multicast.cc).
  void send_multicast(net::Packet* p, net::Route& route, const uint8_t* dgid);
  void deliver_multicast(net::Packet& p, const uint8_t* dgid);
  bool poll_port_timers();
  bool poll_tm_ops();  // device/srq.cc
  // Receive WQs (device/work_queue.cc, device/wq_receive.cc, device/rss.cc).
  void rss_deliver(Qp& qp, const net::Packet& p, const net::FrameFields& f, const Flow& rule);
  void wq_receive(Wq& w, const uint8_t* frame, uint32_t len, bool has_tag, uint32_t tag);
  void place_in_wq(Wq& w, const uint8_t* frame, uint32_t len, bool has_tag, uint32_t tag);
  bool release_held(Wq& w);
  void drop_held(Wq& w, bool count);
  void flush_wq(Wq& w);
  void wq_to_error(Wq& w);
  void wq_fatal(Wq& w);
  void mark_busy(uint32_t wq_handle);
  bool poll_wqs();
  uint64_t next_wq_deadline_ns() const;
  void transmit(net::Packet* p, PortId port);
  void emit(net::Packet* p, PortId port);
  void send_arp_request(const net::Ipv4Addr& ip);
  void send_ndp_solicitation(const net::Ipv6Addr& ip);
  bool has_ip6() const;
  bool is_roce_frame(const net::Packet& p) const;
  void capture(const net::Packet& p) {
    if (capture_) [[unlikely]] capture_frame(p);
  }
  void capture_frame(const net::Packet& p);
  bool is_local_gid(const uint8_t* gid) const;

  DeviceConfig config_;
  abi::DeviceInfo info_{};
  Qp1Agent* qp1_agent_ = nullptr;
  // QPNs of connected QPs destroyed, held for the CM's time-wait (in due
  // order) so that a new QP does not take the number a peer may still send
  // to (as the IB CM keeps a QP's identifiers through its timewait). They
  // go back when a QP is made after their time (no timer wakes the engine).
  struct HeldQpn {
    uint64_t until_ns;
    uint32_t index;
  };
  std::deque<HeldQpn> held_qpns_;
  void release_held_qpns();
  net::Route loopback_route_{};
  uint64_t path_generation_ = 1;  // Qp::path caches made in another are stale
  // Frames p by route and hands it to the port `kind` names.
  bool dropped_port_down(net::Packet* p) { return !port_active() && drop_port_down(p); }
  bool drop_port_down(net::Packet* p);
  // header: route's template when the path has one (a connected QP's), else null.
  void send_on_path(net::Packet* p, PathKind kind, const net::Route& route, const net::HeaderTemplate* header,
                    const uint8_t* dgid);
  net::LoopbackPort loopback_;
  net::PacketPool pool_;
  std::unique_ptr<net::DpdkPort> wire_;
  net::AfPacketWakeup wakeup_;
  net::ArpTable arp_;
  net::ArpPending arp_pending_;
  net::NdpTable ndp_;
  net::NdpPending ndp_pending_;
  net::FaultInjector loopback_fault_, wire_fault_;
  std::vector<net::Packet*> fault_out_;
  std::unique_ptr<net::PcapWriter> capture_;
  uint64_t captured_ = 0;
  Counters counters_;
  uint64_t now_ns_ = 0;
  uint32_t ndev_ifindex_ = 0;
  bool kernel_bound_ = false;
  ResolveFn kernel_resolve_;
  uint8_t mr_generation_ = 0;
  uint8_t mw_generation_ = 0;
  uint64_t fault_log_window_ns_ = 0;
  uint32_t fault_logs_in_window_ = 0;

  Table<Pd> pds_;
  Table<Mr> mrs_;
  Table<Mw> mws_;  // index = R_Key >> 8 - kMwIndexBase
  Table<Mkey> mkeys_;  // index = key >> 8 - kMkeyIndexBase
  Table<Dm> dms_;
  uint64_t dm_used_ = 0;  // bytes of dms_ (whole pages), at most config_.max_dm_size
  Table<Ah> ahs_;
  Table<CompChannel> channels_;
  Table<Cq> cqs_;
  std::vector<uint32_t> mlx5_cqs_;  // CQs in mlx5's format, whose UAR doorbells poll() reads
  uint32_t mlx5_qps_ = 0;           // QPs whose send queues are in mlx5's format
  uint64_t mlx5_active_ns_ = 0;     // the last WQE taken from or CQE written to an mlx5-format queue
  Table<Qp> qps_;  // index = qpn - kFirstQpn + 1
  Table<Srq> srqs_;  // index = SRQ number
  std::vector<uint32_t> tm_srqs_;  // the TM-SRQs, whose list-operation rings poll() reads
  Table<Xrcd> xrcds_;
  Table<XrcdHandle> xrcd_handles_;
  FlowSteering steering_;
  MulticastGroups multicast_{abi::kMaxMcastGroups, abi::kMaxMcastQpAttach};
  Table<Wq> wqs_;  // wq_num = kWqnBase + index
  Table<RwqIndTable> ind_tables_;
  std::vector<uint32_t> busy_wqs_;  // in ERR or holding frames: poll() visits them
  uint64_t delay_drop_timeout_ns_ = kDelayDropTimeoutNs;
  uint64_t first_contact_grace_ns_ = kFirstContactGraceNs;
  size_t qp_count_ = 0;
  // QPs out of RESET: the datapath polls them. A QP in RESET has no work, so
  // thousands of fresh QPs cost the poll loop nothing.
  std::vector<Qp*> active_qps_;
  void set_polled(Qp& qp, bool polled);
  uint32_t dc_epochs_ = 0;
  Qp* new_dc_context(Qp& dct, const net::Packet& p, const DcSource& source);
  Qp* restore_dc_context(Qp& dct, const net::Packet& p, const DcSource& source, uint32_t epoch, uint8_t number);
  void release_dc_context(Qp& dct, const DcSource& source);
  // Enters an MR of pd into the table; its key (device.cc).
  uint32_t add_mr(Pd& pd, Mr&& fields);
};

// Requester, responder and completer entry points (one file each).
bool requester_run(Device& dev, Qp& qp);
void requester_take_posted(Device& dev, Qp& qp);
void responder_receive(Device& dev, Qp& qp, net::Packet& p);
bool responder_run(Device& dev, Qp& qp);
void completer_receive(Device& dev, Qp& qp, net::Packet& p);
bool completer_timers(Device& dev, Qp& qp);
void rewind_requester(Device& dev, Qp& qp, uint32_t psn);
void position_requester(Qp& qp, uint32_t psn);
// Raw packet QPs (device/raw_packet.cc): the send WQE at sq_next as one
// frame; the frame a rule gives the QP placed in its next receive WQE.
bool raw_send_next(Device& dev, Qp& qp);
void raw_receive(Device& dev, Qp& qp, const uint8_t* frame, uint32_t len,
                 const net::FrameFields& f, const Flow& rule);
// The SGEs of a receive WQE checked (key, PD, local write) and turned into
// owner addresses (device/recv_wqe.cc). IBV_WC_SUCCESS or the status.
uint32_t translate_recv_sges(Device& dev, RecvInProgress& r, uint32_t pd);
// The receive WQE in slot `index` of `ring` copied out of shared memory
// (untrusted) into r's wr_id, num_sge and SGEs, checked against max_sge and
// the slot's size: IBV_WC_SUCCESS, or IBV_WC_LOC_LEN_ERR (counted in
// bad_wqes; r.num_sge 0). The one fetch of RQs, SRQs, raw QPs and WQs
// (device/recv_wqe.cc).
uint32_t copy_recv_wqe(Device& dev, const RingView& ring, uint32_t index, uint32_t max_sge, RecvInProgress& r);
// The wr_id of the receive WQE in slot `index`, read once: what a flush
// completes with (the rest of the WQE is never read then).
uint64_t recv_wqe_id(const RingView& ring, uint32_t index);

// Rendezvous offload of a TM-SRQ (device/tm_rendezvous.cc): the device's own
// RDMA READ and FIN on the QP's send queue.
// Queues the READ of a matched rendezvous request (qp.resp_recv); false if
// the QP has no room for more internal work (software finishes it then).
bool tm_rndv_start(Device& dev, Qp& qp);
bool tm_rndv_room(const Qp& qp);
// An internal WQE at `index` completed with `status` (requester/completer).
void tm_internal_done(Device& dev, Qp& qp, uint32_t index, uint32_t status);
// An internal WQE at `index` is flushed (the QP went to the error state).
void tm_internal_flushed(Device& dev, Qp& qp, uint32_t index);
// The QP goes back to RESET or away: internal work is dropped, tags released.
void tm_internal_drop(Device& dev, Qp& qp);

// 24-bit PSN arithmetic (IBA 9.7.1): a - b as a signed distance.
inline int32_t psn_diff(uint32_t a, uint32_t b) { return int32_t((a - b) << 8) >> 8; }
inline uint32_t psn_add(uint32_t a, uint32_t n) { return (a + n) & 0xffffff; }

// RC and both XRC halves run the reliable protocol (ACKs, PSN checks, retries).
inline bool is_reliable(const Qp& qp) {
  return qp.type == IBV_QPT_RC || qp.type == IBV_QPT_XRC_SEND || qp.type == IBV_QPT_XRC_RECV;
}
// The transport of a QP's requests (Qp::transport, set with its type).
inline net::Transport transport_of(const Qp& qp) { return qp.transport; }

}  // namespace uroce::device
