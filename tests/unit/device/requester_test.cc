// Protocol tests for device/requester.cc: QP A's work requests are turned into
// packets, which the test takes off the loopback port before B sees them and
// checks header by header (IBA 9.7.1 - 9.7.4, 9.2).
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "device/test_env.h"

namespace uroce::device {
namespace {

using net::AtomicEth;
using net::Deth;
using net::Reth;

constexpr uint32_t kPsn = 1000;  // A's first PSN (PairFixture::make_pair)

// The request headers of one frame, as the wire carries them.
struct Request {
  uint8_t opcode = 0;
  uint32_t qpn = 0, psn = 0;
  bool ack_req = false, solicited = false;
  uint16_t pkey = 0;
  bool has_reth = false;
  uint64_t va = 0;
  uint32_t rkey = 0, dma_len = 0;
  bool has_imm = false;
  uint32_t imm = 0;
  uint64_t swap_add = 0, compare = 0;
  uint32_t qkey = 0, src_qp = 0;
  std::vector<uint8_t> payload;
};

class RequesterTest : public PairFixture {
 protected:
  // B's answer to A's request at `psn`, as B would send it: `opcode` with
  // an AETH that acknowledges (MSN 1), and its payload if any.
  void respond(uint8_t opcode, uint32_t psn, const void* payload = nullptr, uint32_t len = 0) {
    inject(opcode, a_, psn, false, [](net::Packet& p) {
      p.hdr<net::Aeth>(p.info().aeth_off)->syndrome_msn = 0x1f000001u;
    }, payload, len);
  }
  // With max_rd_atomic 1, a READ (wr_id 2) posted behind `first` leaves only
  // once B's READ response ONLY at kPsn (`len` bytes) answers `first`;
  // returns the completion of `first`.
  abi::Cqe read_waits_for(const abi::SendWqe& first, std::initializer_list<abi::Sge> sges, uint32_t len) {
    abi::QpAttr attr = default_attr();
    attr.max_rd_atomic = 1;
    make_pair(IBV_QPT_RC, attr, default_attr());
    post_send(A(), first, sges);
    abi::SendWqe rd = wqe(IBV_WR_RDMA_READ, 2);
    rd.remote_addr = b_addr(0);
    rd.rkey = b_key_;
    post_send(A(), rd, {sge(a(4096), 100, a_key_)});
    auto r = sent();
    EXPECT_EQ(r.size(), 1u);
    if (!r.empty()) {
      EXPECT_EQ(r[0].psn, kPsn);
    }
    respond(0x10, kPsn, b(0), len);  // the answer lets the READ go
    r = sent();
    EXPECT_EQ(r.size(), 1u);
    if (!r.empty()) {
      EXPECT_EQ(r[0].opcode, 0x0c);
      EXPECT_EQ(r[0].psn, kPsn + 1);
    }
    return one_cqe(a_scq_);
  }
  // Polls once and decodes every frame A sent.
  std::vector<Request> sent() {
    dev_.poll(now_);
    std::vector<Request> out;
    for (net::Packet* p : DeviceTestPeer::take_in_flight(dev_)) {
      EXPECT_EQ(net::parse_roce_packet(*p, p->checksummed), net::ParseError::kOk);
      Request r;
      r.opcode = p->opcode;
      r.qpn = p->bth()->qpn();
      r.psn = p->bth()->psn();
      r.ack_req = p->bth()->ack_req();
      r.solicited = p->bth()->solicited();
      r.pkey = p->bth()->pkey;
      const net::OpcodeInfo& info = p->info();
      if (info.has(net::kHasReth)) {
        const auto* h = p->hdr<Reth>(info.reth_off);
        r.has_reth = true;
        r.va = h->va;
        r.rkey = h->rkey;
        r.dma_len = h->dma_len;
      }
      if (info.has(net::kHasAtomicEth)) {
        const auto* h = p->hdr<AtomicEth>(info.atomiceth_off);
        r.va = h->va;
        r.rkey = h->rkey;
        r.swap_add = h->swap_add;
        r.compare = h->compare;
      }
      if (info.has(net::kHasImm)) {
        r.has_imm = true;
        r.imm = p->hdr<net::ImmDt>(info.imm_off)->imm;
      }
      if (info.has(net::kHasDeth)) {
        r.qkey = p->hdr<Deth>(info.deth_off)->qkey;
        r.src_qp = p->hdr<Deth>(info.deth_off)->src_qp;
      }
      r.payload.assign(p->payload(), p->payload() + p->payload_len);
      out.push_back(std::move(r));
      DeviceTestPeer::drop(dev_, p);
    }
    return out;
  }
};

TEST_F(RequesterTest, SendIsSegmentedByThePathMtu) {
  make_pair(IBV_QPT_RC);  // MTU 1024
  post_send(A(), wqe(IBV_WR_SEND_WITH_IMM, 1, IBV_SEND_SIGNALED | IBV_SEND_SOLICITED),
            {sge(a(0), 2500, a_key_)});
  auto r = sent();
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].opcode, 0x00);  // SEND_FIRST
  EXPECT_EQ(r[1].opcode, 0x01);  // SEND_MIDDLE
  EXPECT_EQ(r[2].opcode, 0x03);  // SEND_LAST_WITH_IMMEDIATE
  std::vector<uint8_t> all;
  for (uint32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(r[i].qpn, b_);
    EXPECT_EQ(r[i].psn, kPsn + i);
    EXPECT_EQ(r[i].pkey, 0xffff);
    EXPECT_EQ(r[i].ack_req, i == 2);       // AckReq on the last packet
    EXPECT_EQ(r[i].solicited, i == 2);     // SE only on the last packet
    EXPECT_EQ(r[i].has_imm, i == 2);
    all.insert(all.end(), r[i].payload.begin(), r[i].payload.end());
  }
  EXPECT_EQ(r[0].payload.size(), 1024u);
  EXPECT_EQ(r[2].payload.size(), 452u);
  ASSERT_EQ(all.size(), 2500u);
  EXPECT_EQ(std::memcmp(all.data(), a(0), 2500), 0);
  EXPECT_EQ(A().req_psn, kPsn + 3);
}

