// What the rdma_cm event tests share (rdmacm_events.cc, rdmacm_events_afib.cc):
// addresses, waiting for an event, and the fixture that owns a channel and
// the ids a test makes.
#pragma once

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

namespace rdmacm_test {

inline constexpr int kWaitMs = 5000;

inline sockaddr_storage addr(const char* ip, uint16_t port) {
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
inline sockaddr* sa(sockaddr_storage& s) { return reinterpret_cast<sockaddr*>(&s); }

// An AF_IB address: a GID (written as an IPv6 address) and a service ID.
constexpr uint64_t kSidPsIb = 0x013F0000, kSidPsTcp = RDMA_IB_IP_PS_TCP;
inline sockaddr_storage ib_addr(const uint8_t* gid, uint64_t sid, uint64_t mask = ~uint64_t(0)) {
  sockaddr_storage ss{};
  auto* ib = reinterpret_cast<sockaddr_ib*>(&ss);
  ib->sib_family = AF_IB;
  ib->sib_pkey = htobe16(0xffff);
  std::memcpy(ib->sib_addr.sib_raw, gid, 16);
  ib->sib_sid = htobe64(sid);
  ib->sib_sid_mask = htobe64(mask);
  return ss;
}
inline const sockaddr_ib* as_ib(const sockaddr* a) { return reinterpret_cast<const sockaddr_ib*>(a); }

// The next event on a channel, within kWaitMs (the channel's fd is pollable).
inline rdma_cm_event* next_event(rdma_event_channel* ch) {
  pollfd p{ch->fd, POLLIN, 0};
  if (poll(&p, 1, kWaitMs) != 1) return nullptr;
  rdma_cm_event* ev = nullptr;
  return rdma_get_cm_event(ch, &ev) == 0 ? ev : nullptr;
}

// Expects the next event to be `type` and returns it (unacked), or nullptr.
inline rdma_cm_event* expect_event(rdma_event_channel* ch, rdma_cm_event_type type) {
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

inline void expect_and_ack(rdma_event_channel* ch, rdma_cm_event_type type) {
  if (rdma_cm_event* ev = expect_event(ch, type)) rdma_ack_cm_event(ev);
}

inline ibv_qp_state qp_state(ibv_qp* qp) {
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  EXPECT_EQ(ibv_query_qp(qp, &attr, IBV_QP_STATE, &init), 0);
  return attr.qp_state;
}

// Milliseconds since t0 (CLOCK_MONOTONIC).
inline int64_t ms_since(const timespec& t0) {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000;
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

}  // namespace rdmacm_test
