#include "weft/base/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <system_error>

#include "weft/base/error.h"

namespace weft {
namespace {

std::string ErrnoText(int error) { return std::generic_category().message(error); }

std::filesystem::path ParentOrDot(const std::filesystem::path& path) {
  std::filesystem::path parent = path.parent_path();
  return parent.empty() ? std::filesystem::path(".") : parent;
}

}  // namespace

OutputFile::OutputFile(const std::filesystem::path& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    Fail("cannot create {}: {}; check that the directory exists and is writable", path.string(),
         ErrnoText(errno));
  }
}

OutputFile::~OutputFile() {
  if (fd_ >= 0) ::close(fd_);
}

void OutputFile::Write(const void* data, size_t size) {
  WEFT_INTERNAL_CHECK(fd_ >= 0, "write to {} after it was closed", path_.string());
  const char* bytes = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t written = ::write(fd_, bytes, size);
    if (written < 0 && errno == EINTR) continue;
    if (written < 0) {
      Fail("cannot write {}: {}; check free disk space", path_.string(), ErrnoText(errno));
    }
    bytes += written;
    size -= static_cast<size_t>(written);
  }
}

void OutputFile::SyncAndClose() {
  WEFT_INTERNAL_CHECK(fd_ >= 0, "{} closed twice", path_.string());
  int fd = fd_;
  fd_ = -1;
  if (::fsync(fd) != 0) {
    int error = errno;
    ::close(fd);
    Fail("cannot flush {} to disk: {}", path_.string(), ErrnoText(error));
  }
  if (::close(fd) != 0) Fail("cannot close {}: {}", path_.string(), ErrnoText(errno));
}

std::filesystem::path UniqueSiblingPath(const std::filesystem::path& path, std::string_view tag) {
  static std::atomic<uint64_t> counter{0};
  std::string name = path.filename().string();
  name += tag;
  name += std::to_string(::getpid()) + "-" + std::to_string(counter.fetch_add(1));
  return path.parent_path() / name;
}

AtomicOutputFile::AtomicOutputFile(const std::filesystem::path& path)
    : path_(path), temp_path_(UniqueSiblingPath(path, ".tmp-")), file_(temp_path_) {}

AtomicOutputFile::~AtomicOutputFile() {
  if (!committed_) {
    std::error_code ignored;
    std::filesystem::remove(temp_path_, ignored);
  }
}

void AtomicOutputFile::Commit() {
  WEFT_INTERNAL_CHECK(!committed_, "{} committed twice", path_.string());
  file_.SyncAndClose();
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    Fail("cannot rename {} to {}: {}", temp_path_.string(), path_.string(), ErrnoText(errno));
  }
  committed_ = true;
  SyncDirectory(ParentOrDot(path_));
}

void WriteFileAtomically(const std::filesystem::path& path, std::string_view contents) {
  AtomicOutputFile file(path);
  file.Write(contents);
  file.Commit();
}

InputFile::InputFile(const std::filesystem::path& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) Fail("cannot open {}: {}", path.string(), ErrnoText(errno));
  struct stat info {};
  if (::fstat(fd_, &info) != 0) {
    const int error = errno;
    ::close(fd_);
    Fail("cannot read {}: {}", path.string(), ErrnoText(error));
  }
  size_ = static_cast<uint64_t>(info.st_size);
}

InputFile::~InputFile() { ::close(fd_); }

void InputFile::ReadAt(uint64_t offset, void* data, size_t size) const {
  char* bytes = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = ::pread(fd_, bytes, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) Fail("cannot read {}: {}", path_.string(), ErrnoText(errno));
    if (n == 0) {
      Fail("{} ends at byte {}, before the {} bytes expected there (truncated)", path_.string(),
           offset, size);
    }
    bytes += n;
    offset += static_cast<uint64_t>(n);
    size -= static_cast<size_t>(n);
  }
}

std::string ReadFileToString(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) Fail("cannot open {}: {}", path.string(), ErrnoText(errno));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) Fail("cannot read {}: {}", path.string(), ErrnoText(errno));
  return std::move(buffer).str();
}

void SyncDirectory(const std::filesystem::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) Fail("cannot open directory {}: {}", dir.string(), ErrnoText(errno));
  int result = ::fsync(fd);
  int error = errno;
  ::close(fd);
  // Some filesystems refuse fsync on directories; the rename is still done.
  if (result != 0 && error != EINVAL && error != EROFS) {
    Fail("cannot flush directory {} to disk: {}", dir.string(), ErrnoText(error));
  }
}

}  // namespace weft
