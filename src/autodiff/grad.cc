// BuildTrainingStep: copies the forward entry (scans replaced by loops that
// save what their backward needs), runs the reverse pass from the loss, and
// returns (loss, grads...).
#include "weft/autodiff/grad.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>

#include "scan_plan.h"
#include "weft/base/algorithm.h"
#include "weft/base/error.h"

namespace weft {

std::vector<int64_t> DifferentiatedParameters(const HloModule& forward,
                                              const GradOptions& options) {
  const HloComputation* entry = forward.entry_computation();
  WEFT_CHECK(entry != nullptr, "autodiff: module '{}' has no entry computation", forward.name());
  if (!options.wrt.empty()) {
    for (int64_t p : options.wrt) {
      WEFT_CHECK(p >= 0 && p < entry->num_parameters() && entry->parameter_instruction(p),
                 "autodiff: GradOptions::wrt names parameter {}, but '{}' has {} parameters", p,
                 entry->name(), entry->num_parameters());
      const Shape& s = entry->parameter_instruction(p)->shape();
      WEFT_CHECK(s.IsArray() && IsFloatingPoint(s.element_type()),
                 "autodiff: parameter {} ('{}') is {}; only floating-point arrays can be "
                 "differentiated, so drop it from GradOptions::wrt",
                 p, entry->parameter_instruction(p)->name(), s.ToString());
    }
    return options.wrt;
  }
  std::vector<int64_t> wrt;
  for (int64_t p = 0; p < entry->num_parameters(); ++p) {
    const Shape& s = entry->parameter_instruction(p)->shape();
    if (s.IsArray() && IsFloatingPoint(s.element_type())) wrt.push_back(p);
  }
  return wrt;
}

namespace {

// Selective remat names values of scan bodies: each must name one.
void CheckRematNames(const HloModule& forward, const GradOptions& options) {
  std::vector<std::string> named = options.remat.save;
  named.insert(named.end(), options.remat.offload.begin(), options.remat.offload.end());
  if (!named.empty()) {
    WEFT_CHECK(options.remat.kind == Remat::kFull,
               "autodiff: remat.save / remat.offload ({}) need Remat::kFull (kNone saves "
               "everything)",
               fmt::format("{}", fmt::join(named, ", ")));
    std::vector<std::string> known;
    for (const HloComputation* c : forward.computations()) {
      for (const HloInstruction* i : c->instructions()) {
        if (i->opcode() != HloOpcode::kWhile || !ScanConfigOf(*i)) continue;
        for (const HloInstruction* x : i->while_body()->instructions()) {
          known.push_back(x->name());
        }
      }
    }
    for (const std::string& name : named) {
      WEFT_CHECK(Contains(known, name),
                 "autodiff: remat saves '{}', which no scan body of {} has; name an instruction "
                 "of the scanned layer",
                 name, forward.name());
    }
  }
}

// The instructions of `order` that depend on one of `sources` (through
// anything but a value that passes no gradient).
std::unordered_set<const HloInstruction*> DependingOn(
    const std::vector<const HloInstruction*>& sources, const std::vector<HloInstruction*>& order) {
  std::unordered_set<const HloInstruction*> depends(sources.begin(), sources.end());
  for (const HloInstruction* instr : order) {
    if (autodiff::PassesNoGradient(*instr)) continue;
    for (const HloInstruction* op : instr->operands()) {
      if (depends.count(op)) {
        depends.insert(instr);
        break;
      }
    }
  }
  return depends;
}

// The forward loop of scan `instr` (whose operands are `ops` in the step),
// planned for its backward: its state grows the residual stacks the
// backward reads, zero-initialized.
HloInstruction* EmitForwardScan(HloComputationBuilder& b, autodiff::ModuleEmitter& emitter,
                                const HloInstruction* instr,
                                const std::vector<HloInstruction*>& ops,
                                const std::unordered_set<const HloInstruction*>& depends,
                                std::unique_ptr<autodiff::ScanPlan>& plan_out) {
  using namespace autodiff;
  const std::optional<ScanConfig> config = ScanConfigOf(*instr);
  WEFT_CHECK(config.has_value(),
             "autodiff: {} is a while loop that is not a scan; only loops built by Scan "
             "(models/scan.h) are differentiable",
             instr->Describe());
  std::vector<bool> xs_needs(config->num_xs);
  for (int64_t j = 0; j < config->num_xs; ++j) {
    const HloInstruction* xs = instr->operand(0)->operand(config->xs_index(j));
    xs_needs[j] = depends.count(xs) && IsFloatingPoint(xs->shape().element_type());
  }
  std::unique_ptr<ScanPlan> plan = PlanScan(emitter, *instr, xs_needs);
  // The loop state gains the zero-initialized residual stacks.
  std::vector<HloInstruction*> state = ops[0]->operands();
  for (const Shape& s : plan->residual_shapes) {
    std::vector<int64_t> dims = {config->length};
    dims.insert(dims.end(), s.dimensions().begin(), s.dimensions().end());
    HloInstruction* zero = b.ConstantScalar(s.element_type(), 0);
    state.push_back(b.Broadcast(zero, dims, {}));
  }
  HloInstruction* loop = b.While(b.Tuple(state), plan->forward_condition, plan->forward_body);
  // The loop's structure: the scan's, its residuals appended (and which
  // of them are kept in host memory).
  ScanConfig augmented = *config;
  augmented.num_residuals = plan->num_residuals();
  loop->mutable_attrs().backend_config =
      WithOffloadedState(augmented.ToJson(), plan->offloaded_state);
  loop->set_name(instr->name());
  plan_out = std::move(plan);
  return loop;
}

}  // namespace

std::unique_ptr<HloModule> BuildTrainingStep(const HloModule& forward, const GradOptions& options) {
  using namespace autodiff;
  const std::vector<int64_t> wrt = DifferentiatedParameters(forward, options);
  const HloComputation* entry = forward.entry_computation();
  const HloInstruction* loss = entry->root_instruction();
  WEFT_CHECK(loss->shape().IsScalar() && IsFloatingPoint(loss->shape().element_type()),
             "autodiff: the forward's root {} is {}; it must be a floating-point scalar loss",
             loss->Describe(), loss->shape().ToString());
  CheckRematNames(forward, options);

  auto out = std::make_unique<HloModule>(forward.name() + "_train_step");
  out->set_num_partitions(forward.num_partitions());
  out->set_replica_count(forward.replica_count());
  ModuleEmitter emitter(forward, *out, options);

  // Which instructions depend on a differentiated parameter (the loops among
  // them are planned; their stacked inputs among them get accumulators).
  std::vector<const HloInstruction*> sources;
  for (int64_t p : wrt) sources.push_back(entry->parameter_instruction(p));
  const std::vector<HloInstruction*> order = entry->MakeInstructionPostOrder();
  const std::unordered_set<const HloInstruction*> depends = DependingOn(sources, order);

  HloComputationBuilder b(entry->name() + "_train_step");
  std::unordered_map<const HloInstruction*, HloInstruction*> map;
  std::map<const HloInstruction*, std::unique_ptr<ScanPlan>> plans;
  for (int64_t p = 0; p < entry->num_parameters(); ++p) {
    const HloInstruction* param = entry->parameter_instruction(p);
    map[param] = CloneInstruction(b, emitter, *param, {});
  }
  for (const HloInstruction* instr : order) {
    if (map.count(instr)) continue;
    std::vector<HloInstruction*> ops;
    for (const HloInstruction* op : instr->operands()) ops.push_back(map.at(op));
    if (instr->opcode() == HloOpcode::kWhile && depends.count(instr)) {
      map[instr] = EmitForwardScan(b, emitter, instr, ops, depends, plans[instr]);
      continue;
    }
    map[instr] = CloneInstruction(b, emitter, *instr, std::move(ops));
  }
  ReversePass pass(
      b, emitter, [&](const HloInstruction* x) { return map.at(x); },
      [&](const HloInstruction* x, int64_t k) { return b.GetTupleElement(map.at(x), k); },
      [&](const HloInstruction* w) -> ScanPlan* {
        auto it = plans.find(w);
        WEFT_INTERNAL_CHECK(it != plans.end(), "autodiff: no plan for {}", w->Describe());
        return it->second.get();
      });
  HloInstruction* one = b.ConstantScalar(loss->shape().element_type(), 1.0);
  pass.Run(*entry, sources, {{loss, {one}}});

  std::vector<HloInstruction*> results = {map.at(loss)};
  for (int64_t p : wrt) {
    const HloInstruction* param = entry->parameter_instruction(p);
    HloInstruction* g = pass.Cotangent(param);
    if (!g) g = pass.Zeros(param->shape());
    // Two parameters can share one cotangent (add(a, b)): the root tuple then
    // names it twice, which the executor and the partitioner (which reshards
    // each tuple element to its own sharding) handle.
    results.push_back(g);
  }
  std::unique_ptr<HloComputation> step = b.Build(b.Tuple(results));
  step->RemoveDeadInstructions();
  out->AddEntryComputation(std::move(step));
  return out;
}

}  // namespace weft
