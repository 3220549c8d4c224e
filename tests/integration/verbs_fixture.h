// Shared fixture of the verbs semantics tests (verbs_semantics*.cc).
//
// The tests are ordinary libibverbs programs: compiled against the system
// <infiniband/verbs.h>, linked against the system libibverbs, and run under
// `uroce run` so that uroce's drop-in library and the engine answer. Each
// test opens the device uroce0 and connects QPs of this process to each other
// through the engine's loopback port. Every wait is bounded: a missing
// completion fails the test, it never hangs it.
#pragma once

#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <poll.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace vt {

constexpr const char* kDeviceName = "uroce0";
constexpr double kWaitSeconds = 5.0;

using Clock = std::chrono::steady_clock;

inline Clock::time_point deadline_after(double seconds) {
  return Clock::now() + std::chrono::microseconds(int64_t(seconds * 1e6));
}

inline const char* status_str(int s) { return ibv_wc_status_str(ibv_wc_status(s)); }

constexpr int kRw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

inline uint64_t addr_of(const ibv_mr* mr, size_t offset = 0) {
  return uint64_t(uintptr_t(mr->addr)) + offset;
}

inline ibv_sge sge_of(const ibv_mr* mr, size_t offset, uint32_t len) {
  return ibv_sge{addr_of(mr, offset), len, mr->lkey};
}

// A key that is certainly not the MR's: same index, other generation byte.
inline uint32_t wrong_key(uint32_t key) { return key ^ 0x80u; }

inline std::map<uint64_t, ibv_wc> by_wr_id(const std::vector<ibv_wc>& wcs) {
  std::map<uint64_t, ibv_wc> m;
  for (const ibv_wc& wc : wcs) m[wc.wr_id] = wc;
  return m;
}

// Options of connect_qp(); the defaults are ibv_rc_pingpong's, with every
// remote access allowed.
struct ConnectOpts {
  int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
               IBV_ACCESS_REMOTE_ATOMIC;
  uint8_t min_rnr_timer = 12;
  uint8_t timeout = 14;
  uint8_t retry_cnt = 7;
  uint8_t rnr_retry = 7;
  uint8_t max_rd_atomic = 4;
  uint8_t max_dest_rd_atomic = 4;
  uint32_t sq_psn = 0;
  uint32_t rq_psn = 0;
  uint32_t qkey = 0x11111111;
  ibv_mtu mtu = IBV_MTU_1024;
};

struct QpCaps {
  uint32_t max_send_wr = 64;
  uint32_t max_recv_wr = 64;
  uint32_t max_send_sge = 4;
  uint32_t max_recv_sge = 4;
  uint32_t max_inline_data = 64;
};

// One end of a loopback connection: a QP and its CQ (send and receive).
struct End {
  ibv_qp* qp = nullptr;
  ibv_cq* cq = nullptr;
};

struct Pair {
  End a, b;
};

