// SPMD partitioner: turns a fully sharded module (every instruction carries
// a sharding, e.g. after sharding propagation) into one per-device program,
// as XLA's SPMD partitioner does. Every array becomes its device's local
// tile (uneven dims padded to the full tile shape, padding masked before any
// reduction reads it), device-dependent offsets are read from constant tables
// at `partition-id`, and data moves with collectives whose replica_groups are
// partition ids (use_global_device_ids, a channel_id each).
//
// The output entry keeps the input's parameter and root shardings as
// annotations, so callers know how to split inputs and join outputs; all other
// instructions carry no sharding.
//
// Custom call "weft.flex_attention" / "weft.flex_attention_backward" (operands
// q [B,Hq,Sq,D], k [B,Hkv,Skv,D], v [B,Hkv,Skv,Dv], then named tensors such as
// segment ids [B,S]): batch and head sharding run locally. Query-sequence
// sharding gathers k, v (and kv-sized named tensors) along the sequence and
// appends one extra s32[] operand, the device's global query offset, and sets
// "q_offset_operand": <index> in the JSON backend_config, so masks evaluated
// on q_idx see global positions, and "global_q_len": Sq, so the padding rows
// of an uneven last tile can be masked. The backward reduce-scatters dk/dv back to
// the kv sharding.
#pragma once

#include <cstdint>
#include <memory>

#include "weft/hlo/module.h"

namespace weft {

struct PartitionOptions {
  // Number of devices; 0 = the module's num_partitions if set, else the
  // device count of the largest tile assignment in the module.
  int64_t num_partitions = 0;
};

// Returns the per-device program. Throws weft::Error naming the instruction
// when a sharding is missing where one is required or cannot be honoured.
std::unique_ptr<HloModule> PartitionModule(const HloModule& module,
                                           const PartitionOptions& options = {});

}  // namespace weft