TEST_F(RequesterTest, SingleSendIsSendOnly) {
  make_pair(IBV_QPT_RC);
  post_send(A(), wqe(IBV_WR_SEND, 1), {sge(a(0), 1024, a_key_)});  // exactly one MTU
  auto r = sent();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].opcode, 0x04);
  EXPECT_TRUE(r[0].ack_req);
  EXPECT_FALSE(r[0].solicited);
}

TEST_F(RequesterTest, WriteCarriesTheRethOnTheFirstPacketOnly) {
  make_pair(IBV_QPT_RC);
  abi::SendWqe w = wqe(IBV_WR_RDMA_WRITE_WITH_IMM, 1);
  w.remote_addr = 0x123456789abcull;
  w.rkey = 0xabcdef01;
  w.imm_data = htonl(5);
  post_send(A(), w, {sge(a(0), 2048, a_key_), sge(a(4096), 100, a_key_)});
  auto r = sent();
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].opcode, 0x06);  // WRITE_FIRST
  EXPECT_EQ(r[1].opcode, 0x07);  // WRITE_MIDDLE
  EXPECT_EQ(r[2].opcode, 0x09);  // WRITE_LAST_WITH_IMMEDIATE
  EXPECT_TRUE(r[0].has_reth);
  EXPECT_EQ(r[0].va, 0x123456789abcull);
  EXPECT_EQ(r[0].rkey, 0xabcdef01u);
  EXPECT_EQ(r[0].dma_len, 2148u);  // the whole message
  EXPECT_FALSE(r[1].has_reth);
  EXPECT_FALSE(r[2].has_reth);
  EXPECT_EQ(r[2].imm, htonl(5));
  EXPECT_EQ(r[2].payload.size(), 100u);
  EXPECT_EQ(std::memcmp(r[2].payload.data(), a(4096), 100), 0);
}

