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
  // As XLA's: only tile-maximal shardings that are not replicated (a
  // device) stay out; manual ones spread like any other.
  return sharding.IsReplicated() || sharding.IsTiled() || sharding.IsManual();
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
  if (sub == sharding) return true;
  // Compare tile extents device by device (padding tiles hold no data).
  const std::vector<int64_t> sub_tile = sub.TileShape(dims), tile = sharding.TileShape(dims);
  const auto shared_sub = sub.tile_assignment().IndexTable();
  const auto shared = sharding.tile_assignment().IndexTable();
  const std::vector<int64_t>& sub_table = *shared_sub;
  const std::vector<int64_t>& table = *shared;
  const int64_t sub_rank = sub.tile_assignment().num_dims();
  const int64_t full_rank = sharding.tile_assignment().num_dims();
  const int64_t sub_ids = static_cast<int64_t>(sub_table.size()) / sub_rank;
  for (int64_t device = 0; device * full_rank < static_cast<int64_t>(table.size()); ++device) {
    const int64_t* ti = &table[device * full_rank];
    if (ti[0] < 0) continue;
    WEFT_CHECK(device < sub_ids && sub_table[device * sub_rank] >= 0,
               "device {} is not in sharding {}", device, sub.ToString());
    const int64_t* si = &sub_table[device * sub_rank];
    for (int64_t d = 0; d < rank; ++d) {
      const int64_t so = std::min(si[d] * sub_tile[d], dims[d]);
      const int64_t sl = std::min((si[d] + 1) * sub_tile[d], dims[d]);
      if (sl <= so) continue;  // empty tile
      const int64_t o = std::min(ti[d] * tile[d], dims[d]);
      const int64_t l = std::min((ti[d] + 1) * tile[d], dims[d]);
      if (so < o || sl > l) return false;
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
