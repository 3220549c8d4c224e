/*
 * verbs_churn: one client of the soak (tests/stress/soak.sh, issue 14). For
 * -t SECONDS it opens the device and, round after round, creates a random
 * handful of PDs, CQs (some with a completion channel), MRs of random sizes,
 * an SRQ with receives posted, an XRC domain (private, or shared through a
 * file under -x DIR) with an XRC SRQ and XRC_RECV/XRC_SEND QPs, and RC/UD
 * QPs (some on the SRQ) taken to INIT with receives posted; then it destroys
 * them all, in an order the verbs allow, and checks every call. How the
 * process ends is chosen by -e: `clean` (everything destroyed, device
 * closed), `exit` (exit(0) in the middle of a round, objects alive), `kill`
 * (SIGKILL to itself in the middle of a round), `random` (one of the three).
 * The engine must reclaim whatever a process leaves behind.
 *
 *   uroce run -- verbs_churn [-d DEV] [-t SECONDS] [-e clean|exit|kill|random]
 *                            [-x XRCD_FILE_DIR] [-S SEED]
 *
 * Prints one line: rounds and objects created. Exit 0 unless a verbs call
 * failed (a line starting "FAIL").
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { kMaxEach = 6 };

static void fail(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "FAIL verbs_churn[%d]: ", (int)getpid());
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, " (errno %d: %s)\n", errno, strerror(errno));
  va_end(ap);
  exit(1);
}
#define CHECK(cond, ...) \
  do {                   \
    if (!(cond)) fail(__VA_ARGS__); \
  } while (0)

static unsigned rnd(unsigned n) { return (unsigned)(lrand48() % n); }

/* Everything one round holds, so that it can be destroyed in verbs order. */
struct round {
  struct ibv_pd* pd[kMaxEach];
  struct ibv_comp_channel* ch[kMaxEach];
  struct ibv_cq* cq[kMaxEach];
  struct ibv_mr* mr[kMaxEach];
  void* buf[kMaxEach];
  struct ibv_srq* srq;
  struct ibv_xrcd* xrcd;
  int xrcd_fd;
  struct ibv_srq* xsrq;
  struct ibv_qp* qp[kMaxEach];
  unsigned npd, nch, ncq, nmr, nqp;
};

static struct {
  unsigned long long rounds, pds, cqs, mrs, srqs, xrcds, qps;
} made;

static uint32_t post_len(const struct round* r) { return r->nmr ? 64 : 0; }

static void post_recvs(struct round* r, struct ibv_qp* qp, struct ibv_srq* srq, unsigned n) {
  for (unsigned i = 0; i < n && r->nmr; ++i) {
    struct ibv_sge sge = {.addr = (uintptr_t)r->buf[0], .length = post_len(r), .lkey = r->mr[0]->lkey};
    struct ibv_recv_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = 1}, *bad;
    if (qp) CHECK(ibv_post_recv(qp, &wr, &bad) == 0, "ibv_post_recv");
    else CHECK(ibv_post_srq_recv(srq, &wr, &bad) == 0, "ibv_post_srq_recv");
  }
}

static void to_init(struct ibv_qp* qp, enum ibv_qp_type type) {
  struct ibv_qp_attr a = {0};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
  if (type == IBV_QPT_UD) {
    a.qkey = 0x11111111;
    mask |= IBV_QP_QKEY;
  } else {
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    mask |= IBV_QP_ACCESS_FLAGS;
  }
  CHECK(ibv_modify_qp(qp, &a, mask) == 0, "ibv_modify_qp to INIT (type %d)", type);
}

static struct ibv_qp* make_qp(struct ibv_context* ctx, struct round* r, enum ibv_qp_type type) {
  struct ibv_cq* cq = r->cq[rnd(r->ncq)];
  struct ibv_qp_init_attr_ex a = {0};
  a.qp_type = type;
  a.send_cq = cq;
  a.recv_cq = r->cq[rnd(r->ncq)];
  a.cap.max_send_wr = 1 + rnd(128);
  a.cap.max_recv_wr = 1 + rnd(128);
  a.cap.max_send_sge = a.cap.max_recv_sge = 1 + rnd(4);
  a.comp_mask = IBV_QP_INIT_ATTR_PD;
  a.pd = r->pd[0];
  const int on_srq = type == IBV_QPT_RC && r->srq && rnd(2);
  if (on_srq) a.srq = r->srq;
  if (type == IBV_QPT_XRC_SEND) {
    a.recv_cq = NULL;
    a.cap.max_recv_wr = a.cap.max_recv_sge = 0;
  } else if (type == IBV_QPT_XRC_RECV) {
    memset(&a, 0, sizeof(a));
    a.qp_type = type;
    a.comp_mask = IBV_QP_INIT_ATTR_XRCD;
    a.xrcd = r->xrcd;
  }
  struct ibv_qp* qp = ibv_create_qp_ex(ctx, &a);
  CHECK(qp, "ibv_create_qp_ex (type %d)", type);
  made.qps++;
  if (type != IBV_QPT_XRC_RECV) {
    to_init(qp, type);
    if ((type == IBV_QPT_RC || type == IBV_QPT_UD) && !on_srq) post_recvs(r, qp, NULL, a.cap.max_recv_wr);
  }
  return qp;
}

