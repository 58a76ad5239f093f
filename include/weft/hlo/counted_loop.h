// The counter of a counted while loop, read from the loop's structure as the
// partitioner and the scans leave it: the condition compares one integer
// element of the state with a constant (compare(get-tuple-element(state, k),
// c), either side, any direction), the init of element k is a constant, and
// the body adds or subtracts a constant to it. Copies, reshapes and converts
// of the counter or the constants are seen through.
//
// The planner counts trips with it (analysis/loops.h) and the compiler proves
// with it that a loop writes every row of a stacked buffer
// (compiler/dead_loop_init.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "weft/hlo/instruction.h"

namespace weft {

struct CountedLoop {
  int64_t counter_index = 0;  // the state tuple element that counts
  int64_t init = 0;           // its value on entry
  int64_t step = 0;           // what each trip adds (never 0)
  int64_t trips = 0;          // how many times the body runs (may be 0)

  // The counter's value during trip t (0 <= t < trips), as the body reads it.
  int64_t ValueAt(int64_t trip) const { return init + step * trip; }
};

// The loop's counter, or nullopt with the reason in `why` (when given): the
// condition is not such a compare, the init is not a constant, the step is
// not a constant, or the loop runs more than 2^26 times or never stops.
std::optional<CountedLoop> AnalyzeCountedLoop(const HloInstruction& while_instr,
                                              std::string* why = nullptr);

}  // namespace weft
