// Raw packet QPs and flow steering (man ibv_create_flow(3), the kernel's
// drivers/infiniband/hw/mlx5/fs.c, rdma-core tests/test_flow.py): whole
// Ethernet frames sent by one raw QP of this process reach the raw QPs whose
// rules match them through the device's internal switch, with rule
// priorities, masks, DONT_TRAP, DROP, TAG, SNIFFER and the default rules,
// IBV_WC_IP_CSUM_OK and IBV_SEND_IP_CSUM, and the RoCE path untouched.
#include <linux/capability.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <regex>

#include "verbs_fixture.h"

namespace vt {
namespace {

constexpr uint8_t kDstMac[6] = {0x02, 0x11, 0x22, 0x33, 0x44, 0x55};
constexpr uint8_t kSrcMac[6] = {0x02, 0x66, 0x77, 0x88, 0x99, 0xaa};
constexpr uint8_t kMcastMac[6] = {0x01, 0x50, 0x56, 0x19, 0x20, 0xa7};  // rdma-core's test MAC
constexpr uint32_t kFrameBuf = 2048;

bool has_cap_net_raw() {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (syscall(SYS_capget, &hdr, data) != 0) return false;
  return data[CAP_NET_RAW / 32].effective & (1u << (CAP_NET_RAW % 32));
}

uint16_t csum_fold(uint32_t sum) {
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return uint16_t(sum);
}
uint32_t csum_add(const uint8_t* p, size_t n, uint32_t sum = 0) {
  for (; n > 1; p += 2, n -= 2) sum += uint32_t(p[0] << 8 | p[1]);
  if (n) sum += uint32_t(p[0]) << 8;
  return sum;
}

// An Ethernet + IPv4 + UDP frame (IPv6 with v6) of `payload` bytes; with
// checksums both IPv4 and UDP checksums are right, else both 0.
std::vector<uint8_t> udp_frame(const uint8_t* dst, uint16_t sport, uint16_t dport, size_t payload,
                               bool checksums = false, bool v6 = false, int vlan = -1) {
  std::vector<uint8_t> f;
  f.insert(f.end(), dst, dst + 6);
  f.insert(f.end(), kSrcMac, kSrcMac + 6);
  if (vlan >= 0) f.insert(f.end(), {0x81, 0x00, uint8_t(vlan >> 8), uint8_t(vlan)});
  const size_t l3 = f.size() + 2;
  const uint16_t udp_len = uint16_t(8 + payload);
  if (!v6) {
    f.insert(f.end(), {0x08, 0x00, 0x45, 0x00, uint8_t((20 + udp_len) >> 8), uint8_t(20 + udp_len),
                       0, 1, 0x40, 0, 64, 17, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2});
  } else {
    f.insert(f.end(), {0x86, 0xdd, 0x60, 0, 0, 0, uint8_t(udp_len >> 8), uint8_t(udp_len), 17, 64});
    for (int i = 0; i < 16; ++i) f.push_back(uint8_t(0xa0 + i));
    for (int i = 0; i < 16; ++i) f.push_back(uint8_t(0xb0 + i));
  }
  const size_t l4 = f.size();
  f.insert(f.end(), {uint8_t(sport >> 8), uint8_t(sport), uint8_t(dport >> 8), uint8_t(dport),
                     uint8_t(udp_len >> 8), uint8_t(udp_len), 0, 0});
  for (size_t i = 0; i < payload; ++i) f.push_back(uint8_t(i * 7 + 3));
  if (checksums && !v6) {
    const uint16_t ip = uint16_t(~csum_fold(csum_add(&f[l3], 20)));
    f[l3 + 10] = uint8_t(ip >> 8);
    f[l3 + 11] = uint8_t(ip);
    uint32_t s = csum_add(&f[l3 + 12], 8) + 17 + udp_len;
    const uint16_t u = uint16_t(~csum_fold(csum_add(&f[l4], udp_len, s)));
    f[l4 + 6] = uint8_t(u >> 8);
    f[l4 + 7] = uint8_t(u);
  }
  return f;
}

// ibv_flow_attr followed by its specs, in one buffer.
class FlowRule {
 public:
  explicit FlowRule(ibv_flow_attr_type type = IBV_FLOW_ATTR_NORMAL, uint16_t priority = 0,
                    uint32_t flags = 0) {
    buf_.resize(sizeof(ibv_flow_attr));
    attr()->type = type;
    attr()->priority = priority;
    attr()->flags = flags;
    attr()->port = 1;
    attr()->size = sizeof(ibv_flow_attr);
  }
  template <typename Spec>
  FlowRule& add(const Spec& s) {
    const size_t at = buf_.size();
    buf_.resize(at + sizeof(Spec));
    std::memcpy(buf_.data() + at, &s, sizeof(Spec));
    attr()->num_of_specs++;
    attr()->size = uint16_t(buf_.size());
    return *this;
  }
  FlowRule& eth_dst(const uint8_t* mac, const uint8_t* mask = nullptr) {
    ibv_flow_spec_eth e{};
    e.type = IBV_FLOW_SPEC_ETH;
    e.size = sizeof(e);
    std::memcpy(e.val.dst_mac, mac, 6);
    if (mask) std::memcpy(e.mask.dst_mac, mask, 6);
    else std::memset(e.mask.dst_mac, 0xff, 6);
    return add(e);
  }
  FlowRule& udp_dst(uint16_t port, uint16_t mask = 0xffff) {
    ibv_flow_spec_tcp_udp u{};
    u.type = IBV_FLOW_SPEC_UDP;
    u.size = sizeof(u);
    u.val.dst_port = htons(port);
    u.mask.dst_port = htons(mask);
    return add(u);
  }
  FlowRule& tag(uint32_t id) {
    ibv_flow_spec_action_tag t{};
    t.type = IBV_FLOW_SPEC_ACTION_TAG;
    t.size = sizeof(t);
    t.tag_id = id;
    return add(t);
  }
  FlowRule& drop() {
    ibv_flow_spec_action_drop d{};
    d.type = IBV_FLOW_SPEC_ACTION_DROP;
    d.size = sizeof(d);
    return add(d);
  }
  ibv_flow_attr* attr() { return reinterpret_cast<ibv_flow_attr*>(buf_.data()); }

