/* rdma_cm's AF_IB addresses (struct sockaddr_ib: a GID and a service ID)
 * as the kernel's rdma_cm takes them on a RoCE port (drivers/infiniband/
 * core/cma.c), which is all a RoCE device can do with them:
 *
 *   server GID PORT: binding GID itself fails with ENODEV
 *     (cma_validate_port: an ARPHRD_INFINIBAND address on a port that is not
 *     InfiniBand); the zero GID binds with service ID RDMA_IB_IP_PS_TCP|PORT
 *     and, on a second id, RDMA_IB_IP_PS_UDP|PORT (an RDMA_PS_IB id may take
 *     rdma_cm's IP port spaces, cma_select_ib_ps), and both listen. Over
 *     RoCE they refuse IP requests: the kernel's new id is AF_IB
 *     (cma_save_net_info), cma_ib_acquire_dev finds it no GID (rdma_ip2gid:
 *     AF_INET and AF_INET6 only), and the CM answers REJ 28 (a SIDR REP
 *     "reject" for UD); the listener hears nothing. An IP listener on
 *     PORT+1 (the client's "done") must be the first to hear a request:
 *     the server rejects it with "done", waits a moment for any other
 *     event, and ends.
 *   client ADDR PORT: an IP client (IPv4 or IPv6): RDMA_PS_TCP to PORT is
 *     REJECTED with status 28 and RDMA_PS_UDP to PORT UNREACHABLE with
 *     status 2, each at once (no retries: under 3 s); then it connects to
 *     PORT+1 and is REJECTED with the server's "done".
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
#include <time.h>

#define PS_TCP_SID 0x01060000ULL /* RDMA_IB_IP_PS_TCP */
#define PS_UDP_SID 0x01110000ULL /* RDMA_IB_IP_PS_UDP */
#define WAIT_MS 15000
#define PROMPT_MS 3000 /* a request's first answer: the CM sends again after ~4 s */

static const char hello[] = "afib hello";
static const char done[] = "done";
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

/* An event channel and an id of port space ps on it. */
static struct rdma_cm_id *channel_and_id(struct rdma_event_channel **ch, enum rdma_port_space ps) {
  *ch = rdma_create_event_channel();
  CHECK(*ch, "rdma_create_event_channel: %s", strerror(errno));
  struct rdma_cm_id *id;
  CHECK(rdma_create_id(*ch, &id, NULL, ps) == 0, "rdma_create_id: %s", strerror(errno));
  return id;
}

/* A listener of port space ps on channel ch bound to a (an AF_IB or an IP
 * address). */
static struct rdma_cm_id *listener_at(struct rdma_event_channel *ch, enum rdma_port_space ps, const void *a) {
  struct rdma_cm_id *l;
  CHECK(rdma_create_id(ch, &l, NULL, ps) == 0, "rdma_create_id: %s", strerror(errno));
  CHECK(rdma_bind_addr(l, (struct sockaddr *)a) == 0, "rdma_bind_addr: %s", strerror(errno));
  CHECK(rdma_listen(l, 4) == 0, "rdma_listen: %s", strerror(errno));
  return l;
}

