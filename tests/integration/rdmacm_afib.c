/* rdma_cm's AF_IB addresses (struct sockaddr_ib: a GID and a service ID)
 * as the kernel's rdma_cm takes them on a RoCE port (drivers/infiniband/
 * core/cma.c), which is all a RoCE device can do with them:
 *
 *   server GID PORT: binding GID itself fails with ENODEV
 *     (cma_validate_port: an ARPHRD_INFINIBAND address on a port that is not
 *     InfiniBand); the zero GID with service ID RDMA_IB_IP_PS_TCP|PORT binds
 *     (an RDMA_PS_IB id may take a TCP service ID, cma_select_ib_ps) and
 *     listens. It takes one request from an IP client (rdmacm_afib client),
 *     whose new id is AF_IB (cma_save_ib_info: the path's GIDs, GID here, and
 *     the service ID) and reports the request's whole private data, rdma_cm's
 *     IP header first (cma_user_data_offset is 0 for an AF_IB listener);
 *     it accepts, checks COUNT messages, sends one back, disconnects.
 *   client ADDR PORT: an RDMA_PS_TCP client over IP (IPv4 or IPv6) that
 *     connects with private data, sends COUNT messages, checks the reply.
 *   ibclient GID PORT: an AF_IB client: rdma_resolve_addr works
 *     (cma_resolve_ib_dev, ADDR_RESOLVED), rdma_resolve_route fails at once
 *     with ENODEV (cma_resolve_iboe_route: an AF_IB id has no netdev), and
 *     rdma_connect with EINVAL (no route).
 *
 * Each side checks its event sequence and the addresses rdma_cm reports.
 * Linked against the system's librdmacm; run under `uroce run`
 * (rdmacm_test.sh, rdmacm_two_hosts_test.sh). GID is written as an IPv6
 * address (::ffff:a.b.c.d for an IPv4 GID). Exit 0 and "server: ok" /
 * "client: ok" / "ibclient: ok" when everything held. */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <infiniband/ib.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PS_TCP_SID 0x01060000ULL /* RDMA_IB_IP_PS_TCP */
#define COUNT 10
#define MSG 64
#define WAIT_MS 15000

static const char hello[] = "afib hello";
static const char welcome[] = "afib welcome";
static const char *who = "?";

#define CHECK(cond, ...)                              \
  do {                                                \
    if (!(cond)) {                                    \
      printf("%s: FAIL %s:%d: ", who, __FILE__, __LINE__); \
      printf(__VA_ARGS__);                            \
      printf("\n");                                   \
      fflush(stdout);                                 \
      exit(1);                                        \
    }                                                 \
  } while (0)

static struct sockaddr_ib ib_addr(const char *gid, uint64_t sid) {
  struct sockaddr_ib a;
  memset(&a, 0, sizeof(a));
  a.sib_family = AF_IB;
  a.sib_pkey = htobe16(0xffff);
  CHECK(inet_pton(AF_INET6, gid, a.sib_addr.sib_raw) == 1, "not a GID: %s", gid);
  a.sib_sid = htobe64(sid);
  a.sib_sid_mask = htobe64(~0ULL);
  return a;
}

static const char *gid_str(const struct sockaddr *sa, char *buf) {
  const struct sockaddr_ib *ib = (const struct sockaddr_ib *)sa;
  inet_ntop(AF_INET6, ib->sib_addr.sib_raw, buf, INET6_ADDRSTRLEN);
  return buf;
}

/* The next event, which must be `want`; returned unacked. */
static struct rdma_cm_event *expect(struct rdma_event_channel *ch, enum rdma_cm_event_type want) {
  struct pollfd p = {ch->fd, POLLIN, 0};
  CHECK(poll(&p, 1, WAIT_MS) == 1, "no event in %d ms, expected %s", WAIT_MS, rdma_event_str(want));
  struct rdma_cm_event *ev;
  CHECK(rdma_get_cm_event(ch, &ev) == 0, "rdma_get_cm_event: %s", strerror(errno));
  CHECK(ev->event == want, "%s (status %d), expected %s", rdma_event_str(ev->event), ev->status,
        rdma_event_str(want));
  printf("%s: %s\n", who, rdma_event_str(ev->event));
  fflush(stdout);
  return ev;
}

