// The CM agent alone (cm/cm_agent.h): owners, ports, listeners and the
// events each step delivers, read back from the channels' pipes.
#include "cm/cm_agent.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <optional>

#include "cm/cm_test_util.h"
#include "device/objects.h"

namespace uroce::cm {
namespace {

using namespace cm_test;

class CmAgentTest : public ::testing::Test {
 protected:
  struct Client {
    Owner owner;
    int read_fd = -1;
    uint64_t channel = 0;
  };
  void SetUp() override {
    info_.gids[0].valid = 1;
    for (Client* c : {&a_, &b_}) {
      int fds[2];
      ASSERT_EQ(pipe2(fds, O_NONBLOCK), 0);
      c->read_fd = fds[0];
      ASSERT_EQ(cm_.create_channel(&c->owner, fds[1], &c->channel), 0);
    }
  }
  void TearDown() override {
    close(a_.read_fd);
    close(b_.read_fd);
  }
  uint64_t id_of(Client& c) {
    uint64_t h = 0;
    EXPECT_EQ(cm_.create_id(&c.owner, {c.channel, kPsTcp, IBV_QPT_RC}, &h), 0);
    return h;
  }
  std::optional<abi::CmEventRecord> event(Client& c) {
    abi::CmEventRecord r;
    if (read(c.read_fd, &r, sizeof(r)) != ssize_t(sizeof(r))) return std::nullopt;
    return r;
  }
  uint32_t next_type(Client& c) {
    auto e = event(c);
    return e ? e->event : ~0u;
  }
  uint64_t listen_on(Client& c, const char* ip, uint16_t port) {
    const uint64_t l = id_of(c);
    abi::CmBindReply rep{};
    EXPECT_EQ(cm_.bind(&c.owner, {l, v4(ip, port), 0, 0, {}}, &rep), 0);
    EXPECT_EQ(cm_.listen(&c.owner, l, 1), 0);
    return l;
  }
  // An id of c resolved to ip:port, its two events read.
  uint64_t resolved(Client& c, const char* ip, uint16_t port) {
    const uint64_t id = id_of(c);
    abi::CmResolveAddrRequest r{};
    r.id = id;
    r.dst = v4(ip, port);
    abi::CmBindReply rep{};
    EXPECT_EQ(cm_.resolve_addr(&c.owner, r, &rep), 0);
    EXPECT_EQ(next_type(c), kAddrResolved);
    EXPECT_EQ(cm_.resolve_route(&c.owner, id), 0);
    EXPECT_EQ(next_type(c), kRouteResolved);
    return id;
  }
  // b's id connects to a's listener on port; returns a's new id.
  uint64_t request(uint64_t active, Client& server) {
    abi::CmConnectRequest req{};
    req.id = active;
    req.param.qp_num = 0x11;
    req.param.initiator_depth = 3;
    req.param.responder_resources = 1;
    EXPECT_EQ(cm_.connect(&b_.owner, req), 0);
    auto e = event(server);
    EXPECT_TRUE(e && e->event == kConnectRequest);
    if (!e) return 0;
    // Seen from the passive side: the REQ's initiator depth is what it may
    // answer with responder resources (cm_format_req_event).
    EXPECT_EQ(e->param.responder_resources, 3);
    EXPECT_EQ(e->param.initiator_depth, 1);
    EXPECT_EQ(e->param.qp_num, 0x11u);
    return e->id;
  }

