#include <gtest/gtest.h>

#include <string>

#include "error_of.h"
#include "weft/hlo/parser.h"

namespace weft {
namespace {

using weft::testing::Mentions;

// The convolution `line` in an entry with lhs `lhs` and rhs `rhs`, parsed:
// its result shape, or "error: ..." with the parser's message.
std::string Conv(const std::string& lhs, const std::string& rhs, const std::string& line) {
  const std::string text = "HloModule m\n\nENTRY e {\n  l = " + lhs +
                           " parameter(0)\n  r = " + rhs + " parameter(1)\n  ROOT c = " + line +
                           "\n}\n";
  try {
    std::unique_ptr<HloModule> m = ParseHloModule(text);
    return m->entry_computation()->root_instruction()->shape().ToString();
  } catch (const Error& e) {
    return std::string("error: ") + e.what();
  }
}

TEST(ShapeInferenceConvolutionTest, ResultShapes) {
  // Same padding, NHWC.
  EXPECT_EQ(Conv("f32[8,32,32,16]", "f32[3,3,16,64]",
                 "convolution(l, r), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f"),
            "f32[8,32,32,64]");
  // Stride 2, no padding: (32 - 3) / 2 + 1 = 15.
  EXPECT_EQ(Conv("f32[8,32,32,16]", "f32[3,3,16,64]",
                 "convolution(l, r), window={size=3x3 stride=2x2}, dim_labels=b01f_01io->b01f"),
            "f32[8,15,15,64]");
  // NCHW with the kernel OIHW; lhs and rhs dilation; negative padding.
  // dim 0: base (10-1)*2+1 = 19, pad -1+0 -> 18, window (3-1)*2+1 = 5 -> 14.
  // dim 1: base 7, pad 2+(-1) -> 8, window 2 -> 7.
  EXPECT_EQ(Conv("f32[2,4,10,7]", "f32[6,4,3,2]",
                 "convolution(l, r), window={size=3x2 pad=-1_0x2_-1 lhs_dilate=2x1 "
                 "rhs_dilate=2x1}, dim_labels=bf01_oi01->bf01"),
            "f32[2,6,14,7]");
  // Feature groups (depthwise): 12 input features in 4 groups of 3.
  EXPECT_EQ(Conv("f32[2,9,12]", "f32[3,3,8]",
                 "convolution(l, r), window={size=3}, dim_labels=b0f_0io->b0f, "
                 "feature_group_count=4"),
            "f32[2,7,8]");
  // Batch groups: the result batch is the input's over the count.
  EXPECT_EQ(Conv("f32[6,9,5]", "f32[3,5,4]",
                 "convolution(l, r), window={size=3}, dim_labels=b0f_0io->b0f, "
                 "batch_group_count=2"),
            "f32[3,7,4]");
  // No spatial dims: a dot; the result type may be given wider.
  EXPECT_EQ(Conv("bf16[4,6]", "bf16[6,5]", "f32[4,5] convolution(l, r), dim_labels=bf_io->bf"),
            "f32[4,5]");
  // A window larger than the padded base leaves no positions.
  EXPECT_EQ(Conv("f32[1,2,3]", "f32[5,3,1]",
                 "convolution(l, r), window={size=5}, dim_labels=b0f_0io->b0f"),
            "f32[1,0,1]");
}

TEST(ShapeInferenceConvolutionTest, InconsistentInputsAreErrors) {
  const std::string lhs = "f32[8,32,32,16]", rhs = "f32[3,3,16,64]";
  auto expect = [&](const std::string& l, const std::string& r, const std::string& line,
                    const std::string& part) {
    const std::string got = Conv(l, r, line);
    EXPECT_TRUE(Mentions(got, part)) << line << "\n  gave: " << got;
  };
  expect(lhs, rhs, "f32[8,32,32,64] convolution(l, r), window={size=3x3}",
         "missing attribute dim_labels=");
  expect(lhs, rhs,
         "f32[8,32,32,64] convolution(l, r), window={size=3x3 pad=1_1x1_1}, "
         "dim_labels=b01f_01io->b01f",
         "");  // fine
  expect(lhs, rhs,
         "f32[8,30,30,64] convolution(l, r), window={size=3x3 pad=1_1x1_1}, "
         "dim_labels=b01f_01io->b01f",
         "does not match f32[8,32,32,64]");
  expect(lhs, rhs, "convolution(l, r), window={size=3x2}, dim_labels=b01f_01io->b01f",
         "window size 2 of spatial dim 1 differs from the kernel's 3");
  expect(lhs, rhs, "convolution(l, r), window={size=3}, dim_labels=b01f_01io->b01f",
         "window has 1 dims but dim_labels b01f_01io->b01f have 2 spatial dims");
  expect(lhs, "f32[3,3,8,64]", "convolution(l, r), window={size=3x3}, dim_labels=b01f_01io->b01f",
         "input features (16, dim 3 of f32[8,32,32,16]) over feature_group_count 1 must equal "
         "the kernel's input features (8");
  expect(lhs, "f32[3,3,8,64]",
         "convolution(l, r), window={size=3x3}, dim_labels=b01f_01io->b01f, "
         "feature_group_count=2",
         "");
  expect(lhs, "f32[3,3,8,63]",
         "convolution(l, r), window={size=3x3}, dim_labels=b01f_01io->b01f, "
         "feature_group_count=2",
         "multiple of feature_group_count 2");
  expect(lhs, "f32[3,3,16,66]",
         "convolution(l, r), window={size=3x3}, dim_labels=b01f_01io->b01f, batch_group_count=3",
         "input batch (8, dim 0 of f32[8,32,32,16]) must be a multiple of batch_group_count 3");
  expect(lhs, "f32[3,3,16,60]",
         "convolution(l, r), window={size=3x3}, dim_labels=b01f_01io->b01f, batch_group_count=8",
         "kernel output features (60) must be a multiple of batch_group_count 8");
  expect(lhs, "f32[3,3,8,64]",
         "convolution(l, r), window={size=3x3}, dim_labels=b01f_01io->b01f, "
         "feature_group_count=2, batch_group_count=2",
         "cannot have both");
  expect(lhs, rhs,
         "convolution(l, r), window={size=3x3}, dim_labels=b01f_01io->b01f, "
         "feature_group_count=0",
         "feature_group_count must be >= 1");
  expect("f32[8,32,16]", rhs, "convolution(l, r), window={size=3x3}, dim_labels=b01f_01io->b01f",
         "describe rank-4 operands");
  expect(lhs, "bf16[3,3,16,64]", "convolution(l, r), window={size=3x3}, dim_labels=b01f_01io->b01f",
         "must have one element type");
  expect(lhs, rhs, "convolution(l, r), window={size=3x3 stride=0x1}, dim_labels=b01f_01io->b01f",
         "size, stride and dilations must be >= 1");
  expect(lhs, rhs, "convolution(l, r), window={size=3x3}, dim_labels=b01f_01io->b01",
         "must have one rank");
  expect(lhs, rhs,
         "convolution(l, r), window={size=3x3 rhs_reversal=2x0}, dim_labels=b01f_01io->b01f",
         "rhs_reversal is 0 or 1");
  expect("pred[8,32,32,16]", "pred[3,3,16,64]",
         "convolution(l, r), window={size=3x3}, dim_labels=b01f_01io->b01f", "needs numbers");
}

}  // namespace
}  // namespace weft
