// Device memory (ibv_alloc_dm, ibv_free_dm, ibv_memcpy_to_dm /
// ibv_memcpy_from_dm, ibv_reg_dm_mr), as mlx5 offers its MEMIC: the engine
// holds the memory on a memfd (device/device_memory.cc) and this process
// maps it, so the copies are plain loads and stores, as mlx5's are to its BAR.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "verbs_provider/provider.h"

namespace uroce::provider {

namespace {

// mlx5_access_dm: past the end is EFAULT, an offset or length that is not a
// multiple of 4 EINVAL (MEMIC is reached in 4-byte words).
int check_access(const UDm* dm, uint64_t offset, size_t length) {
  if (offset > dm->length || length > dm->length - offset) return EFAULT;
  if ((offset | length) & 3) return EINVAL;
  return 0;
}

// Word by word, as mlx5 copies (4-byte relaxed atomics): a peer's RDMA
// WRITE into the memory at the same time tears no word.
int memcpy_to_dm(ibv_dm* ibdm, uint64_t offset, const void* host_addr, size_t length) {
  UDm* dm = to_udm(ibdm);
  if (int err = check_access(dm, offset, length)) return err;
  // The host buffer need not be aligned: take each word from it with memcpy.
  auto* dst = reinterpret_cast<uint32_t*>(dm->map + offset);
  const auto* src = static_cast<const uint8_t*>(host_addr);
  for (size_t i = 0; i < length / 4; ++i) {
    uint32_t w;
    std::memcpy(&w, src + i * 4, 4);
    std::atomic_ref<uint32_t>(dst[i]).store(w, std::memory_order_relaxed);
  }
  return 0;
}

int memcpy_from_dm(void* host_addr, ibv_dm* ibdm, uint64_t offset, size_t length) {
  UDm* dm = to_udm(ibdm);
  if (int err = check_access(dm, offset, length)) return err;
  auto* src = reinterpret_cast<uint32_t*>(dm->map + offset);
  auto* dst = static_cast<uint8_t*>(host_addr);
  for (size_t i = 0; i < length / 4; ++i) {
    const uint32_t w = std::atomic_ref<uint32_t>(src[i]).load(std::memory_order_relaxed);
    std::memcpy(dst + i * 4, &w, 4);
  }
  return 0;
}

// A forked child cannot use its parent's context (context.cc), but mlx5's
// can, and pyverbs' test_multi_process_alloc_dm allocates device memory on
// the parent's context in five children at once. So a child's ibv_alloc_dm
// goes through a session of the child's own, opened on first use; the memory
// is the child's and goes when it exits. Everything else the child does on
// the parent's context stays EIO (an MR on the memory needs a PD, and the
// child's PDs are the parent's session's).
Connection* dm_session(UContext* c) {
  if (!c->forked_child) return &c->conn;
  std::lock_guard<std::mutex> lock(c->child_mu);
  if (c->child_session) return c->child_session;
  auto* conn = new (std::nothrow) Connection;
  int async_pipe[2];
  if (!conn || pipe2(async_pipe, O_CLOEXEC) != 0) {
    delete conn;
    return nullptr;
  }
  abi::HelloRequest req{abi::kMagic, abi::kVersion};
  abi::HelloReply rep;
  int fds[2] = {-1, -1};
  int err = conn->connect_to(c->dev->socket_path);
  if (!err)
    err = conn->call(abi::CtlOp::kHello, &req, sizeof(req), &rep, sizeof(rep), &async_pipe[1], 1, fds, 2);
  close(async_pipe[1]);  // the read end stays open: the engine's events are dropped unread
  for (int fd : fds)
    if (fd >= 0) close(fd);
  if (err) {
    close(async_pipe[0]);
    delete conn;
    return nullptr;
  }
  return c->child_session = conn;
}

// Maps the memory's memfd (closing it) and fills in the ibv_dm; false when
// the mapping failed. Not inherited by a forked child, as mlx5's mapping of
// the BAR (VM_DONTCOPY).
bool map_dm(UDm* dm, ibv_context* context, int fd, uint64_t handle, uint64_t length, uint64_t map_length) {
  dm->map = fd >= 0 ? static_cast<uint8_t*>(map_queue(fd, map_length)) : nullptr;
  if (fd >= 0) close(fd);
  if (!dm->map) return false;
  dm->map_length = map_length;
  dm->length = length;
  dm->dm.context = context;
  dm->dm.memcpy_to_dm = memcpy_to_dm;
  dm->dm.memcpy_from_dm = memcpy_from_dm;
  dm->dm.comp_mask = IBV_DM_MASK_HANDLE;
  dm->dm.handle = uint32_t(handle);
  return true;
}

ibv_dm* alloc_dm(ibv_context* context, ibv_alloc_dm_attr* attr) {
  UContext* c = to_uctx(context);
  // mlx5_alloc_dm: no comp_mask bit is known; more than max_dm_size is EINVAL.
  if (attr->comp_mask || attr->length > c->info.max_dm_size) {
    errno = EINVAL;
    return nullptr;
  }
  auto* dm = new (std::nothrow) UDm{};
  if (!dm) {
    errno = ENOMEM;
    return nullptr;
  }
  dm->conn = dm_session(c);
  if (!dm->conn) {
    delete dm;
    errno = EIO;
    return nullptr;
  }
  abi::AllocDmRequest req{attr->length, attr->log_align_req, 0};
  abi::AllocDmReply rep;
  int fd = -1;
  if (int err = dm->conn->call(abi::CtlOp::kAllocDm, &req, sizeof(req), &rep, sizeof(rep), nullptr, 0, &fd, 1)) {
    delete dm;
    errno = err;
    return nullptr;
  }
  if (!map_dm(dm, context, fd, rep.handle, attr->length, rep.map_length)) {
    abi::HandleRequest d{rep.handle};
    dm->conn->call(abi::CtlOp::kFreeDm, &d, sizeof(d), nullptr, 0);
    delete dm;
    errno = ENOMEM;
    return nullptr;
  }
  return &dm->dm;
}

// EBUSY (from the engine) while an MR is registered on it.
int free_dm(ibv_dm* ibdm) {
  UDm* dm = to_udm(ibdm);
  abi::HandleRequest req{ibdm->handle};
  int err = dm->conn->call(abi::CtlOp::kFreeDm, &req, sizeof(req), nullptr, 0);
  if (err && err != EIO) return err;
  unmap_queue(dm->map, dm->map_length);
  delete dm;
  return 0;
}

// Zero-based (the kernel's ib_uverbs_reg_dm_mr requires it): the peer
// addresses offsets from the registered start; addr is where this process
// sees that start (mlx5_reg_dm_mr: dm->start_va + dm_offset).
ibv_mr* reg_dm_mr(ibv_pd* pd, ibv_dm* ibdm, uint64_t offset, size_t length, unsigned int access) {
  UDm* dm = to_udm(ibdm);
  UContext* c = to_uctx(pd->context);
  auto* mr = new (std::nothrow) UMr{};
  if (!mr) {
    errno = ENOMEM;
    return nullptr;
  }
  abi::RegDmMrRequest req{pd->handle, ibdm->handle, offset, length, uint64_t(uintptr_t(dm->map)), access, 0};
  abi::RegMrReply rep;
  if (int err = c->conn.call(abi::CtlOp::kRegDmMr, &req, sizeof(req), &rep, sizeof(rep))) {
    delete mr;
    errno = err;
    return nullptr;
  }
  mr->iova = 0;
  mr->access = access;
  mr->mr.context = pd->context;
  mr->mr.pd = pd;
  mr->mr.addr = dm->map + offset;
  mr->mr.length = length;
  mr->mr.handle = uint32_t(rep.handle);
  mr->mr.lkey = rep.lkey;
  mr->mr.rkey = rep.rkey;
  std::lock_guard<std::mutex> lock(c->mrs_mu);
  c->mrs[mr->mr.lkey] = mr;
  return &mr->mr;
}

}  // namespace

void fill_dm_ops(verbs_context* v) {
  v->alloc_dm = alloc_dm;
  v->free_dm = free_dm;
  v->reg_dm_mr = reg_dm_mr;
}

}  // namespace uroce::provider

