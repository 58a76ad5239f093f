#include "weft/base/env.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

#include "error_of.h"
#include "weft/base/error.h"

namespace weft {
namespace {

using weft::testing::ErrorOf;
using weft::testing::Mentions;

TEST(Env, IntegerVariablesAreParsedAndCheckedWithClearErrors) {
  unsetenv("WEFT_TEST_INT");
  EXPECT_EQ(GetEnvInt("WEFT_TEST_INT", 7, 1, 10), 7);
  setenv("WEFT_TEST_INT", "", 1);  // empty = unset
  EXPECT_EQ(GetEnvInt("WEFT_TEST_INT", 7, 1, 10), 7);
  setenv("WEFT_TEST_INT", "9", 1);
  EXPECT_EQ(GetEnvInt("WEFT_TEST_INT", 7, 1, 10), 9);
  setenv("WEFT_TEST_INT", "-3", 1);
  EXPECT_EQ(GetEnvInt("WEFT_TEST_INT", 7, -5, 10), -3);
  setenv("WEFT_TEST_INT", "11", 1);
  const std::string message = ErrorOf([] { GetEnvInt("WEFT_TEST_INT", 7, 1, 10); });
  EXPECT_TRUE(Mentions(message, "WEFT_TEST_INT=11")) << message;
  EXPECT_TRUE(Mentions(message, "[1, 10]")) << message;
  unsetenv("WEFT_TEST_INT");
}

TEST(Env, MalformedIntegersNameTheVariableTheValueAndTheRange) {
  for (const char* bad :
       {"abc", "4x", " 4", "4 ", "+4", "0x10", "1e3", "-", "4.0", "99999999999999999999999"}) {
    setenv("WEFT_TEST_INT", bad, 1);
    const std::string message = ErrorOf([] { GetEnvInt("WEFT_TEST_INT", 7, 1, 10); });
    EXPECT_TRUE(Mentions(message, std::string("WEFT_TEST_INT='") + bad + "'"))
        << bad << ": " << message;
    EXPECT_TRUE(Mentions(message, "[1, 10]")) << message;
  }
  for (const char* out_of_range : {"0", "-1", "-0"}) {
    setenv("WEFT_TEST_INT", out_of_range, 1);
    const std::string message = ErrorOf([] { GetEnvInt("WEFT_TEST_INT", 7, 1, 10); });
    EXPECT_TRUE(
        Mentions(message, std::string("WEFT_TEST_INT=") + out_of_range + " is out of range"))
        << message;
  }
  unsetenv("WEFT_TEST_INT");
}

TEST(Env, ByteSizesWithUnits) {
  EXPECT_EQ(ParseByteSize("4096", "x"), 4096);
  EXPECT_EQ(ParseByteSize("8K", "x"), 8192);
  EXPECT_EQ(ParseByteSize("512KiB", "x"), 512 * 1024);
  EXPECT_EQ(ParseByteSize("2m", "x"), 2 * 1024 * 1024);
  EXPECT_EQ(ParseByteSize("3G", "x"), 3LL << 30);
  EXPECT_EQ(ParseByteSize("1T", "x"), 1LL << 40);
  EXPECT_EQ(ParseByteSize("0", "x", 0, 10), 0);
  EXPECT_THROW(ParseByteSize("K8", "WEFT_CACHE_LIMIT"), Error);
  EXPECT_THROW(ParseByteSize("8Q", "WEFT_CACHE_LIMIT"), Error);
  EXPECT_THROW(ParseByteSize("", "WEFT_CACHE_LIMIT"), Error);
  EXPECT_THROW(ParseByteSize("-8K", "WEFT_CACHE_LIMIT"), Error);
}

TEST(Env, ByteSizesOutOfRangeOrOverflowingAreErrorsNamingTheRange) {
  // 0 bytes is below the default minimum of 1.
  std::string message = ErrorOf([] { ParseByteSize("0", "WEFT_CACHE_LIMIT"); });
  EXPECT_TRUE(Mentions(message, "WEFT_CACHE_LIMIT='0' is out of range")) << message;
  EXPECT_TRUE(Mentions(message, "[1, " + std::to_string(kMaxByteSize) + "]")) << message;
  // Would overflow int64 when scaled; must not wrap around to a small value.
  message = ErrorOf([] { ParseByteSize("999999999999999G", "WEFT_CACHE_LIMIT"); });
  EXPECT_TRUE(Mentions(message, "out of range")) << message;
  message = ErrorOf([] { ParseByteSize("99999999999999999999999", "WEFT_CACHE_LIMIT"); });
  EXPECT_TRUE(Mentions(message, "WEFT_CACHE_LIMIT='99999999999999999999999'")) << message;
  message = ErrorOf([] { ParseByteSize("2K", "limit", 1, 1024); });
  EXPECT_TRUE(Mentions(message, "[1, 1024]")) << message;
  message = ErrorOf([] { ParseByteSize("5M", "WEFT_CACHE_LIMIT"); });
  EXPECT_EQ(message, "");
}

}  // namespace
}  // namespace weft
