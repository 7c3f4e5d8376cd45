// Stride arithmetic (see strides.h).
#include "ir/strides.h"

namespace tg {

std::vector<int64_t> contiguous_strides(const Shape& shape) {
  std::vector<int64_t> st(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) st[i - 1] = st[i] * shape[i];
  return st;
}

bool is_contiguous_strides(const std::vector<int64_t>& strides, const Shape& shape) {
  if (numel(shape) == 0) return true;
  int64_t expected = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] != 1 && strides[d] != expected) return false;
    expected *= shape[d];
  }
  return true;
}

std::optional<std::vector<int64_t>> reshaped_strides(const Shape& from, const std::vector<int64_t>& strides,
                                                     const Shape& to) {
  std::vector<int64_t> out(to.size(), 0);
  // No elements, or one (a scalar seen as [1, 1, …] or back): no axis is ever stepped.
  if (numel(from) <= 1) return contiguous_strides(to);
  int64_t view_d = static_cast<int64_t>(to.size()) - 1;
  int64_t chunk_stride = strides.empty() ? 1 : strides.back(), tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(from.size()) - 1; d >= 0; --d) {
    tensor_numel *= from[static_cast<size_t>(d)];
    // The run of axes ends where the next outer axis is not laid out right after this run.
    const bool run_ends = d == 0 || (from[static_cast<size_t>(d - 1)] != 1 &&
                                     strides[static_cast<size_t>(d - 1)] != tensor_numel * chunk_stride);
    if (!run_ends) continue;
    while (view_d >= 0 && (view_numel < tensor_numel || to[static_cast<size_t>(view_d)] == 1)) {
      out[static_cast<size_t>(view_d)] = view_numel * chunk_stride;
      view_numel *= to[static_cast<size_t>(view_d)];
      --view_d;
    }
    if (view_numel != tensor_numel) return std::nullopt;
    if (d > 0) {
      chunk_stride = strides[static_cast<size_t>(d - 1)];
      tensor_numel = view_numel = 1;
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

}  // namespace tg
