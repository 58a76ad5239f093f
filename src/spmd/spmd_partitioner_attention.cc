#include "spmd_partitioner_handlers.h"

namespace weft::spmd {

PartitionedValue HandleAttention(ComputationPartitioner& p, const HloInstruction& instr,
                                 const HloSharding& sharding) {
  return HandleReplicated(p, instr);
}

}  // namespace weft::spmd
