// How many times each computation of a per-device program runs in one
// execution: the entry once, a while body once per trip, its condition once
// more than that, nested loops multiplied.
//
// A while's trip count comes from its scan structure (autodiff/scan_config.h)
// when the backend_config records one, otherwise from its counter
// (hlo/counted_loop.h). Anything else is an error naming the while: the
// planner never guesses a count.
#pragma once

#include <cstdint>
#include <unordered_map>

#include "weft/hlo/module.h"

namespace weft::analysis {

// Throws weft::Error naming the instruction when the count cannot be derived.
int64_t WhileTripCount(const HloInstruction& while_instr);

// Runs per execution of the entry for every computation reached through
// while, call and conditional (every branch of a conditional counts once:
// an upper bound; reducers and other to_apply computations are not listed).
std::unordered_map<const HloComputation*, int64_t> ComputationRunCounts(const HloModule& module);

}  // namespace weft::analysis
