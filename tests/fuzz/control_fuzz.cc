// libFuzzer target: the control protocol. Arbitrary sequences of control
// messages (header, body, file descriptors of any kind) go through the real
// method table and handlers (Session::dispatch, emulator/methods*.cc) against
// the device of a started engine, as one client session. A second session
// (the victim) made one object of every type first; the fuzzed session may
// name the victim's handles, but must never reach its objects: at the end
// every victim object is still there, unchanged, and destroyable by it.
// Each input gets a fresh engine, so every finding replays on its own.
//
// Input: records of [op][fds][handles: 2 bytes][length: 2 bytes, big-endian][body].
//   op      the CtlOp, modulo 40 (36..39 and 0 are no operation)
//   fds     bits 6-7: how many fds (0..3); bits 0-2 the kind of the first,
//           bits 3-5 of the others (kFdKinds: memfds, pipe ends, ...)
//   handles 3 bits per handle field of the method (up to 5), low bits first:
//           what the field is set to (HandleChoice)
// Findings: crashes, sanitizer reports, a victim object changed or lost, a
// file descriptor left open once the engine is gone.
//
// UROCE_CONTROL_TRACE=1: prints each fuzzed request's status.
// UROCE_CONTROL_SEEDS=DIR: writes the seed corpus (a valid message of every
// operation after the messages that make what it needs) into DIR and exits.
#include <dirent.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "emulator/engine.h"
#include "emulator/methods.h"
#include "emulator/session.h"
#include "tests/integration/control_wire.h"

namespace uroce::emulator {

// Declared a friend by session.h: a session whose requests come from a test.
// Replies still go out on the session's socket (one end of a socketpair), so
// the test reads them as a client would.
class SessionTestPeer {
 public:
  // False when the engine would hang up on the client (junk or a flood).
  static bool dispatch(Session& s, uint32_t op, const std::vector<uint8_t>& body, std::vector<int>& fds) {
    abi::CtlRequestHeader hdr{op, uint32_t(body.size())};
    // As from the socket: the body follows the header, never a null pointer.
    static const uint8_t kEmpty = 0;
    return s.dispatch(hdr, body.empty() ? &kEmpty : body.data(), fds) == Session::Verdict::kServe;
  }
};

namespace {

using abi::CtlOp;

using test::Reply;

// One client: a session on one end of a socketpair, the test on the other.
struct Client {
  int peer = -1;
  std::unique_ptr<Session> session;
  // Handles the engine gave this client, by type, oldest first.
  std::map<ObjType, std::vector<uint64_t>> live;
  std::vector<uint64_t> dead;

  Client(Engine& engine, boost::asio::io_context& io, uint64_t id) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) abort();
    peer = sv[1];
    session = std::make_unique<Session>(engine, SeqPacket::socket(io, SeqPacket(AF_UNIX, 0), sv[0]), id);
  }
  ~Client() {
    session.reset();
    close(peer);
  }

  bool hung_up = false;  // the engine would have ended this session

  Reply call(uint32_t op, const std::vector<uint8_t>& body, std::vector<int> fds) {
    hung_up = !SessionTestPeer::dispatch(*session, op, body, fds);
    for (int fd : fds)
      if (fd >= 0) close(fd);
    return read_reply();
  }
  Reply read_reply() {
    Reply r;
    // Every request gets exactly one reply (already queued: no wait), whole.
    if (!test::read_reply(peer, 0, &r) || r.len != r.body.size()) abort();
    for (int fd : r.fds) close(fd);
    r.fds.clear();
    return r;
  }
};

// The object type each creating operation's reply names (its first field).
ObjType created_type(uint32_t op) {
  switch (CtlOp(op)) {
    case CtlOp::kAllocPd: return ObjType::kPd;
    case CtlOp::kRegMr: return ObjType::kMr;
    case CtlOp::kCreateCompChannel: return ObjType::kCompChannel;
    case CtlOp::kCreateCq: return ObjType::kCq;
    case CtlOp::kCreateQp: return ObjType::kQp;
    case CtlOp::kOpenQp: return ObjType::kQp;
    case CtlOp::kCreateSrq: return ObjType::kSrq;
    case CtlOp::kOpenXrcd: return ObjType::kXrcd;
    case CtlOp::kCreateAh: return ObjType::kAh;
    case CtlOp::kAllocMw: return ObjType::kMw;
    case CtlOp::kCreateFlow: return ObjType::kFlow;
    case CtlOp::kCreateWq: return ObjType::kWq;
    case CtlOp::kCreateRwqIndTable: return ObjType::kRwqIndTable;
    case CtlOp::kCreateRssQp: return ObjType::kQp;
    default: return ObjType::kNone;
  }
}

