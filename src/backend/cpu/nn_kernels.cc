// Row-wise NN kernels of the CPU backend: Softmax / LogSoftmax (any axis, optional causal
// mask), CrossEntropy and its gradient, LayerNorm / RmsNorm and their gradients. Inputs are
// dense (the planner copies views first), except the 1-D targets and loss gradient of the
// cross-entropy pair, which are read through their strides. Rows are independent, so every
// kernel is one parallel loop over rows (or over [outer, inner block] tiles when softmax runs
// along an axis that is not the last); statistics — softmax sums, means, variances — are
// accumulated in double, values stay f32. Results never depend on the thread count.
//
// Math of the backward kernels, per row of length D (all means over the row):
//   cross-entropy, loss_n = lse(x_n) − x_n[t_n]:
//     dlogits[n, c] = (softmax(x_n)[c] − [c = t_n]) · dloss[n]     (0 for ignored rows)
//   layer norm, y = x̂ = (x − μ)/σ with σ = √(var + eps), var biased:
//     ∂y_j/∂x_k = (δ_jk − 1/D − x̂_j x̂_k / D)/σ, so
//     dx = (dy − mean(dy) − x̂ · mean(dy ⊙ x̂)) / σ
//   rms norm, y = x·r with r = (mean(x²) + eps)^(−1/2), ∂r/∂x_k = −r³ x_k / D:
//     dx = r·dy − x · r³ · mean(dy ⊙ x)
#include <string>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/fastmath.h"
#include "backend/cpu/lanes.h"
#include "tensorgrad/errors.h"

namespace tg::backend::cpu {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int64_t kSoftmaxTile = 256;  // inner columns a strided-softmax unit handles at once

/// e[j] = exp(x[j] − m) for j < n (e may be x); returns Σ e in double.
inline double exp_shift_sum(const float* x, float* e, int64_t n, float m) {
  for (int64_t j = 0; j < n; ++j) e[j] = fastmath::exp(x[j] - m);
  return fixed_sum(n, [e](int64_t j) { return static_cast<double>(e[j]); });
}

/// Softmax of the first `valid` entries of a dense row; entries [valid, n) are masked
/// (0, or −∞ for log-softmax). NaNs propagate to the whole row.
void softmax_row(const float* __restrict x, float* __restrict y, int64_t n, int64_t valid, bool log) {
  const float m = row_max(x, valid);
  const double sum = exp_shift_sum(x, y, valid, m);
  if (log) {
    const double lse = static_cast<double>(m) + std::log(sum);
    for (int64_t j = 0; j < valid; ++j) y[j] = static_cast<float>(static_cast<double>(x[j]) - lse);
  } else {
    const double inv = 1.0 / sum;
    for (int64_t j = 0; j < valid; ++j) y[j] = static_cast<float>(static_cast<double>(y[j]) * inv);
  }
  for (int64_t j = valid; j < n; ++j) y[j] = log ? kNegInf : 0.0f;
}

/// Softmax along the middle axis of a dense [outer, n, inner] tensor, for inner columns
/// [i0, i0 + w) of outer slice `o` (w ≤ kSoftmaxTile).
void softmax_columns(const float* x, float* y, int64_t n, int64_t inner, int64_t i0, int64_t w, bool log) {
  float m[kSoftmaxTile];
  double sum[kSoftmaxTile];
  for (int64_t i = 0; i < w; ++i) {
    m[i] = kNegInf;
    sum[i] = 0;
  }
  for (int64_t k = 0; k < n; ++k) {
    const float* row = x + k * inner + i0;
    for (int64_t i = 0; i < w; ++i) m[i] = row[i] > m[i] ? row[i] : m[i];
  }
  for (int64_t k = 0; k < n; ++k) {
    const float* row = x + k * inner + i0;
    float* out = y + k * inner + i0;
    for (int64_t i = 0; i < w; ++i) {
      const float e = fastmath::exp(row[i] - m[i]);
      if (!log) out[i] = e;
      sum[i] += static_cast<double>(e);
    }
  }
  for (int64_t k = 0; k < n; ++k) {
    const float* row = x + k * inner + i0;
    float* out = y + k * inner + i0;
    for (int64_t i = 0; i < w; ++i)
      out[i] = log ? static_cast<float>(static_cast<double>(row[i]) -
                                        (static_cast<double>(m[i]) + std::log(sum[i])))
                   : static_cast<float>(static_cast<double>(out[i]) / sum[i]);
  }
}

/// Max and Σ exp(x − max) (in double) of a dense row.
struct RowStats {
  float max;
  double sum;
};
RowStats row_stats(const float* __restrict x, int64_t n) {
  const float m = row_max(x, n);
  return {m, fixed_sum(n, [x, m](int64_t j) { return static_cast<double>(fastmath::exp(x[j] - m)); })};
}

}  // namespace

