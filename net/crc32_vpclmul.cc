#include "net/crc32_vpclmul.h"

#include <immintrin.h>
#include <isa-l/crc.h>

namespace uroce::net {

namespace {

// Folding (Intel, "Fast CRC Computation for Generic Polynomials Using
// PCLMULQDQ", 2009, its bit-reflected form): a 128-bit lane A of the message
// followed by D bits more is worth, modulo the polynomial P, the 96-bit sum
// A.lo64 * (x^(D+32) mod P) + A.hi64 * (x^(D-32) mod P) placed D bits on, so
// eight lanes fold over the next 1024 bits with two multiplies each. The
// constants are made here from P rather than copied (reflected, shifted one
// left as the reflected product needs); two are checked against ISA-L's.
constexpr uint64_t kPoly = 0x104c11db7;  // x^32 + ... + 1, IEEE 802.3

constexpr uint32_t x_pow_mod_p(unsigned n) {
  uint64_t r = 1;
  for (unsigned i = 0; i < n; ++i) {
    r <<= 1;
    if (r & (uint64_t(1) << 32)) r ^= kPoly;
  }
  return uint32_t(r);
}

constexpr uint32_t reflect32(uint32_t v) {
  uint32_t r = 0;
  for (int i = 0; i < 32; ++i)
    if ((v >> i) & 1) r |= 1u << (31 - i);
  return r;
}

constexpr uint64_t fold_constant(unsigned exponent) { return uint64_t(reflect32(x_pow_mod_p(exponent))) << 1; }

// ISA-L's rk1 and rk2 (crc32_gzip_refl_by8.asm), the 128-bit fold.
static_assert(fold_constant(128 - 32) == 0x0ccaa009e);
static_assert(fold_constant(128 + 32) == 0x1751997d0);

constexpr unsigned kLaneBytes = 16;
constexpr unsigned kBlockBytes = 128;  // four 256-bit accumulators, eight lanes

#define UROCE_FOLD_TARGET __attribute__((target("avx2,pclmul,vpclmulqdq")))

// Each 128-bit half of acc folded over `k`'s distance onto `data`.
UROCE_FOLD_TARGET inline __m256i fold256(__m256i acc, __m256i k, __m256i data) {
  const __m256i lo = _mm256_clmulepi64_epi128(acc, k, 0x00);
  const __m256i hi = _mm256_clmulepi64_epi128(acc, k, 0x11);
  return _mm256_xor_si256(_mm256_xor_si256(lo, hi), data);
}

UROCE_FOLD_TARGET inline __m128i fold128(__m128i acc, __m128i k, __m128i data) {
  const __m128i lo = _mm_clmulepi64_si128(acc, k, 0x00);
  const __m128i hi = _mm_clmulepi64_si128(acc, k, 0x11);
  return _mm_xor_si128(_mm_xor_si128(lo, hi), data);
}

UROCE_FOLD_TARGET inline __m256i load256(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

}  // namespace

bool crc32_fold256_supported() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("pclmul") &&
         __builtin_cpu_supports("vpclmulqdq");
}

UROCE_FOLD_TARGET uint32_t crc32_fold256(uint32_t init, const uint8_t* p, size_t len) {
  // Below two blocks the folding does not pay for its reduction.
  if (len < 2 * kBlockBytes) return crc32_gzip_refl(init, p, len);

  // gzip's CRC starts from ~init: that goes over the message's first four
  // bytes, after which the CRC of the rest starts from zero.
  __m256i a0 = _mm256_xor_si256(load256(p), _mm256_set_epi32(0, 0, 0, 0, 0, 0, 0, int(~init)));
  __m256i a1 = load256(p + 32);
  __m256i a2 = load256(p + 64);
  __m256i a3 = load256(p + 96);
  p += kBlockBytes;
  len -= kBlockBytes;

  // _mm256_set_epi64x lists the highest quadword first: per lane, the low
  // half's constant, then the high half's.
  const __m256i k1024 = _mm256_set_epi64x(int64_t(fold_constant(1024 - 32)), int64_t(fold_constant(1024 + 32)),
                                          int64_t(fold_constant(1024 - 32)), int64_t(fold_constant(1024 + 32)));
  while (len >= kBlockBytes) {
    a0 = fold256(a0, k1024, load256(p));
    a1 = fold256(a1, k1024, load256(p + 32));
    a2 = fold256(a2, k1024, load256(p + 64));
    a3 = fold256(a3, k1024, load256(p + 96));
    p += kBlockBytes;
    len -= kBlockBytes;
  }

  // The eight lanes, in message order, folded into the last one.
  const __m128i k128 = _mm_set_epi64x(int64_t(fold_constant(128 - 32)), int64_t(fold_constant(128 + 32)));
  __m128i r = _mm256_castsi256_si128(a0);
  r = fold128(r, k128, _mm256_extracti128_si256(a0, 1));
  r = fold128(r, k128, _mm256_castsi256_si128(a1));
  r = fold128(r, k128, _mm256_extracti128_si256(a1, 1));
  r = fold128(r, k128, _mm256_castsi256_si128(a2));
  r = fold128(r, k128, _mm256_extracti128_si256(a2, 1));
  r = fold128(r, k128, _mm256_castsi256_si128(a3));
  r = fold128(r, k128, _mm256_extracti128_si256(a3, 1));

  // r is congruent to everything read so far, from a zero CRC: ISA-L
  // reduces it (started from ~0, which is zero inside) and goes on over the
  // bytes left.
  alignas(16) uint8_t folded[kLaneBytes];
  _mm_store_si128(reinterpret_cast<__m128i*>(folded), r);
  const uint32_t crc = crc32_gzip_refl(~0u, folded, kLaneBytes);
  return crc32_gzip_refl(crc, p, len);
}

}  // namespace uroce::net