// File descriptors of every kind a client could send.
int make_fd(int kind) {
  int fd = -1, p[2];
  switch (kind) {
    case 0:
    case 1:
    case 6:
      fd = memfd_create("fuzz", MFD_CLOEXEC | MFD_ALLOW_SEALING);
      if (ftruncate(fd, kind == 0 ? 4096 : kind == 1 ? 65536 : 8192) != 0) abort();
      if (kind == 6) fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW);
      return fd;
    case 2:
    case 3:
      if (pipe2(p, O_CLOEXEC) != 0) abort();
      close(p[kind == 2 ? 0 : 1]);
      return p[kind == 2 ? 1 : 0];
    case 4: return open("/dev/null", O_RDWR | O_CLOEXEC);
    case 5: return eventfd(0, EFD_CLOEXEC);
    default:
      if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p) != 0) abort();
      close(p[1]);
      return p[0];
  }
}

std::vector<uint8_t> bytes_of(const void* p, size_t n) {
  auto b = static_cast<const uint8_t*>(p);
  return {b, b + n};
}
template <typename T>
std::vector<uint8_t> bytes_of(const T& t) {
  return bytes_of(&t, sizeof(T));
}

// What a handle field of a fuzzed request is set to.
enum HandleChoice : uint8_t {
  kAsSent,        // the body's bytes
  kOwnNewest,     // this client's newest handle of the field's type
  kOwnOldest,     // its oldest of that type
  kOwnSecond,     // its second newest of that type
  kOwnAnyType,    // its newest of another type
  kVictims,       // the victim's handle of the field's type
  kOwnDestroyed,  // one it destroyed
  kZero,
};

uint64_t pick(const Client& self, const Client& victim, ObjType type, HandleChoice how, uint64_t sent) {
  auto of = [](const Client& c, ObjType t) -> const std::vector<uint64_t>* {
    auto it = c.live.find(t);
    return it == c.live.end() || it->second.empty() ? nullptr : &it->second;
  };
  const std::vector<uint64_t>* own = of(self, type);
  switch (how) {
    case kAsSent: return sent;
    case kOwnNewest: return own ? own->back() : sent;
    case kOwnOldest: return own ? own->front() : sent;
    case kOwnSecond: return own && own->size() > 1 ? (*own)[own->size() - 2] : sent;
    case kOwnAnyType:
      for (const auto& [t, hs] : self.live)
        if (t != type && !hs.empty()) return hs.back();
      return sent;
    case kVictims: {
      const std::vector<uint64_t>* v = of(victim, type);
      return v ? v->front() : sent;
    }
    case kOwnDestroyed: return self.dead.empty() ? sent : self.dead.back();
    default: return 0;
  }
}

// A fresh started engine in a private runtime directory, and its clients.
struct World {
  static inline std::string runtime_dir;
  static inline bool trace = false;  // UROCE_CONTROL_TRACE: each request's status
  boost::asio::io_context io;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<Client> victim, client;
  std::vector<uint8_t> buf = std::vector<uint8_t>(64 * 1024, 0x5a);
  Reply victim_qp_before, victim_srq_before;

  World() {
    EngineConfig cfg;
    cfg.runtime_dir = runtime_dir;
    cfg.device.name = "fuzz" + std::to_string(getpid());
    cfg.cpu = EngineConfig::kCpuNone;
    engine = std::make_unique<Engine>(cfg);
    engine->start();
    victim = std::make_unique<Client>(*engine, io, 1);
    client = std::make_unique<Client>(*engine, io, 2);
    // The victim: one object of every type, its QP in INIT.
    for (const auto& [op, body, fd] : setup_messages(*victim)) run(*victim, op, body, fd, true);
    victim_qp_before = query(*victim, CtlOp::kQueryQp, ObjType::kQp);
    victim_srq_before = query(*victim, CtlOp::kQuerySrq, ObjType::kSrq);
  }
  ~World() {
    client.reset();
    victim.reset();
    engine.reset();
  }

