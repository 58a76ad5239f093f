// Internal: the element-wise reduction both communicator backends use, so a
// reduction gives the same bits whichever backend moved the data.
#pragma once

#include <cstddef>
#include <cstdint>

#include "weft/runtime/communicator.h"

namespace weft::runtime {

// out[k] = inputs[0][k] op inputs[1][k] op ... op inputs[n-1][k], combined
// left to right. Floats: float32 arithmetic; bfloat16 accumulates in float32
// and rounds once to nearest-even at the end; max/min propagate NaN.
// Integers wrap on overflow. `out` may equal one of the inputs exactly.
void ReduceBuffers(PrimitiveType dtype, ReduceOp op, const std::byte* const* inputs, int64_t n,
                   std::byte* out, int64_t count);

// bfloat16 <-> float32 (round to nearest even; NaN stays NaN).
float Bf16ToFloat(uint16_t bits);
uint16_t FloatToBf16(float value);

}  // namespace weft::runtime
