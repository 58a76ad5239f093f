#include "weft/spmd/reshard.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <optional>

#include "weft/base/error.h"
#include "weft/sharding/sharding_util.h"

namespace weft::spmd {
namespace {

bool SameSubgroups(const HloSharding& a, const HloSharding& b) {
  return a.ReplicateOnLastTileDim() == b.ReplicateOnLastTileDim() &&
         a.subgroup_types() == b.subgroup_types();
}

// Every device's target tile (its valid part) lies inside the piece it holds:
// a dynamic-slice at per-device offsets does the reshard.
std::optional<PartitionedValue> TrySliceLocally(SpmdBuilder& b, const PartitionedValue& v,
                                                const HloSharding& target) {
  const Shape& base = v.base;
  const int64_t rank = base.rank();
  const std::vector<int64_t> src_tile = v.hlo->shape().dimensions();
  const std::vector<int64_t> dst_tile = LocalShape(base, target).dimensions();
  // The device holding each dim's first target tile needs min(dst, size)
  // elements of that dim, and no device holds more than min(src, size): a
  // coarser target is refused without looking at every device.
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t size = base.dimensions(d);
    if (std::min(dst_tile[d], size) > std::min(src_tile[d], size)) return std::nullopt;
  }
  const int64_t n = b.num_partitions();
  // Unclamped (padded) tile offset of a device along a dim: its tile index
  // (one table per sharding) times the tile size; 0 where not tiled.
  struct Offsets {
    bool tiled = false;
    HloSharding::TileIndices table;
    std::vector<int64_t> tile;
    int64_t at(int64_t device, int64_t d) const { return tiled ? table[device][d] * tile[d] : 0; }
  };
  const auto offsets = [&](const HloSharding& s) {
    if (!s.IsTiled()) return Offsets{};
    return Offsets{true, s.TileIndexTable(n), s.TileShape(base.dimensions())};
  };
  const Offsets src = offsets(v.sharding), dst = offsets(target);
  std::vector<int64_t> high(rank, 0);
  std::vector<std::vector<int64_t>> starts(rank);  // per dim; empty: 0 on every device
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t size = base.dimensions(d);
    std::vector<int64_t> dim_starts;
    for (int64_t device = 0; device < n; ++device) {
      const int64_t src_off = src.at(device, d), dst_off = dst.at(device, d);
      const int64_t dst_lo = std::min(dst_off, size);
      const int64_t dst_hi = std::min(dst_off + dst_tile[d], size);
      const int64_t src_lo = std::min(src_off, size);
      const int64_t src_hi = std::min(src_off + src_tile[d], size);
      if (dst_lo < dst_hi && (dst_lo < src_lo || dst_hi > src_hi)) return std::nullopt;
      const int64_t start = std::max<int64_t>(0, dst_off - src_off);
      if (start != 0 && dim_starts.empty()) dim_starts.assign(n, 0);
      if (!dim_starts.empty()) dim_starts[device] = start;
      high[d] = std::max(high[d], start + dst_tile[d] - src_tile[d]);
    }
    starts[d] = std::move(dim_starts);
  }
  HloInstruction* x = b.PadHigh(v.hlo, high);
  const bool all_zero =
      std::all_of(starts.begin(), starts.end(), [](const auto& s) { return s.empty(); });
  std::vector<HloInstruction*> start_hlos;
  if (!all_zero) {
    for (int64_t d = 0; d < rank; ++d) {
      start_hlos.push_back(starts[d].empty() ? b.S32Constant(0) : b.DeviceValue(starts[d]));
    }
  }
  HloInstruction* result = all_zero ? b.Slice(x, std::vector<int64_t>(rank, 0), dst_tile)
                                    : b.DynamicSlice(x, start_hlos, dst_tile);
  return PartitionedValue{result, base, target};
}

