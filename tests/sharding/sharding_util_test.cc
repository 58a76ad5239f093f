#include "weft/sharding/sharding_util.h"

#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "weft/base/algorithm.h"

namespace weft::sharding_util {
namespace {

using Dims = std::vector<int64_t>;
using Box = std::vector<std::pair<int64_t, int64_t>>;  // [lo, hi) per dim

// The region of an array of `dims` that `device` holds, straight from the
// definition (position of the device in the tile array; ceil-sized tiles).
// Deliberately does not use HloSharding's own geometry helpers.
Box DeviceBox(const HloSharding& s, const Dims& dims, int64_t device) {
  Box box;
  if (!s.IsTiled()) {
    for (int64_t d : dims) box.push_back({0, d});
    return box;
  }
  const TileAssignment& ta = s.tile_assignment();
  const auto& devices = ta.devices();
  int64_t flat = std::find(devices.begin(), devices.end(), device) - devices.begin();
  EXPECT_LT(flat, ta.num_elements()) << "device " << device << " missing from " << s.ToString();
  Dims index(ta.num_dims());
  for (int64_t i = ta.num_dims() - 1; i >= 0; --i) {
    index[i] = flat % ta.dim(i);
    flat /= ta.dim(i);
  }
  for (size_t d = 0; d < dims.size(); ++d) {
    const int64_t tile = (dims[d] + ta.dim(d) - 1) / ta.dim(d);
    box.push_back({std::min(index[d] * tile, dims[d]), std::min((index[d] + 1) * tile, dims[d])});
  }
  return box;
}

std::set<int64_t> BoxElements(const Box& box, const Dims& dims) {
  std::set<int64_t> out;
  const size_t rank = dims.size();
  Dims index(rank);
  for (size_t d = 0; d < rank; ++d) {
    if (box[d].first >= box[d].second) return out;
    index[d] = box[d].first;
  }
  while (true) {
    int64_t flat = 0;
    for (size_t d = 0; d < rank; ++d) flat = flat * dims[d] + index[d];
    out.insert(flat);
    int64_t d = static_cast<int64_t>(rank) - 1;
    for (; d >= 0; --d) {
      if (++index[d] < box[d].second) break;
      index[d] = box[d].first;
    }
    if (d < 0) return out;
  }
}

std::set<int64_t> Elements(const HloSharding& s, const Dims& dims, int64_t device) {
  return BoxElements(DeviceBox(s, dims, device), dims);
}

// Tile counts that leave no tile empty (XLA pads only the last tile).
bool NoEmptyTile(int64_t dim, int64_t tiles) {
  return tiles == 1 || (dim + tiles - 1) / tiles * (tiles - 1) < dim;
}

// A random sharding of an array of `dims`: random tile counts (dividing the
// dim, or uneven when allowed), optional replication, and devices either a
// random permutation or a (transposed) iota as a JAX mesh would give.
HloSharding RandomSharding(std::mt19937& rng, const Dims& dims, bool allow_uneven,
                           int64_t max_devices = 16) {
  Dims tile_dims;
  int64_t total = 1;
  for (int64_t d : dims) {
    std::vector<int64_t> choices;
    for (int64_t t = 1; t <= d; ++t) {
      if ((d % t == 0 || (allow_uneven && NoEmptyTile(d, t))) && total * t <= max_devices) {
        choices.push_back(t);
      }
    }
    int64_t t = rng() % 3 == 0 ? 1 : choices[rng() % choices.size()];
    tile_dims.push_back(t);
    total *= t;
  }
  const int64_t replication = (total * 2 <= max_devices && rng() % 2) ? 2 : 1;
  if (replication > 1) tile_dims.push_back(replication);
  const int64_t n = Product(tile_dims);
  TileAssignment tiles;
  switch (rng() % 3) {
    case 0: {
      Dims devices(n);
      std::iota(devices.begin(), devices.end(), 0);
      std::shuffle(devices.begin(), devices.end(), rng);
      tiles = TileAssignment(tile_dims, devices);
      break;
    }
    case 1:
      tiles = TileAssignment::Iota(tile_dims);
      break;
    default: {
      // Mesh-like: iota over a permutation of the tile dims, transposed back.
      Dims order(tile_dims.size());
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), rng);
      Dims reshape(order.size()), perm(order.size());
      for (size_t i = 0; i < order.size(); ++i) reshape[i] = tile_dims[order[i]];
      for (size_t i = 0; i < order.size(); ++i) perm[order[i]] = i;
      tiles = TileAssignment::Iota(tile_dims, reshape, perm);
    }
  }
  return replication > 1 ? HloSharding::PartialTile(tiles) : HloSharding::Tile(tiles);
}