static int server(const char *gid, uint16_t port) {
  who = "server";
  struct rdma_event_channel *ch;
  struct rdma_cm_id *probe = channel_and_id(&ch, RDMA_PS_IB);
  /* A GID binds no device on a RoCE port (ENODEV); ::1 is a wildcard
   * (cma_any_addr) and binds. */
  struct sockaddr_ib a = ib_addr(gid, PS_TCP_SID | port);
  errno = 0;
  if (strcmp(gid, "::1") == 0)
    CHECK(rdma_bind_addr(probe, (struct sockaddr *)&a) == 0, "rdma_bind_addr to ::1: %s", strerror(errno));
  else
    CHECK(rdma_bind_addr(probe, (struct sockaddr *)&a) == -1 && errno == ENODEV,
          "rdma_bind_addr to GID %s: %s, not ENODEV", gid, strerror(errno));
  rdma_destroy_id(probe);
  struct sockaddr_ib any = ib_addr("::", PS_TCP_SID | port);
  struct rdma_cm_id *listener = listener_at(ch, RDMA_PS_IB, &any);
  check_ib(rdma_get_local_addr(listener), "listener's address");
  CHECK(ntohs(rdma_get_src_port(listener)) == port, "listener's port %u", ntohs(rdma_get_src_port(listener)));
  struct sockaddr_ib any_udp = ib_addr("::", PS_UDP_SID | port);
  struct rdma_cm_id *ud_listener = listener_at(ch, RDMA_PS_IB, &any_udp);
  struct sockaddr_in6 ip_any;
  memset(&ip_any, 0, sizeof(ip_any));
  ip_any.sin6_family = AF_INET6;
  ip_any.sin6_port = htons(port + 1);
  struct rdma_cm_id *ip_listener = listener_at(ch, RDMA_PS_TCP, &ip_any);
  printf("server: listening on the zero GID, service IDs 0x%llx and 0x%llx, and on IP port %u\n",
         (unsigned long long)(PS_TCP_SID | port), (unsigned long long)(PS_UDP_SID | port), port + 1);
  fflush(stdout);

  /* The client's "done" is the first request anyone hears: the AF_IB
   * listeners heard nothing of the client's requests before it. */
  struct rdma_cm_event *ev = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
  CHECK(ev->listen_id == ip_listener, "a request for the %s listener", ev->listen_id == ip_listener ? "IP" : "AF_IB");
  struct rdma_cm_id *id = ev->id;
  CHECK(rdma_reject(id, done, sizeof(done)) == 0, "rdma_reject: %s", strerror(errno));
  rdma_ack_cm_event(ev);
  rdma_destroy_id(id);
  struct pollfd p = {ch->fd, POLLIN, 0};
  CHECK(poll(&p, 1, 500) == 0, "an event after the client's done");
  rdma_destroy_id(ip_listener);
  rdma_destroy_id(ud_listener);
  rdma_destroy_id(listener);
  rdma_destroy_event_channel(ch);
  printf("server: ok\n");
  return 0;
}

static int64_t ms_since(const struct timespec *t0) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

/* An id of port space ps connects to addr:port with hello and gets `want`
 * with status `status` (and the private data `data` if given) within
 * PROMPT_MS. */
static void refused(struct rdma_event_channel *ch, enum rdma_port_space ps, const char *addr, uint16_t port,
                    enum rdma_cm_event_type want, int status, const char *data) {
  struct rdma_cm_id *id;
  CHECK(rdma_create_id(ch, &id, NULL, ps) == 0, "rdma_create_id: %s", strerror(errno));
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
  struct rdma_conn_param p;
  memset(&p, 0, sizeof(p));
  p.private_data = hello;
  p.private_data_len = sizeof(hello);
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  CHECK(rdma_connect(id, &p) == 0, "rdma_connect: %s", strerror(errno));
  struct rdma_cm_event *ev = expect(ch, want);
  const int64_t ms = ms_since(&t0);
  CHECK(ev->id == id, "the event of another id");
  CHECK(ev->status == status, "status %d, expected %d", ev->status, status);
  CHECK(ms < PROMPT_MS, "answered after %lld ms", (long long)ms);
  CHECK(!data || (ev->param.conn.private_data && memcmp(ev->param.conn.private_data, data, strlen(data) + 1) == 0),
        "private data other than \"%s\"", data);
  printf("%s: %s %s status %d after %lld ms\n", who, ps == RDMA_PS_UDP ? "UDP" : "TCP", rdma_event_str(want),
         ev->status, (long long)ms);
  rdma_ack_cm_event(ev);
  rdma_destroy_id(id);
}

static int client(const char *addr, uint16_t port) {
  who = "client";
  struct rdma_event_channel *ch = rdma_create_event_channel();
  CHECK(ch, "rdma_create_event_channel: %s", strerror(errno));
  refused(ch, RDMA_PS_TCP, addr, port, RDMA_CM_EVENT_REJECTED, 28, NULL);   /* IB_CM_REJ_CONSUMER_DEFINED */
  refused(ch, RDMA_PS_UDP, addr, port, RDMA_CM_EVENT_UNREACHABLE, 2, NULL);  /* IB_SIDR_REJECT */
  refused(ch, RDMA_PS_TCP, addr, port + 1, RDMA_CM_EVENT_REJECTED, 28, done);
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
