// convolution (XLA's ConvGeneralDilated): every result element is the sum,
// over the window positions that land on an input element (padding and the
// holes lhs dilation opens hold zeros, so they add nothing) and over the
// input features of its group, of input x kernel. The reference evaluator:
// the operands are packed into accumulator-typed copies laid out
// [batch, spatial..., feature] and [window..., input feature, output
// feature] (no copy where an operand is laid out so already), the result
// computed [batch, spatial..., feature] (in the result itself where that is
// its layout and type). f32 (which bf16/f16/f32 accumulate in) runs as
// GEMMs over gathered windows (ConvolveF32); f64 and s64 (integers) run a
// contiguous axpy along a group's output features per covered window
// position and input feature (Convolve).
#include <algorithm>

#include "executor_eval.h"
#include "weft/base/error.h"
#include "weft/kernels/simd.h"

namespace weft::runtime::exec {
namespace {

// The accumulator type for operands of `in` and a result of `out`.
PrimitiveType AccumulatorType(PrimitiveType in, PrimitiveType out) {
  if (IsInteger(in)) return PrimitiveType::kS64;
  if (in == PrimitiveType::kF64 || out == PrimitiveType::kF64) return PrimitiveType::kF64;
  return PrimitiveType::kF32;
}

// `t` converted to `acc` and transposed so that dim j of the copy is dim
// perm[j] of `t`: one pass where either step is nothing, else a transpose
// at the source's width and a conversion of its result.
HostTensor PackedCopy(EvalContext& ctx, const HostTensor& t, PrimitiveType acc,
                      const std::vector<int64_t>& perm) {
  std::vector<int64_t> dims;
  bool identity = true;
  for (size_t j = 0; j < perm.size(); ++j) {
    dims.push_back(t.dimensions()[perm[j]]);
    identity = identity && perm[j] == static_cast<int64_t>(j);
  }
  const PrimitiveType from = t.element_type();
  if (identity && from == acc) return t;
  HostTensor packed = ctx.Allocate(Shape(acc, dims));
  if (identity) {
    ConvertElements(from, t.raw_data(), acc, packed.mutable_raw_data(), t.element_count());
    return packed;
  }
  if (from == acc) {
    TransposeBytes(t.raw_data(), t.dimensions(), perm, ByteWidth(acc), packed.mutable_raw_data());
    return packed;
  }
  HostTensor transposed = ctx.Allocate(Shape(from, dims));
  TransposeBytes(t.raw_data(), t.dimensions(), perm, ByteWidth(from),
                 transposed.mutable_raw_data());
  ConvertElements(from, transposed.raw_data(), acc, packed.mutable_raw_data(), t.element_count());
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
  // Feature groups split the input features, batch groups the batch; either
  // splits the output features into `groups` of `per_group`.
  bool feature_groups = false, batch_groups = false;
  int64_t groups = 1, per_group = 0;
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
  g.feature_groups = instr.attrs().feature_group_count > 1;
  g.batch_groups = instr.attrs().batch_group_count > 1;
  g.groups = std::max(instr.attrs().feature_group_count, instr.attrs().batch_group_count);
  g.per_group = g.out_features / g.groups;
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
      // A local: the s64 stores below could alias g's fields.
      const int64_t per_group = g.per_group;
      for (int64_t group = 0; group < g.groups; ++group) {
        const int64_t o0 = group * per_group;
        const int64_t feature0 = g.feature_groups ? group * g.group_in : 0;
        const int64_t in_batch = g.batch_groups ? group * g.out_batch + b : b;
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

// The input position the tap of kernel window index `kernel` (row-major)
// meets at result position `out_index`, or -1 where it lands in padding or
// a hole of the lhs dilation.
int64_t TapInput(const ConvGeometry& g, const std::vector<WindowDim>& window,
                 const std::vector<int64_t>& out_index, int64_t kernel) {
  int64_t input = 0, stride = 1;
  for (int64_t d = g.n - 1; d >= 0; --d) {
    const WindowDim& wd = window[d];
    const int64_t kk = kernel % g.window[d];
    kernel /= g.window[d];
    const int64_t k = wd.window_reversal ? g.window[d] - 1 - kk : kk;
    const int64_t u = out_index[d] * wd.stride - wd.padding_low + k * wd.window_dilation;
    if (u < 0 || u % wd.base_dilation != 0 || u / wd.base_dilation >= g.in_spatial[d]) return -1;
    input += u / wd.base_dilation * stride;
    stride *= g.in_spatial[d];
  }
  return input;
}

// The f32 convolution as GEMMs: per group, a range of result rows (result
// batch x position) times the kernel viewed as [K, group's features] with
// K = (window position, input feature). The rows' K values (im2col, zero
// where a tap is not covered) are gathered one block of simd's K pass at a
// time and multiplied with simd::Primitives::gemm, accumulating over the
// blocks in order, so each result sums its taps in kernel window order and
// each tap's input features in order. A group's features that are not a
// multiple of kPadN go through a zero-padded copy of its kernel columns and
// a padded result block. The per-tap axpy loop of Convolve ran a 3x3
// f32[32,28,28,256] convolution 10.6x slower (docs/PERFORMANCE.md,
// session 41).
void ConvolveF32(const HloInstruction& instr, const ConvGeometry& g, const float* lhs,
                 const float* rhs, float* out, bool use_pool) {
  namespace simd = kernels::simd;
  const std::vector<WindowDim>& window = instr.attrs().window;
  const int64_t K = g.window_positions * g.group_in;
  const int64_t items = g.out_batch * g.out_positions;
  if (items == 0 || g.per_group == 0) return;
  const bool direct = g.per_group % simd::kPadN == 0;
  const int64_t np = simd::PadN(g.per_group);
  // Kernel columns of each group, padded to np (only when not direct).
  std::vector<float> padded;
  if (!direct) {
    padded.assign(static_cast<size_t>(g.groups * K * np), 0.0f);
    for (int64_t group = 0; group < g.groups; ++group) {
      for (int64_t k = 0; k < K; ++k) {
        std::copy_n(rhs + k * g.out_features + group * g.per_group, g.per_group,
                    padded.data() + (group * K + k) * np);
      }
    }
  }
  constexpr int64_t kRows = 64, kBlockK = 256;
  const simd::Primitives& prims = simd::GetPrimitives();
  ParallelRanges(items, 8, use_pool, [&](int64_t begin, int64_t end) {
    std::vector<float> a(static_cast<size_t>(kRows * std::min(K, kBlockK)));
    std::vector<float> c(direct ? 0 : static_cast<size_t>(kRows * np));
    std::vector<int64_t> out_index(g.n);
    // Per row of the block: the result batch and position.
    std::vector<int64_t> row_batch(kRows);
    std::vector<std::vector<int64_t>> row_index(kRows, std::vector<int64_t>(g.n));
    for (int64_t r0 = begin; r0 < end; r0 += kRows) {
      const int64_t rows = std::min(kRows, end - r0);
      for (int64_t r = 0; r < rows; ++r) {
        row_batch[r] = (r0 + r) / g.out_positions;
        int64_t rest = (r0 + r) % g.out_positions;
        for (int64_t d = g.n - 1; d >= 0; --d) {
          row_index[r][d] = rest % g.out_spatial[d];
          rest /= g.out_spatial[d];
        }
      }
      for (int64_t group = 0; group < g.groups; ++group) {
        const int64_t o0 = group * g.per_group;
        const int64_t feature0 = g.feature_groups ? group * g.group_in : 0;
        const float* b = direct ? rhs + o0 : padded.data() + group * K * np;
        const int64_t ldb = direct ? g.out_features : np;
        float* dst = direct ? out + r0 * g.out_features + o0 : c.data();
        const int64_t ldc = direct ? g.out_features : np;
        for (int64_t k0 = 0; k0 < K || k0 == 0; k0 += kBlockK) {
          const int64_t kb = std::min(kBlockK, K - k0);
          for (int64_t r = 0; r < rows; ++r) {
            const int64_t in_batch =
                g.batch_groups ? group * g.out_batch + row_batch[r] : row_batch[r];
            const float* x = lhs + in_batch * g.in_positions * g.features + feature0;
            float* arow = a.data() + r * kb;
            for (int64_t k = k0; k < k0 + kb;) {
              const int64_t kernel = k / g.group_in, c0 = k % g.group_in;
              const int64_t len = std::min(g.group_in - c0, k0 + kb - k);
              const int64_t input = TapInput(g, window, row_index[r], kernel);
              if (input < 0) {
                std::fill_n(arow + (k - k0), len, 0.0f);
              } else {
                std::copy_n(x + input * g.features + c0, len, arow + (k - k0));
              }
              k += len;
            }
          }
          prims.gemm(rows, np, kb, a.data(), kb, b + k0 * ldb, ldb, simd::kPadN, dst, ldc, k0 > 0);
        }
        if (!direct) {
          for (int64_t r = 0; r < rows; ++r) {
            std::copy_n(c.data() + r * np, g.per_group, out + (r0 + r) * g.out_features + o0);
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
  // Result dim j is packed dim out_perm[j]; where that is the identity and
  // the result has the accumulator's type, the loops write the result.
  std::vector<int64_t> out_perm(instr.shape().rank());
  out_perm[dn.output_batch_dimension] = 0;
  out_perm[dn.output_feature_dimension] = g.n + 1;
  for (int64_t k = 0; k < g.n; ++k) out_perm[dn.output_spatial_dimensions[k]] = 1 + k;
  bool identity = true;
  for (size_t j = 0; j < out_perm.size(); ++j) {
    identity = identity && out_perm[j] == static_cast<int64_t>(j);
  }
  const bool in_place = identity && result.element_type() == acc;
  HostTensor packed = in_place ? result : args.ctx().Allocate(Shape(acc, packed_dims));
  const bool pool = args.ctx().options().use_thread_pool;
  switch (acc) {
    case PrimitiveType::kF32:
      ConvolveF32(instr, g, static_cast<const float*>(lhs.raw_data()),
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
  if (in_place) return Value{std::move(result)};
  if (identity) {
    ConvertElements(acc, packed.raw_data(), result.element_type(), result.mutable_raw_data(),
                    result.element_count());
    return Value{std::move(result)};
  }
  // TransposeBytes's perm: out dim i = in dim perm[i].
  if (result.element_type() == acc) {
    TransposeBytes(packed.raw_data(), packed_dims, out_perm, ByteWidth(acc),
                   result.mutable_raw_data());
    return Value{std::move(result)};
  }
  HostTensor laid_out = args.ctx().Allocate(Shape(acc, instr.shape().dimensions()));
  TransposeBytes(packed.raw_data(), packed_dims, out_perm, ByteWidth(acc),
                 laid_out.mutable_raw_data());
  ConvertElements(acc, laid_out.raw_data(), result.element_type(), result.mutable_raw_data(),
                  result.element_count());
  return Value{std::move(result)};
}

}  // namespace weft::runtime::exec
