// Registered memory on shared pages: see shared_pages.h.
#include "verbs_provider/shared_pages.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace uroce::provider {

namespace {

constexpr char kMemfdName[] = "uroce-mr";
constexpr char kMemfdPath[] = "/memfd:uroce-mr";  // as /proc/self/maps shows it
// Each live lease holds an fd of the application's process: stay well below
// the usual 1024 soft limit.
constexpr size_t kMaxLeases = 256;
constexpr size_t kMoveChunk = size_t(64) << 20;

// Moving registered pages onto or off a memfd keeps every byte at its
// address: it is no unmap of the program's memory. Memory-event hooks see it
// as one all the same (UCX's UCM patches libc's mmap and mremap and drops
// cached registrations of a range "unmapped"; UCX then registers the same
// buffer again for every rendezvous message, moving it each time), so these
// two go to the kernel directly.
void* map_memfd_over(void* addr, size_t len, int fd, off_t offset) {
  return reinterpret_cast<void*>(
      syscall(SYS_mmap, addr, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, offset));
}
void* move_mapping_to(void* from, size_t len, void* to) {
  return reinterpret_cast<void*>(syscall(SYS_mremap, from, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, to));
}

struct Vma {
  uint64_t start, end;
  bool read, write, shared;
  uint64_t offset;  // in the file mapped
  uint64_t ino;
  bool anonymous;  // private anonymous: heap, [anon:...], no path
  bool ours;       // a memfd this module made
  int prot() const { return (read ? PROT_READ : 0) | (write ? PROT_WRITE : 0); }
};

struct Lease {
  uint64_t start, end;
  int fd;
  uint64_t ino;
  uint32_t refs;
};

std::mutex g_mu;
std::map<uint64_t, Lease> g_leases;  // by id
uint64_t g_next_id = 1;

uint64_t page_size() {
  static const uint64_t p = uint64_t(sysconf(_SC_PAGESIZE));
  return p;
}

bool enabled() {
  static const bool on = [] {
    const char* e = getenv("UROCE_SHARED_MR");
    return !(e && std::strcmp(e, "0") == 0);
  }();
  return on;
}

// Reads the whole file with read(2): safe in a forked child (no stdio locks).
std::string read_file(const char* path) {
  std::string out;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[16384];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) out.append(buf, size_t(n));
  close(fd);
  return out;
}

std::vector<Vma> read_maps() {
  std::vector<Vma> vmas;
  const std::string text = read_file("/proc/self/maps");
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    const std::string line = text.substr(pos, eol - pos);
    pos = eol + 1;
    uint64_t start, end, offset, ino;
    unsigned dev_major, dev_minor;
    char perms[5] = {};
    int path_at = 0;
    if (std::sscanf(line.c_str(), "%" SCNx64 "-%" SCNx64 " %4s %" SCNx64 " %x:%x %" SCNu64 " %n", &start,
                    &end, perms, &offset, &dev_major, &dev_minor, &ino, &path_at) < 7)
      continue;
    const std::string path = path_at > 0 ? line.substr(size_t(path_at)) : std::string();
    Vma v{start, end, perms[0] == 'r', perms[1] == 'w', perms[3] == 's', offset, ino, false, false};
    v.anonymous = !v.shared && ino == 0 && perms[2] != 'x' &&
                  (path.empty() || path == "[heap]" || path.rfind("[anon:", 0) == 0);
    v.ours = v.shared && path.rfind(kMemfdPath, 0) == 0;
    vmas.push_back(v);
  }
  return vmas;
}

// Whether every page of [start, end) is mapped by the memfd with inode ino.
bool maps_inode(const std::vector<Vma>& vmas, uint64_t start, uint64_t end, uint64_t ino) {
  uint64_t at = start;
  for (const Vma& v : vmas) {
    if (v.end <= at || v.start > at) continue;
    if (!v.ours || v.ino != ino) return false;
    at = v.end;
    if (at >= end) return true;
  }
  return false;
}

