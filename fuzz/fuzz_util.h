// Shared by the fuzz targets: the input as a file (the readers take paths), in memory.
#pragma once
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace tg_fuzz {

/// An anonymous in-memory file holding `data`, open for the lifetime of this object; path()
/// names it for functions that open files by path (/proc/self/fd/N is a regular file).
class MemFile {
 public:
  MemFile(const uint8_t* data, size_t size) : fd_(::memfd_create("tg_fuzz", MFD_CLOEXEC)) {
    if (fd_ < 0) __builtin_trap();
    for (size_t done = 0; done < size;) {
      const ssize_t n = ::write(fd_, data + done, size - done);
      if (n <= 0) __builtin_trap();
      done += static_cast<size_t>(n);
    }
  }
  ~MemFile() { ::close(fd_); }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;
  std::string path() const { return "/proc/self/fd/" + std::to_string(fd_); }

 private:
  int fd_;
};

}  // namespace tg_fuzz
