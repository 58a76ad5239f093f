#include "weft/spmd/improve_sharding.h"

#include <algorithm>
#include <vector>

#include "weft/sharding/sharding_util.h"

namespace weft {
namespace {

bool IsStrictlyBetter(const HloSharding& lhs, const HloSharding& rhs) {
  if (lhs.IsTuple() != rhs.IsTuple()) return false;
  if (!lhs.IsTuple()) return lhs.IsManual() && rhs.IsTileMaximal();
  bool better = false, worse = false;
  const auto& l = lhs.tuple_elements();
  const auto& r = rhs.tuple_elements();
  if (l.size() != r.size()) return false;
  for (size_t i = 0; i < l.size(); ++i) {
    better |= l[i].IsManual() && r[i].IsTileMaximal();
    worse |= r[i].IsManual() && l[i].IsTileMaximal();
  }
  return better && !worse;
}

bool IsLeafMoreSpecific(const HloSharding& lhs, const HloSharding& rhs) {
  return sharding_util::IsShardingMoreSpecific(lhs, rhs);
}

}  // namespace

bool IsSpatiallyPartitioned(const HloSharding& sharding) {
  if (sharding.IsTuple()) {
    return std::any_of(sharding.tuple_elements().begin(), sharding.tuple_elements().end(),
                       [](const HloSharding& s) { return IsSpatiallyPartitioned(s); });
  }
  return sharding.IsReplicated() || sharding.IsTiled();
}

bool IsSubTilingOrEqualSharding(std::span<const int64_t> dims, const HloSharding& sub,
                                const HloSharding& sharding) {
  if (sub.IsManual() || sharding.IsManual()) return false;
  if (sharding.IsTileMaximal()) return true;
  if (sub.IsTileMaximal() || !sub.IsTiled() || !sharding.IsTiled()) return false;
  const int64_t rank = static_cast<int64_t>(dims.size());
  if (sub.TiledDataRank() != rank || sharding.TiledDataRank() != rank) return false;
  if (sub.tile_assignment().num_elements() != sharding.tile_assignment().num_elements()) {
    return false;
  }
  for (int64_t d = 0; d < rank; ++d) {
    if (sub.tile_assignment().dim(d) < sharding.tile_assignment().dim(d)) return false;
  }
  // Compare tile extents device by device (padding tiles hold no data).
  for (int64_t device : sharding.tile_assignment().devices()) {
    std::vector<int64_t> so = sub.TileOffsetForDevice(dims, device);
    std::vector<int64_t> sl = sub.TileLimitForDevice(dims, device);
    std::vector<int64_t> o = sharding.TileOffsetForDevice(dims, device);
    std::vector<int64_t> l = sharding.TileLimitForDevice(dims, device);
    for (int64_t d = 0; d < rank; ++d) {
      if (sl[d] <= so[d]) continue;  // empty tile
      if (so[d] < o[d] || sl[d] > l[d]) return false;
    }
  }
  return true;
}

bool MergeSharding(const HloSharding& to_merge, HloSharding* dst, bool may_combine_partial) {
  if (to_merge.IsTuple()) {
    if (!dst->IsTuple() || dst->tuple_elements().size() != to_merge.tuple_elements().size()) {
      return false;
    }
    std::vector<HloSharding> elements = dst->tuple_elements();
    bool changed = false;
    for (size_t i = 0; i < elements.size(); ++i) {
      changed |= MergeSharding(to_merge.tuple_elements()[i], &elements[i], may_combine_partial);
    }
    *dst = HloSharding::Tuple(std::move(elements));
    return changed;
  }
  if (may_combine_partial && to_merge.HasPartialReplication() && dst->HasPartialReplication() &&
      to_merge.tile_assignment().num_elements() == dst->tile_assignment().num_elements()) {
    const int64_t minimum = std::max(to_merge.NumTiles(), dst->NumTiles()) + 1;
    if (auto merged = sharding_util::MergeShardingIfCompatible(to_merge, *dst, minimum)) {
      *dst = std::move(*merged);
      return true;
    }
  }
  return IsLeafMoreSpecific(*dst, to_merge);
}

std::optional<HloSharding> ReturnImprovedSharding(HloSharding proposed, const HloSharding* current,
                                                  std::span<const int64_t> dims,
                                                  bool may_combine_partial,
                                                  bool allow_aggressive_resharding) {
  proposed = proposed.IsTuple() ? proposed : proposed.WithShardGroup(std::nullopt);
  if (current != nullptr && IsStrictlyBetter(proposed, *current)) return proposed;
  if (!IsSpatiallyPartitioned(proposed)) return std::nullopt;
  if (current == nullptr) return proposed;
  if (proposed.IsManual()) return std::nullopt;
  if (proposed.IsTuple() != current->IsTuple()) return std::nullopt;
  const int64_t tiles = proposed.IsTuple() ? 0 : proposed.NumTiles();
  if (!MergeSharding(*current, &proposed, may_combine_partial)) return std::nullopt;
  if (!allow_aggressive_resharding && !proposed.IsTuple() && !current->IsTileMaximal() &&
      proposed.NumTiles() == tiles && !IsSubTilingOrEqualSharding(dims, proposed, *current)) {
    return std::nullopt;
  }
  if (*current == proposed) return std::nullopt;
  return proposed;
}

}  // namespace weft
