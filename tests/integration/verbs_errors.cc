// Verbs semantics: error completions and error returns as a real RC NIC and
// rdma-core give them (IBA chapters 9.9 and 10.8, rdma-core man pages).
#include <fcntl.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <thread>

#include "tests/integration/verbs_fixture.h"

namespace vt {
namespace {

// ===========================================================================
// 1. Error completions
// ===========================================================================

class Errors : public VerbsTest {
 protected:
  // An RDMA WRITE from p.a with a wrong R_Key for a fresh MR (*remote);
  // its completion in *wc. Callers check HasFailure().
  void write_with_wrong_rkey(const Pair& p, ibv_wc* wc, ibv_mr** remote) {
    ibv_mr* local = reg_buffer(256, IBV_ACCESS_LOCAL_WRITE, 1);
    *remote = reg_buffer(256, kRw, 0);
    ASSERT_TRUE(local && *remote);
    ibv_sge s = sge_of(local, 0, 64);
    ASSERT_EQ(post_send(p.a.qp, 7, IBV_WR_RDMA_WRITE, &s, 1, IBV_SEND_SIGNALED, addr_of(*remote),
                        wrong_key((*remote)->rkey)),
              0);
    VT_POLL_ONE(p.a.cq, wc);
  }
};

TEST_F(Errors, BadLkeyInSendIsLocProtErrThenQpErrAndFlush) {
  Pair p = make_pair();
  ASSERT_FALSE(HasFailure());
  ibv_mr* mr = reg_buffer(4096, IBV_ACCESS_LOCAL_WRITE, 0x5a);
  ASSERT_NE(mr, nullptr);
  // Receives posted on the failing QP before the error flush with it.
  ASSERT_EQ(post_recv_mr(p.a.qp, 101, mr, 0, 256), 0);
  ASSERT_EQ(post_recv_mr(p.a.qp, 102, mr, 256, 256), 0);
  ASSERT_EQ(post_recv_mr(p.b.qp, 201, mr, 512, 256), 0);

  ibv_sge bad{addr_of(mr, 1024), 64, wrong_key(mr->lkey)};
  ASSERT_EQ(post_send(p.a.qp, 1, IBV_WR_SEND, &bad, 1), 0);
  std::vector<ibv_wc> wcs = poll_n(p.a.cq, 3);
  ASSERT_EQ(wcs.size(), 3u);
  EXPECT_EQ(wcs[0].wr_id, 1u) << "the error completion comes first";
  auto m = by_wr_id(wcs);
  EXPECT_EQ(m[1].status, IBV_WC_LOC_PROT_ERR) << describe(m[1]);
  EXPECT_EQ(m[1].qp_num, p.a.qp->qp_num);
  EXPECT_EQ(m[101].status, IBV_WC_WR_FLUSH_ERR) << describe(m[101]);
  EXPECT_EQ(m[102].status, IBV_WC_WR_FLUSH_ERR) << describe(m[102]);
  EXPECT_EQ(qp_state(p.a.qp), IBV_QPS_ERR);

  // Everything posted in ERR completes flushed, sends and receives alike.
  ibv_sge good = sge_of(mr, 1024, 64);
  ASSERT_EQ(post_send(p.a.qp, 2, IBV_WR_SEND, &good, 1), 0);
  ASSERT_EQ(post_send(p.a.qp, 3, IBV_WR_SEND, &good, 1), 0);
  ASSERT_EQ(post_recv_mr(p.a.qp, 103, mr, 2048, 64), 0);
  m = by_wr_id(poll_n(p.a.cq, 3));
  ASSERT_EQ(m.size(), 3u);
  for (uint64_t id : {2, 3, 103}) EXPECT_EQ(m[id].status, IBV_WC_WR_FLUSH_ERR) << describe(m[id]);

  // Nothing reached the peer.
  EXPECT_TRUE(drain_for(p.b.cq, 100).empty());
}

TEST_F(Errors, BadRkeyOnWriteIsRemAccessErr) {
  Pair p = make_pair();
  ASSERT_FALSE(HasFailure());
  ibv_mr* remote = nullptr;
  ibv_wc wc;
  write_with_wrong_rkey(p, &wc, &remote);
  ASSERT_FALSE(HasFailure());
  EXPECT_EQ(wc.wr_id, 7u);
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR) << describe(wc);
  EXPECT_EQ(qp_state(p.a.qp), IBV_QPS_ERR);
  EXPECT_EQ(static_cast<uint8_t*>(remote->addr)[0], 0) << "nothing may be written";
}

TEST_F(Errors, WriteBeyondMrBoundsIsRemAccessErr) {
  Pair p = make_pair();
  ASSERT_FALSE(HasFailure());
  ibv_mr* local = reg_buffer(256, IBV_ACCESS_LOCAL_WRITE, 1);
  // The remote MR is the first 4096 bytes of an 8192-byte buffer.
  uint8_t* big = buffer(8192, 0);
  ibv_mr* remote = reg(big, 4096, kRw);
  ASSERT_TRUE(local && remote);
  ibv_sge s = sge_of(local, 0, 64);
  ASSERT_EQ(post_send(p.a.qp, 8, IBV_WR_RDMA_WRITE, &s, 1, IBV_SEND_SIGNALED,
                      addr_of(remote, 4096 - 16), remote->rkey),
            0);
  ibv_wc wc;
  VT_POLL_ONE(p.a.cq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR) << describe(wc);
  EXPECT_EQ(qp_state(p.a.qp), IBV_QPS_ERR);
  EXPECT_TRUE(std::all_of(big + 4080, big + 4160, [](uint8_t c) { return c == 0; }))
      << "no byte of a rejected WRITE may land";
}

TEST_F(Errors, ReadIntoMrWithoutLocalWriteIsLocProtErr) {
  Pair p = make_pair();
  ASSERT_FALSE(HasFailure());
  ibv_mr* local_ro = reg_buffer(256, 0, 0);  // no IBV_ACCESS_LOCAL_WRITE
  ibv_mr* remote = reg_buffer(256, kRw, 0x77);
  ASSERT_TRUE(local_ro && remote) << std::strerror(errno);
  ibv_sge s = sge_of(local_ro, 0, 64);
  ASSERT_EQ(post_send(p.a.qp, 9, IBV_WR_RDMA_READ, &s, 1, IBV_SEND_SIGNALED, addr_of(remote),
                      remote->rkey),
            0);
  ibv_wc wc;
  VT_POLL_ONE(p.a.cq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_LOC_PROT_ERR) << describe(wc);
  EXPECT_EQ(qp_state(p.a.qp), IBV_QPS_ERR);
  EXPECT_EQ(static_cast<uint8_t*>(local_ro->addr)[0], 0);
}

// A READ's or an atomic's local key is checked when the response is placed,
// not before the request goes out (mlx5; rxe's completer, rxe_comp.c): the
// responder executes the request (a compare-and-swap swaps), then the
// completion is IBV_WC_LOC_PROT_ERR and the QP errs.
TEST_F(Errors, ReadAndAtomicCheckTheLocalKeyWhenTheResponseIsPlaced) {
  ibv_mr* local = reg_buffer(256, IBV_ACCESS_LOCAL_WRITE, 0);
  ibv_mr* remote = reg_buffer(256, kRw | IBV_ACCESS_REMOTE_ATOMIC, 0x77);
  ASSERT_TRUE(local && remote) << std::strerror(errno);
  auto* word = reinterpret_cast<uint64_t*>(static_cast<uint8_t*>(remote->addr) + 64);
  *word = 5;
  {
    Pair p = make_pair();
    ASSERT_FALSE(HasFailure());
    ibv_sge bad{addr_of(local), 8, wrong_key(local->lkey)};
    ASSERT_EQ(post_atomic(p.a.qp, 11, IBV_WR_ATOMIC_CMP_AND_SWP, &bad, addr_of(remote, 64), remote->rkey, 5, 9), 0);
    ibv_wc wc;
    VT_POLL_ONE(p.a.cq, &wc);
    EXPECT_EQ(wc.status, IBV_WC_LOC_PROT_ERR) << describe(wc);
    EXPECT_EQ(*word, 9u) << "the responder executed the compare-and-swap";
    EXPECT_EQ(qp_state(p.a.qp), IBV_QPS_ERR);
  }
  {
    Pair p = make_pair();
    ASSERT_FALSE(HasFailure());
    ibv_sge bad{addr_of(local), 64, wrong_key(local->lkey)};
    ASSERT_EQ(post_send(p.a.qp, 12, IBV_WR_RDMA_READ, &bad, 1, IBV_SEND_SIGNALED, addr_of(remote), remote->rkey), 0);
    ibv_wc wc;
    VT_POLL_ONE(p.a.cq, &wc);
    EXPECT_EQ(wc.status, IBV_WC_LOC_PROT_ERR) << describe(wc);
    EXPECT_EQ(qp_state(p.a.qp), IBV_QPS_ERR);
    EXPECT_EQ(static_cast<uint8_t*>(local->addr)[0], 0) << "no byte placed";
  }
}

// With both keys bad the remote error comes first: the responder NAKs the
// request before any response is placed (mlx5, rxe).
TEST_F(Errors, BadRemoteKeyComesBeforeBadLocalKeyOnReadAndAtomics) {
  ibv_mr* local = reg_buffer(256, IBV_ACCESS_LOCAL_WRITE, 0);
  ibv_mr* remote = reg_buffer(256, kRw | IBV_ACCESS_REMOTE_ATOMIC, 0x77);
  ASSERT_TRUE(local && remote) << std::strerror(errno);
  for (ibv_wr_opcode op : {IBV_WR_RDMA_READ, IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD}) {
    Pair p = make_pair();
    ASSERT_FALSE(HasFailure());
    ibv_sge bad{addr_of(local), 8, wrong_key(local->lkey)};
    const uint32_t bad_rkey = wrong_key(remote->rkey);
    ASSERT_EQ(op == IBV_WR_RDMA_READ
                  ? post_send(p.a.qp, 13, op, &bad, 1, IBV_SEND_SIGNALED, addr_of(remote, 64), bad_rkey)
                  : post_atomic(p.a.qp, 13, op, &bad, addr_of(remote, 64), bad_rkey, 1, 2),
              0);
    ibv_wc wc;
    VT_POLL_ONE(p.a.cq, &wc);
    EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR) << "opcode " << op << ": " << describe(wc);
    EXPECT_EQ(qp_state(p.a.qp), IBV_QPS_ERR);
  }
}

