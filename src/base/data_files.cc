#include "weft/base/data_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

#include "weft/base/env.h"
#include "weft/base/error.h"
#include "weft/base/memory.h"

namespace weft {

std::filesystem::path FindDataFile(std::string_view relative) {
  namespace fs = std::filesystem;
  const fs::path given(relative);
  std::error_code error;
  if (fs::exists(given, error) || given.is_absolute()) return given;
  if (auto dir = GetEnv("WEFT_DATA_DIR")) {
    if (fs::exists(fs::path(*dir) / given, error)) return fs::path(*dir) / given;
  }
  const fs::path executable = fs::read_symlink("/proc/self/exe", error);
  if (!error) {
    // <prefix>/bin/weft; <build>/apps/weft/weft and <build>/tests/<module>/<test>.
    const fs::path parent = executable.parent_path().parent_path();
    for (const fs::path& dir : {parent, parent.parent_path()}) {
      const fs::path candidate = dir / "share" / "weft" / given;
      if (fs::exists(candidate, error)) return candidate;
    }
  }
  return given;
}

namespace {

const char* FileKind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// Opens `path` for reading and refuses, by name, what is not a regular file
// of at most max_bytes; returns the descriptor and sets *size.
int OpenInputFile(const std::filesystem::path& path, std::string_view what, int64_t max_bytes,
                  int64_t* size_out) {
  // O_NONBLOCK: opening a FIFO for reading does not wait for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    const int error = errno;
    Fail("cannot open {} {}: {}; check the path", what, path.string(), std::strerror(error));
  }
  struct Closer {
    int fd;
    ~Closer() {
      if (fd >= 0) ::close(fd);
    }
  } closer{fd};
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    const int error = errno;
    Fail("cannot read {} {}: {}", what, path.string(), std::strerror(error));
  }
  if (!S_ISREG(info.st_mode)) {
    Fail("{} {} is {}; give a regular file", what, path.string(), FileKind(info.st_mode));
  }
  const int64_t size = info.st_size;
  if (size > max_bytes) {
    Fail(
        "{} {} is {} ({} bytes), more than the {} ({} bytes) weft reads as a {}; check that it "
        "is the file you meant",
        what, path.string(), FormatBytes(size), size, FormatBytes(max_bytes), max_bytes, what);
  }
  *size_out = size;
  closer.fd = -1;
  return fd;
}

}  // namespace

int64_t CheckInputFile(const std::filesystem::path& path, std::string_view what,
                       int64_t max_bytes) {
  int64_t size = 0;
  ::close(OpenInputFile(path, what, max_bytes, &size));
  return size;
}

std::string ReadInputFile(const std::filesystem::path& path, std::string_view what,
                          int64_t max_bytes) {
  int64_t size = 0;
  const int fd = OpenInputFile(path, what, max_bytes, &size);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  std::string bytes(static_cast<size_t>(size), '\0');
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n =
        ::pread(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      Fail("cannot read {} {}: {}", what, path.string(), std::strerror(error));
    }
    if (n == 0) {
      Fail("{} {} ended at byte {} of the {} it had when opened (changed while read?)", what,
           path.string(), done, size);
    }
    done += static_cast<size_t>(n);
  }
  return bytes;
}

}  // namespace weft
