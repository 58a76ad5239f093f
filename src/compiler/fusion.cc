#include "weft/compiler/fusion.h"

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "weft/base/error.h"
#include "weft/hlo/computation.h"

namespace weft::compiler {
namespace {

// Sources that cost nothing to recompute: broadcast, iota, scalar constant.
bool IsCheapSource(const HloInstruction& instr) {
  return instr.opcode() == HloOpcode::kBroadcast || instr.opcode() == HloOpcode::kIota ||
         (instr.opcode() == HloOpcode::kConstant && instr.shape().IsScalar());
}

// Cheap to recompute, so copied into every fusion that reads it rather than
// materialized: a cheap source, or a compare, select, convert, and, or, not
// whose operands are each cheap or a value no loop fusion computes (a
// parameter, a dot's result, a reduce's: read by the fusion as its
// parameter wherever the copy goes). A one-hot compare(iota,
// broadcast(targets)) is one. `depth` bounds the walk down such chains.
bool IsCheap(const HloInstruction& instr, int depth = 0) {
  if (IsCheapSource(instr)) return true;
  const HloOpcode op = instr.opcode();
  if (op != HloOpcode::kCompare && op != HloOpcode::kSelect && op != HloOpcode::kConvert &&
      op != HloOpcode::kAnd && op != HloOpcode::kOr && op != HloOpcode::kNot) {
    return false;
  }
  if (depth >= 4 || !IsLoopFusible(instr)) return false;
  return std::all_of(instr.operands().begin(), instr.operands().end(),
                     [&](const HloInstruction* operand) {
                       return !IsLoopFusible(*operand) || IsCheap(*operand, depth + 1);
                     });
}

// No sharding boundary between a producer and its consumer.
bool SameSharding(const HloInstruction& a, const HloInstruction& b) {
  return !a.has_sharding() || !b.has_sharding() || *a.sharding() == *b.sharding();
}

// Index maps: reshape, transpose, slice, reverse, concatenate, pad (and
// broadcast). Inside a loop fusion they read their operands at other indices
// than the tile's own ("gathered"), except a row-major reshape, which keeps
// the linear index.
bool IsIndexMap(HloOpcode op) {
  return op == HloOpcode::kTranspose || op == HloOpcode::kSlice || op == HloOpcode::kReverse ||
         op == HloOpcode::kConcatenate || op == HloOpcode::kPad || op == HloOpcode::kBroadcast;
}

// Where a member of a group is read: at the tile's own linear indices
// (aligned: computed per tile, with the fusion's element count), or through
// an index map (gathered: then it is an index map or a reshape itself).
enum Region : uint8_t { kAligned = 1, kGathered = 2 };

struct Group {
  HloInstruction* root = nullptr;
  std::vector<HloInstruction*> members;                       // root included
  std::unordered_map<const HloInstruction*, uint8_t> region;  // members' Region bits
  int64_t count = 0;                                          // the fusion's element count
  bool Has(const HloInstruction* instr) const { return region.count(instr) > 0; }
  void Add(HloInstruction* instr, uint8_t r) {
    auto [it, inserted] = region.emplace(instr, r);
    if (inserted) {
      members.push_back(instr);
    } else {
      it->second |= r;
    }
  }
};

// How a member `user` of `group` reads its operand number `k`: the Region
// bits the operand needs, or 0 when it may only be a parameter (a pad's
// value).
uint8_t NeededRegion(const Group& group, const HloInstruction* user, int64_t k) {
  const HloOpcode op = user->opcode();
  if (op == HloOpcode::kPad && k == 1) return 0;
  // An input fusion's reduce reads its input at the fusion's own (input)
  // indices; its init value is a parameter or scalar constant.
  if (op == HloOpcode::kReduce) return k == 0 ? kAligned : 0;
  if (IsIndexMap(op)) return kGathered;
  if (op == HloOpcode::kReshape) return group.region.at(user);
  return kAligned;  // elementwise
}

// Whether `x` may be a member of `group` in `region`.
bool FitsRegion(const HloInstruction& x, const Group& group, uint8_t region) {
  const HloOpcode op = x.opcode();
  if ((region & kAligned) && x.shape().ElementsCount() != group.count) return false;
  if (region & kGathered) {
    // Gathered: an index map or a reshape (or a scalar constant, a source).
    return IsIndexMap(op) || op == HloOpcode::kReshape ||
           (op == HloOpcode::kConstant && x.shape().IsScalar());
  }
  return true;
}

// The Region bits `x` needs in `group` from its users there; 0 when some
// user cannot read it inside the fusion.
uint8_t RegionFromUsers(const HloInstruction& x, const Group& group) {
  uint8_t needed = 0;
  for (const HloInstruction* user : x.users()) {
    if (!group.Has(user)) continue;
    for (int64_t k = 0; k < user->operand_count(); ++k) {
      if (user->operand(k) != &x) continue;
      const uint8_t r = NeededRegion(group, user, k);
      if (r == 0 && !(x.opcode() == HloOpcode::kConstant && x.shape().IsScalar())) return 0;
      needed |= r;
    }
  }
  return needed;
}

// The computations the pass rewrites: the entry and what while, call and
// conditional reach from it, but no reducer (a to_apply of reduce, scatter, all-reduce,
// reduce-scatter) and no fused computation.
std::vector<HloComputation*> ComputationsToFuse(const HloModule& module) {
  std::unordered_set<const HloComputation*> reducers;
  for (const HloComputation* c : module.computations()) {
    for (const HloInstruction* instr : c->instructions()) {
      const HloOpcode op = instr->opcode();
      if (!RunsCalledComputations(op)) {
        for (const HloComputation* callee : instr->called_computations()) reducers.insert(callee);
      }
    }
  }
  std::vector<HloComputation*> out;
  std::unordered_set<const HloComputation*> seen;
  std::vector<HloComputation*> stack;
  if (module.entry_computation() != nullptr) stack.push_back(module.entry_computation());
  while (!stack.empty()) {
    HloComputation* c = stack.back();
    stack.pop_back();
    if (!seen.insert(c).second || reducers.count(c)) continue;
    out.push_back(c);
    for (const HloInstruction* instr : c->instructions()) {
      if (RunsCalledComputations(instr->opcode())) {
        for (HloComputation* callee : instr->called_computations()) stack.push_back(callee);
      }
    }
  }
  return out;
}

// The values of `x`'s element count that x's loop-fusible producers (up to
// a depth) read from outside them: the buffers of its size a fusion
// computing x reads; -1 past the depth.
int64_t FullSizeInputs(const HloInstruction& x) {
  std::unordered_set<const HloInstruction*> inputs, seen;
  bool deep = false;
  const auto walk = [&](const auto& self, const HloInstruction& v, int depth) -> void {
    for (const HloInstruction* operand : v.operands()) {
      if (!seen.insert(operand).second) continue;
      const bool inline_op = IsLoopFusible(*operand);
      if (inline_op && depth < 8) {
        self(self, *operand, depth + 1);
      } else if (inline_op) {
        deep = true;
      } else if (operand->shape().IsArray() &&
                 operand->shape().ElementsCount() == x.shape().ElementsCount()) {
        inputs.insert(operand);
      }
    }
  };
  walk(walk, x, 0);
  return deep ? -1 : static_cast<int64_t>(inputs.size());
}

// Whether a value that several fusions read, one of them an input fusion
// (`reduced`), is computed in each of them rather than materialized once:
// an elementwise op whose producers read at most one buffer of its size
// (the cross-entropy's exp(logits - max), read by its sum and by the
// gradient: the fusions then hold the logits, which they read anyway,
// instead of a second buffer). Where they read two (a residual add read by
// an RMSNorm's statistics and its normalization) recomputing would hold
// both inputs until the last reader instead of the one sum. A value only
// loop fusions read is computed once: recomputing those too (SiLU and RMSNorm
// products in the layers' backward) made small.toml's executor step 5-8%
// slower; recomputing a reduce's operand cost nothing measurable
// (docs/PERFORMANCE.md).
bool IsRecomputable(const HloInstruction& instr, bool reduced) {
  if (!reduced || !IsElementwise(instr.opcode())) return false;
  const int64_t inputs = FullSizeInputs(instr);
  return inputs >= 0 && inputs <= 1;
}

// Decides the groups of one computation, visiting users before operands.
class GroupFormer {
 public:
  explicit GroupFormer(const HloInstruction* computation_root)
      : computation_root_(computation_root) {}

