// rdma_cm's event sequences through a real engine: linked against the
// system's librdmacm and libibverbs, run under `uroce run` (rdmacm_test.sh)
// so both resolve to uroce's drop-ins. Each case states what the kernel's
// rdma_cm gives for the same calls (drivers/infiniband/core/cma.c).
#include <endian.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <infiniband/ib.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <rdma/rsocket.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

namespace {

constexpr int kWaitMs = 5000;

sockaddr_storage addr(const char* ip, uint16_t port) {
  sockaddr_storage ss{};
  if (std::strchr(ip, ':')) {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&ss);
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(port);
    inet_pton(AF_INET6, ip, &in6->sin6_addr);
  } else {
    auto* in = reinterpret_cast<sockaddr_in*>(&ss);
    in->sin_family = AF_INET;
    in->sin_port = htons(port);
    inet_pton(AF_INET, ip, &in->sin_addr);
  }
  return ss;
}
sockaddr* sa(sockaddr_storage& s) { return reinterpret_cast<sockaddr*>(&s); }

// An AF_IB address: a GID (written as an IPv6 address) and a service ID.
constexpr uint64_t kSidPsIb = 0x013F0000, kSidPsTcp = RDMA_IB_IP_PS_TCP;
sockaddr_storage ib_addr(const uint8_t* gid, uint64_t sid, uint64_t mask = ~uint64_t(0)) {
  sockaddr_storage ss{};
  auto* ib = reinterpret_cast<sockaddr_ib*>(&ss);
  ib->sib_family = AF_IB;
  ib->sib_pkey = htobe16(0xffff);
  std::memcpy(ib->sib_addr.sib_raw, gid, 16);
  ib->sib_sid = htobe64(sid);
  ib->sib_sid_mask = htobe64(mask);
  return ss;
}
const sockaddr_ib* as_ib(const sockaddr* a) { return reinterpret_cast<const sockaddr_ib*>(a); }

// The next event on a channel, within kWaitMs (the channel's fd is pollable).
rdma_cm_event* next_event(rdma_event_channel* ch) {
  pollfd p{ch->fd, POLLIN, 0};
  if (poll(&p, 1, kWaitMs) != 1) return nullptr;
  rdma_cm_event* ev = nullptr;
  return rdma_get_cm_event(ch, &ev) == 0 ? ev : nullptr;
}

// Expects the next event to be `type` and returns it (unacked), or nullptr.
rdma_cm_event* expect_event(rdma_event_channel* ch, rdma_cm_event_type type) {
  rdma_cm_event* ev = next_event(ch);
  EXPECT_NE(ev, nullptr) << "no event, expected " << rdma_event_str(type);
  if (!ev) return nullptr;
  EXPECT_EQ(ev->event, type) << rdma_event_str(ev->event) << " status " << ev->status;
  if (ev->event != type) {
    rdma_ack_cm_event(ev);
    return nullptr;
  }
  return ev;
}

void expect_and_ack(rdma_event_channel* ch, rdma_cm_event_type type) {
  if (rdma_cm_event* ev = expect_event(ch, type)) rdma_ack_cm_event(ev);
}

ibv_qp_state qp_state(ibv_qp* qp) {
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  EXPECT_EQ(ibv_query_qp(qp, &attr, IBV_QP_STATE, &init), 0);
  return attr.qp_state;
}

// A client in a process of its own: connects without a QP and, once
// established, says so on fd 3 and waits to be killed (stay), or returns 0.
int connect_and_wait(uint16_t port, bool stay = true) {
  rdma_event_channel* ch = rdma_create_event_channel();
  rdma_cm_id* id;
  auto dst = addr("127.0.0.1", port);
  if (!ch || rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP) || rdma_resolve_addr(id, nullptr, sa(dst), 2000))
    return 1;
  for (int step = 0; step < 3; ++step) {
    rdma_cm_event* ev;
    if (rdma_get_cm_event(ch, &ev)) return 2;
    const rdma_cm_event_type t = ev->event;
    rdma_ack_cm_event(ev);
    if (t == RDMA_CM_EVENT_ADDR_RESOLVED && rdma_resolve_route(id, 2000)) return 3;
    if (t == RDMA_CM_EVENT_ROUTE_RESOLVED) {
      rdma_conn_param p{};
      p.qp_num = 0x456;
      if (rdma_connect(id, &p)) return 4;
    }
    if (t == RDMA_CM_EVENT_CONNECT_RESPONSE) {
      if (rdma_establish(id)) return 5;
      if (!stay) return 0;
      (void)!write(3, "x", 1);
      for (;;) pause();
    }
  }
  return 6;
}

// The two ends of a connection whose application is slow to answer, in
// processes of their own (rdmacm_two_hosts_test.sh runs them on two
// engines): the server accepts delay_ms after the CONNECT_REQUEST, or the
// client establishes delay_ms after the CONNECT_RESPONSE. Without QPs
// (their numbers are made up), so nothing but the CM is timed. Each says
// how long its connection took and returns 0 once it is up and torn down.
int64_t ms_since(const timespec& t0) {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000;
}

rdma_cm_event* wait_event(rdma_event_channel* ch, rdma_cm_event_type want, const char* who) {
  rdma_cm_event* ev = nullptr;
  if (rdma_get_cm_event(ch, &ev)) {
    std::printf("%s: rdma_get_cm_event: %s\n", who, strerror(errno));
    return nullptr;
  }
  if (ev->event != want) {
    std::printf("%s: %s (status %d), expected %s\n", who, rdma_event_str(ev->event), ev->status,
                rdma_event_str(want));
    rdma_ack_cm_event(ev);
    return nullptr;
  }
  return ev;
}

int slow_server(const char* ip, uint16_t port, int delay_ms) {
  rdma_event_channel* ch = rdma_create_event_channel();
  rdma_cm_id* listener;
  auto a = addr(ip, port);
  if (!ch || rdma_create_id(ch, &listener, nullptr, RDMA_PS_TCP) || rdma_bind_addr(listener, sa(a)) ||
      rdma_listen(listener, 1))
    return 1;
  std::printf("server: listening\n");
  std::fflush(stdout);
  rdma_cm_event* ev = wait_event(ch, RDMA_CM_EVENT_CONNECT_REQUEST, "server");
  if (!ev) return 2;
  rdma_cm_id* id = ev->id;
  rdma_ack_cm_event(ev);
  timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  usleep(useconds_t(delay_ms) * 1000);
  rdma_conn_param p{};
  p.qp_num = 0x789;
  if (rdma_accept(id, &p)) return 3;
  if (!(ev = wait_event(ch, RDMA_CM_EVENT_ESTABLISHED, "server"))) return 4;
  rdma_ack_cm_event(ev);
  std::printf("server: established %lld ms after the request\n", (long long)ms_since(t0));
  std::fflush(stdout);
  if (!(ev = wait_event(ch, RDMA_CM_EVENT_DISCONNECTED, "server"))) return 5;
  rdma_ack_cm_event(ev);
  rdma_destroy_id(id);
  rdma_destroy_id(listener);
  rdma_destroy_event_channel(ch);
  return 0;
}

