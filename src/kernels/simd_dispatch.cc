// Chooses the SIMD primitives for this machine once (see weft/kernels/simd.h).
#include <fmt/core.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "weft/base/cpu.h"
#include "weft/base/env.h"
#include "weft/base/error.h"
#include "weft/kernels/simd.h"
#include "weft/kernels/tune_cache.h"  // WarnOnce

namespace weft::kernels::simd {

// The per-ISA copies of simd/primitives.cc.
#define WEFT_DECLARE_ISA(ns)                                                                    \
  namespace ns {                                                                                \
  extern const int kLanes;                                                                      \
  extern const int kRows;                                                                       \
  void Gemm(int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t, int64_t,   \
            float*, int64_t, bool);                                                             \
  void GemmTransposedA(int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t, \
                       int64_t, float*, int64_t, bool);                                         \
  void GemmBf16(int64_t, int64_t, int64_t, const uint16_t*, int64_t, const uint16_t*, int64_t,  \
                float*, int64_t, bool);                                                         \
  extern int64_t (*const kBf16DotPeakLoop)(int64_t, float*);                                    \
  float RowMax(const float*, int64_t);                                                          \
  float ExpShiftSum(float*, int64_t, float);                                                    \
  void Scale(float*, int64_t, float);                                                           \
  float Dot(const float*, const float*, int64_t);                                               \
  void SoftmaxGrad(const float*, const float*, float, float, float*, int64_t);                  \
  int64_t FmaPeakLoop(int64_t, float*);                                                         \
  void Bf16ToF32(const uint16_t*, float*, int64_t);                                             \
  void F32ToBf16(const float*, uint16_t*, int64_t);                                             \
  void F32ToBf16Transposed(const float*, int64_t, int64_t, int64_t, uint16_t*, int64_t);        \
  }                                                                                             \
  static Primitives Make_##ns() {                                                               \
    Primitives p;                                                                               \
    p.isa = #ns;                                                                                \
    p.lanes = ns::kLanes;                                                                       \
    p.rows = ns::kRows;                                                                         \
    p.gemm = &ns::Gemm;                                                                         \
    p.gemm_transposed_a = &ns::GemmTransposedA;                                                 \
    p.gemm_bf16 = &ns::GemmBf16;                                                                \
    p.bf16_dot_peak_loop = ns::kBf16DotPeakLoop;                                                \
    p.row_max = &ns::RowMax;                                                                    \
    p.exp_shift_sum = &ns::ExpShiftSum;                                                         \
    p.scale = &ns::Scale;                                                                       \
    p.dot = &ns::Dot;                                                                           \
    p.softmax_grad = &ns::SoftmaxGrad;                                                          \
    p.fma_peak_loop = &ns::FmaPeakLoop;                                                         \
    p.bf16_to_f32 = &ns::Bf16ToF32;                                                             \
    p.f32_to_bf16 = &ns::F32ToBf16;                                                             \
    p.f32_to_bf16_transposed = &ns::F32ToBf16Transposed;                                        \
    return p;                                                                                   \
  }
WEFT_DECLARE_ISA(portable)
WEFT_DECLARE_ISA(avx2)
WEFT_DECLARE_ISA(avx512)
WEFT_DECLARE_ISA(avx512bf16)
#undef WEFT_DECLARE_ISA

// The AMX copies of simd/amx_gemm.cc: the real instructions and their model.
#define WEFT_DECLARE_AMX(ns)                                                                   \
  namespace ns {                                                                               \
  void GemmBf16(int64_t, int64_t, int64_t, const uint16_t*, int64_t, const uint16_t*, int64_t, \
                float*, int64_t, bool);                                                        \
  int64_t PeakLoop(int64_t, float*);                                                           \
  void ReleaseTiles();                                                                         \
  void BeginTileScope();                                                                       \
  void EndTileScope();                                                                         \
  }
WEFT_DECLARE_AMX(amx)
WEFT_DECLARE_AMX(amx_emulated)
#undef WEFT_DECLARE_AMX

