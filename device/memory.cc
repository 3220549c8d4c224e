#include "device/memory.h"

#include <sys/uio.h>

#include <cerrno>
#include <algorithm>
#include <cstring>

namespace uroce::device {

namespace {

// process_vm_* may transfer less than asked (a fault part way, or IOV_MAX
// splits); continue from where it stopped.
template <typename Fn>
bool transfer_all(Fn fn, const iovec* local, size_t nlocal, const iovec* remote, size_t nremote,
                  size_t total) {
  if (total == 0) return true;
  ssize_t n = fn(local, nlocal, remote, nremote);
  if (n == ssize_t(total)) return true;
  if (n <= 0) return false;
  // Partial: redo element-wise from byte n (rare path).
  size_t done = size_t(n);
  size_t li = 0, loff = 0, ri = 0, roff = 0;
  auto advance = [](const iovec* v, size_t cnt, size_t& i, size_t& off, size_t bytes) {
    while (bytes && i < cnt) {
      size_t left = v[i].iov_len - off;
      if (bytes < left) { off += bytes; return; }
      bytes -= left; ++i; off = 0;
    }
  };
  advance(local, nlocal, li, loff, done);
  advance(remote, nremote, ri, roff, done);
  while (done < total) {
    if (li >= nlocal || ri >= nremote) return false;
    size_t chunk = std::min(local[li].iov_len - loff, remote[ri].iov_len - roff);
    iovec l{static_cast<char*>(local[li].iov_base) + loff, chunk};
    iovec r{static_cast<char*>(remote[ri].iov_base) + roff, chunk};
    ssize_t m = fn(&l, 1, &r, 1);
    if (m <= 0) return false;
    done += size_t(m);
    advance(local, nlocal, li, loff, size_t(m));
    advance(remote, nremote, ri, roff, size_t(m));
  }
  return true;
}

}  // namespace

bool ProcessMemory::readv(const iovec* local, size_t nlocal, const iovec* remote, size_t nremote,
                          size_t total) const {
  return transfer_all(
      [this](const iovec* l, size_t nl, const iovec* r, size_t nr) {
        return process_vm_readv(pid_, l, nl, r, nr, 0);
      },
      local, nlocal, remote, nremote, total);
}

bool ProcessMemory::writev(const iovec* local, size_t nlocal, const iovec* remote, size_t nremote,
                           size_t total) const {
  return transfer_all(
      [this](const iovec* l, size_t nl, const iovec* r, size_t nr) {
        return process_vm_writev(pid_, l, nl, r, nr, 0);
      },
      local, nlocal, remote, nremote, total);
}

bool ProcessMemory::read(uint64_t addr, void* dst, size_t len) const {
  iovec l{dst, len};
  iovec r{reinterpret_cast<void*>(addr), len};
  return readv(&l, 1, &r, 1, len);
}

bool ProcessMemory::write(uint64_t addr, const void* src, size_t len) const {
  iovec l{const_cast<void*>(src), len};
  iovec r{reinterpret_cast<void*>(addr), len};
  return writev(&l, 1, &r, 1, len);
}

}  // namespace uroce::device
