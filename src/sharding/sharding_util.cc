#include "weft/sharding/sharding_util.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "weft/base/algorithm.h"

namespace weft::sharding_util {
namespace {

// Builds a sharding with `tiles` and the same subgroup structure as `like`.
HloSharding WithTilesLike(const HloSharding& like, TileAssignment tiles) {
  if (like.ReplicateOnLastTileDim()) return HloSharding::PartialTile(std::move(tiles));
  return HloSharding::Subgroup(std::move(tiles), like.subgroup_types());
}

void CheckNotTuple(const HloSharding& sharding, std::string_view op) {
  WEFT_CHECK(!sharding.IsTuple(), "{} needs an array sharding, got tuple sharding {}", op,
             sharding.ToString());
}

void CheckDataDims(const HloSharding& sharding, std::span<const int64_t> dims,
                   std::string_view op) {
  for (int64_t d : dims) {
    WEFT_CHECK(d >= 0 && d < sharding.TiledDataRank(), "{}: dim {} out of range for sharding {}",
               op, d, sharding.ToString());
  }
}

}  // namespace

HloSharding TransposeSharding(const HloSharding& sharding, std::span<const int64_t> dims) {
  CheckNotTuple(sharding, "TransposeSharding");
  if (!sharding.IsTiled()) return sharding.WithShardGroup(std::nullopt);
  const int64_t rank = sharding.TiledDataRank();
  WEFT_CHECK(static_cast<int64_t>(dims.size()) == rank,
             "transpose dims [{}] do not match the {} data dims of sharding {}",
             fmt::join(dims, ","), rank, sharding.ToString());
  std::vector<int64_t> perm(dims.begin(), dims.end());
  for (int64_t i = rank; i < sharding.tile_assignment().num_dims(); ++i) perm.push_back(i);
  return WithTilesLike(sharding, sharding.tile_assignment().Transpose(perm));
}

std::optional<HloSharding> ReshapeSharding(std::span<const int64_t> source_dims,
                                           std::span<const int64_t> target_dims,
                                           const HloSharding& sharding) {
  CheckNotTuple(sharding, "ReshapeSharding");
  WEFT_CHECK(Product(source_dims) == Product(target_dims),
             "reshape from [{}] to [{}] changes the element count", fmt::join(source_dims, ","),
             fmt::join(target_dims, ","));
  if (!sharding.IsTiled()) return sharding.WithShardGroup(std::nullopt);
  WEFT_CHECK(static_cast<int64_t>(source_dims.size()) == sharding.TiledDataRank(),
             "sharding {} splits {} dims but the reshape source has rank {}", sharding.ToString(),
             sharding.TiledDataRank(), source_dims.size());
  if (std::equal(source_dims.begin(), source_dims.end(), target_dims.begin(), target_dims.end())) {
    return sharding.WithShardGroup(std::nullopt);
  }
  if (Product(source_dims) == 0) return std::nullopt;

  // Read the flat (row-major) element index as a mixed-radix number. A dim of
  // size a split p ways contributes a "fixed" digit of size p (the tile index,
  // the same for all of a device's elements) then a "free" digit of size a/p.
  // A device's elements are exactly the indices with given fixed digits, so a
  // target sharding keeps them iff each target dim covers fixed digits then
  // free digits, and the fixed digits keep their order (so the tile index is
  // the same mixed-radix number: the tile assignment merely reshapes).
  enum class Kind { kFixed, kFree, kUneven };
  struct Segment {
    Kind kind;
    int64_t size;
    int64_t tiles;  // kUneven only
  };
  std::vector<Segment> segments;
  auto push = [&](Kind kind, int64_t size) {
    if (size == 1) return;
    if (!segments.empty() && segments.back().kind == kind && kind != Kind::kUneven) {
      segments.back().size *= size;
    } else {
      segments.push_back({kind, size, 1});
    }
  };
  for (size_t i = 0; i < source_dims.size(); ++i) {
    const int64_t a = source_dims[i], p = sharding.tile_assignment().dim(i);
    if (a % p != 0) {
      segments.push_back({Kind::kUneven, a, p});
    } else {
      push(Kind::kFixed, p);
      push(Kind::kFree, a / p);
    }
  }
  std::vector<int64_t> target_tiles;
  size_t next = 0;
  for (int64_t b : target_dims) {
    int64_t remaining = b, tiles = 1;
    bool seen_free = false;
    while (remaining > 1) {
      if (next == segments.size()) return std::nullopt;
      Segment& seg = segments[next];
      if (seg.kind == Kind::kUneven) {
        // Padding makes an uneven dim reshape-safe only when it maps to itself.
        if (remaining != b || seg.size != b) return std::nullopt;
        tiles = seg.tiles;
        remaining = 1;
        ++next;
        break;
      }
      int64_t take;
      if (seg.size <= remaining) {
        if (remaining % seg.size != 0) return std::nullopt;
        take = seg.size;
        ++next;
      } else {
        if (seg.size % remaining != 0) return std::nullopt;
        take = remaining;
        seg.size /= remaining;
      }
      if (seg.kind == Kind::kFixed) {
        if (seen_free) return std::nullopt;  // tile digit minor to data: strided tile
        tiles *= take;
      } else {
        seen_free = true;
      }
      remaining /= take;
    }
    target_tiles.push_back(tiles);
  }
  if (next != segments.size()) return std::nullopt;
  const TileAssignment& ta = sharding.tile_assignment();
  std::vector<int64_t> new_dims = target_tiles;
  new_dims.insert(new_dims.end(), ta.dims().begin() + sharding.TiledDataRank(), ta.dims().end());
  return WithTilesLike(sharding, ta.Reshape(std::move(new_dims)));
}

HloSharding PartiallyReplicateTiledShardingOnDims(const HloSharding& sharding,
                                                  std::span<const int64_t> dims) {
  CheckNotTuple(sharding, "PartiallyReplicateTiledShardingOnDims");
  if (!sharding.IsTiled()) return sharding.WithShardGroup(std::nullopt);
  CheckDataDims(sharding, dims, "PartiallyReplicateTiledShardingOnDims");
  const TileAssignment& ta = sharding.tile_assignment();
  const int64_t rank = sharding.TiledDataRank();
  std::vector<bool> replicate(rank, false);
  for (int64_t d : dims) replicate[d] = ta.dim(d) > 1;
  if (std::none_of(replicate.begin(), replicate.end(), [](bool b) { return b; })) {
    return sharding.WithShardGroup(std::nullopt);
  }
  // New tile order: kept data dims, manual subgroup, newly replicated dims,
  // old replicated subgroup; then fold the last two into one replicated dim.
  std::vector<int64_t> perm, new_dims;
  for (int64_t d = 0; d < rank; ++d) {
    if (!replicate[d]) perm.push_back(d);
    new_dims.push_back(replicate[d] ? 1 : ta.dim(d));
  }
  const int64_t manual_dim = sharding.SubgroupManualDim();
  const int64_t old_repl_dim = sharding.SubgroupReplicationDim();
  if (manual_dim >= 0) {
    perm.push_back(manual_dim);
    new_dims.push_back(ta.dim(manual_dim));
  }
  int64_t group = 1;
  for (int64_t d = 0; d < rank; ++d) {
    if (replicate[d]) {
      perm.push_back(d);
      group *= ta.dim(d);
    }
  }
  if (old_repl_dim >= 0) {
    perm.push_back(old_repl_dim);
    group *= ta.dim(old_repl_dim);
  }
  new_dims.push_back(group);
  TileAssignment tiles = ta.Transpose(perm).Reshape(std::move(new_dims));
  if (manual_dim >= 0) {
    return HloSharding::Subgroup(std::move(tiles),
                                 {SubgroupType::kManual, SubgroupType::kReplicated});
  }
  return HloSharding::PartialTile(std::move(tiles));
}

HloSharding PartiallyReplicateTiledShardingOnAllDimsExcept(const HloSharding& sharding,
                                                           std::span<const int64_t> dims_to_keep) {
  CheckNotTuple(sharding, "PartiallyReplicateTiledShardingOnAllDimsExcept");
  if (!sharding.IsTiled()) return sharding.WithShardGroup(std::nullopt);
  CheckDataDims(sharding, dims_to_keep, "PartiallyReplicateTiledShardingOnAllDimsExcept");
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < sharding.TiledDataRank(); ++d) {
    if (!Contains(dims_to_keep, d)) {
      dims.push_back(d);
    }
  }
  return PartiallyReplicateTiledShardingOnDims(sharding, dims);
}

