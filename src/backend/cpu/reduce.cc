// Reductions of the CPU backend: Sum, Max, Min, Argmax, and the prefix sum Cumsum. Every reduction is brought
// to an [outer, reduced, inner] shape over a dense input — directly when the reduced axes form one run
// (ignoring extent-1 axes), otherwise after a transposing copy that moves the reduced axes last. f32 sums
// accumulate in double (eight independent lanes so the loop vectorises), i32 sums wrap modulo 2^32.
// Max/Min/Argmax ignore NaN unless every element is NaN and Argmax keeps the first maximum, matching the
// reference backend. When the output is too small to keep the threads busy (a full sum), the reduced axis is
// split into fixed chunks whose partial results are merged in chunk order, so results never depend on thread
// count.
#include <algorithm>
#include <string>
#include <type_traits>

#include "backend/cpu/cpu_kernels.h"
#include "tensorgrad/errors.h"

namespace tg::backend::cpu {
namespace {

constexpr int64_t kIBlock = 256;   // inner elements one work unit accumulates at once
constexpr int kLanes = 8;          // independent accumulators of a dense run
constexpr int64_t kMinUnits = 64;  // fewer output units than this: split the reduced axis too

struct ReduceGeometry {
  int64_t outer = 1, red = 1, inner = 1;
};

struct SumF32 {
  using S = float;
  using Acc = double;
  static Acc identity() { return 0.0; }
  static Acc fold(Acc a, S x) { return a + static_cast<double>(x); }
  static Acc merge(Acc a, Acc b) { return a + b; }
  static S finish(Acc a) { return narrow_f32(a); }
};
struct SumI32 {
  using S = int32_t;
  using Acc = uint32_t;  // modular, so overflow wraps instead of being UB
  static Acc identity() { return 0; }
  static Acc fold(Acc a, S x) { return a + static_cast<uint32_t>(x); }
  static Acc merge(Acc a, Acc b) { return a + b; }
  static S finish(Acc a) { return static_cast<int32_t>(a); }
};
/// NaN as the float identity: it loses to any number, so NaNs are skipped unless all are NaN.
template <class T, bool kIsMax>
struct Extremum {
  using S = T;
  using Acc = T;
  static Acc identity() {
    if constexpr (std::is_floating_point_v<T>)
      return std::numeric_limits<T>::quiet_NaN();
    else
      return kIsMax ? std::numeric_limits<T>::min() : std::numeric_limits<T>::max();
  }
  static Acc fold(Acc a, S x) {
    if constexpr (kIsMax)
      return (a != a || x > a) ? x : a;
    else
      return (a != a || x < a) ? x : a;
  }
  static Acc merge(Acc a, Acc b) { return fold(a, b); }
  static S finish(Acc a) { return a; }
};

template <class R>
typename R::Acc fold_run(const typename R::S* __restrict x, int64_t n) {
  using Acc = typename R::Acc;
  Acc lanes[kLanes];
  for (int l = 0; l < kLanes; ++l) lanes[l] = R::identity();
  int64_t r = 0;
  for (; r + kLanes <= n; r += kLanes)
    for (int l = 0; l < kLanes; ++l) lanes[l] = R::fold(lanes[l], x[r + l]);
  for (; r < n; ++r) lanes[0] = R::fold(lanes[0], x[r]);
  Acc acc = lanes[0];
  for (int l = 1; l < kLanes; ++l) acc = R::merge(acc, lanes[l]);
  return acc;
}

/// Reduces an [O, R, I] dense input (x) into [O, I] (out), splitting R into `chunks`
/// pieces whose partial results go through `partial` ([O, chunks, I]) when chunks > 1.
template <class R>
void reduce_dense(const typename R::S* x, typename R::S* out, ReduceGeometry g, int64_t chunks,
                  typename R::Acc* partial) {
  using Acc = typename R::Acc;
  const int64_t iblocks = (g.inner + kIBlock - 1) / kIBlock;
  const int64_t rows_per_chunk = (g.red + chunks - 1) / chunks;
  const int64_t units = g.outer * chunks * iblocks;
  const bool parallel = g.outer * g.red * g.inner > kGrainCheap;
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t u = 0; u < units; ++u) {
    const int64_t ib = u % iblocks, c = (u / iblocks) % chunks, o = u / (iblocks * chunks);
    const int64_t r0 = c * rows_per_chunk, r1 = std::min(g.red, r0 + rows_per_chunk);
    const int64_t i0 = ib * kIBlock, width = std::min(kIBlock, g.inner - i0);
    Acc* dst = chunks > 1 ? partial + (o * chunks + c) * g.inner + i0 : nullptr;
    if (g.inner == 1) {
      const Acc acc = fold_run<R>(x + o * g.red + r0, r1 - r0);
      if (dst)
        *dst = acc;
      else
        out[o] = R::finish(acc);
      continue;
    }
    Acc acc[kIBlock];
    for (int64_t i = 0; i < width; ++i) acc[i] = R::identity();
    for (int64_t r = r0; r < r1; ++r) {
      const typename R::S* __restrict row = x + (o * g.red + r) * g.inner + i0;
      for (int64_t i = 0; i < width; ++i) acc[i] = R::fold(acc[i], row[i]);
    }
    for (int64_t i = 0; i < width; ++i) {
      if (dst)
        dst[i] = acc[i];
      else
        out[o * g.inner + i0 + i] = R::finish(acc[i]);
    }
  }
  if (chunks == 1) return;
  const int64_t outputs = g.outer * g.inner;
#pragma omp parallel for schedule(static) if (outputs > kGrainCheap)
  for (int64_t oi = 0; oi < outputs; ++oi) {
    const int64_t o = oi / g.inner, i = oi % g.inner;
    Acc acc = partial[o * chunks * g.inner + i];
    for (int64_t c = 1; c < chunks; ++c) acc = R::merge(acc, partial[(o * chunks + c) * g.inner + i]);
    out[oi] = R::finish(acc);
  }
}

/// First index of the maximum along R of an [O, R, I] dense input; NaNs lose to numbers.
template <class S>
void argmax_dense(const S* x, int32_t* out, ReduceGeometry g) {
  const int64_t iblocks = (g.inner + kIBlock - 1) / kIBlock;
  const int64_t units = g.outer * iblocks;
#pragma omp parallel for schedule(static) if (g.outer * g.red * g.inner > kGrainCheap)
  for (int64_t u = 0; u < units; ++u) {
    const int64_t o = u / iblocks, i0 = (u % iblocks) * kIBlock, width = std::min(kIBlock, g.inner - i0);
    S best[kIBlock];
    int32_t idx[kIBlock];
    const S* base = x + o * g.red * g.inner + i0;
    for (int64_t i = 0; i < width; ++i) {
      best[i] = base[i];
      idx[i] = 0;
    }
    for (int64_t r = 1; r < g.red; ++r) {
      const S* row = base + r * g.inner;
      for (int64_t i = 0; i < width; ++i) {
        // `best != best`: a NaN so far is replaced by anything that follows.
        if (best[i] != best[i] || row[i] > best[i]) {
          best[i] = row[i];
          idx[i] = static_cast<int32_t>(r);
        }
      }
    }
    for (int64_t i = 0; i < width; ++i) out[o * g.inner + i0 + i] = idx[i];
  }
}

/// The [O, R, I] form of reducing `axes` of a dense `shape`, or nullopt when the reduced
/// axes are not one run once extent-1 axes are ignored.
std::optional<ReduceGeometry> dense_geometry(const Shape& shape, const std::vector<int64_t>& axes) {
  ReduceGeometry g;
  int state = 0;  // 0: before the reduced run, 1: inside it, 2: after it
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    const bool reduced = std::find(axes.begin(), axes.end(), static_cast<int64_t>(d)) != axes.end();
    if (reduced) {
      if (state == 2) return std::nullopt;
      state = 1;
      g.red *= shape[d];
    } else {
      if (state == 1) state = 2;
      (state == 0 ? g.outer : g.inner) *= shape[d];
    }
  }
  return g;
}

