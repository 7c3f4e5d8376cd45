// attention_at (ops.def) on the CPU: attention of a few new queries over KV caches, where each
// sequence sees only its valid prefix. One work unit per (sequence, q head, query): the scores
// of the visible keys, their softmax and the weighted sum of values, with the D-long inner
// loops over unit-stride rows (the planner hands in views with unit stride along D). Decode
// steps have T = 1, so the T×S scores of a unit are one row: no blocking is needed.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backend/cpu/cpu_kernels.h"
#include "tensorgrad/errors.h"

namespace tg::backend::cpu {

Kernel make_attention_at(const ir::Node& node, const Shape& q_shape, const Shape& kv_shape,
                         const std::vector<View>& in, float* out) {
  const int64_t B = q_shape[0], Hq = q_shape[1], T = q_shape[2], D = q_shape[3], Hkv = kv_shape[1],
                S = kv_shape[2];
  const int64_t group = Hkv == 0 ? 1 : Hq / Hkv;
  const auto scale = static_cast<float>(node.attrs.values[0]);
  const auto* q = reinterpret_cast<const float*>(in[0].data);
  const auto* k = reinterpret_cast<const float*>(in[1].data);
  const auto* v = reinterpret_cast<const float*>(in[2].data);
  const auto* pos = reinterpret_cast<const int32_t*>(in[3].data);
  const std::vector<int64_t> qs = in[0].strides, ks = in[1].strides, vs = in[2].strides;
  const int64_t ps = in[3].strides.empty() ? 1 : in[3].strides[0];
  return [=] {
    for (int64_t b = 0; b < B; ++b)
      if (pos[b * ps] < 0 || pos[b * ps] > S - T)
        throw InputError("[attention_at] position " + std::to_string(pos[b * ps]) + " of sequence " +
                         std::to_string(b) + " is outside [0, " + std::to_string(S - T) + "] (" +
                         std::to_string(T) + " queries over a cache of " + std::to_string(S) + ")");
    const int64_t units = B * Hq * T;
#pragma omp parallel for schedule(dynamic) if (units > 1 && units * S * D > (int64_t{1} << 15))
    for (int64_t u = 0; u < units; ++u) {
      const int64_t i = u % T, h = (u / T) % Hq, b = u / (T * Hq), g = h / group;
      const int64_t visible = pos[b * ps] + i + 1;
      const float* qr = q + b * qs[0] + h * qs[1] + i * qs[2];
      std::vector<float> p(static_cast<size_t>(visible));
      float mx = -INFINITY;
      for (int64_t j = 0; j < visible; ++j) {
        const float* kr = k + b * ks[0] + g * ks[1] + j * ks[2];
        float dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += qr[d * qs[3]] * kr[d * ks[3]];
        p[static_cast<size_t>(j)] = dot * scale;
        mx = std::max(mx, dot * scale);
      }
      float total = 0;
      for (float& x : p) total += (x = std::exp(x - mx));
      float* o = out + ((b * Hq + h) * T + i) * D;
      std::fill(o, o + D, 0.0f);
      for (int64_t j = 0; j < visible; ++j) {
        const float w = p[static_cast<size_t>(j)] / total;
        const float* vr = v + b * vs[0] + g * vs[1] + j * vs[2];
        for (int64_t d = 0; d < D; ++d) o[d] += w * vr[d * vs[3]];
      }
    }
  };
}

}  // namespace tg::backend::cpu
