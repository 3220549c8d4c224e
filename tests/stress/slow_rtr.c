// LD_PRELOAD shim for the stress scripts: delays a process's first
// ibv_modify_qp to RTR by $UROCE_SLOW_RTR_MS (default 1000) milliseconds, as
// if the process waited that long for a CPU on a loaded machine. With
// ibv_xsrq_pingpong's client under it, the server's first SEND reaches a QP
// still in INIT, which drops it without an answer (IBA 10.3.1): the server's
// QP must keep retrying (kFirstContactGraceNs, device/params.h), not end in
// RETRY_EXC_ERR, on which the example hangs.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <infiniband/verbs.h>
#include <stdlib.h>
#include <unistd.h>

int ibv_modify_qp(struct ibv_qp* qp, struct ibv_qp_attr* attr, int mask) {
  static int delayed;
  static int (*real)(struct ibv_qp*, struct ibv_qp_attr*, int);
  if (!real) real = (int (*)(struct ibv_qp*, struct ibv_qp_attr*, int))dlsym(RTLD_NEXT, "ibv_modify_qp");
  if (!real) return -1;
  if (!delayed && (mask & IBV_QP_STATE) && attr->qp_state == IBV_QPS_RTR) {
    delayed = 1;
    const char* ms = getenv("UROCE_SLOW_RTR_MS");
    usleep((useconds_t)(ms ? atoi(ms) : 1000) * 1000);
  }
  return real(qp, attr, mask);
}
