#include "weft/spmd/sharding_propagation.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <functional>
#include <unordered_set>

#include "propagator.h"
#include "weft/base/error.h"
#include "weft/spmd/factor_projection.h"
#include "weft/spmd/improve_sharding.h"

namespace weft {

std::string_view DecisionKindName(DecisionKind kind) {
  switch (kind) {
    case DecisionKind::kAnnotation:
      return "annotation";
    case DecisionKind::kForward:
      return "forward";
    case DecisionKind::kBackward:
      return "backward";
    case DecisionKind::kShardGroup:
      return "shard group";
    case DecisionKind::kGroupAlignment:
      return "shard_as alignment";
    case DecisionKind::kUnspecifiedDims:
      return "unspecified dims";
    case DecisionKind::kWhileAgreement:
      return "while agreement";
    case DecisionKind::kManual:
      return "manual";
    case DecisionKind::kOutputOrParameter:
      return "output/parameter option";
    case DecisionKind::kDefault:
      return "default";
  }
  return "?";
}

namespace spmd {

bool IsCustomCall(const HloInstruction& instr, std::string_view target) {
  return instr.opcode() == HloOpcode::kCustomCall && instr.attrs().custom_call_target == target;
}

int64_t BranchArgumentIndex(const HloInstruction& conditional, const HloComputation& branch) {
  const std::vector<HloComputation*>& branches = conditional.called_computations();
  const auto it = std::find(branches.begin(), branches.end(), &branch);
  WEFT_INTERNAL_CHECK(it != branches.end(), "'{}' is not a branch of {}", branch.name(),
                      conditional.Describe());
  return 1 + (it - branches.begin());
}

int64_t LeafOffset(const Shape& tuple, int64_t index) {
  int64_t offset = 0;
  for (int64_t i = 0; i < index; ++i) offset += tuple.tuple_shapes(i).LeafCount();
  return offset;
}

HloSharding LeafSharding(const HloSharding& sharding, int64_t leaf) {
  if (!sharding.IsTuple()) return sharding;
  return sharding.tuple_elements().at(leaf);
}

HloSharding WithLeaf(const std::optional<HloSharding>& sharding, const Shape& shape, int64_t leaf,
                     const HloSharding& value) {
  std::vector<HloSharding> leaves;
  if (sharding && sharding->IsTuple()) {
    leaves = sharding->tuple_elements();
  } else {
    leaves.assign(shape.LeafCount(), sharding ? *sharding : HloSharding::Replicate());
  }
  leaves.at(leaf) = value;
  return HloSharding::Tuple(std::move(leaves));
}

std::optional<std::vector<int64_t>> ParseUnspecifiedDims(const HloInstruction& instr) {
  auto parse = [&](const std::string& text) -> std::optional<std::vector<int64_t>> {
    const size_t at = text.find("unspecified_dims");
    if (at == std::string::npos) return std::nullopt;
    const size_t open = text.find('[', at), close = text.find(']', at);
    WEFT_CHECK(open != std::string::npos && close != std::string::npos && open < close,
               "{}: unspecified_dims must look like unspecified_dims=[0,1], got '{}'",
               instr.Describe(), text);
    std::vector<int64_t> dims;
    std::string number;
    for (size_t i = open + 1; i <= close; ++i) {
      const char c = text[i];
      if (std::isdigit(static_cast<unsigned char>(c))) {
        number += c;
      } else if (c == ',' || c == ']' || c == ' ') {
        if (!number.empty()) dims.push_back(std::stoll(number));
        number.clear();
      } else if (c != '"' && c != '\\') {
        Fail("{}: bad character '{}' in unspecified_dims '{}'; write unspecified_dims=[0,1]",
             instr.Describe(), c, text);
      }
    }
    const int64_t rank = instr.shape().IsArray() ? instr.shape().rank() : 0;
    for (int64_t d : dims) {
      WEFT_CHECK(d >= 0 && d < rank, "{}: unspecified dim {} is out of range for {}",
                 instr.Describe(), d, instr.shape().ToString());
    }
    std::sort(dims.begin(), dims.end());
    return dims;
  };
  if (auto dims = parse(instr.attrs().backend_config)) return dims;
  for (const auto& [key, value] : instr.attrs().passthrough) {
    if (key == "frontend_attributes") {
      if (auto dims = parse(value)) return dims;
    }
  }
  return std::nullopt;
}

Propagator::Propagator(HloModule& module, const PropagationOptions& options,
                       PropagationResult* result)
    : module_(module), options_(options), result_(result) {}

const OpShardingRule* Propagator::Rule(const HloInstruction* instr) {
  const int32_t i = Index(instr);
  if (!rule_built_[i]) {
    rule_built_[i] = 1;
    if (auto rule = GetOpShardingRule(*instr)) {
      rules_[i] = std::make_unique<OpShardingRule>(std::move(*rule));
    }
  }
  return rules_[i].get();
}

std::span<const int64_t> Propagator::Dims(const HloInstruction* instr, TensorRef ref) const {
  const Shape& shape = ref.is_result ? instr->shape() : instr->operand(ref.index)->shape();
  if (shape.IsTuple()) {
    const Shape& leaf = shape.tuple_shapes(ref.is_result ? ref.index : 0);
    return leaf.dimensions();
  }
  return shape.dimensions();
}

std::optional<HloSharding> Propagator::Project(const HloInstruction* instr, TensorRef from,
                                               const HloSharding& sharding, TensorRef to) {
  const OpShardingRule* rule = Rule(instr);
  if (rule == nullptr) return std::nullopt;
  const auto& tensors_from = from.is_result ? rule->results : rule->operands;
  const auto& tensors_to = to.is_result ? rule->results : rule->operands;
  if (from.index >= static_cast<int64_t>(tensors_from.size()) ||
      to.index >= static_cast<int64_t>(tensors_to.size())) {
    return std::nullopt;
  }
  std::vector<CachedProjection>& cache = projection_cache_[Index(instr)];
  for (const CachedProjection& c : cache) {
    if (c.from == from && c.to == to && c.input == sharding) return c.output;
  }
  auto projected = ProjectSharding(*rule, from, Dims(instr, from), sharding, to, Dims(instr, to));
  if (projected && instr->opcode() == HloOpcode::kReverse && projected->IsTiled()) {
    projected = ReverseSharding(*projected, instr->dimensions());
  }
  if (cache.size() >= 8) cache.erase(cache.begin());
  cache.push_back({from, to, sharding, projected});
  return projected;
}

void Propagator::SetSharding(HloInstruction* instr, std::optional<HloSharding> sharding,
                             const DecisionSource& why) {
  if (options_.record_decisions) {
    ShardingDecision d;
    d.round = round_;
    d.level = level_;
    d.kind = why.kind;
    d.source = why.source;
    d.rule = std::string(why.rule);
    d.before = instr->sharding();
    d.after = sharding;
    result_->decisions[instr].push_back(std::move(d));
  }
  instr->set_sharding(std::move(sharding));
  result_->changed = true;
}

bool Propagator::Improve(HloInstruction* instr, HloSharding proposed, bool may_combine,
                         bool aggressive, const DecisionSource& why) {
  const HloSharding* current = instr->has_sharding() ? &*instr->sharding() : nullptr;
  std::span<const int64_t> dims;
  if (instr->shape().IsArray()) dims = instr->shape().dimensions();
  auto improved =
      ReturnImprovedSharding(std::move(proposed), current, dims, may_combine, aggressive);
  if (!improved) return false;
  SetSharding(instr, std::move(*improved), why);
  return true;
}

bool Propagator::ImproveLeaf(HloInstruction* instr, int64_t leaf, HloSharding proposed,
                             bool may_combine, bool aggressive, const DecisionSource& why) {
  if (!instr->shape().IsTuple())
    return Improve(instr, std::move(proposed), may_combine, aggressive, why);
  std::optional<HloSharding> current;
  if (instr->has_sharding()) current = LeafSharding(*instr->sharding(), leaf);
  const Shape& leaf_shape = instr->shape().tuple_shapes(leaf);
  auto improved = ReturnImprovedSharding(std::move(proposed), current ? &*current : nullptr,
                                         leaf_shape.dimensions(), may_combine, aggressive);
  if (!improved) return false;
  SetSharding(instr, WithLeaf(instr->sharding(), instr->shape(), leaf, *improved), why);
  return true;
}

int64_t Propagator::NonRootUsers(const HloInstruction* instr) const {
  int64_t n = 0;
  for (const HloInstruction* u : instr->users()) n += u != u->parent()->root_instruction();
  return n;
}

const std::vector<int64_t>* Propagator::UnspecifiedDims(const HloInstruction* instr) const {
  auto it = unspecified_dims_.find(instr);
  return it == unspecified_dims_.end() ? nullptr : &it->second;
}

bool Propagator::SupportsSpatialPartitioning(const HloInstruction* instr, bool allow_output,
                                             bool allow_params) const {
  const HloComputation* parent = instr->parent();
  const bool is_entry_root =
      parent == module_.entry_computation() && parent->root_instruction() == instr;
  if (parent->root_instruction() == instr && !InComputationMap(parent) &&
      !(is_entry_root && allow_output)) {
    return false;
  }
  const HloOpcode op = instr->opcode();
  if (IsElementwise(op) || op == HloOpcode::kCompare) return true;
  switch (op) {
    case HloOpcode::kBroadcast:
    case HloOpcode::kConcatenate:
    case HloOpcode::kConstant:
    case HloOpcode::kConvolution:
    case HloOpcode::kDot:
    case HloOpcode::kDynamicSlice:
    case HloOpcode::kDynamicUpdateSlice:
    case HloOpcode::kGather:
    case HloOpcode::kGetTupleElement:
    case HloOpcode::kIota:
    case HloOpcode::kPad:
    case HloOpcode::kReshape:
    case HloOpcode::kScatter:
    case HloOpcode::kSlice:
    case HloOpcode::kTranspose:
    case HloOpcode::kTuple:
    case HloOpcode::kWhile:
    case HloOpcode::kReduce:
    case HloOpcode::kReverse:
    case HloOpcode::kCall:
    case HloOpcode::kConditional:
    case HloOpcode::kSort:
    case HloOpcode::kTopK:
    case HloOpcode::kCholesky:
    case HloOpcode::kTriangularSolve:
    case HloOpcode::kRaggedDot:
    case HloOpcode::kReduceWindow:
    case HloOpcode::kSelectAndScatter:
    case HloOpcode::kBitcastConvert:
    case HloOpcode::kRng:
    case HloOpcode::kRngBitGenerator:
      return true;
    case HloOpcode::kAllReduce:
    case HloOpcode::kReduceScatter:
      return !instr->attrs().channel_id.has_value();
    case HloOpcode::kParameter:
      return allow_params || InComputationMap(parent);
    case HloOpcode::kCustomCall:
      return IsCustomCall(*instr, "Sharding") ||
             HasCustomCallRule(instr->attrs().custom_call_target) ||
             const_cast<Propagator*>(this)->Rule(instr) != nullptr;
    default:
      return false;
  }
}

namespace {

// The instructions that must share one sharding with `instr` (XLA's
// GetRelatedInstructions), or empty.
std::vector<HloInstruction*> Related(
    HloInstruction* instr,
    const std::unordered_map<const HloComputation*, HloInstruction*>& computation_map) {
  if (instr->opcode() == HloOpcode::kWhile) {
    return {instr, instr->while_body()->root_instruction(),
            instr->while_body()->parameter_instruction(0),
            instr->while_condition()->parameter_instruction(0)};
  }
  if (instr->opcode() == HloOpcode::kCall) return {instr, instr->to_apply()->root_instruction()};
  if (instr->opcode() == HloOpcode::kConditional) {
    std::vector<HloInstruction*> related = {instr};
    for (HloComputation* branch : instr->called_computations()) {
      related.push_back(branch->root_instruction());
    }
    return related;
  }
  if (instr->opcode() == HloOpcode::kParameter) {
    auto it = computation_map.find(instr->parent());
    if (it != computation_map.end() && it->second->opcode() == HloOpcode::kCall) {
      return {instr, it->second->operand(instr->parameter_number())};
    }
    if (it != computation_map.end() && it->second->opcode() == HloOpcode::kConditional) {
      return {instr, it->second->operand(BranchArgumentIndex(*it->second, *instr->parent()))};
    }
  }
  return {};
}

}  // namespace

}  // namespace spmd

using spmd::Propagator;

namespace spmd {

void Propagator::ReadOptions(const HloComputation& entry) {
  const auto& out_flags = options_.allow_spmd_sharding_propagation_to_output;
  const auto& param_flags = options_.allow_spmd_sharding_propagation_to_parameters;
  allow_output_any_ = std::any_of(out_flags.begin(), out_flags.end(), [](bool b) { return b; });
  allow_params_any_ = std::any_of(param_flags.begin(), param_flags.end(), [](bool b) { return b; });
  const HloInstruction* root = entry.root_instruction();
  const int64_t num_outputs = root->shape().IsTuple() ? root->shape().tuple_shapes().size() : 1;
  WEFT_CHECK(out_flags.size() <= 1 || static_cast<int64_t>(out_flags.size()) == num_outputs,
             "--allow-output has {} values but the entry computation has {} outputs; give one "
             "value for all or one per output",
             out_flags.size(), num_outputs);
  // --allow-params takes any count, as XLA does (ApplyOutputAndParameterOptions).
}

void Propagator::IndexInstructions() {
  // Callees first, each in post order.
  for (HloComputation* c : module_.MakeComputationPostOrder()) {
    computations_.push_back(c);
    post_orders_.push_back(c->MakeInstructionPostOrder());
    for (HloInstruction* p : c->parameter_instructions()) {
      if (p && std::find(post_orders_.back().begin(), post_orders_.back().end(), p) ==
                   post_orders_.back().end()) {
        post_orders_.back().insert(post_orders_.back().begin(), p);
      }
    }
    // Dead code (unreachable from the root) still users of live values: it
    // gets shardings too, after everything it may read (instructions are
    // kept in definition order, operands first).
    std::unordered_set<const HloInstruction*> reached(post_orders_.back().begin(),
                                                      post_orders_.back().end());
    for (HloInstruction* i : c->instructions()) {
      if (!reached.count(i)) post_orders_.back().push_back(i);
    }
    for (HloInstruction* i : post_orders_.back()) {
      index_.emplace(i, static_cast<int32_t>(instrs_.size()));
      instrs_.push_back(i);
    }
  }
  const size_t n = instrs_.size();
  provided_.assign(n, 0);
  rule_built_.assign(n, 0);
  rules_.resize(n);
  projection_cache_.resize(n);
  group_of_.assign(n, -1);
}

void Propagator::ApplyShardingCustomCalls() {
  // Unspecified dims, and the operand takes the annotation when it has none
  // (as XLA's ProcessShardingInstruction).
  for (HloInstruction* i : instrs_) {
    if (!IsCustomCall(*i, "Sharding") || !i->has_sharding()) continue;
    if (auto dims = ParseUnspecifiedDims(*i); dims && !dims->empty()) {
      std::sort(dims->begin(), dims->end());
      if (i->users().size() == 1) {
        HloInstruction* user = i->users()[0];
        if (IsCustomCall(*user, "SPMDFullToShardShape") ||
            IsCustomCall(*user, "SPMDShardToFullShape")) {
          auto user_dims = ParseUnspecifiedDims(*user);
          if (user_dims) std::sort(user_dims->begin(), user_dims->end());
          if (user_dims == dims && user->has_sharding()) manual_conversion_[i] = user;
        }
      }
      unspecified_dims_[i] = std::move(*dims);
    } else if (!i->operand(0)->has_sharding() && !i->sharding()->IsUnknown()) {
      // A starting point, not a fixed sharding: propagation may still improve
      // it (XLA's current pass merges two annotations of one value there).
      SetSharding(i->operand(0), i->sharding(), {DecisionKind::kAnnotation, i, "Sharding"});
      seeded_.insert(i->operand(0));
    }
  }
}

void Propagator::AgreeCalledComputations() {
  for (HloComputation* c : computations_) {
    for (HloInstruction* i : c->instructions()) {
      if (!RunsCalledComputations(i->opcode())) continue;
      std::vector<HloInstruction*> related = Related(i, computation_map_);
      HloInstruction* sharded = nullptr;
      for (HloInstruction* r : related) {
        if (r->has_sharding()) {
          sharded = r;
          break;
        }
      }
      if (sharded) {
        for (HloInstruction* r : related) {
          if (r != sharded && r->sharding() != sharded->sharding()) {
            SetSharding(r, sharded->sharding(), {DecisionKind::kWhileAgreement, sharded, "while"});
          }
        }
      }
      for (HloComputation* callee : i->called_computations()) computation_map_[callee] = i;
    }
  }
}

void Propagator::MarkProvided(HloComputation& entry) {
  HloInstruction* root = entry.root_instruction();
  for (HloInstruction* i : instrs_) {
    provided_[Index(i)] = i->has_sharding() && i != root && i->opcode() != HloOpcode::kParameter &&
                          !i->sharding()->IsUnknown() && !seeded_.count(i);
  }
  saved_root_ = root->sharding();
  saved_params_.clear();
  for (HloInstruction* p : entry.parameter_instructions()) saved_params_.push_back(p->sharding());
  if (!allow_output_any_ && (!root->has_sharding() || !root->sharding()->IsUnknown()) &&
      root->opcode() != HloOpcode::kWhile) {
    provided_[Index(root)] = 1;
  }
  if (!allow_params_any_) {
    for (HloInstruction* p : entry.parameter_instructions()) {
      if (p->has_sharding() && !p->sharding()->IsUnknown()) provided_[Index(p)] = 1;
    }
  }
}

void Propagator::ClearCache(Sweep& sweep, HloInstruction* hlo, HloInstruction* for_users) {
  for (HloInstruction* op : hlo->operands()) sweep.done_bwd[Index(op)] = 0;
  for (HloInstruction* user : for_users->users()) {
    sweep.done_fwd[Index(user)] = 0;
    for (HloComputation* c : user->called_computations()) {
      for (HloInstruction* p : c->parameter_instructions()) {
        if (p) sweep.done_fwd[Index(p)] = 0;
      }
    }
  }
  if (group_of_[Index(hlo)] >= 0) {
    for (HloInstruction* m : groups_[group_of_[Index(hlo)]].members) {
      if (m != hlo) sweep.done_group[Index(m)] = 0;
    }
  }
}

void Propagator::Agree(Sweep& sweep, HloInstruction* instr) {
  std::vector<HloInstruction*> related;
  const HloOpcode op = instr->opcode();
  if (RunsCalledComputations(op)) {
    related = Related(instr, computation_map_);
  } else if (op == HloOpcode::kParameter || instr->parent()->root_instruction() == instr) {
    auto it = computation_map_.find(instr->parent());
    if (it != computation_map_.end()) {
      // A call's or branch's parameter agrees with its argument; the
      // result with the root (a while's state with both).
      const bool argument =
          op == HloOpcode::kParameter && it->second->opcode() != HloOpcode::kWhile;
      if (!argument || instr->parent()->root_instruction() == instr) {
        related = Related(it->second, computation_map_);
      }
      if (argument) {
        auto more = Related(instr, computation_map_);
        related.insert(related.end(), more.begin(), more.end());
      }
    }
  }
  if (std::find(related.begin(), related.end(), instr) == related.end()) return;
  for (HloInstruction* r : related) {
    if (r == instr || IsProvided(r) || r->sharding() == instr->sharding()) continue;
    SetSharding(r, instr->sharding(), {DecisionKind::kWhileAgreement, instr, "while"});
    ClearCache(sweep, r, r);
    Agree(sweep, r);
  }
}

bool Propagator::SweepOnce(Sweep& sweep, const std::vector<HloInstruction*>& order, int level,
                           const SweepStep& step) {
  std::vector<char>& done = sweep.*step.done;
  bool changed = false;
  auto visit = [&](HloInstruction* i) {
    if (step.before) step.before(i);
    const int32_t k = Index(i);
    if ((step.applies && !step.applies(i)) || done[k]) return;
    if (IsProvided(i)) {
      // Only an annotation's unspecified dims may still be refined.
      if (level > 0 && UnspecifiedDims(i) && step.refine_unspecified(i)) {
        ClearCache(sweep, i, i);
        if (HloInstruction* conversion = ManualConversionOf(i)) {
          ClearCache(sweep, conversion, conversion);
        }
        done[k] = 1;
        changed = true;
      }
      return;
    }
    done[k] = 1;
    if (step.infer(i)) {
      Agree(sweep, i);
      ClearCache(sweep, i, i);
      changed = true;
    }
  };
  if (step.reverse) {
    for (auto it = order.rbegin(); it != order.rend(); ++it) visit(*it);
  } else {
    for (HloInstruction* i : order) visit(i);
  }
  return changed;
}

bool Propagator::SweepShardGroups(Sweep& sweep, const std::vector<HloInstruction*>& order,
                                  int level) {
  return SweepOnce(
      sweep, order, level,
      {.done = &Sweep::done_group,
       .applies = [&](const HloInstruction* i) { return group_of_[Index(i)] >= 0; },
       .refine_unspecified = [&](HloInstruction* i) { return RefineUnspecifiedFromGroup(i); },
       .infer = [&](HloInstruction* i) { return InferFromShardGroup(i, level); }});
}

bool Propagator::SweepForward(Sweep& sweep, const std::vector<HloInstruction*>& order, int level) {
  return SweepOnce(
      sweep, order, level,
      {.done = &Sweep::done_fwd,
       .refine_unspecified = [&](HloInstruction* i) { return RefineUnspecifiedFromOperand(i); },
       .infer = [&](HloInstruction* i) { return InferFromOperands(i, level); }});
}

bool Propagator::SweepBackward(Sweep& sweep, const std::vector<HloInstruction*>& order, int level) {
  // A manual region's edge not yet settled makes its operand look again.
  auto reopen_edge_operand = [&](HloInstruction* i) {
    if ((IsCustomCall(*i, "SPMDFullToShardShape") || IsCustomCall(*i, "SPMDShardToFullShape")) &&
        !sweep.done_bwd[Index(i)]) {
      sweep.done_bwd[Index(i->operand(0))] = 0;
    }
  };
  return SweepOnce(sweep, order, level,
                   {.done = &Sweep::done_bwd,
                    .reverse = true,
                    .before = reopen_edge_operand,
                    .refine_unspecified =
                        [&](HloInstruction* i) { return RefineUnspecifiedFromUsers(i, level); },
                    .infer = [&](HloInstruction* i) { return InferFromUsers(i, level); }});
}

void Propagator::RunToFixPoint(int level) {
  level_ = level;
  const size_t n = instrs_.size();
  Sweep sweep{std::vector<char>(n, 0), std::vector<char>(n, 0), std::vector<char>(n, 0)};
  bool changed_last = true;
  while (changed_last) {
    changed_last = false;
    ++round_;
    for (size_t c = 0; c < computations_.size(); ++c) {
      const std::vector<HloInstruction*>& order = post_orders_[c];
      changed_last |= SweepShardGroups(sweep, order, level);
      changed_last |= SweepForward(sweep, order, level);
      changed_last |= SweepBackward(sweep, order, level);
    }
  }
}

void Propagator::ApplyOutputAndParameterOptions(HloComputation& entry) {
  const auto& out_flags = options_.allow_spmd_sharding_propagation_to_output;
  const auto& param_flags = options_.allow_spmd_sharding_propagation_to_parameters;
  HloInstruction* root = entry.root_instruction();
  const int64_t num_outputs = root->shape().IsTuple() ? root->shape().tuple_shapes().size() : 1;
  auto evenly = [](const Shape& shape, const HloSharding& s) {
    if (!s.IsTiled()) return true;
    for (int64_t d = 0; d < shape.rank() && d < s.TiledDataRank(); ++d) {
      if (shape.dimensions(d) % s.tile_assignment().dim(d) != 0) return false;
    }
    return true;
  };
  const DecisionSource option_why{DecisionKind::kOutputOrParameter, nullptr, "options"};
  if (allow_output_any_ && root->has_sharding()) {
    HloSharding s = *root->sharding();
    // An uneven output is replicated where a flag speaks for it: one per
    // element of a tuple, or the one of an array (XLA keeps a tuple's uneven
    // elements under a single flag).
    const bool per_output =
        !root->shape().IsTuple() || static_cast<int64_t>(out_flags.size()) == num_outputs;
    for (int64_t e = 0; e < num_outputs; ++e) {
      const bool allowed = out_flags.size() == 1 ? out_flags[0] : static_cast<bool>(out_flags[e]);
      const Shape& shape = root->shape().IsTuple() ? root->shape().tuple_shapes(e) : root->shape();
      HloSharding leaf = LeafSharding(s, e);
      if (!allowed) {
        leaf = saved_root_ && !saved_root_->IsUnknown() ? LeafSharding(*saved_root_, e)
                                                        : HloSharding::Replicate();
      } else if (per_output && shape.IsArray() && !evenly(shape, leaf)) {
        leaf = HloSharding::Replicate();
      }
      s = root->shape().IsTuple() ? WithLeaf(s, root->shape(), e, leaf) : leaf;
    }
    if (s != *root->sharding()) SetSharding(root, s, option_why);
  } else if (!allow_output_any_ && root->opcode() == HloOpcode::kWhile &&
             root->sharding() != saved_root_) {
    SetSharding(root, saved_root_, option_why);
  }
  // The parameters, as XLA reads its flags: one per parameter, or one per
  // element of a single tuple parameter; any other count lets every
  // parameter keep what propagation gave it.
  const int64_t num_params = entry.num_parameters();
  const int64_t num_param_flags = static_cast<int64_t>(param_flags.size());
  HloInstruction* only = num_params == 1 ? entry.parameter_instruction(0) : nullptr;
  if (allow_params_any_ && num_param_flags == num_params) {
    for (int64_t p = 0; p < num_params; ++p) {
      HloInstruction* param = entry.parameter_instruction(p);
      std::optional<HloSharding> want = param->sharding();
      if (!param_flags[p]) {
        want = saved_params_[p] && !saved_params_[p]->IsUnknown() ? saved_params_[p] : std::nullopt;
      } else if (want && param->shape().IsArray() && !evenly(param->shape(), *want)) {
        want = HloSharding::Replicate();
      }
      if (want != param->sharding()) SetSharding(param, want, option_why);
    }
  } else if (allow_params_any_ && only != nullptr && only->shape().IsTuple() &&
             static_cast<int64_t>(only->shape().tuple_shapes().size()) == num_param_flags &&
             only->has_sharding()) {
    const std::optional<HloSharding>& saved = saved_params_[0];
    HloSharding s = *only->sharding();
    for (int64_t e = 0; e < num_param_flags; ++e) {
      const Shape& shape = only->shape().tuple_shapes(e);
      HloSharding leaf = LeafSharding(s, e);
      if (!param_flags[e]) {
        if (saved && !saved->IsUnknown()) leaf = LeafSharding(*saved, e);
      } else if (shape.IsArray() && !evenly(shape, leaf)) {
        leaf = HloSharding::Replicate();
      }
      s = WithLeaf(s, only->shape(), e, leaf);
    }
    if (s != *only->sharding()) SetSharding(only, s, option_why);
  }
}

void Propagator::Run() {
  HloComputation* entry = module_.entry_computation();
  WEFT_CHECK(entry != nullptr, "module {} has no entry computation", module_.name());
  ReadOptions(*entry);
  IndexInstructions();
  // What an earlier propagation gave only to keep CSE from merging
  // instructions is decided afresh, as XLA's propagation does.
  for (HloInstruction* i : instrs_) {
    if (i->has_sharding() && i->sharding()->IsCsePrevention()) i->set_sharding(std::nullopt);
  }
  for (HloInstruction* i : instrs_) {
    if (i->has_sharding() && options_.record_decisions) {
      result_->decisions[i].push_back(
          {0, 0, DecisionKind::kAnnotation, nullptr, "", std::nullopt, i->sharding()});
    }
  }
  CollectShardGroups();
  ApplyShardingCustomCalls();
  AgreeCalledComputations();
  // What the user fixed.
  MarkProvided(*entry);
  CheckExplicitGroupConflicts();
  for (HloInstruction* i : instrs_) {
    if (i->has_sharding() && i->sharding()->IsUnknown()) i->set_sharding(HloSharding::Replicate());
  }

  // Fixed points at increasing aggressiveness, then align shard_as groups
  // and settle once more at the highest level.
  for (int level = 0; level < 4; ++level) RunToFixPoint(level);
  AlignShardAsGroups();
  RunToFixPoint(3);
  result_->rounds = round_;

  // Outputs and parameters the options do not let propagation decide.
  ApplyOutputAndParameterOptions(*entry);
  if (options_.replicate_unsharded) {
    for (HloInstruction* i : instrs_) {
      if (i->has_sharding()) continue;
      HloSharding s = HloSharding::Replicate();
      if (i->shape().IsTuple()) {
        s = HloSharding::Tuple(std::vector<HloSharding>(i->shape().LeafCount(), s));
      }
      SetSharding(i, s, {DecisionKind::kDefault, nullptr, "replicate_unsharded"});
    }
  }
}

}  // namespace spmd

PropagationResult PropagateShardings(HloModule& module, const PropagationOptions& options) {
  // Unreduced axes (devices holding addends) are the user's to place, as in
  // XLA, where propagation sees them as replicated: propagation runs on the
  // shardings with the addends summed, and the annotations get their
  // unreduced axes back after it.
  std::vector<std::pair<HloInstruction*, HloSharding>> unreduced;
  for (HloComputation* computation : module.computations()) {
    for (HloInstruction* instr : computation->instructions()) {
      if (!instr->has_sharding() || !instr->sharding()->HasUnreduced()) continue;
      unreduced.emplace_back(instr, *instr->sharding());
      instr->set_sharding(instr->sharding()->WithoutUnreduced());
    }
  }
  PropagationResult result;
  Propagator propagator(module, options, &result);
  propagator.Run();
  for (auto& [instr, sharding] : unreduced) instr->set_sharding(std::move(sharding));
  return result;
}

}  // namespace weft
