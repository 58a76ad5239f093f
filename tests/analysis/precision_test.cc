// The precision policy: what a buffer and the optimizer state cost.
#include "weft/analysis/precision.h"

#include <gtest/gtest.h>

#include "weft/base/error.h"

namespace weft::analysis {
namespace {

TEST(PrecisionTest, FloatsShrinkUnderBf16AndIntegersKeepTheirSize) {
  const Shape f(PrimitiveType::kF32, {126, 4, 8});
  const Shape s(PrimitiveType::kS32, {126, 4, 8});
  EXPECT_EQ(PlannedBytes(f, Precision::kF32), 126 * 32 * 4);
  EXPECT_EQ(PlannedBytes(f, Precision::kBf16), 126 * 32 * 2);
  EXPECT_EQ(PlannedBytes(s, Precision::kBf16), 126 * 32 * 4);
  EXPECT_EQ(PlannedBytes(Shape::Tuple({f, s}), Precision::kBf16), 126 * 32 * 6);
  EXPECT_EQ(ElementBytes(PrimitiveType::kPred, Precision::kBf16), 1);
  // 2 (weight) + 2 (gradient) + 12 = 16 bytes per parameter under bf16.
  EXPECT_EQ(OptimizerBytesPerElement(Precision::kBf16), 12);
  EXPECT_EQ(OptimizerBytesPerElement(Precision::kF32), 8);
}

TEST(PrecisionTest, ParsesNamesAndRejectsOthers) {
  EXPECT_EQ(ParsePrecision("bf16", "--precision"), Precision::kBf16);
  EXPECT_EQ(ParsePrecision("f32", "--precision"), Precision::kF32);
  EXPECT_EQ(PrecisionName(Precision::kBf16), "bf16");
  try {
    ParsePrecision("fp8", "--precision");
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "--precision 'fp8': expected bf16 or f32");
  }
}

}  // namespace
}  // namespace weft::analysis