  struct Msg {
    uint32_t op;
    std::vector<uint8_t> body;
    int fd_kind;  // -1: none
  };
  // Valid messages making one object of every type (handles filled in by run()).
  std::vector<Msg> setup_messages(const Client&) {
    std::vector<Msg> m;
    m.push_back({uint32_t(CtlOp::kHello), bytes_of(abi::HelloRequest{abi::kMagic, abi::kVersion}), 2});
    m.push_back({uint32_t(CtlOp::kAllocPd), {}, -1});
    abi::RegMrRequest mr{};
    mr.addr = mr.iova = reinterpret_cast<uint64_t>(buf.data());
    mr.length = buf.size();
    mr.access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    m.push_back({uint32_t(CtlOp::kRegMr), bytes_of(mr), -1});
    m.push_back({uint32_t(CtlOp::kCreateCompChannel), {}, 2});
    abi::CreateCqRequest cq{};
    cq.cqe = 64;
    m.push_back({uint32_t(CtlOp::kCreateCq), bytes_of(cq), -1});
    abi::CreateSrqRequest srq{};
    srq.srq_type = IBV_SRQT_BASIC;
    srq.max_wr = 16;
    srq.max_sge = 2;
    srq.srq_limit = 4;
    m.push_back({uint32_t(CtlOp::kCreateSrq), bytes_of(srq), -1});
    abi::CreateQpRequest qp{};
    qp.qp_type = IBV_QPT_RC;
    qp.caps = {16, 16, 2, 2, 64, 0};
    m.push_back({uint32_t(CtlOp::kCreateQp), bytes_of(qp), -1});
    abi::ModifyQpRequest mod{};
    mod.attr_mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
    mod.attr.qp_state = IBV_QPS_INIT;
    mod.attr.port_num = 1;
    mod.attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    m.push_back({uint32_t(CtlOp::kModifyQp), bytes_of(mod), -1});
    m.push_back({uint32_t(CtlOp::kCreateAh), bytes_of(abi::CreateAhRequest{}), -1});
    m.push_back({uint32_t(CtlOp::kOpenXrcd), bytes_of(abi::OpenXrcdRequest{0, 0}), -1});
    return m;
  }

  // Sends one message with every handle field set to the client's newest
  // handle of its type; `must` aborts unless it succeeds.
  Reply run(Client& c, uint32_t op, std::vector<uint8_t> body, int fd_kind, bool must) {
    if (const Method* m = find_method(op))
      for (size_t i = 0; i < m->num_handles; ++i) {
        const uint64_t h = pick(c, c, m->handles[i].type, kOwnNewest, 0);
        if (m->handles[i].offset + sizeof(h) <= body.size()) std::memcpy(body.data() + m->handles[i].offset, &h, sizeof(h));
      }
    std::vector<int> fds;
    if (fd_kind >= 0) fds.push_back(make_fd(fd_kind));
    Reply r = c.call(op, body, fds);
    if (must && r.status != 0) {
      std::fprintf(stderr, "setup op %u failed: %d\n", op, r.status);
      abort();
    }
    note(c, op, body, r);
    return r;
  }
  // Keeps the client's handle lists as the engine's.
  void note(Client& c, uint32_t op, const std::vector<uint8_t>& body, const Reply& r) {
    if (r.status != 0) return;
    const ObjType made = created_type(op);
    if (made != ObjType::kNone && r.body.size() >= 8) {
      uint64_t h;
      std::memcpy(&h, r.body.data(), 8);
      c.live[made].push_back(h);
    }
    const Method* m = find_method(op);
    for (size_t i = 0; m && i < m->num_handles; ++i) {
      if (!m->handles[i].destroys) continue;
      uint64_t h;
      std::memcpy(&h, body.data() + m->handles[i].offset, sizeof(h));
      auto& hs = c.live[m->handles[i].type];
      for (auto it = hs.begin(); it != hs.end(); ++it)
        if (*it == h) {
          hs.erase(it);
          c.dead.push_back(h);
          break;
        }
    }
  }
  Reply query(Client& c, CtlOp op, ObjType type) {
    abi::HandleRequest q{c.live[type].front()};
    return c.call(uint32_t(op), bytes_of(q), {});
  }