  void Visit(HloInstruction* x) {
    if (IsInputFusibleReduce(*x)) {
      // The root of an input fusion: its group is computed at the reduce
      // input's indices.
      NewGroup(x, x->operand(0)->shape().ElementsCount());
      return;
    }
    if (!IsLoopFusible(*x)) return;
    if (IsCheap(*x)) {
      PlaceCheap(x);
    } else {
      PlaceOther(x);
    }
  }

  // The groups worth a fusion.
  std::vector<Group> TakeGroups() {
    // A fusion needs some elementwise work, at least two instructions, and
    // more than one element (scalar arithmetic gains nothing from tiles).
    std::vector<Group> kept;
    for (Group& group : groups_) {
      const bool has_elementwise =
          std::any_of(group.members.begin(), group.members.end(),
                      [](const HloInstruction* m) { return IsElementwise(m->opcode()); });
      const bool input = group.root->opcode() == HloOpcode::kReduce;
      if (has_elementwise && group.members.size() >= 2 &&
          (input || group.root->shape().rank() > 0)) {
        kept.push_back(std::move(group));
      }
    }
    return kept;
  }

 private:
  std::vector<int64_t> GroupsOf(const HloInstruction* instr) const {
    std::vector<int64_t> out;
    if (auto it = group_of_.find(instr); it != group_of_.end()) out.push_back(it->second);
    if (auto it = copied_groups_.find(instr); it != copied_groups_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
    }
    return out;
  }

