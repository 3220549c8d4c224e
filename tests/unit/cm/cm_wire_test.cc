// The CM agent's remote half (cm/cm_wire.cc): two agents, as two
// engines, whose MADs the test carries by hand (or loses), with a clock of
// its own. The REQ of a Linux peer is built byte by byte from IBA table 106
// and cma.c's struct cma_hdr, not with cm/cm_mad.h, so the table is
// checked against the spec as well as against itself.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <deque>
#include <optional>

#include "cm/cm_agent.h"
#include "cm/cm_test_util.h"
#include "device/objects.h"

namespace uroce::cm {
namespace {


using namespace cm_test;

struct SentMad {
  uint8_t dgid[16];
  uint8_t sgid_index;
  mad::Mad mad;
  uint16_t attr() const { return mad.hdr.attr_id; }
};

// One engine: its agent, its GID, one client with one channel, and the
// MADs its agent sent.
struct Engine {
  Engine(const char* ip, uint64_t* clock) {
    inet_pton(AF_INET, ip, ip4.data());
    info.gids[0].valid = 1;
    std::memcpy(info.gids[0].gid, kMapped, 12);
    std::memcpy(info.gids[0].gid + 12, ip4.data(), 4);
    info.node_guid = htobe64(0x0275720000000001ull + ip4[3]);
    info.port.active_mtu = IBV_MTU_1024;
    CmWire w;
    w.send = [this](const uint8_t* dgid, uint8_t sgid_index, const mad::Mad& m) {
      SentMad s;
      std::memcpy(s.dgid, dgid, 16);
      s.sgid_index = sgid_index;
      s.mad = m;
      out.push_back(s);
    };
    w.has_route = [] { return true; };
    w.neighbour_known = [this](const uint8_t*, bool solicit) {
      solicits += solicit;
      return neighbour_up;
    };
    w.now_ns = [clock] { return *clock; };
    agent.attach_wire(w);
    int fds[2];
    EXPECT_EQ(pipe2(fds, O_NONBLOCK), 0);
    read_fd = fds[0];
    EXPECT_EQ(agent.create_channel(&owner, fds[1], &channel), 0);
  }
  ~Engine() { close(read_fd); }
  const uint8_t* gid() const { return info.gids[0].gid; }

  uint64_t new_id(uint32_t ps = kPsTcp) {
    uint64_t h = 0;
    EXPECT_EQ(agent.create_id(&owner, {channel, ps, ps == kPsUdp ? IBV_QPT_UD : IBV_QPT_RC}, &h), 0);
    return h;
  }
  uint64_t listen(uint16_t port, uint32_t ps = kPsTcp) {
    const uint64_t l = new_id(ps);
    abi::CmBindReply rep{};
    EXPECT_EQ(agent.bind(&owner, {l, v4("0.0.0.0", port), 0, 0, {}}, &rep), 0);
    EXPECT_EQ(agent.listen(&owner, l, 1), 0);
    return l;
  }
  std::optional<abi::CmEventRecord> event() {
    abi::CmEventRecord r;
    if (read(read_fd, &r, sizeof(r)) != ssize_t(sizeof(r))) return std::nullopt;
    return r;
  }
  uint32_t next_type() {
    auto e = event();
    return e ? e->event : ~0u;
  }
  // An id resolved to ip:port beyond the engine, its two events read.
  uint64_t resolved(const char* ip, uint16_t port, uint32_t ps = kPsTcp) {
    const uint64_t id = new_id(ps);
    abi::CmResolveAddrRequest r{};
    r.id = id;
    r.dst = v4(ip, port);
    abi::CmBindReply rep{};
    EXPECT_EQ(agent.resolve_addr(&owner, r, &rep), 0);
    EXPECT_EQ(next_type(), kAddrResolved);
    EXPECT_EQ(std::memcmp(rep.addr.addr, ip4.data(), 4), 0);  // the source is our --ip
    EXPECT_EQ(agent.resolve_route(&owner, id), 0);
    EXPECT_EQ(next_type(), kRouteResolved);
    return id;
  }
  SentMad take() {
    EXPECT_FALSE(out.empty());
    if (out.empty()) return {};
    SentMad s = out.front();
    out.pop_front();
    return s;
  }

  static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  std::array<uint8_t, 4> ip4{};
  std::array<uint8_t, 16> ip6{};
  abi::DeviceInfo info{};
  CmAgent agent{ip4, ip6, info};
  Owner owner;
  int read_fd = -1;
  uint64_t channel = 0;
  std::deque<SentMad> out;
  bool neighbour_up = true;  // the ARP/NDP cache knows every peer
  int solicits = 0;
};

class CmWireTest : public ::testing::Test {
 protected:
  // The next MAD `from` sent, delivered to `to` as the GSI would (the
  // sender's GID from the IP source); returns it.
  SentMad carry(Engine& from, Engine& to) {
    SentMad s = from.take();
    EXPECT_EQ(std::memcmp(s.dgid, to.gid(), 16), 0);
    to.agent.receive_mad(from.gid(), to.gid(), s.mad);
    return s;
  }
  abi::CmConnectRequest conn(uint64_t id, uint32_t qpn, uint32_t psn, const char* priv = nullptr) {
    abi::CmConnectRequest r{};
    r.id = id;
    r.param.qp_num = qpn;
    r.param.psn = psn;
    r.param.responder_resources = 4;
    r.param.initiator_depth = 2;
    r.param.retry_count = 7;
    r.param.rnr_retry_count = 6;
    r.param.qkey = 0x01234567;
    if (priv) {
      r.param.private_data_len = uint8_t(std::strlen(priv) + 1);
      std::memcpy(r.param.private_data, priv, r.param.private_data_len);
    }
    return r;
  }
  // a's id `active` connects to b's listener: its REQ carried to b, b's
  // CONNECT_REQUEST event read (nullopt if none came).
  std::optional<abi::CmEventRecord> requested(uint64_t active, uint32_t psn = 1) {
    EXPECT_EQ(a_.agent.connect(&a_.owner, conn(active, 0x11, psn)), 0);
    EXPECT_EQ(carry(a_, b_).attr(), uint16_t(mad::Attr::kReq));
    auto req = b_.event();
    EXPECT_TRUE(req && req->event == kConnectRequest);
    return req;
  }
  // a's id connected to b's listener on port through REQ, REP, RTU; returns
  // b's id.
  uint64_t connected(uint64_t active, uint16_t port) {
    auto req = requested(active, 0x100);
    if (!req) return 0;
    accepted(active, req->id);
    (void)port;
    return req->id;
  }
  // b's passive id accepts a's request: REP, RTU, both ends up.
  void accepted(uint64_t active, uint64_t passive) {
    EXPECT_EQ(b_.agent.accept(&b_.owner, conn(passive, 0x22, 0x200)), 0);
    EXPECT_EQ(carry(b_, a_).attr(), uint16_t(mad::Attr::kRep));
    EXPECT_EQ(a_.next_type(), kConnectResponse);
    EXPECT_EQ(a_.agent.establish(&a_.owner, active), 0);
    EXPECT_EQ(carry(a_, b_).attr(), uint16_t(mad::Attr::kRtu));
    EXPECT_EQ(b_.next_type(), kEstablished);
  }

