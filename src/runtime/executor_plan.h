// The executor's plan of a computation: its schedule as steps, each with
// its evaluator chosen once (after the instruction's static checks), its
// operands' slots, the values that die there and the buffer assignment's
// places. Private to the executor (executor.cc, executor_plan.cc).
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "executor_eval.h"
#include "weft/compiler/buffer_assignment.h"
#include "weft/hlo/computation.h"

namespace weft::runtime::exec {

// Where a step finds one of its operands.
struct StepOperand {
  // The operand's value when it is a constant (made once, when the executor
  // is built; a constant is no step of its own unless it is the root), else
  // null and the value is in `slot`.
  Value* constant = nullptr;
  int32_t slot = 0;
  // The operand's first leaf in the slot's value: nonzero when the operand
  // is a get-tuple-element that takes no step (its readers read the tuple's
  // leaves in place).
  int32_t leaf = 0;
  // Index into the step's dying values, or -1 when the operand lives on.
  // Repeated operands share one dying value.
  int32_t dying_index = -1;
  bool buffer_dies = false;  // the buffer assignment's view
};

// One instruction of a computation's schedule.
struct Step {
  const HloInstruction* instr = nullptr;
  HloOpcode opcode = HloOpcode::kParameter;
  EvalFn eval = nullptr;  // null: handled by the scheduler itself
  int32_t out = 0;        // result slot
  // The step's operands, the distinct slots that die here and the buffer
  // assignment's places of its result leaves: spans of the plan's arrays,
  // which hold every step's one after the other (read in order as the
  // steps run, not a heap block per step).
  std::span<const StepOperand> operands;
  std::span<const int32_t> dying_slots;
  bool result_unused = false;              // free the result right away
  int64_t leaf_begin = 0, leaf_count = 0;  // get-tuple-element
  // ExecutorOptions::profile: the OpClass timed; -1 for while and call,
  // whose computations' instructions are timed instead.
  int8_t op_class = -1;
  // Offsets relative to the region base.
  std::span<const EvalContext::OutputSlot> slots;
  int64_t scratch_offset = 0, scratch_bytes = 0;
  int64_t nested_offset = 0;  // while / call
};

struct ComputationPlan {
  ComputationPlan() = default;
  // Moved, never copied: the steps' spans point into the arrays below.
  ComputationPlan(ComputationPlan&&) = default;
  ComputationPlan& operator=(ComputationPlan&&) = default;
  ComputationPlan(const ComputationPlan&) = delete;
  ComputationPlan& operator=(const ComputationPlan&) = delete;

  const HloComputation* computation = nullptr;
  std::vector<Step> steps;
  std::vector<StepOperand> operands;
  std::vector<int32_t> dying_slots;
  std::vector<EvalContext::OutputSlot> slots;
  int32_t num_slots = 0;
  int32_t root_slot = 0;
  size_t max_operands = 0, max_dying = 0;
};

// The value of a constant instruction (its literal as a tensor).
HostTensor ConstantTensor(const HloInstruction& constant);

// The plan of `computation` in the order, and with the places, `assignment`
// gives it. `constants` holds the value of every constant instruction of
// the computation; its elements must outlive the plan.
ComputationPlan MakePlan(const HloComputation& computation,
                         const compiler::ComputationAssignment& assignment,
                         std::unordered_map<const HloInstruction*, Value>& constants);

}  // namespace weft::runtime::exec
