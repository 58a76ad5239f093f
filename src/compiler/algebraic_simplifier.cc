#include "weft/compiler/algebraic_simplifier.h"

#include <vector>

namespace weft::compiler {

bool TransposeKeepsOrder(const std::vector<int64_t>& dims,
                         const std::vector<int64_t>& permutation) {
  int64_t last = -1;  // the operand dimension of the previous one larger than 1
  for (int64_t p : permutation) {
    if (dims.at(p) == 1) continue;
    if (p < last) return false;
    last = p;
  }
  return true;
}

namespace {

bool IsIdentity(const std::vector<int64_t>& permutation) {
  for (size_t i = 0; i < permutation.size(); ++i) {
    if (permutation[i] != static_cast<int64_t>(i)) return false;
  }
  return true;
}

void SimplifyIn(HloComputation& computation, AlgebraicSimplifierStats& stats) {
  for (HloInstruction* x : computation.instructions()) {
    if (x->opcode() != HloOpcode::kTranspose) continue;
    HloInstruction* operand = x->operand(0);
    if (!operand->shape().IsArray() ||
        !TransposeKeepsOrder(operand->shape().dimensions(), x->dimensions())) {
      continue;
    }
    HloInstruction* replacement = operand;
    if (!IsIdentity(x->dimensions())) {
      auto reshape = HloInstruction::Create(HloOpcode::kReshape, x->shape(), {operand});
      reshape->set_sharding(x->sharding());
      reshape->set_location(x->location());
      replacement = computation.AddInstructionBefore(std::move(reshape), x);
      ++stats.transposes_to_reshapes;
    } else {
      ++stats.transposes_removed;
    }
    x->ReplaceAllUsesWith(replacement);
    if (computation.root_instruction() == x) computation.set_root_instruction(replacement);
    computation.RemoveInstruction(x);
  }
}

}  // namespace

AlgebraicSimplifierStats SimplifyAlgebra(HloModule& module) {
  AlgebraicSimplifierStats stats;
  for (HloComputation* computation : module.computations()) SimplifyIn(*computation, stats);
  return stats;
}

}  // namespace weft::compiler
