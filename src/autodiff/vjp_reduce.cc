// vjp of reduce with add or maximum (one operand). Add spreads the cotangent
// back over the reduced dims; max gives it to the maxima, split evenly among
// ties (jax's convention), so the result stays a true subgradient.
#include <algorithm>

#include "vjp.h"
#include "weft/base/algorithm.h"
#include "weft/base/error.h"

namespace weft::autodiff {
namespace {

HloOpcode ReducerOpcode(const HloInstruction& f) {
  const HloComputation* r = f.to_apply();
  const HloInstruction* root = r->root_instruction();
  const bool binary_of_params = root->operand_count() == 2 &&
                                root->operand(0)->opcode() == HloOpcode::kParameter &&
                                root->operand(1)->opcode() == HloOpcode::kParameter;
  WEFT_CHECK(binary_of_params &&
                 (root->opcode() == HloOpcode::kAdd || root->opcode() == HloOpcode::kMaximum),
             "autodiff: {} reduces with '{}'; only add and maximum reductions are "
             "differentiable",
             f.Describe(), r->name());
  return root->opcode();
}

void Reduce(VjpContext& c, const HloInstruction& f, std::span<HloInstruction* const> ct) {
  WEFT_CHECK(f.operand_count() == 2,
             "autodiff: {} is a variadic reduce; only single-operand "
             "reductions are differentiable",
             f.Describe());
  const HloOpcode op = ReducerOpcode(f);
  const Shape& in = f.operand(0)->shape();
  std::vector<int64_t> kept;
  for (int64_t d = 0; d < in.rank(); ++d) {
    if (!Contains(f.dimensions(), d)) {
      kept.push_back(d);
    }
  }
  HloInstruction* g = c.b().Broadcast(ct[0], in.dimensions(), kept);
  if (op == HloOpcode::kMaximum) {
    HloInstruction* x = c.Primal(f.operand(0));
    HloInstruction* y = c.b().Broadcast(c.Primal(&f), in.dimensions(), kept);
    HloInstruction* is_max = c.b().Compare(x, y, ComparisonDirection::kEq);
    const Shape fshape = in.WithElementType(ct[0]->shape().element_type());
    HloInstruction* zero = c.Zeros(fshape);
    HloInstruction* ones = c.b().Select(is_max, c.ScalarLike(fshape, 1.0), zero);
    HloInstruction* count = c.b().Broadcast(c.Sum(ones, f.dimensions()), in.dimensions(), kept);
    g = c.b().Select(is_max, c.b().Divide(g, count), zero);
  }
  c.Accumulate(f.operand(0), g);
}

}  // namespace

void RegisterReduceVjps(VjpTable& t) { t.Register(HloOpcode::kReduce, Reduce); }

}  // namespace weft::autodiff
