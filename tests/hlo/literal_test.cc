#include "weft/hlo/literal.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "weft/base/error.h"

namespace weft {
namespace {

TEST(LiteralTest, PrintsXlaSyntax) {
  EXPECT_EQ(Literal::Scalar(PrimitiveType::kF32, 1.5).ToString(), "1.5");
  EXPECT_EQ(Literal::Scalar(PrimitiveType::kF32, 2).ToString(), "2");
  EXPECT_EQ(Literal::Scalar(PrimitiveType::kF32, -INFINITY).ToString(), "-inf");
  EXPECT_EQ(Literal::Scalar(PrimitiveType::kF32, NAN).ToString(), "nan");
  EXPECT_EQ(Literal::Scalar(PrimitiveType::kPred, 1).ToString(), "true");
  EXPECT_EQ(Literal::Scalar(PrimitiveType::kBF16, 0.1).ToString(), "0.1");
  EXPECT_EQ(Literal(Shape(PrimitiveType::kS32, {3}), {1, -2, 3}).ToString(), "{1, -2, 3}");
  EXPECT_EQ(Literal(Shape(PrimitiveType::kF32, {2, 2}), {1, 2, 3, 4}).ToString(),
            "{ { 1, 2 }, { 3, 4 } }");
  EXPECT_EQ(Literal(Shape(PrimitiveType::kF32, {0}), {}).ToString(), "{}");
}

TEST(LiteralTest, ValuesAreRoundedOrChecked) {
  Literal f(Shape(PrimitiveType::kF16, {2}), {0.1, 65504});
  EXPECT_EQ(f.Get(0), 0.0999755859375);
  EXPECT_EQ(f.size(), 2);
  Literal big = Literal::FromInts(Shape::Scalar(PrimitiveType::kS64), {(int64_t{1} << 62) + 1});
  EXPECT_EQ(big.GetInt(0), (int64_t{1} << 62) + 1);
  EXPECT_EQ(big.ToString(), "4611686018427387905");
  EXPECT_THROW(Literal::Scalar(PrimitiveType::kS32, 1.5), Error);
  EXPECT_THROW(Literal::Scalar(PrimitiveType::kU32, -1), Error);
  EXPECT_THROW(Literal::Scalar(PrimitiveType::kPred, 2), Error);
  EXPECT_THROW(Literal(Shape(PrimitiveType::kF32, {3}), {1, 2}), Error);
  EXPECT_THROW(f.GetInt(0), Error);
}

TEST(LiteralTest, U64ValuesAboveTwoToThe63AreKeptAsTheirBits) {
  const uint64_t max = ~uint64_t{0}, above = (uint64_t{1} << 63) + 3;
  Literal u = Literal::FromInts(Shape(PrimitiveType::kU64, {2}),
                                {static_cast<int64_t>(max), static_cast<int64_t>(above)});
  EXPECT_EQ(static_cast<uint64_t>(u.GetInt(0)), max);
  EXPECT_EQ(static_cast<uint64_t>(u.GetInt(1)), above);
  EXPECT_EQ(u.ToString(), "{18446744073709551615, 9223372036854775811}");
  EXPECT_EQ(u.Get(0), 0x1p64);  // rounded: doubles hold 53 bits
  // Through doubles: exact where the double is.
  EXPECT_EQ(static_cast<uint64_t>(Literal::Scalar(PrimitiveType::kU64, 0x1p63).GetInt(0)),
            uint64_t{1} << 63);
  EXPECT_THROW(Literal::Scalar(PrimitiveType::kU64, -1), Error);
  EXPECT_THROW(Literal::Scalar(PrimitiveType::kU64, 0x1p64), Error);
  EXPECT_THROW(Literal::Scalar(PrimitiveType::kS64, 0x1p63), Error);
  const int64_t min = std::numeric_limits<int64_t>::min();
  EXPECT_EQ(Literal::FromInts(Shape::Scalar(PrimitiveType::kS64), {min}).ToString(),
            "-9223372036854775808");
}

}  // namespace
}  // namespace weft
