#include "net/toeplitz.h"

#ifdef UROCE_HAVE_DPDK
#include <rte_thash.h>
#endif

namespace uroce::net {

uint32_t toeplitz_hash(const uint8_t* key, const uint8_t* input, size_t len) {
#ifdef UROCE_HAVE_DPDK
  // rte_softrss takes the tuple as host-order 32-bit words.
  uint32_t words[kToeplitzKeyBytes / 4];
  const size_t n = len / 4;
  for (size_t i = 0; i < n; ++i)
    words[i] = uint32_t(input[4 * i]) << 24 | uint32_t(input[4 * i + 1]) << 16 |
               uint32_t(input[4 * i + 2]) << 8 | input[4 * i + 3];
  return rte_softrss(words, uint32_t(n), key);
#else
  // For each set bit of the input, XOR in the 32 key bits starting there.
  uint32_t result = 0;
  uint64_t window = uint64_t(key[0]) << 24 | uint64_t(key[1]) << 16 | uint64_t(key[2]) << 8 | key[3];
  for (size_t i = 0; i < len; ++i) {
    const uint8_t next = i + 4 < kToeplitzKeyBytes ? key[i + 4] : 0;
    for (int b = 7; b >= 0; --b) {
      if (input[i] >> b & 1) result ^= uint32_t(window);
      window = (window << 1) | ((next >> b) & 1);
    }
  }
  return result;
#endif
}

}  // namespace uroce::net
