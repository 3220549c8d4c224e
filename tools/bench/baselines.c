// uroce-bench-baselines: the reference figures `uroce bench` sets beside
// uroce's own (tools/bench/uroce_bench.py). Every mode prints one JSON object
// on stdout and exits 0, or prints an error on stderr and exits 1.
//
//   memcpy [--bytes N] [--seconds S]
//       single-core memcpy bandwidth between two buffers of N bytes each
//       (default: 8 x the last-level cache, at least 256 MiB), pages touched
//       first; the figure counts bytes copied (not read + written).
//   shm-pingpong [--iters N]
//       a flag bounced between two processes through a shared page, both
//       spinning: round-trip time per bounce (median, p99).
//   tcp-pingpong [--size S] [--iters N] [--listen ADDR:PORT | --connect ADDR:PORT]
//       S-byte messages echoed over TCP (TCP_NODELAY): round-trip time.
//   tcp-stream [--size S] [--seconds T] [--listen ADDR:PORT | --connect ADDR:PORT]
//       S-byte writes streamed over TCP for T seconds: bytes and messages per
//       second counted by the receiver.
//
// Without --listen/--connect the TCP modes fork and talk over 127.0.0.1 on an
// ephemeral port. With them, one side runs here and the other elsewhere (in
// another network namespace); the result is printed by the --connect side
// (pingpong) or by the --listen side (stream: the receiver).
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void die(const char* what) {
  fprintf(stderr, "uroce-bench-baselines: %s: %s\n", what, strerror(errno));
  exit(1);
}

static void usage(void) {
  fprintf(stderr,
          "usage: uroce-bench-baselines memcpy [--bytes N] [--seconds S]\n"
          "       uroce-bench-baselines shm-pingpong [--iters N]\n"
          "       uroce-bench-baselines tcp-pingpong [--size S] [--iters N] "
          "[--listen|--connect ADDR:PORT]\n"
          "       uroce-bench-baselines tcp-stream [--size S] [--seconds T] "
          "[--listen|--connect ADDR:PORT]\n");
  exit(2);
}

struct options {
  uint64_t bytes;
  double seconds;
  uint64_t iters;
  uint64_t size;
  const char* listen;
  const char* connect;
};

static int cmp_u64(const void* a, const void* b) {
  uint64_t x = *(const uint64_t*)a, y = *(const uint64_t*)b;
  return x < y ? -1 : x > y;
}

// Median and 99th percentile of n samples (sorted in place), in microseconds.
static void percentiles(uint64_t* ns, uint64_t n, double* median_us, double* p99_us,
                        double* min_us) {
  qsort(ns, n, sizeof(*ns), cmp_u64);
  *median_us = ns[n / 2] / 1e3;
  *p99_us = ns[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1] / 1e3;
  *min_us = ns[0] / 1e3;
}

// ---- memcpy ----

// The largest cache sysfs lists for cpu0, else what glibc's sysconf says
// (which is wrong on some AMD virtual machines: 320 MiB for a 32 MiB L3).
static uint64_t llc_bytes(void) {
  long llc = 0;
  for (int i = 0; i < 8; ++i) {
    char path[96];
    snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
    FILE* f = fopen(path, "r");
    if (!f) break;
    long v = 0;
    char unit = 0;
    if (fscanf(f, "%ld%c", &v, &unit) >= 1) {
      if (unit == 'K') v <<= 10;
      if (unit == 'M') v <<= 20;
      if (v > llc) llc = v;
    }
    fclose(f);
  }
  if (llc <= 0) llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (llc <= 0) llc = sysconf(_SC_LEVEL2_CACHE_SIZE);
  return llc > 0 ? (uint64_t)llc : 0;
}

static int run_memcpy(const struct options* o) {
  uint64_t llc = llc_bytes();
  uint64_t n = o->bytes;
  if (!n) {
    n = 8 * llc;
    if (n < (256u << 20)) n = 256u << 20;
    // A VM without cache sysfs may report a last-level cache of hundreds of
    // MiB through sysconf (532 MiB here: two buffers of 4 GiB, faulted in
    // for minutes); 1 GiB is far past any real cache.
    if (n > (1ull << 30)) n = 1ull << 30;
  }
  char* src = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  char* dst = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (src == MAP_FAILED || dst == MAP_FAILED) die("mmap");
  memset(src, 0x5a, n);
  memset(dst, 0xa5, n);
  memcpy(dst, src, n);  // warm-up: page tables, TLB
  uint64_t copied = 0, best_ns = UINT64_MAX, rounds = 0;
  const uint64_t t0 = now_ns(), end = t0 + (uint64_t)(o->seconds * 1e9);
  do {
    const uint64_t a = now_ns();
    memcpy(dst, src, n);
    const uint64_t b = now_ns();
    if (b - a < best_ns) best_ns = b - a;
    copied += n;
    ++rounds;
    __asm__ volatile("" ::"r"(dst) : "memory");
  } while (now_ns() < end);
  const double secs = (now_ns() - t0) / 1e9;
  printf("{\"mode\": \"memcpy\", \"buffer_bytes\": %llu, \"llc_bytes\": %llu, \"rounds\": %llu, "
         "\"seconds\": %.3f, \"bytes_per_s\": %.0f, \"best_bytes_per_s\": %.0f}\n",
         (unsigned long long)n, (unsigned long long)llc, (unsigned long long)rounds, secs,
         copied / secs, n / (best_ns / 1e9));
  return 0;
}

