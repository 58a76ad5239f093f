// The factor rules of gather and scatter (op_sharding_rule.h), as XLA's
// sharding propagation relates their dims (hlo_sharding_util's gather and
// scatter helpers). Private to weft_spmd; tests include it from src/spmd.
//
// Gather (scatter: the updates play the result's part, update window dims
// the offset dims, update scatter dims the batch dims):
//   index pass-through  the k-th indices dim other than index_vector_dim and
//                       the k-th result dim that is not an offset dim;
//   operand pass-through an operand window dim (neither collapsed nor a
//                       batching dim) the slice takes whole, and its offset dim;
//   explicit batch      operand_batching_dims[k], start_indices_batching_dims[k]
//                       and that indices dim's result dim;
//   parallel            an index component that counts along indices dim d (an
//                       iota, see ParallelDims), with a slice of 1 on operand
//                       dim p of the size of dim d: operand p, indices d and d's
//                       result dim.
// Indexed operand dims that are not parallel, sliced window dims and the
// index vector dim are need-replication. A scatter's operands and results
// share every dim (operand j <-> result j, element-wise).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "weft/spmd/op_sharding_rule.h"

namespace weft::spmd {

// An operand dim whose index is an iota along an indices dim: the two (and
// the result dim of the indices dim) are split alike without communication.
struct ParallelDim {
  int64_t operand_dim = 0;
  int64_t indices_dim = 0;
  bool operator==(const ParallelDim&) const = default;
};

// The parallel dims of a gather or scatter (`instr`), in index component
// order: the indices (through copies) are an iota-like value, or a
// concatenate along index_vector_dim of pieces some of which are; iota-like
// is an iota, an s32 constant whose elements count along a dim, or a
// broadcast of one. A component counting along a dim that another component
// already counts along, or along a dim of another size than its operand dim,
// makes the whole match fail (none), as in XLA.
std::vector<ParallelDim> ParallelDims(const HloInstruction& instr);

std::optional<OpShardingRule> GatherRule(const HloInstruction& instr);
std::optional<OpShardingRule> ScatterRule(const HloInstruction& instr);

}  // namespace weft::spmd
