// Tests for the control plane in device/device.cc other than MRs (mr_test.cc):
// device attributes, PDs, CQs and their rings, completion channels and
// events, QP creation, async events and releasing a client's objects.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "device/params.h"
#include "device/test_env.h"

namespace uroce::device {
namespace {

class DeviceTest : public PairFixture {};

TEST_F(DeviceTest, DeviceInfoDescribesTheHca) {
  const abi::DeviceInfo& d = dev_.info();
  EXPECT_STREQ(d.name, "uroce0");
  EXPECT_EQ(d.vendor_id, kVendorId);
  EXPECT_EQ(d.max_sge, kMaxSge);
  EXPECT_EQ(d.max_qp_wr, kMaxQpWr);
  EXPECT_EQ(d.max_cqe, kMaxCqe);
  EXPECT_EQ(d.atomic_cap, uint32_t(IBV_ATOMIC_HCA));
  EXPECT_EQ(d.num_ports, 1u);
  EXPECT_EQ(d.port.state, uint32_t(IBV_PORT_ACTIVE));
  EXPECT_EQ(d.port.active_mtu, uint32_t(IBV_MTU_4096));
  EXPECT_EQ(d.engine_pid, uint32_t(getpid()));
  // GID 0: RoCE v2, IPv4-mapped ::ffff:127.0.0.1.
  const uint8_t gid0[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1};
  EXPECT_EQ(std::memcmp(d.gids[0].gid, gid0, 16), 0);
  EXPECT_EQ(d.gids[0].type, uint32_t(IBV_GID_TYPE_ROCE_V2));
  EXPECT_EQ(d.gids[0].valid, 1u);
  // Node GUID: EUI-64 of 02:75:72:00:00:01, universal/local bit flipped.
  const uint8_t guid[8] = {0x00, 0x75, 0x72, 0xff, 0xfe, 0x00, 0x00, 0x01};
  EXPECT_EQ(std::memcmp(&d.node_guid, guid, 8), 0);
  // GID 1: link-local fe80::<EUI-64>.
  EXPECT_EQ(d.gids[1].gid[0], 0xfe);
  EXPECT_EQ(d.gids[1].gid[1], 0x80);
  EXPECT_EQ(std::memcmp(d.gids[1].gid + 8, guid, 8), 0);
  EXPECT_EQ(d.gids[2].valid, 0u);
}

TEST_F(DeviceTest, PdsBelongToTheirOwner) {
  auto pd = dev_.alloc_pd(&owner_);
  ASSERT_EQ(pd.err, 0);
  EXPECT_NE(pd.value, pd_);
  Owner other = make_self_owner(2);
  EXPECT_EQ(dev_.dealloc_pd(&other, pd.value), EINVAL);
  EXPECT_EQ(dev_.dealloc_pd(&owner_, 12345), EINVAL);
  EXPECT_EQ(dev_.dealloc_pd(&owner_, pd.value), 0);
  EXPECT_EQ(dev_.dealloc_pd(&owner_, pd.value), EINVAL);
}

TEST_F(DeviceTest, CqRingIsAPowerOfTwoWithOneSlotSpare) {
  for (uint32_t cqe : {1u, 2u, 63u, 64u, 100u}) {
    const uint32_t h = create_cq(cqe);
    const Cq* cq = dev_.cq(h);
    ASSERT_NE(cq, nullptr);
    EXPECT_GE(cq->capacity, cqe);
    EXPECT_EQ(cq->capacity + 1, cq->ring.size());
    EXPECT_EQ(cq->ring.size() & (cq->ring.size() - 1), 0u);
    EXPECT_EQ(cq->ring.hdr->log2_entries, cq->ring.log2);
    EXPECT_EQ(cq->ring.hdr->stride, sizeof(abi::Cqe));
    EXPECT_GE(cq->mem.size(), RingView::bytes(cq->ring.log2, sizeof(abi::Cqe)));
    EXPECT_GE(cq->mem.fd(), 0);
  }
}

TEST_F(DeviceTest, CqSizeLimits) {
  abi::CreateCqRequest req{};
  req.cqe = 0;
  EXPECT_EQ(dev_.create_cq(&owner_, req).err, EINVAL);
  req.cqe = kMaxCqe + 1;
  EXPECT_EQ(dev_.create_cq(&owner_, req).err, EINVAL);
  req.cqe = 4;
  req.channel = 999;
  EXPECT_EQ(dev_.create_cq(&owner_, req).err, EINVAL);
}

TEST_F(DeviceTest, CqInUseCannotBeDestroyed) {
  const uint32_t cq = create_cq();
  const uint32_t qpn = create_qp(IBV_QPT_RC, cq, cq);
  EXPECT_EQ(dev_.destroy_cq(&owner_, cq), EBUSY);
  Owner other = make_self_owner(2);
  EXPECT_EQ(dev_.destroy_cq(&other, cq), EINVAL);
  EXPECT_EQ(dev_.destroy_qp(&owner_, qpn), 0);
  EXPECT_EQ(dev_.destroy_cq(&owner_, cq), 0);
  EXPECT_EQ(dev_.cq(cq), nullptr);
}

TEST_F(DeviceTest, ResizeCqKeepsPendingCompletions) {
  make_pair(IBV_QPT_RC);
  for (uint64_t i = 0; i < 3; ++i) post_recv(B(), 10 + i, {});
  ASSERT_EQ(to_state(b_, IBV_QPS_ERR), 0);
  Cq* cq = dev_.cq(b_rcq_);
  // The client consumes one, then asks for a bigger CQ.
  cq->ring.hdr->consumer.store(1);
  ASSERT_EQ(dev_.resize_cq(&owner_, b_rcq_, 500), 0);
  cq = dev_.cq(b_rcq_);
  EXPECT_GE(cq->capacity, 500u);
  // The new ring starts at index 0 with the two unread entries.
  EXPECT_EQ(cq->ring.hdr->producer.load(), 2u);
  auto left = drain_cq(dev_, b_rcq_);
  ASSERT_EQ(left.size(), 2u);
  EXPECT_EQ(left[0].wr_id, 11u);
  EXPECT_EQ(left[1].wr_id, 12u);
  // Completions keep flowing into the new ring.
  post_recv(B(), 13, {});
  ASSERT_TRUE(run());
  auto more = drain_cq(dev_, b_rcq_);
  ASSERT_EQ(more.size(), 1u);
  EXPECT_EQ(more[0].wr_id, 13u);
}

TEST_F(DeviceTest, ResizeCqRefusesACorruptConsumer) {
  const uint32_t h = create_cq(4);
  Cq* cq = dev_.cq(h);
  cq->ring.hdr->consumer.store(1000);  // "ahead" of the producer
  EXPECT_EQ(dev_.resize_cq(&owner_, h, 8), EINVAL);
  EXPECT_EQ(dev_.resize_cq(&owner_, h, 0), EINVAL);
  EXPECT_EQ(dev_.resize_cq(&owner_, 999, 8), EINVAL);
}

TEST_F(DeviceTest, ArmedCqRaisesOneCompletionEvent) {
  Pipe p;
  ASSERT_GE(p.wr, 0);
  auto ch = dev_.create_comp_channel(&owner_, p.wr);
  ASSERT_EQ(ch.err, 0);
  abi::CreateCqRequest req{};
  req.cqe = 16;
  req.channel = ch.value;
  req.cookie = 0xc0ffee;
  auto cq = dev_.create_cq(&owner_, req);
  ASSERT_EQ(cq.err, 0);
  EXPECT_EQ(dev_.destroy_comp_channel(&owner_, ch.value), EBUSY);

  const uint32_t qpn = create_qp(IBV_QPT_RC, cq.value, cq.value);
  connect(qpn, qpn);
  Qp& qp = *dev_.qp(qpn);
  Cq& c = *dev_.cq(cq.value);
  // Not armed: no event.
  post_recv(qp, 1, {sge(a(0), 64, a_key_)});
  post_send(qp, wqe(IBV_WR_SEND, 2), {sge(a(100), 8, a_key_)});
  ASSERT_TRUE(run());
  EXPECT_EQ(drain_cq(dev_, cq.value).size(), 2u);
  EXPECT_TRUE(p.read_all<abi::CompEventRecord>().empty());
  // Armed for the next completion: one event, and the arm is consumed.
  c.ring.hdr->notify.store(abi::kCqNotifyNext);
  post_recv(qp, 3, {sge(a(0), 64, a_key_)});
  post_send(qp, wqe(IBV_WR_SEND, 4), {sge(a(100), 8, a_key_)});
  ASSERT_TRUE(run());
  EXPECT_EQ(drain_cq(dev_, cq.value).size(), 2u);
  auto ev = p.read_all<abi::CompEventRecord>();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].cq_cookie, 0xc0ffeeu);
  EXPECT_EQ(c.ring.hdr->notify.load(), uint32_t(abi::kCqNotifyNone));
}

