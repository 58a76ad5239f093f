// HloInstruction: one node of an HLO computation (opcode, result shape,
// operands, op-specific attributes, optional sharding).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "weft/hlo/literal.h"
#include "weft/hlo/opcode.h"
#include "weft/hlo/shape.h"
#include "weft/sharding/hlo_sharding.h"

namespace weft {

class HloComputation;
class HloInstruction;

enum class ComparisonDirection { kEq, kNe, kLt, kLe, kGt, kGe };
std::string_view ComparisonDirectionString(ComparisonDirection direction);  // "LT"
std::optional<ComparisonDirection> StringToComparisonDirection(std::string_view name);
// `a direction b` for one pair of ordered values (a loop bound, a comparator).
template <typename T>
bool Holds(ComparisonDirection direction, T a, T b) {
  switch (direction) {
    case ComparisonDirection::kEq:
      return a == b;
    case ComparisonDirection::kNe:
      return a != b;
    case ComparisonDirection::kLt:
      return a < b;
    case ComparisonDirection::kLe:
      return a <= b;
    case ComparisonDirection::kGt:
      return a > b;
    case ComparisonDirection::kGe:
      return a >= b;
  }
  return false;
}

// rng-bit-generator's algorithm= (XLA's rng_default, rng_three_fry,
// rng_philox) and rng's distribution= (rng_uniform, rng_normal).
enum class RngAlgorithm { kDefault, kThreeFry, kPhilox };
std::string_view RngAlgorithmString(RngAlgorithm algorithm);  // "rng_philox"
std::optional<RngAlgorithm> StringToRngAlgorithm(std::string_view name);
enum class RngDistribution { kUniform, kNormal };
// triangular-solve's transpose_a= (XLA's NO_TRANSPOSE, TRANSPOSE, ADJOINT;
// the adjoint of a real matrix is its transpose).
enum class TriangularTranspose { kNoTranspose, kTranspose, kAdjoint };
std::string_view TriangularTransposeString(TriangularTranspose t);  // "NO_TRANSPOSE"
std::optional<TriangularTranspose> StringToTriangularTranspose(std::string_view name);
// rng's numbers are weft's own (XLA leaves them to the implementation): a
// stream keyed by the name in its backend_config "rng_stream=NAME", or by
// the instruction's own name without one. The partitioner writes the
// unsharded instruction's name there, so devices draw its numbers.
std::string RngStreamConfig(const HloInstruction& rng);
std::string_view RngStreamName(const HloInstruction& rng);
// A partitioned rng or rng-bit-generator that makes one tile of the
// unsharded instruction's value: its backend_config says
// "rng_tile_of=D0,D1,..." (that value's dims; a rng's "rng_stream=NAME;"
// before it), and after its own operands (rng: 2, rng-bit-generator: 1) it
// takes one integer scalar per dim, the tile's start. The executor draws
// each element as the unsharded instruction draws the same position (and
// nothing into a padded tile's padding), so a sharded run makes the
// unsharded numbers. nullopt for an instruction that makes its whole value;
// a malformed list is an error naming the instruction.
std::optional<std::vector<int64_t>> RngTileOf(const HloInstruction& rng);
// The backend_config of such a tile (`stream` empty for rng-bit-generator).
std::string RngTileConfig(std::string_view stream, const std::vector<int64_t>& tile_of);
// rng's 2 operands, rng-bit-generator's 1: the operands before a tile's starts.
int64_t RngOwnOperandCount(const HloInstruction& rng);
// The value a rng or rng-bit-generator draws: a rng's shape; the bits of a
// rng-bit-generator, element 1 of its (state, bits), or its whole shape
// when it returns the bits alone (XLA's verifier allows both).
const Shape& RngDrawnShape(const HloInstruction& rng);
std::string_view RngDistributionString(RngDistribution distribution);  // "rng_uniform"
std::optional<RngDistribution> StringToRngDistribution(std::string_view name);

// fusion's kind= (XLA's names: "kLoop", "kInput", "kOutput", "kCustom").
// weft's passes make kLoop fusions (weft/compiler/fusion.h); all four parse.
enum class FusionKind { kLoop, kInput, kOutput, kCustom };
std::string_view FusionKindString(FusionKind kind);  // "kLoop"
std::optional<FusionKind> StringToFusionKind(std::string_view name);
// The element types a fused computation may hold (the fusion pass's rule and
// the executor's, one list): f32, bf16, f16, s32, s64, u32, pred.
bool IsFusibleElementType(PrimitiveType type);

struct DotDimensionNumbers {
  std::vector<int64_t> lhs_batch_dims, lhs_contracting_dims;
  std::vector<int64_t> rhs_batch_dims, rhs_contracting_dims;
  bool operator==(const DotDimensionNumbers&) const = default;
};

struct GatherDimensionNumbers {
  std::vector<int64_t> offset_dims, collapsed_slice_dims, start_index_map;
  std::vector<int64_t> operand_batching_dims, start_indices_batching_dims;
  int64_t index_vector_dim = 0;
  bool operator==(const GatherDimensionNumbers&) const = default;
};

struct ScatterDimensionNumbers {
  std::vector<int64_t> update_window_dims, inserted_window_dims, scatter_dims_to_operand_dims;
  std::vector<int64_t> input_batching_dims, scatter_indices_batching_dims;
  int64_t index_vector_dim = 0;
  bool operator==(const ScatterDimensionNumbers&) const = default;
};

struct SliceDim {
  int64_t start = 0, limit = 0, stride = 1;
  bool operator==(const SliceDim&) const = default;
};

struct PadDim {
  int64_t low = 0, high = 0, interior = 0;
  bool operator==(const PadDim&) const = default;
};

// One dimension of a reduce-window / select-and-scatter / convolution window
// (XLA's window={size=2x2 stride=2x1 pad=0_1x0_0 lhs_dilate=1x1 rhs_dilate=1x1
// rhs_reversal=0x1}): base_dilation is lhs_dilate, window_dilation
// rhs_dilate, window_reversal rhs_reversal (convolution only: the kernel is
// read back to front along the dim). A convolution's padding may be
// negative (elements cut from the base's edge).
struct WindowDim {
  int64_t size = 1, stride = 1, padding_low = 0, padding_high = 0;
  int64_t base_dilation = 1, window_dilation = 1;
  bool window_reversal = false;
  bool operator==(const WindowDim&) const = default;
};

// convolution's dim_labels (XLA's ConvolutionDimensionNumbers), written
// lhs_rhs->out as b01f_01io->b01f: which dim of the input (lhs) is the batch
// (b), the feature (f) and spatial dim i (digit i); of the kernel (rhs) the
// input feature (i), output feature (o) and spatial dims; of the result the
// batch, feature and spatial dims.
struct ConvolutionDimensionNumbers {
  int64_t input_batch_dimension = 0, input_feature_dimension = 1;
  std::vector<int64_t> input_spatial_dimensions;
  int64_t kernel_input_feature_dimension = 0, kernel_output_feature_dimension = 1;
  std::vector<int64_t> kernel_spatial_dimensions;
  int64_t output_batch_dimension = 0, output_feature_dimension = 1;
  std::vector<int64_t> output_spatial_dimensions;
  int64_t num_spatial_dims() const { return static_cast<int64_t>(input_spatial_dimensions.size()); }
  bool operator==(const ConvolutionDimensionNumbers&) const = default;
};
// "b01f_01io->b01f".
std::string ConvolutionDimLabelsString(const ConvolutionDimensionNumbers& dn);
// Parses dim_labels; on failure returns nullopt and says why in `error`.
std::optional<ConvolutionDimensionNumbers> ParseConvolutionDimLabels(std::string_view text,
                                                                     std::string* error);

// Where an instruction was written in HLO text (line/col from 1; 0 = built in C++).
struct SourceLocation {
  int64_t line = 0, col = 0;
  bool known() const { return line > 0; }
};

// Op-specific attributes. Which fields an opcode uses is documented per field;
// the rest stay at their defaults.
struct HloAttributes {
  int64_t parameter_number = 0;  // parameter
  Literal literal;               // constant
  int64_t iota_dimension = 0;    // iota
  int64_t tuple_index = 0;       // get-tuple-element (index=)
  // broadcast, transpose, reverse, reduce, concatenate, all-gather,
  // reduce-scatter, all-to-all, sort (dimensions=)
  std::vector<int64_t> dimensions;
  std::vector<SliceDim> slice;                                          // slice
  std::vector<int64_t> dynamic_slice_sizes;                             // dynamic-slice
  std::vector<PadDim> padding;                                          // pad
  ComparisonDirection comparison_direction = ComparisonDirection::kEq;  // compare
  std::string comparison_type;                                          // compare (type=, optional)
  DotDimensionNumbers dot;                                              // dot, ragged-dot
  // ragged-dot: the one lhs ragged dim and the rhs group dims (XLA's
  // RaggedDotDimensionNumbers; hlo/ragged_dot.h).
  std::vector<int64_t> lhs_ragged_dims, rhs_group_dims;
  GatherDimensionNumbers gather;            // gather
  std::vector<int64_t> gather_slice_sizes;  // gather (slice_sizes=)
  ScatterDimensionNumbers scatter;          // scatter
  bool indices_are_sorted = false;          // gather, scatter
  bool unique_indices = false;              // scatter
  bool is_stable = false;                   // sort
  int64_t k = 0;                            // topk
  bool largest = true;                      // topk
  std::vector<WindowDim> window;            // reduce-window, select-and-scatter, convolution
  ConvolutionDimensionNumbers convolution;  // convolution (dim_labels=)
  int64_t feature_group_count = 1;          // convolution
  int64_t batch_group_count = 1;            // convolution
  RngAlgorithm rng_algorithm = RngAlgorithm::kDefault;           // rng-bit-generator
  RngDistribution rng_distribution = RngDistribution::kUniform;  // rng
  bool lower = false;                                            // cholesky, triangular-solve
  bool left_side = false;                                        // triangular-solve
  bool unit_diagonal = false;                                    // triangular-solve
  TriangularTranspose transpose_a = TriangularTranspose::kNoTranspose;  // triangular-solve
  // Collectives: device groups ({} = all), channel, global ids.
  std::vector<std::vector<int64_t>> replica_groups;
  std::optional<int64_t> channel_id;
  bool use_global_device_ids = false;
  bool constrain_layout = false;
  std::vector<std::pair<int64_t, int64_t>> source_target_pairs;  // collective-permute
  std::string custom_call_target;                                // custom-call
  bool custom_call_has_side_effect = false;                      // custom-call
  std::string custom_call_api_version;         // custom-call (api_version=, optional)
  FusionKind fusion_kind = FusionKind::kLoop;  // fusion (kind=; calls= is the called computation)
  std::string backend_config;                  // any op (mostly custom-call)
  // Attributes kept verbatim for round trips but not interpreted
  // (metadata, frontend_attributes, operand_precision, ...): key, raw value.
  std::vector<std::pair<std::string, std::string>> passthrough;

