// XLA's block-scaled dot, the matmul of the OCP Microscaling (MX) formats:
//
//   r = f32[B,M,N] custom-call(lhs, rhs, lhs_scale, rhs_scale),
//       custom_call_target="__op$block_scaled_dot"
//
// lhs [B,M,K] and rhs [B,N,K] (B absent for rank 2) hold the elements,
// usually f8e4m3fn; lhs_scale [B,M,Ks] and rhs_scale [B,N,Ks] one scale per
// block of K/Ks consecutive elements of the contracting dim (the minor
// one), usually f8e8m0fnu. rhs_scale may be absent (rhs not quantized: 3
// operands). The result is dot(lhs * lhs_scale, rhs * rhs_scale), each scale
// repeated over its block, contracting the minor dims and batching dim 0 of
// rank-3 operands (XLA's BlockScalingRewriter). A backend_config
// {"block_scaled_dot_backend_config":{block_size:32}} fixes the block size,
// and the scales may then be padded (Ks * block >= K; the extra is ignored).
//
// The SPMD partitioner partitions it as that dot, each scale split as its
// operand is (spmd_partitioner_dot.cc); the compiler expands it into
// convert, multiply and dot for the executor (compiler/block_scaled_dot.h).
#pragma once

#include <cstdint>

#include "weft/hlo/instruction.h"
#include "weft/hlo/module.h"

namespace weft {

inline constexpr const char* kBlockScaledDotTarget = "__op$block_scaled_dot";

// Whether `instr` is a block-scaled dot custom call.
bool IsBlockScaledDot(const HloInstruction& instr);

// Whether any computation of `module` holds one.
bool HasBlockScaledDot(const HloModule& module);

// Throws weft::Error naming the instruction unless its operands and result
// have the shapes above.
void CheckBlockScaledDot(const HloInstruction& instr);

// The dot it computes: contracting the minor dims, batch dim 0 at rank 3.
DotDimensionNumbers BlockScaledDotNumbers(int64_t rank);

// Elements per scale of operand 0 or 1 (the block size), from the
// backend_config or K / Ks.
int64_t BlockScaledDotBlockSize(const HloInstruction& instr, int operand);

// Whether operand 0 or 1 has a scale (operand 2 + s).
inline bool HasBlockScale(const HloInstruction& instr, int operand) {
  return instr.operand_count() > 2 + operand;
}

}  // namespace weft
