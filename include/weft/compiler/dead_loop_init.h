// Loop inits that nothing reads (XLA's DusAccumulatorZeroInitElimination).
// A scan's stacked outputs — its ys, the residuals the forward saves for the
// backward, the backward's per-layer weight gradients — enter their while as
// broadcast(0) of [L, ...], and the body writes row i of them on trip i with
// a dynamic-update-slice before anything reads the buffer. The zero fill is
// then a pass over the whole stack that no value depends on (tiny's 2 x 2
// mesh filled 5 stacks of 3 MiB per device each step). The pass gives such
// an element custom-call(), custom_call_target="AllocateBuffer" (XLA's
// name, hlo/custom_call_targets.h) instead: a buffer of the shape whose
// contents are unspecified.
//
// Element j of a while's init is replaced when all of these hold:
//   - the init is a tuple instruction used by this while alone, and its
//     element j a broadcast of a scalar constant used by that tuple alone;
//   - the loop is counted (hlo/counted_loop.h) and runs at least once;
//   - the condition does not read element j;
//   - the body's parameter is read only through get-tuple-elements, one of
//     them at index j, whose one user is a dynamic-update-slice taking it as
//     the buffer (operand 0) and nowhere else; that dynamic-update-slice is
//     element j of the body's root tuple and used nowhere else;
//   - the update has the buffer's size in every dimension but one, d; the
//     start index of d is the counter (through copies and reshapes), and
//     the starts the trips write, clamped as dynamic-update-slice clamps
//     them, cover every row of d: the counter steps by at most the update's
//     size in d and reaches both ends.
// Then every row is written before the loop ends and no instruction reads
// the buffer before its row is written, so no value sees the init.
#pragma once

#include <cstdint>

#include "weft/hlo/module.h"

namespace weft::compiler {

struct DeadLoopInitStats {
  int64_t inits_replaced = 0;    // broadcast inits that became AllocateBuffer
  int64_t bytes_not_filled = 0;  // their byte size (each fill skipped per run of the while)
};

// Rewrites every computation of `module` in place.
DeadLoopInitStats ElideDeadLoopInits(HloModule& module);

}  // namespace weft::compiler