static void check_ib(const struct sockaddr *sa, const char *what) {
  CHECK(sa->sa_family == AF_IB, "%s: family %d, not AF_IB", what, sa->sa_family);
}

static struct ibv_qp_init_attr qp_attr(void) {
  struct ibv_qp_init_attr a;
  memset(&a, 0, sizeof(a));
  a.qp_type = IBV_QPT_RC;
  a.cap.max_send_wr = a.cap.max_recv_wr = COUNT + 1;
  a.cap.max_send_sge = a.cap.max_recv_sge = 1;
  a.sq_sig_all = 1;
  return a;
}

/* The connection's end: DISCONNECTED, then TIMEWAIT_EXIT a time-wait later;
 * the QP, MR and id go. */
static void finish(struct rdma_event_channel *ch, struct rdma_cm_id *id, struct ibv_mr *mr) {
  rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_DISCONNECTED));
  rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_TIMEWAIT_EXIT));
  rdma_dereg_mr(mr);
  rdma_destroy_qp(id);
  rdma_destroy_id(id);
}

static void fill(uint8_t *buf, int i) {
  for (int b = 0; b < MSG; ++b) buf[b] = (uint8_t)(i * 31 + b);
}

/* An event channel and an id of port space ps on it. */
static struct rdma_cm_id *channel_and_id(struct rdma_event_channel **ch, enum rdma_port_space ps) {
  *ch = rdma_create_event_channel();
  CHECK(*ch, "rdma_create_event_channel: %s", strerror(errno));
  struct rdma_cm_id *id;
  CHECK(rdma_create_id(*ch, &id, NULL, ps) == 0, "rdma_create_id: %s", strerror(errno));
  return id;
}

