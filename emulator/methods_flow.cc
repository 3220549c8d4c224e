// Methods of flow steering rules (ibv_create_flow / ibv_destroy_flow).
#include <linux/capability.h>

#include <cerrno>

#include "device/device.h"
#include "emulator/methods.h"
#include "emulator/object_table.h"
#include "emulator/peer_credentials.h"

namespace uroce::emulator {

int create_flow(Call& c) {
  // Kernel (ib_uverbs_ex_create_flow): steering needs CAP_NET_RAW.
  if (!peer_has_capability(c.owner.mem.pid(), CAP_NET_RAW)) return EPERM;
  const auto req = c.request<abi::CreateFlowRequest>();
  auto r = c.dev.create_flow(&c.owner, uint32_t(req.qp), req);
  if (r.err) return r.err;
  return c.reply(abi::CreateFlowReply{c.objects.insert(ObjType::kFlow, r.value)});
}

int destroy_flow(Call& c) { return c.dev.destroy_flow(&c.owner, uint32_t(c.request<abi::HandleRequest>().handle)); }

}  // namespace uroce::emulator