TEST_F(Errors, ReadOfMrWithoutRemoteReadIsRemAccessErr) {
  Pair p = make_pair();
  ASSERT_FALSE(HasFailure());
  ibv_mr* local = reg_buffer(256, IBV_ACCESS_LOCAL_WRITE, 0);
  ibv_mr* remote = reg_buffer(256, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, 0x77);
  ASSERT_TRUE(local && remote);
  ibv_sge s = sge_of(local, 0, 64);
  ASSERT_EQ(post_send(p.a.qp, 10, IBV_WR_RDMA_READ, &s, 1, IBV_SEND_SIGNALED, addr_of(remote),
                      remote->rkey),
            0);
  ibv_wc wc;
  VT_POLL_ONE(p.a.cq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR) << describe(wc);
  EXPECT_EQ(static_cast<uint8_t*>(local->addr)[0], 0);
}

TEST_F(Errors, ReceiveBufferTooSmallIsLocLenErrAndRemInvReqErr) {
  Pair p = make_pair();
  ASSERT_FALSE(HasFailure());
  ibv_mr* mr = reg_buffer(4096, IBV_ACCESS_LOCAL_WRITE, 0);
  ASSERT_NE(mr, nullptr);
  ASSERT_EQ(post_recv_mr(p.b.qp, 20, mr, 0, 16), 0);
  ibv_sge s = sge_of(mr, 1024, 64);
  ASSERT_EQ(post_send(p.a.qp, 21, IBV_WR_SEND, &s, 1), 0);
  ibv_wc wc;
  VT_POLL_ONE(p.b.cq, &wc);
  EXPECT_EQ(wc.wr_id, 20u);
  EXPECT_EQ(wc.status, IBV_WC_LOC_LEN_ERR) << describe(wc);
  VT_POLL_ONE(p.a.cq, &wc);
  EXPECT_EQ(wc.wr_id, 21u);
  EXPECT_EQ(wc.status, IBV_WC_REM_INV_REQ_ERR) << describe(wc);
  EXPECT_EQ(qp_state(p.a.qp), IBV_QPS_ERR);
  EXPECT_EQ(qp_state(p.b.qp), IBV_QPS_ERR);
}

