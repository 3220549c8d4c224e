/*
 * rc_sequence_checker: RC must deliver every message exactly once and in
 * order (IBA 9.5 "Transaction ordering", C9-28..C9-33 on duplicate and
 * out-of-sequence requests), whatever the wire does to the frames. The
 * client streams N numbered messages to the server over one RC QP,
 * alternating SENDs and RDMA WRITE_WITH_IMMs of varying sizes (1 byte to
 * -s MAX, so most span several MTU-sized packets); the server checks, for
 * every completion, that its sequence number is the next one expected, that
 * the length is right and that every byte matches the pattern of that
 * number. Credits flow back as numbered SENDs of their own, checked the same
 * way on the client. Any gap, repeat, reordering, wrong byte or error
 * completion fails the run (exit 1, a line starting "FAIL").
 *
 *   server: uroce run -- rc_sequence_checker [-d DEV] [-p PORT] [OPTIONS]
 *   client: uroce run -- rc_sequence_checker [-d DEV] [-p PORT] [OPTIONS] SERVER
 *
 * Flow control: the server has W receives posted and W write slots; the
 * client keeps at most W messages beyond the last credit, so neither RNR
 * nor a slot overwritten before it was checked can happen. Message k's
 * write slot is k % W. With -r R < W the server posts only R receives, so
 * the client runs into RNR NAKs (IBA 9.7.5.2.8) and their retries as well.
 *
 * With -D SECONDS on both sides the client streams for that long instead
 * of N messages (a bystander beside other tests, tests/integration/
 * kill9_two_hosts_test.sh, or a soak): the last message it sends carries
 * kLastFlag in its header's length field, and the server expects no more.
 * SIGUSR1 to a -D client ends its stream early the same way.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <infiniband/verbs.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rc_example_setup.h"

enum {
  kCreditSlots = 16,    /* client receives posted for credits */
  kCreditSize = 16,     /* a credit: its own number, then messages checked so far */
  kHeader = 16,         /* a data message: number, length, then the pattern */
  kMaxWindow = 256,
  kCreditFlag = 1 << 30 /* wr_id bit of a credit send or receive */
};
/* Header length field: set on the last message of a -D run. */
static const uint64_t kLastFlag = 1ull << 63;

struct options {
  const char* dev;
  const char* server; /* NULL: we are the server (receiver) */
  int port, gid_index, window, recvs, timeout_s, qp_timeout, duration_s;
  uint64_t messages;
  uint32_t max_size;
  enum ibv_mtu mtu;
};

struct peer {
  uint32_t qpn, psn, rkey;
  uint64_t addr;
  uint8_t gid[16];
};

struct side {
  struct options o;
  struct ibv_context* ctx;
  struct ibv_pd* pd;
  struct ibv_cq *send_cq, *recv_cq;
  struct ibv_qp* qp;
  struct ibv_mr *data_mr, *credit_mr;
  uint8_t* data;   /* server: W receive slots then W write slots; client: W send slots */
  uint8_t* credit; /* kCreditSlots receive slots then kCreditSlots send slots */
  size_t slot;
  struct peer them;
  struct timespec deadline;
  /* the checked state */
  uint64_t next_expected; /* server: next message number; client: next credit number */
  uint64_t credited;      /* client: messages the server has checked */
  uint64_t sent, send_done, credits_sent, credits_done;
  uint64_t sends, writes, bytes;
};

static void fail(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "FAIL rc_sequence_checker: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  exit(1);
}

/* ---- the messages ---------------------------------------------------- */

/* Sizes cycle through a prime stride of 1..max so they hit MTU edges. */
static uint32_t msg_size(const struct side* s, uint64_t k) {
  const uint32_t n = (uint32_t)(((k * 7919) % s->o.max_size) + 1);
  return n < kHeader ? kHeader : n;
}

static int msg_is_write(uint64_t k) { return (int)(k & 1); }

static uint8_t pattern(uint64_t k, size_t i) { return (uint8_t)(k * 131 + i * 7 + (i >> 8) + 1); }

static void put64(uint8_t* p, uint64_t v) { memcpy(p, &v, 8); }
static uint64_t get64(const uint8_t* p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}

static void fill_message(uint8_t* buf, uint64_t k, uint32_t len, int last) {
  put64(buf, k);
  put64(buf + 8, len | (last ? kLastFlag : 0));
  for (size_t i = kHeader; i < len; ++i) buf[i] = pattern(k, i);
}

