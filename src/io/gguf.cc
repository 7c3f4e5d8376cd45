// The GGUF reader (see gguf.h for the layout).
#include "io/gguf.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

#include "tensorgrad/dtype.h"
#include "tensorgrad/errors.h"

namespace tg::io {
namespace {

using nlohmann::json;

constexpr uint32_t kF32 = 0, kF16 = 1, kBF16 = 30;

[[noreturn]] void gguf_fail(const std::string& path, const std::string& what) {
  throw CheckpointError(path + ": " + what);
}

// Reads the header's fields in order, each checked against the bytes left in the file.
class Reader {
 public:
  Reader(std::istream& in, std::string path, uint64_t size) : in_(in), path_(std::move(path)), size_(size) {}

  void bytes(void* dst, uint64_t n, const char* what) {
    if (n > size_ - pos_)
      gguf_fail(path_, std::string("truncated: ") + what + " needs " + std::to_string(n) +
                           " bytes at offset " + std::to_string(pos_) + ", the file has " +
                           std::to_string(size_ - pos_) + " left");
    in_.read(static_cast<char*>(dst), static_cast<std::streamsize>(n));
    if (!in_) gguf_fail(path_, std::string("cannot read ") + what);
    pos_ += n;
  }
  template <typename T>
  T scalar(const char* what) {
    T v;
    bytes(&v, sizeof v, what);
    return v;
  }
  std::string string(const char* what) {
    const auto n = scalar<uint64_t>(what);
    if (n > size_ - pos_)
      gguf_fail(path_, std::string("truncated: ") + what + " of " + std::to_string(n) + " bytes");
    std::string s(n, '\0');
    bytes(s.data(), n, what);
    return s;
  }
  // A count of items of at least `min_bytes` each: it cannot exceed what the file still holds.
  uint64_t count(const char* what, uint64_t min_bytes) {
    const auto n = scalar<uint64_t>(what);
    if (min_bytes > 0 && n > (size_ - pos_) / min_bytes)
      gguf_fail(path_, std::string(what) + " " + std::to_string(n) + " is more than the file can hold");
    return n;
  }
  uint64_t pos() const { return pos_; }

