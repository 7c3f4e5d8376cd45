// Elementwise block functions of the CPU backend: one per (op, element type), generated from
// the expression column of ops.def (TG_UNARY / TG_BINARY / TG_COMPARE rows) and instantiated
// only for the element types each row allows, plus cast (bf16 and f16 only from and to f32) and where. A
// block function maps n dense elements of its operands to n dense results, a loop the compiler vectorises;
// the fused-group executor (fused.cc) chains them over cache-resident blocks. int32 is seen by the
// expressions as WrapI32, whose + - * and negation wrap modulo 2^32 instead of being UB.
#include <compare>
#include <limits>
#include <string>
#include <type_traits>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/fastmath.h"
#include "backend/cpu/gemm_bf16.h"
#include "tensorgrad/errors.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define TG_X86 1
#endif

namespace tg::backend::cpu {
namespace {

/// int32 as the expression column sees it. Implicit from int so `T(0)` and
/// `T((a > T(0)) - (a < T(0)))` read as they do for float.
struct WrapI32 {
  int32_t v;
  constexpr WrapI32(int x) : v(x) {}
  constexpr explicit operator int32_t() const { return v; }
  constexpr auto operator<=>(const WrapI32&) const = default;
};
// uint32_t arithmetic is modular and the conversion back is modular since C++20.
constexpr uint32_t bits(WrapI32 x) { return static_cast<uint32_t>(x.v); }
constexpr WrapI32 from_bits(uint32_t x) { return static_cast<int32_t>(x); }
constexpr WrapI32 operator-(WrapI32 a) { return from_bits(0u - bits(a)); }
constexpr WrapI32 operator+(WrapI32 a, WrapI32 b) { return from_bits(bits(a) + bits(b)); }
constexpr WrapI32 operator-(WrapI32 a, WrapI32 b) { return from_bits(bits(a) - bits(b)); }
constexpr WrapI32 operator*(WrapI32 a, WrapI32 b) { return from_bits(bits(a) * bits(b)); }

/// Storage element of a compute type.
template <class T>
struct StorageOf {
  using type = T;
};
template <>
struct StorageOf<WrapI32> {
  using type = int32_t;
};

template <class T>
constexpr bool row_allows(ir::DTypes allowed) {
  constexpr bool f = std::is_same_v<T, float>, i = std::is_same_v<T, WrapI32>, l = std::is_same_v<T, uint8_t>;
  switch (allowed) {
    case ir::DTypes::kFloat: return f;
    case ir::DTypes::kNumeric: return f || i;
    case ir::DTypes::kLogical: return l;
    case ir::DTypes::kAll: return true;
  }
  return false;
}

// Block functions take untyped pointers; no __restrict: an in-place optimizer update writes
// its result over an operand at the same index, which elementwise loops allow.

template <class T>
BlockFn unary_block(ir::Op op) {
  using S = typename StorageOf<T>::type;
  // exp and tanh (and through exp, sigmoid) resolve to the vectorisable float versions of
  // fastmath.h; only float reaches these rows.
  using fastmath::exp;
  using fastmath::tanh;
  using std::cos;
  using std::erf;
  using std::log;
  using std::log1p;
  using std::sin;
  using std::sqrt;
  // clang-format off
  switch (op) {
#define TG_UNARY(Name, str, dtypes, expr)                                                        \
  case ir::Op::k##Name:                                                                          \
    if constexpr (row_allows<T>(ir::DTypes::dtypes))                                             \
      return [](std::byte* out, const std::byte* x, const std::byte*, const std::byte*, int64_t n) { \
        auto* po = reinterpret_cast<S*>(out);                                                    \
        auto* pa = reinterpret_cast<const S*>(x);                                                \
        for (int64_t j = 0; j < n; ++j) {                                                        \
          const T a = T(pa[j]);                                                                  \
          po[j] = static_cast<S>(expr);                                                          \
        }                                                                                        \
      };                                                                                         \
    break;
#include "ir/ops.def"
    default: break;
  }
  // clang-format on
  throw Error(std::string("[cpu] no unary kernel for ") + ir::op_name(op));
}

template <class T>
BlockFn binary_block(ir::Op op) {
  using S = typename StorageOf<T>::type;
  using fastmath::exp;
  using fastmath::tanh;  // gelu_tanh_grad
  using std::pow;
  // clang-format off
  switch (op) {
#define TG_BINARY(Name, str, dtypes, expr)                                                       \
  case ir::Op::k##Name:                                                                          \
    if constexpr (row_allows<T>(ir::DTypes::dtypes))                                             \
      return [](std::byte* out, const std::byte* x, const std::byte* y, const std::byte*, int64_t n) { \
        auto* po = reinterpret_cast<S*>(out);                                                    \
        auto* pa = reinterpret_cast<const S*>(x);                                                \
        auto* pb = reinterpret_cast<const S*>(y);                                                \
        for (int64_t j = 0; j < n; ++j) {                                                        \
          const T a = T(pa[j]);                                                                  \
          const T b = T(pb[j]);                                                                  \
          po[j] = static_cast<S>(expr);                                                          \
        }                                                                                        \
      };                                                                                         \
    break;
#define TG_COMPARE(Name, str, dtypes, expr)                                                      \
  case ir::Op::k##Name:                                                                          \
    if constexpr (row_allows<T>(ir::DTypes::dtypes))                                             \
      return [](std::byte* out, const std::byte* x, const std::byte* y, const std::byte*, int64_t n) { \
        auto* po = reinterpret_cast<uint8_t*>(out);                                              \
        auto* pa = reinterpret_cast<const S*>(x);                                                \
        auto* pb = reinterpret_cast<const S*>(y);                                                \
        for (int64_t j = 0; j < n; ++j) {                                                        \
          const T a = T(pa[j]);                                                                  \
          const T b = T(pb[j]);                                                                  \
          po[j] = static_cast<uint8_t>(expr);                                                    \
        }                                                                                        \
      };                                                                                         \
    break;
#include "ir/ops.def"
    default: break;
  }
  // clang-format on
  throw Error(std::string("[cpu] no binary kernel for ") + ir::op_name(op));
}

template <class T>
BlockFn typed_block(ir::Op op) {
  if (ir::op_info(op).kind == ir::OpKind::kUnary) return unary_block<T>(op);
  return binary_block<T>(op);
}

/// Cast of one element; float → int truncates toward zero and saturates (NaN → 0).
template <class To, class From>
To convert(From x) {
  if constexpr (std::is_same_v<To, From>) {
    return x;
  } else if constexpr (std::is_same_v<To, uint8_t>) {
    return x != From(0) ? 1 : 0;
  } else if constexpr (std::is_same_v<To, int32_t> && std::is_same_v<From, float>) {
    if (!(x == x)) return 0;
    if (x >= 2147483648.0f) return std::numeric_limits<int32_t>::max();
    if (x < -2147483648.0f) return std::numeric_limits<int32_t>::min();
    return static_cast<int32_t>(x);
  } else {
    return static_cast<To>(x);
  }
}

template <class To, class From>
void cast_block(std::byte* out, const std::byte* x, const std::byte*, const std::byte*, int64_t n) {
  auto* po = reinterpret_cast<To*>(out);
  auto* pa = reinterpret_cast<const From*>(x);
  for (int64_t j = 0; j < n; ++j) po[j] = convert<To>(pa[j]);
}

/// f32 → bf16, rounding to nearest even (NaN → 0x7FC0) exactly as tg::bf16_from_f32 does, so
/// the backends and the reference multiply the same bf16 operands. Branch-free on the bits so
/// the loop vectorises.
void cast_f32_to_bf16(std::byte* out, const std::byte* x, const std::byte*, const std::byte*, int64_t n) {
  auto* po = reinterpret_cast<uint16_t*>(out);
  auto* pa = reinterpret_cast<const uint32_t*>(x);
  for (int64_t j = 0; j < n; ++j) {
    const uint32_t u = pa[j];
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    po[j] = static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? 0x7fc0u : rounded);
  }
}

/// bf16 → f32: exact (a bf16 is the upper half of an f32).
void cast_bf16_to_f32(std::byte* out, const std::byte* x, const std::byte*, const std::byte*, int64_t n) {
  auto* po = reinterpret_cast<uint32_t*>(out);
  auto* pa = reinterpret_cast<const uint16_t*>(x);
  for (int64_t j = 0; j < n; ++j) po[j] = static_cast<uint32_t>(pa[j]) << 16;
}

#if defined(TG_X86)
/// f32 → f16 on F16C, 8 at a time; returns how many it converted (a multiple of 8). vcvtps2ph
/// with immediate 0 rounds to nearest even whatever MXCSR says, writes f16 subnormals (FTZ does
/// not apply to it) and rounds overflow to ±inf: IEEE, as tg::f16_from_f32. Only a NaN would
/// differ (it keeps its payload, truncated): each NaN lane is first replaced by the quiet NaN
/// 0x7FC00000 with its sign, which converts to 0x7E00 with that sign.
[[gnu::target("avx,f16c")]] int64_t f32_to_f16_f16c(uint16_t* out, const float* x, int64_t n) {
  const __m256 quiet = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000));
  const __m256 sign = _mm256_set1_ps(-0.0f);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 v = _mm256_loadu_ps(x + j);
    const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    const __m256 safe = _mm256_blendv_ps(v, _mm256_or_ps(_mm256_and_ps(v, sign), quiet), nan);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + j), _mm256_cvtps_ph(safe, 0));
  }
  return j;
}