 private:
  std::vector<uint8_t> buf_;
};

struct FlowDeleter {
  void operator()(ibv_flow* f) const {
    if (f) {
      EXPECT_EQ(ibv_destroy_flow(f), 0);
    }
  }
};
using FlowPtr = std::unique_ptr<ibv_flow, FlowDeleter>;

class RawPacket : public VerbsTest {
 protected:
  void SetUp() override {
    VerbsTest::SetUp();
    if (!has_cap_net_raw()) GTEST_SKIP() << "needs CAP_NET_RAW (RawPacketNoCap covers its absence)";
    tx_mr_ = reg_buffer(kFrameBuf, IBV_ACCESS_LOCAL_WRITE);
    tx_cq_ = make_cq();
    tx_ = raw_qp(tx_cq_);
    ASSERT_NE(tx_, nullptr);
  }

  // A raw packet QP in RTS on its own CQ.
  ibv_qp* raw_qp(ibv_cq* cq) {
    ibv_qp* qp = make_qp(IBV_QPT_RAW_PACKET, cq, cq);
    if (!qp) return nullptr;
    raw_to_rts(qp);
    return qp;
  }

  // A receiving raw QP with `n` buffers posted.
  struct Rx {
    ibv_qp* qp;
    ibv_cq* cq;
    ibv_mr* mr;
  };
  Rx receiver(int n = 8, ibv_cq* cq = nullptr) {
    Rx r{};
    r.cq = cq ? cq : make_cq();
    r.qp = raw_qp(r.cq);
    r.mr = reg_buffer(size_t(n) * kFrameBuf, IBV_ACCESS_LOCAL_WRITE);
    for (int i = 0; i < n; ++i) EXPECT_EQ(post_recv_mr(r.qp, uint64_t(i), r.mr, size_t(i) * kFrameBuf, kFrameBuf), 0);
    return r;
  }

  FlowPtr flow(ibv_qp* qp, FlowRule& rule) { return FlowPtr(ibv_create_flow(qp, rule.attr())); }

  // Sends one frame from tx_ and waits for its send completion.
  void send(const std::vector<uint8_t>& frame, unsigned flags = IBV_SEND_SIGNALED) {
    std::memcpy(tx_mr_->addr, frame.data(), frame.size());
    ibv_sge sge = sge_of(tx_mr_, 0, uint32_t(frame.size()));
    ASSERT_EQ(post_send(tx_, 7, IBV_WR_SEND, &sge, 1, flags), 0);
    ibv_wc wc;
    VT_POLL_ONE(tx_cq_, &wc);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
    ASSERT_EQ(wc.opcode, IBV_WC_SEND);
  }

