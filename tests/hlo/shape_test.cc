#include "weft/hlo/shape.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "weft/base/error.h"

namespace weft {
namespace {

// Expects `expr` to throw weft::Error whose message contains `part`.
#define EXPECT_THAT_ERROR(expr, part)                                             \
  do {                                                                            \
    try {                                                                         \
      (void)(expr);                                                               \
      ADD_FAILURE() << #expr << " did not throw";                                 \
    } catch (const Error& e) {                                                    \
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what(); \
    }                                                                             \
  } while (0)

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

// No Shape holds a size that overflows int64: the element count (the
// product of the non-zero dims, so every stride fits too) and the byte size
// are checked when the shape is made.
TEST(ShapeTest, SizesThatOverflowInt64AreRefused) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  // The element count wraps: 3 * 6148914691236517206 = 2^64 + 2.
  EXPECT_THAT_ERROR(Shape(PrimitiveType::kS32, {3, 6148914691236517206}),
                    "shape s32[3,6148914691236517206] is too large: the product of its "
                    "dimensions overflows int64");
  // The element count fits, the byte size does not (2^61 x 4 bytes).
  EXPECT_THAT_ERROR(Shape(PrimitiveType::kF32, {int64_t{1} << 61}),
                    "2305843009213693952 elements of 4 bytes overflow int64");
  EXPECT_EQ(Shape(PrimitiveType::kF32, {(int64_t{1} << 61) - 1}).ByteSize(),
            ((int64_t{1} << 61) - 1) * 4);
  EXPECT_EQ(Shape(PrimitiveType::kPred, {kMax}).ByteSize(), kMax);
  EXPECT_THROW(Shape(PrimitiveType::kS64, {kMax}), Error);
  // A zero dim makes no elements, but the others must still multiply
  // without overflow (their strides are computed).
  EXPECT_EQ(Shape(PrimitiveType::kF32, {0, 1 << 30, 1 << 30}).ElementsCount(), 0);
  EXPECT_THAT_ERROR(Shape(PrimitiveType::kPred, {int64_t{1} << 32, int64_t{1} << 32, 0}),
                    "the product of its non-zero dimensions overflows int64");
  // Every way of making an array shape goes through the check.
  const Shape ok(PrimitiveType::kS32, {3, 4});
  EXPECT_THROW(ok.WithDimensions({3, 6148914691236517206}), Error);
  EXPECT_THROW(Shape(PrimitiveType::kPred, {kMax}).WithElementType(PrimitiveType::kF32), Error);
  // Tuples: the sum of the elements' bytes must fit too.
  const Shape half(PrimitiveType::kPred, {int64_t{1} << 62});
  EXPECT_EQ(Shape::Tuple({half, ok}).ByteSize(), (int64_t{1} << 62) + 48);
  EXPECT_THAT_ERROR(Shape::Tuple({half, half}), "tuple of 2 elements is too large");
  EXPECT_THROW(Shape::Tuple({ok, Shape::Tuple({half, half})}), Error);
  // The reason, for callers that report it at a location (the parser).
  EXPECT_FALSE(ArrayShapeProblem(PrimitiveType::kF32, std::vector<int64_t>{4, 8}).has_value());
  EXPECT_TRUE(ArrayShapeProblem(PrimitiveType::kF32, std::vector<int64_t>{-1}).has_value());
  EXPECT_TRUE(
      ArrayShapeProblem(PrimitiveType::kBF16, std::vector<int64_t>{kMax / 2 + 1}).has_value());
  EXPECT_EQ(CheckedMul(kMax, 2), std::nullopt);
  EXPECT_EQ(CheckedAdd(kMax, 1), std::nullopt);
  EXPECT_EQ(CheckedAdd(kMax - 1, 1), kMax);
}

TEST(ShapeTest, RoundToType) {
  EXPECT_EQ(RoundToType(0.1, PrimitiveType::kF64), 0.1);
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
