// Receive work queues, indirection tables and RSS QPs, as man
// ibv_create_wq(3), rdma-core (libibverbs/cmd.c, providers/mlx5/verbs.c,
// tests/test_rss_traffic.py) and the kernel (drivers/infiniband/hw/mlx5/qp.c)
// have them, through a real engine: a raw packet QP
// sends frames, a flow on an RSS QP takes them, and the Toeplitz hash picks
// the WQ; the four WQ flags (CVLAN stripping, scatter FCS, delay drop, PCI
// write end padding) shape what is placed.
#include <zlib.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "verbs_fixture.h"

namespace vt {
namespace {

constexpr uint8_t kDstMac[6] = {0x01, 0x50, 0x56, 0x19, 0x20, 0xa7};  // rdma-core's RSS test MAC
constexpr uint8_t kSrcMac[6] = {0x02, 0x66, 0x77, 0x88, 0x99, 0xaa};
constexpr uint32_t kBuf = 2048;
// Microsoft's verification key (and any 40 bytes would do).
constexpr uint8_t kKey[40] = {0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3,
                              0x8f, 0xb0, 0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3,
                              0x80, 0x30, 0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa};

// The Toeplitz hash written out from the Microsoft RSS specification, to
// predict the engine (which uses DPDK's rte_softrss).
uint32_t toeplitz(const uint8_t* in, size_t len) {
  uint32_t result = 0;
  for (size_t bit = 0; bit < len * 8; ++bit) {
    if (!(in[bit / 8] >> (7 - bit % 8) & 1)) continue;
    uint32_t window = 0;
    for (size_t k = 0; k < 32; ++k) window = window << 1 | (kKey[(bit + k) / 8] >> (7 - (bit + k) % 8) & 1);
    result ^= window;
  }
  return result;
}

// Ethernet [+ 802.1Q] + IPv4 + UDP, `payload` bytes.
std::vector<uint8_t> udp_frame(const uint8_t src_ip[4], uint16_t sport, uint16_t dport, size_t payload,
                               int vlan_tci = -1) {
  std::vector<uint8_t> f(kDstMac, kDstMac + 6);
  f.insert(f.end(), kSrcMac, kSrcMac + 6);
  if (vlan_tci >= 0) f.insert(f.end(), {0x81, 0x00, uint8_t(vlan_tci >> 8), uint8_t(vlan_tci)});
  const uint16_t udp_len = uint16_t(8 + payload);
  f.insert(f.end(), {0x08, 0x00, 0x45, 0x00, uint8_t((20 + udp_len) >> 8), uint8_t(20 + udp_len), 0, 1, 0x40, 0,
                     64, 17, 0, 0, src_ip[0], src_ip[1], src_ip[2], src_ip[3], 192, 168, 1, 1});
  f.insert(f.end(), {uint8_t(sport >> 8), uint8_t(sport), uint8_t(dport >> 8), uint8_t(dport),
                     uint8_t(udp_len >> 8), uint8_t(udp_len), 0, 0});
  for (size_t i = 0; i < payload; ++i) f.push_back(uint8_t(i * 13 + src_ip[3]));
  return f;
}

class WorkQueue : public VerbsTest {
 protected:
  void SetUp() override {
    VerbsTest::SetUp();
    if (geteuid() != 0) GTEST_SKIP() << "raw packet QPs need CAP_NET_RAW (run as root, as the suite does)";
    tx_mr_ = reg_buffer(kBuf, IBV_ACCESS_LOCAL_WRITE);
    tx_cq_ = make_cq();
    tx_ = make_qp(IBV_QPT_RAW_PACKET, tx_cq_, tx_cq_);
    ASSERT_NE(tx_, nullptr);
    raw_to_rts(tx_);
  }

