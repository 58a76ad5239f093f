// Gather: for now every gather runs on whole arrays (operands replicated,
// the result sliced to its sharding) -- correct for any gather, but an
// embedding table split along the vocabulary is gathered whole. The
// Megatron-style lookup (each device looks up the ids in its vocab slice,
// masks the rest to zero, then all-reduce) belongs here.
#include "spmd_partitioner_handlers.h"

namespace weft::spmd {

PartitionedValue HandleGather(ComputationPartitioner& p, const HloInstruction& instr,
                              const HloSharding& sharding) {
  return HandleReplicated(p, instr);
}

}  // namespace weft::spmd
