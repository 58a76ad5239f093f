// XLA's ragged-dot: a dot whose lhs has one ragged dim cut into g groups of
// consecutive rows by a group_sizes operand (MoE layers: the tokens routed
// to each expert). Three modes, by what the ragged dim is:
//   non-contracting  [b,m,k] x [g,b,k,n], sizes [b,g] -> [b,m,n]: row i of m
//                    in group j is multiplied by rhs group j (the rhs group
//                    dim, rhs_group_dims, is not in the result); rows past
//                    the groups' total are 0.
//   contracting      [b,m,k] x [b,k,n], sizes [b,g] -> [g,b,m,n]: result j
//                    contracts group j's stretch of k only.
//   batch            [b,m,k] x [b,k,n], sizes [g] -> [b,m,n]: the dot.
// group_sizes is [p..., g], p... the prefix dims of the lhs (RaggedDotPrefix),
// or [g] for all of them alike. Shapes: InferHloShape (shape_inference.cc).
#pragma once

#include <cstdint>
#include <vector>

#include "weft/hlo/instruction.h"

namespace weft {

enum class RaggedDotMode { kNonContracting, kContracting, kBatch };

// The mode of a ragged-dot (its lhs_ragged_dims must hold one dim).
RaggedDotMode RaggedDotModeOf(const HloInstruction& ragged_dot);

// The lhs dims that index group_sizes ahead of its group dim, in order: the
// lhs batch dims (in batch mode, those listed before the ragged dim), then
// the lhs non-contracting dims before the ragged dim (in contracting mode:
// the contracting dims listed before it).
std::vector<int64_t> RaggedDotPrefix(const HloInstruction& ragged_dot);

}  // namespace weft