TEST_F(RequesterTest, ReadIsOneRequestThatReservesOnePsnPerResponse) {
  make_pair(IBV_QPT_RC);
  abi::SendWqe w = wqe(IBV_WR_RDMA_READ, 1);
  w.remote_addr = 0x1000;
  w.rkey = 0x77;
  post_send(A(), w, {sge(a(0), 3000, a_key_)});
  post_send(A(), wqe(IBV_WR_SEND, 2, IBV_SEND_SIGNALED | IBV_SEND_FENCE), {sge(a(0), 8, a_key_)});
  auto r = sent();
  ASSERT_EQ(r.size(), 1u);  // the fenced SEND waits for the READ
  EXPECT_EQ(r[0].opcode, 0x0c);
  EXPECT_EQ(r[0].psn, kPsn);
  EXPECT_TRUE(r[0].ack_req);
  EXPECT_EQ(r[0].va, 0x1000u);
  EXPECT_EQ(r[0].rkey, 0x77u);
  EXPECT_EQ(r[0].dma_len, 3000u);
  EXPECT_TRUE(r[0].payload.empty());
  EXPECT_EQ(A().req_psn, kPsn + 3);
}

TEST_F(RequesterTest, AtomicsCarryTheirOperands) {
  make_pair(IBV_QPT_RC);
  abi::SendWqe cas = wqe(IBV_WR_ATOMIC_CMP_AND_SWP, 1);
  cas.remote_addr = 0x8000;
  cas.rkey = 0x55;
  cas.compare_add = 0x1111;
  cas.swap = 0x2222;
  post_send(A(), cas, {sge(a(0), 8, a_key_)});
  abi::SendWqe fa = wqe(IBV_WR_ATOMIC_FETCH_AND_ADD, 2);
  fa.remote_addr = 0x8008;
  fa.rkey = 0x55;
  fa.compare_add = 7;
  post_send(A(), fa, {sge(a(8), 8, a_key_)});
  auto r = sent();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].opcode, 0x13);
  EXPECT_EQ(r[0].compare, 0x1111u);
  EXPECT_EQ(r[0].swap_add, 0x2222u);
  EXPECT_EQ(r[0].va, 0x8000u);
  EXPECT_EQ(r[1].opcode, 0x14);
  EXPECT_EQ(r[1].swap_add, 7u);
  EXPECT_EQ(r[1].psn, kPsn + 1);
}

TEST_F(RequesterTest, MaxRdAtomicLimitsOutstandingReads) {
  abi::SendWqe w = wqe(IBV_WR_RDMA_READ, 1);
  w.remote_addr = b_addr(0);
  w.rkey = b_key_;
  EXPECT_EQ(read_waits_for(w, {sge(a(0), 100, a_key_)}, 100).wr_id, 1u);
}

TEST_F(RequesterTest, AtomicWriteCarriesARethAndItsEightBytes) {
  make_pair(IBV_QPT_RC);
  abi::SendWqe w = wqe(IBV_WR_ATOMIC_WRITE, 1, IBV_SEND_SIGNALED | IBV_SEND_INLINE);
  w.remote_addr = 0x9000;
  w.rkey = 0x66;
  std::memcpy(&w.compare_add, "ABCDEFGH", 8);  // the bytes of ibv_wr_atomic_write's atomic_wr
  w.num_sge = 3;  // neither SGEs nor inline data: the engine ignores both
  post_send(A(), w, {});
  auto r = sent();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].opcode, 0x1d);  // RC ATOMIC_WRITE
  EXPECT_EQ(r[0].psn, kPsn);
  EXPECT_TRUE(r[0].ack_req);
  EXPECT_TRUE(r[0].has_reth);
  EXPECT_EQ(r[0].va, 0x9000u);
  EXPECT_EQ(r[0].rkey, 0x66u);
  EXPECT_EQ(r[0].dma_len, 8u);
  ASSERT_EQ(r[0].payload.size(), 8u);
  EXPECT_EQ(std::memcmp(r[0].payload.data(), "ABCDEFGH", 8), 0);
  EXPECT_EQ(A().req_psn, kPsn + 1);
  // Its answer, a READ response of no data, completes it.
  respond(0x10, kPsn);
  EXPECT_TRUE(sent().empty());
  abi::Cqe c = one_cqe(a_scq_);
  EXPECT_EQ(c.wr_id, 1u);
  EXPECT_EQ(c.status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(c.opcode, uint32_t(IBV_WC_ATOMIC_WRITE));
  EXPECT_EQ(c.byte_len, 8u);
}

