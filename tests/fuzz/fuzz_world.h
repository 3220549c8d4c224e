// The device the fuzz targets run against (tests/fuzz/*_fuzz.cc): one
// client, a registered 64 KiB buffer, one CQ, a basic SRQ, and connected
// pairs of RC QPs (one pair on the SRQ), UC and UD QPs, and a DCI with the
// DCT it sends to (on the SRQ; the device is in mlx5 mode), with helpers that
// keep receives posted, post sends, drain the CQ and run the device until it
// is idle (a device that never is aborts: a livelock is a finding).
#pragma once

#include <infiniband/verbs.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cm/device_link.h"
#include "device/device.h"

namespace uroce::device::fuzz {

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

constexpr uint64_t kDcKey = 0x1ee7a330;

inline DeviceConfig mlx5_mode() {
  DeviceConfig c;
  c.mlx5 = true;  // DC
  return c;
}

struct World {
  Device dev{mlx5_mode()};
  // The CM on QP1, as in the engine: GSI MADs reach its parser too.
  cm::CmAgent cm{dev.config().ip, dev.config().ip6, dev.info()};
  Owner owner;
  std::vector<uint8_t> buf = std::vector<uint8_t>(kBuf, 0x5a);
  uint32_t pd = 0, key = 0, cq = 0, srq = 0;
  struct Q {
    uint32_t qpn = 0, peer = 0;
    ibv_qp_type type = IBV_QPT_RC;
    uint32_t dc = 0;  // abi::kDcInitiator or abi::kDcTarget; 0: not DC
  };
  std::vector<Q> qps;
  uint64_t now = 1'000'000'000;

  World() {
    cm::attach_to_device(cm, dev);
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
    add_dc();
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
  void add_dc() {
    const uint32_t dci = create(IBV_QPT_RC, false), dct = create(IBV_QPT_RC, true);
    if (dev.make_dc(&owner, dci, abi::kDcInitiator, 0) || dev.make_dc(&owner, dct, abi::kDcTarget, kDcKey)) abort();
    qps.push_back({dci, dct, IBV_QPT_RC, abi::kDcInitiator});
    qps.push_back({dct, dci, IBV_QPT_RC, abi::kDcTarget});
    connect(qps[qps.size() - 2]);
    connect(qps.back());
  }
  // The state a QP works in: RTS, but RTR for a DCT (it has no RTS).
  bool ready(const Q& q) {
    return dev.qp(q.qpn)->state == (q.dc == abi::kDcTarget ? IBV_QPS_RTR : IBV_QPS_RTS);
  }
  void connect(const Q& q) {
    if (q.dc) return connect_dc(q);
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

  // DC's masks (device/qp_modify.cc): a DCT to RTR, a DCI to RTS.
  void connect_dc(const Q& q) {
    abi::QpAttr a = base_attr();
    a.qp_state = IBV_QPS_RESET;
    dev.modify_qp(&owner, q.qpn, IBV_QP_STATE, a);
    a.qp_state = IBV_QPS_INIT;
    if (dev.modify_qp(&owner, q.qpn, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, a))
      abort();
    a.qp_state = IBV_QPS_RTR;
    if (dev.modify_qp(&owner, q.qpn, IBV_QP_STATE | IBV_QP_MIN_RNR_TIMER | IBV_QP_AV | IBV_QP_PATH_MTU, a)) abort();
    if (q.dc == abi::kDcTarget) return;
    a.qp_state = IBV_QPS_RTS;
    if (dev.modify_qp(&owner, q.qpn, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT, a)) abort();
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
    if (q->dc == DcRole::kInitiator) {  // to the DCT it was made with
      w.av = base_attr().ah;
      w.remote_qpn = qps[qps.size() - 1].qpn;
      w.dc_key = kDcKey;
    }
    abi::Sge s{reinterpret_cast<uint64_t>(buf.data()) + 16384, 3000, key};
    std::memcpy(slot, &w, sizeof(w));
    std::memcpy(slot + sizeof(w), &s, sizeof(s));
    q->sq.hdr->producer.store(prod + 1, std::memory_order_release);
  }
  void drain_cq() {
    Cq* c = dev.cq(cq);
    const uint32_t prod = c->ring.hdr->producer.load(std::memory_order_acquire);
    if (trace)  // UROCE_FUZZ_TRACE: what the seeds complete with
      for (uint32_t i = c->ring.hdr->consumer.load(); i != prod && prod - i <= c->ring.size(); ++i) {
        const auto* e = reinterpret_cast<const abi::Cqe*>(c->ring.slot(i));
        std::fprintf(stderr, "cqe qp %u opcode %u status %u len %u\n", e->qp_num, e->opcode, e->status, e->byte_len);
      }
    c->ring.hdr->consumer.store(prod, std::memory_order_release);
  }
  static inline const bool trace = getenv("UROCE_FUZZ_TRACE") != nullptr;
  // Runs the device until it is idle; one that never is has a livelock.
  void run() {
    for (int i = 0; i < 100000; ++i)
      if (!dev.poll(now)) return;
    abort();
  }
};

}  // namespace uroce::device::fuzz