  uint64_t now_ = 1'000'000;
  Engine a_{"10.9.0.1", &now_}, b_{"10.9.0.2", &now_};
};

TEST_F(CmWireTest, TheReqCarriesRdmaCmsServiceIdAndIpHeaderAtIbaOffsets) {
  const uint64_t id = a_.resolved("10.9.0.2", 7471);
  ASSERT_EQ(a_.agent.connect(&a_.owner, conn(id, 0xabcdef, 0x123456, "hi")), 0);
  const SentMad s = a_.take();
  const auto* b = reinterpret_cast<const uint8_t*>(&s.mad);
  EXPECT_EQ(std::memcmp(s.dgid, b_.gid(), 16), 0);
  // MAD header (IBA 13.4.2): version 1, class CM 7, class version 2, Send.
  EXPECT_EQ(b[0], 1);
  EXPECT_EQ(b[1], 7);
  EXPECT_EQ(b[2], 2);
  EXPECT_EQ(b[3], 3);
  EXPECT_EQ(b[16] << 8 | b[17], 0x0010);  // REQ
  // Service ID RDMA_IB_IP_PS_TCP | port at MAD byte 32 (table 106: 8 + 24).
  const uint8_t sid[8] = {0, 0, 0, 0, 0x01, 0x06, 7471 >> 8, 7471 & 0xff};
  EXPECT_EQ(std::memcmp(b + 32, sid, 8), 0);
  EXPECT_EQ(b[56] << 16 | b[57] << 8 | b[58], 0xabcdef);  // local QPN
  EXPECT_EQ(b[59], 4);                                    // responder resources
  EXPECT_EQ(b[63], 2);                                    // initiator depth
  EXPECT_EQ(b[68] << 16 | b[69] << 8 | b[70], 0x123456);  // starting PSN
  EXPECT_EQ(b[71] & 7, 7);                                // retry count
  EXPECT_EQ(b[72] << 8 | b[73], 0xffff);                  // P_Key
  EXPECT_EQ(b[74] >> 4, IBV_MTU_1024);                    // path MTU
  EXPECT_EQ(b[74] & 7, 6);                                // RNR retry count
  EXPECT_EQ(b[75] >> 4, 15);                              // max CM retries
  EXPECT_EQ(std::memcmp(b + 80, a_.gid(), 16), 0);        // primary local port GID
  EXPECT_EQ(std::memcmp(b + 96, b_.gid(), 16), 0);        // primary remote port GID
  // Flow label and packet rate as Linux's cma fills a RoCEv2 path
  // (cma_get_roce_udp_flow_label: sport * 31 + dport; rate 0, the port's
  // current): the word at MAD byte 112, as captured from rxe's REQs.
  const uint16_t sport = uint16_t(b[166] << 8 | b[167]);
  const uint32_t word = uint32_t(b[112]) << 24 | b[113] << 16 | b[114] << 8 | b[115];
  EXPECT_EQ(word >> 12, (sport * 31u + 7471u) & 0xfffff);
  EXPECT_EQ(word & 0x3f, 0u);
  // Private data at MAD byte 164: cma_hdr (version 0, IPv4, source port,
  // source and destination addresses in the last 4 of 16 bytes), then ours.
  EXPECT_EQ(b[164], 0);
  EXPECT_EQ(b[165], 0x40);
  EXPECT_GE(b[166] << 8 | b[167], 32768);  // the ephemeral port resolve_addr bound
  EXPECT_EQ(std::memcmp(b + 168 + 12, a_.ip4.data(), 4), 0);
  EXPECT_EQ(std::memcmp(b + 184 + 12, b_.ip4.data(), 4), 0);
  EXPECT_STREQ(reinterpret_cast<const char*>(b + 200), "hi");
}

// A REQ as Linux's cm_format_req and cma_format_hdr lay it out, byte by
// byte: the listener sees CONNECT_REQUEST with the peer's parameters, and
// accepting answers a REP to the REQ's communication ID and TID.
TEST_F(CmWireTest, ALinuxReqReachesTheListenerAndIsAnsweredWithARep) {
  const uint64_t l = b_.listen(18515);
  uint8_t mad[256] = {1, 7, 2, 3};
  const uint8_t tid[8] = {0x11, 0x22, 0x33, 0x44, 0, 0, 0, 0x05};
  std::memcpy(mad + 8, tid, 8);
  mad[17] = 0x10;                                                        // REQ
  const uint8_t comm[4] = {0xde, 0xad, 0xbe, 0xef};
  std::memcpy(mad + 24, comm, 4);                                        // local comm ID
  const uint8_t sid[8] = {0, 0, 0, 0, 0x01, 0x06, 0x48, 0x53};           // TCP port 18515
  std::memcpy(mad + 32, sid, 8);
  mad[56] = 0x00, mad[57] = 0x01, mad[58] = 0x07, mad[59] = 16;          // QPN 0x107, resp res 16
  mad[63] = 8;                                                           // initiator depth 8
  mad[67] = 20 << 3;                                                     // remote CM timeout, RC
  mad[68] = 0x0a, mad[69] = 0xbc, mad[70] = 0xde, mad[71] = 20 << 3 | 7; // PSN, timeout, retry 7
  mad[72] = mad[73] = 0xff;                                              // P_Key
  mad[74] = 3 << 4 | 7;                                                  // MTU 1024, RNR retry 7
  mad[75] = 15 << 4;                                                     // max CM retries 15
  std::memcpy(mad + 80, a_.gid(), 16);
  std::memcpy(mad + 96, b_.gid(), 16);
  mad[117] = 64;                                                         // hop limit
  mad[164] = 0, mad[165] = 0x40, mad[166] = 0xc3, mad[167] = 0x50;       // cma_hdr: v0, IPv4, port 50000
  std::memcpy(mad + 168 + 12, a_.ip4.data(), 4);
  std::memcpy(mad + 184 + 12, b_.ip4.data(), 4);
  std::memcpy(mad + 200, "linux", 6);
  mad::Mad req;
  std::memcpy(&req, mad, sizeof(req));
  b_.agent.receive_mad(a_.gid(), b_.gid(), req);

  auto e = b_.event();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->event, kConnectRequest);
  EXPECT_EQ(e->listen_id, l);
  EXPECT_EQ(e->param.qp_num, 0x107u);
  EXPECT_EQ(e->param.psn, 0x0abcdeu);
  EXPECT_EQ(e->param.responder_resources, 8);  // the REQ's initiator depth (cm_format_req_event)
  EXPECT_EQ(e->param.initiator_depth, 16);
  EXPECT_EQ(e->param.rnr_retry_count, 7);
  EXPECT_EQ(e->param.private_data_len, 56);  // 92 - sizeof(cma_hdr)
  EXPECT_STREQ(reinterpret_cast<const char*>(e->param.private_data), "linux");
  EXPECT_EQ(std::memcmp(e->peer_gid, a_.gid(), 16), 0);
  EXPECT_EQ(ntohs(e->src.port), 18515);
  EXPECT_EQ(ntohs(e->dst.port), 50000);
  EXPECT_EQ(std::memcmp(e->dst.addr, a_.ip4.data(), 4), 0);

