// What this CPU can do: instruction-set extensions and cache sizes, read once.
#pragma once

#include <cstdint>
#include <string>

namespace weft {

struct CpuInfo {
  std::string model_name;
  int logical_cores = 1;  // the CPUs this process may run on (AllowedCores)
  bool avx2 = false;
  bool fma = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512dq = false;
  bool avx512vl = false;
  bool avx512_bf16 = false;
  bool amx_tile = false;  // cpuid: the CPU has AMX tiles
  bool amx_bf16 = false;  // ... and TDPBF16PS
  bool amx_os = false;    // the OS saves tile state (XCR0 XTILECFG | XTILEDATA)
  // Palette 1's limits (cpuid 0x1D/1): tile registers, rows per tile, bytes
  // per row; 0 without AMX. Sapphire Rapids: 8 tiles of 16 rows x 64 bytes.
  int amx_max_tiles = 0;
  int amx_max_rows = 0;
  int amx_bytes_per_row = 0;
  int64_t l1d_bytes = 32 * 1024;   // per core
  int64_t l2_bytes = 1024 * 1024;  // per core
  int64_t l3_bytes = 0;            // shared

  bool HasAvx512() const { return avx512f && avx512bw && avx512dq && avx512vl; }
  bool HasAvx2Fma() const { return avx2 && fma; }
};

// Read from cpuid and sysfs on first use; later calls return the same object.
const CpuInfo& GetCpuInfo();

// The CPUs the calling thread may run on now: its affinity mask (taskset,
// cgroup cpusets, mpirun's binding), which std::thread::hardware_concurrency
// ignores; the machine's count where the mask cannot be read. Thread pools
// and GEMM threads are sized from GetCpuInfo().logical_cores, this count
// taken once.
int AllowedCores();

// Whether this process may run AMX tile instructions. The first call asks
// Linux for the tile-data permission (arch_prctl ARCH_REQ_XCOMP_PERM,
// XFEATURE_XTILEDATA; process-wide, kernel 5.16+), once; later calls return
// the same answer. `why_not` says what is missing when `usable` is false.
struct AmxStatus {
  bool usable = false;
  std::string why_not;
};
const AmxStatus& GetAmxStatus();

}  // namespace weft