  ibv_wq* wq(ibv_cq* cq, uint32_t flags = 0, uint32_t max_wr = 64, bool ready = true) {
    ibv_wq_init_attr a{};
    a.wq_type = IBV_WQT_RQ;
    a.max_wr = max_wr;
    a.max_sge = 2;
    a.pd = pd_;
    a.cq = cq;
    if (flags) {
      a.comp_mask = IBV_WQ_INIT_ATTR_FLAGS;
      a.create_flags = flags;
    }
    ibv_wq* w = ibv_create_wq(ctx_, &a);
    if (!w) return nullptr;
    // Cleanups run in reverse: flows, RSS QPs, tables, then WQs.
    defer([w] { EXPECT_EQ(ibv_destroy_wq(w), 0); });
    if (ready) {
      EXPECT_EQ(set_state(w, IBV_WQS_RDY), 0);
    }
    return w;
  }
  static int set_state(ibv_wq* w, ibv_wq_state s) {
    ibv_wq_attr a{};
    a.attr_mask = IBV_WQ_ATTR_STATE;
    a.wq_state = s;
    return ibv_modify_wq(w, &a);
  }
  ibv_rwq_ind_table* table(std::vector<ibv_wq*> wqs, uint32_t log) {
    ibv_rwq_ind_table_init_attr a{};
    a.log_ind_tbl_size = log;
    a.ind_tbl = wqs.data();
    ibv_rwq_ind_table* t = ibv_create_rwq_ind_table(ctx_, &a);
    if (t) defer([t] { EXPECT_EQ(ibv_destroy_rwq_ind_table(t), 0); });
    return t;
  }
  ibv_qp_init_attr_ex rss_attr(ibv_rwq_ind_table* t, uint64_t fields) {
    ibv_qp_init_attr_ex a{};
    a.qp_type = IBV_QPT_RAW_PACKET;
    a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH |
                  IBV_QP_INIT_ATTR_CREATE_FLAGS;
    a.pd = pd_;
    a.rwq_ind_tbl = t;
    a.rx_hash_conf.rx_hash_function = IBV_RX_HASH_FUNC_TOEPLITZ;
    a.rx_hash_conf.rx_hash_key_len = sizeof(kKey);
    a.rx_hash_conf.rx_hash_key = const_cast<uint8_t*>(kKey);
    a.rx_hash_conf.rx_hash_fields_mask = fields;
    return a;
  }
  // An RSS QP over `wqs` taking every frame to kDstMac.
  ibv_qp* rss_qp(std::vector<ibv_wq*> wqs, uint32_t log, uint64_t fields) {
    ibv_rwq_ind_table* t = table(std::move(wqs), log);
    if (!t) return nullptr;
    ibv_qp_init_attr_ex a = rss_attr(t, fields);
    ibv_qp* qp = rss_qp_on(&a);
    if (qp) flow_to(qp);
    return qp;
  }
  // A rule giving `qp` every frame to kDstMac.
  void flow_to(ibv_qp* qp) { flow_to_mac(qp, kDstMac); }
  ibv_qp* rss_qp_on(ibv_qp_init_attr_ex* a) {
    ibv_qp* qp = ibv_create_qp_ex(ctx_, a);
    if (qp) defer([qp] { EXPECT_EQ(ibv_destroy_qp(qp), 0); });
    return qp;
  }
  // Receives wr_id base+i on `mr` slots base+i.
  static void post(ibv_wq* w, ibv_mr* mr, int n, uint64_t base = 0, uint32_t len = kBuf) {
    for (int i = 0; i < n; ++i) {
      ibv_sge sge = sge_of(mr, (base + i) * kBuf, len);
      ibv_recv_wr wr{}, *bad = nullptr;
      wr.wr_id = base + i;
      wr.sg_list = &sge;
      wr.num_sge = 1;
      ASSERT_EQ(ibv_post_wq_recv(w, &wr, &bad), 0);
    }
  }
  void send(const std::vector<uint8_t>& frame) {
    std::memcpy(tx_mr_->addr, frame.data(), frame.size());
    ibv_sge sge = sge_of(tx_mr_, 0, uint32_t(frame.size()));
    ASSERT_EQ(post_send(tx_, 1, IBV_WR_SEND, &sge, 1, IBV_SEND_SIGNALED), 0);
    ibv_wc wc;
    VT_POLL_ONE(tx_cq_, &wc);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  }
  static const uint8_t* slot(ibv_mr* mr, uint64_t i) { return static_cast<const uint8_t*>(mr->addr) + i * kBuf; }
  // The WQ's object in `uroce stats --json` (the text form is cut at a
  // control message's size), whitespace removed: {"delay_drop_expired":N,...}.
  std::string wq_report(const ibv_wq* w) {
    std::string out, flat;
    EXPECT_EQ(run_command("timeout 10 " + uroce_command() + " stats --json --name uroce0", &out), 0) << out;
    for (char ch : out)
      if (ch != ' ' && ch != '\n') flat += ch;
    const size_t end = flat.find("\"wqn\":" + std::to_string(w->wq_num) + "}");
    if (end == std::string::npos) return "(no WQ " + std::to_string(w->wq_num) + ")";
    const size_t start = flat.rfind('{', end);
    return flat.substr(start, end - start);
  }