int slow_client(const char* ip, uint16_t port, int delay_ms) {
  rdma_event_channel* ch = rdma_create_event_channel();
  rdma_cm_id* id;
  auto dst = addr(ip, port);
  if (!ch || rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP) || rdma_resolve_addr(id, nullptr, sa(dst), 2000))
    return 1;
  rdma_cm_event* ev = wait_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED, "client");
  if (!ev) return 2;
  rdma_ack_cm_event(ev);
  if (rdma_resolve_route(id, 2000) || !(ev = wait_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, "client"))) return 3;
  rdma_ack_cm_event(ev);
  timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  rdma_conn_param p{};
  p.qp_num = 0x456;
  if (rdma_connect(id, &p)) return 4;
  if (!(ev = wait_event(ch, RDMA_CM_EVENT_CONNECT_RESPONSE, "client"))) return 5;
  rdma_ack_cm_event(ev);
  std::printf("client: response %lld ms after the connect\n", (long long)ms_since(t0));
  usleep(useconds_t(delay_ms) * 1000);
  if (rdma_establish(id)) return 6;
  std::printf("client: connected %lld ms after the connect\n", (long long)ms_since(t0));
  std::fflush(stdout);
  sleep(1);  // the server's ESTABLISHED before the DREQ
  if (rdma_disconnect(id) || !(ev = wait_event(ch, RDMA_CM_EVENT_DISCONNECTED, "client"))) return 7;
  rdma_ack_cm_event(ev);
  rdma_destroy_id(id);
  rdma_destroy_event_channel(ch);
  return 0;
}

// Ids bound to ADDRESS (a listener) and to OTHER; once "bound" is printed
// the test removes ADDRESS from the engine's interface: its id, and only
// it, gets ADDR_CHANGE (as the kernel's cma tells the ids bound to an
// interface whose address changed).
int addr_change(const char* ip, const char* other_ip, uint16_t port) {
  rdma_event_channel* ch = rdma_create_event_channel();
  rdma_cm_id *bound, *other;
  auto a = addr(ip, port), b = addr(other_ip, port);
  if (!ch || rdma_create_id(ch, &bound, nullptr, RDMA_PS_TCP) || rdma_bind_addr(bound, sa(a)) ||
      rdma_listen(bound, 1) || rdma_create_id(ch, &other, nullptr, RDMA_PS_TCP) || rdma_bind_addr(other, sa(b))) {
    std::printf("set-up: %s\n", strerror(errno));
    return 1;
  }
  std::printf("bound\n");
  std::fflush(stdout);
  pollfd p{ch->fd, POLLIN, 0};
  if (poll(&p, 1, 30000) != 1) {
    std::printf("no event in 30 s\n");
    return 2;
  }
  rdma_cm_event* ev;
  if (rdma_get_cm_event(ch, &ev)) return 3;
  std::printf("%s on the id bound to %s (status %d)\n", rdma_event_str(ev->event), ev->id == bound ? ip : other_ip,
              ev->status);
  const bool right = ev->event == RDMA_CM_EVENT_ADDR_CHANGE && ev->id == bound;
  rdma_ack_cm_event(ev);
  if (poll(&p, 1, 1000) != 0) {  // nothing for the other id
    if (rdma_get_cm_event(ch, &ev) == 0) {
      std::printf("then %s\n", rdma_event_str(ev->event));
      rdma_ack_cm_event(ev);
    }
    return 4;
  }
  rdma_destroy_id(other);
  rdma_destroy_id(bound);
  rdma_destroy_event_channel(ch);
  return right ? 0 : 5;
}

class RdmaCm : public ::testing::Test {
 protected:
  void SetUp() override {
    ch_ = rdma_create_event_channel();
    ASSERT_NE(ch_, nullptr) << "no device: run under uroce run with an engine";
  }
  void TearDown() override {
    for (rdma_cm_id* id : ids_) {
      if (id->qp) rdma_destroy_qp(id);
      rdma_destroy_id(id);
    }
    rdma_destroy_event_channel(ch_);
  }
  rdma_cm_id* new_id(rdma_port_space ps = RDMA_PS_TCP) {
    rdma_cm_id* id = nullptr;
    EXPECT_EQ(rdma_create_id(ch_, &id, this, ps), 0);
    if (id) ids_.push_back(id);
    return id;
  }
  void keep(rdma_cm_id* id) { ids_.push_back(id); }
  // A listener on ip:port (port 0: an ephemeral one, returned).
  uint16_t listen_on(const char* ip, uint16_t port, rdma_port_space ps = RDMA_PS_TCP) {
    rdma_cm_id* l = new_id(ps);
    auto a = addr(ip, port);
    EXPECT_EQ(rdma_bind_addr(l, sa(a)), 0) << strerror(errno);
    EXPECT_EQ(rdma_listen(l, 8), 0);
    return ntohs(rdma_get_src_port(l));
  }
  // An active id resolved to ip:port.
  rdma_cm_id* resolved(const char* ip, uint16_t port, rdma_port_space ps = RDMA_PS_TCP) {
    rdma_cm_id* id = new_id(ps);
    auto dst = addr(ip, port);
    EXPECT_EQ(rdma_resolve_addr(id, nullptr, sa(dst), 2000), 0);
    expect_and_ack(ch_, RDMA_CM_EVENT_ADDR_RESOLVED);
    EXPECT_EQ(rdma_resolve_route(id, 2000), 0);
    expect_and_ack(ch_, RDMA_CM_EVENT_ROUTE_RESOLVED);
    return id;
  }
  // Connects id (resolved) with private data and returns the listener's
  // CONNECT_REQUEST (unacked; its new id kept).
  rdma_cm_event* request_with(rdma_cm_id* id, const void* data, uint8_t len) {
    rdma_conn_param p{};
    p.private_data = data;
    p.private_data_len = len;
    EXPECT_EQ(rdma_connect(id, &p), 0) << strerror(errno);
    rdma_cm_event* req = expect_event(ch_, RDMA_CM_EVENT_CONNECT_REQUEST);
    if (req) keep(req->id);
    return req;
  }
  // Connects id (resolved) and expects REJECTED with that status.
  void expect_rejected(rdma_cm_id* id, int status) {
    rdma_conn_param p{};
    ASSERT_EQ(rdma_connect(id, &p), 0) << strerror(errno);
    rdma_cm_event* ev = expect_event(ch_, RDMA_CM_EVENT_REJECTED);
    ASSERT_NE(ev, nullptr);
    EXPECT_EQ(ev->status, status);
    rdma_ack_cm_event(ev);
  }
  ibv_qp_init_attr rc_attr() {
    ibv_qp_init_attr a{};
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = a.cap.max_recv_wr = 4;
    a.cap.max_send_sge = a.cap.max_recv_sge = 1;
    return a;
  }

