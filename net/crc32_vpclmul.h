// CRC-32 of IEEE 802.3 (gzip's: reflected, inverted in and out) folded 256
// bits at a time with VPCLMULQDQ on CPUs that have it without AVX-512 (AMD
// Zen 3 and 4's 256-bit form, Intel's since Ice Lake). ISA-L 2.30, Debian
// 12's, folds 128 bits at a time on those and uses the wide instruction only
// with AVX-512; the ICRC reads every byte of every frame twice (sent, then
// received), so the width is worth having.
#pragma once

#include <cstddef>
#include <cstdint>

namespace uroce::net {

// Whether this CPU runs crc32_fold256 (AVX2 and VPCLMULQDQ).
bool crc32_fold256_supported();

// ISA-L's crc32_gzip_refl(init, data, len): a running CRC-32 (0 to start, a
// previous result to go on). The bulk is folded here, the last 16 to 143
// bytes go through ISA-L. Only where crc32_fold256_supported().
uint32_t crc32_fold256(uint32_t init, const uint8_t* data, size_t len);

}  // namespace uroce::net
