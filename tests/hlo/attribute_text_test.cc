#include "attribute_text.h"

#include <gtest/gtest.h>

#include <functional>
#include <limits>

#include "error_of.h"
#include "weft/base/error.h"

namespace weft::hlo {
namespace {

using testing::ErrorOf;

TEST(AttributeTextTest, SlicesPaddingAndPairs) {
  TextCursor cur("{[0:4], [2:8:2]} 1_2x0_0_3 {{0,1},{1,0}} {}", "");
  std::vector<SliceDim> slice;
  ParseSlice(cur, slice);
  ASSERT_EQ(slice.size(), 2u);
  EXPECT_EQ(slice[1].start, 2);
  EXPECT_EQ(slice[1].limit, 8);
  EXPECT_EQ(slice[1].stride, 2);
  std::vector<PadDim> padding;
  ParsePadding(cur, padding);
  ASSERT_EQ(padding.size(), 2u);
  EXPECT_EQ(padding[0].low, 1);
  EXPECT_EQ(padding[0].high, 2);
  EXPECT_EQ(padding[1].interior, 3);
  const auto pairs = ParsePairs(cur);
  ASSERT_EQ(pairs.size(), 2u);
  EXPECT_EQ(pairs[1], (std::pair<int64_t, int64_t>{1, 0}));
  EXPECT_TRUE(ParsePairs(cur).empty());
}

TEST(AttributeTextTest, WindowsAndTheirErrors) {
  TextCursor cur("{size=3x2 stride=2x1 pad=0_1x1_1 lhs_dilate=1x2 rhs_dilate=2x1}", "");
  const std::vector<WindowDim> window = ParseWindow(cur);
  ASSERT_EQ(window.size(), 2u);
  EXPECT_EQ(window[0].size, 3);
  EXPECT_EQ(window[0].stride, 2);
  EXPECT_EQ(window[0].padding_high, 1);
  EXPECT_EQ(window[1].base_dilation, 2);
  EXPECT_EQ(window[0].window_dilation, 2);
  TextCursor mismatch("{size=3x2 stride=2}", "");
  EXPECT_EQ(ErrorOf([&] { ParseWindow(mismatch); }),
            "1:11: window stride has 1 dims but an earlier part has 2");
  TextCursor reversed("{size=3x2 rhs_reversal=1x0}", "");
  const std::vector<WindowDim> reversed_window = ParseWindow(reversed);
  ASSERT_EQ(reversed_window.size(), 2u);
  EXPECT_TRUE(reversed_window[0].window_reversal);
  EXPECT_FALSE(reversed_window[1].window_reversal);
  TextCursor bad_reversal("{size=3 rhs_reversal=2}", "");
  EXPECT_NE(ErrorOf([&] { ParseWindow(bad_reversal); }).find("rhs_reversal is 0 or 1 per dim"),
            std::string::npos);
  TextCursor unknown("{size=3 flip=1}", "");
  EXPECT_NE(ErrorOf([&] { ParseWindow(unknown); }).find("unknown window part 'flip'"),
            std::string::npos);
}

TEST(AttributeTextTest, LiteralsReadIntegersExactly) {
  TextCursor cur(
      "{ { 1, -9223372036854775808 }, { 3, 9007199254740993 } } 18446744073709551615 "
      "{1.5, -inf} -2",
      "");
  const Literal s64 = ParseLiteral(cur, Shape(PrimitiveType::kS64, {2, 2}));
  EXPECT_EQ(s64.GetInt(1), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(s64.GetInt(3), (int64_t{1} << 53) + 1);
  const Literal u64 = ParseLiteral(cur, Shape::Scalar(PrimitiveType::kU64));
  EXPECT_EQ(static_cast<uint64_t>(u64.GetInt(0)), ~uint64_t{0});
  const Literal f32 = ParseLiteral(cur, Shape(PrimitiveType::kF32, {2}));
  EXPECT_EQ(f32.Get(0), 1.5);
  EXPECT_EQ(f32.Get(1), -std::numeric_limits<double>::infinity());
  EXPECT_NE(ErrorOf([&] {
              ParseLiteral(cur, Shape::Scalar(PrimitiveType::kU32));
            }).find("constant -2 does not fit in u32"),
            std::string::npos);
}

}  // namespace
}  // namespace weft::hlo