/* Returns whether message k says it is the last one (-D). */
static int check_message(const uint8_t* buf, uint64_t k, uint32_t len) {
  if (get64(buf) != k) fail("message %llu: its buffer holds number %llu", (unsigned long long)k,
                            (unsigned long long)get64(buf));
  if ((get64(buf + 8) & ~kLastFlag) != len) fail("message %llu: length field %llu, expected %u", (unsigned long long)k,
                                  (unsigned long long)get64(buf + 8), len);
  for (size_t i = kHeader; i < len; ++i)
    if (buf[i] != pattern(k, i))
      fail("message %llu: byte %zu is 0x%02x, expected 0x%02x", (unsigned long long)k, i, buf[i], pattern(k, i));
  return (get64(buf + 8) & kLastFlag) != 0;
}

/* ---- verbs helpers ------------------------------------------------------ */

static void check_deadline(const struct side* s) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  if (now.tv_sec > s->deadline.tv_sec ||
      (now.tv_sec == s->deadline.tv_sec && now.tv_nsec > s->deadline.tv_nsec))
    fail("timed out after %d s: %llu messages sent, %llu checked, %llu credited", s->o.timeout_s,
         (unsigned long long)s->sent, (unsigned long long)(s->o.server ? s->credited : s->next_expected),
         (unsigned long long)s->credited);
}

/* Polls one completion; spins a little, then sleeps (the CPU is shared). */
static int poll_one(struct side* s, struct ibv_cq* cq, struct ibv_wc* wc, int wait) {
  for (unsigned idle = 0;; ++idle) {
    const int n = ibv_poll_cq(cq, 1, wc);
    if (n < 0) fail("ibv_poll_cq: %d", n);
    if (n == 1) {
      if (wc->status != IBV_WC_SUCCESS)
        fail("completion wr_id 0x%llx: %s (%d), vendor_err 0x%x", (unsigned long long)wc->wr_id,
             ibv_wc_status_str(wc->status), wc->status, wc->vendor_err);
      return 1;
    }
    if (!wait) return 0;
    if ((idle & 1023) == 1023) check_deadline(s);
    if (idle > 2000) usleep(20);
  }
}

static void post_recv(struct side* s, uint64_t wr_id, void* buf, uint32_t len, uint32_t lkey) {
  struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = len, .lkey = lkey};
  struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1}, *bad;
  if (ibv_post_recv(s->qp, &wr, &bad)) fail("ibv_post_recv: %s", strerror(errno));
}

static void post_send(struct side* s, uint64_t wr_id, enum ibv_wr_opcode op, void* buf, uint32_t len,
                      uint32_t lkey, uint64_t raddr, uint32_t imm) {
  struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = len, .lkey = lkey};
  struct ibv_send_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1, .opcode = op,
                           .send_flags = IBV_SEND_SIGNALED}, *bad;
  if (op == IBV_WR_RDMA_WRITE_WITH_IMM) {
    wr.imm_data = htonl(imm);
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = s->them.rkey;
  }
  if (ibv_post_send(s->qp, &wr, &bad)) fail("ibv_post_send: %s", strerror(errno));
}

/* ---- server: receive and check ----------------------------------------- */

static uint8_t* recv_slot(struct side* s, uint64_t i) { return s->data + i * s->slot; }
static uint8_t* write_slot(struct side* s, uint64_t k) {
  return s->data + ((uint64_t)s->o.window + k % (uint64_t)s->o.window) * s->slot;
}

static void send_credit(struct side* s) {
  struct ibv_wc wc;
  while (s->credits_sent - s->credits_done >= kCreditSlots) {
    poll_one(s, s->send_cq, &wc, 1);
    s->credits_done++;
  }
  uint8_t* buf = s->credit + (kCreditSlots + s->credits_sent % kCreditSlots) * kCreditSize;
  put64(buf, s->credits_sent);
  put64(buf + 8, s->next_expected);
  post_send(s, kCreditFlag | s->credits_sent, IBV_WR_SEND, buf, kCreditSize, s->credit_mr->lkey, 0, 0);
  s->credits_sent++;
}

