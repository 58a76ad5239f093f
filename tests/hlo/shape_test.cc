#include "weft/hlo/shape.h"

#include <gtest/gtest.h>

#include <cmath>

#include "weft/base/error.h"

namespace weft {
namespace {

TEST(ShapeTest, ArraysAndTuples) {
  Shape a(PrimitiveType::kBF16, {4, 8});
  EXPECT_TRUE(a.IsArray());
  EXPECT_EQ(a.rank(), 2);
  EXPECT_EQ(a.ElementsCount(), 32);
  EXPECT_EQ(a.ByteSize(), 64);
  EXPECT_EQ(a.ToString(), "bf16[4,8]");
  EXPECT_EQ(a.ToString(true), "bf16[4,8]{1,0}");
  EXPECT_EQ(Shape::Scalar(PrimitiveType::kPred).ToString(true), "pred[]");
  Shape t = Shape::Tuple({a, Shape::Tuple({Shape::Scalar(PrimitiveType::kS32)})});
  EXPECT_TRUE(t.IsTuple());
  EXPECT_EQ(t.ToString(), "(bf16[4,8], (s32[]))");
  EXPECT_EQ(t.LeafCount(), 2);
  EXPECT_EQ(t.Leaves()[1], Shape::Scalar(PrimitiveType::kS32));
  EXPECT_EQ(t.ByteSize(), 68);
  EXPECT_EQ(a.WithElementType(PrimitiveType::kF32).ToString(), "f32[4,8]");
  EXPECT_EQ(a.WithDimensions({2}).ToString(), "bf16[2]");
  EXPECT_NE(a, a.WithDimensions({8, 4}));
  EXPECT_FALSE(Shape().IsValid());
  EXPECT_THROW(Shape(PrimitiveType::kF32, {-1}), Error);
  EXPECT_THROW(t.ElementsCount(), Error);
}

TEST(ShapeTest, TypeNames) {
  for (PrimitiveType t :
       {PrimitiveType::kPred, PrimitiveType::kS32, PrimitiveType::kS64, PrimitiveType::kU32,
        PrimitiveType::kF16, PrimitiveType::kBF16, PrimitiveType::kF32}) {
    EXPECT_EQ(PrimitiveTypeFromName(PrimitiveTypeName(t)), t);
  }
  EXPECT_FALSE(PrimitiveTypeFromName("f64").has_value());
  EXPECT_TRUE(IsFloatingPoint(PrimitiveType::kBF16));
  EXPECT_TRUE(IsInteger(PrimitiveType::kU32));
  EXPECT_FALSE(IsSignedInteger(PrimitiveType::kU32));
  EXPECT_EQ(ByteWidth(PrimitiveType::kF16), 2);
}

TEST(ShapeTest, RoundToType) {
  EXPECT_EQ(RoundToType(0.1, PrimitiveType::kF32), static_cast<double>(0.1f));
  EXPECT_EQ(RoundToType(0.1, PrimitiveType::kBF16), 0.10009765625);
  EXPECT_EQ(RoundToType(1.0 + 1.0 / 256, PrimitiveType::kBF16), 1.0);  // tie to even
  EXPECT_EQ(RoundToType(0.1, PrimitiveType::kF16), 0.0999755859375);
  EXPECT_EQ(RoundToType(70000, PrimitiveType::kF16), INFINITY);
  EXPECT_EQ(RoundToType(65504, PrimitiveType::kF16), 65504);
  EXPECT_EQ(RoundToType(std::ldexp(1.0, -24), PrimitiveType::kF16), std::ldexp(1.0, -24));
  EXPECT_TRUE(std::isnan(RoundToType(NAN, PrimitiveType::kBF16)));
  EXPECT_EQ(RoundToType(3, PrimitiveType::kS32), 3);
}

}  // namespace
}  // namespace weft
