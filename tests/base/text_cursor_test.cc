#include "weft/base/text_cursor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "weft/base/error.h"

namespace weft {
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

// A bare value runs to a ',', a space or an unmatched closer outside the
// brackets it opens: XLA writes outfeed_shape=(f32[4,8]{1,0}, s32[2]{0}).
TEST(TextCursorTest, ABareValueKeepsTheBracketsItOpens) {
  TextCursor cur("(f32[4,8]{1,0}, s32[2]{0}), f32[2]{0} a)b x", "");
  EXPECT_EQ(cur.ParseRawValue("shape"), "(f32[4,8]{1,0}, s32[2]{0})");
  EXPECT_TRUE(cur.TryConsume(","));
  EXPECT_EQ(cur.ParseRawValue("shape"), "f32[2]{0}");
  EXPECT_EQ(cur.ParseRawValue("word"), "a");
  for (const char* bad : {"(f32[4], s32[2]", "(f32[4}", "[1,2"}) {
    TextCursor c(bad, "t.hlo");
    try {
      c.ParseRawValue("outfeed_shape");
      ADD_FAILURE() << bad << ": expected an error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("outfeed_shape"), std::string::npos) << e.what();
    }
  }
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

TEST(TextCursorTest, IntListsInOtherBrackets) {
  TextCursor cur("[2, 4] () (1,x)", "");
  EXPECT_EQ(cur.ParseIntList("dims", '[', ']'), (std::vector<int64_t>{2, 4}));
  EXPECT_TRUE(cur.ParseIntList("perm", '(', ')').empty());
  try {
    cur.ParseIntList("the perm", '(', ')');
    FAIL();
  } catch (const TextError& e) {
    EXPECT_EQ(e.offset(), 13u);
    EXPECT_EQ(e.message(), "expected an integer in the perm, found 'x'");
    EXPECT_STREQ(e.what(), "1:14: expected an integer in the perm, found 'x'");
  }
  TextCursor big("99999999999999999999", "");
  EXPECT_THROW(big.ParseInt("n"), Error);
}

TEST(TextCursorTest, ErrorsAtAnEarlierOffset) {
  TextCursor cur("ab\ncd ef", "g.txt");
  cur.set_pos(3);
  EXPECT_EQ(cur.ParseName("name"), "cd");
  EXPECT_EQ(cur.LocationOf(3).line, 2);
  EXPECT_EQ(cur.LocationOf(3).col, 1);
  try {
    cur.ExpectedAt(3, "a number");
    FAIL();
  } catch (const TextError& e) {
    EXPECT_EQ(e.offset(), 3u);
    EXPECT_STREQ(e.what(), "g.txt:2:1: expected a number, found 'cd'");
  }
  // The cursor has not moved.
  EXPECT_EQ(cur.ParseName("name"), "ef");
}

}  // namespace
}  // namespace weft
