// When a proposed sharding replaces an instruction's current one: XLA's
// "improve" rules (hlo_sharding_util's ReturnImprovedShardingImpl and
// MergeSharding), on weft's sharding algebra.
#pragma once

#include <optional>
#include <span>

#include "weft/sharding/hlo_sharding.h"

namespace weft {

// Tiled, replicated or manual (not maximal or unknown): a sharding
// propagation may spread, as XLA's IsSpatiallyPartitioned. Tuples: any
// element.
bool IsSpatiallyPartitioned(const HloSharding& sharding);

// Every device's tile under `sub` lies inside its tile under `sharding` (for
// an array of `dims`): `sub` refines `sharding` without moving data.
bool IsSubTilingOrEqualSharding(std::span<const int64_t> dims, const HloSharding& sub,
                                const HloSharding& sharding);

// XLA's MergeSharding: tries to refine `*dst` with `to_merge` (both
// partially replicated, may_combine set: merged into a sharding with more
// tiles than either). Returns true when *dst (possibly merged) is more
// specific than to_merge.
bool MergeSharding(const HloSharding& to_merge, HloSharding* dst, bool may_combine_partial);

// The sharding an instruction with `current` (nullptr: none) sharding and
// array dims `dims` should take when `proposed` arrives, or nullopt to keep
// it: manual beats tile-maximal; tile-maximal proposals never spread; any
// sharding beats none; otherwise merged or more specific wins, but an
// existing tiled sharding is only replaced by one that refines it unless
// `allow_aggressive_resharding`.
std::optional<HloSharding> ReturnImprovedSharding(HloSharding proposed, const HloSharding* current,
                                                  std::span<const int64_t> dims,
                                                  bool may_combine_partial,
                                                  bool allow_aggressive_resharding = false);

}  // namespace weft
