#include "weft/spmd/factor_projection.h"

#include <algorithm>
#include <vector>

namespace weft {

std::optional<HloSharding> ProjectSharding(const OpShardingRule& rule, TensorRef from,
                                           std::span<const int64_t> from_dims,
                                           const HloSharding& from_sharding, TensorRef to,
                                           std::span<const int64_t> to_dims) {
  if (from_sharding.IsTuple()) return std::nullopt;
  if (!from_sharding.IsTiled()) return from_sharding.WithShardGroup(std::nullopt);
  const auto& from_factors = rule.tensor(from);
  const auto& to_factors = rule.tensor(to);
  const int64_t rank = static_cast<int64_t>(from_dims.size());
  if (from_sharding.TiledDataRank() != rank || static_cast<int64_t>(from_factors.size()) != rank ||
      to_factors.size() != to_dims.size()) {
    return std::nullopt;
  }
  const TileAssignment& ta = from_sharding.tile_assignment();

  // 1. Spread each dim's tiles over its factors. `expanded` are the tile dims
  // after the reshape; factor_dim[f] is f's index there (-1: not split).
  std::vector<int64_t> expanded;
  std::vector<int64_t> factor_dim(rule.num_factors(), -1);
  std::vector<int64_t> dropped;  // expanded dims that become replication
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t t = ta.dim(d);
    const auto& fs = from_factors[d];
    if (t == 1) continue;
    if (fs.size() == 1) {
      factor_dim[fs[0]] = static_cast<int64_t>(expanded.size());
      expanded.push_back(t);
      continue;
    }
    std::vector<int64_t> parts;
    int64_t remaining = t;
    bool ok = !fs.empty();
    for (int64_t f : fs) {
      const int64_t size = rule.factor_sizes[f];
      if (remaining == 1) {
        parts.push_back(1);
      } else if (remaining <= size && size % remaining == 0) {
        parts.push_back(remaining);
        remaining = 1;
      } else if (remaining > size && remaining % size == 0) {
        parts.push_back(size);
        remaining /= size;
      } else {
        ok = false;
        break;
      }
    }
    if (!ok || remaining != 1) {
      dropped.push_back(static_cast<int64_t>(expanded.size()));
      expanded.push_back(t);
      continue;
    }
    for (size_t i = 0; i < fs.size(); ++i) {
      if (parts[i] == 1) continue;
      factor_dim[fs[i]] = static_cast<int64_t>(expanded.size());
      expanded.push_back(parts[i]);
    }
  }
  const int64_t num_data = static_cast<int64_t>(expanded.size());
  const int64_t manual_dim = from_sharding.SubgroupManualDim();
  const int64_t repl_dim = from_sharding.SubgroupReplicationDim();
  int64_t manual_expanded = -1, repl_expanded = -1;
  if (manual_dim >= 0) {
    manual_expanded = static_cast<int64_t>(expanded.size());
    expanded.push_back(ta.dim(manual_dim));
  }
  if (repl_dim >= 0) {
    repl_expanded = static_cast<int64_t>(expanded.size());
    expanded.push_back(ta.dim(repl_dim));
  }
  if (expanded.empty()) expanded.push_back(1);
  // The subgroup dims come after the data dims in both layouts (manual
  // before replicated, as HloSharding normalizes), so a reshape is exact.
  TileAssignment tiles = ta.Reshape(expanded);

  // 2. Pick the factors `to` keeps, in its dim order.
  std::vector<bool> used(expanded.size(), false);
  std::vector<int64_t> perm, out_dims;
  for (size_t e = 0; e < to_factors.size(); ++e) {
    int64_t product = 1;
    bool prefix_full = true;  // every factor so far is split completely
    const bool multi = to_factors[e].size() > 1;
    for (int64_t f : to_factors[e]) {
      const int64_t dim = factor_dim[f];
      const bool keep = dim >= 0 && rule.factor_kinds[f] != FactorKind::kNeedReplication &&
                        prefix_full && !used[dim] &&
                        (!multi || rule.factor_sizes[f] % expanded[dim] == 0);
      if (keep) {
        used[dim] = true;
        perm.push_back(dim);
        product *= expanded[dim];
        if (expanded[dim] != rule.factor_sizes[f]) prefix_full = false;
      } else if (rule.factor_sizes[f] != 1) {
        prefix_full = false;
      }
    }
    out_dims.push_back(product);
  }
  (void)num_data;
  // 3. Manual subgroup, then everything unused as replication.
  std::vector<SubgroupType> types;
  if (manual_expanded >= 0) {
    perm.push_back(manual_expanded);
    used[manual_expanded] = true;
    out_dims.push_back(expanded[manual_expanded]);
    types.push_back(SubgroupType::kManual);
  }
  int64_t replication = 1;
  for (size_t i = 0; i < expanded.size(); ++i) {
    if (!used[i] && static_cast<int64_t>(i) != repl_expanded) {
      perm.push_back(static_cast<int64_t>(i));
      replication *= expanded[i];
    }
  }
  if (repl_expanded >= 0) {
    perm.push_back(repl_expanded);
    replication *= expanded[repl_expanded];
  }
  out_dims.push_back(replication);
  types.push_back(SubgroupType::kReplicated);
  if (out_dims.size() == 1 && types.size() == 1) return HloSharding::Replicate();
  TileAssignment out = tiles.Transpose(perm).Reshape(out_dims);
  return HloSharding::Subgroup(std::move(out), std::move(types));
}

HloSharding ReverseSharding(const HloSharding& sharding, std::span<const int64_t> dims) {
  if (!sharding.IsTiled()) return sharding;
  const TileAssignment& ta = sharding.tile_assignment();
  bool any = false;
  for (int64_t d : dims) any |= ta.dim(d) > 1;
  if (!any) return sharding;
  std::vector<int64_t> devices(ta.num_elements());
  std::vector<int64_t> index(ta.num_dims(), 0), source(ta.num_dims());
  for (int64_t i = 0; i < ta.num_elements(); ++i) {
    source = index;
    for (int64_t d : dims) source[d] = ta.dim(d) - 1 - index[d];
    devices[i] = ta(source);
    for (int64_t k = ta.num_dims() - 1; k >= 0; --k) {
      if (++index[k] < ta.dim(k)) break;
      index[k] = 0;
    }
  }
  TileAssignment reversed(ta.dims(), std::move(devices));
  if (sharding.ReplicateOnLastTileDim()) return HloSharding::PartialTile(std::move(reversed));
  return HloSharding::Subgroup(std::move(reversed), sharding.subgroup_types());
}

}  // namespace weft
