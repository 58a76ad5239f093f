// Sharding groups: `shard_as N` members end with one sharding, `shard_like N`
// members only pass shardings to each other during propagation.
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "propagator.h"
#include "weft/base/error.h"
#include "weft/sharding/sharding_util.h"
#include "weft/spmd/improve_sharding.h"

namespace weft::spmd {
namespace {

// Two user shardings can end as one: equal, or partial shardings that merge.
bool Compatible(const HloSharding& a, const HloSharding& b) {
  if (a == b) return true;
  if (a.IsTuple() || b.IsTuple() || a.IsTileMaximal() || b.IsTileMaximal() || a.IsManual() ||
      b.IsManual()) {
    return false;
  }
  return sharding_util::MergeShardingIfCompatible(a, b).has_value() ||
         sharding_util::MergeShardingIfCompatible(b, a).has_value();
}

}  // namespace

void Propagator::CollectShardGroups() {
  std::map<std::pair<int64_t, bool>, int32_t> by_id;
  for (HloInstruction* instr : instrs_) {
    if (!instr->has_sharding() || instr->sharding()->IsTuple() ||
        !instr->sharding()->shard_group()) {
      continue;
    }
    const ShardGroup group = *instr->sharding()->shard_group();
    HloInstruction* member = instr;
    // An unknown Sharding annotation with a group marks its operand.
    if (IsCustomCall(*instr, "Sharding") && instr->sharding()->IsUnknown() &&
        instr->operand(0)->opcode() != HloOpcode::kParameter) {
      member = instr->operand(0);
    }
    const bool as = group.kind == ShardGroup::Kind::kAs;
    auto [it, inserted] = by_id.try_emplace({group.id, as}, static_cast<int32_t>(groups_.size()));
    if (inserted) groups_.push_back({group.id, as, {}});
    ShardGroupInfo& info = groups_[it->second];
    if (!info.members.empty()) {
      const Shape& first = info.members.front()->shape();
      WEFT_CHECK(first.dimensions() == member->shape().dimensions(),
                 "{} group {}: member {} has shape {} but member {} has {}; members of a "
                 "sharding group must have the same dimensions",
                 as ? "shard_as" : "shard_like", group.id, member->Describe(),
                 member->shape().ToString(), info.members.front()->Describe(), first.ToString());
    }
    if (std::find(info.members.begin(), info.members.end(), member) == info.members.end()) {
      info.members.push_back(member);
    }
    WEFT_CHECK(group_of_[Index(member)] < 0 || group_of_[Index(member)] == it->second,
               "{} is in two sharding groups; an instruction can be in one group only",
               member->Describe());
    group_of_[Index(member)] = it->second;
    instr->set_sharding(instr->sharding()->WithShardGroup(std::nullopt));
  }
  for (const auto& [key, index] : by_id) {
    WEFT_CHECK(!by_id.count({key.first, !key.second}),
               "sharding group {} is used both as shard_as and shard_like; use one kind per id",
               key.first);
  }
}

void Propagator::CheckExplicitGroupConflicts() const {
  for (const ShardGroupInfo& group : groups_) {
    if (!group.shard_as) continue;
    std::vector<const HloInstruction*> explicit_members;
    for (const HloInstruction* m : group.members) {
      if (m->has_sharding() && !m->sharding()->IsUnknown() &&
          (IsProvided(m) || m->opcode() == HloOpcode::kParameter)) {
        explicit_members.push_back(m);
      }
    }
    for (size_t a = 0; a < explicit_members.size(); ++a) {
      for (size_t b = a + 1; b < explicit_members.size(); ++b) {
        const HloInstruction* x = explicit_members[a];
        const HloInstruction* y = explicit_members[b];
        if (Compatible(*x->sharding(), *y->sharding())) continue;
        std::vector<std::string> lines;
        for (const HloInstruction* m : explicit_members) {
          lines.push_back(fmt::format("  {}: {}", m->Describe(), m->sharding()->ToString()));
        }
        Fail(
            "shard_as group {}: user shardings of {} and {} are incompatible ({} vs {}); members "
            "of a shard_as group end with one sharding, so give them the same (or mergeable "
            "partial) shardings, or use shard_like for a hint. Annotated members:\n{}",
            group.id, x->name(), y->name(), x->sharding()->ToString(), y->sharding()->ToString(),
            fmt::join(lines, "\n"));
      }
    }
  }
}

bool Propagator::InferFromShardGroup(HloInstruction* instr, int level) {
  const ShardGroupInfo& group = groups_[group_of_[Index(instr)]];
  // Same level gating as forward inference of the member itself.
  const HloOpcode op = instr->opcode();
  const bool pass_through =
      IsElementwise(op) || op == HloOpcode::kCompare || op == HloOpcode::kCall ||
      op == HloOpcode::kConcatenate || op == HloOpcode::kDynamicSlice ||
      op == HloOpcode::kDynamicUpdateSlice || op == HloOpcode::kGetTupleElement ||
      op == HloOpcode::kReshape || op == HloOpcode::kTuple || op == HloOpcode::kTranspose ||
      op == HloOpcode::kWhile || IsCustomCall(*instr, "Sharding");
  if (!pass_through && level < (op == HloOpcode::kBroadcast ? 2 : 1)) return false;
  if (instr->has_sharding() && instr->sharding()->IsManual()) return false;
  const DecisionSource why_kind{DecisionKind::kShardGroup, nullptr,
                                group.shard_as ? "shard_as" : "shard_like"};
  if (!instr->has_sharding() || instr->sharding()->IsTileMaximal()) {
    for (const HloInstruction* m : group.members) {
      if (m != instr && m->has_sharding() && m->sharding()->IsManual()) {
        SetSharding(instr, m->sharding(), {why_kind.kind, m, why_kind.rule});
        return true;
      }
    }
  }
  bool changed = false;
  for (const HloInstruction* m : group.members) {
    if (m == instr || !m->has_sharding()) continue;
    changed |= Improve(instr, *m->sharding(), level > 0, false, {why_kind.kind, m, why_kind.rule});
  }
  return changed;
}

bool Propagator::RefineUnspecifiedFromGroup(HloInstruction* instr) {
  const ShardGroupInfo& group = groups_[group_of_[Index(instr)]];
  bool changed = false;
  for (const HloInstruction* m : group.members) {
    if (m == instr || !m->has_sharding() || !m->sharding()->IsTiled() || !instr->has_sharding()) {
      continue;
    }
    HloSharding partial = sharding_util::PartiallyReplicateTiledShardingOnAllDimsExcept(
        *m->sharding(), *UnspecifiedDims(instr));
    auto merged = sharding_util::MergeShardingIfCompatible(partial, *instr->sharding(),
                                                           instr->sharding()->NumTiles() + 1);
    if (!merged) continue;
    SetSharding(instr, *merged, {DecisionKind::kUnspecifiedDims, m, "shard group"});
    changed = true;
  }
  return changed;
}

void Propagator::AlignShardAsGroups() {
  for (const ShardGroupInfo& group : groups_) {
    if (!group.shard_as) continue;
    // The most specific member sharding, refined by every compatible one.
    const HloInstruction* best = nullptr;
    for (const HloInstruction* m : group.members) {
      if (!m->has_sharding()) continue;
      if (!best || sharding_util::IsShardingMoreSpecific(*m->sharding(), *best->sharding()))
        best = m;
    }
    if (!best) continue;
    HloSharding common = *best->sharding();
    for (const HloInstruction* m : group.members) {
      if (m == best || !m->has_sharding() || m->sharding()->IsTuple() || common.IsTuple()) continue;
      if (auto merged = sharding_util::MergeShardingIfCompatible(*m->sharding(), common,
                                                                 common.NumTiles() + 1)) {
        common = std::move(*merged);
      }
    }
    for (HloInstruction* m : group.members) {
      if (m->sharding() != common) {
        SetSharding(m, common, {DecisionKind::kGroupAlignment, best, "shard_as"});
      }
    }
  }
}

}  // namespace weft::spmd