  bool operator==(const HloAttributes&) const = default;
};

class HloInstruction {
 public:
  // Creates a detached instruction; a computation takes ownership with
  // AddInstruction. `called` are the called computations in XLA's order:
  // to_apply (reduce, scatter, call, all-reduce, reduce-scatter, sort,
  // reduce-window), calls (fusion: the fused computation), {condition, body}
  // (while), {select, scatter} (select-and-scatter), or the branches
  // (conditional: {true, false} or branch_computations in order).
  static std::unique_ptr<HloInstruction> Create(HloOpcode opcode, Shape shape,
                                                std::vector<HloInstruction*> operands,
                                                HloAttributes attrs = {},
                                                std::vector<HloComputation*> called = {},
                                                std::string name = "");
  ~HloInstruction();
  HloInstruction(const HloInstruction&) = delete;
  HloInstruction& operator=(const HloInstruction&) = delete;

  HloOpcode opcode() const { return opcode_; }
  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }
  const Shape& shape() const { return shape_; }
  void set_shape(Shape shape) { shape_ = std::move(shape); }

  const std::vector<HloInstruction*>& operands() const { return operands_; }
  HloInstruction* operand(int64_t i) const { return operands_.at(i); }
  int64_t operand_count() const { return static_cast<int64_t>(operands_.size()); }
  // Instructions that use this one (each listed once, in first-use order).
  const std::vector<HloInstruction*>& users() const { return users_; }
  void ReplaceOperandWith(int64_t index, HloInstruction* new_operand);
  // Makes every user of this instruction use `replacement` instead.
  void ReplaceAllUsesWith(HloInstruction* replacement);

