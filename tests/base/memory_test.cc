#include "weft/base/memory.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

namespace weft {
namespace {

TEST(MemoryTest, PhysicalMemoryAgreesWithProcMeminfo) {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    fields >> key >> kib;
    if (key == "MemTotal:") break;
  }
  if (key != "MemTotal:") GTEST_SKIP() << "no /proc/meminfo here";
  const int64_t bytes = PhysicalMemoryBytes();
  // The kernel reserves a little; sysconf counts all pages it manages.
  EXPECT_NEAR(static_cast<double>(bytes), static_cast<double>(kib) * 1024, 0.02 * kib * 1024);
}

TEST(MemoryTest, FormatsBytesForMessages) {
  EXPECT_EQ(FormatBytes(100), "100 B");
  EXPECT_EQ(FormatBytes(12 * 1024 + 5), "12 KiB");
  EXPECT_EQ(FormatBytes(730 * (int64_t{1} << 20)), "730.0 MiB");
  EXPECT_EQ(FormatBytes(3 * (int64_t{1} << 29)), "1.50 GiB");
  EXPECT_EQ(FormatBytes(int64_t{5} << 40), "5.00 TiB");
}

}  // namespace
}  // namespace weft