/* Creates one round's objects; their QPs, SRQs and receives in PD 0. */
static void create_round(struct ibv_context* ctx, struct round* r, const char* xrcd_dir) {
  memset(r, 0, sizeof(*r));
  r->xrcd_fd = -1;
  r->npd = 1 + rnd(2);
  for (unsigned i = 0; i < r->npd; ++i) {
    CHECK(r->pd[i] = ibv_alloc_pd(ctx), "ibv_alloc_pd");
    made.pds++;
  }
  r->ncq = 1 + rnd(3);
  for (unsigned i = 0; i < r->ncq; ++i) {
    struct ibv_comp_channel* ch = NULL;
    if (rnd(2)) {
      CHECK(ch = ibv_create_comp_channel(ctx), "ibv_create_comp_channel");
      r->ch[r->nch++] = ch;
    }
    CHECK(r->cq[i] = ibv_create_cq(ctx, 16 + rnd(1024), NULL, ch, 0), "ibv_create_cq");
    made.cqs++;
    if (ch) CHECK(ibv_req_notify_cq(r->cq[i], 0) == 0, "ibv_req_notify_cq");
  }
  r->nmr = 1 + rnd(3);
  for (unsigned i = 0; i < r->nmr; ++i) {
    const size_t len = 4096u << rnd(9); /* 4 KiB .. 1 MiB */
    CHECK(r->buf[i] = aligned_alloc(4096, len), "aligned_alloc");
    memset(r->buf[i], 0x5a, len);
    /* MR 0 holds the receives of the round's QPs and SRQs: in their PD */
    CHECK(r->mr[i] = ibv_reg_mr(r->pd[i ? rnd(r->npd) : 0], r->buf[i], len,
                                IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ),
          "ibv_reg_mr %zu bytes", len);
    made.mrs++;
  }
  if (rnd(2)) {
    struct ibv_srq_init_attr sa = {.attr = {.max_wr = 16 + rnd(256), .max_sge = 1 + rnd(4)}};
    CHECK(r->srq = ibv_create_srq(r->pd[0], &sa), "ibv_create_srq");
    made.srqs++;
    post_recvs(r, NULL, r->srq, sa.attr.max_wr);
  }
  if (rnd(3) == 0) {
    struct ibv_xrcd_init_attr xa = {.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
                                    .fd = -1, .oflags = O_CREAT};
    if (xrcd_dir && rnd(2)) {  /* a domain shared through a file, as ibv_xsrq_pingpong does */
      char path[512];
      snprintf(path, sizeof(path), "%s/xrcd.%u", xrcd_dir, rnd(4));
      CHECK((r->xrcd_fd = open(path, O_RDWR | O_CREAT, 0600)) >= 0, "open %s", path);
      xa.fd = r->xrcd_fd;
    }
    CHECK(r->xrcd = ibv_open_xrcd(ctx, &xa), "ibv_open_xrcd (fd %d)", xa.fd);
    made.xrcds++;
    struct ibv_srq_init_attr_ex sa = {0};
    sa.attr.max_wr = 16;
    sa.attr.max_sge = 1;
    sa.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_PD;
    sa.srq_type = IBV_SRQT_XRC;
    sa.xrcd = r->xrcd;
    sa.cq = r->cq[0];
    sa.pd = r->pd[0];
    CHECK(r->xsrq = ibv_create_srq_ex(ctx, &sa), "ibv_create_srq_ex (XRC)");
    made.srqs++;
    post_recvs(r, NULL, r->xsrq, 16);
    r->qp[r->nqp++] = make_qp(ctx, r, IBV_QPT_XRC_RECV);
    r->qp[r->nqp++] = make_qp(ctx, r, IBV_QPT_XRC_SEND);
  }
  const unsigned n = 1 + rnd(kMaxEach - 2);
  for (unsigned i = 0; i < n; ++i) r->qp[r->nqp++] = make_qp(ctx, r, rnd(3) ? IBV_QPT_RC : IBV_QPT_UD);
  made.rounds++;
}