// Same tiling, devices holding the tiles permuted: each device receives its
// target tile from one device that holds it now.
std::optional<PartitionedValue> TryCollectivePermute(SpmdBuilder& b, const PartitionedValue& v,
                                                     const HloSharding& target) {
  if (!v.sharding.IsTiled() || !target.IsTiled()) return std::nullopt;
  if (v.sharding.TilesPerDim() != target.TilesPerDim() || !SameSubgroups(v.sharding, target)) {
    return std::nullopt;
  }
  std::map<std::vector<int64_t>, std::vector<int64_t>> holders, receivers;
  for (int64_t device = 0; device < b.num_partitions(); ++device) {
    holders[v.sharding.TileIndexForDevice(device)].push_back(device);
    receivers[target.TileIndexForDevice(device)].push_back(device);
  }
  std::vector<std::pair<int64_t, int64_t>> pairs;
  for (auto& [tile, dsts] : receivers) {
    const std::vector<int64_t>& srcs = holders.at(tile);
    WEFT_CHECK(srcs.size() == dsts.size(), "internal: replica counts differ");
    // Devices that already hold their tile keep it (a self pair).
    std::vector<int64_t> free_srcs, free_dsts;
    for (int64_t d : dsts) {
      if (std::find(srcs.begin(), srcs.end(), d) != srcs.end()) {
        pairs.push_back({d, d});
      } else {
        free_dsts.push_back(d);
      }
    }
    for (int64_t s : srcs) {
      if (std::find(dsts.begin(), dsts.end(), s) == dsts.end()) free_srcs.push_back(s);
    }
    for (size_t i = 0; i < free_dsts.size(); ++i) pairs.push_back({free_srcs[i], free_dsts[i]});
  }
  std::sort(pairs.begin(), pairs.end());
  if (std::all_of(pairs.begin(), pairs.end(), [](auto& p) { return p.first == p.second; })) {
    return PartitionedValue{v.hlo, v.base, target};
  }
  return PartitionedValue{b.CollectivePermute(v.hlo, std::move(pairs)), v.base, target};
}

// Part of dim a's split moves to dim b: dim a's s[a] tiles are t[a] major
// times m minor ones, and the minor factor m joins dim b's split (as its
// minor factor: t[b] = s[b] * m). An all-to-all within each group of the m
// devices that differ only in that minor factor, then a collective-permute
// if the devices end up out of order. With t[a] = 1 the whole split moves
// (FSDP's batch split becoming a hidden-dim split). Tiles must line up: a
// coarser dim-a tile is m whole source tiles (or dim a ends whole), and a
// finer dim-b tile is an m-th of a source tile (or dim b was whole).
std::optional<PartitionedValue> TryAllToAll(SpmdBuilder& b, const PartitionedValue& v,
                                            const HloSharding& target) {
  if (!v.sharding.IsTiled() || !target.IsTiled() || !SameSubgroups(v.sharding, target)) {
    return std::nullopt;
  }
  const std::vector<int64_t> s = v.sharding.TilesPerDim();
  const std::vector<int64_t> t = target.TilesPerDim();
  const int64_t rank = v.base.rank();
  if (v.sharding.tile_assignment().num_dims() != target.tile_assignment().num_dims()) {
    return std::nullopt;
  }
  int64_t a = -1, dim_b = -1;
  for (int64_t d = 0; d < rank; ++d) {
    if (s[d] == t[d]) continue;
    if (s[d] > t[d] && a < 0) {
      a = d;
    } else if (s[d] < t[d] && dim_b < 0) {
      dim_b = d;
    } else {
      return std::nullopt;
    }
  }
  if (a < 0 || dim_b < 0 || s[a] % t[a] != 0) return std::nullopt;
  const int64_t n = s[a] / t[a];
  if (t[dim_b] != s[dim_b] * n) return std::nullopt;
  const Shape& base = v.base;
  const int64_t size_a = base.dimensions(a), size_b = base.dimensions(dim_b);
  const int64_t ca = v.hlo->shape().dimensions(a);
  const int64_t cb = (size_b + t[dim_b] - 1) / t[dim_b];  // the target's dim-b tile
  if (t[a] > 1 && n * ca != (size_a + t[a] - 1) / t[a]) return std::nullopt;
  if (s[dim_b] > 1 && v.hlo->shape().dimensions(dim_b) != n * cb) return std::nullopt;

  std::vector<int64_t> high(rank, 0);
  high[dim_b] = n * cb - v.hlo->shape().dimensions(dim_b);
  HloInstruction* x = b.PadHigh(v.hlo, high);
  // Split dim b into [n, cb]; the n-part is what goes to each peer.
  std::vector<int64_t> split = x->shape().dimensions();
  split[dim_b] = cb;
  split.insert(split.begin() + dim_b, n);
  x = b.Reshape(x, split);
  // The tile assignment with dim a as [t[a], n]: the groups run along n.
  std::vector<int64_t> ta_dims = v.sharding.tile_assignment().dims();
  ta_dims[a] = t[a];
  ta_dims.insert(ta_dims.begin() + a + 1, n);
  const TileAssignment ta_split = v.sharding.tile_assignment().Reshape(ta_dims);
  x = b.AllToAll(x, dim_b, GroupsAlongTileDims(ta_split, {a + 1}));
  // Now the n-part indexes the peer's dim-a chunk: move it before dim a, merge.
  const int64_t a_pos = a < dim_b ? a : a + 1;
  std::vector<int64_t> perm;
  for (int64_t d = 0; d <= rank; ++d) {
    if (d == dim_b) continue;
    if (d == a_pos) perm.push_back(dim_b);
    perm.push_back(d);
  }
  x = b.Transpose(x, perm);
  std::vector<int64_t> merged = LocalShape(base, target).dimensions();
  merged[a] = n * ca;
  x = b.Reshape(x, merged);
  if (t[a] == 1) {
    std::vector<int64_t> limits = merged;
    limits[a] = size_a;
    x = b.Slice(x, std::vector<int64_t>(rank, 0), limits);
  }

  // Same devices; the n factor of dim a becomes dim b's minor factor.
  const int64_t b_pos = dim_b < a ? dim_b : dim_b + 1;  // dim b in ta_split
  std::vector<int64_t> ta_perm;
  for (int64_t d = 0; d < static_cast<int64_t>(ta_dims.size()); ++d) {
    if (d == a + 1) continue;
    ta_perm.push_back(d);
    if (d == b_pos) ta_perm.push_back(a + 1);
  }
  TileAssignment moved = ta_split.Transpose(ta_perm).Reshape(target.tile_assignment().dims());
  HloSharding after = v.sharding.ReplicateOnLastTileDim()
                          ? HloSharding::PartialTile(std::move(moved))
                          : HloSharding::Tile(std::move(moved));
  PartitionedValue result{x, base, after};
  if (after == target) return result;
  return TryCollectivePermute(b, result, target);
}

