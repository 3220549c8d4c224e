// libFuzzer target: the whole receive path of a device (ingress checks,
// responder, completer, their NAKs and retransmissions) fed arbitrary frames
// against live QPs of every receiving kind: RC pairs (one on an SRQ), UC, UD.
// Each input gets a fresh device, so every finding replays on its own.
//
// Input: records of [target][flags][length: 2 bytes, big-endian][frame].
// `target` picks the QP whose number the frame's BTH is given (when the frame
// parses), flags bit 0 gives it that QP's expected PSN, bit 1 posts a SEND and
// bit 2 an RDMA READ on an RC requester first (so ACKs and READ responses find
// outstanding work), bit 3 lets 100 ms pass after the frame (ACK timers, RNR
// waits). Findings: crashes, sanitizer reports, a device that never goes idle.
#include <infiniband/verbs.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "device/device.h"
#include "net/packet.h"

namespace uroce::device {

// Declared a friend by device.h: queues a frame as a port would.
class DeviceTestPeer {
 public:
  static void inject(Device& dev, const uint8_t* frame, size_t len) {
    net::Packet* p = dev.pool_.get();
    std::memcpy(p->data, frame, len);
    p->len = uint32_t(len);
    p->checksummed = false;
    dev.loopback_.tx(p);
  }
};

namespace {

constexpr size_t kBuf = 64 * 1024;
constexpr uint32_t kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                          IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

abi::QpAttr base_attr() {
  abi::QpAttr a{};
  a.port_num = 1;
  a.qkey = 0x11111111;
  a.qp_access_flags = kAll;
  a.path_mtu = IBV_MTU_1024;
  a.ah.is_global = 1;
  a.ah.dgid[10] = a.ah.dgid[11] = 0xff;  // ::ffff:127.0.0.1, this device
  a.ah.dgid[12] = 127;
  a.ah.dgid[15] = 1;
  a.ah.hop_limit = 64;
  a.ah.port_num = 1;
  a.timeout = 10;
  a.retry_cnt = 7;
  a.rnr_retry = 3;
  a.min_rnr_timer = 1;
  a.max_rd_atomic = 4;
  a.max_dest_rd_atomic = 4;
  return a;
}

struct World {
  Device dev{DeviceConfig{}};
  Owner owner;
  std::vector<uint8_t> buf = std::vector<uint8_t>(kBuf, 0x5a);
  uint32_t pd = 0, key = 0, cq = 0, srq = 0;
  struct Q {
    uint32_t qpn = 0, peer = 0;
    ibv_qp_type type = IBV_QPT_RC;
  };
  std::vector<Q> qps;
  uint64_t now = 1'000'000'000;

  World() {
    owner.id = 1;
    owner.mem = ProcessMemory(getpid());
    owner.comm = "fuzz";
    pd = dev.alloc_pd(&owner).value;
    abi::RegMrRequest mr{};
    mr.pd = pd;
    mr.addr = mr.iova = reinterpret_cast<uint64_t>(buf.data());
    mr.length = kBuf;
    mr.access = kAll;
    key = dev.reg_mr(&owner, mr).value;
    abi::CreateCqRequest c{};
    c.cqe = 4096;
    cq = dev.create_cq(&owner, c).value;
    abi::CreateSrqRequest s{};
    s.pd = pd;
    s.srq_type = IBV_SRQT_BASIC;
    s.max_wr = 64;
    s.max_sge = 2;
    srq = dev.create_srq(&owner, s).value;
    add_pair(IBV_QPT_RC, false);
    add_pair(IBV_QPT_RC, true);
    add_pair(IBV_QPT_UC, false);
    add_pair(IBV_QPT_UD, false);
    if (!cq || !srq || !key) abort();
  }
  ~World() { dev.release_owner(&owner); }

  uint32_t create(ibv_qp_type type, bool on_srq) {
    abi::CreateQpRequest r{};
    r.pd = pd;
    r.send_cq = r.recv_cq = cq;
    r.srq = on_srq ? srq : 0;
    r.qp_type = type;
    r.sq_sig_all = 1;
    r.caps = {16, 16, 2, 2, 64, 0};
    auto q = dev.create_qp(&owner, r);
    if (q.err) abort();
    return q.value;
  }
  void add_pair(ibv_qp_type type, bool on_srq) {
    const uint32_t a = create(type, on_srq), b = create(type, on_srq);
    qps.push_back({a, b, type});
    qps.push_back({b, a, type});
    connect(qps[qps.size() - 2]);
    connect(qps.back());
  }
  void connect(const Q& q) {
    abi::QpAttr a = base_attr();
    a.dest_qp_num = q.peer;
    a.sq_psn = a.rq_psn = 100;
    const bool ud = q.type == IBV_QPT_UD, rc = q.type == IBV_QPT_RC;
    const uint32_t init = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                          (ud ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS);
    const uint32_t rtr = ud ? IBV_QP_STATE
                            : IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                  IBV_QP_RQ_PSN |
                                  (rc ? IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER : 0);
    const uint32_t rts = IBV_QP_STATE | IBV_QP_SQ_PSN |
                         (rc ? IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                   IBV_QP_MAX_QP_RD_ATOMIC
                             : 0);
    a.qp_state = IBV_QPS_RESET;
    dev.modify_qp(&owner, q.qpn, IBV_QP_STATE, a);
    a.qp_state = IBV_QPS_INIT;
    if (dev.modify_qp(&owner, q.qpn, init, a)) abort();
    a.qp_state = IBV_QPS_RTR;
    if (dev.modify_qp(&owner, q.qpn, rtr, a)) abort();
    a.qp_state = IBV_QPS_RTS;
    if (dev.modify_qp(&owner, q.qpn, rts, a)) abort();
  }

