// Helpers shared by the CUDA backend's tests.
#pragma once
#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/driver.h"
#include "ir/strides.h"
#include "ir/graph.h"
#include "tensorgrad/errors.h"

/// Skips a GPU test with a message when this machine runs no CUDA device, else makes device
/// 0's context current (before any allocation). For tests with `namespace cuda =
/// tg::backend::cuda` in scope.
#define REQUIRE_GPU()                                                              \
  do {                                                                             \
    const std::string why = cuda::unavailable_reason(0);                           \
    if (!why.empty()) GTEST_SKIP() << "no usable GPU, GPU tests skipped: " << why; \
    cuda::open_device(0);                                                          \
  } while (0)

namespace tg::testing {

/// Whether NVRTC loads here (the compile tests need no GPU); `why` says why not.
inline bool have_nvrtc(std::string& why) {
  try {
    tg::backend::cuda::nvrtc();
    return true;
  } catch (const DeviceError& e) {
    why = e.what();
    return false;
  }
}

/// An H100/H200 SXM's properties (sm_90, 132 SMs), for generating kernels where there is no GPU
/// to ask; they only shape launches, so kernels made with them also run on other GPUs.
inline backend::cuda::DeviceInfo sm90_device(int sm_major = 9) {
  backend::cuda::DeviceInfo d;
  d.name = "sm_90 (assumed)";
  d.sm_major = sm_major;
  d.sm_count = 132;
  d.threads_per_sm = 2048;
  d.smem_per_block = 227 * 1024;
  d.smem_per_sm = 228 * 1024;
  d.l2_bytes = 50 << 20;
  return d;
}

/// Where a test's hand-run fused graph keeps a value: (node whose buffer holds it, strides).
using DevicePlaces = std::map<int32_t, std::pair<int32_t, std::vector<int64_t>>>;

/// Places a single-node group of a test graph on the device: an input (uploaded from the
/// f32 `feed`), a one-value constant (read with zero strides) or a broadcast (a view of its
/// input's place). Returns "" when placed, else the op it cannot place.
inline std::string place_leaf(const ir::Graph& g, int32_t id, const std::vector<float>& feed,
                              std::map<int32_t, backend::cuda::DeviceMemory>& mem, DevicePlaces& place) {
  const ir::Node& n = g.node(id);
  if (n.op == ir::Op::kInput) {
    const size_t bytes = feed.size() * sizeof(float);
    mem.emplace(id, backend::cuda::DeviceMemory(bytes)).first->second.upload(feed.data(), bytes);
    place[id] = {id, contiguous_strides(n.shape)};
  } else if (n.op == ir::Op::kConstant && n.attrs.values.size() == 1) {
    const float fv = static_cast<float>(n.attrs.values[0]);
    const int32_t iv = static_cast<int32_t>(n.attrs.values[0]);
    const uint8_t bv = n.attrs.values[0] != 0;
    const void* src = n.dtype == DType::kF32   ? static_cast<const void*>(&fv)
                      : n.dtype == DType::kI32 ? static_cast<const void*>(&iv)
                                               : static_cast<const void*>(&bv);
    mem.emplace(id, backend::cuda::DeviceMemory(4))
        .first->second.upload(src, static_cast<size_t>(dtype_size(n.dtype)));
    place[id] = {id, std::vector<int64_t>(n.shape.size(), 0)};
  } else if (n.op == ir::Op::kBroadcastTo) {
    const auto& [buffer, in_st] = place.at(n.inputs[0]);
    const Shape& xs = g.node(n.inputs[0]).shape;
    std::vector<int64_t> st(n.shape.size(), 0);
    for (size_t k = 0; k < xs.size(); ++k) st[n.shape.size() - xs.size() + k] = xs[k] == 1 ? 0 : in_st[k];
    place[id] = {buffer, st};
  } else {
    return ir::op_name(n.op);
  }
  return "";
}

}  // namespace tg::testing