Dims RandomDims(std::mt19937& rng, int max_rank, int max_dim) {
  Dims dims(1 + rng() % max_rank);
  for (int64_t& d : dims) d = 1 + rng() % max_dim;
  return dims;
}

TEST(TransposeShardingTest, MovesTilesWithTheirData) {
  EXPECT_EQ(TransposeSharding(HloSharding::Parse("{devices=[2,4]<=[8]}"), Dims{1, 0}).ToString(),
            "{devices=[4,2]<=[2,4]T(1,0)}");
  EXPECT_EQ(TransposeSharding(
                HloSharding::Parse("{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}"), Dims{1, 0})
                .ToString(),
            "{devices=[1,2,2]0,1,2,3 last_tile_dim_replicate}");
  EXPECT_EQ(TransposeSharding(HloSharding::Replicate(), Dims{1, 0}), HloSharding::Replicate());
  EXPECT_EQ(TransposeSharding(HloSharding::Parse("{replicated shard_as 1}"), Dims{0}),
            HloSharding::Replicate());
  EXPECT_THROW(TransposeSharding(HloSharding::Parse("{devices=[2,2]<=[4]}"), Dims{0}), Error);

  std::mt19937 rng(7);
  for (int trial = 0; trial < 400; ++trial) {
    Dims dims = RandomDims(rng, 4, 6);
    HloSharding s = RandomSharding(rng, dims, /*allow_uneven=*/true);
    Dims perm(dims.size());
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    Dims out_dims(dims.size());
    for (size_t i = 0; i < perm.size(); ++i) out_dims[i] = dims[perm[i]];
    HloSharding t = TransposeSharding(s, perm);
    SCOPED_TRACE(s.ToString() + " -> " + t.ToString());
    for (int64_t device : s.tile_assignment().devices()) {
      // Element at input index x sits at output index y with y[i] = x[perm[i]].
      std::set<int64_t> expected;
      for (int64_t flat : Elements(s, dims, device)) {
        Dims x(dims.size());
        for (int64_t d = dims.size() - 1; d >= 0; --d) {
          x[d] = flat % dims[d];
          flat /= dims[d];
        }
        int64_t y = 0;
        for (size_t i = 0; i < perm.size(); ++i) y = y * out_dims[i] + x[perm[i]];
        expected.insert(y);
      }
      ASSERT_EQ(Elements(t, out_dims, device), expected) << "device " << device;
    }
  }
}

// All ways to split `target` into tiles whose per-tile element sets are
// exactly the source's; brute force over every tile-count vector.
bool SomeTargetShardingFits(const HloSharding& s, const Dims& source, const Dims& target) {
  std::set<std::set<int64_t>> source_tiles;
  for (int64_t device : s.tile_assignment().devices()) {
    source_tiles.insert(Elements(s, source, device));
  }
  const int64_t num_tiles = s.NumTiles();
  Dims q(target.size(), 1);
  while (true) {
    if (Product(q) == num_tiles) {
      bool ok = true;
      for (size_t d = 0; d < target.size(); ++d) ok &= NoEmptyTile(target[d], q[d]);
      if (ok) {
        std::set<std::set<int64_t>> target_tiles;
        Dims index(target.size(), 0);
        while (true) {
          Box box;
          for (size_t d = 0; d < target.size(); ++d) {
            const int64_t tile = (target[d] + q[d] - 1) / q[d];
            box.push_back({index[d] * tile, std::min((index[d] + 1) * tile, target[d])});
          }
          target_tiles.insert(BoxElements(box, target));
          int64_t d = static_cast<int64_t>(target.size()) - 1;
          for (; d >= 0; --d) {
            if (++index[d] < q[d]) break;
            index[d] = 0;
          }
          if (d < 0) break;
        }
        if (target_tiles == source_tiles) return true;
      }
    }
    int64_t d = static_cast<int64_t>(target.size()) - 1;
    for (; d >= 0; --d) {
      if (++q[d] <= target[d]) break;
      q[d] = 1;
    }
    if (d < 0) return false;
  }
}

