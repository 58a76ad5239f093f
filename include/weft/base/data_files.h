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

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace weft {

std::filesystem::path FindDataFile(std::string_view relative);

// The bytes of an input file the user named (`what` says which, e.g.
// "config" or "--data file"). Before anything is read it refuses, naming
// the path and `what` (weft::Error): a path that is not a regular file (a
// directory, a device such as /dev/zero, a FIFO, a socket; a FIFO is never
// waited on), and a file of more than max_bytes, stating the limit.
std::string ReadInputFile(const std::filesystem::path& path, std::string_view what,
                          int64_t max_bytes);

// What ReadInputFile refuses, refused the same way without reading a byte;
// returns the file's size. For a command to check the files it will read
// before slower work (loading a model) comes first.
int64_t CheckInputFile(const std::filesystem::path& path, std::string_view what, int64_t max_bytes);

}  // namespace weft
