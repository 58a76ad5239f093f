#include "weft/base/data_files.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "scratch_dir.h"
#include "weft/base/error.h"

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

TEST_F(DataFilesTest, ReadInputFileRefusesWhatIsNotARegularFileOfBoundedSize) {
  auto error = [](const fs::path& path, int64_t max_bytes) -> std::string {
    try {
      ReadInputFile(path, "config", max_bytes);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  // Devices would be read without end (an out-of-memory after seconds).
  EXPECT_NE(error("/dev/zero", 1 << 20)
                .find("config /dev/zero is a character device; give a "
                      "regular file"),
            std::string::npos);
  EXPECT_NE(error("/dev/urandom", 1 << 20).find("character device"), std::string::npos);
  // A FIFO is refused at once, not waited on for a writer.
  const fs::path fifo = scratch_ / "fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_NE(error(fifo, 1 << 20).find("is a FIFO (named pipe)"), std::string::npos);
  EXPECT_NE(error(scratch_, 1 << 20).find("is a directory"), std::string::npos);
  EXPECT_NE(error(scratch_ / "missing.toml", 1 << 20).find("cannot open config"),
            std::string::npos);
  // A sparse file larger than the limit is refused by its size, unread.
  const fs::path sparse = scratch_ / "sparse.toml";
  std::ofstream(sparse).put('x');
  fs::resize_file(sparse, int64_t{2} << 30);
  EXPECT_NE(error(sparse, int64_t{16} << 20)
                .find("is 2.00 GiB (2147483648 bytes), more than the 16.0 MiB (16777216 bytes)"),
            std::string::npos)
      << error(sparse, int64_t{16} << 20);
  const fs::path small = scratch_ / "small.toml";
  std::ofstream(small) << "a = 1\n";
  EXPECT_EQ(ReadInputFile(small, "config", 6), "a = 1\n");
  EXPECT_NE(error(small, 5).find("more than the 5 B (5 bytes)"), std::string::npos)
      << error(small, 5);
}

// CheckInputFile: ReadInputFile's refusals, word for word, and nothing read.
TEST_F(DataFilesTest, CheckInputFileRefusesTheSameUnread) {
  auto message = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  const fs::path fifo = scratch_ / "fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const fs::path sparse = scratch_ / "sparse.txt";
  std::ofstream(sparse).put('x');
  fs::resize_file(sparse, int64_t{2} << 30);
  for (const fs::path& bad :
       {fs::path("/dev/zero"), fifo, scratch_, scratch_ / "missing.txt", sparse}) {
    const std::string checked = message([&] { CheckInputFile(bad, "--data file", 1 << 20); });
    EXPECT_NE(checked.find("--data file " + bad.string()), std::string::npos) << checked;
    EXPECT_EQ(checked, message([&] { ReadInputFile(bad, "--data file", 1 << 20); }));
  }
  EXPECT_EQ(CheckInputFile(sparse, "--data file", int64_t{4} << 30), int64_t{2} << 30);
}

}  // namespace
}  // namespace weft
