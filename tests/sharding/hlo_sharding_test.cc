#include "weft/sharding/hlo_sharding.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <unordered_set>

namespace weft {
namespace {

// Every form XLA prints, in XLA's canonical spelling: parse then print must
// give the same text back.
TEST(HloShardingTest, CanonicalFormsRoundTrip) {
  const char* kForms[] = {
      "{replicated}",
      "{manual}",
      "{unknown}",
      "{maximal device=3}",
      "{devices=[2]0,1}",
      "{devices=[2,2]3,1,2,0}",
      "{devices=[4,2]<=[8]}",
      "{devices=[4,2]<=[2,4]T(1,0)}",
      "{devices=[2,2,2]<=[4,2]T(1,0)}",
      "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}",
      "{devices=[2,1,2]<=[4] last_tile_dim_replicate}",
      "{devices=[2,1,4]<=[2,2,2]T(1,0,2) last_tile_dim_replicate}",
      "{devices=[2,2]<=[4] last_tile_dims={manual}}",
      "{devices=[2,2,2]<=[8] last_tile_dims={manual, replicated}}",
      "{devices=[2,2,2]0,1,4,5,2,3,6,7 last_tile_dims={manual, replicated}}",
      "{unreduced}",
      "{devices=[1,2,2]<=[4] last_tile_dims={unreduced}}",
      "{devices=[2,2,2,2]<=[2,2,2,2]T(0,2,1,3) last_tile_dims={unreduced, replicated}}",
      "{unreduced shard_as 4}",
      "{unknown shard_as 0}",
      "{unknown shard_like 7}",
      "{replicated shard_as 1}",
      "{manual shard_like 2}",
      "{maximal device=0 shard_as 3}",
      "{devices=[2,1]0,1 shard_like 1}",
      "{devices=[4,1,2]<=[8] last_tile_dim_replicate shard_as 5}",
      "{}",
      "{{replicated}, {devices=[2]0,1}}",
      "{{replicated}, {manual}, {maximal device=1}, {unknown shard_as 2}, {devices=[2]1,0}, "
      "/*index=5*/{replicated}, {devices=[2,2]<=[4] last_tile_dims={manual}}}",
  };
  for (const char* text : kForms) {
    SCOPED_TRACE(text);
    HloSharding s = HloSharding::Parse(text);
    EXPECT_EQ(s.ToString(), text);
    EXPECT_EQ(HloSharding::Parse(s.ToString()), s);
  }
}

TEST(HloShardingTest, ParseNormalizesLikeXla) {
  struct Case {
    const char* in;
    const char* out;
  };
  const Case kCases[] = {
      // Identity transposes and size-1 dims vanish from the iota form.
      {"{devices=[4,2]<=[2,4]}", "{devices=[4,2]<=[8]}"},
      {"{devices=[4,2]<=[1,2,4]T(0,1,2)}", "{devices=[4,2]<=[8]}"},
      {"{devices=[2,2,2]<=[2,2,2]T(1,2,0)}", "{devices=[2,2,2]<=[2,4]T(1,0)}"},
      {"{devices=[2,2,2]<=[2,2,2]T(2,0,1)}", "{devices=[2,2,2]<=[4,2]T(1,0)}"},
      // Sorting replication groups keeps the iota form when there is one.
      {"{devices=[2,1,4]<=[2,4]T(1,0) last_tile_dim_replicate}",
       "{devices=[2,1,4]<=[2,2,2]T(1,0,2) last_tile_dim_replicate}"},
      // Replica order inside a replication group is irrelevant: sorted.
      {"{devices=[2,2]1,0,3,2 last_tile_dim_replicate}",
       "{devices=[2,2]0,1,2,3 last_tile_dim_replicate}"},
      // Degenerate partial replication.
      {"{devices=[1,4]0,1,2,3 last_tile_dim_replicate}", "{replicated}"},
      // A device list broken across lines, the next one starting with ','.
      {"{devices=[4,2]0,2,4,6\n,1,3,5,7}", "{devices=[4,2]0,2,4,6,1,3,5,7}"},
      {"{devices=[2,2]0,1 ,\n 2,3 last_tile_dim_replicate}",
       "{devices=[2,2]0,1,2,3 last_tile_dim_replicate}"},
      {"{devices=[4,1]<=[4] last_tile_dim_replicate}", "{devices=[4]<=[4]}"},
      {"{devices=[2,2]<=[4] last_tile_dims={replicated}}",
       "{devices=[2,2]<=[4] last_tile_dim_replicate}"},
      {"{devices=[1,4]<=[4] last_tile_dims={manual}}", "{manual}"},
      {"{devices=[2,1,2]<=[4] last_tile_dims={manual, replicated}}",
       "{devices=[2,2]<=[4] last_tile_dim_replicate}"},
      // Subgroups are reordered manual-first; same-type subgroups merge.
      {"{devices=[2,2,2]<=[8] last_tile_dims={replicated, manual}}",
       "{devices=[2,2,2]<=[2,2,2]T(0,2,1) last_tile_dims={manual, replicated}}"},
      {"{devices=[2,2,2]<=[8] last_tile_dims={manual, manual}}",
       "{devices=[2,4]<=[8] last_tile_dims={manual}}"},
      // Unreduced subgroups go between manual and replicated ones (XLA's
      // order); an all-unreduced one without data tiling is {unreduced}.
      {"{devices=[2,2,2]<=[8] last_tile_dims={replicated, unreduced}}",
       "{devices=[2,2,2]<=[2,2,2]T(0,2,1) last_tile_dims={unreduced, replicated}}"},
      {"{devices=[1,4]<=[4] last_tile_dims={unreduced}}", "{unreduced}"},
      {"{devices=[2,2,1]<=[4] last_tile_dims={unreduced, replicated}}",
       "{devices=[2,2]<=[4] last_tile_dims={unreduced}}"},
      // Whitespace, comments and sharding metadata are tolerated.
      {"{ devices=[2]0,1  metadata={op_name=\"a{b}\"} }", "{devices=[2]0,1}"},
      // XLA's CSE-prevention mark is the metadata kept (and compared as none).
      {"{replicated metadata={ op_name=\"_sharding_propagation_cse_prevention\" }}",
       "{replicated metadata={op_name=\"_sharding_propagation_cse_prevention\"}}"},
      {"{ {replicated} , /*index=1*/ {manual} }", "{{replicated}, {manual}}"},
  };
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.in);
    EXPECT_EQ(HloSharding::Parse(c.in).ToString(), c.out);
  }
}

