// Elementwise kernels of the CPU backend, generated from the expression column of ops.def
// (TG_UNARY / TG_BINARY / TG_COMPARE rows) and instantiated only for the element types each
// row allows, plus cast and where. The op and dtype are dispatched once at prepare time;
// each kernel is a strided loop nest (cpu_kernels.h) whose inner loop is specialised for
// dense and 0-stride (broadcast) operands so the compiler can vectorise it. int32 is seen by
// the expressions as WrapI32, whose + - * and negation wrap modulo 2^32 instead of being UB.
#include <compare>
#include <string>
#include <type_traits>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/fastmath.h"
#include "tensorgrad/errors.h"

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

/// Ops whose per-element cost is a libm call parallelise at a smaller size.
int64_t grain_for(ir::Op op) {
  switch (op) {
    case ir::Op::kExp: case ir::Op::kLog: case ir::Op::kSin: case ir::Op::kCos: case ir::Op::kTanh:
    case ir::Op::kSigmoid: case ir::Op::kErf: case ir::Op::kLog1p: case ir::Op::kPow:
      return kGrainHeavy;
    default:
      return kGrainCheap;
  }
}

// The map kernels: operand 0 of the nest is the dense output (inner stride 1 after
// collapsing), operands 1.. the input views.

template <class R, class S, class F>
Kernel map1(Nest nest, std::byte* out, const std::byte* in, F f) {
  auto* o = reinterpret_cast<R*>(out);
  auto* x = reinterpret_cast<const S*>(in);
  return [nest = std::move(nest), o, x, f] {
    const int64_t sx = nest.inner()[1];
    run_nest<2>(nest, [&](const std::array<int64_t, 2>& off, int64_t n) {
      R* __restrict po = o + off[0];
      const S* __restrict px = x + off[1];
      if (sx == 1) {
        for (int64_t j = 0; j < n; ++j) po[j] = f(px[j]);
      } else if (sx == 0) {
        std::fill(po, po + n, f(px[0]));
      } else {
        for (int64_t j = 0; j < n; ++j) po[j] = f(px[j * sx]);
      }
    });
  };
}

template <class R, class S, class F>
Kernel map2(Nest nest, std::byte* out, const std::byte* in0, const std::byte* in1, F f) {
  auto* o = reinterpret_cast<R*>(out);
  auto* x = reinterpret_cast<const S*>(in0);
  auto* y = reinterpret_cast<const S*>(in1);
  return [nest = std::move(nest), o, x, y, f] {
    const int64_t sx = nest.inner()[1], sy = nest.inner()[2];
    run_nest<3>(nest, [&](const std::array<int64_t, 3>& off, int64_t n) {
      R* __restrict po = o + off[0];
      const S* __restrict px = x + off[1];
      const S* __restrict py = y + off[2];
      if (sx == 1 && sy == 1) {
        for (int64_t j = 0; j < n; ++j) po[j] = f(px[j], py[j]);
      } else if (sx == 0 && sy == 1) {
        const S vx = px[0];
        for (int64_t j = 0; j < n; ++j) po[j] = f(vx, py[j]);
      } else if (sx == 1 && sy == 0) {
        const S vy = py[0];
        for (int64_t j = 0; j < n; ++j) po[j] = f(px[j], vy);
      } else {
        for (int64_t j = 0; j < n; ++j) po[j] = f(px[j * sx], py[j * sy]);
      }
    });
  };
}

template <class T>
Kernel unary_for(ir::Op op, Nest nest, std::byte* out, const std::byte* in0) {
  using S = typename StorageOf<T>::type;
  // exp and tanh (and through exp, sigmoid) resolve to the vectorisable float versions of
  // fastmath.h; only float reaches these rows.
  using std::cos; using std::erf; using fastmath::exp; using std::log; using std::log1p;
  using std::sin; using std::sqrt; using fastmath::tanh;
  switch (op) {
#define TG_UNARY(Name, str, dtypes, expr)                                                        \
  case ir::Op::k##Name:                                                                          \
    if constexpr (row_allows<T>(ir::DTypes::dtypes))                                             \
      return map1<S, S>(std::move(nest), out, in0, [](S raw) {                                   \
        const T a = T(raw);                                                                      \
        return static_cast<S>(expr);                                                             \
      });                                                                                        \
    break;
#include "ir/ops.def"
    default:
      break;
  }
  throw Error(std::string("[cpu] no unary kernel for ") + ir::op_name(op));
}

