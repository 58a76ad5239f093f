// SIMD primitives the attention kernels are built from, compiled once per
// instruction set (src/kernels/simd/primitives.cc with different -m flags)
// and chosen at run time (src/kernels/simd_dispatch.cc). Public for the
// choice of instruction set (ScopedIsa, Bf16InstructionsAllowed, which the
// executor follows) and for the tests and benchmarks that run every path.
#pragma once

#include <cstdint>
#include <string>

namespace weft::kernels::simd {

// Column counts passed to Gemm must be multiples of this (buffers are padded
// with zeros up to it). 16 floats is one AVX-512 vector, two AVX2 vectors.
inline constexpr int64_t kPadN = 16;

inline int64_t PadN(int64_t n) { return (n + kPadN - 1) / kPadN * kPadN; }

struct Primitives {
  const char* isa = "";  // "amx", "avx512bf16", "avx512", "avx2", "portable" (or "amx-emulated")
  int lanes = 0;         // floats per vector register
  int rows = 0;          // rows per register block of the GEMM micro-kernel

  // C[M x N] = (accumulate ? C : 0) + A[M x K] * B[K x N]. A and C are
  // row-major (leading dims lda, ldc). B is read in chunks of kPadN columns:
  // element (k, n) is at B[(n / kPadN) * b_chunk_stride + k * ldb + n % kPadN],
  // so a row-major B has b_chunk_stride = kPadN, and a "chunked" B (each
  // chunk [K][kPadN] contiguous, as the kernels pack it) has ldb = kPadN.
  // N must be a multiple of kPadN.
  void (*gemm)(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
               int64_t ldb, int64_t b_chunk_stride, float* C, int64_t ldc,
               bool accumulate) = nullptr;

  // The same with A stored transposed: element (m, k) of A at A[k * lda + m]
  // (a [K x M] row-major matrix, as a weight gradient's activations are).
  void (*gemm_transposed_a)(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                            const float* B, int64_t ldb, int64_t b_chunk_stride, float* C,
                            int64_t ldc, bool accumulate) = nullptr;

  // C[M x N] = (accumulate ? C : 0) + A[M x K] * B[K x N] for bfloat16 A and
  // B (bits), float32 C. A is row-major (lda). B is "pair-packed": chunk c
  // (columns c*kPadN ..) starts at B + c * b_chunk_stride and holds ceil(K/2)
  // pair rows of kPadN (k, k+1) pairs, element (k, n) at
  // [(k / 2) * 2 * kPadN + (n % kPadN) * 2 + k % 2], zero where k >= K: the
  // layout vdpbf16ps reads. Products of bf16 values are exact in float32 and
  // accumulate in float32; avx512bf16 uses vdpbf16ps (which treats bf16
  // subnormals as zero), the other copies widen to float32 and use FMAs. N
  // must be a multiple of kPadN; any K >= 0.
  void (*gemm_bf16)(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda,
                    const uint16_t* B, int64_t b_chunk_stride, float* C, int64_t ldc,
                    bool accumulate) = nullptr;

  // max(x[0..n)); -inf when n == 0.
  float (*row_max)(const float* x, int64_t n) = nullptr;

  // x[i] = exp(x[i] - shift) for i < n (exp(-inf) is exactly 0); returns the sum.
  float (*exp_shift_sum)(float* x, int64_t n, float shift) = nullptr;

  // x[i] *= s for i < n.
  void (*scale)(float* x, int64_t n, float s) = nullptr;

  // sum_i x[i] * y[i].
  float (*dot)(const float* x, const float* y, int64_t n) = nullptr;

  // ds[i] = p[i] * (dp[i] - delta) * s for i < n (the softmax backward).
  void (*softmax_grad)(const float* p, const float* dp, float delta, float s, float* ds,
                       int64_t n) = nullptr;

  // dst[i] = float(src[i]) for bfloat16 bits src (exact).
  void (*bf16_to_f32)(const uint16_t* src, float* dst, int64_t n) = nullptr;

  // dst[i] = bfloat16 bits of src[i], round to nearest even, NaN kept NaN
  // (the same bits as weft::bf16's scalar conversion).
  void (*f32_to_bf16)(const float* src, uint16_t* dst, int64_t n) = nullptr;

  // dst[c * ld_dst + r] = bfloat16 bits of src[r * ld_src + c] for r < rows,
  // c < cols, rounded as f32_to_bf16; nothing else in dst is written. The
  // backward's P^T and dS^T GEMM operands in one pass: rounding rows and then
  // transposing 16-bit elements one by one took ~8% of bf16 forward +
  // backward time (S 4096, D 128, causal, avx512bf16).
  void (*f32_to_bf16_transposed)(const float* src, int64_t rows, int64_t cols, int64_t ld_src,
                                 uint16_t* dst, int64_t ld_dst) = nullptr;

