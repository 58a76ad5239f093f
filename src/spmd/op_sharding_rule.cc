#include "weft/spmd/op_sharding_rule.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <iterator>
#include <mutex>
#include <numeric>
#include <unordered_map>
#include <utility>

#include "gather_scatter_rule.h"
#include "weft/base/error.h"
#include "weft/hlo/block_scaled_dot.h"
#include "weft/hlo/custom_call_targets.h"
#include "weft/hlo/ragged_dot.h"

namespace weft {

void RegisterAttentionShardingRules();  // attention_sharding_rule.cc

namespace {

using TensorFactors = OpShardingRule::TensorFactors;

std::mutex& RegistryMutex() {
  static std::mutex mu;
  return mu;
}
std::unordered_map<std::string, OpShardingRuleBuilder>& Registry() {
  static auto* registry = new std::unordered_map<std::string, OpShardingRuleBuilder>();
  return *registry;
}

// One fresh pass-through factor per dim of `dims`.
TensorFactors FreshFactors(OpShardingRule& rule, const std::vector<int64_t>& dims,
                           FactorKind kind = FactorKind::kPassThrough) {
  TensorFactors t;
  for (int64_t d : dims) t.push_back({rule.AddFactor(d, kind)});
  return t;
}

// The result leaves of `instr` (one for an array).
std::vector<Shape> ResultLeaves(const HloInstruction& instr) { return instr.shape().Leaves(); }

std::optional<OpShardingRule> BroadcastRule(const HloInstruction& instr) {
  OpShardingRule rule;
  rule.name = "broadcast";
  rule.results.push_back(FreshFactors(rule, instr.shape().dimensions()));
  TensorFactors op;
  for (int64_t d : instr.dimensions()) op.push_back(rule.results[0][d]);
  rule.operands.push_back(std::move(op));
  return rule;
}

std::optional<OpShardingRule> ReduceRule(const HloInstruction& instr) {
  OpShardingRule rule;
  rule.name = "reduce";
  const int64_t num_inputs = instr.operand_count() / 2;
  const Shape& in = instr.operand(0)->shape();
  TensorFactors input, result;
  for (int64_t d = 0; d < in.rank(); ++d) {
    const bool reduced = std::find(instr.dimensions().begin(), instr.dimensions().end(), d) !=
                         instr.dimensions().end();
    const int64_t f = rule.AddFactor(in.dimensions(d),
                                     reduced ? FactorKind::kReduction : FactorKind::kPassThrough);
    input.push_back({f});
    if (!reduced) result.push_back({f});
  }
  for (int64_t i = 0; i < num_inputs; ++i) rule.operands.push_back(input);
  for (int64_t i = 0; i < num_inputs; ++i) rule.operands.push_back({});  // init values
  for (size_t i = 0; i < ResultLeaves(instr).size(); ++i) rule.results.push_back(result);
  return rule;
}

std::optional<OpShardingRule> TransposeRule(const HloInstruction& instr) {
  OpShardingRule rule;
  rule.name = "transpose";
  rule.operands.push_back(FreshFactors(rule, instr.operand(0)->shape().dimensions()));
  TensorFactors result;
  for (int64_t d : instr.dimensions()) result.push_back(rule.operands[0][d]);
  rule.results.push_back(std::move(result));
  return rule;
}

OpShardingRule DotRuleOf(const HloInstruction& instr, const DotDimensionNumbers& dn) {
  OpShardingRule rule;
  rule.name = "dot";
  const Shape& lhs = instr.operand(0)->shape();
  const Shape& rhs = instr.operand(1)->shape();
  TensorFactors l(lhs.rank()), r(rhs.rank()), out;
  for (size_t i = 0; i < dn.lhs_batch_dims.size(); ++i) {
    const int64_t f = rule.AddFactor(lhs.dimensions(dn.lhs_batch_dims[i]));
    l[dn.lhs_batch_dims[i]] = {f};
    r[dn.rhs_batch_dims[i]] = {f};
    out.push_back({f});
  }
  for (size_t i = 0; i < dn.lhs_contracting_dims.size(); ++i) {
    const int64_t f =
        rule.AddFactor(lhs.dimensions(dn.lhs_contracting_dims[i]), FactorKind::kReduction);
    l[dn.lhs_contracting_dims[i]] = {f};
    r[dn.rhs_contracting_dims[i]] = {f};
  }
  for (int64_t d = 0; d < lhs.rank(); ++d) {
    if (!l[d].empty()) continue;
    l[d] = {rule.AddFactor(lhs.dimensions(d))};
    out.push_back(l[d]);
  }
  for (int64_t d = 0; d < rhs.rank(); ++d) {
    if (!r[d].empty()) continue;
    r[d] = {rule.AddFactor(rhs.dimensions(d))};
    out.push_back(r[d]);
  }
  rule.operands = {std::move(l), std::move(r)};
  rule.results = {std::move(out)};
  return rule;
}

std::optional<OpShardingRule> DotRule(const HloInstruction& instr) {
  return DotRuleOf(instr, instr.attrs().dot);
}

// ragged-dot (hlo/ragged_dot.h): the dot's factors without the rhs group
// dim. What a device must hold whole is never propagated: the ragged dim
// (non-contracting mode: shared by the lhs and the result; contracting
// mode: by both operands), the rhs group dim, the result's group dim and
// group_sizes' group dim; group_sizes' prefix dims share the lhs's factors.
std::optional<OpShardingRule> RaggedDotRule(const HloInstruction& instr) {
  const HloAttributes& a = instr.attrs();
  const RaggedDotMode mode = RaggedDotModeOf(instr);
  OpShardingRule rule = DotRuleOf(instr, a.dot);
  rule.name = "ragged-dot";
  const int64_t ragged = a.lhs_ragged_dims[0];
  TensorFactors& lhs = rule.operands[0];
  TensorFactors& rhs = rule.operands[1];
  TensorFactors& out = rule.results[0];
  const int64_t ragged_factor = lhs[ragged][0];
  if (mode != RaggedDotMode::kBatch)
    rule.factor_kinds[ragged_factor] = FactorKind::kNeedReplication;
  const Shape& sizes = instr.operand(2)->shape();
  const int64_t groups = sizes.dimensions(sizes.rank() - 1);
  for (int64_t g : a.rhs_group_dims) {  // DotRuleOf made it a free dim of the result: take it out
    const int64_t f = rhs[g][0];
    rule.factor_kinds[f] = FactorKind::kNeedReplication;
    out.erase(std::find(out.begin(), out.end(), std::vector<int64_t>{f}));
  }
  if (mode == RaggedDotMode::kContracting) {
    out.insert(out.begin(), {rule.AddFactor(groups, FactorKind::kNeedReplication)});
  }
  TensorFactors group_sizes;
  if (sizes.rank() > 1) {
    for (int64_t d : RaggedDotPrefix(instr)) group_sizes.push_back(lhs[d]);
  }
  group_sizes.push_back({rule.AddFactor(groups, FactorKind::kNeedReplication)});
  rule.operands.push_back(std::move(group_sizes));
  return rule;
}

// XLA's block-scaled dot (hlo/block_scaled_dot.h): the dot it computes, each
// scale sharing its operand's factors. The contracting dim K is the scale
// count Ks (shared with the scale's minor dim) times the block, a factor
// never split, so a split of K keeps whole blocks; padded scales (Ks *
// block > K) share nothing on that dim.
std::optional<OpShardingRule> BlockScaledDotRule(const HloInstruction& instr) {
  CheckBlockScaledDot(instr);
  const int64_t rank = instr.operand(0)->shape().rank();
  OpShardingRule rule = DotRuleOf(instr, BlockScaledDotNumbers(rank));
  rule.name = kBlockScaledDotTarget;
  const int64_t k = instr.operand(0)->shape().dimensions(rank - 1);
  const int64_t contracting = rule.operands[0][rank - 1][0];
  bool whole_blocks = true;
  for (int s = 0; s < 2; ++s) {
    if (HasBlockScale(instr, s)) {
      whole_blocks = whole_blocks && instr.operand(2 + s)->shape().dimensions(rank - 1) *
                                             BlockScaledDotBlockSize(instr, s) ==
                                         k;
    }
  }
  const int64_t block = BlockScaledDotBlockSize(instr, 0);
  if (whole_blocks && block > 1) {  // K = [Ks, block]: Ks in the contracting factor's place
    rule.factor_sizes[contracting] = k / block;
    const int64_t inner = rule.AddFactor(block, FactorKind::kNeedReplication);
    rule.operands[0][rank - 1] = {contracting, inner};
    rule.operands[1][rank - 1] = {contracting, inner};
  }
  for (int s = 0; s < 2; ++s) {
    if (!HasBlockScale(instr, s)) continue;
    OpShardingRule::TensorFactors scale = rule.operands[s];
    if (!whole_blocks) {
      scale[rank - 1] = {rule.AddFactor(instr.operand(2 + s)->shape().dimensions(rank - 1),
                                        FactorKind::kNeedReplication)};
    } else if (block > 1) {
      scale[rank - 1] = {contracting};
    }
    rule.operands.push_back(std::move(scale));
  }
  return rule;
}

}  // namespace

ConvolutionDims ParseConvolutionDims(const HloInstruction& conv) {
  using Role = ConvolutionDims::Role;
  const ConvolutionDimensionNumbers& dn = conv.attrs().convolution;
  ConvolutionDims dims;
  for (int64_t k = 0; k < dn.num_spatial_dims(); ++k) {
    const int64_t lhs = conv.operand(0)->shape().dimensions(dn.input_spatial_dimensions[k]);
    const int64_t rhs = conv.operand(1)->shape().dimensions(dn.kernel_spatial_dimensions[k]);
    const WindowDim& w = conv.attrs().window.at(k);
    const bool unpadded = w.padding_low == 0 && w.padding_high == 0;
    const int64_t step = std::max<int64_t>(1, lhs - 1);
    const bool batch_unpadded = w.size == lhs && w.base_dilation == lhs && unpadded &&
                                !w.window_reversal &&
                                ((w.stride == step && w.window_dilation == 1) ||
                                 (w.window_dilation == step && w.stride == 1));
    const bool batch_padded = w.size == lhs && w.padding_low == lhs - 1 &&
                              w.padding_high == lhs - 1 && w.window_reversal &&
                              w.window_dilation == 1 && w.stride == lhs &&
                              w.base_dilation == lhs - 1;
    const bool dense = w.stride == 1 && w.window_dilation == 1 && w.base_dilation == 1;
    Role role = Role::kConvSpatial;
    if (batch_unpadded || batch_padded) {
      role = Role::kBatch;
    } else if (w.size == lhs && w.base_dilation == 1 && w.window_dilation == 1 && unpadded &&
               !w.window_reversal) {
      role = Role::kContracting;  // one window over the whole dim, at any stride
    } else if (dense && rhs == 1 && w.size == 1 && unpadded && !w.window_reversal) {
      role = Role::kLhsNonContracting;
    } else if (dense && lhs == 1 && w.size == rhs && w.padding_low == rhs - 1 &&
               w.padding_high == rhs - 1 && w.window_reversal) {
      role = Role::kRhsNonContracting;
    }
    dims.spatial.push_back(role);
  }
  return dims;
}

bool ConvolutionDims::HasConvSpatial() const {
  return std::find(spatial.begin(), spatial.end(), Role::kConvSpatial) != spatial.end();
}

namespace {

// convolution, read as a dot where it is one (ParseConvolutionDims): the
// input's batch and the kernel's output features are the result's (the
// batch or feature groups, when several, are a major factor shared with the
// kernel's output features); the input features of a group are contracted
// with the kernel's (a reduction); a spatial dim takes its role's factors:
// batch (all three share it), contracting (lhs and rhs, a reduction; the
// result's size-1 dim is its own), lhs or rhs non-contracting (that operand
// and the result; the other operand's size-1 dim is its own). A true
// convolution spatial dim maps the input to the result as a permutation (the
// partitioner exchanges halos) and keeps the kernel's dim whole.
std::optional<OpShardingRule> ConvolutionRule(const HloInstruction& instr) {
  using Role = ConvolutionDims::Role;
  OpShardingRule rule;
  rule.name = "convolution";
  const ConvolutionDimensionNumbers& dn = instr.attrs().convolution;
  const Shape& lhs = instr.operand(0)->shape();
  const Shape& rhs = instr.operand(1)->shape();
  const Shape& out = instr.shape();
  const int64_t fgc = instr.attrs().feature_group_count;
  const int64_t bgc = instr.attrs().batch_group_count;
  TensorFactors l(lhs.rank()), r(rhs.rank()), o(out.rank());
  const int64_t batch = rule.AddFactor(out.dimensions(dn.output_batch_dimension));
  const int64_t features =
      rule.AddFactor(rhs.dimensions(dn.kernel_input_feature_dimension), FactorKind::kReduction);
  const int64_t groups = std::max(fgc, bgc);
  const int64_t group = groups > 1 ? rule.AddFactor(groups) : -1;
  const int64_t out_features =
      rule.AddFactor(rhs.dimensions(dn.kernel_output_feature_dimension) / groups);
  l[dn.input_batch_dimension] = bgc > 1 ? std::vector<int64_t>{group, batch} : std::vector{batch};
  l[dn.input_feature_dimension] =
      fgc > 1 ? std::vector<int64_t>{group, features} : std::vector{features};
  r[dn.kernel_input_feature_dimension] = {features};
  const std::vector<int64_t> grouped =
      groups > 1 ? std::vector<int64_t>{group, out_features} : std::vector{out_features};
  r[dn.kernel_output_feature_dimension] = grouped;
  o[dn.output_feature_dimension] = grouped;
  o[dn.output_batch_dimension] = {batch};
  const ConvolutionDims roles = ParseConvolutionDims(instr);
  for (int64_t k = 0; k < dn.num_spatial_dims(); ++k) {
    const int64_t in_dim = dn.input_spatial_dimensions[k];
    const int64_t kernel_dim = dn.kernel_spatial_dimensions[k];
    const int64_t out_dim = dn.output_spatial_dimensions[k];
    auto own = [&](const Shape& shape, int64_t d) {
      return std::vector<int64_t>{rule.AddFactor(shape.dimensions(d))};
    };
    switch (roles.spatial[k]) {
      case Role::kBatch: {
        const int64_t f = rule.AddFactor(lhs.dimensions(in_dim));
        l[in_dim] = r[kernel_dim] = o[out_dim] = {f};
        break;
      }
      case Role::kContracting: {
        const int64_t f = rule.AddFactor(lhs.dimensions(in_dim), FactorKind::kReduction);
        l[in_dim] = r[kernel_dim] = {f};
        o[out_dim] = own(out, out_dim);
        break;
      }
      case Role::kLhsNonContracting: {
        const int64_t f = rule.AddFactor(lhs.dimensions(in_dim));
        l[in_dim] = o[out_dim] = {f};
        r[kernel_dim] = own(rhs, kernel_dim);
        break;
      }
      case Role::kRhsNonContracting: {
        const int64_t f = rule.AddFactor(rhs.dimensions(kernel_dim));
        r[kernel_dim] = o[out_dim] = {f};
        l[in_dim] = own(lhs, in_dim);
        break;
      }
      case Role::kConvSpatial: {
        const WindowDim& w = instr.attrs().window.at(k);
        const bool still = w == WindowDim{} && lhs.dimensions(in_dim) == out.dimensions(out_dim);
        const int64_t f = rule.AddFactor(
            out.dimensions(out_dim), still ? FactorKind::kPassThrough : FactorKind::kPermutation);
        l[in_dim] = o[out_dim] = {f};
        r[kernel_dim] = {rule.AddFactor(rhs.dimensions(kernel_dim), FactorKind::kNeedReplication)};
        break;
      }
    }
  }
  rule.operands = {std::move(l), std::move(r)};
  rule.results = {std::move(o)};
  return rule;
}

// dynamic-slice / dynamic-update-slice: dims cut by the slice need replication.
std::optional<OpShardingRule> DynamicSliceRule(const HloInstruction& instr) {
  OpShardingRule rule;
  const bool update = instr.opcode() == HloOpcode::kDynamicUpdateSlice;
  rule.name = update ? "dynamic-update-slice" : "dynamic-slice";
  const Shape& full = instr.operand(0)->shape();
  const Shape& part = update ? instr.operand(1)->shape() : instr.shape();
  TensorFactors full_f, part_f;
  for (int64_t d = 0; d < full.rank(); ++d) {
    if (full.dimensions(d) == part.dimensions(d)) {
      const int64_t f = rule.AddFactor(full.dimensions(d));
      full_f.push_back({f});
      part_f.push_back({f});
    } else if (update) {
      // operand 0 and the result are the same buffer; only the update is cut.
      full_f.push_back({rule.AddFactor(full.dimensions(d))});
      part_f.push_back({rule.AddFactor(part.dimensions(d), FactorKind::kNeedReplication)});
    } else {
      const int64_t f = rule.AddFactor(full.dimensions(d), FactorKind::kNeedReplication);
      full_f.push_back({f});
      part_f.push_back({f});
    }
  }
  const int64_t first_index = update ? 2 : 1;
  rule.operands.push_back(full_f);
  if (update) rule.operands.push_back(part_f);
  for (int64_t i = first_index; i < instr.operand_count(); ++i) rule.operands.push_back({});
  rule.results.push_back(update ? full_f : part_f);
  return rule;
}

// Ops whose dims correspond one to one but may move elements along some dims
// (concatenate, pad, slice, reverse): those dims are permutation factors.
OpShardingRule SameRankRule(const HloInstruction& instr, std::string name,
                            const std::vector<bool>& moved, int64_t num_array_operands) {
  OpShardingRule rule;
  rule.name = std::move(name);
  TensorFactors t;
  for (int64_t d = 0; d < instr.shape().rank(); ++d) {
    t.push_back({rule.AddFactor(instr.shape().dimensions(d),
                                moved[d] ? FactorKind::kPermutation : FactorKind::kPassThrough)});
  }
  for (int64_t i = 0; i < instr.operand_count(); ++i) {
    rule.operands.push_back(i < num_array_operands ? t : TensorFactors{});
  }
  rule.results.push_back(t);
  return rule;
}

// Ops whose operands and results have one rank and whose dims correspond
// one to one, some of which must stay whole (sort's dimension, top-k's last
// dim, a window's moving dims): `whole[d]` dims get a need-replication
// factor per tensor (sizes may differ), the others one shared pass-through
// factor. Scalar operands (init values) have none.
// `moved[d]` (when given) makes a shared dim a permutation: its elements
// move between shards (a window sliding along it).
OpShardingRule DimwiseRule(const HloInstruction& instr, std::string name,
                           const std::vector<bool>& whole, const std::vector<bool>& moved = {}) {
  OpShardingRule rule;
  rule.name = std::move(name);
  const int64_t rank = static_cast<int64_t>(whole.size());
  std::vector<int64_t> shared(rank, -1);
  for (int64_t d = 0; d < rank; ++d) {
    if (whole[d]) continue;
    const bool permutes = !moved.empty() && moved[d];
    shared[d] = rule.AddFactor(instr.operand(0)->shape().dimensions(d),
                               permutes ? FactorKind::kPermutation : FactorKind::kPassThrough);
  }
  auto factors = [&](const Shape& s) {
    TensorFactors t;
    if (!s.IsArray() || s.rank() != rank) return t;
    for (int64_t d = 0; d < rank; ++d) {
      t.push_back(
          {whole[d] ? rule.AddFactor(s.dimensions(d), FactorKind::kNeedReplication) : shared[d]});
    }
    return t;
  };
  for (const HloInstruction* op : instr.operands()) rule.operands.push_back(factors(op->shape()));
  for (const Shape& leaf : ResultLeaves(instr)) rule.results.push_back(factors(leaf));
  return rule;
}

// The dims of a windowed op's operand the window moves along (any size,
// stride, padding or dilation but 1, 1, 0, 1).
std::vector<bool> WindowedDims(const std::vector<WindowDim>& window) {
  std::vector<bool> moving;
  for (const WindowDim& w : window) moving.push_back(!(w == WindowDim{}));
  return moving;
}

// bitcast-convert: same widths are elementwise; otherwise the dims both
// sides share pass through and the narrower side's extra last dim stays
// whole.
std::optional<OpShardingRule> BitcastConvertRule(const HloInstruction& instr) {
  const Shape& in = instr.operand(0)->shape();
  if (in.rank() == instr.shape().rank()) {
    return ElementwiseRule("bitcast-convert", instr.shape(), instr.operands());
  }
  OpShardingRule rule;
  rule.name = "bitcast-convert";
  const Shape& wide = in.rank() < instr.shape().rank() ? in : instr.shape();
  const Shape& narrow = in.rank() < instr.shape().rank() ? instr.shape() : in;
  TensorFactors w = FreshFactors(rule, wide.dimensions());
  TensorFactors n = w;
  n.push_back({rule.AddFactor(narrow.dimensions().back(), FactorKind::kNeedReplication)});
  const bool narrows = &narrow == &instr.shape();
  rule.operands.push_back(narrows ? w : n);
  rule.results.push_back(narrows ? n : w);
  return rule;
}

// all-gather, reduce-scatter, all-to-all: the collective's dims change size.
std::optional<OpShardingRule> CollectiveRule(const HloInstruction& instr) {
  if (!instr.shape().IsArray()) return std::nullopt;
  OpShardingRule rule;
  rule.name = std::string(HloOpcodeString(instr.opcode()));
  const Shape& in = instr.operand(0)->shape();
  TensorFactors op_f, out_f;
  for (int64_t d = 0; d < in.rank(); ++d) {
    const bool changed = std::find(instr.dimensions().begin(), instr.dimensions().end(), d) !=
                             instr.dimensions().end() ||
                         in.dimensions(d) != instr.shape().dimensions(d);
    if (changed) {
      op_f.push_back({rule.AddFactor(in.dimensions(d), FactorKind::kNeedReplication)});
      out_f.push_back({rule.AddFactor(instr.shape().dimensions(d), FactorKind::kNeedReplication)});
    } else {
      const int64_t f = rule.AddFactor(in.dimensions(d));
      op_f.push_back({f});
      out_f.push_back({f});
    }
  }
  rule.operands.push_back(std::move(op_f));
  rule.results.push_back(std::move(out_f));
  return rule;
}

std::string OpName(const HloInstruction& instr) {
  return std::string(HloOpcodeString(instr.opcode()));
}

// Elementwise ops, and collectives that keep their operand's shape.
std::optional<OpShardingRule> ElementwiseOpRule(const HloInstruction& instr) {
  return ElementwiseRule(OpName(instr), instr.shape(), instr.operands());
}

std::optional<OpShardingRule> ReshapeOpRule(const HloInstruction& instr) {
  return ReshapeRule(instr.operand(0)->shape().dimensions(), instr.shape().dimensions());
}

std::optional<OpShardingRule> ConcatenateRule(const HloInstruction& instr) {
  std::vector<bool> moved(instr.shape().rank(), false);
  moved.at(instr.dimensions().at(0)) = true;
  return SameRankRule(instr, OpName(instr), moved, instr.operand_count());
}

std::optional<OpShardingRule> PadRule(const HloInstruction& instr) {
  std::vector<bool> moved;
  for (const PadDim& p : instr.attrs().padding) {
    moved.push_back(p.low != 0 || p.high != 0 || p.interior != 0);
  }
  return SameRankRule(instr, OpName(instr), moved, 1);
}

std::optional<OpShardingRule> SliceRule(const HloInstruction& instr) {
  std::vector<bool> moved;
  const Shape& in = instr.operand(0)->shape();
  for (size_t d = 0; d < instr.attrs().slice.size(); ++d) {
    moved.push_back(instr.shape().dimensions(d) != in.dimensions(d));
  }
  return SameRankRule(instr, OpName(instr), moved, 1);
}

std::optional<OpShardingRule> ReverseRule(const HloInstruction& instr) {
  std::vector<bool> moved(instr.shape().rank(), false);
  for (int64_t d : instr.dimensions()) moved.at(d) = true;
  return SameRankRule(instr, OpName(instr), moved, 1);
}

std::optional<OpShardingRule> SortRule(const HloInstruction& instr) {
  std::vector<bool> whole(instr.operand(0)->shape().rank(), false);
  whole.at(instr.dimensions().at(0)) = true;
  return DimwiseRule(instr, OpName(instr), whole);
}

// topk (the op and the custom call): the last dim stays whole.
OpShardingRule TopKRule(const HloInstruction& instr, std::string name) {
  std::vector<bool> whole(instr.operand(0)->shape().rank(), false);
  whole.back() = true;
  return DimwiseRule(instr, std::move(name), whole);
}

std::optional<OpShardingRule> TopKOpRule(const HloInstruction& instr) {
  return TopKRule(instr, OpName(instr));
}

// cholesky and triangular-solve: each matrix (the last two dims) whole, the
// batch dims shared by operands and result (XLA partitions them so too).
std::optional<OpShardingRule> MatrixRule(const HloInstruction& instr) {
  const int64_t rank = instr.shape().rank();
  if (rank < 2) return std::nullopt;
  std::vector<bool> whole(rank, false);
  whole[rank - 2] = whole[rank - 1] = true;
  return DimwiseRule(instr, OpName(instr), whole);
}

// select-and-scatter: the window's moving dims stay whole. reduce-window,
// as XLA propagates it: the inputs' and results' splits pass through, moving
// dims included (the partitioner exchanges or gathers what the windows
// read), but for a dilated dim, which stays whole.
std::optional<OpShardingRule> WindowRule(const HloInstruction& instr) {
  const std::vector<WindowDim>& window = instr.attrs().window;
  if (instr.opcode() != HloOpcode::kReduceWindow) {
    return DimwiseRule(instr, OpName(instr), WindowedDims(window));
  }
  std::vector<bool> dilated;
  for (const WindowDim& w : window) dilated.push_back(w.base_dilation > 1 || w.window_dilation > 1);
  return DimwiseRule(instr, OpName(instr), dilated, WindowedDims(window));
}

// rng: each device draws its tile (spmd_partitioner_random.cc).
std::optional<OpShardingRule> RngRule(const HloInstruction& instr) {
  OpShardingRule rule;
  rule.name = OpName(instr);
  rule.results.push_back(FreshFactors(rule, instr.shape().dimensions()));
  rule.operands.assign(instr.operand_count(), TensorFactors{});
  return rule;
}

// rng-bit-generator: the state whole, the bits split freely.
std::optional<OpShardingRule> RngBitGeneratorRule(const HloInstruction& instr) {
  OpShardingRule rule;
  rule.name = OpName(instr);
  const TensorFactors state =
      FreshFactors(rule, instr.operand(0)->shape().dimensions(), FactorKind::kNeedReplication);
  rule.operands.push_back(state);
  if (instr.shape().IsTuple()) rule.results.push_back(state);
  rule.results.push_back(FreshFactors(rule, RngDrawnShape(instr).dimensions()));
  return rule;
}

// iota, constant: a result and no operands.
std::optional<OpShardingRule> ResultOnlyRule(const HloInstruction& instr) {
  if (!instr.shape().IsArray()) return std::nullopt;
  OpShardingRule rule;
  rule.name = OpName(instr);
  rule.results.push_back(FreshFactors(rule, instr.shape().dimensions()));
  return rule;
}

// XLA's pass-through custom calls (sharding_propagation's
// IsPassthroughCustomOps): the result is operand 0 element for element
// (X64Combine joins two halves of the same shape; the memory-space moves and
// layout pins one operand of the result's rank).
bool IsPassThroughCustomCall(const HloInstruction& instr) {
  const std::string& target = instr.attrs().custom_call_target;
  if (target == "X64Combine" || target == "LayoutConstraint") return true;
  return IsMemorySpaceMoveTarget(target) && instr.operand_count() == 1 && instr.shape().IsArray() &&
         instr.operand(0)->shape().IsArray() &&
         instr.operand(0)->shape().rank() == instr.shape().rank();
}

// Custom calls: Sharding, the pass-through ones and topk here, the others by
// target from the registry.
std::optional<OpShardingRule> CustomCallRule(const HloInstruction& instr) {
  const std::string& target = instr.attrs().custom_call_target;
  if (target == "Sharding" || IsPassThroughCustomCall(instr)) {
    return ElementwiseRule(target, instr.shape(), instr.operands());
  }
  if (target == kTopKTarget) return TopKRule(instr, target);
  if (target == kBlockScaledDotTarget) return BlockScaledDotRule(instr);
  static std::once_flag once;
  std::call_once(once, RegisterAttentionShardingRules);
  OpShardingRuleBuilder builder;
  {
    std::lock_guard<std::mutex> lock(RegistryMutex());
    auto it = Registry().find(target);
    if (it == Registry().end()) return std::nullopt;
    builder = it->second;
  }
  return builder(instr);
}

using OpcodeRuleBuilder = std::optional<OpShardingRule> (*)(const HloInstruction&);

constexpr HloOpcode kAllOpcodes[] = {
#define WEFT_OPCODE_ENUMERATOR(enumerator, name) HloOpcode::enumerator,
    WEFT_HLO_OPCODES(WEFT_OPCODE_ENUMERATOR)
#undef WEFT_OPCODE_ENUMERATOR
};

// The opcode registry: each op's rule builder, indexed by opcode (nullptr:
// the op has no rule). Every elementwise op takes the elementwise rule.
using OpcodeRuleTable = std::array<OpcodeRuleBuilder, std::size(kAllOpcodes)>;

OpcodeRuleTable MakeOpcodeRuleTable() {
  const std::pair<HloOpcode, OpcodeRuleBuilder> entries[] = {
      {HloOpcode::kCompare, ElementwiseOpRule},
      {HloOpcode::kAllReduce, ElementwiseOpRule},
      {HloOpcode::kCollectivePermute, ElementwiseOpRule},
      {HloOpcode::kBroadcast, BroadcastRule},
      {HloOpcode::kReduce, ReduceRule},
      {HloOpcode::kTranspose, TransposeRule},
      {HloOpcode::kReshape, ReshapeOpRule},
      {HloOpcode::kDot, DotRule},
      {HloOpcode::kRaggedDot, RaggedDotRule},
      {HloOpcode::kConvolution, ConvolutionRule},
      {HloOpcode::kDynamicSlice, DynamicSliceRule},
      {HloOpcode::kDynamicUpdateSlice, DynamicSliceRule},
      {HloOpcode::kConcatenate, ConcatenateRule},
      {HloOpcode::kPad, PadRule},
      {HloOpcode::kSlice, SliceRule},
      {HloOpcode::kReverse, ReverseRule},
      {HloOpcode::kSort, SortRule},
      {HloOpcode::kTopK, TopKOpRule},
      {HloOpcode::kCholesky, MatrixRule},
      {HloOpcode::kTriangularSolve, MatrixRule},
      {HloOpcode::kReduceWindow, WindowRule},
      {HloOpcode::kSelectAndScatter, WindowRule},
      {HloOpcode::kBitcastConvert, BitcastConvertRule},
      {HloOpcode::kGather, spmd::GatherRule},
      {HloOpcode::kScatter, spmd::ScatterRule},
      {HloOpcode::kAllGather, CollectiveRule},
      {HloOpcode::kReduceScatter, CollectiveRule},
      {HloOpcode::kAllToAll, CollectiveRule},
      {HloOpcode::kRng, RngRule},
      {HloOpcode::kRngBitGenerator, RngBitGeneratorRule},
      {HloOpcode::kIota, ResultOnlyRule},
      {HloOpcode::kConstant, ResultOnlyRule},
      {HloOpcode::kCustomCall, CustomCallRule},
  };
  OpcodeRuleTable table{};
  for (const auto& [op, builder] : entries) table[static_cast<size_t>(op)] = builder;
  for (HloOpcode op : kAllOpcodes) {
    if (IsElementwise(op)) table[static_cast<size_t>(op)] = ElementwiseOpRule;
  }
  return table;
}

}  // namespace

std::string_view FactorKindName(FactorKind kind) {
  switch (kind) {
    case FactorKind::kPassThrough:
      return "pass-through";
    case FactorKind::kReduction:
      return "reduction";
    case FactorKind::kNeedReplication:
      return "need-replication";
    case FactorKind::kPermutation:
      return "permutation";
  }
  return "?";
}

int64_t OpShardingRule::AddFactor(int64_t size, FactorKind kind) {
  factor_sizes.push_back(size);
  factor_kinds.push_back(kind);
  return num_factors() - 1;
}

std::string OpShardingRule::ToString() const {
  auto tensor_text = [](const TensorFactors& t) {
    std::vector<std::string> dims;
    for (const auto& dim : t) {
      std::vector<std::string> fs;
      for (int64_t f : dim) fs.push_back(fmt::format("f{}", f));
      dims.push_back(fmt::format("{}", fmt::join(fs, "*")));
    }
    return fmt::format("[{}]", fmt::join(dims, ", "));
  };
  std::vector<std::string> ops, res, kinds;
  for (const auto& t : operands) ops.push_back(tensor_text(t));
  for (const auto& t : results) res.push_back(tensor_text(t));
  for (int64_t f = 0; f < num_factors(); ++f) {
    if (factor_kinds[f] != FactorKind::kPassThrough) {
      kinds.push_back(fmt::format("f{}: {}", f, FactorKindName(factor_kinds[f])));
    }
  }
  std::string text =
      fmt::format("{}: ({}) -> ({})", name, fmt::join(ops, ", "), fmt::join(res, ", "));
  if (!kinds.empty()) text += fmt::format(" {{{}}}", fmt::join(kinds, ", "));
  return text;
}

OpShardingRule ElementwiseRule(std::string name, const Shape& result,
                               const std::vector<HloInstruction*>& operands) {
  OpShardingRule rule;
  rule.name = std::move(name);
  const Shape leaf = result.IsTuple() ? result.tuple_shapes(0) : result;
  const TensorFactors t = FreshFactors(rule, leaf.dimensions());
  for (const HloInstruction* op : operands) {
    rule.operands.push_back(
        op->shape().IsArray() && op->shape().rank() == leaf.rank() ? t : TensorFactors{});
  }
  for (int64_t i = 0; i < std::max<int64_t>(1, result.LeafCount()); ++i) rule.results.push_back(t);
  return rule;
}

OpShardingRule ReshapeRule(const std::vector<int64_t>& from, const std::vector<int64_t>& to) {
  OpShardingRule rule;
  rule.name = "reshape";
  TensorFactors src(from.size()), dst(to.size());
  size_t i = 0, j = 0;
  int64_t rs = 0, rt = 0;  // what is left of from[i] / to[j]; 0 = not started
  auto skip_ones = [&] {
    while (i < from.size() && rs == 0 && from[i] == 1) src[i++] = {rule.AddFactor(1)};
    while (j < to.size() && rt == 0 && to[j] == 1) dst[j++] = {rule.AddFactor(1)};
  };
  for (;;) {
    skip_ones();
    if (i == from.size() || j == to.size()) break;
    if (rs == 0) rs = from[i];
    if (rt == 0) rt = to[j];
    // The largest major factor both dims share (XLA's gcd rule: [12,8] ->
    // [8,12] shares 4 = gcd(12, 8) as the major factor of both dim 0s).
    const int64_t g = std::gcd(rs, rt);
    if (g > 1) {
      const int64_t f = rule.AddFactor(g);
      src[i].push_back(f);
      dst[j].push_back(f);
      rs /= g;
      rt /= g;
      if (rs == 1) rs = 0, ++i;
      if (rt == 1) rt = 0, ++j;
      continue;
    }
    // No common refinement: consume dims on both sides until the element
    // counts line up again; each gets a factor of its own.
    int64_t ps = rs, pt = rt;
    src[i].push_back(rule.AddFactor(rs));
    dst[j].push_back(rule.AddFactor(rt));
    ++i, ++j;
    rs = rt = 0;
    while (ps != pt) {
      if (ps < pt && i < from.size()) {
        ps *= from[i];
        src[i].push_back(rule.AddFactor(from[i]));
        ++i;
      } else if (j < to.size()) {
        pt *= to[j];
        dst[j].push_back(rule.AddFactor(to[j]));
        ++j;
      } else {
        break;
      }
    }
  }
  for (; i < from.size(); ++i) src[i].push_back(rule.AddFactor(rs ? rs : from[i])), rs = 0;
  for (; j < to.size(); ++j) dst[j].push_back(rule.AddFactor(rt ? rt : to[j])), rt = 0;
  rule.operands = {std::move(src)};
  rule.results = {std::move(dst)};
  return rule;
}

void RegisterCustomCallRule(std::string target, OpShardingRuleBuilder builder) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  Registry()[std::move(target)] = std::move(builder);
}

bool HasCustomCallRule(std::string_view target) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  return Registry().count(std::string(target)) > 0;
}

std::optional<OpShardingRule> GetOpShardingRule(const HloInstruction& instr) {
  static const OpcodeRuleTable table = MakeOpcodeRuleTable();
  const OpcodeRuleBuilder builder = table[static_cast<size_t>(instr.opcode())];
  if (builder == nullptr) return std::nullopt;
  return builder(instr);
}

}  // namespace weft