static void run_server(struct side* s) {
  const uint64_t w = (uint64_t)s->o.window, credit_every = w / 4 ? w / 4 : 1;
  for (uint64_t i = 0; i < (uint64_t)s->o.recvs; ++i) post_recv(s, i, recv_slot(s, i), (uint32_t)s->slot, s->data_mr->lkey);
  struct ibv_wc wc;
  while (s->next_expected < s->o.messages) {
    poll_one(s, s->recv_cq, &wc, 1);
    const uint64_t k = s->next_expected;
    const uint32_t len = msg_size(s, k);
    int last = 0;
    if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
      if (!(wc.wc_flags & IBV_WC_WITH_IMM)) fail("WRITE_WITH_IMM completion without IBV_WC_WITH_IMM");
      const uint32_t got = ntohl(wc.imm_data);
      if (got != (uint32_t)k)
        fail("expected message %llu, got WRITE_WITH_IMM %u (%s)", (unsigned long long)k, got,
             got < (uint32_t)k ? "a repeat" : "out of order or a gap");
      if (!msg_is_write(k)) fail("message %llu came as a WRITE_WITH_IMM, was sent as a SEND", (unsigned long long)k);
      last = check_message(write_slot(s, k), k, len);
      s->writes++;
    } else if (wc.opcode == IBV_WC_RECV) {
      const uint64_t got = get64(recv_slot(s, wc.wr_id));
      if (got != k)
        fail("expected message %llu, got SEND %llu (%s)", (unsigned long long)k, (unsigned long long)got,
             got < k ? "a repeat" : "out of order or a gap");
      if (msg_is_write(k)) fail("message %llu came as a SEND, was sent as a WRITE_WITH_IMM", (unsigned long long)k);
      if (wc.byte_len != len) fail("message %llu: byte_len %u, expected %u", (unsigned long long)k, wc.byte_len, len);
      last = check_message(recv_slot(s, wc.wr_id), k, len);
      s->sends++;
    } else {
      fail("unexpected receive completion opcode %d", wc.opcode);
    }
    s->bytes += len;
    s->next_expected++;
    if (last) {
      if (!s->o.duration_s) fail("message %llu says it is the last one, but this is no -D run", (unsigned long long)k);
      s->o.messages = s->next_expected;
    }
    memset(recv_slot(s, wc.wr_id), 0, 16); /* a stale number must not pass next time */
    post_recv(s, wc.wr_id, recv_slot(s, wc.wr_id), (uint32_t)s->slot, s->data_mr->lkey);
    if (s->next_expected % credit_every == 0 || s->next_expected == s->o.messages) send_credit(s);
  }
  while (s->credits_done < s->credits_sent) {
    poll_one(s, s->send_cq, &wc, 1);
    s->credits_done++;
  }
  /* Nothing else may arrive: a late duplicate would show here. */
  if (poll_one(s, s->recv_cq, &wc, 0)) fail("an extra receive completion after the last message");
}

/* ---- client: send, take credits ---------------------------------------- */

static void take_credit(struct side* s, const struct ibv_wc* wc) {
  if (!(wc->wr_id & kCreditFlag) || wc->opcode != IBV_WC_RECV) fail("unexpected completion on the client's receive queue");
  const uint64_t i = wc->wr_id & ~(uint64_t)kCreditFlag;
  const uint8_t* buf = s->credit + i * kCreditSize;
  const uint64_t number = get64(buf), checked = get64(buf + 8);
  if (number != s->next_expected)
    fail("expected credit %llu, got credit %llu (%s)", (unsigned long long)s->next_expected,
         (unsigned long long)number, number < s->next_expected ? "a repeat" : "out of order or a gap");
  if (wc->byte_len != kCreditSize || checked < s->credited || checked > s->sent)
    fail("credit %llu says %llu checked (before: %llu, sent: %llu)", (unsigned long long)number,
         (unsigned long long)checked, (unsigned long long)s->credited, (unsigned long long)s->sent);
  s->next_expected++;
  s->credited = checked;
  post_recv(s, wc->wr_id, s->credit + i * kCreditSize, kCreditSize, s->credit_mr->lkey);
}

static volatile sig_atomic_t stop_requested; /* SIGUSR1 */
static void on_sigusr1(int sig) {
  (void)sig;
  stop_requested = 1;
}

static int past(const struct timespec* t) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return now.tv_sec > t->tv_sec || (now.tv_sec == t->tv_sec && now.tv_nsec >= t->tv_nsec);
}

