// The Dynamically Connected transport in the device (device/dc.cc,
// docs/mlx5-dc.md), fed work requests and frames: a DCI waits for its old
// target's completions before it moves, a DCT takes a connection only from
// a connect packet, drops a late duplicate of an earlier connection and a
// request with the wrong key, and starts again for a DCI that was reset;
// a DCI's streams fail alone.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "device/device.h"
#include "tests/unit/device/test_env.h"

namespace uroce::device {
namespace {

constexpr uint64_t kKey = 0x1ee7a330;

DeviceConfig mlx5_config() {
  DeviceConfig c;
  c.mlx5 = true;
  return c;
}

class DcTest : public DeviceFixture {
 protected:
  explicit DcTest(const DeviceConfig& c = mlx5_config()) : DeviceFixture(c) {}

  void SetUp() override {
    DeviceFixture::SetUp();
    buf_.resize(kBufSize);
    fill(buf_, 7);
    key_ = reg_mr(buf_.data(), kBufSize, kAllAccess);
    scq_ = create_cq(1024);
    rcq_ = create_cq(1024);
  }

  uint32_t srq(uint32_t max_wr = 32) {
    abi::CreateSrqRequest s{};
    s.pd = pd_;
    s.srq_type = IBV_SRQT_BASIC;
    s.max_wr = max_wr;
    s.max_sge = 1;
    auto r = dev_.create_srq(&owner_, s);
    EXPECT_EQ(r.err, 0);
    return r.value;
  }
  void post_srq_recv(uint32_t handle, uint64_t wr_id, uint32_t offset, uint32_t len) {
    Srq* s = dev_.srq(handle);
    ASSERT_NE(s, nullptr);
    const uint32_t prod = s->ring.hdr->producer.load(std::memory_order_relaxed);
    uint8_t* slot = s->ring.slot(prod);
    abi::RecvWqe w{wr_id, 1, 0};
    std::memcpy(slot, &w, sizeof(w));
    const abi::Sge g = sge(buf_.data() + offset, len, key_);
    std::memcpy(slot + sizeof(w), &g, sizeof(g));
    s->ring.hdr->producer.store(prod + 1, std::memory_order_release);
  }
  // A DCT on srq (completions to rcq_), in RTR.
  uint32_t dct(uint32_t srq_handle, uint64_t key = kKey) {
    abi::CreateQpRequest q{};
    q.pd = pd_;
    q.send_cq = scq_;
    q.recv_cq = rcq_;
    q.srq = srq_handle;
    q.qp_type = IBV_QPT_RC;
    q.caps = default_caps();
    auto r = dev_.create_qp(&owner_, q);
    EXPECT_EQ(r.err, 0);
    EXPECT_EQ(dev_.make_dc(&owner_, r.value, abi::kDcTarget, key), 0);
    abi::QpAttr a = default_attr();
    a.qp_state = IBV_QPS_INIT;
    EXPECT_EQ(modify(r.value, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, a), 0);
    a.qp_state = IBV_QPS_RTR;
    EXPECT_EQ(modify(r.value, IBV_QP_STATE | IBV_QP_MIN_RNR_TIMER | IBV_QP_AV | IBV_QP_PATH_MTU, a), 0);
    return r.value;
  }
  // A DCI in RTS.
  uint32_t dci(uint8_t timeout = 14) {
    const uint32_t qpn = create_qp(IBV_QPT_RC, scq_, scq_);
    EXPECT_EQ(dev_.make_dc(&owner_, qpn, abi::kDcInitiator, 0), 0);
    bring_up(qpn, timeout);
    return qpn;
  }
  void bring_up(uint32_t qpn, uint8_t timeout = 14) {
    abi::QpAttr a = default_attr();
    a.timeout = timeout;
    a.qp_state = IBV_QPS_INIT;
    ASSERT_EQ(modify(qpn, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT, a), 0);
    a.qp_state = IBV_QPS_RTR;
    ASSERT_EQ(modify(qpn, IBV_QP_STATE | IBV_QP_PATH_MTU | IBV_QP_AV, a), 0);
    a.qp_state = IBV_QPS_RTS;
    ASSERT_EQ(modify(qpn, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                              IBV_QP_MAX_QP_RD_ATOMIC,
                     a),
              0);
  }
  // A SEND of 16 bytes from the DCI to the DCT numbered dctn.
  void send(uint32_t dci_qpn, uint64_t wr_id, uint32_t dctn, uint64_t key = kKey) {
    abi::SendWqe w = wqe(IBV_WR_SEND, wr_id);
    w.av = default_attr().ah;
    w.remote_qpn = dctn;
    w.dc_key = key;
    post_send(*dev_.qp(dci_qpn), w, {sge(buf_.data(), 16, key_)});
  }
  // The DC requests in flight on the loopback port, kept out of it.
  std::vector<net::Packet*> take_requests() {
    std::vector<net::Packet*> out;
    for (net::Packet* p : DeviceTestPeer::take_in_flight(dev_)) {
      if (p->framed || net::parse_roce_packet(*p, false) == net::ParseError::kOk) {
        if (p->info().has(net::kHasDcEth)) {
          out.push_back(p);
          continue;
        }
      }
      DeviceTestPeer::requeue(dev_, p);
    }
    return out;
  }
  std::vector<uint8_t> copy_of(const net::Packet* p) { return {p->data, p->data + p->len}; }
  const net::DcEth& dceth(const net::Packet* p) { return *p->hdr<net::DcEth>(net::kDcEthOffset); }

