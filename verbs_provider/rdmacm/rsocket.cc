// rsockets (<rdma/rsocket.h>) are not served: every call fails with ENOSYS,
// so a program that tries them (rstream, riostream) stops cleanly instead
// of finding the symbols missing.
#include <rdma/rsocket.h>

#include <cerrno>

#include "verbs_provider/rdmacm/rdmacm.h"

namespace {
template <typename R = int>
R unsupported() {
  errno = ENOSYS;
  return R(-1);
}
}  // namespace

RDMACM_EXPORT int rsocket(int, int, int) { return unsupported(); }
RDMACM_EXPORT int rbind(int, const sockaddr*, socklen_t) { return unsupported(); }
RDMACM_EXPORT int rlisten(int, int) { return unsupported(); }
RDMACM_EXPORT int raccept(int, sockaddr*, socklen_t*) { return unsupported(); }
RDMACM_EXPORT int rconnect(int, const sockaddr*, socklen_t) { return unsupported(); }
RDMACM_EXPORT int rshutdown(int, int) { return unsupported(); }
RDMACM_EXPORT int rclose(int) { return unsupported(); }
RDMACM_EXPORT ssize_t rrecv(int, void*, size_t, int) { return unsupported<ssize_t>(); }
RDMACM_EXPORT ssize_t rrecvfrom(int, void*, size_t, int, sockaddr*, socklen_t*) { return unsupported<ssize_t>(); }
RDMACM_EXPORT ssize_t rrecvmsg(int, msghdr*, int) { return unsupported<ssize_t>(); }
RDMACM_EXPORT ssize_t rsend(int, const void*, size_t, int) { return unsupported<ssize_t>(); }
RDMACM_EXPORT ssize_t rsendto(int, const void*, size_t, int, const sockaddr*, socklen_t) {
  return unsupported<ssize_t>();
}
RDMACM_EXPORT ssize_t rsendmsg(int, const msghdr*, int) { return unsupported<ssize_t>(); }
RDMACM_EXPORT ssize_t rread(int, void*, size_t) { return unsupported<ssize_t>(); }
RDMACM_EXPORT ssize_t rreadv(int, const iovec*, int) { return unsupported<ssize_t>(); }
RDMACM_EXPORT ssize_t rwrite(int, const void*, size_t) { return unsupported<ssize_t>(); }
RDMACM_EXPORT ssize_t rwritev(int, const iovec*, int) { return unsupported<ssize_t>(); }
RDMACM_EXPORT int rpoll(pollfd*, nfds_t, int) { return unsupported(); }
RDMACM_EXPORT int rselect(int, fd_set*, fd_set*, fd_set*, timeval*) { return unsupported(); }
RDMACM_EXPORT int rgetpeername(int, sockaddr*, socklen_t*) { return unsupported(); }
RDMACM_EXPORT int rgetsockname(int, sockaddr*, socklen_t*) { return unsupported(); }
RDMACM_EXPORT int rsetsockopt(int, int, int, const void*, socklen_t) { return unsupported(); }
RDMACM_EXPORT int rgetsockopt(int, int, int, void*, socklen_t*) { return unsupported(); }
RDMACM_EXPORT int rfcntl(int, int, ...) { return unsupported(); }
RDMACM_EXPORT off_t riomap(int, void*, size_t, int, int, off_t) { return unsupported<off_t>(); }
RDMACM_EXPORT int riounmap(int, void*, size_t) { return unsupported(); }
RDMACM_EXPORT size_t riowrite(int, const void*, size_t, off_t, int) { return unsupported<size_t>(); }
