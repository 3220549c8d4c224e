// Verbs semantics, CPU placement of polling threads
// (verbs_provider/placement.cc): under `uroce run`, a thread that makes or
// polls a CQ leaves the CPU its engine polls on (beside another session's
// process alone on the one CPU left, until that process turns out not to
// yield); other threads keep their CPUs.
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/verbs_fixture.h"
#include "uroce/cpu_placement.h"

namespace vt {
namespace {

// The CPU the test's engine is pinned to, or -1.
int engine_cpu() {
  const char* dir = std::getenv("UROCE_RUNTIME_DIR");
  const char* name = std::getenv("UROCE_TEST_DEVICE");
  if (!dir) return -1;
  std::ifstream pidf(std::string(dir) + "/" + (name && *name ? name : "uroce0") + ".pid");
  int pid = 0;
  if (!(pidf >> pid) || pid <= 0) return -1;
  const std::vector<int> cpus = uroce::process_cpus(pid);
  return cpus.size() == 1 ? cpus[0] : -1;
}

bool contains(const std::vector<int>& v, int x) {
  for (int c : v)
    if (c == x) return true;
  return false;
}

class Placement : public VerbsTest {
 protected:
  void SetUp() override {
    // Opening the device places the opening thread (placement.cc), and a new
    // thread inherits its creator's CPUs: the main thread gets back the CPUs
    // it had, so that the tests' fresh threads start from them.
    const std::vector<int> cpus = uroce::current_cpus();
    VerbsTest::SetUp();
    uroce::pin_current_thread(cpus);
    const char* want = std::getenv("UROCE_POLL_PLACEMENT");
    if (!want || std::strcmp(want, "1") != 0) GTEST_SKIP() << "not under uroce run";
    cpu_ = engine_cpu();
    if (cpu_ < 0) GTEST_SKIP() << "the engine is not pinned (one CPU?)";
    if (!contains(uroce::current_cpus(), cpu_) || uroce::current_cpus().size() < 2)
      GTEST_SKIP() << "this process may not run on the engine's CPU and another";
  }
  // The CPUs of a fresh thread, before and after it makes a CQ and polls it.
  void cq_in_new_thread(std::vector<int>* before, std::vector<int>* after) {
    std::thread t([&] {
      *before = uroce::current_cpus();
      ibv_cq* cq = ibv_create_cq(ctx_, 16, nullptr, nullptr, 0);
      ibv_wc wc;
      if (cq) {
        ibv_poll_cq(cq, 1, &wc);
        ibv_destroy_cq(cq);
      }
      *after = uroce::current_cpus();
    });
    t.join();
  }
  int cpu_ = -1;
};

TEST_F(Placement, PollingThreadLeavesTheEngineCpu) {
  std::vector<int> before, after;
  cq_in_new_thread(&before, &after);
  EXPECT_TRUE(contains(before, cpu_));
  EXPECT_FALSE(contains(after, cpu_)) << "the polling thread stayed on the engine's CPU " << cpu_;
  EXPECT_EQ(after.size(), before.size() - 1) << "it lost more than the engine's CPU";
  // A thread that never touches a CQ keeps every CPU.
  std::vector<int> other;
  std::thread([&] { other = uroce::current_cpus(); }).join();
  EXPECT_TRUE(contains(other, cpu_));
}

// Two sessions (two terminals) are two autogroups. A poller of this session
// joins another session's process alone on the one CPU left, as it would
// one of its own session (an empty poll's yield hands the CPU over), and
// goes back to the CPUs it had, beside the engine, once that process keeps
// the CPU whole time slices (it spins without yielding).
class PlacementBesideAnotherSession : public Placement {
 protected:
  // A process in a session of its own, pinned to the one CPU left besides
  // the engine's: paused, or spinning without ever yielding.
  void start_other_session(bool spin) {
    for (int c : uroce::current_cpus())
      if (c != cpu_) others_.push_back(c);
    if (others_.size() != 1) GTEST_SKIP() << "more than one CPU is left besides the engine's";
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      setsid();
      uroce::pin_current_thread(others_);
      if (spin) {
        std::atomic<uint64_t> n{0};
        for (;;) n.fetch_add(1, std::memory_order_relaxed);
      }
      pause();
      _exit(0);
    }
    defer([child] {
      kill(child, SIGKILL);
      waitpid(child, nullptr, 0);
    });
    // Until the child is in its session and on its CPU.
    for (int i = 0; i < 200 && !uroce::other_session_pinned_to(others_); ++i) usleep(10'000);
    ASSERT_TRUE(uroce::other_session_pinned_to(others_));
  }
  std::vector<int> others_;
};

TEST_F(PlacementBesideAnotherSession, JoinsItOnTheOneCpuLeft) {
  start_other_session(false);
  if (HasFatalFailure() || IsSkipped()) return;
  std::vector<int> before, after;
  cq_in_new_thread(&before, &after);
  EXPECT_TRUE(contains(before, cpu_));
  EXPECT_EQ(after, others_) << "the poller did not leave the engine's CPU for the other session's";
}

TEST_F(PlacementBesideAnotherSession, LeavesItWhenItDoesNotYield) {
  start_other_session(true);
  if (HasFatalFailure() || IsSkipped()) return;
  std::vector<int> before, placed, after;
  uint64_t polls = 0;
  std::thread t([&] {
    before = uroce::current_cpus();
    ibv_cq* cq = ibv_create_cq(ctx_, 16, nullptr, nullptr, 0);
    if (!cq) return;
    ibv_wc wc;
    ibv_poll_cq(cq, 1, &wc);
    placed = uroce::current_cpus();
    // Polling an empty CQ beside the spinner: each yield waits out its time
    // slice. Bounded: 10 s, far beyond the few windows the watch needs.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (uroce::current_cpus() == placed && std::chrono::steady_clock::now() < until) {
      ibv_poll_cq(cq, 1, &wc);
      ++polls;
    }
    after = uroce::current_cpus();
    ibv_destroy_cq(cq);
  });
  t.join();
  ASSERT_FALSE(placed.empty()) << "ibv_create_cq failed";
  EXPECT_EQ(placed, others_) << "the poller did not join the other session's CPU first";
  EXPECT_EQ(after, before) << "the poller stayed beside a process that kept the CPU (" << polls << " polls)";
}

// An empty poll hands the CPU to a thread that shares it, through the
// extended ibv_start_poll as through ibv_poll_cq. The two clients of a
// `uroce run` pair share the CPUs the engine left: uroce-tag-pingpong -B,
// which polls with ibv_start_poll, kept its CPU whole time slices while its
// peer waited there to answer, about 8 ms per credit round (issue 10).
class EmptyPoll : public VerbsTest {
 protected:
  // Of `polls` empty polls made on one CPU beside a thread pinned there that
  // counts as fast as it can, how many let that thread run.
  template <class Poll>
  int polls_handing_over(int polls, Poll poll) {
    poll();  // a first poll places the thread (placement.cc); then pin it where it is
    cpu_set_t saved;
    EXPECT_EQ(sched_getaffinity(0, sizeof(saved), &saved), 0);
    const int cpu = sched_getcpu();
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    EXPECT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
    std::atomic<uint64_t> ticks{0};
    std::atomic<bool> stop{false};
    std::thread spinner([&] {
      sched_setaffinity(0, sizeof(one), &one);
      while (!stop.load(std::memory_order_relaxed)) ticks.fetch_add(1, std::memory_order_relaxed);
    });
    for (int i = 0; i < 1000 && ticks.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    int handed = 0;
    for (int i = 0; i < polls; ++i) {
      const uint64_t before = ticks.load();
      poll();
      if (ticks.load() != before) ++handed;
    }
    stop = true;
    spinner.join();
    sched_setaffinity(0, sizeof(saved), &saved);
    return handed;
  }
};

TEST_F(EmptyPoll, ExtendedPollYieldsToAThreadSharingTheCpuAsPollCqDoes) {
  ibv_cq_init_attr_ex attr{};
  attr.cqe = 16;
  attr.wc_flags = IBV_WC_EX_WITH_BYTE_LEN;
  ibv_cq_ex* cq = ibv_create_cq_ex(ctx_, &attr);
  ASSERT_NE(cq, nullptr);
  defer([cq] { ibv_destroy_cq(ibv_cq_ex_to_cq(cq)); });
  constexpr int kPolls = 40;
  ibv_wc wc;
  const int legacy = polls_handing_over(kPolls, [&] { EXPECT_EQ(ibv_poll_cq(ibv_cq_ex_to_cq(cq), 1, &wc), 0); });
  if (legacy < kPolls / 4) GTEST_SKIP() << "a yield handed the CPU over in " << legacy << " of " << kPolls << " polls here";
  ibv_poll_cq_attr pattr{};
  const int extended = polls_handing_over(kPolls, [&] { EXPECT_EQ(ibv_start_poll(cq, &pattr), ENOENT); });
  // Half the bar ibv_poll_cq had to clear: the two runs see the same CPU a
  // moment apart, and a poll that never yields hands over in 0 or 1.
  EXPECT_GE(extended, kPolls / 8) << "ibv_start_poll let the thread beside it run in " << extended << " of "
                                  << kPolls << " empty polls (ibv_poll_cq: " << legacy << ")";
}

}  // namespace
}  // namespace vt
