#include "weft/compiler/dead_loop_init.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>

#include "weft/hlo/counted_loop.h"
#include "weft/hlo/custom_call_targets.h"

namespace weft::compiler {
namespace {

int64_t Uses(const HloInstruction& user, const HloInstruction* operand) {
  return std::count(user.operands().begin(), user.operands().end(), operand);
}

// Whether `x` is the one use of `value`: `value`'s only user is `x`, which
// reads it once.
bool OnlyUseIs(const HloInstruction* value, const HloInstruction* x) {
  return value->users().size() == 1 && value->users()[0] == x && Uses(*x, value) == 1;
}

bool IsScalarConstantBroadcast(const HloInstruction* x) {
  return x->opcode() == HloOpcode::kBroadcast && x->shape().IsArray() &&
         x->operand(0)->opcode() == HloOpcode::kConstant && x->operand(0)->shape().IsScalar();
}

// Whether `index` is element `counter` of the body's parameter, through
// copies and reshapes (they keep a scalar's value).
bool IsCounter(const HloInstruction* index, const HloInstruction* param, int64_t counter) {
  while (index->opcode() == HloOpcode::kCopy || index->opcode() == HloOpcode::kReshape) {
    index = index->operand(0);
  }
  return index->opcode() == HloOpcode::kGetTupleElement && index->operand(0) == param &&
         index->tuple_index() == counter;
}

// Whether the body of `w` writes every row of state element j before it
// reads any (the conditions in the header).
bool BodyOverwritesElement(const HloInstruction& w, const CountedLoop& loop, int64_t j) {
  const HloComputation* cond = w.while_condition();
  for (const HloInstruction* user : cond->parameter_instruction(0)->users()) {
    if (user->opcode() != HloOpcode::kGetTupleElement || user->tuple_index() == j) return false;
  }
  const HloComputation* body = w.while_body();
  const HloInstruction* param = body->parameter_instruction(0);
  const HloInstruction* root = body->root_instruction();
  if (root->opcode() != HloOpcode::kTuple || j >= root->operand_count()) return false;
  const HloInstruction* element = nullptr;
  for (const HloInstruction* user : param->users()) {
    if (user->opcode() != HloOpcode::kGetTupleElement) return false;
    if (user->tuple_index() != j) continue;
    if (element != nullptr) return false;
    element = user;
  }
  if (element == nullptr || element->users().size() != 1) return false;
  const HloInstruction* dus = element->users()[0];
  if (dus->opcode() != HloOpcode::kDynamicUpdateSlice || dus->operand(0) != element ||
      Uses(*dus, element) != 1 || root->operand(j) != dus || !OnlyUseIs(dus, root)) {
    return false;
  }
  const Shape& buffer = element->shape();
  const Shape& update = dus->operand(1)->shape();
  if (!buffer.IsArray() || !update.IsArray() || update.rank() != buffer.rank() ||
      dus->operand_count() != 2 + buffer.rank()) {  // one scalar start per dimension
    return false;
  }
  // Dimensions the update spans whole: their starts clamp to 0. One may be
  // narrower, and its start must walk over the rows.
  std::optional<int64_t> walked;
  for (int64_t d = 0; d < buffer.rank(); ++d) {
    if (update.dimensions(d) == buffer.dimensions(d)) continue;
    if (walked) return false;
    walked = d;
  }
  if (!walked) return true;  // every trip writes the whole buffer
  const int64_t d = *walked;
  if (!IsCounter(dus->operand(2 + d), param, loop.counter_index)) return false;
  const int64_t size = update.dimensions(d);
  const int64_t last_start = buffer.dimensions(d) - size;  // starts clamp to [0, last_start]
  if (size < 1 || std::abs(loop.step) > size) return false;
  const int64_t first = loop.ValueAt(0), last = loop.ValueAt(loop.trips - 1);
  return std::min(first, last) <= 0 && std::max(first, last) >= last_start;
}

void ElideIn(HloComputation& computation, DeadLoopInitStats& stats) {
  for (HloInstruction* w : computation.instructions()) {
    if (w->opcode() != HloOpcode::kWhile) continue;
    HloInstruction* init = w->operand(0);
    if (init->opcode() != HloOpcode::kTuple || !OnlyUseIs(init, w)) continue;
    const std::optional<CountedLoop> loop = AnalyzeCountedLoop(*w);
    if (!loop || loop->trips < 1) continue;
    for (int64_t j = 0; j < init->operand_count(); ++j) {
      HloInstruction* fill = init->operand(j);
      if (j == loop->counter_index || !IsScalarConstantBroadcast(fill) || !OnlyUseIs(fill, init) ||
          !BodyOverwritesElement(*w, *loop, j)) {
        continue;
      }
      HloAttributes attrs;
      attrs.custom_call_target = kAllocateBufferTarget;
      auto buffer =
          HloInstruction::Create(HloOpcode::kCustomCall, fill->shape(), {}, std::move(attrs), {});
      buffer->set_sharding(fill->sharding());
      buffer->set_location(fill->location());
      HloInstruction* replacement = computation.AddInstructionBefore(std::move(buffer), fill);
      init->ReplaceOperandWith(j, replacement);
      HloInstruction* constant = fill->operand(0);
      // The buffer keeps the fill's name: the planner finds the global
      // instruction behind a buffer by name (train/planner.cc). The name
      // stays taken in the module, so no later instruction gets it.
      const std::string name = fill->name();
      computation.RemoveInstruction(fill);
      replacement->set_name(name);
      if (constant->users().empty() && computation.root_instruction() != constant) {
        computation.RemoveInstruction(constant);
      }
      ++stats.inits_replaced;
      stats.bytes_not_filled += replacement->shape().ByteSize();
    }
  }
}

}  // namespace

DeadLoopInitStats ElideDeadLoopInits(HloModule& module) {
  DeadLoopInitStats stats;
  for (HloComputation* computation : module.computations()) ElideIn(*computation, stats);
  return stats;
}

}  // namespace weft::compiler
