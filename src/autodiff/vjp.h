// Internal to autodiff: the interface between the reverse pass (reverse.cc)
// and the per-opcode vjp rules (vjp_*.cc).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "weft/autodiff/grad.h"
#include "weft/autodiff/scan_config.h"
#include "weft/hlo/builder.h"
#include "weft/hlo/module.h"

namespace weft::autodiff {

// State shared by every computation one BuildTrainingStep emits into.
class ModuleEmitter {
 public:
  ModuleEmitter(const HloModule& forward, HloModule& out, const GradOptions& options);

  HloModule& out() { return out_; }
  const GradOptions& options() const { return options_; }
  // The copy of a forward-module computation in the output module (made once).
  HloComputation* Clone(const HloComputation* forward);
  // The scalar add reduction of `type` in the output module (made once).
  HloComputation* AddReducer(PrimitiveType type);
  int64_t NewShardGroupId() { return next_group_id_++; }

 private:
  const HloModule& forward_;
  HloModule& out_;
  GradOptions options_;
  std::unordered_map<const HloComputation*, HloComputation*> clones_;
  std::unordered_map<int, HloComputation*> add_reducers_;
  int64_t next_group_id_ = 0;
};

// Copies `instr` into `b` with `operands` (and called computations cloned
// through `emitter`), keeping attributes, shape, name and sharding.
HloInstruction* CloneInstruction(HloComputationBuilder& b, ModuleEmitter& emitter,
                                 const HloInstruction& instr,
                                 std::vector<HloInstruction*> operands);

struct ScanPlan;  // vjp_while.cc

// What a vjp rule sees. Cotangents have the shape of the value they belong
// to; a null cotangent is zero.
class VjpContext {
 public:
  virtual ~VjpContext() = default;
  virtual HloComputationBuilder& b() = 0;
  virtual ModuleEmitter& emitter() = 0;
  // The forward value of `fwd` in the computation being built.
  virtual HloInstruction* Primal(const HloInstruction* fwd) = 0;
  // Element `index` of a tuple-valued forward instruction.
  virtual HloInstruction* PrimalElement(const HloInstruction* fwd, int64_t index) = 0;
  // Whether a cotangent for `fwd` is wanted (it depends on a differentiated
  // input and is floating point).
  virtual bool NeedsGrad(const HloInstruction* fwd) const = 0;
  // Adds `ct` to the cotangent of `fwd` (of its element `index` for tuples).
  virtual void Accumulate(const HloInstruction* fwd, HloInstruction* ct, int64_t index = 0) = 0;
  // The backward plan of a scan while (made while cloning the forward).
  virtual ScanPlan* PlanFor(const HloInstruction* fwd_while) = 0;

  // Helpers.
  HloInstruction* Zeros(const Shape& shape);
  HloInstruction* Scalar(PrimitiveType type, double value);
  // Broadcasts a scalar or a same-shape operand of `like`'s dims.
  HloInstruction* ScalarLike(const Shape& shape, double value);
  // Sum of `x` over `dims` (reduce with add).
  HloInstruction* Sum(HloInstruction* x, std::vector<int64_t> dims);
  // `x` converted to `type` when it differs.
  HloInstruction* ConvertTo(HloInstruction* x, PrimitiveType type);
};

// ct: one cotangent per result element (one for arrays), null = zero, and at
// least one non-null.
using VjpRule = void (*)(VjpContext& ctx, const HloInstruction& fwd,
                         std::span<HloInstruction* const> ct);

class VjpTable {
 public:
  void Register(HloOpcode opcode, VjpRule rule);
  // nullptr when the opcode has no rule.
  VjpRule Find(HloOpcode opcode) const;

 private:
  std::unordered_map<int, VjpRule> rules_;
};

// Each file registers the rules of the ops it covers.
void RegisterElementwiseVjps(VjpTable& table);
void RegisterShapeOpVjps(VjpTable& table);
void RegisterDotVjps(VjpTable& table);
void RegisterConvolutionVjps(VjpTable& table);  // vjp_convolution.cc
void RegisterReduceVjps(VjpTable& table);
void RegisterGatherVjps(VjpTable& table);
void RegisterAttentionVjps(VjpTable& table);
void RegisterWhileVjps(VjpTable& table);
// Every rule (built once).
const VjpTable& Vjps();

// A reverse pass over one forward computation, emitting into `b`. Cotangents
// start at `seeds`, flow back through every instruction that depends on one
// of `sources` (where the pass stops), and are read with Cotangent().
class ReversePass : public VjpContext {
 public:
  using PrimalFn = std::function<HloInstruction*(const HloInstruction*)>;
  using PrimalElementFn = std::function<HloInstruction*(const HloInstruction*, int64_t)>;
  using PlanFn = std::function<ScanPlan*(const HloInstruction*)>;

  ReversePass(HloComputationBuilder& b, ModuleEmitter& emitter, PrimalFn primal,
              PrimalElementFn primal_element, PlanFn plan);

  void Run(
      const HloComputation& forward, const std::vector<const HloInstruction*>& sources,
      const std::vector<std::pair<const HloInstruction*, std::vector<HloInstruction*>>>& seeds);
  // The accumulated cotangent (null = zero).
  HloInstruction* Cotangent(const HloInstruction* fwd, int64_t index = 0) const;

  HloComputationBuilder& b() override { return b_; }
  ModuleEmitter& emitter() override { return emitter_; }
  HloInstruction* Primal(const HloInstruction* fwd) override { return primal_(fwd); }
  HloInstruction* PrimalElement(const HloInstruction* fwd, int64_t index) override {
    return primal_element_(fwd, index);
  }
  bool NeedsGrad(const HloInstruction* fwd) const override { return needs_.count(fwd) > 0; }
  void Accumulate(const HloInstruction* fwd, HloInstruction* ct, int64_t index = 0) override;
  ScanPlan* PlanFor(const HloInstruction* fwd_while) override { return plan_(fwd_while); }

 private:
  HloComputationBuilder& b_;
  ModuleEmitter& emitter_;
  PrimalFn primal_;
  PrimalElementFn primal_element_;
  PlanFn plan_;
  std::unordered_set<const HloInstruction*> needs_;
  std::unordered_map<const HloInstruction*, std::vector<HloInstruction*>> ct_;
};

// Whether no gradient flows from `instr` to its operands: a compare (its
// result is pred) or a value marked with StopGradient (autodiff/stop_gradient.h).
bool PassesNoGradient(const HloInstruction& instr);

// How many values an instruction gives: 1 for an array, the tuple size for
// a tuple (not the number of array elements: Shape::ElementsCount).
int64_t ValueArity(const Shape& shape);
const Shape& ElementShape(const Shape& shape, int64_t index);

}  // namespace weft::autodiff
