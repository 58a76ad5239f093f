// weft's attention custom calls: segment ids share batch and sequence
// factors with q/k/v, in both directions; GQA heads.
#include "weft/spmd/attention_sharding_rule.h"

#include <gtest/gtest.h>

#include "weft/hlo/parser.h"
#include "weft/spmd/factor_projection.h"
#include "weft/spmd/sharding_propagation.h"

namespace weft {
namespace {

HloSharding ShardingOf(const HloModule& m, std::string_view name) {
  const HloInstruction* i = m.entry_computation()->GetInstruction(name);
  EXPECT_TRUE(i && i->has_sharding()) << name;
  return i && i->has_sharding() ? *i->sharding() : HloSharding::Unknown();
}

constexpr const char* kConfig =
    R"(backend_config="{\"tensors\": [\"q_segment_ids\", \"kv_segment_ids\"]}")";

std::string AttentionModule(const std::string& q_sharding, const std::string& qs_sharding,
                            const std::string& ks_sharding) {
  return std::string(R"hlo(HloModule attn, num_partitions=4

ENTRY main {
  pq = f32[2,4,8,16] parameter(0)
  pk = f32[2,4,8,16] parameter(1)
  pv = f32[2,4,8,16] parameter(2)
  q = f32[2,4,8,16] exponential(pq))hlo") +
         q_sharding + R"hlo(
  k = f32[2,4,8,16] exponential(pk)
  v = f32[2,4,8,16] exponential(pv)
  pqs = s32[2,8] parameter(3)
  pks = s32[2,8] parameter(4)
  qs = s32[2,8] copy(pqs))hlo" +
         qs_sharding + R"hlo(
  ks = s32[2,8] copy(pks))hlo" +
         ks_sharding + R"hlo(
  attn = (f32[2,4,8,16], f32[2,4,8]) custom-call(q, k, v, qs, ks), custom_call_target="weft.flex_attention", )hlo" +
         kConfig + R"hlo(
  out = f32[2,4,8,16] get-tuple-element(attn), index=0
  lse = f32[2,4,8] get-tuple-element(attn), index=1
  ROOT t = (f32[2,4,8,16], f32[2,4,8]) tuple(out, lse)
}
)hlo";
}

TEST(AttentionShardingRuleTest, QueryShardingReachesSegmentIdsAndOutputs) {
  auto m = ParseHloModule(AttentionModule(", sharding={devices=[2,1,2,1]<=[4]}", "", ""));
  PropagateShardings(*m);
  // q split on batch and sequence: q segment ids get [batch, seq].
  EXPECT_EQ(ShardingOf(*m, "qs"), HloSharding::Parse("{devices=[2,2]<=[4]}"));
  EXPECT_EQ(ShardingOf(*m, "out"), HloSharding::Parse("{devices=[2,1,2,1]<=[4]}"));
  EXPECT_EQ(ShardingOf(*m, "lse"), HloSharding::Parse("{devices=[2,1,2]<=[4]}"));
  // k/v and kv segment ids share only the batch factor with q.
  EXPECT_EQ(ShardingOf(*m, "ks"),
            HloSharding::Parse("{devices=[2,1,2]<=[4] last_tile_dim_replicate}"));
  EXPECT_EQ(ShardingOf(*m, "k"),
            HloSharding::Parse("{devices=[2,1,1,1,2]<=[4] last_tile_dim_replicate}"));
}

TEST(AttentionShardingRuleTest, SegmentIdAnnotationsReachQueryKeyValue) {
  auto m = ParseHloModule(
      AttentionModule("", ", sharding={devices=[2,2]<=[4]}", ", sharding={devices=[2,2]<=[4]}"));
  PropagateShardings(*m);
  const HloSharding want = HloSharding::Parse("{devices=[2,1,2,1]<=[4]}");
  EXPECT_EQ(ShardingOf(*m, "q"), want);
  EXPECT_EQ(ShardingOf(*m, "k"), want);
  EXPECT_EQ(ShardingOf(*m, "v"), want);
}

TEST(AttentionShardingRuleTest, GroupedQueryHeadsTieKvHeadsThroughAProduct) {
  auto m = ParseHloModule(R"(HloModule gqa, num_partitions=4

ENTRY main {
  q = f32[2,8,8,16] parameter(0)
  k = f32[2,2,8,16] parameter(1)
  v = f32[2,2,8,16] parameter(2)
  ROOT attn = (f32[2,8,8,16], f32[2,8,8]) custom-call(q, k, v), custom_call_target="weft.flex_attention"
}
)");
  const HloInstruction* attn = m->entry_computation()->root_instruction();
  auto rule = GetOpShardingRule(*attn);
  ASSERT_TRUE(rule.has_value());
  EXPECT_EQ(rule->operands[0][1].size(), 2u);  // q heads = kv heads * group
  const std::vector<int64_t> q_dims = {2, 8, 8, 16}, k_dims = {2, 2, 8, 16};
  // q heads split 2 ways: k heads split 2 ways.
  auto k2 =
      ProjectSharding(*rule, TensorRef::Operand(0), q_dims,
                      HloSharding::Parse("{devices=[1,2,1,1,2]<=[4] last_tile_dim_replicate}"),
                      TensorRef::Operand(1), k_dims);
  ASSERT_TRUE(k2.has_value());
  EXPECT_EQ(*k2, HloSharding::Parse("{devices=[1,2,1,1,2]<=[4] last_tile_dim_replicate}"));
  // q heads split 4 ways (beyond the 2 kv heads): k heads split 2, replicated 2.
  auto k4 = ProjectSharding(*rule, TensorRef::Operand(0), q_dims,
                            HloSharding::Parse("{devices=[1,4,1,1]<=[4]}"), TensorRef::Operand(1),
                            k_dims);
  ASSERT_TRUE(k4.has_value());
  EXPECT_EQ(*k4, HloSharding::Parse("{devices=[1,2,1,1,2]<=[4] last_tile_dim_replicate}"));
}

TEST(AttentionShardingRuleTest, BackwardGradientsShardLikeInputs) {
  auto m = ParseHloModule(R"(HloModule attn_bwd, num_partitions=4

ENTRY main {
  q = f32[2,4,8,16] parameter(0), sharding={devices=[2,1,2,1]<=[4]}
  k = f32[2,4,8,16] parameter(1), sharding={devices=[2,2,1,1]<=[4]}
  v = f32[2,4,8,16] parameter(2)
  out = f32[2,4,8,16] parameter(3)
  lse = f32[2,4,8] parameter(4)
  dout = f32[2,4,8,16] parameter(5)
  grads = (f32[2,4,8,16], f32[2,4,8,16], f32[2,4,8,16]) custom-call(q, k, v, out, lse, dout), custom_call_target="weft.flex_attention_backward"
  dq = f32[2,4,8,16] get-tuple-element(grads), index=0
  dk = f32[2,4,8,16] get-tuple-element(grads), index=1
  ROOT t = (f32[2,4,8,16], f32[2,4,8,16]) tuple(dq, dk)
}
)");
  PropagateShardings(*m);
  const HloSharding dq = ShardingOf(*m, "dq");
  const HloSharding dk = ShardingOf(*m, "dk");
  // Both are split 4 ways, on batch plus the dims their inputs split.
  EXPECT_EQ(dq.NumTiles(), 4) << dq.ToString();
  EXPECT_EQ(dk.NumTiles(), 4) << dk.ToString();
  EXPECT_EQ(dq.tile_assignment().dim(0), 2);
  EXPECT_EQ(dk.tile_assignment().dim(0), 2);
}

}  // namespace
}  // namespace weft