HloSharding ReplicateAllDataDims(const HloSharding& sharding, int64_t rank) {
  CheckNotTuple(sharding, "ReplicateAllDataDims");
  if (sharding.IsManual()) return sharding;
  if (!sharding.IsTiled() || sharding.SubgroupManualDim() < 0) return HloSharding::Replicate();
  const HloSharding replicated = PartiallyReplicateTiledShardingOnAllDimsExcept(sharding, {});
  const TileAssignment& tiles = replicated.tile_assignment();
  std::vector<int64_t> dims(rank, 1);
  for (int64_t d = replicated.TiledDataRank(); d < tiles.num_dims(); ++d) {
    dims.push_back(tiles.dim(d));
  }
  return HloSharding::Subgroup(tiles.Reshape(std::move(dims)), replicated.subgroup_types());
}

std::optional<int64_t> FirstTargetDimToMoveTiles(std::span<const int64_t> dims,
                                                 const HloSharding& sharding, int64_t source) {
  const int64_t rank = static_cast<int64_t>(dims.size());
  if (source < 0 || source >= rank || dims[source] == 1 || !sharding.IsTiled() ||
      sharding.IsTileMaximal() || source >= sharding.TiledDataRank()) {
    return std::nullopt;
  }
  const int64_t tiles = sharding.tile_assignment().dim(source);
  if (tiles == 1) return std::nullopt;
  for (int64_t d = 0; d < rank && d < sharding.TiledDataRank(); ++d) {
    if (d != source && dims[d] % (tiles * sharding.tile_assignment().dim(d)) == 0) return d;
  }
  return std::nullopt;
}