Dims RandomFactorization(std::mt19937& rng, int64_t n) {
  Dims primes;
  for (int64_t p = 2; n > 1; ++p) {
    while (n % p == 0) {
      primes.push_back(p);
      n /= p;
    }
  }
  std::shuffle(primes.begin(), primes.end(), rng);
  Dims dims(1 + rng() % 3, 1);
  for (int64_t p : primes) dims[rng() % dims.size()] *= p;
  if (rng() % 4 == 0) dims.insert(dims.begin() + rng() % (dims.size() + 1), 1);
  return dims;
}

TEST(ReshapeShardingTest, KnownCases) {
  auto reshape = [](const char* s, Dims from, Dims to) -> std::string {
    std::optional<HloSharding> r = ReshapeSharding(from, to, HloSharding::Parse(s));
    return r ? r->ToString() : "none";
  };
  // Merging a split major dim with an unsplit minor one.
  EXPECT_EQ(reshape("{devices=[2,1]0,1}", {4, 6}, {24}), "{devices=[2]0,1}");
  // The split dim is minor to unsplit data: a device's elements are strided.
  EXPECT_EQ(reshape("{devices=[1,2]0,1}", {2, 4}, {8}), "none");
  // Splitting a dim: the tile index goes to the major part.
  EXPECT_EQ(reshape("{devices=[2]<=[2]}", {8}, {2, 4}), "{devices=[2,1]<=[2]}");
  EXPECT_EQ(reshape("{devices=[4]<=[4]}", {8}, {2, 4}), "{devices=[2,2]<=[4]}");
  EXPECT_EQ(reshape("{devices=[4]3,2,1,0}", {8}, {4, 2}), "{devices=[4,1]3,2,1,0}");
  // Two split dims merge into one with the product of their tiles.
  EXPECT_EQ(reshape("{devices=[2,2,2]<=[8] last_tile_dim_replicate}", {2, 4}, {8}),
            "{devices=[4,2]<=[8] last_tile_dim_replicate}");
  // Uneven dims survive only when they map to themselves.
  EXPECT_EQ(reshape("{devices=[2,1]0,1}", {3, 4}, {3, 2, 2}), "{devices=[2,1,1]0,1}");
  EXPECT_EQ(reshape("{devices=[2,1]0,1}", {3, 4}, {12}), "none");
  EXPECT_EQ(reshape("{replicated}", {3, 4}, {12}), "{replicated}");
  EXPECT_THROW(ReshapeSharding(Dims{4}, Dims{5}, HloSharding::Replicate()), Error);
}

TEST(ReshapeShardingTest, RandomAgainstBruteForce) {
  std::mt19937 rng(99);
  int found = 0, none = 0;
  for (int trial = 0; trial < 1500; ++trial) {
    Dims source = RandomDims(rng, 3, 6);
    if (Product(source) > 96) continue;
    const bool uneven = rng() % 4 == 0;
    HloSharding s = RandomSharding(rng, source, uneven);
    if (!s.IsTiled()) continue;
    Dims target = RandomFactorization(rng, Product(source));
    SCOPED_TRACE(fmt::format("{} [{}] -> [{}]", s.ToString(), fmt::join(source, ","),
                             fmt::join(target, ",")));
    std::optional<HloSharding> r = ReshapeSharding(source, target, s);
    if (r) {
      ++found;
      ASSERT_EQ(r->TiledDataRank(), static_cast<int64_t>(target.size())) << r->ToString();
      for (int64_t device : s.tile_assignment().devices()) {
        ASSERT_EQ(Elements(*r, target, device), Elements(s, source, device))
            << r->ToString() << " device " << device;
      }
    } else {
      ++none;
      ASSERT_FALSE(SomeTargetShardingFits(s, source, target));
    }
  }
  // Both outcomes must actually be exercised.
  EXPECT_GT(found, 200);
  EXPECT_GT(none, 100);
}