  void NewGroup(HloInstruction* x, int64_t count) {
    Group group;
    group.root = x;
    group.count = count;
    group.Add(x, kAligned);
    group_of_[x] = static_cast<int64_t>(groups_.size());
    groups_.push_back(std::move(group));
  }

  void PlaceCheap(HloInstruction* x) {
    // Into each group of its users where every user in that group can
    // read it: a broadcast reads only parameters and constants, and a
    // broadcast or an iota has the fusion's dimensions (a scalar constant
    // may be read by a broadcast, or by clamp / select).
    std::vector<int64_t> candidates;
    bool outside = x == computation_root_;  // a reader no copy serves
    for (const HloInstruction* user : x->users()) {
      const std::vector<int64_t> user_groups = GroupsOf(user);
      outside = outside || user_groups.empty() || kept_original_.count(user);
      for (int64_t g : user_groups) {
        if (std::find(candidates.begin(), candidates.end(), g) == candidates.end()) {
          candidates.push_back(g);
        }
      }
    }
    for (int64_t g : candidates) {
      Group& group = groups_[g];
      bool ok = true;
      for (const HloInstruction* user : x->users()) {
        if (group.Has(user)) ok = ok && SameSharding(*x, *user);
      }
      uint8_t r = RegionFromUsers(*x, group);
      if (x->opcode() == HloOpcode::kConstant) {
        r |= kGathered;  // a source: any user reads it
      } else {
        // A broadcast reads at its own indices where aligned; an iota (or
        // a cheap elementwise op) is computed only at the tile's own
        // indices.
        ok = ok && r != 0 && FitsRegion(*x, group, r) &&
             !(x->opcode() == HloOpcode::kIota && (r & kGathered));
      }
      if (ok) {
        group.Add(x, r);
        copied_groups_[x].push_back(g);
      } else {
        outside = true;
      }
    }
    if (copied_groups_.count(x) == 0 || (outside && IsElementwise(x->opcode()))) {
      // Nobody took it, or a reader no copy serves needs the original:
      // the root of a group of its own, so a cheap elementwise op computes
      // its cheap operands inline (a lone broadcast or iota stays unfused;
      // see TakeGroups). Its readers' groups were made before it
      // (users before operands), so their fusions are built first and
      // read the original until this group's fusion replaces it.
      NewGroup(x, x->shape().ElementsCount());
    } else if (outside) {
      kept_original_.insert(x);
    }
  }

