// Methods of protection domains, memory regions and memory windows.
#include <cerrno>

#include "device/device.h"
#include "emulator/engine.h"
#include "emulator/methods.h"
#include "emulator/object_table.h"

namespace uroce::emulator {

int alloc_pd(Call& c) {
  auto r = c.dev.alloc_pd(&c.owner);
  if (r.err) return r.err;
  return c.reply(abi::AllocPdReply{c.objects.insert(ObjType::kPd, r.value)});
}

int dealloc_pd(Call& c) {
  return c.dev.dealloc_pd(&c.owner, uint32_t(c.request<abi::HandleRequest>().handle));
}

// Request fds: [the memfd of shared pages], mapped by the device, closed after.
int reg_mr(Call& c) {
  auto r = c.dev.reg_mr(&c.owner, c.request<abi::RegMrRequest>(), c.fds.empty() ? -1 : c.fds[0]);
  if (r.err) return r.err;
  return c.reply(abi::RegMrReply{c.objects.insert(ObjType::kMr, r.value), r.value, r.value});
}

// The verbs below may destroy what work the client posted before them names:
// that work is taken first, as an HCA sees the doorbell before the command.
int rereg_mr(Call& c) {
  c.engine.take_posted_work(c.owner);
  uint32_t key = 0;
  if (int err = c.dev.rereg_mr(&c.owner, c.request<abi::ReregMrRequest>(), &key,
                               c.fds.empty() ? -1 : c.fds[0]))
    return err;
  return c.reply(abi::RegMrReply{c.client_handles[0], key, key});
}

int dereg_mr(Call& c) {
  c.engine.take_posted_work(c.owner);
  return c.dev.dereg_mr(&c.owner, uint32_t(c.request<abi::HandleRequest>().handle));
}

// The handle names the window's index: its R_Key's key part changes with binds.
int alloc_mw(Call& c) {
  const auto req = c.request<abi::AllocMwRequest>();
  uint32_t rkey = 0;
  auto r = c.dev.alloc_mw(&c.owner, uint32_t(req.pd), req.type, &rkey);
  if (r.err) return r.err;
  return c.reply(abi::AllocMwReply{c.objects.insert(ObjType::kMw, r.value), rkey, 0});
}

int dealloc_mw(Call& c) {
  c.engine.take_posted_work(c.owner);
  return c.dev.dealloc_mw(&c.owner, uint32_t(c.request<abi::HandleRequest>().handle));
}

// mlx5dv_create_mkey (device/mkey.cc): the handle names the mkey's index.
int create_mkey(Call& c) {
  const auto req = c.request<abi::CreateMkeyRequest>();
  uint32_t key = 0, num_desc = 0;
  auto r = c.dev.create_mkey(&c.owner, uint32_t(req.pd), req.flags, req.max_entries, &key, &num_desc);
  if (r.err) return r.err;
  return c.reply(abi::CreateMkeyReply{c.objects.insert(ObjType::kMkey, r.value), key, num_desc});
}

int destroy_mkey(Call& c) {
  c.engine.take_posted_work(c.owner);
  return c.dev.destroy_mkey(&c.owner, uint32_t(c.request<abi::HandleRequest>().handle));
}

// An imported context (ibv_import_device) is the same session, so its
// handles already name these objects: the lookup (the method table) is the
// check, and a PD needs nothing more.
int import_pd(Call&) { return 0; }

int import_mr(Call& c) {
  const device::Mr* mr = c.dev.find_mr(uint32_t(c.request<abi::HandleRequest>().handle));
  if (!mr || mr->owner != &c.owner) return ENOENT;
  return c.reply(abi::ImportMrReply{mr->iova, mr->length, mr->key, mr->key, mr->access, 0});
}

}  // namespace uroce::emulator
