#include "weft/analysis/loops.h"

#include "weft/autodiff/scan_config.h"
#include "weft/base/error.h"
#include "weft/hlo/counted_loop.h"

namespace weft::analysis {

int64_t WhileTripCount(const HloInstruction& w) {
  WEFT_INTERNAL_CHECK(w.opcode() == HloOpcode::kWhile, "{} is not a while", w.Describe());
  if (std::optional<ScanConfig> scan = ScanConfigOf(w)) return scan->length;
  std::string why;
  std::optional<CountedLoop> loop = AnalyzeCountedLoop(w, &why);
  if (!loop) {
    Fail(
        "{}: cannot derive the loop's trip count ({}); the planner needs a scan "
        "backend_config or a counted loop (state element compared with a constant, constant "
        "init, constant step)",
        w.Describe(), why);
  }
  return loop->trips;
}

std::unordered_map<const HloComputation*, int64_t> ComputationRunCounts(const HloModule& module) {
  std::unordered_map<const HloComputation*, int64_t> runs;
  // Callers come after callees in post order: walk it backwards.
  const std::vector<HloComputation*> order = module.MakeComputationPostOrder();
  runs[module.entry_computation()] = 1;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    auto found = runs.find(*it);
    if (found == runs.end()) continue;
    const int64_t n = found->second;
    for (const HloInstruction* instr : (*it)->instructions()) {
      if (instr->opcode() == HloOpcode::kWhile) {
        const int64_t trips = WhileTripCount(*instr);
        runs[instr->while_body()] += n * trips;
        runs[instr->while_condition()] += n * (trips + 1);
      } else if (instr->opcode() == HloOpcode::kCall) {
        runs[instr->to_apply()] += n;
      } else if (instr->opcode() == HloOpcode::kConditional) {
        // One branch runs; which is known only then: each counts (an upper bound).
        for (const HloComputation* branch : instr->called_computations()) runs[branch] += n;
      }
    }
  }
  return runs;
}

}  // namespace weft::analysis