HloSharding RemoveShapeDimensions(const HloSharding& sharding,
                                  std::span<const int64_t> dims_to_remove) {
  CheckNotTuple(sharding, "RemoveShapeDimensions");
  if (!sharding.IsTiled()) return sharding.WithShardGroup(std::nullopt);
  CheckDataDims(sharding, dims_to_remove, "RemoveShapeDimensions");
  const TileAssignment& ta = sharding.tile_assignment();
  std::vector<int64_t> new_dims;
  for (int64_t d = 0; d < ta.num_dims(); ++d) {
    const bool removed = Contains(dims_to_remove, d);
    if (removed) {
      WEFT_CHECK(ta.dim(d) == 1,
                 "RemoveShapeDimensions: dim {} is split {} ways by {}; replicate it first", d,
                 ta.dim(d), sharding.ToString());
      continue;
    }
    new_dims.push_back(ta.dim(d));
  }
  return WithTilesLike(sharding, ta.Reshape(std::move(new_dims)));
}

std::optional<HloSharding> MergeShardingIfCompatible(const HloSharding& to_merge,
                                                     const HloSharding& dst,
                                                     int64_t minimum_tiles) {
  CheckNotTuple(to_merge, "MergeShardingIfCompatible");
  CheckNotTuple(dst, "MergeShardingIfCompatible");
  if (to_merge.IsTileMaximal() || to_merge.IsManual() || to_merge.IsUnknown()) {
    return std::nullopt;
  }
  if (dst.IsTileMaximal() || dst.IsUnknown()) {
    return to_merge.WithShardGroup(std::nullopt);
  }
  if (dst.IsManual() || !dst.HasPartialReplication()) return std::nullopt;
  const int64_t rank = dst.TiledDataRank();
  if (to_merge.TiledDataRank() != rank) return std::nullopt;
  const TileAssignment& a = dst.tile_assignment();
  const TileAssignment& b = to_merge.tile_assignment();
  if (a.num_elements() != b.num_elements()) return std::nullopt;
  const int64_t a_manual = dst.SubgroupManualDim(), b_manual = to_merge.SubgroupManualDim();
  if ((a_manual >= 0) != (b_manual >= 0)) return std::nullopt;
  const int64_t manual_size = a_manual >= 0 ? a.dim(a_manual) : 1;
  if (b_manual >= 0 && b.dim(b_manual) != manual_size) return std::nullopt;

  std::vector<int64_t> merged_dims;
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t x = a.dim(d), y = b.dim(d);
    if (x != 1 && y != 1 && x != y) return std::nullopt;
    merged_dims.push_back(std::max(x, y));
  }
  const int64_t num_tiles = Product(merged_dims);
  const int64_t num_devices = a.num_elements();
  if (num_tiles < minimum_tiles || num_devices % (num_tiles * manual_size) != 0) {
    return std::nullopt;
  }
  const int64_t replication = num_devices / (num_tiles * manual_size);

  // Place every device at its merged tile (plus manual index); each merged
  // tile must receive exactly `replication` devices.
  std::vector<int64_t> groups(num_tiles * manual_size, 0);
  std::vector<int64_t> devices(num_devices, -1);
  // Devices ascending: the tables are indexed by device id.
  const auto shared_a = a.IndexTable(), shared_b = b.IndexTable();
  const std::vector<int64_t>& table_a = *shared_a;
  const std::vector<int64_t>& table_b = *shared_b;
  const int64_t rank_a = a.num_dims(), rank_b = b.num_dims();
  const int64_t ids_b = static_cast<int64_t>(table_b.size()) / rank_b;
  for (int64_t device = 0; device * rank_a < static_cast<int64_t>(table_a.size()); ++device) {
    const int64_t* ia = &table_a[device * rank_a];
    if (ia[0] < 0) continue;
    if (device >= ids_b || table_b[device * rank_b] < 0) return std::nullopt;
    const int64_t* ib = &table_b[device * rank_b];
    int64_t flat = 0;
    for (int64_t d = 0; d < rank; ++d) {
      if (a.dim(d) > 1 && b.dim(d) > 1 && ia[d] != ib[d]) return std::nullopt;
      flat = flat * merged_dims[d] + (a.dim(d) > 1 ? ia[d] : ib[d]);
    }
    if (a_manual >= 0) {
      if (ia[a_manual] != ib[b_manual]) return std::nullopt;
      flat = flat * manual_size + ia[a_manual];
    }
    if (groups[flat] == replication) return std::nullopt;
    devices[flat * replication + groups[flat]++] = device;
  }
  std::vector<int64_t> dims = merged_dims;
  if (a_manual >= 0) dims.push_back(manual_size);
  dims.push_back(replication);
  TileAssignment tiles(std::move(dims), std::move(devices));
  if (a.is_iota()) tiles = tiles.AsIotaIfPossible();
  if (a_manual >= 0) {
    return HloSharding::Subgroup(std::move(tiles),
                                 {SubgroupType::kManual, SubgroupType::kReplicated});
  }
  return HloSharding::PartialTile(std::move(tiles));
}