  ASSERT_EQ(b_.agent.accept(&b_.owner, conn(e->id, 0x33, 0x777, "ok")), 0);
  const SentMad rep = b_.take();
  const auto* r = reinterpret_cast<const uint8_t*>(&rep.mad);
  EXPECT_EQ(r[17], 0x13);  // REP
  EXPECT_EQ(std::memcmp(r + 8, tid, 8), 0);
  EXPECT_EQ(std::memcmp(r + 28, comm, 4), 0);  // remote comm ID: the REQ's local one
  EXPECT_EQ(r[36] << 16 | r[37] << 8 | r[38], 0x33);
  EXPECT_EQ(r[44] << 16 | r[45] << 8 | r[46], 0x777);
  EXPECT_EQ(r[50] >> 3, 15);  // target ACK delay: local_ca_ack_delay (cm_format_rep), as rxe's
  EXPECT_STREQ(reinterpret_cast<const char*>(r + 60), "ok");
  // A repeated REQ (the REP was lost) is answered with the REP again, and
  // makes no second request.
  b_.agent.receive_mad(a_.gid(), b_.gid(), req);
  EXPECT_EQ(b_.take().attr(), uint16_t(mad::Attr::kRep));
  EXPECT_FALSE(b_.event());
}

TEST_F(CmWireTest, ConnectAndDisconnectBetweenTwoEngines) {
  b_.listen(7000);
  const uint64_t active = a_.resolved("10.9.0.2", 7000);
  const uint64_t passive = connected(active, 7000);
  EXPECT_EQ(a_.agent.next_deadline_ns(), 0u);  // nothing awaits an answer
  EXPECT_EQ(b_.agent.next_deadline_ns(), 0u);
  ASSERT_EQ(a_.agent.disconnect(&a_.owner, active), 0);
  EXPECT_EQ(carry(a_, b_).attr(), uint16_t(mad::Attr::kDreq));
  EXPECT_EQ(b_.next_type(), kDisconnected);
  EXPECT_FALSE(a_.event());  // the initiator waits for the DREP
  EXPECT_EQ(carry(b_, a_).attr(), uint16_t(mad::Attr::kDrep));
  EXPECT_EQ(a_.next_type(), kDisconnected);
  EXPECT_EQ(b_.agent.disconnect(&b_.owner, passive), 0);  // already down: nothing more
  EXPECT_TRUE(b_.out.empty());
  // Both ends in time-wait (cm.c: the packet life time + 1, 2.1 s), then
  // TIMEWAIT_EXIT, once.
  const uint64_t tw = a_.agent.timewait_ns();
  EXPECT_EQ(tw, mad::timeout_ns(19));
  EXPECT_EQ(a_.agent.next_deadline_ns(), now_ + tw);
  EXPECT_EQ(b_.agent.next_deadline_ns(), now_ + tw);
  EXPECT_FALSE(a_.agent.poll_timers(now_ + tw - 1));
  EXPECT_FALSE(a_.event());
  a_.agent.poll_timers(now_ + tw);
  b_.agent.poll_timers(now_ + tw);
  EXPECT_EQ(a_.next_type(), kTimewaitExit);
  EXPECT_EQ(b_.next_type(), kTimewaitExit);
  EXPECT_FALSE(a_.event());
  EXPECT_EQ(a_.agent.next_deadline_ns(), 0u);
  EXPECT_EQ(b_.agent.next_deadline_ns(), 0u);
}

// An id destroyed in time-wait gets nothing more; a connection refused
// never enters time-wait.
TEST_F(CmWireTest, TimewaitExitOnlyForIdsStillThere) {
  b_.listen(7013);
  const uint64_t active = a_.resolved("10.9.0.2", 7013);
  const uint64_t passive = connected(active, 7013);
  ASSERT_EQ(b_.agent.disconnect(&b_.owner, passive), 0);
  carry(b_, a_);
  carry(a_, b_);
  EXPECT_EQ(a_.next_type(), kDisconnected);
  EXPECT_EQ(b_.next_type(), kDisconnected);
  ASSERT_EQ(a_.agent.destroy_id(&a_.owner, active), 0);
  now_ += a_.agent.timewait_ns();
  a_.agent.poll_timers(now_);
  b_.agent.poll_timers(now_);
  EXPECT_FALSE(a_.event());
  EXPECT_EQ(b_.next_type(), kTimewaitExit);
  const uint64_t refused = a_.resolved("10.9.0.2", 7099);
  ASSERT_EQ(a_.agent.connect(&a_.owner, conn(refused, 0x11, 1)), 0);
  carry(a_, b_);
  carry(b_, a_);
  EXPECT_EQ(a_.next_type(), kRejected);
  EXPECT_EQ(a_.agent.next_deadline_ns(), 0u);
}

// An address of the engine goes: the ids bound to it hear ADDR_CHANGE; a
// wildcard listener (bound to no address) does not.
TEST_F(CmWireTest, AnAddressRemovedIsAnAddrChangeForItsIds) {
  const uint64_t listener = a_.listen(7014);
  const uint64_t id = a_.resolved("10.9.0.2", 7014);
  uint8_t other[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 9, 0, 77};
  a_.agent.address_removed(other);
  EXPECT_FALSE(a_.event());
  a_.agent.address_removed(a_.gid());
  auto e = a_.event();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->event, kAddrChange);
  EXPECT_EQ(e->id, id);
  EXPECT_FALSE(a_.event());
  (void)listener;
}

