// Methods of completion channels and completion queues.
#include <fcntl.h>

#include <cerrno>

#include "emulator/engine.h"
#include "emulator/methods.h"
#include "emulator/object_table.h"

namespace uroce::emulator {

namespace {

// Reply fds: [the CQ's queue memfd].
int reply_cq(Call& c, uint64_t handle, uint32_t cq_handle) {
  device::Cq* cq = c.dev.cq(cq_handle);
  c.pass_fd(cq->mem.release_fd(), true);
  return c.reply(abi::CreateCqReply{handle, cq->capacity, cq->ring.log2, cq->mem.size()});
}

}  // namespace

// Request fds: [the channel pipe's write end], kept by the device.
int create_comp_channel(Call& c) {
  const int fd = c.take_fd(0);
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  auto r = c.dev.create_comp_channel(&c.owner, fd);
  if (r.err) return r.err;
  return c.reply(abi::CreateCompChannelReply{c.objects.insert(ObjType::kCompChannel, r.value)});
}

int destroy_comp_channel(Call& c) {
  return c.dev.destroy_comp_channel(&c.owner, uint32_t(c.request<abi::HandleRequest>().handle));
}

int create_cq(Call& c) {
  auto r = c.dev.create_cq(&c.owner, c.request<abi::CreateCqRequest>());
  if (r.err) return r.err;
  return reply_cq(c, c.objects.insert(ObjType::kCq, r.value), r.value);
}

int resize_cq(Call& c) {
  const auto req = c.request<abi::ResizeCqRequest>();
  // Work posted before the resize completes first (bounded), so the "fewer
  // entries than waiting completions" check sees them.
  c.engine.drain_device();
  if (int err = c.dev.resize_cq(&c.owner, uint32_t(req.handle), req.cqe)) return err;
  return reply_cq(c, c.client_handles[0], uint32_t(req.handle));
}

int destroy_cq(Call& c) {
  return c.dev.destroy_cq(&c.owner, uint32_t(c.request<abi::HandleRequest>().handle));
}

// Reply fds: [the mlx5-format ring's memfd].
int mlx5_cq_format(Call& c) {
  const auto req = c.request<abi::Mlx5CqFormatRequest>();
  if (req.reserved) return EINVAL;
  abi::Mlx5CqFormatReply rep{};
  int fd = -1;
  if (int err = c.dev.cq_to_mlx5(&c.owner, uint32_t(req.handle), req.cqe_size, &rep, &fd)) return err;
  c.pass_fd(fd, true);
  return c.reply(rep);
}

}  // namespace uroce::emulator
