#include "weft/base/cpu.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

namespace weft {
namespace {

// The features we report agree with the kernel's view in /proc/cpuinfo.
TEST(Cpu, FeaturesAgreeWithProcCpuinfo) {
  std::ifstream f("/proc/cpuinfo");
  std::string line, flags;
  while (std::getline(f, line))
    if (line.rfind("flags", 0) == 0) {
      flags = line + " ";
      break;
    }
  if (flags.empty()) GTEST_SKIP() << "no /proc/cpuinfo flags";
  auto has = [&](const std::string& name) {
    return flags.find(" " + name + " ") != std::string::npos;
  };
  const CpuInfo& cpu = GetCpuInfo();
  EXPECT_EQ(cpu.avx2, has("avx2"));
  EXPECT_EQ(cpu.fma, has("fma"));
  EXPECT_EQ(cpu.avx512f, has("avx512f"));
  EXPECT_EQ(cpu.avx512_bf16, has("avx512_bf16"));
  EXPECT_EQ(cpu.amx_tile, has("amx_tile"));
  EXPECT_GE(cpu.l1d_bytes, 4096);
  EXPECT_GE(cpu.l2_bytes, cpu.l1d_bytes);
  EXPECT_GE(cpu.logical_cores, 1);
  EXPECT_EQ(&GetCpuInfo(), &cpu);  // read once
}

}  // namespace
}  // namespace weft
