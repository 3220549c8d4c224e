/*
 * uroce-tag-pingpong: two processes exchange tagged messages through
 * hardware tag matching (IBV_SRQT_TM), as an MPI library over UCX would.
 *
 * Each side has a TM-SRQ, an RC QP on it and one extended CQ. The sides take
 * turns: in round r one side receives a batch of W messages and the other
 * sends them. The receiver posts a tagged buffer per message (TAG_ADD, in
 * reverse order; every third one a wildcard that ignores the round in the
 * tag's high half), then tells the sender it is ready (a NO_TAG message).
 * The sender sends the batch in a shuffled order: messages below the eager
 * threshold as TMH + data (EAGER), larger ones as TMH + RVH (RNDV) naming
 * its buffer, which the receiving device READs into the tagged buffer by
 * itself before it sends the FIN back. Every byte is checked, and so is
 * every completion: the match with its tag, the data with its length, the
 * FIN with the request's app context.
 *
 *   server: uroce run -- uroce-tag-pingpong [-d DEV] [-p PORT] [OPTIONS]
 *   client: uroce run -- uroce-tag-pingpong [-d DEV] [-p PORT] [OPTIONS] SERVER
 *
 * With -B COUNT it streams instead: the client sends COUNT messages of -s
 * bytes (eager below the threshold, rendezvous from it) as fast as the
 * server's window of posted tags lets it (the server re-posts tags in
 * batches and grants them with NO_TAG credit messages), and both report
 * messages per second and bandwidth; every byte is still checked. Its path
 * MTU is the port's active MTU unless -m says otherwise, as perftest's is,
 * so `uroce bench` holds it against ib_send_bw and ib_read_bw like for like.
 *
 * With -P as well (`uroce bench` uses it) the stream's buffers are laid out
 * as perftest lays out its own, and no byte is checked: every tagged receive
 * buffer is one and the same slot, and so is every rendezvous send buffer.
 * perftest gives each QP one buffer of max(message size, cycle buffer = a
 * page), half to send and half to receive (alloc_ctx in
 * perftest_resources.c; --mr_per_qp only gives each QP its own MR), and
 * moves a work request's local and remote address through the cycle buffer
 * only for messages of up to half a page (increase_loc_addr,
 * increase_rem_addr in ctx_set_send_reg_wqes and run_iter_bw). So every
 * outstanding 1 MiB READ of `ib_read_bw` reads the same remote MiB into the
 * same local MiB, which stays in the cache. A slot per message of a window
 * of 32 rendezvous is 64 MiB on the two sides, twice this machine's L3: the
 * engine's two copies of each byte would come from and go to DRAM, a cost
 * ib_read_bw never pays. Eager send buffers stay one per window slot: each
 * carries its own TMH (the tag), which the engine reads only when it sends
 * the message. Without -P the stream keeps a slot per message and checks
 * every byte, as ctest tag_pingpong runs it.
 *
 * Rules: rdma-core's Documentation/tag_matching.md, man ibv_post_srq_ops(3)
 * and providers/mlx5 (verbs.c, qp.c, cq.c).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <getopt.h>
#include <infiniband/tm_types.h>
#include <infiniband/verbs.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>

#include "rc_example_setup.h"

enum {
  kTmh = 16,           /* struct ibv_tmh */
  kRndvReq = 64,       /* TMH + RVH, padded to max_rndv_hdr_size */
  kPlainSlots = 64,    /* untagged SRQ buffers: control messages and FINs */
  kPlainSize = 128,
  kMaxWindow = 32,     /* ping-pong: the batch's bit masks hold it */
  kMaxStreamWindow = 256,
  kCtrlReady = 1,      /* app_ctx of a NO_TAG "ready for round r" message */
  kCtrlCredit = 2,     /* app_ctx of a NO_TAG "tags posted up to n" message */
  kPlainFlag = 1 << 30 /* wr_id bit of an untagged receive */
};

static const uint32_t kSizes[] = {1, 64, 1000, 3000, 4000, 8192, 65536, 1u << 20, 200, 12345};
#define NSIZES (sizeof(kSizes) / sizeof(kSizes[0]))

struct options {
  const char* dev;
  const char* server; /* NULL: we are the server */
  int port, gid_index, rounds, window;
  uint64_t stream; /* -B: messages to stream (0: ping-pong) */
  int one_buffer;  /* -P: perftest's buffers (one slot for all), no data check */
  int events;      /* -e: sleep on a completion channel when nothing is left to poll */
  uint32_t threshold, max_size;
  enum ibv_mtu mtu;
};

struct peer {
  uint32_t qpn, psn;
  uint8_t gid[16];
};

