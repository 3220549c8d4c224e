// Shared set-up for the device tests: a Device whose one client (Owner) is the
// test process itself, so registered memory is ordinary test buffers reached
// through process_vm_readv/writev on our own pid. Helpers post WQEs straight
// into the shared-memory rings, as the provider does, and read CQEs back.
#pragma once

#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <vector>

#include "device/device.h"
#include "net/packet.h"

namespace uroce::device {

// The friend declared in device/device.h: reaches the loopback port to inject,
// drop or inspect frames between polls.
class DeviceTestPeer {
 public:
  // Queues a raw frame as if a port had received it.
  static void inject(Device& dev, const uint8_t* frame, size_t len) {
    net::Packet* p = dev.pool_.get();
    std::memcpy(p->data, frame, len);
    p->len = uint32_t(len);
    p->checksummed = false;  // received as a loopback frame: no checksum or GID checks
    dev.loopback_.tx(p);
  }
  // Takes every frame in flight off the loopback port (the caller owns them
  // until it hands them back with requeue() or drop()).
  static std::vector<net::Packet*> take_in_flight(Device& dev) {
    std::vector<net::Packet*> out;
    net::Packet* burst[64];
    while (size_t n = dev.loopback_.rx_burst(burst, 64)) out.insert(out.end(), burst, burst + n);
    return out;
  }
  static void requeue(Device& dev, net::Packet* p) { dev.loopback_.tx(p); }
  static void drop(Device& dev, net::Packet* p) { dev.pool_.put(p); }
  static bool in_flight(const Device& dev) { return dev.loopback_.pending(); }
  static const net::FaultCounters& loopback_faults(const Device& dev) {
    return dev.loopback_fault_.counters();
  }
};

// A non-blocking pipe; the device owns and closes the write end it is given.
struct Pipe {
  int rd = -1, wr = -1;
  Pipe() {
    int fds[2];
    if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) == 0) {
      rd = fds[0];
      wr = fds[1];
    }
  }
  ~Pipe() {
    if (rd >= 0) close(rd);
  }
  template <typename T>
  std::vector<T> read_all() {
    std::vector<T> out;
    T rec;
    while (::read(rd, &rec, sizeof(rec)) == ssize_t(sizeof(rec))) out.push_back(rec);
    return out;
  }
};

// One client process: this one.
inline Owner make_self_owner(uint64_t id = 1) {
  Owner o;
  o.id = id;
  o.mem = ProcessMemory(getpid());
  o.comm = "unit-test";
  return o;
}

// Reads the CQ ring as the provider's ibv_poll_cq would.
inline std::vector<abi::Cqe> drain_cq(Device& dev, uint32_t cq_handle) {
  std::vector<abi::Cqe> out;
  Cq* cq = dev.cq(cq_handle);
  if (!cq) {
    ADD_FAILURE() << "no CQ " << cq_handle;
    return out;
  }
  uint32_t cons = cq->ring.hdr->consumer.load(std::memory_order_relaxed);
  const uint32_t prod = cq->ring.hdr->producer.load(std::memory_order_acquire);
  if (prod - cons > cq->ring.size()) {
    ADD_FAILURE() << "CQ producer " << prod << " beyond consumer " << cons;
    return out;
  }
  for (; cons != prod; ++cons) {
    abi::Cqe c;
    std::memcpy(&c, cq->ring.slot(cons), sizeof(c));
    out.push_back(c);
  }
  cq->ring.hdr->consumer.store(cons, std::memory_order_release);
  return out;
}

inline abi::Sge sge(const void* addr, uint32_t length, uint32_t lkey) {
  return abi::Sge{reinterpret_cast<uint64_t>(addr), length, lkey};
}

// Writes a send WQE (header, then SGEs or inline bytes) into the next SQ slot
// and publishes it. Returns the producer index used.
inline uint32_t post_send(Qp& qp, const abi::SendWqe& w, std::initializer_list<abi::Sge> sges = {},
                          const void* inline_data = nullptr) {
  const uint32_t prod = qp.sq.hdr->producer.load(std::memory_order_relaxed);
  uint8_t* slot = qp.sq.slot(prod);
  std::memset(slot, 0, qp.sq.stride);
  abi::SendWqe copy = w;
  if (inline_data) {
    std::memcpy(slot + sizeof(abi::SendWqe), inline_data, w.inline_len);
  } else {
    copy.num_sge = w.num_sge ? w.num_sge : uint32_t(sges.size());
    size_t i = 0;
    for (const abi::Sge& s : sges)
      std::memcpy(slot + sizeof(abi::SendWqe) + i++ * sizeof(abi::Sge), &s, sizeof(s));
  }
  std::memcpy(slot, &copy, sizeof(copy));
  qp.sq.hdr->producer.store(prod + 1, std::memory_order_release);
  return prod;
}