Kernel make_softmax(const ir::Node& node, const float* x, float* y) {
  const bool log = node.op == ir::Op::kLogSoftmax, causal = node.attrs.causal;
  const Shape& shape = node.shape;
  const auto axis = static_cast<size_t>(node.attrs.axes[0]);
  int64_t outer = 1, inner = 1;
  for (size_t d = 0; d < axis; ++d) outer *= shape[d];
  for (size_t d = axis + 1; d < shape.size(); ++d) inner *= shape[d];
  const int64_t n = shape[axis];
  const int64_t total = numel(shape);
  const bool parallel = total > kGrainHeavy;
  if (inner == 1) {
    // Causal (shape inference guarantees the last axis, rank >= 2 and S >= T): row r is
    // query i = r mod T of [T, S] and sees keys j <= i + (S - T).
    const int64_t t_len = causal ? shape[shape.size() - 2] : 1, shift = causal ? n - t_len : 0;
    return [=] {
      if (total == 0) return;
#pragma omp parallel for schedule(static) if (parallel)
      for (int64_t r = 0; r < outer; ++r) {
        const int64_t valid = causal ? std::min(n, r % t_len + shift + 1) : n;
        softmax_row(x + r * n, y + r * n, n, valid, log);
      }
    };
  }
  const int64_t tiles = (inner + kSoftmaxTile - 1) / kSoftmaxTile;
  return [=] {
    if (total == 0) return;
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t u = 0; u < outer * tiles; ++u) {
      const int64_t o = u / tiles, i0 = (u % tiles) * kSoftmaxTile;
      softmax_columns(x + o * n * inner, y + o * n * inner, n, inner, i0, std::min(kSoftmaxTile, inner - i0),
                      log);
    }
  };
}

Kernel make_cross_entropy(const ir::Node& node, const Shape& logits_shape, const float* logits,
                          const View& targets, const View& dloss, float* out) {
  const bool grad = node.op == ir::Op::kCrossEntropyGrad;
  const int64_t rows = logits_shape[0], classes = logits_shape[1];
  const double ignore = node.attrs.values[0];
  const auto* tgt = reinterpret_cast<const int32_t*>(targets.data);
  const int64_t ts = targets.strides.empty() ? 0 : targets.strides[0];
  const auto* dl = grad ? reinterpret_cast<const float*>(dloss.data) : nullptr;
  const int64_t ds = grad && !dloss.strides.empty() ? dloss.strides[0] : 0;
  const bool parallel = rows * classes > kGrainHeavy;
  return [=] {
    if (rows == 0) return;
    int64_t bad = std::numeric_limits<int64_t>::max();
#pragma omp parallel for schedule(static) reduction(min : bad) if (parallel)
    for (int64_t r = 0; r < rows; ++r) {
      const int32_t t = tgt[r * ts];
      const float* x = logits + r * classes;
      const bool ignored = static_cast<double>(t) == ignore;
      const bool valid = !ignored && t >= 0 && t < classes;
      if (!ignored && !valid) bad = std::min(bad, r);
      if (!grad) {
        if (!valid) {
          out[r] = 0.0f;
          continue;
        }
        const RowStats st = row_stats(x, classes);
        out[r] =
            static_cast<float>(static_cast<double>(st.max) + std::log(st.sum) - static_cast<double>(x[t]));
        continue;
      }
      float* dx = out + r * classes;
      if (!valid) {
        for (int64_t c = 0; c < classes; ++c) dx[c] = 0.0f;
        continue;
      }
      // One exp pass: the shifted exponentials go straight into dx, then get scaled.
      const float m = row_max(x, classes);
      const double sum = exp_shift_sum(x, dx, classes, m);
      const double g = static_cast<double>(dl[r * ds]), e_t = static_cast<double>(dx[t]);
      const auto scale = static_cast<float>(g / sum);
      for (int64_t c = 0; c < classes; ++c) dx[c] *= scale;
      // The one-hot term separately, in double: p_t − 1 cancels badly in f32 when p_t ≈ 1.
      dx[t] = static_cast<float>((e_t / sum - 1.0) * g);
    }
    if (bad != std::numeric_limits<int64_t>::max())
      throw InputError("[cross_entropy] row " + std::to_string(bad) + " has target " +
                       std::to_string(tgt[bad * ts]) + ", outside [0, " + std::to_string(classes) +
                       ") and not the ignore_index " + std::to_string(static_cast<int64_t>(ignore)));
  };
}

