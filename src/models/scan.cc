#include "weft/models/scan.h"

#include "weft/autodiff/scan_config.h"
#include "weft/base/error.h"

namespace weft {
namespace {

std::vector<int64_t> Prepend(int64_t n, const std::vector<int64_t>& dims) {
  std::vector<int64_t> out = {n};
  out.insert(out.end(), dims.begin(), dims.end());
  return out;
}

std::vector<HloInstruction*> StepIndices(HloComputationBuilder& b, HloInstruction* i,
                                         int64_t rank) {
  std::vector<HloInstruction*> idx = {i};
  HloInstruction* zero = b.ConstantScalar(PrimitiveType::kS32, 0);
  for (int64_t d = 1; d < rank; ++d) idx.push_back(zero);
  return idx;
}

}  // namespace

ScanOutputs Scan(HloModule& module, HloComputationBuilder& b, const std::string& name,
                 const ScanBody& body, std::vector<HloInstruction*> carry_init,
                 std::vector<HloInstruction*> xs, std::vector<HloInstruction*> consts,
                 int64_t length) {
  for (HloInstruction* x : xs) {
    WEFT_INTERNAL_CHECK(x->shape().IsArray() && x->shape().rank() >= 1,
                        "Scan '{}': stacked input {} is {}; it needs a leading step dim", name,
                        x->Describe(), x->shape().ToString());
    const int64_t n = x->shape().dimensions(0);
    WEFT_INTERNAL_CHECK(
        length == 0 || length == n,
        "Scan '{}': stacked input {} has {} steps but the scan has {}; stack every input "
        "over the same steps",
        name, x->Describe(), n, length);
    length = n;
  }
  WEFT_INTERNAL_CHECK(length >= 1, "Scan '{}': give a length (no stacked inputs) of at least 1",
                      name);
  for (HloInstruction* c : carry_init) {
    WEFT_INTERNAL_CHECK(
        c->shape().IsArray() && IsFloatingPoint(c->shape().element_type()),
        "Scan '{}': carry {} is {}; carries must be floating-point arrays (pass integer "
        "values as consts)",
        name, c->Describe(), c->shape().ToString());
  }
  ScanConfig config;
  config.length = length;
  config.num_carry = static_cast<int64_t>(carry_init.size());
  config.num_xs = static_cast<int64_t>(xs.size());
  config.num_consts = static_cast<int64_t>(consts.size());

  std::vector<Shape> state = {Shape::Scalar(PrimitiveType::kS32)};
  for (auto* v : carry_init) state.push_back(v->shape());
  for (auto* v : xs) state.push_back(v->shape());
  for (auto* v : consts) state.push_back(v->shape());

  // Body. The ys shapes are known only after the step is built, so the
  // state parameter's shape is completed then (earlier reads index below it).
  HloComputationBuilder bb(name + "_body");
  HloInstruction* param = bb.Parameter(0, Shape::Tuple(state), "state");
  ScanStep step;
  step.index = bb.GetTupleElement(param, 0);
  for (int64_t j = 0; j < config.num_carry; ++j) {
    step.carry.push_back(bb.GetTupleElement(param, config.carry_index(j)));
  }
  std::vector<HloInstruction*> xs_stacked;
  for (int64_t j = 0; j < config.num_xs; ++j) {
    HloInstruction* stacked = bb.GetTupleElement(param, config.xs_index(j));
    xs_stacked.push_back(stacked);
    const Shape& s = stacked->shape();
    std::vector<int64_t> sizes = s.dimensions();
    sizes[0] = 1;
    HloInstruction* slice = bb.DynamicSlice(stacked, StepIndices(bb, step.index, s.rank()), sizes);
    step.xs.push_back(bb.Reshape(slice, {s.dimensions().begin() + 1, s.dimensions().end()}));
  }
  std::vector<HloInstruction*> consts_in;
  for (int64_t j = 0; j < config.num_consts; ++j) {
    consts_in.push_back(bb.GetTupleElement(param, config.consts_index(j)));
  }
  step.consts = consts_in;
  ScanStepResult result = body(bb, step);
  WEFT_INTERNAL_CHECK(result.carry.size() == carry_init.size(),
                      "Scan '{}': the step returned {} carries for {} initial ones", name,
                      result.carry.size(), carry_init.size());
  for (size_t j = 0; j < carry_init.size(); ++j) {
    WEFT_INTERNAL_CHECK(result.carry[j]->shape() == carry_init[j]->shape(),
                        "Scan '{}': carry {} enters as {} but the step returns {}", name, j,
                        carry_init[j]->shape().ToString(), result.carry[j]->shape().ToString());
  }
  config.num_ys = static_cast<int64_t>(result.ys.size());
  for (HloInstruction* y : result.ys)
    state.push_back(y->shape().WithDimensions(Prepend(length, y->shape().dimensions())));
  param->set_shape(Shape::Tuple(state));
  std::vector<HloInstruction*> out = {
      bb.Add(step.index, bb.ConstantScalar(PrimitiveType::kS32, 1))};
  out.insert(out.end(), result.carry.begin(), result.carry.end());
  out.insert(out.end(), xs_stacked.begin(), xs_stacked.end());
  out.insert(out.end(), consts_in.begin(), consts_in.end());
  for (int64_t j = 0; j < config.num_ys; ++j) {
    HloInstruction* stacked = bb.GetTupleElement(param, config.ys_index(j));
    HloInstruction* y = result.ys[j];
    HloInstruction* y1 = bb.Reshape(y, Prepend(1, y->shape().dimensions()));
    out.push_back(
        bb.DynamicUpdateSlice(stacked, y1, StepIndices(bb, step.index, stacked->shape().rank())));
  }
  HloComputation* body_c = module.AddComputation(bb.Build(bb.Tuple(out)));

  HloComputationBuilder cb(name + "_cond");
  HloInstruction* cp = cb.Parameter(0, Shape::Tuple(state), "state");
  cb.Compare(cb.GetTupleElement(cp, 0), cb.ConstantScalar(PrimitiveType::kS32, length),
             ComparisonDirection::kLt);
  HloComputation* cond_c = module.AddComputation(cb.Build());

  std::vector<HloInstruction*> init = {b.ConstantScalar(PrimitiveType::kS32, 0)};
  init.insert(init.end(), carry_init.begin(), carry_init.end());
  init.insert(init.end(), xs.begin(), xs.end());
  init.insert(init.end(), consts.begin(), consts.end());
  for (HloInstruction* y : result.ys) {
    HloInstruction* zero = b.ConstantScalar(y->shape().element_type(), 0);
    init.push_back(b.Broadcast(zero, Prepend(length, y->shape().dimensions()), {}));
  }
  ScanOutputs outputs;
  outputs.loop = b.While(b.Tuple(init), cond_c, body_c);
  outputs.loop->mutable_attrs().backend_config = config.ToJson();
  for (int64_t j = 0; j < config.num_carry; ++j) {
    outputs.carry.push_back(b.GetTupleElement(outputs.loop, config.carry_index(j)));
  }
  for (int64_t j = 0; j < config.num_ys; ++j) {
    outputs.ys.push_back(b.GetTupleElement(outputs.loop, config.ys_index(j)));
  }
  return outputs;
}

}  // namespace weft
