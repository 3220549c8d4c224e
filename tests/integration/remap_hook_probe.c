/* Does ibv_reg_mr / ibv_dereg_mr look, to memory-event hooks, like the
 * program unmapping its buffer? UCX's UCM patches libc's mmap and mremap and
 * drops cached registrations of a range mapped over; uroce's provider moves
 * registered pages onto a memfd and back (verbs_provider/shared_pages.cc)
 * with the bytes unchanged, so it must not go through them.
 *
 * This program stands in for such a hook: it defines mmap and mremap itself
 * (exported, so the provider's calls reach them first), counts the calls that
 * map over the watched buffer, and passes everything on to the kernel. It
 * registers and deregisters a 1 MiB buffer on the first device, checks that
 * the MR really sat on shared pages (/proc/self/maps names the memfd), and
 * exits 0 when no call was seen. Run it under `uroce run`. */
#define _GNU_SOURCE
#include <infiniband/verbs.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

static uintptr_t watch_start, watch_end;
static int hooked_calls;

static void note(void* addr, size_t len) {
  const uintptr_t a = (uintptr_t)addr;
  if (a < watch_end && a + len > watch_start) ++hooked_calls;
}

void* mmap(void* addr, size_t len, int prot, int flags, int fd, off_t off) {
  if (flags & MAP_FIXED) note(addr, len);
  return (void*)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
}

void* mremap(void* old, size_t old_len, size_t new_len, int flags, ...) {
  void* to = NULL;
  if (flags & MREMAP_FIXED) {
    va_list ap;
    va_start(ap, flags);
    to = va_arg(ap, void*);
    va_end(ap);
    note(to, new_len);
  }
  return (void*)syscall(SYS_mremap, old, old_len, new_len, flags, to);
}

static int on_memfd(uintptr_t start, uintptr_t end) {
  FILE* f = fopen("/proc/self/maps", "r");
  char line[512];
  int found = 0;
  while (f && fgets(line, sizeof(line), f)) {
    unsigned long s, e;
    if (sscanf(line, "%lx-%lx", &s, &e) == 2 && s <= start && end <= e && strstr(line, "memfd:uroce-mr"))
      found = 1;
  }
  if (f) fclose(f);
  return found;
}

int main(void) {
  const size_t len = 1 << 20;
  int n = 0;
  struct ibv_device** list = ibv_get_device_list(&n);
  if (!list || n == 0) {
    fprintf(stderr, "remap_hook_probe: no device\n");
    return 2;
  }
  struct ibv_context* ctx = ibv_open_device(list[0]);
  struct ibv_pd* pd = ctx ? ibv_alloc_pd(ctx) : NULL;
  uint8_t* buf = (uint8_t*)syscall(SYS_mmap, NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (!pd || buf == MAP_FAILED) {
    fprintf(stderr, "remap_hook_probe: no context, PD or buffer\n");
    return 2;
  }
  memset(buf, 0x5a, len);
  watch_start = (uintptr_t)buf;
  watch_end = watch_start + len;
  struct ibv_mr* mr = ibv_reg_mr(pd, buf, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (!mr) {
    fprintf(stderr, "remap_hook_probe: ibv_reg_mr failed\n");
    return 2;
  }
  const int shared = on_memfd(watch_start, watch_end);
  const int after_reg = hooked_calls;
  ibv_dereg_mr(mr);
  const int intact = buf[0] == 0x5a && buf[len - 1] == 0x5a;
  printf("remap_hook_probe: on shared pages %s; hooked mmap/mremap over the buffer: %d at ibv_reg_mr, %d at ibv_dereg_mr; bytes %s\n",
         shared ? "yes" : "no", after_reg, hooked_calls - after_reg, intact ? "intact" : "CHANGED");
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  ibv_free_device_list(list);
  if (!shared) return 3;  /* nothing was moved: the probe proved nothing */
  return hooked_calls == 0 && intact ? 0 : 1;
}
