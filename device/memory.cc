#include "device/memory.h"

#include "device/params.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace uroce::device {

// ------------------------------------------------------------ SharedPages

namespace {
SharedBudget g_engine_budget{kMaxSharedBytes};
uint32_t g_shared_mappings = 0;  // of kMaxSharedMrMappings: the rest are for queues
}  // namespace

std::unique_ptr<SharedPages> SharedPages::map(int fd, uint64_t start, uint64_t length, int* err,
                                              SharedBudget* owner_budget) {
  const uint64_t page = uint64_t(sysconf(_SC_PAGESIZE));
  *err = EINVAL;
  if (fd < 0 || length == 0 || (start | length) & (page - 1) || start + length < start) return nullptr;
  if (length > kMaxMrSize + page) return nullptr;  // no MR is larger
  struct statfs fs;
  struct stat st;
  // shmem only: hugetlbfs pages can run out at fault time (SIGBUS in the engine).
  if (fstatfs(fd, &fs) != 0 || fs.f_type != TMPFS_MAGIC) return nullptr;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || uint64_t(st.st_size) < length) return nullptr;
  // Unsealed, the client could truncate the file under the engine's mapping.
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || !(seals & F_SEAL_SHRINK)) return nullptr;
  *err = 0;
  if (g_engine_budget.used + length > g_engine_budget.limit ||
      (owner_budget && owner_budget->used + length > owner_budget->limit) ||
      g_shared_mappings >= kMaxSharedMrMappings)
    return nullptr;
  void* p = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return nullptr;  // out of address space: unshared, as over budget
  g_engine_budget.used += length;
  if (owner_budget) owner_budget->used += length;
  ++g_shared_mappings;
  return std::unique_ptr<SharedPages>(new SharedPages(static_cast<uint8_t*>(p), start, length, owner_budget));
}

SharedPages::~SharedPages() {
  munmap(base_, length_);
  --g_shared_mappings;
  g_engine_budget.used -= length_;
  if (owner_budget_) owner_budget_->used -= length_;
}

// ------------------------------------------------------------ ProcessMemory

namespace {

// process_vm_* may transfer less than asked (a fault part way, or IOV_MAX
// splits); continue from where it stopped.
template <typename Fn>
bool transfer_all(Fn fn, const iovec* local, const iovec* remote, size_t n, size_t total) {
  if (total == 0) return true;
  ssize_t got = fn(local, remote, n);
  if (got == ssize_t(total)) return true;
  if (got <= 0) return false;
  // Partial: redo element-wise from the byte it stopped at (rare path).
  size_t skip = size_t(got);
  for (size_t i = 0; i < n; ++i) {
    if (skip >= local[i].iov_len) {
      skip -= local[i].iov_len;
      continue;
    }
    iovec l{static_cast<char*>(local[i].iov_base) + skip, local[i].iov_len - skip};
    iovec r{static_cast<char*>(remote[i].iov_base) + skip, l.iov_len};
    skip = 0;
    while (l.iov_len) {
      ssize_t m = fn(&l, &r, 1);
      if (m <= 0) return false;
      l = {static_cast<char*>(l.iov_base) + m, l.iov_len - size_t(m)};
      r = {static_cast<char*>(r.iov_base) + m, r.iov_len - size_t(m)};
    }
  }
  return true;
}

}  // namespace

bool ProcessMemory::readv(const iovec* local, const iovec* remote, size_t n, size_t total) const {
  return transfer_all(
      [this](const iovec* l, const iovec* r, size_t k) { return process_vm_readv(pid_, l, k, r, k, 0); },
      local, remote, n, total);
}

bool ProcessMemory::writev(const iovec* local, const iovec* remote, size_t n, size_t total) const {
  return transfer_all(
      [this](const iovec* l, const iovec* r, size_t k) { return process_vm_writev(pid_, l, k, r, k, 0); },
      local, remote, n, total);
}

// Shared bytes are copied on the spot; the rest (at most a partial page
// before and after the shared pages of each span) is gathered into one
// process_vm_* call.
template <bool kToRemote>
bool ProcessMemory::transfer(const RemoteSpan* spans, size_t n, uint8_t* local) const {
  if (n > kMaxSpans) return false;
  iovec lv[2 * kMaxSpans], rv[2 * kMaxSpans];
  size_t slow = 0, slow_bytes = 0;
  for (size_t i = 0; i < n; ++i) {
    uint64_t addr = spans[i].addr;
    size_t left = spans[i].len;
    const SharedPages* pages = spans[i].pages;
    while (left) {
      size_t chunk = left;
      if (pages && pages->contains(addr)) {
        chunk = size_t(std::min<uint64_t>(left, pages->end() - addr));
        if (kToRemote) std::memcpy(pages->at(addr), local, chunk);
        else std::memcpy(local, pages->at(addr), chunk);
      } else {
        if (pages && addr < pages->start()) chunk = size_t(std::min<uint64_t>(left, pages->start() - addr));
        if (slow == 2 * kMaxSpans) return false;
        lv[slow] = {local, chunk};
        rv[slow] = {reinterpret_cast<void*>(addr), chunk};
        ++slow;
        slow_bytes += chunk;
      }
      addr += chunk;
      local += chunk;
      left -= chunk;
    }
  }
  if (!slow) return true;
  return kToRemote ? writev(lv, rv, slow, slow_bytes) : readv(lv, rv, slow, slow_bytes);
}

bool ProcessMemory::read(const RemoteSpan* spans, size_t n, uint8_t* dst) const {
  return transfer<false>(spans, n, dst);
}

bool ProcessMemory::write(const RemoteSpan* spans, size_t n, const uint8_t* src) const {
  return transfer<true>(spans, n, const_cast<uint8_t*>(src));
}

namespace {

// The 8-byte word at s.addr when the engine maps it (shared pages), else
// nullptr: the atomics then go through process_vm_*.
uint64_t* shared_word(const RemoteSpan& s) {
  if (!s.pages || !s.pages->contains(s.addr) || !s.pages->contains(s.addr + 7)) return nullptr;
  return reinterpret_cast<uint64_t*>(s.pages->at(s.addr));
}

}  // namespace

bool ProcessMemory::compare_swap(const RemoteSpan& s, uint64_t compare, uint64_t swap,
                                 uint64_t* orig) const {
  if (uint64_t* word = shared_word(s)) {
    uint64_t expected = compare;
    __atomic_compare_exchange_n(word, &expected, swap, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    *orig = expected;
    return true;
  }
  if (!read(s, orig)) return false;
  return *orig != compare || swap == compare || write(s, &swap);
}

bool ProcessMemory::fetch_add(const RemoteSpan& s, uint64_t add, uint64_t* orig) const {
  if (uint64_t* word = shared_word(s)) {
    *orig = __atomic_fetch_add(word, add, __ATOMIC_SEQ_CST);
    return true;
  }
  if (!read(s, orig)) return false;
  const uint64_t value = *orig + add;
  return add == 0 || write(s, &value);
}

bool ProcessMemory::store(const RemoteSpan& s, uint64_t value) const {
  if (uint64_t* word = shared_word(s)) {
    __atomic_store_n(word, value, __ATOMIC_RELEASE);
    return true;
  }
  return write(s, &value);
}

}  // namespace uroce::device
