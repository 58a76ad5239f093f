#include "weft/base/data_files.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "scratch_dir.h"

namespace weft {
namespace {

namespace fs = std::filesystem;

// Runs the test body from a scratch directory (no configs/ there), with
// WEFT_DATA_DIR unset, and restores both.
class DataFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::current_path(scratch_);
    unsetenv("WEFT_DATA_DIR");
  }
  void TearDown() override {
    fs::current_path(home_);
    unsetenv("WEFT_DATA_DIR");
  }
  const fs::path home_ = fs::current_path();
  weft::testing::ScratchDir dir_{"weft_data_files"};
  const fs::path scratch_ = dir_.path();
};

TEST_F(DataFilesTest, TheBuildTreeFindsTheSourceConfigsFromAnyDirectory) {
  // This test runs from <build>/tests/base/: <build>/share/weft/configs links
  // to the source tree's configs, as <prefix>/share/weft/configs holds them
  // once installed.
  const fs::path found = FindDataFile("configs/chips.toml");
  EXPECT_TRUE(fs::exists(found)) << found;
  EXPECT_TRUE(found.is_absolute()) << found;
  EXPECT_EQ(found.parent_path().parent_path().filename(), "weft") << found;
}

TEST_F(DataFilesTest, TheWorkingDirectoryThenWeftDataDirComeFirst) {
  fs::create_directories(scratch_ / "configs");
  std::ofstream(scratch_ / "configs" / "chips.toml") << "# here\n";
  EXPECT_EQ(FindDataFile("configs/chips.toml"), fs::path("configs/chips.toml"));

  const fs::path data = scratch_ / "data";
  fs::create_directories(data / "configs");
  std::ofstream(data / "configs" / "mine.toml") << "# mine\n";
  setenv("WEFT_DATA_DIR", data.c_str(), 1);
  EXPECT_EQ(FindDataFile("configs/mine.toml"), data / "configs" / "mine.toml");
}

TEST_F(DataFilesTest, AFileFoundNowhereComesBackAsGiven) {
  EXPECT_EQ(FindDataFile("configs/no_such_file.toml"), fs::path("configs/no_such_file.toml"));
  EXPECT_EQ(FindDataFile("/nowhere/at/all.toml"), fs::path("/nowhere/at/all.toml"));
}

}  // namespace
}  // namespace weft
