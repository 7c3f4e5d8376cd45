// Memory and data movement for the CPU backend: aligned host memory, stride helpers, the
// loop-nest collapsing that lets every strided kernel run as a few long inner loops, and
// the one strided copy that materialises views (broadcast, permute, slice), scatters
// unslice/concat pieces into place, and reads outputs back. Copies move raw 4-, 2- (bf16, f16) or 1-byte
// elements, so they need no per-dtype instantiation beyond the element size; a transpose
// is copied in cache-sized tiles.
#include <algorithm>
#include <cstring>

#include "backend/cpu/cpu_kernels.h"
#include "tensorgrad/errors.h"

namespace tg::backend::cpu {

HostMem::HostMem(int64_t bytes) : bytes_(bytes) {
  // aligned_alloc wants a multiple of the alignment; at least one line so data() is never null.
  const auto size = static_cast<size_t>(std::max<int64_t>(64, (bytes + 63) / 64 * 64));
  ptr_.reset(static_cast<std::byte*>(std::aligned_alloc(64, size)));
  if (!ptr_) throw DeviceError("[cpu] out of host memory allocating " + std::to_string(bytes) + " bytes");
  std::memset(ptr_.get(), 0, size);
}

bool is_contiguous(const View& view, const Shape& shape) {
  return is_contiguous_strides(view.strides, shape);
}

Nest make_nest(const Shape& shape, const std::vector<std::vector<int64_t>>& operand_strides, int64_t grain) {
  Nest nest;
  nest.numel = numel(shape);
  nest.grain = std::max<int64_t>(1, grain);
  const size_t ops = operand_strides.size();
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;  // never stepped, so its strides do not matter
    std::array<int64_t, kMaxOperands> st{};
    for (size_t k = 0; k < ops; ++k) st[k] = operand_strides[k][d];
    if (!nest.extents.empty()) {
      // The previous axis folds into this one when, for every operand, stepping it equals
      // stepping this axis through its whole extent.
      bool merge = true;
      for (size_t k = 0; k < ops; ++k) merge = merge && nest.strides.back()[k] == st[k] * shape[d];
      if (merge) {
        nest.extents.back() *= shape[d];
        nest.strides.back() = st;
        continue;
      }
    }
    nest.extents.push_back(shape[d]);
    nest.strides.push_back(st);
  }
  if (nest.extents.empty()) {  // a scalar, or all extents 1: one element
    nest.extents.push_back(1);
    nest.strides.push_back({});
  }
  return nest;
}

void store_double(DType dtype, std::byte* dst, int64_t i, double v) {
  switch (dtype) {
    case DType::kF32: reinterpret_cast<float*>(dst)[i] = narrow_f32(v); return;
    case DType::kI32: reinterpret_cast<int32_t*>(dst)[i] = saturate_i32(v); return;
    case DType::kBool: reinterpret_cast<uint8_t*>(dst)[i] = v != 0.0 ? 1 : 0; return;
    case DType::kBF16: reinterpret_cast<uint16_t*>(dst)[i] = bf16_from_f32(narrow_f32(v)); return;
    case DType::kF16: reinterpret_cast<uint16_t*>(dst)[i] = f16_from_f32(narrow_f32(v)); return;
    case DType::kI8:
      reinterpret_cast<int8_t*>(dst)[i] = static_cast<int8_t>(std::clamp(v, -128.0, 127.0));
      return;
  }
}

