#include "weft/base/memory.h"

#include <fmt/core.h>
#include <unistd.h>

namespace weft {

int64_t PhysicalMemoryBytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return 0;
  return static_cast<int64_t>(pages) * static_cast<int64_t>(page_size);
}

std::string FormatBytes(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (bytes >= (int64_t{1} << 40)) return fmt::format("{:.2f} TiB", b / (1ull << 40));
  if (bytes >= (int64_t{1} << 30)) return fmt::format("{:.2f} GiB", b / (1ull << 30));
  if (bytes >= (int64_t{1} << 20)) return fmt::format("{:.1f} MiB", b / (1ull << 20));
  if (bytes >= (int64_t{1} << 10)) return fmt::format("{} KiB", bytes >> 10);
  return fmt::format("{} B", bytes);
}

}  // namespace weft
