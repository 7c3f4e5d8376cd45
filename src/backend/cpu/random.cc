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
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "backend/cpu/cpu_kernels.h"
#include "backend/philox.h"
#include "tensorgrad/errors.h"

namespace tg::backend::cpu {
namespace {

constexpr int64_t kUnitElems = 4096;  // elements per work unit; a multiple of 4
static_assert(kUnitElems % 4 == 0);

/// u[e] = philox_uniform(seed, key, begin + e) for e in [0, end − begin); begin % 4 == 0.
void uniforms(uint64_t seed, uint32_t key, int64_t begin, int64_t end, float* u) {
  for (int64_t i = begin; i < end; i += 4) {
    const auto block = static_cast<uint64_t>(i) >> 2;
    const std::array<uint32_t, 4> words =
        Philox4x32::block({static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), key, 0x746772u},
                          {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
    for (int64_t w = 0; w < 4 && i + w < end; ++w)
      u[i - begin + w] = static_cast<float>(words[static_cast<size_t>(w)] >> 8) * 0x1.0p-24f;
  }
}

/// One row of sample (ops.def). Greedy is a scan; otherwise the top-k cut is the k-th largest
/// logit (nth_element), the nucleus cut walks the candidates sorted by logit, and the draw is
/// Gumbel-max with the scores in double, as every backend computes them.
int32_t sample_row(const float* x, int64_t vocab, double temperature, double top_k, double top_p,
                   double min_p, uint32_t seed, uint32_t counter, uint64_t first_element) {
  std::vector<float> v(static_cast<size_t>(vocab));
  int64_t best = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    v[static_cast<size_t>(i)] = std::isnan(x[i]) ? -INFINITY : x[i] + 0.0f;  // + 0: -0 → +0
    if (v[static_cast<size_t>(i)] > v[static_cast<size_t>(best)]) best = i;
  }
  const double m = v[static_cast<size_t>(best)];
  if (!(temperature > 0) || m == -INFINITY) return static_cast<int32_t>(best);
  float cut = -INFINITY;  // candidates are the logits >= cut
  if (top_k >= 1 && top_k < static_cast<double>(vocab)) {
    std::vector<float> sorted = v;
    const auto k = static_cast<size_t>(top_k) - 1;
    std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(k), sorted.end(),
                     std::greater<float>());
    cut = sorted[k];
  }
  if (top_p < 1) {
    std::vector<std::pair<float, double>> cand;  // (logit, exp((logit − m)/T)), largest first
    double z = 0;
    for (const float xi : v)
      if (xi >= cut) {
        cand.emplace_back(xi, std::exp((static_cast<double>(xi) - m) / temperature));
        z += cand.back().second;
      }
    std::sort(cand.begin(), cand.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    double above = 0;  // mass of the candidates strictly above the current group of equal logits
    for (size_t a = 0; a < cand.size();) {
      if (a > 0 && !(above < top_p * z)) break;  // the largest logits are always kept
      cut = cand[a].first;
      size_t b = a;
      for (; b < cand.size() && cand[b].first == cand[a].first; ++b) above += cand[b].second;
      a = b;
    }
  }
  // min_p: probability ≥ min_p · the largest's, (x − m)/T ≥ ln min_p.
  // The largest logits always stay (min_p > 1 keeps them alone).
  const double at_least = min_p > 0 ? std::min(m, m + temperature * std::log(min_p)) : -INFINITY;
  double best_score = -INFINITY;
  int64_t pick = -1;
  for (int64_t i = 0; i < vocab; ++i) {
    const float xi = v[static_cast<size_t>(i)];
    if (!(xi >= cut) || xi == -INFINITY || static_cast<double>(xi) < at_least) continue;  // −inf: no mass
    const double u = philox_uniform(seed, counter, first_element + static_cast<uint64_t>(i));
    double score = static_cast<double>(xi) / temperature - std::log(-std::log(u));
    if (std::isnan(score)) score = -INFINITY;  // ∞/∞ at an infinite temperature
    if (pick < 0 || score > best_score) {
      best_score = score;
      pick = i;
    }
  }
  return static_cast<int32_t>(pick);
}

}  // namespace

Kernel make_sample(int64_t rows, int64_t vocab, const float* logits, const float* params, const int32_t* key,
                   int32_t* out) {
  return [=] {
    const double temperature = params[0], top_k = params[1], top_p = params[2], min_p = params[3];
    uint32_t seed, counter;
    std::memcpy(&seed, key, sizeof seed);
    std::memcpy(&counter, key + 1, sizeof counter);
#pragma omp parallel for schedule(dynamic) if (rows > 1 && rows * vocab > (int64_t{1} << 14))
    for (int64_t r = 0; r < rows; ++r)
      out[r] = sample_row(logits + r * vocab, vocab, temperature, top_k, top_p, min_p, seed, counter,
                          static_cast<uint64_t>(r * vocab));
  };
}

Kernel make_random(const ir::Node& node, const View& x, const View& key, float* out) {
  const bool dropout = node.op == ir::Op::kDropout;
  const uint64_t seed = node.attrs.seed;
  const double p = dropout ? node.attrs.values[0] : 0.0;
  const double scale = 1.0 / (1.0 - p);
  const auto* key_ptr = reinterpret_cast<const int32_t*>(key.data);
  const int64_t total = numel(node.shape);
  const int64_t chunks = (total + kUnitElems - 1) / kUnitElems;
  if (!dropout) {
    return [=] {
      if (total == 0) return;
      uint32_t k;
      std::memcpy(&k, key_ptr, sizeof k);
#pragma omp parallel for schedule(static) if (chunks > 1)
      for (int64_t c = 0; c < chunks; ++c)
        uniforms(seed, k, c * kUnitElems, std::min(total, (c + 1) * kUnitElems), out + c * kUnitElems);
    };
  }
  // Operand 0 is the dense output, so a segment's offset 0 is its flat element index.
  auto nest = std::make_shared<const Nest>(
      make_nest(node.shape, {contiguous_strides(node.shape), x.strides}, kUnitElems));
  const auto* xs = reinterpret_cast<const float*>(x.data);
  return [=] {
    if (total == 0) return;
    uint32_t k;
    std::memcpy(&k, key_ptr, sizeof k);
#pragma omp parallel for schedule(static) if (chunks > 1)
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t begin = c * kUnitElems, end = std::min(total, begin + kUnitElems);
      float u[kUnitElems];
      uniforms(seed, k, begin, end, u);
      walk_range<2>(*nest, begin, end, [&](const std::array<int64_t, 2>& off, int64_t count) {
        const int64_t sx = nest->inner()[1];
        const float* ur = u + (off[0] - begin);
        float* o = out + off[0];
        const float* xr = xs + off[1];
        for (int64_t e = 0; e < count; ++e)
          o[e] = static_cast<double>(ur[e]) >= p ? static_cast<float>(static_cast<double>(xr[e * sx]) * scale)
                                                 : 0.0f;
      });
    }
  };
}

}  // namespace tg::backend::cpu
