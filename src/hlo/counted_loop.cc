#include "weft/hlo/counted_loop.h"

#include "weft/base/error.h"
#include "weft/hlo/computation.h"

namespace weft {
namespace {

// Skips ops that pass a scalar through unchanged in value.
const HloInstruction* Through(const HloInstruction* x) {
  while (x->opcode() == HloOpcode::kCopy || x->opcode() == HloOpcode::kReshape ||
         x->opcode() == HloOpcode::kConvert) {
    x = x->operand(0);
  }
  return x;
}

std::optional<int64_t> ConstantValue(const HloInstruction* x) {
  x = Through(x);
  if (x->opcode() != HloOpcode::kConstant || !x->shape().IsArray() ||
      x->shape().ElementsCount() != 1 || IsFloatingPoint(x->shape().element_type())) {
    return std::nullopt;
  }
  return x->literal().GetInt(0);
}

// get-tuple-element(parameter 0, k) -> k.
std::optional<int64_t> StateIndex(const HloInstruction* x) {
  x = Through(x);
  if (x->opcode() != HloOpcode::kGetTupleElement) return std::nullopt;
  if (x->operand(0)->opcode() != HloOpcode::kParameter) return std::nullopt;
  return x->tuple_index();
}

// Element k of the value `x` (a tuple instruction, possibly behind copies).
const HloInstruction* TupleElement(const HloInstruction* x, int64_t k) {
  while (x->opcode() == HloOpcode::kCopy) x = x->operand(0);
  if (x->opcode() != HloOpcode::kTuple || k >= x->operand_count()) return nullptr;
  return x->operand(k);
}

ComparisonDirection Mirrored(ComparisonDirection dir) {
  switch (dir) {
    case ComparisonDirection::kLt:
      return ComparisonDirection::kGt;
    case ComparisonDirection::kLe:
      return ComparisonDirection::kGe;
    case ComparisonDirection::kGt:
      return ComparisonDirection::kLt;
    case ComparisonDirection::kGe:
      return ComparisonDirection::kLe;
    default:
      return dir;
  }
}

}  // namespace

std::optional<CountedLoop> AnalyzeCountedLoop(const HloInstruction& w, std::string* why) {
  WEFT_INTERNAL_CHECK(w.opcode() == HloOpcode::kWhile, "{} is not a while", w.Describe());
  auto fail = [&](const char* reason) -> std::optional<CountedLoop> {
    if (why != nullptr) *why = reason;
    return std::nullopt;
  };
  const HloInstruction* cmp = w.while_condition()->root_instruction();
  if (cmp->opcode() != HloOpcode::kCompare) return fail("the condition is not a compare");
  ComparisonDirection dir = cmp->attrs().comparison_direction;
  std::optional<int64_t> k = StateIndex(cmp->operand(0));
  std::optional<int64_t> bound = ConstantValue(cmp->operand(1));
  if (!k || !bound) {
    k = StateIndex(cmp->operand(1));
    bound = ConstantValue(cmp->operand(0));
    dir = Mirrored(dir);
  }
  if (!k || !bound) return fail("the compare is not state element vs constant");
  const HloInstruction* init_x = TupleElement(w.operand(0), *k);
  std::optional<int64_t> init = init_x ? ConstantValue(init_x) : std::nullopt;
  if (!init) return fail("the counter's initial value is not a constant");
  const HloInstruction* next = TupleElement(w.while_body()->root_instruction(), *k);
  if (next == nullptr) return fail("the body does not return a tuple");
  next = Through(next);
  int64_t step = 0;
  if (next->opcode() == HloOpcode::kAdd || next->opcode() == HloOpcode::kSubtract) {
    const bool sub = next->opcode() == HloOpcode::kSubtract;
    std::optional<int64_t> i0 = StateIndex(next->operand(0));
    std::optional<int64_t> c1 = ConstantValue(next->operand(1));
    if (i0 == k && c1) {
      step = sub ? -*c1 : *c1;
    } else if (!sub && StateIndex(next->operand(1)) == k && ConstantValue(next->operand(0))) {
      step = *ConstantValue(next->operand(0));
    }
  }
  if (step == 0) return fail("the counter does not change by a constant each trip");
  // Count trips without looping through huge ranges: the counter moves
  // monotonically, so a loop longer than the limit is refused, not a hang.
  constexpr int64_t kLimit = int64_t{1} << 26;
  int64_t trips = 0;
  for (int64_t i = *init; Holds(dir, i, *bound); i += step) {
    if (++trips > kLimit) return fail("it runs more than 2^26 times, or never stops");
  }
  return CountedLoop{*k, *init, step, trips};
}

}  // namespace weft