inline uint32_t post_recv(Qp& qp, uint64_t wr_id, std::initializer_list<abi::Sge> sges,
                          uint32_t num_sge_override = 0) {
  const uint32_t prod = qp.rq.hdr->producer.load(std::memory_order_relaxed);
  uint8_t* slot = qp.rq.slot(prod);
  std::memset(slot, 0, qp.rq.stride);
  abi::RecvWqe w{wr_id, num_sge_override ? num_sge_override : uint32_t(sges.size()), 0};
  std::memcpy(slot, &w, sizeof(w));
  size_t i = 0;
  for (const abi::Sge& s : sges)
    std::memcpy(slot + sizeof(abi::RecvWqe) + i++ * sizeof(abi::Sge), &s, sizeof(s));
  qp.rq.hdr->producer.store(prod + 1, std::memory_order_release);
  return prod;
}

inline abi::QpAttr default_attr() {
  abi::QpAttr a{};
  a.port_num = 1;
  a.pkey_index = 0;
  a.qkey = 0x11111111;
  a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                      IBV_ACCESS_REMOTE_ATOMIC;
  a.path_mtu = IBV_MTU_1024;
  a.ah.is_global = 1;
  a.ah.sgid_index = 0;
  // GID 0 of a device with the default address (::ffff:127.0.0.1): the peer
  // QP lives on the same device, so frames take the loopback port.
  a.ah.dgid[10] = a.ah.dgid[11] = 0xff;
  a.ah.dgid[12] = 127;
  a.ah.dgid[15] = 1;
  a.ah.hop_limit = 64;
  a.ah.port_num = 1;
  a.timeout = 14;  // 4.096 us << 14 = 67 ms
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.min_rnr_timer = 1;  // 10 us
  a.max_rd_atomic = 4;
  a.max_dest_rd_atomic = 4;
  return a;
}

constexpr uint32_t kRcInitMask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
constexpr uint32_t kRcRtrMask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
constexpr uint32_t kRcRtsMask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
constexpr uint32_t kUcInitMask = kRcInitMask;
constexpr uint32_t kUcRtrMask =
    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
constexpr uint32_t kUcRtsMask = IBV_QP_STATE | IBV_QP_SQ_PSN;
constexpr uint32_t kUdInitMask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;
constexpr uint32_t kUdRtrMask = IBV_QP_STATE;
constexpr uint32_t kUdRtsMask = IBV_QP_STATE | IBV_QP_SQ_PSN;

// A device, one client, one PD, and helpers to build connected QPs.
class DeviceFixture : public ::testing::Test {
 protected:
  explicit DeviceFixture(DeviceConfig config = {}) : dev_(std::move(config)), owner_(make_self_owner()) {}

  void SetUp() override {
    auto pd = dev_.alloc_pd(&owner_);
    ASSERT_EQ(pd.err, 0);
    pd_ = pd.value;
  }
  void TearDown() override { dev_.release_owner(&owner_); }

  uint32_t reg_mr(void* addr, uint64_t len, uint32_t access, uint32_t pd = 0) {
    abi::RegMrRequest req{};
    req.pd = pd ? pd : pd_;
    req.addr = req.iova = reinterpret_cast<uint64_t>(addr);
    req.length = len;
    req.access = access;
    auto r = dev_.reg_mr(&owner_, req);
    EXPECT_EQ(r.err, 0);
    return r.value;
  }

  uint32_t create_cq(uint32_t cqe = 64) {
    abi::CreateCqRequest req{};
    req.cqe = cqe;
    auto r = dev_.create_cq(&owner_, req);
    EXPECT_EQ(r.err, 0);
    return r.value;
  }

  uint32_t create_qp(ibv_qp_type type, uint32_t scq, uint32_t rcq, abi::QpCaps caps = default_caps(),
                     bool sig_all = false) {
    abi::CreateQpRequest req{};
    req.pd = pd_;
    req.send_cq = scq;
    req.recv_cq = rcq;
    req.qp_type = type;
    req.sq_sig_all = sig_all;
    req.caps = caps;
    auto r = dev_.create_qp(&owner_, req);
    EXPECT_EQ(r.err, 0);
    return r.value;
  }

  static abi::QpCaps default_caps() {
    abi::QpCaps c{};
    c.max_send_wr = 16;
    c.max_recv_wr = 16;
    c.max_send_sge = 4;
    c.max_recv_sge = 4;
    c.max_inline_data = 64;
    return c;
  }