struct side {
  struct options o;
  struct ibv_context* ctx;
  int rd_atomic; /* max_qp_rd_atom: READs in flight each way */
  struct ibv_comp_channel* channel; /* -e */
  int armed;                        /* -e: the CQ is armed, its event not yet taken */
  struct ibv_pd* pd;
  struct ibv_cq_ex* cq;
  struct ibv_srq* srq;
  struct ibv_qp* qp;
  uint8_t *sendbuf, *recvbuf, *plainbuf, *ctrlbuf;
  struct ibv_mr *send_mr, *recv_mr, *plain_mr, *ctrl_mr;
  size_t slot; /* bytes per message slot */
  /* progress */
  int ready_round;           /* last round the peer said it is ready for */
  uint64_t sends_done;
  int fins, adds_done, data_done;
  uint64_t fin_mask;         /* messages of this batch whose FIN came */
  uint64_t match_mask;       /* messages matched, waiting for their data */
  int round;
  uint64_t messages, eager, rndv, bytes;
  /* stream mode (-B) */
  uint64_t credit;      /* sender: tags the receiver has posted */
  uint64_t sent, completed, stream_fins;
  uint64_t posted;      /* receiver: tags posted (or queued to be) so far */
  uint64_t credits_sent;
  struct ibv_ops_wr adds[kMaxStreamWindow];
  struct ibv_sge add_sges[kMaxStreamWindow];
  int nadds;
  uint8_t busy[kMaxStreamWindow]; /* sender: slot awaits its send completion or FIN */
  uint8_t* refbuf; /* receiver: each slot's expected bytes */
};

static void die(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "uroce-tag-pingpong: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  exit(1);
}

/* ---- the messages ---------------------------------------------------- */

static uint32_t msg_size(const struct side* s, int round, int i) {
  uint32_t n = kSizes[(unsigned)(round * s->o.window + i) % NSIZES];
  return n > s->o.max_size ? s->o.max_size : n;
}

static uint64_t msg_tag(int round, int i) { return (uint64_t)(uint32_t)round << 32 | (uint32_t)i; }

static uint8_t pattern(int round, int i, size_t k) {
  return (uint8_t)(k * 7 + (uint32_t)round * 13 + (uint32_t)i * 31 + (k >> 8));
}

/* The order a batch goes out in: a stride through the window. */
static int send_order(int j, int w) { return (j * 5 + 3) % w; }

static void put_be(uint8_t* p, uint64_t v, int n) {
  for (int k = n - 1; k >= 0; --k, v >>= 8) p[k] = (uint8_t)v;
}
static uint64_t get_be(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int k = 0; k < n; ++k) v = v << 8 | p[k];
  return v;
}

static void write_tmh(uint8_t* p, uint8_t op, uint32_t app_ctx, uint64_t tag) {
  memset(p, 0, kTmh);
  p[0] = op;
  put_be(p + 4, app_ctx, 4);
  put_be(p + 8, tag, 8);
}

/* ---- posting ------------------------------------------------------------ */

static void post_send(struct side* s, uint64_t wr_id, void* addr, uint32_t len, struct ibv_mr* mr) {
  struct ibv_sge sge = {(uintptr_t)addr, len, mr->lkey};
  struct ibv_send_wr wr = {0}, *bad;
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  if (ibv_post_send(s->qp, &wr, &bad)) die("ibv_post_send: %s", strerror(errno));
}

static void post_plain(struct side* s, int slot) {
  struct ibv_sge sge = {(uintptr_t)(s->plainbuf + (size_t)slot * kPlainSize), kPlainSize,
                        s->plain_mr->lkey};
  struct ibv_recv_wr wr = {0}, *bad;
  wr.wr_id = kPlainFlag | (uint64_t)slot;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  if (ibv_post_srq_recv(s->srq, &wr, &bad)) die("ibv_post_srq_recv: %s", strerror(errno));
}

/* TAG_ADD for message i of `round`: every third entry is a wildcard on the
 * round (mask keeps the low 32 bits only). */
static void post_tag(struct side* s, int round, int i, int signaled) {
  struct ibv_sge sge = {(uintptr_t)(s->recvbuf + (size_t)i * s->slot), (uint32_t)s->slot,
                        s->recv_mr->lkey};
  struct ibv_ops_wr op = {0}, *bad;
  const int wildcard = i % 3 == 1;
  op.wr_id = 1000 + i;
  op.opcode = IBV_WR_TAG_ADD;
  op.flags = signaled ? IBV_OPS_SIGNALED : 0;
  op.tm.add.recv_wr_id = (uint64_t)i;
  op.tm.add.sg_list = &sge;
  op.tm.add.num_sge = 1;
  op.tm.add.tag = wildcard ? (uint64_t)i : msg_tag(round, i);
  op.tm.add.mask = wildcard ? 0xffffffffull : ~0ull;
  if (ibv_post_srq_ops(s->srq, &op, &bad)) die("ibv_post_srq_ops: %s", strerror(errno));
}

