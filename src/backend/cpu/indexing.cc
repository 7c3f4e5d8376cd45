// Indexing kernels of the CPU backend: Gather (take_along_axis) and its adjoint ScatterAdd.
// Both see their operands as [outer, axis, inner] around the indexed axis: per operand, the
// element offsets of every outer and every inner position are tabulated once at prepare
// time, so arbitrary views — in particular indices broadcast with stride 0, as embedding
// passes its ids along the feature axis — are read in place and never copied.
//
//   gather:      out[o, k, i] = x[o, idx[o, k, i], i]          (out, idx: small; x: big)
//   scatter_add: out = 0; out[o, idx[o, k, i], i] += src[o, k, i]  (src, idx: small; out: big)
//
// Gather writes each output element once, so any split is race-free. ScatterAdd may send
// many sources to one output element, so a work unit owns whole output columns: an (outer
// position, inner block) pair, plus — when there are fewer such pairs than threads — one of
// several disjoint ranges of the indexed axis (a unit skips indices outside its range).
// Every output element is therefore accumulated by one thread in increasing k, and the
// result does not depend on the thread count. An index outside [0, extent) is never
// dereferenced: the smallest offending flat position is min-reduced across the loop and
// thrown as tg::InputError afterwards.
#include <omp.h>

#include <cstring>
#include <string>

#include "backend/cpu/cpu_kernels.h"
#include "tensorgrad/errors.h"

