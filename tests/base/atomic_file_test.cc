#include "weft/base/atomic_file.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <random>

#include "scratch_dir.h"
#include "weft/base/error.h"

namespace weft {
namespace {

namespace fs = std::filesystem;

class AtomicFileTest : public ::testing::Test {
 protected:
  int FilesInDir() const {
    return static_cast<int>(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()));
  }
  static std::string RandomBytes(size_t n, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::string bytes(n, '\0');
    for (auto& c : bytes) c = static_cast<char>(rng() & 0xFF);
    return bytes;
  }
  weft::testing::ScratchDir scratch_{"weft_atomic"};
  const fs::path dir_ = scratch_.path();
};

TEST_F(AtomicFileTest, WritesAndReplacesWithoutLeavingTemporaries) {
  fs::path path = dir_ / "out.bin";
  std::string first = RandomBytes(100000, 1), second = RandomBytes(777, 2);
  WriteFileAtomically(path, first);
  EXPECT_EQ(ReadFileToString(path), first);
  WriteFileAtomically(path, second);
  EXPECT_EQ(ReadFileToString(path), second);
  EXPECT_EQ(FilesInDir(), 1);
}

TEST_F(AtomicFileTest, UncommittedWriteKeepsTheOldFile) {
  fs::path path = dir_ / "keep.txt";
  WriteFileAtomically(path, "old contents");
  {
    AtomicOutputFile file(path);
    file.Write(RandomBytes(4096, 3));
    EXPECT_EQ(FilesInDir(), 2);  // the temporary sits beside the file
    // Destroyed without Commit(), as when an exception unwinds.
  }
  EXPECT_EQ(ReadFileToString(path), "old contents");
  EXPECT_EQ(FilesInDir(), 1);
}

TEST_F(AtomicFileTest, ChunkedWritesConcatenate) {
  fs::path path = dir_ / "chunks.bin";
  std::string a = RandomBytes(10, 4), b = RandomBytes(70000, 5);
  AtomicOutputFile file(path);
  file.Write(a);
  file.Write(b.data(), b.size());
  file.Commit();
  EXPECT_EQ(ReadFileToString(path), a + b);
}

TEST_F(AtomicFileTest, ErrorsNameTheFile) {
  fs::path missing = dir_ / "no_such_dir" / "file.txt";
  try {
    WriteFileAtomically(missing, "x");
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("no_such_dir"), std::string::npos) << error.what();
  }
  try {
    ReadFileToString(dir_ / "absent.txt");
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("absent.txt"), std::string::npos) << error.what();
  }
}

TEST_F(AtomicFileTest, SiblingNamesAreUnique) {
  fs::path path = dir_ / "x";
  fs::path a = UniqueSiblingPath(path, ".tmp-"), b = UniqueSiblingPath(path, ".tmp-");
  EXPECT_NE(a, b);
  EXPECT_EQ(a.parent_path(), dir_);
  EXPECT_EQ(a.filename().string().rfind("x.tmp-", 0), 0u);
}

}  // namespace
}  // namespace weft
