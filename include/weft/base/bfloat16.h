// bfloat16: the upper 16 bits of an IEEE float32 (8-bit exponent, 7-bit
// mantissa). Storage type only: arithmetic converts to float32.
#pragma once

#include <cstdint>
#include <cstring>

namespace weft {

struct bf16 {
  uint16_t bits = 0;

  bf16() = default;
  explicit bf16(float x) : bits(FromFloatBits(x)) {}
  explicit operator float() const { return ToFloat(bits); }

  static bf16 FromBits(uint16_t b) {
    bf16 r;
    r.bits = b;
    return r;
  }

  // Round to nearest, ties to even. NaN stays NaN (its payload's top bits are
  // kept and the quiet bit set, so rounding can never turn it into infinity).
  static uint16_t FromFloatBits(float x) {
    uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(u >> 16);
  }
  static float ToFloat(uint16_t b) {
    uint32_t u = static_cast<uint32_t>(b) << 16;
    float x;
    std::memcpy(&x, &u, sizeof x);
    return x;
  }
};
static_assert(sizeof(bf16) == 2, "bf16 must be 2 bytes: it is used to view uint16_t buffers");

inline float ToFloat(bf16 x) { return bf16::ToFloat(x.bits); }
inline float ToFloat(float x) { return x; }

}  // namespace weft