// ---- shared-memory flag ping-pong ----

struct shm_flags {
  _Alignas(64) volatile uint64_t ping;
  _Alignas(64) volatile uint64_t pong;
};

static int run_shm_pingpong(const struct options* o) {
  struct shm_flags* f = mmap(NULL, sizeof(*f), PROT_READ | PROT_WRITE,
                             MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (f == MAP_FAILED) die("mmap");
  f->ping = f->pong = 0;
  const uint64_t warm = o->iters / 10 + 10, total = o->iters + warm;
  pid_t child = fork();
  if (child < 0) die("fork");
  if (child == 0) {
    for (uint64_t i = 1; i <= total; ++i) {
      while (f->ping != i) __builtin_ia32_pause();
      f->pong = i;
    }
    _exit(0);
  }
  uint64_t* rtt = malloc(o->iters * sizeof(*rtt));
  if (!rtt) die("malloc");
  for (uint64_t i = 1; i <= total; ++i) {
    const uint64_t a = now_ns();
    f->ping = i;
    while (f->pong != i) __builtin_ia32_pause();
    const uint64_t b = now_ns();
    if (i > warm) rtt[i - warm - 1] = b - a;
  }
  waitpid(child, NULL, 0);
  double med, p99, min;
  percentiles(rtt, o->iters, &med, &p99, &min);
  free(rtt);
  printf("{\"mode\": \"shm-pingpong\", \"iters\": %llu, \"rtt_median_us\": %.3f, "
         "\"rtt_p99_us\": %.3f, \"rtt_min_us\": %.3f}\n",
         (unsigned long long)o->iters, med, p99, min);
  return 0;
}

// ---- TCP ----

static void parse_addr(const char* s, struct sockaddr_in* a) {
  char host[64];
  const char* colon = strrchr(s, ':');
  if (!colon || (size_t)(colon - s) >= sizeof(host)) usage();
  memcpy(host, s, colon - s);
  host[colon - s] = 0;
  memset(a, 0, sizeof(*a));
  a->sin_family = AF_INET;
  a->sin_port = htons((uint16_t)atoi(colon + 1));
  if (inet_pton(AF_INET, host, &a->sin_addr) != 1) usage();
}

static void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// A listening socket on `addr` (port 0: ephemeral; the port is written back).
static int tcp_listen(struct sockaddr_in* addr) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) die("socket");
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, (struct sockaddr*)addr, sizeof(*addr)) < 0) die("bind");
  if (listen(fd, 1) < 0) die("listen");
  socklen_t len = sizeof(*addr);
  getsockname(fd, (struct sockaddr*)addr, &len);
  return fd;
}

static int tcp_accept(int lfd) {
  int fd = accept(lfd, NULL, NULL);
  if (fd < 0) die("accept");
  close(lfd);
  set_nodelay(fd);
  return fd;
}

// Connects, retrying for up to 10 s while the other side starts.
static int tcp_connect(const struct sockaddr_in* addr) {
  const uint64_t end = now_ns() + 10000000000ull;
  for (;;) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) die("socket");
    if (connect(fd, (const struct sockaddr*)addr, sizeof(*addr)) == 0) {
      set_nodelay(fd);
      return fd;
    }
    close(fd);
    if (now_ns() > end) die("connect");
    usleep(20000);
  }
}

static int read_full(int fd, char* buf, uint64_t n) {
  while (n) {
    ssize_t r = read(fd, buf, n);
    if (r <= 0) return -1;
    buf += r;
    n -= (uint64_t)r;
  }
  return 0;
}

static int write_full(int fd, const char* buf, uint64_t n) {
  while (n) {
    ssize_t r = write(fd, buf, n);
    if (r <= 0) return -1;
    buf += r;
    n -= (uint64_t)r;
  }
  return 0;
}

// The echoing side of tcp-pingpong: until the peer closes.
static void pingpong_echo(int fd, uint64_t size) {
  char* buf = malloc(size);
  if (!buf) die("malloc");
  while (read_full(fd, buf, size) == 0)
    if (write_full(fd, buf, size) < 0) break;
  free(buf);
  close(fd);
}

