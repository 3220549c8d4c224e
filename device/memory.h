// Reaching a client's registered memory. The engine reads and writes another
// process's pages with process_vm_readv/process_vm_writev: no copy through a
// bounce buffer, works for any mapping (heap, stack, file-backed, huge pages),
// and leaves fork() semantics to the kernel (the parent's pages are accessed;
// a child's copy-on-write pages are never touched).
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>

namespace uroce::device {

class ProcessMemory {
 public:
  explicit ProcessMemory(pid_t pid = 0) : pid_(pid) {}
  pid_t pid() const { return pid_; }

  // Each returns false if any byte could not be transferred (unmapped page,
  // process gone); nothing is retried.
  bool read(uint64_t addr, void* dst, size_t len) const;
  bool write(uint64_t addr, const void* src, size_t len) const;
  // Scatter/gather forms: local iovecs against remote iovecs.
  bool readv(const iovec* local, size_t nlocal, const iovec* remote, size_t nremote, size_t total) const;
  bool writev(const iovec* local, size_t nlocal, const iovec* remote, size_t nremote, size_t total) const;

 private:
  pid_t pid_;
};

}  // namespace uroce::device
