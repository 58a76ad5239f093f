#include "weft/spmd/factor_projection.h"

#include <algorithm>
#include <vector>

namespace weft {

namespace {

// Step 1's arithmetic: how `tiles` tiles of a dim made of factors `fs` spread
// over them, major factor first (each factor's share), or nullopt where they
// cannot be spread exactly.
std::optional<std::vector<int64_t>> SpreadOverFactors(const OpShardingRule& rule,
                                                      const std::vector<int64_t>& fs,
                                                      int64_t tiles) {
  if (fs.empty()) return std::nullopt;
  std::vector<int64_t> parts;
  int64_t remaining = tiles;
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
      return std::nullopt;
    }
  }
  if (remaining != 1) return std::nullopt;
  return parts;
}

// The tile assignment's dims after step 1's reshape.
struct ExpandedTiles {
  std::vector<int64_t> dims;
  std::vector<int64_t> factor_dim;       // per factor: its index in `dims`, -1 if not split
  int64_t manual = -1, replicated = -1;  // the subgroup dims' indices in `dims`
};

// 1. Each split dim's tiles spread over its factors; a dim that cannot be
// spread stays one dim no factor owns (it becomes replication). The subgroup
// dims come after the data dims in both layouts (manual before replicated,
// as HloSharding normalizes), so a reshape is exact.
ExpandedTiles ExpandTiles(const OpShardingRule& rule,
                          const OpShardingRule::TensorFactors& from_factors,
                          const HloSharding& from_sharding) {
  const TileAssignment& ta = from_sharding.tile_assignment();
  ExpandedTiles e;
  e.factor_dim.assign(rule.num_factors(), -1);
  auto add_dim = [&](int64_t size) {
    e.dims.push_back(size);
    return static_cast<int64_t>(e.dims.size()) - 1;
  };
  for (size_t d = 0; d < from_factors.size(); ++d) {
    const int64_t t = ta.dim(static_cast<int64_t>(d));
    const auto& fs = from_factors[d];
    if (t == 1) continue;
    if (fs.size() == 1) {
      e.factor_dim[fs[0]] = add_dim(t);
      continue;
    }
    const std::optional<std::vector<int64_t>> parts = SpreadOverFactors(rule, fs, t);
    if (!parts) {
      add_dim(t);
      continue;
    }
    for (size_t i = 0; i < fs.size(); ++i) {
      if ((*parts)[i] != 1) e.factor_dim[fs[i]] = add_dim((*parts)[i]);
    }
  }
  if (const int64_t manual = from_sharding.SubgroupManualDim(); manual >= 0) {
    e.manual = add_dim(ta.dim(manual));
  }
  if (const int64_t repl = from_sharding.SubgroupReplicationDim(); repl >= 0) {
    e.replicated = add_dim(ta.dim(repl));
  }
  if (e.dims.empty()) e.dims.push_back(1);
  return e;
}

// The projected tile assignment: which expanded dims it takes, in order, and
// how they group into its dims.
struct TargetLayout {
  std::vector<bool> used;  // per expanded dim
  std::vector<int64_t> perm, dims;
  std::vector<SubgroupType> subgroups;
};

// 2. The factors `to` keeps, in its dim order: split, not need-replication,
// and (in a dim of several factors) dividing their factor after factors
// split completely.
TargetLayout KeepTargetFactors(const OpShardingRule& rule,
                               const OpShardingRule::TensorFactors& to_factors,
                               const ExpandedTiles& e) {
  TargetLayout out;
  out.used.assign(e.dims.size(), false);
  for (const std::vector<int64_t>& fs : to_factors) {
    int64_t product = 1;
    bool prefix_full = true;  // every factor so far is split completely
    const bool multi = fs.size() > 1;
    for (int64_t f : fs) {
      const int64_t dim = e.factor_dim[f];
      const bool keep = dim >= 0 && rule.factor_kinds[f] != FactorKind::kNeedReplication &&
                        prefix_full && !out.used[dim] &&
                        (!multi || rule.factor_sizes[f] % e.dims[dim] == 0);
      if (keep) {
        out.used[dim] = true;
        out.perm.push_back(dim);
        product *= e.dims[dim];
        if (e.dims[dim] != rule.factor_sizes[f]) prefix_full = false;
      } else if (rule.factor_sizes[f] != 1) {
        prefix_full = false;
      }
    }
    out.dims.push_back(product);
  }
  return out;
}

// 3. The manual subgroup, then every expanded dim not kept as replication.
void AppendSubgroups(const ExpandedTiles& e, TargetLayout& out) {
  if (e.manual >= 0) {
    out.perm.push_back(e.manual);
    out.used[e.manual] = true;
    out.dims.push_back(e.dims[e.manual]);
    out.subgroups.push_back(SubgroupType::kManual);
  }
  int64_t replication = 1;
  for (size_t i = 0; i < e.dims.size(); ++i) {
    if (!out.used[i] && static_cast<int64_t>(i) != e.replicated) {
      out.perm.push_back(static_cast<int64_t>(i));
      replication *= e.dims[i];
    }
  }
  if (e.replicated >= 0) {
    out.perm.push_back(e.replicated);
    replication *= e.dims[e.replicated];
  }
  out.dims.push_back(replication);
  out.subgroups.push_back(SubgroupType::kReplicated);
}

}  // namespace

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
  const ExpandedTiles expanded = ExpandTiles(rule, from_factors, from_sharding);
  TargetLayout layout = KeepTargetFactors(rule, to_factors, expanded);
  AppendSubgroups(expanded, layout);
  if (layout.dims.size() == 1 && layout.subgroups.size() == 1) return HloSharding::Replicate();
  TileAssignment out = from_sharding.tile_assignment()
                           .Reshape(expanded.dims)
                           .Transpose(layout.perm)
                           .Reshape(layout.dims);
  return HloSharding::Subgroup(std::move(out), std::move(layout.subgroups));
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
