// convolution in the executor against a float64 reference written here,
// element by element from XLA's definition: strides, padding (negative
// included), lhs and rhs dilation, kernel reversal, feature and batch
// groups, dim_labels in odd orders, 0 to 3 spatial dims, and the element
// types (f32, bf16 in and out, f64, s32).
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "executor_test_util.h"

namespace weft::runtime {
namespace {

using testing::ExpectNear;
using testing::Random;
using testing::Ravel;
using testing::Unravel;

// The result of the module's root convolution, computed in double from its
// operands' values (already rounded to their type).
std::vector<double> Reference(const HloInstruction& conv, const HostTensor& lhs,
                              const HostTensor& rhs) {
  const HloAttributes& a = conv.attrs();
  const ConvolutionDimensionNumbers& dn = a.convolution;
  const std::vector<int64_t>& ld = lhs.dimensions();
  const std::vector<int64_t>& rd = rhs.dimensions();
  const std::vector<int64_t>& od = conv.shape().dimensions();
  const int64_t n = dn.num_spatial_dims();
  const int64_t out_features = od[dn.output_feature_dimension];
  const int64_t per_feature_group = out_features / a.feature_group_count;
  const int64_t per_batch_group = out_features / a.batch_group_count;
  const int64_t group_in = rd[dn.kernel_input_feature_dimension];
  const int64_t out_batch = od[dn.output_batch_dimension];
  std::vector<double> out(conv.shape().ElementsCount(), 0.0);
  std::vector<int64_t> li(ld.size());
  for (int64_t flat = 0; flat < static_cast<int64_t>(out.size()); ++flat) {
    const std::vector<int64_t> oi = Unravel(flat, od);
    const int64_t o = oi[dn.output_feature_dimension];
    double sum = 0;
    for (int64_t r = 0; r < rhs.element_count(); ++r) {
      const std::vector<int64_t> ri = Unravel(r, rd);
      if (ri[dn.kernel_output_feature_dimension] != o) continue;
      li[dn.input_batch_dimension] =
          (o / per_batch_group) * out_batch + oi[dn.output_batch_dimension];
      li[dn.input_feature_dimension] =
          (o / per_feature_group) * group_in + ri[dn.kernel_input_feature_dimension];
      bool inside = true;
      for (int64_t k = 0; k < n && inside; ++k) {
        const WindowDim& w = a.window[k];
        const int64_t kernel = ri[dn.kernel_spatial_dimensions[k]];
        const int64_t tap = w.window_reversal ? w.size - 1 - kernel : kernel;
        const int64_t u = oi[dn.output_spatial_dimensions[k]] * w.stride - w.padding_low +
                          tap * w.window_dilation;
        inside = u >= 0 && u % w.base_dilation == 0 &&
                 u / w.base_dilation < ld[dn.input_spatial_dimensions[k]];
        li[dn.input_spatial_dimensions[k]] = u / std::max<int64_t>(w.base_dilation, 1);
      }
      if (inside) sum += lhs.GetDouble(Ravel(li, ld)) * rhs.GetDouble(r);
    }
    out[flat] = sum;
  }
  return out;
}

// Runs `lhs_shape` (x) `rhs_shape` convolved as `attrs` on random inputs
// and compares with the reference; `result` is the declared result shape
// ("" to let the parser infer it).
void CheckConvolution(const std::string& lhs_shape, const std::string& rhs_shape,
                      const std::string& attrs, const std::string& result = "", double rtol = 2e-6,
                      uint32_t seed = 1) {
  const std::string text = "HloModule m\n\nENTRY e {\n  x = " + lhs_shape +
                           " parameter(0)\n  w = " + rhs_shape +
                           " parameter(1)\n  ROOT c = " + result + (result.empty() ? "" : " ") +
                           "convolution(x, w), " + attrs + "\n}\n";
  SCOPED_TRACE(text);
  std::unique_ptr<HloModule> module = testing::Parse(text);
  std::mt19937 rng(seed);
  const bool ints = IsInteger(ParseShape(lhs_shape).element_type());
  HostTensor lhs = Random(lhs_shape, rng, ints ? -9 : -1, ints ? 9 : 1);
  HostTensor rhs = Random(rhs_shape, rng, ints ? -9 : -1, ints ? 9 : 1);
  const std::vector<HostTensor> out = testing::Run(*module, {lhs, rhs});
  const HloInstruction& conv = *module->entry_computation()->root_instruction();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].shape(), conv.shape());
  const std::vector<double> want = Reference(conv, lhs, rhs);
  // Sums of up to a few hundred products of values in [-1, 1].
  ExpectNear(out[0], want, rtol, ints ? 0 : 10 * rtol, text);
}

TEST(EvalConvolutionTest, PaddingStridesAndLayouts) {
  // NHWC, "same" padding.
  CheckConvolution("f32[2,7,6,5]", "f32[3,3,5,4]",
                   "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f");
  // Strides and uneven padding.
  CheckConvolution("f32[3,9,8,4]", "f32[3,2,4,6]",
                   "window={size=3x2 stride=2x3 pad=0_2x1_0}, dim_labels=b01f_01io->b01f");
  // NCHW with an OIHW kernel; a window wider than the base leaves padding-only taps.
  CheckConvolution("f32[2,3,5,4]", "f32[4,3,4,5]",
                   "window={size=4x5 pad=2_2x2_2}, dim_labels=bf01_oi01->bf01");
  // Spatial dims in reverse order and features first (dims 1 and 0 swapped everywhere).
  CheckConvolution("f32[4,6,5,2]", "f32[3,5,2,4]",
                   "window={size=2x3 stride=1x2 pad=1_0x0_1}, dim_labels=f10b_1o0i->1fb0");
}

