#include <fmt/format.h>
#include <gtest/gtest.h>

#include "partitioner_random.h"
#include "partitioner_test_util.h"

namespace weft::spmd_test {
namespace {

std::unique_ptr<HloModule> Dot(const std::string& lhs, const std::string& rhs,
                               const std::string& out, const std::string& dnums,
                               const std::string& ls, const std::string& rs, const std::string& os,
                               int64_t n) {
  return ExpectShardedEqualsUnsharded(fmt::format(R"(
HloModule dot
ENTRY main {{
  a = {} parameter(0), sharding={}
  b = {} parameter(1), sharding={}
  ROOT d = {} dot(a, b), {}, sharding={}
}}
)",
                                                  lhs, ls, rhs, rs, out, dnums, os),
                                      n);
}

const char* kMatmul = "lhs_contracting_dims={1}, rhs_contracting_dims={0}";
const char* kBatched =
    "lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}";

TEST(SpmdDotTest, BatchDimsShardedAlikeRunLocally) {
  auto m = Dot("f32[4,8,6]", "f32[4,6,5]", "f32[4,8,5]", kBatched, "{devices=[4,1,1]<=[4]}",
               "{devices=[4,1,1]<=[4]}", "{devices=[4,1,1]<=[4]}", 4);
  EXPECT_EQ(CountCollectives(*m), 0);
  EXPECT_EQ(FindNamed(*m, "d")->shape(), ParseShape("f32[1,8,5]"));
}

TEST(SpmdDotTest, ContractingDimShardedOnBothAllReduces) {
  auto m = Dot("f32[8,12]", "f32[12,6]", "f32[8,6]", kMatmul, "{devices=[1,4]<=[4]}",
               "{devices=[4,1]<=[4]}", "{replicated}", 4);
  auto reduces = FindAll(*m, HloOpcode::kAllReduce);
  ASSERT_EQ(reduces.size(), 1u);
  EXPECT_EQ(reduces[0]->attrs().replica_groups, (std::vector<std::vector<int64_t>>{{0, 1, 2, 3}}));
  EXPECT_EQ(reduces[0]->to_apply()->root_instruction()->opcode(), HloOpcode::kAdd);
  EXPECT_EQ(CountCollectives(*m), 1);
}

TEST(SpmdDotTest, PartialSumsReduceScatterWhenTheResultIsSharded) {
  auto m = Dot("f32[8,12]", "f32[12,6]", "f32[8,6]", kMatmul, "{devices=[1,4]<=[4]}",
               "{devices=[4,1]<=[4]}", "{devices=[4,1]<=[4]}", 4);
  auto scatters = FindAll(*m, HloOpcode::kReduceScatter);
  ASSERT_EQ(scatters.size(), 1u);
  EXPECT_EQ(scatters[0]->dimensions(), std::vector<int64_t>{0});
  EXPECT_EQ(CountCollectives(*m), 1);
  EXPECT_EQ(m->entry_computation()->root_instruction()->shape(), ParseShape("f32[2,6]"));
}

TEST(SpmdDotTest, ReduceScatterOverAnUnevenResultDim) {
  Dot("f32[7,12]", "f32[12,6]", "f32[7,6]", kMatmul, "{devices=[1,4]<=[4]}", "{devices=[4,1]<=[4]}",
      "{devices=[4,1]<=[4]}", 4);
}

TEST(SpmdDotTest, NonContractingShardingFlowsToTheResult) {
  auto m = Dot("f32[8,12]", "f32[12,6]", "f32[8,6]", kMatmul, "{devices=[4,1]<=[4]}",
               "{replicated}", "{devices=[4,1]<=[4]}", 4);
  EXPECT_EQ(CountCollectives(*m), 0);
  m = Dot("f32[8,12]", "f32[12,6]", "f32[8,6]", kMatmul,
          "{devices=[2,1,2]<=[4] last_tile_dim_replicate}",
          "{devices=[1,2,2]<=[2,2]T(1,0) last_tile_dim_replicate}", "{devices=[2,2]<=[4]}", 4);
  EXPECT_EQ(CountCollectives(*m), 0);
}

TEST(SpmdDotTest, MismatchedOperandsAreReshardedFirst) {
  Dot("f32[8,12]", "f32[12,6]", "f32[8,6]", kMatmul, "{devices=[4,1]<=[4]}", "{devices=[1,4]<=[4]}",
      "{devices=[2,2]<=[4]}", 4);
  Dot("f32[8,12]", "f32[12,6]", "f32[8,6]", kMatmul, "{devices=[1,4]<=[4]}", "{devices=[1,4]<=[4]}",
      "{devices=[1,4]<=[4]}", 4);
  Dot("f32[2,8,12]", "f32[2,12,6]", "f32[2,8,6]", kBatched, "{devices=[2,1,2]<=[4]}",
      "{devices=[1,1,4]<=[4]}", "{devices=[2,2,1]<=[4]}", 4);
}

// Column-parallel projections of one sequence-split activation h [1, 64, 8]
// (seq split 2 ways), each result wanted split on its columns. One dot alone
// is cheapest with its small weight gathered and the result moved from
// sequence-split to column-split (all-to-all); three dots of the same h
// share the gather of the whole sequence (the collective CSE merges them),
// so each pays a third of it and none needs an all-to-all.
std::unique_ptr<HloModule> Projections(int64_t count) {
  std::string params, dots, shapes, shardings, names;
  for (int64_t i = 0; i < count; ++i) {
    params += fmt::format("  w{0} = f32[8,8] parameter({1}), sharding={{devices=[1,2]<=[2]}}\n", i,
                          i + 1);
    dots += fmt::format(
        "  d{0} = f32[1,64,8] dot(h, w{0}), lhs_contracting_dims={{2}}, "
        "rhs_contracting_dims={{0}}, sharding={{devices=[1,1,2]<=[2]}}\n",
        i);
    const char* sep = i == 0 ? "" : ", ";
    shapes += fmt::format("{}f32[1,64,8]", sep);
    shardings += fmt::format("{}{{devices=[1,1,2]<=[2]}}", sep);
    names += fmt::format("{}d{}", sep, i);
  }
  return ExpectShardedEqualsUnsharded(fmt::format(R"(
HloModule projections
ENTRY main {{
  h = f32[1,64,8] parameter(0), sharding={{devices=[1,2,1]<=[2]}}
{}{}  ROOT t = ({}) tuple({}), sharding={{{}}}
}}
)",
                                                  params, dots, shapes, names, shardings),
                                      2);
}

