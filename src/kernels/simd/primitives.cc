// The SIMD primitives, written once with GCC vector extensions and compiled
// per instruction set; WEFT_ISA_NAME (portable, avx2, avx512, avx512bf16)
// names the copy. Only the bfloat16 GEMM differs between avx512 and
// avx512bf16 (vdpbf16ps intrinsics below).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "weft/kernels/simd.h"  // kPadN, and the signatures in simd_dispatch.cc

#if defined(__AVX512BF16__)
#include <immintrin.h>
#endif

namespace weft::kernels::simd::WEFT_ISA_NAME {

// MR rows x kChunks chunks of kPadN columns per register block of the
// float32 GEMM. AVX-512: 8 rows x 2 chunks = 16 zmm accumulators; 1 chunk
// (8 accumulators) left FMA latency x 2 ports uncovered. Measured on Zen 5:
// 1.27x on 64..128 x 64..128 x 64..128 products (one core, ~96% of the FMA
// peak), float32 attention S 4096 D 128 causal 1.17x forward and 1.11x
// forward + backward (medians); 12 or 14 rows x 2 chunks were no faster.
#if defined(__AVX512F__)
constexpr int L = 16;  // lanes
constexpr int MR = 8;  // at most 8: RowsTail has cases 1 .. 7
constexpr int kChunks = 2;
#elif defined(__AVX2__)
constexpr int L = 8;
constexpr int MR = 6;  // 6 x 2 vectors = 12 of the 16 ymm registers
constexpr int kChunks = 1;
#else
constexpr int L = 4;
constexpr int MR = 4;
constexpr int kChunks = 1;
#endif
constexpr int NV = kPadN / L;  // vectors per kPadN columns

typedef float vf __attribute__((vector_size(L * 4)));
typedef int32_t vi __attribute__((vector_size(L * 4)));
// Unaligned, alias-safe access.
typedef float vfu __attribute__((vector_size(L * 4), aligned(4), may_alias));

static inline vf Load(const float* p) { return *reinterpret_cast<const vfu*>(p); }
static inline void Store(float* p, vf v) { *reinterpret_cast<vfu*>(p) = v; }
// x - (+0) is exactly x for every x, so this folds to a plain broadcast
// (x + 0 would not: -0 + 0 is +0).
static inline vf Splat(float x) { return x - vf{}; }

// One register block: C[R x (W * kPadN)] (+)= A[R x K] * B[K x (W * kPadN)],
// W chunks of B (chunk w at B + w * chunk_stride, rows ldb apart) sharing
// each broadcast of A. A is row-major with leading dim lda, or with kTA
// stored transposed ([K x R], element (r, k) at A[k * lda + r]: each k
// broadcasts R neighbours). (Packing A into [K][MR] panels was measured: no
// gain, the broadcasts already hit L1.)
template <int R, int W, bool kTA>
static inline void MicroKernel(int64_t K, const float* __restrict A, int64_t lda,
                               const float* __restrict B, int64_t ldb, int64_t chunk_stride,
                               float* __restrict C, int64_t ldc, bool accumulate) {
  constexpr int V = W * NV;  // vectors per row of the block
  vf c[R][V];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) c[r][v] = accumulate ? Load(C + r * ldc + v * L) : vf{};
  for (int64_t k = 0; k < K; ++k) {
    vf b[V];
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) b[v] = Load(B + (v / NV) * chunk_stride + k * ldb + (v % NV) * L);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      vf a = Splat(kTA ? A[k * lda + r] : A[r * lda + k]);
#pragma GCC unroll 8
      for (int v = 0; v < V; ++v) c[r][v] += a * b[v];
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) Store(C + r * ldc + v * L, c[r][v]);
}

