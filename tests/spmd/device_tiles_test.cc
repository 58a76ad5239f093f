// DeviceTiles: the per-device tile tables the gather and scatter handlers
// combine, against tilings written out by hand.
#include "device_tiles.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <optional>
#include <random>
#include <vector>

#include "weft/base/error.h"
#include "weft/sharding/hlo_sharding.h"

namespace weft::spmd {
namespace {

using Index = std::vector<std::vector<int64_t>>;

TEST(DeviceTiles, OfReadsEachDevicesTileAndReplicatedIsOneTile) {
  // [2, 2] tiles, devices listed column-major: device 2 holds tile (0, 1).
  const DeviceTiles t = DeviceTiles::Of(HloSharding::Parse("{devices=[2,2]0,2,1,3}"), 2, 4);
  EXPECT_EQ(t.counts, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(t.Rows(), (Index{{0, 0}, {1, 0}, {0, 1}, {1, 1}}));
  EXPECT_EQ(t.Flat(2), 1);
  const DeviceTiles r = DeviceTiles::Of(HloSharding::Replicate(), 3, 4);
  EXPECT_EQ(r.counts, (std::vector<int64_t>{1, 1, 1}));
  EXPECT_EQ(r.NumTiles(), 1);
}

TEST(DeviceTiles, MapAndInverseCarryTilesBetweenArrays) {
  // Indices [batch, 1] split 4 ways along batch; a result [feature, batch]
  // takes its dim 1 from the indices' dim 0.
  const DeviceTiles idx = DeviceTiles::Of(HloSharding::Parse("{devices=[4,1]0,1,2,3}"), 2, 4);
  const std::vector<int64_t> out_from_indices = {-1, 0};
  const DeviceTiles out = DeviceTiles::Map(idx, out_from_indices);
  EXPECT_EQ(out.counts, (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(out.Rows()[3], (std::vector<int64_t>{0, 3}));
  // And back: the indices' dim 0 from the result's dim 1, dim 1 from nothing.
  const std::vector<int64_t> back = Inverse(out_from_indices, 2);
  EXPECT_EQ(back, (std::vector<int64_t>{1, -1}));
  EXPECT_EQ(DeviceTiles::Map(out, back), idx);
}

TEST(DeviceTiles, JoinTakesTheSecondMapWhereItHasADim) {
  // a: [2, 2] over 4 devices (row-major); b: [4] over 4 devices (reversed).
  const DeviceTiles a = DeviceTiles::Of(HloSharding::Parse("{devices=[2,2]0,1,2,3}"), 2, 4);
  const DeviceTiles b = DeviceTiles::Of(HloSharding::Parse("{devices=[4]3,2,1,0}"), 1, 4);
  // Result dims: 0 <- a's 1, 1 <- b's 0, 2 <- nothing; a's map also names dim 1 (overridden).
  const DeviceTiles j = DeviceTiles::Join(a, {1, 0, -1}, b, {-1, 0, -1});
  EXPECT_EQ(j.counts, (std::vector<int64_t>{2, 4, 1}));
  EXPECT_EQ(j.Rows(), (Index{{0, 3, 0}, {1, 2, 0}, {0, 1, 0}, {1, 0, 0}}));
  EXPECT_THROW(DeviceTiles::Join(a, {0}, b, {0, -1}), Error);
}

TEST(DeviceTiles, CoarsenGivesPartialReplicationAndUnequalTablesAreNotShardings) {
  DeviceTiles t = DeviceTiles::Of(HloSharding::Parse("{devices=[4]0,1,2,3}"), 1, 4);
  t.Coarsen(0, 2);  // tiles {0,1} -> 0, {2,3} -> 1
  EXPECT_EQ(t.Rows(), (Index{{0}, {0}, {1}, {1}}));
  const auto s = t.ToSharding();
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(*s, HloSharding::Parse("{devices=[2,2]0,1,2,3 last_tile_dim_replicate}"));
  t.Unsplit(0);
  EXPECT_EQ(*t.ToSharding(), HloSharding::Replicate());
  // Three devices on tile 0, one on tile 1: no sharding says that.
  DeviceTiles uneven =
      DeviceTiles::Of(HloSharding::Parse("{devices=[2,2]0,1,2,3 last_tile_dim_replicate}"), 1, 4);
  uneven.SetRows({{0}, {0}, {0}, {1}});
  EXPECT_FALSE(uneven.ToSharding().has_value());
  EXPECT_THROW(t.Coarsen(0, 3), Error);
}

TEST(DeviceTiles, GroupsOverKeyCollectEachKeyTileOnce) {
  // Result [2] x key [2] over 4 devices: devices 0,1 hold result tile 0 and
  // key tiles 0,1; devices 2,3 result tile 1 and key tiles 0,1.
  const DeviceTiles key =
      DeviceTiles::Of(HloSharding::Parse("{devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}"), 2, 4);
  const DeviceTiles result =
      DeviceTiles::Of(HloSharding::Parse("{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}"), 2, 4);
  const auto groups = GroupsOverKey(result, DeviceTiles::Map(key, {1}));
  ASSERT_TRUE(groups.has_value());
  EXPECT_EQ(*groups, (Index{{0, 1}, {2, 3}}));
  // A key tile missing from a result tile's holders: no groups.
  const DeviceTiles same = DeviceTiles::Map(key, {-1});
  DeviceTiles skewed = DeviceTiles::Map(key, {1});
  skewed.SetRows({{0}, {0}, {1}, {1}});
  EXPECT_FALSE(GroupsOverKey(result, skewed).has_value());
  EXPECT_TRUE(GroupsOverKey(result, same).has_value());
}

// GroupsOverKey against its definition, on random tables: the holders of
// each result tile, split into groups that hold every key tile once, members
// in key order, copies dealt in id order; groups sorted. Includes results
// with more tiles than devices (tiles nobody holds).
TEST(DeviceTiles, GroupsOverKeyMatchesItsDefinitionOnRandomTables) {
  std::mt19937 rng(7);
  int with_groups = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t n = 1 + static_cast<int64_t>(rng() % 12);
    DeviceTiles result = DeviceTiles::Of(HloSharding::Replicate(), 2, n);
    DeviceTiles key = DeviceTiles::Of(HloSharding::Replicate(), 1, n);
    result.counts = {1 + static_cast<int64_t>(rng() % 4), 1 + static_cast<int64_t>(rng() % 5)};
    key.counts = {1 + static_cast<int64_t>(rng() % 3)};
    Index result_rows(n), key_rows(n);
    // Half the trials: a structured table (result tile = device / k, key
    // cycling), which has groups; else random tiles.
    const bool structured = trial % 2 == 0;
    const int64_t keys = key.counts[0];
    for (int64_t dev = 0; dev < n; ++dev) {
      if (structured && n % keys == 0) {
        const int64_t tile = dev / keys;
        result_rows[dev] = {tile / result.counts[1] % result.counts[0], tile % result.counts[1]};
        key_rows[dev] = {dev % keys};
      } else {
        result_rows[dev] = {static_cast<int64_t>(rng() % result.counts[0]),
                            static_cast<int64_t>(rng() % result.counts[1])};
        key_rows[dev] = {static_cast<int64_t>(rng() % keys)};
      }
    }
    result.SetRows(result_rows);
    key.SetRows(key_rows);
    // The definition, by brute force.
    std::optional<Index> expected = Index{};
    std::map<int64_t, std::vector<int64_t>> holders;  // result tile -> devices ascending
    for (int64_t dev = 0; dev < n; ++dev) holders[result.Flat(dev)].push_back(dev);
    for (const auto& [tile, devs] : holders) {
      std::vector<std::vector<int64_t>> by_key(keys);
      for (int64_t dev : devs) by_key[key.Flat(dev)].push_back(dev);
      const size_t copies = devs.size() / keys;
      bool even = devs.size() % keys == 0;
      for (const auto& k : by_key) even = even && k.size() == copies;
      if (!even) {
        expected.reset();
        break;
      }
      for (size_t c = 0; c < copies; ++c) {
        std::vector<int64_t> group;
        for (const auto& k : by_key) group.push_back(k[c]);
        expected->push_back(group);
      }
    }
    if (expected) std::sort(expected->begin(), expected->end());
    SCOPED_TRACE(trial);
    EXPECT_EQ(GroupsOverKey(result, key), expected);
    with_groups += expected.has_value();
  }
  EXPECT_GT(with_groups, 50);
}

TEST(DeviceTiles, CoarseningsListEveryDivisorFinestFirst) {
  const DeviceTiles base =
      DeviceTiles::Of(HloSharding::Parse("{devices=[4,2]0,1,2,3,4,5,6,7}"), 2, 8);
  const std::vector<DeviceTiles> all = Coarsenings(base, {0});
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0], base);
  std::vector<int64_t> coarser = {all[1].counts[0], all[2].counts[0]};
  std::sort(coarser.begin(), coarser.end());
  EXPECT_EQ(coarser, (std::vector<int64_t>{1, 2}));
  for (const DeviceTiles& t : all) EXPECT_EQ(t.counts[1], 2);
  EXPECT_EQ(Coarsenings(base, {}).size(), 1u);
}

// A key with no dims (a table not split along the vocabulary) has one tile:
// each device sums with nobody but the holders of its own result tile.
TEST(DeviceTiles, AKeyWithNoDimsHasOneTile) {
  const DeviceTiles result = DeviceTiles::Of(HloSharding::Parse("{devices=[4,1]<=[4]}"), 2, 4);
  const DeviceTiles key = DeviceTiles::Map(result, {});
  EXPECT_EQ(key.rank(), 0);
  EXPECT_EQ(key.NumTiles(), 1);
  EXPECT_EQ(key.Flat(3), 0);
  EXPECT_EQ(GroupsOverKey(result, key),
            (std::optional<std::vector<std::vector<int64_t>>>{{{0}, {1}, {2}, {3}}}));
}

// With hints (the tile counts of the arrays a plan combines) a dim of n
// tiles keeps n, 1, and each hint h dividing n as h or n / h tiles.
TEST(DeviceTiles, HintedCoarseningsFreeWhatAnotherSplitNeeds) {
  const DeviceTiles base = DeviceTiles::Of(HloSharding::Parse("{devices=[64,1]<=[64]}"), 2, 64);
  const auto counts = [](const std::vector<DeviceTiles>& all) {
    std::vector<int64_t> c;
    for (const DeviceTiles& t : all) c.push_back(t.counts[0]);
    return c;
  };
  EXPECT_EQ(counts(Coarsenings(base, {0})), (std::vector<int64_t>{64, 32, 16, 8, 4, 2, 1}));
  EXPECT_EQ(counts(Coarsenings(base, {0}, {4})), (std::vector<int64_t>{64, 16, 4, 1}));
  EXPECT_EQ(counts(Coarsenings(base, {0}, {8, 3})), (std::vector<int64_t>{64, 8, 1}));
  const DeviceTiles other = DeviceTiles::Of(HloSharding::Parse("{devices=[2,4,8]<=[64]}"), 3, 64);
  EXPECT_EQ(TileCounts({&base, &other}), (std::vector<int64_t>{64, 2, 4, 8}));
}

}  // namespace
}  // namespace weft::spmd