namespace {

// `base`'s float32 code with an AMX bf16 GEMM and its tile management.
Primitives WithAmxGemm(Primitives base, const char* isa, decltype(Primitives::gemm_bf16) gemm,
                       decltype(Primitives::bf16_dot_peak_loop) peak,
                       decltype(Primitives::release_tiles) release,
                       decltype(Primitives::begin_tile_scope) begin,
                       decltype(Primitives::end_tile_scope) end) {
  base.isa = isa;
  base.gemm_bf16 = gemm;
  base.bf16_dot_peak_loop = peak;
  base.release_tiles = release;
  base.begin_tile_scope = begin;
  base.end_tile_scope = end;
  return base;
}

// Runs the real AMX GEMM and its software model on one deterministic problem
// that takes every path (32-row blocks, a 16-row block, a short block, a k
// tail) and compares: weft's AMX code was written and tested against the
// model on machines without AMX, so a machine with AMX checks that the two
// agree before trusting the tiles, and falls back to avx512bf16 if not.
bool AmxAgreesWithItsModel(std::string* why_not) {
  constexpr int64_t M = 53, N = 48, K = 72, lda = K + 1;
  std::vector<uint16_t> a(M * lda), b(N / kPadN * PairChunkSize(K));
  uint32_t state = 12345;
  auto next = [&state]() {  // bf16 values of either sign with magnitudes in [1/8, 1)
    state = state * 1664525u + 1013904223u;
    return static_cast<uint16_t>(0x3e00 + (state >> 16) % 0x180 + ((state >> 8) & 0x8000));
  };
  for (auto& x : a) x = next();
  for (int64_t c = 0; c < N / kPadN; ++c)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < kPadN; ++j)
        b[c * PairChunkSize(K) + (k / 2) * kPairRow + j * 2 + k % 2] = next();
  std::vector<float> got(M * N, 1.0f), want(M * N, 1.0f);
  amx::GemmBf16(M, N, K, a.data(), lda, b.data(), PairChunkSize(K), got.data(), N, true);
  amx_emulated::GemmBf16(M, N, K, a.data(), lda, b.data(), PairChunkSize(K), want.data(), N, true);
  for (int64_t i = 0; i < M * N; ++i) {
    // 1 + 72 exact products of magnitude < 1: float32 sums in any order agree
    // within 73 roundings of at most 73 * 2^-24 each (< 1e-3); a wrong layout
    // is off by O(1).
    if (!(std::fabs(got[i] - want[i]) <= 1e-3f)) {
      *why_not = fmt::format(
          "weft's AMX GEMM disagreed with its software model on this CPU (element {}: {} vs "
          "{}); AMX is disabled, please report this CPU ({})",
          i, got[i], want[i], GetCpuInfo().model_name);
      return false;
    }
  }
  return true;
}

// Whether the AMX copy may run here; `why_not` says what is missing. Asks
// Linux for the tile permission (once per process) when the CPU has AMX.
bool AmxUsable(std::string* why_not) {
  const CpuInfo& cpu = GetCpuInfo();
  const AmxStatus& amx = GetAmxStatus();
  if (!amx.usable) {
    *why_not = amx.why_not;
    return false;
  }
  if (!(cpu.HasAvx512() && cpu.avx512_bf16)) {  // its float32 code is avx512bf16's
    *why_not = "this CPU has AMX but not AVX512-BF16, which weft's AMX path also uses";
    return false;
  }
  // The GEMM keeps 8 tiles of 16 rows x 64 bytes (palette 1 on every AMX CPU so far).
  if (cpu.amx_max_tiles < 8 || cpu.amx_max_rows < 16 || cpu.amx_bytes_per_row < 64) {
    *why_not = fmt::format(
        "this CPU's AMX palette 1 has {} tiles of {} rows x {} bytes; weft's AMX GEMM needs 8 "
        "tiles of 16 rows x 64 bytes",
        cpu.amx_max_tiles, cpu.amx_max_rows, cpu.amx_bytes_per_row);
    return false;
  }
  if (!AmxAgreesWithItsModel(why_not)) {
    WarnOnce(*why_not);
    return false;
  }
  return true;
}

struct Table {
  Primitives portable = Make_portable();
  Primitives avx2 = Make_avx2();
  Primitives avx512 = Make_avx512();
  Primitives avx512bf16 = Make_avx512bf16();
  Primitives amx = WithAmxGemm(Make_avx512bf16(), "amx", &amx::GemmBf16, &amx::PeakLoop,
                               &amx::ReleaseTiles, &amx::BeginTileScope, &amx::EndTileScope);
  // Never chosen by name: tests force it to run the AMX blocking everywhere.
  Primitives amx_emulated = WithAmxGemm(Make_portable(), "amx-emulated", &amx_emulated::GemmBf16,
                                        nullptr, &amx_emulated::ReleaseTiles,
                                        &amx_emulated::BeginTileScope, &amx_emulated::EndTileScope);
  const char* available[5] = {};
  int num_available = 0;
  std::string amx_why_not;
  Table() {
    const CpuInfo& cpu = GetCpuInfo();
    if (AmxUsable(&amx_why_not)) available[num_available++] = "amx";
    if (cpu.HasAvx512() && cpu.avx512_bf16) available[num_available++] = "avx512bf16";
    if (cpu.HasAvx512()) available[num_available++] = "avx512";
    if (cpu.HasAvx2Fma()) available[num_available++] = "avx2";
    available[num_available++] = "portable";
  }
};

