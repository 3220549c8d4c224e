// Methods of shared receive queues, XRC domains and opened XRC target QPs.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "device/device.h"
#include "emulator/methods.h"
#include "emulator/object_table.h"

namespace uroce::emulator {

namespace {

// Reply fds: [the queue memfd] when with_fd (creation, or a resize that moved the ring).
int reply_srq(Call& c, uint64_t handle, uint32_t srqn, bool with_fd) {
  device::Srq* s = c.dev.srq(srqn);
  abi::CreateSrqReply rep{};
  rep.handle = handle;
  rep.srqn = srqn;
  rep.max_wr = s->max_wr;
  rep.max_sge = s->max_sge;
  rep.log2 = s->ring.log2;
  rep.stride = s->ring.stride;
  rep.shm_size = s->mem.size();
  if (with_fd) c.pass_fd(s->mem.release_fd(), true);
  // A TM-SRQ's list-operation region, at creation only (it never moves).
  if (s->tm && s->tm_mem.fd() >= 0) {
    rep.tm_shm_size = s->tm_mem.size();
    rep.tm_max_num_tags = s->tm->max_num_tags();
    rep.tm_max_ops = s->tm->max_ops();
    c.pass_fd(s->tm_mem.release_fd(), true);
  }
  return c.reply(rep);
}

}  // namespace

int create_srq(Call& c) {
  auto r = c.dev.create_srq(&c.owner, c.request<abi::CreateSrqRequest>());
  if (r.err) return r.err;
  return reply_srq(c, c.objects.insert(ObjType::kSrq, r.value), r.value, true);
}

int modify_srq(Call& c) {
  const auto req = c.request<abi::ModifySrqRequest>();
  const uint32_t handle = uint32_t(req.handle);
  const uint8_t* old_ring = c.dev.srq(handle)->mem.base();
  if (int err = c.dev.modify_srq(&c.owner, handle, req.attr_mask, req.max_wr, req.srq_limit))
    return err;
  // A resize moves the ring to new memory: the client maps it.
  return reply_srq(c, c.client_handles[0], handle, c.dev.srq(handle)->mem.base() != old_ring);
}

int query_srq(Call& c) {
  const device::Srq* s = c.dev.srq(uint32_t(c.request<abi::HandleRequest>().handle));
  return c.reply(abi::QuerySrqReply{s->max_wr, s->max_sge, s->limit, 0});
}

int destroy_srq(Call& c) {
  return c.dev.destroy_srq(&c.owner, uint32_t(c.request<abi::HandleRequest>().handle));
}

// Reply fds: [the mlx5-format SRQ's memfd].
int mlx5_srq_format(Call& c) {
  abi::Mlx5SrqFormatReply rep{};
  int fd = -1;
  if (int err = c.dev.srq_to_mlx5(&c.owner, uint32_t(c.request<abi::HandleRequest>().handle), &rep, &fd))
    return err;
  c.pass_fd(fd, true);
  return c.reply(rep);
}

// Request fds: [the file naming a shared domain] unless has_fd is 0.
int open_xrcd(Call& c) {
  const auto req = c.request<abi::OpenXrcdRequest>();
  const int fd = req.has_fd ? c.take_fd(0) : -1;
  if (req.has_fd && fd < 0) return EBADF;
  // The domain is the file's: only an fd opened for reading or writing
  // names it. An O_PATH fd needs no permission on the file at all, and the
  // kernel's fdget() in ib_uverbs_open_xrcd does not take one (EBADF).
  if (fd >= 0 && (fcntl(fd, F_GETFL) & O_PATH)) {
    close(fd);
    return EBADF;
  }
  auto r = c.dev.open_xrcd(&c.owner, fd, req.oflags);
  if (fd >= 0) close(fd);
  if (r.err) return r.err;
  return c.reply(abi::OpenXrcdReply{c.objects.insert(ObjType::kXrcd, r.value)});
}

int close_xrcd(Call& c) {
  return c.dev.close_xrcd(&c.owner, uint32_t(c.request<abi::HandleRequest>().handle));
}

int open_qp(Call& c) {
  const auto req = c.request<abi::OpenQpRequest>();
  if (req.qp_type != IBV_QPT_XRC_RECV) return EINVAL;
  auto r = c.dev.open_qp(&c.owner, uint32_t(req.xrcd), req.qpn, req.cookie);
  if (r.err) return r.err;
  return c.reply(abi::OpenQpReply{c.objects.insert(ObjType::kQp, r.value)});
}

}  // namespace uroce::emulator