 private:
  std::istream& in_;
  std::string path_;
  uint64_t size_, pos_ = 0;
};

// GGUF's value types.
enum : uint32_t { kU8, kI8, kU16, kI16, kU32, kI32, kF32v, kBool, kString, kArray, kU64, kI64, kF64 };

uint64_t min_bytes_of(uint32_t type) {
  switch (type) {
    case kU8:
    case kI8:
    case kBool: return 1;
    case kU16:
    case kI16: return 2;
    case kU32:
    case kI32:
    case kF32v: return 4;
    case kString:
    case kU64:
    case kI64:
    case kF64: return 8;
    case kArray: return 12;
    default: return 1;
  }
}

json value(Reader& r, uint32_t type, const std::string& key, const std::string& path, int depth) {
  switch (type) {
    case kU8: return r.scalar<uint8_t>("a u8");
    case kI8: return r.scalar<int8_t>("an i8");
    case kU16: return r.scalar<uint16_t>("a u16");
    case kI16: return r.scalar<int16_t>("an i16");
    case kU32: return r.scalar<uint32_t>("a u32");
    case kI32: return r.scalar<int32_t>("an i32");
    case kF32v: return r.scalar<float>("an f32");
    case kBool: {
      const auto b = r.scalar<uint8_t>("a bool");
      if (b > 1) gguf_fail(path, "key '" + key + "': a bool of value " + std::to_string(b));
      return b == 1;
    }
    case kString: return r.string("a string");
    case kU64: return r.scalar<uint64_t>("a u64");
    case kI64: return r.scalar<int64_t>("an i64");
    case kF64: return r.scalar<double>("an f64");
    case kArray: {
      if (depth > 0) gguf_fail(path, "key '" + key + "': an array of arrays (not read)");
      const auto item = r.scalar<uint32_t>("an array's item type");
      if (item > kF64)
        gguf_fail(path, "key '" + key + "': an array of the unknown value type " + std::to_string(item));
      const uint64_t n = r.count("an array's length", min_bytes_of(item));
      json a = json::array();
      for (uint64_t i = 0; i < n; ++i) a.push_back(value(r, item, key, path, depth + 1));
      return a;
    }
    default: gguf_fail(path, "key '" + key + "': the unknown value type " + std::to_string(type));
  }
}

}  // namespace

std::string ggml_type_name(uint32_t type) {
  static const char* const names[] = {
      "F32",   "F16",    "Q4_0", "Q4_1", "Q4_2", "Q4_3",    "Q5_0",   "Q5_1",    "Q8_0",  "Q8_1",   "Q2_K",
      "Q3_K",  "Q4_K",   "Q5_K", "Q6_K", "Q8_K", "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S",
      "IQ2_S", "IQ4_XS", "I8",   "I16",  "I32",  "I64",     "F64",    "IQ1_M",   "BF16"};
  if (type < std::size(names)) return names[type];
  return "type " + std::to_string(type);
}

std::string ggml_types_read() {
  std::string s;
  for (uint32_t t = 0; t <= kBF16; ++t)
    if (ggml_block(t).values > 0) s += (s.empty() ? "" : ", ") + ggml_type_name(t);
  return s;
}

bool is_gguf(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  return in && std::memcmp(magic, "GGUF", 4) == 0;
}

GgufFile read_gguf(const std::string& path) {
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (ec) gguf_fail(path, "cannot read: " + ec.message());
  std::ifstream in(path, std::ios::binary);
  if (!in) gguf_fail(path, "cannot open");
  Reader r(in, path, size);
  GgufFile g;
  g.path = path;
  char magic[4];
  r.bytes(magic, 4, "the magic");
  if (std::memcmp(magic, "GGUF", 4) != 0)
    gguf_fail(path, "not a GGUF file (it does not start with \"GGUF\")");
  g.version = r.scalar<uint32_t>("the version");
  if (g.version > 0xFFFF && (g.version & 0xFFFF) == 0)
    gguf_fail(path,
              "a big-endian GGUF file (its version reads byte-swapped); only little-endian files are read");
  if (g.version != 2 && g.version != 3)
    gguf_fail(path, "GGUF version " + std::to_string(g.version) + " (versions 2 and 3 are read)");
  const uint64_t n_tensors = r.count("the tensor count", 24);
  const uint64_t n_kv = r.count("the key-value count", 13);
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = r.string("a key");
    const auto type = r.scalar<uint32_t>("a value type");
    if (g.meta.contains(key)) gguf_fail(path, "the key '" + key + "' twice");
    g.meta[key] = value(r, type, key, path, 0);
  }
  uint64_t alignment = 32;
  if (g.meta.contains("general.alignment")) {
    const json& a = g.meta["general.alignment"];
    if (!a.is_number_unsigned() || a.get<uint64_t>() == 0 ||
        (a.get<uint64_t>() & (a.get<uint64_t>() - 1)) != 0)
      gguf_fail(path, "general.alignment is " + a.dump() + ", not a power of two");
    alignment = a.get<uint64_t>();
  }
  std::set<std::string> names;
  std::vector<uint64_t> offsets;
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensor t;
    t.name = r.string("a tensor name");
    if (!names.insert(t.name).second) gguf_fail(path, "the tensor '" + t.name + "' twice");
    const auto rank = r.scalar<uint32_t>("a tensor's rank");
    if (rank == 0 || rank > 4)
      gguf_fail(path, "tensor '" + t.name + "' has rank " + std::to_string(rank) + " (1 to 4)");
    std::vector<int64_t> ne(rank);
    uint64_t numel = 1;
    for (uint32_t d = 0; d < rank; ++d) {
      const auto e = r.scalar<uint64_t>("a tensor's extent");
      if (e == 0 || e > (uint64_t{1} << 40) || numel > (uint64_t{1} << 50) / e)
        gguf_fail(path, "tensor '" + t.name + "' has the extent " + std::to_string(e));
      numel *= e;
      ne[d] = static_cast<int64_t>(e);
    }
    t.shape.assign(ne.rbegin(), ne.rend());
    t.type = r.scalar<uint32_t>("a tensor's type");
    const GgmlBlock blk = ggml_block(t.type);
    if (blk.values == 0)
      gguf_fail(path, "tensor '" + t.name + "' is " + ggml_type_name(t.type) +
                          ", which is not read (the types read: " + ggml_types_read() + ")");
    if (ne[0] % blk.values != 0)
      gguf_fail(path, "tensor '" + t.name + "' is " + ggml_type_name(t.type) + " with rows of " +
                          std::to_string(ne[0]) + " values, not whole blocks of " +
                          std::to_string(blk.values));
    t.bytes = numel / static_cast<uint64_t>(blk.values) * static_cast<uint64_t>(blk.bytes);
    t.offset = r.scalar<uint64_t>("a tensor's offset");
    if (t.offset % alignment != 0)
      gguf_fail(path, "tensor '" + t.name + "' is at offset " + std::to_string(t.offset) +
                          ", not a multiple of the alignment " + std::to_string(alignment));
    g.tensors.push_back(std::move(t));
  }
  const uint64_t data = (r.pos() + alignment - 1) / alignment * alignment;
  for (GgufTensor& t : g.tensors) {
    if (t.offset > size || data > size - t.offset || t.bytes > size - data - t.offset)
      gguf_fail(path, "truncated: tensor '" + t.name + "' (" + std::to_string(t.bytes) +
                          " bytes at data offset " + std::to_string(t.offset) +
                          ") runs past the end of the file");
    t.offset += data;
  }
  // Tensors do not overlap (as ggml writes them): no file holds more values than its bytes.
  std::vector<const GgufTensor*> by_offset;
  for (const GgufTensor& t : g.tensors) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i)
    if (by_offset[i - 1]->offset + by_offset[i - 1]->bytes > by_offset[i]->offset)
      gguf_fail(path, "tensors '" + by_offset[i - 1]->name + "' and '" + by_offset[i]->name + "' overlap");
  return g;
}

