#include "weft/hlo/module.h"

#include <fmt/format.h>

#include <algorithm>
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

std::vector<HloComputation*> HloModule::MakeComputationPostOrder() const {
  std::vector<HloComputation*> order;
  std::unordered_set<const HloComputation*> done, in_progress;
  auto visit = [&](auto&& self, HloComputation* c) -> void {
    if (done.count(c)) return;
    WEFT_CHECK(!in_progress.count(c), "computation '{}' calls itself (recursion is not allowed)",
               c->name());
    in_progress.insert(c);
    for (HloInstruction* instr : c->instructions()) {
      for (HloComputation* callee : instr->called_computations()) self(self, callee);
    }
    in_progress.erase(c);
    done.insert(c);
    order.push_back(c);
  };
  // Unreachable computations first (in insertion order), then the entry's tree,
  // so the entry prints last as in XLA.
  for (const auto& c : computations_) {
    if (c.get() != entry_) visit(visit, c.get());
  }
  if (entry_ != nullptr) {
    visit(visit, entry_);
  }
  return order;
}

std::string HloModule::ToString() const { return PrintModule(*this); }

}  // namespace weft
