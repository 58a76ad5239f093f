// Common collectives: after partitioning, a per-device program often moves
// the same data twice — two projections of one activation each all-gather
// it (an MLP's gate and up), or the embedding table is gathered once for the
// lookup and again for the logits. XLA's HloCSE after SPMD partitioning
// merges such duplicates; this pass does the same for the collectives that
// only move data:
//
//   all-gather, all-to-all, collective-permute with the same operands,
//   result shape and attributes (groups, dimensions, pairs) — the channel
//   id aside, which only numbers them — in one computation: the later one's
//   users read the earlier one's result, and the later one is removed.
//
// Reductions (all-reduce, reduce-scatter) are left alone: their reducers are
// separate computations, and duplicates of them were not seen.
//
// Memory: merging keeps the earlier result alive until the later one's
// users run. Unlike XLA's CSE, which merges whatever the distance (and
// leaves memory to rematerialization), a duplicate is merged only when that
// extends the earlier result's life by at most kMaxExtension instructions
// in definition order, and never across a while loop, conditional or call
// (one instruction that runs a whole computation): a gathered weight or
// activation kept across a whole layer would cost more memory than the
// re-gather costs time.
//
// Every device runs the same program, so every device drops the same
// collectives and the remaining ones still match in order.
#pragma once

#include <cstdint>

#include "weft/hlo/module.h"

namespace weft::compiler {

struct CollectiveCseStats {
  int64_t merged = 0;          // collectives removed
  int64_t kept_far_apart = 0;  // duplicates left because they are too far apart
};

// How far (instructions in definition order) a merge may extend the
// earlier result's life.
inline constexpr int64_t kMaxExtension = 16;

// Rewrites every computation of `module` in place.
CollectiveCseStats MergeCommonCollectives(HloModule& module);

}  // namespace weft::compiler