template <int W, bool kTA>
static void RowsTail(int rows, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
                     int64_t cs, float* C, int64_t ldc, bool acc) {
  switch (rows) {
#define WEFT_CASE(n)                                                                  \
  case n:                                                                             \
    if constexpr (n < MR) MicroKernel<n, W, kTA>(K, A, lda, B, ldb, cs, C, ldc, acc); \
    break;
    WEFT_CASE(1) WEFT_CASE(2) WEFT_CASE(3) WEFT_CASE(4) WEFT_CASE(5) WEFT_CASE(6) WEFT_CASE(7)
#undef WEFT_CASE
  }
}

// Rows m0 of A (a row-major A's row m at A + m * lda, a transposed one's at
// A + m).
template <bool kTA>
static inline const float* RowsOf(const float* A, int64_t lda, int64_t m0) {
  return kTA ? A + m0 : A + m0 * lda;
}

template <int W, bool kTA>
static void Columns(int64_t M, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
                    int64_t cs, float* C, int64_t ldc, bool acc) {
  int64_t m0 = 0;
  for (; m0 + MR <= M; m0 += MR)
    MicroKernel<MR, W, kTA>(K, RowsOf<kTA>(A, lda, m0), lda, B, ldb, cs, C + m0 * ldc, ldc, acc);
  if (m0 < M)
    RowsTail<W, kTA>(static_cast<int>(M - m0), K, RowsOf<kTA>(A, lda, m0), lda, B, ldb, cs,
                     C + m0 * ldc, ldc, acc);
}

// Rows of B per pass: a pass reads M x kKc of A and kKc rows of each chunk
// of B, so for the weight-gradient shapes (K = tokens, 1024-8192) A's part
// stays in L2 across the column chunks. C is stored and reloaded between
// passes, so the sums are the same, in the same order, as in one pass.
constexpr int64_t kKc = 256;

// With kTA, each pass first copies the W chunks of B a register block reads
// into one contiguous [W][kc][kPadN] panel (32 KiB), unless B's chunks are
// contiguous already (ldb == kPadN): rows of a row-major B
// N floats apart fall into a few L1 sets (N = 1536: rows 6 KiB apart, two
// sets of 64), so the block's B rows left L1 between its k steps (small's
// [512,4096] x [4096,1536] weight gradient ran at 0.8x oneDNN). The panel is
// per thread; a GEMM never yields its thread midway.
template <int W, bool kTA>
static void Panel(int64_t M, int64_t kc, const float* a, int64_t lda, const float* b, int64_t ldb,
                  int64_t cs, float* C, int64_t ldc, bool acc) {
  if constexpr (kTA) {
    if (ldb == kPadN) {  // already a panel (the attention's chunked operands)
      Columns<W, kTA>(M, kc, a, lda, b, ldb, cs, C, ldc, acc);
      return;
    }
    alignas(64) static thread_local float panel[kChunks * kKc * kPadN];
    for (int w = 0; w < W; ++w)
      for (int64_t k = 0; k < kc; ++k)
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v)
          Store(panel + (w * kc + k) * kPadN + v * L, Load(b + w * cs + k * ldb + v * L));
    Columns<W, kTA>(M, kc, a, lda, panel, kPadN, kc * kPadN, C, ldc, acc);
  } else {
    Columns<W, kTA>(M, kc, a, lda, b, ldb, cs, C, ldc, acc);
  }
}

template <bool kTA>
static void GemmOf(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                   int64_t ldb, int64_t b_chunk_stride, float* C, int64_t ldc, bool accumulate) {
  for (int64_t k0 = 0; k0 < K || k0 == 0; k0 += kKc) {
    const int64_t kc = std::min(kKc, K - k0);
    const float* a = kTA ? A + k0 * lda : A + k0;
    const float* b = B + k0 * ldb;
    const bool acc = accumulate || k0 > 0;
    int64_t n0 = 0;
    if constexpr (kChunks > 1) {
      for (; n0 + kChunks * kPadN <= N; n0 += kChunks * kPadN)
        Panel<kChunks, kTA>(M, kc, a, lda, b + (n0 / kPadN) * b_chunk_stride, ldb, b_chunk_stride,
                            C + n0, ldc, acc);
    }
    for (; n0 < N; n0 += kPadN)
      Panel<1, kTA>(M, kc, a, lda, b + (n0 / kPadN) * b_chunk_stride, ldb, b_chunk_stride, C + n0,
                    ldc, acc);
  }
}

void Gemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
          int64_t b_chunk_stride, float* C, int64_t ldc, bool accumulate) {
  GemmOf<false>(M, N, K, A, lda, B, ldb, b_chunk_stride, C, ldc, accumulate);
}

void GemmTransposedA(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                     int64_t ldb, int64_t b_chunk_stride, float* C, int64_t ldc, bool accumulate) {
  GemmOf<true>(M, N, K, A, lda, B, ldb, b_chunk_stride, C, ldc, accumulate);
}

// ---- bfloat16 GEMM (see Primitives::gemm_bf16 for the B layout) ----

static inline float Bf16Value(uint16_t bits) {
  uint32_t u = static_cast<uint32_t>(bits) << 16;
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// The pair A[k], A[k + 1] as one 32-bit word (k in the low half, as the
// packed B has it); the second is taken as +0 when k + 1 == K, so padding
// past the end of a row is never read.
static inline uint32_t PairBits(const uint16_t* a, int64_t k, int64_t K) {
  if (k + 1 < K) {
    uint32_t w;
    std::memcpy(&w, a + k, sizeof w);
    return w;
  }
  return a[k];
}

#if defined(__AVX512BF16__)

// C[R x (W*16)] (+)= A[R x K] * B, one vdpbf16ps per (row, chunk, k pair):
// 16 columns x 2 products each. W chunks share each broadcast of A.
template <int R, int W>
static inline void Bf16MicroKernel(int64_t K, const uint16_t* __restrict A, int64_t lda,
                                   const uint16_t* __restrict B, int64_t chunk_stride,
                                   float* __restrict C, int64_t ldc, bool accumulate) {
  __m512 c[R][W];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int w = 0; w < W; ++w)
      c[r][w] = accumulate ? _mm512_loadu_ps(C + r * ldc + w * 16) : _mm512_setzero_ps();
  for (int64_t k = 0; k < K; k += 2) {
    const uint16_t* b_row = B + (k / 2) * kPairRow;
    __m512bh b[W];
#pragma GCC unroll 4
    for (int w = 0; w < W; ++w)
      b[w] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(b_row + w * chunk_stride));
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512bh a = reinterpret_cast<__m512bh>(
          _mm512_set1_epi32(static_cast<int>(PairBits(A + r * lda, k, K))));
#pragma GCC unroll 4
      for (int w = 0; w < W; ++w) c[r][w] = _mm512_dpbf16_ps(c[r][w], a, b[w]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int w = 0; w < W; ++w) _mm512_storeu_ps(C + r * ldc + w * 16, c[r][w]);
}

// 8 rows x 2 chunks: 16 accumulators cover vdpbf16ps latency x throughput.
constexpr int kBf16Rows = 8;
constexpr int kBf16Chunks = 2;

#else

