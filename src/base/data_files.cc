#include "weft/base/data_files.h"

#include <system_error>

#include "weft/base/env.h"

namespace weft {

std::filesystem::path FindDataFile(std::string_view relative) {
  namespace fs = std::filesystem;
  const fs::path given(relative);
  std::error_code error;
  if (fs::exists(given, error) || given.is_absolute()) return given;
  if (auto dir = GetEnv("WEFT_DATA_DIR")) {
    if (fs::exists(fs::path(*dir) / given, error)) return fs::path(*dir) / given;
  }
  const fs::path executable = fs::read_symlink("/proc/self/exe", error);
  if (!error) {
    // <prefix>/bin/weft; <build>/apps/weft/weft and <build>/tests/<module>/<test>.
    const fs::path parent = executable.parent_path().parent_path();
    for (const fs::path& dir : {parent, parent.parent_path()}) {
      const fs::path candidate = dir / "share" / "weft" / given;
      if (fs::exists(candidate, error)) return candidate;
    }
  }
  return given;
}

}  // namespace weft
