#include "text_cursor.h"

#include <gtest/gtest.h>

#include <cmath>

namespace weft::hlo {
namespace {

TEST(TextCursorTest, LocationsAndComments) {
  TextCursor cur("a /* x\n y */ b // tail\n  %c.1-d", "f.hlo");
  EXPECT_EQ(cur.ParseName("name"), "a");
  EXPECT_EQ(cur.ParseName("name"), "b");
  EXPECT_EQ(cur.Mark(), 25u);
  EXPECT_EQ(cur.Where(cur.pos()), "f.hlo:3:3");
  EXPECT_EQ(cur.ParseName("name"), "c.1-d");
  EXPECT_TRUE(cur.AtEnd());
  try {
    cur.ParseName("a thing");
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "f.hlo:3:9: expected a thing, found end of input");
  }
}

TEST(TextCursorTest, Tokens) {
  TextCursor cur(R"(-12 3.5e-1 -inf nan true "q\"\n" {1, 2} {a={b}, "}"} tok, x)", "");
  EXPECT_EQ(cur.ParseInt("int"), -12);
  EXPECT_EQ(cur.ParseNumber("num"), 0.35);
  EXPECT_EQ(cur.ParseNumber("num"), -INFINITY);
  EXPECT_TRUE(std::isnan(cur.ParseNumber("num")));
  EXPECT_TRUE(cur.ParseBool("bool"));
  EXPECT_EQ(cur.ParseQuoted("str"), "q\"\n");
  EXPECT_EQ(cur.ParseIntList("list"), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(cur.ParseRawValue("raw"), R"({a={b}, "}"})");
  EXPECT_EQ(cur.ParseRawValue("raw"), "tok");
  EXPECT_TRUE(cur.TryConsume(","));
  EXPECT_FALSE(cur.TryKeyword("xy"));
  EXPECT_TRUE(cur.TryKeyword("x"));
}

TEST(TextCursorTest, ExactIntegersAndWhatIsNotOne) {
  TextCursor cur("18446744073709551615 -9223372036854775808 +7 2.5 1e3 x 18446744073709551616", "");
  auto v = cur.TryParseExactInteger("int");
  ASSERT_TRUE(v.has_value());
  EXPECT_FALSE(v->negative);
  EXPECT_EQ(v->magnitude, ~uint64_t{0});
  v = cur.TryParseExactInteger("int");
  ASSERT_TRUE(v.has_value());
  EXPECT_TRUE(v->negative);
  EXPECT_EQ(v->magnitude, uint64_t{1} << 63);
  v = cur.TryParseExactInteger("int");
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->magnitude, 7u);
  // Floats are left for ParseNumber.
  EXPECT_FALSE(cur.TryParseExactInteger("int").has_value());
  EXPECT_EQ(cur.ParseNumber("num"), 2.5);
  EXPECT_FALSE(cur.TryParseExactInteger("int").has_value());
  EXPECT_EQ(cur.ParseNumber("num"), 1000);
  EXPECT_FALSE(cur.TryParseExactInteger("int").has_value());
  EXPECT_TRUE(cur.TryKeyword("x"));
  try {
    cur.TryParseExactInteger("a u64 value");
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "1:56: a u64 value 18446744073709551616 does not fit in 64 bits");
  }
}

TEST(TextCursorTest, ShapesAndErrors) {
  TextCursor cur("f32[2,3]{1,0} (s32[], pred[4]) u32[]", "");
  EXPECT_TRUE(cur.AtShape());
  EXPECT_EQ(cur.ParseShape().ToString(), "f32[2,3]");
  EXPECT_EQ(cur.ParseShape().ToString(), "(s32[], pred[4])");
  EXPECT_EQ(cur.ParseShape().ToString(), "u32[]");
  TextCursor bad("x = f32[2]{0,1}", "");
  bad.ParseName("n");
  bad.Expect("=", "'='");
  try {
    bad.ParseShape();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("1:11: layout {0,1} of f32[2]"), std::string::npos)
        << e.what();
  }
  TextCursor big("99999999999999999999", "");
  EXPECT_THROW(big.ParseInt("n"), Error);
}

}  // namespace
}  // namespace weft::hlo
