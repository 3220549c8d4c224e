// Verbs semantics: UD multicast (ibv_attach_mcast / ibv_detach_mcast). A
// datagram sent to a multicast GID with the multicast QPN reaches every UD QP
// of the engine attached to the group, each checking its own Q_Key (IBA 10.5;
// the kernel's ib_attach_mcast for the argument rules, rxe for the limits).
#include "tests/integration/verbs_fixture.h"

namespace vt {
namespace {

constexpr uint32_t kMulticastQpn = 0xffffff;
constexpr uint32_t kQkey = 0x01234567;  // rdma_cm's RDMA_UDP_QKEY

// ::ffff:a.b.c.d, the RoCEv2 GID of an IPv4 group (cma_iboe_set_mgid).
ibv_gid ipv4_group(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  ibv_gid g{};
  g.raw[10] = g.raw[11] = 0xff;
  g.raw[12] = a, g.raw[13] = b, g.raw[14] = c, g.raw[15] = d;
  return g;
}

ibv_gid ipv6_group() {
  ibv_gid g{};
  g.raw[0] = 0xff, g.raw[1] = 0x0e;  // ff0e::5eed
  g.raw[14] = 0x5e, g.raw[15] = 0xed;
  return g;
}

class Multicast : public VerbsTest {
 protected:
  ibv_qp* ud_qp(ibv_cq* cq) {
    ibv_qp* q = make_qp(IBV_QPT_UD, cq, cq);
    if (!q) return nullptr;
    ConnectOpts o;
    o.qkey = kQkey;
    connect_qp(q, 0, o);
    return q;
  }
  ibv_ah* group_ah(const ibv_gid& group) {
    ibv_ah_attr av = loopback_av();
    av.grh.dgid = group;
    // RoCEv2 sends IPv6 from an IPv6 GID: the link-local one (index 1).
    if (group.raw[0] == 0xff) av.grh.sgid_index = 1;
    return make_ah(&av);
  }
  static int send_to(ibv_qp* qp, ibv_ah* ah, ibv_sge* s, uint64_t wr_id, uint32_t qkey = kQkey) {
    return post_ud(qp, wr_id, s, ah, kMulticastQpn, qkey);
  }
};

TEST_F(Multicast, DeviceAdvertisesGroups) {
  ibv_device_attr a{};
  ASSERT_EQ(ibv_query_device(ctx_, &a), 0);
  EXPECT_EQ(a.max_mcast_grp, 8192);
  EXPECT_EQ(a.max_mcast_qp_attach, 56);
  EXPECT_EQ(a.max_total_mcast_qp_attach, 8192 * 56);
}

TEST_F(Multicast, AttachTakesMulticastGidsOnUdQpsOnly) {
  ibv_cq* cq = make_cq();
  ibv_qp* ud = ud_qp(cq);
  ASSERT_NE(ud, nullptr);
  const ibv_gid group = ipv4_group(239, 1, 2, 3);
  EXPECT_EQ(ibv_attach_mcast(ud, &gid_, 0), EINVAL) << "the device's own unicast GID";
  ibv_gid not_quite = ipv4_group(192, 0, 2, 1);
  EXPECT_EQ(ibv_attach_mcast(ud, &not_quite, 0), EINVAL) << "an IPv4-mapped unicast address";
  ibv_qp* rc = make_qp(IBV_QPT_RC, cq, cq);
  ASSERT_NE(rc, nullptr);
  EXPECT_EQ(ibv_attach_mcast(rc, &group, 0), EINVAL) << "RC QPs join no group";
  EXPECT_EQ(ibv_detach_mcast(ud, &group, 0), EINVAL) << "not attached";
  EXPECT_EQ(ibv_attach_mcast(ud, &group, 0), 0);
  EXPECT_EQ(ibv_attach_mcast(ud, &group, 0), 0) << "a second attach is no error";
  EXPECT_EQ(ibv_detach_mcast(ud, &group, 0), 0);
  EXPECT_EQ(ibv_detach_mcast(ud, &group, 0), EINVAL) << "attached once, detached once";
  const ibv_gid group6 = ipv6_group();
  EXPECT_EQ(ibv_attach_mcast(ud, &group6, 0), 0);
  EXPECT_EQ(ibv_detach_mcast(ud, &group6, 0), 0);
}

TEST_F(Multicast, AGroupHoldsAtMostMaxMcastQpAttachQps) {
  ibv_device_attr a{};
  ASSERT_EQ(ibv_query_device(ctx_, &a), 0);
  ibv_cq* cq = make_cq();
  const ibv_gid group = ipv4_group(239, 9, 9, 9);
  for (int i = 0; i < a.max_mcast_qp_attach; ++i) {
    ibv_qp* q = make_qp(IBV_QPT_UD, cq, cq);
    ASSERT_NE(q, nullptr) << i;
    ASSERT_EQ(ibv_attach_mcast(q, &group, 0), 0) << i;
  }
  ibv_qp* one_more = make_qp(IBV_QPT_UD, cq, cq);
  ASSERT_NE(one_more, nullptr);
  EXPECT_EQ(ibv_attach_mcast(one_more, &group, 0), ENOMEM);
  const ibv_gid other = ipv4_group(239, 9, 9, 10);
  EXPECT_EQ(ibv_attach_mcast(one_more, &other, 0), 0) << "another group has room";
}

// Three receivers, two of them in the group: each member gets its own copy
// with the GRH and the sender's QPN; the third nothing; after a detach, the
// member that left nothing either.
TEST_F(Multicast, DatagramReachesEveryAttachedQpAndNoOther) {
  for (const ibv_gid& group : {ipv4_group(239, 1, 2, 3), ipv6_group()}) {
    SCOPED_TRACE(group.raw[0] == 0xff ? "IPv6 group" : "IPv4 group");
    ibv_cq* scq = make_cq();
    ibv_cq *cq1 = make_cq(), *cq2 = make_cq(), *cq3 = make_cq();
    ibv_qp* sender = ud_qp(scq);
    ibv_qp *m1 = ud_qp(cq1), *m2 = ud_qp(cq2), *outsider = ud_qp(cq3);
    ASSERT_TRUE(sender && m1 && m2 && outsider);
    ASSERT_EQ(ibv_attach_mcast(m1, &group, 0), 0);
    ASSERT_EQ(ibv_attach_mcast(m2, &group, 0), 0);
    ibv_ah* ah = group_ah(group);
    ASSERT_NE(ah, nullptr) << std::strerror(errno);
    ibv_mr* mr = reg_buffer(16384, IBV_ACCESS_LOCAL_WRITE, 0);
    ASSERT_NE(mr, nullptr);
    auto* base = static_cast<uint8_t*>(mr->addr);
    for (int i = 0; i < 200; ++i) base[i] = uint8_t(i * 7);
    ASSERT_EQ(post_recv_mr(m1, 1, mr, 4096, 40 + 256), 0);
    ASSERT_EQ(post_recv_mr(m2, 2, mr, 8192, 40 + 256), 0);
    ASSERT_EQ(post_recv_mr(outsider, 3, mr, 12288, 40 + 256), 0);
    ibv_sge s = sge_of(mr, 0, 200);
    ASSERT_EQ(send_to(sender, ah, &s, 10), 0);
    ibv_wc wc;
    VT_POLL_ONE(scq, &wc);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
    for (auto [cq, offset] : {std::pair{cq1, 4096}, std::pair{cq2, 8192}}) {
      VT_POLL_ONE(cq, &wc);
      ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
      EXPECT_EQ(wc.byte_len, 240u);
      EXPECT_TRUE(wc.wc_flags & IBV_WC_GRH);
      EXPECT_EQ(wc.src_qp, sender->qp_num);
      EXPECT_EQ(std::memcmp(base + offset + 40, base, 200), 0);
    }
    EXPECT_TRUE(drain_for(cq3, 100).empty()) << "the outsider is in no group";
    // A wrong Q_Key: every member drops it (IBA 10.2.5).
    ASSERT_EQ(post_recv_mr(m1, 4, mr, 4096, 40 + 256), 0);
    ASSERT_EQ(send_to(sender, ah, &s, 11, kQkey + 1), 0);
    VT_POLL_ONE(scq, &wc);
    EXPECT_TRUE(drain_for(cq1, 100).empty()) << "Q_Key mismatch";
    // m2 leaves: the next datagram reaches m1 only (its receive 4 waits).
    ASSERT_EQ(ibv_detach_mcast(m2, &group, 0), 0);
    ASSERT_EQ(post_recv_mr(m2, 5, mr, 8192, 40 + 256), 0);
    ASSERT_EQ(send_to(sender, ah, &s, 12), 0);
    VT_POLL_ONE(scq, &wc);
    VT_POLL_ONE(cq1, &wc);
    EXPECT_EQ(wc.wr_id, 4u);
    EXPECT_TRUE(drain_for(cq2, 100).empty()) << "m2 left the group";
  }
}

// A destroyed QP leaves its groups (uverbs detaches on destroy): the group
// goes on serving its other member.
TEST_F(Multicast, DestroyedQpLeavesItsGroups) {
  const ibv_gid group = ipv4_group(239, 4, 5, 6);
  ibv_cq* scq = make_cq();
  ibv_cq* cq = make_cq();
  ibv_qp* sender = ud_qp(scq);
  ibv_qp* stays = ud_qp(cq);
  ibv_cq* gone_cq = make_cq();
  ibv_qp* gone = make_qp(IBV_QPT_UD, gone_cq, gone_cq);
  ASSERT_TRUE(sender && stays && gone);
  ASSERT_EQ(ibv_attach_mcast(stays, &group, 0), 0);
  ASSERT_EQ(ibv_attach_mcast(gone, &group, 0), 0);
  forget(gone);
  ASSERT_EQ(ibv_destroy_qp(gone), 0);
  ibv_ah* ah = group_ah(group);
  ASSERT_NE(ah, nullptr);
  ibv_mr* mr = reg_buffer(8192, IBV_ACCESS_LOCAL_WRITE, 0);
  ASSERT_EQ(post_recv_mr(stays, 1, mr, 4096, 40 + 256), 0);
  ibv_sge s = sge_of(mr, 0, 64);
  ASSERT_EQ(send_to(sender, ah, &s, 10), 0);
  ibv_wc wc;
  VT_POLL_ONE(scq, &wc);
  VT_POLL_ONE(cq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
}

}  // namespace
}  // namespace vt
