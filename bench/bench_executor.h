// `weft bench executor`: the executor's per-instruction interpretation
// overhead, measured on a long chain of tiny adds (each add depends on the
// previous one, so nothing runs in parallel), as microseconds per
// instruction; the reference is the same adds as a plain C++ loop in the
// same process.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weft/hlo/instruction.h"

namespace weft::bench {

struct ExecutorOverheadResult {
  int64_t elements = 0;      // per add
  int64_t instructions = 0;  // executed per run
  double us_per_instruction = 0;
  double us_per_add_direct = 0;  // the same add as a C++ loop
};

// `weft bench executor --gemm`: one dot [M, K] x [K, N] through the
// executor in f32, in bf16 (bf16 operands and result: oneDNN's bf16 matmul
// where it has one), and in bf16 forced onto the widening path (a
// ScopedIsa without bf16 instructions: f32 copies, f32 matmul, rounding),
// timed in the same run as the median over `reps` runs of the dot alone
// (ExecutorOptions::profile).
struct GemmShape {
  int64_t m = 0, k = 0, n = 0;
};
struct ExecutorGemmResult {
  GemmShape shape;
  double f32_gflops = 0, bf16_gflops = 0, widened_gflops = 0;
  // The same product in f32 as a weight gradient, x^T dy: the lhs stored
  // [K, M] (the tokens outermost), which the executor runs on weft's own
  // register block (simd gemm_transposed_a) when N is a multiple of 16.
  double f32_transposed_lhs_gflops = 0;
  // Whether the bf16 run read its operands as bf16 (no unplanned scratch:
  // the widening path's f32 copies are not in the memory plan).
  bool bf16_native = false;
};
std::vector<ExecutorGemmResult> MeasureExecutorGemm(const std::vector<GemmShape>& shapes, int reps);
// The default shapes: a training step's projections, [4096, 512] x
// [512, 1536] and [4096, 1536] x [1536, 512].
std::vector<GemmShape> DefaultGemmShapes();
// Parses "MxKxN" (e.g. 4096x512x1536); throws weft::Error naming `text`.
GemmShape ParseGemmShape(const std::string& text);
int RunExecutorGemm(bool json, const std::vector<GemmShape>& shapes, int reps);

// Runs a chain of `chain_length` adds of f32[elements] for each size.
std::vector<ExecutorOverheadResult> MeasureExecutorOverhead(
    const std::vector<int64_t>& elements = {1, 16, 256}, int64_t chain_length = 2000);

// Prints a table, or JSON.
int RunExecutorOverhead(bool json);

// `weft bench executor --hlo FILE`: an HLO module compiled for one device
// (fused, as `weft bench train` runs its step), run with seeded random
// inputs (weft run's) once untimed and then `reps` times; prints the median
// run and the `top` instructions that took the most time (median seconds
// per run). For timing a kernel or a fusion in isolation, before and after
// a change, in the same run as nothing else.
int RunExecutorModule(bool json, const std::string& path, int reps, int top);

// An instruction's opcode as the --top lists print it: a fusion with its kind
// and the opcodes it fuses (each once, in post order), e.g.
// "fusion(kLoop: multiply,add)".
std::string OpcodeAndFusedOps(const HloInstruction& instr);

}  // namespace weft::bench
