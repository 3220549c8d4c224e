// A hostile client of the engine (issue 14): it talks the control protocol
// itself, as the provider does (include/uroce/abi.h), maps its rings, and
// then writes garbage into them: bad opcodes, huge SGE counts, keys of another
// client, producer indices out of range or going backwards, queue headers
// overwritten, WQEs rewritten while the engine reads them, doorbell floods.
// Each case checks what a NIC gives (IBA 10.8.3, 11.6.2): an error completion
// or the QP in error with IBV_EVENT_QP_FATAL, and never a byte read from or
// written to another client's memory. tests/integration/hostile_test.sh runs
// it beside a well-behaved client.
//
//   hostile_client DEVICE_NAME [SECONDS_OF_SCRIBBLING]
//
// Exit 0: every case behaved; 1: a case failed (printed); 2: setup failed.
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/control_wire.h"
#include "uroce/abi.h"

namespace abi = uroce::abi;
using abi::CtlOp;

namespace {

int failures = 0;

[[noreturn]] void die(const std::string& why) {
  std::fprintf(stderr, "hostile_client: setup: %s\n", why.c_str());
  std::exit(2);
}

void expect(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", what.c_str());
  std::fflush(stdout);
  if (!ok) ++failures;
}

uint64_t now_ms() {
  return uint64_t(std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
}

struct Reply : uroce::test::Reply {
  template <typename T>
  T as() const {
    T t{};
    std::memcpy(&t, body.data(), std::min(sizeof(T), body.size()));
    return t;
  }
};

// One mapped ring: its header and its slots, as the provider sees them.
struct Ring {
  abi::QueueHeader* hdr = nullptr;
  uint8_t* entries = nullptr;
  uint32_t log2 = 0, stride = 0;
  uint32_t size() const { return 1u << log2; }
  uint8_t* slot(uint32_t i) const { return entries + size_t(i & (size() - 1)) * stride; }
};

// One connection to the engine: a client session of its own.
class Client {
 public:
  explicit Client(const std::string& device) {
    fd_ = uroce::test::connect_engine(device);
    if (fd_ < 0) die("connect to " + device);
    int p[2];
    if (pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) die("pipe");
    async_fd_ = p[0];
    Reply r = call(CtlOp::kHello, abi::HelloRequest{abi::kMagic, abi::kVersion}, {p[1]});
    close(p[1]);
    if (r.status != 0 || r.fds.size() != 2) die("hello");
    close(r.fds[0]);
    doorbell_ = r.fds[1];
    pd_ = must(CtlOp::kAllocPd, nullptr, 0).as<abi::AllocPdReply>().handle;
  }

  Reply call_raw(CtlOp op, const void* body, size_t len, const std::vector<int>& fds) {
    if (!uroce::test::send_request(fd_, op, body, len, fds)) die("sendmsg");
    Reply r;
    if (!uroce::test::read_reply(fd_, 10000, &r)) die("no reply (or a short one) from the engine in 10 s");
    return r;
  }
  template <typename T>
  Reply call(CtlOp op, const T& body, const std::vector<int>& fds = {}) {
    return call_raw(op, &body, sizeof(T), fds);
  }
  Reply must(CtlOp op, const void* body, size_t len) {
    Reply r = call_raw(op, body, len, {});
    if (r.status != 0) die("op " + std::to_string(unsigned(op)) + ": " + std::strerror(r.status));
    return r;
  }

  struct Mr {
    uint32_t lkey, rkey;
    uint8_t* addr;
    size_t len;
  };
  Mr reg_mr(uint8_t* addr, size_t len) {
    abi::RegMrRequest r{};
    r.pd = pd_;
    r.addr = r.iova = reinterpret_cast<uint64_t>(addr);
    r.length = len;
    r.access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    const auto rep = must(CtlOp::kRegMr, &r, sizeof(r)).as<abi::RegMrReply>();
    return {rep.lkey, rep.rkey, addr, len};
  }

  struct Cq {
    uint64_t handle;
    Ring ring;
  };
  Cq create_cq(uint32_t cqe) {
    abi::CreateCqRequest r{};
    r.cqe = cqe;
    Reply rep = call(CtlOp::kCreateCq, r);
    if (rep.status != 0 || rep.fds.size() != 1) die("create_cq");
    const auto c = rep.as<abi::CreateCqReply>();
    auto* base = map(rep.fds[0], c.shm_size);
    Cq cq{c.handle, {}};
    cq.ring = {reinterpret_cast<abi::QueueHeader*>(base), base + abi::kQueueEntriesOffset, c.log2_entries,
               sizeof(abi::Cqe)};
    return cq;
  }

  struct Qp {
    uint64_t handle, cookie;
    uint32_t qpn;
    Ring sq, rq;
    Cq* cq;
  };
  Qp create_qp(Cq& cq, uint64_t cookie, uint64_t srq = 0, uint32_t type = IBV_QPT_RC) {
    abi::CreateQpRequest r{};
    r.pd = pd_;
    r.send_cq = r.recv_cq = cq.handle;
    r.srq = srq;
    r.cookie = cookie;
    r.qp_type = type;
    r.caps = {16, srq ? 0u : 16u, 4, 4, 64, 0};
    Reply rep = call(CtlOp::kCreateQp, r);
    if (rep.status != 0 || rep.fds.size() != 1) die("create_qp");
    const auto q = rep.as<abi::CreateQpReply>();
    auto* base = map(rep.fds[0], q.shm_size);
    Qp qp{q.handle, cookie, q.qpn, {}, {}, &cq};
    qp.sq = {reinterpret_cast<abi::QueueHeader*>(base + q.sq_offset), base + q.sq_offset + abi::kQueueEntriesOffset,
             q.sq_log2, q.sq_stride};
    qp.rq = {reinterpret_cast<abi::QueueHeader*>(base + q.rq_offset), base + q.rq_offset + abi::kQueueEntriesOffset,
             q.rq_log2, q.rq_stride};
    return qp;
  }
  Ring create_srq(uint64_t* handle, uint64_t cookie) {
    abi::CreateSrqRequest r{};
    r.pd = pd_;
    r.cookie = cookie;
    r.srq_type = IBV_SRQT_BASIC;
    r.max_wr = 16;
    r.max_sge = 2;
    Reply rep = call(CtlOp::kCreateSrq, r);
    if (rep.status != 0 || rep.fds.size() != 1) die("create_srq");
    const auto s = rep.as<abi::CreateSrqReply>();
    *handle = s.handle;
    auto* base = map(rep.fds[0], s.shm_size);
    return {reinterpret_cast<abi::QueueHeader*>(base), base + abi::kQueueEntriesOffset, s.log2, s.stride};
  }

  int modify(const Qp& qp, uint32_t mask, const abi::QpAttr& a) {
    abi::ModifyQpRequest r{};
    r.handle = qp.handle;
    r.attr_mask = mask;
    r.attr = a;
    return call(CtlOp::kModifyQp, r).status;
  }
  // RESET -> INIT -> RTR -> RTS, connected to `peer` over the loopback.
  void connect_rc(const Qp& qp, uint32_t peer) {
    abi::QpAttr a{};
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = peer;
    a.rq_psn = a.sq_psn = 0;
    a.ah.is_global = 1;
    a.ah.dgid[10] = a.ah.dgid[11] = 0xff;
    a.ah.dgid[12] = 127;
    a.ah.dgid[15] = 1;
    a.ah.hop_limit = 64;
    a.ah.port_num = 1;
    a.max_rd_atomic = a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 1;
    a.timeout = 10;
    a.retry_cnt = 1;
    a.rnr_retry = 1;
    a.qp_state = IBV_QPS_INIT;
    if (modify(qp, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, a)) die("INIT");
    a.qp_state = IBV_QPS_RTR;
    if (modify(qp, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER, a))
      die("RTR");
    a.qp_state = IBV_QPS_RTS;
    if (modify(qp, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                       IBV_QP_MAX_QP_RD_ATOMIC, a))
      die("RTS");
  }
  // RESET -> INIT -> RTR -> RTS for a UD QP.
  void ready_ud(const Qp& qp) {
    abi::QpAttr a{};
    a.port_num = 1;
    a.qkey = 0x1111;
    a.qp_state = IBV_QPS_INIT;
    if (modify(qp, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY, a)) die("UD INIT");
    a.qp_state = IBV_QPS_RTR;
    if (modify(qp, IBV_QP_STATE, a)) die("UD RTR");
    a.qp_state = IBV_QPS_RTS;
    if (modify(qp, IBV_QP_STATE | IBV_QP_SQ_PSN, a)) die("UD RTS");
  }
  uint32_t qp_state(const Qp& qp) {
    Reply r = call(CtlOp::kQueryQp, abi::HandleRequest{qp.handle});
    return r.status ? ~0u : r.as<abi::QueryQpReply>().attr.qp_state;
  }

  void ring_doorbell(uint64_t value = 1) { (void)!write(doorbell_, &value, sizeof(value)); }
  // Puts a send WQE in the next SQ slot and publishes it.
  void post_send(Qp& qp, const abi::SendWqe& w, const abi::Sge* sges, uint32_t n) {
    const uint32_t prod = qp.sq.hdr->producer.load(std::memory_order_relaxed);
    uint8_t* slot = qp.sq.slot(prod);
    std::memset(slot, 0, qp.sq.stride);
    std::memcpy(slot, &w, sizeof(w));
    if (n) std::memcpy(slot + sizeof(w), sges, n * sizeof(abi::Sge));  // sges may be null then (UBSan)
    qp.sq.hdr->producer.store(prod + 1, std::memory_order_release);
    ring_doorbell();
  }
  void post_recv(Ring& rq, uint64_t wr_id, const abi::Sge& s, uint32_t num_sge = 1) {
    const uint32_t prod = rq.hdr->producer.load(std::memory_order_relaxed);
    uint8_t* slot = rq.slot(prod);
    abi::RecvWqe w{wr_id, num_sge, 0};
    std::memcpy(slot, &w, sizeof(w));
    std::memcpy(slot + sizeof(w), &s, sizeof(s));
    rq.hdr->producer.store(prod + 1, std::memory_order_release);
    ring_doorbell();
  }
  // The next completion of `cq` within `ms`, or false.
  bool poll_cq(Cq& cq, abi::Cqe* out, int ms = 5000) {
    const uint64_t until = now_ms() + ms;
    do {
      const uint32_t cons = cq.ring.hdr->consumer.load(std::memory_order_relaxed);
      if (cq.ring.hdr->producer.load(std::memory_order_acquire) != cons) {
        std::memcpy(out, cq.ring.slot(cons), sizeof(*out));
        cq.ring.hdr->consumer.store(cons + 1, std::memory_order_release);
        return true;
      }
      ring_doorbell();
      usleep(1000);
    } while (now_ms() < until);
    return false;
  }
  // Whether async event `type` for `cookie` arrives within `ms`.
  bool wait_event(uint32_t type, uint64_t cookie, int ms = 5000) {
    const uint64_t until = now_ms() + ms;
    do {
      abi::AsyncEventRecord e;
      while (read(async_fd_, &e, sizeof(e)) == ssize_t(sizeof(e)))
        if (e.event_type == type && e.cookie == cookie) return true;
      ring_doorbell();
      usleep(1000);
    } while (now_ms() < until);
    return false;
  }
  // The whole text, in pieces (without a ReportRequest the engine cuts it
  // to one message, which the counters have outgrown).
  std::string stats() {
    std::string text;
    for (uint64_t total = 1; text.size() < total;) {
      Reply r = call(CtlOp::kStats, abi::ReportRequest{text.size()}, {});
      if (r.status != 0 || r.body.size() <= sizeof(abi::ReportReply)) die("stats");
      total = r.as<abi::ReportReply>().total;
      text.append(r.body.begin() + sizeof(abi::ReportReply), r.body.end());
    }
    return text;
  }
  uint64_t pd() const { return pd_; }

 private:
  static uint8_t* map(int fd, uint64_t size) {
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) die("mmap");
    return static_cast<uint8_t*>(p);
  }
  int fd_ = -1, async_fd_ = -1, doorbell_ = -1;
  uint64_t pd_ = 0;
};

// A connected pair of RC QPs of one client, each with a CQ of its own.
struct Pair {
  Client::Cq cq_a, cq_b;
  Client::Qp a, b;
  Pair(Client& c, uint64_t cookie) : cq_a(c.create_cq(64)), cq_b(c.create_cq(64)) {
    a = c.create_qp(cq_a, cookie);
    b = c.create_qp(cq_b, cookie + 1);
    c.connect_rc(a, b.qpn);
    c.connect_rc(b, a.qpn);
  }
};

abi::SendWqe wqe(uint32_t opcode, uint64_t wr_id, uint32_t num_sge) {
  abi::SendWqe w{};
  w.opcode = opcode;
  w.wr_id = wr_id;
  w.flags = IBV_SEND_SIGNALED;
  w.num_sge = num_sge;
  return w;
}

uint64_t counter(const std::string& stats, const std::string& name) {
  const size_t at = stats.find(name);
  if (at == std::string::npos) return 0;
  size_t i = at + name.size();
  while (i < stats.size() && !std::isdigit(uint8_t(stats[i]))) ++i;
  return std::strtoull(stats.c_str() + i, nullptr, 10);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: hostile_client DEVICE_NAME [SECONDS [STOP_FILE]]\n");
    return 2;
  }
  const std::string dev = argv[1];
  const int seconds = argc > 2 ? std::atoi(argv[2]) : 2;
  // Scribbling ends after SECONDS, or earlier once STOP_FILE exists (the test
  // creates it when its well-behaved client is done, however slow the machine).
  const char* stop_file = argc > 3 ? argv[3] : nullptr;