  std::array<uint8_t, 4> ip_{127, 0, 0, 1};
  std::array<uint8_t, 16> ip6_{};
  abi::DeviceInfo info_{};
  CmAgent cm_{ip_, ip6_, info_};
  Client a_, b_;
};

TEST_F(CmAgentTest, AnotherOwnersHandlesAreNotFound) {
  const uint64_t id = id_of(a_);
  EXPECT_EQ(cm_.destroy_id(&b_.owner, id), ENOENT);
  EXPECT_EQ(cm_.resolve_route(&b_.owner, id), ENOENT);
  uint64_t h;
  EXPECT_EQ(cm_.create_id(&b_.owner, {a_.channel, kPsTcp, IBV_QPT_RC}, &h), ENOENT);
  EXPECT_EQ(cm_.destroy_channel(&a_.owner, a_.channel), EBUSY);  // its id uses it
  EXPECT_EQ(cm_.destroy_id(&a_.owner, id), 0);
}

// A wildcard listener takes connections to every address of the engine, and
// leaves no room for a specific bind on its port (cma_check_port).
TEST_F(CmAgentTest, AWildcardListenerTakesEveryLocalAddress) {
  const uint64_t l = listen_on(a_, "0.0.0.0", 7000);
  const uint64_t other = id_of(b_);
  abi::CmBindReply rep{};
  EXPECT_EQ(cm_.bind(&b_.owner, {other, v4("127.0.0.1", 7000), 0, 0, {}}, &rep), EADDRNOTAVAIL);
  for (const char* ip : {"127.0.0.1", "127.0.0.2"}) {
    const uint64_t active = resolved(b_, ip, 7000);
    abi::CmConnectRequest req{};
    req.id = active;
    ASSERT_EQ(cm_.connect(&b_.owner, req), 0);
    auto e = event(a_);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->event, kConnectRequest);
    EXPECT_EQ(e->listen_id, l);
    EXPECT_EQ(e->src.addr[3], ip[8] - '0');  // the new id's address is the one connected to
  }
}

TEST_F(CmAgentTest, TheFullExchangeDeliversEachStepToTheOtherSide) {
  listen_on(a_, "127.0.0.1", 7001);
  const uint64_t active = resolved(b_, "127.0.0.1", 7001);
  const uint64_t passive = request(active, a_);
  abi::CmConnectRequest rep{};
  rep.id = passive;
  rep.param.qp_num = 0x22;
  rep.param.psn = 0x1234;
  ASSERT_EQ(cm_.accept(&a_.owner, rep), 0);
  auto e = event(b_);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->event, kConnectResponse);
  EXPECT_EQ(e->param.qp_num, 0x22u);
  EXPECT_EQ(e->param.psn, 0x1234u);
  ASSERT_EQ(cm_.establish(&b_.owner, active), 0);  // RTU
  EXPECT_EQ(next_type(a_), kEstablished);
  ASSERT_EQ(cm_.disconnect(&a_.owner, passive), 0);
  EXPECT_EQ(next_type(b_), kDisconnected);  // DREQ
  EXPECT_EQ(next_type(a_), kDisconnected);  // DREP
  EXPECT_EQ(cm_.disconnect(&b_.owner, active), 0);  // already down: nothing more
  EXPECT_FALSE(event(a_));
  EXPECT_FALSE(event(b_));
}

// The owner's process died: a request it had not answered is refused, a
// connection it had up is disconnected, and its ids are gone.
TEST_F(CmAgentTest, ReleasingAnOwnerEndsItsConnectionsForThePeers) {
  listen_on(a_, "127.0.0.1", 7002);
  const uint64_t pending = resolved(b_, "127.0.0.1", 7002);
  request(pending, a_);
  const uint64_t up = resolved(b_, "127.0.0.1", 7002);
  const uint64_t passive = request(up, a_);
  abi::CmConnectRequest rep{};
  rep.id = passive;
  ASSERT_EQ(cm_.accept(&a_.owner, rep), 0);
  EXPECT_EQ(next_type(b_), kConnectResponse);
  ASSERT_EQ(cm_.establish(&b_.owner, up), 0);
  EXPECT_EQ(next_type(a_), kEstablished);
  const size_t before = cm_.id_count();
  cm_.release_owner(&a_.owner);
  EXPECT_EQ(cm_.id_count(), before - 3);  // the listener and its two requests
  auto first = event(b_), second = event(b_);
  ASSERT_TRUE(first && second);
  for (const auto& e : {*first, *second}) {
    if (e.id == pending) {
      EXPECT_EQ(e.event, kRejected);
      EXPECT_EQ(e.status, 28);  // IB_CM_REJ_CONSUMER_DEFINED
    } else {
      EXPECT_EQ(e.id, up);
      EXPECT_EQ(e.event, kDisconnected);
    }
  }
}

TEST_F(CmAgentTest, AChannelNobodyReadsLosesEventsNotTheEnginesTime) {
  const uint64_t id = id_of(a_);
  abi::CmResolveAddrRequest r{};
  r.id = id;
  r.dst = v4("127.0.0.1", 1);
  abi::CmBindReply rep{};
  ASSERT_EQ(cm_.resolve_addr(&a_.owner, r, &rep), 0);
  // The pipe holds 256 KiB: far fewer route events than these.
  for (int i = 0; i < 5000; ++i) ASSERT_EQ(cm_.resolve_route(&a_.owner, id), 0);
  EXPECT_GT(cm_.events_dropped(), 0u);
}

}  // namespace
}  // namespace uroce::cm
