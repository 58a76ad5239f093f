// Internal to shape inference (shape_inference.cc): the rules that live in
// files of their own.
#pragma once

#include "weft/hlo/instruction.h"

namespace weft::hlo {

// rng(a, b), distribution=...: scalars a, b of the declared result's type
// (and a tile's starts, RngTileOf).
Shape InferRng(const HloInstruction& instr);
// rng-bit-generator(state): (state, bits), state u64[2] (u64[3] for philox)
// (and a tile's starts, RngTileOf).
Shape InferRngBitGenerator(const HloInstruction& instr);
// convolution(lhs, rhs), window=, dim_labels=, feature_group_count=,
// batch_group_count= (shape_inference_convolution.cc).
Shape InferConvolution(const HloInstruction& instr);
// The number of positions a window dim takes over a base of `base` elements
// (XLA's window output size; padding may be negative, 0 when the padded,
// dilated base is shorter than the dilated window).
int64_t WindowOutputSize(int64_t base, const WindowDim& w);

}  // namespace weft::hlo
