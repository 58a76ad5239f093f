#include "weft/hlo/module.h"

#include <gtest/gtest.h>

#include "weft/hlo/builder.h"

namespace weft {
namespace {

TEST(ModuleTest, NamesAreMadeUnique) {
  HloModule module("m");
  EXPECT_EQ(module.UniqueName("add"), "add");
  EXPECT_EQ(module.UniqueName("add"), "add.1");
  EXPECT_EQ(module.UniqueName("add.1"), "add.2");
  EXPECT_EQ(module.UniqueName("x.7"), "x.7");
  EXPECT_EQ(module.UniqueName("x.7"), "x.1");
  // Computation names are their own namespace.
  HloComputation* c =
      module.AddComputation(MakeScalarReduction("add", HloOpcode::kAdd, PrimitiveType::kF32));
  EXPECT_EQ(c->name(), "add");
  HloComputation* c2 =
      module.AddComputation(MakeScalarReduction("add", HloOpcode::kMaximum, PrimitiveType::kF32));
  EXPECT_EQ(c2->name(), "add.1");
  EXPECT_EQ(c2->root_instruction()->name(), "maximum");
  EXPECT_EQ(c2->parameter_instruction(0)->name(), "x.2");  // x.1 was taken above
}

TEST(ModuleTest, ComputationPostOrderPutsCalleesFirstAndEntryLast) {
  HloModule module("m");
  HloComputationBuilder b("main");
  HloInstruction* p = b.Parameter(0, Shape::Scalar(PrimitiveType::kF32));
  auto entry_c = b.Build();
  HloComputation* entry = module.AddEntryComputation(std::move(entry_c));
  HloComputation* add =
      module.AddComputation(MakeScalarReduction("add", HloOpcode::kAdd, PrimitiveType::kF32));
  HloComputationBuilder mid("mid");
  HloInstruction* q = mid.Parameter(0, Shape::Scalar(PrimitiveType::kF32));
  mid.Call({q, q}, add);
  HloComputation* mid_c = module.AddComputation(mid.Build());
  HloInstruction* call = entry->AddInstruction(
      HloInstruction::Create(HloOpcode::kCall, p->shape(), {p}, {}, {mid_c}, "call"));
  EXPECT_EQ(call->name(), "call.1");  // "call" is taken in mid
  EXPECT_EQ(module.MakeComputationPostOrder(), (std::vector<HloComputation*>{add, mid_c, entry}));
  EXPECT_TRUE(entry->IsEntry());
  EXPECT_FALSE(add->IsEntry());
  EXPECT_EQ(module.GetComputation("mid"), mid_c);
  EXPECT_EQ(module.computations().size(), 3u);
}

}  // namespace
}  // namespace weft
