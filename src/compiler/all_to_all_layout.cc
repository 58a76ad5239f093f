#include "weft/compiler/all_to_all_layout.h"

#include <vector>

#include "weft/hlo/computation.h"

namespace weft::compiler {
namespace {

// Where transpose `t` puts its operand's dimension `d`, or -1 when it also
// reorders any other dimension.
int64_t MovesOnly(const HloInstruction& t, int64_t d) {
  const std::vector<int64_t>& perm = t.dimensions();
  int64_t at = -1, previous = -1;
  for (size_t i = 0; i < perm.size(); ++i) {
    if (perm[i] == d) {
      at = static_cast<int64_t>(i);
      continue;
    }
    if (perm[i] < previous) return -1;
    previous = perm[i];
  }
  return at;
}

}  // namespace

const HloInstruction* TransposeWrittenByAllToAll(const HloInstruction& a) {
  if (a.opcode() != HloOpcode::kAllToAll || !a.shape().IsArray() || a.operand_count() != 1 ||
      a.dimensions().size() != 1 || a.users().size() != 1) {
    return nullptr;
  }
  if (a.parent() != nullptr && a.parent()->root_instruction() == &a) return nullptr;
  // One index of the split dimension per chunk (the group's size; unknown
  // here for an empty list, which means every device): a chunk that spans
  // several would change the order of its elements.
  const std::vector<std::vector<int64_t>>& groups = a.attrs().replica_groups;
  const int64_t d = a.dimensions()[0];
  if (groups.empty() || static_cast<int64_t>(groups.front().size()) != a.shape().dimensions(d)) {
    return nullptr;
  }
  const HloInstruction* t = a.users().front();
  if (t->opcode() != HloOpcode::kTranspose || t->operand(0) != &a) return nullptr;
  return MovesOnly(*t, d) >= 0 ? t : nullptr;
}

bool ForwardsAllToAll(const HloInstruction& transpose) {
  return transpose.opcode() == HloOpcode::kTranspose && transpose.operand_count() == 1 &&
         TransposeWrittenByAllToAll(*transpose.operand(0)) == &transpose;
}

int64_t TransposedOuterRows(const HloInstruction& transpose) {
  const HloInstruction& a = *transpose.operand(0);
  const int64_t at = MovesOnly(transpose, a.dimensions()[0]);
  int64_t outer = 1;
  for (int64_t i = 0; i < at; ++i) outer *= transpose.shape().dimensions()[i];
  return outer;
}

}  // namespace weft::compiler