  // One fuzzed record from the client.
  void fuzz_one(uint8_t op_byte, uint8_t fd_byte, uint16_t handle_bits, const uint8_t* data, size_t len) {
    const uint32_t op = op_byte % 40;
    std::vector<uint8_t> body(data, data + len);
    // The engine opens the capture path: keep the fuzzer's files out of it.
    if (op == uint32_t(CtlOp::kCapture) && body.size() >= 4) {
      const uint32_t status = abi::kCaptureStatus;
      std::memcpy(body.data(), &status, 4);
    }
    if (const Method* m = find_method(op))
      for (size_t i = 0; i < m->num_handles; ++i) {
        const HandleAttr& a = m->handles[i];
        if (a.offset + sizeof(uint64_t) > body.size()) continue;
        uint64_t h;
        std::memcpy(&h, body.data() + a.offset, sizeof(h));
        h = pick(*client, *victim, a.type, HandleChoice((handle_bits >> (3 * i)) & 7), h);
        std::memcpy(body.data() + a.offset, &h, sizeof(h));
      }
    std::vector<int> fds;
    for (int i = 0; i < fd_byte >> 6; ++i) fds.push_back(make_fd(i == 0 ? fd_byte & 7 : (fd_byte >> 3) & 7));
    const Reply r = client->call(op, body, fds);
    if (trace) std::fprintf(stderr, "%s: %d\n", find_method(op) ? find_method(op)->name : "-", r.status);
    note(*client, op, body, r);
  }

  // The victim's objects: unchanged, and still its own to destroy.
  void check_victim() {
    const Reply qp = query(*victim, CtlOp::kQueryQp, ObjType::kQp);
    const Reply srq = query(*victim, CtlOp::kQuerySrq, ObjType::kSrq);
    if (qp.status != 0 || qp.body != victim_qp_before.body) {
      std::fprintf(stderr, "victim QP changed or lost: status %d\n", qp.status);
      abort();
    }
    if (srq.status != 0 || srq.body != victim_srq_before.body) {
      std::fprintf(stderr, "victim SRQ changed or lost: status %d\n", srq.status);
      abort();
    }
    const std::pair<CtlOp, ObjType> order[] = {
        {CtlOp::kDestroyAh, ObjType::kAh},   {CtlOp::kDestroyQp, ObjType::kQp},
        {CtlOp::kDestroySrq, ObjType::kSrq}, {CtlOp::kDestroyCq, ObjType::kCq},
        {CtlOp::kDeregMr, ObjType::kMr},     {CtlOp::kDeallocPd, ObjType::kPd},
        {CtlOp::kCloseXrcd, ObjType::kXrcd}, {CtlOp::kDestroyCompChannel, ObjType::kCompChannel}};
    for (const auto& [op, type] : order) {
      const Reply r = query(*victim, op, type);
      if (r.status != 0) {
        std::fprintf(stderr, "victim cannot destroy its object (op %u): %d\n", unsigned(op), r.status);
        abort();
      }
    }
  }
};

