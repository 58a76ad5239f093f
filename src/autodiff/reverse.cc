// The reverse pass: cotangent accumulation over one computation, plus the
// helpers every vjp rule shares.
#include <fmt/format.h>

#include <algorithm>

#include "vjp.h"
#include "weft/autodiff/stop_gradient.h"
#include "weft/base/error.h"

namespace weft::autodiff {

int64_t ValueArity(const Shape& shape) {
  return shape.IsTuple() ? static_cast<int64_t>(shape.tuple_shapes().size()) : 1;
}

const Shape& ElementShape(const Shape& shape, int64_t index) {
  return shape.IsTuple() ? shape.tuple_shapes(index) : shape;
}

bool PassesNoGradient(const HloInstruction& instr) {
  return instr.opcode() == HloOpcode::kCompare || IsGradientStopped(instr);
}

// ---------------------------------------------------------------------------
// ModuleEmitter

ModuleEmitter::ModuleEmitter(const HloModule& forward, HloModule& out, const GradOptions& options)
    : forward_(forward), out_(out), options_(options) {
  // New shard_as ids must not collide with the forward's own groups.
  for (const HloComputation* c : forward.computations()) {
    for (const HloInstruction* i : c->instructions()) {
      if (i->has_sharding() && i->sharding()->shard_group()) {
        next_group_id_ = std::max(next_group_id_, i->sharding()->shard_group()->id + 1);
      }
    }
  }
}

HloComputation* ModuleEmitter::Clone(const HloComputation* forward) {
  if (auto it = clones_.find(forward); it != clones_.end()) return it->second;
  HloComputationBuilder b(forward->name());
  std::unordered_map<const HloInstruction*, HloInstruction*> map;
  for (const HloInstruction* instr : forward->instructions()) {
    std::vector<HloInstruction*> operands;
    for (const HloInstruction* op : instr->operands()) operands.push_back(map.at(op));
    map[instr] = CloneInstruction(b, *this, *instr, std::move(operands));
  }
  HloComputation* clone = out_.AddComputation(b.Build(map.at(forward->root_instruction())));
  clones_[forward] = clone;
  return clone;
}

HloComputation* ModuleEmitter::AddReducer(PrimitiveType type) {
  HloComputation*& slot = add_reducers_[static_cast<int>(type)];
  if (!slot) {
    slot = out_.AddComputation(MakeScalarReduction(
        fmt::format("grad_add_{}", PrimitiveTypeName(type)), HloOpcode::kAdd, type));
  }
  return slot;
}

HloInstruction* CloneInstruction(HloComputationBuilder& b, ModuleEmitter& emitter,
                                 const HloInstruction& instr,
                                 std::vector<HloInstruction*> operands) {
  std::vector<HloComputation*> called;
  for (const HloComputation* c : instr.called_computations()) called.push_back(emitter.Clone(c));
  HloInstruction* copy = b.AddInstruction(instr.opcode(), std::move(operands), instr.attrs(),
                                          instr.shape(), std::move(called), instr.name());
  copy->set_sharding(instr.sharding());
  return copy;
}

// ---------------------------------------------------------------------------
// VjpContext helpers

HloInstruction* VjpContext::Scalar(PrimitiveType type, double value) {
  return b().ConstantScalar(type, value);
}

HloInstruction* VjpContext::ScalarLike(const Shape& shape, double value) {
  HloInstruction* s = Scalar(shape.element_type(), value);
  if (shape.rank() == 0) return s;
  return b().Broadcast(s, shape.dimensions(), {});
}

HloInstruction* VjpContext::Zeros(const Shape& shape) {
  WEFT_CHECK(shape.IsArray(), "autodiff: zeros of a non-array shape {}", shape.ToString());
  return ScalarLike(shape, 0.0);
}

HloInstruction* VjpContext::Sum(HloInstruction* x, std::vector<int64_t> dims) {
  if (dims.empty()) return x;
  const PrimitiveType type = x->shape().element_type();
  return b().Reduce(x, Scalar(type, 0.0), std::move(dims), emitter().AddReducer(type));
}

HloInstruction* VjpContext::ConvertTo(HloInstruction* x, PrimitiveType type) {
  return x->shape().element_type() == type ? x : b().Convert(x, type);
}

// ---------------------------------------------------------------------------
// VjpTable

void VjpTable::Register(HloOpcode opcode, VjpRule rule) { rules_[static_cast<int>(opcode)] = rule; }

VjpRule VjpTable::Find(HloOpcode opcode) const {
  auto it = rules_.find(static_cast<int>(opcode));
  return it == rules_.end() ? nullptr : it->second;
}

const VjpTable& Vjps() {
  static const VjpTable table = [] {
    VjpTable t;
    RegisterElementwiseVjps(t);
    RegisterShapeOpVjps(t);
    RegisterDotVjps(t);
    RegisterConvolutionVjps(t);
    RegisterReduceVjps(t);
    RegisterGatherVjps(t);
    RegisterAttentionVjps(t);
    RegisterWhileVjps(t);
    return t;
  }();
  return table;
}

// ---------------------------------------------------------------------------
// ReversePass

ReversePass::ReversePass(HloComputationBuilder& b, ModuleEmitter& emitter, PrimalFn primal,
                         PrimalElementFn primal_element, PlanFn plan)
    : b_(b),
      emitter_(emitter),
      primal_(std::move(primal)),
      primal_element_(std::move(primal_element)),
      plan_(std::move(plan)) {}

namespace {

bool CarriesGradient(const Shape& shape) {
  if (shape.IsTuple()) {
    return std::any_of(shape.tuple_shapes().begin(), shape.tuple_shapes().end(),
                       [](const Shape& s) { return CarriesGradient(s); });
  }
  return IsFloatingPoint(shape.element_type());
}

}  // namespace

void ReversePass::Run(
    const HloComputation& forward, const std::vector<const HloInstruction*>& sources,
    const std::vector<std::pair<const HloInstruction*, std::vector<HloInstruction*>>>& seeds) {
  const std::vector<HloInstruction*> order = forward.MakeInstructionPostOrder();
  // Forward reachability from the sources (compare, integer values and
  // stop-gradient marks cut it: no gradient flows through them).
  std::unordered_set<const HloInstruction*> from_sources(sources.begin(), sources.end());
  for (const HloInstruction* instr : order) {
    if (from_sources.count(instr) || !CarriesGradient(instr->shape()) || PassesNoGradient(*instr)) {
      continue;
    }
    for (const HloInstruction* op : instr->operands()) {
      if (from_sources.count(op)) {
        from_sources.insert(instr);
        break;
      }
    }
  }
  // Backward reachability from the seeds.
  std::unordered_set<const HloInstruction*> to_seeds;
  for (const auto& [instr, cts] : seeds) to_seeds.insert(instr);
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    if (!to_seeds.count(*it)) continue;
    for (const HloInstruction* op : (*it)->operands()) to_seeds.insert(op);
  }
  needs_.clear();
  for (const HloInstruction* instr : from_sources) {
    if (to_seeds.count(instr)) needs_.insert(instr);
  }
  for (const auto& [instr, cts] : seeds) {
    for (int64_t k = 0; k < static_cast<int64_t>(cts.size()); ++k) {
      if (cts[k]) Accumulate(instr, cts[k], k);
    }
  }
  const std::unordered_set<const HloInstruction*> stop(sources.begin(), sources.end());
  const VjpTable& table = Vjps();
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const HloInstruction* instr = *it;
    if (stop.count(instr) || !needs_.count(instr)) continue;
    auto ct = ct_.find(instr);
    if (ct == ct_.end()) continue;
    if (std::none_of(ct->second.begin(), ct->second.end(), [](auto* c) { return c != nullptr; })) {
      continue;
    }
    VjpRule rule = table.Find(instr->opcode());
    WEFT_CHECK(rule != nullptr,
               "autodiff: no vjp rule for {} (needed because it depends on a differentiated "
               "parameter); express it with supported ops or mark its inputs non-differentiable",
               instr->Describe());
    const std::vector<HloInstruction*> cts = ct->second;  // rules may add to ct_
    rule(*this, *instr, cts);
  }
}

void ReversePass::Accumulate(const HloInstruction* fwd, HloInstruction* ct, int64_t index) {
  if (!ct || !needs_.count(fwd)) return;
  const Shape& want = ElementShape(fwd->shape(), index);
  WEFT_CHECK(ct->shape().dimensions() == want.dimensions(),
             "autodiff internal: cotangent {} for {} element {} should be {}",
             ct->shape().ToString(), fwd->Describe(), index, want.ToString());
  ct = ConvertTo(ct, want.element_type());
  std::vector<HloInstruction*>& slot = ct_[fwd];
  if (slot.empty()) slot.resize(ValueArity(fwd->shape()), nullptr);
  slot[index] = slot[index] ? b_.Add(slot[index], ct) : ct;
}

HloInstruction* ReversePass::Cotangent(const HloInstruction* fwd, int64_t index) const {
  auto it = ct_.find(fwd);
  return it == ct_.end() ? nullptr : it->second.at(index);
}

}  // namespace weft::autodiff