TEST_F(DeviceTest, SolicitedArmWaitsForSolicitedOrError) {
  Pipe p;
  auto ch = dev_.create_comp_channel(&owner_, p.wr);
  ASSERT_EQ(ch.err, 0);
  abi::CreateCqRequest req{};
  req.cqe = 16;
  req.channel = ch.value;
  req.cookie = 7;
  auto rcq = dev_.create_cq(&owner_, req);
  ASSERT_EQ(rcq.err, 0);
  a_ = create_qp(IBV_QPT_RC, a_scq_, a_rcq_);
  b_ = create_qp(IBV_QPT_RC, b_scq_, rcq.value);
  connect(a_, b_, default_attr(), 1000, 2000);
  connect(b_, a_, default_attr(), 2000, 1000);
  Cq& c = *dev_.cq(rcq.value);
  c.ring.hdr->notify.store(abi::kCqNotifySolicited);
  post_recv(B(), 1, {sge(b(0), 64, b_key_)});
  post_send(A(), wqe(IBV_WR_SEND, 1), {sge(a(0), 8, a_key_)});
  ASSERT_TRUE(run());
  EXPECT_EQ(drain_cq(dev_, rcq.value).size(), 1u);
  EXPECT_TRUE(p.read_all<abi::CompEventRecord>().empty());  // not solicited
  post_recv(B(), 2, {sge(b(0), 64, b_key_)});
  post_send(A(), wqe(IBV_WR_SEND, 2, IBV_SEND_SIGNALED | IBV_SEND_SOLICITED),
            {sge(a(0), 8, a_key_)});
  ASSERT_TRUE(run());
  EXPECT_EQ(p.read_all<abi::CompEventRecord>().size(), 1u);
  // An error completion also wakes a solicited-only waiter.
  c.ring.hdr->notify.store(abi::kCqNotifySolicited);
  post_recv(B(), 3, {});
  ASSERT_EQ(to_state(b_, IBV_QPS_ERR), 0);
  EXPECT_EQ(p.read_all<abi::CompEventRecord>().size(), 1u);
}

