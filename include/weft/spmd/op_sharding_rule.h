// OpShardingRule: how an op's operand and result dimensions correspond, as
// an einsum-like list of factors (Shardy's OpShardingRule). Every dimension
// of every operand and result is a product of factors (one factor for most
// ops, several for reshape splits/merges and GQA heads); a factor shared by
// two tensors means "splitting this factor on one splits it on the other".
//
//   dot f32[8,16] x f32[16,32] -> f32[8,32]:   ([i, k], [k, j]) -> ([i, j])  k: reduction
//   reshape f32[4,6] -> f32[24]:               ([i], [j]) -> ([i*j])
//
// Sharding propagation (sharding_propagation.h) reads only these rules, in
// both directions; a custom call joins by registering its rule by target.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "weft/hlo/instruction.h"

namespace weft {

enum class FactorKind {
  // The factor is present in operands and results; sharding flows both ways.
  kPassThrough,
  // Only in operands (dot contracting dims, reduce dims). Splitting it on an
  // operand makes a partial result, so the result is not split on it; it
  // still flows between operands (dot: lhs contracting <-> rhs contracting).
  kReduction,
  // Must not be split across the op (dynamic-slice's sliced dim, a gather's
  // indexed dim, attention head_dim): never propagated.
  kNeedReplication,
  // The dim is split but its elements move between shards (concatenate,
  // pad, slice, reverse). XLA's SPMD propagation passes such shardings
  // through (the partitioner moves halos), so we do too.
  kPermutation,
};
std::string_view FactorKindName(FactorKind kind);

// A tensor the rule talks about: operand i or result leaf i (a tuple-shaped
// result has one leaf per element).
struct TensorRef {
  bool is_result = false;
  int64_t index = 0;
  static TensorRef Operand(int64_t i) { return {false, i}; }
  static TensorRef Result(int64_t i = 0) { return {true, i}; }
  bool operator==(const TensorRef&) const = default;
};

struct OpShardingRule {
  // Which op the rule describes ("dot", "reshape", "weft.flex_attention"): for --explain.
  std::string name;
  std::vector<int64_t> factor_sizes;
  std::vector<FactorKind> factor_kinds;
  // Per operand / per result leaf, per dim: the dim's factors, major to minor.
  // A dim with one factor has that factor's size; with several, the product.
  using TensorFactors = std::vector<std::vector<int64_t>>;
  std::vector<TensorFactors> operands;
  std::vector<TensorFactors> results;

  int64_t num_factors() const { return static_cast<int64_t>(factor_sizes.size()); }
  const TensorFactors& tensor(TensorRef ref) const {
    return ref.is_result ? results.at(ref.index) : operands.at(ref.index);
  }
  // Adds a factor and returns its id.
  int64_t AddFactor(int64_t size, FactorKind kind = FactorKind::kPassThrough);
  // Einsum-like text: "([f0, f1], [f1, f2]) -> ([f0, f2]) {f1: reduction}".
  std::string ToString() const;
};

// Builds the rule of one instruction, or nullopt when the op has none (its
// sharding is then only set by users of structural ops or by annotation).
using OpShardingRuleBuilder = std::function<std::optional<OpShardingRule>(const HloInstruction&)>;

// Registers the rule of custom calls with `target` (replacing an earlier one).
void RegisterCustomCallRule(std::string target, OpShardingRuleBuilder builder);
bool HasCustomCallRule(std::string_view target);

// The rule of `instr`: from the opcode, or from the registry for custom calls.
// Structural ops (tuple, get-tuple-element, while, call, parameter) and
// custom calls without a registered rule have none.
std::optional<OpShardingRule> GetOpShardingRule(const HloInstruction& instr);

// A convolution read as a dot (XLA's dot_as_convolution_util): each input
// spatial dim is a batch dim (window over the whole dim, base-dilated by its
// size), a contracting dim (one window over the whole dim), an lhs or rhs
// non-contracting dim (a size-1 window, or a size-1 input under a reversed
// full-size window), or a true convolution spatial dim. The input batch and
// feature and the kernel's features are not listed.
struct ConvolutionDims {
  enum class Role { kBatch, kContracting, kLhsNonContracting, kRhsNonContracting, kConvSpatial };
  std::vector<Role> spatial;  // per spatial dim
  bool HasConvSpatial() const;
};
ConvolutionDims ParseConvolutionDims(const HloInstruction& conv);

// Building blocks for rule builders (custom-call rules use them too).
// Same-shape operands share the result's factors; scalars have none.
OpShardingRule ElementwiseRule(std::string name, const Shape& result,
                               const std::vector<HloInstruction*>& operands);
// Reshape factors: the common refinement of both shapes, where two dims
// that do not divide each other still share their gcd as a major factor
// ([6,4] -> [4,6]: 2); what remains of them (3 and 2 there; [2,3] -> [3,2]
// entirely) gets factors of its own (never propagated).
OpShardingRule ReshapeRule(const std::vector<int64_t>& from, const std::vector<int64_t>& to);

}  // namespace weft