TEST(PartiallyReplicateTest, ReplicatesExactlyTheGivenDims) {
  EXPECT_EQ(
      PartiallyReplicateTiledShardingOnDims(HloSharding::Parse("{devices=[2,4]<=[8]}"), Dims{1})
          .ToString(),
      "{devices=[2,1,4]<=[8] last_tile_dim_replicate}");
  EXPECT_EQ(
      PartiallyReplicateTiledShardingOnDims(HloSharding::Parse("{devices=[2,4]<=[8]}"), Dims{0})
          .ToString(),
      "{devices=[1,4,2]<=[2,4]T(1,0) last_tile_dim_replicate}");
  EXPECT_EQ(
      PartiallyReplicateTiledShardingOnDims(HloSharding::Parse("{devices=[2,4]<=[8]}"), Dims{0, 1}),
      HloSharding::Replicate());
  EXPECT_EQ(PartiallyReplicateTiledShardingOnAllDimsExcept(
                HloSharding::Parse("{devices=[2,2,2]<=[8] last_tile_dim_replicate}"), Dims{1})
                .ToString(),
            "{devices=[1,2,4]<=[2,2,2]T(1,0,2) last_tile_dim_replicate}");
  // The manual subgroup stays manual.
  EXPECT_EQ(
      PartiallyReplicateTiledShardingOnDims(
          HloSharding::Parse("{devices=[2,2,2]<=[8] last_tile_dims={manual, replicated}}"), Dims{0})
          .ToString(),
      "{devices=[1,2,4]<=[2,2,2]T(1,0,2) last_tile_dims={manual, replicated}}");

  std::mt19937 rng(3);
  for (int trial = 0; trial < 300; ++trial) {
    Dims dims = RandomDims(rng, 4, 6);
    HloSharding s = RandomSharding(rng, dims, true);
    Dims chosen;
    for (size_t d = 0; d < dims.size(); ++d) {
      if (rng() % 2) chosen.push_back(d);
    }
    HloSharding r = PartiallyReplicateTiledShardingOnDims(s, chosen);
    SCOPED_TRACE(s.ToString() + " -> " + r.ToString());
    for (int64_t device : s.tile_assignment().devices()) {
      Box expected = DeviceBox(s, dims, device);
      for (int64_t d : chosen) expected[d] = {0, dims[d]};
      ASSERT_EQ(DeviceBox(r, dims, device), expected);
    }
  }
}

// XLA's ReplicateAllDataDims: the manual subgroup (with its devices) stays,
// on an array of the given rank; without one, replicated.
TEST(ReplicateAllDataDimsTest, KeepsTheManualSubgroupOnAnyRank) {
  // Data dim 1 splits 2 ways inside each manual group {0,2,4,6}, {1,3,5,7}.
  const HloSharding partly_manual =
      HloSharding::Parse("{devices=[1,2,2,2]0,2,1,3,4,6,5,7 last_tile_dims={manual, replicated}}");
  EXPECT_EQ(
      ReplicateAllDataDims(partly_manual, 0),
      HloSharding::Parse("{devices=[2,4]0,2,4,6,1,3,5,7 last_tile_dims={manual, replicated}}"))
      << ReplicateAllDataDims(partly_manual, 0).ToString();
  EXPECT_EQ(ReplicateAllDataDims(partly_manual, 3),
            HloSharding::Parse(
                "{devices=[1,1,1,2,4]0,2,4,6,1,3,5,7 last_tile_dims={manual, replicated}}"))
      << ReplicateAllDataDims(partly_manual, 3).ToString();
  EXPECT_EQ(
      ReplicateAllDataDims(HloSharding::Parse("{devices=[2,1,4]<=[8] last_tile_dim_replicate}"), 2),
      HloSharding::Replicate());
  EXPECT_EQ(ReplicateAllDataDims(HloSharding::Manual(), 2), HloSharding::Manual());
}

TEST(RemoveShapeDimensionsTest, DropsUnsplitDims) {
  EXPECT_EQ(RemoveShapeDimensions(
                HloSharding::Parse("{devices=[1,2,1,2]<=[4] last_tile_dim_replicate}"), Dims{0, 2})
                .ToString(),
            "{devices=[2,2]<=[4] last_tile_dim_replicate}");
  EXPECT_THROW(RemoveShapeDimensions(HloSharding::Parse("{devices=[2,2]<=[4]}"), Dims{0}), Error);
  EXPECT_EQ(RemoveShapeDimensions(HloSharding::AssignDevice(1), Dims{0}),
            HloSharding::AssignDevice(1));
}

