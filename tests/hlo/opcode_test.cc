#include "weft/hlo/opcode.h"

#include <gtest/gtest.h>

namespace weft {
namespace {

TEST(OpcodeTest, NamesRoundTrip) {
  for (HloOpcode op : {HloOpcode::kAdd, HloOpcode::kGetTupleElement, HloOpcode::kAllReduce,
                       HloOpcode::kDynamicUpdateSlice, HloOpcode::kXor, HloOpcode::kAbs}) {
    EXPECT_EQ(StringToHloOpcode(HloOpcodeString(op)), op);
  }
  EXPECT_EQ(HloOpcodeString(HloOpcode::kExp), "exponential");
  EXPECT_EQ(HloOpcodeString(HloOpcode::kCustomCall), "custom-call");
  EXPECT_EQ(StringToHloOpcode("fusion"), HloOpcode::kFusion);
  EXPECT_FALSE(StringToHloOpcode("frobnicate").has_value());
  EXPECT_NE(SupportedHloOpcodeNames().find("collective-permute"), std::string::npos);
}

TEST(OpcodeTest, Categories) {
  EXPECT_TRUE(IsElementwiseUnary(HloOpcode::kRsqrt));
  EXPECT_FALSE(IsElementwiseUnary(HloOpcode::kAdd));
  EXPECT_TRUE(IsElementwiseBinary(HloOpcode::kCompare));
  EXPECT_TRUE(IsElementwise(HloOpcode::kSelect));
  EXPECT_FALSE(IsElementwise(HloOpcode::kDot));
  EXPECT_TRUE(IsCollective(HloOpcode::kReduceScatter));
  EXPECT_FALSE(IsCollective(HloOpcode::kPartitionId));
}

}  // namespace
}  // namespace weft
