// GGUF, the single-file format of ggml and llama.cpp: a header, typed key-value metadata (the
// architecture, its sizes, the tokenizer), tensor descriptions, then the tensors' bytes at
// aligned offsets, each F32, F16, BF16 or one of ggml's block-quantized types.
//
// Layout (little-endian; version 2 and 3, whose counts are 64-bit):
//   "GGUF", u32 version, u64 tensor count, u64 key-value count,
//   key-values: string key, u32 value type, value (an array: u32 item type, u64 count, items),
//   tensor infos: string name, u32 rank, u64 extents innermost first, u32 ggml type, u64 offset,
//   padding to general.alignment (default 32), then the tensor data (offsets relative to it).
// A string is a u64 byte count and its bytes. The reader checks every count and offset
// against the file's size before it allocates or reads.
#pragma once
#include <cstdint>
#include <functional>
#include <istream>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tensorgrad/program.h"
#include "tensorgrad/quantize.h"

namespace tg::io {

struct GgufTensor {
  std::string name;
  Shape shape;          // outermost first, as PyTorch's (ggml's extents reversed)
  uint32_t type = 0;    // ggml_type
  uint64_t offset = 0;  // from the start of the file
  uint64_t bytes = 0;
};

struct GgufFile {
  std::string path;
  uint32_t version = 0;
  /// Every key-value: integers, floats, bools and strings as JSON values, arrays as JSON arrays.
  nlohmann::json meta = nlohmann::json::object();
  std::vector<GgufTensor> tensors;
};

/// Whether `path` is a regular file that starts with GGUF's magic.
bool is_gguf(const std::string& path);

/// Reads the header, the metadata and the tensor infos (not the data). Throws CheckpointError
/// ("<path>: <what>") for a file that is not GGUF, a version other than 2 or 3, a count, string,
/// array or tensor that runs past the end of the file, an unknown value type, a tensor type the
/// library cannot read (named), a tensor whose extents do not fill whole blocks, or two tensors
/// of one name.
GgufFile read_gguf(const std::string& path);

/// The tensor's values: F32, F16 and BF16 as they are, every quantized type dequantized to f32
/// as ggml dequantizes it. `in` is the file, opened binary. Throws CheckpointError.
HostTensor read_gguf_tensor(const GgufFile& file, const GgufTensor& t, std::istream& in);

/// ggml's name of a tensor type ("Q4_K", "F16", …; "type 42" for one it does not name).
std::string ggml_type_name(uint32_t type);

/// The types read_gguf_tensor reads, for messages: "F32, F16, BF16, Q4_0, …".
std::string ggml_types_read();

/// GGUF's value types.
enum GgufValueType : uint32_t {
  kGgufU8,
  kGgufI8,
  kGgufU16,
  kGgufI16,
  kGgufU32,
  kGgufI32,
  kGgufF32,
  kGgufBool,
  kGgufString,
  kGgufArray,
  kGgufU64,
  kGgufI64,
  kGgufF64
};

/// A key-value to write: its value type (an array's: kGgufArray and the items' type) and value.
struct GgufKv {
  std::string key;
  uint32_t type = kGgufString;
  nlohmann::json value;
  uint32_t item = kGgufString;
};
/// A tensor to write: name, ggml type, shape (outermost first), byte count, and its bytes, made
/// when it is written (one tensor's file bytes in memory at a time).
struct GgufOut {
  std::string name;
  uint32_t type = 0;
  Shape shape;
  uint64_t bytes = 0;
  std::function<std::vector<uint8_t>()> data;
};
/// Writes a GGUF version 3 file (alignment 32), atomically (io/atomic_file.h). Throws
/// CheckpointError ("<path>: <what>").
void write_gguf(const std::string& path, const std::vector<GgufKv>& kvs, const std::vector<GgufOut>& tensors);
/// ggml's Q8_0 blocks of `values` (a multiple of 32 of them), by its reference rule: per block
/// d = max|x| / 127 (stored as f16), q = x · (1/d) rounded half away from zero.
std::vector<uint8_t> quantize_q8_0(std::span<const float> values);
/// ggml's Q4_0 blocks of `values` (a multiple of 32), by its reference rule: per block the value m
/// of largest magnitude gives d = m / −8 (stored as f16), q = min(15, trunc(x / d + 8.5)).
std::vector<uint8_t> quantize_q4_0(std::span<const float> values);

/// Dequantizes `blocks` whole blocks of ggml type `type` from `src` into `dst` (blocks ×
/// the type's block size floats). For the quantized types only (gguf_quants.cc).
void dequantize_ggml(uint32_t type, const uint8_t* src, int64_t blocks, float* dst);
/// Q4_0, Q4_1 and Q4_K blocks as 4-bit codes with a scale and an offset per 32 values, exactly
/// (tensorgrad/quantize.h's layout: `q` blocks × 16 bytes, `scale` and `offset` blocks × 1 or × 8
/// floats). False, writing nothing, for any other type (gguf_quants.cc).
bool ggml_as_int4(uint32_t type, const uint8_t* src, int64_t blocks, uint8_t* q, float* scale, float* offset);
/// Whether ggml_as_int4 takes `type`.
bool ggml_is_int4(uint32_t type);
/// The bits a value of a block-quantized type holds (Q2_K 2 … Q8_0 8; the scales not counted); 0
/// for F32, F16, BF16 and the types read_gguf_tensor does not read.
int ggml_bits(uint32_t type);

/// A Q4_0, Q4_1 or Q4_K tensor's values as 4-bit codes (ggml_as_int4). Throws CheckpointError.
Quantized4Tensor read_gguf_tensor_int4(const GgufFile& file, const GgufTensor& t, std::istream& in);

/// Values and bytes per block of a type read_gguf_tensor reads; {0, 0} for any other.
struct GgmlBlock {
  int64_t values = 0, bytes = 0;
};
GgmlBlock ggml_block(uint32_t type);

}  // namespace tg::io