std::vector<int64_t> SplitDims(const HloSharding& sharding, int64_t rank) {
  std::vector<int64_t> dims;
  const std::vector<int64_t> tiles = TilesPerDim(sharding, rank);
  for (int64_t d = 0; d < rank; ++d) {
    if (tiles[d] > 1) dims.push_back(d);
  }
  return dims;
}

// Strategies that need no gathering first.
std::optional<PartitionedValue> TryWithoutGather(SpmdBuilder& b, const PartitionedValue& v,
                                                 const HloSharding& target) {
  if (v.sharding == target) return v;
  if (auto r = TrySliceLocally(b, v, target)) return r;
  if (auto r = TryAllToAll(b, v, target)) return r;
  if (auto r = TryCollectivePermute(b, v, target)) return r;
  return std::nullopt;
}

}  // namespace

PartitionedValue AllGatherDims(SpmdBuilder& b, const PartitionedValue& value,
                               const std::vector<int64_t>& dims) {
  PartitionedValue v = value;
  for (int64_t d : dims) {
    if (!v.sharding.IsTiled() || v.sharding.TilesPerDim()[d] == 1) continue;
    const int64_t size = v.base.dimensions(d);
    HloInstruction* x =
        b.AllGather(v.hlo, d, GroupsAlongTileDims(v.sharding.tile_assignment(), {d}));
    // Tiles are ceil-sized, so the gathered valid data is the prefix [0, size).
    std::vector<int64_t> limits = x->shape().dimensions();
    limits[d] = size;
    x = b.Slice(x, std::vector<int64_t>(limits.size(), 0), limits);
    const int64_t dim = d;
    v = PartitionedValue{x, v.base,
                         NormalizeSharding(sharding_util::PartiallyReplicateTiledShardingOnDims(
                             v.sharding, std::span<const int64_t>(&dim, 1)))};
  }
  return v;
}