// Unreduced axes (devices holding addends of the value) and the same layout
// with the addends summed, as XLA's ConvertUnreducedSharding sums them.
TEST(HloShardingTest, UnreducedAxesAndTheirSum) {
  const HloSharding all = HloSharding::Parse("{unreduced shard_as 2}");
  EXPECT_TRUE(all.IsUnreduced());
  EXPECT_TRUE(all.HasUnreduced());
  EXPECT_FALSE(all.IsReplicated());
  EXPECT_FALSE(all.IsTileMaximal());
  EXPECT_EQ(all.WithoutUnreduced().ToString(), "{replicated shard_as 2}");

  const HloSharding sub =
      HloSharding::Parse("{devices=[2,2,2]<=[2,2,2]T(0,2,1) last_tile_dims={unreduced}}");
  EXPECT_FALSE(sub.IsUnreduced());
  EXPECT_TRUE(sub.HasUnreduced());
  EXPECT_EQ(sub.SubgroupUnreducedDim(), 2);
  EXPECT_EQ(sub.TiledDataRank(), 2);
  EXPECT_EQ(sub.SubgroupReplicationDim(), -1);
  EXPECT_EQ(sub.WithoutUnreduced().ToString(),
            "{devices=[2,2,2]<=[2,2,2]T(0,2,1) last_tile_dim_replicate}");

  // With a replicated subgroup too, the two merge into one replicated dim.
  const HloSharding both = HloSharding::Parse(
      "{devices=[2,2,2,2]<=[2,2,2,2]T(0,2,1,3) last_tile_dims={unreduced, replicated}}");
  EXPECT_EQ(both.SubgroupUnreducedDim(), 2);
  EXPECT_EQ(both.SubgroupReplicationDim(), 3);
  const HloSharding summed = both.WithoutUnreduced();
  EXPECT_FALSE(summed.HasUnreduced());
  EXPECT_EQ(summed.tile_assignment().dims(), (std::vector<int64_t>{2, 2, 4}));
  for (int64_t device = 0; device < 16; ++device) {
    EXPECT_EQ(summed.TileIndexForDevice(device), both.TileIndexForDevice(device)) << device;
  }

  const HloSharding tuple = HloSharding::Parse("{{replicated}, {unreduced}}");
  EXPECT_TRUE(tuple.HasUnreduced());
  EXPECT_FALSE(tuple.IsUnreduced());
  EXPECT_EQ(tuple.WithoutUnreduced().ToString(), "{{replicated}, {replicated}}");
  const HloSharding plain = HloSharding::Parse("{devices=[2,2]<=[4] last_tile_dim_replicate}");
  EXPECT_FALSE(plain.HasUnreduced());
  EXPECT_EQ(plain.WithoutUnreduced(), plain);
  EXPECT_NE(HloSharding::Unreduced(), HloSharding::Replicate());
  EXPECT_NE(HloSharding::Unreduced().Hash(), HloSharding::Replicate().Hash());
}