/* ---- completions ------------------------------------------------------- */

static void on_plain(struct side* s, int slot, uint32_t len) {
  const uint8_t* m = s->plainbuf + (size_t)slot * kPlainSize;
  if (len < kTmh) die("a %u-byte untagged message", len);
  const uint32_t app_ctx = (uint32_t)get_be(m + 4, 4);
  if (m[0] == IBV_TMH_NO_TAG && app_ctx == kCtrlReady && len >= kTmh + 4) {
    s->ready_round = (int)get_be(m + kTmh, 4);
  } else if (m[0] == IBV_TMH_NO_TAG && app_ctx == kCtrlCredit && len >= kTmh + 8) {
    const uint64_t c = get_be(m + kTmh, 8);
    if (c > s->credit) s->credit = c;
  } else if (s->o.stream && m[0] == IBV_TMH_FIN && len == kTmh + 16) {
    const uint64_t k = get_be(m + 8, 8);
    if (k >= s->sent || !s->busy[k % (uint64_t)s->o.window] || get_be(m + 28, 4) != s->o.max_size)
      die("a FIN that names no outstanding rendezvous (tag %llu)", (unsigned long long)k);
    s->busy[k % (uint64_t)s->o.window] = 0;
    ++s->stream_fins;
  } else if (m[0] == IBV_TMH_FIN && len == kTmh + 16) {
    /* The FIN repeats the request's TMH and RVH (tag_matching.md). */
    const int i = (int)app_ctx;
    if (i >= s->o.window || get_be(m + 8, 8) != msg_tag(s->round, i) ||
        get_be(m + 28, 4) != msg_size(s, s->round, i) ||
        get_be(m + 16, 8) != (uintptr_t)(s->sendbuf + (size_t)i * s->slot))
      die("a FIN that names no rendezvous of round %d (app_ctx %u)", s->round, app_ctx);
    if (s->fin_mask & (1ull << i)) die("a second FIN for message %d", i);
    s->fin_mask |= 1ull << i;
    ++s->fins;
  } else {
    die("an untagged message of opcode %u, %u bytes", m[0], len);
  }
  post_plain(s, slot);
}

/* A tagged buffer's completion: the match (with the tag), the data, or both. */
static void on_tagged(struct side* s, int i, unsigned flags, uint32_t len, uint64_t tag) {
  if (i < 0 || i >= s->o.window) die("a tagged completion for wr_id %d", i);
  if (flags & IBV_WC_TM_MATCH) {
    if (tag != msg_tag(s->round, i))
      die("message %d matched tag 0x%llx, sent as 0x%llx", i, (unsigned long long)tag,
          (unsigned long long)msg_tag(s->round, i));
    s->match_mask |= 1ull << i;
  }
  if (!(flags & IBV_WC_TM_DATA_VALID)) return;
  if (!(s->match_mask & (1ull << i))) die("data for message %d before its match", i);
  s->match_mask &= ~(1ull << i);
  const uint32_t want = msg_size(s, s->round, i);
  if (len != want) die("message %d: %u bytes, sent %u", i, len, want);
  const uint8_t* d = s->recvbuf + (size_t)i * s->slot;
  for (size_t k = 0; k < want; ++k)
    if (d[k] != pattern(s->round, i, k)) die("message %d of round %d: byte %zu differs", i, s->round, k);
  memset(s->recvbuf + (size_t)i * s->slot, 0, want); /* the next round must write it again */
  ++s->data_done;
  ++s->messages;
  s->bytes += want;
}

static void stream_queue_add(struct side* s);

/* Stream mode's bytes: slot j holds pattern(0, j, .) (written once, kept in
 * s->refbuf as the reference), the first 8 of them overwritten with the
 * message's number, so each message differs from the last in its slot and
 * a check is one memcmp. */
static void stream_fill(uint8_t* d, size_t j, uint32_t n) {
  for (size_t i = 0; i < n; ++i) d[i] = pattern(0, (int)j, i);
}
static void stream_stamp(uint8_t* d, uint64_t k, uint32_t n) {
  uint8_t b[8];
  put_be(b, k, 8);
  memcpy(d, b, n < 8 ? n : 8);
}
static int stream_check(const struct side* s, const uint8_t* d, size_t j, uint64_t k) {
  const uint32_t n = s->o.max_size, head = n < 8 ? n : 8;
  uint8_t b[8];
  put_be(b, k, 8);
  return memcmp(d, b, head) || memcmp(d + head, s->refbuf + j * s->slot + head, n - head);
}