// Seeds: the setup messages, then a valid message of each operation.
void write_seeds(const char* dir) {
  World w;
  std::vector<World::Msg> setup = w.setup_messages(*w.client);
  auto record = [](std::vector<uint8_t>& out, const World::Msg& m) {
    out.push_back(uint8_t(m.op));
    out.push_back(m.fd_kind < 0 ? 0 : uint8_t(0x40 | m.fd_kind));
    const uint16_t newest = 0x1249 /* kOwnNewest in every 3-bit field */;
    out.push_back(uint8_t(newest));
    out.push_back(uint8_t(newest >> 8));
    out.push_back(uint8_t(m.body.size() >> 8));
    out.push_back(uint8_t(m.body.size()));
    out.insert(out.end(), m.body.begin(), m.body.end());
  };
  std::vector<World::Msg> ops;
  auto h = [](const auto& t) { return bytes_of(t); };
  ops.push_back({uint32_t(CtlOp::kQueryDevice), {}, -1});
  ops.push_back({uint32_t(CtlOp::kQueryPort), {}, -1});
  ops.push_back({uint32_t(CtlOp::kSetPortState), h(abi::SetPortStateRequest{IBV_PORT_DOWN, 0}), -1});
  ops.push_back({uint32_t(CtlOp::kDeallocPd), h(abi::HandleRequest{}), -1});
  abi::RegMrRequest shared{};
  shared.addr = shared.iova = shared.shared.start = 0x10000000;
  shared.length = shared.shared.length = 8192;
  shared.access = IBV_ACCESS_LOCAL_WRITE;
  ops.push_back({uint32_t(CtlOp::kRegMr), h(shared), 6});
  abi::ReregMrRequest rereg{};
  rereg.flags = IBV_REREG_MR_CHANGE_ACCESS;
  rereg.access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ;
  ops.push_back({uint32_t(CtlOp::kReregMr), h(rereg), -1});
  ops.push_back({uint32_t(CtlOp::kDeregMr), h(abi::HandleRequest{}), -1});
  const World::Msg alloc_mw{uint32_t(CtlOp::kAllocMw), h(abi::AllocMwRequest{0, IBV_MW_TYPE_2, 0}), -1};
  ops.push_back(alloc_mw);
  ops.push_back({uint32_t(CtlOp::kDeallocMw), h(abi::HandleRequest{}), -1});
  ops.push_back({uint32_t(CtlOp::kDestroyCompChannel), h(abi::HandleRequest{}), -1});
  abi::CreateCqRequest cq{};
  cq.cqe = 16;
  cq.flags = abi::kCqTimestamps;
  ops.push_back({uint32_t(CtlOp::kCreateCq), h(cq), -1});
  ops.push_back({uint32_t(CtlOp::kResizeCq), h(abi::ResizeCqRequest{0, 256, 0}), -1});
  ops.push_back({uint32_t(CtlOp::kDestroyCq), h(abi::HandleRequest{}), -1});
  abi::ModifyQpRequest rtr{};
  rtr.attr_mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  rtr.attr.qp_state = IBV_QPS_RTR;
  rtr.attr.path_mtu = IBV_MTU_1024;
  rtr.attr.dest_qp_num = 0x11;
  rtr.attr.ah.is_global = 1;
  rtr.attr.ah.dgid[10] = rtr.attr.ah.dgid[11] = 0xff;
  rtr.attr.ah.dgid[12] = 127;
  rtr.attr.ah.dgid[15] = 1;
  rtr.attr.ah.hop_limit = 64;
  rtr.attr.ah.port_num = 1;
  ops.push_back({uint32_t(CtlOp::kModifyQp), h(rtr), -1});
  ops.push_back({uint32_t(CtlOp::kQueryQp), h(abi::HandleRequest{}), -1});
  ops.push_back({uint32_t(CtlOp::kDestroyQp), h(abi::HandleRequest{}), -1});
  ops.push_back({uint32_t(CtlOp::kModifySrq), h(abi::ModifySrqRequest{0, IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT, 64, 8, 0}), -1});
  ops.push_back({uint32_t(CtlOp::kQuerySrq), h(abi::HandleRequest{}), -1});
  ops.push_back({uint32_t(CtlOp::kDestroySrq), h(abi::HandleRequest{}), -1});
  abi::CreateSrqRequest xsrq{};
  xsrq.srq_type = IBV_SRQT_XRC;
  xsrq.max_wr = 8;
  xsrq.max_sge = 1;
  ops.push_back({uint32_t(CtlOp::kCreateSrq), h(xsrq), -1});
  abi::CreateQpRequest tgt{};
  tgt.qp_type = IBV_QPT_XRC_RECV;
  ops.push_back({uint32_t(CtlOp::kCreateQp), h(tgt), -1});
  abi::CreateQpRequest ud{};
  ud.qp_type = IBV_QPT_UD;
  ud.caps = {8, 8, 1, 1, 0, 0};
  ops.push_back({uint32_t(CtlOp::kCreateQp), h(ud), -1});
  ops.push_back({uint32_t(CtlOp::kOpenXrcd), h(abi::OpenXrcdRequest{1, O_CREAT}), 0});
  ops.push_back({uint32_t(CtlOp::kOpenQp), h(abi::OpenQpRequest{0, 0, 0x12, IBV_QPT_XRC_RECV}), -1});
  ops.push_back({uint32_t(CtlOp::kCloseXrcd), h(abi::HandleRequest{}), -1});
  ops.push_back({uint32_t(CtlOp::kDestroyAh), h(abi::HandleRequest{}), -1});
  ops.push_back({uint32_t(CtlOp::kSetFault), h(abi::SetFaultRequest{0, 0, 0.1, 0.1, 0.1, 0.1, 10, 1}), -1});
  ops.push_back({uint32_t(CtlOp::kCapture), h(abi::CaptureRequest{abi::kCaptureStatus, 0, 0, {}}), -1});
  ops.push_back({uint32_t(CtlOp::kStatus), {}, -1});
  ops.push_back({uint32_t(CtlOp::kStats), {}, -1});
  ops.push_back({uint32_t(CtlOp::kReport), h(abi::ReportRequest{0}), -1});
  // What must go before a destroy that the setup's objects would make EBUSY.
  const World::Msg destroy_qp{uint32_t(CtlOp::kDestroyQp), h(abi::HandleRequest{}), -1};
  const World::Msg destroy_cq{uint32_t(CtlOp::kDestroyCq), h(abi::HandleRequest{}), -1};
  const World::Msg destroy_ah{uint32_t(CtlOp::kDestroyAh), h(abi::HandleRequest{}), -1};
  const World::Msg dereg_mr{uint32_t(CtlOp::kDeregMr), h(abi::HandleRequest{}), -1};
  auto before = [&](uint32_t op) -> std::vector<World::Msg> {
    switch (CtlOp(op)) {
      case CtlOp::kDeallocPd: return {destroy_ah, destroy_qp, dereg_mr, {uint32_t(CtlOp::kDestroySrq), h(abi::HandleRequest{}), -1}};
      case CtlOp::kDeallocMw: return {alloc_mw};
      case CtlOp::kDestroyCq: return {destroy_qp};
      case CtlOp::kDestroySrq: return {destroy_qp};
      case CtlOp::kDestroyCompChannel: return {destroy_qp, destroy_cq};
      default: return {};
    }
  };
  int n = 0;
  for (const auto& op : ops) {
    std::vector<uint8_t> out;
    for (const auto& m : setup) record(out, m);
    for (const auto& m : before(op.op)) record(out, m);
    record(out, op);
    char name[64];
    std::snprintf(name, sizeof(name), "%s/%02d-%s", dir, n++, find_method(op.op)->name);
    std::ofstream(name, std::ios::binary).write(reinterpret_cast<const char*>(out.data()), out.size());
  }
}

}  // namespace
}  // namespace uroce::emulator

