#include "weft/hlo/computation.h"

#include <gtest/gtest.h>

#include "weft/hlo/builder.h"

namespace weft {
namespace {

TEST(ComputationTest, ParametersRootAndPostOrder) {
  HloComputationBuilder b("f");
  HloInstruction* y = b.Parameter(1, Shape::Scalar(PrimitiveType::kF32), "y");
  HloInstruction* x = b.Parameter(0, Shape::Scalar(PrimitiveType::kF32), "x");
  HloInstruction* dead = b.Unary(HloOpcode::kNegate, y);
  HloInstruction* sum = b.Add(x, y);
  std::unique_ptr<HloComputation> c = b.Build();
  EXPECT_EQ(c->num_parameters(), 2);
  EXPECT_EQ(c->parameter_instruction(0), x);
  EXPECT_EQ(c->root_instruction(), sum);
  EXPECT_EQ(c->GetInstruction("y"), y);
  EXPECT_EQ(c->GetInstruction("nope"), nullptr);
  // Post order reaches only what the root uses, operands first.
  EXPECT_EQ(c->MakeInstructionPostOrder(), (std::vector<HloInstruction*>{x, y, sum}));
  c->RemoveInstruction(dead);
  EXPECT_EQ(c->instruction_count(), 3);
  EXPECT_THROW(c->RemoveInstruction(x), Error);    // still used
  EXPECT_THROW(c->RemoveInstruction(sum), Error);  // root
}

TEST(ComputationTest, RemoveDeadInstructionsKeepsWhatTheRootNeedsAndEveryParameter) {
  HloComputationBuilder b("f");
  HloInstruction* x = b.Parameter(0, Shape::Scalar(PrimitiveType::kF32), "x");
  HloInstruction* unused = b.Parameter(1, Shape::Scalar(PrimitiveType::kF32), "unused");
  HloInstruction* n = b.Unary(HloOpcode::kNegate, x);
  HloInstruction* dead = b.Unary(HloOpcode::kExp, n);  // reads a live value
  b.Add(dead, unused);                                 // and is read by a dead one
  HloInstruction* root = b.Unary(HloOpcode::kTanh, n);
  std::unique_ptr<HloComputation> c = b.Build(root);
  EXPECT_EQ(c->RemoveDeadInstructions(), 2);
  EXPECT_EQ(c->instructions(), (std::vector<HloInstruction*>{x, unused, n, root}));
  EXPECT_EQ(n->users(), (std::vector<HloInstruction*>{root}));
  EXPECT_TRUE(unused->users().empty());
  EXPECT_EQ(c->RemoveDeadInstructions(), 0);
}

TEST(ComputationTest, MakeDefinitionOrderTopologicalMovesAnInstructionOnlyAsEarlyAsNeeded) {
  HloComputationBuilder b("f");
  HloInstruction* x = b.Parameter(0, Shape::Scalar(PrimitiveType::kF32), "x");
  HloInstruction* n = b.Unary(HloOpcode::kNegate, x);
  HloInstruction* e = b.Unary(HloOpcode::kExp, x);
  HloInstruction* sum = b.Add(n, e);
  std::unique_ptr<HloComputation> c = b.Build();
  c->set_root_instruction(sum);
  // Appended last, then made an operand of n: it must move before n, and
  // nothing else moves.
  HloInstruction* t = c->AddInstruction(
      HloInstruction::Create(HloOpcode::kTanh, Shape::Scalar(PrimitiveType::kF32), {x}));
  n->ReplaceOperandWith(0, t);
  c->MakeDefinitionOrderTopological();
  EXPECT_EQ(c->instructions(), (std::vector<HloInstruction*>{x, t, n, e, sum}));
  c->MakeDefinitionOrderTopological();  // already topological: unchanged
  EXPECT_EQ(c->instructions(), (std::vector<HloInstruction*>{x, t, n, e, sum}));
  EXPECT_EQ(c->root_instruction(), sum);
}

TEST(ComputationTest, RejectsForeignOperandsAndDuplicateParameters) {
  HloComputationBuilder a("a");
  HloInstruction* pa = a.Parameter(0, Shape::Scalar(PrimitiveType::kF32));
  HloComputationBuilder b("b");
  EXPECT_THROW(b.Unary(HloOpcode::kNegate, pa), Error);
  b.Parameter(0, Shape::Scalar(PrimitiveType::kF32));
  EXPECT_THROW(b.Parameter(0, Shape::Scalar(PrimitiveType::kF32)), Error);
  // Found by the fuzzer: a huge parameter number must be an error, not an
  // attempt to allocate a table that large.
  EXPECT_THROW(b.Parameter(int64_t{5124095576030431}, Shape::Scalar(PrimitiveType::kF32)), Error);
}

}  // namespace
}  // namespace weft