  rdma_event_channel* ch_ = nullptr;
  std::vector<rdma_cm_id*> ids_;
};

TEST_F(RdmaCm, DevicesAreTheEngines) {
  int n = 0;
  ibv_context** list = rdma_get_devices(&n);
  ASSERT_NE(list, nullptr);
  ASSERT_GE(n, 1);
  EXPECT_STREQ(ibv_get_device_name(list[0]->device), "uroce0");
  EXPECT_EQ(list[n], nullptr);
  rdma_free_devices(list);
}

TEST_F(RdmaCm, BindPortZeroIsEphemeralAndAPortIsTakenOnce) {
  rdma_cm_id* a = new_id();
  auto any0 = addr("127.0.0.1", 0);
  ASSERT_EQ(rdma_bind_addr(a, sa(any0)), 0);
  const uint16_t port = ntohs(rdma_get_src_port(a));
  EXPECT_GE(port, 32768);
  EXPECT_NE(a->verbs, nullptr);  // a specific address names its device
  rdma_cm_id* b = new_id();
  auto same = addr("127.0.0.1", port);
  EXPECT_EQ(rdma_bind_addr(b, sa(same)), -1);
  EXPECT_EQ(errno, EADDRINUSE);
  // The wildcard overlaps it too (cma_check_port: EADDRNOTAVAIL); another
  // port space does not.
  rdma_cm_id* c = new_id();
  auto any = addr("0.0.0.0", port);
  EXPECT_EQ(rdma_bind_addr(c, sa(any)), -1);
  EXPECT_EQ(errno, EADDRNOTAVAIL);
  rdma_cm_id* u = new_id(RDMA_PS_UDP);
  EXPECT_EQ(rdma_bind_addr(u, sa(same)), 0);
}

TEST_F(RdmaCm, ReuseAddrSharesAPortThatNobodyListensOn) {
  int one = 1;
  rdma_cm_id* a = new_id();
  rdma_cm_id* b = new_id();
  ASSERT_EQ(rdma_set_option(a, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof(one)), 0);
  ASSERT_EQ(rdma_set_option(b, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof(one)), 0);
  auto a0 = addr("127.0.0.1", 0);
  ASSERT_EQ(rdma_bind_addr(a, sa(a0)), 0);
  auto same = addr("127.0.0.1", ntohs(rdma_get_src_port(a)));
  EXPECT_EQ(rdma_bind_addr(b, sa(same)), 0) << strerror(errno);
}

TEST_F(RdmaCm, Ipv6WildcardTakesIpv4UnlessAfOnly) {
  int on = 1;
  rdma_cm_id* v6only = new_id();
  ASSERT_EQ(rdma_set_option(v6only, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &on, sizeof(on)), 0);
  auto any6 = addr("::", 0);
  ASSERT_EQ(rdma_bind_addr(v6only, sa(any6)), 0);
  const uint16_t port = ntohs(rdma_get_src_port(v6only));
  rdma_cm_id* v4 = new_id();
  auto four = addr("127.0.0.1", port);
  EXPECT_EQ(rdma_bind_addr(v4, sa(four)), 0) << "AFONLY: the IPv6 wildcard leaves IPv4 alone";
  rdma_cm_id* dual = new_id();
  auto any6b = addr("::", 0);
  ASSERT_EQ(rdma_bind_addr(dual, sa(any6b)), 0);
  rdma_cm_id* v4b = new_id();
  auto fourb = addr("127.0.0.1", ntohs(rdma_get_src_port(dual)));
  EXPECT_EQ(rdma_bind_addr(v4b, sa(fourb)), -1);
  EXPECT_EQ(errno, EADDRNOTAVAIL);
}

TEST_F(RdmaCm, ResolveOffTheEngineIsAnAddrError) {
  rdma_cm_id* id = new_id();
  auto dst = addr("192.0.2.1", 7000);  // TEST-NET-1: nobody's
  ASSERT_EQ(rdma_resolve_addr(id, nullptr, sa(dst), 500), 0);
  rdma_cm_event* ev = expect_event(ch_, RDMA_CM_EVENT_ADDR_ERROR);
  ASSERT_NE(ev, nullptr);
  EXPECT_NE(ev->status, 0);
  rdma_ack_cm_event(ev);
}

TEST_F(RdmaCm, ConnectToAPortNobodyListensOnIsRejected) {
  expect_rejected(resolved("127.0.0.1", 1), 8);  // IB_CM_REJ_INVALID_SERVICE_ID
}

// A SIDR REQ nobody serves: its SIDR REP says "unsupported" (status 1),
// which rdma_cm reports as UNREACHABLE (cma_sidr_rep_handler).
TEST_F(RdmaCm, UdConnectToAPortNobodyListensOnIsUnreachable) {
  rdma_cm_id* id = resolved("127.0.0.1", 1, RDMA_PS_UDP);
  EXPECT_EQ(id->qp_type, IBV_QPT_UD);
  rdma_conn_param p{};
  ASSERT_EQ(rdma_connect(id, &p), 0);
  rdma_cm_event* ev = expect_event(ch_, RDMA_CM_EVENT_UNREACHABLE);
  ASSERT_NE(ev, nullptr);
  EXPECT_EQ(ev->status, 1);  // IB_SIDR_UNSUPPORTED
  rdma_ack_cm_event(ev);
}

// An id made without a channel is synchronous: each call waits for its
// event, and a refused connect is ECONNREFUSED (rdma-core's ucma_complete).
TEST_F(RdmaCm, ASynchronousConnectToNobodyIsConnectionRefused) {
  rdma_cm_id* id = nullptr;
  ASSERT_EQ(rdma_create_id(nullptr, &id, nullptr, RDMA_PS_TCP), 0);
  keep(id);
  auto dst = addr("127.0.0.1", 1);
  ASSERT_EQ(rdma_resolve_addr(id, nullptr, sa(dst), 2000), 0);
  ASSERT_NE(id->event, nullptr);
  EXPECT_EQ(id->event->event, RDMA_CM_EVENT_ADDR_RESOLVED);
  ASSERT_EQ(rdma_resolve_route(id, 2000), 0);
  rdma_conn_param p{};
  EXPECT_EQ(rdma_connect(id, &p), -1);
  EXPECT_EQ(errno, ECONNREFUSED);
}

