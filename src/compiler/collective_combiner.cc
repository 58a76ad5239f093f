#include "weft/compiler/collective_combiner.h"

#include <algorithm>
#include <unordered_map>
#include <vector>

#include "weft/base/error.h"

namespace weft::compiler {
namespace {

bool Combinable(const HloInstruction& x) {
  const HloOpcode op = x.opcode();
  if (op != HloOpcode::kAllGather && op != HloOpcode::kReduceScatter &&
      op != HloOpcode::kAllReduce) {
    return false;
  }
  return x.operand_count() == 1 && x.shape().IsArray() && x.operand(0)->shape().IsArray();
}

// What must agree for two collectives to become one: everything but the
// channel id's value and the passthrough text (metadata).
HloAttributes KeyAttributes(const HloInstruction& x) {
  HloAttributes a = x.attrs();
  if (a.channel_id) a.channel_id = 0;
  a.passthrough.clear();
  return a;
}

bool SameKey(const HloInstruction& a, const HloInstruction& b) {
  return a.opcode() == b.opcode() && a.called_computations() == b.called_computations() &&
         KeyAttributes(a) == KeyAttributes(b);
}

struct Group {
  std::vector<HloInstruction*> members;  // in post-order
  std::vector<uint64_t> mask;            // members, as candidate bits
  int64_t bytes = 0;
};

// Finds the first group of two or more collectives that may become one, in
// the computation as it is now. Empty when there is none.
std::vector<HloInstruction*> NextGroup(const HloComputation& computation, int64_t threshold) {
  const std::vector<HloInstruction*> post = computation.MakeInstructionPostOrder();
  std::unordered_map<const HloInstruction*, int64_t> candidate;  // -> bit
  for (const HloInstruction* x : post) {
    if (Combinable(*x)) candidate.emplace(x, static_cast<int64_t>(candidate.size()));
  }
  if (candidate.size() < 2) return {};
  const size_t words = (candidate.size() + 63) / 64;
  // Per instruction: the candidates it depends on (itself included).
  std::unordered_map<const HloInstruction*, std::vector<uint64_t>> ancestors;
  ancestors.reserve(post.size());
  std::vector<Group> groups;
  for (HloInstruction* x : post) {
    std::vector<uint64_t> mine(words, 0);
    for (const HloInstruction* o : x->operands()) {
      const std::vector<uint64_t>& theirs = ancestors.at(o);
      for (size_t w = 0; w < words; ++w) mine[w] |= theirs[w];
    }
    auto found = candidate.find(x);
    if (found != candidate.end()) {
      const int64_t bit = found->second;
      const int64_t bytes = x->shape().ByteSize();
      bool joined = false;
      for (Group& g : groups) {
        if (!SameKey(*g.members.front(), *x) || g.bytes + bytes > threshold) continue;
        bool depends = false;  // on a member: the group would wait on itself
        for (size_t w = 0; w < words; ++w) depends = depends || (mine[w] & g.mask[w]) != 0;
        if (depends) continue;
        g.members.push_back(x);
        g.mask[bit / 64] |= uint64_t{1} << (bit % 64);
        g.bytes += bytes;
        joined = true;
        break;
      }
      if (!joined && bytes <= threshold) {
        Group g;
        g.members = {x};
        g.mask.assign(words, 0);
        g.mask[bit / 64] |= uint64_t{1} << (bit % 64);
        g.bytes = bytes;
        groups.push_back(std::move(g));
      }
      mine[bit / 64] |= uint64_t{1} << (bit % 64);
    }
    ancestors.emplace(x, std::move(mine));
  }
  // One group at a time: two groups made together could each wait on the
  // other (a member of each feeding a member of the other).
  for (Group& g : groups) {
    if (g.members.size() >= 2) return std::move(g.members);
  }
  return {};
}

void Combine(HloComputation& computation, const std::vector<HloInstruction*>& members) {
  HloInstruction* root = computation.root_instruction();
  computation.set_root_instruction(root);  // not "the last instruction" once more are added
  const HloInstruction& first = *members.front();
  // Members that move the same operand (duplicates the CSE left apart, now
  // run together) share one result.
  std::vector<HloInstruction*> operands;
  std::vector<Shape> shapes;
  std::vector<int64_t> element(members.size());
  for (size_t i = 0; i < members.size(); ++i) {
    const HloInstruction* m = members[i];
    auto same = std::find(operands.begin(), operands.end(), m->operand(0));
    element[i] = same - operands.begin();
    if (same != operands.end()) continue;
    operands.push_back(m->operand(0));
    shapes.push_back(m->shape());
  }
  // All members duplicates of one: that one collective, not a tuple of one.
  const bool single = operands.size() == 1;
  HloInstruction* combined = computation.AddInstruction(HloInstruction::Create(
      first.opcode(), single ? shapes[0] : Shape::Tuple(shapes), operands, first.attrs(),
      first.called_computations(), first.name() + ".combined"));
  std::vector<HloInstruction*> elements(operands.size(), single ? combined : nullptr);
  for (size_t i = 0; i < members.size(); ++i) {
    HloInstruction* m = members[i];
    HloInstruction*& e = elements[element[i]];
    if (e == nullptr) {
      HloAttributes index;
      index.tuple_index = element[i];
      e = computation.AddInstruction(HloInstruction::Create(
          HloOpcode::kGetTupleElement, m->shape(), {combined}, index, {}, m->name() + ".element"));
    }
    m->ReplaceAllUsesWith(e);
    if (root == m) computation.set_root_instruction(e);
    computation.RemoveInstruction(m);
  }
}

}  // namespace

CollectiveCombinerStats CombineCollectives(HloModule& module, int64_t threshold_bytes) {
  WEFT_INTERNAL_CHECK(threshold_bytes >= 0, "combine threshold {} is negative", threshold_bytes);
  CollectiveCombinerStats stats;
  for (HloComputation* computation : module.computations()) {
    bool changed = false;
    for (;;) {
      const std::vector<HloInstruction*> group = NextGroup(*computation, threshold_bytes);
      if (group.empty()) break;
      Combine(*computation, group);
      ++stats.combined;
      stats.removed += static_cast<int64_t>(group.size()) - 1;
      changed = true;
    }
    if (changed) computation->MakeDefinitionOrderTopological();
  }
  return stats;
}

}  // namespace weft::compiler