  std::vector<uint8_t> buf_;
  uint32_t key_ = 0, scq_ = 0, rcq_ = 0;
};

TEST_F(DcTest, SendArrivesWithTheDctAndTheDciNamed) {
  const uint32_t s = srq();
  post_srq_recv(s, 9, 4096, 64);
  const uint32_t t = dct(s);
  const uint32_t i = dci();
  send(i, 1, t);
  ASSERT_TRUE(run());
  auto sends = drain_cq(dev_, scq_);
  ASSERT_EQ(sends.size(), 1u);
  EXPECT_EQ(sends[0].status, IBV_WC_SUCCESS);
  auto recvs = drain_cq(dev_, rcq_);
  ASSERT_EQ(recvs.size(), 1u);
  EXPECT_EQ(recvs[0].wr_id, 9u);
  EXPECT_EQ(recvs[0].qp_num, t);
  EXPECT_EQ(recvs[0].src_qp, i);
  EXPECT_EQ(recvs[0].byte_len, 16u);
  EXPECT_EQ(dev_.counters().dc_contexts_created, 1u);
}

// The second WQE names another DCT: it leaves only after the first one's
// acknowledgement, as a new connection (its number one more, connect set).
TEST_F(DcTest, DciMovesOnlyAfterTheOldTargetsWqesCompleted) {
  const uint32_t s1 = srq(), s2 = srq();
  post_srq_recv(s1, 1, 4096, 64);
  post_srq_recv(s2, 2, 8192, 64);
  const uint32_t t1 = dct(s1), t2 = dct(s2);
  const uint32_t i = dci();
  send(i, 1, t1);
  send(i, 2, t2);
  dev_.poll(now_);
  std::vector<net::Packet*> first = take_requests();
  ASSERT_EQ(first.size(), 1u) << "only the first target's request leaves";
  EXPECT_EQ(first[0]->bth()->qpn(), t1);
  const uint32_t number1 = uint32_t(dceth(first[0]).connection) >> 24;
  EXPECT_TRUE(uint32_t(dceth(first[0]).flags_dci) & net::DcEth::kConnect);
  EXPECT_EQ(uint32_t(dceth(first[0]).flags_dci) & 0xffffff, i);
  EXPECT_EQ(uint64_t(dceth(first[0]).dc_key), kKey);
  dev_.poll(now_);
  EXPECT_TRUE(take_requests().empty()) << "nothing to the second target while the first is unanswered";
  DeviceTestPeer::requeue(dev_, first[0]);
  dev_.poll(now_);  // the first request arrives, its ACK goes out
  dev_.poll(now_);  // the ACK arrives: the DCI moves
  std::vector<net::Packet*> second = take_requests();
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0]->bth()->qpn(), t2);
  EXPECT_EQ(uint32_t(dceth(second[0]).connection) >> 24, (number1 + 1) & 0xff);
  EXPECT_TRUE(uint32_t(dceth(second[0]).flags_dci) & net::DcEth::kConnect);
  DeviceTestPeer::requeue(dev_, second[0]);
  ASSERT_TRUE(run());
  EXPECT_EQ(drain_cq(dev_, scq_).size(), 2u);
  EXPECT_EQ(drain_cq(dev_, rcq_).size(), 2u);
}

