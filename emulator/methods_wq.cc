// Methods of receive work queues, receive indirection tables and RSS QPs.
#include <linux/capability.h>

#include <cerrno>

#include "device/device.h"
#include "emulator/methods.h"
#include "emulator/object_table.h"
#include "emulator/peer_credentials.h"

namespace uroce::emulator {

// Reply fds: [the ring memfd].
int create_wq(Call& c) {
  const auto req = c.request<abi::CreateWqRequest>();
  // mlx5_ib_create_wq: delay drop needs CAP_SYS_RAWIO (EPERM).
  if ((req.flags & IBV_WQ_FLAGS_DELAY_DROP) && !peer_has_capability(c.owner.mem.pid(), CAP_SYS_RAWIO))
    return EPERM;
  auto r = c.dev.create_wq(&c.owner, req);
  if (r.err) return r.err;
  device::Wq* w = c.dev.wq(r.value);
  abi::CreateWqReply rep{};
  rep.handle = c.objects.insert(ObjType::kWq, r.value);
  rep.wqn = w->wqn;
  rep.max_wr = req.max_wr;  // mlx5 echoes the request
  rep.max_sge = req.max_sge;
  rep.log2 = w->ring.log2;
  rep.stride = w->ring.stride;
  rep.shm_size = w->mem.size();
  c.pass_fd(w->mem.release_fd(), true);
  return c.reply(rep);
}

int modify_wq(Call& c) {
  const auto req = c.request<abi::ModifyWqRequest>();
  return c.dev.modify_wq(&c.owner, uint32_t(req.handle), req);
}

// Reply fds: [the memfd of the WQ's WQEs in mlx5's format].
int mlx5_wq_format(Call& c) {
  const uint64_t handle = c.request<abi::HandleRequest>().handle;
  abi::Mlx5WqFormatReply rep{};
  int fd = -1;
  if (int err = c.dev.wq_to_mlx5(&c.owner, uint32_t(handle), &rep, &fd)) return err;
  c.pass_fd(fd, true);
  return c.reply(rep);
}

int destroy_wq(Call& c) { return c.dev.destroy_wq(&c.owner, uint32_t(c.request<abi::HandleRequest>().handle)); }

// The request holds 2^log_size WQ handles; each must be a WQ of this
// session (else EINVAL, as the kernel's lookup in ib_uverbs_ex_create_rwq_ind_table).
int create_rwq_ind_table(Call& c) {
  const auto* req = reinterpret_cast<const abi::CreateRwqIndTableRequest*>(c.body);
  const uint32_t log_size = req->log_size;
  if (log_size > abi::kMaxLogIndTableSize) return EINVAL;
  const uint32_t n = 1u << log_size;
  if (c.len < offsetof(abi::CreateRwqIndTableRequest, wqs) + n * sizeof(uint64_t)) return EINVAL;
  uint32_t wqs[1u << abi::kMaxLogIndTableSize];
  for (uint32_t i = 0; i < n; ++i) {
    uint64_t id = 0;
    if (c.objects.lookup(req->wqs[i], ObjType::kWq, EINVAL, &id)) return EINVAL;
    wqs[i] = uint32_t(id);
  }
  auto r = c.dev.create_rwq_ind_table(&c.owner, log_size, wqs);
  if (r.err) return r.err;
  return c.reply(abi::CreateRwqIndTableReply{c.objects.insert(ObjType::kRwqIndTable, r.value), r.value, 0});
}

int destroy_rwq_ind_table(Call& c) {
  return c.dev.destroy_rwq_ind_table(&c.owner, uint32_t(c.request<abi::HandleRequest>().handle));
}

int create_rss_qp(Call& c) {
  // Kernel: a raw packet QP, RSS or not, needs CAP_NET_RAW.
  if (!peer_has_capability(c.owner.mem.pid(), CAP_NET_RAW)) return EPERM;
  auto r = c.dev.create_rss_qp(&c.owner, c.request<abi::CreateRssQpRequest>());
  if (r.err) return r.err;
  return c.reply(abi::CreateRssQpReply{c.objects.insert(ObjType::kQp, r.value), r.value, 0});
}

}  // namespace uroce::emulator
