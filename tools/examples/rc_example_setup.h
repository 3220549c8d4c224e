/*
 * The set-up two RC example programs share (tools/examples/tag_pingpong.c,
 * tests/stress/rc_sequence_checker.c), as ibverbs-utils' ping-pongs do it:
 * a TCP connection to swap QP numbers, PSNs and GIDs, the device named by
 * -d, and the RC QP's INIT -> RTR -> RTS with a global route (RoCE).
 * Header-only C; each function reports failure through the caller's `die`
 * (printf-like, does not return).
 */
#pragma once

#include <infiniband/verbs.h>
#include <netdb.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <errno.h>

typedef void (*rc_example_die_fn)(const char* fmt, ...);

/* The TCP connection the two sides swap their QP data over. With a server
 * name this side connects (retrying for 10 s: the server may not listen
 * yet), without one it listens on `port` and takes one connection. */
static inline int rc_example_tcp_connect(const char* server, int port, rc_example_die_fn die) {
  char service[16];
  snprintf(service, sizeof(service), "%d", port);
  struct addrinfo hints, *res, *ai;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = server ? 0 : AI_PASSIVE;
  if (getaddrinfo(server, service, &hints, &res)) die("cannot resolve %s", server ? server : "*");
  int fd = -1;
  for (int attempt = 0; fd < 0 && attempt < 100; ++attempt) {
    for (ai = res; ai && fd < 0; ai = ai->ai_next) {
      fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
      if (fd < 0) continue;
      if (server) {
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) break;
      } else {
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 1) == 0) {
          const int c = accept(fd, NULL, NULL);
          close(fd);
          fd = c;
          break;
        }
      }
      close(fd);
      fd = -1;
    }
    if (fd < 0 && server) usleep(100 * 1000); /* the server may not listen yet */
    if (fd < 0 && !server) break;
  }
  freeaddrinfo(res);
  if (fd < 0) die("no TCP connection on port %d", port);
  return fd;
}

/* Sends n bytes and receives the peer's n. */
static inline void rc_example_exchange(int fd, const void* out, void* in, size_t n, rc_example_die_fn die) {
  if (write(fd, out, n) != (ssize_t)n) die("TCP write");
  size_t got = 0;
  while (got < n) {
    const ssize_t r = read(fd, (char*)in + got, n - got);
    if (r <= 0) die("TCP read: the peer went away");
    got += (size_t)r;
  }
}

/* Opens the device named `name`, or the first one when name is NULL. */
static inline struct ibv_context* rc_example_open_device(const char* name, rc_example_die_fn die) {
  int n;
  struct ibv_device** list = ibv_get_device_list(&n);
  if (!list || n == 0) die("no RDMA device (run under `uroce run`)");
  struct ibv_device* dev = NULL;
  for (int i = 0; i < n && !dev; ++i)
    if (!name || !strcmp(ibv_get_device_name(list[i]), name)) dev = list[i];
  if (!dev) die("no device %s", name);
  struct ibv_context* ctx = ibv_open_device(dev);
  ibv_free_device_list(list);
  if (!ctx) die("ibv_open_device: %s", strerror(errno));
  return ctx;
}

/* What the RC QP's three transitions take (host byte order). */
struct rc_example_path {
  int access;             /* qp_access_flags */
  enum ibv_mtu mtu;
  uint32_t dest_qpn, rq_psn, sq_psn;
  uint8_t max_dest_rd_atomic, max_rd_atomic;
  uint8_t timeout;        /* local ACK timeout exponent */
  uint8_t gid_index;
  const uint8_t* dgid;    /* 16 bytes */
};

static inline void rc_example_connect_qp(struct ibv_qp* qp, const struct rc_example_path* p, rc_example_die_fn die) {
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = (unsigned)p->access;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    die("modify to INIT: %s", strerror(errno));
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = p->mtu;
  a.dest_qp_num = p->dest_qpn;
  a.rq_psn = p->rq_psn;
  a.max_dest_rd_atomic = p->max_dest_rd_atomic;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  a.ah_attr.port_num = 1;
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.grh.sgid_index = p->gid_index;
  memcpy(a.ah_attr.grh.dgid.raw, p->dgid, 16);
  if (ibv_modify_qp(qp, &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    die("modify to RTR: %s", strerror(errno));
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = p->sq_psn;
  a.timeout = p->timeout;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = p->max_rd_atomic;
  if (ibv_modify_qp(qp, &a,
                    IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                        IBV_QP_MAX_QP_RD_ATOMIC))
    die("modify to RTS: %s", strerror(errno));
}
