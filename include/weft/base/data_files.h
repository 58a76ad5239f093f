// weft's own data files (configs/chips.toml, configs/tiny.toml, …), found
// wherever weft runs from: the source tree, a build tree or an installation.
//
// FindDataFile("configs/chips.toml") is the first of these that exists:
//   1. the path as given, from the working directory (a checkout's root);
//   2. $WEFT_DATA_DIR/configs/chips.toml;
//   3. <dir>/share/weft/configs/chips.toml for <dir> the running executable's
//      directory's parent and grandparent: `cmake --install` puts the
//      executable in <prefix>/bin and the configs in <prefix>/share/weft/
//      configs; a build tree links <build>/share/weft/configs to the source
//      tree's configs, beside <build>/apps/weft/weft and <build>/tests/*/.
// When none exists it returns the path as given, so that the caller's error
// names the file it looked for.
#pragma once

#include <filesystem>
#include <string_view>

namespace weft {

std::filesystem::path FindDataFile(std::string_view relative);

}  // namespace weft