  const std::vector<HloComputation*>& called_computations() const { return called_; }
  // reduce, scatter, call, all-reduce, reduce-scatter.
  HloComputation* to_apply() const;
  // fusion (calls=).
  HloComputation* fused_computation() const;
  HloComputation* while_condition() const;
  HloComputation* while_body() const;
  void set_called_computations(std::vector<HloComputation*> called) { called_ = std::move(called); }

  const HloAttributes& attrs() const { return attrs_; }
  HloAttributes& mutable_attrs() { return attrs_; }
  // Shortcuts into attrs().
  const std::vector<int64_t>& dimensions() const { return attrs_.dimensions; }
  int64_t parameter_number() const { return attrs_.parameter_number; }
  int64_t tuple_index() const { return attrs_.tuple_index; }
  const Literal& literal() const { return attrs_.literal; }

  const std::optional<HloSharding>& sharding() const { return sharding_; }
  bool has_sharding() const { return sharding_.has_value(); }
  void set_sharding(std::optional<HloSharding> sharding) { sharding_ = std::move(sharding); }
  // What sharding() describes: the result, except for an outfeed, whose
  // sharding (XLA's forms) covers (data, token) when it is a tuple of one
  // more element than the data has leaves, and the data it drains alone
  // when it is a tuple of the data's leaves or a tiled sharding of array
  // data; otherwise its token result.
  Shape ShardingShape() const;
  // The sharding of the value the instruction produces: sharding(), but an
  // outfeed's token takes the last element of a (data, token) sharding and
  // none of a data-only one.
  std::optional<HloSharding> ResultSharding() const;

  HloComputation* parent() const { return parent_; }
  const SourceLocation& location() const { return location_; }
  void set_location(SourceLocation location) { location_ = location; }

  // "name (opcode)" plus "at line:col" when parsed from text: for messages.
  std::string Describe() const;
  // One line of HLO text in the canonical format (see printer.h).
  std::string ToString() const;

 private:
  friend class HloComputation;
  HloInstruction() = default;
  void AddUser(HloInstruction* user);
  void RemoveUser(HloInstruction* user);

  HloOpcode opcode_ = HloOpcode::kParameter;
  std::string name_;
  Shape shape_;
  std::vector<HloInstruction*> operands_;
  std::vector<HloInstruction*> users_;
  std::vector<HloComputation*> called_;
  HloAttributes attrs_;
  std::optional<HloSharding> sharding_;
  HloComputation* parent_ = nullptr;
  SourceLocation location_;
};

}  // namespace weft
