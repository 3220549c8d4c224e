// control_flood: floods on the engine's control socket (issue 14, "hostile
// control messages ... floods"), one kind per run. It talks the control
// protocol itself (include/uroce/abi.h), as tests/integration/hostile_client
// does, so it can misbehave in ways libibverbs never would:
//
//   burst N    N sessions connect at once (one thread each, released
//              together), each says hello and allocates a PD; all are held
//              open together, then closed. Every one must be served.
//   flood      one session sends ALLOC_PD requests without ever reading a
//              reply: the engine must hang up on it (clients_flooding)
//              within 20 s; every PD it made is the engine's to reclaim.
//   junk N     N sessions in a row send a malformed message each (short,
//              wrong length, unknown op, no hello): each must be hung up on.
//   die N      N child processes connect and die (SIGKILL or _exit) at a
//              random point: before hello, after it, with PDs allocated, or
//              with a request sent and its reply unread.
//
//   control_flood DEVICE_NAME burst|flood|junk|die [N]
//
// Exit 0: the engine behaved; 1: it did not (a line starting "FAIL");
// 2: usage or set-up. The soak (tests/stress/soak.sh) runs these in a loop
// beside traffic and checks the engine's sessions are all reclaimed.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
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

std::string g_device;

[[noreturn]] void fail(const std::string& why) {
  std::fprintf(stderr, "FAIL control_flood: %s\n", why.c_str());
  std::exit(1);
}

int connect_engine() { return uroce::test::connect_engine(g_device); }

using uroce::test::send_request;

// Reads one reply (status, fds closed); -1 if none within 30 s or the
// socket was closed.
int read_reply(int fd) {
  uroce::test::Reply r;
  if (!uroce::test::read_reply(fd, 30000, &r)) return -1;
  for (int f : r.fds) close(f);
  return r.status;
}

// Hello as the provider says it; true if the engine accepted the session.
bool hello(int fd) {
  int p[2];
  if (pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) fail("pipe");
  const abi::HelloRequest h{abi::kMagic, abi::kVersion};
  const bool sent = send_request(fd, CtlOp::kHello, &h, sizeof(h), {p[1]});
  close(p[1]);
  const int status = sent ? read_reply(fd) : -1;
  close(p[0]);  // the async pipe: this client never reads its events
  return status == 0;
}

bool alloc_pd(int fd) { return send_request(fd, CtlOp::kAllocPd, nullptr, 0, {}) && read_reply(fd) == 0; }

// True once the engine has closed its end (read gives 0 or an error).
bool hung_up(int fd, int timeout_ms) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  uint8_t buf[abi::kMaxCtlMsg];
  while (std::chrono::steady_clock::now() < until) {
    pollfd pfd{fd, POLLIN, 0};
    if (poll(&pfd, 1, 100) < 0) return false;
    if (pfd.revents & (POLLHUP | POLLERR)) return true;
    if (pfd.revents & POLLIN) {
      const ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN)) return true;
    }
  }
  return false;
}

int burst(int n) {
  std::atomic<int> ready{0}, served{0};
  std::atomic<bool> go{false}, release{false};
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i)
    threads.emplace_back([&] {
      ready++;
      while (!go) std::this_thread::yield();
      const int fd = connect_engine();
      if (fd >= 0 && hello(fd) && alloc_pd(fd)) served++;
      while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      if (fd >= 0) close(fd);
    });
  while (ready < n) std::this_thread::yield();
  const auto t0 = std::chrono::steady_clock::now();
  go = true;
  // Every session served (each thread's calls wait 30 s at most).
  while (served < n && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60))
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  release = true;
  for (auto& t : threads) t.join();
  if (served != n) fail("burst: " + std::to_string(served.load()) + " of " + std::to_string(n) + " sessions served");
  std::printf("burst: %d sessions connected at once, all served in %.0f ms\n", n, ms);
  return 0;
}