TEST_F(RdmaCm, RejectCarriesPrivateData) {
  const uint16_t port = listen_on("127.0.0.1", 0);
  rdma_cm_id* id = resolved("127.0.0.1", port);
  const char hello[] = "hello, server";
  rdma_cm_event* req = request_with(id, hello, sizeof(hello));
  ASSERT_NE(req, nullptr);
  ASSERT_NE(req->listen_id, nullptr);
  ASSERT_GE(req->param.conn.private_data_len, sizeof(hello));
  EXPECT_STREQ(static_cast<const char*>(req->param.conn.private_data), hello);
  rdma_cm_id* child = req->id;
  EXPECT_EQ(child->context, this);  // the listener's
  EXPECT_EQ(ntohs(rdma_get_src_port(child)), port);
  EXPECT_EQ(rdma_get_dst_port(child), rdma_get_src_port(id));
  rdma_ack_cm_event(req);
  const char no[] = "go away";
  ASSERT_EQ(rdma_reject(child, no, sizeof(no)), 0);
  rdma_cm_event* rej = expect_event(ch_, RDMA_CM_EVENT_REJECTED);
  ASSERT_NE(rej, nullptr);
  EXPECT_EQ(rej->id, id);
  EXPECT_EQ(rej->status, 28);  // IB_CM_REJ_CONSUMER_DEFINED
  ASSERT_GE(rej->param.conn.private_data_len, sizeof(no));
  EXPECT_STREQ(static_cast<const char*>(rej->param.conn.private_data), no);
  rdma_ack_cm_event(rej);
}

// Connect, accept, exchange a message, disconnect: the QPs go INIT (created),
// RTS (connected), ERR (disconnected), and both ends see DISCONNECTED.
TEST_F(RdmaCm, ConnectAcceptDisconnectMovesTheQps) {
  for (const char* ip : {"127.0.0.1", "::1"}) {
    SCOPED_TRACE(ip);
    const uint16_t port = listen_on(ip, 0);
    rdma_cm_id* client = resolved(ip, port);
    uint8_t tos = 32, timeout = 10;
    ASSERT_EQ(rdma_set_option(client, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, 1), 0);
    ASSERT_EQ(rdma_set_option(client, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &timeout, 1), 0);
    ibv_qp_init_attr ca = rc_attr();
    ASSERT_EQ(rdma_create_qp(client, nullptr, &ca), 0) << strerror(errno);
    EXPECT_EQ(qp_state(client->qp), IBV_QPS_INIT);
    rdma_conn_param p{};
    p.responder_resources = p.initiator_depth = 1;
    p.retry_count = p.rnr_retry_count = 7;
    ASSERT_EQ(rdma_connect(client, &p), 0);
    rdma_cm_event* req = expect_event(ch_, RDMA_CM_EVENT_CONNECT_REQUEST);
    ASSERT_NE(req, nullptr);
    rdma_cm_id* server = req->id;
    keep(server);
    rdma_ack_cm_event(req);
    ASSERT_NE(server->verbs, nullptr);
    ibv_qp_init_attr sa_ = rc_attr();
    ASSERT_EQ(rdma_create_qp(server, nullptr, &sa_), 0);
    ibv_mr* mr = ibv_reg_mr(server->pd, calloc(1, 64), 64, IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(mr, nullptr);
    ASSERT_EQ(rdma_post_recv(server, nullptr, mr->addr, 64, mr), 0);
    ASSERT_EQ(rdma_accept(server, &p), 0);
    EXPECT_EQ(qp_state(server->qp), IBV_QPS_RTS);
    // The client's QP is connected when it sees ESTABLISHED (its library
    // sent the RTU), the server's at the RTU.
    expect_and_ack(ch_, RDMA_CM_EVENT_ESTABLISHED);
    expect_and_ack(ch_, RDMA_CM_EVENT_ESTABLISHED);
    EXPECT_EQ(qp_state(client->qp), IBV_QPS_RTS);
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    ASSERT_EQ(ibv_query_qp(client->qp, &attr, IBV_QP_TIMEOUT | IBV_QP_AV | IBV_QP_DEST_QPN, &init), 0);
    EXPECT_EQ(attr.timeout, timeout);
    EXPECT_EQ(attr.ah_attr.grh.traffic_class, tos);
    EXPECT_EQ(attr.dest_qp_num, server->qp->qp_num);
    // A message crosses the connection.
    ibv_mr* cmr = ibv_reg_mr(client->pd, calloc(1, 64), 64, IBV_ACCESS_LOCAL_WRITE);
    std::strcpy(static_cast<char*>(cmr->addr), "over rdma_cm");
    ASSERT_EQ(rdma_post_send(client, nullptr, cmr->addr, 13, cmr, IBV_SEND_SIGNALED), 0);
    ibv_wc wc{};
    ASSERT_EQ(rdma_get_send_comp(client, &wc), 1);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    ASSERT_EQ(rdma_get_recv_comp(server, &wc), 1);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_STREQ(static_cast<char*>(mr->addr), "over rdma_cm");
    ASSERT_EQ(rdma_disconnect(client), 0);
    EXPECT_EQ(qp_state(client->qp), IBV_QPS_ERR);
    expect_and_ack(ch_, RDMA_CM_EVENT_DISCONNECTED);
    expect_and_ack(ch_, RDMA_CM_EVENT_DISCONNECTED);
    EXPECT_EQ(rdma_disconnect(server), 0);  // the DREP side: nothing more
    // Each end's time-wait (cm.c's, 2.1 s on RoCE) ends in TIMEWAIT_EXIT.
    std::vector<rdma_cm_id*> exited;
    for (int i = 0; i < 2; ++i)
      if (rdma_cm_event* ev = expect_event(ch_, RDMA_CM_EVENT_TIMEWAIT_EXIT)) {
        exited.push_back(ev->id);
        rdma_ack_cm_event(ev);
      }
    EXPECT_EQ(exited.size(), 2u);
    EXPECT_NE(std::find(exited.begin(), exited.end(), client), exited.end());
    EXPECT_NE(std::find(exited.begin(), exited.end(), server), exited.end());
    void* b1 = mr->addr;
    void* b2 = cmr->addr;
    ibv_dereg_mr(mr);
    ibv_dereg_mr(cmr);
    free(b1);
    free(b2);
  }
}

// A connected QP's number is held for the CM's time-wait after it is
// destroyed: a QP made at once gets another (the peer's last packets find
// no QP rather than a new one); an unconnected QP's number is free at once.
TEST_F(RdmaCm, AConnectedQpsNumberIsNotReusedInTimewait) {
  rdma_cm_id* id = new_id();
  auto a = addr("127.0.0.1", 0);
  ASSERT_EQ(rdma_bind_addr(id, sa(a)), 0);
  ibv_cq* cq = ibv_create_cq(id->verbs, 4, nullptr, nullptr, 0);
  ASSERT_NE(cq, nullptr);
  ibv_pd* pd = ibv_alloc_pd(id->verbs);
  ibv_qp_init_attr init = rc_attr();
  init.send_cq = init.recv_cq = cq;
  auto make = [&] { return ibv_create_qp(pd, &init); };
  // Unconnected (INIT): reused.
  ibv_qp* qp = make();
  ASSERT_NE(qp, nullptr);
  const uint32_t first = qp->qp_num;
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.port_num = 1;
  ASSERT_EQ(ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), 0);
  ASSERT_EQ(ibv_destroy_qp(qp), 0);
  qp = make();
  ASSERT_NE(qp, nullptr);
  EXPECT_EQ(qp->qp_num, first);
  // Connected (RTR, to itself): held.
  ASSERT_EQ(ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), 0);
  ibv_qp_attr rtr{};
  rtr.qp_state = IBV_QPS_RTR;
  rtr.path_mtu = IBV_MTU_1024;
  rtr.dest_qp_num = qp->qp_num;
  rtr.ah_attr.is_global = 1;
  rtr.ah_attr.port_num = 1;
  ibv_gid gid{};
  ASSERT_EQ(ibv_query_gid(id->verbs, 1, 0, &gid), 0);
  rtr.ah_attr.grh.dgid = gid;
  rtr.ah_attr.grh.hop_limit = 64;
  rtr.max_dest_rd_atomic = 1;
  rtr.min_rnr_timer = 12;
  ASSERT_EQ(ibv_modify_qp(qp, &rtr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER), 0)
      << strerror(errno);
  ASSERT_EQ(ibv_destroy_qp(qp), 0);
  qp = make();
  ASSERT_NE(qp, nullptr);
  EXPECT_NE(qp->qp_num, first);
  ibv_destroy_qp(qp);
  ibv_dealloc_pd(pd);
  ibv_destroy_cq(cq);
}