/// How the input reaches the dense kernel: directly, or through a transposing copy into
/// `scratch` that puts the kept axes first and the reduced axes last.
struct Prepared {
  ReduceGeometry geometry;
  Kernel transpose;  // empty when the input is used as is
  std::shared_ptr<HostMem> scratch;
  const std::byte* data = nullptr;
};

Prepared prepare_input(const ir::Node& node, DType dtype, const Shape& in_shape, const std::byte* in) {
  Prepared p;
  if (auto g = dense_geometry(in_shape, node.attrs.axes)) {
    p.geometry = *g;
    p.data = in;
    return p;
  }
  const std::vector<int64_t> strides = contiguous_strides(in_shape);
  Shape moved;
  std::vector<int64_t> moved_strides;
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t d = 0; d < in_shape.size(); ++d) {
      const bool reduced = std::find(node.attrs.axes.begin(), node.attrs.axes.end(),
                                     static_cast<int64_t>(d)) != node.attrs.axes.end();
      if (reduced != (pass == 1)) continue;
      moved.push_back(in_shape[d]);
      moved_strides.push_back(strides[d]);
      (reduced ? p.geometry.red : p.geometry.outer) *= in_shape[d];
    }
  }
  p.scratch = std::make_shared<HostMem>(numel(in_shape) * dtype_size(dtype));
  p.transpose = make_copy(dtype, moved, contiguous_view(p.scratch->data(), moved),
                          View{const_cast<std::byte*>(in), moved_strides});
  p.data = p.scratch->data();
  return p;
}

/// Partial-result chunks along R: only when the output alone cannot occupy the threads.
int64_t chunks_for(ReduceGeometry g) {
  const int64_t total = g.outer * g.red * g.inner;
  const int64_t units = g.outer * ((g.inner + kIBlock - 1) / kIBlock);
  if (units >= kMinUnits || total <= 2 * kGrainCheap) return 1;
  int64_t chunks = std::min(g.red, (total + kGrainCheap - 1) / kGrainCheap);
  // Bound the partial buffer to a few MiB however large the input is.
  chunks =
      std::min(chunks, std::max<int64_t>(1, (int64_t{1} << 19) / std::max<int64_t>(1, g.outer * g.inner)));
  return std::max<int64_t>(1, chunks);
}

