// What this CPU can do: instruction-set extensions and cache sizes, read once.
#pragma once

#include <cstdint>
#include <string>

namespace weft {

struct CpuInfo {
  std::string model_name;
  int logical_cores = 1;
  bool avx2 = false;
  bool fma = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512dq = false;
  bool avx512vl = false;
  bool avx512_bf16 = false;
  bool amx_tile = false;
  bool amx_bf16 = false;
  int64_t l1d_bytes = 32 * 1024;  // per core
  int64_t l2_bytes = 1024 * 1024;  // per core
  int64_t l3_bytes = 0;            // shared

  bool HasAvx512() const { return avx512f && avx512bw && avx512dq && avx512vl; }
  bool HasAvx2Fma() const { return avx2 && fma; }
};

// Read from cpuid and sysfs on first use; later calls return the same object.
const CpuInfo& GetCpuInfo();

}  // namespace weft
