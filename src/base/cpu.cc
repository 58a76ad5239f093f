#include "weft/base/cpu.h"

#include <cpuid.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

namespace weft {
namespace {

// Cache size from sysfs: /sys/devices/system/cpu/cpu0/cache/indexN/{level,type,size}.
int64_t SysfsCacheBytes(int level, bool data) {
  for (int index = 0; index < 8; ++index) {
    std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
    std::ifstream level_file(dir + "level"), type_file(dir + "type"), size_file(dir + "size");
    if (!level_file || !type_file || !size_file) continue;
    int l = 0;
    std::string type, size;
    level_file >> l;
    type_file >> type;
    size_file >> size;
    if (l != level) continue;
    if (data && type == "Instruction") continue;
    if (size.empty()) continue;
    int64_t value = std::stoll(size);
    char unit = size.back();
    if (unit == 'K') value *= 1024;
    if (unit == 'M') value *= 1024 * 1024;
    return value;
  }
  return 0;
}

std::string ModelName() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) {
        auto start = line.find_first_not_of(' ', colon + 1);
        return start == std::string::npos ? "" : line.substr(start);
      }
    }
  }
  return "unknown";
}

// True when the OS saves the register state for the given XCR0 bits.
bool OsSupports(unsigned long long mask) {
  unsigned int eax, ebx, ecx, edx;
  __cpuid(1, eax, ebx, ecx, edx);
  if (!(ecx & (1u << 27))) return false;  // OSXSAVE
  unsigned int lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  unsigned long long xcr0 = (static_cast<unsigned long long>(hi) << 32) | lo;
  return (xcr0 & mask) == mask;
}

CpuInfo Detect() {
  CpuInfo info;
  info.model_name = ModelName();
  info.logical_cores = AllowedCores();
  unsigned int eax, ebx, ecx, edx;
  __cpuid(1, eax, ebx, ecx, edx);
  bool fma = ecx & (1u << 12);
  bool ymm_os = OsSupports(0x6);
  bool zmm_os = OsSupports(0xe6);
  unsigned int max_leaf = __get_cpuid_max(0, nullptr);
  if (max_leaf >= 7) {
    __cpuid_count(7, 0, eax, ebx, ecx, edx);
    info.avx2 = ymm_os && (ebx & (1u << 5));
    info.fma = ymm_os && fma;
    info.avx512f = zmm_os && (ebx & (1u << 16));
    info.avx512dq = zmm_os && (ebx & (1u << 17));
    info.avx512bw = zmm_os && (ebx & (1u << 30));
    info.avx512vl = zmm_os && (ebx & (1u << 31));
    info.amx_bf16 = edx & (1u << 22);
    info.amx_tile = edx & (1u << 24);
    info.amx_os = OsSupports(0x60000);  // XTILECFG (17) and XTILEDATA (18)
    unsigned int a1, b1, c1, d1;
    __cpuid_count(7, 1, a1, b1, c1, d1);
    info.avx512_bf16 = zmm_os && (a1 & (1u << 5));
  }
  if (info.amx_tile && max_leaf >= 0x1d) {
    __cpuid_count(0x1d, 0, eax, ebx, ecx, edx);
    if (eax >= 1) {  // palette 1 exists
      __cpuid_count(0x1d, 1, eax, ebx, ecx, edx);
      info.amx_bytes_per_row = static_cast<int>(ebx & 0xffff);
      info.amx_max_tiles = static_cast<int>(ebx >> 16);
      info.amx_max_rows = static_cast<int>(ecx & 0xffff);
    }
  }
  int64_t l1 = SysfsCacheBytes(1, true), l2 = SysfsCacheBytes(2, true),
          l3 = SysfsCacheBytes(3, true);
  if (l1 > 0) info.l1d_bytes = l1;
  if (l2 > 0) info.l2_bytes = l2;
  info.l3_bytes = l3;
  return info;
}

AmxStatus RequestAmx() {
  const CpuInfo& cpu = GetCpuInfo();
  AmxStatus s;
  if (!(cpu.amx_tile && cpu.amx_bf16)) {
    s.why_not = "this CPU (" + cpu.model_name + ") lacks AMX-BF16 (no amx_tile/amx_bf16 in cpuid)";
  } else if (!cpu.amx_os) {
    s.why_not = "the OS does not enable AMX tile state (XCR0 bits 17/18 clear)";
  } else {
    constexpr long kArchReqXcompPerm = 0x1023;  // <asm/prctl.h>
    constexpr long kXfeatureXtiledata = 18;
    if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) {
      s.why_not = std::string(
                      "Linux refused the AMX tile-data permission (arch_prctl "
                      "ARCH_REQ_XCOMP_PERM: ") +
                  std::strerror(errno) + "; kernel 5.16 or later is needed)";
    } else {
      s.usable = true;
    }
  }
  return s;
}

}  // namespace

int AllowedCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

const CpuInfo& GetCpuInfo() {
  static const CpuInfo info = Detect();
  return info;
}

const AmxStatus& GetAmxStatus() {
  static const AmxStatus status = RequestAmx();
  return status;
}

}  // namespace weft
