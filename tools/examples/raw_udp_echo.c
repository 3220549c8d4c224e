/*
 * raw_udp_echo: a raw packet QP answering the UDP datagrams of one flow.
 *
 *   uroce run -- raw_udp_echo DEVICE IPV4 PORT [COUNT]
 *
 * One flow rule (IPv4 destination IPV4, UDP destination PORT) steers the
 * datagrams to the QP; each is answered with the same payload, addresses and
 * ports swapped, and IBV_SEND_IP_CSUM asking the device for the IPv4 and UDP
 * checksums. It exits after COUNT answers (default: never). An example of
 * verbs raw Ethernet: a plain UDP socket on another host talks to it.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { kSlots = 64, kSlot = 2048, kEth = 14, kIp = 20, kUdp = 8 };

struct rule {
  struct ibv_flow_attr attr;
  struct ibv_flow_spec_ipv4 ip;
  struct ibv_flow_spec_tcp_udp udp;
};

static int post_recv(struct ibv_qp* qp, struct ibv_mr* mr, uint64_t slot) {
  struct ibv_sge sge = {(uintptr_t)mr->addr + slot * kSlot, kSlot, mr->lkey};
  struct ibv_recv_wr wr = {.wr_id = slot, .sg_list = &sge, .num_sge = 1}, *bad;
  return ibv_post_recv(qp, &wr, &bad);
}

/* The answer to the frame in `in` (Ethernet + IPv4 without options + UDP),
 * written to `out`; its length, or 0 if `in` is not such a frame. */
static size_t answer(const uint8_t* in, size_t len, uint8_t* out) {
  if (len < kEth + kIp + kUdp || in[12] != 0x08 || in[13] != 0x00 || in[14] != 0x45) return 0;
  memcpy(out, in, len);
  memcpy(out, in + 6, 6); /* MACs swapped */
  memcpy(out + 6, in, 6);
  memcpy(out + kEth + 12, in + kEth + 16, 4); /* IPs swapped */
  memcpy(out + kEth + 16, in + kEth + 12, 4);
  out[kEth + 8] = 64;                        /* TTL */
  memcpy(out + kEth + kIp, in + kEth + kIp + 2, 2); /* ports swapped */
  memcpy(out + kEth + kIp + 2, in + kEth + kIp, 2);
  out[kEth + 10] = out[kEth + 11] = 0;             /* checksums: the device's */
  out[kEth + kIp + 6] = out[kEth + kIp + 7] = 0;
  return len;
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s DEVICE IPV4 PORT [COUNT]\n", argv[0]);
    return 2;
  }
  const long count = argc > 4 ? atol(argv[4]) : -1;
  struct in_addr ip;
  if (inet_pton(AF_INET, argv[2], &ip) != 1) {
    fprintf(stderr, "raw_udp_echo: bad IPv4 address %s\n", argv[2]);
    return 2;
  }
  int n = 0;
  struct ibv_device** list = ibv_get_device_list(&n);
  struct ibv_context* ctx = NULL;
  for (int i = 0; list && i < n && !ctx; ++i)
    if (strcmp(ibv_get_device_name(list[i]), argv[1]) == 0) ctx = ibv_open_device(list[i]);
  if (list) ibv_free_device_list(list);
  if (!ctx) {
    fprintf(stderr, "raw_udp_echo: no device %s\n", argv[1]);
    return 1;
  }
  struct ibv_pd* pd = ibv_alloc_pd(ctx);
  struct ibv_cq* cq = ibv_create_cq(ctx, 2 * kSlots, NULL, NULL, 0);
  uint8_t* buf = calloc(2 * kSlots, kSlot); /* receive slots, then send slots */
  struct ibv_mr* mr = pd && buf ? ibv_reg_mr(pd, buf, 2 * kSlots * kSlot, IBV_ACCESS_LOCAL_WRITE) : NULL;
  struct ibv_qp_init_attr init = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RAW_PACKET,
                                  .cap = {kSlots, kSlots, 1, 1, 0}};
  struct ibv_qp* qp = cq && mr ? ibv_create_qp(pd, &init) : NULL;
  if (!qp) {
    perror("raw_udp_echo: raw packet QP (needs CAP_NET_RAW)");
    return 1;
  }
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1};
  int err = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PORT);
  a.qp_state = IBV_QPS_RTR;
  if (!err) err = ibv_modify_qp(qp, &a, IBV_QP_STATE);
  a.qp_state = IBV_QPS_RTS;
  if (!err) err = ibv_modify_qp(qp, &a, IBV_QP_STATE);
  for (uint64_t s = 0; !err && s < kSlots; ++s) err = post_recv(qp, mr, s);
  struct rule r = {
      .attr = {.type = IBV_FLOW_ATTR_NORMAL, .size = sizeof(r), .num_of_specs = 2, .port = 1},
      .ip = {.type = IBV_FLOW_SPEC_IPV4, .size = sizeof(r.ip),
             .val.dst_ip = ip.s_addr, .mask.dst_ip = 0xffffffff},
      .udp = {.type = IBV_FLOW_SPEC_UDP, .size = sizeof(r.udp),
              .val.dst_port = htons((uint16_t)atoi(argv[3])), .mask.dst_port = 0xffff}};
  struct ibv_flow* flow = err ? NULL : ibv_create_flow(qp, &r.attr);
  if (!flow) {
    fprintf(stderr, "raw_udp_echo: set-up failed: %s\n", strerror(err ? err : errno));
    return 1;
  }
  printf("raw_udp_echo: answering UDP to %s:%s on %s\n", argv[2], argv[3], argv[1]);
  fflush(stdout);
  long answered = 0;
  uint64_t next_send = 0, sends_out = 0;
  while (count < 0 || answered < count) {
    struct ibv_wc wc[16];
    const int got = ibv_poll_cq(cq, 16, wc);
    if (got < 0) return 1;
    for (int i = 0; i < got; ++i) {
      if (wc[i].status != IBV_WC_SUCCESS) {
        fprintf(stderr, "raw_udp_echo: %s\n", ibv_wc_status_str(wc[i].status));
        return 1;
      }
      if (wc[i].opcode == IBV_WC_SEND) {
        --sends_out;
        continue;
      }
      const uint64_t slot = wc[i].wr_id;
      uint8_t* out = buf + (kSlots + next_send % kSlots) * kSlot;
      const size_t len = sends_out < kSlots ? answer(buf + slot * kSlot, wc[i].byte_len, out) : 0;
      if (len) {
        struct ibv_sge sge = {(uintptr_t)out, (uint32_t)len, mr->lkey};
        struct ibv_send_wr wr = {.wr_id = next_send++, .sg_list = &sge, .num_sge = 1,
                                 .opcode = IBV_WR_SEND,
                                 .send_flags = IBV_SEND_SIGNALED | IBV_SEND_IP_CSUM},
                           *bad;
        if (ibv_post_send(qp, &wr, &bad)) return 1;
        ++sends_out;
        ++answered;
      }
      if (post_recv(qp, mr, slot)) return 1;
    }
  }
  printf("raw_udp_echo: answered %ld\n", answered);
  ibv_destroy_flow(flow);
  ibv_destroy_qp(qp);
  ibv_dereg_mr(mr);
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  free(buf);
  return 0;
}