namespace tg::backend::cpu {
namespace {

constexpr int64_t kNoBad = std::numeric_limits<int64_t>::max();
constexpr int64_t kInnerBlock = 256;  // inner positions a scatter unit owns

/// Element offsets of every row-major position of axes [begin, end) of a view.
std::vector<int64_t> offset_table(const Shape& shape, const std::vector<int64_t>& strides, size_t begin,
                                  size_t end) {
  int64_t count = 1;
  for (size_t d = begin; d < end; ++d) count *= shape[d];
  std::vector<int64_t> table(static_cast<size_t>(count));
  std::vector<int64_t> idx(end - begin, 0);
  int64_t off = 0;
  for (int64_t p = 0; p < count; ++p) {
    table[static_cast<size_t>(p)] = off;
    for (size_t d = end; d-- > begin;) {
      off += strides[d];
      if (++idx[d - begin] < shape[d]) break;
      off -= strides[d] * shape[d];
      idx[d - begin] = 0;
    }
  }
  return table;
}

/// One operand seen as [outer, axis, inner]: element (o, k, i) is at
/// outer[o] + k·axis_stride + inner[i].
struct IndexOperand {
  std::vector<int64_t> outer, inner;
  int64_t axis_stride = 0;
  bool inner_unit = true;  // inner[i] == i: the inner run is dense
  bool inner_zero = true;  // inner[i] == 0: constant along the inner run (broadcast ids)
};

IndexOperand split(const View& v, const Shape& shape, size_t axis) {
  IndexOperand op;
  op.outer = offset_table(shape, v.strides, 0, axis);
  op.inner = offset_table(shape, v.strides, axis + 1, shape.size());
  op.axis_stride = v.strides[axis];
  for (size_t i = 0; i < op.inner.size(); ++i) {
    op.inner_unit = op.inner_unit && op.inner[i] == static_cast<int64_t>(i);
    op.inner_zero = op.inner_zero && op.inner[i] == 0;
  }
  return op;
}

struct IndexGeometry {
  int64_t outer = 1, len = 1, inner = 1;  // the small side (idx shape)
  int64_t extent = 0;                     // the big side's indexed axis: valid index range
};

IndexGeometry geometry(const Shape& small, const Shape& big, size_t axis) {
  IndexGeometry g;
  for (size_t d = 0; d < axis; ++d) g.outer *= small[d];
  g.len = small[axis];
  for (size_t d = axis + 1; d < small.size(); ++d) g.inner *= small[d];
  g.extent = big[axis];
  return g;
}

[[noreturn]] void throw_bad_index(const char* op, int64_t pos, const int32_t* idx, const IndexOperand& io,
                                  const IndexGeometry& g, const Shape& small, const Shape& big, DType dtype,
                                  size_t axis) {
  const int64_t i = pos % g.inner, k = (pos / g.inner) % g.len, o = pos / (g.inner * g.len);
  const int32_t value =
      idx[io.outer[static_cast<size_t>(o)] + k * io.axis_stride + io.inner[static_cast<size_t>(i)]];
  throw InputError(std::string("[") + op + "] index " + std::to_string(value) + " out of range [0, " +
                   std::to_string(g.extent) + ") along axis " + std::to_string(axis) + " of " +
                   dtype_name(dtype) + shape_str(big) + " (indices element " + std::to_string(pos) +
                   " of i32" + shape_str(small) + ")");
}

inline bool in_range(int32_t j, int64_t extent) { return j >= 0 && j < extent; }

template <class E>
Kernel gather_kernel(const ir::Node& node, const Shape& x_shape, const View& x, const View& idx,
                     std::byte* out_bytes) {
  const auto axis = static_cast<size_t>(node.attrs.axes[0]);
  const Shape small = node.shape, big = x_shape;
  const DType dtype = node.dtype;
  const IndexGeometry g = geometry(small, big, axis);
  auto xo = std::make_shared<const IndexOperand>(split(x, big, axis));
  auto io = std::make_shared<const IndexOperand>(split(idx, small, axis));
  const auto* X = reinterpret_cast<const E*>(x.data);
  const auto* I = reinterpret_cast<const int32_t*>(idx.data);
  auto* out = reinterpret_cast<E*>(out_bytes);
  const int64_t rows = g.outer * g.len, total = rows * g.inner;
  const int64_t rows_per_chunk = std::max<int64_t>(1, kGrainCheap / std::max<int64_t>(1, g.inner));
  const int64_t chunks = (rows + rows_per_chunk - 1) / rows_per_chunk;
  return [=] {
    if (total == 0) return;
    const IndexOperand& xs = *xo;
    const IndexOperand& is = *io;
    int64_t bad = kNoBad;
#pragma omp parallel for schedule(static) reduction(min : bad) if (chunks > 1)
    for (int64_t c = 0; c < chunks; ++c) {
      for (int64_t r = c * rows_per_chunk; r < std::min(rows, (c + 1) * rows_per_chunk); ++r) {
        const int64_t o = r / g.len, k = r % g.len;
        E* dst = out + r * g.inner;
        const E* xrow = X + xs.outer[static_cast<size_t>(o)];
        const int32_t* irow = I + is.outer[static_cast<size_t>(o)] + k * is.axis_stride;
        if (is.inner_zero) {  // one index for the whole run: embedding rows
          const int32_t j = irow[0];
          if (!in_range(j, g.extent)) {
            bad = std::min(bad, r * g.inner);
            std::memset(static_cast<void*>(dst), 0, static_cast<size_t>(g.inner) * sizeof(E));
            continue;
          }
          const E* src = xrow + j * xs.axis_stride;
          if (xs.inner_unit) {
            std::memcpy(dst, src, static_cast<size_t>(g.inner) * sizeof(E));
          } else {
            for (int64_t i = 0; i < g.inner; ++i) dst[i] = src[xs.inner[static_cast<size_t>(i)]];
          }
          continue;
        }
        for (int64_t i = 0; i < g.inner; ++i) {
          const int32_t j = irow[is.inner[static_cast<size_t>(i)]];
          if (!in_range(j, g.extent)) {
            bad = std::min(bad, r * g.inner + i);
            dst[i] = E{};
            continue;
          }
          dst[i] = xrow[j * xs.axis_stride + xs.inner[static_cast<size_t>(i)]];
        }
      }
    }
    if (bad != kNoBad) throw_bad_index("gather", bad, I, is, g, small, big, dtype, axis);
  };
}

}  // namespace

Kernel make_gather(const ir::Node& node, const Shape& x_shape, const View& x, const View& idx,
                   std::byte* out) {
  switch (dtype_size(node.dtype)) {
    case 4: return gather_kernel<uint32_t>(node, x_shape, x, idx, out);
    case 2: return gather_kernel<uint16_t>(node, x_shape, x, idx, out);  // a half-stored embedding
    case 1: return gather_kernel<uint8_t>(node, x_shape, x, idx, out);
    default: throw Error("[cpu] gather of an unsupported element size");
  }
}

Kernel make_update_slice(const ir::Node& node, const Shape& src_shape, bool per_row, const std::byte* dst,
                         const std::byte* src, const int32_t* pos, std::byte* out) {
  const auto axis = static_cast<size_t>(node.attrs.axes[0]);
  const Shape big = node.shape;
  // Both dense: [outer, extent, inner] with the rows of one offset contiguous per outer index.
  int64_t outer = 1, inner = dtype_size(node.dtype);
  for (size_t d = 0; d < axis; ++d) outer *= big[d];
  for (size_t d = axis + 1; d < big.size(); ++d) inner *= big[d];
  const int64_t extent = big[axis], len = src_shape[axis], rows = per_row ? big[0] : 1;
  const int64_t total = numel(big) * dtype_size(node.dtype), per_offset = outer / std::max<int64_t>(rows, 1);
  return [=] {
    for (int64_t r = 0; r < rows; ++r)
      if (pos[r] < 0 || pos[r] + len > extent)
        throw InputError("[update_slice] offset " + std::to_string(pos[r]) +
                         (per_row ? " of row " + std::to_string(r) : "") + " + " + std::to_string(len) +
                         " rows exceeds the extent " + std::to_string(extent) + " of axis " +
                         std::to_string(axis));
    if (out != dst && total > 0) std::memcpy(out, dst, static_cast<size_t>(total));
    if (len == 0) return;
#pragma omp parallel for schedule(static) if (outer * len * inner > (int64_t{1} << 18))
    for (int64_t o = 0; o < outer; ++o) {
      const int64_t p = pos[per_row ? o / per_offset : 0];
      std::memcpy(out + (o * extent + p) * inner, src + o * len * inner, static_cast<size_t>(len * inner));
    }
  };
}

Kernel make_rotary(const Shape& shape, const View& x, const View& cos, const View& sin, float* out) {
  const int64_t d = shape.back(), h = d / 2, rows = numel(shape) / std::max<int64_t>(d, 1);
  const size_t last = shape.size() - 1;
  return [=] {
#pragma omp parallel for schedule(static) if (rows * d > (int64_t{1} << 16))
    for (int64_t r = 0; r < rows; ++r) {
      // Each operand's offset of row r, from r's coordinates on the leading axes.
      int64_t off[3] = {0, 0, 0}, rest = r;
      for (size_t a = last; a-- > 0;) {
        const int64_t c = rest % shape[a];
        rest /= shape[a];
        off[0] += c * x.strides[a], off[1] += c * cos.strides[a], off[2] += c * sin.strides[a];
      }
      const float* xr = reinterpret_cast<const float*>(x.data) + off[0];
      const float* cr = reinterpret_cast<const float*>(cos.data) + off[1];
      const float* sr = reinterpret_cast<const float*>(sin.data) + off[2];
      const int64_t xs = x.strides[last], cs = cos.strides[last], ss = sin.strides[last];
      float* o = out + r * d;
      for (int64_t i = 0; i < h; ++i) {
        const float x1 = xr[i * xs], x2 = xr[(i + h) * xs];
        o[i] = x1 * cr[i * cs] - x2 * sr[i * ss];
        o[i + h] = x2 * cr[(i + h) * cs] + x1 * sr[(i + h) * ss];
      }
    }
  };
}

Kernel make_scatter_add(const ir::Node& node, const Shape& src_shape, const View& src, const View& idx,
                        float* out) {
  const auto axis = static_cast<size_t>(node.attrs.axes[0]);
  const Shape small = src_shape, big = node.shape;
  const IndexGeometry g = geometry(small, big, axis);
  auto so = std::make_shared<const IndexOperand>(split(src, small, axis));
  auto io = std::make_shared<const IndexOperand>(split(idx, small, axis));
  const auto* S = reinterpret_cast<const float*>(src.data);
  const auto* I = reinterpret_cast<const int32_t*>(idx.data);
  const int64_t out_numel = numel(big), in_numel = numel(small);
  const int64_t iblocks = (g.inner + kInnerBlock - 1) / kInnerBlock;
  const int64_t columns = g.outer * iblocks;
  // The output is dense [outer, extent, inner].
  const int64_t out_axis_stride = g.inner, out_outer_stride = g.extent * g.inner;
  return [=] {
    if (out_numel > 0) std::memset(out, 0, static_cast<size_t>(out_numel) * sizeof(float));
    if (in_numel == 0) return;
    const IndexOperand& ss = *so;
    const IndexOperand& is = *io;
    const bool parallel = in_numel > kGrainCheap;
    // Fewer columns than threads: also split the indexed axis of the output into ranges.
    // Any split gives the same bits (each element is still summed in k order by one thread).
    const int64_t threads = parallel ? omp_get_max_threads() : 1;
    const int64_t parts = columns >= threads ? 1
                                             : std::min<int64_t>(std::max<int64_t>(1, g.extent),
                                                                 (threads + columns - 1) / columns);
    const int64_t part_len = (g.extent + parts - 1) / std::max<int64_t>(1, parts);
    const int64_t units = columns * parts;
    int64_t bad = kNoBad;
#pragma omp parallel for schedule(static) reduction(min : bad) if (parallel && units > 1)
    for (int64_t u = 0; u < units; ++u) {
      const int64_t part = u % parts, col = u / parts, o = col / iblocks, ib = col % iblocks;
      const int64_t lo = part * part_len, hi = std::min(g.extent, lo + part_len);
      const int64_t i0 = ib * kInnerBlock, width = std::min(kInnerBlock, g.inner - i0);
      float* obase = out + o * out_outer_stride + i0;
      for (int64_t k = 0; k < g.len; ++k) {
        const int32_t* irow = I + is.outer[static_cast<size_t>(o)] + k * is.axis_stride;
        const float* srow = S + ss.outer[static_cast<size_t>(o)] + k * ss.axis_stride;
        if (is.inner_zero) {  // one index for the whole run: embedding gradient rows
          const int32_t j = irow[0];
          if (!in_range(j, g.extent)) {
            if (part == 0) bad = std::min(bad, (o * g.len + k) * g.inner + i0);
            continue;
          }
          if (j < lo || j >= hi) continue;
          float* dst = obase + j * out_axis_stride;
          if (ss.inner_unit) {
            const float* s = srow + i0;
            for (int64_t i = 0; i < width; ++i) dst[i] += s[i];
          } else {
            for (int64_t i = 0; i < width; ++i) dst[i] += srow[ss.inner[static_cast<size_t>(i0 + i)]];
          }
          continue;
        }
        for (int64_t i = 0; i < width; ++i) {
          const int32_t j = irow[is.inner[static_cast<size_t>(i0 + i)]];
          if (!in_range(j, g.extent)) {
            if (part == 0) bad = std::min(bad, (o * g.len + k) * g.inner + i0 + i);
            continue;
          }
          if (j < lo || j >= hi) continue;
          obase[j * out_axis_stride + i] += srow[ss.inner[static_cast<size_t>(i0 + i)]];
        }
      }
    }
    if (bad != kNoBad) throw_bad_index("scatter_add", bad, I, is, g, small, big, DType::kF32, axis);
  };
}

}  // namespace tg::backend::cpu
