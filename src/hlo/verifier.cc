#include "weft/hlo/verifier.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "weft/base/error.h"
#include "weft/hlo/shape_inference.h"

namespace weft {
namespace {

std::string Where(const HloInstruction& instr) {
  const SourceLocation& loc = instr.location();
  std::string where = loc.known() ? fmt::format("{}:{}: ", loc.line, loc.col)
                                  : fmt::format("computation '{}': ", instr.parent()->name());
  return fmt::format("{}'{}' ({})", where, instr.name(), HloOpcodeString(instr.opcode()));
}

// The ids a program on `devices` devices gives its collectives, as the
// executor reads them (eval_collectives.cc DeviceGroups, DevicePairs): with
// num_partitions and replica_count both above 1, XLA's modes (a collective
// with a channel_id names partitions, one without names replicas,
// use_global_device_ids global device ids); otherwise device ids.
class DeviceIds {
 public:
  // `why`: where the device count comes from, for messages.
  DeviceIds(const HloModule& module, int64_t devices, std::string why, bool shardings)
      : partitions_(module.num_partitions()),
        replicas_(module.replica_count()),
        devices_(devices),
        why_(std::move(why)),
        shardings_(shardings),
        seen_(static_cast<size_t>(std::max({devices, partitions_, replicas_})), false) {}

  // Throws weft::Error (without the instruction's name) at the first id
  // out of range, named twice, or left out of the instruction's groups.
  void Check(const HloInstruction& instr) {
    if (shardings_ && instr.has_sharding()) CheckSharding(instr);
    const HloAttributes& a = instr.attrs();
    if (!a.replica_groups.empty()) CheckGroups(a);
    if (!a.source_target_pairs.empty()) CheckPairs(a);
  }

 private:
  struct IdRange {
    int64_t n;
    std::string noun;  // "device", "partition", "replica"
    std::string why;
  };

  bool XlaModes() const { return partitions_ > 1 && replicas_ > 1; }

  IdRange Range(const HloAttributes& a, bool groups) const {
    if (!XlaModes() || (groups && a.use_global_device_ids)) return {devices_, "device", why_};
    if (a.channel_id.has_value()) {
      return {partitions_, "partition",
              fmt::format("num_partitions={}; a collective with a channel_id names partitions",
                          partitions_)};
    }
    return {replicas_, "replica",
            fmt::format("replica_count={}; a collective without a channel_id names replicas",
                        replicas_)};
  }

  void CheckSharding(const HloInstruction& instr) {
    const HloSharding& s = *instr.sharding();
    const Shape shape = instr.ShardingShape();
    // In XLA's modes a sharding names the partitions of one replica.
    const int64_t n = XlaModes() ? partitions_ : devices_;
    try {
      if (s.IsTuple()) {
        const std::vector<Shape> leaves = shape.Leaves();
        if (s.tuple_elements().size() != leaves.size()) return;  // the verifier's to report
        for (size_t i = 0; i < leaves.size(); ++i) {
          s.tuple_elements()[i].Validate(leaves[i].dimensions(), n);
        }
      } else if (s.IsMaximal() || (s.IsTiled() && !shape.IsTuple())) {
        s.Validate(shape.dimensions(), n);
      }
    } catch (const Error& e) {
      Fail("{} ({})", e.what(), XlaModes() ? fmt::format("num_partitions={}", n) : why_);
    }
  }

