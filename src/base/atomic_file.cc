#include "weft/base/atomic_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <system_error>

#include "weft/base/error.h"

namespace weft {
namespace {

namespace fs = std::filesystem;

fs::path ParentOrDot(const fs::path& path) {
  fs::path parent = path.parent_path();
  return parent.empty() ? fs::path(".") : parent;
}

// "a directory", "a FIFO", ...: what a file that is not a regular file is.
std::string KindOf(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

void WriteAll(int fd, const fs::path& path, const void* data, size_t size) {
  const char* bytes = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t written = ::write(fd, bytes, size);
    if (written < 0 && errno == EINTR) continue;
    if (written < 0) {
      Fail("cannot write {}: {}; check free disk space", path.string(), ErrnoText(errno));
    }
    bytes += written;
    size -= static_cast<size_t>(written);
  }
}

// 64 bits from the kernel's random source, so that temporary names cannot be
// guessed (and planted) by another user.
uint64_t RandomBits() {
  uint64_t value = 0;
  char* at = reinterpret_cast<char*>(&value);
  size_t left = sizeof(value);
  while (left > 0) {
    const ssize_t n = ::getrandom(at, left, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    at += n;
    left -= static_cast<size_t>(n);
  }
  if (left > 0) {  // no getrandom (very old kernels): the C++ library's source
    std::random_device device;
    value = (uint64_t{device()} << 32) ^ device();
  }
  return value;
}

std::string RandomSuffix() { return fmt::format("{:016x}", RandomBits()); }

// The longest part of a destination's name a temporary keeps, so that the
// temporary's name stays within NAME_MAX (255).
constexpr size_t kTempNameKeep = 200;

}  // namespace

std::string ErrnoText(int error) { return std::generic_category().message(error); }

OutputFile::OutputFile(const std::filesystem::path& path) : path_(path) {
  // O_NONBLOCK: opening a FIFO must not wait for a reader (it is refused below).
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK,
               0644);
  struct stat info {};
  if (fd_ < 0) {
    const int error = errno;
    // Something that is not a regular file (a link: ELOOP; a FIFO without a
    // reader: ENXIO) is named as what it is.
    if (::lstat(path.c_str(), &info) == 0 && !S_ISREG(info.st_mode)) {
      Fail("cannot create {}: it is {}, and weft writes only regular files here; remove it",
           path.string(), KindOf(info.st_mode));
    }
    Fail("cannot create {}: {}; check that the directory exists and is writable", path.string(),
         ErrnoText(error));
  }
  const bool known = ::fstat(fd_, &info) == 0;
  if (!known || !S_ISREG(info.st_mode)) {
    const std::string kind = known ? KindOf(info.st_mode) : "unreadable";
    ::close(fd_);
    fd_ = -1;
    Fail("cannot create {}: it is {}, and weft writes only regular files here; remove it",
         path.string(), kind);
  }
  ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);
}

OutputFile::~OutputFile() {
  if (fd_ >= 0) ::close(fd_);
}

void OutputFile::Write(const void* data, size_t size) {
  WEFT_INTERNAL_CHECK(fd_ >= 0, "write to {} after it was closed", path_.string());
  WriteAll(fd_, path_, data, size);
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
  std::string name = path.filename().string();
  if (name.size() > kTempNameKeep) name.resize(kTempNameKeep);
  name += tag;
  name += RandomSuffix();
  return path.parent_path() / name;
}

std::filesystem::path CreateUniqueSiblingDirectory(const std::filesystem::path& path,
                                                   std::string_view tag) {
  for (int attempt = 0;; ++attempt) {
    const fs::path candidate = UniqueSiblingPath(path, tag);
    if (::mkdir(candidate.c_str(), 0755) == 0) return candidate;
    const int error = errno;
    if (error == EEXIST && attempt < 100) continue;  // a name taken by chance: draw another
    Fail(
        "cannot create the temporary directory {} for {}: {}; check that {} is a writable "
        "directory",
        candidate.string(), path.string(), ErrnoText(error), ParentOrDot(path).string());
  }
}

