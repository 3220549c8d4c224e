// Methods of UD multicast groups (ibv_attach_mcast / ibv_detach_mcast).
#include <cstring>

#include "device/device.h"
#include "emulator/methods.h"

namespace uroce::emulator {

namespace {

int on_group(Call& c, int (device::Device::*op)(device::Owner*, uint32_t, const device::Gid&)) {
  const auto req = c.request<abi::McastRequest>();
  device::Gid gid;
  std::memcpy(gid.data(), req.gid, 16);
  return (c.dev.*op)(&c.owner, uint32_t(req.qp), gid);
}

}  // namespace

int attach_mcast(Call& c) { return on_group(c, &device::Device::attach_mcast); }
int detach_mcast(Call& c) { return on_group(c, &device::Device::detach_mcast); }

}  // namespace uroce::emulator