bool has_f16c() {
  static const bool has = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    // F16C is CPUID leaf 1, ECX bit 29 (clang's __builtin_cpu_supports has no name for it).
    return __builtin_cpu_supports("avx") && __get_cpuid(1, &a, &b, &c, &d) != 0 && ((c >> 29) & 1u) != 0;
  }();
  return has;
}
#endif

/// f32 → f16 exactly as tg::f16_from_f32 (round to nearest even, subnormals, overflow → ±inf,
/// NaN → 0x7E00 with its sign), so the backends and the reference multiply the same f16
/// operands: on F16C where the CPU has it, the tail (and other CPUs) one element at a time.
void cast_f32_to_f16(std::byte* out, const std::byte* x, const std::byte*, const std::byte*, int64_t n) {
  auto* po = reinterpret_cast<uint16_t*>(out);
  auto* pa = reinterpret_cast<const float*>(x);
  int64_t j = 0;
#if defined(TG_X86)
  if (has_f16c()) j = f32_to_f16_f16c(po, pa, n);
#endif
  for (; j < n; ++j) po[j] = f16_from_f32(pa[j]);
}

/// f16 → f32: exact (widen_f16, tg::f32_from_f16 bit for bit).
void cast_f16_to_f32(std::byte* out, const std::byte* x, const std::byte*, const std::byte*, int64_t n) {
  widen_f16(reinterpret_cast<const uint16_t*>(x), 1, n, n, reinterpret_cast<float*>(out));
}

