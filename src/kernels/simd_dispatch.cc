// Chooses the SIMD primitives for this machine once (see simd/primitives.h).
#include <cstring>
#include <string>

#include "simd/primitives.h"
#include "weft/base/cpu.h"
#include "weft/base/env.h"
#include "weft/base/error.h"

namespace weft::kernels::simd {

// The per-ISA copies of simd/primitives.cc.
#define WEFT_DECLARE_ISA(ns)                                                                   \
  namespace ns {                                                                               \
  extern const int kLanes;                                                                     \
  extern const int kRows;                                                                      \
  void Gemm(int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t, int64_t,  \
            float*, int64_t, bool);                                                            \
  void GemmBf16(int64_t, int64_t, int64_t, const uint16_t*, int64_t, const uint16_t*, int64_t, \
                float*, int64_t, bool);                                                        \
  extern int64_t (*const kBf16DotPeakLoop)(int64_t, float*);                                   \
  float RowMax(const float*, int64_t);                                                         \
  float ExpShiftSum(float*, int64_t, float);                                                   \
  void Scale(float*, int64_t, float);                                                          \
  float Dot(const float*, const float*, int64_t);                                              \
  void SoftmaxGrad(const float*, const float*, float, float, float*, int64_t);                 \
  int64_t FmaPeakLoop(int64_t, float*);                                                        \
  void Bf16ToF32(const uint16_t*, float*, int64_t);                                            \
  void F32ToBf16(const float*, uint16_t*, int64_t);                                            \
  }                                                                                            \
  static Primitives Make_##ns() {                                                              \
    Primitives p;                                                                              \
    p.isa = #ns;                                                                               \
    p.lanes = ns::kLanes;                                                                      \
    p.rows = ns::kRows;                                                                        \
    p.gemm = &ns::Gemm;                                                                        \
    p.gemm_bf16 = &ns::GemmBf16;                                                               \
    p.bf16_dot_peak_loop = ns::kBf16DotPeakLoop;                                               \
    p.row_max = &ns::RowMax;                                                                   \
    p.exp_shift_sum = &ns::ExpShiftSum;                                                        \
    p.scale = &ns::Scale;                                                                      \
    p.dot = &ns::Dot;                                                                          \
    p.softmax_grad = &ns::SoftmaxGrad;                                                         \
    p.fma_peak_loop = &ns::FmaPeakLoop;                                                        \
    p.bf16_to_f32 = &ns::Bf16ToF32;                                                            \
    p.f32_to_bf16 = &ns::F32ToBf16;                                                            \
    return p;                                                                                  \
  }
WEFT_DECLARE_ISA(portable)
WEFT_DECLARE_ISA(avx2)
WEFT_DECLARE_ISA(avx512)
WEFT_DECLARE_ISA(avx512bf16)
#undef WEFT_DECLARE_ISA

namespace {

struct Table {
  Primitives portable = Make_portable();
  Primitives avx2 = Make_avx2();
  Primitives avx512 = Make_avx512();
  Primitives avx512bf16 = Make_avx512bf16();
  const char* available[4] = {};
  int num_available = 0;
  Table() {
    const CpuInfo& cpu = GetCpuInfo();
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
    if (std::strcmp(isa, "avx512bf16") == 0) return &t.avx512bf16;
    if (std::strcmp(isa, "avx512") == 0) return &t.avx512;
    if (std::strcmp(isa, "avx2") == 0) return &t.avx2;
    return &t.portable;
  }
  return nullptr;
}

const char* const* AvailableIsas(int* count) {
  *count = GetTable().num_available;
  return GetTable().available;
}

namespace {
thread_local const Primitives* t_forced = nullptr;

// Names this machine cannot run get an error that says why, instead of
// silently running another path: AMX (weft has no AMX tile kernels) and
// avx512bf16 on a CPU without it.
void CheckIsaName(const std::string& isa, const char* origin) {
  const CpuInfo& cpu = GetCpuInfo();
  if (isa == "amx") {
    if (!(cpu.amx_tile && cpu.amx_bf16)) {
      Fail(
          "{}={}: this CPU ({}) lacks AMX-BF16 (no amx_tile/amx_bf16 in /proc/cpuinfo), and "
          "weft has no AMX kernels; use avx512bf16, avx512, avx2 or portable (whichever this "
          "CPU has)",
          origin, isa, cpu.model_name);
    }
    Fail("{}={}: weft has no AMX kernels yet; use avx512bf16 for the bfloat16 kernels", origin,
         isa);
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

ScopedIsa::~ScopedIsa() { t_forced = previous_; }

const Primitives& GetPrimitives() {
  if (t_forced != nullptr) return *t_forced;
  if (const Primitives* p = EnvForced()) return *p;
  // avx512bf16's float32 code is avx512's: float32 calls name the plain copy.
  const Table& t = GetTable();
  const char* widest = t.available[0];
  if (std::strcmp(widest, "avx512bf16") == 0) widest = t.available[1];
  return *PrimitivesFor(widest);
}

const Primitives& GetBf16Primitives() {
  if (t_forced != nullptr) return *t_forced;
  if (const Primitives* p = EnvForced()) return *p;
  return *PrimitivesFor(GetTable().available[0]);
}

}  // namespace weft::kernels::simd
