// Methods of queue pairs.
#include <linux/capability.h>

#include <cerrno>

#include "device/device.h"
#include "emulator/methods.h"
#include "emulator/object_table.h"
#include "emulator/peer_credentials.h"

namespace uroce::emulator {

// Reply fds: [the queue memfd holding the SQ then the RQ].
int create_qp(Call& c) {
  const auto req = c.request<abi::CreateQpRequest>();
  // Kernel (ib_uverbs create_qp): a raw packet QP needs CAP_NET_RAW.
  if (req.qp_type == IBV_QPT_RAW_PACKET && !peer_has_capability(c.owner.mem.pid(), CAP_NET_RAW))
    return EPERM;
  auto r = c.dev.create_qp(&c.owner, req);
  if (r.err) return r.err;
  device::Qp* qp = c.dev.qp(r.value);
  abi::CreateQpReply rep{};
  rep.handle = c.objects.insert(ObjType::kQp, r.value);
  rep.qpn = r.value;
  rep.caps = qp->caps;
  rep.sq_log2 = qp->sq.log2;
  rep.sq_stride = qp->sq.stride;
  rep.rq_log2 = qp->rq.log2;
  rep.rq_stride = qp->rq.stride;
  rep.sq_offset = 0;
  rep.rq_offset = uint64_t(reinterpret_cast<uint8_t*>(qp->rq.hdr) - qp->mem.base());
  rep.shm_size = qp->mem.size();
  c.pass_fd(qp->mem.release_fd(), true);
  return c.reply(rep);
}

int modify_qp(Call& c) {
  const auto req = c.request<abi::ModifyQpRequest>();
  return c.dev.modify_qp(&c.owner, uint32_t(req.handle), req.attr_mask, req.attr);
}

int query_qp(Call& c) {
  abi::QueryQpReply rep{};
  if (int err = c.dev.query_qp(&c.owner, uint32_t(c.request<abi::HandleRequest>().handle), &rep.attr))
    return err;
  return c.reply(rep);
}

int set_qp_udp_sport(Call& c) {
  const auto req = c.request<abi::QpUdpSportRequest>();
  if (req.udp_sport > 0xffff || req.reserved) return EINVAL;
  return c.dev.set_qp_udp_sport(&c.owner, uint32_t(req.handle), uint16_t(req.udp_sport));
}

int mlx5_qp_dc(Call& c) {
  const auto req = c.request<abi::Mlx5QpDcRequest>();
  if (req.reserved || (req.handle >> 32)) return EINVAL;
  return c.dev.make_dc(&c.owner, uint32_t(req.handle), req);
}

int dci_stream_reset(Call& c) {
  const auto req = c.request<abi::DciStreamResetRequest>();
  for (uint8_t b : req.reserved)
    if (b) return EINVAL;
  if (req.handle >> 32) return EINVAL;
  return c.dev.reset_dci_stream(&c.owner, uint32_t(req.handle), req.stream);
}

// Reply fds: [the memfd of the QP's queues in mlx5's format].
int mlx5_qp_format(Call& c) {
  const uint64_t handle = c.request<abi::HandleRequest>().handle;
  if (handle >> 32) return EINVAL;  // a QP opened by another process is not this one's to reformat
  abi::Mlx5QpFormatReply rep{};
  int fd = -1;
  if (int err = c.dev.qp_to_mlx5(&c.owner, uint32_t(handle), &rep, &fd)) return err;
  c.pass_fd(fd, true);
  return c.reply(rep);
}

// The device id: a QPN, or id << 32 | QPN for an opened QP.
int destroy_qp(Call& c) { return c.dev.destroy_qp(&c.owner, c.request<abi::HandleRequest>().handle); }

}  // namespace uroce::emulator
