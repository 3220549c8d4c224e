// ibv_attach_mcast / ibv_detach_mcast: a UD QP joins or leaves a multicast
// group in the engine (device/multicast.h), which then hands it a copy of
// every datagram sent to the group's GID. Errors are the errno, returned
// (rdma-core: the provider's attach_mcast result).
#include <cstring>

#include "verbs_provider/provider.h"

namespace {

int call_mcast(uroce::abi::CtlOp op, ibv_qp* qp, const ibv_gid* gid, uint16_t lid) {
  if (!qp || !gid) return EINVAL;
  uroce::abi::McastRequest req{};
  req.qp = qp->handle;
  std::memcpy(req.gid, gid->raw, 16);
  req.lid = lid;
  return uroce::provider::to_uctx(qp->context)->conn.call(op, &req, sizeof(req), nullptr, 0);
}

}  // namespace

UROCE_EXPORT int ibv_attach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t lid) {
  return call_mcast(uroce::abi::CtlOp::kAttachMcast, qp, gid, lid);
}

UROCE_EXPORT int ibv_detach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t lid) {
  return call_mcast(uroce::abi::CtlOp::kDetachMcast, qp, gid, lid);
}
