// Internal to shape inference (shape_inference.cc): the rules that live in
// files of their own.
#pragma once

#include "weft/hlo/instruction.h"

namespace weft::shape_inference_internal {

// rng(a, b), distribution=...: scalars a, b of the declared result's type
// (and a tile's starts, RngTileOf).
Shape InferRng(const HloInstruction& instr);
// rng-bit-generator(state): (state, bits), state u64[2] (u64[3] for philox)
// (and a tile's starts, RngTileOf).
Shape InferRngBitGenerator(const HloInstruction& instr);

}  // namespace weft::shape_inference_internal