static int pingpong_measure(int fd, const struct options* o) {
  char* buf = calloc(1, o->size);
  uint64_t* rtt = malloc(o->iters * sizeof(*rtt));
  if (!buf || !rtt) die("malloc");
  const uint64_t warm = o->iters / 10 + 10;
  for (uint64_t i = 0; i < o->iters + warm; ++i) {
    const uint64_t a = now_ns();
    if (write_full(fd, buf, o->size) < 0 || read_full(fd, buf, o->size) < 0) die("tcp ping-pong");
    const uint64_t b = now_ns();
    if (i >= warm) rtt[i - warm] = b - a;
  }
  close(fd);
  free(buf);
  double med, p99, min;
  percentiles(rtt, o->iters, &med, &p99, &min);
  free(rtt);
  printf("{\"mode\": \"tcp-pingpong\", \"size\": %llu, \"iters\": %llu, \"rtt_median_us\": %.3f, "
         "\"rtt_p99_us\": %.3f, \"rtt_min_us\": %.3f}\n",
         (unsigned long long)o->size, (unsigned long long)o->iters, med, p99, min);
  return 0;
}

static void stream_send(int fd, const struct options* o) {
  char* buf = calloc(1, o->size);
  if (!buf) die("malloc");
  // Until the receiver closes after its measuring time.
  signal(SIGPIPE, SIG_IGN);
  while (write_full(fd, buf, o->size) == 0) {
  }
  free(buf);
  close(fd);
}

static int stream_receive(int fd, const struct options* o) {
  const uint64_t chunk = o->size > (1u << 20) ? o->size : (1u << 20);
  char* buf = malloc(chunk);
  if (!buf) die("malloc");
  // Warm-up of 10% (at least 0.1 s), then count.
  uint64_t warm_end = now_ns() + (uint64_t)(o->seconds * 0.1e9 + 0.1e9);
  while (now_ns() < warm_end)
    if (read(fd, buf, chunk) <= 0) die("tcp stream");
  uint64_t bytes = 0;
  const uint64_t t0 = now_ns(), end = t0 + (uint64_t)(o->seconds * 1e9);
  while (now_ns() < end) {
    ssize_t r = read(fd, buf, chunk);
    if (r <= 0) die("tcp stream");
    bytes += (uint64_t)r;
  }
  const double secs = (now_ns() - t0) / 1e9;
  free(buf);
  close(fd);
  printf("{\"mode\": \"tcp-stream\", \"size\": %llu, \"seconds\": %.3f, \"bytes_per_s\": %.0f, "
         "\"msgs_per_s\": %.0f}\n",
         (unsigned long long)o->size, secs, bytes / secs, bytes / secs / o->size);
  return 0;
}

static int run_tcp(const struct options* o, int stream) {
  struct sockaddr_in addr;
  if (o->connect) {
    parse_addr(o->connect, &addr);
    int fd = tcp_connect(&addr);
    if (stream) {
      stream_send(fd, o);
      return 0;
    }
    return pingpong_measure(fd, o);
  }
  if (o->listen) {
    parse_addr(o->listen, &addr);
    int fd = tcp_accept(tcp_listen(&addr));
    if (stream) return stream_receive(fd, o);
    pingpong_echo(fd, o->size);
    return 0;
  }
  // Both sides here, over loopback.
  memset(&addr, 0, sizeof(addr));
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int lfd = tcp_listen(&addr);
  fflush(stdout);
  pid_t child = fork();
  if (child < 0) die("fork");
  if (child == 0) {  // the passive side: echoes, or streams
    close(lfd);
    int fd = tcp_connect(&addr);
    if (stream)
      stream_send(fd, o);
    else
      pingpong_echo(fd, o->size);
    _exit(0);
  }
  int fd = tcp_accept(lfd);
  int rc = stream ? stream_receive(fd, o) : pingpong_measure(fd, o);
  kill(child, SIGTERM);
  waitpid(child, NULL, 0);
  return rc;
}

int main(int argc, char** argv) {
  if (argc < 2) usage();
  struct options o = {.bytes = 0, .seconds = 1.0, .iters = 10000, .size = 2};
  for (int i = 2; i < argc; ++i) {
    if (i + 1 >= argc) usage();
    const char* v = argv[i + 1];
    if (!strcmp(argv[i], "--bytes")) o.bytes = strtoull(v, NULL, 0);
    else if (!strcmp(argv[i], "--seconds")) o.seconds = strtod(v, NULL);
    else if (!strcmp(argv[i], "--iters")) o.iters = strtoull(v, NULL, 0);
    else if (!strcmp(argv[i], "--size")) o.size = strtoull(v, NULL, 0);
    else if (!strcmp(argv[i], "--listen")) o.listen = v;
    else if (!strcmp(argv[i], "--connect")) o.connect = v;
    else usage();
    ++i;
  }
  if (!o.iters || !o.size || o.seconds <= 0) usage();
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char* mode = argv[1];
  if (!strcmp(mode, "memcpy")) return run_memcpy(&o);
  if (!strcmp(mode, "shm-pingpong")) return run_shm_pingpong(&o);
  if (!strcmp(mode, "tcp-pingpong")) return run_tcp(&o, 0);
  if (!strcmp(mode, "tcp-stream")) return run_tcp(&o, 1);
  usage();
}
