// Expands XLA's block-scaled dots (hlo/block_scaled_dot.h) into the ops the
// executor runs, as XLA's BlockScalingRewriter does where no library kernel
// takes them: each quantized operand is converted to the result's element
// type and multiplied by its scales, each scale broadcast over its block
// (broadcast [.., Ks] to [.., Ks, block], reshape to [.., Ks*block], slice
// to K when the scales are padded), then one dot contracts the minor dims
// (batch dim 0 at rank 3). The partitioner has already split the call, so
// the expansion sees each device's local shapes.
#pragma once

#include <cstdint>

#include "weft/hlo/module.h"

namespace weft::compiler {

// Returns the number of block-scaled dots expanded.
int64_t ExpandBlockScaledDots(HloModule& module);

}  // namespace weft::compiler
