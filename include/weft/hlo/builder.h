// HloComputationBuilder: builds computations in C++ without text. Each call
// adds one instruction, infers its shape (shape_inference.h) and returns it;
// a bad combination throws weft::Error naming the op. Build() hands the
// computation over; add it to an HloModule (callees before their callers).
//
//   HloModule module("m");
//   HloComputationBuilder add_b("add");
//   auto* x = add_b.Parameter(0, Shape::Scalar(PrimitiveType::kF32), "x");
//   auto* y = add_b.Parameter(1, Shape::Scalar(PrimitiveType::kF32), "y");
//   add_b.Add(x, y);
//   HloComputation* add = module.AddComputation(add_b.Build());
//
//   HloComputationBuilder b("main");
//   auto* p = b.Parameter(0, Shape(PrimitiveType::kF32, {8, 16}), "p");
//   auto* zero = b.ConstantScalar(PrimitiveType::kF32, 0);
//   b.Reduce(p, zero, {1}, add);
//   module.AddEntryComputation(b.Build());
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "weft/hlo/computation.h"

namespace weft {

class HloComputationBuilder {
 public:
  explicit HloComputationBuilder(std::string name);

  // Generic: adds `opcode` with the given operands and attributes. `shape` is
  // needed only where operands do not determine it (see InferHloShape);
  // otherwise pass Shape() and it is inferred. `name` defaults to the opcode,
  // after the name prefix when one is set ("dot.1.all-gather");
  // HloModule::AddComputation makes names unique ("add", "add.1", ...).
  HloInstruction* AddInstruction(HloOpcode opcode, std::vector<HloInstruction*> operands,
                                 HloAttributes attrs = {}, Shape shape = Shape(),
                                 std::vector<HloComputation*> called = {}, std::string name = "");

  HloInstruction* Parameter(int64_t number, Shape shape, std::string name = "");
  HloInstruction* Constant(Literal literal);
  HloInstruction* ConstantScalar(PrimitiveType type, double value);
  HloInstruction* Iota(Shape shape, int64_t iota_dimension);

  // Elementwise. Unary() / Binary() take any elementwise opcode.
  HloInstruction* Unary(HloOpcode opcode, HloInstruction* x);
  HloInstruction* Binary(HloOpcode opcode, HloInstruction* lhs, HloInstruction* rhs);
  HloInstruction* Add(HloInstruction* lhs, HloInstruction* rhs);
  HloInstruction* Subtract(HloInstruction* lhs, HloInstruction* rhs);
  HloInstruction* Multiply(HloInstruction* lhs, HloInstruction* rhs);
  HloInstruction* Divide(HloInstruction* lhs, HloInstruction* rhs);
  HloInstruction* Maximum(HloInstruction* lhs, HloInstruction* rhs);
  HloInstruction* Compare(HloInstruction* lhs, HloInstruction* rhs, ComparisonDirection direction);
  HloInstruction* Select(HloInstruction* pred, HloInstruction* on_true, HloInstruction* on_false);
  HloInstruction* Convert(HloInstruction* x, PrimitiveType type);
  HloInstruction* Copy(HloInstruction* x);

  // Shape changes.
  HloInstruction* Broadcast(HloInstruction* x, std::vector<int64_t> result_dims,
                            std::vector<int64_t> dimensions);
  HloInstruction* Reshape(HloInstruction* x, std::vector<int64_t> result_dims);
  HloInstruction* Transpose(HloInstruction* x, std::vector<int64_t> permutation);
  HloInstruction* Reverse(HloInstruction* x, std::vector<int64_t> dimensions);
  HloInstruction* Slice(HloInstruction* x, std::vector<int64_t> starts, std::vector<int64_t> limits,
                        std::vector<int64_t> strides = {});
  HloInstruction* DynamicSlice(HloInstruction* x, std::vector<HloInstruction*> start_indices,
                               std::vector<int64_t> sizes);
  HloInstruction* DynamicUpdateSlice(HloInstruction* x, HloInstruction* update,
                                     std::vector<HloInstruction*> start_indices);
  HloInstruction* Concatenate(std::vector<HloInstruction*> operands, int64_t dimension);
  HloInstruction* Pad(HloInstruction* x, HloInstruction* padding_value,
                      std::vector<PadDim> padding);

  HloInstruction* Reduce(HloInstruction* x, HloInstruction* init, std::vector<int64_t> dimensions,
                         HloComputation* to_apply);
  // Result element type defaults to the operands'.
  HloInstruction* Dot(HloInstruction* lhs, HloInstruction* rhs, DotDimensionNumbers dnums,
                      std::optional<PrimitiveType> result_type = std::nullopt);
  HloInstruction* Gather(HloInstruction* operand, HloInstruction* indices,
                         GatherDimensionNumbers dnums, std::vector<int64_t> slice_sizes,
                         bool indices_are_sorted = false);
  HloInstruction* Scatter(HloInstruction* operand, HloInstruction* indices, HloInstruction* updates,
                          ScatterDimensionNumbers dnums, HloComputation* to_apply);

  HloInstruction* Tuple(std::vector<HloInstruction*> elements);
  HloInstruction* GetTupleElement(HloInstruction* tuple, int64_t index);
  HloInstruction* While(HloInstruction* init, HloComputation* condition, HloComputation* body);
  HloInstruction* Call(std::vector<HloInstruction*> args, HloComputation* to_apply);
  HloInstruction* CustomCall(std::vector<HloInstruction*> operands, Shape result,
                             std::string target, std::string backend_config = "");

  // Collectives; empty replica_groups means all devices.
  HloInstruction* AllReduce(HloInstruction* x, HloComputation* to_apply,
                            std::vector<std::vector<int64_t>> replica_groups = {},
                            std::optional<int64_t> channel_id = std::nullopt);
  HloInstruction* AllGather(HloInstruction* x, int64_t dimension,
                            std::vector<std::vector<int64_t>> replica_groups,
                            std::optional<int64_t> channel_id = std::nullopt);
  HloInstruction* ReduceScatter(HloInstruction* x, int64_t dimension,
                                std::vector<std::vector<int64_t>> replica_groups,
                                HloComputation* to_apply,
                                std::optional<int64_t> channel_id = std::nullopt);
  HloInstruction* AllToAll(HloInstruction* x, int64_t dimension,
                           std::vector<std::vector<int64_t>> replica_groups,
                           std::optional<int64_t> channel_id = std::nullopt);
  HloInstruction* CollectivePermute(HloInstruction* x,
                                    std::vector<std::pair<int64_t, int64_t>> source_target_pairs,
                                    std::optional<int64_t> channel_id = std::nullopt);
  HloInstruction* PartitionId();

  // Instructions added from now on without a name are named
  // "<prefix>.<opcode>" (plain "<opcode>" when the prefix is empty), so that
  // what a pass emits for one instruction reads as that instruction's
  // lowering.
  void set_name_prefix(std::string prefix) { name_prefix_ = std::move(prefix); }

  // The last instruction added (the default root).
  HloInstruction* last() const { return last_; }
  // Hands the computation over; `root` defaults to the last instruction.
  // The builder cannot be used afterwards.
  std::unique_ptr<HloComputation> Build(HloInstruction* root = nullptr);

 private:
  std::unique_ptr<HloComputation> computation_;
  HloInstruction* last_ = nullptr;
  std::string name_prefix_;
};

// A scalar reduction computation `name(x, y) = op(x, y)` (add, maximum, ...),
// the usual to_apply of reduce and all-reduce.
std::unique_ptr<HloComputation> MakeScalarReduction(std::string name, HloOpcode opcode,
                                                    PrimitiveType type);

}  // namespace weft