// The facts of XLA's GetFirstTargetDimToMoveShardingTiles: the first other
// dim whose size is a multiple of both dims' tile counts' product; none for
// an unsplit or size-1 source.
TEST(FirstTargetDimToMoveTilesTest, TheFirstDimThatCouldHoldBothDimsTiles) {
  const HloSharding a = HloSharding::Parse("{devices=[8,1,2,16]<=[256]}");
  const Dims shape_a = {1, 8, 128, 128};
  EXPECT_EQ(FirstTargetDimToMoveTiles(shape_a, a, 0), std::nullopt);  // size 1
  EXPECT_EQ(FirstTargetDimToMoveTiles(shape_a, a, 1), std::nullopt);  // not split
  EXPECT_EQ(FirstTargetDimToMoveTiles(shape_a, a, 2), 1);
  EXPECT_EQ(FirstTargetDimToMoveTiles(shape_a, a, 3), 2);
  const HloSharding b = HloSharding::Parse("{devices=[2,2,4,16]<=[256]}");
  const Dims shape_b = {4, 8, 128, 128};
  EXPECT_EQ(FirstTargetDimToMoveTiles(shape_b, b, 0), 1);
  EXPECT_EQ(FirstTargetDimToMoveTiles(shape_b, b, 1), 0);
  EXPECT_EQ(FirstTargetDimToMoveTiles(shape_b, b, 2), 1);
  EXPECT_EQ(FirstTargetDimToMoveTiles(shape_b, b, 3), 2);
  // A partially replicated sharding: its replicated subgroup is no data dim.
  const HloSharding c = HloSharding::Parse("{devices=[1,4,2]<=[8] last_tile_dim_replicate}");
  EXPECT_EQ(FirstTargetDimToMoveTiles(Dims{3, 16}, c, 1), std::nullopt);
  EXPECT_EQ(FirstTargetDimToMoveTiles(Dims{8, 16}, c, 1), 0);
  EXPECT_EQ(FirstTargetDimToMoveTiles(Dims{8, 16}, HloSharding::Replicate(), 1), std::nullopt);
}

TEST(MergeShardingTest, KnownCases) {
  auto merge = [](const char* to_merge, const char* dst) -> std::string {
    std::optional<HloSharding> r =
        MergeShardingIfCompatible(HloSharding::Parse(to_merge), HloSharding::Parse(dst));
    return r ? r->ToString() : "none";
  };
  // Dim 0 from one, dim 1 from the other; devices agree.
  EXPECT_EQ(merge("{devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}",
                  "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}"),
            "{devices=[2,2]0,1,2,3}");
  // Same tile counts, but devices disagree on which tile they hold.
  EXPECT_EQ(merge("{devices=[1,2,2]0,1,2,3 last_tile_dim_replicate}",
                  "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}"),
            "none");
  // A dim split differently by the two.
  EXPECT_EQ(merge("{devices=[4,1,2]<=[8] last_tile_dim_replicate}",
                  "{devices=[2,1,4]<=[8] last_tile_dim_replicate}"),
            "none");
  // dst fully tiled: nothing to refine. to_merge tile-maximal: nothing to add.
  EXPECT_EQ(merge("{devices=[1,2]0,1}", "{devices=[2,1]0,1}"), "none");
  EXPECT_EQ(merge("{replicated}", "{devices=[2,1,2]<=[4] last_tile_dim_replicate}"), "none");
  // dst replicated: replaced.
  EXPECT_EQ(merge("{devices=[2,1]0,1}", "{replicated}"), "{devices=[2,1]0,1}");
  // Partial merge keeps the remaining replication.
  EXPECT_EQ(merge("{devices=[1,2,4]<=[2,4]T(1,0) last_tile_dim_replicate}",
                  "{devices=[2,1,4]<=[8] last_tile_dim_replicate}"),
            "{devices=[2,2,2]<=[8] last_tile_dim_replicate}");
  // minimum_tiles.
  EXPECT_FALSE(MergeShardingIfCompatible(
                   HloSharding::Parse("{devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}"),
                   HloSharding::Parse("{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}"), 5)
                   .has_value());
  // Manual subgroups must line up.
  EXPECT_EQ(merge("{devices=[1,2,2,2]<=[2,2,2]T(1,0,2) last_tile_dims={manual, replicated}}",
                  "{devices=[2,1,2,2]<=[8] last_tile_dims={manual, replicated}}"),
            "none");
  EXPECT_EQ(merge("{devices=[1,2,2,2]<=[8] last_tile_dims={manual, replicated}}",
                  "{devices=[2,1,2]<=[4] last_tile_dim_replicate}"),
            "none");
}