AtomicOutputFile::AtomicOutputFile(const std::filesystem::path& path, OutputTarget target)
    : path_(path), final_(path), target_(target) {
  struct stat info {};
  if (target == OutputTarget::kUserPath) {
    if (::stat(path.c_str(), &info) == 0) {
      if (S_ISCHR(info.st_mode) || S_ISFIFO(info.st_mode)) {
        // Written in place: renaming over /dev/null or a pipe would replace it.
        fd_ = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY);
        if (fd_ < 0) Fail("cannot open {} for writing: {}", path.string(), ErrnoText(errno));
        if (::fstat(fd_, &info) != 0 || !(S_ISCHR(info.st_mode) || S_ISFIFO(info.st_mode))) {
          ::close(fd_);
          fd_ = -1;
          Fail("{} changed while weft opened it; nothing was written, try again", path.string());
        }
        return;
      }
      WEFT_CHECK(!S_ISDIR(info.st_mode), "{} is a directory; give the name of a file to write",
                 path.string());
      WEFT_CHECK(S_ISREG(info.st_mode),
                 "{} is {}; weft writes regular files (replacing them whole), character devices "
                 "such as /dev/null and FIFOs: give another path",
                 path.string(), KindOf(info.st_mode));
      struct stat link {};
      if (::lstat(path.c_str(), &link) == 0 && S_ISLNK(link.st_mode)) {
        // The user's link stays; the regular file it names is replaced.
        std::error_code error;
        final_ = fs::canonical(path, error);
        if (error) Fail("cannot resolve the link {}: {}", path.string(), error.message());
      }
    } else if (errno == ENOENT && ::lstat(path.c_str(), &info) == 0 && S_ISLNK(info.st_mode)) {
      std::error_code error;
      Fail(
          "{} is a symbolic link to {}, which does not exist; weft does not create files through "
          "dangling links: give the path itself",
          path.string(), fs::read_symlink(path, error).string());
    }
  } else if (::lstat(path.c_str(), &info) == 0) {
    WEFT_CHECK(!S_ISLNK(info.st_mode),
               "{} is a symbolic link; weft never writes through, or replaces, a link among the "
               "files it manages: remove it (or give another directory)",
               path.string());
    WEFT_CHECK(S_ISREG(info.st_mode),
               "{} is {}, not a regular file; weft replaces only regular files there: remove it "
               "(or give another directory)",
               path.string(), KindOf(info.st_mode));
  }
  name_ = final_.filename().string();
  WEFT_CHECK(!name_.empty() && name_ != "." && name_ != "..",
             "{} names a directory; give the name of a file to write", path.string());
  const fs::path dir = ParentOrDot(final_);
  dir_fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd_ < 0) {
    Fail("cannot create {}: {}; check that the directory exists and is writable", path.string(),
         ErrnoText(errno));
  }
  for (int attempt = 0;; ++attempt) {
    temp_name_ = UniqueSiblingPath(name_, ".tmp-").string();
    // O_EXCL | O_NOFOLLOW: a name planted by anyone else is never opened.
    fd_ = ::openat(dir_fd_, temp_name_.c_str(),
                   O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd_ >= 0) break;
    const int error = errno;
    if (error == EEXIST && attempt < 100) continue;
    temp_name_.clear();
    Fail("cannot create {}: {}; check that the directory exists and is writable",
         (dir / UniqueSiblingPath(name_, ".tmp-")).string(), ErrnoText(error));
  }
}

AtomicOutputFile::~AtomicOutputFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !temp_name_.empty()) ::unlinkat(dir_fd_, temp_name_.c_str(), 0);
  if (dir_fd_ >= 0) ::close(dir_fd_);
}

void AtomicOutputFile::Write(const void* data, size_t size) {
  WEFT_INTERNAL_CHECK(fd_ >= 0 && !committed_, "write to {} after it was committed",
                      path_.string());
  WriteAll(fd_, path_, data, size);
}

void AtomicOutputFile::Commit() {
  WEFT_INTERNAL_CHECK(!committed_ && fd_ >= 0, "{} committed twice", path_.string());
  const int fd = fd_;
  fd_ = -1;
  if (temp_name_.empty()) {  // a device or FIFO, written in place
    committed_ = true;
    if (::close(fd) != 0) Fail("cannot close {}: {}", path_.string(), ErrnoText(errno));
    return;
  }
  if (::fsync(fd) != 0) {
    const int error = errno;
    ::close(fd);
    Fail("cannot flush {} to disk: {}", path_.string(), ErrnoText(error));
  }
  if (::close(fd) != 0) Fail("cannot close {}: {}", path_.string(), ErrnoText(errno));
  // What was checked when the file was opened may have changed since: only a
  // regular file (or nothing) is ever renamed over.
  struct stat info {};
  if (::fstatat(dir_fd_, name_.c_str(), &info, AT_SYMLINK_NOFOLLOW) == 0) {
    WEFT_CHECK(S_ISREG(info.st_mode),
               "{} became {} while weft wrote it; weft replaces only regular files, so it is left "
               "as it is and nothing was written",
               final_.string(), KindOf(info.st_mode));
  }
  if (::renameat(dir_fd_, temp_name_.c_str(), dir_fd_, name_.c_str()) != 0) {
    Fail("cannot rename {} to {}: {}", (ParentOrDot(final_) / temp_name_).string(), final_.string(),
         ErrnoText(errno));
  }
  committed_ = true;
  const int result = ::fsync(dir_fd_);
  const int error = errno;
  // Some filesystems refuse fsync on directories; the rename is still done.
  if (result != 0 && error != EINVAL && error != EROFS) {
    Fail("cannot flush directory {} to disk: {}", ParentOrDot(final_).string(), ErrnoText(error));
  }
}

void WriteFileAtomically(const std::filesystem::path& path, std::string_view contents,
                         OutputTarget target) {
  AtomicOutputFile file(path, target);
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
