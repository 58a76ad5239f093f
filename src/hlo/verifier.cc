#include "weft/hlo/verifier.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <unordered_map>
#include <unordered_set>

#include "weft/base/error.h"
#include "weft/hlo/shape_inference.h"

namespace weft {
namespace {

class Verifier {
 public:
  explicit Verifier(const HloModule& module) : module_(module) {}

  std::vector<std::string> Run() {
    if (module_.entry_computation() == nullptr) {
      problems_.push_back(fmt::format("module '{}' has no entry computation", module_.name()));
    }
    std::unordered_set<std::string> computation_names;
    for (const HloComputation* c : module_.computations()) {
      if (!computation_names.insert(c->name()).second) {
        problems_.push_back(fmt::format("computation name '{}' is used twice", c->name()));
      }
      VerifyComputation(*c);
    }
    // Recursion and call depth: the one check every command relies on.
    try {
      CheckCallGraph(module_);
    } catch (const Error& e) {
      problems_.push_back(e.what());
    }
    return std::move(problems_);
  }

 private:
  void Problem(const HloInstruction& instr, const std::string& what) {
    const SourceLocation& loc = instr.location();
    std::string where = loc.known() ? fmt::format("{}:{}: ", loc.line, loc.col)
                                    : fmt::format("computation '{}': ", instr.parent()->name());
    problems_.push_back(
        fmt::format("{}'{}' ({}): {}", where, instr.name(), HloOpcodeString(instr.opcode()), what));
  }

  void VerifyComputation(const HloComputation& c) {
    if (c.instruction_count() == 0) {
      problems_.push_back(fmt::format("computation '{}' has no instructions", c.name()));
      return;
    }
    for (int64_t i = 0; i < c.num_parameters(); ++i) {
      if (c.parameter_instruction(i) == nullptr) {
        problems_.push_back(fmt::format(
            "computation '{}' has parameters up to {} but no parameter {}; number them 0..n-1",
            c.name(), c.num_parameters() - 1, i));
      }
    }
    std::unordered_set<const HloInstruction*> defined;
    for (const HloInstruction* instr : c.instructions()) {
      if (!names_.insert(instr->name()).second) {
        Problem(*instr, "instruction name is used twice in the module");
      }
      bool operands_ok = true;
      for (const HloInstruction* operand : instr->operands()) {
        if (operand == nullptr || !defined.count(operand)) {
          Problem(*instr, fmt::format("operand '{}' is not defined earlier in computation '{}'",
                                      operand ? operand->name() : "<null>", c.name()));
          operands_ok = false;
        }
      }
      defined.insert(instr);
      bool calls_ok = true;
      for (const HloComputation* callee : instr->called_computations()) {
        if (callee == nullptr || callee->parent() != &module_) {
          Problem(*instr, "calls a computation that is not in this module");
          calls_ok = false;
        } else if (callee == module_.entry_computation()) {
          Problem(*instr, fmt::format("calls the entry computation '{}'", callee->name()));
          calls_ok = false;
        }
      }
      if (operands_ok && calls_ok) VerifyShape(*instr);
      if (instr->sharding()) VerifySharding(*instr);
    }
  }

  void VerifyShape(const HloInstruction& instr) {
    Shape inferred;
    try {
      inferred = InferHloShape(instr);
    } catch (const Error& e) {
      Problem(instr, e.what());
      return;
    }
    if (inferred != instr.shape()) {
      std::vector<std::string> operands;
      for (const HloInstruction* op : instr.operands()) operands.push_back(op->shape().ToString());
      Problem(instr, fmt::format("result {} does not match {} inferred from the operands ({})",
                                 instr.shape().ToString(), inferred.ToString(),
                                 fmt::join(operands, ", ")));
    }
  }

  void VerifySharding(const HloInstruction& instr) {
    const HloSharding& s = *instr.sharding();
    const Shape& shape = instr.shape();
    std::optional<int64_t> devices;
    if (module_.num_partitions() > 1) devices = module_.num_partitions();
    try {
      if (s.IsTuple()) {
        WEFT_CHECK(shape.IsTuple(), "tuple sharding {} on array shape {}", s.ToString(),
                   shape.ToString());
        std::vector<Shape> leaves = shape.Leaves();
        WEFT_CHECK(s.tuple_elements().size() == leaves.size(),
                   "tuple sharding has {} elements but shape {} has {} leaves",
                   s.tuple_elements().size(), shape.ToString(), leaves.size());
        for (size_t i = 0; i < leaves.size(); ++i) {
          s.tuple_elements()[i].Validate(leaves[i].dimensions(), devices);
        }
      } else if (shape.IsTuple()) {
        // One leaf sharding for a whole tuple only makes sense if tile-agnostic.
        WEFT_CHECK(!s.IsTiled(), "tiled sharding {} on tuple shape {}; give one per element",
                   s.ToString(), shape.ToString());
      } else {
        s.Validate(shape.dimensions(), devices);
      }
    } catch (const Error& e) {
      Problem(instr, e.what());
    }
  }

  const HloModule& module_;
  std::vector<std::string> problems_;
  std::unordered_set<std::string> names_;
};

}  // namespace

std::vector<std::string> FindHloModuleProblems(const HloModule& module) {
  return Verifier(module).Run();
}

void VerifyHloModule(const HloModule& module) {
  std::vector<std::string> problems = FindHloModuleProblems(module);
  if (!problems.empty()) throw Error(problems.front());
}

}  // namespace weft