namespace {
std::vector<uint8_t> raw_bytes(const GgufFile& file, const GgufTensor& t, std::istream& in) {
  std::vector<uint8_t> raw(t.bytes);
  in.clear();
  in.seekg(static_cast<std::streamoff>(t.offset));
  in.read(reinterpret_cast<char*>(raw.data()), static_cast<std::streamsize>(raw.size()));
  if (!in) gguf_fail(file.path, "cannot read tensor '" + t.name + "'");
  return raw;
}
}  // namespace

Quantized4Tensor read_gguf_tensor_int4(const GgufFile& file, const GgufTensor& t, std::istream& in) {
  if (!ggml_is_int4(t.type) || t.shape.empty() || t.shape.back() % ggml_block(t.type).values != 0)
    gguf_fail(file.path, "tensor '" + t.name + "' (" + ggml_type_name(t.type) + shape_str(t.shape) +
                             ") is not of a 4-bit type (Q4_0, Q4_1, Q4_K) in whole blocks a row");
  const std::vector<uint8_t> raw = raw_bytes(file, t, in);
  Shape packed = t.shape, groups = t.shape;
  packed.back() /= 2;
  groups.back() /= 32;  // whole blocks of 32 or 256 values a row (read_gguf checks the extents)
  Quantized4Tensor out{HostTensor(DType::kI8, packed), HostTensor(DType::kF32, groups),
                       HostTensor(DType::kF32, groups)};
  ggml_as_int4(t.type, raw.data(), numel(t.shape) / ggml_block(t.type).values,
               static_cast<uint8_t*>(out.q.data()), out.scale.f32().data(), out.offset.f32().data());
  return out;
}

HostTensor read_gguf_tensor(const GgufFile& file, const GgufTensor& t, std::istream& in) {
  const std::vector<uint8_t> raw = raw_bytes(file, t, in);
  if (t.type == kF32 || t.type == kF16 || t.type == kBF16) {
    HostTensor h(t.type == kF32 ? DType::kF32 : t.type == kF16 ? DType::kF16 : DType::kBF16, t.shape);
    std::memcpy(h.data(), raw.data(), raw.size());
    return h;
  }
  HostTensor h(DType::kF32, t.shape);
  const GgmlBlock blk = ggml_block(t.type);
  dequantize_ggml(t.type, raw.data(), h.numel() / blk.values, h.f32().data());
  return h;
}

}  // namespace tg::io
