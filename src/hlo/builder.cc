#include "weft/hlo/builder.h"

#include <fmt/format.h>

#include "weft/base/error.h"
#include "weft/hlo/shape_inference.h"

namespace weft {

HloComputationBuilder::HloComputationBuilder(std::string name)
    : computation_(std::make_unique<HloComputation>(std::move(name))) {}

HloInstruction* HloComputationBuilder::AddInstruction(HloOpcode opcode,
                                                      std::vector<HloInstruction*> operands,
                                                      HloAttributes attrs, Shape shape,
                                                      std::vector<HloComputation*> called,
                                                      std::string name) {
  WEFT_CHECK(computation_ != nullptr, "builder already built its computation");
  // Opcode names, after the prefix; the module makes them unique ("add",
  // "add.1", ...).
  if (name.empty()) {
    name = name_prefix_.empty() ? std::string(HloOpcodeString(opcode))
                                : fmt::format("{}.{}", name_prefix_, HloOpcodeString(opcode));
  }
  auto instr = HloInstruction::Create(opcode, std::move(shape), std::move(operands),
                                      std::move(attrs), std::move(called), std::move(name));
  try {
    instr->set_shape(InferHloShape(*instr));
  } catch (const Error& e) {
    Fail("building {} in '{}': {}", HloOpcodeString(opcode), computation_->name(), e.what());
  }
  last_ = computation_->AddInstruction(std::move(instr));
  return last_;
}

HloInstruction* HloComputationBuilder::Parameter(int64_t number, Shape shape, std::string name) {
  HloAttributes a;
  a.parameter_number = number;
  if (name.empty()) name = fmt::format("p{}", number);
  return AddInstruction(HloOpcode::kParameter, {}, std::move(a), std::move(shape), {},
                        std::move(name));
}

HloInstruction* HloComputationBuilder::Constant(Literal literal) {
  HloAttributes a;
  Shape shape = literal.shape();
  a.literal = std::move(literal);
  return AddInstruction(HloOpcode::kConstant, {}, std::move(a), std::move(shape));
}

HloInstruction* HloComputationBuilder::ConstantScalar(PrimitiveType type, double value) {
  return Constant(Literal::Scalar(type, value));
}

HloInstruction* HloComputationBuilder::Iota(Shape shape, int64_t iota_dimension) {
  HloAttributes a;
  a.iota_dimension = iota_dimension;
  return AddInstruction(HloOpcode::kIota, {}, std::move(a), std::move(shape));
}

HloInstruction* HloComputationBuilder::Unary(HloOpcode opcode, HloInstruction* x) {
  WEFT_CHECK(IsElementwiseUnary(opcode), "{} is not an elementwise unary op",
             HloOpcodeString(opcode));
  return AddInstruction(opcode, {x});
}

HloInstruction* HloComputationBuilder::Binary(HloOpcode opcode, HloInstruction* lhs,
                                              HloInstruction* rhs) {
  WEFT_CHECK(IsElementwiseBinary(opcode) && opcode != HloOpcode::kCompare,
             "{} is not an elementwise binary op (use Compare for compare)",
             HloOpcodeString(opcode));
  return AddInstruction(opcode, {lhs, rhs});
}

HloInstruction* HloComputationBuilder::Add(HloInstruction* lhs, HloInstruction* rhs) {
  return Binary(HloOpcode::kAdd, lhs, rhs);
}
HloInstruction* HloComputationBuilder::Subtract(HloInstruction* lhs, HloInstruction* rhs) {
  return Binary(HloOpcode::kSubtract, lhs, rhs);
}
HloInstruction* HloComputationBuilder::Multiply(HloInstruction* lhs, HloInstruction* rhs) {
  return Binary(HloOpcode::kMultiply, lhs, rhs);
}
HloInstruction* HloComputationBuilder::Divide(HloInstruction* lhs, HloInstruction* rhs) {
  return Binary(HloOpcode::kDivide, lhs, rhs);
}
HloInstruction* HloComputationBuilder::Maximum(HloInstruction* lhs, HloInstruction* rhs) {
  return Binary(HloOpcode::kMaximum, lhs, rhs);
}

HloInstruction* HloComputationBuilder::Compare(HloInstruction* lhs, HloInstruction* rhs,
                                               ComparisonDirection direction) {
  HloAttributes a;
  a.comparison_direction = direction;
  return AddInstruction(HloOpcode::kCompare, {lhs, rhs}, std::move(a));
}

HloInstruction* HloComputationBuilder::Select(HloInstruction* pred, HloInstruction* on_true,
                                              HloInstruction* on_false) {
  return AddInstruction(HloOpcode::kSelect, {pred, on_true, on_false});
}

HloInstruction* HloComputationBuilder::Convert(HloInstruction* x, PrimitiveType type) {
  WEFT_CHECK(x->shape().IsArray(), "convert needs an array, got {}", x->shape().ToString());
  return AddInstruction(HloOpcode::kConvert, {x}, {}, x->shape().WithElementType(type));
}

HloInstruction* HloComputationBuilder::Copy(HloInstruction* x) {
  return AddInstruction(HloOpcode::kCopy, {x});
}

HloInstruction* HloComputationBuilder::Broadcast(HloInstruction* x,
                                                 std::vector<int64_t> result_dims,
                                                 std::vector<int64_t> dimensions) {
  WEFT_CHECK(x->shape().IsArray(), "broadcast needs an array, got {}", x->shape().ToString());
  HloAttributes a;
  a.dimensions = std::move(dimensions);
  return AddInstruction(HloOpcode::kBroadcast, {x}, std::move(a),
                        x->shape().WithDimensions(std::move(result_dims)));
}

HloInstruction* HloComputationBuilder::Reshape(HloInstruction* x,
                                               std::vector<int64_t> result_dims) {
  WEFT_CHECK(x->shape().IsArray(), "reshape needs an array, got {}", x->shape().ToString());
  return AddInstruction(HloOpcode::kReshape, {x}, {},
                        x->shape().WithDimensions(std::move(result_dims)));
}

HloInstruction* HloComputationBuilder::Transpose(HloInstruction* x,
                                                 std::vector<int64_t> permutation) {
  HloAttributes a;
  a.dimensions = std::move(permutation);
  return AddInstruction(HloOpcode::kTranspose, {x}, std::move(a));
}

HloInstruction* HloComputationBuilder::Reverse(HloInstruction* x, std::vector<int64_t> dimensions) {
  HloAttributes a;
  a.dimensions = std::move(dimensions);
  return AddInstruction(HloOpcode::kReverse, {x}, std::move(a));
}

HloInstruction* HloComputationBuilder::Slice(HloInstruction* x, std::vector<int64_t> starts,
                                             std::vector<int64_t> limits,
                                             std::vector<int64_t> strides) {
  if (strides.empty()) strides.assign(starts.size(), 1);
  WEFT_CHECK(starts.size() == limits.size() && starts.size() == strides.size(),
             "slice needs as many starts ({}), limits ({}) and strides ({})", starts.size(),
             limits.size(), strides.size());
  HloAttributes a;
  for (size_t i = 0; i < starts.size(); ++i) a.slice.push_back({starts[i], limits[i], strides[i]});
  return AddInstruction(HloOpcode::kSlice, {x}, std::move(a));
}

HloInstruction* HloComputationBuilder::DynamicSlice(HloInstruction* x,
                                                    std::vector<HloInstruction*> start_indices,
                                                    std::vector<int64_t> sizes) {
  HloAttributes a;
  a.dynamic_slice_sizes = std::move(sizes);
  std::vector<HloInstruction*> operands = {x};
  operands.insert(operands.end(), start_indices.begin(), start_indices.end());
  return AddInstruction(HloOpcode::kDynamicSlice, std::move(operands), std::move(a));
}

HloInstruction* HloComputationBuilder::DynamicUpdateSlice(
    HloInstruction* x, HloInstruction* update, std::vector<HloInstruction*> start_indices) {
  std::vector<HloInstruction*> operands = {x, update};
  operands.insert(operands.end(), start_indices.begin(), start_indices.end());
  return AddInstruction(HloOpcode::kDynamicUpdateSlice, std::move(operands));
}

HloInstruction* HloComputationBuilder::Concatenate(std::vector<HloInstruction*> operands,
                                                   int64_t dimension) {
  HloAttributes a;
  a.dimensions = {dimension};
  return AddInstruction(HloOpcode::kConcatenate, std::move(operands), std::move(a));
}

HloInstruction* HloComputationBuilder::Pad(HloInstruction* x, HloInstruction* padding_value,
                                           std::vector<PadDim> padding) {
  HloAttributes a;
  a.padding = std::move(padding);
  return AddInstruction(HloOpcode::kPad, {x, padding_value}, std::move(a));
}

HloInstruction* HloComputationBuilder::Reduce(HloInstruction* x, HloInstruction* init,
                                              std::vector<int64_t> dimensions,
                                              HloComputation* to_apply) {
  HloAttributes a;
  a.dimensions = std::move(dimensions);
  return AddInstruction(HloOpcode::kReduce, {x, init}, std::move(a), Shape(), {to_apply});
}

HloInstruction* HloComputationBuilder::Dot(HloInstruction* lhs, HloInstruction* rhs,
                                           DotDimensionNumbers dnums,
                                           std::optional<PrimitiveType> result_type) {
  HloAttributes a;
  a.dot = std::move(dnums);
  Shape declared;
  // Only the element type of the declared shape is used by inference.
  if (result_type) declared = Shape::Scalar(*result_type);
  return AddInstruction(HloOpcode::kDot, {lhs, rhs}, std::move(a), declared);
}

HloInstruction* HloComputationBuilder::Gather(HloInstruction* operand, HloInstruction* indices,
                                              GatherDimensionNumbers dnums,
                                              std::vector<int64_t> slice_sizes,
                                              bool indices_are_sorted) {
  HloAttributes a;
  a.gather = std::move(dnums);
  a.gather_slice_sizes = std::move(slice_sizes);
  a.indices_are_sorted = indices_are_sorted;
  return AddInstruction(HloOpcode::kGather, {operand, indices}, std::move(a));
}

HloInstruction* HloComputationBuilder::Scatter(HloInstruction* operand, HloInstruction* indices,
                                               HloInstruction* updates,
                                               ScatterDimensionNumbers dnums,
                                               HloComputation* to_apply) {
  HloAttributes a;
  a.scatter = std::move(dnums);
  return AddInstruction(HloOpcode::kScatter, {operand, indices, updates}, std::move(a), Shape(),
                        {to_apply});
}

HloInstruction* HloComputationBuilder::Tuple(std::vector<HloInstruction*> elements) {
  return AddInstruction(HloOpcode::kTuple, std::move(elements));
}

HloInstruction* HloComputationBuilder::GetTupleElement(HloInstruction* tuple, int64_t index) {
  HloAttributes a;
  a.tuple_index = index;
  return AddInstruction(HloOpcode::kGetTupleElement, {tuple}, std::move(a));
}

HloInstruction* HloComputationBuilder::While(HloInstruction* init, HloComputation* condition,
                                             HloComputation* body) {
  return AddInstruction(HloOpcode::kWhile, {init}, {}, Shape(), {condition, body});
}

HloInstruction* HloComputationBuilder::Call(std::vector<HloInstruction*> args,
                                            HloComputation* to_apply) {
  return AddInstruction(HloOpcode::kCall, std::move(args), {}, Shape(), {to_apply});
}

HloInstruction* HloComputationBuilder::CustomCall(std::vector<HloInstruction*> operands,
                                                  Shape result, std::string target,
                                                  std::string backend_config) {
  HloAttributes a;
  a.custom_call_target = std::move(target);
  a.backend_config = std::move(backend_config);
  return AddInstruction(HloOpcode::kCustomCall, std::move(operands), std::move(a),
                        std::move(result));
}

namespace {
HloAttributes CollectiveAttrs(std::vector<std::vector<int64_t>> groups,
                              std::optional<int64_t> channel_id,
                              std::vector<int64_t> dimensions = {}) {
  HloAttributes a;
  a.replica_groups = std::move(groups);
  a.channel_id = channel_id;
  a.dimensions = std::move(dimensions);
  return a;
}
}  // namespace

HloInstruction* HloComputationBuilder::AllReduce(HloInstruction* x, HloComputation* to_apply,
                                                 std::vector<std::vector<int64_t>> replica_groups,
                                                 std::optional<int64_t> channel_id) {
  return AddInstruction(HloOpcode::kAllReduce, {x},
                        CollectiveAttrs(std::move(replica_groups), channel_id), Shape(),
                        {to_apply});
}

HloInstruction* HloComputationBuilder::AllGather(HloInstruction* x, int64_t dimension,
                                                 std::vector<std::vector<int64_t>> replica_groups,
                                                 std::optional<int64_t> channel_id) {
  WEFT_CHECK(!replica_groups.empty(), "AllGather needs replica_groups to know the group size");
  return AddInstruction(HloOpcode::kAllGather, {x},
                        CollectiveAttrs(std::move(replica_groups), channel_id, {dimension}));
}

HloInstruction* HloComputationBuilder::ReduceScatter(
    HloInstruction* x, int64_t dimension, std::vector<std::vector<int64_t>> replica_groups,
    HloComputation* to_apply, std::optional<int64_t> channel_id) {
  WEFT_CHECK(!replica_groups.empty(), "ReduceScatter needs replica_groups to know the group size");
  return AddInstruction(HloOpcode::kReduceScatter, {x},
                        CollectiveAttrs(std::move(replica_groups), channel_id, {dimension}),
                        Shape(), {to_apply});
}

HloInstruction* HloComputationBuilder::AllToAll(HloInstruction* x, int64_t dimension,
                                                std::vector<std::vector<int64_t>> replica_groups,
                                                std::optional<int64_t> channel_id) {
  return AddInstruction(HloOpcode::kAllToAll, {x},
                        CollectiveAttrs(std::move(replica_groups), channel_id, {dimension}));
}

HloInstruction* HloComputationBuilder::CollectivePermute(
    HloInstruction* x, std::vector<std::pair<int64_t, int64_t>> source_target_pairs,
    std::optional<int64_t> channel_id) {
  HloAttributes a;
  a.source_target_pairs = std::move(source_target_pairs);
  a.channel_id = channel_id;
  return AddInstruction(HloOpcode::kCollectivePermute, {x}, std::move(a));
}

HloInstruction* HloComputationBuilder::PartitionId() {
  return AddInstruction(HloOpcode::kPartitionId, {});
}

std::unique_ptr<HloComputation> HloComputationBuilder::Build(HloInstruction* root) {
  WEFT_CHECK(computation_ != nullptr, "builder already built its computation");
  WEFT_CHECK(computation_->instruction_count() > 0, "computation '{}' has no instructions",
             computation_->name());
  computation_->set_root_instruction(root != nullptr ? root : last_);
  return std::move(computation_);
}

std::unique_ptr<HloComputation> MakeScalarReduction(std::string name, HloOpcode opcode,
                                                    PrimitiveType type) {
  HloComputationBuilder b(std::move(name));
  HloInstruction* x = b.Parameter(0, Shape::Scalar(type), "x");
  HloInstruction* y = b.Parameter(1, Shape::Scalar(type), "y");
  b.Binary(opcode, x, y);
  return b.Build();
}

}  // namespace weft
