#include "weft/hlo/instruction.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "weft/base/error.h"
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

// A value with many users: its list is kept without scanning it (a chain
// of N ops reading one parameter was O(N^2) to build, partition and
// destroy; `weft bench propagate --chain N` shows the passes linear), so
// each edit must keep it exact: every user once, in the order it came.
TEST(InstructionTest, ManyUsersStayListedOnceInOrder) {
  HloComputationBuilder b("main");
  const Shape s(PrimitiveType::kF32, {4});
  HloInstruction* x = b.Parameter(0, s, "x");
  HloInstruction* y = b.Parameter(1, s, "y");
  std::vector<HloInstruction*> users;
  for (int i = 0; i < 100; ++i) {
    // Every third reads x twice, every fifth reads y as well.
    users.push_back(b.Binary(HloOpcode::kAdd, x, i % 3 == 0 ? x : i % 5 == 0 ? y : x));
  }
  EXPECT_EQ(x->users(), users);
  std::vector<HloInstruction*> y_users;
  for (int i = 0; i < 100; ++i) {
    if (i % 3 != 0 && i % 5 == 0) y_users.push_back(users[i]);
  }
  EXPECT_EQ(y->users(), y_users);
  // One slot of a double use moves: still x's user (once), now y's too.
  users[3]->ReplaceOperandWith(1, y);
  EXPECT_EQ(x->users(), users);
  y_users.push_back(users[3]);
  EXPECT_EQ(y->users(), y_users);
  // A user in the middle leaves x; the others keep their order.
  users[50]->ReplaceOperandWith(0, y);
  users[50]->ReplaceOperandWith(1, y);
  std::vector<HloInstruction*> x_users = users;
  x_users.erase(x_users.begin() + 50);
  EXPECT_EQ(x->users(), x_users);
  EXPECT_EQ(std::count(y->users().begin(), y->users().end(), users[50]), 1);
  // Every use of x moves to y: users already reading y are not listed twice.
  x->ReplaceAllUsesWith(y);
  EXPECT_TRUE(x->users().empty());
  std::vector<HloInstruction*> all = y->users();
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end());
  EXPECT_EQ(all.size(), users.size());
  for (HloInstruction* u : users) {
    EXPECT_EQ(u->operand(0), y);
    EXPECT_EQ(u->operand(1), y);
  }
  EXPECT_THROW(y->ReplaceAllUsesWith(nullptr), Error);
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
