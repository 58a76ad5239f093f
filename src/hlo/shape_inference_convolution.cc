// Shape rule of convolution (XLA's ConvGeneralDilated): the result has the
// input's batch over batch_group_count, the kernel's output features, and
// per spatial dim the number of positions the window takes over the padded,
// dilated input.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <numeric>

#include "shape_inference_internal.h"
#include "weft/base/error.h"

namespace weft::hlo {
namespace {

// `dims` (two named dims, then spatial) are a permutation of [0, rank).
void CheckPermutation(int64_t a, int64_t b, const std::vector<int64_t>& spatial, int64_t rank,
                      std::string_view what, const ConvolutionDimensionNumbers& dn) {
  std::vector<int64_t> all{a, b};
  all.insert(all.end(), spatial.begin(), spatial.end());
  std::vector<int64_t> sorted = all;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> expected(rank);
  std::iota(expected.begin(), expected.end(), 0);
  WEFT_CHECK(sorted == expected,
             "convolution dim_labels {}: the {} dims {} must name each of the {} dims once",
             ConvolutionDimLabelsString(dn), what, fmt::join(all, ","), rank);
}

}  // namespace

int64_t WindowOutputSize(int64_t base, const WindowDim& w) {
  const int64_t dilated = base == 0 ? 0 : (base - 1) * w.base_dilation + 1;
  const int64_t padded = dilated + w.padding_low + w.padding_high;
  const int64_t span = (w.size - 1) * w.window_dilation + 1;
  return padded < span ? 0 : (padded - span) / w.stride + 1;
}

Shape InferConvolution(const HloInstruction& instr) {
  WEFT_CHECK(instr.operand_count() == 2, "convolution takes 2 operands (input, kernel), got {}",
             instr.operand_count());
  const Shape& lhs = instr.operand(0)->shape();
  const Shape& rhs = instr.operand(1)->shape();
  WEFT_CHECK(lhs.IsArray() && rhs.IsArray(), "convolution operands must be arrays, got {} and {}",
             lhs.ToString(), rhs.ToString());
  WEFT_CHECK(lhs.element_type() == rhs.element_type(),
             "convolution operands must have one element type, got {} and {}", lhs.ToString(),
             rhs.ToString());
  WEFT_CHECK(
      lhs.element_type() != PrimitiveType::kPred && lhs.element_type() != PrimitiveType::kToken,
      "convolution needs numbers, got {}", lhs.ToString());
  const HloAttributes& a = instr.attrs();
  const ConvolutionDimensionNumbers& dn = a.convolution;
  const int64_t fgc = a.feature_group_count, bgc = a.batch_group_count;
  WEFT_CHECK(fgc >= 1 && bgc >= 1,
             "convolution feature_group_count ({}) and batch_group_count ({}) must be >= 1", fgc,
             bgc);
  WEFT_CHECK(fgc == 1 || bgc == 1,
             "convolution cannot have both feature_group_count {} and batch_group_count {} above 1",
             fgc, bgc);
  const int64_t n = dn.num_spatial_dims();
  WEFT_CHECK(static_cast<int64_t>(dn.kernel_spatial_dimensions.size()) == n &&
                 static_cast<int64_t>(dn.output_spatial_dimensions.size()) == n,
             "convolution dim_labels give {}, {} and {} spatial dims to input, kernel and output",
             n, dn.kernel_spatial_dimensions.size(), dn.output_spatial_dimensions.size());
  const int64_t rank = n + 2;
  WEFT_CHECK(lhs.rank() == rank && rhs.rank() == rank,
             "convolution dim_labels {} describe rank-{} operands, got {} and {}",
             ConvolutionDimLabelsString(dn), rank, lhs.ToString(), rhs.ToString());
  CheckPermutation(dn.input_batch_dimension, dn.input_feature_dimension,
                   dn.input_spatial_dimensions, rank, "input", dn);
  CheckPermutation(dn.kernel_input_feature_dimension, dn.kernel_output_feature_dimension,
                   dn.kernel_spatial_dimensions, rank, "kernel", dn);
  CheckPermutation(dn.output_batch_dimension, dn.output_feature_dimension,
                   dn.output_spatial_dimensions, rank, "output", dn);
  WEFT_CHECK(static_cast<int64_t>(a.window.size()) == n,
             "convolution window has {} dims but dim_labels {} have {} spatial dims",
             a.window.size(), ConvolutionDimLabelsString(dn), n);

  const int64_t batch = lhs.dimensions(dn.input_batch_dimension);
  const int64_t features = lhs.dimensions(dn.input_feature_dimension);
  const int64_t kernel_in = rhs.dimensions(dn.kernel_input_feature_dimension);
  const int64_t kernel_out = rhs.dimensions(dn.kernel_output_feature_dimension);
  WEFT_CHECK(features % fgc == 0 && features / fgc == kernel_in,
             "convolution input features ({}, dim {} of {}) over feature_group_count {} must equal "
             "the kernel's input features ({}, dim {} of {})",
             features, dn.input_feature_dimension, lhs.ToString(), fgc, kernel_in,
             dn.kernel_input_feature_dimension, rhs.ToString());
  WEFT_CHECK(kernel_out % fgc == 0,
             "convolution kernel output features ({}) must be a multiple of feature_group_count {}",
             kernel_out, fgc);
  WEFT_CHECK(kernel_out % bgc == 0,
             "convolution kernel output features ({}) must be a multiple of batch_group_count {}",
             kernel_out, bgc);
  WEFT_CHECK(
      batch % bgc == 0,
      "convolution input batch ({}, dim {} of {}) must be a multiple of batch_group_count {}",
      batch, dn.input_batch_dimension, lhs.ToString(), bgc);

  std::vector<int64_t> out(rank, 0);
  out[dn.output_batch_dimension] = batch / bgc;
  out[dn.output_feature_dimension] = kernel_out;
  for (int64_t k = 0; k < n; ++k) {
    const WindowDim& w = a.window[k];
    WEFT_CHECK(w.size >= 1 && w.stride >= 1 && w.base_dilation >= 1 && w.window_dilation >= 1,
               "convolution window dim {}: size, stride and dilations must be >= 1", k);
    const int64_t kernel_size = rhs.dimensions(dn.kernel_spatial_dimensions[k]);
    WEFT_CHECK(kernel_size == w.size,
               "convolution window size {} of spatial dim {} differs from the kernel's {} (dim {} "
               "of {})",
               w.size, k, kernel_size, dn.kernel_spatial_dimensions[k], rhs.ToString());
    out[dn.output_spatial_dimensions[k]] =
        WindowOutputSize(lhs.dimensions(dn.input_spatial_dimensions[k]), w);
  }
  // The result type may be wider (bf16 x bf16 -> f32), as for dot.
  PrimitiveType type = lhs.element_type();
  if (instr.shape().IsArray()) type = instr.shape().element_type();
  return Shape(type, out);
}

}  // namespace weft::hlo