// True once the engine has hung up, seen without reading anything (the
// replies must stay unread).
bool hung_up_unread(int fd, int timeout_ms) {
  pollfd pfd{fd, POLLRDHUP, 0};
  return poll(&pfd, 1, timeout_ms) == 1 && (pfd.revents & (POLLHUP | POLLRDHUP | POLLERR));
}

int flood() {
  const int fd = connect_engine();
  if (fd < 0 || !hello(fd)) fail("flood: no session");
  long sent = 0;
  bool gone = false;
  const auto t0 = std::chrono::steady_clock::now();
  while (!gone && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20)) {
    if (send_request(fd, CtlOp::kAllocPd, nullptr, 0, {}, MSG_DONTWAIT)) {
      ++sent;
      gone = (sent & 63) == 0 && hung_up_unread(fd, 0);
    } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS) {
      gone = hung_up_unread(fd, 100);  // the engine is behind, or done with us
    } else {
      gone = true;  // EPIPE, ECONNRESET
    }
  }
  close(fd);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (!gone) fail("flood: the engine still serves a session that never reads its replies, after " +
                  std::to_string(sent) + " requests");
  std::printf("flood: hung up on after %ld unread requests, %.0f ms\n", sent, ms);
  return 0;
}

int junk(int n) {
  std::mt19937 rng{unsigned(getpid())};
  for (int i = 0; i < n; ++i) {
    const int fd = connect_engine();
    if (fd < 0) fail("junk: cannot connect");
    alignas(8) uint8_t buf[64];
    for (auto& b : buf) b = uint8_t(rng());
    abi::CtlRequestHeader hdr{};
    size_t len = 0;
    switch (i % 4) {
      case 0: len = 3; break;                                            // shorter than a header
      case 1: hdr = {uint32_t(CtlOp::kAllocPd), 999}; len = sizeof(hdr); break;  // length not the message's
      case 2: hdr = {0xdead, 8}; len = sizeof(hdr) + 8; break;                    // unknown op
      case 3: hdr = {uint32_t(CtlOp::kHello), 1}; len = sizeof(hdr) + 1; break;   // hello cut short
    }
    if (i % 4) std::memcpy(buf, &hdr, sizeof(hdr));
    if (send(fd, buf, len, MSG_NOSIGNAL) < 0 && errno != EPIPE && errno != ECONNRESET) fail("junk: send");
    if (!hung_up(fd, 20000)) fail("junk: case " + std::to_string(i % 4) + ": the engine did not hang up");
    close(fd);
  }
  std::printf("junk: %d malformed sessions, each hung up on\n", n);
  return 0;
}

int die(int n) {
  std::vector<pid_t> kids;
  for (int i = 0; i < n; ++i) {
    const pid_t pid = fork();
    if (pid < 0) fail("fork");
    if (pid == 0) {
      std::mt19937 rng{unsigned(getpid()) * 2654435761u};
      const int fd = connect_engine();
      const int stage = int(rng() % 4);
      if (fd >= 0 && stage >= 1 && hello(fd)) {
        for (int k = 0; stage >= 2 && k < int(rng() % 20); ++k) alloc_pd(fd);
        if (stage == 3) send_request(fd, CtlOp::kAllocPd, nullptr, 0, {});  // its reply unread
      }
      if (rng() % 2) raise(SIGKILL);
      _exit(0);
    }
    kids.push_back(pid);
  }
  for (pid_t pid : kids) waitpid(pid, nullptr, 0);
  std::printf("die: %d clients connected and died at random points\n", n);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: control_flood DEVICE_NAME burst|flood|junk|die [N]\n");
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  setvbuf(stdout, nullptr, _IOLBF, 0);
  g_device = argv[1];
  const std::string mode = argv[2];
  const int n = argc > 3 ? std::atoi(argv[3]) : 50;
  if (n < 1 || n > 2000) return 2;
  if (mode == "burst") return burst(n);
  if (mode == "flood") return flood();
  if (mode == "junk") return junk(n);
  if (mode == "die") return die(n);
  std::fprintf(stderr, "control_flood: unknown mode %s\n", mode.c_str());
  return 2;
}