static void destroy_round(struct round* r) {
  for (unsigned i = 0; i < r->nqp; ++i) CHECK(ibv_destroy_qp(r->qp[i]) == 0, "ibv_destroy_qp");
  if (r->xsrq) CHECK(ibv_destroy_srq(r->xsrq) == 0, "ibv_destroy_srq (XRC)");
  if (r->xrcd) CHECK(ibv_close_xrcd(r->xrcd) == 0, "ibv_close_xrcd");
  if (r->xrcd_fd >= 0) close(r->xrcd_fd);
  if (r->srq) CHECK(ibv_destroy_srq(r->srq) == 0, "ibv_destroy_srq");
  for (unsigned i = 0; i < r->nmr; ++i) {
    CHECK(ibv_dereg_mr(r->mr[i]) == 0, "ibv_dereg_mr");
    free(r->buf[i]);
  }
  for (unsigned i = 0; i < r->ncq; ++i) CHECK(ibv_destroy_cq(r->cq[i]) == 0, "ibv_destroy_cq");
  for (unsigned i = 0; i < r->nch; ++i) CHECK(ibv_destroy_comp_channel(r->ch[i]) == 0, "ibv_destroy_comp_channel");
  for (unsigned i = 0; i < r->npd; ++i) CHECK(ibv_dealloc_pd(r->pd[i]) == 0, "ibv_dealloc_pd");
}

static int past(const struct timespec* t) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return now.tv_sec > t->tv_sec || (now.tv_sec == t->tv_sec && now.tv_nsec >= t->tv_nsec);
}

int main(int argc, char** argv) {
  const char* dev_name = NULL;
  const char* ending = "clean";
  const char* xrcd_dir = NULL;
  int seconds = 5, c;
  long seed = (long)getpid() * 7919 + (long)time(NULL);
  while ((c = getopt(argc, argv, "d:t:e:x:S:h")) != -1) {
    switch (c) {
      case 'd': dev_name = optarg; break;
      case 't': seconds = atoi(optarg); break;
      case 'e': ending = optarg; break;
      case 'x': xrcd_dir = optarg; break;
      case 'S': seed = atol(optarg); break;
      default:
        fprintf(stderr, "usage: verbs_churn [-d DEV] [-t SECONDS] [-e clean|exit|kill|random] [-x DIR] [-S SEED]\n");
        return 2;
    }
  }
  srand48(seed);
  if (!strcmp(ending, "random")) ending = (const char*[]){"clean", "exit", "kill"}[rnd(3)];
  if (strcmp(ending, "clean") && strcmp(ending, "exit") && strcmp(ending, "kill")) {
    fprintf(stderr, "verbs_churn: -e %s: clean, exit, kill or random\n", ending);
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);

  int n;
  struct ibv_device** list = ibv_get_device_list(&n);
  CHECK(list && n > 0, "no RDMA device (run under `uroce run`)");
  struct ibv_device* dev = NULL;
  for (int i = 0; i < n && !dev; ++i)
    if (!dev_name || !strcmp(ibv_get_device_name(list[i]), dev_name)) dev = list[i];
  CHECK(dev, "no device %s", dev_name);
  struct ibv_context* ctx = ibv_open_device(dev);
  ibv_free_device_list(list);
  CHECK(ctx, "ibv_open_device");

  struct timespec stop;
  clock_gettime(CLOCK_MONOTONIC, &stop);
  stop.tv_sec += seconds;
  struct round r;
  for (;;) {
    create_round(ctx, &r, xrcd_dir);
    if (past(&stop)) break; /* end with this round's objects alive */
    destroy_round(&r);
  }
  printf("verbs_churn[%d]: %s after %llu rounds: %llu PDs, %llu CQs, %llu MRs, %llu SRQs, %llu XRCDs, %llu QPs\n",
         (int)getpid(), ending, made.rounds, made.pds, made.cqs, made.mrs, made.srqs, made.xrcds, made.qps);
  if (!strcmp(ending, "kill")) raise(SIGKILL);
  if (!strcmp(ending, "exit")) exit(0);
  destroy_round(&r);
  CHECK(ibv_close_device(ctx) == 0, "ibv_close_device");
  return 0;
}