// Whether [start, end) may move onto a new memfd: read-write private
// anonymous memory, or pages moved before that no live lease maps.
bool movable(const std::vector<Vma>& vmas, uint64_t start, uint64_t end) {
  uint64_t at = start;
  for (const Vma& v : vmas) {
    if (v.end <= at || v.start > at) continue;
    if (!v.read || !v.write) return false;
    if (!v.anonymous && !v.ours) return false;
    if (v.ours)
      for (const auto& [id, l] : g_leases)
        if (l.ino == v.ino) return false;  // another MR's pages: moving them would detach it
    at = v.end;
    if (at >= end) return true;
  }
  return false;
}

// Copies only pages that are not all zero: untouched memory stays unallocated.
void copy_pages(uint8_t* dst, const uint8_t* src, size_t len) {
  static const uint8_t zero[65536] = {};
  const size_t step = std::min<size_t>(page_size(), sizeof(zero));
  for (size_t off = 0; off < len; off += step)
    if (std::memcmp(src + off, zero, step) != 0) std::memcpy(dst + off, src + off, step);
}

// A private anonymous copy of the len readable bytes at src, with protection
// prot (mremap keeps it when the copy is moved into place); nullptr if out of memory.
void* private_copy(const uint8_t* src, size_t len, int prot) {
  void* copy = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (copy == MAP_FAILED) return nullptr;
  copy_pages(static_cast<uint8_t*>(copy), src, len);
  mprotect(copy, len, prot);
  return copy;
}

// The same of the pages at [start, start + len) of v, read at their address.
void* private_copy(const Vma& v, uint64_t start, size_t len) {
  auto* src = reinterpret_cast<uint8_t*>(start);
  if (!v.read) mprotect(src, len, PROT_READ);
  void* copy = private_copy(src, len, v.prot());
  if (!v.read) mprotect(src, len, v.prot());
  return copy;
}

// fork(): moved pages are MADV_DONTFORK, so nothing the child does before its
// handler runs can write the parent's memfds. The prepare handler copies every
// moved range into a private anonymous "shadow" mapping, which the child
// inherits and moves into place (mremap: no allocation, no copy), and the
// parent unmaps. The child so gets its copy of the pages as of fork(), as for
// the anonymous memory they were (and as a NIC's pinned pages are copied at
// fork on Linux >= 5.13); the parent's MRs keep their memfds.
struct Shadow {
  uint64_t start;
  size_t len;
  void* copy;
};
constexpr size_t kMaxShadows = 4096;  // moved mappings; share_pages keeps below
Shadow g_shadows[kMaxShadows];
size_t g_nshadows = 0;

void fork_prepare() {
  g_mu.lock();
  g_nshadows = 0;
  for (const Vma& v : read_maps()) {
    if (!v.ours || g_nshadows == kMaxShadows) continue;
    const size_t len = size_t(v.end - v.start);
    if (void* copy = private_copy(v, v.start, len)) g_shadows[g_nshadows++] = {v.start, len, copy};
  }
}

void fork_parent() {
  for (size_t i = 0; i < g_nshadows; ++i) munmap(g_shadows[i].copy, g_shadows[i].len);
  g_nshadows = 0;
  g_mu.unlock();
}

void fork_child() {
  for (size_t i = 0; i < g_nshadows; ++i) {
    const Shadow& s = g_shadows[i];
    mremap(s.copy, s.len, s.len, MREMAP_MAYMOVE | MREMAP_FIXED, reinterpret_cast<void*>(s.start));
  }
  g_nshadows = 0;
  // The memfds belong to the parent's MRs.
  for (auto& [id, l] : g_leases) close(l.fd);
  g_leases.clear();
  g_mu.unlock();
}

size_t count_ours(const std::vector<Vma>& vmas) {
  size_t n = 0;
  for (const Vma& v : vmas) n += v.ours;
  return n;
}

// Whether [start, end) overlaps the calling thread's stack (another thread's
// stack is not told apart from heap; the main one is [stack]).
bool on_own_stack(uint64_t start, uint64_t end) {
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) != 0) return true;
  void* stack;
  size_t size;
  const bool ok = pthread_attr_getstack(&attr, &stack, &size) == 0;
  pthread_attr_destroy(&attr);
  const uint64_t lo = uint64_t(uintptr_t(stack));
  return !ok || (start < lo + size && lo < end);
}

}  // namespace

void install_fork_handlers() {
  static std::once_flag once;
  std::call_once(once, [] { pthread_atfork(fork_prepare, fork_parent, fork_child); });
}