// Without a bf16 dot instruction: each pair row is widened to float32 with
// shifts (bf16 -> f32 is exact) and multiplied with FMAs; the products of two
// bf16 values are exact in float32, so only the accumulation rounds.
template <int R, int W>
static inline void Bf16MicroKernel(int64_t K, const uint16_t* __restrict A, int64_t lda,
                                   const uint16_t* __restrict B, int64_t chunk_stride,
                                   float* __restrict C, int64_t ldc, bool accumulate) {
  typedef uint32_t vu32u __attribute__((vector_size(L * 4), aligned(4), may_alias));
  typedef uint32_t vu32 __attribute__((vector_size(L * 4)));
  constexpr int V = W * NV;  // vectors per row of the block
  vf c[R][V];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) c[r][v] = accumulate ? Load(C + r * ldc + v * L) : vf{};
  for (int64_t k = 0; k < K; k += 2) {
    vf even[V], odd[V];
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) {
      // L columns of one chunk: L 32-bit words, each a (k, k + 1) pair.
      const uint16_t* p = B + (v / NV) * chunk_stride + (k / 2) * kPairRow + (v % NV) * L * 2;
      vu32 u = *reinterpret_cast<const vu32u*>(p);
      even[v] = reinterpret_cast<vf>(u << 16);
      odd[v] = reinterpret_cast<vf>(u & 0xffff0000u);
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const uint32_t pair = PairBits(A + r * lda, k, K);
      const vf a0 = Splat(Bf16Value(static_cast<uint16_t>(pair)));
      const vf a1 = Splat(Bf16Value(static_cast<uint16_t>(pair >> 16)));
#pragma GCC unroll 8
      for (int v = 0; v < V; ++v) c[r][v] += a0 * even[v] + a1 * odd[v];
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) Store(C + r * ldc + v * L, c[r][v]);
}

// AVX-512 shares each widened pair row across 2 chunks (measured 1.6x over 1
// on 64 x 64 x 128 tiles); AVX2 has too few registers for that.
constexpr int kBf16Rows = MR;
constexpr int kBf16Chunks = L == 16 ? 2 : 1;

#endif

template <int W>
static void Bf16RowsTail(int rows, int64_t K, const uint16_t* A, int64_t lda, const uint16_t* B,
                         int64_t cs, float* C, int64_t ldc, bool acc) {
  switch (rows) {
#define WEFT_CASE(n)                                                                   \
  case n:                                                                              \
    if constexpr (n < kBf16Rows) Bf16MicroKernel<n, W>(K, A, lda, B, cs, C, ldc, acc); \
    break;
    // clang-format off
    WEFT_CASE(1) WEFT_CASE(2) WEFT_CASE(3) WEFT_CASE(4) WEFT_CASE(5) WEFT_CASE(6)
    WEFT_CASE(7) WEFT_CASE(8) WEFT_CASE(9) WEFT_CASE(10) WEFT_CASE(11)
    // clang-format on
#undef WEFT_CASE
  }
}

template <int W>
static void Bf16Columns(int64_t M, int64_t K, const uint16_t* A, int64_t lda, const uint16_t* B,
                        int64_t cs, float* C, int64_t ldc, bool acc) {
  int64_t m0 = 0;
  for (; m0 + kBf16Rows <= M; m0 += kBf16Rows)
    Bf16MicroKernel<kBf16Rows, W>(K, A + m0 * lda, lda, B, cs, C + m0 * ldc, ldc, acc);
  if (m0 < M)
    Bf16RowsTail<W>(static_cast<int>(M - m0), K, A + m0 * lda, lda, B, cs, C + m0 * ldc, ldc, acc);
}

void GemmBf16(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, const uint16_t* B,
              int64_t b_chunk_stride, float* C, int64_t ldc, bool accumulate) {
  int64_t n0 = 0;
  if constexpr (kBf16Chunks > 1) {
    for (; n0 + kBf16Chunks * kPadN <= N; n0 += kBf16Chunks * kPadN)
      Bf16Columns<kBf16Chunks>(M, K, A, lda, B + (n0 / kPadN) * b_chunk_stride, b_chunk_stride,
                               C + n0, ldc, accumulate);
  }
  for (; n0 < N; n0 += kPadN)
    Bf16Columns<1>(M, K, A, lda, B + (n0 / kPadN) * b_chunk_stride, b_chunk_stride, C + n0, ldc,
                   accumulate);
}

