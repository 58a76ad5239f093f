#include "weft/spmd/improve_sharding.h"

#include <gtest/gtest.h>

namespace weft {
namespace {

HloSharding S(std::string_view text) { return HloSharding::Parse(text); }
const std::vector<int64_t> kDims = {8, 16};

TEST(ImproveShardingTest, AnyShardingBeatsNone) {
  EXPECT_EQ(*ReturnImprovedSharding(S("{devices=[4,1]<=[4]}"), nullptr, kDims, false),
            S("{devices=[4,1]<=[4]}"));
  const HloSharding maximal = S("{maximal device=1}");
  EXPECT_FALSE(ReturnImprovedSharding(maximal, nullptr, kDims, false));  // never spreads
}

TEST(ImproveShardingTest, TiledIsOnlyReplacedByARefinement) {
  const HloSharding current = S("{devices=[2,1,2]<=[4] last_tile_dim_replicate}");
  // [1,4] has more tiles but moves data: kept out unless aggressive.
  EXPECT_FALSE(ReturnImprovedSharding(S("{devices=[1,4]<=[4]}"), &current, kDims, false));
  EXPECT_TRUE(ReturnImprovedSharding(S("{devices=[1,4]<=[4]}"), &current, kDims, false, true));
  // [4,1] refines [2,1] with the same device order.
  EXPECT_EQ(*ReturnImprovedSharding(S("{devices=[4,1]<=[4]}"), &current, kDims, false),
            S("{devices=[4,1]<=[4]}"));
}

TEST(ImproveShardingTest, PartialShardingsMergeWhenAllowed) {
  const HloSharding current = S("{devices=[2,1,2]<=[4] last_tile_dim_replicate}");
  const HloSharding other = S("{devices=[1,2,2]<=[2,2]T(1,0) last_tile_dim_replicate}");
  EXPECT_FALSE(ReturnImprovedSharding(other, &current, kDims, false));
  EXPECT_EQ(*ReturnImprovedSharding(other, &current, kDims, true), S("{devices=[2,2]<=[4]}"));
}

TEST(ImproveShardingTest, SubTiling) {
  EXPECT_TRUE(IsSubTilingOrEqualSharding(kDims, S("{devices=[4,1]<=[4]}"),
                                         S("{devices=[2,1,2]<=[4] last_tile_dim_replicate}")));
  EXPECT_FALSE(IsSubTilingOrEqualSharding(kDims, S("{devices=[4,1]3,2,1,0}"),
                                          S("{devices=[2,1,2]<=[4] last_tile_dim_replicate}")));
  // As XLA's: replicated and manual spread, a device does not.
  EXPECT_TRUE(IsSpatiallyPartitioned(S("{replicated}")));
  EXPECT_TRUE(IsSpatiallyPartitioned(S("{manual}")));
  EXPECT_TRUE(IsSpatiallyPartitioned(S("{{maximal device=1}, {manual}}")));
  EXPECT_FALSE(IsSpatiallyPartitioned(S("{maximal device=1}")));
}

}  // namespace
}  // namespace weft