TEST_F(RequesterTest, AtomicWriteIsNotCompletedByAPlainAckOrAReadResponseWithData) {
  make_pair(IBV_QPT_RC);
  abi::SendWqe w = wqe(IBV_WR_ATOMIC_WRITE, 1);
  w.remote_addr = b_addr(0);
  w.rkey = b_key_;
  post_send(A(), w, {});
  ASSERT_EQ(sent().size(), 1u);
  respond(0x10, kPsn, b(0), 8);  // data: a READ's answer, not this one's
  sent();
  EXPECT_TRUE(drain_cq(dev_, a_scq_).empty());
  EXPECT_GE(counters().rx_stale_response, 1u);
  // An ACK covering it is an implicit NAK (IBA 9.7.5.1.5): it is asked again.
  respond(0x11, kPsn);
  auto r = sent();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].opcode, 0x1d);
  EXPECT_EQ(r[0].psn, kPsn);
  EXPECT_TRUE(drain_cq(dev_, a_scq_).empty());
}

TEST_F(RequesterTest, MaxRdAtomicCountsAtomicWrites) {
  // rxe's check_init_depth takes a slot for ATOMIC WRITE as for a READ.
  abi::SendWqe w = wqe(IBV_WR_ATOMIC_WRITE, 1);
  w.remote_addr = b_addr(0);
  w.rkey = b_key_;
  EXPECT_EQ(read_waits_for(w, {}, 0).opcode, uint32_t(IBV_WC_ATOMIC_WRITE));
}

TEST_F(RequesterTest, AtomicWriteIsNotAUcOperation) {
  make_pair(IBV_QPT_UC);
  abi::SendWqe w = wqe(IBV_WR_ATOMIC_WRITE, 1);
  w.remote_addr = b_addr(0);
  w.rkey = b_key_;
  post_send(A(), w, {});
  EXPECT_TRUE(sent().empty());
  EXPECT_EQ(one_cqe(a_scq_).status, uint32_t(IBV_WC_LOC_QP_OP_ERR));
}

TEST_F(RequesterTest, AckReqAtLeastEvery64Packets) {
  abi::QpAttr attr = default_attr();
  attr.path_mtu = IBV_MTU_256;
  make_pair(IBV_QPT_RC, attr, attr);
  post_send(A(), wqe(IBV_WR_SEND, 1), {sge(a(0), 100 * 256, a_key_)});  // 100 packets
  std::vector<Request> all;
  for (int i = 0; i < 4 && all.size() < 100; ++i) {
    auto r = sent();
    all.insert(all.end(), r.begin(), r.end());
  }
  ASSERT_EQ(all.size(), 100u);
  uint32_t since = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(all[i].psn, kPsn + i);
    ++since;
    if (all[i].ack_req) since = 0;
    EXPECT_LE(since, 64u) << i;
  }
  EXPECT_TRUE(all.back().ack_req);
}

TEST_F(RequesterTest, InlineDataIsSentFromTheWqe) {
  make_pair(IBV_QPT_RC);
  const char text[] = "from the WQE itself";
  abi::SendWqe w = wqe(IBV_WR_SEND, 1, IBV_SEND_SIGNALED | IBV_SEND_INLINE);
  w.inline_len = sizeof(text);
  post_send(A(), w, {}, text);
  auto r = sent();
  ASSERT_EQ(r.size(), 1u);
  ASSERT_EQ(r[0].payload.size(), sizeof(text));
  EXPECT_STREQ(reinterpret_cast<const char*>(r[0].payload.data()), text);
}

