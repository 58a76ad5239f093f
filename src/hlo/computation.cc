#include "weft/hlo/computation.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "weft/base/error.h"
#include "weft/hlo/module.h"
#include "weft/hlo/printer.h"

namespace weft {

HloComputation::~HloComputation() {
  // Users first, so operands never see dangling users.
  while (!instructions_.empty()) instructions_.pop_back();
}

HloInstruction* HloComputation::AddInstruction(std::unique_ptr<HloInstruction> instruction) {
  WEFT_CHECK(instruction != nullptr, "null instruction added to computation '{}'", name_);
  WEFT_CHECK(instruction->parent_ == nullptr, "instruction {} already belongs to a computation",
             instruction->Describe());
  for (HloInstruction* operand : instruction->operands()) {
    WEFT_CHECK(operand->parent_ == this,
               "instruction {} uses {} from another computation; operands must be defined in "
               "the same computation",
               instruction->Describe(), operand->Describe());
  }
  HloInstruction* raw = instruction.get();
  // Once in a module, new instructions get module-unique names right away.
  if (parent_ != nullptr) {
    raw->set_name(parent_->UniqueName(
        raw->name().empty() ? std::string(HloOpcodeString(raw->opcode())) : raw->name()));
  }
  if (raw->opcode() == HloOpcode::kParameter) {
    const int64_t number = raw->parameter_number();
    WEFT_CHECK(number >= 0, "parameter {} has negative number {}", raw->Describe(), number);
    // Parameter numbers index a dense table: bound them before it grows (a
    // typo like parameter(5124095576030431) must be an error, not a crash).
    constexpr int64_t kMaxParameters = 1 << 20;
    WEFT_CHECK(number < kMaxParameters,
               "parameter {} has number {}; parameter numbers must be below {} and are "
               "normally 0, 1, 2, ... in order",
               raw->Describe(), number, kMaxParameters);
    if (number >= num_parameters()) parameters_.resize(number + 1, nullptr);
    WEFT_CHECK(parameters_[number] == nullptr,
               "computation '{}' has two parameters numbered {}: {} and {}", name_, number,
               parameters_[number]->Describe(), raw->Describe());
    parameters_[number] = raw;
  }
  raw->parent_ = this;
  instructions_.push_back(std::move(instruction));
  return raw;
}

HloInstruction* HloComputation::AddInstructionBefore(std::unique_ptr<HloInstruction> instruction,
                                                     const HloInstruction* before) {
  WEFT_CHECK(before != nullptr && before->parent_ == this, "{} is not in computation '{}'",
             before == nullptr ? std::string("null") : before->Describe(), name_);
  HloInstruction* raw = AddInstruction(std::move(instruction));
  // AddInstruction appended it: move it from the back to before `before`.
  auto at = std::find_if(instructions_.begin(), instructions_.end(),
                         [&](const auto& p) { return p.get() == before; });
  std::rotate(at, instructions_.end() - 1, instructions_.end());
  return raw;
}

void HloComputation::RemoveInstruction(HloInstruction* instruction) {
  WEFT_CHECK(instruction->parent_ == this, "{} is not in computation '{}'", instruction->Describe(),
             name_);
  WEFT_CHECK(instruction->users().empty(), "cannot remove {}: it still has {} users",
             instruction->Describe(), instruction->users().size());
  WEFT_CHECK(instruction != root_, "cannot remove the root {} of '{}'", instruction->Describe(),
             name_);
  if (instruction->opcode() == HloOpcode::kParameter) {
    parameters_[instruction->parameter_number()] = nullptr;
  }
  auto it = std::find_if(instructions_.begin(), instructions_.end(),
                         [&](const auto& p) { return p.get() == instruction; });
  instructions_.erase(it);
}

void HloComputation::MakeDefinitionOrderTopological() {
  std::unordered_map<const HloInstruction*, size_t> position;
  for (size_t i = 0; i < instructions_.size(); ++i) position[instructions_[i].get()] = i;
  std::vector<std::unique_ptr<HloInstruction>> sorted;
  sorted.reserve(instructions_.size());
  std::vector<bool> seen(instructions_.size(), false);
  // Iterative DFS from each instruction in the current order: (position,
  // next operand index).
  std::vector<std::pair<size_t, int64_t>> stack;
  for (size_t start = 0; start < instructions_.size(); ++start) {
    if (seen[start]) continue;
    seen[start] = true;
    stack.push_back({start, 0});
    while (!stack.empty()) {
      auto& [at, next] = stack.back();
      const HloInstruction* instr = instructions_[at].get();
      if (next < instr->operand_count()) {
        const size_t operand = position.at(instr->operand(next++));
        if (!seen[operand]) {  // operands form a DAG: a seen one is already placed
          seen[operand] = true;
          stack.push_back({operand, 0});
        }
        continue;
      }
      sorted.push_back(std::move(instructions_[at]));
      stack.pop_back();
    }
  }
  instructions_ = std::move(sorted);
}

std::vector<HloInstruction*> HloComputation::instructions() const {
  std::vector<HloInstruction*> out;
  out.reserve(instructions_.size());
  for (const auto& p : instructions_) out.push_back(p.get());
  return out;
}

HloInstruction* HloComputation::GetInstruction(std::string_view name) const {
  for (const auto& p : instructions_) {
    if (p->name() == name) return p.get();
  }
  return nullptr;
}

HloInstruction* HloComputation::root_instruction() const {
  if (root_ != nullptr) return root_;
  return instructions_.empty() ? nullptr : instructions_.back().get();
}

void HloComputation::set_root_instruction(HloInstruction* root) {
  WEFT_CHECK(root != nullptr && root->parent_ == this,
             "root of '{}' must be one of its own "
             "instructions",
             name_);
  root_ = root;
}

int64_t HloComputation::RemoveDeadInstructions() {
  const std::vector<HloInstruction*> live = MakeInstructionPostOrder();
  const std::unordered_set<const HloInstruction*> keep(live.begin(), live.end());
  const std::vector<HloInstruction*> all = instructions();
  int64_t removed = 0;
  // Users come after their operands: removing from the back frees operands.
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    if (!keep.count(*it) && (*it)->opcode() != HloOpcode::kParameter) {
      RemoveInstruction(*it);
      ++removed;
    }
  }
  return removed;
}

std::vector<HloInstruction*> HloComputation::MakeInstructionPostOrder() const {
  std::vector<HloInstruction*> order;
  HloInstruction* root = root_instruction();
  if (root == nullptr) return order;
  std::unordered_set<const HloInstruction*> visited;
  // Iterative DFS: (instruction, next operand index).
  std::vector<std::pair<HloInstruction*, int64_t>> stack = {{root, 0}};
  visited.insert(root);
  while (!stack.empty()) {
    auto& [instr, next] = stack.back();
    if (next < instr->operand_count()) {
      HloInstruction* operand = instr->operand(next++);
      if (visited.insert(operand).second) stack.push_back({operand, 0});
    } else {
      order.push_back(instr);
      stack.pop_back();
    }
  }
  return order;
}

bool HloComputation::IsEntry() const {
  return parent_ != nullptr && parent_->entry_computation() == this;
}

std::string HloComputation::ToString() const { return PrintComputation(*this); }

}  // namespace weft