template <class T>
Kernel binary_for(ir::Op op, Nest nest, std::byte* out, const std::byte* in0, const std::byte* in1) {
  using S = typename StorageOf<T>::type;
  using std::pow;
  switch (op) {
#define TG_BINARY(Name, str, dtypes, expr)                                                       \
  case ir::Op::k##Name:                                                                          \
    if constexpr (row_allows<T>(ir::DTypes::dtypes))                                             \
      return map2<S, S>(std::move(nest), out, in0, in1, [](S ra, S rb) {                         \
        const T a = T(ra);                                                                       \
        const T b = T(rb);                                                                       \
        return static_cast<S>(expr);                                                             \
      });                                                                                        \
    break;
#define TG_COMPARE(Name, str, dtypes, expr)                                                      \
  case ir::Op::k##Name:                                                                          \
    if constexpr (row_allows<T>(ir::DTypes::dtypes))                                             \
      return map2<uint8_t, S>(std::move(nest), out, in0, in1, [](S ra, S rb) {                   \
        const T a = T(ra);                                                                       \
        const T b = T(rb);                                                                       \
        return static_cast<uint8_t>(expr);                                                       \
      });                                                                                        \
    break;
#include "ir/ops.def"
    default:
      break;
  }
  throw Error(std::string("[cpu] no binary kernel for ") + ir::op_name(op));
}

template <class T>
Kernel elementwise_for(ir::Op op, Nest nest, std::byte* out, const std::vector<View>& in) {
  if (ir::op_info(op).kind == ir::OpKind::kUnary) return unary_for<T>(op, std::move(nest), out, in[0].data);
  return binary_for<T>(op, std::move(nest), out, in[0].data, in[1].data);
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

template <class From>
Kernel cast_from(Nest nest, DType to, std::byte* out, const std::byte* in) {
  switch (to) {
    // Lambdas rather than function pointers, so the conversion inlines into the loop.
    case DType::kF32: return map1<float, From>(std::move(nest), out, in, [](From x) { return convert<float>(x); });
    case DType::kI32: return map1<int32_t, From>(std::move(nest), out, in, [](From x) { return convert<int32_t>(x); });
    case DType::kBool: return map1<uint8_t, From>(std::move(nest), out, in, [](From x) { return convert<uint8_t>(x); });
  }
  throw Error("[cpu] cast to an unknown dtype");
}

template <class S>
Kernel where_for(Nest nest, std::byte* out, const std::vector<View>& in) {
  auto* o = reinterpret_cast<S*>(out);
  auto* c = reinterpret_cast<const uint8_t*>(in[0].data);
  auto* x = reinterpret_cast<const S*>(in[1].data);
  auto* y = reinterpret_cast<const S*>(in[2].data);
  return [nest = std::move(nest), o, c, x, y] {
    const auto& st = nest.inner();
    run_nest<4>(nest, [&](const std::array<int64_t, 4>& off, int64_t n) {
      S* __restrict po = o + off[0];
      const uint8_t* __restrict pc = c + off[1];
      const S* __restrict px = x + off[2];
      const S* __restrict py = y + off[3];
      if (st[1] == 1 && st[2] == 1 && st[3] == 1) {
        for (int64_t j = 0; j < n; ++j) po[j] = pc[j] ? px[j] : py[j];
      } else {
        for (int64_t j = 0; j < n; ++j) po[j] = pc[j * st[1]] ? px[j * st[2]] : py[j * st[3]];
      }
    });
  };
}

Nest nest_for(const Shape& shape, const std::vector<View>& in, int64_t grain) {
  std::vector<std::vector<int64_t>> strides{contiguous_strides(shape)};
  for (const View& v : in) strides.push_back(v.strides);
  return make_nest(shape, strides, grain);
}

}  // namespace

Kernel make_elementwise(const ir::Node& node, DType in_dtype, const std::vector<View>& in, std::byte* out) {
  Nest nest = nest_for(node.shape, in, grain_for(node.op));
  switch (in_dtype) {
    case DType::kF32: return elementwise_for<float>(node.op, std::move(nest), out, in);
    case DType::kI32: return elementwise_for<WrapI32>(node.op, std::move(nest), out, in);
    case DType::kBool: return elementwise_for<uint8_t>(node.op, std::move(nest), out, in);
  }
  throw Error("[cpu] elementwise op on an unknown dtype");
}

Kernel make_cast(const Shape& shape, DType from, DType to, const View& in, std::byte* out) {
  Nest nest = nest_for(shape, {in}, kGrainCheap);
  switch (from) {
    case DType::kF32: return cast_from<float>(std::move(nest), to, out, in.data);
    case DType::kI32: return cast_from<int32_t>(std::move(nest), to, out, in.data);
    case DType::kBool: return cast_from<uint8_t>(std::move(nest), to, out, in.data);
  }
  throw Error("[cpu] cast from an unknown dtype");
}

Kernel make_where(const Shape& shape, DType dtype, const std::vector<View>& in, std::byte* out) {
  Nest nest = nest_for(shape, in, kGrainCheap);
  if (dtype_size(dtype) == 4) return where_for<uint32_t>(std::move(nest), out, in);
  return where_for<uint8_t>(std::move(nest), out, in);
}

}  // namespace tg::backend::cpu
