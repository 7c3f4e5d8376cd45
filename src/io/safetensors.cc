// Safetensors checkpoints (include/tensorgrad/checkpoint.h). A file is an 8-byte
// little-endian header length N, N bytes of JSON ({"name": {"dtype", "shape",
// "data_offsets": [begin, end]}, "__metadata__": {string: string}}) padded with spaces, then
// the raw little-endian tensor data, offsets relative to its start. Files are untrusted
// input: every length and offset is checked against the real file size before anything is
// allocated or read, the layout must be exactly what the official library accepts (offsets
// contiguous, no overlaps, gaps or trailing bytes), and each problem becomes a
// CheckpointError naming the file and the tensor. Writes go through a temporary file that
// is fsynced and renamed over the target, so the target is never seen half-written.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <optional>
#include <set>
#include <system_error>
#include <tuple>
#include <utility>

#include "io/atomic_file.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "tensorgrad/checkpoint.h"
#include "tensorgrad/quantize.h"

namespace tg {
namespace {

static_assert(
    std::endian::native == std::endian::little,
    "safetensors data is little-endian and is copied as raw bytes; big-endian hosts need byte swapping");

// The official reader's limit: a larger header is corruption, and we must not allocate it.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr const char* kMetadataKey = "__metadata__";

/// The API being called and the file, for error messages.
struct Where {
  const char* api;
  const std::string& path;
};

[[noreturn]] void fail(const Where& w, const std::string& what) {
  throw CheckpointError(std::string("[") + w.api + "] " + w.path + ": " + what);
}

std::string errno_text(int err) { return std::system_category().message(err); }
std::string in_quotes(const std::string& name) { return "'" + name + "'"; }
std::string tensor_label(const std::string& name) { return "tensor " + in_quotes(name); }

const char* file_dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kI32: return "I32";
    case DType::kBool: return "BOOL";
    case DType::kBF16: return "BF16";
    case DType::kF16: return "F16";
    case DType::kI8: return "I8";
  }
  return "?";
}

std::optional<DType> dtype_from_file_name(const std::string& s) {
  if (s == "F32") return DType::kF32;
  if (s == "I32") return DType::kI32;
  if (s == "BOOL") return DType::kBool;
  if (s == "BF16") return DType::kBF16;
  if (s == "F16") return DType::kF16;
  if (s == "I8") return DType::kI8;
  return std::nullopt;
}

/// Names the safetensors format defines (so that "unsupported" and "garbage" read differently).
bool is_format_dtype(const std::string& s) {
  static const std::set<std::string> kKnown = {
      "BOOL", "U8",  "I8",   "F8_E5M2", "F8_E4M3", "F8_E8M0", "F4",  "F6_E2M3", "F6_E3M2", "I16",
      "U16",  "F16", "BF16", "I32",     "U32",     "F32",     "F64", "I64",     "U64",     "C64"};
  return kKnown.count(s) != 0;
}

/// Position in the official library's Dtype enum, whose writer puts larger-alignment dtypes
/// first so every tensor's data stays aligned for zero-copy mmap readers.
int layout_rank(DType t) {
  switch (t) {
    case DType::kBool: return 0;
    case DType::kI8: return 1;
    case DType::kF16: return 2;
    case DType::kBF16: return 3;
    case DType::kI32: return 4;
    case DType::kF32: return 5;
  }
  return 0;
}

std::string join_names(const std::vector<std::string>& names, size_t limit = 12) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < limit; ++i) s += (i ? ", " : "") + in_quotes(names[i]);
  if (names.size() > limit) s += ", … (" + std::to_string(names.size() - limit) + " more)";
  return s.empty() ? "(none)" : s;
}

class File {
 public:
  explicit File(std::FILE* f) : f_(f) {}
  File(File&& other) noexcept : f_(std::exchange(other.f_, nullptr)) {}
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  ~File() {
    if (f_) std::fclose(f_);
  }
  std::FILE* get() const { return f_; }

