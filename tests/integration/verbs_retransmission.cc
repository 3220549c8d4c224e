// Verbs semantics: RC retransmission seen from the verbs API, against a real
// engine (issue 9 point 5; the packet-level rules are tested in
// tests/unit/device/retransmission_test.cc).
#include <cstring>

#include "tests/integration/verbs_fixture.h"

namespace vt {
namespace {

class Retransmission : public VerbsTest {};

// rnr_retry 7 retries for as long as it takes (IBA 9.7.5.2.8), for a SEND of
// several packets as for one: the rest of the message behind an RNR-NAKed
// FIRST must not use up retry_cnt. It used to end in WR_FLUSH_ERR / RETRY_EXC
// after about 0.4 s.
TEST_F(Retransmission, InfiniteRnrRetryMultiPacketSendWaitsForALateReceive) {
  ConnectOpts o;
  o.rnr_retry = 7;
  o.retry_cnt = 7;
  o.min_rnr_timer = 1;  // 0.01 ms: many RNR rounds in the second below
  o.mtu = IBV_MTU_1024;
  Pair p = make_pair(IBV_QPT_RC, o);
  ASSERT_FALSE(HasFailure());
  constexpr uint32_t kLen = 3 * 1024;  // FIRST, MIDDLE, LAST
  ibv_mr* src = reg_buffer(kLen, IBV_ACCESS_LOCAL_WRITE, 0);
  ibv_mr* dst = reg_buffer(kLen, IBV_ACCESS_LOCAL_WRITE, 0);
  ASSERT_NE(src, nullptr);
  ASSERT_NE(dst, nullptr);
  auto* bytes = static_cast<uint8_t*>(src->addr);
  for (uint32_t i = 0; i < kLen; ++i) bytes[i] = uint8_t(i * 7 + (i >> 10));
  ibv_sge s = sge_of(src, 0, kLen);
  ASSERT_EQ(post_send(p.a.qp, 1, IBV_WR_SEND, &s, 1), 0);
  std::vector<ibv_wc> early = drain_for(p.a.cq, 1000);  // the receive comes 1 s later
  ASSERT_TRUE(early.empty()) << "the SEND completed without a receive: " << describe(early[0]);
  ASSERT_EQ(post_recv_mr(p.b.qp, 2, dst, 0, kLen), 0);
  ibv_wc wc;
  VT_POLL_ONE(p.a.cq, &wc);
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  VT_POLL_ONE(p.b.cq, &wc);
  EXPECT_EQ(wc.wr_id, 2u);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(wc.byte_len, kLen);
  EXPECT_EQ(std::memcmp(dst->addr, src->addr, kLen), 0) << "data differs";
  EXPECT_EQ(qp_state(p.a.qp), IBV_QPS_RTS);
}

}  // namespace
}  // namespace vt
