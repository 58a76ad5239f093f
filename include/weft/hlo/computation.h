// HloComputation: a named list of instructions in definition order (every
// operand is defined before its users), with parameters and a root.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "weft/hlo/instruction.h"

namespace weft {

class HloModule;

class HloComputation {
 public:
  explicit HloComputation(std::string name) : name_(std::move(name)) {}
  HloComputation(const HloComputation&) = delete;
  HloComputation& operator=(const HloComputation&) = delete;
  ~HloComputation();

  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }
  // XLA's execution thread ("main" unless the text says otherwise after the
  // computation's body); weft runs every thread's computations alike.
  const std::string& execution_thread() const { return execution_thread_; }
  void set_execution_thread(std::string thread) { execution_thread_ = std::move(thread); }

  // Appends an instruction (its operands must already be in this computation).
  // Parameters are registered by their parameter_number. In a module, the
  // name is made module-unique.
  HloInstruction* AddInstruction(std::unique_ptr<HloInstruction> instruction);
  // The same, placed just before `before` in definition order (which must
  // stay valid: the new instruction's operands are defined before `before`,
  // as when it is to replace `before`).
  HloInstruction* AddInstructionBefore(std::unique_ptr<HloInstruction> instruction,
                                       const HloInstruction* before);
  // Reorders the definitions so that every operand is defined before its
  // users, otherwise keeping the current order: an instruction moves only as
  // early as its first user needs it (a pass that appended an instruction
  // another one reads calls this).
  void MakeDefinitionOrderTopological();
  // Removes an instruction nothing uses (and that is not the root).
  void RemoveInstruction(HloInstruction* instruction);
  // Removes every instruction the root does not need (parameters stay), so
  // that later passes never meet a dead user; returns how many.
  int64_t RemoveDeadInstructions();

  // In definition order.
  std::vector<HloInstruction*> instructions() const;
  int64_t instruction_count() const { return static_cast<int64_t>(instructions_.size()); }
  // nullptr when absent.
  HloInstruction* GetInstruction(std::string_view name) const;

  // Defaults to the last instruction added.
  HloInstruction* root_instruction() const;
  void set_root_instruction(HloInstruction* root);

  // Parameters by number (a slot is null until that parameter is added).
  const std::vector<HloInstruction*>& parameter_instructions() const { return parameters_; }
  HloInstruction* parameter_instruction(int64_t number) const { return parameters_.at(number); }
  int64_t num_parameters() const { return static_cast<int64_t>(parameters_.size()); }

  // Instructions reachable from the root, operands before users.
  std::vector<HloInstruction*> MakeInstructionPostOrder() const;

  HloModule* parent() const { return parent_; }
  bool IsEntry() const;

  // Canonical HLO text (see printer.h).
  std::string ToString() const;

 private:
  friend class HloModule;
  std::string name_;
  std::string execution_thread_ = "main";
  std::vector<std::unique_ptr<HloInstruction>> instructions_;
  std::vector<HloInstruction*> parameters_;
  HloInstruction* root_ = nullptr;
  HloModule* parent_ = nullptr;
};

}  // namespace weft
