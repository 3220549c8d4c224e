// Verbs semantics: UD (address handles, the GRH, Q_Keys, ibv_wr_* with UD
// addresses), UC, and the address without a GRH every RoCE device refuses.
#include <vector>

#include "tests/integration/verbs_fixture.h"

namespace vt {
namespace {

// UD: two UD QPs of this process; every receive starts with a 40-byte GRH.
class Ud : public VerbsTest {};

TEST_F(Ud, SendWithGrhAndReplyThroughAhFromWc) {
  ConnectOpts o;
  o.qkey = 0x11111111;
  Pair p = make_pair(IBV_QPT_UD, o);
  ASSERT_FALSE(HasFailure());
  ibv_ah_attr av = loopback_av();
  ibv_ah* ah = make_ah(&av);
  ASSERT_NE(ah, nullptr) << std::strerror(errno);
  ibv_mr* mr = reg_buffer(8192, IBV_ACCESS_LOCAL_WRITE, 0);
  ASSERT_NE(mr, nullptr);
  auto* base = static_cast<uint8_t*>(mr->addr);
  for (int i = 0; i < 100; ++i) base[i] = uint8_t(200 + i);

  ASSERT_EQ(post_recv_mr(p.b.qp, 1, mr, 4096, 40 + 256), 0);
  ibv_sge s = sge_of(mr, 0, 100);
  // A wrong Q_Key is dropped silently by the receiver (the sender still succeeds).
  ASSERT_EQ(post_ud(p.a.qp, 10, &s, ah, p.b.qp->qp_num, 0x2222), 0);
  ibv_wc wc;
  VT_POLL_ONE(p.a.cq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_TRUE(drain_for(p.b.cq, 100).empty()) << "Q_Key mismatch must be dropped";

  ASSERT_EQ(post_ud(p.a.qp, 11, &s, ah, p.b.qp->qp_num, o.qkey), 0);
  VT_POLL_ONE(p.a.cq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  ibv_wc rwc;
  VT_POLL_ONE(p.b.cq, &rwc);
  ASSERT_EQ(rwc.status, IBV_WC_SUCCESS) << describe(rwc);
  EXPECT_EQ(rwc.wr_id, 1u);
  EXPECT_EQ(rwc.opcode, IBV_WC_RECV);
  EXPECT_EQ(rwc.byte_len, 140u) << "40-byte GRH plus the payload";
  EXPECT_TRUE(rwc.wc_flags & IBV_WC_GRH);
  EXPECT_EQ(rwc.src_qp, p.a.qp->qp_num);
  uint8_t* grh = base + 4096;
  EXPECT_EQ(std::memcmp(grh + 40, base, 100), 0);
  // RoCEv2 over IPv4: the IPv4 header fills the GRH's last 20 bytes.
  ASSERT_TRUE(gid_.raw[10] == 0xff && gid_.raw[11] == 0xff) << "GID 0 is IPv4-mapped";
  EXPECT_EQ(grh[20] >> 4, 4) << "IPv4 version nibble";
  EXPECT_EQ(std::memcmp(grh + 20 + 12, gid_.raw + 12, 4), 0) << "source address";
  EXPECT_EQ(std::memcmp(grh + 20 + 16, gid_.raw + 12, 4), 0) << "destination address";

  // Reply to the sender with an AH built from the completion.
  ibv_ah* reply = ibv_create_ah_from_wc(pd_, &rwc, reinterpret_cast<ibv_grh*>(grh), 1);
  ASSERT_NE(reply, nullptr) << std::strerror(errno);
  defer([reply] { EXPECT_EQ(ibv_destroy_ah(reply), 0); });
  ASSERT_EQ(post_recv_mr(p.a.qp, 2, mr, 6144, 40 + 256), 0);
  ibv_sge s2 = sge_of(mr, 200, 33);
  ASSERT_EQ(post_ud(p.b.qp, 12, &s2, reply, rwc.src_qp, o.qkey), 0);
  VT_POLL_ONE(p.b.cq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  std::vector<ibv_wc> got = poll_n(p.a.cq, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].wr_id, 2u);
  EXPECT_EQ(got[0].status, IBV_WC_SUCCESS) << describe(got[0]);
  EXPECT_EQ(got[0].byte_len, 73u);
  EXPECT_EQ(got[0].src_qp, p.b.qp->qp_num);
}

// What UCX's ud_verbs needs from a UD receive (UCX_UD_VERBS_ETH_DGID_CHECK,
// on by default): wc.sl says the frame was IPv4 (mlx5's L3 header type 2,
// RoCEv2 A17.4.5.1), so it takes the destination GID from the last 4 bytes of
// the GRH area; and that IPv4 header is the one from the wire, checksum
// included (rdma-core's ibv_init_ah_from_wc trusts an IPv4 header by it).
TEST_F(Ud, ReceiveCompletionSaysIpv4AndGrhAreaHasTheWireHeader) {
  ConnectOpts o;
  o.qkey = 0x1234;
  Pair p = make_pair(IBV_QPT_UD, o);
  ASSERT_FALSE(HasFailure());
  ibv_ah_attr av = loopback_av();
  ibv_ah* ah = make_ah(&av);
  ASSERT_NE(ah, nullptr) << std::strerror(errno);
  ibv_mr* mr = reg_buffer(8192, IBV_ACCESS_LOCAL_WRITE, 0);
  ASSERT_NE(mr, nullptr);
  auto* base = static_cast<uint8_t*>(mr->addr);
  ASSERT_EQ(post_recv_mr(p.b.qp, 1, mr, 4096, 40 + 256), 0);
  ibv_sge s = sge_of(mr, 0, 64);
  ASSERT_EQ(post_ud(p.a.qp, 10, &s, ah, p.b.qp->qp_num, o.qkey), 0);
  ibv_wc wc;
  VT_POLL_ONE(p.a.cq, &wc);
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  VT_POLL_ONE(p.b.cq, &wc);
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(wc.sl & 7, 2) << "mlx5's L3 header type: 2 is IPv4";
  const uint8_t* ip = base + 4096 + 20;
  EXPECT_EQ(std::memcmp(base + 4096 + 36, gid_.raw + 12, 4), 0) << "destination GID, 4 bytes";
  uint32_t sum = 0;  // RFC 1071: a header with its checksum sums to 0xffff
  for (int i = 0; i < 20; i += 2) sum += uint32_t(ip[i]) << 8 | ip[i + 1];
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  EXPECT_EQ(sum, 0xffffu) << "IPv4 header checksum";
  EXPECT_NE(ip[10] | ip[11], 0) << "checksum field filled in";
}

TEST_F(Ud, AddressHandleWithoutGrhIsRejectedOnRoce) {
  ibv_ah_attr av = loopback_av();
  av.is_global = 0;
  errno = 0;
  ibv_ah* ah = ibv_create_ah(pd_, &av);
  EXPECT_EQ(ah, nullptr);
  EXPECT_EQ(errno, EINVAL);
  if (ah) ibv_destroy_ah(ah);
}

// The same address in ibv_modify_qp (RC and UC to RTR): EINVAL, returned and
// left in errno as the refused command leaves it with a kernel device
// (qperf without -cm1 prints "failed to modify QP to RTR: Invalid argument").
class RoceAddress : public VerbsTest {};

TEST_F(RoceAddress, ConnectedQpWithoutGrhIsRejectedWithErrno) {
  ibv_cq* cq = make_cq();
  ASSERT_NE(cq, nullptr);
  for (ibv_qp_type type : {IBV_QPT_RC, IBV_QPT_UC}) {
    ibv_qp* qp = make_qp(type, cq, cq);
    ASSERT_NE(qp, nullptr);
    to_init(qp, IBV_ACCESS_REMOTE_WRITE);
    ASSERT_FALSE(HasFatalFailure());
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = qp->qp_num;
    a.ah_attr = loopback_av();
    a.ah_attr.is_global = 0;
    int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
    if (type == IBV_QPT_RC) mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    errno = 0;
    EXPECT_EQ(ibv_modify_qp(qp, &a, mask), EINVAL) << "QP type " << type;
    EXPECT_EQ(errno, EINVAL) << "QP type " << type;
    EXPECT_EQ(qp_state(qp), IBV_QPS_INIT) << "QP type " << type;
    // A success leaves errno alone, as a system call that succeeds does.
    a.ah_attr.is_global = 1;
    errno = EBADMSG;
    EXPECT_EQ(ibv_modify_qp(qp, &a, mask), 0) << "QP type " << type;
    EXPECT_EQ(errno, EBADMSG) << "QP type " << type;
  }
}

// RDMA and atomic opcodes on a UD QP are posted and complete with
// LOC_QP_OP_ERR, the QP in error (mlx5 and rxe), not EINVAL at post time.
TEST_F(Ud, RdmaAndAtomicOpcodesCompleteWithLocQpOpErr) {
  ibv_mr* mr = reg_buffer(256, kRw, 1);
  ASSERT_NE(mr, nullptr);
  for (ibv_wr_opcode op : {IBV_WR_RDMA_WRITE, IBV_WR_RDMA_READ, IBV_WR_ATOMIC_FETCH_AND_ADD}) {
    ConnectOpts o;
    o.qkey = 0x11111111;
    Pair p = make_pair(IBV_QPT_UD, o);
    ASSERT_FALSE(HasFailure());
    ibv_sge s = sge_of(mr, 0, 8);
    ASSERT_EQ(post_send(p.a.qp, 7, op, &s, 1, IBV_SEND_SIGNALED, addr_of(mr, 128), mr->rkey), 0)
        << "opcode " << op;
    ibv_wc wc;
    VT_POLL_ONE(p.a.cq, &wc);
    EXPECT_EQ(wc.wr_id, 7u);
    EXPECT_EQ(wc.status, IBV_WC_LOC_QP_OP_ERR) << "opcode " << op << ": " << describe(wc);
    EXPECT_EQ(qp_state(p.a.qp), IBV_QPS_ERR) << "opcode " << op;
  }
}

class Uc : public VerbsTest {};

// UC has no READ and no atomics: ibv_post_send takes them and the WQE
// completes with IBV_WC_LOC_QP_OP_ERR, the QP in error, as on mlx5 and rxe
// (verbs_provider/post.cc postable_ops).
TEST_F(Uc, ReadAndAtomicOpcodesCompleteWithLocQpOpErr) {
  ibv_mr* mr = reg_buffer(256, kRw, 1);
  ASSERT_NE(mr, nullptr);
  for (ibv_wr_opcode op : {IBV_WR_RDMA_READ, IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_ATOMIC_CMP_AND_SWP}) {
    Pair p = make_pair(IBV_QPT_UC);
    ASSERT_FALSE(HasFailure());
    ibv_sge s = sge_of(mr, 0, 8);
    ASSERT_EQ(post_send(p.a.qp, 9, op, &s, 1, IBV_SEND_SIGNALED, addr_of(mr, 128), mr->rkey), 0)
        << "opcode " << op;
    ibv_wc wc;
    VT_POLL_ONE(p.a.cq, &wc);
    EXPECT_EQ(wc.wr_id, 9u);
    EXPECT_EQ(wc.status, IBV_WC_LOC_QP_OP_ERR) << "opcode " << op << ": " << describe(wc);
    EXPECT_EQ(qp_state(p.a.qp), IBV_QPS_ERR) << "opcode " << op;
    EXPECT_TRUE(drain_for(p.b.cq, 50).empty()) << "nothing reached the peer";
  }
  EXPECT_EQ(static_cast<uint8_t*>(mr->addr)[128], 1) << "no READ or atomic ran";
}

TEST_F(Uc, SendAndWrite) {
  Pair p = make_pair(IBV_QPT_UC);
  ASSERT_FALSE(HasFailure());
  ibv_mr* src = reg_buffer(3000, IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* dst = reg_buffer(8192, kRw, 0);
  ASSERT_TRUE(src && dst);
  auto* s = static_cast<uint8_t*>(src->addr);
  for (int i = 0; i < 3000; ++i) s[i] = uint8_t(i * 13);
  ASSERT_EQ(post_recv_mr(p.b.qp, 1, dst, 0, 4096), 0);
  ibv_sge sg = sge_of(src, 0, 3000);
  ASSERT_EQ(post_send(p.a.qp, 2, IBV_WR_SEND, &sg, 1), 0);
  ibv_wc wc;
  VT_POLL_ONE(p.b.cq, &wc);
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(wc.byte_len, 3000u);
  EXPECT_EQ(std::memcmp(dst->addr, src->addr, 3000), 0);
  VT_POLL_ONE(p.a.cq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);

  ASSERT_EQ(post_send(p.a.qp, 3, IBV_WR_RDMA_WRITE, &sg, 1, IBV_SEND_SIGNALED, addr_of(dst, 4096),
                      dst->rkey),
            0);
  VT_POLL_ONE(p.a.cq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  // UC completes at send time; give the loopback a moment to deliver. The
  // engine writes while this thread reads: compare a copy, never the live
  // bytes (memcmp may find a byte still unwritten, then read it again,
  // written by now, for its result, and return 0 for memory that differs:
  // 1 run in 50 failed so under taskset -c 0).
  std::vector<uint8_t> seen(3000);
  const auto end = deadline_after(kWaitSeconds);
  for (;;) {
    std::memcpy(seen.data(), static_cast<uint8_t*>(dst->addr) + 4096, seen.size());
    if (std::memcmp(seen.data(), s, seen.size()) == 0 || Clock::now() >= end) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(std::memcmp(seen.data(), s, seen.size()), 0);
}

TEST_F(Ud, GrhIntoItsOwnSgeAndInlineSend) {
  ConnectOpts o;
  Pair p = make_pair(IBV_QPT_UD, o);
  ASSERT_FALSE(HasFailure());
  ibv_ah_attr av = loopback_av();
  ibv_ah* ah = make_ah(&av);
  ASSERT_NE(ah, nullptr);
  ibv_mr* grh = reg_buffer(40, IBV_ACCESS_LOCAL_WRITE, 0);
  ibv_mr* data = reg_buffer(512, IBV_ACCESS_LOCAL_WRITE, 0);
  ASSERT_TRUE(grh && data);
  ibv_sge rs[2] = {sge_of(grh, 0, 40), sge_of(data, 0, 512)};
  ASSERT_EQ(post_recv(p.b.qp, 1, rs, 2), 0);
  char msg[] = "ud inline message";
  ibv_sge s{uint64_t(uintptr_t(msg)), sizeof(msg), 0};
  ibv_send_wr wr{};
  wr.wr_id = 2;
  wr.opcode = IBV_WR_SEND_WITH_IMM;
  wr.imm_data = htonl(31337);
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
  wr.wr.ud.ah = ah;
  wr.wr.ud.remote_qpn = p.b.qp->qp_num;
  wr.wr.ud.remote_qkey = o.qkey;
  ibv_send_wr* bad;
  ASSERT_EQ(ibv_post_send(p.a.qp, &wr, &bad), 0);
  ibv_wc wc;
  VT_POLL_ONE(p.b.cq, &wc);
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(wc.byte_len, 40 + sizeof(msg));
  EXPECT_TRUE(wc.wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(ntohl(wc.imm_data), 31337u);
  EXPECT_STREQ(static_cast<char*>(data->addr), msg);
  EXPECT_EQ(static_cast<uint8_t*>(grh->addr)[20] >> 4, 4);
  VT_POLL_ONE(p.a.cq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
}

TEST_F(Ud, WrApiWithUdAddress) {
  ConnectOpts o;
  ibv_cq* cqa = make_cq();
  ibv_cq* cqb = make_cq();
  ASSERT_TRUE(cqa && cqb);
  ibv_qp_init_attr_ex ix =
      qp_ex_attr(IBV_QPT_UD, cqa, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM, {16, 16, 1, 1, 64});
  ibv_qp* qa = make_qp_ex(&ix);
  ibv_qp* qb = make_qp(IBV_QPT_UD, cqb, cqb);
  ASSERT_TRUE(qa && qb) << std::strerror(errno);
  connect_qp(qa, 0, o);
  connect_qp(qb, 0, o);
  ASSERT_FALSE(HasFailure());
  ibv_ah_attr av = loopback_av();
  ibv_ah* ah = make_ah(&av);
  ASSERT_NE(ah, nullptr);
  ibv_mr* mr = reg_buffer(4096, IBV_ACCESS_LOCAL_WRITE, 0x21);
  ASSERT_NE(mr, nullptr);
  ASSERT_EQ(post_recv_mr(qb, 1, mr, 1024, 1024), 0);
  ibv_qp_ex* x = ibv_qp_to_qp_ex(qa);
  ibv_wr_start(x);
  x->wr_id = 5;
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send_imm(x, htonl(5150));
  ibv_wr_set_ud_addr(x, ah, qb->qp_num, o.qkey);
  ibv_wr_set_sge(x, mr->lkey, addr_of(mr), 64);
  ASSERT_EQ(ibv_wr_complete(x), 0);
  ibv_wc wc;
  VT_POLL_ONE(cqa, &wc);
  EXPECT_EQ(wc.wr_id, 5u);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  VT_POLL_ONE(cqb, &wc);
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(wc.byte_len, 40u + 64u);
  EXPECT_EQ(ntohl(wc.imm_data), 5150u);
  EXPECT_EQ(wc.src_qp, qa->qp_num);
}

}  // namespace
}  // namespace vt