TEST_F(Errors, RnrRetryExceededWhenNoReceiveIsPosted) {
  ConnectOpts o;
  o.rnr_retry = 1;
  o.min_rnr_timer = 1;  // 0.01 ms
  Pair p = make_pair(IBV_QPT_RC, o);
  ASSERT_FALSE(HasFailure());
  ibv_mr* mr = reg_buffer(256, IBV_ACCESS_LOCAL_WRITE, 3);
  ASSERT_NE(mr, nullptr);
  ibv_sge s = sge_of(mr, 0, 32);
  const auto start = Clock::now();
  ASSERT_EQ(post_send(p.a.qp, 30, IBV_WR_SEND, &s, 1), 0);
  ibv_wc wc;
  ASSERT_TRUE(poll_one(p.a.cq, &wc, 2.0)) << "RNR retries must end in a bounded time";
  EXPECT_EQ(wc.status, IBV_WC_RNR_RETRY_EXC_ERR) << describe(wc);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(2));
  EXPECT_EQ(qp_state(p.a.qp), IBV_QPS_ERR);
}

TEST_F(Errors, InfiniteRnrRetrySucceedsOnceAReceiveIsPosted) {
  ConnectOpts o;
  o.rnr_retry = 7;  // retry forever
  o.min_rnr_timer = 1;
  Pair p = make_pair(IBV_QPT_RC, o);
  ASSERT_FALSE(HasFailure());
  ibv_mr* mr = reg_buffer(512, IBV_ACCESS_LOCAL_WRITE, 0);
  ASSERT_NE(mr, nullptr);
  std::memset(mr->addr, 0x42, 32);
  ibv_sge s = sge_of(mr, 0, 32);
  ASSERT_EQ(post_send(p.a.qp, 31, IBV_WR_SEND, &s, 1), 0);
  EXPECT_TRUE(drain_for(p.a.cq, 50).empty()) << "the SEND cannot complete without a receive";
  ASSERT_EQ(post_recv_mr(p.b.qp, 32, mr, 256, 256), 0);
  ibv_wc wc;
  VT_POLL_ONE(p.a.cq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  VT_POLL_ONE(p.b.cq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(wc.byte_len, 32u);
  EXPECT_EQ(static_cast<uint8_t*>(mr->addr)[256 + 31], 0x42);
}

TEST_F(Errors, PostingToQpInErrFlushes) {
  Pair p = make_pair();
  ASSERT_FALSE(HasFailure());
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(ibv_modify_qp(p.a.qp, &a, IBV_QP_STATE), 0);
  EXPECT_EQ(qp_state(p.a.qp), IBV_QPS_ERR);
  ibv_mr* mr = reg_buffer(256, IBV_ACCESS_LOCAL_WRITE, 0);
  ASSERT_NE(mr, nullptr);
  ibv_sge s = sge_of(mr, 0, 16);
  ASSERT_EQ(post_send(p.a.qp, 40, IBV_WR_SEND, &s, 1), 0);
  ASSERT_EQ(post_recv_mr(p.a.qp, 41, mr, 64, 64), 0);
  auto m = by_wr_id(poll_n(p.a.cq, 2));
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[40].status, IBV_WC_WR_FLUSH_ERR) << describe(m[40]);
  EXPECT_EQ(m[41].status, IBV_WC_WR_FLUSH_ERR) << describe(m[41]);
}

// Waits for an async event of `type` on the context (other events are
// acknowledged and skipped). Returns it through *out.
bool wait_async_event(ibv_context* ctx, ibv_event_type type, ibv_async_event* out, int ms) {
  const auto end = deadline_after(ms / 1000.0);
  while (Clock::now() < end) {
    if (!fd_readable(ctx->async_fd, 50)) continue;
    ibv_async_event ev{};
    if (ibv_get_async_event(ctx, &ev)) return false;
    const bool match = ev.event_type == type;
    *out = ev;
    ibv_ack_async_event(&ev);
    if (match) return true;
  }
  return false;
}

// IBA C9-222.1.1: an R_Key violation by an RDMA WRITE without immediate data
// cannot be tied to a receive WQE, so the responder's client learns of it as
// an affiliated asynchronous error (IBV_EVENT_QP_ACCESS_ERR) and the
// responder QP enters the error state.
TEST_F(Errors, ResponderOfBadRkeyWriteGetsQpAccessErrEvent) {
  Pair p = make_pair();
  ASSERT_FALSE(HasFailure());
  ibv_mr* remote = nullptr;
  ibv_wc wc;
  write_with_wrong_rkey(p, &wc, &remote);
  ASSERT_FALSE(HasFailure());
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR) << describe(wc);
  EXPECT_EQ(qp_state(p.b.qp), IBV_QPS_ERR) << "class C error: the responder QP errs too";
  ibv_async_event ev{};
  ev.event_type = static_cast<ibv_event_type>(-1);  // "none seen"
  ASSERT_TRUE(wait_async_event(ctx_, IBV_EVENT_QP_ACCESS_ERR, &ev, 2000))
      << "no IBV_EVENT_QP_ACCESS_ERR at the responder (last event seen: "
      << (int(ev.event_type) < 0 ? "none" : ibv_event_type_str(ev.event_type)) << ")";
  EXPECT_EQ(ev.element.qp, p.b.qp);
}

