// convolution (XLA's ConvGeneralDilated): every result element is the sum,
// over the window positions that land on an input element (padding and the
// holes lhs dilation opens hold zeros, so they add nothing) and over the
// input features of its group, of input x kernel. The reference evaluator:
// the operands are packed once into accumulator-typed copies laid out
// [batch, spatial..., feature] and [window..., input feature, output
// feature], so the innermost loop is a contiguous axpy along a group's
// output features; each (result batch, result position) finds its covered
// window positions once. f32 accumulates bf16/f16/f32, f64 accumulates f64, s64 integers.
#include <algorithm>

#include "executor_eval.h"
#include "weft/base/error.h"

namespace weft::runtime::exec {
namespace {

// The accumulator type for operands of `in` and a result of `out`.
PrimitiveType AccumulatorType(PrimitiveType in, PrimitiveType out) {
  if (IsInteger(in)) return PrimitiveType::kS64;
  if (in == PrimitiveType::kF64 || out == PrimitiveType::kF64) return PrimitiveType::kF64;
  return PrimitiveType::kF32;
}

// `t` converted to `acc` and transposed so that dim j of the copy is dim
// perm[j] of `t`.
HostTensor PackedCopy(EvalContext& ctx, const HostTensor& t, PrimitiveType acc,
                      const std::vector<int64_t>& perm) {
  std::vector<int64_t> dims;
  for (int64_t p : perm) dims.push_back(t.dimensions()[p]);
  HostTensor converted = ctx.Allocate(Shape(acc, t.dimensions()));
  ConvertElements(t.element_type(), t.raw_data(), acc, converted.mutable_raw_data(),
                  t.element_count());
  HostTensor packed = ctx.Allocate(Shape(acc, dims));
  TransposeBytes(converted.raw_data(), t.dimensions(), perm, ByteWidth(acc),
                 packed.mutable_raw_data());
  return packed;
}

// The sizes and strides the loops need, in the packed layouts.
struct ConvGeometry {
  int64_t n = 0;                       // spatial dims
  int64_t batch = 0, out_batch = 0;    // input batch, result batch (batch / batch groups)
  int64_t features = 0, group_in = 0;  // input features, per feature group
  int64_t out_features = 0;            // kernel output features
  std::vector<int64_t> in_spatial, out_spatial, window;
  int64_t in_positions = 1, out_positions = 1, window_positions = 1;
};

ConvGeometry Geometry(const HloInstruction& instr) {
  const ConvolutionDimensionNumbers& dn = instr.attrs().convolution;
  const Shape& lhs = instr.operand(0)->shape();
  const Shape& rhs = instr.operand(1)->shape();
  ConvGeometry g;
  g.n = dn.num_spatial_dims();
  g.batch = lhs.dimensions(dn.input_batch_dimension);
  g.out_batch = g.batch / instr.attrs().batch_group_count;
  g.features = lhs.dimensions(dn.input_feature_dimension);
  g.group_in = rhs.dimensions(dn.kernel_input_feature_dimension);
  g.out_features = rhs.dimensions(dn.kernel_output_feature_dimension);
  for (int64_t k = 0; k < g.n; ++k) {
    g.in_spatial.push_back(lhs.dimensions(dn.input_spatial_dimensions[k]));
    g.out_spatial.push_back(instr.shape().dimensions(dn.output_spatial_dimensions[k]));
    g.window.push_back(rhs.dimensions(dn.kernel_spatial_dimensions[k]));
    g.in_positions *= g.in_spatial.back();
    g.out_positions *= g.out_spatial.back();
    g.window_positions *= g.window.back();
  }
  return g;
}

// A covered window position: the input's spatial offset (in positions) and
// the kernel's window index it meets.
struct Tap {
  int64_t input = 0, kernel = 0;
};

// The taps of the window placed at result position `out_index`.
void TapsAt(const ConvGeometry& g, const std::vector<WindowDim>& window,
            const std::vector<int64_t>& out_index, std::vector<Tap>& taps) {
  taps.clear();
  std::vector<int64_t> k(g.n, 0);
  for (int64_t w = 0; w < g.window_positions; ++w) {
    // k: the row-major window index of w.
    int64_t rest = w;
    for (int64_t d = g.n - 1; d >= 0; --d) {
      k[d] = rest % g.window[d];
      rest /= g.window[d];
    }
    int64_t input = 0, kernel = 0;
    bool inside = true;
    for (int64_t d = 0; d < g.n && inside; ++d) {
      const WindowDim& wd = window[d];
      // The position in the padded, dilated input.
      const int64_t u = out_index[d] * wd.stride - wd.padding_low + k[d] * wd.window_dilation;
      inside = u >= 0 && u % wd.base_dilation == 0 && u / wd.base_dilation < g.in_spatial[d];
      input = input * g.in_spatial[d] + u / wd.base_dilation;
      kernel = kernel * g.window[d] + (wd.window_reversal ? g.window[d] - 1 - k[d] : k[d]);
    }
    if (inside) taps.push_back({input, kernel});
  }
}

template <typename Acc>
void Convolve(const HloInstruction& instr, const ConvGeometry& g, const Acc* lhs, const Acc* rhs,
              Acc* out, bool use_pool) {
  const std::vector<WindowDim>& window = instr.attrs().window;
  const bool feature_groups = instr.attrs().feature_group_count > 1;
  const bool batch_groups = instr.attrs().batch_group_count > 1;
  const int64_t groups =
      std::max(instr.attrs().feature_group_count, instr.attrs().batch_group_count);
  const int64_t per_group = g.out_features / groups;
  // One task per (result batch, result position); out is [out_batch,
  // positions..., out_features]. Each output feature sums its taps in
  // window order and, per tap, its group's input features in order; the
  // innermost loop runs along the output features of a group (an axpy with
  // the kernel's row for one input feature, [window, in, out] packed).
  ParallelRanges(g.out_batch * g.out_positions, 16, use_pool, [&](int64_t begin, int64_t end) {
    std::vector<Tap> taps;
    std::vector<int64_t> out_index(g.n);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t b = item / g.out_positions;
      int64_t rest = item % g.out_positions;
      for (int64_t d = g.n - 1; d >= 0; --d) {
        out_index[d] = rest % g.out_spatial[d];
        rest /= g.out_spatial[d];
      }
      TapsAt(g, window, out_index, taps);
      Acc* row = out + item * g.out_features;
      std::fill(row, row + g.out_features, Acc{0});
      for (int64_t group = 0; group < groups; ++group) {
        const int64_t o0 = group * per_group;
        const int64_t feature0 = feature_groups ? group * g.group_in : 0;
        const int64_t in_batch = batch_groups ? group * g.out_batch + b : b;
        const Acc* in_base = lhs + in_batch * g.in_positions * g.features + feature0;
        Acc* acc = row + o0;
        for (const Tap& t : taps) {
          const Acc* x = in_base + t.input * g.features;
          const Acc* w = rhs + t.kernel * g.group_in * g.out_features + o0;
          for (int64_t c = 0; c < g.group_in; ++c) {
            const Acc xc = x[c];
            const Acc* wc = w + c * g.out_features;
            for (int64_t o = 0; o < per_group; ++o) acc[o] += xc * wc[o];
          }
        }
      }
    }
  });
}

}  // namespace

