#include "weft/base/cpu.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

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

// Thread pools and GEMM threads are sized to the CPUs the process may run on
// (taskset, cpusets), not the machine's count: a child bound to one CPU sees
// one, and the process's count is its affinity mask's.
TEST(Cpu, CoresFollowTheAffinityMask) {
  cpu_set_t mine;
  CPU_ZERO(&mine);
  ASSERT_EQ(sched_getaffinity(0, sizeof(mine), &mine), 0);
  EXPECT_EQ(GetCpuInfo().logical_cores, CPU_COUNT(&mine));
  int first = 0;
  while (!CPU_ISSET(first, &mine)) ++first;
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    if (sched_setaffinity(0, sizeof(one), &one) != 0) _exit(3);
    _exit(AllowedCores() == 1 ? 0 : 4);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "3: sched_setaffinity failed; 4: AllowedCores() != 1";
}

}  // namespace
}  // namespace weft
