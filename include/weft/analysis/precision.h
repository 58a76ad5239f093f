// The precision policy the planner counts bytes under. The compiled step is
// float32 (what weft's CPU executor runs); a policy says how its buffers
// would be stored on the target:
//
//   bf16  floating-point program buffers (weights, gradients, activations,
//         collectives) at 2 bytes per element; optimizer state outside the
//         program = float32 master weights + AdamW m + v = 12 bytes per local
//         parameter element. 16 bytes per parameter in all with the weights
//         and gradients: the usual mixed-precision recipe.
//   f32   what `weft train` really does: program buffers at 4 bytes, optimizer
//         state = m + v = 8 bytes per local parameter element (the f32
//         weights are the program's own inputs).
//
// Integer and pred buffers keep their size under both.
#pragma once

#include <cstdint>
#include <string_view>

#include "weft/hlo/shape.h"

namespace weft::analysis {

enum class Precision { kBf16, kF32 };

std::string_view PrecisionName(Precision precision);  // "bf16", "f32"
// "bf16" | "f32"; throws weft::Error naming `what` (e.g. "--precision").
Precision ParsePrecision(std::string_view text, std::string_view what);

// Bytes of one element of `type` under the policy.
int64_t ElementBytes(PrimitiveType type, Precision precision);
// Bytes of an array (or the sum over a tuple's leaves) under the policy.
int64_t PlannedBytes(const Shape& shape, Precision precision);
// Optimizer state bytes per parameter element held outside the program.
int64_t OptimizerBytesPerElement(Precision precision);

}  // namespace weft::analysis
