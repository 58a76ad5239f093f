// The bfloat16 GEMM on AMX tiles (Primitives::gemm_bf16's contract), written
// once over a tile backend and compiled twice (see CMakeLists.txt):
//   WEFT_AMX_NAME=amx           the real tile instructions (inline assembly);
//   WEFT_AMX_NAME=amx_emulated  a software model of the same instructions:
//                               tile registers in memory, the hardware's
//                               shape checks, its arithmetic (bf16 inputs
//                               with subnormals as zero, float32 sums).
// The emulated copy lets machines without AMX test the blocking, the tails
// and the operand layouts that the real copy runs; only the five
// instructions differ between the two.
//
// Blocking: all 8 tile registers are configured as 16 rows x 64 bytes.
// Tiles 0..3 hold a 32 x 32 float32 block of C (2 x 2 tiles), 4..5 two
// 16-row blocks of A (16 rows x 32 bf16), 6..7 two 16-column chunks of B in
// the pair-packed layout (16 pair rows x 16 columns x 2: exactly the tile
// layout TDPBF16PS reads, so B panels need no repacking). A k step of 32 is
// four TDPBF16PS. Tails (fewer than 16 rows, K not a multiple of 32) go
// through zero-padded scratch, so no load reads past an operand.
#include <cstdint>
#include <cstring>
#include <vector>

#include "weft/base/error.h"
#include "weft/kernels/simd.h"