// libibverbs' contract (man ibv_get_async_event): ibv_destroy_qp waits until
// every event returned for the QP is acknowledged, so that an ack from
// another thread (UCX's async thread) never reaches a freed QP (it did:
// heap-use-after-free under tests/sanitize.sh, ucx_perftest); and an event
// still unread when its QP is destroyed is dropped, never returned with the
// freed QP in it.
TEST_F(Errors, DestroyQpWaitsForTheAckOfItsEventAndDropsAnUnreadOne) {
  for (bool read_first : {true, false}) {
    SCOPED_TRACE(read_first ? "event read, ack pending" : "event unread");
    Pair p = make_pair();
    ASSERT_FALSE(HasFailure());
    ibv_mr* remote = nullptr;
    ibv_wc wc;
    write_with_wrong_rkey(p, &wc, &remote);
    ASSERT_FALSE(HasFailure());
    ASSERT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR) << describe(wc);
    ASSERT_TRUE(fd_readable(ctx_->async_fd, 2000)) << "no async event (QP_ACCESS_ERR)";
    ibv_async_event ev{};
    if (read_first) {
      ASSERT_EQ(ibv_get_async_event(ctx_, &ev), 0);
      ASSERT_EQ(ev.event_type, IBV_EVENT_QP_ACCESS_ERR);
      ASSERT_EQ(ev.element.qp, p.b.qp);
    }
    forget(p.b.qp);
    std::promise<int> destroyed;
    std::future<int> done = destroyed.get_future();
    std::thread destroyer([&] { destroyed.set_value(ibv_destroy_qp(p.b.qp)); });
    if (read_first) {
      EXPECT_EQ(done.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout)
          << "ibv_destroy_qp returned before the QP's event was acknowledged";
      ibv_ack_async_event(&ev);
    }
    const bool returned = done.wait_for(std::chrono::duration<double>(kWaitSeconds)) == std::future_status::ready;
    if (!returned && read_first) ibv_ack_async_event(&ev);
    destroyer.join();
    ASSERT_TRUE(returned) << "ibv_destroy_qp did not return";
    EXPECT_EQ(done.get(), 0);
    if (!read_first) {
      // The record was in the async fd: read now, it is dropped (nothing else is pending).
      const int flags = fcntl(ctx_->async_fd, F_GETFL);
      ASSERT_EQ(fcntl(ctx_->async_fd, F_SETFL, flags | O_NONBLOCK), 0);
      errno = 0;
      const int rc = ibv_get_async_event(ctx_, &ev);
      const int err = errno;
      fcntl(ctx_->async_fd, F_SETFL, flags);
      if (rc == 0) ibv_ack_async_event(&ev);
      EXPECT_EQ(rc, -1) << "an event of the destroyed QP was returned ("
                        << ibv_event_type_str(ev.event_type) << ")";
      EXPECT_EQ(err, EAGAIN);
    }
  }
}