// AF_IB (abi::CmAddr AF_IB: a GID, a service ID) as the kernel's rdma_cm
// over RoCE: a bind to a GID is ENODEV; an AF_IB listener on the zero GID
// refuses an IP id's REQ (its IP header as from any rdma_cm client) with a
// REJ 28 and a SIDR REQ with a SIDR REP "reject" (2), and hears nothing
// (its new id, AF_IB, finds no GID: cma_ib_acquire_dev's rdma_ip2gid); an
// AF_IB id resolves its address but not its route (ENODEV), so it sends
// nothing. A REQ without the IP header (none of rdma_cm's RoCE ids sends
// one) is refused: REJ 28 where an id listens on the service ID
// (cma_ib_req_handler fails: cma_ib_acquire_dev), else 8; a SIDR REQ gets
// "reject" (2), else "unsupported" (1).
TEST_F(CmWireTest, AfIbAsTheKernelOverRoce) {
  auto ib = [](const uint8_t* gid, uint64_t sid) { return cm_ib_address(gid, sid); };
  const uint8_t zero[16] = {};
  const uint64_t at_gid = b_.new_id(kPsIb);
  abi::CmBindReply rep{};
  EXPECT_EQ(b_.agent.bind(&b_.owner, {at_gid, ib(b_.gid(), uint64_t(kPsIb) << 16 | 7100), 0, 0, {}}, &rep), ENODEV);
  for (const uint32_t ps : {kPsTcp, kPsUdp}) {
    SCOPED_TRACE(ps);
    const bool ud = ps == kPsUdp;
    const uint64_t l = b_.new_id(kPsIb);
    ASSERT_EQ(b_.agent.bind(&b_.owner, {l, ib(zero, uint64_t(ps) << 16 | 7100), 0, 0, {}}, &rep), 0);
    EXPECT_EQ(rep.addr.family, AF_IB);
    ASSERT_EQ(b_.agent.listen(&b_.owner, l, 1), 0);
    const uint64_t active = a_.resolved("10.9.0.2", 7100, ps);
    ASSERT_EQ(a_.agent.connect(&a_.owner, conn(active, 0x11, 0x100, "over IP")), 0);
    const SentMad req = carry(a_, b_);
    ASSERT_EQ(req.attr(), uint16_t(ud ? mad::Attr::kSidrReq : mad::Attr::kReq));
    const uint8_t* data = mad::at(req.mad, ud ? mad::sidr_req::kPrivateData : mad::req::kPrivateData);
    EXPECT_EQ(data[0], 0);     // cma_hdr: version 0,
    EXPECT_EQ(data[1], 0x40);  // IPv4
    EXPECT_FALSE(b_.event());         // the listener hears nothing
    const SentMad answer = carry(b_, a_);
    EXPECT_TRUE(b_.out.empty());
    if (ud) {
      ASSERT_EQ(answer.attr(), uint16_t(mad::Attr::kSidrRep));
      EXPECT_EQ(mad::get(answer.mad, mad::sidr_rep::kStatus), uint64_t(2));  // IB_SIDR_REJECT
    } else {
      ASSERT_EQ(answer.attr(), uint16_t(mad::Attr::kRej));
      EXPECT_EQ(mad::get(answer.mad, mad::rej::kReason), uint64_t(28));  // IB_CM_REJ_CONSUMER_DEFINED
    }
    auto e = a_.event();
    ASSERT_TRUE(e);
    EXPECT_EQ(e->id, active);
    EXPECT_EQ(e->event, ud ? kUnreachable : kRejected);
    EXPECT_EQ(e->status, ud ? 2 : 28);
    EXPECT_EQ(a_.agent.next_deadline_ns(), 0u);  // nothing left to send again
    EXPECT_EQ(b_.agent.next_deadline_ns(), 0u);
  }

  const uint64_t ib_id = a_.new_id(kPsIb);
  abi::CmResolveAddrRequest r{};
  r.id = ib_id;
  r.dst = ib(b_.gid(), uint64_t(kPsTcp) << 16 | 7100);
  abi::CmBindReply src{};
  ASSERT_EQ(a_.agent.resolve_addr(&a_.owner, r, &src), 0);
  EXPECT_EQ(src.addr.family, AF_IB);
  EXPECT_EQ(std::memcmp(src.addr.addr, a_.gid(), 16), 0);
  EXPECT_EQ(a_.next_type(), kAddrResolved);
  EXPECT_EQ(a_.agent.resolve_route(&a_.owner, ib_id), ENODEV);
  EXPECT_FALSE(a_.event());
  EXPECT_EQ(a_.agent.connect(&a_.owner, conn(ib_id, 0x12, 0x200)), EINVAL);

  // An IP REQ with its header taken away, to the AF_IB listener's service
  // ID, then to one nobody listens on.
  const uint64_t again = a_.resolved("10.9.0.2", 7100);
  ASSERT_EQ(a_.agent.connect(&a_.owner, conn(again, 0x13, 0x300)), 0);
  SentMad req = a_.take();
  auto strip = [](SentMad& m) { std::memset(reinterpret_cast<uint8_t*>(&m.mad) + 164, 0xee, 36); };
  strip(req);
  b_.agent.receive_mad(a_.gid(), b_.gid(), req.mad);
  EXPECT_FALSE(b_.event());
  SentMad rej = b_.take();
  ASSERT_EQ(rej.attr(), uint16_t(mad::Attr::kRej));
  EXPECT_EQ(mad::get(rej.mad, mad::rej::kReason), uint64_t(28));  // IB_CM_REJ_CONSUMER_DEFINED
  mad::set(req.mad, mad::req::kServiceId, uint64_t(kPsTcp) << 16 | 7199);
  mad::set(req.mad, mad::req::kLocalQpn, 0x14);
  b_.agent.receive_mad(a_.gid(), b_.gid(), req.mad);
  EXPECT_FALSE(b_.event());
  rej = b_.take();
  ASSERT_EQ(rej.attr(), uint16_t(mad::Attr::kRej));
  EXPECT_EQ(mad::get(rej.mad, mad::rej::kReason), uint64_t(8));  // IB_CM_REJ_INVALID_SERVICE_ID
}

