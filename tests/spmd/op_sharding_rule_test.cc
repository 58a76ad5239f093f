#include "weft/spmd/op_sharding_rule.h"

#include <gtest/gtest.h>

#include "weft/hlo/parser.h"

namespace weft {
namespace {

std::unique_ptr<HloModule> Parse(const std::string& body) {
  return ParseHloModule("HloModule m\n\nENTRY main {\n" + body + "}\n");
}

TEST(OpShardingRuleTest, DotHasBatchFreeAndReductionFactors) {
  auto m = Parse(R"(
  a = f32[2,8,16] parameter(0)
  b = f32[2,16,4] parameter(1)
  ROOT d = f32[2,8,4] dot(a, b), lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_contracting_dims={1}
)");
  auto rule = GetOpShardingRule(*m->entry_computation()->root_instruction());
  ASSERT_TRUE(rule);
  EXPECT_EQ(rule->ToString(), "dot: ([f0, f2, f1], [f0, f1, f3]) -> ([f0, f2, f3]) {f1: reduction}");
}

TEST(OpShardingRuleTest, ReshapeRefinesSplitsAndMerges) {
  OpShardingRule split = ReshapeRule({6, 4}, {2, 3, 4});
  EXPECT_EQ(split.ToString(), "reshape: ([f0*f1, f2]) -> ([f0, f1, f2])");
  OpShardingRule merge = ReshapeRule({4, 8}, {32});
  EXPECT_EQ(merge.ToString(), "reshape: ([f0, f1]) -> ([f0*f1])");
  // No common refinement: every dim gets a factor of its own.
  OpShardingRule odd = ReshapeRule({2, 3}, {3, 2});
  EXPECT_EQ(odd.ToString(), "reshape: ([f0, f2]) -> ([f1, f3])");
  OpShardingRule ones = ReshapeRule({1, 8}, {8, 1});
  EXPECT_EQ(ones.num_factors(), 3);
}

TEST(OpShardingRuleTest, KindsForSliceLikeOps) {
  auto m = Parse(R"(
  p = f32[8,16] parameter(0)
  i = s32[] parameter(1)
  ds = f32[1,16] dynamic-slice(p, i, i), dynamic_slice_sizes={1,16}
  c = f32[16,16] concatenate(p, p), dimensions={0}
  ROOT t = (f32[1,16], f32[16,16]) tuple(ds, c)
)");
  auto ds = GetOpShardingRule(*m->entry_computation()->GetInstruction("ds"));
  ASSERT_TRUE(ds);
  EXPECT_EQ(ds->factor_kinds[ds->operands[0][0][0]], FactorKind::kNeedReplication);
  EXPECT_EQ(ds->factor_kinds[ds->operands[0][1][0]], FactorKind::kPassThrough);
  EXPECT_TRUE(ds->operands[1].empty());  // the scalar index
  auto c = GetOpShardingRule(*m->entry_computation()->GetInstruction("c"));
  ASSERT_TRUE(c);
  EXPECT_EQ(c->factor_kinds[c->results[0][0][0]], FactorKind::kPermutation);
}

TEST(OpShardingRuleTest, BroadcastAndReduce) {
  auto m = ParseHloModule(R"(HloModule m

add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}

ENTRY main {
  p = f32[8] parameter(0)
  b = f32[4,8] broadcast(p), dimensions={1}
  z = f32[] constant(0)
  ROOT r = f32[8] reduce(b, z), dimensions={0}, to_apply=add
}
)");
  auto b = GetOpShardingRule(*m->entry_computation()->GetInstruction("b"));
  EXPECT_EQ(b->ToString(), "broadcast: ([f1]) -> ([f0, f1])");
  auto r = GetOpShardingRule(*m->entry_computation()->GetInstruction("r"));
  EXPECT_EQ(r->ToString(), "reduce: ([f0, f1], []) -> ([f1]) {f0: reduction}");
}

TEST(OpShardingRuleTest, CustomCallsRegisterTheirRule) {
  auto m = Parse(R"(
  p = f32[8,16] parameter(0)
  ROOT c = f32[16,8] custom-call(p), custom_call_target="test.transpose_like"
)");
  const HloInstruction* c = m->entry_computation()->root_instruction();
  EXPECT_FALSE(GetOpShardingRule(*c).has_value());
  RegisterCustomCallRule("test.transpose_like", [](const HloInstruction& instr) {
    OpShardingRule rule;
    rule.name = "test.transpose_like";
    const int64_t a = rule.AddFactor(8), b = rule.AddFactor(16);
    rule.operands = {{{a}, {b}}};
    rule.results = {{{b}, {a}}};
    return std::optional<OpShardingRule>(rule);
  });
  EXPECT_TRUE(HasCustomCallRule("test.transpose_like"));
  auto rule = GetOpShardingRule(*c);
  ASSERT_TRUE(rule);
  EXPECT_EQ(rule->ToString(), "test.transpose_like: ([f0, f1]) -> ([f1, f0])");
}

}  // namespace
}  // namespace weft
