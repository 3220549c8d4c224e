// Verbs semantics on a wire port: run by two_hosts_test.sh inside a network
// namespace with an engine on a DPDK port (UROCE_TEST_DEVICE names it).
#include <arpa/inet.h>

#include <chrono>
#include <cstdlib>

#include "tests/integration/verbs_fixture.h"

namespace vt {
namespace {

class Wire : public VerbsTest {};

// A peer that does not answer (no host owns the address: ARP fails, every
// packet is lost) ends in IBV_WC_RETRY_EXC_ERR after (retry_cnt + 1) x
// 4.096 us x 2^timeout, the IBA's local ACK timeout, as on a ConnectX (no
// first-contact grace: that is for a peer QP of the same engine still in
// INIT, device/params.h); not in a hang.
TEST_F(Wire, UnreachablePeerEndsInRetryExceeded) {
  const char* ip = std::getenv("UROCE_TEST_UNREACHABLE_IP");
  if (!ip) GTEST_SKIP() << "set UROCE_TEST_UNREACHABLE_IP (two_hosts_test.sh does)";
  ibv_cq* cq = make_cq();
  ASSERT_NE(cq, nullptr);
  ibv_qp* qp = make_qp(IBV_QPT_RC, cq, cq);
  ASSERT_NE(qp, nullptr);
  to_init(qp, IBV_ACCESS_REMOTE_WRITE);
  ASSERT_FALSE(HasFatalFailure());
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = 0x99;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  a.ah_attr.port_num = 1;
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.grh.dgid.raw[10] = a.ah_attr.grh.dgid.raw[11] = 0xff;
  ASSERT_EQ(inet_pton(AF_INET, ip, &a.ah_attr.grh.dgid.raw[12]), 1);
  ASSERT_EQ(ibv_modify_qp(qp, &a,
                          IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                              IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
            0);
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 17;  // 537 ms
  a.retry_cnt = 5;
  a.rnr_retry = 3;
  a.max_rd_atomic = 1;
  ASSERT_EQ(ibv_modify_qp(qp, &a,
                          IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                              IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC),
            0);
  ibv_mr* mr = reg_buffer(64, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  ibv_sge s = sge_of(mr, 0, 64);
  const auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(post_send(qp, 1, IBV_WR_SEND, &s, 1), 0);
  ibv_wc wc;
  ASSERT_TRUE(poll_one(cq, &wc, 15)) << "no completion within 15 s";
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR) << describe(wc);
  // 6 tries x 537 ms = 3.22 s, within 10 % (a late engine may stretch it a
  // little; it must not add a constant).
  const double want = 6 * 4.096e-6 * (1 << 17);
  EXPECT_GT(seconds, want * 0.9) << "the retries must take the time the attributes say";
  EXPECT_LT(seconds, want * 1.1) << "no more than the attributes say";
  EXPECT_EQ(qp_state(qp), IBV_QPS_ERR);
}

}  // namespace
}  // namespace vt
