// Stride arithmetic shared by the schedule (passes/schedule.h) and the backends that read
// values as strided views of memory: dense strides, the density test and the reshape-as-view rule.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "tensorgrad/dtype.h"

namespace tg {

/// Row-major dense strides (elements) of `shape`.
std::vector<int64_t> contiguous_strides(const Shape& shape);
/// Row-major dense, ignoring the strides of extent-1 axes (which are never stepped).
bool is_contiguous_strides(const std::vector<int64_t>& strides, const Shape& shape);
/// Strides under which `to` reads the same elements as `from` with `strides` (row-major
/// order), or nothing: splitting an axis always works, merging only axes laid out as one run.
/// (The rule of torch.Tensor.view.)
std::optional<std::vector<int64_t>> reshaped_strides(const Shape& from, const std::vector<int64_t>& strides,
                                                     const Shape& to);

}  // namespace tg
