#include "weft/spmd/reshard.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "partitioner_random.h"
#include "partitioner_test_util.h"

namespace weft::spmd_test {
namespace {

// A module whose root is the parameter copied from sharding `from` to `to`.
std::unique_ptr<HloModule> CopyModule(const std::string& shape, const std::string& from,
                                      const std::string& to) {
  return ParseHloModule(fmt::format(R"(
HloModule reshard
ENTRY main {{
  p = {0} parameter(0), sharding={1}
  ROOT c = {0} copy(p), sharding={2}
}}
)",
                                    shape, from, to));
}

std::unique_ptr<HloModule> Check(const std::string& shape, const std::string& from,
                                 const std::string& to, int64_t n) {
  return ExpectShardedEqualsUnsharded(*CopyModule(shape, from, to), n);
}

TEST(ReshardTest, SameShardingMovesNothing) {
  auto m = Check("f32[8,4]", "{devices=[4,1]<=[4]}", "{devices=[4,1]<=[4]}", 4);
  EXPECT_EQ(CountCollectives(*m), 0);
}

TEST(ReshardTest, ReplicatedToTiledSlicesLocallyByPartitionId) {
  auto m = Check("f32[8,6]", "{replicated}", "{devices=[4,2]<=[8]}", 8);
  EXPECT_EQ(CountCollectives(*m), 0);
  EXPECT_EQ(FindAll(*m, HloOpcode::kPartitionId).size(), 1u);
  ASSERT_EQ(FindAll(*m, HloOpcode::kDynamicSlice).size(), 3u);  // two offset tables + the slice
  EXPECT_EQ(FindNamed(*m, "c")->shape(), ParseShape("f32[2,3]"));
}

TEST(ReshardTest, TiledToReplicatedAllGathersEachSplitDim) {
  auto m = Check("f32[8,6]", "{devices=[2,2]0,1,2,3}", "{replicated}", 4);
  auto gathers = FindAll(*m, HloOpcode::kAllGather);
  ASSERT_EQ(gathers.size(), 2u);
  EXPECT_EQ(gathers[0]->dimensions(), std::vector<int64_t>{0});
  EXPECT_EQ(gathers[0]->attrs().replica_groups,
            (std::vector<std::vector<int64_t>>{{0, 2}, {1, 3}}));
  EXPECT_EQ(gathers[1]->dimensions(), std::vector<int64_t>{1});
  EXPECT_EQ(gathers[1]->attrs().replica_groups,
            (std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}}));
}

TEST(ReshardTest, UnevenTiledToReplicatedDropsThePadding) {
  auto m = Check("f32[7,5]", "{devices=[4,1]<=[4]}", "{replicated}", 4);
  EXPECT_EQ(FindAll(*m, HloOpcode::kAllGather).size(), 1u);
  EXPECT_EQ(FindNamed(*m, "c")->shape(), ParseShape("f32[7,5]"));
}

TEST(ReshardTest, MovingTheSplitDimUsesAllToAll) {
  auto m = Check("f32[8,12]", "{devices=[4,1]<=[4]}", "{devices=[1,4]<=[4]}", 4);
  ASSERT_EQ(FindAll(*m, HloOpcode::kAllToAll).size(), 1u);
  EXPECT_EQ(FindAll(*m, HloOpcode::kAllGather).size(), 0u);
  EXPECT_EQ(FindNamed(*m, "c")->shape(), ParseShape("f32[8,3]"));
}

TEST(ReshardTest, AllToAllWithUnevenDimsAndPartialReplication) {
  Check("f32[5,7]", "{devices=[3,1]<=[3]}", "{devices=[1,3]<=[3]}", 3);
  auto m = Check("f32[6,5,3]", "{devices=[2,1,1,2]<=[4] last_tile_dim_replicate}",
                 "{devices=[1,2,1,2]<=[4] last_tile_dim_replicate}", 4);
  ASSERT_EQ(FindAll(*m, HloOpcode::kAllToAll).size(), 1u);
  EXPECT_EQ(FindAll(*m, HloOpcode::kAllToAll)[0]->attrs().replica_groups,
            (std::vector<std::vector<int64_t>>{{0, 2}, {1, 3}}));
}