// A client process killed with its connection up: the server sees
// DISCONNECTED (the engine ends the dead client's connections).
TEST_F(RdmaCm, PeerProcessKilledIsADisconnect) {
  const uint16_t port = listen_on("127.0.0.1", 0);
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  // A process of its own (exec'd, not only forked: a fork shares this
  // process's connection to the engine, as it would share a /dev/infiniband fd).
  const pid_t child = fork();
  if (child == 0) {
    dup2(ready[1], 3);
    setenv("RDMACM_EVENTS_CONNECT_PORT", std::to_string(port).c_str(), 1);
    execl("/proc/self/exe", "rdmacm_events", nullptr);
    _exit(127);
  }
  rdma_cm_event* req = expect_event(ch_, RDMA_CM_EVENT_CONNECT_REQUEST);
  ASSERT_NE(req, nullptr);
  rdma_cm_id* server = req->id;
  keep(server);
  rdma_ack_cm_event(req);
  rdma_conn_param p{};
  p.qp_num = 0x123;  // no QP: rdma_accept takes the number given
  ASSERT_EQ(rdma_accept(server, &p), 0);
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  expect_and_ack(ch_, RDMA_CM_EVENT_ESTABLISHED);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  rdma_cm_event* ev = expect_event(ch_, RDMA_CM_EVENT_DISCONNECTED);
  ASSERT_NE(ev, nullptr);
  EXPECT_EQ(ev->id, server);
  rdma_ack_cm_event(ev);
  close(ready[0]);
  close(ready[1]);
}

// A forked child (no exec) that uses rdma_cm has a session of its own: its
// connection ends when it exits, and the parent's ids are undisturbed.
TEST_F(RdmaCm, AForkedChildConnectsInASessionOfItsOwn) {
  const uint16_t port = listen_on("127.0.0.1", 0);
  const pid_t child = fork();
  if (child == 0) _exit(connect_and_wait(port, /*stay=*/false));
  rdma_cm_event* req = expect_event(ch_, RDMA_CM_EVENT_CONNECT_REQUEST);
  ASSERT_NE(req, nullptr);
  rdma_cm_id* server = req->id;
  keep(server);
  rdma_ack_cm_event(req);
  rdma_conn_param p{};
  p.qp_num = 0x123;
  ASSERT_EQ(rdma_accept(server, &p), 0);
  expect_and_ack(ch_, RDMA_CM_EVENT_ESTABLISHED);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  expect_and_ack(ch_, RDMA_CM_EVENT_DISCONNECTED);
  // The parent's session still serves it.
  rdma_cm_id* after = resolved("127.0.0.1", port);
  EXPECT_NE(after, nullptr);
}

TEST_F(RdmaCm, MigrateMovesTheEventsToAnotherChannel) {
  const uint16_t port = listen_on("127.0.0.1", 0);
  rdma_cm_id* id = resolved("127.0.0.1", port);
  rdma_event_channel* other = rdma_create_event_channel();
  ASSERT_NE(other, nullptr);
  ASSERT_EQ(rdma_migrate_id(id, other), 0);
  EXPECT_EQ(id->channel, other);
  rdma_conn_param p{};
  ASSERT_EQ(rdma_connect(id, &p), 0);
  rdma_cm_event* req = expect_event(ch_, RDMA_CM_EVENT_CONNECT_REQUEST);
  ASSERT_NE(req, nullptr);
  keep(req->id);
  ASSERT_EQ(rdma_reject(req->id, nullptr, 0), 0);
  rdma_ack_cm_event(req);
  expect_and_ack(other, RDMA_CM_EVENT_REJECTED);
  ASSERT_EQ(rdma_migrate_id(id, ch_), 0);
  rdma_destroy_event_channel(other);
}

