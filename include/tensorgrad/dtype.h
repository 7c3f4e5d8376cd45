// Element types and shapes: the two facts every tensor carries.
// dtype is a real field everywhere (never an assumption of f32) so that bf16 can join later.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tg {

enum class DType : uint8_t { kF32, kI32, kBool };

/// Bytes per element on the host and in backend buffers (bool is one byte, 0 or 1).
constexpr int64_t dtype_size(DType t) { return t == DType::kBool ? 1 : 4; }
constexpr const char* dtype_name(DType t) {
  return t == DType::kF32 ? "f32" : t == DType::kI32 ? "i32" : "bool";
}

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