namespace {
bool IsLeafMoreSpecific(const HloSharding& lhs, const HloSharding& rhs) {
  if (lhs.IsManual() && rhs.IsTileMaximal()) return true;
  if (lhs.IsManual() || rhs.IsManual()) return false;
  if (!rhs.IsTileMaximal()) return lhs.NumTiles() > rhs.NumTiles();
  // Replicated is improved by anything else; a single device only by tiling.
  return rhs.IsReplicated() ? !lhs.IsReplicated() : !lhs.IsTileMaximal();
}
}  // namespace

bool IsShardingMoreSpecific(const HloSharding& lhs, const HloSharding& rhs) {
  WEFT_CHECK(lhs.IsTuple() == rhs.IsTuple(), "cannot compare {} with {}", lhs.ToString(),
             rhs.ToString());
  if (!lhs.IsTuple()) return IsLeafMoreSpecific(lhs, rhs);
  WEFT_CHECK(lhs.tuple_elements().size() == rhs.tuple_elements().size(),
             "tuple shardings {} and {} have different sizes", lhs.ToString(), rhs.ToString());
  bool better = false;
  for (size_t i = 0; i < lhs.tuple_elements().size(); ++i) {
    const HloSharding& l = lhs.tuple_elements()[i];
    const HloSharding& r = rhs.tuple_elements()[i];
    if (IsLeafMoreSpecific(r, l)) return false;
    better |= IsLeafMoreSpecific(l, r);
  }
  return better;
}

}  // namespace weft::sharding_util
