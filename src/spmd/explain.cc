// ExplainSharding: the decisions behind one instruction's sharding, followed
// back through their sources to the user annotations.
#include <fmt/format.h>

#include <unordered_set>

#include "weft/base/error.h"
#include "weft/spmd/sharding_propagation.h"

namespace weft {
namespace {

const HloInstruction* FindInstruction(const HloModule& module, std::string_view name) {
  for (const HloComputation* c : module.computations()) {
    if (const HloInstruction* i = c->GetInstruction(name)) return i;
  }
  return nullptr;
}

std::string Text(const std::optional<HloSharding>& s) { return s ? s->ToString() : "(none)"; }

}  // namespace

std::string ExplainSharding(const HloModule& module, const PropagationResult& result,
                            std::string_view name) {
  const HloInstruction* start = FindInstruction(module, name);
  WEFT_CHECK(start != nullptr, "--explain {}: module {} has no instruction named '{}'", name,
             module.name(), name);
  std::string out;
  std::unordered_set<const HloInstruction*> seen;
  std::vector<const HloInstruction*> queue = {start};
  // Breadth-first over sources: the instruction, then where its sharding came from.
  for (size_t q = 0; q < queue.size(); ++q) {
    const HloInstruction* instr = queue[q];
    if (!seen.insert(instr).second) continue;
    out += fmt::format("{}: {}\n", instr->name(), Text(instr->sharding()));
    auto it = result.decisions.find(instr);
    if (it == result.decisions.end() || it->second.empty()) {
      out += "  no decision recorded (unsharded, or propagation ran without record_decisions)\n";
      continue;
    }
    for (const ShardingDecision& d : it->second) {
      if (d.kind == DecisionKind::kAnnotation && d.source == nullptr) {
        out += fmt::format("  user annotation: {}\n", Text(d.after));
        continue;
      }
      std::string from;
      if (d.source) {
        const char* dir = d.kind == DecisionKind::kForward    ? "from operand"
                          : d.kind == DecisionKind::kBackward ? "from user"
                                                              : "from";
        from = fmt::format(" {} {}", dir, d.source->name());
        queue.push_back(d.source);
      }
      out += fmt::format("  round {}, level {}, {}{}{}: {} -> {}\n", d.round, d.level,
                         DecisionKindName(d.kind), from, d.rule.empty() ? "" : " via " + d.rule,
                         Text(d.before), Text(d.after));
    }
  }
  return out;
}

}  // namespace weft
