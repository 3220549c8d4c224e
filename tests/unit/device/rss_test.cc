// RSS (device/rss.cc): the hash input taken from a parsed frame in mlx5's
// field order, checked end to end against Microsoft's verification vector,
// and ibv_create_qp_ex's RSS checks as mlx5 makes them (the kernel's
// drivers/infiniband/hw/mlx5/qp.c, create_rss_raw_qp_tir).
#include <gtest/gtest.h>

#include <cerrno>
#include <vector>

#include "device/work_queue.h"

namespace uroce::device {
namespace {

constexpr uint8_t kKey[net::kToeplitzKeyBytes] = {
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3,
    0x8f, 0xb0, 0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3,
    0x80, 0x30, 0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa};

// 66.9.149.187:2794 -> 161.142.100.80:1766 over `proto` (6 TCP, 17 UDP),
// with an 802.1Q tag if tagged.
std::vector<uint8_t> frame(uint8_t proto, bool tagged = false) {
  std::vector<uint8_t> f = {2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2};
  if (tagged) f.insert(f.end(), {0x81, 0x00, 0x00, 0x05});
  f.insert(f.end(), {0x08, 0x00, 0x45, 0, 0, 40, 0, 0, 0, 0, 64, proto, 0, 0, 66, 9, 149, 187, 161, 142, 100, 80});
  f.insert(f.end(), {0x0a, 0xea, 0x06, 0xe6});  // ports 2794, 1766
  f.resize(f.size() + 20);
  return f;
}

uint32_t hash_of(const std::vector<uint8_t>& f, uint64_t fields) {
  const net::FrameFields ff = net::frame_fields(f.data(), f.size());
  uint8_t in[net::kToeplitzKeyBytes];
  const size_t n = rss_hash_input(ff, fields, in);
  return n ? net::toeplitz_hash(kKey, in, n) : 0;
}

TEST(Rss, HashInputFollowsTheFieldOrder) {
  const uint64_t ip = IBV_RX_HASH_SRC_IPV4 | IBV_RX_HASH_DST_IPV4;
  const uint64_t tcp = IBV_RX_HASH_SRC_PORT_TCP | IBV_RX_HASH_DST_PORT_TCP;
  const uint64_t udp = IBV_RX_HASH_SRC_PORT_UDP | IBV_RX_HASH_DST_PORT_UDP;
  EXPECT_EQ(hash_of(frame(6), ip), 0x323e8fc2u);
  EXPECT_EQ(hash_of(frame(6), ip | tcp), 0x51ccc178u);
  EXPECT_EQ(hash_of(frame(17), ip | udp), 0x51ccc178u);
  EXPECT_EQ(hash_of(frame(6, true), ip | tcp), 0x51ccc178u) << "the tag is not hashed";
  // Fields the frame lacks are left out (what mlx5 does is not public: the
  // Microsoft RSS hash over the selected fields present).
  EXPECT_EQ(hash_of(frame(17), ip | tcp), 0x323e8fc2u);
  EXPECT_EQ(hash_of(frame(6), IBV_RX_HASH_SRC_IPV6), 0u);
}

TEST(Rss, EntryIsTheLowBits) {
  EXPECT_EQ(rss_entry(0x51ccc178, 3), 0u);
  EXPECT_EQ(rss_entry(0x323e8fc2, 3), 2u);
  EXPECT_EQ(rss_entry(0x323e8fc2, 0), 0u);
}

TEST(Rss, ChecksAsMlx5) {
  const uint64_t ip4 = IBV_RX_HASH_SRC_IPV4 | IBV_RX_HASH_DST_IPV4;
  struct Case {
    uint64_t fields;
    uint32_t function, key_len, log_size;
    int err;
  } cases[] = {
      {ip4, IBV_RX_HASH_FUNC_TOEPLITZ, 40, 3, 0},
      {ip4, IBV_RX_HASH_FUNC_TOEPLITZ, 39, 3, EINVAL},
      {ip4, 2, 40, 3, EOPNOTSUPP},
      {0, IBV_RX_HASH_FUNC_TOEPLITZ, 40, 0, 0},
      {0, IBV_RX_HASH_FUNC_TOEPLITZ, 40, 1, EINVAL},
      {ip4 | IBV_RX_HASH_SRC_IPV6, IBV_RX_HASH_FUNC_TOEPLITZ, 40, 3, EINVAL},
      {ip4 | IBV_RX_HASH_SRC_PORT_TCP | IBV_RX_HASH_DST_PORT_UDP, IBV_RX_HASH_FUNC_TOEPLITZ, 40, 3, EINVAL},
      {ip4 | IBV_RX_HASH_INNER, IBV_RX_HASH_FUNC_TOEPLITZ, 40, 3, EOPNOTSUPP},
      {ip4 | IBV_RX_HASH_IPSEC_SPI, IBV_RX_HASH_FUNC_TOEPLITZ, 40, 3, EOPNOTSUPP},
  };
  for (const Case& c : cases)
    EXPECT_EQ(check_rss(c.fields, c.function, c.key_len, c.log_size), c.err) << std::hex << c.fields;
}

}  // namespace
}  // namespace uroce::device