// A REQ from a QP that a connection still holds is stale (its sender lost
// that connection): REJ 10 and the old connection ended with a DREQ, as
// cm_match_req. Once that connection is in time-wait the QPN may connect
// again (Linux's CM keeps nothing of a connection in time-wait).
TEST_F(CmWireTest, AReqFromAQpAConnectionStillHoldsIsStale) {
  b_.listen(7020);
  const uint64_t old_active = a_.resolved("10.9.0.2", 7020);
  connected(old_active, 7020);  // a's QP 0x11
  const uint64_t again = a_.resolved("10.9.0.2", 7020);
  ASSERT_EQ(a_.agent.connect(&a_.owner, conn(again, 0x11, 0x300)), 0);
  EXPECT_EQ(carry(a_, b_).attr(), uint16_t(mad::Attr::kReq));
  EXPECT_FALSE(b_.event());  // no CONNECT_REQUEST
  const SentMad rej = carry(b_, a_);
  ASSERT_EQ(rej.attr(), uint16_t(mad::Attr::kRej));
  EXPECT_EQ(mad::get(rej.mad, mad::rej::kReason), uint64_t(10));  // IB_CM_REJ_STALE_CONN
  auto e = a_.event();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->id, again);
  EXPECT_EQ(e->event, kRejected);
  EXPECT_EQ(e->status, 10);
  // The old connection ends: b's DREQ, a's DREP, DISCONNECTED at both ends.
  EXPECT_EQ(carry(b_, a_).attr(), uint16_t(mad::Attr::kDreq));
  auto d = a_.event();
  ASSERT_TRUE(d);
  EXPECT_EQ(d->id, old_active);
  EXPECT_EQ(d->event, kDisconnected);
  EXPECT_EQ(carry(a_, b_).attr(), uint16_t(mad::Attr::kDrep));
  EXPECT_EQ(b_.next_type(), kDisconnected);
  // In time-wait: the QPN's next REQ is a request like any other.
  const uint64_t third = a_.resolved("10.9.0.2", 7020);
  ASSERT_EQ(a_.agent.connect(&a_.owner, conn(third, 0x11, 0x400)), 0);
  EXPECT_EQ(carry(a_, b_).attr(), uint16_t(mad::Attr::kReq));
  EXPECT_EQ(b_.next_type(), kConnectRequest);
}

TEST_F(CmWireTest, APortNobodyListensOnIsRejectedInvalidServiceId) {
  const uint64_t id = a_.resolved("10.9.0.2", 7001);
  ASSERT_EQ(a_.agent.connect(&a_.owner, conn(id, 0x11, 1)), 0);
  carry(a_, b_);
  EXPECT_EQ(carry(b_, a_).attr(), uint16_t(mad::Attr::kRej));
  auto e = a_.event();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->event, kRejected);
  EXPECT_EQ(e->status, 8);  // IB_CM_REJ_INVALID_SERVICE_ID
  EXPECT_EQ(a_.agent.next_deadline_ns(), 0u);
}