#if defined(__AVX512BF16__)
int64_t Bf16DotPeakLoop(int64_t iterations, float* sink) {
  // Independent accumulators to cover vdpbf16ps latency x ports (12 left
  // the measured peak below what the GEMM micro-kernel reaches on Zen 5).
  constexpr int kAcc = 16;
  __m512 acc[kAcc];
  for (int i = 0; i < kAcc; ++i) acc[i] = _mm512_set1_ps(0.001f * i);
  // bf16 1/64 and 1/128: every step adds 2^-12 per lane, far from overflow.
  const __m512bh a = reinterpret_cast<__m512bh>(_mm512_set1_epi16(0x3c80));
  const __m512bh b = reinterpret_cast<__m512bh>(_mm512_set1_epi16(0x3c00));
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < kAcc; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  }
  float lanes[16] = {};
  for (int i = 0; i < kAcc; ++i)
    _mm512_storeu_ps(lanes, _mm512_add_ps(_mm512_loadu_ps(lanes), acc[i]));
  float total = 0;
  for (float x : lanes) total += x;
  *sink = total;
  return iterations * kAcc * 16 * 2 * 2;  // 16 lanes, 2 products, multiply + add
}
extern int64_t (*const kBf16DotPeakLoop)(int64_t, float*) = &Bf16DotPeakLoop;
#else
extern int64_t (*const kBf16DotPeakLoop)(int64_t, float*) = nullptr;
#endif

// exp(x) for a vector: range reduction x = n ln2 + r, |r| <= ln2/2, a degree-6
// polynomial for e^r (relative error ~1e-7), and 2^n built in the exponent bits.
static inline vf VecExp(vf x) {
  const vf hi = Splat(88.3762626647949f), lo = Splat(-87.3365447505531f);
  vi underflow = x < lo;
  x = x > hi ? hi : x;
  x = x < lo ? lo : x;
  const vf magic = Splat(12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer
  vf t = x * Splat(1.44269504088896341f) + magic;
  vi n = reinterpret_cast<vi>(t) - reinterpret_cast<vi>(magic);
  vf fn = t - magic;
  vf r = x - fn * Splat(0.693359375f);
  r = r - fn * Splat(-2.12194440e-4f);
  vf p = Splat(1.9875691500e-4f);
  p = p * r + Splat(1.3981999507e-3f);
  p = p * r + Splat(8.3334519073e-3f);
  p = p * r + Splat(4.1665795894e-2f);
  p = p * r + Splat(1.6666665459e-1f);
  p = p * r + Splat(5.0000001201e-1f);
  p = p * (r * r) + r + Splat(1.0f);
  vi bits = (n + 127) << 23;
  vf result = p * reinterpret_cast<vf>(bits);
  return underflow ? vf{} : result;
}

static float HorizontalSum(vf v) {
  float s = 0;
  for (int i = 0; i < L; ++i) s += v[i];
  return s;
}

// NaN anywhere gives NaN (a broken score mod must not look like a masked row).
float RowMax(const float* x, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
  bool nan = false;
  int64_t i = 0;
  if (n >= L) {
    vf vm = Load(x);
    vi any_nan = vm != vm;
    for (i = L; i + L <= n; i += L) {
      vf v = Load(x + i);
      vm = v > vm ? v : vm;
      any_nan |= v != v;
    }
    for (int j = 0; j < L; ++j) {
      m = vm[j] > m ? vm[j] : m;
      nan |= any_nan[j] != 0;
    }
  }
  for (; i < n; ++i) {
    m = x[i] > m ? x[i] : m;
    nan |= x[i] != x[i];
  }
  return nan ? std::numeric_limits<float>::quiet_NaN() : m;
}

float ExpShiftSum(float* x, int64_t n, float shift) {
  vf acc{};
  vf s = Splat(shift);
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    vf e = VecExp(Load(x + i) - s);
    Store(x + i, e);
    acc += e;
  }
  float sum = HorizontalSum(acc);
  if (i < n) {
    float tail[L];
    for (int j = 0; j < L; ++j) tail[j] = i + j < n ? x[i + j] - shift : -INFINITY;
    vf e = VecExp(Load(tail));
    for (int j = 0; i + j < n; ++j) {
      x[i + j] = e[j];
      sum += e[j];
    }
  }
  return sum;
}

