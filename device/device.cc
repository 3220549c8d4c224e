// Device construction and the control verbs (object lifecycle). Setup code:
// may allocate; returns errno values, never throws to the caller.
#include "device/device.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "device/params.h"

namespace uroce::device {

namespace {

uint32_t qp_index(uint32_t qpn) { return qpn - kFirstQpn + 1; }  // as Device::qp

uint32_t round_pow2(uint32_t v) { return 1u << log2_ceil(std::max(v, 1u)); }

}  // namespace

void Owner::post_async(uint32_t event_type, uint64_t cookie) {
  if (async_fd < 0) return;
  abi::AsyncEventRecord rec{event_type, 0, cookie};
  if (::write(async_fd, &rec, sizeof(rec)) != ssize_t(sizeof(rec))) ++async_dropped;
}

CompChannel::~CompChannel() {
  if (fd >= 0) ::close(fd);
}

Device::Device(const DeviceConfig& config) : config_(config) {
  init_info();
  set_delay_drop_timeout_ns(uint64_t(config_.delay_drop_timeout_us) * 1000);
  loopback_route_.src_mac = loopback_route_.dst_mac = config_.mac;
  loopback_route_.src_ip = loopback_route_.dst_ip = config_.ip;
}

Device::~Device() = default;

void Device::init_info() {
  abi::DeviceInfo& d = info_;
  std::snprintf(d.name, sizeof(d.name), "%s", config_.name.c_str());
  // EUI-64 from the MAC, as RoCE NICs derive their node GUID.
  const auto& m = config_.mac;
  uint8_t guid[8] = {uint8_t(m[0] ^ 2), m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]};
  std::memcpy(&d.node_guid, guid, 8);
  d.sys_image_guid = d.node_guid;
  std::snprintf(d.fw_ver, sizeof(d.fw_ver), "%s", kFwVer);
  d.vendor_id = config_.mlx5 ? kMlx5VendorId : kVendorId;
  d.vendor_part_id = config_.mlx5 ? kMlx5VendorPartId : kVendorPartId;
  d.hw_ver = config_.mlx5 ? kMlx5HwVer : kHwVer;
  d.engine_pid = uint32_t(getpid());
  d.max_mr_size = kMaxMrSize;
  d.page_size_cap = kPageSizeCap;
  const QueueLimits queues = queue_limits(config_.max_map_count);
  d.max_qp = queues.max_qp;
  d.max_qp_wr = kMaxQpWr;
  d.device_cap_flags = IBV_DEVICE_BAD_PKEY_CNTR | IBV_DEVICE_BAD_QKEY_CNTR |
                       IBV_DEVICE_SYS_IMAGE_GUID | IBV_DEVICE_RC_RNR_NAK_GEN |
                       IBV_DEVICE_PORT_ACTIVE_EVENT | IBV_DEVICE_CHANGE_PHY_PORT |
                       IBV_DEVICE_SRQ_RESIZE | IBV_DEVICE_XRC |
                       // Memory windows (device/mw.cc): rxe advertises type 2B, mlx5
                       // MEM_WINDOW with 2B; the QP check of a type 2 window is 2A's too.
                       IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2A |
                       IBV_DEVICE_MEM_WINDOW_TYPE_2B;
  d.max_sge = kMaxSge;
  d.max_cq = queues.max_cq;
  d.max_cqe = kMaxCqe;
  d.max_mr = kMaxMr;
  d.max_pd = kMaxPd;
  d.max_mw = kMaxMw;
  d.max_dm_size = config_.max_dm_size;
  d.max_qp_rd_atom = kMaxQpRdAtomic;
  d.max_qp_init_rd_atom = kMaxQpRdAtomic;
  d.max_res_rd_atom = kMaxQpRdAtomic * queues.max_qp;
  d.max_srq = queues.max_srq;
  d.max_srq_wr = kMaxSrqWr - 1;  // the ring keeps one slot empty
  d.max_srq_sge = kMaxSrqSge;
  d.max_ah = kMaxAh;
  d.max_inline_data = kMaxInlineData;
  d.atomic_cap = IBV_ATOMIC_HCA;
  d.num_ports = 1;
  // Raw packet QPs and flow steering (mlx5 advertises both with
  // IBV_DEVICE_MANAGED_FLOW_STEERING; rxe has neither). IP_CSUM: IPv4 and
  // TCP/UDP checksums checked on receive (IBV_WC_IP_CSUM_OK) and filled on
  // IBV_SEND_IP_CSUM. The WQ flags (CVLAN stripping, scatter FCS, delay
  // drop, end padding) come with WQs.
  d.device_cap_flags |= IBV_DEVICE_MANAGED_FLOW_STEERING | IBV_DEVICE_RAW_IP_CSUM;
  // The four WQ receive flags (device/wq_receive.cc), advertised where
  // mlx5 advertises them: raw_packet_caps, and device_cap_flags_ex for
  // scatter FCS and end padding (rdma-core tests/utils.py reads those). Also
  // there, as rxe reports it: ATOMIC WRITE (IBA 1.5 annex A19).
  d.raw = {queues.max_qp,
           IBV_RAW_PACKET_CAP_IP_CSUM | IBV_RAW_PACKET_CAP_CVLAN_STRIPPING | IBV_RAW_PACKET_CAP_SCATTER_FCS |
               IBV_RAW_PACKET_CAP_DELAY_DROP,
           IBV_DEVICE_RAW_SCATTER_FCS | IBV_DEVICE_PCI_WRITE_END_PADDING | abi::kDeviceAtomicWrite,
           kMinRateLimitKbps, kMaxRateLimitKbps, 1u << IBV_QPT_RAW_PACKET, 0};
  // RSS over receive WQs (device/rss.cc): Toeplitz over IPv4/IPv6 addresses
  // and TCP/UDP ports, as mlx5 offers to generic verbs.
  d.rss = {1u << IBV_QPT_RAW_PACKET, kMaxRwqIndTables, kMaxRwqIndTableSize, queues.max_qp,
           IBV_RX_HASH_SRC_IPV4 | IBV_RX_HASH_DST_IPV4 | IBV_RX_HASH_SRC_IPV6 | IBV_RX_HASH_DST_IPV6 |
               IBV_RX_HASH_SRC_PORT_TCP | IBV_RX_HASH_DST_PORT_TCP | IBV_RX_HASH_SRC_PORT_UDP |
               IBV_RX_HASH_DST_PORT_UDP,
           IBV_RX_HASH_FUNC_TOEPLITZ, {}};
  d.tm = {kTmMaxRndvHdrSize, kTmMaxNumTags, 0 /* IBV_TM_CAP_RC: see kTmAdvertised */, kTmMaxOps, kTmMaxSge, 0};
  if (kTmAdvertised) d.tm.flags = IBV_TM_CAP_RC;
  std::memcpy(d.mac, m.data(), 6);
  d.port.state = IBV_PORT_ACTIVE;
  d.port.max_mtu = IBV_MTU_4096;
  d.port.active_mtu = IBV_MTU_4096;
  d.port.gid_tbl_len = kGidTableLen;
  // The CM is there, and the GIDs are IP addresses: what a RoCE port of mlx5
  // reports (mlx5_ib's query_port sets IB_PORT_CM_SUP and ip_gids, which
  // uverbs turns into IB_UVERBS_PCF_IP_BASED_GIDS); rxe has the first only.
  d.port.port_cap_flags = IBV_PORT_CM_SUP | IBV_PORT_IP_BASED_GIDS;
  d.port.max_msg_sz = kMaxMsgSize;
  d.port.active_width = 2;   // 4x
  d.port.active_speed = 32;  // EDR: 25 Gb/s per lane
  d.port.phys_state = 5;     // LinkUp
  // GID 0: RoCE v2, IPv4-mapped (::ffff:a.b.c.d), as the kernel builds it.
  abi::GidEntry& g = d.gids[0];
  std::memset(g.gid, 0, 16);
  g.gid[10] = g.gid[11] = 0xff;
  std::memcpy(g.gid + 12, config_.ip.data(), 4);
  g.type = IBV_GID_TYPE_ROCE_V2;
  g.valid = 1;
  // GID 2: the configured IPv6 address, for RoCEv2 over IPv6.
  if (has_ip6()) {
    abi::GidEntry& g6 = d.gids[2];
    std::memcpy(g6.gid, config_.ip6.data(), 16);
    g6.type = IBV_GID_TYPE_ROCE_V2;
    g6.valid = 1;
  }
  // GID 1: the link-local IPv6 GID from the MAC (RoCE v1 and v2 list it).
  abi::GidEntry& l = d.gids[1];
  std::memset(l.gid, 0, 16);
  l.gid[0] = 0xfe;
  l.gid[1] = 0x80;
  std::memcpy(l.gid + 8, guid, 8);
  l.type = IBV_GID_TYPE_ROCE_V2;
  l.valid = 1;
}