 private:
  std::FILE* f_;
};

// ---- reading ----

struct Entry {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  uint64_t begin = 0, end = 0;
  bool skipped = false;    // a dtype the library does not hold, left out at the caller's word
  std::string file_dtype;  // the file's name of its dtype ("F32", "U8", "F8_E4M3", …)
};

/// Which tensors of an unsupported dtype to leave out rather than refuse (none when empty).
using SkipFn = std::function<bool(const std::string&)>;

/// Bytes per element of the format's fixed-width dtypes the library does not hold.
uint64_t format_dtype_bytes(const std::string& s) {
  if (!is_format_dtype(s)) return 0;
  if (s == "F64" || s == "I64" || s == "U64" || s == "C64") return 8;
  if (s == "I32" || s == "U32" || s == "F32") return 4;
  if (s == "I16" || s == "U16" || s == "F16" || s == "BF16") return 2;
  if (s == "U8" || s == "I8" || s == "BOOL" || s.starts_with("F8")) return 1;
  return 0;  // F4, F6: sub-byte, never skipped
}

struct Header {
  std::vector<Entry> entries;  // sorted by data offset
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // 8 + header length
};

File open_for_read(const Where& w, uint64_t* size) {
  // Opened non-blocking so that a FIFO or a device cannot stall the open; checked to be a
  // regular file (a directory or a FIFO would fail or block later) before anything is read.
  const int fd = ::open(w.path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) fail(w, "cannot open: " + errno_text(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const int err = errno;
    const bool regular = S_ISREG(st.st_mode);
    ::close(fd);
    fail(w, regular ? "cannot stat: " + errno_text(err) : "not a regular file");
  }
  const int flags = ::fcntl(fd, F_GETFL);
  std::FILE* f = flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0 ? nullptr : ::fdopen(fd, "rb");
  if (!f) {
    const int err = errno;
    ::close(fd);
    fail(w, "cannot open: " + errno_text(err));
  }
  *size = static_cast<uint64_t>(st.st_size);
  return File(f);
}

void read_exact(const Where& w, std::FILE* f, uint64_t offset, void* dst, uint64_t n,
                const std::string& what) {
  if (n == 0) return;
  if (::fseeko(f, static_cast<off_t>(offset), SEEK_SET) != 0)
    fail(w, "cannot seek to " + what + ": " + errno_text(errno));
  if (std::fread(dst, 1, n, f) != n) {
    if (std::ferror(f)) fail(w, "cannot read " + what + ": " + errno_text(errno));
    fail(w, "unexpected end of file while reading " + what + " (was the file changed while being read?)");
  }
}

uint64_t non_negative_integer(const Where& w, const io::JsonValue& v, const std::string& context) {
  if (v.kind != io::JsonValue::Kind::kNumber || !v.is_integer || v.integer < 0)
    fail(w, context + " must hold non-negative integers");
  return static_cast<uint64_t>(v.integer);
}

std::string offsets_str(const Entry& e) {
  return "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "]";
}