TEST_F(Errors, ReceiveSgeWithoutLocalWriteIsLocProtErrAndRemOpErr) {
  Pair p = make_pair();
  ASSERT_FALSE(HasFailure());
  ibv_mr* src = reg_buffer(256, IBV_ACCESS_LOCAL_WRITE, 1);
  ibv_mr* ro = reg_buffer(256, 0, 0);  // the receiver may not write here
  ASSERT_TRUE(src && ro);
  ASSERT_EQ(post_recv_mr(p.b.qp, 1, ro, 0, 256), 0);
  ibv_sge s = sge_of(src, 0, 64);
  ASSERT_EQ(post_send(p.a.qp, 2, IBV_WR_SEND, &s, 1), 0);
  ibv_wc wc;
  VT_POLL_ONE(p.b.cq, &wc);
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.status, IBV_WC_LOC_PROT_ERR) << describe(wc);
  VT_POLL_ONE(p.a.cq, &wc);
  EXPECT_EQ(wc.wr_id, 2u);
  EXPECT_EQ(wc.status, IBV_WC_REM_OP_ERR) << describe(wc);
  EXPECT_EQ(static_cast<uint8_t*>(ro->addr)[0], 0);
}

TEST_F(Errors, MisalignedAtomicIsRemInvReqErr) {
  Pair p = make_pair();
  ASSERT_FALSE(HasFailure());
  ibv_mr* remote = reg_buffer(64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC, 0);
  ibv_mr* result = reg_buffer(64, IBV_ACCESS_LOCAL_WRITE, 0);
  ASSERT_TRUE(remote && result);
  ibv_sge s = sge_of(result, 0, 8);
  ASSERT_EQ(post_atomic(p.a.qp, 5, IBV_WR_ATOMIC_FETCH_AND_ADD, &s, addr_of(remote, 4) /* not 8-aligned */,
                        remote->rkey, 1),
            0);
  ibv_wc wc;
  VT_POLL_ONE(p.a.cq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_REM_INV_REQ_ERR) << describe(wc);
  const auto* r = static_cast<uint8_t*>(remote->addr);
  EXPECT_TRUE(std::all_of(r, r + 16, [](uint8_t c) { return c == 0; }));
}