TEST_F(RequesterTest, UdSendCarriesTheDeth) {
  a_ = create_qp(IBV_QPT_UD, a_scq_, a_rcq_);
  abi::QpAttr attr = default_attr();
  attr.qkey = 0x4444;
  connect(a_, 0, attr);
  abi::SendWqe w = wqe(IBV_WR_SEND, 1);
  w.remote_qpn = 0x123456;
  w.remote_qkey = 0x9999;
  w.av.is_global = 1;  // the address handle: a GID of this device
  std::memcpy(w.av.dgid, dev_.info().gids[0].gid, 16);
  post_send(A(), w, {sge(a(0), 200, a_key_)});
  w.remote_qkey = 0x80000000u;  // "use the QP's Q_Key"
  post_send(A(), w, {sge(a(0), 200, a_key_)});
  auto r = sent();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].opcode, 0x64);
  EXPECT_EQ(r[0].qpn, 0x123456u);
  EXPECT_EQ(r[0].qkey, 0x9999u);
  EXPECT_EQ(r[0].src_qp, a_);
  EXPECT_FALSE(r[0].ack_req);
  EXPECT_EQ(r[1].qkey, 0x4444u);
  // UD completes as soon as the datagram is out.
  EXPECT_EQ(drain_cq(dev_, a_scq_).size(), 2u);
}

TEST_F(RequesterTest, NothingIsSentOutsideRts) {
  a_ = create_qp(IBV_QPT_RC, a_scq_, a_rcq_);
  abi::QpAttr attr = default_attr();
  attr.qp_state = IBV_QPS_INIT;
  ASSERT_EQ(modify(a_, kRcInitMask, attr), 0);
  post_send(A(), wqe(IBV_WR_SEND, 1), {sge(a(0), 8, a_key_)});
  EXPECT_TRUE(sent().empty());
  attr.qp_state = IBV_QPS_RTR;
  attr.dest_qp_num = 0x99;
  ASSERT_EQ(modify(a_, kRcRtrMask, attr), 0);
  EXPECT_TRUE(sent().empty());
  attr.qp_state = IBV_QPS_RTS;
  ASSERT_EQ(modify(a_, kRcRtsMask, attr), 0);
  EXPECT_EQ(sent().size(), 1u);
}

TEST_F(RequesterTest, SqdStopsNewWorkRequests) {
  make_pair(IBV_QPT_RC);
  ASSERT_EQ(to_state(a_, IBV_QPS_SQD), 0);
  post_send(A(), wqe(IBV_WR_SEND, 1), {sge(a(0), 8, a_key_)});
  EXPECT_TRUE(sent().empty());
  ASSERT_EQ(to_state(a_, IBV_QPS_RTS), 0);
  EXPECT_EQ(sent().size(), 1u);
}

TEST_F(RequesterTest, SqdFinishesTheMessageInProgress) {
  abi::QpAttr attr = default_attr();
  attr.path_mtu = IBV_MTU_256;
  attr.timeout = 10;
  make_pair(IBV_QPT_RC, attr, attr);
  post_recv(B(), 1, {sge(b(0), 32768, b_key_)});
  post_send(A(), wqe(IBV_WR_SEND, 1), {sge(a(0), 100 * 256, a_key_)});  // 100 packets
  dev_.poll(now_);  // one requester budget (64 packets) goes out
  ASSERT_LT(A().sq_next, 1u);  // the message is still in progress
  ASSERT_EQ(to_state(a_, IBV_QPS_SQD), 0);
  ASSERT_TRUE(run());
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(advance(4096ull << 10));
  abi::Cqe s = one_cqe(a_scq_);
  EXPECT_EQ(s.status, uint32_t(IBV_WC_SUCCESS));
  EXPECT_EQ(one_cqe(b_rcq_).byte_len, 100u * 256);
}

}  // namespace
}  // namespace uroce::device
