// Shared-memory regions for queues: a sealed memfd created by the engine and
// mapped on both sides. Seals stop a client from shrinking the file under the
// engine (which would turn an engine access into SIGBUS).
#pragma once

#include <cstddef>
#include <cstdint>

#include "uroce/abi.h"

namespace uroce::device {

class QueueMemory {
 public:
  QueueMemory() = default;
  ~QueueMemory();
  QueueMemory(const QueueMemory&) = delete;
  QueueMemory& operator=(const QueueMemory&) = delete;
  QueueMemory(QueueMemory&& o) noexcept { *this = std::move(o); }
  QueueMemory& operator=(QueueMemory&& o) noexcept;

  // Returns 0 or an errno.
  int create(const char* name, size_t size);
  int fd() const { return fd_; }
  // Hands the memfd over (to be sent to the client, then closed): the
  // engine keeps only its mapping, so queues cost it no file descriptor.
  int release_fd() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  size_t size() const { return size_; }
  uint8_t* base() const { return base_; }

 private:
  int fd_ = -1;
  size_t size_ = 0;
  uint8_t* base_ = nullptr;
};

// A view of one ring inside a region: header plus 2^log2 entries of stride bytes.
struct RingView {
  abi::QueueHeader* hdr = nullptr;
  uint8_t* entries = nullptr;
  uint32_t log2 = 0;
  uint32_t stride = 0;
  uint32_t mask() const { return (1u << log2) - 1; }
  uint32_t size() const { return 1u << log2; }
  uint8_t* slot(uint32_t index) const { return entries + size_t(index & mask()) * stride; }
  static size_t bytes(uint32_t log2, uint32_t stride) {
    return abi::kQueueEntriesOffset + (size_t(1) << log2) * stride;
  }
  void init(uint8_t* at, uint32_t lg, uint32_t st) {
    hdr = reinterpret_cast<abi::QueueHeader*>(at);
    entries = at + abi::kQueueEntriesOffset;
    log2 = lg;
    stride = st;
    hdr->log2_entries = lg;
    hdr->stride = st;
  }
};

inline uint32_t log2_ceil(uint32_t v) {
  uint32_t l = 0;
  while ((1u << l) < v) ++l;
  return l;
}

}  // namespace uroce::device