namespace {

// Resharding from or to unreduced axes: addends are summed within their
// groups (an all-reduce) before anything else; a value becomes addends by
// staying on the first device of each group (index 0 along the unreduced
// axes) and zeros elsewhere, so that the group's sum is the value.
PartitionedValue ReshardAddends(SpmdBuilder& b, const PartitionedValue& value,
                                const HloSharding& to) {
  const PrimitiveType type = value.base.element_type();
  const int64_t n = b.num_partitions();
  if (value.sharding.HasUnreduced()) {
    WEFT_CHECK(type != PrimitiveType::kPred,
               "a pred value of sharding {} has no sum of addends; unreduced values are numbers",
               value.sharding.ToString());
    HloInstruction* sum = b.AllReduce(value.hlo, b.ScalarReducer(HloOpcode::kAdd, type),
                                      UnreducedGroups(value.sharding, n));
    return Reshard(b, PartitionedValue{sum, value.base, value.sharding.WithoutUnreduced()}, to);
  }
  PartitionedValue v = Reshard(b, value, to.WithoutUnreduced());
  std::vector<int64_t> first(static_cast<size_t>(n), 0);
  for (const std::vector<int64_t>& group : UnreducedGroups(to, n)) {
    for (size_t k = 1; k < group.size(); ++k) first.at(group[k]) = 1;
  }
  const std::vector<int64_t>& dims = v.hlo->shape().dimensions();
  HloInstruction* keep = b.BroadcastScalar(
      b.Compare(b.DeviceValue(first), b.S32Constant(0), ComparisonDirection::kEq), dims);
  HloInstruction* zero = b.BroadcastScalar(b.ConstantScalar(type, 0), dims);
  return PartitionedValue{b.Select(keep, v.hlo, zero), value.base, to};
}

}  // namespace

PartitionedValue Reshard(SpmdBuilder& b, const PartitionedValue& value, const HloSharding& target) {
  WEFT_CHECK(value.base.IsArray(), "internal: Reshard of a non-array {}", value.base.ToString());
  const HloSharding to = NormalizeSharding(target);
  const int64_t rank = value.base.rank();
  if (value.sharding == to) return value;
  if (value.sharding.HasUnreduced() || to.HasUnreduced()) return ReshardAddends(b, value, to);
  WEFT_CHECK(!to.IsManual() && !value.sharding.IsManual(),
             "a value of sharding {} is used where {} is wanted: values enter and leave a "
             "manual region only through SPMDFullToShardShape and SPMDShardToFullShape",
             value.sharding.ToString(), to.ToString());
  if (to.IsReplicated()) return AllGatherDims(b, value, SplitDims(value.sharding, rank));
  if (auto r = TryWithoutGather(b, value, to)) return *r;
  // Gather only the dims whose split changes, then try again.
  std::vector<int64_t> differ;
  const std::vector<int64_t> s = TilesPerDim(value.sharding, rank);
  const std::vector<int64_t> t = TilesPerDim(to, rank);
  for (int64_t d = 0; d < rank; ++d) {
    if (s[d] > 1 && s[d] != t[d]) differ.push_back(d);
  }
  PartitionedValue v = value;
  if (!differ.empty() && differ != SplitDims(value.sharding, rank)) {
    v = AllGatherDims(b, value, differ);
    if (auto r = TryWithoutGather(b, v, to)) return *r;
  }
  v = AllGatherDims(b, v, SplitDims(v.sharding, rank));
  auto r = TrySliceLocally(b, v, to);
  WEFT_CHECK(r.has_value(), "internal: cannot slice {} from a replicated value", to.ToString());
  return *r;
}

int64_t ReshardCost(PartitionContext* context, const Shape& base, const HloSharding& from,
                    const HloSharding& to) {
  const int64_t saved_channel = context->next_channel_id;
  SpmdBuilder scratch("reshard_cost", context);
  const HloSharding src = NormalizeSharding(from);
  PartitionedValue v{scratch.Parameter(0, LocalShape(base, src), "x"), base, src};
  PartitionedValue r = Reshard(scratch, v, to);
  std::unique_ptr<HloComputation> computation = scratch.Build(r.hlo);
  context->next_channel_id = saved_channel;
  return CommunicationBytes(*computation);
}

}  // namespace weft::spmd