// A copy of a request of an earlier connection, arriving after the DCI came
// back to the same DCT in a new one, is dropped, never executed again.
TEST_F(DcTest, LateDuplicateOfAnEarlierConnectionIsDropped) {
  const uint32_t s1 = srq(), s2 = srq();
  for (int k = 0; k < 4; ++k) post_srq_recv(s1, 10 + k, 4096 + k * 64, 64);
  post_srq_recv(s2, 20, 8192, 64);
  const uint32_t t1 = dct(s1), t2 = dct(s2);
  const uint32_t i = dci();
  send(i, 1, t1);
  dev_.poll(now_);
  std::vector<net::Packet*> reqs = take_requests();
  ASSERT_EQ(reqs.size(), 1u);
  const std::vector<uint8_t> old = copy_of(reqs[0]);
  DeviceTestPeer::requeue(dev_, reqs[0]);
  ASSERT_TRUE(run());
  send(i, 2, t2);
  send(i, 3, t1);  // back to t1: a new connection
  ASSERT_TRUE(run());
  ASSERT_EQ(drain_cq(dev_, scq_).size(), 3u);
  ASSERT_EQ(drain_cq(dev_, rcq_).size(), 3u);
  const uint64_t stale = dev_.counters().dc_stale;
  DeviceTestPeer::inject(dev_, old.data(), old.size());
  ASSERT_TRUE(run());
  EXPECT_EQ(dev_.counters().dc_stale, stale + 1);
  EXPECT_TRUE(drain_cq(dev_, rcq_).empty()) << "the old SEND was delivered again";
}

// Without connect, a request finds no connection and is dropped; the DCI's
// retry, which still carries connect, gets through.
TEST_F(DcTest, OnlyAConnectPacketStartsAConnection) {
  const uint32_t s = srq();
  post_srq_recv(s, 5, 4096, 64);
  const uint32_t t = dct(s);
  const uint32_t i = dci(/*timeout=*/8);  // ~1 ms
  send(i, 1, t);
  dev_.poll(now_);
  std::vector<net::Packet*> reqs = take_requests();
  ASSERT_EQ(reqs.size(), 1u);
  std::vector<uint8_t> bare = copy_of(reqs[0]);
  const uint16_t bth_off = reqs[0]->bth_off;
  DeviceTestPeer::drop(dev_, reqs[0]);
  auto* e = reinterpret_cast<net::DcEth*>(bare.data() + bth_off + net::kDcEthOffset);
  e->flags_dci = uint32_t(e->flags_dci) & ~net::DcEth::kConnect;
  DeviceTestPeer::inject(dev_, bare.data(), bare.size());
  ASSERT_TRUE(run());
  EXPECT_EQ(dev_.counters().dc_no_context, 1u);
  EXPECT_TRUE(drain_cq(dev_, rcq_).empty());
  ASSERT_TRUE(advance(10'000'000));  // the local ACK timeout: sent again, with connect
  auto recvs = drain_cq(dev_, rcq_);
  ASSERT_EQ(recvs.size(), 1u);
  EXPECT_EQ(recvs[0].src_qp, i);
  auto sends = drain_cq(dev_, scq_);
  ASSERT_EQ(sends.size(), 1u);
  EXPECT_EQ(sends[0].status, IBV_WC_SUCCESS);
}

// The wrong key: dropped and counted, nothing taken from the SRQ.
TEST_F(DcTest, WrongKeyIsDropped) {
  const uint32_t s = srq();
  post_srq_recv(s, 5, 4096, 64);
  const uint32_t t = dct(s, kKey);
  const uint32_t i = dci();
  send(i, 1, t, kKey + 1);
  ASSERT_TRUE(run());
  EXPECT_EQ(dev_.counters().dc_bad_key, 1u);
  EXPECT_TRUE(drain_cq(dev_, rcq_).empty());
  EXPECT_TRUE(drain_cq(dev_, scq_).empty());
  EXPECT_EQ(dev_.counters().dc_contexts_created, 0u);
}

