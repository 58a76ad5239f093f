// convolution vjp against central differences: strides, padding (negative
// included), both dilations, reversal, feature groups and dims in odd
// orders; batch groups (as JAX's filter gradients emit them), with dims in
// odd orders too.
#include <gtest/gtest.h>

#include "grad_check.h"

namespace weft {
namespace {

using testing::CheckGradients;
using testing::LossModule;
using testing::RandomTensor;

struct Case {
  const char* name;
  const char* a;
  const char* b;
  const char* r;      // the result shape
  const char* attrs;  // the convolution's attributes
};

const Case kCases[] = {
    {"nhwc_same", "f32[2,5,4,3]", "f32[3,3,3,4]", "f32[2,5,4,4]",
     "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f"},
    {"strided_uneven_padding", "f32[2,7,6,2]", "f32[3,2,2,3]", "f32[2,4,2,3]",
     "window={size=3x2 stride=2x3 pad=0_2x1_0}, dim_labels=b01f_01io->b01f"},
    {"dilations_negative_padding_reversal", "f32[2,3,6,5]", "f32[4,3,3,2]", "f32[2,4,8,2]",
     "window={size=3x2 stride=1x2 pad=-1_2x3_-1 lhs_dilate=2x1 rhs_dilate=2x3 rhs_reversal=1x0}, "
     "dim_labels=bf01_oi01->bf01"},
    {"depthwise", "f32[2,6,6,4]", "f32[3,3,1,8]", "f32[2,6,6,8]",
     "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, feature_group_count=4"},
    {"two_groups_strided", "f32[3,4,9]", "f32[6,2,3]", "f32[3,6,5]",
     "window={size=3 stride=2 pad=1_1}, dim_labels=bf0_oi0->bf0, feature_group_count=2"},
    {"transposed_1d", "f32[2,5,3]", "f32[3,3,4]", "f32[2,7,4]",
     "window={size=3 stride=2 pad=2_1 lhs_dilate=3}, dim_labels=b0f_0io->b0f"},
    {"odd_labels", "f32[4,6,5,2]", "f32[3,5,2,4]", "f32[3,5,2,5]",
     "window={size=2x3 stride=1x2 pad=1_0x0_1}, dim_labels=f10b_1o0i->1fb0"},
    {"batch_groups", "f32[4,5,3]", "f32[2,3,4]", "f32[2,4,4]",
     "window={size=2}, dim_labels=b0f_0io->b0f, batch_group_count=2"},
    {"batch_groups_strided", "f32[6,2,9]", "f32[6,2,3]", "f32[2,6,5]",
     "window={size=3 stride=2 pad=1_1}, dim_labels=bf0_oi0->bf0, batch_group_count=3"},
    {"batch_groups_odd_labels", "f32[2,4,5,6]", "f32[3,2,2,2]", "f32[4,7,2,3]",
     "window={size=2x2 pad=1_0x0_0 lhs_dilate=1x2 rhs_dilate=1x2 rhs_reversal=0x1}, "
     "dim_labels=f01b_o01i->01bf, batch_group_count=3"},
};

class ConvolutionVjpTest : public ::testing::TestWithParam<Case> {};

TEST_P(ConvolutionVjpTest, MatchesFiniteDifferences) {
  const Case& c = GetParam();
  const std::string body = std::string("  a = ") + c.a + " parameter(0)\n  b = " + c.b +
                           " parameter(1)\n  r = " + c.r + " convolution(a, b), " + c.attrs;
  auto module = ParseHloModule(LossModule(body, c.r, 2));
  std::mt19937 rng(11);
  const HloComputation* e = module->entry_computation();
  std::vector<runtime::HostTensor> inputs;
  for (int i = 0; i < 3; ++i) {
    inputs.push_back(RandomTensor(e->parameter_instruction(i)->shape(), rng));
  }
  GradOptions options;
  options.wrt = {0, 1};
  auto r = CheckGradients(*module, inputs, options);
  EXPECT_LT(r.max_rel_error, 2e-3) << c.name;
}

INSTANTIATE_TEST_SUITE_P(Windows, ConvolutionVjpTest, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace weft