  // The receive of `frame` on r: whole, byte for byte.
  void expect_frame(const Rx& r, const std::vector<uint8_t>& frame, ibv_wc* out = nullptr) {
    ibv_wc wc;
    ASSERT_TRUE(poll_one(r.cq, &wc)) << "frame not received";
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
    EXPECT_EQ(wc.opcode, IBV_WC_RECV);
    EXPECT_EQ(wc.qp_num, r.qp->qp_num);
    ASSERT_EQ(wc.byte_len, frame.size());
    const auto* got = static_cast<const uint8_t*>(r.mr->addr) + wc.wr_id * kFrameBuf;
    EXPECT_EQ(std::memcmp(got, frame.data(), frame.size()), 0);
    if (out) *out = wc;
  }
  void expect_nothing(const Rx& r) { EXPECT_TRUE(drain_for(r.cq, 100).empty()); }

  ibv_mr* tx_mr_ = nullptr;
  ibv_cq* tx_cq_ = nullptr;
  ibv_qp* tx_ = nullptr;
};

TEST_F(RawPacket, DeviceAdvertisesRawQpsAndSteering) {
  ibv_device_attr_ex a{};
  ASSERT_EQ(ibv_query_device_ex(ctx_, nullptr, &a), 0);
  EXPECT_GT(a.orig_attr.max_raw_ethy_qp, 0);
  EXPECT_TRUE(a.orig_attr.device_cap_flags & IBV_DEVICE_MANAGED_FLOW_STEERING);
  EXPECT_TRUE(a.orig_attr.device_cap_flags & IBV_DEVICE_RAW_IP_CSUM);
  EXPECT_TRUE(a.raw_packet_caps & IBV_RAW_PACKET_CAP_IP_CSUM);
}

TEST_F(RawPacket, StateMachineNeedsThePortAtInitOnly) {
  ibv_cq* cq = make_cq();
  ibv_qp* qp = make_qp(IBV_QPT_RAW_PACKET, cq, cq);
  ASSERT_NE(qp, nullptr);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  EXPECT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE), EINVAL);  // no port
  a.port_num = 1;
  a.qkey = 1;
  EXPECT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PORT | IBV_QP_QKEY), EINVAL);  // not raw's
  ASSERT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PORT), 0);
  a.qp_state = IBV_QPS_RTR;
  ASSERT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = 1;
  EXPECT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN), EINVAL);
  ASSERT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
  EXPECT_EQ(qp_state(qp), IBV_QPS_RTS);
}

TEST_F(RawPacket, NoRuleNoFrame) {
  Rx rx = receiver();
  send(udp_frame(kDstMac, 1, 2, 64));
  expect_nothing(rx);
}

TEST_F(RawPacket, EthRuleDeliversWholeFrames) {
  Rx rx = receiver();
  FlowRule rule;
  rule.eth_dst(kDstMac);
  FlowPtr f = flow(rx.qp, rule);
  ASSERT_TRUE(f) << std::strerror(errno);
  for (size_t len : {60u, 200u, 1514u}) {
    const auto frame = udp_frame(kDstMac, 1234, 5678, len - 42);
    send(frame);
    expect_frame(rx, frame);
  }
  // Another destination MAC, IPv6, a VLAN tag: only the MAC decides.
  const uint8_t other[6] = {0x02, 0x11, 0x22, 0x33, 0x44, 0x56};
  send(udp_frame(other, 1, 2, 64));
  expect_nothing(rx);
  const auto v6 = udp_frame(kDstMac, 1, 2, 100, false, true, 5);
  send(v6);
  expect_frame(rx, v6);
}

TEST_F(RawPacket, MasksArePerBit) {
  Rx rx = receiver();
  const uint8_t mask[6] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xf0};  // the last nibble is free
  FlowRule rule;
  rule.eth_dst(kDstMac, mask).udp_dst(0x1200, 0xff00);  // ports 0x12xx
  FlowPtr f = flow(rx.qp, rule);
  ASSERT_TRUE(f) << std::strerror(errno);
  uint8_t near[6];
  std::memcpy(near, kDstMac, 6);
  near[5] = 0x5f;
  const auto hit = udp_frame(near, 1, 0x12ab, 32);
  send(hit);
  expect_frame(rx, hit);
  near[5] = 0x65;  // outside the mask
  send(udp_frame(near, 1, 0x12ab, 32));
  send(udp_frame(kDstMac, 1, 0x13ab, 32));  // port outside the mask
  // A UDP rule matches UDP only: the same ports over TCP do not.
  auto tcp = udp_frame(kDstMac, 1, 0x12ab, 32);
  tcp[23] = 6;
  send(tcp);
  expect_nothing(rx);
}

