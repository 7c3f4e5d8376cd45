// Element types and shapes: the two facts every tensor carries.
// dtype is a real field everywhere (never an assumption of f32).
#pragma once
#include <bit>
#include <cstdint>
#include <string>
#include <vector>

namespace tg {

/// Programs compute in f32, i32 and bool, and hold bf16 or f16 copies of the operands of
/// products and attention under mixed precision (Precision::kBf16 / kF16; only casts, shape
/// ops, matmul, attention and convolutions read or make these half-precision values). On the
/// host both are also formats of HostTensor, safetensors and parameter upload and download.
/// i8 is the storage of weights quantized to 8 or 4 bits (Module::store_params_as(DType::kI8[, group,
/// 4]); 4-bit codes two a byte): a parameter, read only by shape ops, quant_matmul and a cast to f32.
enum class DType : uint8_t { kF32, kI32, kBool, kBF16, kF16, kI8 };

/// The two 16-bit float types: storage of mixed precision's product operands, never arithmetic.
constexpr bool is_half(DType t) { return t == DType::kBF16 || t == DType::kF16; }

/// Bytes per element on the host and in backend buffers (bool is one byte, 0 or 1).
constexpr int64_t dtype_size(DType t) {
  return t == DType::kBool || t == DType::kI8 ? 1 : t == DType::kBF16 || t == DType::kF16 ? 2 : 4;
}
constexpr const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kI32: return "i32";
    case DType::kBool: return "bool";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
    case DType::kI8: return "i8";
  }
  return "?";
}

/// bfloat16 (the upper half of an f32): round to nearest, ties to even, as PyTorch converts
/// (any NaN becomes 0x7FC0; overflow rounds to ±inf).
constexpr uint16_t bf16_from_f32(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
constexpr float f32_from_bf16(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }
/// IEEE 754 binary16: round to nearest, ties to even, with subnormals; overflow to ±inf; a NaN
/// becomes 0x7E00 with its sign (as PyTorch converts).
uint16_t f16_from_f32(float f);
float f32_from_f16(uint16_t h);

/// A tensor's extent per axis, outermost first. Rank 0 (`{}`) is a scalar.
using Shape = std::vector<int64_t>;

inline int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}
/// "[2, 3]" — used in every error message.
std::string shape_str(const Shape& s);

}  // namespace tg