  ibv_mr* tx_mr_ = nullptr;
  ibv_cq* tx_cq_ = nullptr;
  ibv_qp* tx_ = nullptr;
};

TEST_F(WorkQueue, DeviceAdvertisesWqsRssAndTheFourFlags) {
  ibv_device_attr_ex a{};
  ASSERT_EQ(ibv_query_device_ex(ctx_, nullptr, &a), 0);
  EXPECT_GT(a.max_wq_type_rq, 0u);
  EXPECT_EQ(a.rss_caps.supported_qpts, 1u << IBV_QPT_RAW_PACKET);
  EXPECT_GE(a.rss_caps.max_rwq_indirection_table_size, 8u);
  EXPECT_GT(a.rss_caps.max_rwq_indirection_tables, 0u);
  EXPECT_EQ(a.rss_caps.rx_hash_function, IBV_RX_HASH_FUNC_TOEPLITZ);
  EXPECT_TRUE(a.rss_caps.rx_hash_fields_mask & IBV_RX_HASH_SRC_IPV4);
  const uint32_t caps = IBV_RAW_PACKET_CAP_CVLAN_STRIPPING | IBV_RAW_PACKET_CAP_SCATTER_FCS |
                        IBV_RAW_PACKET_CAP_DELAY_DROP;
  EXPECT_EQ(a.raw_packet_caps & caps, caps);
  EXPECT_TRUE(a.device_cap_flags_ex & IBV_DEVICE_RAW_SCATTER_FCS);
  EXPECT_TRUE(a.device_cap_flags_ex & IBV_DEVICE_PCI_WRITE_END_PADDING);
}

TEST_F(WorkQueue, CreateChecksAsMlx5) {
  ibv_cq* cq = make_cq();
  ibv_wq_init_attr a{};
  a.wq_type = IBV_WQT_RQ;
  a.max_wr = 100;
  a.max_sge = 3;
  a.pd = pd_;
  a.cq = cq;
  a.comp_mask = IBV_WQ_INIT_ATTR_RESERVED;
  EXPECT_EQ(ibv_create_wq(ctx_, &a), nullptr);
  EXPECT_EQ(errno, EINVAL);
  a.comp_mask = IBV_WQ_INIT_ATTR_FLAGS;
  a.create_flags = IBV_WQ_FLAGS_RESERVED;
  EXPECT_EQ(ibv_create_wq(ctx_, &a), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  a.comp_mask = 0;
  a.max_wr = 0;
  EXPECT_EQ(ibv_create_wq(ctx_, &a), nullptr);
  EXPECT_EQ(errno, EINVAL);
  a.max_wr = 100;
  a.wq_type = ibv_wq_type(1);
  EXPECT_EQ(ibv_create_wq(ctx_, &a), nullptr);
  EXPECT_EQ(errno, EINVAL);
  a.wq_type = IBV_WQT_RQ;
  a.create_flags = IBV_WQ_FLAGS_RESERVED;  // ignored without IBV_WQ_INIT_ATTR_FLAGS
  ibv_wq* w = ibv_create_wq(ctx_, &a);
  ASSERT_NE(w, nullptr) << std::strerror(errno);
  EXPECT_EQ(a.max_wr, 100u);  // mlx5 echoes the request
  EXPECT_EQ(a.max_sge, 3u);
  EXPECT_EQ(w->state, IBV_WQS_RESET);
  EXPECT_NE(w->wq_num, 0u);
  EXPECT_EQ(w->cq, cq);
  // The WQ holds its CQ and PD (kernel drivers/infiniband/core/verbs.c).
  EXPECT_EQ(ibv_destroy_cq(cq), EBUSY);
  EXPECT_EQ(ibv_destroy_wq(w), 0);
}

TEST_F(WorkQueue, ModifyStatesAndErrFlushes) {
  ibv_cq* cq = make_cq();
  ibv_mr* mr = reg_buffer(16 * kBuf, IBV_ACCESS_LOCAL_WRITE);
  ibv_wq* w = wq(cq, 0, 64, false);
  ASSERT_NE(w, nullptr);
  ibv_wq_attr a{};
  EXPECT_EQ(ibv_modify_wq(w, &a), EINVAL);  // empty mask
  a.attr_mask = IBV_WQ_ATTR_RESERVED;
  EXPECT_EQ(ibv_modify_wq(w, &a), EINVAL);
  a.attr_mask = IBV_WQ_ATTR_FLAGS;
  a.flags_mask = IBV_WQ_FLAGS_PCI_WRITE_END_PADDING;  // fixed at creation
  EXPECT_EQ(ibv_modify_wq(w, &a), EOPNOTSUPP);
  a.flags_mask = IBV_WQ_FLAGS_RESERVED;
  EXPECT_EQ(ibv_modify_wq(w, &a), EOPNOTSUPP);
  EXPECT_EQ(set_state(w, IBV_WQS_ERR), EINVAL);  // RESET -> ERR is no transition mlx5 uses
  a = {};
  a.attr_mask = IBV_WQ_ATTR_STATE | IBV_WQ_ATTR_CURR_STATE;
  a.wq_state = IBV_WQS_RDY;
  a.curr_wq_state = IBV_WQS_RDY;  // wrong: it is in RESET
  EXPECT_NE(ibv_modify_wq(w, &a), 0);
  // Receives posted in RESET are discarded by RESET -> RDY (mlx5_modify_wq).
  post(w, mr, 4);
  a.curr_wq_state = IBV_WQS_RESET;
  ASSERT_EQ(ibv_modify_wq(w, &a), 0);
  EXPECT_EQ(w->state, IBV_WQS_RDY);
  post(w, mr, 3, 10);
  ASSERT_EQ(set_state(w, IBV_WQS_ERR), 0);
  post(w, mr, 1, 20);  // after ERR: flushed as well
  std::vector<ibv_wc> wcs = drain_for(cq, 200);
  ASSERT_EQ(wcs.size(), 4u);
  uint64_t want[] = {10, 11, 12, 20};
  for (size_t i = 0; i < wcs.size(); ++i) {
    EXPECT_EQ(wcs[i].wr_id, want[i]);
    EXPECT_EQ(wcs[i].status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(wcs[i].qp_num, w->wq_num);
  }
  EXPECT_EQ(set_state(w, IBV_WQS_RDY), EINVAL);  // ERR -> RDY: through RESET only
  ASSERT_EQ(set_state(w, IBV_WQS_RESET), 0);
  ASSERT_EQ(set_state(w, IBV_WQS_RDY), 0);
  // Ready again: it receives.
  ibv_qp* qp = rss_qp({w}, 0, 0);
  ASSERT_NE(qp, nullptr) << std::strerror(errno);
  post(w, mr, 1, 5);
  const uint8_t ip[4] = {10, 0, 0, 1};
  const auto f = udp_frame(ip, 1, 2, 50);
  send(f);
  ibv_wc wc;
  VT_POLL_ONE(cq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(wc.wr_id, 5u);
  EXPECT_EQ(wc.byte_len, f.size());
  EXPECT_EQ(std::memcmp(slot(mr, 5), f.data(), f.size()), 0);
}

TEST_F(WorkQueue, DestroyIsBusyWhileReferenced) {
  ibv_cq* cq = make_cq();
  ibv_wq_init_attr wa{};
  wa.wq_type = IBV_WQT_RQ;
  wa.max_wr = 8;
  wa.max_sge = 1;
  wa.pd = pd_;
  wa.cq = cq;
  ibv_wq* w = ibv_create_wq(ctx_, &wa);
  ASSERT_NE(w, nullptr) << std::strerror(errno);
  ibv_rwq_ind_table_init_attr ta{};
  ta.log_ind_tbl_size = 1;
  ibv_wq* two[2] = {w, w};  // the same WQ may appear twice
  ta.ind_tbl = two;
  ibv_rwq_ind_table* t = ibv_create_rwq_ind_table(ctx_, &ta);
  ASSERT_NE(t, nullptr) << std::strerror(errno);
  EXPECT_EQ(ibv_destroy_wq(w), EBUSY);
  ibv_qp_init_attr_ex qa = rss_attr(t, IBV_RX_HASH_SRC_IPV4 | IBV_RX_HASH_DST_IPV4);
  ibv_qp* qp = ibv_create_qp_ex(ctx_, &qa);
  ASSERT_NE(qp, nullptr) << std::strerror(errno);
  EXPECT_EQ(ibv_destroy_rwq_ind_table(t), EBUSY);
  EXPECT_EQ(ibv_destroy_wq(w), EBUSY);
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
  EXPECT_EQ(ibv_destroy_wq(w), EBUSY);
  EXPECT_EQ(ibv_destroy_rwq_ind_table(t), 0);
  EXPECT_EQ(ibv_destroy_wq(w), 0);
  // A table larger than rss_caps allows is EINVAL.
  ibv_device_attr_ex da{};
  ASSERT_EQ(ibv_query_device_ex(ctx_, nullptr, &da), 0);
  ta.log_ind_tbl_size = 31 - __builtin_clz(da.rss_caps.max_rwq_indirection_table_size) + 1;
  EXPECT_EQ(ibv_create_rwq_ind_table(ctx_, &ta), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(WorkQueue, RssQpChecksAsMlx5) {
  ibv_cq* cq = make_cq();
  ibv_wq* w[2] = {wq(cq), wq(cq)};
  ASSERT_TRUE(w[0] && w[1]);
  ibv_rwq_ind_table* t = table({w[0], w[1]}, 1);
  ASSERT_NE(t, nullptr);
  const uint64_t ip4 = IBV_RX_HASH_SRC_IPV4 | IBV_RX_HASH_DST_IPV4;
  struct Case {
    const char* what;
    void (*tweak)(ibv_qp_init_attr_ex&, ibv_cq*);
    int err;
  } cases[] = {
      {"key length 39", [](ibv_qp_init_attr_ex& a, ibv_cq*) { a.rx_hash_conf.rx_hash_key_len = 39; }, EINVAL},
      {"not Toeplitz", [](ibv_qp_init_attr_ex& a, ibv_cq*) { a.rx_hash_conf.rx_hash_function = 2; }, EOPNOTSUPP},
      {"IPv4 and IPv6",
       [](ibv_qp_init_attr_ex& a, ibv_cq*) { a.rx_hash_conf.rx_hash_fields_mask |= IBV_RX_HASH_SRC_IPV6; }, EINVAL},
      {"TCP and UDP",
       [](ibv_qp_init_attr_ex& a, ibv_cq*) {
         a.rx_hash_conf.rx_hash_fields_mask |= IBV_RX_HASH_SRC_PORT_TCP | IBV_RX_HASH_DST_PORT_UDP;
       },
       EINVAL},
      {"no fields over 2 WQs", [](ibv_qp_init_attr_ex& a, ibv_cq*) { a.rx_hash_conf.rx_hash_fields_mask = 0; },
       EINVAL},
      {"receive caps", [](ibv_qp_init_attr_ex& a, ibv_cq*) { a.cap.max_recv_wr = 1; }, EINVAL},
      {"receive CQ", [](ibv_qp_init_attr_ex& a, ibv_cq* c) { a.recv_cq = c; }, EINVAL},
      {"a create flag", [](ibv_qp_init_attr_ex& a, ibv_cq*) { a.create_flags = IBV_QP_CREATE_SCATTER_FCS; },
       EINVAL},
      {"a send side", [](ibv_qp_init_attr_ex& a, ibv_cq*) { a.cap.max_send_wr = 1; }, EINVAL},
  };
  for (const Case& c : cases) {
    ibv_qp_init_attr_ex a = rss_attr(t, ip4);
    c.tweak(a, cq);
    errno = 0;
    EXPECT_EQ(ibv_create_qp_ex(ctx_, &a), nullptr) << c.what;
    EXPECT_EQ(errno, c.err) << c.what;
  }
  ibv_qp_init_attr_ex a = rss_attr(t, ip4);
  ibv_qp* qp = rss_qp_on(&a);
  ASSERT_NE(qp, nullptr) << std::strerror(errno);
  EXPECT_EQ(qp->qp_num, 0u);  // a TIR on mlx5
  ibv_qp_attr qa{};
  qa.qp_state = IBV_QPS_INIT;
  qa.port_num = 1;
  EXPECT_NE(ibv_modify_qp(qp, &qa, IBV_QP_STATE | IBV_QP_PORT), 0);
  ibv_qp_init_attr init{};
  EXPECT_NE(ibv_query_qp(qp, &qa, IBV_QP_STATE, &init), 0);
  ibv_recv_wr wr{}, *bad = nullptr;
  EXPECT_NE(ibv_post_recv(qp, &wr, &bad), 0);  // receives go on the WQs
}

TEST_F(WorkQueue, RssSpreads64FlowsOver8WqsAsToeplitzSays) {
  constexpr int kWqs = 8, kFlows = 64;
  ibv_cq* cq = make_cq(1024);
  ibv_mr* mr = reg_buffer(size_t(kWqs) * kFlows * kBuf, IBV_ACCESS_LOCAL_WRITE);
  std::vector<ibv_wq*> wqs;
  for (int i = 0; i < kWqs; ++i) {
    wqs.push_back(wq(cq, 0, 128));
    ASSERT_NE(wqs.back(), nullptr) << std::strerror(errno);
    post(wqs.back(), mr, kFlows, uint64_t(i) * kFlows);
  }
  ibv_qp* qp = rss_qp(wqs, 3, IBV_RX_HASH_SRC_IPV4 | IBV_RX_HASH_DST_IPV4 | IBV_RX_HASH_SRC_PORT_UDP |
                                  IBV_RX_HASH_DST_PORT_UDP);
  ASSERT_NE(qp, nullptr) << std::strerror(errno);
  std::vector<int> per_wq(kWqs);
  std::vector<int> expected(kFlows);
  for (int i = 0; i < kFlows; ++i) {
    const uint8_t ip[4] = {uint8_t(i), uint8_t(i + 1), uint8_t(i + 2), uint8_t(i + 3)};
    const uint16_t sport = uint16_t(1000 + 7 * i), dport = 4791 + 1;
    const uint8_t in[12] = {ip[0], ip[1], ip[2], ip[3], 192, 168, 1, 1, uint8_t(sport >> 8), uint8_t(sport),
                            uint8_t(dport >> 8), uint8_t(dport)};
    expected[i] = int(toeplitz(in, sizeof(in)) & (kWqs - 1));
    const auto f = udp_frame(ip, sport, dport, 32);
    send(f);
    ibv_wc wc;
    VT_POLL_ONE(cq, &wc);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
    EXPECT_EQ(wc.qp_num, wqs[expected[i]]->wq_num) << "flow " << i;
    EXPECT_EQ(wc.wr_id / kFlows, uint64_t(expected[i])) << "flow " << i;
    EXPECT_EQ(wc.byte_len, f.size());
    EXPECT_EQ(std::memcmp(slot(mr, wc.wr_id), f.data(), f.size()), 0);
    ++per_wq[expected[i]];
  }
  for (int i = 0; i < kWqs; ++i) EXPECT_GT(per_wq[i], 0) << "64 flows leave WQ " << i << " empty";
  EXPECT_TRUE(drain_for(cq, 50).empty());
}

TEST_F(WorkQueue, CvlanStrippingRemovesTheTagAndReportsTheTci) {
  ibv_cq_init_attr_ex ca{};
  ca.cqe = 64;
  ca.wc_flags = uint64_t(IBV_WC_STANDARD_FLAGS) | IBV_WC_EX_WITH_CVLAN;
  ibv_cq_ex* cqx = make_cq_ex(&ca);
  ASSERT_NE(cqx, nullptr) << std::strerror(errno);
  ibv_cq* cq = ibv_cq_ex_to_cq(cqx);
  ibv_mr* mr = reg_buffer(8 * kBuf, IBV_ACCESS_LOCAL_WRITE);
  ibv_wq* w = wq(cq, IBV_WQ_FLAGS_CVLAN_STRIPPING);
  ASSERT_NE(w, nullptr) << std::strerror(errno);
  ASSERT_NE(rss_qp({w}, 0, 0), nullptr) << std::strerror(errno);
  post(w, mr, 8);
  const uint8_t ip[4] = {10, 1, 2, 3};
  const uint16_t tci = 0xa00b;  // PCP 5, VID 11
  auto receive = [&](uint64_t* wr_id, uint32_t* len, uint16_t* cvlan) {
    ibv_poll_cq_attr pa{};
    int rc;
    for (auto until = deadline_after(kWaitSeconds); (rc = ibv_start_poll(cqx, &pa)) == ENOENT && Clock::now() < until;)
      std::this_thread::yield();
    ASSERT_EQ(rc, 0);
    EXPECT_EQ(cqx->status, IBV_WC_SUCCESS);
    *wr_id = cqx->wr_id;
    *len = ibv_wc_read_byte_len(cqx);
    *cvlan = ibv_wc_read_cvlan(cqx);
    ibv_end_poll(cqx);
  };
  const auto tagged = udp_frame(ip, 1, 2, 40, tci), plain = udp_frame(ip, 1, 2, 40);
  uint64_t id;
  uint32_t len;
  uint16_t cvlan;
  send(tagged);
  receive(&id, &len, &cvlan);
  EXPECT_EQ(len, plain.size());  // four bytes fewer
  EXPECT_EQ(cvlan, tci);
  EXPECT_EQ(std::memcmp(slot(mr, id), plain.data(), plain.size()), 0) << "the frame as if untagged";
  send(plain);
  receive(&id, &len, &cvlan);
  EXPECT_EQ(len, plain.size());
  EXPECT_EQ(cvlan, 0);
  // Turned off by ibv_modify_wq: the tag stays, no TCI.
  ibv_wq_attr a{};
  a.attr_mask = IBV_WQ_ATTR_FLAGS;
  a.flags_mask = IBV_WQ_FLAGS_CVLAN_STRIPPING;
  a.flags = 0;
  ASSERT_EQ(ibv_modify_wq(w, &a), 0);
  send(tagged);
  receive(&id, &len, &cvlan);
  EXPECT_EQ(len, tagged.size());
  EXPECT_EQ(cvlan, 0);
  EXPECT_EQ(std::memcmp(slot(mr, id), tagged.data(), tagged.size()), 0);
}

TEST_F(WorkQueue, ScatterFcsAppendsTheCrc32) {
  ibv_cq* cq = make_cq();
  ibv_mr* mr = reg_buffer(4 * kBuf, IBV_ACCESS_LOCAL_WRITE);
  ibv_wq* w = wq(cq, IBV_WQ_FLAGS_SCATTER_FCS);
  ASSERT_NE(w, nullptr) << std::strerror(errno);
  ASSERT_NE(rss_qp({w}, 0, 0), nullptr) << std::strerror(errno);
  post(w, mr, 2);
  const uint8_t ip[4] = {10, 9, 8, 7};
  for (size_t payload : {18u, 700u}) {
    const auto f = udp_frame(ip, 5, 6, payload);
    send(f);
    ibv_wc wc;
    VT_POLL_ONE(cq, &wc);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
    ASSERT_EQ(wc.byte_len, f.size() + 4);  // counted in byte_len (man ibv_create_wq(3))
    const uint8_t* got = slot(mr, wc.wr_id);
    EXPECT_EQ(std::memcmp(got, f.data(), f.size()), 0);
    const uint32_t crc = uint32_t(crc32(0, f.data(), uInt(f.size())));
    const uint8_t want[4] = {uint8_t(crc), uint8_t(crc >> 8), uint8_t(crc >> 16), uint8_t(crc >> 24)};
    EXPECT_EQ(std::memcmp(got + f.size(), want, 4), 0) << "the FCS as 802.3 sends it";
    EXPECT_EQ(uint32_t(crc32(0, got, uInt(f.size() + 4))), 0x2144df1cu) << "the CRC residue of frame + FCS";
  }
}

TEST_F(WorkQueue, EndPaddingFillsTheLineButNeverPastTheSge) {
  ibv_cq* cq = make_cq();
  ibv_mr* mr = reg_buffer(4 * kBuf, IBV_ACCESS_LOCAL_WRITE, 0xee);
  ibv_wq* w = wq(cq, IBV_WQ_FLAGS_PCI_WRITE_END_PADDING);
  ASSERT_NE(w, nullptr) << std::strerror(errno);
  ASSERT_NE(rss_qp({w}, 0, 0), nullptr) << std::strerror(errno);
  ASSERT_EQ(addr_of(mr) % 64, 0u);
  // Slot 0: a 100-byte SGE (the line ends at 128: padding stops at 100);
  // slot 1: a whole buffer (padding to 128).
  post(w, mr, 1, 0, 100);
  post(w, mr, 1, 1, kBuf);
  const uint8_t ip[4] = {10, 0, 0, 9};
  const auto f = udp_frame(ip, 1, 2, 28);  // 70 bytes
  ASSERT_EQ(f.size(), 70u);
  for (int i = 0; i < 2; ++i) {
    send(f);
    ibv_wc wc;
    VT_POLL_ONE(cq, &wc);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
    EXPECT_EQ(wc.byte_len, 70u);  // padding is not counted
    const uint8_t* got = slot(mr, wc.wr_id);
    EXPECT_EQ(std::memcmp(got, f.data(), f.size()), 0);
    const size_t pad_end = wc.wr_id == 0 ? 100 : 128;
    for (size_t b = 70; b < 200; ++b)
      ASSERT_EQ(got[b], b < pad_end ? 0 : 0xee) << "byte " << b << " of slot " << wc.wr_id;
  }
}

TEST_F(WorkQueue, DelayDropHoldsABurstUntilReceivesArePosted) {
  ibv_cq* cq = make_cq();
  ibv_mr* mr = reg_buffer(8 * kBuf, IBV_ACCESS_LOCAL_WRITE);
  ibv_wq* w = wq(cq, IBV_WQ_FLAGS_DELAY_DROP);
  ASSERT_NE(w, nullptr) << std::strerror(errno);
  ibv_wq* plain = wq(cq);
  ASSERT_NE(plain, nullptr);
  ASSERT_NE(rss_qp({w}, 0, 0), nullptr) << std::strerror(errno);
  std::vector<std::vector<uint8_t>> burst;
  for (uint8_t i = 0; i < 3; ++i) {
    const uint8_t ip[4] = {10, 0, 1, i};
    burst.push_back(udp_frame(ip, 1, 2, 30 + i));
    send(burst.back());
  }
  EXPECT_TRUE(drain_for(cq, 20).empty());
  post(w, mr, 3);  // within the 100 ms: the held frames take them, in order
  for (uint64_t i = 0; i < 3; ++i) {
    ibv_wc wc;
    VT_POLL_ONE(cq, &wc);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
    EXPECT_EQ(wc.wr_id, i);
    ASSERT_EQ(wc.byte_len, burst[i].size());
    EXPECT_EQ(std::memcmp(slot(mr, i), burst[i].data(), burst[i].size()), 0);
  }
  // Past the timeout the held frames are dropped and counted.
  for (uint8_t i = 0; i < 2; ++i) send(burst[i]);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  post(w, mr, 2, 3);
  EXPECT_TRUE(drain_for(cq, 100).empty());
  const std::string r = wq_report(w);
  for (const char* want : {"\"delay_drop_expired\":2,", "\"received\":3,", "\"no_wqe_drops\":0,", "\"delay_drop_held\":0,"})
    EXPECT_NE(r.find(want), std::string::npos) << want << " in " << r;
  (void)plain;
}

TEST_F(WorkQueue, WithoutDelayDropAFrameWithNoReceiveIsDroppedAndCounted) {
  ibv_cq* cq = make_cq();
  ibv_wq* w = wq(cq);
  ASSERT_NE(w, nullptr);
  ASSERT_NE(rss_qp({w}, 0, 0), nullptr) << std::strerror(errno);
  const uint8_t ip[4] = {10, 0, 2, 1};
  send(udp_frame(ip, 1, 2, 30));
  send(udp_frame(ip, 1, 2, 30));
  EXPECT_TRUE(drain_for(cq, 50).empty());
  const std::string r = wq_report(w);
  for (const char* want : {"\"no_wqe_drops\":2,", "\"received\":0,"})
    EXPECT_NE(r.find(want), std::string::npos) << want << " in " << r;
}

// A frame steered to a WQ in RESET or ERR is dropped at once and counted,
// delay drop or not (mlx5 holds frames only for an RQ in RDY whose WQEs ran
// out: device/wq_receive.cc); frames held while it was RDY are dropped when
// it leaves RDY, and none of them reaches a receive posted afterwards.
TEST_F(WorkQueue, DelayDropHoldsNothingForAWqNotInRdy) {
  ibv_cq* cq = make_cq();
  ibv_mr* mr = reg_buffer(8 * kBuf, IBV_ACCESS_LOCAL_WRITE);
  ibv_wq* w = wq(cq, IBV_WQ_FLAGS_DELAY_DROP, 64, false);
  ASSERT_NE(w, nullptr) << std::strerror(errno);
  ASSERT_NE(rss_qp({w}, 0, 0), nullptr) << std::strerror(errno);
  const uint8_t ip[4] = {10, 0, 4, 1};
  const auto f = udp_frame(ip, 1, 2, 40);
  auto expect = [&](const char* when, std::initializer_list<const char*> wants) {
    const std::string r = wq_report(w);
    for (const char* want : wants) EXPECT_NE(r.find(want), std::string::npos) << when << ": " << want << " in " << r;
  };
  // A counter of one report of the WQ.
  auto value = [](const std::string& r, const char* name) {
    const std::string key = std::string("\"") + name + "\":";
    const size_t at = r.find(key);
    return at == std::string::npos ? ~0ul : std::stoul(r.substr(at + key.size()));
  };
  auto counter = [&](const char* name) { return value(wq_report(w), name); };
  send(f);  // RESET
  send(f);
  expect("in RESET", {"\"not_ready_drops\":2,", "\"delay_drop_held\":0,"});
  ASSERT_EQ(set_state(w, IBV_WQS_RDY), 0);
  send(f);  // RDY, no receive posted: held for up to 100 ms
  // Held, unless this process was slower than the 100 ms (a loaded machine,
  // a sanitizer build): then it expired, counted as such.
  std::string r = wq_report(w);  // one report: the frame may expire between two
  EXPECT_EQ(value(r, "delay_drop_held") + value(r, "delay_drop_expired"), 1u) << r;
  EXPECT_EQ(value(r, "not_ready_drops"), 2u) << r;
  ASSERT_EQ(set_state(w, IBV_WQS_ERR), 0);  // drops a frame still held
  send(f);                                    // ERR
  r = wq_report(w);  // nothing held any more: it stays as it is
  const unsigned long expired = value(r, "delay_drop_expired");
  EXPECT_EQ(value(r, "delay_drop_held"), 0u) << r;
  EXPECT_EQ(value(r, "not_ready_drops") + expired, 4u) << "each frame dropped once, as not ready or expired: " << r;
  ASSERT_EQ(set_state(w, IBV_WQS_RESET), 0);
  ASSERT_EQ(set_state(w, IBV_WQS_RDY), 0);
  post(w, mr, 4);
  EXPECT_TRUE(drain_for(cq, 200).empty());  // past the 100 ms: nothing was held for it
  expect("after", {"\"received\":0,", "\"no_wqe_drops\":0,"});
  EXPECT_EQ(counter("delay_drop_expired"), expired) << "nothing held expired after the WQ left RDY";
  send(f);  // ready with receives: placed
  ibv_wc wc;
  VT_POLL_ONE(cq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  EXPECT_EQ(wc.wr_id, 0u);
}

// A receive whose SGE the device cannot use (an lkey that names no MR, an
// SGE past its MR, a buffer too short for the frame) completes in error and
// takes the WQ to ERR by itself, as an error CQE does an mlx5 RQ: the rest
// of its receives flush, IBV_EVENT_WQ_FATAL names it, and it receives again
// once taken back through RESET.
TEST_F(WorkQueue, BadReceiveSgeTakesTheWqToErrWithWqFatal) {
  ibv_cq* cq = make_cq();
  ibv_mr* mr = reg_buffer(8 * kBuf, IBV_ACCESS_LOCAL_WRITE);
  ibv_wq* w = wq(cq);
  ASSERT_NE(w, nullptr);
  ASSERT_NE(rss_qp({w}, 0, 0), nullptr) << std::strerror(errno);
  const uint8_t ip[4] = {10, 0, 5, 1};
  const auto f = udp_frame(ip, 1, 2, 100);
  struct Case {
    const char* what;
    uint32_t lkey_xor;
    uint64_t offset;
    uint32_t len;
    ibv_wc_status want;
  };
  const Case cases[] = {
      {"lkey naming no MR", 0x5a5a00, 0, kBuf, IBV_WC_LOC_PROT_ERR},
      {"SGE past its MR", 0, 8 * kBuf - 16, kBuf, IBV_WC_LOC_PROT_ERR},
      {"buffer too short", 0, 0, 32, IBV_WC_LOC_LEN_ERR},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    ibv_sge bad = sge_of(mr, c.offset, c.len);
    bad.lkey ^= c.lkey_xor;
    ibv_recv_wr wr{}, *bad_wr = nullptr;
    wr.wr_id = 100;
    wr.sg_list = &bad;
    wr.num_sge = 1;
    ASSERT_EQ(ibv_post_wq_recv(w, &wr, &bad_wr), 0);  // mlx5 checks no key when posting
    post(w, mr, 2);
    send(f);
    std::vector<ibv_wc> wcs = drain_for(cq, 200);
    ASSERT_EQ(wcs.size(), 3u);
    EXPECT_EQ(wcs[0].wr_id, 100u);
    EXPECT_EQ(wcs[0].status, c.want) << describe(wcs[0]);
    EXPECT_EQ(wcs[0].qp_num, w->wq_num);
    for (size_t i = 1; i < 3; ++i) {
      EXPECT_EQ(wcs[i].wr_id, i - 1);
      EXPECT_EQ(wcs[i].status, IBV_WC_WR_FLUSH_ERR) << describe(wcs[i]);
    }
    ibv_async_event ev{};
    bool got = false;
    for (auto until = deadline_after(kWaitSeconds); !got && Clock::now() < until;) {
      if (!fd_readable(ctx_->async_fd, 50)) continue;
      ASSERT_EQ(ibv_get_async_event(ctx_, &ev), 0);
      got = ev.event_type == IBV_EVENT_WQ_FATAL;
      ibv_ack_async_event(&ev);
    }
    ASSERT_TRUE(got) << "no IBV_EVENT_WQ_FATAL";
    EXPECT_EQ(ev.element.wq, w);
    EXPECT_NE(wq_report(w).find("\"state\":\"ERR\""), std::string::npos) << wq_report(w);
    // In ERR: a frame is dropped, a receive posted now flushes.
    send(f);
    post(w, mr, 1, 7);
    wcs = drain_for(cq, 100);
    ASSERT_EQ(wcs.size(), 1u);
    EXPECT_EQ(wcs[0].wr_id, 7u);
    EXPECT_EQ(wcs[0].status, IBV_WC_WR_FLUSH_ERR);
    // RESET, RDY: it receives again.
    ibv_wq_attr a{};
    a.attr_mask = IBV_WQ_ATTR_STATE | IBV_WQ_ATTR_CURR_STATE;
    a.curr_wq_state = IBV_WQS_ERR;  // the device's state, not the one last asked for
    a.wq_state = IBV_WQS_RESET;
    ASSERT_EQ(ibv_modify_wq(w, &a), 0);
    ASSERT_EQ(set_state(w, IBV_WQS_RDY), 0);
    post(w, mr, 1, 3);
    send(f);
    ibv_wc wc;
    VT_POLL_ONE(cq, &wc);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
    EXPECT_EQ(wc.wr_id, 3u);
    EXPECT_EQ(std::memcmp(slot(mr, 3), f.data(), f.size()), 0);
  }
  const std::string r = wq_report(w);
  EXPECT_NE(r.find("\"errors\":3,"), std::string::npos) << r;
  EXPECT_NE(r.find("\"received\":3,"), std::string::npos) << r;
}

// The same receive flags on a plain raw packet QP, as creation flags
// (IBV_QP_CREATE_CVLAN_STRIPPING, IBV_QP_CREATE_SCATTER_FCS: mlx5 has both).
TEST_F(WorkQueue, RawQpCreationFlagsShapeItsReceives) {
  ibv_cq_init_attr_ex ca{};
  ca.cqe = 16;
  ca.wc_flags = uint64_t(IBV_WC_STANDARD_FLAGS) | IBV_WC_EX_WITH_CVLAN;
  ibv_cq_ex* cqx = make_cq_ex(&ca);
  ASSERT_NE(cqx, nullptr) << std::strerror(errno);
  ibv_cq* cq = ibv_cq_ex_to_cq(cqx);
  ibv_qp_init_attr_ex ia{};
  ia.qp_type = IBV_QPT_RAW_PACKET;
  ia.send_cq = ia.recv_cq = cq;
  ia.cap = {8, 8, 1, 1, 0};
  ia.pd = pd_;
  ia.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
  ia.create_flags = IBV_QP_CREATE_SCATTER_FCS | IBV_QP_CREATE_CVLAN_STRIPPING;
  ibv_qp* qp = ibv_create_qp_ex(ctx_, &ia);
  ASSERT_NE(qp, nullptr) << std::strerror(errno);
  defer([qp] { EXPECT_EQ(ibv_destroy_qp(qp), 0); });
  ASSERT_NO_FATAL_FAILURE(raw_to_rts(qp));
  flow_to(qp);
  ibv_mr* mr = reg_buffer(kBuf, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_EQ(post_recv_mr(qp, 0, mr, 0, kBuf), 0);
  const uint8_t ip[4] = {10, 3, 3, 3};
  const uint16_t tci = 0x2064;
  const auto tagged = udp_frame(ip, 9, 9, 50, tci), plain = udp_frame(ip, 9, 9, 50);
  send(tagged);
  ibv_poll_cq_attr pa{};
  int rc;
  for (auto until = deadline_after(kWaitSeconds); (rc = ibv_start_poll(cqx, &pa)) == ENOENT && Clock::now() < until;)
    std::this_thread::yield();
  ASSERT_EQ(rc, 0);
  EXPECT_EQ(cqx->status, IBV_WC_SUCCESS);
  EXPECT_EQ(ibv_wc_read_byte_len(cqx), plain.size() + 4);
  EXPECT_EQ(ibv_wc_read_cvlan(cqx), tci);
  ibv_end_poll(cqx);
  const uint8_t* got = slot(mr, 0);
  EXPECT_EQ(std::memcmp(got, plain.data(), plain.size()), 0);
  // The FCS is the one the frame had on the wire, tag included.
  const uint32_t crc = uint32_t(crc32(0, tagged.data(), uInt(tagged.size())));
  const uint8_t want[4] = {uint8_t(crc), uint8_t(crc >> 8), uint8_t(crc >> 16), uint8_t(crc >> 24)};
  EXPECT_EQ(std::memcmp(got + plain.size(), want, 4), 0);
}

}  // namespace
}  // namespace vt
