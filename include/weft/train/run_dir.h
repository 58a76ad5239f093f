// One owner per run directory (`weft train --out DIR`).
//
// A run holds an exclusive flock on DIR/.lock from before it reads DIR's
// checkpoint until it exits, so two processes never write one run directory:
// the second is refused at once, with the holder's pid (written into the
// lock file). The lock file stays behind (removing it would let a third
// process lock a new file while the second still waits on the old one); the
// kernel drops the lock when its holder exits, however it exits.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace weft {

class RunDirLock {
 public:
  // Creates DIR (and its parents) if needed and takes the lock. Throws
  // weft::Error naming DIR and what to do when another process holds it, or
  // when DIR cannot be created or written.
  explicit RunDirLock(const std::filesystem::path& dir);
  // Releases the lock. Until Keep() is called, a directory this object
  // created is removed again (it holds nothing but the lock file), so a run
  // refused after taking the lock leaves nothing behind.
  ~RunDirLock();
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;

  // The run has started writing into the directory: keep it.
  void Keep() { keep_ = true; }
  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
  std::filesystem::path created_;  // the outermost directory this object created, if any
  int fd_ = -1;
  bool keep_ = false;
};

// Throws weft::Error naming `flag` (e.g. "--out") when `dir` could not be
// created or written by this process: it, or the nearest existing directory
// above it, is not a writable directory. Writes nothing.
void CheckDirectoryWritable(const std::filesystem::path& dir, std::string_view flag);

// One step's line of a run's metrics.jsonl, as a resume and the loss plot
// read it. The trainer writes a non-finite loss as null (JSON has no NaN).
struct RunMetricsLine {
  std::string text;  // the line as written, kept by a resume
  int64_t step = 0;
  std::optional<double> loss;             // null: non-finite
  std::optional<double> validation_loss;  // a validation step's finite val_loss
};

// The step lines of `path` (none when it does not exist), in file order.
// A run directory is the user's: a line that is not a step's JSON object (a
// torn last line of a killed run) is skipped, and a line over 64 KiB (a step's
// object is some 200 bytes; a file of NULs with no newline) is skipped
// without being held. A path that is not a regular file (a FIFO, a device) is
// refused by name (weft::Error) rather than waited on.
std::vector<RunMetricsLine> ReadRunMetrics(const std::filesystem::path& path);

}  // namespace weft
