// Importing a context and its objects (issue 13; pyverbs' test_import_dm):
// ibv_import_device on a duplicate of ctx->cmd_fd gives a second context of
// the same session, in which ibv_import_pd / ibv_import_mr / ibv_import_dm
// name the first one's objects by handle and serve traffic; the session
// outlives the context it came from; unimport leaves the objects; what is
// not a context of this process is refused as EOPNOTSUPP (a forked child
// too), a handle of another session as ENOENT.
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "verbs_fixture.h"

namespace vt {
namespace {

class ImportDevice : public VerbsTest {
 protected:
  // A context imported from a duplicate of `from`'s command fd, closed at
  // the end of the test unless the test closes it.
  ibv_context* import(ibv_context* from) {
    const int fd = dup(from->cmd_fd);
    if (fd < 0) return nullptr;
    ibv_context* ctx = ibv_import_device(fd);
    if (!ctx) {
      close(fd);
      return nullptr;
    }
    defer([this, ctx] {
      if (closed_ != ctx) {
        EXPECT_EQ(ibv_close_device(ctx), 0);
      }
    });
    return ctx;
  }
  void close_early(ibv_context* ctx) {
    closed_ = ctx;
    ASSERT_EQ(ibv_close_device(ctx), 0);
  }

 private:
  ibv_context* closed_ = nullptr;
};

TEST_F(ImportDevice, NamesTheSessionsObjectsAndServesTrafficWithThem) {
  ibv_mr* src = reg_buffer(4096, IBV_ACCESS_LOCAL_WRITE, 0x5a);
  ibv_mr* dst = reg_buffer(4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ASSERT_NE(src, nullptr);
  ASSERT_NE(dst, nullptr);
  ibv_alloc_dm_attr dm_attr{4096, 0, 0};
  ibv_dm* dm = ibv_alloc_dm(ctx_, &dm_attr);
  ASSERT_NE(dm, nullptr) << std::strerror(errno);
  defer([dm] { EXPECT_EQ(ibv_free_dm(dm), 0); });

  ibv_context* ctx2 = import(ctx_);
  ASSERT_NE(ctx2, nullptr) << "ibv_import_device: " << std::strerror(errno);
  EXPECT_EQ(ctx2->device, ctx_->device);
  ibv_pd* pd2 = ibv_import_pd(ctx2, pd_->handle);
  ASSERT_NE(pd2, nullptr) << "ibv_import_pd: " << std::strerror(errno);
  EXPECT_EQ(pd2->handle, pd_->handle);
  EXPECT_EQ(pd2->context, ctx2);
  ibv_mr* src2 = ibv_import_mr(pd2, src->handle);
  ASSERT_NE(src2, nullptr) << "ibv_import_mr: " << std::strerror(errno);
  EXPECT_EQ(src2->lkey, src->lkey);
  EXPECT_EQ(src2->rkey, src->rkey);
  EXPECT_EQ(src2->length, src->length);
  EXPECT_EQ(src2->addr, src->addr);
  EXPECT_EQ(src2->pd, pd2);

  // Device memory: one memory, seen through both mappings.
  ibv_dm* dm2 = ibv_import_dm(ctx2, dm->handle);
  ASSERT_NE(dm2, nullptr) << "ibv_import_dm: " << std::strerror(errno);
  uint8_t in[256], out[256] = {};
  for (size_t i = 0; i < sizeof(in); ++i) in[i] = uint8_t(i * 7 + 1);
  ASSERT_EQ(ibv_memcpy_to_dm(dm, 64, in, sizeof(in)), 0);
  ASSERT_EQ(ibv_memcpy_from_dm(out, dm2, 64, sizeof(out)), 0);
  EXPECT_EQ(std::memcmp(in, out, sizeof(in)), 0);
  in[0] = 0xee;
  ASSERT_EQ(ibv_memcpy_to_dm(dm2, 64, in, 4), 0);
  ASSERT_EQ(ibv_memcpy_from_dm(out, dm, 64, 4), 0);
  EXPECT_EQ(out[0], 0xee);

  // A QP of the imported context, on the imported PD, WRITEs from the
  // imported MR to a QP of the first context.
  ibv_cq* cq2 = ibv_create_cq(ctx2, 16, nullptr, nullptr, 0);
  ASSERT_NE(cq2, nullptr) << std::strerror(errno);
  ibv_qp_init_attr qa{};
  qa.send_cq = qa.recv_cq = cq2;
  qa.qp_type = IBV_QPT_RC;
  qa.cap = {16, 16, 1, 1, 0};
  qa.sq_sig_all = 1;
  ibv_qp* qp2 = ibv_create_qp(pd2, &qa);
  ASSERT_NE(qp2, nullptr) << std::strerror(errno);
  ibv_cq* cq = make_cq(16);
  ibv_qp* qp = make_qp(IBV_QPT_RC, cq, cq);
  ASSERT_NE(qp, nullptr);
  connect_qp(qp2, qp->qp_num);
  connect_qp(qp, qp2->qp_num);
  ibv_sge sge{uint64_t(uintptr_t(src2->addr)), 4096, src2->lkey};
  ASSERT_EQ(post_send(qp2, 7, IBV_WR_RDMA_WRITE, &sge, 1, IBV_SEND_SIGNALED,
                      uint64_t(uintptr_t(dst->addr)), dst->rkey),
            0);
  ibv_wc wc;
  VT_POLL_ONE(cq2, &wc);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(wc.wr_id, 7u);
  EXPECT_EQ(std::memcmp(dst->addr, src->addr, 4096), 0);
  ASSERT_EQ(ibv_destroy_qp(qp2), 0);
  ASSERT_EQ(ibv_destroy_cq(cq2), 0);

  // Unimport frees the imported structs only: the objects stay the first
  // context's, and closing the imported context leaves them too.
  ibv_unimport_dm(dm2);
  ibv_unimport_mr(src2);
  ibv_unimport_pd(pd2);
  close_early(ctx2);
  ASSERT_EQ(ibv_memcpy_from_dm(out, dm, 64, 4), 0);
  EXPECT_EQ(out[0], 0xee);
  ibv_mr* again = ibv_reg_mr(pd_, dst->addr, 64, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(again, nullptr) << "the PD after the import closed: " << std::strerror(errno);
  EXPECT_EQ(ibv_dereg_mr(again), 0);
}

// The session lasts while either descriptor is open, as the kernel's uverbs
// file does: with the opening context closed, the imported one still names
// and destroys its objects.
TEST_F(ImportDevice, OutlivesTheContextItCameFrom) {
  ibv_context* first = ibv_open_device(ctx_->device);
  ASSERT_NE(first, nullptr) << std::strerror(errno);
  ibv_pd* pd = ibv_alloc_pd(first);
  ASSERT_NE(pd, nullptr);
  const uint32_t pd_handle = pd->handle;
  ibv_context* ctx2 = import(first);
  ASSERT_NE(ctx2, nullptr) << std::strerror(errno);
  // Closing `first` without its PD: the PD belongs to the session, which lives on.
  ASSERT_EQ(ibv_close_device(first), 0);
  ibv_pd* pd2 = ibv_import_pd(ctx2, pd_handle);
  ASSERT_NE(pd2, nullptr) << "ibv_import_pd after the opener closed: " << std::strerror(errno);
  uint8_t* buf = buffer(64);
  ibv_mr* mr = ibv_reg_mr(pd2, buf, 64, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr) << std::strerror(errno);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd2), 0);  // destroys the object itself
  EXPECT_EQ(ibv_import_pd(ctx2, pd_handle), nullptr);
  EXPECT_EQ(errno, ENOENT);
  (void)pd;  // the closed context's struct: no verb frees it once its context is gone
}

TEST_F(ImportDevice, RefusesWhatIsNotAContextOfThisProcess) {
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  errno = 0;
  EXPECT_EQ(ibv_import_device(p[0]), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  close(p[0]);
  close(p[1]);
  errno = 0;
  EXPECT_EQ(ibv_import_device(p[0]), nullptr);  // closed now
  EXPECT_EQ(errno, EBADF);

  // A forked child holds the socket but not the session: the engine
  // reaches a session's memory through the process that opened it.
  // (Its own copy of ctx->cmd_fd is closed at fork: it gets another.)
  const int fd = dup(ctx_->cmd_fd);
  ASSERT_GE(fd, 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    errno = 0;
    ibv_context* c = ibv_import_device(fd);
    _exit(c == nullptr && errno == EOPNOTSUPP ? 0 : 1);
  }
  close(fd);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "a forked child imported the context";
}

TEST_F(ImportDevice, HandlesOfAnotherSessionOrTypeAreRefused) {
  ibv_context* ctx2 = import(ctx_);
  ASSERT_NE(ctx2, nullptr) << std::strerror(errno);
  ibv_context* other = ibv_open_device(ctx_->device);  // a session of its own
  ASSERT_NE(other, nullptr);
  ibv_pd* other_pd = ibv_alloc_pd(other);
  ASSERT_NE(other_pd, nullptr);
  errno = 0;
  EXPECT_EQ(ibv_import_pd(ctx2, other_pd->handle), nullptr);
  EXPECT_EQ(errno, ENOENT);
  ibv_pd* pd2 = ibv_import_pd(ctx2, pd_->handle);
  ASSERT_NE(pd2, nullptr);
  errno = 0;
  EXPECT_EQ(ibv_import_mr(pd2, pd_->handle), nullptr);  // a PD's handle is no MR
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(ibv_import_dm(ctx2, 0xfffffff0u), nullptr);
  EXPECT_EQ(errno, ENOENT);
  ibv_unimport_pd(pd2);
  EXPECT_EQ(ibv_dealloc_pd(other_pd), 0);
  EXPECT_EQ(ibv_close_device(other), 0);
}

}  // namespace
}  // namespace vt