template <class R>
Kernel reduce_kernel(Prepared p, std::byte* out) {
  using Acc = typename R::Acc;
  const int64_t chunks = chunks_for(p.geometry);
  auto partial = std::make_shared<std::vector<Acc>>(
      chunks > 1 ? static_cast<size_t>(p.geometry.outer * chunks * p.geometry.inner) : 0);
  auto* x = reinterpret_cast<const typename R::S*>(p.data);
  auto* o = reinterpret_cast<typename R::S*>(out);
  return [p = std::move(p), chunks, partial, x, o] {
    if (p.transpose) p.transpose();
    reduce_dense<R>(x, o, p.geometry, chunks, partial->data());
  };
}

}  // namespace

Kernel make_reduce(const ir::Node& node, const Shape& in_shape, const std::byte* in, std::byte* out) {
  Prepared p = prepare_input(node, node.dtype, in_shape, in);
  switch (node.op) {
    case ir::Op::kSum:
      if (node.dtype == DType::kF32) return reduce_kernel<SumF32>(std::move(p), out);
      if (node.dtype == DType::kI32) return reduce_kernel<SumI32>(std::move(p), out);
      break;
    case ir::Op::kMax:
      if (node.dtype == DType::kF32) return reduce_kernel<Extremum<float, true>>(std::move(p), out);
      if (node.dtype == DType::kI32) return reduce_kernel<Extremum<int32_t, true>>(std::move(p), out);
      break;
    case ir::Op::kMin:
      if (node.dtype == DType::kF32) return reduce_kernel<Extremum<float, false>>(std::move(p), out);
      if (node.dtype == DType::kI32) return reduce_kernel<Extremum<int32_t, false>>(std::move(p), out);
      break;
    default: break;
  }
  throw Error(std::string("[cpu] no reduction kernel for ") + ir::op_name(node.op) + " on " +
              dtype_name(node.dtype));
}

Kernel make_argmax(const ir::Node& node, const Shape& in_shape, DType in_dtype, const std::byte* in,
                   std::byte* out) {
  // One axis is always one run, so the input is never transposed.
  const ReduceGeometry g = *dense_geometry(in_shape, node.attrs.axes);
  auto* o = reinterpret_cast<int32_t*>(out);
  if (in_dtype == DType::kF32) {
    auto* x = reinterpret_cast<const float*>(in);
    return [x, o, g] { argmax_dense(x, o, g); };
  }
  if (in_dtype == DType::kI32) {
    auto* x = reinterpret_cast<const int32_t*>(in);
    return [x, o, g] { argmax_dense(x, o, g); };
  }
  throw Error(std::string("[cpu] argmax does not take ") + dtype_name(in_dtype));
}

namespace {

/// Prefix sums of a dense [outer, len, inner] input along len, each work unit an (outer index,
/// block of kIBlock inner columns) walked along the axis with one accumulator per column (f32
/// in double, i32 modulo 2^32, as Sum), so each output is the exact sum narrowed once.
template <class S, class Acc>
void cumsum_dense(const S* x, S* out, ReduceGeometry g, bool reverse) {
  const int64_t blocks = (g.inner + kIBlock - 1) / kIBlock, units = g.outer * blocks;
#pragma omp parallel for schedule(static) if (units > 1 && g.outer * g.red * g.inner >= (int64_t{1} << 15))
  for (int64_t u = 0; u < units; ++u) {
    const int64_t o = u / blocks, j0 = (u % blocks) * kIBlock, width = std::min(kIBlock, g.inner - j0);
    Acc acc[kIBlock] = {};
    for (int64_t s = 0; s < g.red; ++s) {
      const int64_t i = reverse ? g.red - 1 - s : s;
      const int64_t at = (o * g.red + i) * g.inner + j0;
      for (int64_t j = 0; j < width; ++j) {
        acc[j] += static_cast<Acc>(x[at + j]);
        if constexpr (std::is_same_v<S, float>)
          out[at + j] = narrow_f32(acc[j]);
        else
          out[at + j] = static_cast<S>(acc[j]);
      }
    }
  }
}

}  // namespace

Kernel make_cumsum(const ir::Node& node, const std::byte* in, std::byte* out) {
  const ReduceGeometry g = *dense_geometry(node.shape, node.attrs.axes);
  const bool reverse = node.attrs.reverse;
  if (node.dtype == DType::kF32) {
    auto* x = reinterpret_cast<const float*>(in);
    auto* o = reinterpret_cast<float*>(out);
    return [x, o, g, reverse] { cumsum_dense<float, double>(x, o, g, reverse); };
  }
  if (node.dtype == DType::kI32) {
    auto* x = reinterpret_cast<const int32_t*>(in);
    auto* o = reinterpret_cast<int32_t*>(out);
    return [x, o, g, reverse] { cumsum_dense<int32_t, uint32_t>(x, o, g, reverse); };
  }
  throw Error(std::string("[cpu] cumsum does not take ") + dtype_name(node.dtype));
}

}  // namespace tg::backend::cpu