// A DCI reset and brought up again starts at the same PSN: a new epoch, so
// the DCT takes it as a new connection, not as duplicates.
TEST_F(DcTest, ResetDciIsANewEpoch) {
  const uint32_t s = srq();
  for (int k = 0; k < 2; ++k) post_srq_recv(s, 30 + k, 4096 + k * 64, 64);
  const uint32_t t = dct(s);
  const uint32_t i = dci();
  send(i, 1, t);
  ASSERT_TRUE(run());
  const uint32_t epoch = dev_.qp(i)->dc_epoch;
  ASSERT_EQ(to_state(i, IBV_QPS_RESET), 0);
  bring_up(i);
  EXPECT_NE(dev_.qp(i)->dc_epoch, epoch);
  send(i, 2, t);
  ASSERT_TRUE(run());
  EXPECT_EQ(drain_cq(dev_, scq_).size(), 2u);
  EXPECT_EQ(drain_cq(dev_, rcq_).size(), 2u);
  EXPECT_EQ(dev_.counters().rx_duplicate, 0u);
}

// Many DCIs at once (300): each gets a context of its own, none is let go,
// every SEND lands once.
TEST_F(DcTest, ManyDcisToOneDct) {
  constexpr int kDcis = 300;
  const uint32_t s = srq(512);
  for (int k = 0; k < kDcis; ++k) post_srq_recv(s, 1000 + k, uint32_t(k) * 64, 64);
  const uint32_t t = dct(s);
  std::vector<uint32_t> dcis;
  for (int k = 0; k < kDcis; ++k) dcis.push_back(dci());
  for (int k = 0; k < kDcis; ++k) send(dcis[k], k, t);
  ASSERT_TRUE(run());
  size_t sends = 0, recvs = 0;
  for (int round = 0; round < 10 && (sends < kDcis || recvs < kDcis); ++round) {
    for (const abi::Cqe& c : drain_cq(dev_, scq_)) sends += c.status == IBV_WC_SUCCESS;
    for (const abi::Cqe& c : drain_cq(dev_, rcq_)) recvs += c.status == IBV_WC_SUCCESS;
    ASSERT_TRUE(run());
  }
  EXPECT_EQ(sends, size_t(kDcis));
  EXPECT_EQ(recvs, size_t(kDcis));
  EXPECT_EQ(dev_.counters().dc_contexts_created, uint64_t(kDcis));
  EXPECT_EQ(dev_.counters().dc_contexts_evicted, 0u);
  EXPECT_EQ(dev_.qp(t)->dc_contexts.size(), size_t(kDcis));
}

// What a DC QP cannot be: a DCT without an SRQ, a DC type that is neither,
// a DCT in RTS, DC on a QP out of RESET or already DC, a UD QP.
TEST_F(DcTest, Refusals) {
  const uint32_t plain = create_qp(IBV_QPT_RC, scq_, rcq_);
  EXPECT_EQ(dev_.make_dc(&owner_, plain, abi::kDcTarget, kKey), EINVAL);  // no SRQ
  EXPECT_EQ(dev_.make_dc(&owner_, plain, 3, kKey), EINVAL);
  const uint32_t ud = create_qp(IBV_QPT_UD, scq_, rcq_);
  EXPECT_EQ(dev_.make_dc(&owner_, ud, abi::kDcInitiator, 0), EINVAL);
  const uint32_t t = dct(srq());
  abi::QpAttr a = default_attr();
  a.qp_state = IBV_QPS_RTS;
  EXPECT_EQ(modify(t, IBV_QP_STATE, a), EINVAL);
  EXPECT_EQ(dev_.make_dc(&owner_, t, abi::kDcInitiator, 0), EINVAL);  // already DC, and out of RESET
}

