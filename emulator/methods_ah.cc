// Methods of address handles.
#include "device/device.h"
#include "emulator/methods.h"
#include "emulator/object_table.h"

namespace uroce::emulator {

int create_ah(Call& c) {
  auto r = c.dev.create_ah(&c.owner, uint32_t(c.request<abi::CreateAhRequest>().pd));
  if (r.err) return r.err;
  return c.reply(abi::CreateAhReply{c.objects.insert(ObjType::kAh, r.value)});
}

// Work posted before it needs nothing of the AH: a UD send carries its
// address vector in the WQE (abi::SendWqe::av), copied at ibv_post_send.
int destroy_ah(Call& c) {
  return c.dev.destroy_ah(&c.owner, uint32_t(c.request<abi::HandleRequest>().handle));
}

}  // namespace uroce::emulator
