// Scheduling: the order in which the instructions of a computation run. The
// executor (runtime/executor.cc) runs every computation in this order and the
// memory planner (analysis/memory_plan.h) follows the same order.
#pragma once

#include <vector>

#include "weft/hlo/module.h"

namespace weft::compiler {

// The order the executor runs a computation in: instructions reachable from
// the root, operands first; parameters and the get-tuple-elements that read
// them are hoisted to the front, so a carried tuple (a while body's
// parameter) dies early and its leaves can be updated in place.
std::vector<HloInstruction*> ScheduleComputation(const HloComputation& computation);

}  // namespace weft::compiler