Entry parse_entry(const Where& w, const std::string& name, const io::JsonValue& v, const SkipFn& skip) {
  const std::string t = tensor_label(name) + ": ";
  if (!v.is_object()) fail(w, t + "header entry is not a JSON object");
  const io::JsonValue* dtype = v.find("dtype");
  const io::JsonValue* shape = v.find("shape");
  const io::JsonValue* offsets = v.find("data_offsets");
  if (!dtype) fail(w, t + "header entry has no \"dtype\"");
  if (!shape) fail(w, t + "header entry has no \"shape\"");
  if (!offsets) fail(w, t + "header entry has no \"data_offsets\"");

  if (!dtype->is_string()) fail(w, t + "\"dtype\" is not a string");
  std::optional<DType> dt = dtype_from_file_name(dtype->string);
  const uint64_t skipped_bytes = dt ? 0 : format_dtype_bytes(dtype->string);
  const bool skipped = skipped_bytes > 0 && skip && skip(name);
  if (skipped) dt = DType::kF32;  // unused: the entry only keeps its place in the layout
  if (!dt && is_format_dtype(dtype->string))
    fail(w, t + "dtype " + dtype->string +
                " is not supported (tensorgrad reads F32, BF16, F16, I32, I8 and BOOL; convert when writing, "
                "e.g. "
                "tensor.float())");
  if (!dt) fail(w, t + "unknown dtype " + in_quotes(dtype->string));
  Entry e{name, *dt, {}, 0, 0, skipped, dtype->string};

  if (!shape->is_array()) fail(w, t + "\"shape\" is not an array");
  int64_t numel = 1;
  for (const io::JsonValue& d : shape->array) {
    const auto extent = static_cast<int64_t>(non_negative_integer(w, d, t + "\"shape\""));
    if (__builtin_mul_overflow(numel, extent, &numel)) fail(w, t + "shape is too large");
    e.shape.push_back(extent);
  }
  int64_t bytes = 0;
  const int64_t element = skipped ? static_cast<int64_t>(skipped_bytes) : dtype_size(*dt);
  if (__builtin_mul_overflow(numel, element, &bytes)) fail(w, t + "shape is too large");

  if (!offsets->is_array() || offsets->array.size() != 2)
    fail(w, t + "\"data_offsets\" is not an array of two integers");
  e.begin = non_negative_integer(w, offsets->array[0], t + "\"data_offsets\"");
  e.end = non_negative_integer(w, offsets->array[1], t + "\"data_offsets\"");
  if (e.begin > e.end) fail(w, t + offsets_str(e) + " are out of order (begin > end)");
  if (e.end - e.begin != static_cast<uint64_t>(bytes))
    fail(w, t + offsets_str(e) + " cover " + std::to_string(e.end - e.begin) + " bytes, but " +
                dtype->string + shape_str(e.shape) + " needs " + std::to_string(bytes));
  return e;
}

void parse_metadata(const Where& w, const io::JsonValue& v, std::map<std::string, std::string>& out) {
  if (!v.is_object()) fail(w, "\"__metadata__\" is not a JSON object");
  for (const auto& [key, value] : v.object) {
    if (!value.is_string()) fail(w, "\"__metadata__\" entry " + in_quotes(key) + " is not a string");
    if (!out.emplace(key, value.string).second)
      fail(w, "\"__metadata__\" has the key " + in_quotes(key) + " twice");
  }
}

/// Sorts the entries by offset and requires them to tile the data section exactly, as the
/// official reader does: anything else is a corrupt or truncated file.
void check_layout(const Where& w, std::vector<Entry>& entries, uint64_t data_size) {
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  // Out-of-range offsets first: in a truncated file that is the problem, not a gap.
  for (const Entry& e : entries)
    if (e.end > data_size)
      fail(w, tensor_label(e.name) + ": " + offsets_str(e) + " lie outside the data section (" +
                  std::to_string(data_size) + " bytes; truncated file?)");
  uint64_t cursor = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : entries) {
    const std::string t = tensor_label(e.name) + ": " + offsets_str(e);
    if (e.begin < cursor) fail(w, t + " overlap " + tensor_label(prev->name) + "'s " + offsets_str(*prev));
    if (e.begin > cursor)
      fail(w, t + " leave a gap of " + std::to_string(e.begin - cursor) + " bytes after " +
                  (prev ? tensor_label(prev->name) : std::string("the start of the data section")));
    cursor = e.end;
    prev = &e;
  }
  if (cursor != data_size)
    fail(w, std::to_string(data_size - cursor) + " bytes follow the last tensor's data" +
                (prev ? " (" + tensor_label(prev->name) + ")" : std::string()) +
                "; the data section must be exactly covered");
}

