#include "weft/compiler/collective_cse.h"

#include <algorithm>
#include <unordered_map>
#include <vector>

#include "weft/compiler/fusion.h"

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
  // steps[i]: the instructions before order[i] that loop fusion does not
  // absorb (what the distance limit counts); a loop or a call runs a whole
  // computation, past any limit (the embedding table gathered for the
  // lookup is not kept across the layers for the logits).
  std::vector<int64_t> steps(order.size() + 1, 0);
  for (size_t i = 0; i < order.size(); ++i) {
    position[order[i]] = static_cast<int64_t>(i);
    const HloOpcode op = order[i]->opcode();
    const int64_t step =
        op == HloOpcode::kWhile || op == HloOpcode::kConditional || op == HloOpcode::kCall
            ? kMaxExtension + 1
        : IsLoopFusible(*order[i]) ? 0
                                   : 1;
    steps[i + 1] = steps[i] + step;
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
    if (is_root || steps[position.at(x)] - steps[last_use(earlier) + 1] > kMaxExtension) {
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