template <class From>
BlockFn cast_from(DType to) {
  switch (to) {
    case DType::kF32: return cast_block<float, From>;
    case DType::kI32: return cast_block<int32_t, From>;
    case DType::kBool: return cast_block<uint8_t, From>;
    case DType::kBF16:
      if constexpr (std::is_same_v<From, float>) return cast_f32_to_bf16;
      break;  // the IR makes bf16 only from f32
    case DType::kF16:
      if constexpr (std::is_same_v<From, float>) return cast_f32_to_f16;
      break;                 // the IR makes f16 only from f32
    case DType::kI8: break;  // i8 values are quantized parameters, never made
  }
  throw Error(std::string("[cpu] cast to ") + dtype_name(to));
}

template <class S>
void where_block(std::byte* out, const std::byte* c, const std::byte* x, const std::byte* y, int64_t n) {
  auto* po = reinterpret_cast<S*>(out);
  auto* pc = reinterpret_cast<const uint8_t*>(c);
  auto* pa = reinterpret_cast<const S*>(x);
  auto* pb = reinterpret_cast<const S*>(y);
  for (int64_t j = 0; j < n; ++j) po[j] = pc[j] ? pa[j] : pb[j];
}

}  // namespace

/// Relative per-element cost of an op (1 = an add), for the thread-split heuristics.
int op_cost(ir::Op op) {
  // clang-format off
  switch (op) {
    case ir::Op::kExp: case ir::Op::kTanh: case ir::Op::kSigmoid:
      return 4;  // fastmath: vectorised polynomials
    case ir::Op::kGeluTanh: case ir::Op::kGeluTanhGrad:
      return 8;
    case ir::Op::kLog: case ir::Op::kSin: case ir::Op::kCos: case ir::Op::kErf: case ir::Op::kLog1p:
    case ir::Op::kPow:
      return 24;  // libm calls
    case ir::Op::kDiv: case ir::Op::kSqrt: case ir::Op::kRsqrt: case ir::Op::kReciprocal:
      return 2;
    default: return 1;
  }
  // clang-format on
}

BlockFn block_function(ir::Op op, DType in_dtype, DType out_dtype) {
  if (op == ir::Op::kCast) {
    switch (in_dtype) {
      case DType::kF32: return cast_from<float>(out_dtype);
      case DType::kI32: return cast_from<int32_t>(out_dtype);
      case DType::kBool: return cast_from<uint8_t>(out_dtype);
      case DType::kBF16:
        if (out_dtype == DType::kF32) return cast_bf16_to_f32;
        break;  // the IR reads bf16 into f32 only
      case DType::kF16:
        if (out_dtype == DType::kF32) return cast_f16_to_f32;
        break;  // the IR reads f16 into f32 only
      case DType::kI8:
        if (out_dtype == DType::kF32) return cast_block<float, int8_t>;
        break;  // the IR reads i8 into f32 only
    }
    throw Error(std::string("[cpu] cast from ") + dtype_name(in_dtype) + " to " + dtype_name(out_dtype));
  }
  if (op == ir::Op::kWhere) {  // in_dtype: the branches' type
    if (dtype_size(in_dtype) == 4) return where_block<uint32_t>;
    return where_block<uint8_t>;
  }
  switch (in_dtype) {
    case DType::kF32: return typed_block<float>(op);
    case DType::kI32: return typed_block<WrapI32>(op);
    case DType::kBool: return typed_block<uint8_t>(op);
    case DType::kBF16:
    case DType::kF16:
    case DType::kI8: break;
  }
  throw Error(std::string("[cpu] elementwise op on ") + dtype_name(in_dtype));
}

}  // namespace tg::backend::cpu