TEST_F(RdmaCm, GetAddrInfoGivesPassiveAndActiveAddresses) {
  rdma_addrinfo hints{}, *res = nullptr;
  hints.ai_flags = RAI_PASSIVE;
  hints.ai_port_space = RDMA_PS_TCP;
  ASSERT_EQ(rdma_getaddrinfo("127.0.0.1", "7471", &hints, &res), 0);
  ASSERT_NE(res->ai_src_addr, nullptr);
  EXPECT_EQ(res->ai_dst_addr, nullptr);
  EXPECT_EQ(res->ai_qp_type, IBV_QPT_RC);
  rdma_freeaddrinfo(res);
  rdma_addrinfo udp{};
  udp.ai_port_space = RDMA_PS_UDP;
  udp.ai_qp_type = IBV_QPT_UD;
  ASSERT_EQ(rdma_getaddrinfo("::1", "7471", &udp, &res), 0);
  ASSERT_NE(res->ai_dst_addr, nullptr);
  EXPECT_EQ(res->ai_family, AF_INET6);
  EXPECT_EQ(res->ai_port_space, RDMA_PS_UDP);
  rdma_freeaddrinfo(res);
}

// With neither a name nor a service, the hints' own addresses are the
// answer, as rdma-core's (libfabric's verbs provider asks so for a peer
// whose address it has); a source address in the hints is kept.
TEST_F(RdmaCm, GetAddrInfoWithoutNameGivesTheHintsAddresses) {
  sockaddr_in dst{}, src{};
  dst.sin_family = src.sin_family = AF_INET;
  dst.sin_port = htons(7471);
  inet_pton(AF_INET, "10.1.2.3", &dst.sin_addr);
  inet_pton(AF_INET, "127.0.0.1", &src.sin_addr);
  rdma_addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_port_space = RDMA_PS_TCP;
  hints.ai_qp_type = IBV_QPT_RC;
  hints.ai_dst_addr = reinterpret_cast<sockaddr*>(&dst);
  hints.ai_dst_len = sizeof(dst);
  hints.ai_src_addr = reinterpret_cast<sockaddr*>(&src);
  hints.ai_src_len = sizeof(src);
  ASSERT_EQ(rdma_getaddrinfo(nullptr, nullptr, &hints, &res), 0);
  ASSERT_NE(res->ai_dst_addr, nullptr);
  ASSERT_EQ(res->ai_dst_len, socklen_t(sizeof(dst)));
  EXPECT_EQ(std::memcmp(res->ai_dst_addr, &dst, sizeof(dst)), 0);
  ASSERT_NE(res->ai_src_addr, nullptr);
  EXPECT_EQ(std::memcmp(res->ai_src_addr, &src, sizeof(src)), 0);
  EXPECT_EQ(res->ai_port_space, RDMA_PS_TCP);
  EXPECT_EQ(res->ai_qp_type, IBV_QPT_RC);
  rdma_freeaddrinfo(res);
  EXPECT_EQ(rdma_getaddrinfo(nullptr, nullptr, nullptr, &res), -1);
  EXPECT_EQ(errno, EINVAL);
}

// On the loopback engine, 127.0.0.1 is the device's own address (GID 0) and
// a bind there names it; libfabric's verbs provider then offers that address.
TEST_F(RdmaCm, LoopbackBindNamesTheLoopbackEngine) {
  rdma_cm_id* id = nullptr;
  ASSERT_EQ(rdma_create_id(ch_, &id, nullptr, RDMA_PS_TCP), 0);
  keep(id);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  ASSERT_EQ(rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&a)), 0);
  ASSERT_NE(id->verbs, nullptr);
  EXPECT_STREQ(ibv_get_device_name(id->verbs->device), "uroce0");
}

// AF_IB (struct sockaddr_ib): a GID and a service ID, as the kernel's
// rdma_cm takes them on a RoCE port. A GID names no device there
// (cma_validate_port: an ARPHRD_INFINIBAND address on a port that is not
// InfiniBand): a bind to one is ENODEV, and only the wildcards (the zero
// GID, ::1: cma_any_addr) bind. The service ID under its mask names the port
// space (cma_select_ib_ps: an RDMA_PS_IB id may take TCP's too, a TCP id
// only its own), port 0 an ephemeral one, and the bound address's service
// ID is whole afterwards (cma_bind_port). Port spaces are shared with IP
// ids, which an AF_IB wildcard overlaps (cma_check_port).
class RdmaCmAfIb : public RdmaCm {
 protected:
  void SetUp() override {
    RdmaCm::SetUp();
    int n = 0;
    ibv_context** list = rdma_get_devices(&n);
    ASSERT_NE(list, nullptr);
    ibv_gid gid{};
    ASSERT_EQ(ibv_query_gid(list[0], 1, 0, &gid), 0);
    rdma_free_devices(list);
    std::memcpy(gid_, gid.raw, 16);
  }
  // A listener on the zero GID and an ephemeral port of the service IDs of
  // sid_ps (a port space's RDMA_IB_IP_PS_*); on channel ch (the caller's to
  // destroy) if given.
  rdma_cm_id* ib_listener(uint64_t sid_ps, uint16_t* port, rdma_event_channel* ch = nullptr) {
    rdma_cm_id* l = nullptr;
    if (ch)
      EXPECT_EQ(rdma_create_id(ch, &l, nullptr, RDMA_PS_IB), 0);
    else
      l = new_id(RDMA_PS_IB);
    auto la = ib_addr(kZeroGid, sid_ps);
    EXPECT_EQ(rdma_bind_addr(l, sa(la)), 0) << strerror(errno);
    EXPECT_EQ(rdma_listen(l, 4), 0);
    *port = ntohs(rdma_get_src_port(l));
    return l;
  }
  // A bind of a new id of port space ps to gid and sid fails with err.
  void expect_bind_fails(rdma_port_space ps, const uint8_t* gid, uint64_t sid, int err) {
    rdma_cm_id* id = new_id(ps);
    auto a = ib_addr(gid, sid);
    EXPECT_EQ(rdma_bind_addr(id, sa(a)), -1);
    EXPECT_EQ(errno, err);
  }
  static constexpr uint8_t kZeroGid[16] = {};
  uint8_t gid_[16] = {};
};

