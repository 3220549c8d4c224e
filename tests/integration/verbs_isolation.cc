// Isolation between clients of one engine (issue 14): a remote key works only
// through a QP of the MR's own protection domain (IBA 10.6.3.2, C10-14: "the
// R_Key ... is associated with the PD of the QP"), whoever knows or guesses
// it; an XRC domain is reached only through a file the user may open.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "tests/integration/verbs_fixture.h"

namespace vt {
namespace {

constexpr uint8_t kSecret = 0x5e;

class Isolation : public VerbsTest {
 protected:
  // A second client of the engine (a session of its own) with an MR every
  // remote access is allowed to, in its PD.
  struct Victim {
    ibv_context* ctx = nullptr;
    ibv_pd* pd = nullptr;
    ibv_mr* mr = nullptr;
    uint8_t* bytes = nullptr;
  };
  Victim open_victim() {
    Victim v;
    v.ctx = ibv_open_device(ctx_->device);
    if (!v.ctx) return v;
    v.pd = ibv_alloc_pd(v.ctx);
    v.bytes = buffer(4096, kSecret);
    v.mr = ibv_reg_mr(v.pd, v.bytes, 4096, kAll);
    defer([v] {
      if (v.mr) ibv_dereg_mr(v.mr);
      if (v.pd) ibv_dealloc_pd(v.pd);
      ibv_close_device(v.ctx);
    });
    return v;
  }
  static bool intact(const uint8_t* p) {
    return std::all_of(p, p + 4096, [](uint8_t b) { return b == kSecret; });
  }
  static constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                              IBV_ACCESS_REMOTE_ATOMIC;
};

// The victim's exact rkey, used through the attacker's own connected QPs:
// WRITE, READ and both atomics fail with REM_ACCESS_ERR and touch nothing.
TEST_F(Isolation, RkeyOfAnotherClientsPdIsRemAccessErr) {
  Victim v = open_victim();
  ASSERT_TRUE(v.ctx && v.pd && v.mr) << std::strerror(errno);
  ibv_mr* local = reg_buffer(4096, IBV_ACCESS_LOCAL_WRITE, 0xab);
  ASSERT_NE(local, nullptr);
  struct Attempt {
    ibv_wr_opcode op;
    const char* what;
  };
  for (const Attempt a : {Attempt{IBV_WR_RDMA_WRITE, "WRITE"}, Attempt{IBV_WR_RDMA_READ, "READ"},
                          Attempt{IBV_WR_ATOMIC_FETCH_AND_ADD, "FETCH_ADD"},
                          Attempt{IBV_WR_ATOMIC_CMP_AND_SWP, "CMP_SWP"}}) {
    SCOPED_TRACE(a.what);
    Pair p = make_pair();
    ASSERT_FALSE(HasFailure());
    ibv_sge s = sge_of(local, 0, a.op == IBV_WR_RDMA_WRITE || a.op == IBV_WR_RDMA_READ ? 256 : 8);
    if (a.op == IBV_WR_RDMA_WRITE || a.op == IBV_WR_RDMA_READ)
      ASSERT_EQ(post_send(p.a.qp, 1, a.op, &s, 1, IBV_SEND_SIGNALED, addr_of(v.mr), v.mr->rkey), 0);
    else
      ASSERT_EQ(post_atomic(p.a.qp, 1, a.op, &s, addr_of(v.mr), v.mr->rkey, uint64_t(kSecret) * 0x0101010101010101ull, 1),
                0);
    ibv_wc wc;
    VT_POLL_ONE(p.a.cq, &wc);
    EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR) << describe(wc);
    EXPECT_TRUE(intact(v.bytes)) << "the victim's memory changed";
    EXPECT_EQ(static_cast<uint8_t*>(local->addr)[0], 0xab) << "the victim's bytes arrived";
  }
}

// Within one client too: the rkey of an MR of one PD does nothing through a
// QP of another PD.
TEST_F(Isolation, RkeyOfAnotherPdOfTheSameClientIsRemAccessErr) {
  ibv_pd* other = ibv_alloc_pd(ctx_);
  ASSERT_NE(other, nullptr);
  defer([other] { ibv_dealloc_pd(other); });
  uint8_t* bytes = buffer(4096, kSecret);
  ibv_mr* mr = ibv_reg_mr(other, bytes, 4096, kAll);
  ASSERT_NE(mr, nullptr);
  defer([mr] { ibv_dereg_mr(mr); });
  ibv_mr* local = reg_buffer(4096, IBV_ACCESS_LOCAL_WRITE, 0xab);
  Pair p = make_pair();  // in the fixture's PD
  ASSERT_FALSE(HasFailure());
  ibv_sge s = sge_of(local, 0, 64);
  ASSERT_EQ(post_send(p.a.qp, 1, IBV_WR_RDMA_WRITE, &s, 1, IBV_SEND_SIGNALED, addr_of(mr), mr->rkey), 0);
  ibv_wc wc;
  VT_POLL_ONE(p.a.cq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR) << describe(wc);
  EXPECT_TRUE(intact(bytes));
}

// Guessing: UC drops a WRITE with a bad rkey silently and stays usable
// (IBA 9.8.3), so an attacker can try key after key. Every generation of
// the victim's key index and of the indices around it, aimed at the
// victim's address: nothing lands. The victim's own QPs of its PD show that
// the key and address were right.
TEST_F(Isolation, GuessedRkeysNeverWork) {
  Victim v = open_victim();
  ASSERT_TRUE(v.ctx && v.pd && v.mr) << std::strerror(errno);
  ibv_mr* local = reg_buffer(4096, IBV_ACCESS_LOCAL_WRITE, 0xab);
  ASSERT_NE(local, nullptr);
  Pair p = make_pair(IBV_QPT_UC, {}, {256, 64, 4, 4, 64});
  ASSERT_FALSE(HasFailure());
  const uint32_t index = v.mr->rkey >> 8;
  size_t tried = 0, completed = 0;
  for (uint32_t i = index > 4 ? index - 4 : 1; i <= index + 4; ++i)
    for (uint32_t gen = 0; gen < 256; ++gen) {
      ibv_sge s = sge_of(local, 0, 64);
      ASSERT_EQ(post_send(p.a.qp, tried, IBV_WR_RDMA_WRITE, &s, 1, IBV_SEND_SIGNALED, addr_of(v.mr),
                          i << 8 | gen),
                0);
      ++tried;
      // UC completes a send once it is on the wire: keep the ring from filling.
      if (tried % 128 == 0) completed += poll_n(p.a.cq, 128).size();
    }
  completed += poll_n(p.a.cq, tried - completed).size();
  EXPECT_EQ(completed, tried);
  // Let the last datagrams land, if they were to.
  drain_for(p.b.cq, 100);
  EXPECT_TRUE(intact(v.bytes)) << "a guessed rkey wrote into another client's memory";
  EXPECT_EQ(qp_state(p.a.qp), IBV_QPS_RTS);

  // The same key through the victim's own QPs (its PD) writes: the guesses
  // aimed at a real target.
  ibv_cq* cq = ibv_create_cq(v.ctx, 16, nullptr, nullptr, 0);
  ASSERT_NE(cq, nullptr);
  defer([cq] { ibv_destroy_cq(cq); });
  ibv_qp_init_attr init{};
  init.send_cq = init.recv_cq = cq;
  init.qp_type = IBV_QPT_RC;
  init.cap = {4, 4, 1, 1, 0};
  init.sq_sig_all = 1;
  ibv_qp* qa = ibv_create_qp(v.pd, &init);
  ibv_qp* qb = ibv_create_qp(v.pd, &init);
  ASSERT_TRUE(qa && qb);
  defer([qa, qb] {
    ibv_destroy_qp(qa);
    ibv_destroy_qp(qb);
  });
  connect_qp(qa, qb->qp_num);
  connect_qp(qb, qa->qp_num);
  ibv_mr* vlocal = ibv_reg_mr(v.pd, v.bytes + 2048, 64, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(vlocal, nullptr);
  defer([vlocal] { ibv_dereg_mr(vlocal); });
  v.bytes[2048] = 0x77;
  ibv_sge s = sge_of(vlocal, 0, 1);
  ASSERT_EQ(post_send(qa, 9, IBV_WR_RDMA_WRITE, &s, 1, IBV_SEND_SIGNALED, addr_of(v.mr), v.mr->rkey), 0);
  ibv_wc wc;
  VT_POLL_ONE(cq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(v.bytes[0], 0x77);
}

// ibv_open_xrcd shares a domain through a file: an fd opened O_PATH (which
// takes no permission on the file, only on its directory) is not one the
// kernel takes (fdget: EBADF), so a file the user cannot read names no
// domain of theirs.
TEST_F(Isolation, XrcdThroughAnOPathFdIsEbadf) {
  char path[] = "/tmp/uroce-xrcd-opath.XXXXXX";
  const int file = mkstemp(path);
  ASSERT_GE(file, 0);
  close(file);
  defer([name = std::string(path)] { unlink(name.c_str()); });
  const int fd = open(path, O_PATH | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  defer([fd] { close(fd); });
  ibv_xrcd_init_attr attr{};
  attr.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
  attr.fd = fd;
  attr.oflags = O_CREAT;
  errno = 0;
  EXPECT_EQ(ibv_open_xrcd(ctx_, &attr), nullptr);
  EXPECT_EQ(errno, EBADF);
  // The same file opened for reading names a domain.
  const int rd = open(path, O_RDONLY | O_CLOEXEC);
  ASSERT_GE(rd, 0);
  defer([rd] { close(rd); });
  attr.fd = rd;
  ibv_xrcd* x = ibv_open_xrcd(ctx_, &attr);
  ASSERT_NE(x, nullptr) << std::strerror(errno);
  EXPECT_EQ(ibv_close_xrcd(x), 0);
}

}  // namespace
}  // namespace vt
