// Reaching a client's registered memory, two ways:
// - SharedPages: pages the provider moved onto a sealed memfd at ibv_reg_mr
//   (verbs_provider/shared_pages.cc); the engine maps the memfd and moves
//   data with plain loads and stores, no system call. The mapping holds the
//   pages for the MR's life, as a NIC's pinning does: a client that unmaps
//   them does not redirect the device.
// - ProcessMemory: every other byte (partial pages at an MR's ends, file-backed
//   or huge-page memory, the stack) with process_vm_readv/process_vm_writev:
//   no bounce buffer, and works for any mapping.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <memory>

namespace uroce::device {

// Bytes of client memfds a client (or the whole engine) may have mapped: a
// client's sparse memfds could otherwise fill the engine's address space and
// leave none for other clients' queues.
struct SharedBudget {
  uint64_t limit;
  uint64_t used = 0;
};

class SharedPages {
 public:
  // Maps fd's bytes [0, length) as the client's [start, start + length).
  // Refuses (nullptr, *err set) anything but a memfd on shmem sealed against
  // shrinking, large enough, with page-aligned bounds: the engine must never
  // fault on a client's page. Over the client's or the engine's budget (bytes,
  // or kMaxSharedMrMappings mappings) it maps nothing and sets *err to 0: the
  // MR then works through process_vm_*.
  static std::unique_ptr<SharedPages> map(int fd, uint64_t start, uint64_t length, int* err,
                                          SharedBudget* owner_budget);
  ~SharedPages();
  SharedPages(const SharedPages&) = delete;
  SharedPages& operator=(const SharedPages&) = delete;

  uint64_t start() const { return start_; }
  uint64_t end() const { return start_ + length_; }
  bool contains(uint64_t addr) const { return addr >= start_ && addr - start_ < length_; }
  uint8_t* at(uint64_t addr) const { return base_ + (addr - start_); }

 private:
  SharedPages(uint8_t* base, uint64_t start, uint64_t length, SharedBudget* owner_budget)
      : base_(base), start_(start), length_(length), owner_budget_(owner_budget) {}
  uint8_t* base_;
  uint64_t start_;
  uint64_t length_;
  SharedBudget* owner_budget_;
};

// Client bytes [addr, addr + len), with the shared pages (if any) of the MR
// they were reached through.
struct RemoteSpan {
  uint64_t addr;
  size_t len;
  const SharedPages* pages;
};

class ProcessMemory {
 public:
  explicit ProcessMemory(pid_t pid = 0) : pid_(pid) {}
  pid_t pid() const { return pid_; }

  // Each returns false if any byte could not be transferred (unmapped page,
  // process gone); nothing is retried. Spans are consecutive in the local
  // buffer. At most kMaxSpans spans.
  static constexpr size_t kMaxSpans = 32;
  bool read(const RemoteSpan* spans, size_t n, uint8_t* dst) const;
  bool write(const RemoteSpan* spans, size_t n, const uint8_t* src) const;
  bool read(const RemoteSpan& s, void* dst) const { return read(&s, 1, static_cast<uint8_t*>(dst)); }
  bool write(const RemoteSpan& s, const void* src) const {
    return write(&s, 1, static_cast<const uint8_t*>(src));
  }
  // Unshared addresses only.
  bool read(uint64_t addr, void* dst, size_t len) const { return read({addr, len, nullptr}, dst); }
  bool write(uint64_t addr, const void* src, size_t len) const {
    return write({addr, len, nullptr}, src);
  }

  // The 8-byte atomics of IBA 9.4.5 on an aligned address; returns the
  // original value in *orig. On shared pages they are atomic with respect to
  // the client's own CPU accesses too; elsewhere a read then a write (the
  // engine thread serialises the device's atomics either way).
  bool compare_swap(const RemoteSpan& s, uint64_t compare, uint64_t swap, uint64_t* orig) const;
  bool fetch_add(const RemoteSpan& s, uint64_t add, uint64_t* orig) const;
  // ATOMIC WRITE (IBA 1.5 annex A19): the 8 bytes land at once, after every
  // earlier write of the engine (a release store, rxe's smp_store_release).
  // On shared pages one 64-bit store, which the client's own CPU sees whole;
  // elsewhere one process_vm_writev of the aligned word.
  bool store(const RemoteSpan& s, uint64_t value) const;

 private:
  template <bool kToRemote>
  bool transfer(const RemoteSpan* spans, size_t n, uint8_t* local) const;
  bool readv(const iovec* local, const iovec* remote, size_t n, size_t total) const;
  bool writev(const iovec* local, const iovec* remote, size_t n, size_t total) const;

  pid_t pid_;
};

}  // namespace uroce::device
