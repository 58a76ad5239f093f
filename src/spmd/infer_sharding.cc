// Forward (from operands) and backward (from users) inference for one
// instruction at one aggressiveness level, as XLA's InferShardingFromOperands
// and GetShardingFromUser; every array op goes through its factor rule.
#include <algorithm>
#include <climits>

#include "gather_scatter_rule.h"
#include "propagator.h"
#include "weft/sharding/sharding_util.h"
#include "weft/spmd/improve_sharding.h"

namespace weft::spmd {
namespace {

bool IsElementwiseOp(const HloInstruction& i) {
  return IsElementwise(i.opcode()) || i.opcode() == HloOpcode::kCompare;
}

bool HasSpatialSharding(const HloInstruction* i) {
  return i->has_sharding() && IsSpatiallyPartitioned(*i->sharding());
}

// XLA's PickRepresentativeOperand over the first `count` operands: the one
// with the most specific sharding, the first on a tie; -1 when none has one.
int64_t MostSpecificOperand(const HloInstruction& instr, int64_t count) {
  int64_t best = -1;
  for (int64_t k = 0; k < count; ++k) {
    const HloInstruction* operand = instr.operand(k);
    if (operand->has_sharding() &&
        (best < 0 || sharding_util::IsShardingMoreSpecific(*operand->sharding(),
                                                           *instr.operand(best)->sharding()))) {
      best = k;
    }
  }
  return best;
}

// XLA's CanPropagateThroughAtAggressiveLevel.
bool CanPropagateAtLevel(const HloInstruction& i, int level) {
  switch (i.opcode()) {
    case HloOpcode::kCall:
    case HloOpcode::kConcatenate:
    case HloOpcode::kCopy:
    case HloOpcode::kDynamicSlice:
    case HloOpcode::kDynamicUpdateSlice:
    case HloOpcode::kGetTupleElement:
    case HloOpcode::kReshape:
    case HloOpcode::kTuple:
    case HloOpcode::kTranspose:
    case HloOpcode::kWhile:
      return true;
    case HloOpcode::kBroadcast:
      return level >= 2;
    default:
      if (IsElementwiseOp(i) || IsCustomCall(i, "Sharding")) return true;
      return level >= 1;
  }
}

bool SameDims(const Shape& a, const Shape& b) {
  if (a.IsTuple() != b.IsTuple()) return false;
  if (!a.IsTuple()) return a.dimensions() == b.dimensions();
  if (a.tuple_shapes().size() != b.tuple_shapes().size()) return false;
  for (size_t i = 0; i < a.tuple_shapes().size(); ++i) {
    if (!SameDims(a.tuple_shapes(i), b.tuple_shapes(i))) return false;
  }
  return true;
}

int64_t OperandIndex(const HloInstruction& user, const HloInstruction* operand) {
  for (int64_t k = 0; k < user.operand_count(); ++k) {
    if (user.operand(k) == operand) return k;
  }
  return -1;
}

HloSharding ManualFor(const Shape& shape) {
  if (!shape.IsTuple()) return HloSharding::Manual();
  return HloSharding::Tuple(std::vector<HloSharding>(shape.LeafCount(), HloSharding::Manual()));
}

// A user of the same shape (an elementwise op, a Sharding custom call) asks
// for its own sharding.
std::optional<HloSharding> SameDimsAsUser(const UserEdge& edge) {
  if (!SameDims(edge.instr.shape(), edge.user.shape())) return std::nullopt;
  return edge.user_sharding;
}

// A tuple's operand takes its element's leaves; an operand used as several
// elements takes the most specific of them.
std::optional<HloSharding> TupleOperandFromUser(const UserEdge& edge) {
  const HloInstruction& user = edge.user;
  const int64_t offset = LeafOffset(user.shape(), edge.k);
  if (edge.instr.shape().IsTuple()) {
    std::vector<HloSharding> leaves;
    for (int64_t j = 0; j < edge.instr.shape().LeafCount(); ++j)
      leaves.push_back(LeafSharding(edge.user_sharding, offset + j));
    return HloSharding::Tuple(std::move(leaves));
  }
  HloSharding best = LeafSharding(edge.user_sharding, offset);
  for (int64_t j = edge.k + 1; j < user.operand_count(); ++j) {
    if (user.operand(j) != &edge.instr) continue;
    HloSharding alt = LeafSharding(edge.user_sharding, LeafOffset(user.shape(), j));
    if (sharding_util::IsShardingMoreSpecific(alt, best)) best = alt;
  }
  return best;
}

// An outfeed's data: the data part of its (data, token) sharding, or the
// whole of a data-only one; a single sharding applies to the data as a
// whole (a tiled one only to an array).
std::optional<HloSharding> OutfeedDataFromUser(const UserEdge& edge) {
  const Shape& data = edge.instr.shape();
  const HloSharding& s = edge.user_sharding;
  const int64_t n = data.LeafCount();
  if (!s.IsTuple()) {
    if (data.IsArray()) return s;
    if (s.IsTiled() && !s.IsManual()) return std::nullopt;
    return HloSharding::Tuple(std::vector<HloSharding>(n, s));
  }
  const std::vector<HloSharding>& elements = s.tuple_elements();
  if (static_cast<int64_t>(elements.size()) == n && data.IsTuple()) return s;  // the data's alone
  if (static_cast<int64_t>(elements.size()) != n + 1) return std::nullopt;
  if (data.IsArray()) return elements[0];
  return HloSharding::Tuple(std::vector<HloSharding>(elements.begin(), elements.begin() + n));
}

// The tuple a get-tuple-element reads: its current leaves (where it has
// none, replicated but for the user's manual subgroup, as XLA keeps it) with
// the element's leaves replaced by the user's.
std::optional<HloSharding> TupleFromGetTupleElement(const UserEdge& edge) {
  const HloInstruction& instr = edge.instr;
  const int64_t offset = LeafOffset(instr.shape(), edge.user.tuple_index());
  std::optional<HloSharding> base = instr.sharding();
  if (!base || !base->IsTuple()) {
    const HloSharding& first = LeafSharding(edge.user_sharding, 0);
    std::vector<HloSharding> leaves;
    for (const Shape& leaf : instr.shape().Leaves()) {
      leaves.push_back(sharding_util::ReplicateAllDataDims(first, leaf.rank()));
    }
    base = HloSharding::Tuple(std::move(leaves));
  }
  std::vector<HloSharding> leaves = base->tuple_elements();
  if (edge.user.shape().IsTuple()) {
    if (!edge.user_sharding.IsTuple()) return std::nullopt;
    for (size_t j = 0; j < edge.user_sharding.tuple_elements().size(); ++j) {
      leaves.at(offset + j) = edge.user_sharding.tuple_elements()[j];
    }
  } else {
    leaves.at(offset) = edge.user_sharding;
  }
  return HloSharding::Tuple(std::move(leaves));
}

// XLA's FindCommonSharding: the first sharding refined by each of the
// others; the first alone when any of them disagrees with it.
std::optional<HloSharding> CommonSharding(const std::vector<HloSharding>& shardings) {
  if (shardings.empty()) return std::nullopt;
  HloSharding common = shardings.front();
  for (size_t i = 1; i < shardings.size(); ++i) {
    if (shardings[i] == common) continue;
    auto merged = sharding_util::MergeShardingIfCompatible(shardings[i], common, common.NumTiles());
    if (!merged) return shardings.front();
    common = std::move(*merged);
  }
  return common;
}

}  // namespace

std::optional<HloSharding> Propagator::LookaheadUserSharding(HloInstruction* instr) {
  if (instr->users().size() != 1) return std::nullopt;
  std::vector<HloInstruction*> chain = {instr, instr->users()[0]};
  while (!chain.back()->has_sharding()) {
    if (chain.back()->users().size() != 1) return std::nullopt;
    chain.push_back(chain.back()->users()[0]);
  }
  std::optional<HloSharding> sharding = chain.back()->sharding();
  for (size_t i = chain.size() - 1; i >= 1; --i) {
    sharding = ShardingFromUser(*chain[i - 1], *chain[i], *sharding, INT_MAX);
    if (!sharding) return std::nullopt;
  }
  return sharding;
}

namespace {

// Ops that compute along some dims (their rules need those whole) read their
// rules like custom calls, leaf by leaf, in both directions.
bool ReadsRuleLeafByLeaf(HloOpcode opcode) {
  switch (opcode) {
    case HloOpcode::kSort:
    case HloOpcode::kTopK:
    case HloOpcode::kCholesky:
    case HloOpcode::kTriangularSolve:
    case HloOpcode::kRaggedDot:
    case HloOpcode::kReduceWindow:
    case HloOpcode::kSelectAndScatter:
    case HloOpcode::kBitcastConvert:
    case HloOpcode::kCustomCall:
      return true;
    default:
      return false;
  }
}

}  // namespace

// The sharding `user` asks of its operand: the dims' correspondence is the
// user's rule (data, through Project); the switch below is the policy (code)
// of which operands a user speaks for, at which level, and the ops without a
// rule (tuple, get-tuple-element), as XLA's GetShardingFromUser.
std::optional<HloSharding> Propagator::ShardingFromUser(const HloInstruction& instr,
                                                        const HloInstruction& user,
                                                        const HloSharding& user_sharding,
                                                        int level) {
  if (!CanPropagateAtLevel(user, level) || !IsSpatiallyPartitioned(user_sharding)) {
    return std::nullopt;
  }
  const int64_t k = OperandIndex(user, &instr);
  if (k < 0) return std::nullopt;
  const UserEdge edge{instr, user, user_sharding, k};
  const bool may_combine = level > 0;
  // A sort's operand takes its result's sharding, the sort dim included.
  if (user.opcode() == HloOpcode::kSort) {
    return LeafSharding(user_sharding, user.shape().IsTuple() ? k : 0);
  }
  if (ReadsRuleLeafByLeaf(user.opcode())) return RuleOperandFromUser(edge, may_combine);
  switch (user.opcode()) {
    case HloOpcode::kBroadcast:
    case HloOpcode::kReshape:
    case HloOpcode::kTranspose:
    case HloOpcode::kSlice:
    case HloOpcode::kReverse:
      return ProjectFromUser(edge);
    case HloOpcode::kGather:
      return edge.k == 0 ? GatherOperandFromUser(edge) : ProjectFromUser(edge);
    case HloOpcode::kPad:  // not the padding value
      return k == 0 ? ProjectFromUser(edge) : std::nullopt;
    case HloOpcode::kConcatenate:
      if (level == 0) return std::nullopt;
      return user_sharding.IsReplicated() ? std::optional(user_sharding) : ProjectFromUser(edge);
    case HloOpcode::kDynamicSlice:
    case HloOpcode::kDynamicUpdateSlice:
      return level == 0 ? std::nullopt : DynamicSliceOperandFromUser(edge);
    case HloOpcode::kTuple:
      return TupleOperandFromUser(edge);
    case HloOpcode::kOutfeed:
      return edge.k == 0 ? OutfeedDataFromUser(edge) : std::nullopt;
    case HloOpcode::kGetTupleElement:
      return TupleFromGetTupleElement(edge);
    case HloOpcode::kDot:
      return DotOperandFromUser(edge, may_combine);
    case HloOpcode::kConvolution:
      // XLA asks nothing of a true convolution's operands.
      if (ParseConvolutionDims(edge.user).HasConvSpatial()) return std::nullopt;
      return DotOperandFromUser(edge, may_combine);
    case HloOpcode::kReduce:
      return ReduceInputFromUser(edge);
    case HloOpcode::kScatter:
      return ScatterOperandFromUser(edge);
    default:
      return SameDimsAsUser(edge);
  }
}

std::optional<HloSharding> Propagator::ProjectFromUser(const UserEdge& edge, int64_t leaf) {
  return Project(&edge.user, TensorRef::Result(leaf), LeafSharding(edge.user_sharding, leaf),
                 TensorRef::Operand(edge.k));
}

std::optional<HloSharding> Propagator::DynamicSliceOperandFromUser(const UserEdge& edge) {
  if (edge.user_sharding.IsReplicated()) return edge.user_sharding;
  const bool update = edge.user.opcode() == HloOpcode::kDynamicUpdateSlice;
  if (update && edge.k == 0) return edge.user_sharding;
  if (edge.k != (update ? 1 : 0)) return std::nullopt;  // not the start indices
  return ProjectFromUser(edge);
}

std::optional<HloSharding> Propagator::DotOperandFromUser(const UserEdge& edge, bool may_combine) {
  // From the result, then refined by the other operand's contracting and
  // batch dims (XLA's InferDotOperandSharding with consider_other_operand).
  std::optional<HloSharding> sharding = ProjectFromUser(edge);
  if (!sharding) return std::nullopt;
  const int64_t other_k = 1 - edge.k;
  const HloInstruction* other = edge.user.operand(other_k);
  if (HasSpatialSharding(other)) {
    std::optional<HloSharding> from_other = Project(&edge.user, TensorRef::Operand(other_k),
                                                    *other->sharding(), TensorRef::Operand(edge.k));
    if (from_other && !from_other->IsTuple() &&
        MergeSharding(*sharding, &*from_other, may_combine)) {
      sharding = std::move(from_other);
    }
  }
  return sharding;
}

std::optional<HloSharding> Propagator::ReduceInputFromUser(const UserEdge& edge) {
  const HloInstruction& user = edge.user;
  if (!edge.instr.shape().IsArray() || edge.instr.shape().rank() == 0) return std::nullopt;
  const int64_t num_inputs = user.operand_count() / 2;
  if (edge.k >= num_inputs) return std::nullopt;  // an init value
  std::optional<HloSharding> sharding = ProjectFromUser(edge, user.shape().IsTuple() ? edge.k : 0);
  if (!sharding) return std::nullopt;
  // The other inputs are reduced alongside: merge what they hold.
  for (int64_t j = 0; j < num_inputs; ++j) {
    const HloInstruction* other = user.operand(j);
    if (other == &edge.instr || !other->has_sharding() || other->sharding()->IsTuple()) continue;
    if (auto merged = sharding_util::MergeShardingIfCompatible(*other->sharding(), *sharding,
                                                               sharding->NumTiles() + 1)) {
      sharding = std::move(merged);
    }
  }
  return sharding;
}

std::optional<HloSharding> Propagator::GatherOperandFromUser(const UserEdge& edge) {
  std::optional<HloSharding> sharding = ProjectFromUser(edge);
  if (sharding && sharding->IsTileMaximal() && !edge.user_sharding.IsTileMaximal() &&
      edge.user.attrs().gather.operand_batching_dims.empty() &&
      spmd::ParallelDims(edge.user).empty()) {
    return std::nullopt;
  }
  return sharding;
}

std::optional<HloSharding> Propagator::ScatterOperandFromUser(const UserEdge& edge) {
  const HloInstruction& user = edge.user;
  const int64_t n = (user.operand_count() - 1) / 2;
  if (edge.k < n) return LeafSharding(edge.user_sharding, edge.k);
  const HloInstruction* indices = user.operand(n);
  if (edge.k == n) {
    // The indices: only from the updates (never from the result), as XLA.
    std::vector<HloSharding> proposals;
    for (int64_t j = 0; j < n; ++j) {
      const HloInstruction* update = user.operand(n + 1 + j);
      if (!HasSpatialSharding(update)) continue;
      if (auto s = Project(&user, TensorRef::Operand(n + 1 + j), *update->sharding(),
                           TensorRef::Operand(n))) {
        proposals.push_back(std::move(*s));
      }
    }
    return CommonSharding(proposals);
  }
  const int64_t j = edge.k - n - 1;
  HloSharding from_indices = HloSharding::Replicate();
  if (HasSpatialSharding(indices)) {
    if (auto s = Project(&user, TensorRef::Operand(n), *indices->sharding(),
                         TensorRef::Operand(edge.k))) {
      from_indices = std::move(*s);
    }
  }
  std::optional<HloSharding> from_result = ProjectFromUser(edge, user.shape().IsTuple() ? j : 0);
  if (from_result) {
    if (from_result->IsTileMaximal() && !from_result->IsManual()) {
      from_result = from_indices;
    } else if (auto merged = sharding_util::MergeShardingIfCompatible(
                   from_indices, *from_result, from_result->NumTiles() + 1)) {
      from_result = std::move(merged);
    }
    if (!from_result->IsTileMaximal()) return from_result;
  }
  if (!from_indices.IsTileMaximal()) return from_indices;
  return std::nullopt;
}

std::optional<HloSharding> Propagator::RuleOperandFromUser(const UserEdge& edge, bool may_combine) {
  const HloInstruction& user = edge.user;
  if (IsCustomCall(user, "Sharding")) return SameDimsAsUser(edge);
  const OpShardingRule* rule = Rule(&user);
  if (!rule) return SameDimsAsUser(edge);
  // The most specific of the result leaves' proposals.
  std::optional<HloSharding> best;
  for (int64_t leaf = 0; leaf < static_cast<int64_t>(rule->results.size()); ++leaf) {
    auto s = ProjectFromUser(edge, leaf);
    if (s && (!best || sharding_util::IsShardingMoreSpecific(*s, *best))) best = std::move(s);
  }
  // Operands tie each other too (k <-> kv segment ids): refine with the
  // other operands, as a dot consults its other operand.
  for (int64_t j = 0; j < user.operand_count(); ++j) {
    const HloInstruction* other = user.operand(j);
    if (j == edge.k || other == &edge.instr || !HasSpatialSharding(other)) continue;
    auto from_other =
        Project(&user, TensorRef::Operand(j), *other->sharding(), TensorRef::Operand(edge.k));
    if (!from_other || from_other->IsTuple()) continue;
    if (!best || MergeSharding(*best, &*from_other, may_combine)) best = std::move(from_other);
  }
  return best;
}

std::optional<HloSharding> Propagator::FromOperand(const HloInstruction* instr, int64_t k,
                                                   int64_t leaf) {
  const HloInstruction* operand = instr->operand(k);
  if (!HasSpatialSharding(operand)) return std::nullopt;
  return Project(instr, TensorRef::Operand(k), *operand->sharding(), TensorRef::Result(leaf));
}

DecisionSource Propagator::ForwardWhy(const HloInstruction* instr, const HloInstruction* source) {
  const OpShardingRule* rule = Rule(instr);
  return DecisionSource{DecisionKind::kForward, source,
                        rule ? std::string_view(rule->name) : HloOpcodeString(instr->opcode())};
}

std::optional<bool> Propagator::InferFromManualOperands(HloInstruction* instr, int level) {
  const HloOpcode op = instr->opcode();
  // Manual regions spread: an op with a manual operand is manual.
  // Tuple-shaped ops whose elements belong together: a reduce, a custom
  // call, an asynchronous call and its done.
  if ((!instr->has_sharding() || instr->sharding()->IsTileMaximal()) &&
      (instr->shape().IsArray() || op == HloOpcode::kReduce || op == HloOpcode::kCallStart ||
       op == HloOpcode::kCallDone || (op == HloOpcode::kCustomCall && instr->shape().IsTuple()))) {
    for (const HloInstruction* operand : instr->operands()) {
      if (!operand->has_sharding() || !operand->sharding()->IsManual()) continue;
      if (IsCustomCall(*instr, "SPMDShardToFullShape")) return false;
      if (level == 0 && (op == HloOpcode::kConcatenate || op == HloOpcode::kDynamicSlice)) {
        return false;
      }
      SetSharding(instr, ManualFor(instr->shape()), {DecisionKind::kManual, operand, "manual"});
      return true;
    }
  }
  // A psum inside a partly manual region adds pieces laid out as its
  // operand's: it takes the operand's sharding.
  if (op == HloOpcode::kAllReduce && instr->operand_count() == 1 && instr->shape().IsArray() &&
      instr->operand(0)->has_sharding() &&
      instr->operand(0)->sharding()->SubgroupManualDim() >= 0 &&
      (!instr->has_sharding() || instr->sharding()->IsTileMaximal())) {
    SetSharding(instr, instr->operand(0)->sharding(),
                {DecisionKind::kManual, instr->operand(0), "all-reduce"});
    return true;
  }
  // A region's edges keep the shardings they were given: neither side's
  // sharding says anything about the other's (partly manual regions).
  if (IsCustomCall(*instr, "SPMDFullToShardShape") || IsCustomCall(*instr, "SPMDShardToFullShape"))
    return false;
  return std::nullopt;
}

bool Propagator::InferFromReplicatedOperand(HloInstruction* instr, bool may_combine) {
  if (instr->shape().IsTuple() || instr->operand_count() == 0 ||
      instr == instr->parent()->root_instruction()) {
    return false;
  }
  for (const HloInstruction* operand : instr->operands()) {
    if (operand->has_sharding() && operand->sharding()->IsTileMaximal() &&
        !operand->sharding()->IsMaximal()) {
      return Improve(instr, *operand->sharding(), may_combine, false,
                     {DecisionKind::kForward, operand, "replicated operand"});
    }
  }
  return false;
}

bool Propagator::InferGetTupleElement(HloInstruction* instr, bool may_combine, bool aggressive) {
  const HloInstruction* operand = instr->operand(0);
  if (!HasSpatialSharding(operand)) return false;
  const int64_t offset = LeafOffset(operand->shape(), instr->tuple_index());
  HloSharding s = LeafSharding(*operand->sharding(), offset);
  if (instr->shape().IsTuple()) {
    std::vector<HloSharding> leaves;
    for (int64_t j = 0; j < instr->shape().LeafCount(); ++j) {
      leaves.push_back(LeafSharding(*operand->sharding(), offset + j));
    }
    s = HloSharding::Tuple(std::move(leaves));
  }
  if (s.IsManual()) {
    SetSharding(instr, s, {DecisionKind::kManual, operand, "get-tuple-element"});
    return true;
  }
  return Improve(instr, s, may_combine, aggressive,
                 {DecisionKind::kForward, operand, "get-tuple-element"});
}

bool Propagator::InferTuple(HloInstruction* instr) {
  if (std::none_of(instr->operands().begin(), instr->operands().end(), HasSpatialSharding)) {
    return false;
  }
  std::vector<HloSharding> leaves;
  if (instr->has_sharding() && instr->sharding()->IsTuple()) {
    leaves = instr->sharding()->tuple_elements();
  } else {
    leaves.assign(instr->shape().LeafCount(), HloSharding::Replicate());
  }
  const HloInstruction* source = nullptr;
  int64_t offset = 0;
  for (const HloInstruction* operand : instr->operands()) {
    const int64_t count = operand->shape().LeafCount();
    if (operand->has_sharding()) {
      for (int64_t j = 0; j < count; ++j) {
        HloSharding s = LeafSharding(*operand->ResultSharding(), j);
        if (!instr->has_sharding() ||
            sharding_util::IsShardingMoreSpecific(s, leaves[offset + j])) {
          if (leaves[offset + j] != s) source = operand;
          leaves[offset + j] = std::move(s);
        }
      }
    }
    offset += count;
  }
  HloSharding s = HloSharding::Tuple(std::move(leaves));
  if (instr->has_sharding() && s == *instr->sharding()) return false;
  SetSharding(instr, s, {DecisionKind::kForward, source, "tuple"});
  return true;
}

bool Propagator::InferFromCaller(HloInstruction* instr, bool may_combine) {
  switch (instr->opcode()) {
    case HloOpcode::kWhile: {
      const HloInstruction* operand = instr->operand(0);
      if (!operand->has_sharding()) return false;
      HloSharding s = *operand->sharding();
      if (instr->has_sharding()) MergeSharding(*instr->sharding(), &s, may_combine);
      return Improve(instr, s, may_combine, false, {DecisionKind::kForward, operand, "while"});
    }
    case HloOpcode::kConditional: {
      // From the branches' roots (agreement keeps them equal; a branch
      // computation shared by several conditionals agrees with one of them).
      for (const HloComputation* branch : instr->called_computations()) {
        const HloInstruction* root = branch->root_instruction();
        if (!root->has_sharding()) continue;
        HloSharding s = *root->sharding();
        if (instr->has_sharding()) MergeSharding(*instr->sharding(), &s, may_combine);
        return Improve(instr, s, may_combine, false, {DecisionKind::kForward, root, "conditional"});
      }
      return false;
    }
    case HloOpcode::kParameter: {
      auto it = computation_map_.find(instr->parent());
      if (it == computation_map_.end() || it->second->opcode() == HloOpcode::kWhile) return false;
      const HloInstruction* caller = it->second;
      const HloInstruction* arg =
          caller->opcode() == HloOpcode::kCall
              ? caller->operand(instr->parameter_number())
              : caller->operand(BranchArgumentIndex(*caller, *instr->parent()));
      if (!arg->has_sharding()) return false;
      return Improve(instr, *arg->sharding(), may_combine, false,
                     {DecisionKind::kForward, arg, HloOpcodeString(caller->opcode())});
    }
    default:
      return false;
  }
}

bool Propagator::InferDotFromOperands(HloInstruction* instr, bool may_combine) {
  auto improved = [&](int64_t k) -> std::optional<HloSharding> {
    const HloInstruction* operand = instr->operand(k);
    if (!HasSpatialSharding(operand)) return std::nullopt;
    std::optional<HloSharding> s =
        operand->sharding()->IsTileMaximal() ? operand->sharding() : FromOperand(instr, k);
    if (!s) return std::nullopt;
    return ReturnImprovedSharding(*s, instr->has_sharding() ? &*instr->sharding() : nullptr,
                                  instr->shape().dimensions(), may_combine, false);
  };
  std::optional<HloSharding> s0 = improved(0), s1 = improved(1);
  if (!s0 && !s1) return false;
  if (!s1 || !s0) {
    const int64_t k = s0 ? 0 : 1;
    SetSharding(instr, s0 ? *s0 : *s1, ForwardWhy(instr, instr->operand(k)));
    return true;
  }
  // Both operands propose: prefer the one the (single) user agrees with,
  // else the larger operand; then refine with the other.
  int64_t first = 0;
  bool decided = false;
  if (auto ahead = LookaheadUserSharding(instr)) {
    const auto dims = instr->shape().dimensions();
    const bool sub0 = IsSubTilingOrEqualSharding(dims, *ahead, *s0);
    const bool sub1 = IsSubTilingOrEqualSharding(dims, *ahead, *s1);
    if (sub0 != sub1) {
      first = sub0 ? 0 : 1;
      decided = true;
    }
  }
  if (!decided && instr->operand(0)->shape().ByteSize() < instr->operand(1)->shape().ByteSize()) {
    first = 1;
  }
  HloSharding primary = first == 0 ? *s0 : *s1;
  HloSharding secondary = first == 0 ? *s1 : *s0;
  auto refined =
      ReturnImprovedSharding(secondary, &primary, instr->shape().dimensions(), may_combine, false);
  SetSharding(instr, refined ? *refined : primary, ForwardWhy(instr, instr->operand(first)));
  return true;
}

namespace {

// XLA's IsConvolutionKernelSmall: no spatial dim has a kernel at least as
// large as the result (past the first two dims, a kernel of at most 3 whose
// running product stays below the result's is still small).
bool ConvolutionKernelSmall(const HloInstruction& conv) {
  const ConvolutionDimensionNumbers& dn = conv.attrs().convolution;
  int64_t kernel_product = 1, out_product = 1;
  for (int64_t k = 0; k < dn.num_spatial_dims(); ++k) {
    const int64_t kernel = conv.operand(1)->shape().dimensions(dn.kernel_spatial_dimensions[k]);
    const int64_t out = conv.shape().dimensions(dn.output_spatial_dimensions[k]);
    kernel_product *= kernel;
    out_product *= out;
    if (kernel >= out && (k < 2 || kernel > 3 || kernel_product >= out_product)) return false;
  }
  return true;
}

}  // namespace

bool Propagator::InferConvolutionFromOperands(HloInstruction* instr, bool may_combine) {
  const ConvolutionDimensionNumbers& dn = instr->attrs().convolution;
  const ConvolutionDims roles = ParseConvolutionDims(*instr);
  auto spatial_partitions = [&](int64_t k) {
    const HloInstruction* operand = instr->operand(k);
    if (!operand->has_sharding() || operand->sharding()->IsTileMaximal()) return int64_t{1};
    int64_t n = 1;
    for (size_t i = 0; i < roles.spatial.size(); ++i) {
      if (roles.spatial[i] != ConvolutionDims::Role::kConvSpatial) continue;
      n *= operand->sharding()->tile_assignment().dim(k == 0 ? dn.input_spatial_dimensions[i]
                                                             : dn.kernel_spatial_dimensions[i]);
    }
    return n;
  };
  if (!roles.HasConvSpatial() ||
      (spatial_partitions(0) == 1 && spatial_partitions(1) == 1 &&
       instr->attrs().feature_group_count == 1 && instr->attrs().batch_group_count == 1)) {
    return InferDotFromOperands(instr, may_combine);
  }
  const HloInstruction* lhs = instr->operand(0);
  if (!HasSpatialSharding(lhs)) return false;
  const HloSharding& sharding = *lhs->sharding();
  HloSharding proposed = sharding;  // a tile-maximal input passes as is
  if (!sharding.IsTileMaximal() && ConvolutionKernelSmall(*instr)) {
    if (sharding.tile_assignment().dim(dn.input_feature_dimension) > 1) return false;
    std::vector<int64_t> out_to_lhs(instr->shape().rank());
    out_to_lhs[dn.output_batch_dimension] = dn.input_batch_dimension;
    out_to_lhs[dn.output_feature_dimension] = dn.input_feature_dimension;
    for (int64_t k = 0; k < dn.num_spatial_dims(); ++k) {
      out_to_lhs[dn.output_spatial_dimensions[k]] = dn.input_spatial_dimensions[k];
    }
    proposed = sharding_util::TransposeSharding(sharding, out_to_lhs);
  } else if (!sharding.IsTileMaximal()) {
    const int64_t batch[] = {dn.input_batch_dimension};
    proposed = sharding_util::PartiallyReplicateTiledShardingOnAllDimsExcept(sharding, batch);
  }
  return Improve(instr, std::move(proposed), may_combine, false, ForwardWhy(instr, lhs));
}

bool Propagator::InferShapeOpFromOperands(HloInstruction* instr, int level, bool may_combine,
                                          bool aggressive) {
  switch (instr->opcode()) {
    case HloOpcode::kBroadcast: {
      if (level < 3) return false;
      const HloInstruction* operand = instr->operand(0);
      if (!HasSpatialSharding(operand) || operand->sharding()->IsReplicated()) return false;
      auto s = FromOperand(instr, 0);
      return s && Improve(instr, *s, may_combine, aggressive, ForwardWhy(instr, operand));
    }
    case HloOpcode::kConcatenate: {
      const HloInstruction* best = nullptr;
      for (const HloInstruction* operand : instr->operands()) {
        if (operand->has_sharding() && (!best || sharding_util::IsShardingMoreSpecific(
                                                     *operand->sharding(), *best->sharding()))) {
          best = operand;
        }
      }
      if (!best || !HasSpatialSharding(best)) return false;
      if (level == 0) {
        // Only the repeated-layer pattern param/gte -> reshape -> concat,
        // split off the concat dim, passes at level 0.
        for (const HloInstruction* operand : instr->operands()) {
          const bool ok = HasSpatialSharding(operand) && operand->sharding()->NumTiles() > 1 &&
                          operand->opcode() == HloOpcode::kReshape &&
                          (operand->operand(0)->opcode() == HloOpcode::kParameter ||
                           operand->operand(0)->opcode() == HloOpcode::kGetTupleElement);
          if (!ok) return false;
          if (operand->sharding()->tile_assignment().dim(instr->dimensions()[0]) > 1) return false;
        }
      }
      auto s = FromOperand(instr, OperandIndex(*instr, best));
      return s && Improve(instr, *s, may_combine, aggressive, ForwardWhy(instr, best));
    }
    case HloOpcode::kReduce: {
      bool changed = false;
      const int64_t num_inputs = instr->operand_count() / 2;
      for (int64_t k = 0; k < num_inputs; ++k) {
        auto s = FromOperand(instr, k);
        if (!s) continue;
        if (instr->shape().IsTuple()) {
          s = HloSharding::Tuple(std::vector<HloSharding>(instr->shape().LeafCount(), *s));
        }
        changed |=
            Improve(instr, *s, may_combine, aggressive, ForwardWhy(instr, instr->operand(k)));
      }
      return changed;
    }
    case HloOpcode::kDynamicSlice: {
      auto s = FromOperand(instr, 0);
      return s && Improve(instr, *s, may_combine, aggressive, ForwardWhy(instr, instr->operand(0)));
    }
    case HloOpcode::kDynamicUpdateSlice: {
      bool changed = false;
      if (auto s = FromOperand(instr, 1))
        changed |=
            Improve(instr, *s, may_combine, aggressive, ForwardWhy(instr, instr->operand(1)));
      if (auto s = FromOperand(instr, 0))
        changed |= Improve(instr, *s, may_combine, false, ForwardWhy(instr, instr->operand(0)));
      return changed;
    }
    default:
      return false;
  }
}

bool Propagator::InferFromRuleOperands(HloInstruction* instr, bool may_combine, bool aggressive) {
  if (IsCustomCall(*instr, "Sharding")) {
    auto s = FromOperand(instr, 0);
    return s && Improve(instr, *s, may_combine, aggressive, ForwardWhy(instr, instr->operand(0)));
  }
  const OpShardingRule* rule = Rule(instr);
  if (!rule) return false;
  bool changed = false;
  for (int64_t leaf = 0; leaf < static_cast<int64_t>(rule->results.size()); ++leaf) {
    for (int64_t k = 0; k < instr->operand_count(); ++k) {
      if (auto s = FromOperand(instr, k, leaf)) {
        changed |= ImproveLeaf(instr, leaf, *s, may_combine, aggressive,
                               ForwardWhy(instr, instr->operand(k)));
      }
    }
  }
  return changed;
}

// sort, as XLA propagates it: every result takes the most specific operand's
// sharding, the sort dim included where another dim could take its tiles
// (the partitioner gathers the sort dim whole, sorts and slices back).
bool Propagator::InferSortFromOperands(HloInstruction* instr, bool may_combine, bool aggressive) {
  const int64_t best = MostSpecificOperand(*instr, instr->operand_count());
  if (best < 0 || !HasSpatialSharding(instr->operand(best))) return false;
  const HloInstruction* operand = instr->operand(best);
  const HloSharding& s = *operand->sharding();
  const int64_t sort_dim = instr->dimensions().at(0);
  if (s.IsTiled() && s.tile_assignment().dim(sort_dim) != 1 &&
      !sharding_util::FirstTargetDimToMoveTiles(operand->shape().dimensions(), s, sort_dim)) {
    return false;
  }
  const HloSharding result =
      instr->shape().IsTuple()
          ? HloSharding::Tuple(std::vector<HloSharding>(instr->shape().LeafCount(), s))
          : s;
  return Improve(instr, result, may_combine, aggressive, ForwardWhy(instr, operand));
}

bool Propagator::InferGatherScatter(HloInstruction* instr, bool may_combine) {
  bool changed = false;
  auto offer = [&](int64_t k, int64_t leaf) {
    if (auto s = FromOperand(instr, k, leaf)) {
      changed |=
          ImproveLeaf(instr, leaf, *s, may_combine, false, ForwardWhy(instr, instr->operand(k)));
    }
  };
  if (instr->opcode() == HloOpcode::kGather) {
    offer(1, 0);
    offer(0, 0);
    return changed;
  }
  // Scatter: result j is operand j; the indices and the updates speak only
  // when one of them is split (a replicated operand made the result
  // replicated; a split update then refines it).
  const int64_t n = (instr->operand_count() - 1) / 2;
  for (int64_t j = 0; j < n; ++j) offer(j, j);
  bool split = HasSpatialSharding(instr->operand(n));
  for (int64_t j = 0; j < n; ++j) split |= HasSpatialSharding(instr->operand(n + 1 + j));
  if (!split) return changed;
  for (int64_t j = 0; j < n; ++j) offer(n, j);
  for (int64_t j = 0; j < n; ++j) offer(n + 1 + j, j);
  return changed;
}

bool Propagator::InferFromRepresentativeOperand(HloInstruction* instr, bool may_combine,
                                                bool aggressive) {
  const HloOpcode op = instr->opcode();
  if (!Rule(instr) || !instr->shape().IsArray()) return false;
  if (IsElementwiseOp(*instr) && may_combine) {
    bool changed = false;
    for (int64_t k = 0; k < instr->operand_count(); ++k) {
      if (auto s = FromOperand(instr, k)) {
        changed |= Improve(instr, *s, may_combine, instr->operand_count() == 1 && aggressive,
                           ForwardWhy(instr, instr->operand(k)));
      }
    }
    return changed;
  }
  // One representative operand: the first for pad/slice/reverse, else the
  // most specific.
  const bool first_only =
      op == HloOpcode::kPad || op == HloOpcode::kSlice || op == HloOpcode::kReverse;
  const int64_t best = MostSpecificOperand(*instr, first_only ? 1 : instr->operand_count());
  if (best < 0) return false;
  auto s = FromOperand(instr, best);
  return s && Improve(instr, *s, may_combine, aggressive, ForwardWhy(instr, instr->operand(best)));
}

bool Propagator::InferFromOperands(HloInstruction* instr, int level) {
  if (!CanPropagateAtLevel(*instr, level)) return false;
  if (instr->has_sharding() && instr->sharding()->IsManual()) return false;
  if (std::optional<bool> manual = InferFromManualOperands(instr, level)) return *manual;
  const bool may_combine = level > 0;
  const bool aggressive = NonRootUsers(instr) == 1;
  if (!SupportsSpatialPartitioning(instr, allow_output_any_, false)) {
    return InferFromReplicatedOperand(instr, may_combine);
  }
  if (instr->opcode() == HloOpcode::kSort)
    return InferSortFromOperands(instr, may_combine, aggressive);
  if (ReadsRuleLeafByLeaf(instr->opcode())) {
    return InferFromRuleOperands(instr, may_combine, aggressive);
  }
  switch (instr->opcode()) {
    case HloOpcode::kGetTupleElement:
      return InferGetTupleElement(instr, may_combine, aggressive);
    case HloOpcode::kTuple:
      return InferTuple(instr);
    case HloOpcode::kWhile:
    case HloOpcode::kConditional:
    case HloOpcode::kParameter:
      return InferFromCaller(instr, may_combine);
    case HloOpcode::kDot:
      return InferDotFromOperands(instr, may_combine);
    case HloOpcode::kConvolution:
      return InferConvolutionFromOperands(instr, may_combine);
    case HloOpcode::kBroadcast:
    case HloOpcode::kConcatenate:
    case HloOpcode::kReduce:
    case HloOpcode::kDynamicSlice:
    case HloOpcode::kDynamicUpdateSlice:
      return InferShapeOpFromOperands(instr, level, may_combine, aggressive);
    case HloOpcode::kGather:
    case HloOpcode::kScatter:
      return InferGatherScatter(instr, may_combine);
    default:
      return InferFromRepresentativeOperand(instr, may_combine, aggressive);
  }
}

bool Propagator::InferFromUsers(HloInstruction* instr, int level) {
  if (level < 2 && instr->opcode() == HloOpcode::kBroadcast) return false;
  if (instr->has_sharding() && instr->sharding()->IsManual()) return false;
  if (!instr->has_sharding() || instr->sharding()->IsTileMaximal()) {
    for (const HloInstruction* user : instr->users()) {
      if (!user->has_sharding() || IsCustomCall(*user, "SPMDFullToShardShape")) continue;
      if (instr->shape().IsArray() && user->sharding()->IsManual()) {
        SetSharding(instr, HloSharding::Manual(), {DecisionKind::kManual, user, "manual"});
        return true;
      }
      auto s = ShardingFromUser(*instr, *user, *user->sharding(), level);
      if (s && s->IsManual()) {
        SetSharding(instr, *s, {DecisionKind::kManual, user, "manual"});
        return true;
      }
    }
  }
  if (!SupportsSpatialPartitioning(instr, false, allow_params_any_)) return false;
  const bool may_combine = level > 0;
  bool improved = false;
  for (const HloInstruction* user : instr->users()) {
    if (!user->has_sharding() || IsCustomCall(*user, "SPMDFullToShardShape") ||
        IsCustomCall(*user, "SPMDShardToFullShape")) {
      continue;  // a region's edge: its sharding is the other side's
    }
    auto s = ShardingFromUser(*instr, *user, *user->sharding(), level);
    if (!s) continue;
    const OpShardingRule* rule = Rule(user);
    improved |= Improve(instr, std::move(*s), may_combine, false,
                        {DecisionKind::kBackward, user,
                         rule ? std::string_view(rule->name) : HloOpcodeString(user->opcode())});
  }
  return improved;
}

namespace {
// Merges `proposal` into the annotation's sharding along its unspecified dims.
std::optional<HloSharding> RefineAlong(const HloSharding& proposal,
                                       const std::vector<int64_t>& unspecified,
                                       const HloSharding& current) {
  if (!proposal.IsTiled()) return std::nullopt;
  HloSharding partial =
      sharding_util::PartiallyReplicateTiledShardingOnAllDimsExcept(proposal, unspecified);
  return sharding_util::MergeShardingIfCompatible(partial, current, current.NumTiles() + 1);
}
}  // namespace

HloInstruction* Propagator::ManualConversionOf(const HloInstruction* annotation) const {
  auto it = manual_conversion_.find(annotation);
  return it == manual_conversion_.end() ? nullptr : it->second;
}

namespace {

bool IsPairManualSide(const HloSharding& s) {
  return s.IsTiled() && s.SubgroupManualDim() >= 0 && s.HasPartialReplication() &&
         s.subgroup_types().size() == 2;
}

// `proposal` along the unspecified dims, with a manual subgroup's dim read as
// one more data dim before the replication (so that MergeShardingIfCompatible
// places it); `insert_manual` adds a size-1 such dim to a sharding without one.
HloSharding ManualAsData(const HloSharding& s, bool insert_manual) {
  const TileAssignment& tiles = s.tile_assignment();
  const int64_t rank = s.TiledDataRank();
  std::vector<int64_t> dims(tiles.dims().begin(), tiles.dims().begin() + rank);
  if (insert_manual) dims.push_back(1);
  for (int64_t d = rank; d < tiles.num_dims(); ++d) dims.push_back(tiles.dim(d));
  if (!s.HasPartialReplication()) dims.push_back(1);
  return HloSharding::PartialTile(tiles.Reshape(std::move(dims)));
}

}  // namespace

bool Propagator::RefinePairAlong(HloInstruction* instr, const HloSharding& proposal, bool from_auto,
                                 const HloInstruction* source) {
  HloInstruction* conversion = ManualConversionOf(instr);
  const bool to_shard = IsCustomCall(*conversion, "SPMDFullToShardShape");
  HloInstruction* auto_side = to_shard ? instr : conversion;
  HloInstruction* manual_side = to_shard ? conversion : instr;
  if (!auto_side->has_sharding() || !manual_side->has_sharding()) return false;
  const HloSharding& auto_s = *auto_side->sharding();
  const HloSharding& manual_s = *manual_side->sharding();
  if (!IsPairManualSide(manual_s) || auto_s.SubgroupManualDim() >= 0) return false;
  if (!from_auto && (!proposal.IsTiled() || proposal.SubgroupManualDim() < 0)) return false;
  const HloSharding partial = sharding_util::PartiallyReplicateTiledShardingOnAllDimsExcept(
      proposal, *UnspecifiedDims(instr));
  if (partial.IsTileMaximal()) return false;
  std::optional<HloSharding> new_auto, new_manual;
  if (from_auto) {
    new_auto = sharding_util::MergeShardingIfCompatible(partial, auto_s, auto_s.NumTiles() + 1);
    if (!new_auto) return false;
    auto merged = sharding_util::MergeShardingIfCompatible(ManualAsData(partial, true),
                                                           ManualAsData(manual_s, false));
    if (!merged) return false;
    std::vector<SubgroupType> types = {SubgroupType::kManual};
    if (merged->HasPartialReplication()) types.push_back(SubgroupType::kReplicated);
    new_manual = HloSharding::Subgroup(merged->tile_assignment(), std::move(types));
  } else {
    new_manual =
        sharding_util::MergeShardingIfCompatible(partial, manual_s, manual_s.NumTiles() + 1);
    if (!new_manual) return false;
    const HloSharding partial_auto = HloSharding::Subgroup(
        partial.tile_assignment(),
        std::vector<SubgroupType>(partial.subgroup_types().size(), SubgroupType::kReplicated));
    new_auto = sharding_util::MergeShardingIfCompatible(partial_auto, auto_s);
    if (!new_auto) return false;
  }
  const DecisionSource why{DecisionKind::kUnspecifiedDims, source, "Sharding"};
  SetSharding(auto_side, *new_auto, why);
  SetSharding(manual_side, *new_manual, why);
  return true;
}

bool Propagator::RefineUnspecifiedFromOperand(HloInstruction* instr) {
  const HloInstruction* operand = instr->operand(0);
  if (!HasSpatialSharding(operand) || !instr->has_sharding()) return false;
  if (ManualConversionOf(instr)) {
    if (!operand->sharding()->IsTiled()) return false;
    // The operand feeds the annotation: the auto side before a
    // SPMDFullToShardShape, the manual side before a SPMDShardToFullShape.
    const bool from_auto = IsCustomCall(*ManualConversionOf(instr), "SPMDFullToShardShape");
    return RefinePairAlong(instr, *operand->sharding(), from_auto, operand);
  }
  auto merged = RefineAlong(*operand->sharding(), *UnspecifiedDims(instr), *instr->sharding());
  if (!merged) return false;
  SetSharding(instr, *merged, {DecisionKind::kUnspecifiedDims, operand, "Sharding"});
  return true;
}

bool Propagator::RefineUnspecifiedFromUsers(HloInstruction* instr, int level) {
  bool changed = false;
  HloInstruction* conversion = ManualConversionOf(instr);
  const HloInstruction* read = conversion ? conversion : instr;
  for (const HloInstruction* user : read->users()) {
    if (!user->has_sharding() || !user->sharding()->IsTiled() || !instr->has_sharding()) continue;
    auto s = ShardingFromUser(*read, *user, *user->sharding(), level);
    if (!s || s->IsTileMaximal()) continue;
    if (conversion) {
      // The conversion's users see its result: manual after
      // SPMDFullToShardShape, auto after SPMDShardToFullShape.
      const bool from_auto = IsCustomCall(*conversion, "SPMDShardToFullShape");
      changed |= RefinePairAlong(instr, *s, from_auto, user);
      continue;
    }
    auto merged = RefineAlong(*s, *UnspecifiedDims(instr), *instr->sharding());
    if (!merged) continue;
    SetSharding(instr, *merged, {DecisionKind::kUnspecifiedDims, user, "Sharding"});
    changed = true;
  }
  return changed;
}

}  // namespace weft::spmd
