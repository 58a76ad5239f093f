// Durable file output: nothing is half-written. AtomicOutputFile writes to a
// temporary sibling and renames it over the destination only on Commit(), so
// readers see either the old file or the complete new one.
// Every module that writes user-visible files (caches, checkpoints, plots,
// `-o OUT` of the CLI) goes through it.
#pragma once

#include <cstddef>
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
