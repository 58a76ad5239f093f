#include "weft/train/run_dir.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "error_of.h"
#include "scratch_dir.h"
#include "weft/base/atomic_file.h"
#include "weft/base/error.h"

namespace weft {
namespace {

using weft::testing::ErrorOf;

namespace fs = std::filesystem;

class RunDirTest : public ::testing::Test {
 protected:
  weft::testing::ScratchDir scratch_{"weft_run_dir"};
  const fs::path root_ = scratch_.path();
};

TEST_F(RunDirTest, ASecondHolderInThisProcessIsRefusedWithThePid) {
  const fs::path dir = root_ / "runs" / "a";
  RunDirLock first(dir);
  first.Keep();
  const std::string message = ErrorOf([&] { RunDirLock second(dir); });
  EXPECT_NE(message.find("in use by another weft process (pid " + std::to_string(getpid()) + ","),
            std::string::npos)
      << message;
  EXPECT_TRUE(fs::is_directory(dir)) << "the refused second holder removes nothing";
}

TEST_F(RunDirTest, AnotherProcessIsRefusedUntilTheHolderExits) {
  const fs::path dir = root_ / "b";
  int ready[2], release[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(release), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // the holder
    RunDirLock lock(dir);
    lock.Keep();
    char c = 1;
    if (write(ready[1], &c, 1) != 1) _exit(3);
    if (read(release[0], &c, 1) != 1) _exit(4);
    _exit(0);
  }
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  const std::string message = ErrorOf([&] { RunDirLock mine(dir); });
  EXPECT_NE(message.find("(pid " + std::to_string(child) + ","), std::string::npos) << message;
  EXPECT_NE(message.find("give another --out"), std::string::npos) << message;
  c = 1;
  ASSERT_EQ(write(release[1], &c, 1), 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  // The holder is gone (and with it its lock): the directory is free again.
  RunDirLock after(dir);
  for (int fd : {ready[0], ready[1], release[0], release[1]}) close(fd);
}

TEST_F(RunDirTest, ADirectoryCreatedForARefusedRunIsRemovedAgain) {
  const fs::path dir = root_ / "new" / "deeper" / "run";
  { RunDirLock lock(dir); }
  EXPECT_FALSE(fs::exists(root_ / "new")) << "everything it created is gone";
  {
    RunDirLock lock(dir);
    lock.Keep();
  }
  EXPECT_TRUE(fs::is_directory(dir));
  // An existing directory is never removed, kept or not.
  WriteFileAtomically(dir / "metrics.jsonl", "{}\n");
  { RunDirLock lock(dir); }
  EXPECT_EQ(ReadFileToString(dir / "metrics.jsonl"), "{}\n");
}

// A run directory whose managed entries are links (to files or directories
// elsewhere) is refused by name, and nothing outside it is written.
TEST_F(RunDirTest, ManagedEntriesThatAreLinksAreRefusedByName) {
  const fs::path victim = root_ / "victim";
  WriteFileAtomically(victim, "precious");
  const fs::path elsewhere = root_ / "elsewhere";
  fs::create_directories(elsewhere);
  for (const char* name : {".lock", "tokenizer.model", "metrics.jsonl", "loss.svg", "checkpoint"}) {
    const fs::path dir = root_ / (std::string("run") + name);
    fs::create_directories(dir);
    const bool directory = std::string(name) == "checkpoint";
    fs::create_symlink(directory ? elsewhere : victim, dir / name);
    const std::string message = ErrorOf([&] { RunDirLock lock(dir); });
    EXPECT_NE(message.find((dir / name).string() + " is a symbolic link"), std::string::npos)
        << message;
    EXPECT_TRUE(fs::is_symlink(dir / name));
    EXPECT_FALSE(fs::exists(dir / ".lock") && std::string(name) != ".lock") << name;
  }
  EXPECT_EQ(ReadFileToString(victim), "precious");
  EXPECT_TRUE(fs::is_empty(elsewhere));
  // Another kind of file in a managed place is refused too.
  const fs::path fifo_run = root_ / "fifo";
  fs::create_directories(fifo_run);
  ASSERT_EQ(mkfifo((fifo_run / ".lock").c_str(), 0600), 0);
  EXPECT_NE(ErrorOf([&] { RunDirLock lock(fifo_run); }).find("is not a regular file"),
            std::string::npos);
  WriteFileAtomically(fifo_run / "checkpoint", "a file");
  fs::remove(fifo_run / ".lock");
  EXPECT_NE(ErrorOf([&] { RunDirLock lock(fifo_run); }).find("is not a directory"),
            std::string::npos);
}

TEST_F(RunDirTest, UnwritableOrNonDirectoryPathsAreNamedBeforeAnythingIsWritten) {
  WriteFileAtomically(root_ / "file", "x");
  std::string message = ErrorOf([&] { CheckDirectoryWritable(root_ / "file", "--out"); });
  EXPECT_NE(message.find("--out " + (root_ / "file").string() + ": exists and is not a directory"),
            std::string::npos)
      << message;
  message = ErrorOf([&] { CheckDirectoryWritable(root_ / "file" / "run", "--out"); });
  EXPECT_NE(message.find("is not a directory"), std::string::npos) << message;
  EXPECT_EQ(ErrorOf([&] { CheckDirectoryWritable(root_ / "fresh" / "run", "--out"); }), "");
  EXPECT_FALSE(fs::exists(root_ / "fresh"));
  if (geteuid() != 0) {  // root may write anywhere
    fs::create_directories(root_ / "locked");
    fs::permissions(root_ / "locked", fs::perms::owner_read | fs::perms::owner_exec);
    message = ErrorOf([&] { CheckDirectoryWritable(root_ / "locked" / "run", "--out"); });
    EXPECT_NE(message.find("is not writable"), std::string::npos) << message;
    fs::permissions(root_ / "locked", fs::perms::owner_all);
  }
}

}  // namespace
}  // namespace weft

namespace weft {
namespace {

// metrics.jsonl as a resume reads it: step lines in order, whatever else the
// file holds skipped without being held, a FIFO refused by name.
TEST(RunMetricsTest, StepLinesAreReadAndAnythingElseIsSkipped) {
  weft::testing::ScratchDir scratch("weft_run_metrics");
  const std::filesystem::path dir = scratch.path();
  const std::filesystem::path file = dir / "metrics.jsonl";
  EXPECT_TRUE(ReadRunMetrics(file).empty());  // absent: no steps
  {
    std::ofstream out(file, std::ios::binary);
    out << "{\"step\": 1, \"loss\": 5.5}\n"
        << "not json\n"
        << "{\"step\": \"two\"}\n"
        << std::string(100000, 'x') << "\n"
        << "{\"step\": 2, \"loss\": null, \"val_loss\": 4.25}\n"
        << std::string(3 << 20, '\0') << "\n"
        << "[1, 2]\n"
        << "{\"step\": 3, \"loss\": 4.0}";  // no newline at the end
  }
  const std::vector<RunMetricsLine> lines = ReadRunMetrics(file);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0].step, 1);
  EXPECT_EQ(lines[0].loss, 5.5);
  EXPECT_EQ(lines[0].text, "{\"step\": 1, \"loss\": 5.5}");
  EXPECT_EQ(lines[1].step, 2);
  EXPECT_FALSE(lines[1].loss.has_value());
  EXPECT_EQ(lines[1].validation_loss, 4.25);
  EXPECT_EQ(lines[2].step, 3);
  EXPECT_EQ(lines[2].loss, 4.0);

  const std::filesystem::path fifo = dir / "fifo.jsonl";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string message = weft::testing::ErrorOf([&] { ReadRunMetrics(fifo); });
  EXPECT_NE(message.find("metrics file"), std::string::npos) << message;
  EXPECT_NE(message.find(fifo.string()), std::string::npos) << message;
}

}  // namespace
}  // namespace weft