TEST(ReshardTest, PermutedDevicesUseCollectivePermute) {
  auto m = Check("f32[8,4]", "{devices=[4,1]0,1,2,3}", "{devices=[4,1]1,0,3,2}", 4);
  auto permutes = FindAll(*m, HloOpcode::kCollectivePermute);
  ASSERT_EQ(permutes.size(), 1u);
  EXPECT_EQ(permutes[0]->attrs().source_target_pairs,
            (std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {1, 0}, {2, 3}, {3, 2}}));
  EXPECT_EQ(CountCollectives(*m), 1);
}

TEST(ReshardTest, AddingPartialReplicationGathersWithinSubgroups) {
  auto m = Check("f32[8,6]", "{devices=[2,2]<=[4]}",
                 "{devices=[2,1,2]<=[4] last_tile_dim_replicate}", 4);
  auto gathers = FindAll(*m, HloOpcode::kAllGather);
  ASSERT_EQ(gathers.size(), 1u);
  EXPECT_EQ(gathers[0]->dimensions(), std::vector<int64_t>{1});
  EXPECT_EQ(gathers[0]->attrs().replica_groups,
            (std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}}));
  EXPECT_EQ(CountCollectives(*m), 1);
}

TEST(ReshardTest, RemovingPartialReplicationSlicesLocally) {
  auto m = Check("f32[8,6]", "{devices=[2,1,2]<=[4] last_tile_dim_replicate}",
                 "{devices=[2,2]<=[4]}", 4);
  EXPECT_EQ(CountCollectives(*m), 0);
  EXPECT_EQ(FindNamed(*m, "c")->shape(), ParseShape("f32[4,3]"));
}

TEST(ReshardTest, UnevenReplicatedToTiledPadsBeforeSlicing) {
  auto m = Check("f32[5,3]", "{replicated}", "{devices=[4,1]<=[4]}", 4);
  EXPECT_EQ(CountCollectives(*m), 0);
  EXPECT_EQ(FindNamed(*m, "c")->shape(), ParseShape("f32[2,3]"));
}

TEST(ReshardTest, CostPrefersSubgroupGatherOverFullGather) {
  spmd::PartitionContext context;
  HloModule module("cost");
  context.module = &module;
  context.num_partitions = 4;
  const Shape shape(PrimitiveType::kF32, {8, 8});
  const HloSharding tiled = HloSharding::Parse("{devices=[2,2]<=[4]}");
  const HloSharding partial = HloSharding::Parse("{devices=[2,1,2]<=[4] last_tile_dim_replicate}");
  EXPECT_EQ(spmd::ReshardCost(&context, shape, tiled, tiled), 0);
  EXPECT_EQ(spmd::ReshardCost(&context, shape, HloSharding::Replicate(), tiled), 0);
  EXPECT_EQ(spmd::ReshardCost(&context, shape, tiled, partial), 4 * 8 * 4);
  EXPECT_EQ(spmd::ReshardCost(&context, shape, tiled, HloSharding::Replicate()),
            4 * 8 * 4 + 8 * 8 * 4);
}

// Property: any sharding to any other, 1..8 devices, even and uneven dims.
TEST(ReshardTest, RandomPairsOfShardingsPreserveValues) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 120; ++trial) {
    const int64_t n = std::uniform_int_distribution<int64_t>(1, 8)(rng);
    const int64_t rank = std::uniform_int_distribution<int64_t>(1, 3)(rng);
    std::vector<int64_t> dims;
    for (int64_t d = 0; d < rank; ++d)
      dims.push_back(std::uniform_int_distribution<int64_t>(1, 9)(rng));
    const Shape shape(PrimitiveType::kF32, dims);
    const HloSharding from = RandomSharding(n, rank, rng);
    const HloSharding to = RandomSharding(n, rank, rng);
    SCOPED_TRACE(
        fmt::format("n={} {} {} -> {}", n, shape.ToString(), from.ToString(), to.ToString()));
    Check(shape.ToString(), from.ToString(), to.ToString(), n);
    if (::testing::Test::HasFailure()) return;
  }
}

}  // namespace
}  // namespace weft::spmd_test