  // Runs `iterations` rounds of independent multiply-adds that stay in
  // registers (the machine's float32 FMA peak); returns the flops done.
  // sink receives a value so the work cannot be optimized away.
  int64_t (*fma_peak_loop)(int64_t iterations, float* sink) = nullptr;

  // The same for the bf16 dot-product instruction (vdpbf16ps on avx512bf16,
  // TDPBF16PS tiles on amx: 2 flops per bf16 pair); null when this
  // instruction set has none.
  int64_t (*bf16_dot_peak_loop)(int64_t iterations, float* sink) = nullptr;

  // The AMX tiles of this thread (amx and its model only; null elsewhere):
  // TILERELEASE (ReleaseAmxTiles), and the start and end of a scope whose
  // gemm_bf16 calls share one tile configuration (AmxTileScope).
  void (*release_tiles)() = nullptr;
  void (*begin_tile_scope)() = nullptr;
  void (*end_tile_scope)() = nullptr;
};

// Elements per pair row of one chunk of a pair-packed B (see gemm_bf16).
inline constexpr int64_t kPairRow = 2 * kPadN;

// Elements of one chunk of a pair-packed B with k_rows rows.
inline int64_t PairChunkSize(int64_t k_rows) { return (k_rows + 1) / 2 * kPairRow; }

// The primitives for float32 kernels on this machine: the widest instruction
// set the CPU and OS support apart from amx and avx512bf16 (whose float32
// code is avx512's), or the one WEFT_ISA names (amx, avx512bf16, avx512,
// avx2, portable). Chosen once. A name this machine cannot run is an error
// that says why (for amx: the CPU, the OS, or Linux's tile permission).
const Primitives& GetPrimitives();

// The same for bfloat16 kernels: amx where the CPU, the OS and Linux allow
// it (the first call asks Linux for the tile permission), else avx512bf16
// when the CPU has it, else as GetPrimitives(). WEFT_ISA and ScopedIsa force
// both.
const Primitives& GetBf16Primitives();

// False while WEFT_ISA or a ScopedIsa forces an instruction set without
// bf16 dot instructions (portable, avx2, avx512, or the AMX model, whose
// float32 code is portable's); true otherwise. Code outside these kernels
// with a bf16 path of its own (the executor's oneDNN bf16 GEMM,
// runtime/eval_dot.cc) takes its widening path when false, so the one
// switch forces every bf16 path in the process to widen.
bool Bf16InstructionsAllowed();

// amx's bf16 GEMM on the software model of the tile instructions, with the
// portable float32 code: runs on every machine, so tests cover the AMX
// blocking where there is no AMX. Not selectable by name; tests force it
// with ScopedIsa(EmulatedAmxPrimitives()).
const Primitives& EmulatedAmxPrimitives();

// While alive, kernels started from this thread use `isa` (tests and
// benchmarks run every path this way). Nest-safe: restores the previous
// choice. Throws weft::Error when this CPU lacks `isa`.
class ScopedIsa {
 public:
  explicit ScopedIsa(const char* isa);
  // Forces these primitives (tests: EmulatedAmxPrimitives()).
  explicit ScopedIsa(const Primitives& primitives);
  ~ScopedIsa();
  ScopedIsa(const ScopedIsa&) = delete;
  ScopedIsa& operator=(const ScopedIsa&) = delete;

 private:
  const Primitives* previous_;
};

// The primitives for one instruction set, or null when this CPU lacks it or
// the name is unknown. For tests and benchmarks that run every path.
const Primitives* PrimitivesFor(const char* isa);

// Why amx is not among them: the CPU, the OS, Linux's tile permission, the
// palette, or the start-up comparison with the model; empty when it is.
const std::string& AmxUnavailableReason();

// Releases this thread's AMX tiles (TILERELEASE) where the bf16 primitives
// in force are amx or its model; nothing otherwise. It is what another
// library's AMX kernel (oneDNN's) does when it finishes: weft's AMX GEMM
// configures the tiles on every call and releases them when it returns, so
// it runs correctly after any other tile user on the same thread.
void ReleaseAmxTiles();

// While alive, the AMX GEMM calls of `primitives` on this thread share one
// tile configuration: the first call loads it and the scope's end releases
// the tiles, instead of every call doing both (5-10% of bf16 attention on a
// Xeon with AMX). Between those, no other library's AMX code (oneDNN's) may
// run on the thread: scope a kernel's own loop, never code that calls out.
// Nests; does nothing for primitives other than amx and its model.
class AmxTileScope {
 public:
  explicit AmxTileScope(const Primitives& primitives);
  ~AmxTileScope();
  AmxTileScope(const AmxTileScope&) = delete;
  AmxTileScope& operator=(const AmxTileScope&) = delete;

 private:
  void (*end_)() = nullptr;
};

// Instruction sets this machine can run, widest first.
const char* const* AvailableIsas(int* count);

}  // namespace weft::kernels::simd