void Scale(float* x, int64_t n, float s) {
  int64_t i = 0;
  for (; i + L <= n; i += L) Store(x + i, Load(x + i) * s);
  for (; i < n; ++i) x[i] *= s;
}

float Dot(const float* x, const float* y, int64_t n) {
  vf acc{};
  int64_t i = 0;
  for (; i + L <= n; i += L) acc += Load(x + i) * Load(y + i);
  float sum = HorizontalSum(acc);
  for (; i < n; ++i) sum += x[i] * y[i];
  return sum;
}

void SoftmaxGrad(const float* p, const float* dp, float delta, float s, float* ds, int64_t n) {
  int64_t i = 0;
  for (; i + L <= n; i += L) Store(ds + i, Load(p + i) * (Load(dp + i) - delta) * s);
  for (; i < n; ++i) ds[i] = p[i] * (dp[i] - delta) * s;
}

typedef uint32_t vu __attribute__((vector_size(L * 4)));
typedef uint16_t vh __attribute__((vector_size(L * 2)));
typedef uint16_t vhu __attribute__((vector_size(L * 2), aligned(2), may_alias));

static inline uint16_t Bf16Bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// Integer shifts only, so every ISA copy (AVX2 has no bf16 instructions)
// converts a vector at a time.
void Bf16ToF32(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    vh h = *reinterpret_cast<const vhu*>(src + i);
    vu u = __builtin_convertvector(h, vu) << 16;
    Store(dst + i, reinterpret_cast<vf>(u));
  }
  for (; i < n; ++i) {
    uint32_t u = static_cast<uint32_t>(src[i]) << 16;
    std::memcpy(dst + i, &u, sizeof u);
  }
}

void F32ToBf16(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    vu u = reinterpret_cast<vu>(Load(src + i));
    vu nan = reinterpret_cast<vu>((u & 0x7fffffffu) > 0x7f800000u);  // all ones where NaN
    vu rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    vu quiet = (u >> 16) | 0x0040u;
    vu r = (nan & quiet) | (~nan & rounded);
    *reinterpret_cast<vhu*>(dst + i) = __builtin_convertvector(r, vh);
  }
  for (; i < n; ++i) dst[i] = Bf16Bits(src[i]);
}

// F32ToBf16's rounding of each lane, as the high half of the lane (low half
// zero): a row pair then packs into one word per column with a shift and an or.
static inline vu Bf16High(vu u) {
  vu nan = reinterpret_cast<vu>((u & 0x7fffffffu) > 0x7f800000u);
  vu rounded = u + 0x7fffu + ((u >> 16) & 1u);
  vu quiet = u | 0x00400000u;  // (u >> 16) | 0x0040, in the high half
  return ((nan & quiet) | (~nan & rounded)) & 0xffff0000u;
}

// {a0, b0, a1, b1, ..}: the first (low) or second (high) halves of a and b.
template <size_t... I>
static inline vu InterleaveLow(vu a, vu b, std::index_sequence<I...>) {
  return __builtin_shufflevector(a, b, (I % 2) * L + I / 2 ...);
}
template <size_t... I>
static inline vu InterleaveHigh(vu a, vu b, std::index_sequence<I...>) {
  return __builtin_shufflevector(a, b, (I % 2) * L + L / 2 + I / 2 ...);
}

// Lanes kFirst .. kFirst + L / 2 of v, stored at dst (L bf16 values).
template <size_t kFirst, size_t... I>
static inline void StoreHalf(uint16_t* dst, vu v, std::index_sequence<I...>) {
  typedef uint32_t half __attribute__((vector_size(L * 2), aligned(2), may_alias));
  *reinterpret_cast<half*>(dst) = __builtin_shufflevector(v, v, (kFirst + I)...);
}