using namespace uroce::emulator;

namespace {
void run_one(const uint8_t* data, size_t size);
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  char tmpl[] = "/tmp/uroce-control-fuzz.XXXXXX";
  if (!mkdtemp(tmpl)) abort();
  World::runtime_dir = tmpl;
  World::trace = getenv("UROCE_CONTROL_TRACE") != nullptr;
  std::atexit([] { rmdir(World::runtime_dir.c_str()); });
  if (const char* dir = getenv("UROCE_CONTROL_SEEDS")) {
    write_seeds(dir);
    std::exit(0);
  }
  return 0;
}

namespace {

size_t open_fds() {
  size_t n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (readdir(d)) ++n;
    closedir(d);
  }
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Every descriptor the engine took or made is closed again with it.
  const size_t fds_before = open_fds();
  run_one(data, size);
  if (const size_t after = open_fds(); after != fds_before) {
    std::fprintf(stderr, "file descriptors leaked: %zu before, %zu after\n", fds_before, after);
    abort();
  }
  return 0;
}

namespace {

void run_one(const uint8_t* data, size_t size) {
  World w;
  size_t off = 0;
  for (int records = 0; records < 64 && off + 6 <= size; ++records) {
    const uint8_t op = data[off], fds = data[off + 1];
    const uint16_t handles = uint16_t(data[off + 2] | data[off + 3] << 8);
    const size_t len = size_t(data[off + 4]) << 8 | data[off + 5];
    off += 6;
    if (len > size - off || len > uroce::abi::kMaxCtlMsg - sizeof(uroce::abi::CtlRequestHeader)) break;
    w.fuzz_one(op, fds, handles, data + off, len);
    off += len;
    if (w.client->hung_up) break;  // junk ends a real session: nothing follows it
  }
  w.check_victim();
}

}  // namespace
