// Sharding propagation with XLA's ShardingPropagation semantics (SPMD mode):
// shardings spread forward (operand -> result) and backward (user ->
// operand) through each op's factor rule (op_sharding_rule.h), in four
// rounds of increasing aggressiveness, each to a fixed point:
//   level 0: only pass-through ops (elementwise, reshape, transpose, tuple,
//            get-tuple-element, while, dynamic-slice, concatenate, copy,
//            Sharding custom calls), no partial merging;
//   level 1: every op with a rule (dot, reduce, pad, gather, custom calls ...),
//            and compatible partial shardings merge into finer tilings;
//   level 2: backward through broadcast;  level 3: forward through broadcast.
// User shardings are never overwritten (except by the final alignment of a
// shard_as group), a proposal replaces a sharding only when it is more
// specific (improve_sharding.h), a while loop, its body parameter, body root
// and condition parameter always agree, and sharding groups tie members:
// `shard_as N` members end with one sharding; `shard_like N` members only
// hint each other.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "weft/hlo/module.h"

namespace weft {

struct PropagationOptions {
  // XLA's allow_spmd_sharding_propagation_to_output / _to_parameters: one
  // flag per output tuple element / per entry parameter, or a single flag
  // for all. Where not allowed, an output or parameter keeps the user's
  // sharding; without one it stays unsharded (the partitioner replicates it).
  std::vector<bool> allow_spmd_sharding_propagation_to_output{false};
  std::vector<bool> allow_spmd_sharding_propagation_to_parameters{false};
  // Give every instruction still unsharded at the end {replicated} (XLA
  // leaves them unsharded; the partitioner reads that as replicated).
  bool replicate_unsharded = false;
  // Record every decision for ExplainSharding.
  bool record_decisions = true;
};

enum class DecisionKind {
  kAnnotation,         // written by the user
  kForward,            // from an operand, through the op's rule
  kBackward,           // from a user, through the user's rule
  kShardGroup,         // from another member of a shard_as / shard_like group
  kGroupAlignment,     // a shard_as group settled on one sharding
  kUnspecifiedDims,    // a Sharding custom call refined its unspecified dims
  kWhileAgreement,     // while / body parameter / body root / condition parameter
  kManual,             // manual sharding spreading through a manual region
  kOutputOrParameter,  // restored or replicated by the output/parameter options
  kDefault,            // replicate_unsharded
};
std::string_view DecisionKindName(DecisionKind kind);

struct ShardingDecision {
  int64_t round = 0;  // fixed-point iteration, counted over all levels
  int64_t level = 0;  // aggressiveness
  DecisionKind kind = DecisionKind::kAnnotation;
  const HloInstruction* source = nullptr;  // operand, user or group member
  std::string rule;                        // the rule / op that carried it
  std::optional<HloSharding> before;
  std::optional<HloSharding> after;
};

struct PropagationResult {
  bool changed = false;
  int64_t rounds = 0;
  // Per instruction, in order. Only with options.record_decisions.
  std::unordered_map<const HloInstruction*, std::vector<ShardingDecision>> decisions;
};

// Propagates shardings in place. Throws weft::Error for incompatible user
// shardings in one shard_as group (naming the group and its members), for
// option vectors of the wrong size, and for a malformed unspecified_dims.
PropagationResult PropagateShardings(HloModule& module, const PropagationOptions& options = {});

// The chain of decisions that gave instruction `name` its sharding, followed
// back through the instructions it came from to the user annotations:
//
//   dot.3: {devices=[2,1,2]<=[4] last_tile_dim_replicate}
//     round 2, level 1, forward from lhs via dot: (none) -> {devices=...}
//   lhs: {devices=[2,1]<=[2]}
//     annotation
//
// Throws weft::Error if the module has no instruction `name`.
std::string ExplainSharding(const HloModule& module, const PropagationResult& result,
                            std::string_view name);

}  // namespace weft
