// The Toeplitz hash against Microsoft's published RSS verification suite
// ("Verifying the RSS Hash Calculation"; also Intel's 82599 datasheet
// 7.1.2.8.3 and DPDK app/test/test_thash.c): IPv4 and IPv6, with and
// without the TCP ports, under the suite's key.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "net/toeplitz.h"

namespace uroce::net {
namespace {

constexpr uint8_t kKey[kToeplitzKeyBytes] = {
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3,
    0x8f, 0xb0, 0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3,
    0x80, 0x30, 0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa};

struct Vector {
  std::vector<uint8_t> src, dst;  // addresses, network order
  uint16_t src_port, dst_port;
  uint32_t hash_ip, hash_ip_ports;
};

std::vector<uint8_t> v6(std::initializer_list<uint8_t> b) { return b; }

const Vector kVectors[] = {
    // IPv4: source, destination as the suite lists them.
    {{66, 9, 149, 187}, {161, 142, 100, 80}, 2794, 1766, 0x323e8fc2, 0x51ccc178},
    {{199, 92, 111, 2}, {65, 69, 140, 83}, 14230, 4739, 0xd718262a, 0xc626b0ea},
    {{24, 19, 198, 95}, {12, 22, 207, 184}, 12898, 38024, 0xd2d0a5de, 0x5c2b394a},
    {{38, 27, 205, 30}, {209, 142, 163, 6}, 48228, 2217, 0x82989176, 0xafc7327f},
    {{153, 39, 163, 191}, {202, 188, 127, 2}, 44251, 1303, 0x5d1809c5, 0x10e828a2},
    // IPv6: 3ffe:2501:200:1fff::7 -> 3ffe:2501:200:3::1
    {v6({0x3f, 0xfe, 0x25, 0x01, 0x02, 0x00, 0x1f, 0xff, 0, 0, 0, 0, 0, 0, 0, 0x07}),
     v6({0x3f, 0xfe, 0x25, 0x01, 0x02, 0x00, 0x00, 0x03, 0, 0, 0, 0, 0, 0, 0, 0x01}), 2794, 1766, 0x2cc18cd5,
     0x40207d3d},
    // 3ffe:501:8::260:97ff:fe40:efab -> ff02::1
    {v6({0x3f, 0xfe, 0x05, 0x01, 0x00, 0x08, 0, 0, 0x02, 0x60, 0x97, 0xff, 0xfe, 0x40, 0xef, 0xab}),
     v6({0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01}), 14230, 4739, 0x0f0c461c, 0xdde51bbf},
    // 3ffe:1900:4545:3:200:f8ff:fe21:67cf -> fe80::200:f8ff:fe21:67cf
    {v6({0x3f, 0xfe, 0x19, 0x00, 0x45, 0x45, 0x00, 0x03, 0x02, 0x00, 0xf8, 0xff, 0xfe, 0x21, 0x67, 0xcf}),
     v6({0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x00, 0xf8, 0xff, 0xfe, 0x21, 0x67, 0xcf}), 44251, 38024,
     0x4b61e985, 0x02d1feef},
};

TEST(Toeplitz, MicrosoftVerificationSuite) {
  for (const Vector& v : kVectors) {
    std::vector<uint8_t> in(v.src);
    in.insert(in.end(), v.dst.begin(), v.dst.end());
    EXPECT_EQ(toeplitz_hash(kKey, in.data(), in.size()), v.hash_ip) << "addresses only, " << v.src.size() * 8 << " bits";
    in.insert(in.end(), {uint8_t(v.src_port >> 8), uint8_t(v.src_port), uint8_t(v.dst_port >> 8), uint8_t(v.dst_port)});
    EXPECT_EQ(toeplitz_hash(kKey, in.data(), in.size()), v.hash_ip_ports) << "with ports";
  }
}

TEST(Toeplitz, EmptyInputHashesToZero) { EXPECT_EQ(toeplitz_hash(kKey, nullptr, 0), 0u); }

}  // namespace
}  // namespace uroce::net