TEST_F(Errors, UnsignaledWrThatFailsStillCompletes) {
  Pair p = make_pair(IBV_QPT_RC, {}, {}, /*sq_sig_all=*/0);
  ASSERT_FALSE(HasFailure());
  ibv_mr* mr = reg_buffer(256, IBV_ACCESS_LOCAL_WRITE, 1);
  ASSERT_NE(mr, nullptr);
  ibv_sge bad{addr_of(mr), 16, wrong_key(mr->lkey)};
  ASSERT_EQ(post_send(p.a.qp, 77, IBV_WR_SEND, &bad, 1, /*flags=*/0), 0);
  ibv_wc wc;
  VT_POLL_ONE(p.a.cq, &wc);
  EXPECT_EQ(wc.wr_id, 77u);
  EXPECT_EQ(wc.status, IBV_WC_LOC_PROT_ERR) << describe(wc);
}

TEST_F(Errors, PeerNotReadyToReceiveEndsInRetryExceeded) {
  ibv_cq* cq = make_cq();
  ASSERT_NE(cq, nullptr);
  ibv_qp* qa = make_qp(IBV_QPT_RC, cq, cq);
  ibv_qp* qb = make_qp(IBV_QPT_RC, cq, cq);
  ASSERT_TRUE(qa && qb);
  ConnectOpts o;
  o.timeout = 8;  // 1 ms
  o.retry_cnt = 1;
  connect_qp(qa, qb->qp_num, o);
  ASSERT_FALSE(HasFailure());
  // qb stays in RESET: it drops every packet, nothing is ever acknowledged.
  // qa never heard from qb: its retries are free for the first 2 s
  // (kFirstContactGraceNs, device/params.h), then retry_cnt counts.
  ibv_mr* mr = reg_buffer(256, IBV_ACCESS_LOCAL_WRITE, 1);
  ASSERT_NE(mr, nullptr);
  ibv_sge s = sge_of(mr, 0, 16);
  ASSERT_EQ(post_send(qa, 1, IBV_WR_SEND, &s, 1), 0);
  ibv_wc wc;
  ASSERT_TRUE(poll_one(cq, &wc, 15)) << "a SEND nobody acknowledges must time out";
  EXPECT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR) << describe(wc);
  EXPECT_EQ(qp_state(qa), IBV_QPS_ERR);
}

// ---- immediate errors from ibv_post_send / ibv_post_recv -----------------

class PostErrors : public VerbsTest {};

TEST_F(PostErrors, BadWrIsReportedAndEarlierWrsArePosted) {
  QpCaps caps;
  caps.max_send_sge = 2;
  caps.max_inline_data = 64;
  Pair p = make_pair(IBV_QPT_RC, {}, caps);
  ASSERT_FALSE(HasFailure());
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(ibv_query_qp(p.a.qp, &attr, IBV_QP_CAP, &init), 0);
  ibv_mr* mr = reg_buffer(8192, kRw, 1);
  ASSERT_NE(mr, nullptr);

  // WR 2 has more SGEs than the QP allows: EINVAL, *bad_wr == WR 2, WR 1 posted.
  std::vector<ibv_sge> many(init.cap.max_send_sge + 1, sge_of(mr, 0, 8));
  ibv_sge one = sge_of(mr, 0, 8);
  ibv_send_wr w1{}, w2{}, w3{};
  w1.wr_id = 1;
  w1.opcode = IBV_WR_RDMA_WRITE;
  w1.sg_list = &one;
  w1.num_sge = 1;
  w1.send_flags = IBV_SEND_SIGNALED;
  w1.wr.rdma.remote_addr = addr_of(mr, 4096);
  w1.wr.rdma.rkey = mr->rkey;
  w1.next = &w2;
  w2 = w1;
  w2.wr_id = 2;
  w2.sg_list = many.data();
  w2.num_sge = int(many.size());
  w2.next = &w3;
  w3 = w1;
  w3.wr_id = 3;
  w3.next = nullptr;
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_send(p.a.qp, &w1, &bad), EINVAL);
  EXPECT_EQ(bad, &w2);
  std::vector<ibv_wc> wcs = drain_for(p.a.cq, 100);
  ASSERT_EQ(wcs.size(), 1u) << "exactly the WRs before *bad_wr are posted";
  EXPECT_EQ(wcs[0].wr_id, 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS) << describe(wcs[0]);

  // Inline data beyond max_inline_data.
  std::vector<uint8_t> big(init.cap.max_inline_data + 1, 'x');
  ibv_sge inl{uint64_t(uintptr_t(big.data())), uint32_t(big.size()), 0};
  EXPECT_EQ(post_send(p.a.qp, 4, IBV_WR_SEND, &inl, 1, IBV_SEND_SIGNALED | IBV_SEND_INLINE),
            EINVAL);
  // Too many receive SGEs.
  std::vector<ibv_sge> rmany(init.cap.max_recv_sge + 1, sge_of(mr, 0, 8));
  ibv_recv_wr r{};
  r.wr_id = 5;
  r.sg_list = rmany.data();
  r.num_sge = int(rmany.size());
  ibv_recv_wr* rbad = nullptr;
  EXPECT_EQ(ibv_post_recv(p.b.qp, &r, &rbad), EINVAL);
  EXPECT_EQ(rbad, &r);
  EXPECT_TRUE(drain_for(p.a.cq, 50).empty());
  EXPECT_TRUE(drain_for(p.b.cq, 10).empty());
  EXPECT_EQ(qp_state(p.a.qp), IBV_QPS_RTS) << "immediate errors leave the QP alone";
}

