// Counter-based randomness of the CPU backend: Random (uniform [0, 1) of node.shape) and
// Dropout (x·[u ≥ p]/(1 − p)). Element i's uniform u is philox_uniform(seed, key, i) from
// backend/philox.h — the one definition every backend shares, so the bits match the ref
// backend's exactly. The key is an i32 scalar input read at execute time (the runtime
// advances it every step) and reinterpreted as uint32; the seed is a per-site attribute.
//
// One Philox block yields the four words of elements 4b … 4b+3, so the kernels evaluate the
// block once per four elements (philox_uniform would evaluate it once per element); this is
// the same stream, element for element, as the tests check. Work is split into fixed chunks
// that start on a multiple of 4, and x may be any view (it is walked in row-major order, so
// the element index is the flat position in the output).
#include <cstring>

#include "backend/cpu/cpu_kernels.h"
#include "backend/philox.h"
#include "tensorgrad/errors.h"

namespace tg::backend::cpu {
namespace {

constexpr int64_t kChunk = 4096;  // elements per work unit; a multiple of 4
static_assert(kChunk % 4 == 0);

/// u[e] = philox_uniform(seed, key, begin + e) for e in [0, end − begin); begin % 4 == 0.
void uniforms(uint64_t seed, uint32_t key, int64_t begin, int64_t end, float* u) {
  for (int64_t i = begin; i < end; i += 4) {
    const auto block = static_cast<uint64_t>(i) >> 2;
    const std::array<uint32_t, 4> words = Philox4x32::block(
        {static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), key, 0x746772u},
        {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
    for (int64_t w = 0; w < 4 && i + w < end; ++w)
      u[i - begin + w] = static_cast<float>(words[static_cast<size_t>(w)] >> 8) * 0x1.0p-24f;
  }
}

}  // namespace

Kernel make_random(const ir::Node& node, const View& x, const View& key, float* out) {
  const bool dropout = node.op == ir::Op::kDropout;
  const uint64_t seed = node.attrs.seed;
  const double p = dropout ? node.attrs.values[0] : 0.0;
  const double scale = 1.0 / (1.0 - p);
  const auto* key_ptr = reinterpret_cast<const int32_t*>(key.data);
  const int64_t total = numel(node.shape);
  const int64_t chunks = (total + kChunk - 1) / kChunk;
  if (!dropout) {
    return [=] {
      if (total == 0) return;
      uint32_t k;
      std::memcpy(&k, key_ptr, sizeof k);
#pragma omp parallel for schedule(static) if (chunks > 1)
      for (int64_t c = 0; c < chunks; ++c)
        uniforms(seed, k, c * kChunk, std::min(total, (c + 1) * kChunk), out + c * kChunk);
    };
  }
  // Operand 0 is the dense output, so a segment's offset 0 is its flat element index.
  auto nest = std::make_shared<const Nest>(make_nest(node.shape, {contiguous_strides(node.shape), x.strides}, kChunk));
  const auto* xs = reinterpret_cast<const float*>(x.data);
  return [=] {
    if (total == 0) return;
    uint32_t k;
    std::memcpy(&k, key_ptr, sizeof k);
#pragma omp parallel for schedule(static) if (chunks > 1)
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t begin = c * kChunk, end = std::min(total, begin + kChunk);
      float u[kChunk];
      uniforms(seed, k, begin, end, u);
      walk_range<2>(*nest, begin, end, [&](const std::array<int64_t, 2>& off, int64_t count) {
        const int64_t sx = nest->inner()[1];
        const float* ur = u + (off[0] - begin);
        float* o = out + off[0];
        const float* xr = xs + off[1];
        for (int64_t e = 0; e < count; ++e)
          o[e] = static_cast<double>(ur[e]) >= p ? static_cast<float>(static_cast<double>(xr[e * sx]) * scale) : 0.0f;
      });
    }
  };
}

}  // namespace tg::backend::cpu
