// Atomic file writes: a reader, or a crash at any point, sees the old file or the whole new
// one, never a part of the new one.
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace tg::io {

/// Writes the bytes of one file; throws on failure.
using ByteSink = std::function<void(const void* data, size_t n)>;

/// Writes `path` through a temporary file `<path>.tmp.<pid>.<n>` in the same folder: `fill`
/// writes the contents through the sink it is given; the file is then flushed, fsynced and
/// renamed over `path`, and the folder is synced. On any failure, `fill`'s own exceptions
/// included, the temporary file is removed and `path` is as it was; failures of the file
/// system throw std::runtime_error saying what failed and why ("cannot create temporary file
/// '…': No such file or directory"). Temporary files that earlier writes to `path` left when
/// their process died are deleted first.
void write_file_atomically(const std::string& path, const std::function<void(const ByteSink&)>& fill);

/// write_file_atomically of the bytes of `text`.
void write_file_atomically(const std::string& path, std::string_view text);

}  // namespace tg::io