TEST_F(PostErrors, FullQueuesReturnEnomem) {
  ibv_cq* cq = make_cq(1024);
  ASSERT_NE(cq, nullptr);
  QpCaps caps;
  caps.max_send_wr = 16;
  caps.max_recv_wr = 16;
  ibv_qp* qa = make_qp(IBV_QPT_RC, cq, cq, caps);
  ibv_qp* qb = make_qp(IBV_QPT_RC, cq, cq, caps);
  ASSERT_TRUE(qa && qb);
  ConnectOpts o;
  o.timeout = 0;  // wait for ACKs forever: nothing completes, nothing frees a slot
  connect_qp(qa, qb->qp_num, o);
  ASSERT_FALSE(HasFailure());
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(ibv_query_qp(qa, &attr, IBV_QP_CAP, &init), 0);
  ibv_mr* mr = reg_buffer(4096, kRw, 1);
  ASSERT_NE(mr, nullptr);
  ibv_sge s = sge_of(mr, 0, 8);
  // qb stays in RESET and never answers, so the send queue only fills.
  for (uint32_t i = 0; i < init.cap.max_send_wr; ++i)
    ASSERT_EQ(post_send(qa, i, IBV_WR_RDMA_WRITE, &s, 1, IBV_SEND_SIGNALED, addr_of(mr, 1024),
                        mr->rkey),
              0)
        << "WR " << i << " of max_send_wr " << init.cap.max_send_wr;
  EXPECT_EQ(post_send(qa, 999, IBV_WR_RDMA_WRITE, &s, 1, IBV_SEND_SIGNALED, addr_of(mr, 1024),
                      mr->rkey),
            ENOMEM);
  for (uint32_t i = 0; i < init.cap.max_recv_wr; ++i)
    ASSERT_EQ(post_recv_mr(qa, 100 + i, mr, 2048, 8), 0) << "receive " << i;
  EXPECT_EQ(post_recv_mr(qa, 999, mr, 2048, 8), ENOMEM);
  // Moving to ERR flushes every one of them.
  ibv_qp_attr e{};
  e.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(ibv_modify_qp(qa, &e, IBV_QP_STATE), 0);
  const size_t total = init.cap.max_send_wr + init.cap.max_recv_wr;
  std::vector<ibv_wc> wcs = poll_n(cq, total);
  EXPECT_EQ(wcs.size(), total);
  for (const ibv_wc& wc : wcs) EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR) << describe(wc);
}