static int server(const char *gid, uint16_t port) {
  who = "server";
  struct rdma_event_channel *ch;
  struct rdma_cm_id *listener = channel_and_id(&ch, RDMA_PS_IB);
  /* A GID binds no device on a RoCE port (ENODEV); ::1 is a wildcard
   * (cma_any_addr) and binds. */
  struct sockaddr_ib a = ib_addr(gid, PS_TCP_SID | port);
  struct rdma_cm_id *probe;
  CHECK(rdma_create_id(ch, &probe, NULL, RDMA_PS_IB) == 0, "rdma_create_id: %s", strerror(errno));
  errno = 0;
  if (strcmp(gid, "::1") == 0)
    CHECK(rdma_bind_addr(probe, (struct sockaddr *)&a) == 0, "rdma_bind_addr to ::1: %s", strerror(errno));
  else
    CHECK(rdma_bind_addr(probe, (struct sockaddr *)&a) == -1 && errno == ENODEV,
          "rdma_bind_addr to GID %s: %s, not ENODEV", gid, strerror(errno));
  rdma_destroy_id(probe);
  struct sockaddr_ib any = ib_addr("::", PS_TCP_SID | port);
  CHECK(rdma_bind_addr(listener, (struct sockaddr *)&any) == 0, "rdma_bind_addr to the zero GID: %s", strerror(errno));
  check_ib(rdma_get_local_addr(listener), "listener's address");
  CHECK(ntohs(rdma_get_src_port(listener)) == port, "listener's port %u", ntohs(rdma_get_src_port(listener)));
  CHECK(rdma_listen(listener, 4) == 0, "rdma_listen: %s", strerror(errno));
  printf("server: listening on the zero GID, service ID 0x%llx\n", (unsigned long long)(PS_TCP_SID | port));
  fflush(stdout);

  struct rdma_cm_event *ev = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
  struct rdma_cm_id *id = ev->id;
  char g[INET6_ADDRSTRLEN];
  CHECK(ev->listen_id == listener, "listen_id");
  check_ib(rdma_get_local_addr(id), "request's local address");
  check_ib(rdma_get_peer_addr(id), "request's peer address");
  const struct sockaddr_ib *local = (const struct sockaddr_ib *)rdma_get_local_addr(id);
  CHECK(be64toh(local->sib_sid) == (PS_TCP_SID | port), "request's service ID 0x%llx",
        (unsigned long long)be64toh(local->sib_sid));
  CHECK(be64toh(local->sib_sid_mask) == ~0ULL, "request's service ID mask");
  CHECK(memcmp(local->sib_addr.sib_raw, a.sib_addr.sib_raw, 16) == 0, "request's local GID %s",
        gid_str(rdma_get_local_addr(id), g));
  CHECK(ntohs(rdma_get_src_port(id)) == port, "request's source port");
  /* The whole REQ private data field: the client's IP header (version 0,
   * its IP version), then its data. */
  const uint8_t *priv = ev->param.conn.private_data;
  CHECK(ev->param.conn.private_data_len == 92, "request's private data: %u bytes", ev->param.conn.private_data_len);
  CHECK(priv[0] == 0 && ((priv[1] >> 4) == 4 || (priv[1] >> 4) == 6), "request's IP header: %02x %02x", priv[0],
        priv[1]);
  CHECK(memcmp(priv + 36, hello, sizeof(hello)) == 0, "request's private data: %.16s", (const char *)(priv + 36));
  printf("server: request from %s\n", gid_str(rdma_get_peer_addr(id), g));
  rdma_ack_cm_event(ev);

  struct ibv_qp_init_attr init = qp_attr();
  CHECK(rdma_create_qp(id, NULL, &init) == 0, "rdma_create_qp: %s", strerror(errno));
  static uint8_t bufs[COUNT + 1][MSG];
  struct ibv_mr *mr = rdma_reg_msgs(id, bufs, sizeof(bufs));
  CHECK(mr, "rdma_reg_msgs: %s", strerror(errno));
  for (int i = 0; i < COUNT; ++i)
    CHECK(rdma_post_recv(id, NULL, bufs[i], MSG, mr) == 0, "rdma_post_recv: %s", strerror(errno));
  struct rdma_conn_param p;
  memset(&p, 0, sizeof(p));
  p.responder_resources = p.initiator_depth = 1;
  p.rnr_retry_count = 7;
  p.private_data = welcome;
  p.private_data_len = sizeof(welcome);
  CHECK(rdma_accept(id, &p) == 0, "rdma_accept: %s", strerror(errno));
  rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ESTABLISHED));

  for (int i = 0; i < COUNT; ++i) {
    struct ibv_wc wc;
    CHECK(rdma_get_recv_comp(id, &wc) == 1, "rdma_get_recv_comp: %s", strerror(errno));
    CHECK(wc.status == IBV_WC_SUCCESS && wc.byte_len == MSG, "receive %d: %s, %u bytes", i,
          ibv_wc_status_str(wc.status), wc.byte_len);
    uint8_t want[MSG];
    fill(want, i);
    CHECK(memcmp(bufs[i], want, MSG) == 0, "message %d: wrong data", i);
  }
  printf("server: %d messages checked\n", COUNT);
  fill(bufs[COUNT], 1000);
  CHECK(rdma_post_send(id, NULL, bufs[COUNT], MSG, mr, 0) == 0, "rdma_post_send: %s", strerror(errno));
  struct ibv_wc wc;
  CHECK(rdma_get_send_comp(id, &wc) == 1 && wc.status == IBV_WC_SUCCESS, "reply: %s", ibv_wc_status_str(wc.status));

  finish(ch, id, mr);
  rdma_destroy_id(listener);
  rdma_destroy_event_channel(ch);
  printf("server: ok\n");
  return 0;
}