// One L x L block, kept in registers: rows 2i and 2i + 1 are rounded into
// one vector of (row 2i, row 2i + 1) 32-bit words, one per column, so the
// transpose moves 32-bit words (L / 2 vectors, log2(L / 2) rounds of
// interleaves) instead of 16-bit ones. Each round moves one bit of the
// column index from the lane into the vector index and one bit of the pair
// index into the lane: at the end vector k holds columns 2k and 2k + 1,
// each as L / 2 words = L consecutive rows, i.e. one contiguous piece of a
// dst row. Not inlined: inlined into F32ToBf16Transposed's loops it ran
// 1.5x slower (measured on 64 x 64 tiles, avx512bf16).
__attribute__((noinline)) static void Bf16TransposedBlock(const float* src, int64_t ld_src,
                                                          uint16_t* dst, int64_t ld_dst) {
  constexpr int P = L / 2;  // row pairs
  vu v[P];
#pragma GCC unroll 8
  for (int i = 0; i < P; ++i) {
    vu even = Bf16High(reinterpret_cast<vu>(Load(src + (2 * i) * ld_src)));
    vu odd = Bf16High(reinterpret_cast<vu>(Load(src + (2 * i + 1) * ld_src)));
    v[i] = (even >> 16) | odd;
  }
#pragma GCC unroll 3
  for (int round = 1; round < P; round *= 2) {
    vu t[P];
#pragma GCC unroll 4
    for (int i = 0; i < P / 2; ++i) {
      t[2 * i] = InterleaveLow(v[i], v[i + P / 2], std::make_index_sequence<L>{});
      t[2 * i + 1] = InterleaveHigh(v[i], v[i + P / 2], std::make_index_sequence<L>{});
    }
#pragma GCC unroll 8
    for (int i = 0; i < P; ++i) v[i] = t[i];
  }
#pragma GCC unroll 8
  for (int k = 0; k < P; ++k) {
    StoreHalf<0>(dst + (2 * k) * ld_dst, v[k], std::make_index_sequence<P>{});
    StoreHalf<P>(dst + (2 * k + 1) * ld_dst, v[k], std::make_index_sequence<P>{});
  }
}

void F32ToBf16Transposed(const float* src, int64_t rows, int64_t cols, int64_t ld_src,
                         uint16_t* dst, int64_t ld_dst) {
  const int64_t full_rows = rows / L * L, full_cols = cols / L * L;
  for (int64_t r = 0; r < full_rows; r += L)
    for (int64_t c = 0; c < full_cols; c += L)
      Bf16TransposedBlock(src + r * ld_src + c, ld_src, dst + c * ld_dst + r, ld_dst);
  // Edges (the last tile of a sequence), one element at a time.
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = r < full_rows ? full_cols : 0; c < cols; ++c)
      dst[c * ld_dst + r] = Bf16Bits(src[r * ld_src + c]);
}

int64_t FmaPeakLoop(int64_t iterations, float* sink) {
  // Enough independent accumulators to cover FMA latency x ports.
  constexpr int kAcc = L == 4 ? 8 : 12;
  vf acc[kAcc];
  for (int i = 0; i < kAcc; ++i) acc[i] = Splat(0.001f * i);
  const vf a = Splat(0.999999f), b = Splat(1e-7f);
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < kAcc; ++i) acc[i] = acc[i] * a + b;
  }
  vf total{};
  for (int i = 0; i < kAcc; ++i) total += acc[i];
  *sink = HorizontalSum(total);
  return iterations * kAcc * L * 2;
}

// What simd_dispatch.cc needs to describe this copy. The Primitives table is
// built there, in baseline code: filling it here could use instructions of
// this copy's ISA before the CPU was checked.
extern const int kLanes = L;
extern const int kRows = MR;

}  // namespace weft::kernels::simd::WEFT_ISA_NAME
