// The block-scaled dot's description: which calls are one, the dot they
// compute, the block size, and the shape errors a malformed call gets.
#include "weft/hlo/block_scaled_dot.h"

#include <gtest/gtest.h>

#include <string>

#include "error_of.h"
#include "weft/hlo/parser.h"

namespace weft {
namespace {

using weft::testing::ErrorOf;

std::unique_ptr<HloModule> Call(const std::string& operands, const std::string& result,
                                const std::string& extra = "") {
  return ParseHloModule(R"(
HloModule m
ENTRY e {
  a = f8e4m3fn[4,64] parameter(0)
  b = f8e4m3fn[6,64] parameter(1)
  as = f8e8m0fnu[4,2] parameter(2)
  bs = f8e8m0fnu[6,2] parameter(3)
  odd = f8e8m0fnu[4,3] parameter(4)
  ROOT d = )" + result + " custom-call(" +
                        operands + R"(), custom_call_target="__op$block_scaled_dot")" + extra +
                        "\n}\n");
}

TEST(BlockScaledDotTest, DescribesTheDotAndItsBlocks) {
  auto m = Call("a, b, as, bs", "f32[4,6]");
  const HloInstruction& d = *m->entry_computation()->root_instruction();
  EXPECT_TRUE(IsBlockScaledDot(d));
  EXPECT_TRUE(HasBlockScaledDot(*m));
  EXPECT_NO_THROW(CheckBlockScaledDot(d));
  EXPECT_EQ(BlockScaledDotBlockSize(d, 0), 32);
  EXPECT_TRUE(HasBlockScale(d, 1));
  const DotDimensionNumbers dn = BlockScaledDotNumbers(3);
  EXPECT_EQ(dn.lhs_batch_dims, std::vector<int64_t>{0});
  EXPECT_EQ(dn.rhs_contracting_dims, std::vector<int64_t>{2});
  EXPECT_TRUE(BlockScaledDotNumbers(2).lhs_batch_dims.empty());
  EXPECT_FALSE(
      HasBlockScale(*Call("a, b, as", "f32[4,6]")->entry_computation()->root_instruction(), 1));
}

TEST(BlockScaledDotTest, AConfiguredBlockSizeWins) {
  auto m = Call("a, b, odd, bs", "f32[4,6]",
                R"(, backend_config={"block_scaled_dot_backend_config":{block_size:32}})");
  const HloInstruction& d = *m->entry_computation()->root_instruction();
  EXPECT_EQ(BlockScaledDotBlockSize(d, 0), 32);
  // 3 scales of 32 cover 64 with one to spare: too many.
  EXPECT_NE(ErrorOf([&] { CheckBlockScaledDot(d); }).find("scale 'odd'"), std::string::npos);
}

TEST(BlockScaledDotTest, MalformedCallsAreNamed) {
  auto error = [](const std::string& operands, const std::string& result) {
    auto m = Call(operands, result);
    return ErrorOf([&] { CheckBlockScaledDot(*m->entry_computation()->root_instruction()); });
  };
  EXPECT_NE(error("a, b, odd, bs", "f32[4,6]").find("scale 'odd' f8e8m0fnu[4,3]"),
            std::string::npos);
  EXPECT_NE(error("a, b, bs, as", "f32[4,6]").find("scale 'bs'"), std::string::npos);
  EXPECT_NE(error("a, b", "f32[4,6]").find("not 2 operands"), std::string::npos);
  EXPECT_NE(error("a, b, as, bs", "f32[6,4]").find("dims [4,6]"), std::string::npos);
  EXPECT_NE(error("a, b, as, bs", "f8e4m3fn[4,6]").find("the result must be"), std::string::npos);
  EXPECT_NE(error("a, as, as, bs", "f32[4,4]").find("must agree on the contracting"),
            std::string::npos);
  EXPECT_FALSE(HasBlockScaledDot(
      *ParseHloModule("HloModule m\nENTRY e {\n  ROOT a = f32[] parameter(0)\n}\n")));
}

}  // namespace
}  // namespace weft