  void PlaceOther(HloInstruction* x) {
    // Not cheap: goes into the groups of its users when each user is in
    // some group and nowhere else (no original of it stays), and every
    // such group can compute it where its users read it. In one group it
    // moves there; in several (a value read by two fusions: exp(x - max),
    // read by the sum's input fusion and the gradient's loop fusion) an
    // elementwise op is recomputed in each instead of materialized.
    std::vector<int64_t> targets;
    bool ok = x != computation_root_ && !x->users().empty();
    for (const HloInstruction* user : x->users()) {
      if (!ok) break;
      const std::vector<int64_t> user_groups = GroupsOf(user);
      ok = !user_groups.empty() && !kept_original_.count(user) && SameSharding(*x, *user);
      for (int64_t g : user_groups) {
        if (std::find(targets.begin(), targets.end(), g) == targets.end()) targets.push_back(g);
      }
    }
    std::vector<uint8_t> regions;
    for (size_t k = 0; ok && k < targets.size(); ++k) {
      regions.push_back(RegionFromUsers(*x, groups_[targets[k]]));
      ok = regions.back() != 0 && FitsRegion(*x, groups_[targets[k]], regions.back());
    }
    if (ok && targets.size() > 1) {
      ok = IsRecomputable(*x, std::any_of(targets.begin(), targets.end(), [&](int64_t g) {
        return groups_[g].root->opcode() == HloOpcode::kReduce;
      }));
    }
    if (!ok) {
      NewGroup(x, x->shape().ElementsCount());
      return;
    }
    for (size_t k = 0; k < targets.size(); ++k) groups_[targets[k]].Add(x, regions[k]);
    if (targets.size() == 1) {
      group_of_[x] = targets[0];
    } else {
      copied_groups_[x] = targets;
    }
  }

  const HloInstruction* computation_root_;
  std::vector<Group> groups_;
  // The one group an instruction moved into; one copied into several
  // (cheap, or recomputed) lists them in `copied_groups_`.
  std::unordered_map<const HloInstruction*, int64_t> group_of_;
  std::unordered_map<const HloInstruction*, std::vector<int64_t>> copied_groups_;
  // Copied instructions whose original stays too (a user outside every
  // fusion, or in a group that could not take the copy).
  std::unordered_set<const HloInstruction*> kept_original_;
};

std::vector<Group> FormGroups(const std::vector<HloInstruction*>& post_order,
                              const HloInstruction* computation_root) {
  GroupFormer former(computation_root);
  for (auto it = post_order.rbegin(); it != post_order.rend(); ++it) former.Visit(*it);
  return former.TakeGroups();
}

}  // namespace

bool IsInputFusibleReduce(const HloInstruction& instr) {
  if (instr.opcode() != HloOpcode::kReduce || instr.operand_count() != 2) return false;
  const Shape& in = instr.operand(0)->shape();
  if (!instr.shape().IsArray() || instr.shape().element_type() != PrimitiveType::kF32 ||
      !in.IsArray() || in.element_type() != PrimitiveType::kF32 ||
      !instr.operand(1)->shape().IsArray() ||
      instr.operand(1)->shape().element_type() != PrimitiveType::kF32) {
    return false;
  }
  // add, multiply, max or min of the two parameters.
  const HloComputation* reducer = instr.to_apply();
  if (reducer == nullptr || reducer->num_parameters() != 2) return false;
  const HloInstruction* r = reducer->root_instruction();
  const HloOpcode op = r->opcode();
  if (op != HloOpcode::kAdd && op != HloOpcode::kMultiply && op != HloOpcode::kMaximum &&
      op != HloOpcode::kMinimum) {
    return false;
  }
  if (r->operand(0)->opcode() != HloOpcode::kParameter ||
      r->operand(1)->opcode() != HloOpcode::kParameter || r->operand(0) == r->operand(1) ||
      !r->shape().IsScalar()) {
    return false;
  }
  // The reduced dims are the innermost ones (rows), of at most kMaxInputFusionRow elements.
  std::vector<int64_t> dims = instr.dimensions();
  std::sort(dims.begin(), dims.end());
  int64_t row = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] != in.rank() - static_cast<int64_t>(dims.size() - i)) return false;
    row *= in.dimensions(dims[i]);
  }
  return row >= 1 && row <= kMaxInputFusionRow && in.ElementsCount() > 1;
}

