/*
 * rdma_write_solution.c: exercise 1 of the lab (docs/lab/README.md)
 * completed. One process, one device, two RC QPs connected to each other
 * through the port's loopback: QP a writes 4096 bytes of `src` straight into
 * `dst` with one RDMA WRITE, and the program checks every byte.
 *
 *   gcc -O2 -Wall -o rdma_write_solution rdma_write_solution.c -libverbs
 *   uroce run -- ./rdma_write_solution
 */
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SIZE 4096

static void die(const char *what) {
  fprintf(stderr, "rdma_write: %s failed\n", what);
  exit(1);
}

/* RESET -> INIT -> RTR -> RTS, the peer being QP `dest_qpn` behind GID `dgid`
 * (RoCE: every address is a GID, so the route is global). */
static void connect_qp(struct ibv_qp *qp, uint32_t dest_qpn, uint32_t my_psn, uint32_t peer_psn,
                       const union ibv_gid *dgid, enum ibv_mtu mtu) {
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
                          .qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    die("modify QP to INIT");
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = mtu;
  a.dest_qp_num = dest_qpn;
  a.rq_psn = peer_psn; /* the first PSN this QP expects from its peer */
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  a.ah_attr.port_num = 1;
  a.ah_attr.grh.dgid = *dgid;
  a.ah_attr.grh.sgid_index = 0;
  a.ah_attr.grh.hop_limit = 64;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    die("modify QP to RTR");
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = my_psn; /* the first PSN this QP sends */
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 1;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
    die("modify QP to RTS");
}

int main(void) {
  struct ibv_device **list = ibv_get_device_list(NULL);
  struct ibv_context *ctx = NULL;
  for (int i = 0; list && list[i] && !ctx; ++i)
    if (strcmp(ibv_get_device_name(list[i]), "uroce0") == 0) ctx = ibv_open_device(list[i]);
  if (!ctx) die("opening uroce0 (is it run with `uroce run --`?)");
  ibv_free_device_list(list);

  struct ibv_port_attr port;
  union ibv_gid gid;
  if (ibv_query_port(ctx, 1, &port) || ibv_query_gid(ctx, 1, 0, &gid)) die("querying port 1");
  struct ibv_pd *pd = ibv_alloc_pd(ctx);
  struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
  if (!pd || !cq) die("creating the PD and CQ");

  static char src[SIZE], dst[SIZE];
  for (int i = 0; i < SIZE; ++i) src[i] = (char)(i * 7 + 1);
  memset(dst, 0, SIZE);
  /* src is only read by our own device; dst is written by the peer QP. */
  struct ibv_mr *src_mr = ibv_reg_mr(pd, src, SIZE, 0);
  /* TODO 1 (solved): what may the peer do to dst? */
  struct ibv_mr *dst_mr = ibv_reg_mr(pd, dst, SIZE, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (!src_mr || !dst_mr) die("registering the buffers");

  struct ibv_qp_init_attr init = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
                                  .cap = {.max_send_wr = 4, .max_recv_wr = 4,
                                          .max_send_sge = 1, .max_recv_sge = 1}};
  struct ibv_qp *a = ibv_create_qp(pd, &init), *b = ibv_create_qp(pd, &init);
  if (!a || !b) die("creating the QPs");
  connect_qp(a, b->qp_num, 100, 200, &gid, port.active_mtu);
  connect_qp(b, a->qp_num, 200, 100, &gid, port.active_mtu);
  printf("QP a: QPN 0x%06x sends from PSN 100; QP b: QPN 0x%06x\n", a->qp_num, b->qp_num);

  struct ibv_sge sge = {.addr = (uintptr_t)src, .length = SIZE, .lkey = src_mr->lkey};
  struct ibv_send_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1,
                           .send_flags = IBV_SEND_SIGNALED}, *bad;
  /* TODO 2 (solved): an RDMA WRITE into dst, named by its address and rkey. */
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.wr.rdma.remote_addr = (uintptr_t)dst;
  wr.wr.rdma.rkey = dst_mr->rkey;
  if (ibv_post_send(a, &wr, &bad)) die("ibv_post_send");

  struct ibv_wc wc = {.status = IBV_WC_GENERAL_ERR};
  int n = 0;
  /* TODO 3 (solved): poll the CQ until it gives one completion (5 s at most). */
  for (time_t end = time(NULL) + 5; n == 0 && time(NULL) < end;) n = ibv_poll_cq(cq, 1, &wc);
  if (n != 1) {
    fprintf(stderr, "rdma_write: no completion polled\n");
    return 1;
  }
  if (wc.status != IBV_WC_SUCCESS) {
    fprintf(stderr, "rdma_write: completion status: %s\n", ibv_wc_status_str(wc.status));
    return 1;
  }
  if (memcmp(src, dst, SIZE) != 0) {
    fprintf(stderr, "rdma_write: dst differs from src\n");
    return 1;
  }
  printf("RDMA WRITE of %d bytes: data checked, ok\n", SIZE);

  ibv_destroy_qp(a);
  ibv_destroy_qp(b);
  ibv_dereg_mr(src_mr);
  ibv_dereg_mr(dst_mr);
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  return 0;
}
