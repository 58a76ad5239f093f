// Internal: the element-wise reduction both communicator backends use, so a
// reduction gives the same bits whichever backend moved the data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "weft/runtime/communicator.h"

namespace weft::runtime {

// out[k] = inputs[0][k] op inputs[1][k] op ... op inputs[n-1][k], combined
// left to right. Floats: float32 arithmetic; bfloat16 accumulates in float32
// and rounds once to nearest-even at the end; max/min propagate NaN.
// Integers wrap on overflow. `out` may equal one of the inputs exactly.
void ReduceBuffers(PrimitiveType dtype, ReduceOp op, const std::byte* const* inputs, int64_t n,
                   std::byte* out, int64_t count);

// bfloat16 <-> float32 (round to nearest even; NaN stays NaN).
inline float Bf16ToFloat(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &wide, sizeof(value));
  return value;
}
inline uint16_t FloatToBf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  const uint32_t rounded = (bits + rounding) >> 16;
  // A NaN keeps its sign and payload's top bits, made quiet (no branch: the
  // loops that call this vectorize).
  const uint32_t nan = (bits >> 16) | 0x40u;
  return static_cast<uint16_t>((bits & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

}  // namespace weft::runtime