bool IsLoopFusible(const HloInstruction& instr) {
  if (!instr.shape().IsArray() || !IsFusibleElementType(instr.shape().element_type())) return false;
  for (const HloInstruction* operand : instr.operands()) {
    if (!operand->shape().IsArray() || !IsFusibleElementType(operand->shape().element_type())) {
      return false;
    }
  }
  const HloOpcode op = instr.opcode();
  if (IsElementwise(op)) return op != HloOpcode::kCopy;
  return IsIndexMap(op) || op == HloOpcode::kReshape || op == HloOpcode::kIota ||
         (op == HloOpcode::kConstant && instr.shape().IsScalar());
}

namespace {

// Replaces each group of `computation` by a fusion instruction of `kind`
// (kInput for a reduce root, else `kind`) calling a new fused computation,
// then drops the originals nothing uses any more.
void BuildFusions(HloModule& module, HloComputation* computation, std::vector<Group>& groups,
                  FusionKind kind, LoopFusionStats& stats) {
  // The clones of each original (the first takes its name back when the
  // original goes).
  std::unordered_map<const HloInstruction*, std::vector<HloInstruction*>> clones;
  std::unordered_set<const HloInstruction*> fused;
  for (Group& group : groups) {
    // The members in post order from the root (operands left to right),
    // and the values from outside in the order that walk meets them: the
    // fusion's operands, as XLA orders them.
    std::vector<HloInstruction*> members, fusion_operands;
    {
      std::unordered_set<const HloInstruction*> visited{group.root}, outside;
      std::vector<std::pair<HloInstruction*, int64_t>> stack{{group.root, 0}};
      while (!stack.empty()) {
        auto& [instr, next] = stack.back();
        if (next < instr->operand_count()) {
          HloInstruction* operand = instr->operand(next++);
          if (group.Has(operand)) {
            if (visited.insert(operand).second) stack.push_back({operand, 0});
          } else if (outside.insert(operand).second) {
            fusion_operands.push_back(operand);
          }
        } else {
          members.push_back(instr);
          stack.pop_back();
        }
      }
    }
    WEFT_INTERNAL_CHECK(members.size() == group.members.size(),
                        "fusion: {} of the {} members of the group of {} are reachable "
                        "from it",
                        members.size(), group.members.size(), group.root->Describe());
    auto fused_computation = std::make_unique<HloComputation>("fused_computation");
    std::unordered_map<const HloInstruction*, HloInstruction*> mapped;
    for (size_t number = 0; number < fusion_operands.size(); ++number) {
      HloAttributes attrs;
      attrs.parameter_number = static_cast<int64_t>(number);
      mapped[fusion_operands[number]] = fused_computation->AddInstruction(
          HloInstruction::Create(HloOpcode::kParameter, fusion_operands[number]->shape(), {},
                                 std::move(attrs), {}, fmt::format("param_{}", number)));
    }
    for (HloInstruction* member : members) {
      std::vector<HloInstruction*> operands;
      for (HloInstruction* operand : member->operands()) operands.push_back(mapped.at(operand));
      auto clone =
          HloInstruction::Create(member->opcode(), member->shape(), std::move(operands),
                                 member->attrs(), member->called_computations(), member->name());
      clone->set_sharding(member->sharding());
      clone->set_location(member->location());
      HloInstruction* added = fused_computation->AddInstruction(std::move(clone));
      mapped[member] = added;
      clones[member].push_back(added);
      fused.insert(member);
    }
    fused_computation->set_root_instruction(mapped.at(group.root));
    HloComputation* callee = module.AddComputation(std::move(fused_computation));

    HloAttributes attrs;
    const bool input = group.root->opcode() == HloOpcode::kReduce;
    attrs.fusion_kind = input ? FusionKind::kInput : kind;
    auto fusion = HloInstruction::Create(HloOpcode::kFusion, group.root->shape(), fusion_operands,
                                         std::move(attrs), {callee}, "fusion");
    fusion->set_sharding(group.root->sharding());
    HloInstruction* added = computation->AddInstructionBefore(std::move(fusion), group.root);
    const bool was_root = computation->root_instruction() == group.root;
    group.root->ReplaceAllUsesWith(added);
    if (was_root) computation->set_root_instruction(added);
    ++stats.fusions;
    stats.input_fusions += input;
    stats.output_fusions += kind == FusionKind::kOutput;
    stats.fused_instructions += static_cast<int64_t>(group.members.size());
  }

  // Drop the originals nothing uses any more (users first), and give their
  // names to their clones.
  const std::vector<HloInstruction*> instructions = computation->instructions();
  for (auto it = instructions.rbegin(); it != instructions.rend(); ++it) {
    HloInstruction* instr = *it;
    if (fused.count(instr) == 0) continue;
    const std::vector<HloInstruction*>& copies = clones.at(instr);
    if (instr->users().empty() && instr != computation->root_instruction()) {
      std::string name = instr->name();
      stats.duplicated += static_cast<int64_t>(copies.size()) - 1;
      computation->RemoveInstruction(instr);
      copies.front()->set_name(std::move(name));
    } else {
      stats.duplicated += static_cast<int64_t>(copies.size());
    }
  }
}

// f32 of `shape`'s dims.
bool IsF32Array(const Shape& shape) {
  return shape.IsArray() && shape.element_type() == PrimitiveType::kF32;
}

// The next step of an output fusion's chain after `x` (the dot or the
// previous step): x's only user, an add or multiply of x's shape and
// sharding whose other operand is a different value of that full shape
// (not a broadcast, iota or constant).
HloInstruction* NextOutputStep(const HloInstruction& x, const HloInstruction* computation_root) {
  if (&x == computation_root || x.users().size() != 1) return nullptr;
  HloInstruction* user = x.users()[0];
  if (user->opcode() != HloOpcode::kAdd && user->opcode() != HloOpcode::kMultiply) return nullptr;
  if (user->operand_count() != 2 || user->shape() != x.shape() || !SameSharding(x, *user)) {
    return nullptr;
  }
  // x exactly once (not multiply(x, x)); the other operand of x's shape.
  const HloInstruction* other = user->operand(0) == &x ? user->operand(1) : user->operand(0);
  // A broadcast (or iota, constant) stays for loop fusion to compute inline
  // rather than being materialized at the dot's full shape.
  if (other == &x || other->shape() != x.shape() || IsCheapSource(*other)) return nullptr;
  return user;
}

}  // namespace

