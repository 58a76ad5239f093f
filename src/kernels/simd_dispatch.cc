// Chooses the SIMD primitives for this machine once (see simd/primitives.h).
#include <cstring>
#include <string>

#include "simd/primitives.h"
#include "weft/base/cpu.h"
#include "weft/base/env.h"
#include "weft/base/error.h"

namespace weft::kernels::simd {

Primitives MakePrimitives_portable();
Primitives MakePrimitives_avx2();
Primitives MakePrimitives_avx512();

namespace {

struct Table {
  Primitives portable = MakePrimitives_portable();
  Primitives avx2 = MakePrimitives_avx2();
  Primitives avx512 = MakePrimitives_avx512();
  const char* available[3] = {};
  int num_available = 0;
  Table() {
    const CpuInfo& cpu = GetCpuInfo();
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
}

ScopedIsa::ScopedIsa(const char* isa) : previous_(t_forced) {
  const Primitives* p = PrimitivesFor(isa);
  if (p == nullptr) Fail("instruction set '{}' is not available on this CPU", isa);
  t_forced = p;
}

ScopedIsa::~ScopedIsa() { t_forced = previous_; }

const Primitives& GetPrimitives() {
  if (t_forced != nullptr) return *t_forced;
  static const Primitives* chosen = [] {
    auto forced = GetEnv("WEFT_ISA");
    if (forced) {
      const Primitives* p = PrimitivesFor(forced->c_str());
      if (p == nullptr) {
        int n = 0;
        const char* const* names = AvailableIsas(&n);
        std::string list;
        for (int i = 0; i < n; ++i) list += (i ? ", " : "") + std::string(names[i]);
        Fail("WEFT_ISA={} is not available on this CPU; use one of: {} (or unset WEFT_ISA)",
             *forced, list);
      }
      return p;
    }
    return PrimitivesFor(GetTable().available[0]);
  }();
  return *chosen;
}

}  // namespace weft::kernels::simd