/* Stream mode: message k is tag k, recv_wr_id k, slot k % window; with -P
 * every tagged buffer and every rendezvous send buffer is slot 0. */
static size_t stream_slot(const struct side* s, uint64_t k) {
  return s->o.one_buffer ? 0 : (size_t)(k % (uint64_t)s->o.window);
}

static void on_stream_tagged(struct side* s, uint64_t k, unsigned flags, uint32_t len, uint64_t tag) {
  if (k >= s->posted) die("a tagged completion for message %llu, not posted", (unsigned long long)k);
  if ((flags & IBV_WC_TM_MATCH) && tag != k)
    die("message %llu matched tag %llu", (unsigned long long)k, (unsigned long long)tag);
  if (!(flags & IBV_WC_TM_DATA_VALID)) return;
  if (k != s->messages) die("message %llu completed before %llu", (unsigned long long)k, (unsigned long long)s->messages);
  if (len != s->o.max_size) die("message %llu: %u bytes", (unsigned long long)k, len);
  if (!s->o.one_buffer) {
    const size_t j = stream_slot(s, k);
    uint8_t* d = s->recvbuf + j * s->slot;
    if (stream_check(s, d, j, k)) die("message %llu: its bytes differ", (unsigned long long)k);
    memset(d, 0, 8); /* the next message in this slot must write its number again */
  }
  ++s->messages;
  s->bytes += len;
  if (s->posted < s->o.stream) stream_queue_add(s);
}

/* -e, with the CQ found empty: arm it (the caller polls once more, for what
 * came before the arming), or, armed, sleep until its event (at most 100 ms:
 * the callers' time-outs keep counting). */
static void wait_for_event(struct side* s) {
  if (!s->armed) {
    if (ibv_req_notify_cq(ibv_cq_ex_to_cq(s->cq), 0)) die("ibv_req_notify_cq");
    s->armed = 1;
    return;
  }
  struct pollfd p = {s->channel->fd, POLLIN, 0};
  if (poll(&p, 1, 100) != 1) return;
  struct ibv_cq* cq;
  void* cq_context;
  if (ibv_get_cq_event(s->channel, &cq, &cq_context)) die("ibv_get_cq_event");
  ibv_ack_cq_events(cq, 1);
  s->armed = 0;
}

static void poll_some(struct side* s) {
  struct ibv_poll_cq_attr attr = {0};
  int rc = ibv_start_poll(s->cq, &attr);
  if (rc == ENOENT) {
    if (s->o.events) wait_for_event(s);
    return;
  }
  if (rc) die("ibv_start_poll: %s", strerror(rc));
  do {
    struct ibv_cq_ex* c = s->cq;
    const enum ibv_wc_opcode op = ibv_wc_read_opcode(c);
    if (c->status != IBV_WC_SUCCESS)
      die("completion %s (opcode %d, wr_id %llu)", ibv_wc_status_str(c->status), op,
          (unsigned long long)c->wr_id);
    const unsigned flags = ibv_wc_read_wc_flags(c);
    const uint32_t len = ibv_wc_read_byte_len(c);
    struct ibv_wc_tm_info tm = {0};
    ibv_wc_read_tm_info(c, &tm);
    switch (op) {
      case IBV_WC_SEND:
        ++s->sends_done;
        if (s->o.stream && c->wr_id) { /* an eager message's buffer is free once sent */
          const uint64_t k = c->wr_id - 1;
          ++s->completed;
          if (s->o.max_size < s->o.threshold) s->busy[k % (uint64_t)s->o.window] = 0;
        }
        break;
      case IBV_WC_TM_ADD: ++s->adds_done; break;
      case IBV_WC_TM_NO_TAG: on_plain(s, (int)(c->wr_id & ~(uint64_t)kPlainFlag), len); break;
      case IBV_WC_TM_RECV:
        if (c->wr_id & kPlainFlag) die("an unexpected tagged message (tag 0x%llx)", (unsigned long long)tm.tag);
        if (s->o.stream) on_stream_tagged(s, c->wr_id, flags, len, tm.tag);
        else on_tagged(s, (int)c->wr_id, flags, len, tm.tag);
        break;
      default: die("completion opcode %d", op);
    }
    rc = ibv_next_poll(s->cq);
  } while (rc == 0);
  if (rc != ENOENT) die("ibv_next_poll: %s", strerror(rc));
  ibv_end_poll(s->cq);
}

