#include "weft/compiler/all_to_all_layout.h"

#include <gtest/gtest.h>

#include <string>

#include "weft/compiler/buffer_assignment.h"
#include "weft/hlo/module.h"
#include "weft/hlo/parser.h"

namespace weft::compiler {
namespace {

// x: the all-to-all's operand; a2a and its users as given.
std::unique_ptr<HloModule> Module(const std::string& body) {
  return ParseHloModule("HloModule m\nENTRY e {\n  p = f32[3,2,5,4] parameter(0)\n" + body + "}\n");
}

const HloInstruction& Named(const HloModule& m, const std::string& name) {
  for (const HloInstruction* i : m.entry_computation()->instructions()) {
    if (i->name() == name) return *i;
  }
  ADD_FAILURE() << "no instruction " << name;
  return *m.entry_computation()->root_instruction();
}

// The partitioner's pattern: the split dimension (as long as the groups)
// moves, the others keep their order.
TEST(AllToAllLayoutTest, WritesThroughATransposeThatMovesOnlyTheSplitDimension) {
  for (const auto& [perm, shape, outer] :
       {std::tuple<std::string, std::string, int64_t>{"0,2,1,3", "3,5,2,4", 15},
        {"0,2,3,1", "3,5,4,2", 60},
        {"1,0,2,3", "2,3,5,4", 1}}) {
    auto m = Module(
        "  x = f32[3,2,5,4] negate(p)\n"
        "  a = f32[3,2,5,4] all-to-all(x), replica_groups={{0,1},{2,3}}, dimensions={1}\n"
        "  t = f32[" +
        shape + "] transpose(a), dimensions={" + perm +
        "}\n"
        "  ROOT r = f32[" +
        shape + "] negate(t)\n");
    const HloInstruction& a = Named(*m, "a");
    const HloInstruction& t = Named(*m, "t");
    EXPECT_EQ(TransposeWrittenByAllToAll(a), &t) << perm;
    EXPECT_TRUE(ForwardsAllToAll(t)) << perm;
    EXPECT_EQ(TransposedOuterRows(t), outer) << perm;
    EXPECT_EQ(TransposeWrittenByAllToAll(t), nullptr);
    EXPECT_FALSE(ForwardsAllToAll(Named(*m, "r")));
    // Buffer assignment: the transpose forwards the all-to-all's bytes, and
    // the all-to-all never runs in place of its dying operand.
    const BufferAssignment b =
        AssignBuffers(*m, [](const HloComputation& c) { return c.MakeInstructionPostOrder(); });
    EXPECT_EQ(b.Of(t).leaves[0].kind, LeafAssignment::Kind::kForward);
    EXPECT_EQ(b.Of(t).leaves[0].buffer, b.Of(a).leaves[0].buffer);
    EXPECT_EQ(b.Of(a).leaves[0].kind, LeafAssignment::Kind::kNew);
  }
}

TEST(AllToAllLayoutTest, KeepsItsOwnLayoutOtherwise) {
  const std::string a2a =
      "  x = f32[3,2,5,4] negate(p)\n"
      "  a = f32[3,2,5,4] all-to-all(x), replica_groups={{0,1},{2,3}}, dimensions={1}\n";
  const char* cases[] = {
      // The transpose also swaps two other dimensions.
      "  t = f32[4,2,5,3] transpose(a), dimensions={3,1,2,0}\n"
      "  ROOT r = f32[4,2,5,3] negate(t)\n",
      // Another user reads the all-to-all's own layout.
      "  t = f32[3,5,2,4] transpose(a), dimensions={0,2,1,3}\n"
      "  n = f32[3,2,5,4] negate(a)\n"
      "  ROOT r = (f32[3,5,2,4], f32[3,2,5,4]) tuple(t, n)\n",
      // No transpose reads it.
      "  ROOT r = f32[3,2,5,4] negate(a)\n",
  };
  for (const char* users : cases) {
    auto m = Module(a2a + users);
    const HloInstruction& a = Named(*m, "a");
    EXPECT_EQ(TransposeWrittenByAllToAll(a), nullptr) << users;
    const BufferAssignment b =
        AssignBuffers(*m, [](const HloComputation& c) { return c.MakeInstructionPostOrder(); });
    for (const HloInstruction* i : m->entry_computation()->instructions()) {
      if (i->opcode() == HloOpcode::kTranspose) {
        EXPECT_FALSE(ForwardsAllToAll(*i)) << users;
        EXPECT_EQ(b.Of(*i).leaves[0].kind, LeafAssignment::Kind::kNew) << users;
      }
    }
  }
  // A split dimension longer than the groups (each chunk spans two of its
  // indices, whose order a transpose changes), and every device in one group
  // (an empty list: the group size is not known here).
  for (const std::string groups : {"{{0},{1},{2},{3}}", "{}"}) {
    auto m = Module(
        "  x = f32[3,2,5,4] negate(p)\n  a = f32[3,2,5,4] all-to-all(x), replica_groups=" + groups +
        ", dimensions={1}\n"
        "  t = f32[3,5,2,4] transpose(a), dimensions={0,2,1,3}\n"
        "  ROOT r = f32[3,5,2,4] negate(t)\n");
    EXPECT_EQ(TransposeWrittenByAllToAll(Named(*m, "a")), nullptr) << groups;
  }
  // The root: its value leaves the computation in its own layout.
  auto m = Module(
      "  x = f32[3,2,5,4] negate(p)\n"
      "  ROOT a = f32[3,2,5,4] all-to-all(x), replica_groups={{0,1},{2,3}}, dimensions={1}\n");
  EXPECT_EQ(TransposeWrittenByAllToAll(Named(*m, "a")), nullptr);
}

}  // namespace
}  // namespace weft::compiler
