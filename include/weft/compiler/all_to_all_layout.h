// Where an all-to-all writes its result: in its own layout, or straight in
// the layout of the transpose that reads it.
//
// SPMD partitioning moves a split from one dimension to another as
// reshape -> all-to-all -> transpose -> reshape (XLA's array all-to-all
// concatenates the chunks it receives along the dimension it split, so a
// transpose puts that dimension where the result wants it). When the
// transpose is the all-to-all's only user and moves only the split
// dimension (every other dimension keeps its order), and that dimension is
// as long as the replica groups (each chunk one index of it, as the
// partitioner's reshape makes it), each received chunk keeps the order of
// its elements: only the rows it lies in change. The
// all-to-all then writes its chunks as rows of the transpose's layout, and
// the transpose forwards those bytes as its own, so they are copied once
// instead of twice. The executor (runtime/eval_collectives.cc,
// eval_shape_ops.cc), buffer assignment (the transpose is a kForward, the
// all-to-all never in place) and the planner's step model read this one
// decision.
#pragma once

#include <cstdint>

#include "weft/hlo/instruction.h"

namespace weft::compiler {

// The transpose `all_to_all` writes its result through, or null (`all_to_all`
// may be any instruction: null unless it is an array all-to-all whose only
// user is such a transpose and which is not its computation's root).
const HloInstruction* TransposeWrittenByAllToAll(const HloInstruction& all_to_all);

// True when `transpose` forwards the bytes its operand, an all-to-all, wrote
// in its layout.
bool ForwardsAllToAll(const HloInstruction& transpose);

// The all-to-all's output chunks in the layout of the transpose it writes
// through: the product of the transpose's dimensions before the one the
// split dimension moved to (the rows each chunk is cut into: [outer, n,
// inner] as runtime::Communicator numbers strided chunks).
int64_t TransposedOuterRows(const HloInstruction& transpose);

}  // namespace weft::compiler