TEST(HloShardingTest, TheCsePreventionMarkIsKeptButNotCompared) {
  const HloSharding marked = HloSharding::Parse(
      "{devices=[2]0,1 metadata={op_name=\"_sharding_propagation_cse_prevention\"}}");
  EXPECT_TRUE(marked.IsCsePrevention());
  EXPECT_EQ(marked, HloSharding::Parse("{devices=[2]0,1}"));
  EXPECT_EQ(marked.Hash(), HloSharding::Parse("{devices=[2]0,1}").Hash());
  EXPECT_FALSE(
      HloSharding::Parse("{devices=[2]0,1 metadata={op_name=\"other\"}}").IsCsePrevention());
  EXPECT_FALSE(marked.WithCsePrevention(false).IsCsePrevention());
}

TEST(HloShardingTest, KindQueries) {
  HloSharding tiled = HloSharding::Parse("{devices=[2,1,2]<=[4] last_tile_dim_replicate}");
  EXPECT_TRUE(tiled.IsTiled());
  EXPECT_FALSE(tiled.IsTileMaximal());
  EXPECT_FALSE(tiled.IsReplicated());
  EXPECT_TRUE(tiled.ReplicateOnLastTileDim());
  EXPECT_TRUE(tiled.HasPartialReplication());
  EXPECT_EQ(tiled.TiledDataRank(), 2);
  EXPECT_EQ(tiled.NumTiles(), 2);
  EXPECT_EQ(tiled.TilesPerDim(), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(tiled.SubgroupReplicationDim(), 2);
  EXPECT_EQ(tiled.SubgroupManualDim(), -1);

  HloSharding mixed =
      HloSharding::Parse("{devices=[2,2,2]<=[8] last_tile_dims={manual, replicated}}");
  EXPECT_EQ(mixed.TiledDataRank(), 1);
  EXPECT_EQ(mixed.SubgroupManualDim(), 1);
  EXPECT_EQ(mixed.SubgroupReplicationDim(), 2);
  EXPECT_FALSE(mixed.ReplicateOnLastTileDim());
  EXPECT_TRUE(mixed.IsManualOrPartlyManual());
  EXPECT_FALSE(tiled.IsManualOrPartlyManual());
  EXPECT_TRUE(HloSharding::Manual().IsManualOrPartlyManual());
  EXPECT_FALSE(HloSharding::Replicate().IsManualOrPartlyManual());

  EXPECT_TRUE(HloSharding::Replicate().IsTileMaximal());
  EXPECT_TRUE(HloSharding::AssignDevice(2).IsTileMaximal());
  EXPECT_TRUE(HloSharding::AssignDevice(2).IsMaximal());
  EXPECT_EQ(HloSharding::AssignDevice(2).device(), 2);
  EXPECT_FALSE(HloSharding::Manual().IsTileMaximal());
  EXPECT_TRUE(HloSharding::Manual().IsManual());
  EXPECT_TRUE(HloSharding::Unknown().IsUnknown());

  HloSharding tuple = HloSharding::Parse("{{replicated}, {replicated}}");
  EXPECT_TRUE(tuple.IsTuple());
  EXPECT_TRUE(tuple.IsReplicated());
  EXPECT_FALSE(HloSharding::Parse("{{replicated}, {maximal device=0}}").IsReplicated());
  EXPECT_TRUE(HloSharding::Parse("{{replicated}, {maximal device=0}}").IsTileMaximal());
  EXPECT_THROW(HloSharding::Tuple({tuple}), Error);
}

TEST(HloShardingTest, EqualityAndHash) {
  // Same devices in iota and explicit form: equal, same hash.
  HloSharding a = HloSharding::Parse("{devices=[2,2]<=[2,2]T(1,0)}");
  HloSharding b = HloSharding::Parse("{devices=[2,2]0,2,1,3}");
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.Hash(), b.Hash());
  EXPECT_NE(a, HloSharding::Parse("{devices=[2,2]0,1,2,3}"));
  EXPECT_NE(a, a.WithShardGroup(ShardGroup::As(0)));
  EXPECT_NE(a.WithShardGroup(ShardGroup::As(0)), a.WithShardGroup(ShardGroup::Like(0)));
  EXPECT_NE(HloSharding::Parse("{devices=[2,2]<=[4]}"),
            HloSharding::Parse("{devices=[2,2]<=[4] last_tile_dim_replicate}"));
  EXPECT_NE(HloSharding::Parse("{devices=[2,2]<=[4] last_tile_dims={manual}}"),
            HloSharding::Parse("{devices=[2,2]<=[4] last_tile_dim_replicate}"));
  EXPECT_NE(HloSharding::AssignDevice(0), HloSharding::AssignDevice(1));
  EXPECT_NE(HloSharding::Replicate(), HloSharding::Manual());

  std::unordered_set<HloSharding, HloShardingHash> set;
  set.insert(a);
  set.insert(b);
  set.insert(HloSharding::Replicate());
  set.insert(HloSharding::Parse("{replicated}"));
  EXPECT_EQ(set.size(), 2u);
}

