// Resharding: moving a partitioned value from one sharding to another with
// the cheapest collective that does it, as XLA's partitioner does:
//
//   same sharding                  nothing
//   tiled -> replicated            all-gather per split dim (within groups)
//   each device already holds its  local dynamic-slice at offsets read from
//     target tile (replicated ->     partition-id (no communication)
//     tiled, adding tiling to a
//     partially replicated value)
//   split moves from dim a to b    all-to-all
//   same tiling, devices permuted  collective-permute
//   otherwise                      all-gather the dims whose tiling differs
//                                  (or everything), then slice locally
//   from unreduced axes (addends)  all-reduce within each group, then as above
//   to unreduced axes              as above to the summed layout, then zeros
//                                  on all but the first device of each group
//
// Uneven dims are padded to the full tile shape (see spmd_partitioner_util.h).
#pragma once

#include "weft/spmd/spmd_partitioner_util.h"

namespace weft::spmd {

// Returns `value` laid out by `target` (an array sharding). Emits into `b`.
PartitionedValue Reshard(SpmdBuilder& b, const PartitionedValue& value, const HloSharding& target);

// All-gathers the split data dims `dims` of `value`: the result follows
// value.sharding partially replicated on those dims.
PartitionedValue AllGatherDims(SpmdBuilder& b, const PartitionedValue& value,
                               const std::vector<int64_t>& dims);

// Bytes one device sends/receives to reshard a value of global shape `base`
// from `from` to `to` (built in a scratch computation, then discarded).
int64_t ReshardCost(PartitionContext* context, const Shape& base, const HloSharding& from,
                    const HloSharding& to);

}  // namespace weft::spmd