TEST_F(RawPacket, HigherPriorityWinsAndDestroyStopsDelivery) {
  Rx low = receiver(), high = receiver();
  FlowRule r_low(IBV_FLOW_ATTR_NORMAL, 3), r_high(IBV_FLOW_ATTR_NORMAL, 1);
  r_low.eth_dst(kDstMac);
  r_high.eth_dst(kDstMac).udp_dst(4000);
  FlowPtr fl = flow(low.qp, r_low), fh = flow(high.qp, r_high);
  ASSERT_TRUE(fl && fh);
  const auto to_4000 = udp_frame(kDstMac, 1, 4000, 64), to_4001 = udp_frame(kDstMac, 1, 4001, 64);
  send(to_4000);
  expect_frame(high, to_4000);
  expect_nothing(low);
  send(to_4001);  // only the wider rule matches
  expect_frame(low, to_4001);
  fh.reset();
  send(to_4000);
  expect_frame(low, to_4000);
  expect_nothing(high);
  // Several rules on one QP: each delivers.
  FlowRule other;
  const uint8_t mac2[6] = {0x02, 0, 0, 0, 0, 9};
  other.eth_dst(mac2);
  FlowPtr f2 = flow(low.qp, other);
  ASSERT_TRUE(f2);
  const auto to_mac2 = udp_frame(mac2, 1, 2, 64);
  send(to_mac2);
  expect_frame(low, to_mac2);
}

TEST_F(RawPacket, DontTrapLetsLowerPrioritiesSeeTheFrame) {
  Rx copy = receiver(), owner = receiver();
  FlowRule r_copy(IBV_FLOW_ATTR_NORMAL, 0, IBV_FLOW_ATTR_FLAGS_DONT_TRAP), r_owner(IBV_FLOW_ATTR_NORMAL, 5);
  r_copy.eth_dst(kDstMac);
  r_owner.eth_dst(kDstMac);
  FlowPtr fc = flow(copy.qp, r_copy), fo = flow(owner.qp, r_owner);
  ASSERT_TRUE(fc && fo);
  const auto frame = udp_frame(kDstMac, 1, 2, 128);
  send(frame);
  expect_frame(copy, frame);
  expect_frame(owner, frame);
  // Without DONT_TRAP the higher priority keeps it.
  fc.reset();
  FlowRule r_trap(IBV_FLOW_ATTR_NORMAL, 0);
  r_trap.eth_dst(kDstMac);
  fc = flow(copy.qp, r_trap);
  ASSERT_TRUE(fc);
  send(frame);
  expect_frame(copy, frame);
  expect_nothing(owner);
}

TEST_F(RawPacket, DropDiscardsForLowerPriorities) {
  Rx rx = receiver();
  FlowRule r_drop(IBV_FLOW_ATTR_NORMAL, 0), r_rx(IBV_FLOW_ATTR_NORMAL, 2);
  r_drop.eth_dst(kDstMac).udp_dst(9).drop();
  r_rx.eth_dst(kDstMac);
  FlowPtr fr = flow(rx.qp, r_rx), fd = flow(rx.qp, r_drop);
  ASSERT_TRUE(fr && fd) << std::strerror(errno);
  send(udp_frame(kDstMac, 1, 9, 64));
  expect_nothing(rx);
  const auto kept = udp_frame(kDstMac, 1, 10, 64);
  send(kept);
  expect_frame(rx, kept);
  // `uroce stats` shows each rule's frames and drops (read as JSON: the
  // text form is cut at a control message's size, and the device's
  // counters fill most of it).
  std::string out, flat;
  ASSERT_EQ(run_command("timeout 10 " + uroce_command() + " stats --json --name uroce0", &out), 0) << out;
  for (char ch : out)
    if (ch != ' ' && ch != '\n') flat += ch;
  const std::string qp = "\"qpn\":" + std::to_string(rx.qp->qp_num) + ",";
  auto rule = [&](int dropped, int frames, int priority) {
    return std::regex("\"dropped\":" + std::to_string(dropped) + ",\"frames\":" + std::to_string(frames) +
                      ",\"handle\":[0-9]+,\"priority\":" + std::to_string(priority) + "," + qp);
  };
  EXPECT_TRUE(std::regex_search(flat, rule(1, 0, 0))) << flat;
  EXPECT_TRUE(std::regex_search(flat, rule(0, 1, 2))) << flat;
}

