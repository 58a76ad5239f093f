// Durable file output: nothing is half-written. AtomicOutputFile writes to a
// temporary sibling and renames it over the destination only on Commit(), so
// readers see either the old file or the complete new one.
// Every module that writes user-visible files (caches, checkpoints, plots,
// `-o OUT` of the CLI) goes through it.
//
// Where weft writes (and where it never does):
// - A temporary is created with O_CREAT | O_EXCL | O_NOFOLLOW under a name
//   with 64 random bits, in the destination's directory (opened once; the
//   rename is a renameat in it): a file or link planted beside the
//   destination is never opened, followed or replaced.
// - A name weft manages (OutputTarget::kManaged: an entry of a run, cache,
//   checkpoint or export directory) must be absent or a regular file; a
//   symbolic link or any other kind of file there is refused by name, before
//   anything is written, and checked again just before the rename.
// - A path the user named (OutputTarget::kUserPath: `-o`, `--svg`, ...) is
//   treated as `cp` and a shell's `>` treat it: a symbolic link is followed
//   and the file it names is replaced (atomically, in that file's directory;
//   the link stays a link; a dangling link is refused); a character device
//   or FIFO (/dev/null, /dev/stdout, a named pipe) is written in place, never
//   renamed over; a directory, block device or socket is refused by name.
// - Only regular files are ever renamed over.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace weft {

// A file opened for writing (created or truncated). A symbolic link at `path`
// is refused, never followed. Write errors throw weft::Error naming the file.
class OutputFile {
 public:
  explicit OutputFile(const std::filesystem::path& path);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  void Write(const void* data, size_t size);
  void Write(std::string_view text) { Write(text.data(), text.size()); }
  // fsync then close; the file is durable when this returns.
  void SyncAndClose();
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
};

// A file opened for reading at offsets. Errors throw weft::Error naming it.
class InputFile {
 public:
  explicit InputFile(const std::filesystem::path& path);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  uint64_t size() const { return size_; }
  // Exactly `size` bytes from `offset`; reading past the end is an error
  // naming the file (truncated).
  void ReadAt(uint64_t offset, void* data, size_t size) const;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// What a destination path is (the rules at the top of this file).
enum class OutputTarget {
  kManaged,   // a name inside a directory weft manages: never a link
  kUserPath,  // a path the user gave: links followed, devices and FIFOs written in place
};

// Writes to "<name>.tmp-<16 random hex digits>" beside the destination;
// Commit() fsyncs, renames over the destination and fsyncs the directory.
// Destroyed without Commit(), it removes the temporary. A character device or
// FIFO named by a kUserPath is written directly (Commit() only closes it).
class AtomicOutputFile {
 public:
  explicit AtomicOutputFile(const std::filesystem::path& path,
                            OutputTarget target = OutputTarget::kManaged);
  ~AtomicOutputFile();
  AtomicOutputFile(const AtomicOutputFile&) = delete;
  AtomicOutputFile& operator=(const AtomicOutputFile&) = delete;

  void Write(const void* data, size_t size);
  void Write(std::string_view text) { Write(text.data(), text.size()); }
  void Commit();

 private:
  std::filesystem::path path_;    // as given, for messages
  std::filesystem::path final_;   // the file replaced: path_, or what a user's link names
  std::string name_, temp_name_;  // in dir_fd_; temp_name_ empty: written in place
  OutputTarget target_;
  int dir_fd_ = -1, fd_ = -1;
  bool committed_ = false;
};

// The whole of `contents` to `path`, atomically.
void WriteFileAtomically(const std::filesystem::path& path, std::string_view contents,
                         OutputTarget target = OutputTarget::kManaged);

// The bytes of a file; throws weft::Error naming it when it cannot be read.
std::string ReadFileToString(const std::filesystem::path& path);

// fsync on a directory, so that renames and creations in it are durable.
void SyncDirectory(const std::filesystem::path& dir);

// A fresh sibling name for `path`: "<path><tag><16 random hex digits>",
// unique within this process and across concurrent processes and not
// predictable by another user (the bits come from getrandom).
std::filesystem::path UniqueSiblingPath(const std::filesystem::path& path, std::string_view tag);

// Creates a new directory at a UniqueSiblingPath of `path` (mkdir, which
// never follows or reuses anything already there; retried under another
// name if one exists) and returns it. Throws weft::Error naming `path` when
// it cannot be created.
std::filesystem::path CreateUniqueSiblingDirectory(const std::filesystem::path& path,
                                                   std::string_view tag);

// The text of an errno value ("No such file or directory"), for messages.
std::string ErrnoText(int error);

}  // namespace weft