TEST_F(RdmaCmAfIb, ABindToAGidIsEnodevTheZeroGidTakesTheServiceId) {
  // The device's own GID, another, and (ENODEV before the service ID is
  // looked at) a TCP id with RDMA_PS_IB's service ID.
  const uint8_t foreign[16] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xde, 0xad, 0xbe, 0xef};
  expect_bind_fails(RDMA_PS_IB, gid_, kSidPsIb | 7001, ENODEV);
  expect_bind_fails(RDMA_PS_IB, foreign, kSidPsIb | 7001, ENODEV);
  expect_bind_fails(RDMA_PS_TCP, gid_, kSidPsIb | 7002, ENODEV);

  rdma_cm_id* a = new_id(RDMA_PS_IB);
  auto any_port = ib_addr(kZeroGid, kSidPsIb);
  ASSERT_EQ(rdma_bind_addr(a, sa(any_port)), 0) << strerror(errno);
  EXPECT_EQ(a->verbs, nullptr);  // a wildcard names no device
  const sockaddr_ib* bound = as_ib(rdma_get_local_addr(a));
  ASSERT_EQ(bound->sib_family, AF_IB);
  const uint16_t port = ntohs(rdma_get_src_port(a));
  EXPECT_GE(port, 32768);
  EXPECT_EQ(be64toh(bound->sib_sid), kSidPsIb | port);
  EXPECT_EQ(be64toh(bound->sib_sid_mask), ~uint64_t(0));
  EXPECT_EQ(std::memcmp(bound->sib_addr.sib_raw, kZeroGid, 16), 0);
  expect_bind_fails(RDMA_PS_IB, kZeroGid, kSidPsIb | port, EADDRNOTAVAIL);  // a wildcard's port (cma_check_port)
  // The same port of the TCP space: an RDMA_PS_IB id may take it; an IP
  // address there is within the wildcard.
  rdma_cm_id* tcp_sid = new_id(RDMA_PS_IB);
  auto in_tcp = ib_addr(kZeroGid, kSidPsTcp | port);
  ASSERT_EQ(rdma_bind_addr(tcp_sid, sa(in_tcp)), 0) << strerror(errno);
  EXPECT_EQ(be64toh(as_ib(rdma_get_local_addr(tcp_sid))->sib_sid), kSidPsTcp | port);
  rdma_cm_id* ip = new_id();
  auto four = addr("127.0.0.1", port);
  EXPECT_EQ(rdma_bind_addr(ip, sa(four)), -1);
  EXPECT_EQ(errno, EADDRNOTAVAIL);
  // A TCP id cannot take RDMA_PS_IB's service IDs; a whole-mask service ID
  // 0 is no port space's.
  expect_bind_fails(RDMA_PS_TCP, kZeroGid, kSidPsIb | 7000, EPROTONOSUPPORT);
  expect_bind_fails(RDMA_PS_IB, kZeroGid, 0, EPROTONOSUPPORT);
  // No mask: the id's own port space, an ephemeral port.
  rdma_cm_id* unmasked = new_id();
  auto no_mask = ib_addr(kZeroGid, 0x1234, 0);
  ASSERT_EQ(rdma_bind_addr(unmasked, sa(no_mask)), 0) << strerror(errno);
  const uint64_t sid = be64toh(as_ib(rdma_get_local_addr(unmasked))->sib_sid);
  EXPECT_EQ(sid & ~uint64_t(0xffff), kSidPsTcp);
  EXPECT_GE(sid & 0xffff, 32768u);
  // ::1 is a wildcard too.
  const uint8_t loopback[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  rdma_cm_id* lo = new_id(RDMA_PS_IB);
  auto lo_addr = ib_addr(loopback, kSidPsIb);
  ASSERT_EQ(rdma_bind_addr(lo, sa(lo_addr)), 0) << strerror(errno);
  EXPECT_EQ(lo->verbs, nullptr);
}

// An AF_IB id resolves its destination (cma_resolve_ib_dev: the device with
// that GID, or one of its subnet prefix, and the P_Key) but not its route:
// rdma_resolve_route fails at once with ENODEV and no event
// (cma_resolve_iboe_route: an AF_IB id has no netdev), so rdma_connect is
// EINVAL.
TEST_F(RdmaCmAfIb, AnAfIbIdResolvesItsAddressButNotItsRoute) {
  uint16_t port = 0;
  ib_listener(kSidPsIb, &port);
  rdma_cm_id* id = new_id(RDMA_PS_IB);
  auto dst = ib_addr(gid_, kSidPsIb | port);
  auto ip_src = addr("127.0.0.1", 0);
  EXPECT_EQ(rdma_resolve_addr(id, sa(ip_src), sa(dst), 2000), -1);  // families differ
  EXPECT_EQ(errno, EINVAL);
  auto src_gid = ib_addr(gid_, 0, 0);
  EXPECT_EQ(rdma_resolve_addr(id, sa(src_gid), sa(dst), 2000), -1);  // its bind to a GID
  EXPECT_EQ(errno, ENODEV);
  rdma_cm_id* no_pkey = new_id(RDMA_PS_IB);
  auto pkey0 = ib_addr(gid_, kSidPsIb | port);
  reinterpret_cast<sockaddr_ib*>(&pkey0)->sib_pkey = 0;
  EXPECT_EQ(rdma_resolve_addr(no_pkey, nullptr, sa(pkey0), 2000), -1);  // not in the P_Key table
  EXPECT_EQ(errno, ENODEV);
  const uint8_t elsewhere[16] = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9};
  rdma_cm_id* far = new_id(RDMA_PS_IB);
  auto no_prefix = ib_addr(elsewhere, kSidPsIb | port);
  EXPECT_EQ(rdma_resolve_addr(far, nullptr, sa(no_prefix), 2000), -1);  // no GID of its subnet prefix
  EXPECT_EQ(errno, ENODEV);

  ASSERT_EQ(rdma_resolve_addr(id, nullptr, sa(dst), 2000), 0) << strerror(errno);
  expect_and_ack(ch_, RDMA_CM_EVENT_ADDR_RESOLVED);
  const sockaddr_ib* src = as_ib(rdma_get_local_addr(id));
  ASSERT_EQ(src->sib_family, AF_IB);
  EXPECT_EQ(be64toh(src->sib_sid) & ~uint64_t(0xffff), kSidPsIb);
  EXPECT_EQ(std::memcmp(src->sib_addr.sib_raw, gid_, 16), 0);
  EXPECT_EQ(std::memcmp(rdma_get_peer_addr(id), &dst, sizeof(sockaddr_ib)), 0);  // as given
  EXPECT_EQ(ntohs(rdma_get_dst_port(id)), port);
  EXPECT_EQ(rdma_resolve_route(id, 2000), -1);
  EXPECT_EQ(errno, ENODEV);
  pollfd p{ch_->fd, POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 300), 0) << "an event after a failed rdma_resolve_route";
  EXPECT_EQ(rdma_resolve_route(id, 2000), -1);  // still address-resolved
  EXPECT_EQ(errno, ENODEV);
  rdma_conn_param cp{};
  EXPECT_EQ(rdma_connect(id, &cp), -1);
  EXPECT_EQ(errno, EINVAL);
}

