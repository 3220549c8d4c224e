// Completion timestamps (issue 13): IBV_WC_EX_WITH_COMPLETION_TIMESTAMP and
// _WALLCLOCK in ibv_create_cq_ex, hca_core_clock in ibv_query_device_ex and
// the raw clock of ibv_query_rt_values_ex. uroce's device clock is
// CLOCK_MONOTONIC_RAW in nanoseconds (hca_core_clock 1 000 000 kHz), so a
// timestamp can be held against the test's own reads of that clock.
#include <time.h>

#include <cerrno>

#include "verbs_fixture.h"

namespace vt {
namespace {

uint64_t clock_ns(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000u + uint64_t(ts.tv_nsec);
}

struct StampedWc {
  uint64_t wr_id;
  ibv_wc_status status;
  ibv_wc_opcode opcode;
  uint64_t ts;    // device clock
  uint64_t wall;  // ns since the epoch
};

// Polls cq through the ibv_cq_ex reader until n entries arrived or the
// deadline passed; reads both timestamps of each.
std::vector<StampedWc> poll_stamped(ibv_cq_ex* cq, size_t n) {
  std::vector<StampedWc> out;
  const auto deadline = deadline_after(kWaitSeconds);
  ibv_poll_cq_attr attr{};
  while (out.size() < n && Clock::now() < deadline) {
    int rc = ibv_start_poll(cq, &attr);
    if (rc == ENOENT) continue;
    if (rc) {
      ADD_FAILURE() << "ibv_start_poll: " << std::strerror(rc);
      return out;
    }
    do {
      out.push_back({cq->wr_id, cq->status, ibv_wc_read_opcode(cq), ibv_wc_read_completion_ts(cq),
                     ibv_wc_read_completion_wallclock_ns(cq)});
    } while (out.size() < n && ibv_next_poll(cq) == 0);
    ibv_end_poll(cq);
  }
  return out;
}

class Timestamps : public VerbsTest {
 protected:
  ibv_cq_ex* make_stamped_cq(uint64_t wc_flags, int cqe = 1024) {
    ibv_cq_init_attr_ex attr{};
    attr.cqe = uint32_t(cqe);
    attr.wc_flags = IBV_WC_STANDARD_FLAGS | wc_flags;
    return make_cq_ex(&attr);
  }
  // An RC QP completing into cq, connected to a QP of its own CQ.
  Pair connect_to(ibv_cq_ex* cq) {
    Pair p;
    p.a.cq = ibv_cq_ex_to_cq(cq);
    p.b.cq = make_cq(1024);
    QpCaps caps;
    caps.max_send_wr = caps.max_recv_wr = 256;
    p.a.qp = make_qp(IBV_QPT_RC, p.a.cq, p.a.cq, caps);
    p.b.qp = make_qp(IBV_QPT_RC, p.b.cq, p.b.cq, caps);
    EXPECT_NE(p.a.qp, nullptr);
    EXPECT_NE(p.b.qp, nullptr);
    if (p.a.qp && p.b.qp) {
      connect_qp(p.a.qp, p.b.qp->qp_num);
      connect_qp(p.b.qp, p.a.qp->qp_num);
    }
    return p;
  }
};

TEST_F(Timestamps, DeviceAdvertisesItsClock) {
  ibv_device_attr_ex attr{};
  ASSERT_EQ(ibv_query_device_ex(ctx_, nullptr, &attr), 0);
  EXPECT_EQ(attr.hca_core_clock, 1'000'000u) << "kHz: a nanosecond counter";
  EXPECT_EQ(attr.completion_timestamp_mask, ~uint64_t(0));
}

TEST_F(Timestamps, CreateCqExAcceptsBothTimestampFlags) {
  for (uint64_t flags : {uint64_t(IBV_WC_EX_WITH_COMPLETION_TIMESTAMP),
                         uint64_t(IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK),
                         uint64_t(IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
                                  IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK)}) {
    errno = 0;
    EXPECT_NE(make_stamped_cq(flags, 16), nullptr) << "wc_flags " << flags << ": " << std::strerror(errno);
  }
}

// Sends, RDMA writes and receives interleaved on one CQ: every entry stamped,
// in order, within the clock reads around the traffic.
TEST_F(Timestamps, MonotonicOverManyCompletionsOnOneCq) {
  ibv_cq_ex* cq = make_stamped_cq(IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
                                  IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK);
  ASSERT_NE(cq, nullptr) << std::strerror(errno);
  Pair p = connect_to(cq);
  ASSERT_NE(p.a.qp, nullptr);
  ibv_mr* a_mr = reg_buffer(4096, kRw, 0x11);
  ibv_mr* b_mr = reg_buffer(4096, kRw, 0x22);
  const uint64_t raw_before = clock_ns(CLOCK_MONOTONIC_RAW);
  const uint64_t wall_before = clock_ns(CLOCK_REALTIME);
  constexpr int kRounds = 8, kPerRound = 48;  // 3 completions on cq per step
  std::vector<StampedWc> all;
  for (int round = 0; round < kRounds; ++round) {
    for (int i = 0; i < kPerRound; ++i) {
      const uint64_t id = uint64_t(round * kPerRound + i);
      ASSERT_EQ(post_recv_mr(p.a.qp, 1'000'000 + id, a_mr, 0, 64), 0);
      ibv_sge to_a = sge_of(b_mr, 0, 64);
      ASSERT_EQ(post_send(p.b.qp, id, IBV_WR_SEND, &to_a, 1), 0);
      ibv_sge w = sge_of(a_mr, 128, 64);
      ASSERT_EQ(post_send(p.a.qp, 2'000'000 + id, IBV_WR_RDMA_WRITE, &w, 1, IBV_SEND_SIGNALED,
                          addr_of(b_mr, 256), b_mr->rkey),
                0);
      ibv_sge s = sge_of(a_mr, 512, 32);
      ASSERT_EQ(post_send(p.a.qp, 3'000'000 + id, IBV_WR_SEND, &s, 1), 0);
      ASSERT_EQ(post_recv_mr(p.b.qp, 4'000'000 + id, b_mr, 1024, 64), 0);
    }
    auto got = poll_stamped(cq, 3 * kPerRound);
    ASSERT_EQ(got.size(), size_t(3 * kPerRound)) << "round " << round;
    all.insert(all.end(), got.begin(), got.end());
    ASSERT_EQ(poll_n(p.b.cq, 2 * kPerRound).size(), size_t(2 * kPerRound));
  }
  const uint64_t raw_after = clock_ns(CLOCK_MONOTONIC_RAW);
  const uint64_t wall_after = clock_ns(CLOCK_REALTIME);
  int recvs = 0, writes = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    const StampedWc& e = all[i];
    ASSERT_EQ(e.status, IBV_WC_SUCCESS) << "wr_id " << e.wr_id;
    recvs += e.opcode == IBV_WC_RECV;
    writes += e.opcode == IBV_WC_RDMA_WRITE;
    EXPECT_GE(e.ts, raw_before) << "entry " << i;
    EXPECT_LE(e.ts, raw_after) << "entry " << i;
    EXPECT_GE(e.wall, wall_before) << "entry " << i;
    EXPECT_LE(e.wall, wall_after) << "entry " << i;
    if (i) {
      EXPECT_GE(e.ts, all[i - 1].ts) << "entry " << i << " stamped before entry " << i - 1;
      EXPECT_GE(e.wall, all[i - 1].wall) << "entry " << i;
    }
  }
  EXPECT_EQ(recvs, kRounds * kPerRound);
  EXPECT_EQ(writes, kRounds * kPerRound);
  // Stamped when completed, not all at once: the run spans distinct values.
  EXPECT_GT(all.back().ts, all.front().ts);
}

TEST_F(Timestamps, RawClockOfQueryRtValuesIsTheCompletionClock) {
  ibv_values_ex v{};
  v.comp_mask = IBV_VALUES_MASK_RAW_CLOCK;
  const uint64_t before = clock_ns(CLOCK_MONOTONIC_RAW);
  ASSERT_EQ(ibv_query_rt_values_ex(ctx_, &v), 0);
  const uint64_t after = clock_ns(CLOCK_MONOTONIC_RAW);
  EXPECT_EQ(v.comp_mask, uint32_t(IBV_VALUES_MASK_RAW_CLOCK));
  // As mlx5: the counter's ticks in tv_nsec, tv_sec 0.
  EXPECT_EQ(v.raw_clock.tv_sec, 0);
  EXPECT_GE(uint64_t(v.raw_clock.tv_nsec), before);
  EXPECT_LE(uint64_t(v.raw_clock.tv_nsec), after);

  // A completion after the query is stamped after it.
  ibv_cq_ex* cq = make_stamped_cq(IBV_WC_EX_WITH_COMPLETION_TIMESTAMP, 16);
  ASSERT_NE(cq, nullptr);
  Pair p = connect_to(cq);
  ASSERT_NE(p.a.qp, nullptr);
  ibv_mr* mr = reg_buffer(256, kRw);
  ibv_sge w = sge_of(mr, 0, 8);
  ASSERT_EQ(post_send(p.a.qp, 7, IBV_WR_RDMA_WRITE, &w, 1, IBV_SEND_SIGNALED, addr_of(mr, 64), mr->rkey), 0);
  auto got = poll_stamped(cq, 1);
  ASSERT_EQ(got.size(), 1u);
  ibv_values_ex later{};
  later.comp_mask = IBV_VALUES_MASK_RAW_CLOCK;
  ASSERT_EQ(ibv_query_rt_values_ex(ctx_, &later), 0);
  EXPECT_GT(got[0].ts, uint64_t(v.raw_clock.tv_nsec));
  EXPECT_LE(got[0].ts, uint64_t(later.raw_clock.tv_nsec));
}

TEST_F(Timestamps, QueryRtValuesRejectsUnknownMaskBits) {
  ibv_values_ex v{};
  v.comp_mask = IBV_VALUES_MASK_RAW_CLOCK | (1u << 7);
  EXPECT_EQ(ibv_query_rt_values_ex(ctx_, &v), EINVAL);  // mlx5: check_comp_mask
  ibv_values_ex none{};
  EXPECT_EQ(ibv_query_rt_values_ex(ctx_, &none), 0);
  EXPECT_EQ(none.comp_mask, 0u) << "nothing asked, nothing answered";
}

// uroce-specific: a CQ that did not ask is not stamped (the engine reads no
// clock for it), so the datapath of ordinary CQs costs nothing more.
TEST_F(Timestamps, CqThatDidNotAskIsNotStamped) {
  ibv_cq_ex* cq = make_stamped_cq(0, 16);
  ASSERT_NE(cq, nullptr);
  Pair p = connect_to(cq);
  ASSERT_NE(p.a.qp, nullptr);
  ibv_mr* mr = reg_buffer(256, kRw);
  ibv_sge w = sge_of(mr, 0, 8);
  ASSERT_EQ(post_send(p.a.qp, 9, IBV_WR_RDMA_WRITE, &w, 1, IBV_SEND_SIGNALED, addr_of(mr, 64), mr->rkey), 0);
  auto got = poll_stamped(cq, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(got[0].ts, 0u);
  EXPECT_EQ(got[0].wall, 0u);
}

}  // namespace
}  // namespace vt