namespace {

/// One row of LayerNorm / RmsNorm or their gradients (length d ≥ 1; dy null forward).
void norm_row(ir::Op op, const float* __restrict x, const float* __restrict dy, float* __restrict o,
              int64_t d, double eps, double inv_d) {
  auto xd = [x](int64_t j) { return static_cast<double>(x[j]); };
  if (op == ir::Op::kLayerNorm || op == ir::Op::kLayerNormGrad) {
    const double mean = fixed_sum(d, xd) * inv_d;
    const double var = fixed_sum(d, [&](int64_t j) {
      const double c = xd(j) - mean;
      return c * c;
    });
    const double rstd = 1.0 / std::sqrt(var * inv_d + eps);
    if (op == ir::Op::kLayerNorm) {
      const auto mf = static_cast<float>(mean), rf = static_cast<float>(rstd);
      for (int64_t j = 0; j < d; ++j) o[j] = (x[j] - mf) * rf;
      return;
    }
    const double mean_dy = fixed_sum(d, [dy](int64_t j) { return static_cast<double>(dy[j]); }) * inv_d;
    const double mean_dy_xhat =
        fixed_sum(d, [&](int64_t j) { return static_cast<double>(dy[j]) * (xd(j) - mean); }) * rstd * inv_d;
    const auto mf = static_cast<float>(mean), rf = static_cast<float>(rstd), a = static_cast<float>(mean_dy),
               b = static_cast<float>(mean_dy_xhat);
    for (int64_t j = 0; j < d; ++j) o[j] = rf * ((dy[j] - a) - ((x[j] - mf) * rf) * b);
    return;
  }
  const double ms = fixed_sum(d, [&](int64_t j) { return xd(j) * xd(j); });
  const double rr = 1.0 / std::sqrt(ms * inv_d + eps);
  if (op == ir::Op::kRmsNorm) {
    const auto rf = static_cast<float>(rr);
    for (int64_t j = 0; j < d; ++j) o[j] = x[j] * rf;
    return;
  }
  const double mean_dy_x = fixed_sum(d, [&](int64_t j) { return static_cast<double>(dy[j]) * xd(j); });
  const double k = rr * rr * rr * mean_dy_x * inv_d;
  const auto rf = static_cast<float>(rr), kf = static_cast<float>(k);
  for (int64_t j = 0; j < d; ++j) o[j] = rf * dy[j] - x[j] * kf;
}

}  // namespace

Kernel make_norm(const ir::Node& node, const float* x, const float* dy, float* out) {
  const ir::Op op = node.op;
  const int64_t d = node.shape.back(), rows = d == 0 ? 0 : numel(node.shape) / d;
  const double eps = node.attrs.values[0], inv_d = d == 0 ? 0.0 : 1.0 / static_cast<double>(d);
  const bool parallel = rows * d > kGrainCheap;
  return [=] {
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t r = 0; r < rows; ++r)
      norm_row(op, x + r * d, dy ? dy + r * d : nullptr, out + r * d, d, eps, inv_d);
  };
}

}  // namespace tg::backend::cpu
