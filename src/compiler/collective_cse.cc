#include "weft/compiler/collective_cse.h"

#include <algorithm>
#include <unordered_map>
#include <vector>

namespace weft::compiler {
namespace {

bool MovesOnly(HloOpcode op) {
  return op == HloOpcode::kAllGather || op == HloOpcode::kAllToAll ||
         op == HloOpcode::kCollectivePermute;
}

// Whether b does what a does: the same opcode, operands, shape and
// attributes but the channel id.
bool SameCollective(const HloInstruction& a, const HloInstruction& b) {
  if (a.opcode() != b.opcode() || a.operands() != b.operands() || !(a.shape() == b.shape())) {
    return false;
  }
  HloAttributes x = a.attrs(), y = b.attrs();
  x.channel_id.reset();
  y.channel_id.reset();
  return x == y;
}

CollectiveCseStats MergeIn(HloComputation& computation) {
  CollectiveCseStats stats;
  const std::vector<HloInstruction*> order = computation.instructions();
  std::unordered_map<const HloInstruction*, int64_t> position;
  // calls_before[i]: the loops, conditionals and calls before order[i]. One
  // runs a whole computation, so a merge never keeps a result across it
  // however few instructions apart the two collectives are.
  std::vector<int64_t> calls_before(order.size() + 1, 0);
  for (size_t i = 0; i < order.size(); ++i) {
    position[order[i]] = static_cast<int64_t>(i);
    const HloOpcode op = order[i]->opcode();
    calls_before[i + 1] =
        calls_before[i] +
        (op == HloOpcode::kWhile || op == HloOpcode::kConditional || op == HloOpcode::kCall);
  }
  auto last_use = [&](const HloInstruction* x) {
    int64_t last = position.at(x);
    for (const HloInstruction* user : x->users()) {
      auto it = position.find(user);
      if (it != position.end()) last = std::max(last, it->second);
    }
    return last;
  };
  // Per first operand, the collectives of it seen so far (the candidates).
  std::unordered_map<const HloInstruction*, std::vector<HloInstruction*>> seen;
  for (HloInstruction* x : order) {
    if (!MovesOnly(x->opcode()) || x->operand_count() == 0) continue;
    std::vector<HloInstruction*>& candidates = seen[x->operand(0)];
    auto same = std::find_if(candidates.begin(), candidates.end(),
                             [&](const HloInstruction* c) { return SameCollective(*c, *x); });
    if (same == candidates.end()) {
      candidates.push_back(x);
      continue;
    }
    HloInstruction* earlier = *same;
    const bool is_root = computation.root_instruction() == x;
    const int64_t last = last_use(earlier), here = position.at(x);
    if (is_root || here - last > kMaxExtension || calls_before[here] != calls_before[last + 1]) {
      if (!is_root) ++stats.kept_far_apart;
      *same = x;  // later duplicates are nearer to this one
      continue;
    }
    x->ReplaceAllUsesWith(earlier);
    computation.RemoveInstruction(x);
    ++stats.merged;
  }
  return stats;
}

}  // namespace

CollectiveCseStats MergeCommonCollectives(HloModule& module) {
  CollectiveCseStats stats;
  for (HloComputation* computation : module.computations()) {
    const CollectiveCseStats s = MergeIn(*computation);
    stats.merged += s.merged;
    stats.kept_far_apart += s.kept_far_apart;
  }
  return stats;
}

}  // namespace weft::compiler