TEST_F(CmWireTest, ARejectCarriesItsPrivateData) {
  b_.listen(7002);
  auto req = requested(a_.resolved("10.9.0.2", 7002));
  ASSERT_TRUE(req);
  abi::CmRejectRequest rej{};
  rej.id = req->id;
  rej.private_data_len = 3;
  std::memcpy(rej.private_data, "no", 3);
  ASSERT_EQ(b_.agent.reject(&b_.owner, rej), 0);
  carry(b_, a_);
  auto e = a_.event();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->event, kRejected);
  EXPECT_EQ(e->status, 28);  // IB_CM_REJ_CONSUMER_DEFINED
  EXPECT_STREQ(reinterpret_cast<const char*>(e->param.private_data), "no");
}

// A REQ nobody answers is sent again at each CM response timeout,
// max_cm_retries times, then the connect is UNREACHABLE (-ETIMEDOUT).
TEST_F(CmWireTest, AnUnansweredReqIsRetriedThenUnreachable) {
  const uint64_t id = a_.resolved("10.9.0.3", 7003);
  ASSERT_EQ(a_.agent.connect(&a_.owner, conn(id, 0x11, 1)), 0);
  const SentMad first = a_.take();
  const uint64_t interval = a_.agent.next_deadline_ns() - now_;
  EXPECT_EQ(interval, 2 * mad::timeout_ns(18) + mad::timeout_ns(20));  // 6.4 s, as cm.c's timeout_ms
  EXPECT_FALSE(a_.agent.poll_timers(now_ + interval - 1));
  EXPECT_TRUE(a_.out.empty());
  for (int i = 0; i < 15; ++i) {
    now_ = a_.agent.next_deadline_ns();
    EXPECT_TRUE(a_.agent.poll_timers(now_));
    ASSERT_EQ(a_.out.size(), 1u);
    const SentMad again = a_.take();
    EXPECT_EQ(std::memcmp(&again.mad, &first.mad, sizeof(first.mad)), 0);
    EXPECT_FALSE(a_.event());
  }
  now_ = a_.agent.next_deadline_ns();
  EXPECT_TRUE(a_.agent.poll_timers(now_));
  EXPECT_TRUE(a_.out.empty());
  auto e = a_.event();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->event, kUnreachable);
  EXPECT_EQ(e->status, -ETIMEDOUT);
  EXPECT_EQ(a_.agent.next_deadline_ns(), 0u);
  EXPECT_EQ(a_.agent.wire_counters().mads_retransmitted, 15u);
  EXPECT_EQ(a_.agent.wire_counters().timeouts, 1u);
}

// An MRA (the peer needs longer) holds the REQ's retries back.
TEST_F(CmWireTest, AnMraPostponesTheRetry) {
  const uint64_t id = a_.resolved("10.9.0.2", 7004);
  ASSERT_EQ(a_.agent.connect(&a_.owner, conn(id, 0x11, 1)), 0);
  const SentMad req = a_.take();
  const uint64_t before = a_.agent.next_deadline_ns();
  mad::Mad mra = req.mad;
  std::memset(mra.data, 0, sizeof(mra.data));
  mra.hdr.attr_id = uint16_t(mad::Attr::kMra);
  mad::set(mra, mad::mra::kRemoteCommId, mad::get(req.mad, mad::req::kLocalCommId));
  mad::set(mra, mad::mra::kServiceTimeout, 24);
  a_.agent.receive_mad(b_.gid(), a_.gid(), mra);
  EXPECT_EQ(a_.agent.next_deadline_ns(), before + mad::timeout_ns(24));
}

// A listener that has not accepted within half the REQ's Remote CM
// Response Timeout sends an MRA (service timeout 24, as rdma_cm's): the
// active side holds its REQ back that much longer, far past the retries
// that would have failed the connect, and a late accept still connects.
// A REQ sent again meanwhile is answered with the MRA again.
TEST_F(CmWireTest, ASlowAcceptSendsAnMraAndStillConnects) {
  b_.listen(7010);
  const uint64_t active = a_.resolved("10.9.0.2", 7010);
  ASSERT_EQ(a_.agent.connect(&a_.owner, conn(active, 0x11, 1)), 0);
  const uint64_t sent = now_;
  const SentMad req = carry(a_, b_);
  auto creq = b_.event();
  ASSERT_TRUE(creq && creq->event == kConnectRequest);
  const uint64_t req_retry = a_.agent.next_deadline_ns();
  EXPECT_EQ(b_.agent.next_deadline_ns(), sent + mad::timeout_ns(20) / 2);
  now_ = b_.agent.next_deadline_ns() - 1;
  EXPECT_FALSE(b_.agent.poll_timers(now_));
  EXPECT_TRUE(b_.out.empty());
  now_ += 1;
  EXPECT_TRUE(b_.agent.poll_timers(now_));
  const SentMad mra = carry(b_, a_);
  ASSERT_EQ(mra.attr(), uint16_t(mad::Attr::kMra));
  EXPECT_EQ(mra.mad.hdr.tid, req.mad.hdr.tid);
  EXPECT_EQ(mad::get(mra.mad, mad::mra::kRemoteCommId), mad::get(req.mad, mad::req::kLocalCommId));
  EXPECT_NE(mad::get(mra.mad, mad::mra::kLocalCommId), 0u);
  EXPECT_EQ(mad::get(mra.mad, mad::mra::kMessageMraed), 0u);  // the REQ
  EXPECT_EQ(mad::get(mra.mad, mad::mra::kServiceTimeout), 24u);
  EXPECT_EQ(b_.agent.next_deadline_ns(), 0u);  // one MRA, then only when asked again
  EXPECT_GT(a_.agent.next_deadline_ns(), req_retry + mad::timeout_ns(23));
  // Until the MRA's service timeout is over: nothing sent, no event.
  now_ = a_.agent.next_deadline_ns() - 1;
  EXPECT_FALSE(a_.agent.poll_timers(now_));
  EXPECT_TRUE(a_.out.empty());
  EXPECT_FALSE(a_.event());
  // Then the REQ goes again; still not accepted, it gets the MRA again.
  now_ += 1;
  EXPECT_TRUE(a_.agent.poll_timers(now_));
  const SentMad again = carry(a_, b_);
  EXPECT_EQ(std::memcmp(&again.mad, &req.mad, sizeof(req.mad)), 0);
  EXPECT_EQ(carry(b_, a_).attr(), uint16_t(mad::Attr::kMra));
  ASSERT_EQ(b_.agent.accept(&b_.owner, conn(creq->id, 0x22, 2)), 0);
  EXPECT_EQ(carry(b_, a_).attr(), uint16_t(mad::Attr::kRep));
  EXPECT_EQ(a_.next_type(), kConnectResponse);
  ASSERT_EQ(a_.agent.establish(&a_.owner, active), 0);
  EXPECT_EQ(carry(a_, b_).attr(), uint16_t(mad::Attr::kRtu));
  EXPECT_EQ(b_.next_type(), kEstablished);
  EXPECT_EQ(a_.agent.wire_counters().mras_received, 2u);
  EXPECT_EQ(b_.agent.wire_counters().mras_sent, 2u);
  EXPECT_EQ(a_.agent.next_deadline_ns(), 0u);
  EXPECT_EQ(b_.agent.next_deadline_ns(), 0u);
}

