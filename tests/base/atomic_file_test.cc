#include "weft/base/atomic_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <random>
#include <string>
#include <thread>

#include "error_of.h"
#include "scratch_dir.h"
#include "weft/base/error.h"

namespace weft {
namespace {

namespace fs = std::filesystem;
using weft::testing::ErrorOf;
using weft::testing::Mentions;

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

TEST_F(AtomicFileTest, SiblingNamesAreUniqueAndUnpredictable) {
  fs::path path = dir_ / "x";
  fs::path a = UniqueSiblingPath(path, ".tmp-"), b = UniqueSiblingPath(path, ".tmp-");
  EXPECT_NE(a, b);
  EXPECT_EQ(a.parent_path(), dir_);
  ASSERT_EQ(a.filename().string().rfind("x.tmp-", 0), 0u);
  // 16 random hex digits, not the pid and a counter another user could guess.
  const std::string suffix = a.filename().string().substr(6);
  EXPECT_EQ(suffix.size(), 16u) << suffix;
  EXPECT_EQ(suffix.find_first_not_of("0123456789abcdef"), std::string::npos) << suffix;
  EXPECT_EQ(suffix.find(std::to_string(getpid()) + "-"), std::string::npos) << suffix;
  // A very long name keeps its temporary within NAME_MAX.
  const fs::path long_name = dir_ / std::string(250, 'n');
  EXPECT_LE(UniqueSiblingPath(long_name, ".tmp-").filename().string().size(), 255u);
}

TEST_F(AtomicFileTest, UniqueSiblingDirectoriesAreNew) {
  const fs::path a = CreateUniqueSiblingDirectory(dir_ / "ckpt", ".tmp-");
  const fs::path b = CreateUniqueSiblingDirectory(dir_ / "ckpt", ".tmp-");
  EXPECT_NE(a, b);
  EXPECT_TRUE(fs::is_directory(fs::symlink_status(a)));
  EXPECT_TRUE(fs::is_empty(a));
  EXPECT_TRUE(Mentions(ErrorOf([&] { CreateUniqueSiblingDirectory(dir_ / "no" / "x", ".t-"); }),
                       (dir_ / "no").string()));
}

// Links planted at the temporary names an earlier weft used
// ("<file>.tmp-<pid>-<n>") are neither followed nor renamed into place.
TEST_F(AtomicFileTest, PlantedLinksAtTemporaryNamesAreNotFollowed) {
  const fs::path victim = dir_ / "victim.txt";
  WriteFileAtomically(victim, "the victim's own bytes");
  const fs::path path = dir_ / "metrics.jsonl";
  for (int n = 0; n < 2000; ++n) {
    fs::create_symlink(victim, dir_ / fmt::format("metrics.jsonl.tmp-{}-{}", getpid(), n));
  }
  WriteFileAtomically(path, "new metrics");
  WriteFileAtomically(path, "newer metrics");
  EXPECT_EQ(ReadFileToString(victim), "the victim's own bytes");
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(path)));
  EXPECT_EQ(ReadFileToString(path), "newer metrics");
  EXPECT_EQ(FilesInDir(), 2 + 2000) << "no temporary left behind";
}

TEST_F(AtomicFileTest, ManagedNamesThatAreLinksOrNotFilesAreRefused) {
  const fs::path victim = dir_ / "elsewhere.txt";
  WriteFileAtomically(victim, "untouched");
  const fs::path link = dir_ / "tokenizer.model";
  fs::create_symlink(victim, link);
  EXPECT_TRUE(Mentions(ErrorOf([&] { WriteFileAtomically(link, "x"); }),
                       link.string() + " is a symbolic link"));
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(ReadFileToString(victim), "untouched");
  // A FIFO is refused at once (no wait for a reader) and stays a FIFO.
  const fs::path fifo = dir_ / "loss.svg";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_TRUE(Mentions(ErrorOf([&] { WriteFileAtomically(fifo, "x"); }), "is a FIFO"));
  EXPECT_TRUE(fs::is_fifo(fs::symlink_status(fifo)));
  // OutputFile (files inside weft's own directories) refuses links too.
  EXPECT_TRUE(Mentions(ErrorOf([&] { OutputFile out(link); }), "symbolic link"));
  EXPECT_TRUE(Mentions(ErrorOf([&] { OutputFile out(fifo); }), "FIFO"));
  EXPECT_EQ(ReadFileToString(victim), "untouched");
  EXPECT_EQ(FilesInDir(), 3);
}

TEST_F(AtomicFileTest, AUserPathLinkIsFollowedAndStaysALink) {
  const fs::path real = dir_ / "real.hlo";
  WriteFileAtomically(real, "old");
  const fs::path link = dir_ / "out.hlo";
  fs::create_symlink("real.hlo", link);
  WriteFileAtomically(link, "new", OutputTarget::kUserPath);
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(ReadFileToString(real), "new");
  EXPECT_EQ(FilesInDir(), 2);
  // A dangling link is refused: nothing is created through it.
  const fs::path dangling = dir_ / "dangling.hlo";
  fs::create_symlink(dir_ / "absent" / "x.hlo", dangling);
  EXPECT_TRUE(
      Mentions(ErrorOf([&] { WriteFileAtomically(dangling, "x", OutputTarget::kUserPath); }),
               "which does not exist"));
  EXPECT_FALSE(fs::exists(dir_ / "absent"));
  // A directory is refused by name.
  EXPECT_TRUE(Mentions(ErrorOf([&] { WriteFileAtomically(dir_, "x", OutputTarget::kUserPath); }),
                       "is a directory"));
}

// A FIFO (as /dev/null or /dev/stdout) named by the user is written in place,
// never replaced by a regular file.
TEST_F(AtomicFileTest, AUserPathFifoIsWrittenInPlace) {
  const fs::path fifo = dir_ / "pipe";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  std::string received;
  std::thread reader([&] {
    const int fd = ::open(fifo.c_str(), O_RDONLY);
    if (fd < 0) return;
    char buffer[256];
    ssize_t n;
    while ((n = ::read(fd, buffer, sizeof(buffer))) > 0) received.append(buffer, n);
    ::close(fd);
  });
  WriteFileAtomically(fifo, "through the pipe", OutputTarget::kUserPath);
  reader.join();
  EXPECT_EQ(received, "through the pipe");
  EXPECT_TRUE(fs::is_fifo(fs::symlink_status(fifo)));
  EXPECT_EQ(FilesInDir(), 1);
}

}  // namespace
}  // namespace weft
