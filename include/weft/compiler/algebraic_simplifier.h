// Rewrites of a per-device program that change no value but make it cheaper
// to run, as XLA's AlgebraicSimplifier does after partitioning. One rule so
// far:
//
//   transpose(x) whose permutation keeps the dimensions larger than 1 in
//   their order moves no element: it becomes reshape(x) (the same bytes
//   under another shape; the executor, the fusion pass and the buffer
//   assignment treat a reshape as a view). A permutation that keeps every
//   dimension in place makes the transpose's users read x itself.
//
// Partitioning makes such transposes: a head dimension split down to one
// head per device turns attention's [b, s, h, d] <-> [b, h, s, d]
// transposes into [b, s, 1, d] <-> [b, 1, s, d] (tiny's two KV heads on a
// tensor axis of 2), a whole copy of the tensor each without this rule.
#pragma once

#include <cstdint>

#include "weft/hlo/module.h"

namespace weft::compiler {

struct AlgebraicSimplifierStats {
  int64_t transposes_to_reshapes = 0;  // transposes that became reshapes
  int64_t transposes_removed = 0;      // identity transposes, their users now read the operand
};

// Whether transposing `dims` by `permutation` (result dimension i is operand
// dimension permutation[i]) keeps the elements in row-major order.
bool TransposeKeepsOrder(const std::vector<int64_t>& dims, const std::vector<int64_t>& permutation);

// Rewrites every computation of `module` in place.
AlgebraicSimplifierStats SimplifyAlgebra(HloModule& module);

}  // namespace weft::compiler
