// Methods of device memory (ibv_alloc_dm, ibv_free_dm, ibv_reg_dm_mr).
#include <fcntl.h>

#include <cerrno>

#include "device/device.h"
#include "emulator/methods.h"
#include "emulator/object_table.h"

namespace uroce::emulator {

// Reply fds: [the memory's memfd], which the client maps; the device keeps its own.
int alloc_dm(Call& c) {
  int fd = -1;
  uint64_t map_length = 0;
  auto r = c.dev.alloc_dm(&c.owner, c.request<abi::AllocDmRequest>(), &fd, &map_length);
  if (r.err) return r.err;
  c.pass_fd(fd, false);
  return c.reply(abi::AllocDmReply{c.objects.insert(ObjType::kDm, r.value), map_length});
}

int free_dm(Call& c) {
  return c.dev.free_dm(&c.owner, uint32_t(c.request<abi::HandleRequest>().handle));
}

int reg_dm_mr(Call& c) {
  auto r = c.dev.reg_dm_mr(&c.owner, c.request<abi::RegDmMrRequest>());
  if (r.err) return r.err;
  return c.reply(abi::RegMrReply{c.objects.insert(ObjType::kMr, r.value), r.value, r.value});
}

// Reply fds: the memory's memfd again (the device keeps its own).
int import_dm(Call& c) {
  const device::Dm* dm = c.dev.find_dm(uint32_t(c.request<abi::HandleRequest>().handle));
  if (!dm || dm->owner != &c.owner) return ENOENT;
  const int fd = fcntl(dm->fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return errno;
  c.pass_fd(fd, true);
  return c.reply(abi::ImportDmReply{dm->length, dm->map_length});
}

}  // namespace uroce::emulator
