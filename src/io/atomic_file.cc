// Atomic file writes (atomic_file.h): the temporary file's lifetime, the sync and the rename.
#include "io/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <stdexcept>
#include <system_error>

namespace tg::io {
namespace {

std::string in_quotes(const std::string& name) { return "'" + name + "'"; }

[[noreturn]] void fail_errno(const std::string& what) {
  const int err = errno;  // before anything else can change it
  throw std::runtime_error(what + ": " + std::system_category().message(err));
}

/// The temporary file of an atomic write: removed on destruction unless committed.
class TempFile {
 public:
  explicit TempFile(std::string tmp_path) : path_(std::move(tmp_path)) {
    f_ = std::fopen(path_.c_str(), "wb");
    if (!f_) fail_errno("cannot create temporary file " + in_quotes(path_));
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile() {
    if (f_) std::fclose(f_);
    if (!committed_) std::remove(path_.c_str());
  }

  void write(const void* data, size_t n) {
    if (n != 0 && std::fwrite(data, 1, n, f_) != n) fail_errno("cannot write " + in_quotes(path_));
  }

  /// Flushes to disk, closes and renames over `target`.
  void commit(const std::string& target) {
    if (std::fflush(f_) != 0) fail_errno("cannot write " + in_quotes(path_));
    if (::fsync(::fileno(f_)) != 0) fail_errno("cannot sync " + in_quotes(path_));
    const int rc = std::fclose(f_);
    f_ = nullptr;
    if (rc != 0) fail_errno("cannot close " + in_quotes(path_));
    if (std::rename(path_.c_str(), target.c_str()) != 0)
      fail_errno("cannot rename " + in_quotes(path_) + " to " + in_quotes(target));
    committed_ = true;
  }

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
  bool committed_ = false;
};

/// Deletes `<path>.tmp.<pid>.<n>` files left by writes whose process has died (killed while
/// writing): a temporary file of a live process, this one included, may be a write in progress.
void remove_orphaned_temp_files(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const std::string prefix = target.filename().string() + ".tmp.";
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string rest = name.substr(prefix.size());  // <pid>.<n>
    const size_t dot = rest.find('.');
    const auto digits = [](const std::string& t) {
      return !t.empty() && t.size() < 19 &&
             std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; });
    };
    if (dot == std::string::npos || !digits(rest.substr(0, dot)) || !digits(rest.substr(dot + 1))) continue;
    const long long pid = std::stoll(rest.substr(0, dot));
    if (pid <= 0 || pid > std::numeric_limits<pid_t>::max() || pid == ::getpid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to judge
    std::error_code ignored;
    fs::remove(it->path(), ignored);
  }
}

/// Makes the rename itself durable. Best effort: some file systems refuse fsync on a folder,
/// and the file is complete either way.
void sync_parent_directory(const std::string& path) {
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
}

}  // namespace

void write_file_atomically(const std::string& path, const std::function<void(const ByteSink&)>& fill) {
  // pid + a per-process counter: concurrent writes to one path never share a temporary file.
  static std::atomic<uint64_t> counter{0};
  remove_orphaned_temp_files(path);
  TempFile tmp(path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++));
  fill([&tmp](const void* data, size_t n) { tmp.write(data, n); });
  tmp.commit(path);
  sync_parent_directory(path);
}

void write_file_atomically(const std::string& path, std::string_view text) {
  write_file_atomically(path, [text](const ByteSink& write) { write(text.data(), text.size()); });
}

}  // namespace tg::io