  int modify(uint32_t qpn, uint32_t mask, const abi::QpAttr& a) {
    return dev_.modify_qp(&owner_, qpn, mask, a);
  }
  int to_state(uint32_t qpn, ibv_qp_state s) {
    abi::QpAttr a = default_attr();
    a.qp_state = s;
    return modify(qpn, IBV_QP_STATE, a);
  }

  // RESET -> INIT -> RTR -> RTS with the masks the IBA requires for the type.
  void connect(uint32_t qpn, uint32_t dest_qpn, abi::QpAttr a = default_attr(),
               uint32_t sq_psn = 100, uint32_t rq_psn = 100) {
    const Qp* q = dev_.qp(qpn);
    ASSERT_NE(q, nullptr);
    const ibv_qp_type t = q->type;
    const uint32_t init = t == IBV_QPT_RC ? kRcInitMask : t == IBV_QPT_UC ? kUcInitMask : kUdInitMask;
    const uint32_t rtr = t == IBV_QPT_RC ? kRcRtrMask : t == IBV_QPT_UC ? kUcRtrMask : kUdRtrMask;
    const uint32_t rts = t == IBV_QPT_RC ? kRcRtsMask : t == IBV_QPT_UC ? kUcRtsMask : kUdRtsMask;
    a.dest_qp_num = dest_qpn;
    a.sq_psn = sq_psn;
    a.rq_psn = rq_psn;
    a.qp_state = IBV_QPS_INIT;
    ASSERT_EQ(modify(qpn, init, a), 0);
    a.qp_state = IBV_QPS_RTR;
    ASSERT_EQ(modify(qpn, rtr, a), 0);
    a.qp_state = IBV_QPS_RTS;
    ASSERT_EQ(modify(qpn, rts, a), 0);
    ASSERT_EQ(q->state, IBV_QPS_RTS);
  }

  // Polls until the device reports no work, at most max_polls times. Returns
  // false if the device never went idle (a livelock or an endless loop).
  bool run(int max_polls = 20000) {
    for (int i = 0; i < max_polls; ++i)
      if (!dev_.poll(now_)) return true;
    return false;
  }
  // Moves the clock forward, then runs until idle.
  bool advance(uint64_t ns) {
    now_ += ns;
    return run();
  }

  Device dev_;
  Owner owner_;
  uint32_t pd_ = 0;
  uint64_t now_ = 1'000'000'000;  // 1 s: deadlines of 0 mean "none"
};

constexpr uint32_t kAllAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
constexpr size_t kBufSize = 64 * 1024;

// Distinct patterns so a byte from the wrong place shows.
inline void fill(std::vector<uint8_t>& v, uint8_t seed) {
  for (size_t i = 0; i < v.size(); ++i) v[i] = uint8_t(seed + i * 13 + (i >> 8));
}

inline abi::SendWqe wqe(uint32_t opcode, uint64_t wr_id, uint32_t flags = IBV_SEND_SIGNALED) {
  abi::SendWqe w{};
  w.opcode = opcode;
  w.wr_id = wr_id;
  w.flags = flags;
  return w;
}

// Two QPs, A and B, connected to each other, each with its own send and
// receive CQ, and a 64 KiB registered buffer on each side.
class PairFixture : public DeviceFixture {
 protected:
  using DeviceFixture::DeviceFixture;
  void SetUp() override {
    DeviceFixture::SetUp();
    a_buf_.resize(kBufSize);
    b_buf_.resize(kBufSize);
    fill(a_buf_, 1);
    fill(b_buf_, 101);
    a_key_ = reg_mr(a_buf_.data(), kBufSize, kAllAccess);
    b_key_ = reg_mr(b_buf_.data(), kBufSize, kAllAccess);
    a_scq_ = create_cq();
    a_rcq_ = create_cq();
    b_scq_ = create_cq();
    b_rcq_ = create_cq();
  }

  void make_pair(ibv_qp_type type, abi::QpAttr attr_a = default_attr(),
                 abi::QpAttr attr_b = default_attr(), abi::QpCaps caps = default_caps()) {
    a_ = create_qp(type, a_scq_, a_rcq_, caps);
    b_ = create_qp(type, b_scq_, b_rcq_, caps);
    connect(a_, b_, attr_a, /*sq_psn=*/1000, /*rq_psn=*/2000);
    connect(b_, a_, attr_b, /*sq_psn=*/2000, /*rq_psn=*/1000);
  }