namespace {

template <class E>
void copy_elements(const Nest& nest, E* dst, const E* src) {
  const int64_t sd = nest.inner()[0], ss = nest.inner()[1];
  run_nest<2>(nest, [=](const std::array<int64_t, 2>& off, int64_t n) {
    E* __restrict o = dst + off[0];
    const E* __restrict x = src + off[1];
    if (sd == 1 && ss == 1) {
      std::memcpy(o, x, static_cast<size_t>(n) * sizeof(E));
    } else if (sd == 1 && ss == 0) {
      std::fill(o, o + n, *x);
    } else if (sd == 1) {
      for (int64_t j = 0; j < n; ++j) o[j] = x[j * ss];
    } else {
      for (int64_t j = 0; j < n; ++j) o[j * sd] = x[j * ss];
    }
  });
}

/// A copy whose destination is dense along the last axis while the source is dense along
/// another axis p (a transpose): done in kTransposeTile×kTransposeTile blocks so both sides stay in cache,
/// instead of reading the source a whole stride apart per element.
struct TiledCopy {
  Nest outer;                        // every axis but p and the last; operands (dst, src)
  int64_t rows = 0, cols = 0;        // extents of p and of the last axis
  int64_t dst_row = 0, src_col = 0;  // dst stride of p, src stride of the last axis
};
constexpr int64_t kTransposeTile = 32;

std::optional<TiledCopy> tiled_plan(const Nest& nest) {
  const size_t last = nest.extents.size() - 1;
  if (last == 0 || nest.strides[last][0] != 1 || nest.strides[last][1] == 1 || nest.strides[last][1] == 0)
    return std::nullopt;
  for (size_t p = 0; p < last; ++p) {
    if (nest.strides[p][1] != 1) continue;
    TiledCopy t;
    t.rows = nest.extents[p];
    t.cols = nest.extents[last];
    t.dst_row = nest.strides[p][0];
    t.src_col = nest.strides[last][1];
    Shape outer_shape;
    std::vector<int64_t> dst_st, src_st;
    for (size_t d = 0; d < last; ++d) {
      if (d == p) continue;
      outer_shape.push_back(nest.extents[d]);
      dst_st.push_back(nest.strides[d][0]);
      src_st.push_back(nest.strides[d][1]);
    }
    t.outer = make_nest(outer_shape, {dst_st, src_st}, 1);
    return t;
  }
  return std::nullopt;
}

template <class E>
void copy_tiled(const TiledCopy& t, int64_t grain, E* dst, const E* src) {
  const int64_t tr = (t.rows + kTransposeTile - 1) / kTransposeTile,
                tc = (t.cols + kTransposeTile - 1) / kTransposeTile;
  const int64_t units = t.outer.numel * tr * tc;
  const size_t rank = t.outer.extents.size();
#pragma omp parallel for schedule(static) if (t.outer.numel * t.rows * t.cols > grain)
  for (int64_t u = 0; u < units; ++u) {
    int64_t o = u / (tr * tc), od = 0, os = 0;
    for (size_t d = rank; d-- > 0;) {
      const int64_t i = o % t.outer.extents[d];
      o /= t.outer.extents[d];
      od += i * t.outer.strides[d][0];
      os += i * t.outer.strides[d][1];
    }
    const int64_t r0 = (u / tc) % tr * kTransposeTile, c0 = u % tc * kTransposeTile;
    const int64_t r1 = std::min(t.rows, r0 + kTransposeTile), c1 = std::min(t.cols, c0 + kTransposeTile);
    for (int64_t r = r0; r < r1; ++r) {
      E* __restrict out = dst + od + r * t.dst_row;
      const E* __restrict in = src + os + r;
      for (int64_t c = c0; c < c1; ++c) out[c] = in[c * t.src_col];
    }
  }
}

struct CopyPlan {
  Nest nest;
  std::optional<TiledCopy> tiled;
};

CopyPlan plan_copy(const Shape& shape, const View& dst, const View& src) {
  // Copies only move bytes: a bigger grain than arithmetic, as memcpy saturates bandwidth sooner.
  CopyPlan plan{make_nest(shape, {dst.strides, src.strides}, kGrainCheap * 2), std::nullopt};
  plan.tiled = tiled_plan(plan.nest);
  return plan;
}

template <class E>
void copy_typed(const CopyPlan& plan, E* dst, const E* src) {
  if (plan.tiled)
    copy_tiled(*plan.tiled, plan.nest.grain, dst, src);
  else
    copy_elements(plan.nest, dst, src);
}

void copy_with(const CopyPlan& plan, DType dtype, std::byte* dst, const std::byte* src) {
  switch (dtype_size(dtype)) {
    case 4: return copy_typed(plan, reinterpret_cast<uint32_t*>(dst), reinterpret_cast<const uint32_t*>(src));
    case 2: return copy_typed(plan, reinterpret_cast<uint16_t*>(dst), reinterpret_cast<const uint16_t*>(src));
    default: return copy_typed(plan, reinterpret_cast<uint8_t*>(dst), reinterpret_cast<const uint8_t*>(src));
  }
}

}  // namespace

Kernel make_copy(DType dtype, const Shape& shape, const View& dst, const View& src) {
  CopyPlan plan = plan_copy(shape, dst, src);
  std::byte* d = dst.data;
  const std::byte* s = src.data;
  return [plan = std::move(plan), dtype, d, s] { copy_with(plan, dtype, d, s); };
}

void copy_now(DType dtype, const Shape& shape, const View& dst, const View& src) {
  copy_with(plan_copy(shape, dst, src), dtype, dst.data, src.data);
}

}  // namespace tg::backend::cpu