Header read_header(const Where& w, std::FILE* f, uint64_t file_size, const SkipFn& skip = {}) {
  if (file_size < 8)
    fail(w, "file is " + std::to_string(file_size) +
                " bytes, shorter than the 8-byte header length (truncated?)");
  unsigned char prefix[8];
  read_exact(w, f, 0, prefix, 8, "the header length");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(prefix[i]) << (8 * i);
  if (n > kMaxHeaderBytes)
    fail(w, "header length " + std::to_string(n) +
                " exceeds the 100 MB limit (corrupt or not a safetensors file)");
  if (n > file_size - 8)
    fail(w, "header length " + std::to_string(n) + " runs past the end of the file (" +
                std::to_string(file_size) + " bytes; truncated?)");
  std::string text(n, '\0');
  read_exact(w, f, 8, text.data(), n, "the header");

  io::JsonValue root;
  try {
    root = io::parse_json(text);
  } catch (const io::JsonError& e) {
    fail(w, std::string("header is not valid JSON: ") + e.what());
  }
  if (!root.is_object()) fail(w, "header is not a JSON object");

  Header h;
  h.data_start = 8 + n;
  std::set<std::string> seen;
  for (const auto& [name, value] : root.object) {
    if (!seen.insert(name).second)
      fail(w, name == kMetadataKey ? std::string("\"__metadata__\" appears twice")
                                   : tensor_label(name) + " appears twice in the header");
    if (name == kMetadataKey)
      parse_metadata(w, value, h.metadata);
    else
      h.entries.push_back(parse_entry(w, name, value, skip));
  }
  check_layout(w, h.entries, file_size - h.data_start);
  return h;
}

std::map<std::string, HostTensor> read_tensors(const Where& w, std::FILE* f, const Header& h) {
  std::map<std::string, HostTensor> out;
  for (const Entry& e : h.entries) {
    if (e.skipped) continue;
    HostTensor t(e.dtype, e.shape);
    read_exact(w, f, h.data_start + e.begin, t.data(), e.end - e.begin, tensor_label(e.name));
    if (e.dtype == DType::kBool) {
      // Our bools are 0/1 bytes; anything else would make logical ops disagree by backend.
      const auto* b = static_cast<const uint8_t*>(t.data());
      for (int64_t i = 0; i < t.numel(); ++i)
        if (b[i] > 1)
          fail(w, tensor_label(e.name) + ": BOOL element " + std::to_string(i) + " is " +
                      std::to_string(b[i]) + ", not 0 or 1");
    }
    out.emplace(e.name, std::move(t));
  }
  return out;
}

/// Runs `body`, turning any non-checkpoint exception (a failed upload, bad_alloc, …) into a
/// CheckpointError that names the file.
template <class F>
auto rethrow_as_checkpoint_error(const Where& w, F&& body) {
  try {
    return body();
  } catch (const CheckpointError&) {
    throw;
  } catch (const std::exception& e) {
    fail(w, e.what());
  }
}

// ---- writing ----

