// Shape inference: the result shape of an instruction from its operands,
// attributes and called computations, following XLA's rules per opcode
// (xla/service/shape_inference.cc). The verifier compares it against the
// declared shape; the builder uses it to fill the shape in.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "weft/hlo/instruction.h"

namespace weft {

// Returns the shape `instr` must have. Where the operands do not determine the
// result (parameter, constant, iota, broadcast, reshape, custom-call; the
// element type of convert and dot; all-gather/reduce-scatter without replica
// groups) the declared `instr.shape()` supplies the missing part and is
// checked against what the operands do determine. Throws weft::Error saying
// what is inconsistent (the caller adds which instruction).
Shape InferHloShape(const HloInstruction& instr);

// Checks `groups` (replica_groups) are disjoint, non-negative, of one size.
// Returns that size (0 for "all devices", i.e. no groups).
int64_t ReplicaGroupSize(const std::vector<std::vector<int64_t>>& groups);

}  // namespace weft
