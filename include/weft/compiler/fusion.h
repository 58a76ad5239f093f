// Loop, input and output fusion: groups elementwise work into XLA `fusion`
// instructions of kind kLoop (and kInput, a reduce root; kOutput, a dot and
// its elementwise epilogue: below), each calling a
// fused computation that the executor runs a cache-sized tile at a time
// (src/runtime/eval_fusion.cc) instead of one whole-tensor pass per instruction.
//
// What fuses:
//  - elementwise ops: unary, binary, compare, select, clamp, convert (not
//    copy, which the executor runs as a no-op and the partitioner uses as a
//    resharding point);
//  - index maps: reshape, transpose, slice, concatenate, pad, reverse (XLA's
//    loop fusion: the fused root has the fusion's shape; inside, an index map
//    is evaluated by composing index maps down to the parameters, never
//    materialized);
//  - broadcast, iota and scalar constants, and compare, select, convert,
//    and, or, not whose operands are each such a cheap value or a value no
//    loop fusion computes (a parameter, a dot's or a reduce's result, read
//    as the fusion's parameter), e.g. a one-hot compare(iota,
//    broadcast(targets)): cheap, so copied into every fusion that reads
//    them instead of being materialized (where a reader outside fusions
//    needs the value, a fusion of its own computes it for that reader);
//  - element types f32, bf16, f16, s32, s64, u32, pred (IsFusibleElementType).
// A producer that is not cheap merges into its consumers' fusion when every
// user of it is in that one fusion and the fusion can read it where its
// users do. A value read by several fusions is computed once, in a fusion of
// its own, unless (recomputation) it is elementwise, one of those fusions
// is an input fusion (below), its producers read at most one buffer of its
// size (computing it in each reader then holds that buffer, read anyway,
// instead of a second one), and every reader is a fusion that can compute
// it: then it is computed in each of them — cross-entropy's and softmax's
// exp(x - max), which the sum's input fusion and the gradient (or the
// normalization) both read, is never materialized; nor is its subtract,
// copied along with it. Recomputing values only loop fusions read (SiLU and
// RMSNorm products in the layers' backward) made small.toml's step slower
// and is not done (docs/PERFORMANCE.md). Each member is either "aligned" — read at the fusion's own
// linear indices: the elementwise ops (and iota) and the reshapes between
// them, all with the fusion's element count (a row-major reshape keeps the
// linear index) — or "gathered" — read at other indices by an index map or
// a broadcast above it: then it is itself an index map, a reshape, a
// broadcast or a scalar constant, so that a gathered chain ends at the
// fused computation's parameters and constants (an elementwise op under a
// transpose is computed in a fusion of its own). A pad's value is a scalar
// parameter or constant. Rank-0 (scalar) computations, collectives, dots,
// reductions (but an input fusion's root, below), gather/scatter, dynamic slices, custom calls,
// while/call, tuples and anything whose sharding differs from its consumer's (a sharding boundary)
// stay unfused. A fusion needs some elementwise work and never has side effects.
//
//
// Input fusion (kind kInput, XLA's name): a reduce whose reducer is add,
// multiply, max or min of its two parameters, over the innermost dims (rows
// of at most kMaxInputFusionRow elements: a vocabulary's), f32 in and out, is
// the root of a fusion of its input's producers, grown by the same rules with
// the reduce input's element count as the fusion's (RMSNorm's x*x,
// cross-entropy's exp(x - max) and select(one-hot, logits, 0)). The executor computes one row's
// input a tile at a time into a row buffer and folds it as the unfused reduce folds a row: the same
// bits.
//
// Output fusion (kind kOutput, XLA's name): an f32 dot (both operands f32)
// whose only user is an add or multiply of the dot's shape and sharding,
// whose other operand is a different value of that full shape, not a
// broadcast, iota or constant, which loop fusion computes inline (residual
// add, bias add of a full-shape bias, add(carry, dot), multiply(silu(gate),
// up_dot)), optionally followed by more such steps (a linear chain, each
// value before the last with that one user), becomes a fusion of the dot
// and the chain: parameters are the dot's operands and each step's other
// operand, the root the chain's last step. The executor runs it as one
// oneDNN matmul with a binary post-op per step (src1: the step's other
// operand in the dot's dense [batch, M, N] layout), within 1e-6 relative
// of the unfused program (the same float operations; oneDNN may pick a
// different GEMM kernel with post-ops). Its scratch is its dot's
// (compiler::InstructionScratch, dot_layout.h). FuseLoops runs output
// fusion first (FuseOutputs), so loop fusion sees those adds and
// multiplies inside a fusion, which it never fuses further; a broadcast
// (smaller) other operand, a dot with a second user, bf16 dots stay as
// they were.
//
// Runs over the entry computation and the computations it reaches through
// while (body, condition) and call; reducers (to_apply of reduce, scatter,
// all-reduce, reduce-scatter) are left alone. Fused computations are named
// fused_computation, fused_computation.1, ...; fusion instructions fusion,
// fusion.1, ...; moved instructions keep their names, parameters are named
// param_N, copies of cheap or recomputed instructions get a fresh name.
#pragma once

#include <cstdint>

#include "weft/hlo/module.h"

namespace weft::compiler {

// Longest row (reduced elements per output element) an input fusion folds:
// the executor keeps one row per thread (1 MiB of f32). Large enough for a
// cross-entropy's rows over a vocabulary (Llama 3's 128,256; Gemma's
// 256,000), whose reductions would otherwise read materialized [B, S, V]
// inputs.
inline constexpr int64_t kMaxInputFusionRow = 1 << 18;

struct LoopFusionStats {
  int64_t fusions = 0;             // fusion instructions made (loop, input and output)
  int64_t input_fusions = 0;       // of which kInput (a reduce root)
  int64_t output_fusions = 0;      // of which kOutput (a dot and its add/multiply chain)
  int64_t fused_instructions = 0;  // instructions inside them (duplicates counted each time)
  // Extra computations of cheap or recomputed instructions: their copies in
  // fusions, plus the original where it stays, less one each.
  int64_t duplicated = 0;
};

// Output fusion alone (see above): rewrites `module` in place; FuseLoops
// calls it first.
LoopFusionStats FuseOutputs(HloModule& module);

// Rewrites `module` in place (output fusion, then loop and input fusion). Idempotent in effect: a
// second run finds only fusion instructions, which it does not fuse further.
LoopFusionStats FuseLoops(HloModule& module);

// Whether `instr` may be placed in a loop fusion (its opcode and element
// type; the shapes of its neighbours are checked by the pass).
bool IsLoopFusible(const HloInstruction& instr);
// Whether `instr` is a dot that may start an output fusion (f32 result and
// operands; its user chain is checked by the pass).
bool IsOutputFusibleDot(const HloInstruction& instr);
// Whether `instr` is a reduce that may root an input fusion (see above).
bool IsInputFusibleReduce(const HloInstruction& instr);

}  // namespace weft::compiler
