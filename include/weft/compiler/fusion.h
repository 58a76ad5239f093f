// Loop and input fusion: groups elementwise work into XLA `fusion`
// instructions of kind kLoop (and kInput, a reduce root), each calling a
// fused computation that the executor runs a cache-sized tile at a time (src/runtime/eval_fusion.cc) instead of one
// whole-tensor pass per instruction.
//
// What fuses:
//  - elementwise ops: unary, binary, compare, select, clamp, convert (not
//    copy, which the executor runs as a no-op and the partitioner uses as a
//    resharding point);
//  - index maps: reshape, transpose, slice, concatenate, pad, reverse (XLA's
//    loop fusion: the fused root has the fusion's shape; inside, an index map
//    is evaluated by composing index maps down to the parameters, never
//    materialized);
//  - broadcast, iota and scalar constants, which are cheap and so may be
//    duplicated into several fusions (the original stays for other users);
//  - element types f32, bf16, f16, s32, s64, u32, pred (IsFusibleElementType).
// A producer merges into its consumers' fusion when every user of it is in
// that one fusion (so a value with two users in different places is computed
// once, unfused, unless it is cheap), and when the fusion can read it where
// its users do. Each member is either "aligned" — read at the fusion's own
// linear indices: the elementwise ops (and iota) and the reshapes between
// them, all with the fusion's element count (a row-major reshape keeps the
// linear index) — or "gathered" — read at other indices by an index map or
// a broadcast above it: then it is itself an index map, a reshape, a
// broadcast or a scalar constant, so that a gathered chain ends at the
// fused computation's parameters and constants (an elementwise op under a
// transpose is computed in a fusion of its own). A pad's value is a scalar
// parameter or constant. Rank-0 (scalar) computations, collectives, dots,
// reductions (but an input fusion's root, below), gather/scatter, dynamic slices, custom calls, while/call,
// tuples and anything whose sharding differs from its consumer's (a sharding
// boundary) stay unfused. A fusion needs some elementwise work and never has
// side effects.
//
//
// Input fusion (kind kInput, XLA's name): a reduce whose reducer is add,
// multiply, max or min of its two parameters, over the innermost dims (rows
// of at most kMaxInputFusionRow elements), f32 in and out, is the root of a
// fusion of its input's producers, grown by the same rules with the reduce
// input's element count as the fusion's (RMSNorm's x*x, cross-entropy's
// exp(x - max)). The executor computes one row's input a tile at a time
// into a row buffer and folds it as the unfused reduce folds a row: the
// same bits.
//
// Runs over the entry computation and the computations it reaches through
// while (body, condition) and call; reducers (to_apply of reduce, scatter,
// all-reduce, reduce-scatter) are left alone. Fused computations are named
// fused_computation, fused_computation.1, ...; fusion instructions fusion,
// fusion.1, ...; moved instructions keep their names, parameters are named
// param_N, duplicated cheap instructions get a fresh name.
#pragma once

#include <cstdint>

#include "weft/hlo/module.h"

namespace weft::compiler {

// Longest row (reduced elements per output element) an input fusion folds:
// the executor keeps one row per thread.
inline constexpr int64_t kMaxInputFusionRow = 1 << 16;

struct LoopFusionStats {
  int64_t fusions = 0;             // fusion instructions made (loop and input)
  int64_t input_fusions = 0;       // of which kInput (a reduce root)
  int64_t fused_instructions = 0;  // instructions inside them (duplicates counted each time)
  int64_t duplicated = 0;          // cheap instructions copied into a fusion and kept elsewhere too
};

// Rewrites `module` in place. Idempotent in effect: a second run finds only
// fusion instructions, which it does not fuse further.
LoopFusionStats FuseLoops(HloModule& module);

// Whether `instr` may be placed in a loop fusion (its opcode and element
// type; the shapes of its neighbours are checked by the pass).
bool IsLoopFusible(const HloInstruction& instr);
// Whether `instr` is a reduce that may root an input fusion (see above).
bool IsInputFusibleReduce(const HloInstruction& instr);

}  // namespace weft::compiler