TEST_F(DeviceTest, QpCapsAreRoundedUpAndReported) {
  abi::QpCaps caps{};
  caps.max_send_wr = 17;
  caps.max_recv_wr = 3;
  caps.max_send_sge = 5;
  caps.max_recv_sge = 2;
  caps.max_inline_data = 200;
  const uint32_t cq = create_cq();
  const uint32_t qpn = create_qp(IBV_QPT_RC, cq, cq, caps);
  const Qp& qp = *dev_.qp(qpn);
  EXPECT_EQ(qp.caps.max_send_wr, 32u);
  EXPECT_EQ(qp.caps.max_recv_wr, 4u);
  EXPECT_GE(qp.caps.max_send_sge, 5u);
  EXPECT_GE(qp.caps.max_recv_sge, 2u);
  EXPECT_GE(qp.caps.max_inline_data, 200u);
  EXPECT_EQ(qp.sq.size(), 32u);
  EXPECT_EQ(qp.rq.size(), 4u);
  // The rings really hold what the caps promise.
  EXPECT_GE(qp.sq.stride, sizeof(abi::SendWqe) + qp.caps.max_send_sge * sizeof(abi::Sge));
  EXPECT_GE(qp.sq.stride, sizeof(abi::SendWqe) + qp.caps.max_inline_data);
  EXPECT_GE(qp.rq.stride, sizeof(abi::RecvWqe) + qp.caps.max_recv_sge * sizeof(abi::Sge));
  EXPECT_LE(qp.rq.entries + qp.rq.size() * qp.rq.stride, qp.mem.base() + qp.mem.size());
  EXPECT_LE(qp.sq.entries + qp.sq.size() * qp.sq.stride,
            reinterpret_cast<uint8_t*>(qp.rq.hdr));  // SQ then RQ, no overlap
  EXPECT_EQ(qp.state, IBV_QPS_RESET);
}

TEST_F(DeviceTest, QpCreationChecksItsArguments) {
  const uint32_t cq = create_cq();
  abi::CreateQpRequest req{};
  req.pd = pd_;
  req.send_cq = cq;
  req.recv_cq = cq;
  req.qp_type = IBV_QPT_RC;
  req.caps = default_caps();
  auto bad = [&](auto edit, int err) {
    abi::CreateQpRequest r = req;
    edit(r);
    EXPECT_EQ(dev_.create_qp(&owner_, r).err, err);
  };
  // Raw packet QPs exist (the engine checks CAP_NET_RAW before the device):
  // of the creation flags they take the receive ones (CVLAN stripping,
  // scatter FCS, end padding), which other QPs do not, and no other.
  bad([](auto& r) { r.qp_type = IBV_QPT_RAW_PACKET, r.create_flags = IBV_QP_CREATE_SOURCE_QPN; }, EOPNOTSUPP);
  bad([](auto& r) { r.create_flags = IBV_QP_CREATE_CVLAN_STRIPPING; }, EOPNOTSUPP);
  bad([](auto& r) { r.qp_type = IBV_QPT_DRIVER; }, EOPNOTSUPP);
  bad([](auto& r) { r.qp_type = 1000; }, EOPNOTSUPP);
  bad([](auto& r) { r.pd = 999; }, EINVAL);
  bad([](auto& r) { r.send_cq = 999; }, EINVAL);
  bad([](auto& r) { r.recv_cq = 0; }, EINVAL);
  bad([](auto& r) { r.srq = 999; }, EINVAL);  // no such SRQ
  bad([](auto& r) { r.caps.max_send_wr = kMaxQpWr + 1; }, EINVAL);
  bad([](auto& r) { r.caps.max_recv_sge = kMaxSge + 1; }, EINVAL);
  bad([](auto& r) { r.caps.max_inline_data = kMaxInlineData + 1; }, EINVAL);
  Owner other = make_self_owner(2);
  EXPECT_EQ(dev_.create_qp(&other, req).err, EINVAL);  // someone else's PD and CQs
  EXPECT_EQ(dev_.qp_count(), 0u);
  auto ok = dev_.create_qp(&owner_, req);
  ASSERT_EQ(ok.err, 0);
  EXPECT_GE(ok.value, kFirstQpn);  // QPN 0 and 1 are the special QPs
  EXPECT_EQ(dev_.qp_count(), 1u);
}

