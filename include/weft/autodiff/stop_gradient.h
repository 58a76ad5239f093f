// Stop-gradient (jax.lax.stop_gradient) as a mark on a value: autodiff
// treats a marked instruction as a constant, so no cotangent flows from it
// to its operands, through any of its uses. Everything else — the executor,
// propagation, the partitioner, fusion, the planner — computes it as the
// instruction it is, so the forward value is unchanged.
//
// The mark is an XLA frontend attribute, `weft_stop_gradient="true"`
// (`frontend_attributes={weft_stop_gradient="true"}` in the text), which
// the parser and printer keep verbatim and no other pass reads.
//
// Use it where a value's derivative is known to cancel, to keep the backward
// from computing (and holding) that path: a numerically stable logsumexp
// shifts by the row max m, and d lse / d m = 1 - sum(softmax) = 0, so
//
//   m   = StopGradient(reduce-max(x))
//   lse = log(sum(exp(x - m))) + m        // gradient: softmax(x) alone
//
// as jax.nn.logsumexp does. Marking a value whose derivative does not
// cancel changes the gradient.
#pragma once

#include "weft/hlo/instruction.h"

namespace weft {

// Marks `value` (idempotent) and returns it.
HloInstruction* StopGradient(HloInstruction* value);

// Whether `instr` carries the mark.
bool IsGradientStopped(const HloInstruction& instr);

}  // namespace weft