// Two partial views of one fine sharding always merge, and the merge is the
// per-device intersection of the two tiles.
TEST(MergeShardingTest, RandomViewsOfOneShardingMergeToTheIntersection) {
  std::mt19937 rng(11);
  int merged = 0;
  for (int trial = 0; trial < 800; ++trial) {
    Dims dims = RandomDims(rng, 3, 8);
    HloSharding fine = RandomSharding(rng, dims, false, 32);
    if (!fine.IsTiled()) continue;
    Dims dims_a, dims_b;
    for (size_t d = 0; d < dims.size(); ++d) {
      if (rng() % 2) dims_a.push_back(d);
      if (rng() % 2) dims_b.push_back(d);
    }
    HloSharding a = PartiallyReplicateTiledShardingOnDims(fine, dims_a);
    HloSharding b = PartiallyReplicateTiledShardingOnDims(fine, dims_b);
    SCOPED_TRACE(a.ToString() + " <- " + b.ToString());
    std::optional<HloSharding> m = MergeShardingIfCompatible(b, a);
    if (b.IsTileMaximal() || (a.IsTiled() && !a.HasPartialReplication())) {
      EXPECT_FALSE(m.has_value());
      continue;
    }
    ASSERT_TRUE(m.has_value());
    ++merged;
    for (int64_t device : fine.tile_assignment().devices()) {
      std::set<int64_t> ea = Elements(a, dims, device), eb = Elements(b, dims, device);
      std::set<int64_t> both;
      std::set_intersection(ea.begin(), ea.end(), eb.begin(), eb.end(),
                            std::inserter(both, both.begin()));
      ASSERT_EQ(Elements(*m, dims, device), both) << m->ToString() << " device " << device;
    }
  }
  EXPECT_GT(merged, 100);
}

// Whatever merges, merges soundly: on random unrelated pairs a result is
// always the intersection and a valid sharding.
TEST(MergeShardingTest, RandomPairsAreSoundWhenMerged) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 600; ++trial) {
    Dims dims = RandomDims(rng, 2, 4);
    HloSharding a = RandomSharding(rng, dims, false, 8);
    HloSharding b = RandomSharding(rng, dims, false, 8);
    if (!a.IsTiled() || !b.IsTiled() ||
        a.tile_assignment().num_elements() != b.tile_assignment().num_elements()) {
      continue;
    }
    std::optional<HloSharding> m = MergeShardingIfCompatible(b, a);
    if (!m) continue;
    SCOPED_TRACE(a.ToString() + " <- " + b.ToString() + " = " + m->ToString());
    m->Validate(dims, a.tile_assignment().num_elements());
    for (int64_t device : a.tile_assignment().devices()) {
      std::set<int64_t> ea = Elements(a, dims, device), eb = Elements(b, dims, device);
      std::set<int64_t> both;
      std::set_intersection(ea.begin(), ea.end(), eb.begin(), eb.end(),
                            std::inserter(both, both.begin()));
      ASSERT_EQ(Elements(*m, dims, device), both);
    }
  }
}

TEST(IsShardingMoreSpecificTest, FollowsXlaPreferences) {
  const HloSharding rep = HloSharding::Replicate();
  const HloSharding dev = HloSharding::AssignDevice(0);
  const HloSharding man = HloSharding::Manual();
  const HloSharding two = HloSharding::Parse("{devices=[2,1,2]<=[4] last_tile_dim_replicate}");
  const HloSharding four = HloSharding::Parse("{devices=[2,2]<=[4]}");
  EXPECT_TRUE(IsShardingMoreSpecific(four, two));
  EXPECT_FALSE(IsShardingMoreSpecific(two, four));
  EXPECT_FALSE(IsShardingMoreSpecific(four, four));
  EXPECT_TRUE(IsShardingMoreSpecific(two, rep));
  EXPECT_TRUE(IsShardingMoreSpecific(dev, rep));
  EXPECT_TRUE(IsShardingMoreSpecific(two, dev));
  EXPECT_FALSE(IsShardingMoreSpecific(dev, two));
  EXPECT_FALSE(IsShardingMoreSpecific(rep, dev));
  EXPECT_TRUE(IsShardingMoreSpecific(man, rep));
  EXPECT_FALSE(IsShardingMoreSpecific(man, two));
  EXPECT_FALSE(IsShardingMoreSpecific(two, man));
  const HloSharding t1 = HloSharding::Tuple({rep, two});
  const HloSharding t2 = HloSharding::Tuple({two, two});
  const HloSharding t3 = HloSharding::Tuple({four, rep});
  EXPECT_TRUE(IsShardingMoreSpecific(t2, t1));
  EXPECT_FALSE(IsShardingMoreSpecific(t1, t2));
  EXPECT_FALSE(IsShardingMoreSpecific(t3, t1));  // better in one, worse in another
  EXPECT_THROW(IsShardingMoreSpecific(t1, rep), Error);
}

}  // namespace
}  // namespace weft::sharding_util
