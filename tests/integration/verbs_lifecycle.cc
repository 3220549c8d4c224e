// Verbs semantics, part 3: concurrency, fork(), client sessions that die,
// and the engine stopping under an open context.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <map>
#include <mutex>
#include <regex>
#include <set>

#include "tests/integration/verbs_fixture.h"

namespace vt {
namespace {

// ===========================================================================
// 4. Concurrency
// ===========================================================================

class Concurrency : public VerbsTest {};

TEST_F(Concurrency, FourThreadsEachDriveTheirOwnPair) {
  constexpr int kThreads = 4, kMsgs = 2000, kDepth = 32;
  struct Work {
    Pair p;
    ibv_mr* send_mr;
    ibv_mr* recv_mr;
    std::string error;
  };
  std::vector<Work> work(kThreads);
  for (Work& w : work) {
    w.p = make_pair();
    w.send_mr = reg_buffer(kDepth * 64, IBV_ACCESS_LOCAL_WRITE);
    w.recv_mr = reg_buffer(kDepth * 64, IBV_ACCESS_LOCAL_WRITE);
    ASSERT_TRUE(w.send_mr && w.recv_mr);
  }
  ASSERT_FALSE(HasFailure());

  auto run = [](Work& w) {
    auto fail = [&w](const std::string& m) {
      if (w.error.empty()) w.error = m;
    };
    auto* sbuf = static_cast<uint8_t*>(w.send_mr->addr);
    auto* rbuf = static_cast<uint8_t*>(w.recv_mr->addr);
    auto post_recv_seq = [&](uint64_t seq) {
      ibv_sge s{uint64_t(uintptr_t(rbuf + 64 * (seq % kDepth))), 64, w.recv_mr->lkey};
      return VerbsTest::post_recv(w.p.b.qp, seq, &s, 1);
    };
    uint64_t posted_recv = 0, posted_send = 0, done_send = 0, done_recv = 0;
    for (; posted_recv < kDepth; ++posted_recv)
      if (post_recv_seq(posted_recv)) return fail("post_recv failed");
    const auto end = deadline_after(60);
    ibv_wc wc[16];
    while ((done_send < kMsgs || done_recv < kMsgs) && w.error.empty()) {
      if (Clock::now() > end) return fail("timed out: sent " + std::to_string(done_send) +
                                          ", received " + std::to_string(done_recv));
      while (posted_send < kMsgs && posted_send - done_send < kDepth && posted_send < posted_recv) {
        uint8_t* slot = sbuf + 64 * (posted_send % kDepth);
        std::memcpy(slot, &posted_send, 8);
        ibv_sge s{uint64_t(uintptr_t(slot)), 8, w.send_mr->lkey};
        if (VerbsTest::post_send(w.p.a.qp, posted_send, IBV_WR_SEND, &s, 1))
          return fail("post_send failed");
        ++posted_send;
      }
      int n = ibv_poll_cq(w.p.a.cq, 16, wc);
      for (int i = 0; i < n; ++i) {
        if (wc[i].status != IBV_WC_SUCCESS || wc[i].wr_id != done_send)
          return fail("send completion " + std::to_string(done_send) + ": " + describe(wc[i]));
        ++done_send;
      }
      n = ibv_poll_cq(w.p.b.cq, 16, wc);
      for (int i = 0; i < n; ++i) {
        uint64_t got = ~0ull;
        std::memcpy(&got, rbuf + 64 * (done_recv % kDepth), 8);
        if (wc[i].status != IBV_WC_SUCCESS || wc[i].wr_id != done_recv || wc[i].byte_len != 8 ||
            got != done_recv)
          return fail("receive " + std::to_string(done_recv) + ": " + describe(wc[i]) +
                      " payload " + std::to_string(got));
        ++done_recv;
        if (posted_recv < kMsgs) {
          if (post_recv_seq(posted_recv)) return fail("post_recv failed");
          ++posted_recv;
        }
      }
    }
  };
  std::vector<std::thread> threads;
  for (Work& w : work) threads.emplace_back(run, std::ref(w));
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < kThreads; ++i) EXPECT_EQ(work[i].error, "") << "thread " << i;
  for (Work& w : work) {
    EXPECT_TRUE(drain_for(w.p.a.cq, 10).empty()) << "extra send completions";
    EXPECT_TRUE(drain_for(w.p.b.cq, 10).empty()) << "extra receive completions";
  }
}

TEST_F(Concurrency, TwoPostersOneQpOnePollerSharedCq) {
  constexpr int kPerThread = 1000, kTotal = 2 * kPerThread;
  ibv_cq* shared = make_cq(4 * kTotal);
  ibv_cq* other = make_cq(16);
  ASSERT_TRUE(shared && other);
  QpCaps sq;
  sq.max_send_wr = 128;
  sq.max_recv_wr = 1;
  QpCaps rq;
  rq.max_send_wr = 1;
  rq.max_recv_wr = kTotal;
  ibv_qp* qa = make_qp(IBV_QPT_RC, shared, other, sq);
  ibv_qp* qb = make_qp(IBV_QPT_RC, other, shared, rq);
  ASSERT_TRUE(qa && qb) << std::strerror(errno);
  connect_qp(qa, qb->qp_num);
  connect_qp(qb, qa->qp_num);
  ASSERT_FALSE(HasFailure());
  ibv_mr* smr = reg_buffer(kTotal * 8, IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* rmr = reg_buffer(kTotal * 8, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(smr && rmr);
  auto* sbuf = static_cast<uint64_t*>(smr->addr);
  auto* rbuf = static_cast<uint64_t*>(rmr->addr);
  for (int i = 0; i < kTotal; ++i) ASSERT_EQ(post_recv_mr(qb, i, rmr, 8 * i, 8), 0);

  std::atomic<bool> stop{false};
  std::string poster_error[2];
  auto poster = [&](int t) {
    const auto end = deadline_after(60);
    for (int i = 0; i < kPerThread && !stop; ++i) {
      const uint64_t id = (uint64_t(t + 1) << 32) | uint64_t(i);
      const int slot = t * kPerThread + i;
      sbuf[slot] = id;
      ibv_sge s{uint64_t(uintptr_t(&sbuf[slot])), 8, smr->lkey};
      int rc;
      while ((rc = VerbsTest::post_send(qa, id, IBV_WR_SEND, &s, 1)) == ENOMEM && !stop &&
             Clock::now() < end)
        std::this_thread::yield();  // send queue full: the poller frees slots
      if (rc) {
        poster_error[t] = "post_send " + std::to_string(i) + ": " + std::strerror(rc);
        return;
      }
    }
  };
  std::vector<ibv_wc> sends, recvs;
  std::string poll_error;
  auto poller = [&] {
    const auto end = deadline_after(60);
    ibv_wc wc[32];
    while (sends.size() + recvs.size() < size_t(2 * kTotal)) {
      if (Clock::now() > end) {
        poll_error = "timed out after " + std::to_string(sends.size()) + " send and " +
                     std::to_string(recvs.size()) + " receive completions";
        break;
      }
      int n = ibv_poll_cq(shared, 32, wc);
      if (n < 0) {
        poll_error = "ibv_poll_cq failed";
        break;
      }
      for (int i = 0; i < n; ++i) (wc[i].qp_num == qa->qp_num ? sends : recvs).push_back(wc[i]);
    }
    stop = true;
  };
  std::thread p0(poster, 0), p1(poster, 1), pl(poller);
  p0.join();
  p1.join();
  pl.join();
  EXPECT_EQ(poster_error[0], "");
  EXPECT_EQ(poster_error[1], "");
  ASSERT_EQ(poll_error, "");

  std::set<uint64_t> send_ids, payloads;
  std::set<uint64_t> recv_ids;
  uint64_t last[2] = {0, 0};
  bool first[2] = {true, true};
  for (const ibv_wc& wc : sends) {
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
    EXPECT_EQ(wc.opcode, IBV_WC_SEND);
    EXPECT_TRUE(send_ids.insert(wc.wr_id).second) << "send " << wc.wr_id << " completed twice";
    const int t = int(wc.wr_id >> 32) - 1;
    ASSERT_TRUE(t == 0 || t == 1) << describe(wc);
    const uint64_t i = wc.wr_id & 0xffffffffu;
    EXPECT_TRUE(first[t] || i > last[t]) << "poster " << t << " completions out of order";
    first[t] = false;
    last[t] = i;
  }
  for (const ibv_wc& wc : recvs) {
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
    EXPECT_EQ(wc.opcode, IBV_WC_RECV);
    EXPECT_EQ(wc.byte_len, 8u);
    EXPECT_TRUE(recv_ids.insert(wc.wr_id).second) << "receive " << wc.wr_id << " completed twice";
    if (wc.wr_id < uint64_t(kTotal)) {
      EXPECT_TRUE(payloads.insert(rbuf[wc.wr_id]).second) << "message delivered twice";
    }
  }
  EXPECT_EQ(send_ids.size(), size_t(kTotal));
  EXPECT_EQ(recv_ids.size(), size_t(kTotal));
  EXPECT_EQ(payloads, send_ids) << "every message arrives exactly once";
  EXPECT_TRUE(drain_for(shared, 20).empty());
}

// ===========================================================================
// 5. fork()
// ===========================================================================

class Fork : public VerbsTest {};

// Waits for a child with a deadline; SIGKILLs it when the deadline passes.
int wait_child(pid_t pid, double seconds, bool* timed_out) {
  const auto end = deadline_after(seconds);
  int status = 0;
  *timed_out = false;
  while (true) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0) return -1;
    if (Clock::now() > end) {
      *timed_out = true;
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return status;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// Without ibv_fork_init() (as rdma-core on kernels >= 5.13, where
// ibv_fork_init() is a no-op, IBV_FORK_UNNEEDED): the child gets a private
// copy of registered memory it may write, and the device keeps reaching the
// parent's pages.
TEST_F(Fork, ChildCopyOfRegisteredMemoryStaysPrivate) {
  Pair p = make_pair();
  ASSERT_FALSE(HasFailure());
  constexpr size_t kLen = 8192;
  ibv_mr* mr = reg_buffer(kLen, kRw, 'P');
  ibv_mr* src = reg_buffer(kLen, IBV_ACCESS_LOCAL_WRITE, 'W');
  ASSERT_TRUE(mr && src);
  auto* buf = static_cast<uint8_t*>(mr->addr);

  int to_child[2], to_parent[2];
  ASSERT_EQ(pipe2(to_child, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(to_parent, O_CLOEXEC), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The child: its copy of the registered buffer is its own.
    close(to_child[1]);
    close(to_parent[0]);
    std::memset(buf, 'C', kLen);
    char c = 'r';
    if (write(to_parent[1], &c, 1) != 1) _exit(4);
    if (read(to_child[0], &c, 1) < 0) _exit(5);  // the parent's go (or its EOF)
    const bool own = std::all_of(buf, buf + kLen, [](uint8_t b) { return b == 'C'; });
    _exit(own ? 0 : 3);
  }
  close(to_child[0]);
  close(to_parent[1]);
  defer([=] {
    close(to_child[1]);
    close(to_parent[0]);
  });
  ASSERT_TRUE(fd_readable(to_parent[0], 5000)) << "child did not start";
  char c;
  ASSERT_EQ(read(to_parent[0], &c, 1), 1);

  // The child has written its copy; an RDMA WRITE still lands in the parent.
  ibv_sge s{uint64_t(uintptr_t(src->addr)), 4096, src->lkey};
  ASSERT_EQ(post_send(p.a.qp, 1, IBV_WR_RDMA_WRITE, &s, 1, IBV_SEND_SIGNALED,
                      uint64_t(uintptr_t(buf)), mr->rkey),
            0);
  ibv_wc wc;
  VT_POLL_ONE(p.a.cq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_TRUE(std::all_of(buf, buf + 4096, [](uint8_t b) { return b == 'W'; }))
      << "the RDMA WRITE did not reach the parent's buffer";
  EXPECT_TRUE(std::all_of(buf + 4096, buf + kLen, [](uint8_t b) { return b == 'P'; }))
      << "the child's writes appeared in the parent";

  c = 'g';
  ASSERT_EQ(write(to_child[1], &c, 1), 1);
  bool timed_out;
  const int status = wait_child(pid, 5, &timed_out);
  EXPECT_FALSE(timed_out);
  ASSERT_TRUE(WIFEXITED(status)) << "child died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "3: the RDMA WRITE went to the child's copy";

  // The parent's device keeps working after the child is gone.
  ASSERT_EQ(post_send(p.a.qp, 2, IBV_WR_RDMA_WRITE, &s, 1, IBV_SEND_SIGNALED,
                      uint64_t(uintptr_t(buf)) + 4096, mr->rkey),
            0);
  VT_POLL_ONE(p.a.cq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_TRUE(std::all_of(buf, buf + kLen, [](uint8_t b) { return b == 'W'; }));
  EXPECT_EQ(qp_state(p.a.qp), IBV_QPS_RTS);
}

// ===========================================================================
// 6. Sessions: a client killed with its objects
// ===========================================================================

bool write_all(int fd, const void* p, size_t n) { return write(fd, p, n) == ssize_t(n); }

bool read_all(int fd, void* p, size_t n, int timeout_ms) {
  auto* c = static_cast<uint8_t*>(p);
  while (n) {
    if (!fd_readable(fd, timeout_ms)) return false;
    ssize_t r = read(fd, c, n);
    if (r <= 0) return false;
    c += r;
    n -= size_t(r);
  }
  return true;
}

bool modify_rc_to_rts(ibv_qp* qp, const ibv_gid& gid, uint32_t remote, const ConnectOpts& o) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = o.access;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    return false;
  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = remote;
  a.max_dest_rd_atomic = o.max_dest_rd_atomic;
  a.min_rnr_timer = o.min_rnr_timer;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = gid;
  a.ah_attr.grh.hop_limit = 1;
  a.ah_attr.port_num = 1;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    return false;
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = o.timeout;
  a.retry_cnt = o.retry_cnt;
  a.rnr_retry = o.rnr_retry;
  a.max_rd_atomic = o.max_rd_atomic;
  return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                   IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) == 0;
}

// Does `uroce status` mention process `pid` (a client line or an object)?
bool status_mentions_pid(const std::string& status, pid_t pid) {
  return std::regex_search(status, std::regex("pid " + std::to_string(pid) + "\\b"));
}

std::string engine_status() {
  std::string out;
  run_command("timeout 10 " + uroce_command() + " status", &out);
  return out;
}

class Sessions : public VerbsTest {};

// `uroce status` lists every QP, past the 4 KiB of one control message
// (the text is read in pieces, as the JSON report).
TEST_F(Sessions, StatusListsEveryQpPastOneControlMessage) {
  ibv_cq* cq = make_cq();
  std::vector<uint32_t> qpns;
  for (int i = 0; i < 100; ++i) {
    ibv_qp* q = make_qp(IBV_QPT_RC, cq, cq);
    ASSERT_NE(q, nullptr) << i;
    qpns.push_back(q->qp_num);
  }
  const std::string status = engine_status();
  EXPECT_GT(status.size(), 4096u);
  for (uint32_t qpn : qpns)
    EXPECT_TRUE(std::regex_search(status, std::regex("qp " + std::to_string(qpn) + " RC"))) << qpn;
}

TEST_F(Sessions, KilledClientIsReclaimedAndItsPeerTimesOut) {
  int to_child[2], to_parent[2];
  ASSERT_EQ(pipe(to_child), 0);
  ASSERT_EQ(pipe(to_parent), 0);
  fcntl(to_child[1], F_SETFD, FD_CLOEXEC);
  fcntl(to_parent[0], F_SETFD, FD_CLOEXEC);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const std::string wfd = std::to_string(to_parent[1]), rfd = std::to_string(to_child[0]);
    execl("/proc/self/exe", "verbs_semantics", "--session-child", wfd.c_str(), rfd.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  close(to_child[0]);
  close(to_parent[1]);
  bool reaped = false;
  defer([&reaped, pid, to_child, to_parent] {
    if (!reaped) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    close(to_child[1]);
    close(to_parent[0]);
  });

  uint32_t child_qpn = 0;
  ASSERT_TRUE(read_all(to_parent[0], &child_qpn, 4, 10000)) << "the child did not report its QP";
  ibv_cq* cq = make_cq();
  ASSERT_NE(cq, nullptr);
  ibv_qp* qp = make_qp(IBV_QPT_RC, cq, cq);
  ASSERT_NE(qp, nullptr);
  ConnectOpts o;
  o.timeout = 8;  // 1 ms
  o.retry_cnt = 2;
  connect_qp(qp, child_qpn, o);
  ASSERT_FALSE(HasFailure());
  const uint32_t my_qpn = qp->qp_num;
  ASSERT_TRUE(write_all(to_child[1], &my_qpn, 4));
  char ready = 0;
  ASSERT_TRUE(read_all(to_parent[0], &ready, 1, 10000));
  ASSERT_EQ(ready, 'R') << "the child failed to set up (code " << ready << ")";

  // The connection works while the child lives (it has receives posted).
  ibv_mr* mr = reg_buffer(256, IBV_ACCESS_LOCAL_WRITE, 1);
  ASSERT_NE(mr, nullptr);
  ibv_sge s{uint64_t(uintptr_t(mr->addr)), 32, mr->lkey};
  ASSERT_EQ(post_send(qp, 1, IBV_WR_SEND, &s, 1), 0);
  ibv_wc wc;
  VT_POLL_ONE(cq, &wc);
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);

  std::string status = engine_status();
  ASSERT_TRUE(status_mentions_pid(status, pid)) << "uroce status before the kill:\n" << status;

  ASSERT_EQ(kill(pid, SIGKILL), 0);
  ASSERT_EQ(waitpid(pid, nullptr, 0), pid);
  reaped = true;

  bool gone = false;
  for (auto end = deadline_after(5); !gone && Clock::now() < end;) {
    status = engine_status();
    gone = !status_mentions_pid(status, pid);
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(gone) << "objects of the killed pid " << pid << " remain:\n" << status;
  EXPECT_FALSE(std::regex_search(status, std::regex("(^|\\n) *qp " + std::to_string(child_qpn) + " ")))
      << "the killed child's QP " << child_qpn << " remains:\n" << status;

  // The peer's QP is gone: our SEND is retried, then fails; it does not hang.
  const auto start = Clock::now();
  ASSERT_EQ(post_send(qp, 2, IBV_WR_SEND, &s, 1), 0);
  ASSERT_TRUE(poll_one(cq, &wc, 10)) << "no completion for a SEND to a dead peer";
  EXPECT_EQ(wc.wr_id, 2u);
  EXPECT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR) << describe(wc);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(3));
  EXPECT_EQ(qp_state(qp), IBV_QPS_ERR);
}

// ===========================================================================
// 7. The engine stops under an open context (run with its own engine, last)
// ===========================================================================

class EngineStop : public VerbsTest {};

TEST_F(EngineStop, DeviceFatalThenVerbsFailWithoutHanging) {
  Pair p = make_pair();
  ASSERT_FALSE(HasFailure());
  ibv_comp_channel* ch = make_channel();
  ASSERT_NE(ch, nullptr);
  ibv_cq* ncq = make_cq(16, ch);
  ASSERT_NE(ncq, nullptr);
  ibv_mr* mr = reg_buffer(4096, IBV_ACCESS_LOCAL_WRITE, 0);
  ASSERT_NE(mr, nullptr);
  ASSERT_EQ(ibv_req_notify_cq(ncq, 0), 0);

  // Threads blocked in the two blocking verbs when the engine goes. They own
  // what they touch (leaked on purpose if they never return).
  struct Blocked {
    std::promise<int> done;
    ibv_async_event ev{};
    ibv_cq* cq = nullptr;
    void* cq_ctx = nullptr;
  };
  auto* async_wait = new Blocked;
  auto* cq_wait = new Blocked;
  std::future<int> async_done = async_wait->done.get_future();
  std::future<int> cq_done = cq_wait->done.get_future();
  ibv_context* ctx = ctx_;
  std::thread([async_wait, ctx] { async_wait->done.set_value(ibv_get_async_event(ctx, &async_wait->ev)); })
      .detach();
  std::thread([cq_wait, ch] { cq_wait->done.set_value(ibv_get_cq_event(ch, &cq_wait->cq, &cq_wait->cq_ctx)); })
      .detach();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));

  std::string out;
  ASSERT_EQ(run_command("timeout 30 " + uroce_command() + " stop --name uroce0", &out), 0) << out;

  ASSERT_EQ(async_done.wait_for(std::chrono::seconds(5)), std::future_status::ready)
      << "ibv_get_async_event still blocked after the engine stopped";
  EXPECT_EQ(async_done.get(), 0);
  EXPECT_EQ(async_wait->ev.event_type, IBV_EVENT_DEVICE_FATAL);
  ibv_ack_async_event(&async_wait->ev);
  delete async_wait;

  ASSERT_EQ(cq_done.wait_for(std::chrono::seconds(5)), std::future_status::ready)
      << "ibv_get_cq_event still blocked after the engine stopped";
  EXPECT_EQ(cq_done.get(), -1);
  delete cq_wait;

  // Verbs now fail with an error, without crashing or blocking.
  errno = 0;
  EXPECT_EQ(ibv_alloc_pd(ctx_), nullptr);
  EXPECT_NE(errno, 0);
  errno = 0;
  uint8_t* b = buffer(4096);
  EXPECT_EQ(ibv_reg_mr(pd_, b, 4096, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_NE(errno, 0);
  errno = 0;
  EXPECT_EQ(ibv_create_cq(ctx_, 16, nullptr, nullptr, 0), nullptr);
  EXPECT_NE(errno, 0);
  ibv_qp_init_attr init{};
  init.send_cq = init.recv_cq = p.a.cq;
  init.qp_type = IBV_QPT_RC;
  init.cap = {8, 8, 1, 1, 0};
  errno = 0;
  EXPECT_EQ(ibv_create_qp(pd_, &init), nullptr);
  EXPECT_NE(errno, 0);
  ibv_sge s{uint64_t(uintptr_t(mr->addr)), 8, mr->lkey};
  EXPECT_NE(post_send(p.a.qp, 1, IBV_WR_SEND, &s, 1), 0);
  EXPECT_NE(post_recv(p.b.qp, 2, &s, 1), 0);
  ibv_qp_attr a{};
  ibv_qp_init_attr qi{};
  EXPECT_NE(ibv_query_qp(p.a.qp, &a, IBV_QP_STATE, &qi), 0);
  a.qp_state = IBV_QPS_ERR;
  EXPECT_NE(ibv_modify_qp(p.a.qp, &a, IBV_QP_STATE), 0);
  // An empty CQ can never fill again: polling it fails (within 0.1 s of
  // polling), so a program that never reads async events ends too.
  ibv_wc wc;
  int polled = 0;
  for (auto end = deadline_after(2); polled == 0 && Clock::now() < end;) polled = ibv_poll_cq(p.a.cq, 1, &wc);
  EXPECT_EQ(polled, -1) << "ibv_poll_cq still finds the CQ merely empty after the engine stopped";
  ibv_port_attr pa{};
  const int prc = ibv_query_port(ctx_, 1, &pa);
  EXPECT_TRUE(prc != 0 || pa.state != IBV_PORT_ACTIVE) << "the port still looks active";

  // A completion channel wait made now returns too.
  ibv_req_notify_cq(ncq, 0);
  auto later = std::async(std::launch::async, [ch] {
    ibv_cq* c;
    void* x;
    return ibv_get_cq_event(ch, &c, &x);
  });
  ASSERT_EQ(later.wait_for(std::chrono::seconds(3)), std::future_status::ready)
      << "ibv_get_cq_event blocks on a dead engine";
  EXPECT_EQ(later.get(), -1);

  // The device is no longer listed.
  int n = -1;
  ibv_device** list = ibv_get_device_list(&n);
  ASSERT_NE(list, nullptr);
  for (int i = 0; i < n; ++i) EXPECT_STRNE(ibv_get_device_name(list[i]), kDeviceName);
  ibv_free_device_list(list);
  // TearDown: destroying everything and closing the device succeed.
}

}  // namespace

// The child of Sessions.KilledClientIsReclaimedAndItsPeerTimesOut:
//   verbs_semantics --session-child WRITE_FD READ_FD
// Sets up a QP connected to the parent's, reports 'R', then waits to be killed.
int session_child_main(int argc, char** argv) {
  if (argc != 4) return 2;
  const int wfd = std::atoi(argv[2]), rfd = std::atoi(argv[3]);
  auto fail = [wfd](char code) {
    write_all(wfd, &code, 1);
    return 1;
  };
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  ibv_device* dev = nullptr;
  for (int i = 0; list && i < n; ++i)
    if (std::strcmp(ibv_get_device_name(list[i]), kDeviceName) == 0) dev = list[i];
  if (!dev) return fail('d');
  ibv_context* ctx = ibv_open_device(dev);
  if (!ctx) return fail('o');
  ibv_pd* pd = ibv_alloc_pd(ctx);
  ibv_cq* cq = pd ? ibv_create_cq(ctx, 64, nullptr, nullptr, 0) : nullptr;
  if (!cq) return fail('c');
  static uint8_t buf[8192];
  ibv_mr* mr = ibv_reg_mr(pd, buf, sizeof(buf), kRw);
  ibv_qp_init_attr init{};
  init.send_cq = init.recv_cq = cq;
  init.qp_type = IBV_QPT_RC;
  init.cap = {16, 16, 1, 1, 0};
  ibv_qp* qp = mr ? ibv_create_qp(pd, &init) : nullptr;
  if (!qp) return fail('q');
  // A second, idle QP and MR: more objects for the engine to reclaim.
  ibv_qp* idle = ibv_create_qp(pd, &init);
  ibv_mr* mr2 = ibv_reg_mr(pd, buf + 4096, 4096, IBV_ACCESS_LOCAL_WRITE);
  if (!idle || !mr2) return fail('i');
  ibv_gid gid;
  if (ibv_query_gid(ctx, 1, 0, &gid)) return fail('g');
  const uint32_t qpn = qp->qp_num;
  if (!write_all(wfd, &qpn, 4)) return 1;
  uint32_t parent_qpn;
  if (!read_all(rfd, &parent_qpn, 4, 10000)) return fail('p');
  ConnectOpts o;
  if (!modify_rc_to_rts(qp, gid, parent_qpn, o)) return fail('m');
  for (int i = 0; i < 4; ++i) {
    ibv_sge s{uint64_t(uintptr_t(buf + 256 * i)), 256, mr->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = uint64_t(i);
    wr.sg_list = &s;
    wr.num_sge = 1;
    ibv_recv_wr* bad;
    if (ibv_post_recv(qp, &wr, &bad)) return fail('r');
  }
  if (!write_all(wfd, "R", 1)) return 1;
  // Wait to be killed; give up after a minute if the parent forgot us.
  for (int i = 0; i < 600; ++i) usleep(100000);
  return 0;
}

}  // namespace vt
