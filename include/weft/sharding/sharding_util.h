// Sharding algebra as pure functions, in the manner of XLA's hlo_sharding_util:
// what an op does to the sharding of the values flowing through it. Sharding
// propagation and the SPMD partitioner are built from these.
//
// Results never carry a shard group (shard_as/shard_like): groups annotate
// instructions, they are not part of the layout being computed.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "weft/sharding/hlo_sharding.h"

namespace weft::sharding_util {

// Sharding of transpose(x, dims) from x's sharding: output dim i is input dim
// dims[i] (HLO transpose semantics). Non-tiled shardings pass through.
HloSharding TransposeSharding(const HloSharding& sharding, std::span<const int64_t> dims);

// Sharding of reshape(x) from x's sharding such that every device keeps
// exactly the elements it already holds (the reshape needs no data movement),
// or nullopt if no sharding of the target shape does that. Dims may split or
// merge; an unevenly sharded dim must map to an identical target dim.
std::optional<HloSharding> ReshapeSharding(std::span<const int64_t> source_dims,
                                           std::span<const int64_t> target_dims,
                                           const HloSharding& sharding);

// Stops splitting the given data dims: their tiles join the replicated
// subgroup. Non-tiled shardings pass through.
HloSharding PartiallyReplicateTiledShardingOnDims(const HloSharding& sharding,
                                                  std::span<const int64_t> dims);
// Same, for every data dim except `dims_to_keep`.
HloSharding PartiallyReplicateTiledShardingOnAllDimsExcept(const HloSharding& sharding,
                                                           std::span<const int64_t> dims_to_keep);

// Nothing split, for an array of `rank` dims, keeping a manual subgroup
// (XLA's ReplicateAllDataDims): manual stays manual, a sharding without a
// manual subgroup becomes replicated.
HloSharding ReplicateAllDataDims(const HloSharding& sharding, int64_t rank);

// Removes data dims that are not split (e.g. the reduced dims of a reduce).
// Throws if one of them is split; replicate it first.
HloSharding RemoveShapeDimensions(const HloSharding& sharding,
                                  std::span<const int64_t> dims_to_remove);

// XLA's MergeShardingIfCompatible: refines `dst` with `to_merge` when they
// agree. Returns the merged sharding (each device's tile is the intersection of
// its tiles under both), or nullopt when:
//   - to_merge is tile-maximal (it adds nothing), or dst is fully tiled (no
//     replication left to refine),
//   - a data dim is split differently by both, or devices disagree on a tile,
//   - the result would have fewer than `minimum_tiles` tiles.
// A tile-maximal dst is simply replaced by to_merge. Manual subgroups must
// match in size and per-device position.
std::optional<HloSharding> MergeShardingIfCompatible(const HloSharding& to_merge,
                                                     const HloSharding& dst,
                                                     int64_t minimum_tiles = 1);

// XLA's GetFirstTargetDimToMoveShardingTiles: the first data dim other than
// `source` whose size is a multiple of its own tile count times `source`'s,
// so that it could hold `source`'s tiles too; nullopt when `source` is not
// split or has size 1, or no dim qualifies. Propagation passes a sort's
// operand sharding split along the sort dim only when there is one.
std::optional<int64_t> FirstTargetDimToMoveTiles(std::span<const int64_t> dims,
                                                 const HloSharding& sharding, int64_t source);

// Whether `lhs` is preferable to `rhs` (more tiles, or tiled over maximal over
// replicated; manual beats tile-maximal), as XLA's IsShardingMoreSpecific. For
// tuples: no element worse and at least one better.
bool IsShardingMoreSpecific(const HloSharding& lhs, const HloSharding& rhs);

}  // namespace weft::sharding_util
