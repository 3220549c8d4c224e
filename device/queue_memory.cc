#include "device/queue_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

namespace uroce::device {

QueueMemory::~QueueMemory() {
  if (base_) munmap(base_, size_);
  if (fd_ >= 0) close(fd_);
}

QueueMemory& QueueMemory::operator=(QueueMemory&& o) noexcept {
  if (this != &o) {
    if (base_) munmap(base_, size_);
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(o.fd_, -1);
    size_ = std::exchange(o.size_, 0);
    base_ = std::exchange(o.base_, nullptr);
  }
  return *this;
}

int QueueMemory::create(const char* name, size_t size) {
  size = (size + 4095) & ~size_t(4095);
  int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return errno;
  // memfds are born 0777: a queue is for the engine and its client (who
  // gets the fd itself), nobody who finds it in /proc.
  if (fchmod(fd, 0600) != 0 || ftruncate(fd, off_t(size)) != 0) {
    int e = errno;
    close(fd);
    return e;
  }
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    close(fd);
    return e;
  }
  fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
  fd_ = fd;
  size_ = size;
  base_ = static_cast<uint8_t*>(p);
  return 0;
}

}  // namespace uroce::device
