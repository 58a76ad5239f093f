#include "weft/base/env.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include "weft/base/error.h"

namespace weft {
namespace {

TEST(Env, IntegerVariablesAreParsedAndCheckedWithClearErrors) {
  unsetenv("WEFT_TEST_INT");
  EXPECT_EQ(GetEnvInt("WEFT_TEST_INT", 7, 1, 10), 7);
  setenv("WEFT_TEST_INT", "9", 1);
  EXPECT_EQ(GetEnvInt("WEFT_TEST_INT", 7, 1, 10), 9);
  setenv("WEFT_TEST_INT", "11", 1);
  try {
    GetEnvInt("WEFT_TEST_INT", 7, 1, 10);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("WEFT_TEST_INT=11"), std::string::npos) << e.what();
  }
  setenv("WEFT_TEST_INT", "4x", 1);
  EXPECT_THROW(GetEnvInt("WEFT_TEST_INT", 7, 1, 10), Error);
  unsetenv("WEFT_TEST_INT");
}

TEST(Env, ByteSizesWithUnits) {
  EXPECT_EQ(ParseByteSize("4096", "x"), 4096);
  EXPECT_EQ(ParseByteSize("8K", "x"), 8192);
  EXPECT_EQ(ParseByteSize("512KiB", "x"), 512 * 1024);
  EXPECT_EQ(ParseByteSize("2m", "x"), 2 * 1024 * 1024);
  EXPECT_THROW(ParseByteSize("K8", "WEFT_CACHE_LIMIT"), Error);
  EXPECT_THROW(ParseByteSize("8Q", "WEFT_CACHE_LIMIT"), Error);
  EXPECT_THROW(ParseByteSize("", "WEFT_CACHE_LIMIT"), Error);
}

}  // namespace
}  // namespace weft
