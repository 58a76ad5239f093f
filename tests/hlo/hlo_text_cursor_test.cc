#include "hlo_text_cursor.h"

#include <gtest/gtest.h>

namespace weft::hlo {
namespace {

TEST(HloTextCursorTest, ShapesAndErrors) {
  HloTextCursor cur("f32[2,3]{1,0} (s32[], pred[4]) u32[] f32[2]{ 0 }", "");
  EXPECT_TRUE(cur.AtShape());
  EXPECT_EQ(cur.ParseShape().ToString(), "f32[2,3]");
  EXPECT_EQ(cur.last_layout(), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(cur.ParseShape().ToString(), "(s32[], pred[4])");
  EXPECT_EQ(cur.ParseShape().ToString(), "u32[]");
  EXPECT_TRUE(cur.last_layout().empty());
  EXPECT_EQ(cur.ParseShape().ToString(), "f32[2]");
  EXPECT_EQ(cur.last_layout(), (std::vector<int64_t>{0}));
  EXPECT_TRUE(cur.AtEnd());
  HloTextCursor bad("x = f32[2]{0,1}", "");
  bad.ParseName("n");
  bad.Expect("=", "'='");
  try {
    bad.ParseShape();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("1:11: layout {0,1} of f32[2]"), std::string::npos)
        << e.what();
  }
  HloTextCursor unknown("f33[2]", "m.hlo");
  try {
    unknown.ParseShape();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("m.hlo:1:1: unsupported element type 'f33'"),
              std::string::npos)
        << e.what();
  }
}

TEST(HloTextCursorTest, SourceLocations) {
  HloTextCursor cur("a\n  b", "");
  const SourceLocation loc = cur.SourceLocationOf(4);
  EXPECT_EQ(loc.line, 2);
  EXPECT_EQ(loc.col, 3);
}

}  // namespace
}  // namespace weft::hlo
