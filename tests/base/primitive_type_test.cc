#include "weft/base/primitive_type.h"

#include <gtest/gtest.h>

#include <string>

#include "weft/base/error.h"

namespace weft {
namespace {

TEST(PrimitiveTypeTest, NamesRoundTrip) {
  for (PrimitiveType t :
       {PrimitiveType::kPred, PrimitiveType::kS32, PrimitiveType::kS64, PrimitiveType::kU16,
        PrimitiveType::kU32, PrimitiveType::kU64, PrimitiveType::kF16, PrimitiveType::kBF16,
        PrimitiveType::kF32, PrimitiveType::kF64, PrimitiveType::kF8E4M3FN,
        PrimitiveType::kF8E8M0FNU, PrimitiveType::kC64, PrimitiveType::kToken}) {
    EXPECT_EQ(PrimitiveTypeFromName(PrimitiveTypeName(t)), t) << PrimitiveTypeName(t);
    EXPECT_NE(std::string(SupportedPrimitiveTypeNames()).find(PrimitiveTypeName(t)),
              std::string::npos);
  }
  EXPECT_EQ(PrimitiveTypeName(PrimitiveType::kTuple), "tuple");
  EXPECT_EQ(PrimitiveTypeName(PrimitiveType::kInvalid), "invalid");
  EXPECT_FALSE(PrimitiveTypeFromName("f8e4m3").has_value());
  EXPECT_FALSE(PrimitiveTypeFromName("F32").has_value());  // safetensors' name, not weft's
  EXPECT_FALSE(PrimitiveTypeFromName("tuple").has_value());
}

TEST(PrimitiveTypeTest, Classes) {
  EXPECT_TRUE(IsFloatingPoint(PrimitiveType::kF64));
  EXPECT_TRUE(IsFloatingPoint(PrimitiveType::kBF16));
  EXPECT_FALSE(IsFloatingPoint(PrimitiveType::kC64));
  EXPECT_TRUE(IsFloatingPoint(PrimitiveType::kF8E4M3FN));
  EXPECT_TRUE(IsFloat8(PrimitiveType::kF8E8M0FNU));
  EXPECT_FALSE(IsFloat8(PrimitiveType::kBF16));
  EXPECT_EQ(ByteWidth(PrimitiveType::kF8E4M3FN), 1);
  EXPECT_TRUE(IsComplex(PrimitiveType::kC64));
  EXPECT_TRUE(IsInteger(PrimitiveType::kU16));
  EXPECT_TRUE(IsInteger(PrimitiveType::kU32));
  EXPECT_FALSE(IsInteger(PrimitiveType::kPred));
  EXPECT_FALSE(IsSignedInteger(PrimitiveType::kU32));
  EXPECT_TRUE(IsSignedInteger(PrimitiveType::kS64));
}

TEST(PrimitiveTypeTest, ByteWidths) {
  EXPECT_EQ(ByteWidth(PrimitiveType::kPred), 1);
  EXPECT_EQ(ByteWidth(PrimitiveType::kU16), 2);
  EXPECT_EQ(ByteWidth(PrimitiveType::kF16), 2);
  EXPECT_EQ(ByteWidth(PrimitiveType::kBF16), 2);
  EXPECT_EQ(ByteWidth(PrimitiveType::kS32), 4);
  EXPECT_EQ(ByteWidth(PrimitiveType::kF32), 4);
  EXPECT_EQ(ByteWidth(PrimitiveType::kS64), 8);
  EXPECT_EQ(ByteWidth(PrimitiveType::kF64), 8);
  EXPECT_EQ(ByteWidth(PrimitiveType::kC64), 8);
  EXPECT_EQ(ByteWidth(PrimitiveType::kToken), 0);
  EXPECT_THROW(ByteWidth(PrimitiveType::kTuple), Error);
}

TEST(PrimitiveTypeTest, UnsupportedTypeIsNamed) {
  const auto supported = {PrimitiveType::kF32, PrimitiveType::kBF16};
  EXPECT_NO_THROW(CheckSupportedType(PrimitiveType::kBF16, supported, "attention"));
  try {
    CheckSupportedType(PrimitiveType::kF16, supported, "attention");
    FAIL() << "f16 was accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "attention does not support element type f16 (it supports f32, bf16)");
  }
}

}  // namespace
}  // namespace weft