bool IsOutputFusibleDot(const HloInstruction& instr) {
  return instr.opcode() == HloOpcode::kDot && instr.operand_count() == 2 &&
         IsF32Array(instr.shape()) && IsF32Array(instr.operand(0)->shape()) &&
         IsF32Array(instr.operand(1)->shape());
}

LoopFusionStats FuseOutputs(HloModule& module) {
  LoopFusionStats stats;
  for (HloComputation* computation : ComputationsToFuse(module)) {
    std::vector<Group> groups;
    // Steps already in a chain (add(dot1, dot2): the first dot takes it).
    std::unordered_set<const HloInstruction*> taken;
    for (HloInstruction* instr : computation->MakeInstructionPostOrder()) {
      if (!IsOutputFusibleDot(*instr)) continue;
      HloInstruction* step = NextOutputStep(*instr, computation->root_instruction());
      if (step == nullptr || taken.count(step)) continue;
      Group group;
      group.Add(instr, kAligned);
      group.count = instr->shape().ElementsCount();
      while (step != nullptr && !taken.count(step)) {
        group.Add(step, kAligned);
        taken.insert(step);
        group.root = step;
        step = NextOutputStep(*step, computation->root_instruction());
      }
      groups.push_back(std::move(group));
    }
    if (!groups.empty()) BuildFusions(module, computation, groups, FusionKind::kOutput, stats);
  }
  return stats;
}

LoopFusionStats FuseLoops(HloModule& module) {
  // Output fusion first: its chains' adds and multiplies would otherwise be
  // taken by loop fusions, and loop fusion never fuses a fusion further.
  LoopFusionStats stats = FuseOutputs(module);
  for (HloComputation* computation : ComputationsToFuse(module)) {
    const std::vector<HloInstruction*> post_order = computation->MakeInstructionPostOrder();
    std::vector<Group> groups = FormGroups(post_order, computation->root_instruction());
    if (groups.empty()) continue;
    BuildFusions(module, computation, groups, FusionKind::kLoop, stats);
  }
  return stats;
}

}  // namespace weft::compiler
