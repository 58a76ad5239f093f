#include "weft/spmd/factor_projection.h"

#include <gtest/gtest.h>

namespace weft {
namespace {

HloSharding S(std::string_view text) { return HloSharding::Parse(text); }

std::optional<HloSharding> Forward(const OpShardingRule& rule, std::vector<int64_t> from,
                                   std::string_view sharding, std::vector<int64_t> to) {
  return ProjectSharding(rule, TensorRef::Operand(0), from, S(sharding), TensorRef::Result(0), to);
}

TEST(FactorProjectionTest, ReshapeSplitPutsTilesOnTheMajorFactor) {
  OpShardingRule rule = ReshapeRule({16}, {4, 4});
  EXPECT_EQ(*Forward(rule, {16}, "{devices=[2]0,1}", {4, 4}), S("{devices=[2,1]0,1}"));
  // 8 tiles over 4*4: the major factor fully, then 2 on the minor one.
  EXPECT_EQ(*Forward(rule, {16}, "{devices=[8]<=[8]}", {4, 4}), S("{devices=[4,2]<=[8]}"));
}

TEST(FactorProjectionTest, ReshapeMergeNeedsTheMajorFactorFullySplit) {
  OpShardingRule rule = ReshapeRule({4, 8}, {32});
  EXPECT_EQ(*Forward(rule, {4, 8}, "{devices=[4,2]<=[8]}", {32}), S("{devices=[8]<=[8]}"));
  EXPECT_EQ(*Forward(rule, {4, 8}, "{devices=[2,2]<=[4]}", {32}),
            S("{devices=[2,2]<=[4] last_tile_dim_replicate}"));
}

TEST(FactorProjectionTest, UnevenSplitAcrossFactorsIsDropped) {
  OpShardingRule rule = ReshapeRule({6}, {2, 3});
  EXPECT_EQ(*Forward(rule, {6}, "{devices=[4]<=[4]}", {2, 3}), S("{replicated}"));
}

TEST(FactorProjectionTest, ManualSubgroupStays) {
  OpShardingRule rule = ReshapeRule({8, 4}, {32});
  EXPECT_EQ(*Forward(rule, {8, 4}, "{devices=[2,1,2]<=[4] last_tile_dims={manual}}", {32}),
            S("{devices=[2,2]<=[4] last_tile_dims={manual}}"));
}

TEST(FactorProjectionTest, NeedReplicationFactorsDoNotMove) {
  OpShardingRule rule;
  rule.name = "test";
  const int64_t a = rule.AddFactor(8, FactorKind::kNeedReplication), b = rule.AddFactor(4);
  rule.operands = {{{a}, {b}}};
  rule.results = {{{a}, {b}}};
  EXPECT_EQ(*Forward(rule, {8, 4}, "{devices=[2,2]<=[4]}", {8, 4}),
            S("{devices=[1,2,2]<=[2,2]T(1,0) last_tile_dim_replicate}"));
}

TEST(FactorProjectionTest, ReverseShardingReversesDeviceOrder) {
  EXPECT_EQ(ReverseSharding(S("{devices=[4,1]<=[4]}"), std::vector<int64_t>{0}),
            S("{devices=[4,1]3,2,1,0}"));
}

}  // namespace
}  // namespace weft