  // Keeps a few receives posted on every RQ and on the SRQ.
  void refill(RingView& ring, uint32_t want) {
    uint32_t prod = ring.hdr->producer.load(std::memory_order_relaxed);
    const uint32_t cons = ring.hdr->consumer.load(std::memory_order_acquire);
    while (prod - cons < want) {
      uint8_t* slot = ring.slot(prod);
      abi::RecvWqe w{prod, 1, 0};
      abi::Sge s{reinterpret_cast<uint64_t>(buf.data()) + (prod % 16) * 4096, 4096, key};
      std::memcpy(slot, &w, sizeof(w));
      std::memcpy(slot + sizeof(w), &s, sizeof(s));
      ring.hdr->producer.store(++prod, std::memory_order_release);
    }
  }
  void post_send(uint32_t qpn, uint32_t opcode) {
    Qp* q = dev.qp(qpn);
    const uint32_t prod = q->sq.hdr->producer.load(std::memory_order_relaxed);
    if (prod - q->sq.hdr->consumer.load(std::memory_order_acquire) >= 8) return;
    uint8_t* slot = q->sq.slot(prod);
    std::memset(slot, 0, q->sq.stride);
    abi::SendWqe w{};
    w.opcode = opcode;
    w.wr_id = prod;
    w.flags = IBV_SEND_SIGNALED;
    w.num_sge = 1;
    w.remote_addr = reinterpret_cast<uint64_t>(buf.data()) + 32768;
    w.rkey = key;
    abi::Sge s{reinterpret_cast<uint64_t>(buf.data()) + 16384, 3000, key};
    std::memcpy(slot, &w, sizeof(w));
    std::memcpy(slot + sizeof(w), &s, sizeof(s));
    q->sq.hdr->producer.store(prod + 1, std::memory_order_release);
  }
  void drain_cq() {
    Cq* c = dev.cq(cq);
    c->ring.hdr->consumer.store(c->ring.hdr->producer.load(std::memory_order_acquire),
                                std::memory_order_release);
  }
  // Runs the device until it is idle; one that never is has a livelock.
  void run() {
    for (int i = 0; i < 100000; ++i)
      if (!dev.poll(now)) return;
    abort();
  }
};

}  // namespace
}  // namespace uroce::device

using namespace uroce;

namespace {

// One record: aims the frame, injects it, runs the device until idle.
void feed(device::World& w, uint8_t target, uint8_t flags, const uint8_t* frame, size_t len) {
  const auto& q = w.qps[target % w.qps.size()];
  device::Qp* qp = w.dev.qp(q.qpn);
  if (qp->state != IBV_QPS_RTS) w.connect(q);
  for (const auto& each : w.qps)
    if (w.dev.qp(each.qpn)->srq == 0) w.refill(w.dev.qp(each.qpn)->rq, 4);
  w.refill(w.dev.srq(w.srq)->ring, 8);
  if (flags & 2) w.post_send(w.qps[0].qpn, IBV_WR_SEND);
  if (flags & 4) w.post_send(w.qps[0].qpn, IBV_WR_RDMA_READ);

  if (len == 0) return;
  std::vector<uint8_t> copy(frame, frame + len);
  auto p = std::make_unique<net::Packet>();
  std::memcpy(p->data, copy.data(), len);
  p->len = uint32_t(len);
  if (net::parse_roce_packet(*p, false) == net::ParseError::kOk) {
    auto* bth = reinterpret_cast<net::Bth*>(copy.data() + p->bth_off);
    bth->dest_qp = q.qpn;
    if (flags & 1) {
      const bool response = p->info().flags & net::kResponse;
      const uint32_t psn = response ? qp->comp_psn : qp->resp_epsn;
      bth->ack_psn = (uint32_t(bth->ack_psn) & net::Bth::kAckReq) | (psn & net::Bth::kPsnMask);
    }
  }
  device::DeviceTestPeer::inject(w.dev, copy.data(), len);
  w.run();
  if (flags & 8) {
    w.now += 100'000'000;
    w.run();
  }
  w.drain_cq();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  device::World w;
  size_t off = 0;
  for (int records = 0; records < 64 && off + 4 <= size; ++records) {
    const uint8_t target = data[off], flags = data[off + 1];
    const size_t len = size_t(data[off + 2]) << 8 | data[off + 3];
    off += 4;
    if (len > size - off || len > net::kFrameCapacity) break;
    feed(w, target, flags, data + off, len);
    off += len;
  }
  // Let every timer run out: retransmissions end in success or an error,
  // never in a device that stays busy.
  for (int i = 0; i < 40; ++i) {
    w.now += 100'000'000;
    w.run();
    w.drain_cq();
  }
  return 0;
}
