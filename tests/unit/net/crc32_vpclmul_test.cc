// Tests for net/crc32_vpclmul.cc: the 256-bit fold against ISA-L's CRC-32
// (the function it stands in for) and zlib's, with running values, over the
// lengths around its block and switch-over sizes and every alignment of a
// 32-byte load. Skipped on a CPU without VPCLMULQDQ and AVX2.
#include "net/crc32_vpclmul.h"

#include <gtest/gtest.h>
#include <isa-l/crc.h>
#include <zlib.h>

#include <random>
#include <vector>

namespace uroce::net {
namespace {

class Crc32Fold256 : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!crc32_fold256_supported()) GTEST_SKIP() << "this CPU lacks AVX2 or VPCLMULQDQ";
    buf_.resize(10000 + 32);
    std::mt19937 rng(28);
    for (uint8_t& b : buf_) b = uint8_t(rng());
  }
  std::vector<uint8_t> buf_;
};

TEST_F(Crc32Fold256, MatchesIsaLAndZlibOverLengthsAndAlignments) {
  for (size_t len = 0; len <= 1200; ++len) {
    for (size_t off = 0; off < 32; off += (len < 300 ? 1 : 7)) {
      const uint8_t* d = buf_.data() + off;
      const uint32_t want = uint32_t(crc32_z(0, d, len));
      ASSERT_EQ(crc32_fold256(0, d, len), want) << len << " at +" << off;
      ASSERT_EQ(crc32_gzip_refl(0, d, len), want) << len << " at +" << off;
    }
  }
  for (size_t len : {size_t(4096), size_t(4160), size_t(8192), size_t(9000), size_t(10000)})
    ASSERT_EQ(crc32_fold256(0, buf_.data() + 3, len), uint32_t(crc32_z(0, buf_.data() + 3, len))) << len;
}

// The ICRC goes on from the pseudo header's CRC: any running value.
TEST_F(Crc32Fold256, GoesOnFromAnyRunningValue) {
  std::mt19937 rng(4791);
  for (int i = 0; i < 2000; ++i) {
    const uint32_t init = uint32_t(rng());
    const size_t len = 200 + rng() % 5000;
    const uint8_t* d = buf_.data() + rng() % 32;
    ASSERT_EQ(crc32_fold256(init, d, len), crc32_gzip_refl(init, d, len)) << init << " over " << len;
  }
  // Split anywhere, the two calls give the CRC of the whole.
  const uint32_t whole = uint32_t(crc32_z(0, buf_.data(), 6000));
  for (size_t cut : {size_t(0), size_t(48), size_t(255), size_t(256), size_t(1000), size_t(5999)})
    ASSERT_EQ(crc32_fold256(crc32_fold256(0, buf_.data(), cut), buf_.data() + cut, 6000 - cut), whole) << cut;
}

TEST_F(Crc32Fold256, OneFlippedBitAnywhereChangesIt) {
  const size_t len = 4160;
  const uint32_t before = crc32_fold256(0, buf_.data(), len);
  for (size_t bit = 0; bit < len * 8; bit += 13) {
    buf_[bit / 8] ^= uint8_t(1u << (bit % 8));
    ASSERT_NE(crc32_fold256(0, buf_.data(), len), before) << "bit " << bit;
    buf_[bit / 8] ^= uint8_t(1u << (bit % 8));
  }
}

}  // namespace
}  // namespace uroce::net