// DCI streams: a work request that fails before it leaves (here a bad
// lkey) fails its stream, not the DCI; that stream's next work request
// completes flushed and the other streams go on; a reset stream works again
// and one that never failed cannot be reset; with 2^log_errored streams
// failed, the DCI itself is in ERR (rdma-core's test_mlx5_dc.py counts that).
TEST_F(DcTest, StreamsFailAloneUntilTooManyHave) {
  const uint32_t s = srq();
  for (uint32_t i = 0; i < 8; ++i) post_srq_recv(s, 100 + i, 4096 + 64 * i, 64);
  const uint32_t t = dct(s);
  const uint32_t i = create_qp(IBV_QPT_RC, scq_, scq_);
  abi::Mlx5QpDcRequest req{};
  req.dc_type = abi::kDcInitiator;
  req.dci_streams = 1;
  req.log_streams = 2;  // 4 streams; ids name them modulo 4
  req.log_errored = 1;  // the second failed stream fails the DCI
  req.log_streams = abi::kDciMaxLogStreams + 1;
  EXPECT_EQ(dev_.make_dc(&owner_, i, req), EINVAL);
  req.log_streams = 2;
  ASSERT_EQ(dev_.make_dc(&owner_, i, req), 0);
  bring_up(i);
  auto send_on = [&](uint64_t wr_id, uint16_t stream, uint32_t lkey) {
    abi::SendWqe w = wqe(IBV_WR_SEND, wr_id);
    w.av = default_attr().ah;
    w.remote_qpn = t;
    w.dc_key = kKey;
    w.dci_stream = stream;
    post_send(*dev_.qp(i), w, {sge(buf_.data(), 16, lkey)});
    ASSERT_TRUE(run());
  };
  auto status_of = [&](uint64_t wr_id) {
    for (int round = 0; round < 10; ++round) {
      for (const abi::Cqe& c : drain_cq(dev_, scq_)) {
        EXPECT_EQ(c.wr_id, wr_id);
        return c.status;
      }
      run();
    }
    return uint32_t(~0u);
  };
  send_on(1, 1, key_ + 0x100);  // no such lkey
  EXPECT_EQ(status_of(1), uint32_t(IBV_WC_LOC_PROT_ERR));
  EXPECT_EQ(dev_.qp(i)->state, IBV_QPS_RTS);
  send_on(2, 2, key_);
  EXPECT_EQ(status_of(2), uint32_t(IBV_WC_SUCCESS));
  send_on(3, 5, key_);  // 5 is stream 1
  EXPECT_EQ(status_of(3), uint32_t(IBV_WC_WR_FLUSH_ERR));
  EXPECT_EQ(dev_.qp(i)->state, IBV_QPS_RTS);
  EXPECT_EQ(dev_.reset_dci_stream(&owner_, i, 2), EINVAL);  // never failed
  EXPECT_EQ(dev_.reset_dci_stream(&owner_, t, 1), EINVAL);  // not a DCI
  EXPECT_EQ(dev_.reset_dci_stream(&owner_, i, 5), 0);
  EXPECT_EQ(dev_.reset_dci_stream(&owner_, i, 1), EINVAL);  // reset already
  send_on(4, 1, key_);
  EXPECT_EQ(status_of(4), uint32_t(IBV_WC_SUCCESS));
  // Two failed streams (log_errored 1): the second fails the DCI.
  send_on(5, 3, key_ + 0x100);
  EXPECT_EQ(status_of(5), uint32_t(IBV_WC_LOC_PROT_ERR));
  EXPECT_EQ(dev_.qp(i)->state, IBV_QPS_RTS);
  send_on(6, 0, key_ + 0x100);
  EXPECT_EQ(status_of(6), uint32_t(IBV_WC_LOC_PROT_ERR));
  EXPECT_EQ(dev_.qp(i)->state, IBV_QPS_ERR);
  EXPECT_EQ(drain_cq(dev_, rcq_).size(), 2u);  // the two that succeeded
  // RESET and up again: every stream works.
  abi::QpAttr a = default_attr();
  a.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(modify(i, IBV_QP_STATE, a), 0);
  bring_up(i);
  send_on(7, 3, key_);
  EXPECT_EQ(status_of(7), uint32_t(IBV_WC_SUCCESS));
}

// A DCT has no streams; a DCI made without them asks for none.
TEST_F(DcTest, StreamsOnlyOnADciMadeWithThem) {
  abi::Mlx5QpDcRequest req{};
  req.dc_type = abi::kDcInitiator;
  req.log_errored = 1;  // without dci_streams
  EXPECT_EQ(dev_.make_dc(&owner_, create_qp(IBV_QPT_RC, scq_, scq_), req), EINVAL);
  const uint32_t plain_dci = dci();
  EXPECT_EQ(dev_.reset_dci_stream(&owner_, plain_dci, 0), EINVAL);
}

