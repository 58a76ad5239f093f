#include "weft/hlo/instruction.h"

#include <gtest/gtest.h>

#include "weft/hlo/builder.h"
#include "weft/hlo/parser.h"

namespace weft {
namespace {

TEST(InstructionTest, UsersFollowOperandEdits) {
  HloComputationBuilder b("main");
  HloInstruction* x = b.Parameter(0, Shape(PrimitiveType::kF32, {4}), "x");
  HloInstruction* y = b.Parameter(1, Shape(PrimitiveType::kF32, {4}), "y");
  HloInstruction* sum = b.Add(x, x);
  HloInstruction* neg = b.Unary(HloOpcode::kNegate, sum);
  EXPECT_EQ(x->users(), std::vector<HloInstruction*>{sum});  // listed once
  sum->ReplaceOperandWith(0, y);
  EXPECT_EQ(x->users(), std::vector<HloInstruction*>{sum});  // still operand 1
  EXPECT_EQ(y->users(), std::vector<HloInstruction*>{sum});
  sum->ReplaceOperandWith(1, y);
  EXPECT_TRUE(x->users().empty());
  sum->ReplaceAllUsesWith(y);
  EXPECT_EQ(neg->operand(0), y);
  EXPECT_TRUE(sum->users().empty());
  EXPECT_THROW(sum->ReplaceOperandWith(2, y), Error);
  std::unique_ptr<HloComputation> c = b.Build();
  EXPECT_EQ(neg->parent(), c.get());
}

TEST(InstructionTest, AccessorsAndDescribe) {
  std::unique_ptr<HloModule> module = ParseHloModule(R"(HloModule m
cond {
  s = (s32[]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  s2 = (s32[]) parameter(0)
  ROOT s3 = (s32[]) copy(s2)
}
ENTRY main {
  z = s32[] constant(0)
  t = (s32[]) tuple(z)
  ROOT w = (s32[]) while(t), condition=cond, body=body
})");
  HloInstruction* w = module->entry_computation()->root_instruction();
  EXPECT_EQ(w->while_condition()->name(), "cond");
  EXPECT_EQ(w->while_body()->name(), "body");
  EXPECT_THROW(w->to_apply(), Error);
  EXPECT_EQ(w->Describe(), "'w' (while) at 15:3");
  HloInstruction* i = module->GetComputation("cond")->GetInstruction("i");
  EXPECT_EQ(i->tuple_index(), 0);
  EXPECT_THROW(i->while_body(), Error);
  EXPECT_EQ(ComparisonDirectionString(ComparisonDirection::kLe), "LE");
  EXPECT_EQ(StringToComparisonDirection("GT"), ComparisonDirection::kGt);
  EXPECT_FALSE(StringToComparisonDirection("lt").has_value());
}

}  // namespace
}  // namespace weft
