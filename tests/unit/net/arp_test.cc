// Tests for net/arp.cc: frames against hand-built bytes, RFC 826 reception
// (learning, answering), table aging and eviction, and the pending-frame
// policy.
#include "net/arp.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace uroce::net {
namespace {

const MacAddr kOurMac = {0x02, 0x00, 0x00, 0x00, 0x00, 0x01};
const Ipv4Addr kOurIp = {10, 200, 0, 1};
const MacAddr kPeerMac = {0x02, 0x00, 0x00, 0x00, 0x00, 0x02};
const Ipv4Addr kPeerIp = {10, 200, 0, 2};
const Ipv4Addr kOtherIp = {10, 200, 0, 3};
constexpr uint64_t kSec = 1'000'000'000;

std::vector<uint8_t> bytes(const Packet& p) { return {p.data, p.data + p.len}; }

// The request "who has 10.200.0.2? tell 10.200.0.1" from 02:00:00:00:00:01,
// byte by byte (RFC 826 packet format, Ethernet II framing).
const std::vector<uint8_t> kRequestFrame = {
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff,  // destination: broadcast
    0x02, 0x00, 0x00, 0x00, 0x00, 0x01,  // source
    0x08, 0x06,                          // EtherType ARP
    0x00, 0x01,                          // ar$hrd: Ethernet
    0x08, 0x00,                          // ar$pro: IPv4
    0x06, 0x04,                          // ar$hln, ar$pln
    0x00, 0x01,                          // ar$op: request
    0x02, 0x00, 0x00, 0x00, 0x00, 0x01,  // ar$sha
    10,   200,  0,    1,                 // ar$spa
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // ar$tha: unknown
    10,   200,  0,    2,                 // ar$tpa
    0,    0,    0,    0,    0,    0,    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};  // pad to 60

// "10.200.0.1 is at 02:00:00:00:00:01", to 02:00:00:00:00:02 / 10.200.0.2.
const std::vector<uint8_t> kReplyFrame = {
    0x02, 0x00, 0x00, 0x00, 0x00, 0x02,  // destination: the asker
    0x02, 0x00, 0x00, 0x00, 0x00, 0x01,  // source
    0x08, 0x06, 0x00, 0x01, 0x08, 0x00, 0x06, 0x04,
    0x00, 0x02,                          // ar$op: reply
    0x02, 0x00, 0x00, 0x00, 0x00, 0x01,  // ar$sha: us
    10,   200,  0,    1,                 // ar$spa
    0x02, 0x00, 0x00, 0x00, 0x00, 0x02,  // ar$tha: the asker
    10,   200,  0,    2,                 // ar$tpa
    0,    0,    0,    0,    0,    0,    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};

std::unique_ptr<Packet> frame(const std::vector<uint8_t>& b) {
  auto p = std::make_unique<Packet>();
  std::copy(b.begin(), b.end(), p->data);
  p->len = uint32_t(b.size());
  return p;
}

// A request from the peer asking for `target`.
std::unique_ptr<Packet> peer_request(const Ipv4Addr& target, const MacAddr& mac = kPeerMac,
                                     const Ipv4Addr& ip = kPeerIp) {
  auto p = std::make_unique<Packet>();
  build_arp_request(*p, mac, ip, target);
  return p;
}

TEST(ArpFrame, RequestMatchesHandBuiltBytes) {
  Packet p;
  build_arp_request(p, kOurMac, kOurIp, kPeerIp);
  EXPECT_EQ(bytes(p), kRequestFrame);
  EXPECT_EQ(p.len, kArpFrameLen);
  EXPECT_TRUE(is_arp_frame(p));
}

TEST(ArpFrame, ReplyMatchesHandBuiltBytes) {
  Packet p;
  build_arp_reply(p, kOurMac, kOurIp, kPeerMac, kPeerIp);
  EXPECT_EQ(bytes(p), kReplyFrame);
}

TEST(ArpFrame, RoceFrameIsNotArp) {
  Packet p;
  begin_roce_packet(p, 0x04);
  finish_roce_packet(p, Route{});
  EXPECT_FALSE(is_arp_frame(p));
}

TEST(ArpTable, AnswersRequestForOurAddressAndLearnsTheSender) {
  ArpTable t;
  // The peer's request, as the hand-built request seen from the other side.
  auto req = peer_request(kOurIp);
  Packet reply;
  ASSERT_TRUE(t.handle(*req, kOurMac, kOurIp, 5 * kSec, &reply));
  Packet expected;
  build_arp_reply(expected, kOurMac, kOurIp, kPeerMac, kPeerIp);
  EXPECT_EQ(bytes(reply), bytes(expected));
  ASSERT_EQ(t.lookup(kPeerIp, 5 * kSec), kPeerMac);
  EXPECT_EQ(t.counters().requests_answered, 1u);
  EXPECT_EQ(t.counters().learned, 1u);
}

TEST(ArpTable, TheReplyToOurRequestIsLearntAndNotAnswered) {
  ArpTable t;
  // The peer's answer to kRequestFrame: the hand-built reply with roles swapped.
  Packet reply;
  build_arp_reply(reply, kPeerMac, kPeerIp, kOurMac, kOurIp);
  Packet out;
  out.len = 0;
  EXPECT_FALSE(t.handle(reply, kOurMac, kOurIp, 1, &out));
  EXPECT_EQ(out.len, 0u);
  EXPECT_EQ(t.lookup(kPeerIp, 1), kPeerMac);
}

TEST(ArpTable, HandBuiltReplyFrameIsLearntByItsTarget) {
  ArpTable t;
  auto reply = frame(kReplyFrame);
  EXPECT_FALSE(t.handle(*reply, kPeerMac, kPeerIp, 1, nullptr));
  EXPECT_EQ(t.lookup(kOurIp, 1), kOurMac);
}

TEST(ArpTable, RequestForAnotherAddressIsNotAnsweredNorLearnt) {
  ArpTable t;
  auto req = peer_request(kOtherIp);
  Packet reply;
  EXPECT_FALSE(t.handle(*req, kOurMac, kOurIp, 1, &reply));
  EXPECT_FALSE(t.lookup(kPeerIp, 1));
  EXPECT_EQ(t.counters().rx_not_for_us, 1u);
}

TEST(ArpTable, RequestForAnotherAddressRefreshesAKnownSender) {
  ArpTable t;
  t.insert(kPeerIp, kPeerMac, 0);
  const MacAddr moved = {0x02, 0, 0, 0, 0, 0x99};
  auto req = peer_request(kOtherIp, moved);
  EXPECT_FALSE(t.handle(*req, kOurMac, kOurIp, 7 * kSec, nullptr));
  EXPECT_EQ(t.lookup(kPeerIp, 7 * kSec), moved);
}

TEST(ArpTable, StaticEntriesAreNotOverwritten) {
  ArpTable t;
  t.insert(kPeerIp, kPeerMac, 0, /*is_static=*/true);
  auto req = peer_request(kOurIp, MacAddr{0x02, 0, 0, 0, 0, 0x77});
  Packet reply;
  EXPECT_TRUE(t.handle(*req, kOurMac, kOurIp, 1, &reply));
  EXPECT_EQ(t.lookup(kPeerIp, 1000 * kSec), kPeerMac);
}

TEST(ArpTable, ProbeFromZeroAddressIsAnsweredNotLearnt) {
  ArpTable t;
  auto req = peer_request(kOurIp, kPeerMac, Ipv4Addr{0, 0, 0, 0});
  Packet reply;
  ASSERT_TRUE(t.handle(*req, kOurMac, kOurIp, 1, &reply));
  EXPECT_EQ(t.size(), 0u);
  const auto* arp = reinterpret_cast<const ArpHdr*>(reply.data + sizeof(EthHdr));
  EXPECT_EQ(uint16_t(arp->oper), ArpHdr::kReply);
}

TEST(ArpTable, MalformedAndBadSenderFramesAreCountedAndDropped) {
  ArpTable t;
  Packet reply;
  auto shortf = frame(std::vector<uint8_t>(kRequestFrame.begin(), kRequestFrame.begin() + 30));
  EXPECT_FALSE(t.handle(*shortf, kOurMac, kOurIp, 1, &reply));
  auto bad_hrd = frame(kRequestFrame);
  bad_hrd->data[15] = 6;  // IEEE 802 instead of Ethernet
  EXPECT_FALSE(t.handle(*bad_hrd, kOurMac, kOurIp, 1, &reply));
  auto bad_op = frame(kRequestFrame);
  bad_op->data[21] = 3;  // RARP request
  EXPECT_FALSE(t.handle(*bad_op, kOurMac, kOurIp, 1, &reply));
  EXPECT_EQ(t.counters().rx_malformed, 3u);
  auto group = peer_request(kOurIp, kBroadcastMac);
  EXPECT_FALSE(t.handle(*group, kOurMac, kOurIp, 1, &reply));
  EXPECT_EQ(t.counters().rx_bad_sender, 1u);
  EXPECT_EQ(t.size(), 0u);
}

TEST(ArpTable, EntriesAgeOut) {
  ArpTable t(8, 10 * kSec);
  t.insert(kPeerIp, kPeerMac, 100 * kSec);
  t.insert(kOtherIp, kPeerMac, 100 * kSec, /*is_static=*/true);
  EXPECT_EQ(t.lookup(kPeerIp, 110 * kSec), kPeerMac);
  EXPECT_FALSE(t.lookup(kPeerIp, 110 * kSec + 1));
  EXPECT_EQ(t.expire(109 * kSec), 0u);
  EXPECT_EQ(t.expire(111 * kSec), 1u);
  EXPECT_EQ(t.size(), 1u);
  EXPECT_EQ(t.lookup(kOtherIp, 1000 * kSec), kPeerMac);
  EXPECT_EQ(t.counters().expired, 1u);
}

TEST(ArpTable, RefreshRestartsTheAge) {
  ArpTable t(8, 10 * kSec);
  t.insert(kPeerIp, kPeerMac, 0);
  auto req = peer_request(kOurIp);
  Packet reply;
  t.handle(*req, kOurMac, kOurIp, 8 * kSec, &reply);
  EXPECT_EQ(t.lookup(kPeerIp, 15 * kSec), kPeerMac);
}

TEST(ArpTable, FullTableReplacesTheOldestEntry) {
  ArpTable t(2);
  t.insert({10, 0, 0, 1}, kPeerMac, 3);
  t.insert({10, 0, 0, 2}, kPeerMac, 1);
  t.insert({10, 0, 0, 3}, kPeerMac, 5);
  EXPECT_EQ(t.size(), 2u);
  EXPECT_FALSE(t.lookup({10, 0, 0, 2}, 5));
  EXPECT_TRUE(t.lookup({10, 0, 0, 1}, 5));
  EXPECT_TRUE(t.lookup({10, 0, 0, 3}, 5));
  EXPECT_EQ(t.counters().evicted, 1u);
}

// ---- ArpPending ----

struct PendingFixture : ::testing::Test {
  ArpPendingConfig cfg{.max_dests = 2, .max_per_dest = 3, .retry_interval_ns = 100'000'000,
                       .max_requests = 3};
  ArpPending pending{cfg};
  Packet frames[8];
  std::vector<Ipv4Addr> requests;
  std::vector<Packet*> dropped;
  bool tick(uint64_t now) {
    return pending.tick(
        now, [&](const Ipv4Addr& ip) { requests.push_back(ip); },
        [&](Packet* p) { dropped.push_back(p); });
  }
};

TEST_F(PendingFixture, FirstFrameAsksForARequestLaterOnesQueue) {
  EXPECT_EQ(pending.enqueue(kPeerIp, &frames[0], 0), ArpPending::Enqueue::kQueuedSendRequest);
  EXPECT_EQ(pending.enqueue(kPeerIp, &frames[1], 1), ArpPending::Enqueue::kQueued);
  EXPECT_EQ(pending.enqueue(kPeerIp, &frames[2], 2), ArpPending::Enqueue::kQueued);
  EXPECT_EQ(pending.enqueue(kPeerIp, &frames[3], 3), ArpPending::Enqueue::kRefused);
  EXPECT_EQ(pending.counters().dropped_queue_full, 1u);
  EXPECT_EQ(pending.frames_waiting(), 3u);
  EXPECT_EQ(pending.next_deadline_ns(), 100'000'000u);
}

TEST_F(PendingFixture, ResolutionReleasesFramesInOrder) {
  for (int i = 0; i < 3; ++i) pending.enqueue(kPeerIp, &frames[i], 0);
  std::vector<Packet*> sent;
  EXPECT_EQ(pending.resolved(kPeerIp, [&](Packet* p) { sent.push_back(p); }), 3u);
  EXPECT_EQ(sent, (std::vector<Packet*>{&frames[0], &frames[1], &frames[2]}));
  EXPECT_FALSE(pending.waiting(kPeerIp));
  EXPECT_EQ(pending.next_deadline_ns(), 0u);
  EXPECT_EQ(pending.resolved(kPeerIp, [&](Packet*) { FAIL(); }), 0u);
}

TEST_F(PendingFixture, RetriesEveryIntervalThenDropsAndCounts) {
  constexpr uint64_t kMs = 1'000'000;
  pending.enqueue(kPeerIp, &frames[0], 0);
  pending.enqueue(kPeerIp, &frames[1], 10 * kMs);
  EXPECT_FALSE(tick(99 * kMs));
  EXPECT_TRUE(tick(100 * kMs));  // second request
  EXPECT_TRUE(tick(200 * kMs));  // third and last
  EXPECT_EQ(requests, (std::vector<Ipv4Addr>{kPeerIp, kPeerIp}));
  EXPECT_FALSE(tick(299 * kMs));
  EXPECT_TRUE(dropped.empty());
  EXPECT_TRUE(tick(300 * kMs));  // no reply 100 ms after the third: give up
  EXPECT_EQ(dropped, (std::vector<Packet*>{&frames[0], &frames[1]}));
  EXPECT_EQ(pending.counters().requests, 3u);
  EXPECT_EQ(pending.counters().dropped_timeout, 2u);
  EXPECT_EQ(pending.counters().failed_resolutions, 1u);
  EXPECT_FALSE(pending.waiting(kPeerIp));
  // The slot is free again: a new frame starts a new resolution.
  EXPECT_EQ(pending.enqueue(kPeerIp, &frames[2], 400 * kMs),
            ArpPending::Enqueue::kQueuedSendRequest);
}

TEST_F(PendingFixture, TooManyDestinationsAreRefused) {
  pending.enqueue({10, 0, 0, 1}, &frames[0], 0);
  pending.enqueue({10, 0, 0, 2}, &frames[1], 0);
  EXPECT_EQ(pending.enqueue({10, 0, 0, 3}, &frames[2], 0), ArpPending::Enqueue::kRefused);
  EXPECT_EQ(pending.counters().dropped_no_slot, 1u);
}

TEST(ArpEndToEnd, TwoHostsResolveEachOther) {
  // Host A asks for B with a queued frame; B answers; A learns and releases.
  ArpTable a_table, b_table;
  ArpPending a_pending;
  Packet data, req, reply;
  ASSERT_EQ(a_pending.enqueue(kPeerIp, &data, 0), ArpPending::Enqueue::kQueuedSendRequest);
  build_arp_request(req, kOurMac, kOurIp, kPeerIp);
  ASSERT_TRUE(b_table.handle(req, kPeerMac, kPeerIp, 1, &reply));
  EXPECT_EQ(b_table.lookup(kOurIp, 1), kOurMac);
  EXPECT_FALSE(a_table.handle(reply, kOurMac, kOurIp, 2, nullptr));
  ASSERT_EQ(a_table.lookup(kPeerIp, 2), kPeerMac);
  std::vector<Packet*> sent;
  a_pending.resolved(kPeerIp, [&](Packet* p) { sent.push_back(p); });
  EXPECT_EQ(sent, std::vector<Packet*>{&data});
}

}  // namespace
}  // namespace uroce::net