using namespace uroce;
using namespace uroce::provider;

// The same memory mapped once more, through an imported context's session
// (context.cc: ibv_import_device); ibv_unimport_dm unmaps it and leaves the
// memory to the context that allocated it.
UROCE_EXPORT ibv_dm* ibv_import_dm(ibv_context* context, uint32_t dm_handle) {
  UContext* c = to_uctx(context);
  auto* dm = new (std::nothrow) UDm{};
  if (!dm) {
    errno = ENOMEM;
    return nullptr;
  }
  dm->conn = &c->conn;
  abi::HandleRequest req{dm_handle};
  abi::ImportDmReply rep;
  int fd = -1;
  if (int err = dm->conn->call(abi::CtlOp::kImportDm, &req, sizeof(req), &rep, sizeof(rep), nullptr, 0, &fd, 1)) {
    delete dm;
    errno = err;
    return nullptr;
  }
  if (!map_dm(dm, context, fd, dm_handle, rep.length, rep.map_length)) {
    delete dm;
    errno = ENOMEM;
    return nullptr;
  }
  return &dm->dm;
}

UROCE_EXPORT void ibv_unimport_dm(ibv_dm* ibdm) {
  UDm* dm = to_udm(ibdm);
  unmap_queue(dm->map, dm->map_length);
  delete dm;
}
