// Resizing and padding (functional.h): interpolate, adaptive_avg_pool2d and pad, composites of
// gathers along one axis at a time (take_along_axis with constant indices), selects and
// elementwise weights, so every backend runs them and their gradients scatter back to the
// sources. Index maps and weights are computed here, on the host, as PyTorch computes them.
#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "ir/api_util.h"
#include "tensorgrad/functional.h"

namespace tg {
using namespace ir;

namespace {

/// [1, …, n, …, 1] with n at `axis` of a rank-`rank` tensor.
Shape along(int64_t rank, int64_t axis, int64_t n) {
  Shape s(static_cast<size_t>(rank), 1);
  s[static_cast<size_t>(axis)] = n;
  return s;
}

/// x's elements at `idx` along `axis` (idx: one source index per output position).
Tensor gather_along(const Tensor& x, const std::vector<int32_t>& idx, int64_t axis, const Loc& loc) {
  return take_along_axis(
      x, constant(std::span<const int32_t>(idx), along(x.rank(), axis, std::ssize(idx)), loc), axis, loc);
}

/// A bool mask along `axis` (true where `keep`).
Tensor mask_along(const std::vector<float>& keep, int64_t rank, int64_t axis, const Loc& loc) {
  return cast(constant(std::span<const float>(keep), along(rank, axis, std::ssize(keep)), loc), DType::kBool,
              loc);
}

}  // namespace

Tensor interpolate(const Tensor& x, InterpolateOptions o, Loc loc) {
  if (x.rank() != 4) api_fail("interpolate", "input must be [N, C, H, W], got " + shape_str(x.shape()), loc);
  const bool by_size = o.size.h != 0 || o.size.w != 0;
  if (by_size && (o.size.h < 1 || o.size.w < 1))
    api_fail("interpolate",
             "size must be at least 1×1, got " + std::to_string(o.size.h) + "×" + std::to_string(o.size.w),
             loc);
  if (!by_size && !(o.scale > 0)) api_fail("interpolate", "needs a size or a positive scale", loc);
  if (o.align_corners && o.mode != InterpolateMode::kBilinear)
    api_fail("interpolate", "align_corners applies to bilinear mode only (as PyTorch's)", loc);
  Tensor y = x;
  for (int64_t axis : {2, 3}) {
    const int64_t in = x.shape()[static_cast<size_t>(axis)];
    const int64_t out = by_size ? (axis == 2 ? o.size.h : o.size.w)
                                : static_cast<int64_t>(std::floor(static_cast<double>(in) * o.scale));
    if (out < 1)
      api_fail("interpolate",
               "the output would be empty along axis " + std::to_string(axis) + " (" + std::to_string(in) +
                   " · " + std::to_string(o.scale) + ")",
               loc);
    // Source positions in f32, as PyTorch computes them for f32 tensors.
    const float scale =
        by_size ? static_cast<float>(in) / static_cast<float>(out) : static_cast<float>(1.0 / o.scale);
    Shape s(4, 1);
    s[static_cast<size_t>(axis)] = out;
    std::vector<int32_t> i0(static_cast<size_t>(out)), i1(i0.size());
    std::vector<float> l0(i0.size()), l1(i0.size());
    for (int64_t d = 0; d < out; ++d) {
      const size_t j = static_cast<size_t>(d);
      if (o.mode == InterpolateMode::kNearest) {
        const int64_t src = out == in       ? d
                            : out == 2 * in ? d / 2
                                            : static_cast<int64_t>(std::floor(static_cast<float>(d) * scale));
        i0[j] = static_cast<int32_t>(std::min(src, in - 1));
        continue;
      }
      float src = 0;
      if (o.align_corners) {
        src =
            out > 1 ? static_cast<float>(in - 1) / static_cast<float>(out - 1) * static_cast<float>(d) : 0.f;
      } else {
        src = std::max(scale * (static_cast<float>(d) + 0.5f) - 0.5f, 0.f);
      }
      const int64_t lo = std::min(static_cast<int64_t>(src), in - 1);
      i0[j] = static_cast<int32_t>(lo);
      i1[j] = static_cast<int32_t>(lo + (lo < in - 1 ? 1 : 0));
      l1[j] = src - static_cast<float>(lo);
      l0[j] = 1.f - l1[j];
    }
    const Tensor first = take_along_axis(y, constant(std::span<const int32_t>(i0), s, loc), axis, loc);
    if (o.mode == InterpolateMode::kNearest) {
      y = first;
      continue;
    }
    const Tensor second = take_along_axis(y, constant(std::span<const int32_t>(i1), s, loc), axis, loc);
    y = first * constant(std::span<const float>(l0), s, loc) +
        second * constant(std::span<const float>(l1), s, loc);
  }
  return y;
}

Tensor adaptive_avg_pool2d(const Tensor& x, Size2 size, Loc loc) {
  if (x.rank() != 4)
    api_fail("adaptive_avg_pool2d", "input must be [N, C, H, W], got " + shape_str(x.shape()), loc);
  if (size.h < 1 || size.w < 1)
    api_fail("adaptive_avg_pool2d",
             "the output must be at least 1×1, got " + std::to_string(size.h) + "×" + std::to_string(size.w),
             loc);
  // Along each axis, output i averages [⌊i·n/m⌋, ⌈(i + 1)·n/m⌉): the sum of up to k_max gathered
  // elements, those past the window selected away (not multiplied by 0: an infinity outside
  // the window stays outside), times 1/len.
  Tensor y = x;
  for (int64_t axis : {2, 3}) {
    const int64_t n = x.shape()[static_cast<size_t>(axis)], m = axis == 2 ? size.h : size.w;
    std::vector<int64_t> start(static_cast<size_t>(m)), len(start.size());
    int64_t k_max = 0;
    for (int64_t i = 0; i < m; ++i) {
      start[static_cast<size_t>(i)] = i * n / m;
      len[static_cast<size_t>(i)] = ((i + 1) * n + m - 1) / m - i * n / m;
      k_max = std::max(k_max, len[static_cast<size_t>(i)]);
    }
    Tensor sum;
    for (int64_t t = 0; t < k_max; ++t) {
      std::vector<int32_t> idx(start.size());
      std::vector<float> keep(start.size());
      for (size_t i = 0; i < start.size(); ++i) {
        idx[i] = static_cast<int32_t>(std::min(start[i] + t, n - 1));
        keep[i] = t < len[i] ? 1.f : 0.f;
      }
      Tensor term = gather_along(y, idx, axis, loc);
      if (std::find(keep.begin(), keep.end(), 0.f) != keep.end())
        term = where(mask_along(keep, 4, axis, loc), term, 0.0, loc);
      sum = t == 0 ? term : sum + term;
    }
    std::vector<float> inv(start.size());
    for (size_t i = 0; i < start.size(); ++i) inv[i] = 1.f / static_cast<float>(len[i]);
    y = sum * constant(std::span<const float>(inv), along(4, axis, m), loc);
  }
  return y;
}

Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, PadOptions o, Loc loc) {
  if (pads.size() % 2 != 0 || static_cast<int64_t>(pads.size()) > 2 * x.rank())
    api_fail("pad",
             "pads must be (before, after) pairs for at most the " + std::to_string(x.rank()) + " axes of " +
                 shape_str(x.shape()) + ", got " + std::to_string(pads.size()) + " numbers",
             loc);
  Tensor y = x;
  for (size_t p = 0; p < pads.size() / 2; ++p) {
    const int64_t axis = x.rank() - 1 - static_cast<int64_t>(p), before = pads[2 * p],
                  after = pads[2 * p + 1];
    const int64_t n = x.shape()[static_cast<size_t>(axis)];
    if (before < 0 || after < 0)
      api_fail("pad", "negative padding (cropping) is not supported: slice instead", loc);
    if (before == 0 && after == 0) continue;
    if (o.mode == PadMode::kReflect && (before >= n || after >= n))
      api_fail("pad",
               "reflect padding of " + std::to_string(std::max(before, after)) +
                   " needs more than that many elements along axis " + std::to_string(axis) + " (it has " +
                   std::to_string(n) + ")",
               loc);
    if (n == 0 && o.mode != PadMode::kConstant)
      api_fail("pad", "reflect and replicate padding need a non-empty axis", loc);
    const int64_t total = n + before + after;
    std::vector<int32_t> idx(static_cast<size_t>(total));
    std::vector<float> inside(idx.size());
    for (int64_t j = 0; j < total; ++j) {
      int64_t src = j - before;
      inside[static_cast<size_t>(j)] = src >= 0 && src < n ? 1.f : 0.f;
      if (o.mode == PadMode::kReflect) src = src < 0 ? -src : src >= n ? 2 * (n - 1) - src : src;
      idx[static_cast<size_t>(j)] =
          static_cast<int32_t>(std::clamp<int64_t>(src, 0, std::max<int64_t>(n - 1, 0)));
    }
    if (o.mode == PadMode::kConstant && n == 0) {
      Shape s = y.shape();
      s[static_cast<size_t>(axis)] = total;
      y = broadcast_to(constant_on(*y.graph(), {o.value}, {}, y.dtype(), loc), s, loc);
      continue;
    }
    y = gather_along(y, idx, axis, loc);
    if (o.mode == PadMode::kConstant) y = where(mask_along(inside, x.rank(), axis, loc), y, o.value, loc);
  }
  return y;
}

}  // namespace tg