void CheckConvolution(const HloInstruction& instr) {
  const PrimitiveType in = instr.operand(0)->shape().element_type();
  const PrimitiveType out = instr.shape().element_type();
  WEFT_CHECK(in != PrimitiveType::kPred && out != PrimitiveType::kPred &&
                 in != PrimitiveType::kC64 && out != PrimitiveType::kC64,
             "convolution of {} to {} is not supported (numbers other than complex)",
             PrimitiveTypeName(in), PrimitiveTypeName(out));
  WEFT_CHECK(IsFloatingPoint(in) == IsFloatingPoint(out),
             "convolution from {} to {} is not supported (mix of integer and floating point)",
             PrimitiveTypeName(in), PrimitiveTypeName(out));
}

Value EvalConvolution(const HloInstruction& instr, EvalArgs& args) {
  // The result's place first: scratch requests come after it.
  HostTensor result = args.ctx().Allocate(instr.shape());
  const ConvolutionDimensionNumbers& dn = instr.attrs().convolution;
  const ConvGeometry g = Geometry(instr);
  const PrimitiveType acc = AccumulatorType(args.array(0).element_type(), result.element_type());
  std::vector<int64_t> lhs_perm{dn.input_batch_dimension};
  std::vector<int64_t> rhs_perm = dn.kernel_spatial_dimensions;
  lhs_perm.insert(lhs_perm.end(), dn.input_spatial_dimensions.begin(),
                  dn.input_spatial_dimensions.end());
  lhs_perm.push_back(dn.input_feature_dimension);
  rhs_perm.push_back(dn.kernel_input_feature_dimension);
  rhs_perm.push_back(dn.kernel_output_feature_dimension);
  const HostTensor lhs = PackedCopy(args.ctx(), args.array(0), acc, lhs_perm);
  const HostTensor rhs = PackedCopy(args.ctx(), args.array(1), acc, rhs_perm);
  // The packed result [out_batch, positions..., out_features].
  std::vector<int64_t> packed_dims{g.out_batch};
  packed_dims.insert(packed_dims.end(), g.out_spatial.begin(), g.out_spatial.end());
  packed_dims.push_back(g.out_features);
  HostTensor packed = args.ctx().Allocate(Shape(acc, packed_dims));
  const bool pool = args.ctx().options().use_thread_pool;
  switch (acc) {
    case PrimitiveType::kF32:
      Convolve(instr, g, static_cast<const float*>(lhs.raw_data()),
               static_cast<const float*>(rhs.raw_data()),
               static_cast<float*>(packed.mutable_raw_data()), pool);
      break;
    case PrimitiveType::kF64:
      Convolve(instr, g, static_cast<const double*>(lhs.raw_data()),
               static_cast<const double*>(rhs.raw_data()),
               static_cast<double*>(packed.mutable_raw_data()), pool);
      break;
    default:
      Convolve(instr, g, static_cast<const int64_t*>(lhs.raw_data()),
               static_cast<const int64_t*>(rhs.raw_data()),
               static_cast<int64_t*>(packed.mutable_raw_data()), pool);
      break;
  }
  // Result dim j is packed dim out_perm[j].
  std::vector<int64_t> out_perm(instr.shape().rank());
  out_perm[dn.output_batch_dimension] = 0;
  out_perm[dn.output_feature_dimension] = g.n + 1;
  for (int64_t k = 0; k < g.n; ++k) out_perm[dn.output_spatial_dimensions[k]] = 1 + k;
  // TransposeBytes's perm: out dim i = in dim perm[i].
  HostTensor laid_out = args.ctx().Allocate(Shape(acc, instr.shape().dimensions()));
  TransposeBytes(packed.raw_data(), packed_dims, out_perm, ByteWidth(acc),
                 laid_out.mutable_raw_data());
  ConvertElements(acc, laid_out.raw_data(), result.element_type(), result.mutable_raw_data(),
                  result.element_count());
  return Value{std::move(result)};
}

}  // namespace weft::runtime::exec
