// Scheduling: the order in which the instructions of a computation run. The
// executor (runtime/executor.cc), buffer assignment (compiler/
// buffer_assignment.h) and the memory planner (analysis/memory_plan.h) all
// follow this order.
#pragma once

#include <cstdint>
#include <vector>

#include "weft/hlo/module.h"

namespace weft::compiler {

// A memory-aware list schedule of the instructions reachable from the root
// (XLA's ListScheduler in spirit). Parameters and the get-tuple-elements that
// read them come first (a carried tuple dies early and its leaves can be
// updated in place); then, among the instructions whose operands have all
// run, the one that frees the most bytes net of what it allocates runs next:
// freed are the buffers (seen through tuple, get-tuple-element, copy,
// reshape, same-type convert and unit-dim broadcast, which allocate nothing,
// as do parameters and constants) whose last remaining reader it is, unless
// the root returns them; allocated its result's bytes. Ties go to the
// earlier instruction in the post-order (MakeInstructionPostOrder), so a
// program without choices keeps that order. A source — an instruction that
// allocates but reads no buffer of the computation (a broadcast of a
// constant, an iota, an all-gather of a parameter) — becomes ready only once
// some user of it waits on sources alone, so it is made when needed rather
// than held across work it does not feed (the embedding gradient's zeros
// across the loss and the output layer's backward). Like XLA's default memory
// scheduler, the result is the list schedule unless the post-order (with the
// same hoisting) has a strictly lower peak under the same byte model.
// The order depends only on the program text (positions, never addresses),
// so every device running the same per-device program issues its
// collectives in the same order. O(n log n + uses).
std::vector<HloInstruction*> ScheduleComputation(const HloComputation& computation);

// The byte model's peak of `sequence` (every instruction of ScheduleComputation's
// set once, operands first): the largest sum, at one step, of the buffers
// live then (sizes rounded up to kBufferAlignment; the step's result and its
// InstructionScratch included; buffers dying at the step still counted,
// unless the result takes one over in place, as buffer assignment's
// in-place candidates do). Called computations are not counted. It is a
// model: AssignBuffers' max_live_bytes can differ where views and aliasing
// go beyond it.
int64_t ScheduledPeakBytes(const HloComputation& computation,
                           const std::vector<HloInstruction*>& sequence);

}  // namespace weft::compiler
