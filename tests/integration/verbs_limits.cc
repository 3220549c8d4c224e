// Every maximum the device advertises (ibv_query_device) can be reached, by
// one process and by several sharing it, and the one past it fails with the
// errno mlx5 gives when its firmware runs out (ENOMEM: MLX5_CMD_STAT_LIM_ERR
// and EXCEED_LIM map to -ENOMEM in mlx5_cmd_status_to_err). The limits are
// device totals: limits_test.sh runs these cases against an engine of their
// own, and each runs in child processes that exit without destroying what
// they made (the engine reclaims a closed session at once).
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "tests/integration/verbs_fixture.h"

namespace vt {
namespace {

ibv_context* open_uroce() {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  ibv_context* ctx = nullptr;
  for (int i = 0; list && i < n; ++i)
    if (std::strcmp(ibv_get_device_name(list[i]), kDeviceName) == 0) ctx = ibv_open_device(list[i]);
  if (list) ibv_free_device_list(list);
  return ctx;
}

std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

// A child process of its own with a context of its own: it runs body (""
// is success, else what went wrong), reports through a pipe and exits.
// hold_until: a pipe read end the child waits on before exiting (-1: none);
// hold_writer: that pipe's write end, which the child must not keep open.
struct Child {
  pid_t pid = -1;
  int report = -1;
};

Child start_child(std::function<std::string(ibv_context*)> body, int hold_until = -1,
                  int hold_writer = -1) {
  int p[2];
  if (pipe(p) != 0) return {};
  std::fflush(stdout);  // or the child prints it again
  const pid_t pid = fork();
  if (pid == 0) {
    close(p[0]);
    if (hold_writer >= 0) close(hold_writer);
    ibv_context* ctx = open_uroce();
    std::string msg = ctx ? body(ctx) : errno_text("ibv_open_device");
    if (msg.empty()) msg = "ok";
    (void)!write(p[1], msg.data(), msg.size());
    close(p[1]);
    std::fflush(stdout);
    if (hold_until >= 0) {
      char c;
      (void)!read(hold_until, &c, 1);
    }
    _exit(0);
  }
  close(p[1]);
  return {pid, p[0]};
}

// What the child reported (it may still be holding its objects).
std::string report_of(Child& c) {
  std::string msg;
  char buf[256];
  ssize_t n;
  while ((n = read(c.report, buf, sizeof(buf))) > 0) msg.append(buf, size_t(n));
  close(c.report);
  return msg;
}

void reap(Child& c) {
  int status = 0;
  EXPECT_EQ(waitpid(c.pid, &status, 0), c.pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

std::string run_child(std::function<std::string(ibv_context*)> body) {
  Child c = start_child(std::move(body));
  std::string msg = report_of(c);
  reap(c);
  return msg;
}

ibv_device_attr device_attr(ibv_context* ctx) {
  ibv_device_attr a{};
  ibv_query_device(ctx, &a);
  return a;
}

ibv_qp* small_qp(ibv_pd* pd, ibv_cq* cq) {
  ibv_qp_init_attr init{};
  init.send_cq = init.recv_cq = cq;
  init.qp_type = IBV_QPT_RC;
  init.cap = {1, 1, 1, 1, 0};
  return ibv_create_qp(pd, &init);
}

// Makes `want` objects with make(), then checks that one more fails with ENOMEM.
template <typename Make>
std::string fill_then_enomem(const char* what, int want, Make make) {
  const auto start = Clock::now();
  for (int i = 0; i < want; ++i)
    if (!make()) return errno_text(what) + " number " + std::to_string(i + 1) + " of " + std::to_string(want);
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  errno = 0;
  if (make()) return std::string("one ") + what + " past " + std::to_string(want) + " succeeded";
  if (errno != ENOMEM) return errno_text(what) + " past the maximum: want ENOMEM";
  std::printf("%s: %d in %.2f s, the next ENOMEM\n", what, want, secs);
  return "";
}

TEST(Limits, MaxQpThenEnomem) {
  EXPECT_EQ(run_child([](ibv_context* ctx) {
              ibv_pd* pd = ibv_alloc_pd(ctx);
              ibv_cq* cq = ibv_create_cq(ctx, 1, nullptr, nullptr, 0);
              if (!pd || !cq) return errno_text("pd/cq");
              return fill_then_enomem("max_qp", device_attr(ctx).max_qp, [&] { return small_qp(pd, cq); });
            }),
            "ok");
}

TEST(Limits, MaxCqThenEnomem) {
  EXPECT_EQ(run_child([](ibv_context* ctx) {
              return fill_then_enomem("max_cq", device_attr(ctx).max_cq,
                                      [&] { return ibv_create_cq(ctx, 1, nullptr, nullptr, 0); });
            }),
            "ok");
}

TEST(Limits, MaxSrqThenEnomem) {
  EXPECT_EQ(run_child([](ibv_context* ctx) {
              ibv_pd* pd = ibv_alloc_pd(ctx);
              if (!pd) return errno_text("pd");
              ibv_srq_init_attr init{};
              init.attr = {1, 1, 0};
              return fill_then_enomem("max_srq", device_attr(ctx).max_srq,
                                      [&] { return ibv_create_srq(pd, &init); });
            }),
            "ok");
}

TEST(Limits, MaxPdThenEnomem) {
  EXPECT_EQ(run_child([](ibv_context* ctx) {
              return fill_then_enomem("max_pd", device_attr(ctx).max_pd, [&] { return ibv_alloc_pd(ctx); });
            }),
            "ok");
}

TEST(Limits, MaxMrThenEnomem) {
  EXPECT_EQ(run_child([](ibv_context* ctx) {
              ibv_pd* pd = ibv_alloc_pd(ctx);
              if (!pd) return errno_text("pd");
              // The first MRs cover whole pages, so each is one more mapping
              // of shared pages in the engine, past the engine's budget for
              // them (then process_vm_*); the rest 64 bytes within a page.
              const size_t page = size_t(sysconf(_SC_PAGESIZE));
              constexpr int kWholePages = 4096 + 64;
              void* area = nullptr;
              if (posix_memalign(&area, page, page * 64) != 0) return std::string("posix_memalign");
              auto* base = static_cast<uint8_t*>(area);
              int i = 0;
              return fill_then_enomem("max_mr", device_attr(ctx).max_mr, [&] {
                const int k = i++;
                return k < kWholePages ? ibv_reg_mr(pd, base + page * (k % 64), page, IBV_ACCESS_LOCAL_WRITE)
                                       : ibv_reg_mr(pd, base + (k % 64) * 64, 64, IBV_ACCESS_LOCAL_WRITE);
              });
            }),
            "ok");
}

TEST(Limits, MaxMwThenEnomem) {
  EXPECT_EQ(run_child([](ibv_context* ctx) {
              ibv_pd* pd = ibv_alloc_pd(ctx);
              if (!pd) return errno_text("pd");
              int i = 0;  // both types count against max_mw
              return fill_then_enomem("max_mw", device_attr(ctx).max_mw, [&] {
                return ibv_alloc_mw(pd, i++ % 2 ? IBV_MW_TYPE_2 : IBV_MW_TYPE_1);
              });
            }),
            "ok");
}

TEST(Limits, MaxAhThenEnomem) {
  EXPECT_EQ(run_child([](ibv_context* ctx) {
              ibv_pd* pd = ibv_alloc_pd(ctx);
              if (!pd) return errno_text("pd");
              ibv_ah_attr av{};
              av.is_global = 1;
              av.port_num = 1;
              av.grh.hop_limit = 1;
              if (ibv_query_gid(ctx, 1, 0, &av.grh.dgid) != 0) return errno_text("ibv_query_gid");
              return fill_then_enomem("max_ah", device_attr(ctx).max_ah, [&] { return ibv_create_ah(pd, &av); });
            }),
            "ok");
}

size_t entries_of(const std::string& path, bool lines) {
  if (lines) {
    FILE* f = std::fopen(path.c_str(), "r");
    size_t n = 0;
    for (int c; f && (c = std::fgetc(f)) != EOF;) n += c == '\n';
    if (f) std::fclose(f);
    return n;
  }
  std::string out;
  run_command("ls " + path + " | wc -l", &out);
  return size_t(std::atol(out.c_str()));
}

// What a QP costs the engine: one mapping (its queues' memfd), no file
// descriptor, and no mapping for its send queue's engine-side copy even when
// that is larger than glibc's mmap threshold. That is what lets max_qp QPs
// of any depth fit in vm.max_map_count.
TEST(Limits, AQueueCostsTheEngineOneMappingAndNoFd) {
  const char* dir = std::getenv("UROCE_RUNTIME_DIR");
  ASSERT_NE(dir, nullptr);
  std::string pid;
  ASSERT_EQ(run_command(std::string("cat ") + dir + "/" + kDeviceName + ".pid", &pid), 0);
  pid.erase(pid.find_last_not_of(" \n") + 1);
  const std::string maps = "/proc/" + pid + "/maps", fds = "/proc/" + pid + "/fd";
  const size_t maps_before = entries_of(maps, true), fds_before = entries_of(fds, false);
  constexpr int kQps = 500;
  int hold[2];
  ASSERT_EQ(pipe(hold), 0);
  Child c = start_child(
      [](ibv_context* ctx) {
        ibv_pd* pd = ibv_alloc_pd(ctx);
        ibv_cq* cq = ibv_create_cq(ctx, 1, nullptr, nullptr, 0);
        if (!pd || !cq) return errno_text("pd/cq");
        ibv_qp_init_attr init{};
        init.send_cq = init.recv_cq = cq;
        init.qp_type = IBV_QPT_RC;
        init.cap = {1024, 1, 1, 1, 0};  // a 256 KiB send queue copy in the engine
        for (int i = 0; i < kQps; ++i)
          if (!ibv_create_qp(pd, &init)) return errno_text("qp");
        return std::string();
      },
      hold[0], hold[1]);
  EXPECT_EQ(report_of(c), "ok");
  const size_t maps_after = entries_of(maps, true), fds_after = entries_of(fds, false);
  close(hold[1]);
  close(hold[0]);
  reap(c);
  // An ASan-built engine (tests/sanitize.sh) maps allocator regions of its
  // own as it grows: only the lower bound holds there.
  if (std::getenv("UROCE_SANITIZE") == nullptr) {
    EXPECT_LE(maps_after, maps_before + kQps + 20) << "engine mappings " << maps_before << " -> " << maps_after;
  }
  EXPECT_GE(maps_after, maps_before + kQps);
  EXPECT_LE(fds_after, fds_before + 10) << "engine fds " << fds_before << " -> " << fds_after;
}

// Four processes share max_qp: together they reach it, one more QP in a
// fifth is ENOMEM, and once they exit their QPs are free again.
TEST(Limits, FourProcessesShareMaxQp) {
  constexpr int kProcs = 4;
  int hold[2];
  ASSERT_EQ(pipe(hold), 0);
  const auto start = Clock::now();
  std::vector<Child> children;
  for (int k = 0; k < kProcs; ++k)
    children.push_back(start_child(
        [k](ibv_context* ctx) {
          const int total = device_attr(ctx).max_qp;
          const int quota = total / kProcs + (k == kProcs - 1 ? total % kProcs : 0);
          ibv_pd* pd = ibv_alloc_pd(ctx);
          ibv_cq* cq = ibv_create_cq(ctx, 1, nullptr, nullptr, 0);
          if (!pd || !cq) return errno_text("pd/cq");
          for (int i = 0; i < quota; ++i)
            if (!small_qp(pd, cq)) return errno_text("qp") + " " + std::to_string(i + 1) + " of " + std::to_string(quota);
          return std::string();
        },
        hold[0], hold[1]));
  for (Child& c : children) EXPECT_EQ(report_of(c), "ok");
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_EQ(run_child([](ibv_context* ctx) {
              ibv_pd* pd = ibv_alloc_pd(ctx);
              ibv_cq* cq = ibv_create_cq(ctx, 1, nullptr, nullptr, 0);
              if (!pd || !cq) return errno_text("pd/cq");
              errno = 0;
              if (small_qp(pd, cq)) return std::string("a QP past max_qp succeeded");
              return errno == ENOMEM ? std::string() : errno_text("a QP past max_qp: want ENOMEM");
            }),
            "ok");
  std::printf("max_qp reached by %d processes in %.2f s, the next ENOMEM\n", kProcs, secs);
  close(hold[1]);  // the children exit
  close(hold[0]);
  for (Child& c : children) reap(c);
  EXPECT_EQ(run_child([](ibv_context* ctx) {
              ibv_pd* pd = ibv_alloc_pd(ctx);
              ibv_cq* cq = ibv_create_cq(ctx, 1, nullptr, nullptr, 0);
              if (!pd || !cq) return errno_text("pd/cq");
              // The engine reclaims a session when it sees the socket close.
              for (int i = 0; i < 500; ++i, usleep(10000))
                if (small_qp(pd, cq)) return std::string();
              return errno_text("a QP after the others exited");
            }),
            "ok");
}

}  // namespace
}  // namespace vt