TEST_F(DeviceTest, QpFatalIsPostedOnTheAsyncPipe) {
  Pipe p;
  owner_.async_fd = p.wr;
  make_pair(IBV_QPT_RC);
  A().cookie = 0xfeedbeef;
  A().sq.hdr->producer.store(A().sq.hdr->consumer.load() + 3 * A().sq.size());
  ASSERT_TRUE(run());
  auto ev = p.read_all<abi::AsyncEventRecord>();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].event_type, uint32_t(IBV_EVENT_QP_FATAL));
  EXPECT_EQ(ev[0].cookie, 0xfeedbeefu);
  owner_.async_fd = -1;
  close(p.wr);
}

TEST_F(DeviceTest, CqOverflowPostsCqError) {
  Pipe p;
  owner_.async_fd = p.wr;
  abi::CreateCqRequest req{};
  req.cqe = 1;
  req.cookie = 0xcc;
  auto small = dev_.create_cq(&owner_, req);
  ASSERT_EQ(small.err, 0);
  a_ = create_qp(IBV_QPT_RC, a_scq_, small.value);
  connect(a_, a_);
  for (uint64_t i = 0; i < 4; ++i) post_recv(A(), i, {});
  ASSERT_EQ(to_state(a_, IBV_QPS_ERR), 0);  // four flush CQEs into a ring of two
  auto ev = p.read_all<abi::AsyncEventRecord>();
  ASSERT_GE(ev.size(), 1u);
  EXPECT_EQ(ev[0].event_type, uint32_t(IBV_EVENT_CQ_ERR));
  EXPECT_EQ(ev[0].cookie, 0xccu);
  EXPECT_EQ(counters().cq_overflows, 1u);
  owner_.async_fd = -1;
  close(p.wr);
}

TEST_F(DeviceTest, ReleaseOwnerFreesEverything) {
  make_pair(IBV_QPT_RC);
  Pipe p;
  ASSERT_EQ(dev_.create_comp_channel(&owner_, p.wr).err, 0);
  EXPECT_NE(dev_.status_text().find("qps 2"), std::string::npos) << dev_.status_text();
  dev_.release_owner(&owner_);
  EXPECT_EQ(dev_.qp_count(), 0u);
  EXPECT_EQ(dev_.qp(a_), nullptr);
  EXPECT_EQ(dev_.cq(a_scq_), nullptr);
  EXPECT_EQ(dev_.find_mr(a_key_), nullptr);
  EXPECT_NE(dev_.status_text().find("objects: pds 0, mrs 0, cqs 0, qps 0, channels 0"),
            std::string::npos)
      << dev_.status_text();
  // The channel's write end was closed with it: the read end sees EOF.
  char c;
  EXPECT_EQ(::read(p.rd, &c, 1), 0);
  // Nothing left to poll.
  EXPECT_FALSE(dev_.poll(now_));
}

TEST_F(DeviceTest, ReleaseOwnerLeavesOtherClientsAlone) {
  make_pair(IBV_QPT_RC);
  Owner other = make_self_owner(2);
  auto pd = dev_.alloc_pd(&other);
  ASSERT_EQ(pd.err, 0);
  dev_.release_owner(&other);
  EXPECT_NE(dev_.qp(a_), nullptr);
  EXPECT_EQ(dev_.qp_count(), 2u);
  EXPECT_EQ(dev_.dealloc_pd(&other, pd.value), EINVAL);
  post_recv(B(), 1, {sge(b(0), 64, b_key_)});
  post_send(A(), wqe(IBV_WR_SEND, 1), {sge(a(0), 8, a_key_)});
  ASSERT_TRUE(run());
  EXPECT_EQ(one_cqe(b_rcq_).status, uint32_t(IBV_WC_SUCCESS));
}

}  // namespace
}  // namespace uroce::device
