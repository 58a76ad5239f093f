#include "weft/hlo/module.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "weft/base/error.h"
#include "weft/hlo/printer.h"

namespace weft {

std::string HloModule::NameSpace::Unique(std::string_view prefix) {
  auto is_taken = [&](const std::string& n) { return taken.count(n) > 0; };
  std::string name(prefix.empty() ? "v" : prefix);
  if (is_taken(name)) {
    // Strip an existing numeric suffix so "add.3" clashes become "add.N".
    std::string base = name;
    size_t dot = base.rfind('.');
    if (dot != std::string::npos && dot + 1 < base.size() &&
        std::all_of(base.begin() + dot + 1, base.end(), ::isdigit)) {
      base.resize(dot);
    }
    int64_t& next = next_suffix[base];
    do {
      name = fmt::format("{}.{}", base, ++next);
    } while (is_taken(name));
  }
  taken.insert(name);
  return name;
}

void HloModule::Uniquify(HloComputation* computation) {
  computation->set_name(computation_names_.Unique(computation->name()));
  for (HloInstruction* instr : computation->instructions()) {
    instr->set_name(UniqueName(instr->name().empty() ? std::string(HloOpcodeString(instr->opcode()))
                                                     : instr->name()));
  }
}

HloComputation* HloModule::AddComputation(std::unique_ptr<HloComputation> computation) {
  WEFT_CHECK(computation != nullptr, "null computation added to module '{}'", name_);
  WEFT_CHECK(computation->parent_ == nullptr, "computation '{}' already belongs to a module",
             computation->name());
  HloComputation* raw = computation.get();
  raw->parent_ = this;
  Uniquify(raw);
  computations_.push_back(std::move(computation));
  return raw;
}

HloComputation* HloModule::AddEntryComputation(std::unique_ptr<HloComputation> computation) {
  HloComputation* raw = AddComputation(std::move(computation));
  entry_ = raw;
  return raw;
}

void HloModule::set_entry_computation(HloComputation* entry) {
  WEFT_CHECK(entry != nullptr && entry->parent() == this,
             "entry computation of module '{}' must be one of its computations", name_);
  entry_ = entry;
}

std::vector<HloComputation*> HloModule::computations() const {
  std::vector<HloComputation*> out;
  for (const auto& c : computations_) out.push_back(c.get());
  return out;
}

HloComputation* HloModule::GetComputation(std::string_view name) const {
  for (const auto& c : computations_) {
    if (c->name() == name) return c.get();
  }
  return nullptr;
}

namespace {

// One call: `caller` calls `callee` through `instr`.
struct CallEdge {
  const HloComputation* caller;
  const HloInstruction* instr;
  const HloComputation* callee;
};

std::string DescribeEdge(const CallEdge& e) {
  return fmt::format("'{}' calls '{}' ({})", e.caller->name(), e.callee->name(),
                     e.instr->Describe());
}

// "a -> b -> c", the middle left out when the chain is long.
std::string ChainText(const std::vector<CallEdge>& chain) {
  std::vector<std::string> names;
  if (!chain.empty()) names.push_back(chain.front().caller->name());
  for (const CallEdge& e : chain) names.push_back(e.callee->name());
  constexpr size_t kShown = 4;
  if (names.size() <= 2 * kShown + 1) return fmt::format("{}", fmt::join(names, " -> "));
  return fmt::format(
      "{} -> ... ({} more) ... -> {}", fmt::join(names.begin(), names.begin() + kShown, " -> "),
      names.size() - 2 * kShown, fmt::join(names.end() - kShown, names.end(), " -> "));
}

}  // namespace

std::vector<HloComputation*> HloModule::MakeComputationPostOrder() const {
  // Iterative depth-first search (a call chain may be long; the stack of
  // the process is not), callees in instruction order.
  std::vector<HloComputation*> order;
  enum class State : uint8_t { kActive, kDone };
  std::unordered_map<const HloComputation*, State> state;
  struct Frame {
    HloComputation* computation;
    std::vector<HloInstruction*> instructions;
    size_t instr = 0, callee = 0;
    const HloInstruction* via = nullptr;  // the call that entered it
  };
  std::vector<Frame> stack;
  auto push = [&](HloComputation* c, const HloInstruction* via) {
    state[c] = State::kActive;
    stack.push_back(Frame{c, c->instructions(), 0, 0, via});
  };
  auto visit = [&](HloComputation* start) {
    if (state.count(start)) return;
    push(start, nullptr);
    while (!stack.empty()) {
      Frame& f = stack.back();
      if (f.instr == f.instructions.size()) {
        state[f.computation] = State::kDone;
        order.push_back(f.computation);
        stack.pop_back();
        continue;
      }
      const HloInstruction* instr = f.instructions[f.instr];
      const std::vector<HloComputation*>& callees = instr->called_computations();
      if (f.callee == callees.size()) {
        ++f.instr;
        f.callee = 0;
        continue;
      }
      HloComputation* callee = callees[f.callee++];
      WEFT_CHECK(callee != nullptr, "{} in computation '{}' calls a null computation",
                 instr->Describe(), f.computation->name());
      auto it = state.find(callee);
      if (it == state.end()) {
        push(callee, instr);
        continue;
      }
      if (it->second == State::kDone) continue;
      // `callee` is on the stack: the frames from it to the top form a cycle.
      std::vector<CallEdge> cycle;
      size_t k = stack.size() - 1;
      while (stack[k].computation != callee) --k;
      for (size_t j = k + 1; j < stack.size(); ++j) {
        cycle.push_back({stack[j - 1].computation, stack[j].via, stack[j].computation});
      }
      cycle.push_back({f.computation, instr, callee});
      Fail(
          "computation '{}' calls itself: {} ({}); HLO has no recursion (XLA forbids it "
          "too): a computation may only call computations that do not lead back to it",
          callee->name(), ChainText(cycle), DescribeEdge(cycle.back()));
    }
  };
  // Unreachable computations first (in insertion order), then the entry's tree,
  // so the entry prints last as in XLA.
  for (const auto& c : computations_) {
    if (c.get() != entry_) visit(c.get());
  }
  if (entry_ != nullptr) visit(entry_);

  // The longest call chain from each computation (callees come first in
  // `order`); bounded, so that code that walks calls recursively (the
  // executor, the partitioner) stays within the stack.
  std::unordered_map<const HloComputation*, std::pair<int64_t, CallEdge>> longest;
  const HloComputation* deepest = nullptr;
  for (const HloComputation* c : order) {
    std::pair<int64_t, CallEdge> best{0, CallEdge{c, nullptr, nullptr}};
    for (const HloInstruction* instr : c->instructions()) {
      for (const HloComputation* callee : instr->called_computations()) {
        const int64_t depth = longest.at(callee).first + 1;
        if (depth > best.first) best = {depth, CallEdge{c, instr, callee}};
      }
    }
    longest.emplace(c, best);
    if (deepest == nullptr || best.first > longest.at(deepest).first) deepest = c;
  }
  if (deepest != nullptr && longest.at(deepest).first > kMaxCallDepth) {
    std::vector<CallEdge> chain;
    for (const HloComputation* at = deepest; longest.at(at).first > 0;
         at = longest.at(at).second.callee) {
      chain.push_back(longest.at(at).second);
    }
    Fail(
        "calls nest {} deep from computation '{}', more than weft's limit of {}: {}; flatten "
        "the nesting (inline the calls, or merge the computations)",
        chain.size(), deepest->name(), kMaxCallDepth, ChainText(chain));
  }
  return order;
}

void CheckCallGraph(const HloModule& module) { module.MakeComputationPostOrder(); }

std::string HloModule::ToString() const { return PrintModule(*this); }

}  // namespace weft