TEST(SpmdDotTest, ProjectionsOfOneActivationShareItsGather) {
  auto one = Projections(1);
  EXPECT_EQ(FindAll(*one, HloOpcode::kAllToAll).size(), 1u) << PrintModule(*one);
  auto three = Projections(3);
  EXPECT_TRUE(FindAll(*three, HloOpcode::kAllToAll).empty()) << PrintModule(*three);
  const auto gathers = FindAll(*three, HloOpcode::kAllGather);
  ASSERT_EQ(gathers.size(), 3u) << PrintModule(*three);
  for (const HloInstruction* g : gathers) {
    EXPECT_EQ(g->operand(0)->name(), "h");
    EXPECT_EQ(g->shape(), ParseShape("f32[1,64,8]"));
  }
}

TEST(SpmdDotTest, UnevenContractingDimIsMasked) {
  auto m = Dot("f32[5,7]", "f32[7,3]", "f32[5,3]", kMatmul, "{devices=[1,4]<=[4]}",
               "{devices=[4,1]<=[4]}", "{replicated}", 4);
  EXPECT_EQ(FindAll(*m, HloOpcode::kSelect).size(), 2u);
}

TEST(SpmdDotTest, HybridShardedGradientReduceScattersThenAllReducesAShard) {
  // A weight gradient: activations [B, K] and cotangents [B, N] split along
  // the batch over (data=2, fsdp=4); the gradient [K, N] wanted split along
  // K over fsdp, replicated over data (HSDP). A reduce-scatter over each
  // fsdp group, then an all-reduce of the shard over data; never an
  // all-reduce of the whole [K, N] over all 8 devices.
  auto m = Dot("f32[16,24]", "f32[16,10]", "f32[24,10]",
               "lhs_contracting_dims={0}, rhs_contracting_dims={0}", "{devices=[8,1]<=[8]}",
               "{devices=[8,1]<=[8]}", "{devices=[4,1,2]<=[2,4]T(1,0) last_tile_dim_replicate}", 8);
  auto scatters = FindAll(*m, HloOpcode::kReduceScatter);
  auto reduces = FindAll(*m, HloOpcode::kAllReduce);
  ASSERT_EQ(scatters.size(), 1u);
  ASSERT_EQ(reduces.size(), 1u);
  EXPECT_EQ(scatters[0]->attrs().replica_groups,
            (std::vector<std::vector<int64_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(reduces[0]->attrs().replica_groups,
            (std::vector<std::vector<int64_t>>{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(reduces[0]->shape(), ParseShape("f32[6,10]"));
  EXPECT_EQ(CountCollectives(*m), 2);
}

TEST(SpmdDotTest, GradientWantedSplitOnTwoDimsReduceScattersAlongEach) {
  // The batch split over (data=2, fsdp=2, tensor=2); the gradient [K, N]
  // wanted split K over fsdp, N over tensor, replicated over data (a wk/wv
  // gradient under FSDP x TP beside a data axis): a reduce-scatter along
  // each dim, then an all-reduce of the [K/2, N/2] shard over data only.
  auto m =
      Dot("f32[16,12]", "f32[16,10]", "f32[12,10]",
          "lhs_contracting_dims={0}, rhs_contracting_dims={0}", "{devices=[8,1]<=[8]}",
          "{devices=[8,1]<=[8]}", "{devices=[2,2,2]<=[2,2,2]T(1,2,0) last_tile_dim_replicate}", 8);
  auto scatters = FindAll(*m, HloOpcode::kReduceScatter);
  auto reduces = FindAll(*m, HloOpcode::kAllReduce);
  ASSERT_EQ(scatters.size(), 2u);
  ASSERT_EQ(reduces.size(), 1u);
  EXPECT_EQ(reduces[0]->shape(), ParseShape("f32[6,5]"));
  EXPECT_EQ(reduces[0]->attrs().replica_groups,
            (std::vector<std::vector<int64_t>>{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(CountCollectives(*m), 3);
}

TEST(SpmdDotTest, RandomShardingsOnOneToEightDevices) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 60; ++trial) {
    const int64_t n = std::uniform_int_distribution<int64_t>(1, 8)(rng);
    auto dim = [&] { return std::uniform_int_distribution<int64_t>(1, 7)(rng); };
    const int64_t b = dim(), m = dim(), k = dim(), c = dim();
    const std::string ls = RandomSharding(n, 3, rng).ToString();
    const std::string rs = RandomSharding(n, 3, rng).ToString();
    const std::string os = RandomSharding(n, 3, rng).ToString();
    SCOPED_TRACE(fmt::format("n={} b={} m={} k={} c={} {} {} {}", n, b, m, k, c, ls, rs, os));
    Dot(fmt::format("f32[{},{},{}]", b, m, k), fmt::format("f32[{},{},{}]", b, k, c),
        fmt::format("f32[{},{},{}]", b, m, c), kBatched, ls, rs, os, n);
    if (::testing::Test::HasFailure()) return;
  }
}

}  // namespace
}  // namespace weft::spmd_test