// On a device not in mlx5 mode there is no DC.
TEST(DcPlainDevice, RefusedWithEopnotsupp) {
  Device dev{DeviceConfig{}};
  Owner o = make_self_owner();
  auto pd = dev.alloc_pd(&o);
  abi::CreateCqRequest cq{};
  cq.cqe = 4;
  auto c = dev.create_cq(&o, cq);
  abi::CreateQpRequest q{};
  q.pd = pd.value;
  q.send_cq = q.recv_cq = c.value;
  q.qp_type = IBV_QPT_RC;
  q.caps = {4, 4, 1, 1, 0, 0};
  auto r = dev.create_qp(&o, q);
  ASSERT_EQ(r.err, 0);
  EXPECT_EQ(dev.make_dc(&o, r.value, abi::kDcInitiator, 0), EOPNOTSUPP);
  dev.release_owner(&o);
}

// A DCT that keeps two contexts, so that a third DCI lets one go.
DeviceConfig two_contexts_config() {
  DeviceConfig c = mlx5_config();
  c.max_dc_contexts = 2;
  return c;
}
class DcFewContextsTest : public DcTest {
 protected:
  DcFewContextsTest() : DcTest(two_contexts_config()) {}
};

// A context let go while its DCI still used it, after its ACK of a SEND
// was lost: the DCI's retry (no connect: it was connected) finds the
// context made again where it stood, so the SEND is answered as a
// duplicate and lands once; the DCI goes on on that connection.
TEST_F(DcFewContextsTest, AContextLetGoComesBackWhereItStood) {
  const uint32_t s = srq(64);
  for (int k = 0; k < 16; ++k) post_srq_recv(s, 100 + k, 4096 + k * 64, 64);
  const uint32_t t = dct(s);
  const uint32_t a = dci(/*timeout=*/8), b = dci(), c = dci();
  send(a, 1, t);
  ASSERT_TRUE(run());
  ASSERT_EQ(drain_cq(dev_, scq_).size(), 1u);
  ASSERT_EQ(drain_cq(dev_, rcq_).size(), 1u);
  // a's second SEND lands; its ACK is lost.
  send(a, 2, t);
  for (int i = 0; i < 20; ++i) {
    dev_.poll(now_);
    for (net::Packet* p : DeviceTestPeer::take_in_flight(dev_)) {
      const bool request = (p->framed || net::parse_roce_packet(*p, false) == net::ParseError::kOk) &&
                           p->info().has(net::kHasDcEth);
      if (request) DeviceTestPeer::requeue(dev_, p);
      else DeviceTestPeer::drop(dev_, p);
    }
  }
  ASSERT_EQ(drain_cq(dev_, rcq_).size(), 1u) << "the SEND landed";
  EXPECT_TRUE(drain_cq(dev_, scq_).empty()) << "its ACK was lost";
  // Two more DCIs: the DCT lets a's idle context go.
  send(b, 3, t);
  send(c, 4, t);
  ASSERT_TRUE(run());
  EXPECT_EQ(dev_.counters().dc_contexts_evicted, 1u);
  EXPECT_EQ(drain_cq(dev_, rcq_).size(), 2u);
  EXPECT_EQ(drain_cq(dev_, scq_).size(), 2u);
  // a's local ACK timeout: the SEND again, which the context made again
  // from what the DCT kept answers as a duplicate.
  const uint64_t dups = dev_.counters().rx_duplicate;
  ASSERT_TRUE(advance(10'000'000));
  EXPECT_EQ(dev_.counters().dc_contexts_restored, 1u);
  EXPECT_EQ(dev_.counters().rx_duplicate, dups + 1);
  EXPECT_EQ(dev_.counters().dc_no_context, 0u);
  EXPECT_TRUE(drain_cq(dev_, rcq_).empty()) << "the SEND was delivered twice";
  auto sent = drain_cq(dev_, scq_);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].wr_id, 2u);
  EXPECT_EQ(sent[0].status, IBV_WC_SUCCESS);
  // And on: a's next SEND on the same connection.
  send(a, 5, t);
  ASSERT_TRUE(run());
  auto next = drain_cq(dev_, scq_);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(drain_cq(dev_, rcq_).size(), 1u);
}

}  // namespace
}  // namespace uroce::device