  // The other client: a session of its own whose memory holds a secret.
  Client other(dev);
  static uint8_t secret[8192];
  std::memset(secret, 0x5e, sizeof(secret));
  const Client::Mr other_mr = other.reg_mr(secret, sizeof(secret));

  Client c(dev);
  static uint8_t mem[1 << 16];
  std::memset(mem, 0, sizeof(mem));
  const Client::Mr mr = c.reg_mr(mem, sizeof(mem));
  const uint64_t bad_before = counter(c.stats(), "bad_wqes");
  abi::Cqe cqe;

  {  // An opcode no QP has: a local QP operation error.
    Pair p(c, 100);
    c.post_send(p.a, wqe(99, 1, 0), nullptr, 0);
    const bool got = c.poll_cq(p.cq_a, &cqe);
    expect(got && cqe.wr_id == 1 && cqe.status == IBV_WC_LOC_QP_OP_ERR, "bad opcode: IBV_WC_LOC_QP_OP_ERR");
  }
  {  // An SGE count far beyond the slot: a local length error.
    Pair p(c, 200);
    abi::Sge s{reinterpret_cast<uint64_t>(mem), 64, mr.lkey};
    c.post_send(p.a, wqe(IBV_WR_SEND, 2, 0xffffffff), &s, 1);
    const bool got = c.poll_cq(p.cq_a, &cqe);
    expect(got && cqe.wr_id == 2 && cqe.status != IBV_WC_SUCCESS, "num_sge 0xffffffff: an error completion");
  }
  {  // Another client's lkey (and rkey): protection errors, its memory untouched.
    Pair p(c, 300);
    abi::Sge recv{reinterpret_cast<uint64_t>(mem), 4096, mr.lkey};
    c.post_recv(p.b.rq, 30, recv);
    abi::Sge s{reinterpret_cast<uint64_t>(secret), 4096, other_mr.lkey};
    c.post_send(p.a, wqe(IBV_WR_SEND, 3, 1), &s, 1);
    bool got = c.poll_cq(p.cq_a, &cqe);
    expect(got && cqe.wr_id == 3 && cqe.status == IBV_WC_LOC_PROT_ERR, "another client's lkey: IBV_WC_LOC_PROT_ERR");
    expect(mem[0] != 0x5e, "another client's lkey: none of its bytes arrive");

    Pair q(c, 310);
    abi::Sge src{reinterpret_cast<uint64_t>(mem), 4096, mr.lkey};
    std::memset(mem, 0xab, 4096);
    abi::SendWqe w = wqe(IBV_WR_RDMA_WRITE, 4, 1);
    w.remote_addr = reinterpret_cast<uint64_t>(secret);
    w.rkey = other_mr.rkey;
    c.post_send(q.a, w, &src, 1);
    got = c.poll_cq(q.cq_a, &cqe);
    expect(got && cqe.wr_id == 4 && cqe.status == IBV_WC_REM_ACCESS_ERR,
           "RDMA WRITE with another client's rkey: IBV_WC_REM_ACCESS_ERR");
    w = wqe(IBV_WR_RDMA_READ, 5, 1);
    w.remote_addr = reinterpret_cast<uint64_t>(secret);
    w.rkey = other_mr.rkey;
    Pair r(c, 320);
    c.post_send(r.a, w, &src, 1);
    got = c.poll_cq(r.cq_a, &cqe);
    expect(got && cqe.wr_id == 5 && cqe.status == IBV_WC_REM_ACCESS_ERR,
           "RDMA READ with another client's rkey: IBV_WC_REM_ACCESS_ERR");
    bool intact = true;
    for (uint8_t b : secret) intact &= b == 0x5e;
    expect(intact, "another client's memory is untouched");
    expect(mem[0] == 0xab, "READ with another client's rkey: none of its bytes arrive");
  }
  {  // A producer index no ring can hold: the QP is fatal.
    Pair p(c, 400);
    p.a.sq.hdr->producer.store(1'000'000, std::memory_order_release);
    c.ring_doorbell();
    expect(c.wait_event(IBV_EVENT_QP_FATAL, 400), "SQ producer out of range: IBV_EVENT_QP_FATAL");
    expect(c.qp_state(p.a) == IBV_QPS_ERR, "SQ producer out of range: QP in error");
  }
  {  // The producer going backwards (a torn index): fatal, not a replay.
    Pair p(c, 500);
    abi::Sge s{reinterpret_cast<uint64_t>(mem), 16, mr.lkey};
    c.post_recv(p.b.rq, 50, s);
    c.post_send(p.a, wqe(IBV_WR_SEND, 6, 1), &s, 1);
    const bool got = c.poll_cq(p.cq_a, &cqe);
    expect(got && cqe.status == IBV_WC_SUCCESS, "torn index: the first send completes");
    p.a.sq.hdr->producer.store(uint32_t(-3), std::memory_order_release);
    c.ring_doorbell();
    expect(c.wait_event(IBV_EVENT_QP_FATAL, 500), "SQ producer going back: IBV_EVENT_QP_FATAL");
  }
  {  // Receive queue header overwritten after one good receive, then a message
     // arrives for it: no WQE can be taken, so no completion (above all none
     // repeating the last one's wr_id), the QP fatal, the sender's WQE failed.
    Pair p(c, 600);
    abi::Sge s{reinterpret_cast<uint64_t>(mem), 16, mr.lkey};
    c.post_recv(p.b.rq, 60, s);
    c.post_send(p.a, wqe(IBV_WR_SEND, 7, 1), &s, 1);
    bool got = c.poll_cq(p.cq_b, &cqe) && cqe.wr_id == 60 && cqe.status == IBV_WC_SUCCESS;
    got = got && c.poll_cq(p.cq_a, &cqe) && cqe.wr_id == 7 && cqe.status == IBV_WC_SUCCESS;
    expect(got, "RQ header overwritten: the receive before it completes");
    std::memset(static_cast<void*>(p.b.rq.hdr), 0xff, sizeof(abi::QueueHeader));
    c.post_send(p.a, wqe(IBV_WR_SEND, 8, 1), &s, 1);
    got = c.poll_cq(p.cq_a, &cqe);
    expect(got && cqe.wr_id == 8 && cqe.status != IBV_WC_SUCCESS, "RQ header overwritten: the send fails");
    expect(c.wait_event(IBV_EVENT_QP_FATAL, 601), "RQ header overwritten: IBV_EVENT_QP_FATAL");
    const bool stale = c.poll_cq(p.cq_b, &cqe, 300);
    expect(!stale, "RQ header overwritten: no receive completion" +
                       (stale ? " (got wr_id " + std::to_string(cqe.wr_id) + ")" : std::string()));
    expect(c.qp_state(p.b) == IBV_QPS_ERR, "RQ header overwritten: QP in error");
  }
  {  // A receive WQE with a huge SGE count.
    Pair p(c, 700);
    abi::Sge s{reinterpret_cast<uint64_t>(mem), 16, mr.lkey};
    c.post_recv(p.b.rq, 70, s, 0x7fffffff);
    c.post_send(p.a, wqe(IBV_WR_SEND, 8, 1), &s, 1);
    const bool got = c.poll_cq(p.cq_b, &cqe);
    expect(got && cqe.wr_id == 70 && cqe.status == IBV_WC_LOC_LEN_ERR, "recv num_sge huge: IBV_WC_LOC_LEN_ERR");
  }
  {  // An SRQ whose WQE has another client's lkey.
    uint64_t srq_handle;
    Ring srq = c.create_srq(&srq_handle, 850);
    Client::Cq cq_a = c.create_cq(64), cq_b = c.create_cq(64);
    Client::Qp a = c.create_qp(cq_a, 800), b = c.create_qp(cq_b, 801, srq_handle);
    c.connect_rc(a, b.qpn);
    c.connect_rc(b, a.qpn);
    c.post_recv(srq, 80, {reinterpret_cast<uint64_t>(secret), 4096, other_mr.lkey});
    abi::Sge s{reinterpret_cast<uint64_t>(mem), 64, mr.lkey};
    std::memset(mem, 0x11, 64);
    c.post_send(a, wqe(IBV_WR_SEND, 9, 1), &s, 1);
    const bool got = c.poll_cq(cq_b, &cqe);
    expect(got && cqe.wr_id == 80 && cqe.status != IBV_WC_SUCCESS, "SRQ WQE with another client's lkey: an error receive");
    expect(secret[0] == 0x5e, "SRQ WQE with another client's lkey: its memory untouched");
  }
  {  // An SRQ whose producer index no ring can hold: SRQ_ERR, the QP that
     // took from it fatal, no completion.
    uint64_t srq_handle;
    Ring srq = c.create_srq(&srq_handle, 860);
    Client::Cq cq_a = c.create_cq(64), cq_b = c.create_cq(64);
    Client::Qp a = c.create_qp(cq_a, 860), b = c.create_qp(cq_b, 861, srq_handle);
    c.connect_rc(a, b.qpn);
    c.connect_rc(b, a.qpn);
    srq.hdr->producer.store(0x80000000u, std::memory_order_release);
    abi::Sge s{reinterpret_cast<uint64_t>(mem), 16, mr.lkey};
    c.post_send(a, wqe(IBV_WR_SEND, 12, 1), &s, 1);
    const bool got = c.poll_cq(cq_a, &cqe);
    expect(got && cqe.wr_id == 12 && cqe.status != IBV_WC_SUCCESS, "SRQ producer out of range: the send fails");
    expect(c.wait_event(IBV_EVENT_SRQ_ERR, 860), "SRQ producer out of range: IBV_EVENT_SRQ_ERR");
    expect(c.qp_state(b) == IBV_QPS_ERR, "SRQ producer out of range: the QP on it in error");
    expect(!c.poll_cq(cq_b, &cqe, 200), "SRQ producer out of range: no receive completion");
  }
  {  // CQ header overwritten: its consumer index far ahead of the producer.
    Pair p(c, 900);
    std::memset(static_cast<void*>(p.cq_a.ring.hdr), 0x7f, sizeof(abi::QueueHeader));
    p.cq_a.ring.hdr->notify.store(0);
    abi::Sge s{reinterpret_cast<uint64_t>(mem), 16, mr.lkey};
    c.post_recv(p.b.rq, 90, s);
    c.post_send(p.a, wqe(IBV_WR_SEND, 10, 1), &s, 1);
    expect(c.wait_event(IBV_EVENT_CQ_ERR, 0), "CQ header overwritten: IBV_EVENT_CQ_ERR");
    expect(c.poll_cq(p.cq_b, &cqe) && cqe.wr_id == 90, "CQ header overwritten: the peer still receives");
  }
  {  // Inline data longer than the slot, and a remote address that wraps.
    Pair p(c, 1050);
    abi::SendWqe w = wqe(IBV_WR_SEND, 13, 0);
    w.flags |= IBV_SEND_INLINE;
    w.inline_len = 0xfffffff0;
    c.post_send(p.a, w, nullptr, 0);
    bool got = c.poll_cq(p.cq_a, &cqe);
    expect(got && cqe.wr_id == 13 && cqe.status == IBV_WC_LOC_LEN_ERR, "inline_len huge: IBV_WC_LOC_LEN_ERR");
    Pair q(c, 1060);
    abi::Sge s{reinterpret_cast<uint64_t>(mem), 4096, mr.lkey};
    w = wqe(IBV_WR_RDMA_WRITE, 14, 1);
    w.remote_addr = ~uint64_t(0) - 100;
    w.rkey = mr.rkey;
    c.post_send(q.a, w, &s, 1);
    got = c.poll_cq(q.cq_a, &cqe);
    expect(got && cqe.wr_id == 14 && cqe.status == IBV_WC_REM_ACCESS_ERR, "remote address that wraps: IBV_WC_REM_ACCESS_ERR");
  }
  {  // WQEs and indices rewritten while the engine reads them, and doorbell floods.
    Pair p(c, 1000);
    Client::Cq ud_cq = c.create_cq(256);
    Client::Qp ud = c.create_qp(ud_cq, 1010, 0, IBV_QPT_UD);
    c.ready_ud(ud);
    std::atomic<bool> stop{false};
    std::thread scribbler([&] {
      std::mt19937_64 rng(14);
      while (!stop.load(std::memory_order_relaxed)) {
        for (Ring* r : {&p.a.sq, &p.b.rq, &ud.sq, &ud.rq}) {
          auto* words = reinterpret_cast<uint64_t*>(r->entries);
          for (size_t i = 0; i < size_t(r->size()) * r->stride / 8; ++i) {
            uint64_t v = rng();
            // Half the time something plausible: a real key, a real address.
            if (v & 1) v = (v & 2) ? mr.lkey : reinterpret_cast<uint64_t>(mem) + (v >> 52);
            words[i] = v;
          }
        }
      }
    });
    std::mt19937 rng(7);
    const uint64_t until = now_ms() + uint64_t(seconds) * 1000;
    uint64_t posted = 0;
    while (now_ms() < until && !(stop_file && access(stop_file, F_OK) == 0)) {
      for (Ring* r : {&p.a.sq, &p.b.rq, &ud.sq, &ud.rq}) {
        const uint32_t prod = r->hdr->producer.load(std::memory_order_relaxed);
        uint32_t next = prod + 1 + rng() % 3;
        if (rng() % 64 == 0) next = rng();  // now and then a torn index
        r->hdr->producer.store(next, std::memory_order_release);
        ++posted;
      }
      if (rng() % 16 == 0) std::memset(static_cast<void*>(p.cq_a.ring.hdr), int(rng()), 8);
      // The doorbell is one eventfd for every client: fill its counter up
      // (the largest value a write may add), as if to jam the others' posts.
      c.ring_doorbell(0xfffffffffffffffeull);
      for (int i = 0; i < 4; ++i) c.ring_doorbell();
      // Drain the CQs so that the engine keeps going.
      for (Client::Cq* q : {&p.cq_a, &p.cq_b, &ud_cq})
        q->ring.hdr->consumer.store(q->ring.hdr->producer.load(std::memory_order_acquire),
                                    std::memory_order_release);
      usleep(200);
    }
    stop = true;
    scribbler.join();
    expect(posted > 0, "scribbled on the rings for " + std::to_string(seconds) + " s (" +
                           std::to_string(posted) + " producer updates)");
  }
  // The engine still answers, every case is counted, and this client's
  // objects are still its own.
  const std::string stats = c.stats();
  const uint64_t bad_after = counter(stats, "bad_wqes");
  expect(bad_after >= bad_before + 4, "bad_wqes counted: " + std::to_string(bad_before) + " -> " +
                                          std::to_string(bad_after));
  {
    Pair p(c, 1100);
    abi::Sge s{reinterpret_cast<uint64_t>(mem), 16, mr.lkey};
    c.post_recv(p.b.rq, 110, s);
    c.post_send(p.a, wqe(IBV_WR_SEND, 11, 1), &s, 1);
    expect(c.poll_cq(p.cq_a, &cqe) && cqe.status == IBV_WC_SUCCESS, "afterwards, a new QP works");
  }
  bool intact = true;
  for (uint8_t b : secret) intact &= b == 0x5e;
  expect(intact, "the other client's memory is untouched at the end");
  std::printf("%s\n", failures ? "hostile_client: FAILED" : "hostile_client: passed");
  return failures ? 1 : 0;
}