// An accept in time sends no MRA.
TEST_F(CmWireTest, AnAcceptInTimeSendsNoMra) {
  b_.listen(7011);
  const uint64_t active = a_.resolved("10.9.0.2", 7011);
  connected(active, 7011);
  EXPECT_EQ(a_.agent.next_deadline_ns(), 0u);
  EXPECT_EQ(b_.agent.next_deadline_ns(), 0u);
  EXPECT_EQ(b_.agent.wire_counters().mras_sent + a_.agent.wire_counters().mras_sent, 0u);
}

// The active side's application slow to establish after the REP: an MRA
// of the REP at half our Local CM Response Timeout holds the REP's retries.
TEST_F(CmWireTest, ASlowEstablishSendsAnMraOfTheRep) {
  b_.listen(7012);
  const uint64_t active = a_.resolved("10.9.0.2", 7012);
  auto creq = requested(active);
  ASSERT_TRUE(creq);
  ASSERT_EQ(b_.agent.accept(&b_.owner, conn(creq->id, 0x22, 2)), 0);
  const uint64_t rep_sent = now_;
  const SentMad rep = carry(b_, a_);
  EXPECT_EQ(a_.next_type(), kConnectResponse);
  const uint64_t rep_retry = b_.agent.next_deadline_ns();
  EXPECT_EQ(a_.agent.next_deadline_ns(), rep_sent + mad::timeout_ns(20) / 2);
  now_ = a_.agent.next_deadline_ns();
  EXPECT_TRUE(a_.agent.poll_timers(now_));
  const SentMad mra = carry(a_, b_);
  ASSERT_EQ(mra.attr(), uint16_t(mad::Attr::kMra));
  EXPECT_EQ(mad::get(mra.mad, mad::mra::kMessageMraed), 1u);  // the REP
  EXPECT_EQ(mad::get(mra.mad, mad::mra::kRemoteCommId), mad::get(rep.mad, mad::rep::kLocalCommId));
  EXPECT_GT(b_.agent.next_deadline_ns(), rep_retry + mad::timeout_ns(23));
  // The REP sent again gets the MRA again; the late establish connects.
  a_.agent.receive_mad(b_.gid(), a_.gid(), rep.mad);
  EXPECT_EQ(carry(a_, b_).attr(), uint16_t(mad::Attr::kMra));
  EXPECT_FALSE(a_.event());
  ASSERT_EQ(a_.agent.establish(&a_.owner, active), 0);
  EXPECT_EQ(carry(a_, b_).attr(), uint16_t(mad::Attr::kRtu));
  EXPECT_EQ(b_.next_type(), kEstablished);
  EXPECT_EQ(a_.agent.next_deadline_ns(), 0u);
  EXPECT_EQ(b_.agent.next_deadline_ns(), 0u);
}

// The RTU was lost: the passive side sends its REP again, and the active
// side, already established, answers with the RTU again.
TEST_F(CmWireTest, ALostRtuIsRecoveredByTheRepRetry) {
  b_.listen(7005);
  const uint64_t active = a_.resolved("10.9.0.2", 7005);
  auto req = requested(active);
  ASSERT_TRUE(req);
  ASSERT_EQ(b_.agent.accept(&b_.owner, conn(req->id, 0x22, 2)), 0);
  carry(b_, a_);
  EXPECT_EQ(a_.next_type(), kConnectResponse);
  ASSERT_EQ(a_.agent.establish(&a_.owner, active), 0);
  a_.take();  // the RTU, lost
  now_ = b_.agent.next_deadline_ns();
  EXPECT_TRUE(b_.agent.poll_timers(now_));
  EXPECT_EQ(carry(b_, a_).attr(), uint16_t(mad::Attr::kRep));
  EXPECT_FALSE(a_.event());  // no second CONNECT_RESPONSE
  EXPECT_EQ(carry(a_, b_).attr(), uint16_t(mad::Attr::kRtu));
  EXPECT_EQ(b_.next_type(), kEstablished);
  EXPECT_EQ(b_.agent.next_deadline_ns(), 0u);
}

