// Big-endian field types that convert themselves, so wire headers are plain
// packed structs without a getter/setter pair per field.
#pragma once

#include <cstdint>
#include <type_traits>

namespace uroce::net {

template <typename T>
class Be {
  static_assert(std::is_unsigned_v<T>);

 public:
  Be() = default;
  constexpr Be(T host) : raw_(swap(host)) {}  // NOLINT: implicit by design
  constexpr operator T() const { return swap(raw_); }
  constexpr T raw() const { return raw_; }

 private:
  static constexpr T swap(T v) {
    if constexpr (sizeof(T) == 1) return v;
    else if constexpr (sizeof(T) == 2) return __builtin_bswap16(v);
    else if constexpr (sizeof(T) == 4) return __builtin_bswap32(v);
    else return __builtin_bswap64(v);
  }
  T raw_;
} __attribute__((packed));

using be16 = Be<uint16_t>;
using be32 = Be<uint32_t>;
using be64 = Be<uint64_t>;
static_assert(sizeof(be64) == 8 && alignof(be64) == 1);

}  // namespace uroce::net
