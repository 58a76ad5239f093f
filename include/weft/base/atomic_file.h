// Durable file output: nothing is half-written. AtomicOutputFile writes to a
// temporary sibling and renames it over the destination only on Commit(), so
// readers see either the old file or the complete new one.
// Every module that writes user-visible files (caches, checkpoints, plots,
// `-o OUT` of the CLI) goes through it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace weft {

// A file opened for writing (created or truncated). Write errors throw
// weft::Error naming the file.
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

// Writes to "<path>.tmp-<pid>-<n>"; Commit() fsyncs, renames over `path` and
// fsyncs the directory. Destroyed without Commit(), it removes the temporary.
class AtomicOutputFile {
 public:
  explicit AtomicOutputFile(const std::filesystem::path& path);
  ~AtomicOutputFile();
  AtomicOutputFile(const AtomicOutputFile&) = delete;
  AtomicOutputFile& operator=(const AtomicOutputFile&) = delete;

  void Write(const void* data, size_t size) { file_.Write(data, size); }
  void Write(std::string_view text) { file_.Write(text); }
  void Commit();

 private:
  std::filesystem::path path_, temp_path_;
  OutputFile file_;
  bool committed_ = false;
};

// The whole of `contents` to `path`, atomically.
void WriteFileAtomically(const std::filesystem::path& path, std::string_view contents);

// The bytes of a file; throws weft::Error naming it when it cannot be read.
std::string ReadFileToString(const std::filesystem::path& path);

// fsync on a directory, so that renames and creations in it are durable.
void SyncDirectory(const std::filesystem::path& dir);

// A fresh sibling name for `path`: "<path><tag><pid>-<counter>", unique
// within this process and across concurrent processes.
std::filesystem::path UniqueSiblingPath(const std::filesystem::path& path, std::string_view tag);

}  // namespace weft