static void run_client(struct side* s) {
  const uint64_t w = (uint64_t)s->o.window;
  struct timespec stop;
  clock_gettime(CLOCK_MONOTONIC, &stop);
  stop.tv_sec += s->o.duration_s;
  for (uint64_t i = 0; i < kCreditSlots; ++i)
    post_recv(s, kCreditFlag | i, s->credit + i * kCreditSize, kCreditSize, s->credit_mr->lkey);
  struct ibv_wc wc;
  for (unsigned idle = 0; s->credited < s->o.messages; ++idle) {
    int progress = 0;
    while (poll_one(s, s->recv_cq, &wc, 0)) {
      take_credit(s, &wc);
      progress = 1;
    }
    while (poll_one(s, s->send_cq, &wc, 0)) {
      if (wc.wr_id != s->send_done) fail("send completion %llu, expected %llu", (unsigned long long)wc.wr_id,
                                         (unsigned long long)s->send_done);
      s->send_done++;
      progress = 1;
    }
    if (s->sent < s->o.messages && s->sent - s->credited < w && s->sent - s->send_done < w) {
      const uint64_t k = s->sent;
      const uint32_t len = msg_size(s, k);
      uint8_t* buf = s->data + (k % w) * s->slot;
      const int last = s->o.duration_s && (stop_requested || past(&stop));
      if (last) s->o.messages = k + 1;
      fill_message(buf, k, len, last);
      const uint64_t raddr = s->them.addr + (w + k % w) * s->slot;
      post_send(s, k, msg_is_write(k) ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_SEND, buf, len, s->data_mr->lkey,
                raddr, (uint32_t)k);
      s->sent++;
      s->bytes += len;
      *(msg_is_write(k) ? &s->writes : &s->sends) += 1;
      idle = 0;
    } else if (progress) {
      idle = 0;
    } else {  /* waiting for a credit or a send completion */
      if ((idle & 1023) == 1023) check_deadline(s);
      if (idle > 2000) usleep(20);
    }
  }
  while (s->send_done < s->sent) {
    poll_one(s, s->send_cq, &wc, 1);
    s->send_done++;
  }
}

/* ---- set-up ------------------------------------------------------------- */