const Table& GetTable() {
  static const Table table;
  return table;
}

}  // namespace

const Primitives* PrimitivesFor(const char* isa) {
  const Table& t = GetTable();
  for (int i = 0; i < t.num_available; ++i) {
    if (std::strcmp(t.available[i], isa) != 0) continue;
    if (std::strcmp(isa, "amx") == 0) return &t.amx;
    if (std::strcmp(isa, "avx512bf16") == 0) return &t.avx512bf16;
    if (std::strcmp(isa, "avx512") == 0) return &t.avx512;
    if (std::strcmp(isa, "avx2") == 0) return &t.avx2;
    return &t.portable;
  }
  return nullptr;
}

const Primitives& EmulatedAmxPrimitives() { return GetTable().amx_emulated; }

const std::string& AmxUnavailableReason() { return GetTable().amx_why_not; }

const char* const* AvailableIsas(int* count) {
  *count = GetTable().num_available;
  return GetTable().available;
}

namespace {
thread_local const Primitives* t_forced = nullptr;

// Names this machine cannot run get an error that says why, instead of
// silently running another path: amx and avx512bf16 where they are missing.
void CheckIsaName(const std::string& isa, const char* origin) {
  const CpuInfo& cpu = GetCpuInfo();
  if (isa == "amx" && PrimitivesFor("amx") == nullptr) {
    Fail(
        "{}={}: AMX cannot run here: {}; use avx512bf16, avx512, avx2 or portable (whichever "
        "this CPU has)",
        origin, isa, AmxUnavailableReason());
  }
  if (isa == "avx512bf16" && !(cpu.avx512_bf16 && cpu.HasAvx512())) {
    Fail(
        "{}={}: this CPU ({}) lacks AVX512-BF16 (no avx512_bf16 in /proc/cpuinfo); use "
        "avx512, avx2 or portable (whichever this CPU has)",
        origin, isa, cpu.model_name);
  }
}

// WEFT_ISA's choice, or null when unset.
const Primitives* EnvForced() {
  static const Primitives* forced = []() -> const Primitives* {
    auto name = GetEnv("WEFT_ISA");
    if (!name) return nullptr;
    CheckIsaName(*name, "WEFT_ISA");
    const Primitives* p = PrimitivesFor(name->c_str());
    if (p == nullptr) {
      int n = 0;
      const char* const* names = AvailableIsas(&n);
      std::string list;
      for (int i = 0; i < n; ++i) list += (i ? ", " : "") + std::string(names[i]);
      Fail("WEFT_ISA={} is not available on this CPU; use one of: {} (or unset WEFT_ISA)", *name,
           list);
    }
    return p;
  }();
  return forced;
}
}  // namespace

ScopedIsa::ScopedIsa(const char* isa) : previous_(t_forced) {
  CheckIsaName(isa, "instruction set");
  const Primitives* p = PrimitivesFor(isa);
  if (p == nullptr) Fail("instruction set '{}' is not available on this CPU", isa);
  t_forced = p;
}

ScopedIsa::ScopedIsa(const Primitives& primitives) : previous_(t_forced) { t_forced = &primitives; }

ScopedIsa::~ScopedIsa() { t_forced = previous_; }

const Primitives& GetPrimitives() {
  if (t_forced != nullptr) return *t_forced;
  if (const Primitives* p = EnvForced()) return *p;
  // amx's and avx512bf16's float32 code is avx512's: float32 calls name the
  // plain copy.
  const Table& t = GetTable();
  int i = 0;
  while (std::strcmp(t.available[i], "amx") == 0 || std::strcmp(t.available[i], "avx512bf16") == 0)
    ++i;
  return *PrimitivesFor(t.available[i]);
}

const Primitives& GetBf16Primitives() {
  if (t_forced != nullptr) return *t_forced;
  if (const Primitives* p = EnvForced()) return *p;
  return *PrimitivesFor(GetTable().available[0]);
}

void ReleaseAmxTiles() {
  if (const auto release = GetBf16Primitives().release_tiles) release();
}

AmxTileScope::AmxTileScope(const Primitives& primitives) {
  if (primitives.begin_tile_scope == nullptr) return;
  end_ = primitives.end_tile_scope;
  primitives.begin_tile_scope();
}

AmxTileScope::~AmxTileScope() {
  if (end_ != nullptr) end_();
}

bool Bf16InstructionsAllowed() {
  const Primitives* forced = t_forced != nullptr ? t_forced : EnvForced();
  return forced == nullptr || forced->bf16_dot_peak_loop != nullptr;
}

}  // namespace weft::kernels::simd
