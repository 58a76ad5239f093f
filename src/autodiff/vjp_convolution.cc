// vjp of convolution (XLA's ConvGeneralDilated, feature and batch groups).
// A convolution with G batch groups is the feature-grouped convolution
// (G groups, the same kernel) of its input with the batch groups moved
// into the features: element [b, p, g * C + c] of the moved input is the
// input's [g * (B / G) + b, p, c]. Its cotangents are that convolution's,
// the input's moved back. Both cotangents are convolutions:
//   - the input's: the result's cotangent convolved with the kernel, the
//     cotangent dilated by the stride, stepping by the input's dilation,
//     padded so each input position meets the taps that read it (the
//     window mirrored: reversal flipped), the kernel's input and output
//     features swapped within each feature group;
//   - the kernel's: the input (its batch and features swapped) convolved
//     with the result's cotangent (its batch contracted, its positions the
//     window, dilated by the stride), stepping by the window dilation; the
//     feature groups become batch groups; reversed back along reversed dims.
#include <algorithm>

#include "vjp.h"
#include "weft/base/error.h"

namespace weft::autodiff {
namespace {

std::vector<int64_t> Iota(int64_t n) {
  std::vector<int64_t> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = i;
  return v;
}

HloInstruction* TransposeTo(VjpContext& c, HloInstruction* x, const std::vector<int64_t>& perm) {
  return perm == Iota(static_cast<int64_t>(perm.size())) ? x : c.b().Transpose(x, perm);
}

// The kernel laid out [window..., out features of a group, all in features]
// for the input's cotangent: element [k, o', g * Cg + c] is the forward
// kernel's [k, c, g * (O / G) + o'].
HloInstruction* SwappedKernel(VjpContext& c, HloInstruction* w,
                              const ConvolutionDimensionNumbers& dn, int64_t groups) {
  const int64_t n = dn.num_spatial_dims();
  std::vector<int64_t> perm = dn.kernel_spatial_dimensions;
  perm.push_back(dn.kernel_input_feature_dimension);
  perm.push_back(dn.kernel_output_feature_dimension);
  HloInstruction* k = TransposeTo(c, w, perm);  // [window..., Cg, O]
  std::vector<int64_t> dims(k->shape().dimensions().begin(), k->shape().dimensions().begin() + n);
  const int64_t group_in = k->shape().dimensions(n), out = k->shape().dimensions(n + 1);
  std::vector<int64_t> split = dims;
  split.insert(split.end(), {group_in, groups, out / groups});
  std::vector<int64_t> swap = Iota(n);
  swap.insert(swap.end(), {n + 2, n + 1, n});  // [window..., O / G, G, Cg]
  HloInstruction* t = TransposeTo(c, c.b().Reshape(k, split), swap);
  std::vector<int64_t> merged = dims;
  merged.insert(merged.end(), {out / groups, groups * group_in});
  return c.b().Reshape(t, merged);
}

// `x` (batch at dim `batch`, features at `feature`) with its batch groups
// moved into the features: [B, C] -> [B / G, G * C], element [b, g * C + c]
// from [g * (B / G) + b, c]; or, `back`, the inverse: [B / G, G * C] -> [B, C].
HloInstruction* MoveBatchGroups(VjpContext& c, HloInstruction* x, int64_t batch, int64_t feature,
                                int64_t groups, bool back) {
  const int64_t rank = x->shape().rank();
  std::vector<int64_t> perm{batch, feature};  // batch and features first
  for (int64_t d = 0; d < rank; ++d) {
    if (d != batch && d != feature) perm.push_back(d);
  }
  std::vector<int64_t> inverse(rank);
  for (int64_t i = 0; i < rank; ++i) inverse[perm[i]] = i;
  HloInstruction* t = TransposeTo(c, x, perm);
  const std::vector<int64_t> dims = t->shape().dimensions();
  const std::vector<int64_t> rest(dims.begin() + 2, dims.end());
  // [G, B/G, C, rest] <-> [B/G, G, C, rest], swapped by the transpose.
  const int64_t b = back ? dims[0] : dims[0] / groups;
  const int64_t cf = back ? dims[1] / groups : dims[1];
  std::vector<int64_t> split =
      back ? std::vector<int64_t>{b, groups, cf} : std::vector<int64_t>{groups, b, cf};
  split.insert(split.end(), rest.begin(), rest.end());
  std::vector<int64_t> swap = Iota(rank + 1);
  std::swap(swap[0], swap[1]);
  HloInstruction* swapped = c.b().Transpose(c.b().Reshape(t, split), swap);
  std::vector<int64_t> merged =
      back ? std::vector<int64_t>{b * groups, cf} : std::vector<int64_t>{b, groups * cf};
  merged.insert(merged.end(), rest.begin(), rest.end());
  return TransposeTo(c, c.b().Reshape(swapped, merged), inverse);
}

void Convolution(VjpContext& c, const HloInstruction& f, std::span<HloInstruction* const> ct) {
  const HloAttributes& a = f.attrs();
  const ConvolutionDimensionNumbers& dn = a.convolution;
  const HloInstruction* lhs = f.operand(0);
  const HloInstruction* rhs = f.operand(1);
  const int64_t n = dn.num_spatial_dims();
  // Shape inference allows groups of one kind only.
  const int64_t batch_groups = a.batch_group_count;
  const int64_t groups = std::max(a.feature_group_count, batch_groups);
  // The input as the feature-grouped convolution reads it.
  Shape grouped_lhs = lhs->shape();
  if (batch_groups > 1) {
    std::vector<int64_t> dims = grouped_lhs.dimensions();
    dims[dn.input_batch_dimension] /= batch_groups;
    dims[dn.input_feature_dimension] *= batch_groups;
    grouped_lhs = Shape(grouped_lhs.element_type(), dims);
  }
  auto moved = [&](HloInstruction* x, bool back) {
    return batch_groups > 1 ? MoveBatchGroups(c, x, dn.input_batch_dimension,
                                              dn.input_feature_dimension, batch_groups, back)
                            : x;
  };
  for (int64_t k = 0; k < n; ++k) {
    if (f.shape().dimensions(dn.output_spatial_dimensions[k]) == 0) return;  // no result: zero
  }
  // As dot: operands of one floating type and a result of another take the
  // cotangent in the operands' type.
  HloInstruction* dy = ct[0];
  const PrimitiveType operand_type = lhs->shape().element_type();
  if (IsFloatingPoint(operand_type) && IsFloatingPoint(f.shape().element_type())) {
    dy = c.ConvertTo(dy, operand_type);
  }
  const PrimitiveType type = dy->shape().element_type();

  if (c.NeedsGrad(lhs)) {
    HloAttributes t;
    ConvolutionDimensionNumbers& d = t.convolution;
    d.input_batch_dimension = dn.output_batch_dimension;
    d.input_feature_dimension = dn.output_feature_dimension;
    d.input_spatial_dimensions = dn.output_spatial_dimensions;
    d.kernel_spatial_dimensions = Iota(n);
    d.kernel_input_feature_dimension = n;
    d.kernel_output_feature_dimension = n + 1;
    d.output_batch_dimension = dn.input_batch_dimension;
    d.output_feature_dimension = dn.input_feature_dimension;
    d.output_spatial_dimensions = dn.input_spatial_dimensions;
    t.feature_group_count = groups;
    for (int64_t k = 0; k < n; ++k) {
      const WindowDim& w = a.window[k];
      const int64_t in = lhs->shape().dimensions(dn.input_spatial_dimensions[k]);
      const int64_t out = f.shape().dimensions(dn.output_spatial_dimensions[k]);
      const int64_t span = (w.size - 1) * w.window_dilation + 1;
      WindowDim m;
      m.size = w.size;
      m.stride = w.base_dilation;
      m.base_dilation = w.stride;
      m.window_dilation = w.window_dilation;
      m.window_reversal = !w.window_reversal;
      m.padding_low = span - 1 - w.padding_low;
      // Exactly `in` positions: the padded cotangent is (in - 1) * dl + span long.
      m.padding_high =
          (in - 1) * w.base_dilation + span - ((out - 1) * w.stride + 1) - m.padding_low;
      t.window.push_back(m);
    }
    HloInstruction* kernel = SwappedKernel(c, c.ConvertTo(c.Primal(rhs), type), dn, groups);
    HloInstruction* dx = c.b().AddInstruction(HloOpcode::kConvolution, {dy, kernel}, std::move(t),
                                              grouped_lhs.WithElementType(type));
    c.Accumulate(lhs, moved(dx, /*back=*/true));
  }
  if (c.NeedsGrad(rhs)) {
    HloAttributes u;
    ConvolutionDimensionNumbers& d = u.convolution;
    d.input_batch_dimension = dn.input_feature_dimension;
    d.input_feature_dimension = dn.input_batch_dimension;
    d.input_spatial_dimensions = dn.input_spatial_dimensions;
    d.kernel_input_feature_dimension = dn.output_batch_dimension;
    d.kernel_output_feature_dimension = dn.output_feature_dimension;
    d.kernel_spatial_dimensions = dn.output_spatial_dimensions;
    d.output_batch_dimension = dn.kernel_input_feature_dimension;
    d.output_feature_dimension = dn.kernel_output_feature_dimension;
    d.output_spatial_dimensions = dn.kernel_spatial_dimensions;
    u.batch_group_count = groups;
    std::vector<int64_t> reversed;
    for (int64_t k = 0; k < n; ++k) {
      const WindowDim& w = a.window[k];
      const int64_t in = lhs->shape().dimensions(dn.input_spatial_dimensions[k]);
      const int64_t out = f.shape().dimensions(dn.output_spatial_dimensions[k]);
      WindowDim m;
      m.size = out;
      m.stride = w.window_dilation;
      m.base_dilation = w.base_dilation;
      m.window_dilation = w.stride;
      m.padding_low = w.padding_low;
      // Exactly `size` positions of the forward window.
      m.padding_high = (w.size - 1) * w.window_dilation + (out - 1) * w.stride + 1 -
                       ((in - 1) * w.base_dilation + 1) - w.padding_low;
      u.window.push_back(m);
      if (w.window_reversal) reversed.push_back(dn.kernel_spatial_dimensions[k]);
    }
    const Shape shape = rhs->shape().WithElementType(type);
    HloInstruction* dw = c.b().AddInstruction(HloOpcode::kConvolution,
                                              {moved(c.ConvertTo(c.Primal(lhs), type), false), dy},
                                              std::move(u), shape);
    if (!reversed.empty()) {
      HloAttributes r;
      r.dimensions = reversed;
      dw = c.b().AddInstruction(HloOpcode::kReverse, {dw}, std::move(r), shape);
    }
    c.Accumulate(rhs, dw);
  }
}

}  // namespace

void RegisterConvolutionVjps(VjpTable& t) { t.Register(HloOpcode::kConvolution, Convolution); }

}  // namespace weft::autodiff