  Qp& A() { return *dev_.qp(a_); }
  Qp& B() { return *dev_.qp(b_); }
  uint8_t* a(size_t off = 0) { return a_buf_.data() + off; }
  uint8_t* b(size_t off = 0) { return b_buf_.data() + off; }
  uint64_t b_addr(size_t off = 0) { return reinterpret_cast<uint64_t>(b(off)); }
  uint64_t a_addr(size_t off = 0) { return reinterpret_cast<uint64_t>(a(off)); }

  // Exactly one CQE on the CQ; returns it (zeroed on failure).
  abi::Cqe one_cqe(uint32_t cq) {
    auto v = drain_cq(dev_, cq);
    EXPECT_EQ(v.size(), 1u);
    return v.empty() ? abi::Cqe{} : v[0];
  }

  const Counters& counters() { return dev_.counters(); }
  // A's SEND_WITH_INV naming rkey into a receive B posts: B's completion
  // (A's is checked to succeed).
  abi::Cqe send_with_invalidate(uint32_t rkey) {
    post_recv(B(), 1, {sge(b(8192), 64, b_key_)});
    abi::SendWqe w = wqe(IBV_WR_SEND_WITH_INV, 2);
    w.imm_data = rkey;
    post_send(A(), w, {sge(a(0), 16, a_key_)});
    EXPECT_TRUE(run());
    EXPECT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_SUCCESS));
    return one_cqe(b_rcq_);
  }

  // A frame taken off the loopback port, decoded.
  struct Frame {
    uint8_t opcode = 0;
    uint32_t qpn = 0, psn = 0;
    bool ack_req = false;
    uint8_t syndrome = 0;  // AETH, if present
    uint32_t msn = 0;
    uint64_t atomic_orig = 0;
    std::vector<uint8_t> payload;
  };

  // One poll; returns (and removes) every frame the device sent during it.
  // Each frame must parse cleanly, checksums included if it has them (a
  // loopback frame has none: device/ports_test.cc).
  std::vector<Frame> step() {
    dev_.poll(now_);
    std::vector<Frame> out;
    for (net::Packet* p : DeviceTestPeer::take_in_flight(dev_)) {
      const net::ParseError e = net::parse_roce_packet(*p, p->checksummed);
      EXPECT_EQ(e, net::ParseError::kOk) << net::parse_error_name(e);
      Frame f;
      f.opcode = p->opcode;
      f.qpn = p->bth()->qpn();
      f.psn = p->bth()->psn();
      f.ack_req = p->bth()->ack_req();
      const net::OpcodeInfo& info = p->info();
      if (info.has(net::kHasAeth)) {
        f.syndrome = p->hdr<net::Aeth>(info.aeth_off)->syndrome();
        f.msn = p->hdr<net::Aeth>(info.aeth_off)->msn();
      }
      if (info.has(net::kHasAtomicAck)) f.atomic_orig = p->hdr<net::AtomicAckEth>(info.atomicack_off)->orig;
      f.payload.assign(p->payload(), p->payload() + p->payload_len);
      out.push_back(std::move(f));
      DeviceTestPeer::drop(dev_, p);
    }
    return out;
  }

  // Hands the device a request or response built here, as if it came off
  // the wire. `edit` fills the extension headers.
  template <typename Edit>
  void inject(uint8_t opcode, uint32_t dest_qpn, uint32_t psn, bool ack_req, Edit edit,
              const void* payload = nullptr, uint32_t len = 0) {
    auto p = std::make_unique<net::Packet>();
    net::begin_roce_packet(*p, opcode);
    p->bth()->pkey = 0xffff;
    p->bth()->dest_qp = dest_qpn;
    p->bth()->ack_psn = (psn & net::Bth::kPsnMask) | (ack_req ? net::Bth::kAckReq : 0);
    edit(*p);
    if (len) std::memcpy(p->payload(), payload, len);
    p->payload_len = len;
    net::Route r;
    r.src_ip = r.dst_ip = dev_.config().ip;
    net::finish_roce_packet(*p, r);
    DeviceTestPeer::inject(dev_, p->data, p->len);
  }
  void inject(uint8_t opcode, uint32_t dest_qpn, uint32_t psn, bool ack_req = true,
              const void* payload = nullptr, uint32_t len = 0) {
    inject(opcode, dest_qpn, psn, ack_req, [](net::Packet&) {}, payload, len);
  }

  std::vector<uint8_t> a_buf_, b_buf_;
  uint32_t a_key_ = 0, b_key_ = 0;
  uint32_t a_scq_ = 0, a_rcq_ = 0, b_scq_ = 0, b_rcq_ = 0;
  uint32_t a_ = 0, b_ = 0;
};

}  // namespace uroce::device
