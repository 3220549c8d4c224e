// Registered memory on shared pages, the provider's half (the engine's is
// device/memory.h). ibv_reg_mr moves the whole pages of an MR onto a memfd:
// it copies their bytes into the memfd and maps the memfd over them
// (MAP_FIXED, same address, same protection), so the application keeps the
// same bytes at the same addresses, and the engine maps the same memfd and
// moves data with plain loads and stores instead of two system calls per
// packet. What is moved:
// - only private anonymous read-write memory (heap, malloc/mmap buffers) and
//   pages this module moved before; never the stack, files, huge pages or
//   memory the application shares itself (those stay on process_vm_*);
// - only pages wholly inside the MR: a partial first or last page may hold
//   other objects that another thread writes while the copy is made;
// - nothing with UROCE_SHARED_MR=0 in the environment.
// When the last MR on them is deregistered, the pages move back to private
// anonymous memory the same way (copied, then mremap'ed into place), so they
// behave as before: MADV_DONTNEED zero-fills them again, which allocators
// such as jemalloc count on. fork() keeps its meaning while they are moved:
// the child gets private copies (pthread_atfork).
// A thread that writes inside an MR's whole pages while ibv_reg_mr or the
// last ibv_dereg_mr on them runs may have that write lost: registering or
// deregistering memory that is being written is undefined on a real NIC too
// (the pages are being pinned or unpinned).
#pragma once

#include <cstddef>
#include <cstdint>

#include "uroce/abi.h"

namespace uroce::provider {

struct SharedLease {
  uint64_t id = 0;  // 0: nothing shared
  int fd = -1;      // the memfd, owned by this module: send it, do not close it
  abi::SharedRange range{};
};

// Shares the whole pages of [addr, addr + length) if it can; an empty lease
// otherwise (the MR then works through process_vm_* alone).
SharedLease share_pages(const void* addr, size_t length);
// Drops a lease once the engine no longer uses its memfd.
void release_pages(uint64_t id);
// Registers the fork handlers that give a child private copies of moved
// pages. Call before registering any other child handler that may touch
// memory (glibc runs child handlers in registration order).
void install_fork_handlers();

}  // namespace uroce::provider
