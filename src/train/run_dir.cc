#include "weft/train/run_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <system_error>

#include "weft/base/atomic_file.h"
#include "weft/base/data_files.h"
#include "weft/base/error.h"

namespace weft {
namespace {

namespace fs = std::filesystem;

constexpr const char* kLockFile = ".lock";

// The pid a holder wrote into the lock file, or "?" when it cannot be read.
std::string HolderPid(int fd) {
  char buffer[32] = {};
  const ssize_t n = ::pread(fd, buffer, sizeof(buffer) - 1, 0);
  std::string text = n > 0 ? std::string(buffer, static_cast<size_t>(n)) : std::string();
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text.empty() ? std::string("?") : text;
}

// The nearest ancestor of `dir` (or `dir` itself) that exists.
fs::path NearestExisting(const fs::path& dir) {
  fs::path p = fs::absolute(dir).lexically_normal();
  std::error_code error;
  while (!fs::exists(p, error) && p.has_parent_path() && p.parent_path() != p) p = p.parent_path();
  return p;
}

// The entries of a run directory that weft writes, replaces or removes, and
// what each must be where it exists. Weft never writes through, or replaces,
// a symbolic link it did not make: a link (or another kind of file) in one of
// these places is refused by name before anything is written.
struct ManagedEntry {
  const char* name;
  bool directory;
};
constexpr ManagedEntry kManagedEntries[] = {
    {kLockFile, false},         {"checkpoint", true}, {"metrics.jsonl", false},
    {"tokenizer.model", false}, {"loss.svg", false},
};

void CheckManagedEntries(const fs::path& dir) {
  for (const ManagedEntry& entry : kManagedEntries) {
    const fs::path path = dir / entry.name;
    struct stat info {};
    if (::lstat(path.c_str(), &info) != 0) continue;  // absent
    WEFT_CHECK(!S_ISLNK(info.st_mode),
               "{} is a symbolic link; weft never writes through, or replaces, a link in a run "
               "directory: remove it (copy what it names there if the run needs it), or give "
               "another --out",
               path.string());
    WEFT_CHECK(entry.directory ? S_ISDIR(info.st_mode) : S_ISREG(info.st_mode),
               "{} is not a {}, which weft writes there; remove it, or give another --out",
               path.string(), entry.directory ? "directory" : "regular file");
  }
}

}  // namespace

void CheckDirectoryWritable(const fs::path& dir, std::string_view flag) {
  std::error_code error;
  if (fs::exists(dir, error)) {
    WEFT_CHECK(fs::is_directory(dir, error),
               "{} {}: exists and is not a directory; give a "
               "directory (or a path that does not exist yet)",
               flag, dir.string());
    WEFT_CHECK(::access(dir.c_str(), W_OK | X_OK) == 0,
               "{} {}: this process cannot write into it ({}); give a writable directory", flag,
               dir.string(), ErrnoText(errno));
    return;
  }
  const fs::path base = NearestExisting(dir);
  WEFT_CHECK(fs::is_directory(base, error),
             "{} {}: cannot be created, because {} is not a directory; give another path", flag,
             dir.string(), base.string());
  WEFT_CHECK(::access(base.c_str(), W_OK | X_OK) == 0,
             "{} {}: cannot be created: {} is not writable ({}); give a writable location", flag,
             dir.string(), base.string(), ErrnoText(errno));
}

RunDirLock::RunDirLock(const fs::path& dir) : dir_(dir) {
  std::error_code error;
  if (!fs::exists(dir, error)) {
    const fs::path base = NearestExisting(dir);
    fs::create_directories(dir, error);
    if (error) {
      Fail("cannot create the run directory {}: {}; give a writable --out", dir.string(),
           error.message());
    }
    // The outermost directory created: the child of `base` on the way to dir.
    fs::path created = fs::absolute(dir).lexically_normal();
    while (created.has_parent_path() && created.parent_path() != base) {
      created = created.parent_path();
    }
    created_ = created;
  }
  WEFT_CHECK(fs::is_directory(dir, error),
             "--out {}: exists and is not a directory; give a directory", dir.string());
  CheckManagedEntries(dir);
  const fs::path lock = dir / kLockFile;
  // O_NOFOLLOW: a link planted since the check is refused, never followed.
  fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
  struct stat info {};
  if (fd_ >= 0 && (::fstat(fd_, &info) != 0 || !S_ISREG(info.st_mode))) {
    ::close(fd_);
    fd_ = -1;
    errno = ELOOP;
  }
  if (fd_ < 0) {
    const int saved = errno;
    if (!created_.empty()) fs::remove_all(created_, error);
    WEFT_CHECK(saved != ELOOP,
               "{} is not a regular file (a symbolic link?); weft never writes through it: "
               "remove it, or give another --out",
               lock.string());
    Fail("cannot open {}: {}; give a writable --out", lock.string(), ErrnoText(saved));
  }
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int saved = errno;
    const std::string holder = HolderPid(fd_);
    ::close(fd_);
    fd_ = -1;
    if (saved == EWOULDBLOCK) {
      Fail(
          "{} is in use by another weft process (pid {}, holding {}); wait for it to end, or "
          "give another --out",
          dir.string(), holder, lock.string());
    }
    Fail("cannot lock {}: {}", lock.string(), ErrnoText(saved));
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) < 0) {
    const int saved = errno;
    ::close(fd_);
    fd_ = -1;
    if (!created_.empty()) fs::remove_all(created_, error);
    Fail("cannot write {}: {}; give a writable --out", lock.string(), ErrnoText(saved));
  }
}

RunDirLock::~RunDirLock() {
  std::error_code error;
  if (!keep_ && !created_.empty()) {
    // Only the lock file was ever written here; anything else means the run
    // wrote after all, and then the directory stays.
    fs::remove(dir_ / kLockFile, error);
    for (fs::path p = fs::absolute(dir_).lexically_normal();; p = p.parent_path()) {
      if (!fs::remove(p, error)) break;  // not empty (or not ours): stop
      if (p == created_) break;
    }
  }
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

std::vector<RunMetricsLine> ReadRunMetrics(const std::filesystem::path& path) {
  constexpr std::streamsize kMaxLineBytes = 64 * 1024;
  std::vector<RunMetricsLine> out;
  std::error_code ec;
  if (!std::filesystem::exists(std::filesystem::symlink_status(path, ec))) return out;
  // The size is not limited: the file is streamed.
  CheckInputFile(path, "metrics file", std::numeric_limits<int64_t>::max());
  std::ifstream in(path, std::ios::binary);
  std::string buffer(kMaxLineBytes + 1, '\0');
  while (in) {
    in.getline(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    const std::streamsize got = in.gcount();    // the newline included when read
    if (in.fail() && !in.eof() && !in.bad()) {  // over the limit: skip the rest of the line
      in.clear();
      in.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
      continue;
    }
    if (got == 0) break;
    const std::string line(buffer.data(), static_cast<size_t>(in.eof() ? got : got - 1));
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) continue;
    const auto step = j.find("step");
    if (step == j.end() || !step->is_number_integer()) continue;
    RunMetricsLine m;
    m.text = line;
    m.step = step->get<int64_t>();
    const auto loss = j.find("loss");
    if (loss != j.end() && loss->is_number()) m.loss = loss->get<double>();
    const auto val = j.find("val_loss");
    if (val != j.end() && val->is_number()) m.validation_loss = val->get<double>();
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace weft