static struct ibv_mr* reg(struct side* s, uint8_t** buf, size_t len) {
  len = (len + 4095) & ~(size_t)4095;
  *buf = aligned_alloc(4096, len);
  if (!*buf) fail("out of memory");
  memset(*buf, 0, len);
  struct ibv_mr* mr = ibv_reg_mr(s->pd, *buf, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (!mr) fail("ibv_reg_mr: %s", strerror(errno));
  return mr;
}

static void create_objects(struct side* s) {
  s->ctx = rc_example_open_device(s->o.dev, fail);
  const int w = s->o.window;
  s->pd = ibv_alloc_pd(s->ctx);
  s->send_cq = ibv_create_cq(s->ctx, w + kCreditSlots + 1, NULL, NULL, 0);
  s->recv_cq = ibv_create_cq(s->ctx, w + kCreditSlots + 1, NULL, NULL, 0);
  if (!s->pd || !s->send_cq || !s->recv_cq) fail("ibv_alloc_pd/ibv_create_cq: %s", strerror(errno));
  struct ibv_qp_init_attr qa = {0};
  qa.send_cq = s->send_cq;
  qa.recv_cq = s->recv_cq;
  qa.qp_type = IBV_QPT_RC;
  qa.cap.max_send_wr = (uint32_t)w + kCreditSlots;
  qa.cap.max_recv_wr = (uint32_t)w + kCreditSlots;
  qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
  s->qp = ibv_create_qp(s->pd, &qa);
  if (!s->qp) fail("ibv_create_qp: %s", strerror(errno));
  s->slot = s->o.max_size < kHeader ? kHeader : s->o.max_size;
  s->data_mr = reg(s, &s->data, s->slot * (size_t)w * (s->o.server ? 1 : 2));
  s->credit_mr = reg(s, &s->credit, 2 * kCreditSlots * kCreditSize);
}

static void connect_qp(struct side* s, const struct peer* me) {
  const struct rc_example_path path = {
      .access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
      .mtu = s->o.mtu,
      .dest_qpn = s->them.qpn,
      .rq_psn = s->them.psn,
      .sq_psn = me->psn,
      .max_dest_rd_atomic = 1,
      .max_rd_atomic = 1,
      .timeout = (uint8_t)s->o.qp_timeout,
      .gid_index = (uint8_t)s->o.gid_index,
      .dgid = s->them.gid,
  };
  rc_example_connect_qp(s->qp, &path, fail);
}

static void usage(void) {
  fprintf(stderr,
          "usage: rc_sequence_checker [-d DEV] [-p PORT] [-g GID_INDEX] [-n MESSAGES] [-s MAX_SIZE]\n"
          "                           [-w WINDOW] [-r RECVS] [-m MTU] [-t TIMEOUT_S] [-T QP_TIMEOUT]\n"
          "                           [-D SECONDS] [SERVER]\n"
          "Without SERVER it receives and checks (default: 2000 messages of 1..16384 bytes,\n"
          "window 32, receives posted: the window, MTU 1024, port 18700, 60 s, QP timeout 14:\n"
          "4.096 us << 14 = 67 ms, 7 retries). -D (both sides): stream for SECONDS, not -n messages.\n");
  exit(2);
}

int main(int argc, char** argv) {
  struct side s;
  memset(&s, 0, sizeof(s));
  s.o.port = 18700;
  s.o.messages = 2000;
  s.o.window = 32;
  s.o.max_size = 16384;
  s.o.mtu = IBV_MTU_1024;
  s.o.timeout_s = 60;
  s.o.qp_timeout = 14;
  int c;
  while ((c = getopt(argc, argv, "d:p:g:n:s:w:r:m:t:T:D:h")) != -1) {
    switch (c) {
      case 'd': s.o.dev = optarg; break;
      case 'p': s.o.port = atoi(optarg); break;
      case 'g': s.o.gid_index = atoi(optarg); break;
      case 'n': s.o.messages = strtoull(optarg, NULL, 0); break;
      case 's': s.o.max_size = (uint32_t)strtoul(optarg, NULL, 0); break;
      case 'w': s.o.window = atoi(optarg); break;
      case 'r': s.o.recvs = atoi(optarg); break;
      case 'T': s.o.qp_timeout = atoi(optarg); break;
      case 't': s.o.timeout_s = atoi(optarg); break;
      case 'D': s.o.duration_s = atoi(optarg); break;
      case 'm': {
        const int m = atoi(optarg);
        s.o.mtu = m == 256 ? IBV_MTU_256 : m == 512 ? IBV_MTU_512 : m == 2048 ? IBV_MTU_2048
                  : m == 4096 ? IBV_MTU_4096 : IBV_MTU_1024;
        break;
      }
      default: usage();
    }
  }
  if (optind < argc) s.o.server = argv[optind];
  if (!s.o.recvs) s.o.recvs = s.o.window;
  if (s.o.duration_s > 0) s.o.messages = UINT64_MAX; /* until the client's last message */
  if (s.o.window < 1 || s.o.window > kMaxWindow || s.o.recvs < 1 || s.o.recvs > s.o.window || s.o.qp_timeout < 1 || s.o.qp_timeout > 31 || s.o.messages < 1 || s.o.max_size < 1 || s.o.timeout_s < 1 ||
      s.o.duration_s < 0 || (s.o.duration_s && s.o.duration_s >= s.o.timeout_s))
    usage();
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (s.o.duration_s) signal(SIGUSR1, on_sigusr1);
  clock_gettime(CLOCK_MONOTONIC, &s.deadline);
  s.deadline.tv_sec += s.o.timeout_s;

  create_objects(&s);
  struct peer me = {0};
  union ibv_gid gid;
  if (ibv_query_gid(s.ctx, 1, s.o.gid_index, &gid)) fail("ibv_query_gid %d", s.o.gid_index);
  srand48(getpid() * 1000003L + time(NULL));
  me.qpn = s.qp->qp_num;
  me.psn = (uint32_t)lrand48() & 0xffffff;
  me.rkey = s.data_mr->rkey;
  me.addr = (uintptr_t)s.data;
  memcpy(me.gid, gid.raw, 16);
  const int fd = rc_example_tcp_connect(s.o.server, s.o.port, fail);
  rc_example_exchange(fd, &me, &s.them, sizeof(me), fail);
  connect_qp(&s, &me);
  char go = 1, peer_go;
  rc_example_exchange(fd, &go, &peer_go, 1, fail); /* both QPs are in RTS */

  if (s.o.server) run_client(&s);
  else run_server(&s);
  /* Neither side leaves (destroying its QP) before the other has all its
   * completions: the last ACKs must find a live QP. */
  rc_example_exchange(fd, &go, &peer_go, 1, fail);
  close(fd);
  printf("%s %llu messages in order, exactly once, data checked (%llu SEND, %llu WRITE_WITH_IMM, %llu bytes; %llu credits)\n",
         s.o.server ? "sent" : "received", (unsigned long long)s.o.messages, (unsigned long long)s.sends,
         (unsigned long long)s.writes, (unsigned long long)s.bytes,
         (unsigned long long)(s.o.server ? s.next_expected : s.credits_sent));

  ibv_destroy_qp(s.qp);
  ibv_dereg_mr(s.data_mr);
  ibv_dereg_mr(s.credit_mr);
  ibv_destroy_cq(s.send_cq);
  ibv_destroy_cq(s.recv_cq);
  ibv_dealloc_pd(s.pd);
  ibv_close_device(s.ctx);
  free(s.data);
  free(s.credit);
  return 0;
}