TEST(EvalConvolutionTest, NegativePaddingDilationsAndReversal) {
  // Negative padding cuts input elements from the edges.
  CheckConvolution("f32[2,11,4]", "f32[3,4,5]",
                   "window={size=3 pad=-2_-1}, dim_labels=b0f_0io->b0f");
  // lhs dilation (a transposed convolution) and rhs dilation (atrous), with
  // negative padding on one side and reversal on the other dim.
  CheckConvolution("f32[2,3,7,6]", "f32[5,3,3,2]",
                   "window={size=3x2 stride=1x2 pad=-1_2x3_-1 lhs_dilate=2x1 rhs_dilate=2x3 "
                   "rhs_reversal=1x0}, dim_labels=bf01_oi01->bf01",
                   "", 2e-6, 3);
  CheckConvolution("f32[1,9,9,3]", "f32[4,4,3,2]",
                   "window={size=4x4 stride=2x2 pad=2_2x2_2 lhs_dilate=3x2 rhs_reversal=1x1}, "
                   "dim_labels=b01f_01io->b01f");
}

TEST(EvalConvolutionTest, FeatureAndBatchGroups) {
  // Depthwise: one input feature per group, three outputs each.
  CheckConvolution("f32[2,8,8,6]", "f32[3,3,1,18]",
                   "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, "
                   "feature_group_count=6");
  // Two groups of three input features.
  CheckConvolution("f32[3,4,9]", "f32[6,2,3]",
                   "window={size=3 stride=2 pad=1_1}, dim_labels=bf0_oi0->bf0, "
                   "feature_group_count=2");
  // Batch groups (a filter gradient's form): the batch splits into groups
  // matched with groups of output features.
  CheckConvolution("f32[6,7,5]", "f32[3,5,4]",
                   "window={size=3}, dim_labels=b0f_0io->b0f, batch_group_count=2");
  CheckConvolution("f32[8,5,5,3]", "f32[2,2,3,8]",
                   "window={size=2x2 rhs_dilate=2x1}, dim_labels=b01f_01io->b01f, "
                   "batch_group_count=4");
}

TEST(EvalConvolutionTest, OneThreeAndNoSpatialDims) {
  CheckConvolution("f32[3,17,5]", "f32[4,5,7]",
                   "window={size=4 stride=3 pad=2_1 rhs_dilate=2}, dim_labels=b0f_0io->b0f");
  CheckConvolution("f32[2,5,4,6,3]", "f32[2,3,3,3,4]",
                   "window={size=2x3x3 stride=1x2x1 pad=0_1x1_1x1_0}, "
                   "dim_labels=b012f_012io->b012f");
  CheckConvolution("f32[3,5,2,4,6]", "f32[2,5,3,2,2]",
                   "window={size=2x2x3 pad=0_0x1_0x1_1}, dim_labels=b2f10_io210->b2f10");
  // No spatial dims: a matrix product.
  CheckConvolution("f32[5,7]", "f32[7,4]", "dim_labels=bf_io->bf");
}

TEST(EvalConvolutionTest, ShapesAcrossTheGemmBlocks) {
  // f32 runs as GEMMs in blocks of 64 result rows and 256 of K (window
  // positions x input features): 70 rows and K = 7 x 40 = 280 cross both,
  // with 16 output features (the GEMM writes the result in place) and 20
  // (through a padded block); then two groups of 16 with K = 15 x 20 = 300,
  // a reversed kernel and a result laid out otherwise than it is computed.
  CheckConvolution("f32[1,70,40]", "f32[7,40,16]",
                   "window={size=7 pad=3_3}, dim_labels=b0f_0io->b0f");
  CheckConvolution("f32[1,70,40]", "f32[7,40,20]",
                   "window={size=7 stride=1 pad=4_2}, dim_labels=b0f_0io->b0f");
  CheckConvolution("f32[1,40,70]", "f32[32,20,15]",
                   "window={size=15 pad=7_7 rhs_reversal=1}, dim_labels=bf0_oi0->b0f, "
                   "feature_group_count=2");
}

TEST(EvalConvolutionTest, ElementTypes) {
  // bf16 operands, f32 accumulation, f32 and bf16 results.
  CheckConvolution("bf16[2,6,6,8]", "bf16[3,3,8,4]",
                   "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f", "f32[2,6,6,4]");
  CheckConvolution("bf16[2,6,6,8]", "bf16[3,3,8,4]",
                   "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f", "", 8e-3);
  CheckConvolution("f64[2,9,3]", "f64[3,3,5]",
                   "window={size=3 stride=2 lhs_dilate=2}, dim_labels=b0f_0io->b0f", "", 1e-14);
  CheckConvolution("s32[2,6,3]", "s32[2,3,4]", "window={size=2 pad=1_0}, dim_labels=b0f_0io->b0f",
                   "", 0);
}

TEST(EvalConvolutionTest, RepeatedRunsGiveTheSameBits) {
  const std::string text = R"(HloModule m
ENTRY e {
  x = f32[4,12,12,16] parameter(0)
  w = f32[3,3,16,8] parameter(1)
  ROOT c = f32[4,12,12,8] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
})";
  std::mt19937 rng(7);
  std::vector<HostTensor> in = {Random("f32[4,12,12,16]", rng), Random("f32[3,3,16,8]", rng)};
  std::unique_ptr<HloModule> module = testing::Parse(text);
  Executor executor(*module);
  const std::vector<HostTensor> first = executor.Run(in);
  const std::vector<HostTensor> second = executor.Run(in);
  ASSERT_EQ(first[0].byte_size(), second[0].byte_size());
  EXPECT_EQ(0, std::memcmp(first[0].raw_data(), second[0].raw_data(), first[0].byte_size()));
}

}  // namespace
}  // namespace weft::runtime