TEST_F(RawPacket, TagIsReadFromTheExtendedCq) {
  ibv_cq_init_attr_ex ca{};
  ca.cqe = 64;
  ca.wc_flags = uint64_t(IBV_WC_STANDARD_FLAGS) | IBV_WC_EX_WITH_FLOW_TAG;
  ibv_cq_ex* cqx = make_cq_ex(&ca);
  ASSERT_NE(cqx, nullptr) << std::strerror(errno);
  Rx tagged = receiver(8, ibv_cq_ex_to_cq(cqx));
  Rx plain = receiver();
  const uint8_t mac2[6] = {0x02, 0, 0, 0, 0, 9};
  FlowRule r_tag, r_plain;
  r_tag.eth_dst(kDstMac).tag(0xabcdef);
  r_plain.eth_dst(mac2);
  FlowPtr ft = flow(tagged.qp, r_tag), fp = flow(plain.qp, r_plain);
  ASSERT_TRUE(ft && fp);
  send(udp_frame(kDstMac, 1, 2, 64));
  ibv_poll_cq_attr pa{};
  int rc = ENOENT;
  const auto deadline = deadline_after(kWaitSeconds);
  while ((rc = ibv_start_poll(cqx, &pa)) == ENOENT && Clock::now() < deadline) {
  }
  ASSERT_EQ(rc, 0);
  EXPECT_EQ(cqx->status, IBV_WC_SUCCESS);
  EXPECT_EQ(ibv_wc_read_opcode(cqx), IBV_WC_RECV);
  EXPECT_EQ(ibv_wc_read_flow_tag(cqx), 0xabcdefu);
  ibv_end_poll(cqx);
  const auto f2 = udp_frame(mac2, 1, 2, 64);
  send(f2);
  expect_frame(plain, f2);
  // A tag of more than 24 bits is EINVAL (mlx5).
  FlowRule wide;
  wide.eth_dst(kDstMac).tag(1u << 24);
  errno = 0;
  EXPECT_FALSE(flow(plain.qp, wide));
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(RawPacket, SnifferSeesEverythingBesideTheRules) {
  Rx sniff = receiver(), rx = receiver();
  FlowRule r_sniff(IBV_FLOW_ATTR_SNIFFER), r_rx;
  r_rx.eth_dst(kDstMac);
  FlowPtr fs = flow(sniff.qp, r_sniff), fr = flow(rx.qp, r_rx);
  ASSERT_TRUE(fs && fr) << std::strerror(errno);
  const auto a = udp_frame(kDstMac, 1, 2, 64), b = udp_frame(kMcastMac, 3, 4, 80);
  send(a);
  expect_frame(rx, a);
  expect_frame(sniff, a);
  send(b);
  expect_frame(sniff, b);
  expect_nothing(rx);
}

TEST_F(RawPacket, DefaultRulesTakeLeftovers) {
  Rx all = receiver(), mc = receiver();
  FlowRule r_all(IBV_FLOW_ATTR_ALL_DEFAULT), r_mc(IBV_FLOW_ATTR_MC_DEFAULT);
  FlowPtr fa = flow(all.qp, r_all), fm = flow(mc.qp, r_mc);
  ASSERT_TRUE(fa && fm) << std::strerror(errno);
  // A sent frame no rule took leaves by the port; one the engine's own
  // loopback hands back (its MAC) reaches the leftovers if not RoCE.
  ibv_device_attr_ex da{};
  ASSERT_EQ(ibv_query_device_ex(ctx_, nullptr, &da), 0);
  uint8_t engine_mac[6];
  const uint64_t guid = da.orig_attr.node_guid;  // EUI-64 from the MAC
  const auto* g = reinterpret_cast<const uint8_t*>(&guid);
  const uint8_t m[6] = {uint8_t(g[0] ^ 2), g[1], g[2], g[5], g[6], g[7]};
  std::memcpy(engine_mac, m, 6);
  const auto to_engine = udp_frame(engine_mac, 1, 2, 64);
  send(to_engine);
  expect_frame(all, to_engine);
  expect_nothing(mc);
}

TEST_F(RawPacket, RoceStillWorksBesideRules) {
  Rx all = receiver();
  FlowRule r_all(IBV_FLOW_ATTR_ALL_DEFAULT), r_sniff(IBV_FLOW_ATTR_SNIFFER);
  FlowPtr fa = flow(all.qp, r_all);
  ASSERT_TRUE(fa);
  Pair p = make_pair(IBV_QPT_RC);
  ibv_mr* mr = reg_buffer(4096, kRw, 0x5a);
  ASSERT_EQ(post_recv_mr(p.b.qp, 1, mr, 2048, 1024), 0);
  ibv_sge sge = sge_of(mr, 0, 1024);
  ASSERT_EQ(post_send(p.a.qp, 2, IBV_WR_SEND, &sge, 1), 0);
  ibv_wc wc;
  VT_POLL_ONE(p.b.cq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  VT_POLL_ONE(p.a.cq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << describe(wc);
  expect_nothing(all);  // RoCE to the engine is not a leftover
}

TEST_F(RawPacket, IpChecksumOkOnlyWhenBothChecksumsVerify) {
  Rx rx = receiver();
  FlowRule rule;
  rule.eth_dst(kDstMac);
  FlowPtr f = flow(rx.qp, rule);
  ASSERT_TRUE(f);
  ibv_wc wc;
  const auto good = udp_frame(kDstMac, 1, 2, 100, true);
  send(good);
  expect_frame(rx, good, &wc);
  EXPECT_TRUE(wc.wc_flags & IBV_WC_IP_CSUM_OK);
  auto bad = good;
  bad[bad.size() - 1] ^= 1;  // payload changed: the UDP checksum no longer holds
  send(bad);
  expect_frame(rx, bad, &wc);
  EXPECT_FALSE(wc.wc_flags & IBV_WC_IP_CSUM_OK);
  const auto none = udp_frame(kDstMac, 1, 2, 100, false);  // IPv4 header checksum 0 (rdma-core's)
  send(none);
  expect_frame(rx, none, &wc);
  EXPECT_FALSE(wc.wc_flags & IBV_WC_IP_CSUM_OK);
  const auto v6 = udp_frame(kDstMac, 1, 2, 100, false, true);
  send(v6);
  expect_frame(rx, v6, &wc);
  EXPECT_FALSE(wc.wc_flags & IBV_WC_IP_CSUM_OK);  // never for IPv6
  // IBV_SEND_IP_CSUM: the device fills both checksums of the zeroed frame.
  send(none, IBV_SEND_SIGNALED | IBV_SEND_IP_CSUM);
  ASSERT_TRUE(poll_one(rx.cq, &wc));
  EXPECT_TRUE(wc.wc_flags & IBV_WC_IP_CSUM_OK);
  EXPECT_EQ(std::memcmp(static_cast<uint8_t*>(rx.mr->addr) + wc.wr_id * kFrameBuf, good.data(),
                        good.size()),
            0);
}

TEST_F(RawPacket, ShortBufferCompletesWithLengthError) {
  ibv_cq* cq = make_cq();
  ibv_qp* qp = raw_qp(cq);
  ibv_mr* mr = reg_buffer(4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_EQ(post_recv_mr(qp, 1, mr, 0, 32), 0);
  FlowRule rule;
  rule.eth_dst(kDstMac);
  FlowPtr f = flow(qp, rule);
  ASSERT_TRUE(f);
  send(udp_frame(kDstMac, 1, 2, 64));
  ibv_wc wc;
  VT_POLL_ONE(cq, &wc);
  EXPECT_EQ(wc.status, IBV_WC_LOC_LEN_ERR);
}

TEST_F(RawPacket, CreateFlowErrorsAsMlx5) {
  Rx rx = receiver(1);
  errno = 0;
  FlowRule prio(IBV_FLOW_ATTR_NORMAL, 16);
  prio.eth_dst(kDstMac);
  EXPECT_FALSE(flow(rx.qp, prio));
  EXPECT_EQ(errno, ENOMEM);  // not EINVAL
  FlowRule leftover_dont_trap(IBV_FLOW_ATTR_ALL_DEFAULT, 0, IBV_FLOW_ATTR_FLAGS_DONT_TRAP);
  EXPECT_FALSE(flow(rx.qp, leftover_dont_trap));
  EXPECT_EQ(errno, EINVAL);
  FlowRule leftover_tag(IBV_FLOW_ATTR_MC_DEFAULT);
  leftover_tag.tag(1);
  EXPECT_FALSE(flow(rx.qp, leftover_tag));
  EXPECT_EQ(errno, EINVAL);
  FlowRule tunnel;
  ibv_flow_spec_tunnel vx{};
  vx.type = IBV_FLOW_SPEC_VXLAN_TUNNEL;
  vx.size = sizeof(vx);
  tunnel.add(vx);
  EXPECT_FALSE(flow(rx.qp, tunnel));
  EXPECT_EQ(errno, EOPNOTSUPP);
  FlowRule unknown;
  ibv_flow_spec_action_drop junk{};
  junk.type = ibv_flow_spec_type(0x77);
  junk.size = sizeof(junk);
  unknown.add(junk);
  EXPECT_FALSE(flow(rx.qp, unknown));
  EXPECT_EQ(errno, EINVAL);
  FlowRule ok;
  ok.eth_dst(kDstMac);
  ok.attr()->comp_mask = 1;
  EXPECT_FALSE(flow(rx.qp, ok));
  EXPECT_EQ(errno, EINVAL);
  ok.attr()->comp_mask = 0;
  Pair rc = make_pair(IBV_QPT_RC);
  EXPECT_FALSE(flow(rc.a.qp, ok));
  EXPECT_EQ(errno, EINVAL);  // steering is for raw packet QPs
  // A QP with rules cannot be destroyed (each rule holds it: EBUSY).
  ibv_flow* held = ibv_create_flow(rx.qp, ok.attr());
  ASSERT_NE(held, nullptr);
  EXPECT_EQ(ibv_destroy_qp(rx.qp), EBUSY);
  EXPECT_EQ(ibv_destroy_flow(held), 0);
}

// The kernel checks CAP_NET_RAW when the rule is made, not when the device
// was opened: a process that dropped it since gets EPERM.
TEST_F(RawPacket, FlowNeedsCapNetRawWhenMade) {
  Rx rx = receiver(1);
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct saved[2]{}, dropped[2]{};
  ASSERT_EQ(syscall(SYS_capget, &hdr, saved), 0);
  std::memcpy(dropped, saved, sizeof(saved));
  dropped[CAP_NET_RAW / 32].effective &= ~(1u << (CAP_NET_RAW % 32));
  ASSERT_EQ(syscall(SYS_capset, &hdr, dropped), 0);
  FlowRule rule;
  rule.eth_dst(kDstMac);
  errno = 0;
  ibv_flow* f = ibv_create_flow(rx.qp, rule.attr());
  const int err = errno;
  ASSERT_EQ(syscall(SYS_capset, &hdr, saved), 0);  // back in the effective set
  EXPECT_EQ(f, nullptr);
  EXPECT_EQ(err, EPERM);
  if (f) ibv_destroy_flow(f);
  EXPECT_TRUE(flow(rx.qp, rule));
}

TEST_F(RawPacket, CreateFlagsAndSrqRefused) {
  ibv_cq* cq = make_cq();
  ibv_qp_init_attr_ex ia{};
  ia.qp_type = IBV_QPT_RAW_PACKET;
  ia.send_cq = ia.recv_cq = cq;
  ia.cap = {8, 8, 1, 1, 0};
  ia.pd = pd_;
  ia.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
  ia.create_flags = IBV_QP_CREATE_BLOCK_SELF_MCAST_LB;  // a UD flag (mlx5), not implemented
  errno = 0;
  EXPECT_EQ(make_qp_ex(&ia), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
}

// Without CAP_NET_RAW, as the kernel: EPERM for raw QPs. Run by
// raw_packet_caps_test.sh with the capability dropped.
TEST(RawPacketNoCap, CreateIsEperm) {
  if (has_cap_net_raw()) GTEST_SKIP() << "has CAP_NET_RAW";
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  ASSERT_NE(list, nullptr);
  ibv_context* ctx = nullptr;
  for (int i = 0; i < n && !ctx; ++i)
    if (std::strcmp(ibv_get_device_name(list[i]), kDeviceName) == 0) ctx = ibv_open_device(list[i]);
  ibv_free_device_list(list);
  ASSERT_NE(ctx, nullptr);
  ibv_pd* pd = ibv_alloc_pd(ctx);
  ibv_cq* cq = ibv_create_cq(ctx, 8, nullptr, nullptr, 0);
  ASSERT_TRUE(pd && cq);
  ibv_qp_init_attr init{};
  init.send_cq = init.recv_cq = cq;
  init.qp_type = IBV_QPT_RAW_PACKET;
  init.cap = {8, 8, 1, 1, 0};
  errno = 0;
  EXPECT_EQ(ibv_create_qp(pd, &init), nullptr);
  EXPECT_EQ(errno, EPERM);
  init.qp_type = IBV_QPT_UD;  // other types are not privileged
  ibv_qp* ud = ibv_create_qp(pd, &init);
  EXPECT_NE(ud, nullptr);
  if (ud) ibv_destroy_qp(ud);
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
}

}  // namespace
}  // namespace vt

namespace vt {
namespace {

// On an engine with a wire port (raw_ethernet_two_hosts_test.sh names it in
// UROCE_RAW_WIRE_DEVICE and the other engine's IPv4 address in
// UROCE_RAW_WIRE_PEER): a SNIFFER rule gets the RoCE frames the engine
// itself sends out of the port.
TEST(RawPacketWire, SnifferSeesTheRoceFramesThePortSends) {
  const char* dev_name = std::getenv("UROCE_RAW_WIRE_DEVICE");
  const char* peer = std::getenv("UROCE_RAW_WIRE_PEER");
  if (!dev_name || !peer) GTEST_SKIP() << "needs an engine with a wire port";
  in_addr peer_ip{};
  ASSERT_EQ(inet_pton(AF_INET, peer, &peer_ip), 1);
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  ibv_context* ctx = nullptr;
  for (int i = 0; list && i < n && !ctx; ++i)
    if (std::strcmp(ibv_get_device_name(list[i]), dev_name) == 0) ctx = ibv_open_device(list[i]);
  if (list) ibv_free_device_list(list);
  ASSERT_NE(ctx, nullptr);
  ibv_pd* pd = ibv_alloc_pd(ctx);
  ibv_cq* cq = ibv_create_cq(ctx, 64, nullptr, nullptr, 0);
  std::vector<uint8_t> buf(16 * kFrameBuf);
  ibv_mr* mr = ibv_reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(pd && cq && mr);
  ibv_qp_init_attr init{};
  init.send_cq = init.recv_cq = cq;
  init.qp_type = IBV_QPT_RAW_PACKET;
  init.cap = {8, 8, 1, 1, 0};
  ibv_qp* sniffer = ibv_create_qp(pd, &init);
  init.qp_type = IBV_QPT_UD;
  ibv_qp* ud = ibv_create_qp(pd, &init);
  ASSERT_TRUE(sniffer && ud);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  ASSERT_EQ(ibv_modify_qp(sniffer, &a, IBV_QP_STATE | IBV_QP_PORT), 0);
  a.qkey = 0x11111111;
  ASSERT_EQ(ibv_modify_qp(ud, &a, IBV_QP_STATE | IBV_QP_PORT | IBV_QP_PKEY_INDEX | IBV_QP_QKEY), 0);
  for (ibv_qp* q : {sniffer, ud}) {
    a.qp_state = IBV_QPS_RTR;
    ASSERT_EQ(ibv_modify_qp(q, &a, IBV_QP_STATE), 0);
    a.qp_state = IBV_QPS_RTS;
    ASSERT_EQ(ibv_modify_qp(q, &a, q == ud ? IBV_QP_STATE | IBV_QP_SQ_PSN : IBV_QP_STATE), 0);
  }
  for (uint64_t i = 0; i < 8; ++i) {
    ibv_sge sge{uint64_t(uintptr_t(buf.data() + (i + 1) * kFrameBuf)), kFrameBuf, mr->lkey};
    ibv_recv_wr wr{}, *bad;
    wr.wr_id = i + 1;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ASSERT_EQ(ibv_post_recv(sniffer, &wr, &bad), 0);
  }
  ibv_flow_attr sniff{};
  sniff.type = IBV_FLOW_ATTR_SNIFFER;
  sniff.size = sizeof(sniff);
  sniff.port = 1;
  ibv_flow* flow = ibv_create_flow(sniffer, &sniff);
  ASSERT_NE(flow, nullptr) << std::strerror(errno);
  // A UD datagram to the other engine (QPN 0x123 need not exist there).
  ibv_ah_attr av{};
  av.is_global = 1;
  av.port_num = 1;
  av.grh.hop_limit = 64;
  av.grh.dgid.raw[10] = av.grh.dgid.raw[11] = 0xff;
  std::memcpy(av.grh.dgid.raw + 12, &peer_ip, 4);
  ibv_ah* ah = ibv_create_ah(pd, &av);
  ASSERT_NE(ah, nullptr);
  ibv_sge sge{uint64_t(uintptr_t(buf.data())), 64, mr->lkey};
  ibv_send_wr wr{}, *bad;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.ud.ah = ah;
  wr.wr.ud.remote_qpn = 0x123;
  wr.wr.ud.remote_qkey = 0x11111111;
  ASSERT_EQ(ibv_post_send(ud, &wr, &bad), 0);
  // The sniffer's copy: the RoCE frame (UDP 4791) to the peer's address.
  bool seen = false;
  const auto deadline = deadline_after(kWaitSeconds);
  while (!seen && Clock::now() < deadline) {
    ibv_wc wc;
    if (ibv_poll_cq(cq, 1, &wc) != 1 || wc.opcode != IBV_WC_RECV) continue;
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    const uint8_t* f = buf.data() + wc.wr_id * kFrameBuf;
    seen = wc.byte_len > 38 && f[12] == 0x08 && f[13] == 0x00 && std::memcmp(f + 30, &peer_ip, 4) == 0 &&
           f[36] == 0x12 && f[37] == 0xb7;
  }
  EXPECT_TRUE(seen) << "the sniffer got no copy of the UD frame to " << peer;
  EXPECT_EQ(ibv_destroy_flow(flow), 0);
  ibv_destroy_ah(ah);
  ibv_destroy_qp(ud);
  ibv_destroy_qp(sniffer);
  ibv_dereg_mr(mr);
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
}

}  // namespace
}  // namespace vt
