// Collective combining (XLA's AllGatherCombiner, ReduceScatterCombiner and
// AllReduceCombiner): after partitioning, a per-device program runs many
// small collectives that do not depend on one another — a layer's weights
// each all-gathered, its weight gradients each reduce-scattered, the norm
// gradients each all-reduced. Each one costs its devices a meeting (a link's
// latency on a pod; a barrier of device threads here, which on two cores
// costs more than moving a few hundred kilobytes). This pass makes one
// variadic collective of several:
//
//   all-gather, reduce-scatter or all-reduce of the same kind, replica
//   groups, channel mode (channel id present or not; the id itself only
//   numbers them), use_global_device_ids, dimension (all-gather,
//   reduce-scatter) and reducer computation (reductions), in one
//   computation, none of them reachable from another
//
// become `(r0, r1, ...) all-gather(x0, x1, ...)`, XLA's variadic form; each
// user reads its result through a get-tuple-element. The executor runs a
// variadic collective as one communicator batch (Communicator::BeginBatch):
// the devices meet once for all its operands.
//
// Groups are formed greedily in post-order: a collective joins the first
// open group of its key that it does not depend on, while the group's
// results stay within kCombineThresholdBytes (XLA's combine threshold). A
// combined collective runs once all its operands are ready, so results
// that were ready early wait for the latest, and all of a group's results
// are live at once: the threshold bounds that memory. Every device runs the
// same program, so every device combines the same collectives.
#pragma once

#include <cstdint>

#include "weft/hlo/module.h"

namespace weft::compiler {

struct CollectiveCombinerStats {
  int64_t combined = 0;  // variadic collectives made
  int64_t removed = 0;   // collectives they replaced, less the combined ones
};

// The most bytes of results one combined collective holds.
inline constexpr int64_t kCombineThresholdBytes = int64_t{4} << 20;

// Rewrites every computation of `module` in place.
CollectiveCombinerStats CombineCollectives(HloModule& module,
                                           int64_t threshold_bytes = kCombineThresholdBytes);

}  // namespace weft::compiler