static int client(const char *addr, uint16_t port) {
  who = "client";
  struct rdma_event_channel *ch;
  struct rdma_cm_id *id = channel_and_id(&ch, RDMA_PS_TCP);
  struct sockaddr_storage dst;
  memset(&dst, 0, sizeof(dst));
  struct sockaddr_in *in = (struct sockaddr_in *)&dst;
  struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&dst;
  if (inet_pton(AF_INET, addr, &in->sin_addr) == 1) {
    in->sin_family = AF_INET;
    in->sin_port = htons(port);
  } else {
    CHECK(inet_pton(AF_INET6, addr, &in6->sin6_addr) == 1, "not an address: %s", addr);
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(port);
  }
  CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) == 0, "rdma_resolve_addr: %s", strerror(errno));
  rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
  CHECK(rdma_resolve_route(id, 2000) == 0, "rdma_resolve_route: %s", strerror(errno));
  rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED));

  struct ibv_qp_init_attr init = qp_attr();
  CHECK(rdma_create_qp(id, NULL, &init) == 0, "rdma_create_qp: %s", strerror(errno));
  static uint8_t bufs[COUNT + 1][MSG];
  struct ibv_mr *mr = rdma_reg_msgs(id, bufs, sizeof(bufs));
  CHECK(mr, "rdma_reg_msgs: %s", strerror(errno));
  CHECK(rdma_post_recv(id, NULL, bufs[COUNT], MSG, mr) == 0, "rdma_post_recv: %s", strerror(errno));
  struct rdma_conn_param p;
  memset(&p, 0, sizeof(p));
  p.responder_resources = p.initiator_depth = 1;
  p.retry_count = p.rnr_retry_count = 7;
  p.private_data = hello;
  p.private_data_len = sizeof(hello);
  CHECK(rdma_connect(id, &p) == 0, "rdma_connect: %s", strerror(errno));
  struct rdma_cm_event *ev = expect(ch, RDMA_CM_EVENT_ESTABLISHED);
  CHECK(ev->param.conn.private_data && memcmp(ev->param.conn.private_data, welcome, sizeof(welcome)) == 0,
        "reply's private data");
  rdma_ack_cm_event(ev);

  for (int i = 0; i < COUNT; ++i) {
    fill(bufs[i], i);
    CHECK(rdma_post_send(id, NULL, bufs[i], MSG, mr, 0) == 0, "rdma_post_send: %s", strerror(errno));
    struct ibv_wc wc;
    CHECK(rdma_get_send_comp(id, &wc) == 1 && wc.status == IBV_WC_SUCCESS, "send %d: %s", i,
          ibv_wc_status_str(wc.status));
  }
  struct ibv_wc wc;
  CHECK(rdma_get_recv_comp(id, &wc) == 1 && wc.status == IBV_WC_SUCCESS, "reply: %s", ibv_wc_status_str(wc.status));
  uint8_t want[MSG];
  fill(want, 1000);
  CHECK(wc.byte_len == MSG && memcmp(bufs[COUNT], want, MSG) == 0, "reply's data");
  printf("client: %d messages sent, reply checked\n", COUNT);

  CHECK(rdma_disconnect(id) == 0, "rdma_disconnect: %s", strerror(errno));
  finish(ch, id, mr);
  rdma_destroy_event_channel(ch);
  printf("client: ok\n");
  return 0;
}

static int ibclient(const char *gid, uint16_t port) {
  who = "ibclient";
  struct rdma_event_channel *ch;
  struct rdma_cm_id *id = channel_and_id(&ch, RDMA_PS_IB);
  struct sockaddr_ib dst = ib_addr(gid, PS_TCP_SID | port);
  CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) == 0, "rdma_resolve_addr: %s", strerror(errno));
  rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
  check_ib(rdma_get_local_addr(id), "local address");
  check_ib(rdma_get_peer_addr(id), "peer address");
  errno = 0;
  CHECK(rdma_resolve_route(id, 2000) == -1 && errno == ENODEV, "rdma_resolve_route: %s, not ENODEV", strerror(errno));
  printf("ibclient: rdma_resolve_route: %s\n", strerror(errno));
  struct pollfd p = {ch->fd, POLLIN, 0};
  CHECK(poll(&p, 1, 500) == 0, "an event after a failed rdma_resolve_route");
  errno = 0;
  CHECK(rdma_connect(id, NULL) == -1 && errno == EINVAL, "rdma_connect: %s, not EINVAL", strerror(errno));
  rdma_destroy_id(id);
  rdma_destroy_event_channel(ch);
  printf("ibclient: ok\n");
  return 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc == 4 && strcmp(argv[1], "server") == 0) return server(argv[2], (uint16_t)atoi(argv[3]));
  if (argc == 4 && strcmp(argv[1], "client") == 0) return client(argv[2], (uint16_t)atoi(argv[3]));
  if (argc == 4 && strcmp(argv[1], "ibclient") == 0) return ibclient(argv[2], (uint16_t)atoi(argv[3]));
  fprintf(stderr, "usage: %s server GID PORT | client ADDRESS PORT | ibclient GID PORT\n", argv[0]);
  return 2;
}