// ---------------------------------------------------------------- PD / MR

Result<uint32_t> Device::alloc_pd(Owner* o) {
  if (pds_.count() >= info_.max_pd) return {ENOMEM};
  auto pd = std::make_unique<Pd>();
  pd->owner = o;
  return {0, pds_.insert(std::move(pd))};
}

int Device::dealloc_pd(Owner* o, uint32_t handle) {
  Pd* pd = pds_.get(handle);
  if (!pd || pd->owner != o) return EINVAL;
  if (pd->refs) return EBUSY;
  pds_.erase(handle);
  return 0;
}

namespace {

// The MR's shared pages, if the request names some: they must lie within the
// MR's (page-rounded) range, whose other bytes the engine still reaches
// through process_vm_*.
int map_shared_pages(Owner* o, const abi::SharedRange& shared, int fd, uint64_t addr, uint64_t length,
                     std::unique_ptr<SharedPages>* out) {
  out->reset();
  if (shared.length == 0) return fd < 0 ? 0 : EINVAL;
  if (fd < 0 || shared.start + shared.length < shared.start) return EINVAL;
  // Pages wholly inside [addr, addr + length) are all the provider may share
  // for this MR, but a region shared earlier may extend beyond it.
  if (shared.start > addr + length - 1 || shared.start + shared.length <= addr) return EINVAL;
  int err;
  *out = SharedPages::map(fd, shared.start, shared.length, &err, &o->shared_budget);
  return err;
}

// The pages must exist in the client now, as pinning would require.
bool client_range_mapped(const Owner* o, uint64_t addr, uint64_t length, const SharedPages* pages) {
  uint8_t probe;
  return o->mem.read({addr, 1, pages}, &probe) && o->mem.read({addr + length - 1, 1, pages}, &probe);
}

}  // namespace

