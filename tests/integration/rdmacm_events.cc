// rdma_cm's event sequences through a real engine: linked against the
// system's librdmacm and libibverbs, run under `uroce run` (rdmacm_test.sh)
// so both resolve to uroce's drop-ins. Each case states what the kernel's
// rdma_cm gives for the same calls (drivers/infiniband/core/cma.c). AF_IB
// addresses: rdmacm_events_afib.cc. The helper modes (slow ends, a client
// to kill, ADDR_CHANGE) and main() are here.
#include "tests/integration/rdmacm_events.h"

namespace {

using namespace rdmacm_test;

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
