// Moving a sharding across an op through its factor rule: the one piece of
// sharding algebra propagation uses for every op, in both directions.
#pragma once

#include <optional>
#include <span>

#include "weft/sharding/hlo_sharding.h"
#include "weft/spmd/op_sharding_rule.h"

namespace weft {

// The sharding of tensor `to` implied by sharding `from_sharding` of tensor
// `from` (dims `from_dims`) under `rule`:
//   1. each split `from` dim is spread over its factors, major factor first
//      (a dim that cannot be spread exactly, e.g. 6 split 4 ways over 2*3,
//      stops being split);
//   2. factors that `to` has and that are not need-replication keep their
//      split, in `to`'s dim order; a `to` dim made of several factors keeps
//      a minor factor's split only if the factors before it are fully split
//      (otherwise a device's elements would be strided);
//   3. everything else joins the replicated subgroup; manual subgroups stay.
// Tile-maximal, manual and unknown shardings are returned as they are. The
// result carries no shard group. nullopt if `from_sharding` does not fit
// `from_dims`.
std::optional<HloSharding> ProjectSharding(const OpShardingRule& rule, TensorRef from,
                                           std::span<const int64_t> from_dims,
                                           const HloSharding& from_sharding, TensorRef to,
                                           std::span<const int64_t> to_dims);

// XLA's ReverseSharding: tiles along `dims` in reverse device order.
HloSharding ReverseSharding(const HloSharding& sharding, std::span<const int64_t> dims);

}  // namespace weft
