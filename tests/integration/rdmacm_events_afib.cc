// rdma_cm with AF_IB addresses (struct sockaddr_ib) through a real engine,
// as rdmacm_events.cc (whose main() runs these too).
#include "tests/integration/rdmacm_events.h"

namespace rdmacm_test {
namespace {

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

}  // namespace
}  // namespace rdmacm_test