Result<uint32_t> Device::reg_mr(Owner* o, const abi::RegMrRequest& req, int shared_fd) {
  Pd* pd = pds_.get(req.pd);
  if (!pd || pd->owner != o) return {EINVAL};
  const bool odp = req.access & IBV_ACCESS_ON_DEMAND;
  // Implicit ODP (mlx5: create_user_odp_mr): addr 0, length SIZE_MAX, iova 0,
  // the whole address space, pages reached as they are used.
  const bool implicit = odp && req.addr == 0 && req.length == UINT64_MAX;
  if (implicit && req.iova != 0) return {EINVAL};
  if (req.length == 0 || (req.length > kMaxMrSize && !implicit)) return {EINVAL};
  const uint32_t known = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                         IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND | IBV_ACCESS_ZERO_BASED |
                         IBV_ACCESS_ON_DEMAND | IBV_ACCESS_HUGETLB | IBV_ACCESS_RELAXED_ORDERING;
  // Optional-range bits (IBV_ACCESS_OPTIONAL_RANGE) are hints a device may ignore.
  const uint32_t mandatory = req.access & ~uint32_t(IBV_ACCESS_OPTIONAL_RANGE);
  if (mandatory & ~known) return {EINVAL};
  // IBA 10.6.3.1: remote write or atomic requires local write.
  if ((req.access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
      !(req.access & IBV_ACCESS_LOCAL_WRITE))
    return {EINVAL};
  if (mrs_.count() >= info_.max_mr) return {ENOMEM};
  if (req.addr + req.length < req.addr) return {EINVAL};
  std::unique_ptr<SharedPages> pages;
  if (odp) {
    // On-demand paging: the MR follows the process's mapping as it is at each
    // access (process_vm_*), never pages held since registration; and the
    // range need not be mapped yet.
    if (req.shared.length || shared_fd >= 0) return {EINVAL};
  } else {
    if (int err = map_shared_pages(o, req.shared, shared_fd, req.addr, req.length, &pages)) return {err};
    if (!client_range_mapped(o, req.addr, req.length, pages.get())) return {EFAULT};
  }
  return {0, add_mr(*pd, Mr{.owner = o, .pd = uint32_t(req.pd), .iova = req.iova, .addr = req.addr,
                            .length = req.length, .access = req.access, .pages = std::move(pages)})};
}

// The one place an MR enters the table (ibv_reg_mr, ibv_reg_dm_mr): its key
// is its index and a generation, so a key of a deregistered MR misses.
uint32_t Device::add_mr(Pd& pd, Mr&& fields) {
  auto mr = std::make_unique<Mr>(std::move(fields));
  Mr* raw = mr.get();
  const uint32_t idx = mrs_.insert(std::move(mr));
  if (++mr_generation_ == 0) mr_generation_ = 1;
  raw->key = (idx << 8) | mr_generation_;
  ++pd.refs;
  return raw->key;
}

int Device::rereg_mr(Owner* o, const abi::ReregMrRequest& req, uint32_t* new_key, int shared_fd) {
  Mr* mr = mrs_.get(req.handle >> 8);
  if (!mr || mr->owner != o || mr->key != uint32_t(req.handle)) return EINVAL;
  // mlx5_ib_rereg_user_mr re-registers user memory only, not device memory.
  if (mr->dm) return EOPNOTSUPP;
  // Everything is checked before anything changes.
  uint32_t pd = mr->pd;
  if (req.flags & IBV_REREG_MR_CHANGE_PD) {
    Pd* p = pds_.get(req.pd);
    if (!p || p->owner != o) return EINVAL;
    pd = uint32_t(req.pd);
  }
  std::unique_ptr<SharedPages> pages;
  const bool translate = req.flags & IBV_REREG_MR_CHANGE_TRANSLATION;
  const uint32_t access = req.flags & IBV_REREG_MR_CHANGE_ACCESS ? req.access : mr->access;
  // mlx5 re-creates an MR whose ODP-ness changes: the new access decides.
  const bool odp = access & IBV_ACCESS_ON_DEMAND;
  if (translate) {
    if (req.length == 0 || req.addr + req.length < req.addr) return EINVAL;
    if (odp) {
      if (req.shared.length || shared_fd >= 0) return EINVAL;
    } else {
      if (int err = map_shared_pages(o, req.shared, shared_fd, req.addr, req.length, &pages)) return err;
      if (!client_range_mapped(o, req.addr, req.length, pages.get())) return EFAULT;
    }
  } else if (!odp && (mr->access & IBV_ACCESS_ON_DEMAND) &&
             (mr->length > kMaxMrSize || !client_range_mapped(o, mr->addr, mr->length, nullptr))) {
    return EFAULT;  // pinned from now on: its pages must exist (and an implicit MR cannot be)
  }
  if ((req.flags & IBV_REREG_MR_CHANGE_ACCESS) &&
      (req.access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
      !(req.access & IBV_ACCESS_LOCAL_WRITE))
    return EINVAL;
  if (pd != mr->pd) {
    --pds_.get(mr->pd)->refs;
    ++pds_.get(pd)->refs;
    mr->pd = pd;
  }
  if (translate) {
    mr->addr = mr->iova = req.addr;
    mr->length = req.length;
    mr->pages = std::move(pages);
  }
  if (odp) mr->pages.reset();  // the process's mapping from now on
  if (req.flags & IBV_REREG_MR_CHANGE_ACCESS) mr->access = req.access;
  // The keys stay (mlx5 re-registers in place; rdma-core's rereg tests keep
  // using the rkey they exchanged before).
  *new_key = mr->key;
  return 0;
}

int Device::dereg_mr(Owner* o, uint32_t key) {
  Mr* mr = mrs_.get(key >> 8);
  if (!mr || mr->owner != o || mr->key != key) return EINVAL;
  detach_windows_of(*mr);  // allowed with windows bound, as on mlx5 (device/mw.cc)
  --pds_.get(mr->pd)->refs;
  if (mr->dm) --dms_.get(mr->dm)->mrs;
  mrs_.erase(key >> 8);
  return 0;
}

Result<uint32_t> Device::create_ah(Owner* o, uint32_t handle) {
  Pd* pd = pds_.get(handle);
  if (!pd || pd->owner != o) return {EINVAL};
  if (ahs_.count() >= info_.max_ah) return {ENOMEM};
  auto ah = std::make_unique<Ah>();
  ah->owner = o;
  ah->pd = handle;
  ++pd->refs;  // ibv_dealloc_pd with AHs is EBUSY
  return {0, ahs_.insert(std::move(ah))};
}

int Device::destroy_ah(Owner* o, uint32_t handle) {
  Ah* ah = ahs_.get(handle);
  if (!ah || ah->owner != o) return EINVAL;
  --pds_.get(ah->pd)->refs;
  ahs_.erase(handle);
  return 0;
}

Result<uint32_t> Device::create_qp(Owner* o, const abi::CreateQpRequest& req) {
  // Checked as the client's integer first: out of the enum's range it is no ibv_qp_type.
  const uint32_t raw_type = req.qp_type;
  if (raw_type != IBV_QPT_RC && raw_type != IBV_QPT_UC && raw_type != IBV_QPT_UD &&
      raw_type != IBV_QPT_XRC_SEND && raw_type != IBV_QPT_XRC_RECV &&
      raw_type != IBV_QPT_RAW_PACKET)
    return {EOPNOTSUPP};
  const ibv_qp_type type = ibv_qp_type(raw_type);
  // A raw packet QP's receive flags are a WQ's (mlx5 create_raw_packet_qp);
  // any other flag, or a flag on another type, is refused as mlx5 refuses
  // one it lacks.
  uint32_t raw_rx_flags = 0;
  if (req.create_flags && (type != IBV_QPT_RAW_PACKET || !raw_qp_rx_flags(req.create_flags, &raw_rx_flags)))
    return {EOPNOTSUPP};
  // A raw packet QP receives what steering rules give its own RQ.
  if (type == IBV_QPT_RAW_PACKET && req.srq) return {EINVAL};
  Pd* pd = pds_.get(req.pd);
  Cq* scq = cqs_.get(req.send_cq);
  Cq* rcq = cqs_.get(req.recv_cq);
  Srq* srq = srqs_.get(req.srq);
  XrcdHandle* xh = xrcd_handles_.get(req.xrcd);
  abi::QpCaps caps = req.caps;
  if (type == IBV_QPT_XRC_RECV) {
    // A target QP has no queues, PD or CQs: each request names its SRQ.
    if (!xh || xh->owner != o) return {EINVAL};
    pd = nullptr, scq = rcq = nullptr, srq = nullptr;
    caps = {};
  } else {
    if (!pd || pd->owner != o || !scq || scq->owner != o) return {EINVAL};
    if (type == IBV_QPT_XRC_SEND) {
      rcq = nullptr, srq = nullptr;  // an initiator only sends
      caps.max_recv_wr = caps.max_recv_sge = 0;
    } else {
      if (!rcq || rcq->owner != o) return {EINVAL};
      if (req.srq && (!srq || srq->owner != o)) return {EINVAL};
      // Tag matching is defined for RC only (IBV_TM_CAP_RC, verbs.h).
      if (srq && srq->type != IBV_SRQT_BASIC && !(srq->type == IBV_SRQT_TM && type == IBV_QPT_RC))
        return {EINVAL};
      if (srq) caps.max_recv_wr = caps.max_recv_sge = 0;  // receives come from the SRQ
    }
  }
  if (caps.max_send_wr > kMaxQpWr || caps.max_recv_wr > kMaxQpWr ||
      caps.max_send_sge > kMaxSge || caps.max_recv_sge > kMaxSge ||
      caps.max_inline_data > kMaxInlineData)
    return {EINVAL};
  if (qp_count_ >= info_.max_qp) return {ENOMEM};

  auto qp = std::make_unique<Qp>();
  qp->owner = o;
  qp->cookie = req.cookie;
  qp->type = type;
  qp->transport = transport_for(type);
  qp->pd = pd ? uint32_t(req.pd) : 0;
  qp->send_cq = scq ? uint32_t(req.send_cq) : 0;
  qp->recv_cq = rcq ? uint32_t(req.recv_cq) : 0;
  qp->srq = srq ? uint32_t(req.srq) : 0;
  if (xh && type == IBV_QPT_XRC_RECV) {
    qp->xrcd = xh->xrcd;
    qp->xrcd_handle = uint32_t(req.xrcd);
  }
  qp->sq_sig_all = req.sq_sig_all;
  qp->raw_rx_flags = raw_rx_flags;

  const uint32_t sq_log2 = log2_ceil(std::max(caps.max_send_wr, 1u));
  const uint32_t sq_body = std::max(caps.max_send_sge * uint32_t(sizeof(abi::Sge)),
                                    caps.max_inline_data);
  const uint32_t sq_stride = round_pow2(sizeof(abi::SendWqe) + std::max(sq_body, 64u));
  const uint32_t rq_log2 = log2_ceil(std::max(caps.max_recv_wr, 1u));
  const uint32_t rq_stride =
      round_pow2(sizeof(abi::RecvWqe) + std::max(caps.max_recv_sge, 1u) * sizeof(abi::Sge));
  const size_t sq_bytes = (RingView::bytes(sq_log2, sq_stride) + 4095) & ~size_t(4095);
  if (int e = qp->mem.create("uroce-qp", sq_bytes + RingView::bytes(rq_log2, rq_stride))) return {e};
  qp->sq.init(qp->mem.base(), sq_log2, sq_stride);
  qp->rq.init(qp->mem.base() + sq_bytes, rq_log2, rq_stride);
  // The engine's send sequence: room for device-internal work beside a full
  // user ring on a QP whose TM-SRQ may hand it rendezvous reads.
  const uint32_t engine_slots =
      srq && srq->type == IBV_SRQT_TM ? round_pow2((1u << sq_log2) + kTmInternalPerQp) : 1u << sq_log2;
  qp->sq_copy.resize(size_t(engine_slots) * sq_stride);
  qp->sq_state.resize(engine_slots);
  qp->sq_mask = engine_slots - 1;

  // Report what the rings really hold (ibv_create_qp writes caps back).
  const bool has_sq = type != IBV_QPT_XRC_RECV;
  const bool has_rq = has_sq && type != IBV_QPT_XRC_SEND && !srq;
  caps.max_send_wr = has_sq ? 1u << sq_log2 : 0;
  caps.max_recv_wr = has_rq ? 1u << rq_log2 : 0;
  caps.max_send_sge = has_sq ? std::min<uint32_t>((sq_stride - sizeof(abi::SendWqe)) / sizeof(abi::Sge), kMaxSge) : 0;
  caps.max_recv_sge = has_rq ? std::min<uint32_t>((rq_stride - sizeof(abi::RecvWqe)) / sizeof(abi::Sge), kMaxSge) : 0;
  caps.max_inline_data = has_sq ? std::min<uint32_t>(sq_stride - sizeof(abi::SendWqe), kMaxInlineData) : 0;
  qp->caps = caps;

  Qp* raw = qp.get();
  release_held_qpns();
  const uint32_t idx = qps_.insert(std::move(qp));
  raw->qpn = idx + kFirstQpn - 1;
  if (pd) ++pd->refs;
  if (scq) ++scq->refs;
  if (rcq) ++rcq->refs;
  if (srq) ++srq->refs;
  if (type == IBV_QPT_XRC_RECV) {
    ++xh->objects;
    ++xrcds_.get(xh->xrcd)->users;
  }
  ++qp_count_;
  return {0, raw->qpn};
}

int Device::destroy_qp(Owner* o, uint64_t handle) {
  const uint32_t qpn = uint32_t(handle), id = uint32_t(handle >> 32);
  Qp* qp = this->qp(qpn);
  if (!qp) return EINVAL;
  auto release_domain = [&](uint32_t xrcd_handle) {
    if (XrcdHandle* h = xrcd_handles_.get(xrcd_handle)) --h->objects;
  };
  if (id && id != qp->owner_open_id) {
    // A handle from ibv_open_qp: drop it; the QP stays for its other holders.
    auto it = std::find_if(qp->opened_by.begin(), qp->opened_by.end(),
                           [&](const Qp::OpenedHandle& h) { return h.id == id && h.owner == o; });
    if (it == qp->opened_by.end()) return EINVAL;
    release_domain(it->xrcd_handle);
    qp->opened_by.erase(it);
    return 0;
  }
  // The owning handle: the creator's, or an opened one that inherited the QP.
  if (qp->owner != o) return EINVAL;
  if (!qp->opened_by.empty()) {
    // The creator lets go but others hold the shared target QP: the first of
    // them takes it over, with its domain handle.
    release_domain(qp->xrcd_handle);
    const Qp::OpenedHandle heir = qp->opened_by.front();
    qp->opened_by.erase(qp->opened_by.begin());
    qp->owner = heir.owner;
    qp->cookie = heir.cookie;
    qp->xrcd_handle = heir.xrcd_handle;
    qp->owner_open_id = heir.id;
    return 0;
  }
  // Each flow holds its QP (ib_set_flow takes a use count): destroy them first.
  if (qp->type == IBV_QPT_RAW_PACKET &&
      steering_.rules_on({qp->rss ? FlowTarget::Kind::kRss : FlowTarget::Kind::kQp, qpn}))
    return EBUSY;
  if (qp->rss)
    if (RwqIndTable* t = ind_tables_.get(qp->rss->ind_table)) --t->refs;
  // Rendezvous the device still owed on a TM-SRQ: their buffers come back
  // flushed, their tags free (the SRQ outlives the QP).
  tm_internal_drop(*this, *qp);
  unbind_windows_of(*qp);
  multicast_.detach_all(qpn);  // as uverbs does on destroy (ib_uverbs_detach_umcast)
  if (Pd* pd = pds_.get(qp->pd)) --pd->refs;
  if (Cq* c = cqs_.get(qp->send_cq)) --c->refs;
  if (Cq* c = cqs_.get(qp->recv_cq)) --c->refs;
  if (Srq* s = srqs_.get(qp->srq)) --s->refs;
  if (qp->type == IBV_QPT_XRC_RECV) {
    release_domain(qp->xrcd_handle);
    if (Xrcd* x = xrcds_.get(qp->xrcd); x && --x->users == 0 && x->handles == 0)
      xrcds_.erase(qp->xrcd);
  }
  set_polled(*qp, false);
  release_dc_contexts(*qp);
  if (qp->mlx5) --mlx5_qps_;
  // A QP that was connected keeps its number out of use for a time-wait:
  // the peer's last packets find no QP rather than a new one.
  const bool connected = (qp->type == IBV_QPT_RC || qp->type == IBV_QPT_UC || qp->type == IBV_QPT_XRC_SEND ||
                          qp->type == IBV_QPT_XRC_RECV) &&
                         qp->state != IBV_QPS_RESET && qp->state != IBV_QPS_INIT;
  if (connected) {
    qps_.erase_held(qp_index(qpn));
    held_qpns_.push_back({now_ns_ + (qp1_agent_ ? qp1_agent_->timewait_ns() : 0), qp_index(qpn)});
  } else {
    qps_.erase(qp_index(qpn));
  }
  --qp_count_;
  return 0;
}

void Device::release_held_qpns() {
  while (!held_qpns_.empty() && held_qpns_.front().until_ns <= now_ns_) {
    qps_.release(held_qpns_.front().index);
    held_qpns_.pop_front();
  }
}

void Device::set_polled(Qp& qp, bool polled) {
  auto it = std::find(active_qps_.begin(), active_qps_.end(), &qp);
  if (polled && it == active_qps_.end()) active_qps_.push_back(&qp);
  if (!polled && it != active_qps_.end()) active_qps_.erase(it);
}

Result<uint64_t> Device::open_qp(Owner* o, uint32_t xrcd_handle, uint32_t qpn, uint64_t cookie) {
  XrcdHandle* xh = xrcd_handles_.get(xrcd_handle);
  Qp* qp = this->qp(qpn);
  if (!xh || xh->owner != o || !qp || qp->type != IBV_QPT_XRC_RECV || qp->xrcd != xh->xrcd)
    return {EINVAL};
  // Any process in the domain, its creator included, may open another handle
  // (the kernel's ib_open_qp); the domain handle stays busy while it lives.
  const uint32_t id = qp->next_open_id++;
  qp->opened_by.push_back({id, o, cookie, xrcd_handle});
  ++xh->objects;
  return {0, (uint64_t(id) << 32) | qpn};
}

void Device::post_qp_event(Qp& qp, ibv_event_type type) {
  qp.owner->post_async(type, qp.cookie);
  for (const Qp::OpenedHandle& h : qp.opened_by) h.owner->post_async(type, h.cookie);
}

void Device::release_owner(Owner* o) {
  if (qp1_agent_) qp1_agent_->release_owner(o);  // first: its peers hear of it before its QPs go
  std::vector<uint32_t> ids;
  mws_.for_each([&](uint32_t i, Mw& w) { if (w.owner == o) ids.push_back(i); });
  for (uint32_t i : ids) dealloc_mw(o, i);
  ids.clear();
  mkeys_.for_each([&](uint32_t i, Mkey& m) { if (m.owner == o) ids.push_back(i); });
  for (uint32_t i : ids) destroy_mkey(o, i);
  ids.clear();
  std::vector<uint32_t> flows;
  steering_.for_each([&](uint32_t h, const Flow& f) { if (f.owner == o) flows.push_back(h); });
  for (uint32_t h : flows) steering_.remove(h);
  if (!flows.empty()) wire_frames_changed();
  std::vector<uint64_t> handles;
  qps_.for_each([&](uint32_t, Qp& q) {
    for (const Qp::OpenedHandle& h : q.opened_by)
      if (h.owner == o) handles.push_back((uint64_t(h.id) << 32) | q.qpn);
    if (q.owner == o) handles.push_back((uint64_t(q.owner_open_id) << 32) | q.qpn);
  });
  for (uint64_t h : handles) destroy_qp(o, h);
  ind_tables_.for_each([&](uint32_t i, RwqIndTable& t) { if (t.owner == o) ids.push_back(i); });
  for (uint32_t i : ids) destroy_rwq_ind_table(o, i);
  ids.clear();
  wqs_.for_each([&](uint32_t i, Wq& w) { if (w.owner == o) ids.push_back(i); });
  for (uint32_t i : ids) destroy_wq(o, i);
  ids.clear();
  srqs_.for_each([&](uint32_t i, Srq& s) { if (s.owner == o) ids.push_back(i); });
  for (uint32_t i : ids) {
    srqs_.get(i)->refs = 0;  // its QPs are gone with the owner
    destroy_srq(o, i);
  }
  ids.clear();
  cqs_.for_each([&](uint32_t i, Cq& c) { if (c.owner == o) ids.push_back(i); });
  for (uint32_t i : ids) destroy_cq(o, i);
  ids.clear();
  ahs_.for_each([&](uint32_t i, Ah& a) { if (a.owner == o) ids.push_back(i); });
  for (uint32_t i : ids) destroy_ah(o, i);
  ids.clear();
  mrs_.for_each([&](uint32_t, Mr& m) { if (m.owner == o) ids.push_back(m.key); });
  for (uint32_t k : ids) dereg_mr(o, k);
  ids.clear();
  dms_.for_each([&](uint32_t i, Dm& d) { if (d.owner == o) ids.push_back(i); });
  for (uint32_t i : ids) free_dm(o, i);  // after its MRs
  ids.clear();
  pds_.for_each([&](uint32_t i, Pd& p) { if (p.owner == o) ids.push_back(i); });
  for (uint32_t i : ids) dealloc_pd(o, i);
  ids.clear();
  xrcd_handles_.for_each([&](uint32_t i, XrcdHandle& h) { if (h.owner == o) ids.push_back(i); });
  for (uint32_t i : ids) {
    xrcd_handles_.get(i)->objects = 0;
    close_xrcd(o, i);
  }
  ids.clear();
  channels_.for_each([&](uint32_t i, CompChannel& c) { if (c.owner == o) ids.push_back(i); });
  for (uint32_t i : ids) destroy_comp_channel(o, i);
}

}  // namespace uroce::device