  void CheckGroups(const HloAttributes& a) {
    const IdRange r = Range(a, /*groups=*/true);
    int64_t count = 0;
    std::string problem;
    for (const std::vector<int64_t>& group : a.replica_groups) {
      for (int64_t id : group) {
        if (id < 0 || id >= r.n) {
          problem = fmt::format("name {} {}, but the program has {} {}s, ids 0..{} ({})", r.noun,
                                id, r.n, r.noun, r.n - 1, r.why);
        } else if (seen_[id]) {
          problem = fmt::format("name {} {} twice; each must be in exactly one group", r.noun, id);
        } else {
          seen_[id] = true;
          ++count;
          continue;
        }
        break;
      }
      if (!problem.empty()) break;
    }
    // Only the ids this instruction named are cleared: no pass over all
    // devices per collective.
    for (const std::vector<int64_t>& group : a.replica_groups) {
      for (int64_t id : group) {
        if (id >= 0 && id < r.n) seen_[id] = false;
      }
    }
    if (problem.empty() && count != r.n) {
      std::vector<bool> named(static_cast<size_t>(r.n), false);
      for (const std::vector<int64_t>& group : a.replica_groups) {
        for (int64_t id : group) named[id] = true;
      }
      int64_t missing = 0;
      while (named[missing]) ++missing;
      problem = fmt::format(
          "leave out {} {}; the groups must cover all {} {}s ({}), or be empty for one group of "
          "all",
          r.noun, missing, r.n, r.noun, r.why);
    }
    if (!problem.empty()) Fail("replica_groups {} {}", GroupsText(a.replica_groups), problem);
  }

  void CheckPairs(const HloAttributes& a) {
    const IdRange r = Range(a, /*groups=*/false);
    for (auto [source, target] : a.source_target_pairs) {
      for (int64_t id : {source, target}) {
        WEFT_CHECK(id >= 0 && id < r.n,
                   "source_target_pairs name {} {}, but the program has {} {}s, ids 0..{} ({})",
                   r.noun, id, r.n, r.noun, r.n - 1, r.why);
      }
    }
  }

  static std::string GroupsText(const std::vector<std::vector<int64_t>>& groups) {
    std::string out = "{";
    for (size_t g = 0; g < groups.size(); ++g) {
      out += fmt::format("{}{{{}}}", g ? "," : "", fmt::join(groups[g], ","));
    }
    out += "}";
    if (out.size() > 120) out = out.substr(0, 117) + "...";
    return out;
  }

  int64_t partitions_, replicas_, devices_;
  std::string why_;
  bool shardings_;
  std::vector<bool> seen_;
};

class Verifier {
 public:
  explicit Verifier(const HloModule& module) : module_(module) {
    // A module that declares its devices names no others (weft run's rule,
    // checked for every command at parse time).
    const int64_t p = module.num_partitions(), r = module.replica_count();
    if (p * r > 1) {
      // Shardings are checked against num_partitions by VerifySharding.
      device_ids_.emplace(module, p * r,
                          fmt::format("the module's num_partitions={} x replica_count={}", p, r),
                          /*shardings=*/false);
    }
  }

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
    problems_.push_back(fmt::format("{}: {}", Where(instr), what));
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
      if (device_ids_) {
        try {
          device_ids_->Check(*instr);
        } catch (const Error& e) {
          Problem(*instr, e.what());
        }
      }
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
    const Shape shape = instr.ShardingShape();
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
  std::optional<DeviceIds> device_ids_;
  std::vector<std::string> problems_;
  std::unordered_set<std::string> names_;
};

}  // namespace

std::vector<std::string> FindHloModuleProblems(const HloModule& module) {
  return Verifier(module).Run();
}

void CheckDeviceIds(const HloModule& module, int64_t num_devices, std::string_view why) {
  WEFT_INTERNAL_CHECK(num_devices >= 1, "CheckDeviceIds on {} devices", num_devices);
  DeviceIds ids(module, num_devices, std::string(why), /*shardings=*/true);
  for (const HloComputation* c : module.computations()) {
    for (const HloInstruction* instr : c->instructions()) {
      try {
        ids.Check(*instr);
      } catch (const Error& e) {
        Fail("{}: {}", Where(*instr), e.what());
      }
    }
  }
}

void VerifyHloModule(const HloModule& module) {
  std::vector<std::string> problems = FindHloModuleProblems(module);
  if (!problems.empty()) throw Error(problems.front());
}

}  // namespace weft