void write_safetensors(const Where& w, const std::map<std::string, HostTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  for (const auto& [key, value] : metadata)
    if (!io::is_valid_utf8(key) || !io::is_valid_utf8(value))
      fail(w,
           "metadata entry " + in_quotes(key) + " is not valid UTF-8 (safetensors headers are UTF-8 JSON)");

  using Item = std::pair<const std::string*, const HostTensor*>;
  std::vector<Item> order;
  for (const auto& [name, t] : tensors) {
    if (name == kMetadataKey) fail(w, "a tensor cannot be named \"__metadata__\" (the key is reserved)");
    if (!io::is_valid_utf8(name)) fail(w, tensor_label(name) + ": the name is not valid UTF-8");
    order.emplace_back(&name, &t);
  }
  std::stable_sort(order.begin(), order.end(), [](const Item& a, const Item& b) {
    return layout_rank(a.second->dtype()) >
           layout_rank(b.second->dtype());  // names stay sorted within a dtype
  });

  std::string header = "{";
  if (!metadata.empty()) {
    header += io::json_quote(kMetadataKey) + ":{";
    bool first = true;
    for (const auto& [key, value] : metadata) {
      header += (first ? "" : ",") + io::json_quote(key) + ":" + io::json_quote(value);
      first = false;
    }
    header += "}";
  }
  uint64_t offset = 0;
  for (const auto& [name, t] : order) {
    const auto bytes = static_cast<uint64_t>(t->numel() * dtype_size(t->dtype()));
    std::string shape;
    for (int64_t d : t->shape()) shape += (shape.empty() ? "" : ",") + std::to_string(d);
    header += (header.size() > 1 ? "," : "") + io::json_quote(*name) + ":{\"dtype\":\"" +
              file_dtype_name(t->dtype()) + "\",\"shape\":[" + shape + "],\"data_offsets\":[" +
              std::to_string(offset) + "," + std::to_string(offset + bytes) + "]}";
    offset += bytes;
  }
  header += "}";
  // Pad so the data starts 8-byte aligned, as the official writer does (the format allows
  // trailing spaces in the header).
  header.append((8 - header.size() % 8) % 8, ' ');

  unsigned char prefix[8];
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<unsigned char>(header.size() >> (8 * i));

  io::write_file_atomically(w.path, [&](const io::ByteSink& write) {
    write(prefix, sizeof prefix);
    write(header.data(), header.size());
    for (const auto& [name, t] : order)
      write(t->data(), static_cast<size_t>(t->numel() * dtype_size(t->dtype())));
  });
}

}  // namespace

void save_safetensors(const std::string& path, const std::map<std::string, HostTensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  const Where w{"save_safetensors", path};
  rethrow_as_checkpoint_error(w, [&] { write_safetensors(w, tensors, metadata); });
}

void save_safetensors(const std::string& path, const Program& program,
                      const std::map<std::string, std::string>& metadata) {
  const Where w{"save_safetensors", path};
  rethrow_as_checkpoint_error(w, [&] { write_safetensors(w, program.download_params(), metadata); });
}

std::map<std::string, HostTensor> read_safetensors(const std::string& path) {
  return read_safetensors(path, {});
}

std::map<std::string, HostTensor> read_safetensors(
    const std::string& path, const std::function<bool(const std::string&)>& skip_unsupported) {
  const Where w{"read_safetensors", path};
  return rethrow_as_checkpoint_error(w, [&] {
    uint64_t size = 0;
    File file = open_for_read(w, &size);
    return read_tensors(w, file.get(), read_header(w, file.get(), size, skip_unsupported));
  });
}

std::map<std::string, io::RawTensor> io::read_safetensors_raw(
    const std::string& path, const std::function<bool(const std::string&)>& wanted) {
  const Where w{"read_safetensors", path};
  return rethrow_as_checkpoint_error(w, [&] {
    uint64_t size = 0;
    File file = open_for_read(w, &size);
    // Every tensor of a dtype the library does not hold is passed over here (read_safetensors
    // judges them); the wanted ones are then read, the one-byte ones as bytes.
    const Header h = read_header(w, file.get(), size, [](const std::string&) { return true; });
    std::map<std::string, RawTensor> out;
    for (const Entry& e : h.entries) {
      if (!e.skipped || !wanted(e.name)) continue;
      RawTensor t{e.file_dtype, e.shape, {}};
      if (format_dtype_bytes(e.file_dtype) == 1) {
        t.bytes = HostTensor(DType::kI8, e.shape);
        read_exact(w, file.get(), h.data_start + e.begin, t.bytes.data(), e.end - e.begin,
                   tensor_label(e.name));
      }
      out.emplace(e.name, std::move(t));
    }
    return out;
  });
}

std::map<std::string, std::string> read_safetensors_metadata(const std::string& path) {
  const Where w{"read_safetensors_metadata", path};
  return rethrow_as_checkpoint_error(w, [&] {
    uint64_t size = 0;
    File file = open_for_read(w, &size);
    return read_header(w, file.get(), size).metadata;
  });
}