#define WAIT_FOR(s, cond)                                                   \
  do {                                                                      \
    struct timespec t0_, t1_;                                               \
    clock_gettime(CLOCK_MONOTONIC, &t0_);                                   \
    while (!(cond)) {                                                       \
      poll_some(s);                                                         \
      clock_gettime(CLOCK_MONOTONIC, &t1_);                                 \
      if (t1_.tv_sec - t0_.tv_sec > 20) die("timed out waiting for " #cond); \
    }                                                                       \
  } while (0)

/* ---- one round ---------------------------------------------------------- */

static void receive_batch(struct side* s) {
  const int w = s->o.window;
  s->adds_done = s->data_done = 0;
  s->match_mask = 0;
  for (int i = w - 1; i >= 0; --i) post_tag(s, s->round, i, i == 0);
  WAIT_FOR(s, s->adds_done == 1);
  write_tmh(s->ctrlbuf, IBV_TMH_NO_TAG, kCtrlReady, 0);
  put_be(s->ctrlbuf + kTmh, (uint32_t)s->round, 4);
  s->sends_done = 0;
  post_send(s, 0, s->ctrlbuf, kTmh + 4, s->ctrl_mr);
  WAIT_FOR(s, s->data_done == w && s->sends_done == 1u);
}

static void send_batch(struct side* s) {
  const int w = s->o.window;
  int rndv = 0;
  s->sends_done = s->fins = 0;
  s->fin_mask = 0;
  WAIT_FOR(s, s->ready_round >= s->round);
  for (int j = 0; j < w; ++j) {
    const int i = send_order(j, w);
    const uint32_t n = msg_size(s, s->round, i);
    uint8_t* slot = s->sendbuf + (size_t)i * s->slot;
    uint8_t* hdr = s->ctrlbuf + 64 + (size_t)i * kRndvReq;
    if (n < s->o.threshold) { /* eager: TMH + data */
      write_tmh(slot, IBV_TMH_EAGER, (uint32_t)i, msg_tag(s->round, i));
      for (size_t k = 0; k < n; ++k) slot[kTmh + k] = pattern(s->round, i, k);
      post_send(s, 1 + i, slot, kTmh + n, s->send_mr);
      ++s->eager;
    } else { /* rendezvous: TMH + RVH naming the data, READ by the peer */
      for (size_t k = 0; k < n; ++k) slot[k] = pattern(s->round, i, k);
      memset(hdr, 0, kRndvReq);
      write_tmh(hdr, IBV_TMH_RNDV, (uint32_t)i, msg_tag(s->round, i));
      put_be(hdr + 16, (uintptr_t)slot, 8);
      put_be(hdr + 24, s->send_mr->rkey, 4);
      put_be(hdr + 28, n, 4);
      post_send(s, 1 + i, hdr, kRndvReq, s->ctrl_mr);
      ++rndv;
      ++s->rndv;
    }
  }
  WAIT_FOR(s, s->sends_done == (uint64_t)w && s->fins == rndv);
}

/* ---- stream mode (-B) ----------------------------------------------------- */

/* Queues the TAG_ADD of the next message; a batch goes in one
 * ibv_post_srq_ops call (its last op signaled, which retires the others),
 * then a credit message grants it. */
static void stream_flush_adds(struct side* s) {
  if (!s->nadds) return;
  for (int j = 0; j < s->nadds; ++j) s->adds[j].next = j + 1 < s->nadds ? &s->adds[j + 1] : NULL;
  s->adds[s->nadds - 1].flags = IBV_OPS_SIGNALED;
  struct ibv_ops_wr* bad;
  if (ibv_post_srq_ops(s->srq, s->adds, &bad)) die("ibv_post_srq_ops: %s", strerror(errno));
  s->nadds = 0;
  const uint64_t granted = s->posted; /* tags queued while we wait go in the next batch */
  WAIT_FOR(s, s->sends_done == s->credits_sent); /* the credit buffer is free */
  write_tmh(s->ctrlbuf, IBV_TMH_NO_TAG, kCtrlCredit, 0);
  put_be(s->ctrlbuf + kTmh, granted, 8);
  ++s->credits_sent;
  post_send(s, 0, s->ctrlbuf, kTmh + 8, s->ctrl_mr);
}

static void stream_queue_add(struct side* s) {
  const uint64_t k = s->posted++;
  const int j = s->nadds++;
  struct ibv_ops_wr* op = &s->adds[j];
  memset(op, 0, sizeof(*op));
  s->add_sges[j].addr = (uintptr_t)(s->recvbuf + stream_slot(s, k) * s->slot);
  s->add_sges[j].length = (uint32_t)s->slot;
  s->add_sges[j].lkey = s->recv_mr->lkey;
  op->wr_id = k;
  op->opcode = IBV_WR_TAG_ADD;
  op->tm.add.recv_wr_id = k;
  op->tm.add.sg_list = &s->add_sges[j];
  op->tm.add.num_sge = 1;
  op->tm.add.tag = k;
  op->tm.add.mask = ~0ull;
}

/* The bytes of every slot, written before the clock starts (perftest too
 * fills its buffers before it times): the sender's messages, the receiver's
 * reference copy. */
static void stream_prepare(struct side* s) {
  const uint32_t n = s->o.max_size;
  if (s->o.server) {
    const int rndv = n >= s->o.threshold;
    const int slots = rndv && s->o.one_buffer ? 1 : s->o.window;
    for (int j = 0; j < slots; ++j)
      stream_fill(s->sendbuf + (size_t)j * s->slot + (rndv ? 0 : kTmh), (size_t)j, n);
    return;
  }
  if (s->o.one_buffer) return; /* nothing to check against */
  s->refbuf = malloc(s->slot * (size_t)s->o.window);
  if (!s->refbuf) die("out of memory");
  for (int j = 0; j < s->o.window; ++j) stream_fill(s->refbuf + (size_t)j * s->slot, (size_t)j, n);
}

static void stream_receive(struct side* s) {
  const int batch = s->o.window >= 8 ? s->o.window / 4 : 1;
  while (s->posted < s->o.stream && s->posted < (uint64_t)s->o.window) stream_queue_add(s);
  stream_flush_adds(s);
  while (s->messages < s->o.stream) {
    poll_some(s);
    if (s->nadds >= batch || (s->nadds && s->posted == s->o.stream)) stream_flush_adds(s);
  }
  WAIT_FOR(s, s->sends_done == s->credits_sent);
}

static void stream_send(struct side* s) {
  const int w = s->o.window;
  const uint32_t n = s->o.max_size;
  const int rndv = n >= s->o.threshold;
  while (s->sent < s->o.stream || s->sends_done < s->o.stream || (rndv && s->stream_fins < s->o.stream)) {
    while (s->sent < s->o.stream && s->sent < s->credit && !s->busy[s->sent % (uint64_t)w] &&
           s->sent - s->sends_done < (uint64_t)w) {
      const uint64_t k = s->sent++;
      /* An eager slot holds the message's own TMH: one per window slot, even with -P. */
      uint8_t* slot = s->sendbuf + (rndv ? stream_slot(s, k) : (size_t)(k % (uint64_t)w)) * s->slot;
      s->busy[k % (uint64_t)w] = 1;
      if (!rndv) {
        write_tmh(slot, IBV_TMH_EAGER, 0, k);
        stream_stamp(slot + kTmh, k, n);
        post_send(s, 1 + k, slot, kTmh + n, s->send_mr);
      } else {
        uint8_t* hdr = s->ctrlbuf + 64 + (size_t)(k % (uint64_t)w) * kRndvReq;
        if (!s->o.one_buffer) stream_stamp(slot, k, n);
        memset(hdr, 0, kRndvReq);
        write_tmh(hdr, IBV_TMH_RNDV, 0, k);
        put_be(hdr + 16, (uintptr_t)slot, 8);
        put_be(hdr + 24, s->send_mr->rkey, 4);
        put_be(hdr + 28, n, 4);
        post_send(s, 1 + k, hdr, kRndvReq, s->ctrl_mr);
      }
    }
    poll_some(s);
  }
  s->messages = s->o.stream;
  s->bytes = s->o.stream * n;
  if (rndv) s->rndv = s->o.stream;
  else s->eager = s->o.stream;
}

/* ---- set-up ------------------------------------------------------------- */

static struct ibv_mr* reg(struct side* s, uint8_t** buf, size_t len, int access) {
  *buf = aligned_alloc(4096, (len + 4095) & ~(size_t)4095);
  if (!*buf) die("out of memory");
  memset(*buf, 0, len);
  struct ibv_mr* mr = ibv_reg_mr(s->pd, *buf, len, access);
  if (!mr) die("ibv_reg_mr: %s", strerror(errno));
  return mr;
}

static void open_device(struct side* s) {
  s->ctx = rc_example_open_device(s->o.dev, die);
  struct ibv_device_attr_ex attr;
  if (ibv_query_device_ex(s->ctx, NULL, &attr)) die("ibv_query_device_ex");
  if (!(attr.tm_caps.flags & IBV_TM_CAP_RC)) die("%s has no tag matching", ibv_get_device_name(s->ctx->device));
  if ((uint32_t)s->o.window > attr.tm_caps.max_num_tags) die("window above max_num_tags");
  s->rd_atomic = attr.orig_attr.max_qp_rd_atom;
}

static void create_objects(struct side* s) {
  const int w = s->o.window;
  s->pd = ibv_alloc_pd(s->ctx);
  if (!s->pd) die("ibv_alloc_pd");
  struct ibv_cq_init_attr_ex ca = {0};
  ca.cqe = 4 * (w + kPlainSlots);
  ca.wc_flags = IBV_WC_EX_WITH_TM_INFO | IBV_WC_STANDARD_FLAGS;
  if (s->o.events) {
    s->channel = ibv_create_comp_channel(s->ctx);
    if (!s->channel) die("ibv_create_comp_channel: %s", strerror(errno));
    ca.channel = s->channel;
  }
  s->cq = ibv_create_cq_ex(s->ctx, &ca);
  if (!s->cq) die("ibv_create_cq_ex: %s", strerror(errno));
  struct ibv_srq_init_attr_ex sa = {0};
  sa.attr.max_wr = kPlainSlots;
  sa.attr.max_sge = 1;
  sa.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_TM;
  sa.srq_type = IBV_SRQT_TM;
  sa.pd = s->pd;
  sa.cq = ibv_cq_ex_to_cq(s->cq);
  sa.tm_cap.max_num_tags = (uint32_t)w;
  sa.tm_cap.max_ops = 2 * (uint32_t)w + 2;
  s->srq = ibv_create_srq_ex(s->ctx, &sa);
  if (!s->srq) die("ibv_create_srq_ex (TM): %s", strerror(errno));
  struct ibv_qp_init_attr qa = {0};
  qa.send_cq = qa.recv_cq = ibv_cq_ex_to_cq(s->cq);
  qa.srq = s->srq;
  qa.qp_type = IBV_QPT_RC;
  qa.cap.max_send_wr = 2 * (uint32_t)w + 2;
  qa.cap.max_send_sge = 1;
  s->qp = ibv_create_qp(s->pd, &qa);
  if (!s->qp) die("ibv_create_qp: %s", strerror(errno));
  s->slot = (kTmh + s->o.max_size + 4095) & ~(size_t)4095;
  /* The peer READs rendezvous data straight out of the send buffer. */
  /* -P: one slot to receive into and, for rendezvous, one to READ from. */
  const int rndv_stream = s->o.stream && s->o.max_size >= s->o.threshold;
  const size_t send_slots = s->o.one_buffer && rndv_stream ? 1 : (size_t)w;
  const size_t recv_slots = s->o.one_buffer ? 1 : (size_t)w;
  s->send_mr = reg(s, &s->sendbuf, s->slot * send_slots, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  s->recv_mr = reg(s, &s->recvbuf, s->slot * recv_slots, IBV_ACCESS_LOCAL_WRITE);
  s->plain_mr = reg(s, &s->plainbuf, (size_t)kPlainSlots * kPlainSize, IBV_ACCESS_LOCAL_WRITE);
  s->ctrl_mr = reg(s, &s->ctrlbuf, 64 + (size_t)w * kRndvReq, IBV_ACCESS_LOCAL_WRITE);
  for (int i = 0; i < kPlainSlots; ++i) post_plain(s, i);
}

static void connect_qp(struct side* s, const struct peer* me, const struct peer* them) {
  const struct rc_example_path path = {
      .access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ,
      .mtu = s->o.mtu,
      .dest_qpn = ntohl(them->qpn),
      .rq_psn = ntohl(them->psn),
      .sq_psn = ntohl(me->psn),
      /* The device's own rendezvous READs go out on this QP: as many at once
       * as it allows, as perftest's ib_read_bw asks (its default out_reads). */
      .max_dest_rd_atomic = (uint8_t)s->rd_atomic,
      .max_rd_atomic = (uint8_t)s->rd_atomic,
      .timeout = 14,
      .gid_index = (uint8_t)s->o.gid_index,
      .dgid = them->gid,
  };
  rc_example_connect_qp(s->qp, &path, die);
}

static void usage(void) {
  fprintf(stderr,
          "usage: uroce-tag-pingpong [-d DEV] [-p PORT] [-g GID_INDEX] [-n ROUNDS] [-w WINDOW]\n"
          "                          [-t EAGER_THRESHOLD] [-s MAX_SIZE] [-m MTU] [-B COUNT [-P]] [-e] [SERVER]\n"
          "Without SERVER it waits for a client on PORT (default 18600). -B streams COUNT\n"
          "messages of MAX_SIZE bytes from the client to the server instead of the ping-pong;\n"
          "-P with it lays the buffers out as perftest does (every tagged buffer and every\n"
          "rendezvous send buffer the same one) and checks no byte. -e sleeps on a completion\n"
          "channel when there is nothing to poll, as perftest's -e.\n");
  exit(2);
}

int main(int argc, char** argv) {
  struct side s;
  memset(&s, 0, sizeof(s));
  s.o.port = 18600;
  s.o.rounds = 20;
  s.o.window = 8;
  s.o.threshold = 4096;
  s.o.max_size = 1u << 20;
  s.o.mtu = 0; /* -m: IBV_MTU_1024 (ibv_rc_pingpong's), -B: the port's active MTU */
  s.ready_round = -1;
  int c;
  int window_set = 0;
  while ((c = getopt(argc, argv, "d:p:g:n:w:t:s:m:B:Peh")) != -1) {
    switch (c) {
      case 'd': s.o.dev = optarg; break;
      case 'p': s.o.port = atoi(optarg); break;
      case 'g': s.o.gid_index = atoi(optarg); break;
      case 'n': s.o.rounds = atoi(optarg); break;
      case 'w': s.o.window = atoi(optarg); window_set = 1; break;
      case 'B': s.o.stream = strtoull(optarg, NULL, 0); break;
      case 'P': s.o.one_buffer = 1; break;
      case 'e': s.o.events = 1; break;
      case 't': s.o.threshold = (uint32_t)strtoul(optarg, NULL, 0); break;
      case 's': s.o.max_size = (uint32_t)strtoul(optarg, NULL, 0); break;
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
  if (s.o.stream && !window_set) s.o.window = s.o.max_size < s.o.threshold ? 128 : 8;
  if (s.o.window < 1 || s.o.window > (s.o.stream ? kMaxStreamWindow : kMaxWindow) || s.o.rounds < 1 ||
      s.o.max_size < 1 || (s.o.one_buffer && !s.o.stream))
    usage();
  setvbuf(stdout, NULL, _IOLBF, 0);

  open_device(&s);
  if (!s.o.mtu) {
    struct ibv_port_attr pa;
    s.o.mtu = IBV_MTU_1024;
    if (s.o.stream && ibv_query_port(s.ctx, 1, &pa) == 0) s.o.mtu = pa.active_mtu;
  }
  create_objects(&s);
  struct peer me = {0}, them;
  union ibv_gid gid;
  if (ibv_query_gid(s.ctx, 1, s.o.gid_index, &gid)) die("ibv_query_gid %d", s.o.gid_index);
  srand48(getpid() * 1000003L + time(NULL));
  me.qpn = htonl(s.qp->qp_num);
  me.psn = htonl((uint32_t)lrand48() & 0xffffff);
  memcpy(me.gid, gid.raw, 16);
  const int fd = rc_example_tcp_connect(s.o.server, s.o.port, die);
  rc_example_exchange(fd, &me, &them, sizeof(me), die);
  connect_qp(&s, &me, &them);
  if (s.o.stream) stream_prepare(&s);
  char go = 1, peer_go;
  rc_example_exchange(fd, &go, &peer_go, 1, die); /* both QPs are in RTS, the stream's buffers filled */

  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  const int first_sender = s.o.server ? 1 : 0; /* the client sends in even rounds */
  if (s.o.stream) {
    if (s.o.server) stream_send(&s);
    else stream_receive(&s);
  } else {
    for (s.round = 0; s.round < s.o.rounds; ++s.round) {
      if ((s.round & 1) != first_sender) send_batch(&s);
      else receive_batch(&s);
    }
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  rc_example_exchange(fd, &go, &peer_go, 1, die); /* neither side leaves while the other still works */
  close(fd);
  const double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  if (s.o.stream)
    printf("stream: %s %llu %s messages of %u bytes in %.3f s: %.0f msg/s, %.1f MiB/s (%s)\n",
           s.o.server ? "sent" : "received", (unsigned long long)s.messages,
           s.o.max_size < s.o.threshold ? "eager" : "rendezvous", s.o.max_size, secs,
           (double)s.messages / secs, (double)s.bytes / secs / (1024.0 * 1024.0),
           s.o.one_buffer ? "one buffer as perftest, data not checked" : "data checked");
  else
    printf("%d iters: received %llu tagged messages (%llu bytes, data checked); sent %llu eager, %llu rendezvous; %.3f s\n",
           s.o.rounds, (unsigned long long)s.messages, (unsigned long long)s.bytes,
           (unsigned long long)s.eager, (unsigned long long)s.rndv, secs);

  ibv_destroy_qp(s.qp);
  ibv_destroy_srq(s.srq);
  ibv_dereg_mr(s.send_mr);
  ibv_dereg_mr(s.recv_mr);
  ibv_dereg_mr(s.plain_mr);
  ibv_dereg_mr(s.ctrl_mr);
  ibv_destroy_cq(ibv_cq_ex_to_cq(s.cq));
  ibv_dealloc_pd(s.pd);
  ibv_close_device(s.ctx);
  free(s.sendbuf);
  free(s.recvbuf);
  free(s.plainbuf);
  free(s.ctrlbuf);
  free(s.refbuf);
  return 0;
}