// Brute force: count, for every element of an array of `dims`, how many
// devices hold it according to the tile geometry.
TEST(HloShardingTest, TileGeometryCoversEveryElementOnce) {
  struct Case {
    const char* sharding;
    std::vector<int64_t> dims;
    int64_t copies;  // devices holding each element
  };
  const Case kCases[] = {
      {"{devices=[2,2]<=[4]}", {6, 8}, 1},
      {"{devices=[3,2]<=[6]}", {7, 5}, 1},  // uneven both ways
      {"{devices=[4]3,1,0,2}", {10}, 1},
      {"{devices=[2,1,4]<=[2,4]T(1,0) last_tile_dim_replicate}", {4, 3}, 4},
      {"{devices=[2,2,2]<=[8] last_tile_dims={manual, replicated}}", {5}, 2 * 2},
  };
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.sharding);
    HloSharding s = HloSharding::Parse(c.sharding);
    s.Validate(c.dims, s.tile_assignment().num_elements());
    std::vector<int64_t> count(c.dims[0] * (c.dims.size() > 1 ? c.dims[1] : 1), 0);
    for (int64_t device : s.tile_assignment().devices()) {
      std::vector<int64_t> lo = s.TileOffsetForDevice(c.dims, device);
      std::vector<int64_t> hi = s.TileLimitForDevice(c.dims, device);
      std::vector<int64_t> shape = s.TileShapeForDevice(c.dims, device);
      std::vector<int64_t> full = s.TileShape(c.dims);
      for (size_t d = 0; d < c.dims.size(); ++d) {
        ASSERT_LE(lo[d], hi[d]);
        ASSERT_EQ(shape[d], hi[d] - lo[d]);
        ASSERT_LE(shape[d], full[d]);
      }
      if (c.dims.size() == 1) {
        for (int64_t i = lo[0]; i < hi[0]; ++i) ++count[i];
      } else {
        for (int64_t i = lo[0]; i < hi[0]; ++i) {
          for (int64_t j = lo[1]; j < hi[1]; ++j) ++count[i * c.dims[1] + j];
        }
      }
    }
    for (int64_t n : count) ASSERT_EQ(n, c.copies);
  }
}