namespace weft::kernels::simd::WEFT_AMX_NAME {
namespace {

// ldtilecfg's 64-byte operand (palette 1).
struct alignas(64) TileConfig {
  uint8_t palette_id;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};
static_assert(sizeof(TileConfig) == 64);

constexpr int kTileRows = 16;
constexpr int kRowBytes = 64;  // 32 bf16 or 16 float32
constexpr int kKStep = 32;     // bf16 k values per A tile row
constexpr int kTiles = 8;

constexpr TileConfig MakeConfig() {
  TileConfig c{};
  c.palette_id = 1;
  for (int t = 0; t < kTiles; ++t) {
    c.colsb[t] = kRowBytes;
    c.rows[t] = kTileRows;
  }
  return c;
}
alignas(64) constexpr TileConfig kConfig = MakeConfig();

#if !defined(WEFT_AMX_EMULATED)

// The instructions. Written as assembly (not GCC 12's intrinsics, whose
// tileloadd has no memory clobber: the compiler could move a scratch store
// past the load that reads it). The tile number must be a literal.
struct Tiles {
  static void Configure() { __asm__ volatile("ldtilecfg %0" ::"m"(kConfig)); }
  static void Release() { __asm__ volatile("tilerelease" ::: "memory"); }
  template <int T>
  static void Load(const void* p, int64_t stride);
  template <int T>
  static void Zero();
  template <int T>
  static void Store(void* p, int64_t stride);
  template <int C, int A, int B>
  static void Dot();
};

#define WEFT_TILE_OPS(n)                                                                    \
  template <>                                                                               \
  inline void Tiles::Load<n>(const void* p, int64_t stride) {                               \
    __asm__ volatile("tileloadd (%0,%1,1), %%tmm" #n ::"r"(p), "r"(stride) : "memory");     \
  }                                                                                         \
  template <>                                                                               \
  inline void Tiles::Zero<n>() {                                                            \
    __asm__ volatile("tilezero %%tmm" #n ::);                                               \
  }                                                                                         \
  template <>                                                                               \
  inline void Tiles::Store<n>(void* p, int64_t stride) {                                    \
    __asm__ volatile("tilestored %%tmm" #n ", (%0,%1,1)" ::"r"(p), "r"(stride) : "memory"); \
  }
WEFT_TILE_OPS(0)
WEFT_TILE_OPS(1)
WEFT_TILE_OPS(2)
WEFT_TILE_OPS(3)
WEFT_TILE_OPS(4)
WEFT_TILE_OPS(5)
WEFT_TILE_OPS(6)
WEFT_TILE_OPS(7)
#undef WEFT_TILE_OPS

// C += A * B (AT&T operand order: B, A, C).
#define WEFT_TILE_DOT(c, a, b)                                           \
  template <>                                                            \
  inline void Tiles::Dot<c, a, b>() {                                    \
    __asm__ volatile("tdpbf16ps %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::); \
  }
WEFT_TILE_DOT(0, 4, 6)
WEFT_TILE_DOT(1, 4, 7)
WEFT_TILE_DOT(2, 5, 6)
WEFT_TILE_DOT(3, 5, 7)
#undef WEFT_TILE_DOT

#else  // WEFT_AMX_EMULATED

// The instructions modelled on the Intel SDM's pseudo-code: a load fills the
// configured rows and bytes and zeroes the rest; TDPBF16PS faults (#UD) unless
// A.rows == C.rows, B.colsb == C.colsb and A.colsb == 4 * B.rows, and sums,
// for each C element, the products of bf16 pairs (inputs with subnormals read
// as zero) in float32, k pair by k pair.
struct Tiles {
  struct State {
    bool configured = false;
    TileConfig config{};
    alignas(64) uint8_t reg[kTiles][kTileRows * kRowBytes];
  };
  static State& S() {
    thread_local State s;
    return s;
  }
  static void Check(bool ok, const char* what) {
    if (!ok) Fail("emulated AMX: {} (the real instruction would fault with #UD)", what);
  }
  static void Configure() {
    S().config = kConfig;
    S().configured = true;
  }
  // TILERELEASE: the tiles return to their initial state (unconfigured, and
  // zero), where every tile instruction but ldtilecfg faults.
  static void Release() {
    State& s = S();
    s.configured = false;
    s.config = TileConfig{};
    std::memset(s.reg, 0, sizeof s.reg);
  }
  template <int T>
  static void Load(const void* p, int64_t stride) {
    State& s = S();
    Check(s.configured, "tileloadd before ldtilecfg");
    std::memset(s.reg[T], 0, sizeof s.reg[T]);
    for (int r = 0; r < s.config.rows[T]; ++r)
      std::memcpy(s.reg[T] + r * kRowBytes, static_cast<const uint8_t*>(p) + r * stride,
                  s.config.colsb[T]);
  }
  template <int T>
  static void Zero() {
    Check(S().configured, "tilezero before ldtilecfg");
    std::memset(S().reg[T], 0, sizeof S().reg[T]);
  }
  template <int T>
  static void Store(void* p, int64_t stride) {
    State& s = S();
    Check(s.configured, "tilestored before ldtilecfg");
    for (int r = 0; r < s.config.rows[T]; ++r)
      std::memcpy(static_cast<uint8_t*>(p) + r * stride, s.reg[T] + r * kRowBytes,
                  s.config.colsb[T]);
  }
  static float Bf16(const uint8_t* p) {
    uint16_t bits;
    std::memcpy(&bits, p, 2);
    if ((bits & 0x7f80) == 0) bits &= 0x8000;  // subnormal -> signed zero
    const uint32_t u = static_cast<uint32_t>(bits) << 16;
    float x;
    std::memcpy(&x, &u, 4);
    return x;
  }
  template <int C, int A, int B>
  static void Dot() {
    State& s = S();
    const TileConfig& g = s.config;
    Check(s.configured, "tdpbf16ps before ldtilecfg");
    Check(g.rows[A] == g.rows[C], "tdpbf16ps: A's rows differ from C's");
    Check(g.colsb[B] == g.colsb[C], "tdpbf16ps: B's row bytes differ from C's");
    Check(g.colsb[A] == 4 * g.rows[B], "tdpbf16ps: A's row bytes are not 4 x B's rows");
    const int n_cols = g.colsb[C] / 4, k_pairs = g.colsb[A] / 4;
    for (int m = 0; m < g.rows[C]; ++m) {
      float row[16];
      std::memcpy(row, s.reg[C] + m * kRowBytes, sizeof row);
      for (int k = 0; k < k_pairs; ++k) {
        const uint8_t* a = s.reg[A] + m * kRowBytes + k * 4;
        const uint8_t* b = s.reg[B] + k * kRowBytes;
        for (int n = 0; n < n_cols; ++n) {
          row[n] += Bf16(a) * Bf16(b + n * 4);
          row[n] += Bf16(a + 2) * Bf16(b + n * 4 + 2);
        }
      }
      std::memcpy(s.reg[C] + m * kRowBytes, row, sizeof row);
    }
  }
};

#endif

// Every entry point configures the tiles when it starts and releases them
// when it returns, as oneDNN's AMX kernels do: the tile configuration is
// per-thread state that other libraries in the process change between our
// calls (oneDNN's bf16 matmuls run on the same device threads and release
// the tiles when they finish, after which a tile instruction faults with
// #UD), and released tiles cost nothing at a context switch. Inside a tile
// scope (AmxTileScope: a kernel's loop that calls no other library) the
// first entry configures and the scope's end releases, once.
thread_local int t_scope_depth = 0;
thread_local bool t_scope_configured = false;

struct TileSession {
  TileSession() : owns(t_scope_depth == 0) {
    if (owns) {
      Tiles::Configure();
    } else if (!t_scope_configured) {
      Tiles::Configure();
      t_scope_configured = true;
    }
  }
  ~TileSession() {
    if (owns) Tiles::Release();
  }
  TileSession(const TileSession&) = delete;
  TileSession& operator=(const TileSession&) = delete;
  const bool owns;
};

// One register block: C[MB*16 x NB*16] (+)= A[MB*16 x K] * B[K x NB*16].
// Byte strides throughout. The k steps below k_full read A and B in place;
// the tail step (when present) reads the zero-padded copies.
struct BlockArgs {
  int64_t k_full;    // multiple of 32
  const uint8_t* a;  // A rows (row i*16 at a + i*16*a_stride)
  int64_t a_stride;
  const uint8_t* a_tail;  // [rows][32] bf16 k tail, or null
  int64_t a_tail_stride;
  const uint8_t* b;  // chunk j at b + j * b_chunk
  int64_t b_chunk;
  const uint8_t* b_tail;  // [chunk][16 pair rows][32] bf16, or null
  int64_t b_tail_chunk;
  uint8_t* c;  // C rows (row i*16 at c + i*16*c_stride)
  int64_t c_stride;
  bool accumulate;
};

template <int MB, int NB>
void Block(const BlockArgs& x) {
  constexpr int64_t kTileB = kTileRows * kRowBytes;  // bytes of a k step of a B chunk
  constexpr int64_t kCol = 16 * 4;                   // bytes of 16 float32 columns
  const int64_t c_down = 16 * x.c_stride;
  if (x.accumulate) {
    Tiles::Load<0>(x.c, x.c_stride);
    if constexpr (NB == 2) Tiles::Load<1>(x.c + kCol, x.c_stride);
    if constexpr (MB == 2) Tiles::Load<2>(x.c + c_down, x.c_stride);
    if constexpr (MB == 2 && NB == 2) Tiles::Load<3>(x.c + c_down + kCol, x.c_stride);
  } else {
    Tiles::Zero<0>();
    if constexpr (NB == 2) Tiles::Zero<1>();
    if constexpr (MB == 2) Tiles::Zero<2>();
    if constexpr (MB == 2 && NB == 2) Tiles::Zero<3>();
  }
  auto step = [&](const uint8_t* a, int64_t a_stride, const uint8_t* b, int64_t b_chunk) {
    Tiles::Load<4>(a, a_stride);
    Tiles::Load<6>(b, kRowBytes);
    if constexpr (NB == 2) Tiles::Load<7>(b + b_chunk, kRowBytes);
    Tiles::Dot<0, 4, 6>();
    if constexpr (NB == 2) Tiles::Dot<1, 4, 7>();
    if constexpr (MB == 2) {
      Tiles::Load<5>(a + 16 * a_stride, a_stride);
      Tiles::Dot<2, 5, 6>();
      if constexpr (NB == 2) Tiles::Dot<3, 5, 7>();
    }
  };
  for (int64_t k = 0; k < x.k_full; k += kKStep)
    step(x.a + k * 2, x.a_stride, x.b + (k / kKStep) * kTileB, x.b_chunk);
  if (x.a_tail != nullptr) step(x.a_tail, x.a_tail_stride, x.b_tail, x.b_tail_chunk);
  Tiles::Store<0>(x.c, x.c_stride);
  if constexpr (NB == 2) Tiles::Store<1>(x.c + kCol, x.c_stride);
  if constexpr (MB == 2) Tiles::Store<2>(x.c + c_down, x.c_stride);
  if constexpr (MB == 2 && NB == 2) Tiles::Store<3>(x.c + c_down + kCol, x.c_stride);
}

void RunBlock(int mb, int nb, const BlockArgs& x) {
  if (mb == 2) {
    nb == 2 ? Block<2, 2>(x) : Block<2, 1>(x);
  } else {
    nb == 2 ? Block<1, 2>(x) : Block<1, 1>(x);
  }
}

}  // namespace

void GemmBf16(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, const uint16_t* B,
              int64_t b_chunk_stride, float* C, int64_t ldc, bool accumulate) {
  if (M <= 0 || N <= 0) return;
  const TileSession tiles;
  const int64_t k_full = K / kKStep * kKStep, k_tail = K - k_full;
  const int64_t chunks = N / kPadN;
  constexpr int64_t kTileElems = kTileRows * kKStep;  // bf16 elements of one tile

  // B's k tail: the last (k_tail + 1) / 2 pair rows of every chunk, padded
  // with zero rows to a full tile (the packed panel ends there).
  thread_local std::vector<uint16_t> b_tail;
  if (k_tail > 0) {
    b_tail.assign(chunks * kTileElems, 0);
    const int64_t pair_rows = (k_tail + 1) / 2;
    for (int64_t j = 0; j < chunks; ++j)
      std::memcpy(b_tail.data() + j * kTileElems, B + j * b_chunk_stride + (k_full / 2) * kPairRow,
                  pair_rows * kPairRow * 2);
  }
  // A rows that cannot be read in place: a block of fewer than 16*mb rows
  // (copied whole, K padded to a multiple of 32), or just the k tail.
  thread_local std::vector<uint16_t> a_copy;
  alignas(64) float c_copy[32 * 32];

  for (int64_t m0 = 0; m0 < M; m0 += 32) {
    const int64_t rows = M - m0 < 32 ? M - m0 : 32;
    const int mb = rows > 16 ? 2 : 1;
    const bool full = rows == 16 * mb;
    const uint16_t* a_rows = A + m0 * lda;
    BlockArgs x{};
    x.k_full = k_full;
    x.b_chunk = b_chunk_stride * 2;
    x.b_tail_chunk = kTileElems * 2;
    x.accumulate = accumulate;
    if (full) {
      x.a = reinterpret_cast<const uint8_t*>(a_rows);
      x.a_stride = lda * 2;
      if (k_tail > 0) {
        a_copy.assign(mb * kTileElems, 0);
        for (int64_t r = 0; r < rows; ++r)
          std::memcpy(a_copy.data() + r * kKStep, a_rows + r * lda + k_full, k_tail * 2);
        x.a_tail = reinterpret_cast<const uint8_t*>(a_copy.data());
        x.a_tail_stride = kKStep * 2;
      }
    } else {
      const int64_t kp = k_full + (k_tail > 0 ? kKStep : 0);
      a_copy.assign(mb * kTileRows * kp, 0);
      for (int64_t r = 0; r < rows && K > 0; ++r)  // K == 0: nothing to copy (data() may be null)
        std::memcpy(a_copy.data() + r * kp, a_rows + r * lda, K * 2);
      x.a = reinterpret_cast<const uint8_t*>(a_copy.data());
      x.a_stride = kp * 2;
      if (k_tail > 0) {
        x.a_tail = x.a + k_full * 2;
        x.a_tail_stride = kp * 2;
      }
    }
    for (int64_t n0 = 0; n0 < N; n0 += 32) {
      const int nb = N - n0 >= 32 ? 2 : 1;
      const int64_t j = n0 / kPadN;
      x.b = reinterpret_cast<const uint8_t*>(B + j * b_chunk_stride);
      if (k_tail > 0) x.b_tail = reinterpret_cast<const uint8_t*>(b_tail.data() + j * kTileElems);
      float* c = C + m0 * ldc + n0;
      if (full) {
        x.c = reinterpret_cast<uint8_t*>(c);
        x.c_stride = ldc * 4;
        RunBlock(mb, nb, x);
        continue;
      }
      // Fewer rows than the tiles: C goes through a zero-padded copy.
      const int64_t cols = nb * kPadN;
      std::memset(c_copy, 0, sizeof c_copy);
      if (accumulate)
        for (int64_t r = 0; r < rows; ++r) std::memcpy(c_copy + r * 32, c + r * ldc, cols * 4);
      x.c = reinterpret_cast<uint8_t*>(c_copy);
      x.c_stride = 32 * 4;
      RunBlock(mb, nb, x);
      for (int64_t r = 0; r < rows; ++r) std::memcpy(c + r * ldc, c_copy + r * 32, cols * 4);
    }
  }
}

// Four independent TDPBF16PS chains on tiles that stay loaded (the AMX bf16
// peak); returns the flops done (16 x 16 outputs x 32 products x 2 each).
int64_t PeakLoop(int64_t iterations, float* sink) {
  const TileSession tiles;
  // bf16 1/64 and 1/128: each instruction adds 32 * 2^-13 per element.
  alignas(64) uint16_t a[kTileRows * kKStep], b[kTileRows * kKStep];
  for (int i = 0; i < kTileRows * kKStep; ++i) {
    a[i] = 0x3c80;
    b[i] = 0x3c00;
  }
  Tiles::Zero<0>();
  Tiles::Zero<1>();
  Tiles::Zero<2>();
  Tiles::Zero<3>();
  Tiles::Load<4>(a, kRowBytes);
  Tiles::Load<5>(a, kRowBytes);
  Tiles::Load<6>(b, kRowBytes);
  Tiles::Load<7>(b, kRowBytes);
  for (int64_t it = 0; it < iterations; ++it) {
    Tiles::Dot<0, 4, 6>();
    Tiles::Dot<1, 4, 7>();
    Tiles::Dot<2, 5, 6>();
    Tiles::Dot<3, 5, 7>();
  }
  alignas(64) float out[4][kTileRows * 16];
  Tiles::Store<0>(out[0], kRowBytes);
  Tiles::Store<1>(out[1], kRowBytes);
  Tiles::Store<2>(out[2], kRowBytes);
  Tiles::Store<3>(out[3], kRowBytes);
  float total = 0;
  for (const auto& tile : out)
    for (float v : tile) total += v;
  *sink = total;
  return iterations * 4 * kTileRows * 16 * kKStep * 2;
}

void ReleaseTiles() { Tiles::Release(); }

void BeginTileScope() { ++t_scope_depth; }

void EndTileScope() {
  if (--t_scope_depth == 0 && t_scope_configured) {
    Tiles::Release();
    t_scope_configured = false;
  }
}

}  // namespace weft::kernels::simd::WEFT_AMX_NAME