TEST_F(Errors, UdMessageLongerThanMtuIsLocLenErr) {
  ConnectOpts o;
  Pair p = make_pair(IBV_QPT_UD, o);
  ASSERT_FALSE(HasFailure());
  ibv_port_attr pa{};
  ASSERT_EQ(ibv_query_port(ctx_, 1, &pa), 0);
  const uint32_t mtu = 128u << pa.active_mtu;
  ibv_ah_attr av = loopback_av();
  ibv_ah* ah = make_ah(&av);
  ASSERT_NE(ah, nullptr);
  ibv_mr* mr = reg_buffer(2 * mtu + 4096, IBV_ACCESS_LOCAL_WRITE, 1);
  ASSERT_NE(mr, nullptr);
  ASSERT_EQ(post_recv_mr(p.b.qp, 1, mr, mtu + 1024, mtu + 40), 0);
  ibv_sge s = sge_of(mr, 0, mtu + 1);
  ibv_send_wr wr{};
  wr.wr_id = 2;
  wr.opcode = IBV_WR_SEND;
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.ud.ah = ah;
  wr.wr.ud.remote_qpn = p.b.qp->qp_num;
  wr.wr.ud.remote_qkey = o.qkey;
  ibv_send_wr* bad;
  const int rc = ibv_post_send(p.a.qp, &wr, &bad);
  if (rc == 0) {
    ibv_wc wc;
    VT_POLL_ONE(p.a.cq, &wc);
    EXPECT_EQ(wc.status, IBV_WC_LOC_LEN_ERR) << describe(wc);
  } else {
    EXPECT_EQ(rc, EINVAL);  // rejected at post time is fine too
  }
  EXPECT_TRUE(drain_for(p.b.cq, 50).empty());
}

TEST_F(Errors, UdReceiveTooSmallIsLocLenErr) {
  ConnectOpts o;
  Pair p = make_pair(IBV_QPT_UD, o);
  ASSERT_FALSE(HasFailure());
  ibv_ah_attr av = loopback_av();
  ibv_ah* ah = make_ah(&av);
  ASSERT_NE(ah, nullptr);
  ibv_mr* mr = reg_buffer(4096, IBV_ACCESS_LOCAL_WRITE, 1);
  ASSERT_NE(mr, nullptr);
  ASSERT_EQ(post_recv_mr(p.b.qp, 1, mr, 1024, 40 + 10), 0);  // room for 10 bytes after the GRH
  ibv_sge s = sge_of(mr, 0, 100);
  ibv_send_wr wr{};
  wr.wr_id = 2;
  wr.opcode = IBV_WR_SEND;
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.ud.ah = ah;
  wr.wr.ud.remote_qpn = p.b.qp->qp_num;
  wr.wr.ud.remote_qkey = o.qkey;
  ibv_send_wr* bad;
  ASSERT_EQ(ibv_post_send(p.a.qp, &wr, &bad), 0);
  ibv_wc wc;
  VT_POLL_ONE(p.a.cq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << "UD senders learn nothing of the receiver";
  VT_POLL_ONE(p.b.cq, &wc);
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.status, IBV_WC_LOC_LEN_ERR) << describe(wc);
}
TEST_F(Errors, WriteToDeregisteredMrIsRemAccessErr) {
  Pair p = make_pair();
  ASSERT_FALSE(HasFailure());
  ibv_mr* local = reg_buffer(256, IBV_ACCESS_LOCAL_WRITE, 1);
  ASSERT_NE(local, nullptr);
  uint8_t* target = buffer(4096, 0);
  ibv_mr* remote = ibv_reg_mr(pd_, target, 4096, kRw);
  ASSERT_NE(remote, nullptr);
  const uint32_t rkey = remote->rkey;
  ASSERT_EQ(ibv_dereg_mr(remote), 0);
  ibv_sge s = sge_of(local, 0, 64);
  ASSERT_EQ(post_send(p.a.qp, 1, IBV_WR_RDMA_WRITE, &s, 1, IBV_SEND_SIGNALED,
                      uint64_t(uintptr_t(target)), rkey),
            0);
  ibv_wc wc;
  VT_POLL_ONE(p.a.cq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR) << describe(wc);
  EXPECT_EQ(target[0], 0);
}

TEST_F(Errors, RnrRetriesWaitTheResponderTimer) {
  ConnectOpts o;
  o.rnr_retry = 1;
  o.min_rnr_timer = 28;  // 163.84 ms
  Pair p = make_pair(IBV_QPT_RC, o);
  ASSERT_FALSE(HasFailure());
  ibv_mr* mr = reg_buffer(256, IBV_ACCESS_LOCAL_WRITE, 3);
  ASSERT_NE(mr, nullptr);
  ibv_sge s = sge_of(mr, 0, 32);
  const auto start = Clock::now();
  ASSERT_EQ(post_send(p.a.qp, 1, IBV_WR_SEND, &s, 1), 0);
  ibv_wc wc;
  ASSERT_TRUE(poll_one(p.a.cq, &wc, 5));
  const auto took = Clock::now() - start;
  EXPECT_EQ(wc.status, IBV_WC_RNR_RETRY_EXC_ERR) << describe(wc);
  // One retry after one RNR NAK: at least one timer period.
  EXPECT_GE(took, std::chrono::milliseconds(150));
  EXPECT_LT(took, std::chrono::seconds(3));
}

}  // namespace
}  // namespace vt
