// The Toeplitz hash of receive side scaling (Microsoft's RSS specification,
// "Verifying the RSS Hash Calculation"; mlx5 computes it in hardware for
// IBV_RX_HASH_FUNC_TOEPLITZ). DPDK's rte_softrss when uroce is built with
// DPDK, else the same loop written out.
#pragma once

#include <cstddef>
#include <cstdint>

namespace uroce::net {

constexpr size_t kToeplitzKeyBytes = 40;  // mlx5: rx_hash_key_len must be 40

// The hash of `input` (network byte order fields, a multiple of 4 bytes and
// at most kToeplitzKeyBytes - 4 bytes) under a 40-byte key.
uint32_t toeplitz_hash(const uint8_t* key, const uint8_t* input, size_t len);

}  // namespace uroce::net