TEST(HloShardingTest, TileIndexForDevice) {
  HloSharding s = HloSharding::Parse("{devices=[2,3]5,4,3,2,1,0}");
  EXPECT_EQ(s.TileIndexForDevice(5), (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(s.TileIndexForDevice(3), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(s.TileIndexForDevice(1), (std::vector<int64_t>{1, 1}));
  EXPECT_THROW(s.TileIndexForDevice(6), Error);
  // Replica index is not part of the tile index.
  HloSharding p = HloSharding::Parse("{devices=[2,1,2]<=[4] last_tile_dim_replicate}");
  EXPECT_EQ(p.TileIndexForDevice(3), (std::vector<int64_t>{1, 0}));
  std::vector<int64_t> dims{8, 3};
  EXPECT_EQ(p.TileOffsetForDevice(dims, 3), (std::vector<int64_t>{4, 0}));
  EXPECT_EQ(HloSharding::Replicate().TileShape(dims), dims);
  EXPECT_EQ(HloSharding::AssignDevice(1).TileOffsetForDevice(dims, 0),
            (std::vector<int64_t>{0, 0}));
  EXPECT_THROW(HloSharding::Manual().TileShape(dims), Error);
  EXPECT_TRUE(s.UsesDevice(0));
  EXPECT_FALSE(s.UsesDevice(7));
  EXPECT_FALSE(HloSharding::AssignDevice(1).UsesDevice(0));
}

TEST(HloShardingTest, ValidateExplainsMismatches) {
  HloSharding s = HloSharding::Parse("{devices=[2,2]<=[4]}");
  std::vector<int64_t> rank1{8}, rank2{8, 8};
  EXPECT_NO_THROW(s.Validate(rank2, 4));
  try {
    s.Validate(rank1);
    FAIL() << "rank mismatch accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(s.Validate(rank2, 8), Error);
  EXPECT_THROW(HloSharding::AssignDevice(9).Validate(rank1, 8), Error);
  EXPECT_THROW(HloSharding::Tile(TileAssignment({1}, {0})).Validate(rank1), Error);
  EXPECT_NO_THROW(HloSharding::Replicate().Validate(rank1, 8));
}

TEST(HloShardingTest, ParseErrorsNameTheColumnAndTheExpectation) {
  struct Case {
    const char* text;
    size_t offset;
    const char* expected;
  };
  const Case kCases[] = {
      {"replicated", 0, "expected '{'"},
      {"{replicated", 11, "end of input"},
      {"{bogus}", 1, "a sharding attribute"},
      {"{maximal}", 1, "device=N"},
      {"{devices=[2]0,1 replicated}", 16, "a single sharding kind"},
      {"{devices=[2,2]0,1,2}", 9, "hold 4 devices but 3 were listed"},
      {"{devices=[2]0,0}", 9, "device 0 twice"},
      {"{devices=[2,x]0,1}", 12, "an integer"},
      {"{devices=[4]<=[2,2]T(0,0)}", 9, "not a permutation"},
      {"{devices=[2]0,1 last_tile_dims={bogus}}", 32, "'manual', 'unreduced' or 'replicated'"},
      {"{replicated} x", 13, "end of sharding"},
      {"{{replicated} {manual}}", 14, "',' or '}'"},
  };
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.text);
    try {
      HloSharding::Parse(c.text);
      FAIL() << "accepted";
    } catch (const ShardingSyntaxError& e) {
      EXPECT_EQ(e.offset(), c.offset) << e.what();
      EXPECT_NE(std::string(e.what()).find(c.expected), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(fmt::format("column {}", c.offset + 1)),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(HloShardingTest, ParseAtAdvancesPastTheSharding) {
  std::string text = "x = f32[4] p(), sharding={devices=[2]0,1}, metadata={}";
  size_t pos = text.find("sharding=") + 9;
  HloSharding s = ParseHloShardingAt(text, &pos);
  EXPECT_EQ(s.ToString(), "{devices=[2]0,1}");
  EXPECT_EQ(text.substr(pos, 2), ", ");
}

// Device counts are bounded (kMaxDevices, or the caller's limit, e.g. the
// module's num_partitions) on the dims, before any device id is expanded: a
// sharding text of 40 bytes cannot make a billion-element vector.
TEST(HloShardingTest, GiantDeviceCountsAreRefusedBeforeExpanding) {
  const auto start = std::chrono::steady_clock::now();
  for (const char* text :
       {"{devices=[1000000000]<=[1000000000]}", "{devices=[65537]<=[65537]}",
        "{devices=[4294967296,4294967296]<=[16]}", "{devices=[9223372036854775807,2]<=[2]}",
        "{devices=[2,2]<=[1000000000] last_tile_dim_replicate}",
        "{devices=[2,1000000000]<=[2000000000] last_tile_dims={manual}}",
        "{devices=[2]0,1000000000}", "{maximal device=65536}",
        "{{replicated}, {devices=[100000]<=[100000]}}"}) {
    EXPECT_THROW(HloSharding::Parse(text), Error) << text;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  // The largest allowed.
  EXPECT_EQ(HloSharding::Parse("{devices=[65536]<=[65536]}").tile_assignment().num_elements(),
            kMaxDevices);
  EXPECT_EQ(HloSharding::Parse("{maximal device=65535}").device(), 65535);
  // The caller's limit, named in the message.
  ShardingLimits limits;
  limits.max_devices = 8;
  limits.why = "the module's num_partitions=8";
  const std::string text = "{devices=[16]<=[16]}";
  size_t pos = 0;
  try {
    ParseHloShardingAt(text, &pos, limits);
    FAIL() << "accepted";
  } catch (const ShardingSyntaxError& e) {
    EXPECT_EQ(e.offset(), 9u);
    EXPECT_EQ(std::string(e.what()),
              "tile assignment [16] spans more than 8 devices, the module's num_partitions=8");
  }
  pos = 0;
  EXPECT_EQ(ParseHloShardingAt("{devices=[8]<=[8]}", &pos, limits).tile_assignment().num_elements(),
            8);
}

// Tuple shardings are flat: a nested one is refused before descending, so
// deeply nested braces cannot exhaust the stack.
TEST(HloShardingTest, NestedTupleShardingsAreRefusedWithoutRecursing) {
  EXPECT_THROW(HloSharding::Parse("{{{replicated}}}"), Error);
  const std::string deep = std::string(200000, '{') + std::string(200000, '}');
  try {
    HloSharding::Parse(deep);
    FAIL() << "accepted";
  } catch (const ShardingSyntaxError& e) {
    EXPECT_EQ(e.offset(), 1u);
    EXPECT_NE(std::string(e.what()).find("tuple shardings are flat"), std::string::npos);
  }
  EXPECT_EQ(HloSharding::Parse("{{replicated}, {maximal device=1}}").tuple_elements().size(), 2u);
}

}  // namespace
}  // namespace weft