// A client that dies disconnects: its DREQ reaches the peer, and keeps
// being sent after its id is gone until the DREP comes.
TEST_F(CmWireTest, AClientThatDiesDisconnectsItsRemotePeer) {
  b_.listen(7006);
  const uint64_t active = a_.resolved("10.9.0.2", 7006);
  connected(active, 7006);
  a_.agent.release_owner(&a_.owner);
  EXPECT_EQ(a_.agent.id_count(), 0u);
  const SentMad dreq = a_.take();
  EXPECT_EQ(dreq.attr(), uint16_t(mad::Attr::kDreq));
  now_ = a_.agent.next_deadline_ns();  // lost once
  EXPECT_TRUE(a_.agent.poll_timers(now_));
  EXPECT_EQ(carry(a_, b_).attr(), uint16_t(mad::Attr::kDreq));
  EXPECT_EQ(b_.next_type(), kDisconnected);
  carry(b_, a_);  // the DREP
  EXPECT_EQ(a_.agent.next_deadline_ns(), 0u);
}

// A connect still unanswered when its client dies is withdrawn: REJ
// "timeout" naming only the REQ's communication ID, which the passive
// side matches against the request it holds.
TEST_F(CmWireTest, AWithdrawnReqRejectsThePendingRequest) {
  b_.listen(7007);
  const uint64_t active = a_.resolved("10.9.0.2", 7007);
  ASSERT_TRUE(requested(active));
  ASSERT_EQ(a_.agent.destroy_id(&a_.owner, active), 0);
  EXPECT_EQ(carry(a_, b_).attr(), uint16_t(mad::Attr::kRej));
  auto e = b_.event();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->event, kRejected);
  EXPECT_EQ(e->status, 1);  // IB_CM_REJ_TIMEOUT
  EXPECT_EQ(a_.agent.next_deadline_ns(), 0u);
}

TEST_F(CmWireTest, SidrResolvesAUdServiceAndRefusesAnUnknownOne) {
  b_.listen(7008, kPsUdp);
  const uint64_t id = a_.resolved("10.9.0.2", 7008, kPsUdp);
  ASSERT_EQ(a_.agent.connect(&a_.owner, conn(id, 0x11, 0)), 0);
  EXPECT_EQ(carry(a_, b_).attr(), uint16_t(mad::Attr::kSidrReq));
  auto req = b_.event();
  ASSERT_TRUE(req);
  EXPECT_EQ(req->event, kConnectRequest);
  EXPECT_EQ(req->param.private_data_len, 180);  // 216 - sizeof(cma_hdr)
  ASSERT_EQ(b_.agent.accept(&b_.owner, conn(req->id, 0x44, 0)), 0);
  EXPECT_EQ(carry(b_, a_).attr(), uint16_t(mad::Attr::kSidrRep));
  auto e = a_.event();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->event, kEstablished);
  EXPECT_EQ(e->param.qp_num, 0x44u);
  EXPECT_EQ(e->param.qkey, 0x01234567u);
  EXPECT_EQ(std::memcmp(e->peer_gid, b_.gid(), 16), 0);

  const uint64_t other = a_.resolved("10.9.0.2", 7009, kPsUdp);
  ASSERT_EQ(a_.agent.connect(&a_.owner, conn(other, 0x11, 0)), 0);
  carry(a_, b_);
  carry(b_, a_);
  e = a_.event();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->event, kUnreachable);
  EXPECT_EQ(e->status, 1);  // IB_SIDR_UNSUPPORTED
}

TEST_F(CmWireTest, MadsOfAnotherClassOrForNoIdAreDropped) {
  mad::Mad m{};
  m.hdr.base_version = 1;
  m.hdr.mgmt_class = 0x03;  // subnet administration
  m.hdr.class_version = 2;
  m.hdr.method = 3;
  a_.agent.receive_mad(b_.gid(), a_.gid(), m);
  m.hdr.mgmt_class = mad::kMgmtClassCm;
  m.hdr.attr_id = uint16_t(mad::Attr::kRtu);
  a_.agent.receive_mad(b_.gid(), a_.gid(), m);  // names no id of ours
  EXPECT_EQ(a_.agent.wire_counters().mads_dropped, 2u);
  EXPECT_FALSE(a_.event());
  EXPECT_TRUE(a_.out.empty());
}

// rdma_resolve_addr to a neighbour not yet known: ARP asks for it, and
// ADDR_RESOLVED comes when the cache has it; one that never answers is
// ADDR_ERROR (EHOSTUNREACH) after a second.
TEST_F(CmWireTest, AddressResolutionWaitsForTheNeighbour) {
  a_.neighbour_up = false;
  abi::CmBindReply rep{};
  abi::CmResolveAddrRequest r{};
  r.id = a_.new_id();
  r.dst = v4("10.9.0.2", 7010);
  ASSERT_EQ(a_.agent.resolve_addr(&a_.owner, r, &rep), 0);
  EXPECT_EQ(a_.solicits, 1);
  EXPECT_FALSE(a_.event());
  now_ = a_.agent.next_deadline_ns();
  a_.agent.poll_timers(now_);
  EXPECT_FALSE(a_.event());
  a_.neighbour_up = true;  // the ARP reply came
  now_ = a_.agent.next_deadline_ns();
  a_.agent.poll_timers(now_);
  EXPECT_EQ(a_.next_type(), kAddrResolved);

  a_.neighbour_up = false;
  r.id = a_.new_id();
  ASSERT_EQ(a_.agent.resolve_addr(&a_.owner, r, &rep), 0);
  const uint64_t start = now_;
  std::optional<abi::CmEventRecord> e;
  while (!e && now_ - start < 2'000'000'000) {
    now_ = a_.agent.next_deadline_ns();
    a_.agent.poll_timers(now_);
    e = a_.event();
  }
  ASSERT_TRUE(e);
  EXPECT_EQ(e->event, 1u);  // RDMA_CM_EVENT_ADDR_ERROR
  EXPECT_EQ(e->status, -EHOSTUNREACH);
  EXPECT_GE(now_ - start, 1'000'000'000u);
  EXPECT_GE(a_.solicits, 5);  // one at once, then every 200 ms
  EXPECT_EQ(a_.agent.next_deadline_ns(), 0u);
}

}  // namespace
}  // namespace uroce::cm