SharedLease share_pages(const void* addr, size_t length) {
  const uint64_t page = page_size();
  const uint64_t begin = uint64_t(uintptr_t(addr));
  if (!enabled() || begin + length < begin) return {};
  const uint64_t start = (begin + page - 1) & ~(page - 1);
  const uint64_t end = (begin + length) & ~(page - 1);
  if (end <= start || on_own_stack(start, end)) return {};
  install_fork_handlers();

  std::lock_guard<std::mutex> lock(g_mu);
  const std::vector<Vma> vmas = read_maps();
  // Pages an earlier MR moved: share its memfd if they are still its pages.
  for (auto& [id, l] : g_leases) {
    if (l.end <= start || l.start >= end) continue;
    if (l.start <= start && end <= l.end && maps_inode(vmas, start, end, l.ino)) {
      ++l.refs;
      return {id, l.fd, {l.start, l.end - l.start}};
    }
  }
  if (g_leases.size() >= kMaxLeases || count_ours(vmas) >= kMaxShadows / 2 || !movable(vmas, start, end))
    return {};

  const size_t len = size_t(end - start);
  int fd = memfd_create(kMemfdName, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return {};
  struct stat st;
  void* staging = MAP_FAILED;
  // Born 0777: the engine gets the fd itself; nobody else may open it in /proc.
  if (fchmod(fd, 0600) == 0 && ftruncate(fd, off_t(len)) == 0 &&
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0 && fstat(fd, &st) == 0)
    staging = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (staging == MAP_FAILED) {
    close(fd);
    return {};
  }
  // Chunk by chunk, so that a large MR needs at most one chunk of memory
  // twice at any time (the old pages go as each chunk is mapped over them);
  // the kernel merges the chunks' mappings of consecutive file offsets.
  auto* target = reinterpret_cast<uint8_t*>(start);
  size_t moved = 0;
  while (moved < len) {
    const size_t chunk = std::min(len - moved, kMoveChunk);
    copy_pages(static_cast<uint8_t*>(staging) + moved, target + moved, chunk);
    if (map_memfd_over(target + moved, chunk, fd, off_t(moved)) == MAP_FAILED)
      break;  // ENOMEM for a new VMA: the kernel leaves the old mapping
    moved += chunk;
  }
  munmap(staging, len);
  if (moved < len) {
    // Keep what moved (it is correct memory, on a memfd no MR uses: the next
    // ibv_reg_mr there may move it again) and share nothing.
    madvise(target, moved, MADV_DONTFORK);
    close(fd);
    return {};
  }
  madvise(target, len, MADV_DONTFORK);  // see fork_prepare
  const uint64_t id = g_next_id++;
  g_leases[id] = Lease{start, end, fd, uint64_t(st.st_ino), 1};
  return {id, fd, {start, len}};
}

void release_pages(uint64_t id) {
  if (!id) return;
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_leases.find(id);
  if (it == g_leases.end() || --it->second.refs) return;
  const Lease l = it->second;
  g_leases.erase(it);
  // The last MR is gone: the pages become private anonymous memory again,
  // so that they behave as before (MADV_DONTNEED zero-fills them, which
  // allocators such as jemalloc count on; fork() copies them lazily).
  for (const Vma& v : read_maps()) {
    if (!v.ours || v.ino != l.ino || v.end <= l.start || v.start >= l.end) continue;
    const uint64_t start = std::max(v.start, l.start), end = std::min(v.end, l.end);
    const size_t len = size_t(end - start);
    // The pages are read through a mapping of the memfd of its own, not at
    // their address: the program may have freed the buffer before
    // deregistering it (UCX's registration cache does), and a read of freed
    // memory there is one to ASan (heap-use-after-free in ucx_perftest
    // under tests/sanitize.sh), though the pages are still the program's.
    void* view = mmap(nullptr, len, PROT_READ, MAP_SHARED, l.fd, off_t(v.offset + (start - v.start)));
    if (view == MAP_FAILED) continue;  // stays on the memfd: still correct, just shared
    void* copy = private_copy(static_cast<const uint8_t*>(view), len, v.prot());
    munmap(view, len);
    if (!copy) continue;
    if (move_mapping_to(copy, len, reinterpret_cast<void*>(start)) == MAP_FAILED) munmap(copy, len);
  }
  close(l.fd);
}

}  // namespace uroce::provider