// An AF_IB listener on the zero GID matches IP requests
// (cma_match_private_data) but refuses them over RoCE: its new id is AF_IB
// (cma_save_net_info with the listener's family), for which
// cma_ib_acquire_dev finds no GID (rdma_ip2gid: AF_INET and AF_INET6 only),
// so the CM answers a REQ with a REJ 28 (consumer defined) and a SIDR REQ
// with a SIDR REP "reject" (2, UNREACHABLE), at once, and the listener
// hears nothing.
TEST_F(RdmaCmAfIb, AnAfIbListenerRefusesIpRequests) {
  struct Case {
    const char* ip;
    rdma_port_space ps;
  };
  for (const Case& c : {Case{"127.0.0.1", RDMA_PS_TCP}, Case{"::1", RDMA_PS_TCP}, Case{"127.0.0.1", RDMA_PS_UDP},
                        Case{"::1", RDMA_PS_UDP}}) {
    const bool ud = c.ps == RDMA_PS_UDP;
    SCOPED_TRACE(std::string(c.ip) + (ud ? " UDP" : " TCP"));
    rdma_event_channel* quiet = rdma_create_event_channel();  // the listener's own
    ASSERT_NE(quiet, nullptr);
    uint16_t port = 0;
    rdma_cm_id* l = ib_listener(ud ? RDMA_IB_IP_PS_UDP : kSidPsTcp, &port, quiet);
    ASSERT_NE(l, nullptr);
    rdma_cm_id* ip = resolved(c.ip, port, c.ps);
    const char hello[] = "hello over IP";
    rdma_conn_param p{};
    p.private_data = hello;
    p.private_data_len = sizeof(hello);
    timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ASSERT_EQ(rdma_connect(ip, &p), 0) << strerror(errno);
    rdma_cm_event* ev = expect_event(ch_, ud ? RDMA_CM_EVENT_UNREACHABLE : RDMA_CM_EVENT_REJECTED);
    ASSERT_NE(ev, nullptr);
    EXPECT_LT(ms_since(t0), 3000) << "not the first request's answer (the CM sends again after ~4 s)";
    EXPECT_EQ(ev->id, ip);
    EXPECT_EQ(ev->status, ud ? 2 : 28);  // IB_SIDR_REJECT, IB_CM_REJ_CONSUMER_DEFINED
    rdma_ack_cm_event(ev);
    pollfd q[2] = {{quiet->fd, POLLIN, 0}, {ch_->fd, POLLIN, 0}};
    EXPECT_EQ(poll(q, 2, 500), 0) << "an event after the refusal (listener " << q[0].revents << ")";
    // The listener's channel, non-blocking: nothing queued.
    ASSERT_EQ(fcntl(quiet->fd, F_SETFL, fcntl(quiet->fd, F_GETFL) | O_NONBLOCK), 0);
    rdma_cm_event* none = nullptr;
    EXPECT_EQ(rdma_get_cm_event(quiet, &none), -1);
    EXPECT_EQ(errno, EAGAIN);
    EXPECT_EQ(rdma_destroy_id(l), 0);
    rdma_destroy_event_channel(quiet);
  }
}

// rdma_getaddrinfo with AF_IB hints, RAI_FAMILY and RAI_NUMERICHOST: the
// numeric host as a GID and the port space and port as the service ID with
// its mask (rdma-core's ucma_convert_in6, ucma_set_sid).
TEST_F(RdmaCmAfIb, GetAddrInfoGivesAfIbAddresses) {
  rdma_addrinfo hints{}, *res = nullptr;
  hints.ai_flags = RAI_FAMILY | RAI_NUMERICHOST;
  hints.ai_family = AF_IB;
  hints.ai_port_space = RDMA_PS_IB;
  hints.ai_qp_type = IBV_QPT_RC;
  ASSERT_EQ(rdma_getaddrinfo("::ffff:127.0.0.1", "7471", &hints, &res), 0);
  EXPECT_EQ(res->ai_family, AF_IB);
  ASSERT_NE(res->ai_dst_addr, nullptr);
  ASSERT_EQ(res->ai_dst_len, socklen_t(sizeof(sockaddr_ib)));
  const sockaddr_ib* ib = as_ib(res->ai_dst_addr);
  EXPECT_EQ(ib->sib_family, AF_IB);
  EXPECT_EQ(be64toh(ib->sib_sid), kSidPsIb | 7471);
  EXPECT_EQ(be64toh(ib->sib_sid_mask), ~uint64_t(0));
  const uint8_t mapped[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1};
  EXPECT_EQ(std::memcmp(ib->sib_addr.sib_raw, mapped, 16), 0);
  rdma_freeaddrinfo(res);
  hints.ai_flags |= RAI_PASSIVE;  // a passive one: the source
  ASSERT_EQ(rdma_getaddrinfo("::ffff:127.0.0.1", nullptr, &hints, &res), 0);
  ASSERT_NE(res->ai_src_addr, nullptr);
  EXPECT_EQ(res->ai_src_addr->sa_family, AF_IB);
  EXPECT_EQ(be64toh(as_ib(res->ai_src_addr)->sib_sid_mask), RDMA_IB_IP_PS_MASK);  // no port: any
  rdma_freeaddrinfo(res);
  hints.ai_flags = RAI_NUMERICHOST;  // without RAI_FAMILY: an IP address
  ASSERT_EQ(rdma_getaddrinfo("::1", "7471", &hints, &res), 0);
  EXPECT_EQ(res->ai_family, AF_INET6);
  EXPECT_EQ(res->ai_dst_addr->sa_family, AF_INET6);
  rdma_freeaddrinfo(res);
}

TEST_F(RdmaCm, RsocketsFailCleanly) {
  EXPECT_EQ(rsocket(AF_INET, SOCK_STREAM, 0), -1);
  EXPECT_EQ(errno, ENOSYS);
}

}  // namespace

int main(int argc, char** argv) {
  if (const char* port = getenv("RDMACM_EVENTS_CONNECT_PORT")) return connect_and_wait(uint16_t(atoi(port)));
  // rdmacm_events slow-server|slow-client ADDRESS PORT DELAY_MS
  if (argc == 5 && (std::strcmp(argv[1], "slow-server") == 0 || std::strcmp(argv[1], "slow-client") == 0)) {
    const uint16_t port = uint16_t(atoi(argv[3]));
    const int delay_ms = atoi(argv[4]);
    return argv[1][5] == 's' ? slow_server(argv[2], port, delay_ms) : slow_client(argv[2], port, delay_ms);
  }
  // rdmacm_events addr-change ADDRESS OTHER_ADDRESS PORT
  if (argc == 5 && std::strcmp(argv[1], "addr-change") == 0) return addr_change(argv[2], argv[3], uint16_t(atoi(argv[4])));
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