// Opens uroce0 and tracks every object a test creates; TearDown destroys
// them in reverse order of creation.
class VerbsTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  // ---- objects (all owned by the fixture) ----
  uint8_t* buffer(size_t len, uint8_t fill = 0);
  ibv_mr* reg(void* addr, size_t len, int access);
  ibv_mr* reg_buffer(size_t len, int access, uint8_t fill = 0);
  ibv_cq* make_cq(int cqe = 256, ibv_comp_channel* channel = nullptr, void* cq_context = nullptr);
  ibv_comp_channel* make_channel();
  ibv_qp* make_qp(ibv_qp_type type, ibv_cq* scq, ibv_cq* rcq, const QpCaps& caps = {},
                  int sq_sig_all = 1, ibv_pd* pd = nullptr);
  // ibv_create_qp_ex / ibv_create_cq_ex, tracked like the others.
  ibv_qp* make_qp_ex(ibv_qp_init_attr_ex* attr);
  // Attributes for make_qp_ex: a QP of pd_ whose two CQs are `cq`, that may
  // post `send_ops` (IBV_QP_EX_WITH_*) through ibv_wr_*.
  ibv_qp_init_attr_ex qp_ex_attr(ibv_qp_type type, ibv_cq* cq, uint64_t send_ops, const QpCaps& caps) const;
  ibv_cq_ex* make_cq_ex(ibv_cq_init_attr_ex* attr);
  ibv_ah* make_ah(ibv_ah_attr* attr);
  // Releases an object early (the fixture no longer destroys it).
  void forget(void* object);
  void defer(std::function<void()> fn) { cleanups_.push_back(std::move(fn)); }

  // ---- connection ----
  ibv_ah_attr loopback_av() const;
  // RESET -> INIT on port 1 for RC/UC, with these remote access flags.
  void to_init(ibv_qp* qp, int access);
  // RESET -> INIT -> RTR -> RTS for RC/UC (to remote_qpn) or UD.
  void connect_qp(ibv_qp* qp, uint32_t remote_qpn, const ConnectOpts& o = {});
  // Two QPs of `type`, each with a CQ of its own, connected to each other.
  Pair make_pair(ibv_qp_type type = IBV_QPT_RC, const ConnectOpts& o = {}, const QpCaps& caps = {},
                 int sq_sig_all = 1);
  ibv_qp_state qp_state(ibv_qp* qp);
  // ---- raw packet ----
  // RESET -> INIT (port 1) -> RTR -> RTS for a raw packet QP.
  static void raw_to_rts(ibv_qp* qp);
  // A rule giving `qp` every frame to `mac`, destroyed at the end; null on
  // failure (a test failure too).
  ibv_flow* flow_to_mac(ibv_qp* qp, const uint8_t* mac);

  // ---- posting ----
  static int post_send(ibv_qp* qp, uint64_t wr_id, ibv_wr_opcode op, ibv_sge* sge, int num_sge,
                       unsigned flags = IBV_SEND_SIGNALED, uint64_t remote_addr = 0,
                       uint32_t rkey = 0, uint32_t imm = 0);
  static int post_recv(ibv_qp* qp, uint64_t wr_id, ibv_sge* sge, int num_sge);
  // A signaled 8-byte atomic (IBV_WR_ATOMIC_CMP_AND_SWP or _FETCH_AND_ADD)
  // whose original value lands in sge.
  static int post_atomic(ibv_qp* qp, uint64_t wr_id, ibv_wr_opcode op, ibv_sge* sge,
                         uint64_t remote_addr, uint32_t rkey, uint64_t compare_add, uint64_t swap = 0);
  static int post_recv_mr(ibv_qp* qp, uint64_t wr_id, ibv_mr* mr, size_t offset, uint32_t len);
  // A signaled UD SEND of one SGE to (ah, remote_qpn, remote_qkey).
  static int post_ud(ibv_qp* qp, uint64_t wr_id, ibv_sge* sge, ibv_ah* ah, uint32_t remote_qpn,
                     uint32_t remote_qkey);

  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_gid gid_{};

 private:
  struct Tracked {
    void* object;
    std::function<int()> destroy;
    const char* what;
  };
  void track(void* object, const char* what, std::function<int()> destroy);
  std::vector<Tracked> objects_;
  std::vector<std::function<void()>> cleanups_;
  std::vector<std::unique_ptr<uint8_t[]>> buffers_;
};

// ---- completions (free functions: usable from any thread) ----

// Polls until one completion arrives or the deadline passes.
bool poll_one(ibv_cq* cq, ibv_wc* wc, double seconds = kWaitSeconds);
// Polls until n completions arrived (returns what arrived by the deadline).
std::vector<ibv_wc> poll_n(ibv_cq* cq, size_t n, double seconds = kWaitSeconds);
// Polls for `ms` milliseconds; returns whatever arrived (expected: nothing).
std::vector<ibv_wc> drain_for(ibv_cq* cq, int ms);
// poll(2) on fd for POLLIN; true if readable within ms.
bool fd_readable(int fd, int ms);

std::string describe(const ibv_wc& wc);

// Path of the uroce command of the build tree ($UROCE_BUILD_DIR/bin/uroce).
std::string uroce_command();
// Runs a shell command, returns its exit status and output.
int run_command(const std::string& cmd, std::string* output);

}  // namespace vt

// ASSERT-style wrappers usable in TEST_F bodies.
#define VT_POLL_ONE(cq, wc)                                                         \
  ASSERT_TRUE(::vt::poll_one((cq), (wc))) << "no completion on " #cq " within " \
                                            << ::vt::kWaitSeconds << " s"