void load_safetensors(const std::string& path, Program& program, LoadOptions options) {
  static constexpr const char* kTrainingPrefix = "__tg/";
  const Where w{"load_safetensors", path};
  rethrow_as_checkpoint_error(w, [&] {
    uint64_t size = 0;
    File file = open_for_read(w, &size);
    const Header h = read_header(w, file.get(), size);

    // Everything is checked against the model before any data is read or uploaded.
    // (Program exposes parameter shapes only through download_params.)
    const std::map<std::string, HostTensor> current = program.download_params();
    // tg::state() tensors of the same name load too (batch norm's running statistics, as a
    // PyTorch state_dict holds them); they are never required.
    std::map<std::string, HostTensor> states;
    for (const std::string& name : program.state_names()) states.emplace(name, program.read_state(name));
    std::set<std::string> in_file;
    for (const Entry& e : h.entries) {
      if (e.name.rfind(kTrainingPrefix, 0) == 0) continue;  // a training checkpoint's own tensors
      if (auto st = states.find(e.name); st != states.end()) {
        if (e.shape != st->second.shape() ||
            (e.dtype != st->second.dtype() && st->second.dtype() != DType::kF32))
          fail(w, tensor_label(e.name) + " is " + file_dtype_name(e.dtype) + shape_str(e.shape) +
                      ", but the model's state is " + dtype_name(st->second.dtype()) +
                      shape_str(st->second.shape()));
        continue;
      }
      in_file.insert(e.name);
      auto it = current.find(e.name);
      if (it == current.end())
        fail(w, tensor_label(e.name) + " is not a parameter of the model (its parameters: " +
                    join_names(program.param_names()) + ")");
      const bool quantized = e.dtype == DType::kI8 && it->second.dtype() == DType::kI8;
      if (e.dtype != DType::kF32 && e.dtype != DType::kBF16 && e.dtype != DType::kF16 && !quantized)
        fail(w, tensor_label(e.name) + " is " + file_dtype_name(e.dtype) +
                    ", but model parameters are F32, BF16 or F16 (converted to the parameter's type), or I8 "
                    "for a parameter quantized to i8");
      const Shape want =
          quantized ? it->second.shape() : dequantized_shape(e.name, it->second.shape(), current);
      if (e.shape != want)
        fail(w, tensor_label(e.name) + " has shape " + shape_str(e.shape) +
                    ", but the model's parameter has shape " + shape_str(want));
    }
    if (!options.partial) {
      std::vector<std::string> missing;
      // The scales of a quantized parameter the file holds as floats come from quantizing it.
      std::set<std::string> float_in_file;
      for (const Entry& e : h.entries)
        if (e.dtype != DType::kI8) float_in_file.insert(e.name);
      const auto quantized_from_file = [&](const std::string& name) {
        const std::string base = scaled_weight(name);
        const auto b = current.find(base);
        return b != current.end() && b->second.dtype() == DType::kI8 && float_in_file.count(base) != 0;
      };
      for (const auto& [name, t] : current)
        if (in_file.count(name) == 0 && !quantized_from_file(name)) missing.push_back(name);
      if (!missing.empty())
        fail(w, "missing parameter" + std::string(missing.size() > 1 ? "s " : " ") + join_names(missing) +
                    " (pass {.partial = true} to load a subset)");
    }
    std::map<std::string, HostTensor> tensors = read_tensors(w, file.get(), h);
    std::erase_if(tensors, [](const auto& kv) { return kv.first.rfind(kTrainingPrefix, 0) == 0; });
    for (auto it = tensors.begin(); it != tensors.end();) {
      if (states.count(it->first) == 0) {
        ++it;
        continue;
      }
      program.write_state(it->first, it->second);
      it = tensors.erase(it);
    }
    program.upload_params(tensors, {.partial = options.partial});  // converted to each parameter's type
  });
}

}  // namespace tg
