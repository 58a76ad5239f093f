#include "weft/compiler/schedule.h"

#include <unordered_set>

namespace weft::compiler {

std::vector<HloInstruction*> ScheduleComputation(const HloComputation& computation) {
  std::vector<HloInstruction*> post = computation.MakeInstructionPostOrder();
  std::unordered_set<const HloInstruction*> early;
  for (HloInstruction* instr : post) {
    const bool reads_param =
        instr->opcode() == HloOpcode::kGetTupleElement && early.count(instr->operand(0)) > 0;
    if (instr->opcode() == HloOpcode::kParameter || reads_param) early.insert(instr);
  }
  std::vector<HloInstruction*> order;
  order.reserve(post.size());
  for (HloInstruction* instr : post) {
    if (early.count(instr)) order.push_back(instr);
  }
  for (HloInstruction* instr : post) {
    if (!early.count(instr)) order.push_back(instr);
  }
  return order;
}

}  // namespace weft::compiler
