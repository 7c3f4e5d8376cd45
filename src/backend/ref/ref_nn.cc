// Reference kernels of the fused NN primitives; see ref_nn.h.
#include "backend/ref/ref_nn.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "backend/philox.h"
#include "tensorgrad/errors.h"

namespace tg::backend::ref {
namespace {

using ir::Node;
using ir::Op;

std::vector<int64_t> strides_of(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (size_t i = s.size(); i-- > 1;) st[i - 1] = st[i] * s[i];
  return st;
}

/// Calls fn(base) for the flat offset of every element whose coordinate on `axis` is 0.
template <class F>
void for_each_lane(const Shape& shape, size_t axis, F&& fn) {
  const int64_t total = numel(shape);
  const std::vector<int64_t> st = strides_of(shape);
  for (int64_t flat = 0; flat < total; ++flat)
    if ((flat / st[axis]) % shape[axis] == 0) fn(flat);
}

Values gather_scatter(const Node& n, const Node& x_node, const Values& x, const Values& idx) {
  const auto axis = static_cast<size_t>(n.attrs.axes[0]);
  const bool gather = n.op == Op::kGather;
  const Shape& big = gather ? x_node.shape : n.shape;
  const Shape& small = gather ? n.shape : x_node.shape;
  const std::vector<int64_t> big_st = strides_of(big), small_st = strides_of(small);
  Values out(static_cast<size_t>(numel(n.shape)), 0.0);
  for (int64_t flat = 0; flat < numel(small); ++flat) {
    const double where = idx[static_cast<size_t>(flat)];
    if (where < 0 || where >= static_cast<double>(big[axis]))
      throw InputError(std::string("[") + ir::op_name(n.op) + "] index " +
                       std::to_string(static_cast<int64_t>(where)) + " out of range [0, " +
                       std::to_string(big[axis]) + ")");
    int64_t b = 0, rest = flat;
    for (size_t d = 0; d < small.size(); ++d) {
      const int64_t coord = rest / small_st[d];
      rest %= small_st[d];
      b += (d == axis ? static_cast<int64_t>(where) : coord) * big_st[d];
    }
    if (gather)
      out[static_cast<size_t>(flat)] = x[static_cast<size_t>(b)];
    else
      out[static_cast<size_t>(b)] += x[static_cast<size_t>(flat)];
  }
  return out;
}

/// dst with src at offset pos (one, or one per index of axis 0) along the axis.
Values update_slice(const Node& n, const Node& src_node, const Node& pos_node, const Values& dst,
                    const Values& src, const Values& pos) {
  const auto axis = static_cast<size_t>(n.attrs.axes[0]);
  const Shape& big = n.shape;
  const Shape& small = src_node.shape;
  const bool per_row = !pos_node.shape.empty();
  const int64_t rows = per_row ? big[0] : 1;
  for (int64_t r = 0; r < rows; ++r) {
    const double p = pos[static_cast<size_t>(r)];
    if (p < 0 || p + static_cast<double>(small[axis]) > static_cast<double>(big[axis]))
      throw InputError("[update_slice] offset " + std::to_string(static_cast<int64_t>(p)) +
                       (per_row ? " of row " + std::to_string(r) : "") + " + " + std::to_string(small[axis]) +
                       " rows exceeds the extent " + std::to_string(big[axis]) + " of axis " +
                       std::to_string(axis));
  }
  Values out = dst;
  const std::vector<int64_t> big_st = strides_of(big), small_st = strides_of(small);
  for (int64_t flat = 0; flat < numel(small); ++flat) {
    int64_t b = 0, rest = flat, row = 0;
    for (size_t d = 0; d < small.size(); ++d) {
      const int64_t coord = rest / small_st[d];
      rest %= small_st[d];
      if (d == 0) row = coord;
      b += coord * big_st[d];
    }
    b += static_cast<int64_t>(pos[static_cast<size_t>(per_row ? row : 0)]) * big_st[axis];
    out[static_cast<size_t>(b)] = src[static_cast<size_t>(flat)];
  }
  return out;
}

/// sample (ops.def): the definition written as plainly as possible — sort the candidates,
/// cut by rank and by cumulative mass, then Gumbel-max — in double.
Values sample(const Node& n, const Values& x, const Values& params, const Values& key) {
  const auto v_len = static_cast<size_t>(n.numel() == 0 ? 1 : static_cast<int64_t>(x.size()) / n.numel());
  const double temperature = params[0], top_k = params[1], top_p = params[2], min_p = params[3];
  const auto seed = static_cast<uint32_t>(static_cast<int32_t>(key[0]));
  const auto counter = static_cast<uint32_t>(static_cast<int32_t>(key[1]));
  Values out(static_cast<size_t>(n.numel()));
  for (size_t r = 0; r < out.size(); ++r) {
    std::vector<double> v(v_len);
    for (size_t i = 0; i < v_len; ++i) {
      const double xi = x[r * v_len + i];
      v[i] = std::isnan(xi) ? -INFINITY : xi;
    }
    size_t best = 0;  // greedy: the first index of the largest
    for (size_t i = 1; i < v_len; ++i)
      if (v[i] > v[best]) best = i;
    const double m = v[best];
    if (!(temperature > 0) || m == -INFINITY) {
      out[r] = static_cast<double>(best);
      continue;
    }
    std::vector<size_t> order(v_len);
    for (size_t i = 0; i < v_len; ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return v[a] > v[b]; });
    std::vector<bool> keep(v_len, true);
    if (top_k >= 1 && top_k < static_cast<double>(v_len)) {
      const double kth = v[order[static_cast<size_t>(top_k) - 1]];
      for (size_t i = 0; i < v_len; ++i) keep[i] = v[i] >= kth;
    }
    if (top_p < 1) {
      double z = 0;
      for (size_t i = 0; i < v_len; ++i)
        if (keep[i]) z += std::exp((v[i] - m) / temperature);
      // Walk the candidates from the largest; a group of equal logits is kept when the mass
      // of the strictly larger ones is below top_p·z.
      double above = 0;
      for (size_t a = 0; a < v_len;) {
        size_t b = a;
        double group = 0;
        while (b < v_len && v[order[b]] == v[order[a]]) {
          if (keep[order[b]]) group += std::exp((v[order[b]] - m) / temperature);
          ++b;
        }
        const bool in = a == 0 || above < top_p * z;  // the largest logits are always kept
        for (size_t c = a; c < b; ++c) keep[order[c]] = keep[order[c]] && in;
        above += group;
        a = b;
      }
    }
    if (min_p > 0)  // probability ≥ min_p · the largest's, (v − m)/T ≥ ln min_p; the largest always
      for (size_t i = 0; i < v_len; ++i)
        keep[i] = keep[i] && v[i] >= std::min(m, m + temperature * std::log(min_p));
    double best_score = -INFINITY;
    size_t pick = v_len;
    for (size_t i = 0; i < v_len; ++i) {
      if (!keep[i] || v[i] == -INFINITY) continue;  // −inf logits have no mass
      const double u = philox_uniform(seed, counter, r * v_len + i);
      double score = v[i] / temperature - std::log(-std::log(u));
      if (std::isnan(score)) score = -INFINITY;  // ∞/∞ at an infinite temperature
      if (pick == v_len || score > best_score) {
        best_score = score;
        pick = i;
      }
    }
    out[r] = static_cast<double>(pick);
  }
  return out;
}

Values softmax(const Node& n, const Values& x) {
  const auto axis = static_cast<size_t>(n.attrs.axes[0]);
  const Shape& s = n.shape;
  const int64_t len = s[axis], stride = strides_of(s)[axis];
  const bool log = n.op == Op::kLogSoftmax;
  Values out(x.size());
  for_each_lane(s, axis, [&](int64_t base) {
    // Causal: the row index i is the coordinate on axis rank-2; key j may see i + (S - T).
    int64_t visible = len;
    if (n.attrs.causal) {
      const int64_t rows = s[s.size() - 2], i = (base / len) % rows;
      visible = i + (len - rows) + 1;
    }
    double mx = -INFINITY;
    for (int64_t j = 0; j < visible; ++j) mx = std::max(mx, x[static_cast<size_t>(base + j * stride)]);
    double total = 0;
    for (int64_t j = 0; j < visible; ++j) total += std::exp(x[static_cast<size_t>(base + j * stride)] - mx);
    for (int64_t j = 0; j < len; ++j) {
      const double v = x[static_cast<size_t>(base + j * stride)] - mx;
      double& o = out[static_cast<size_t>(base + j * stride)];
      if (j >= visible)
        o = log ? -INFINITY : 0.0;
      else
        o = log ? v - std::log(total) : std::exp(v) / total;
    }
  });
  return out;
}

Values cross_entropy(const Node& n, const Shape& logits_shape, const std::vector<const Values*>& in) {
  const Values& x = *in[0];
  const Values& t = *in[1];
  const int64_t rows = logits_shape[0], classes = logits_shape[1];
  const double ignore = n.attrs.values[0];
  Values out(static_cast<size_t>(numel(n.shape)), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const double target = t[static_cast<size_t>(r)];
    if (target == ignore) continue;
    if (target < 0 || target >= static_cast<double>(classes))
      throw InputError("[cross_entropy] target " + std::to_string(static_cast<int64_t>(target)) + " in row " +
                       std::to_string(r) + " is out of range [0, " + std::to_string(classes) + ")");
    const double* row = &x[static_cast<size_t>(r * classes)];
    double mx = -INFINITY, total = 0;
    for (int64_t c = 0; c < classes; ++c) mx = std::max(mx, row[c]);
    for (int64_t c = 0; c < classes; ++c) total += std::exp(row[c] - mx);
    const double lse = mx + std::log(total);
    if (n.op == Op::kCrossEntropy) {
      out[static_cast<size_t>(r)] = lse - row[static_cast<int64_t>(target)];
    } else {  // d/dlogit_c = (softmax_c − [c = t]) · dloss_r
      const double g = (*in[2])[static_cast<size_t>(r)];
      for (int64_t c = 0; c < classes; ++c)
        out[static_cast<size_t>(r * classes + c)] =
            (std::exp(row[c] - lse) - (c == static_cast<int64_t>(target))) * g;
    }
  }
  return out;
}

Values norm(const Node& n, const std::vector<const Values*>& in) {
  const Values& x = *in[0];
  const int64_t d = n.shape.back(), rows = d == 0 ? 0 : numel(n.shape) / d;
  const double eps = n.attrs.values[0];
  const bool layer = n.op == Op::kLayerNorm || n.op == Op::kLayerNormGrad;
  const bool grad = n.op == Op::kLayerNormGrad || n.op == Op::kRmsNormGrad;
  Values out(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = &x[static_cast<size_t>(r * d)];
    double mean = 0, sq = 0;
    for (int64_t i = 0; i < d; ++i) mean += xr[i] / static_cast<double>(d);
    if (!layer) mean = 0;  // RMS norm does not centre
    for (int64_t i = 0; i < d; ++i) sq += (xr[i] - mean) * (xr[i] - mean) / static_cast<double>(d);
    const double rstd = 1.0 / std::sqrt(sq + eps);
    double* o = &out[static_cast<size_t>(r * d)];
    if (!grad) {
      for (int64_t i = 0; i < d; ++i) o[i] = (xr[i] - mean) * rstd;
      continue;
    }
    const double* dy = &(*in[1])[static_cast<size_t>(r * d)];
    double mean_dy = 0, mean_dy_xhat = 0;
    for (int64_t i = 0; i < d; ++i) {
      mean_dy += dy[i] / static_cast<double>(d);
      mean_dy_xhat += dy[i] * (xr[i] - mean) * rstd / static_cast<double>(d);
    }
    for (int64_t i = 0; i < d; ++i) {
      const double xhat = (xr[i] - mean) * rstd;
      // layer: dx = rstd (dy − mean(dy) − x̂ mean(dy x̂));  rms: dx = rstd (dy − x̂ mean(dy x̂))
      o[i] = rstd * (dy[i] - (layer ? mean_dy : 0.0) - xhat * mean_dy_xhat);
    }
  }
  return out;
}

Values attention(const Node& n, const std::vector<const Node*>& nodes, const std::vector<const Values*>& in) {
  const Shape& qs = nodes[0]->shape;
  const Shape& ks = nodes[1]->shape;
  const int64_t B = qs[0], Hq = qs[1], T = qs[2], D = qs[3], Hkv = ks[1], S = ks[2];
  const double scale = n.attrs.values[0];
  const Values &q = *in[0], &k = *in[1], &v = *in[2];
  const bool grad = n.op == Op::kAttentionGrad;
  // The key mask (bool [B, S]): a hidden key is left out of the query's softmax altogether.
  const Values* keys = n.op != Op::kAttentionAt && ir::attention_masked(n) ? in.back() : nullptr;
  const int64_t nq = numel(qs), nk = numel(ks);
  Values out(static_cast<size_t>(grad ? nq + 2 * nk : nq), 0.0);
  auto qi = [&](int64_t b, int64_t h, int64_t t, int64_t d) {
    return static_cast<size_t>(((b * Hq + h) * T + t) * D + d);
  };
  auto ki = [&](int64_t b, int64_t h, int64_t s, int64_t d) {
    return static_cast<size_t>(((b * Hkv + h) * S + s) * D + d);
  };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t kvh = h / (Hq / Hkv);
      for (int64_t t = 0; t < T; ++t) {
        int64_t visible = n.attrs.causal ? t + (S - T) + 1 : S;
        if (n.op == Op::kAttentionAt) {  // query t of sequence b sits at pos[b] + t
          const auto p = static_cast<int64_t>((*in[3])[static_cast<size_t>(b)]);
          if (p < 0 || p > S - T)
            throw InputError("[attention_at] position " + std::to_string(p) + " of sequence " +
                             std::to_string(b) + " is outside [0, " + std::to_string(S - T) + "] (" +
                             std::to_string(T) + " queries over a cache of " + std::to_string(S) + ")");
          visible = p + t + 1;
        }
        std::vector<int64_t> js;  // the keys this query sees; none: output 0, no gradient
        for (int64_t s = 0; s < visible; ++s)
          if (keys == nullptr || (*keys)[static_cast<size_t>(b * S + s)] != 0) js.push_back(s);
        const size_t nj = js.size();
        std::vector<double> p(nj);
        double mx = -INFINITY, total = 0;
        for (size_t j = 0; j < nj; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += q[qi(b, h, t, d)] * k[ki(b, kvh, js[j], d)];
          p[j] = dot * scale;
          mx = std::max(mx, dot * scale);
        }
        for (double& x : p) total += (x = std::exp(x - mx));
        for (double& x : p) x /= total;
        if (!grad) {
          for (size_t j = 0; j < nj; ++j)
            for (int64_t d = 0; d < D; ++d) out[qi(b, h, t, d)] += p[j] * v[ki(b, kvh, js[j], d)];
          continue;
        }
        // dP_s = dO·v_s; dS_s = P_s (dP_s − Σ_s' P_s' dP_s'); dq = scale Σ dS_s k_s;
        // dk_s += scale dS_s q; dv_s += P_s dO.
        const Values& dout = *in[3];
        std::vector<double> dp(nj);
        double weighted = 0;
        for (size_t j = 0; j < nj; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += dout[qi(b, h, t, d)] * v[ki(b, kvh, js[j], d)];
          dp[j] = dot;
          weighted += p[j] * dot;
        }
        for (size_t j = 0; j < nj; ++j) {
          const double ds = p[j] * (dp[j] - weighted);
          for (int64_t d = 0; d < D; ++d) {
            out[qi(b, h, t, d)] += scale * ds * k[ki(b, kvh, js[j], d)];
            out[static_cast<size_t>(nq) + ki(b, kvh, js[j], d)] += scale * ds * q[qi(b, h, t, d)];
            out[static_cast<size_t>(nq + nk) + ki(b, kvh, js[j], d)] += p[j] * dout[qi(b, h, t, d)];
          }
        }
      }
    }
  return out;
}

/// selective_scan and its gradient (ops.def) by the recurrence itself, in double: the forward
/// keeps every state; the backward walks them in reverse with dh_l = C_l·dy_l + a_{l+1}·dh_{l+1}.
Values selective_scan(const Node& n, const std::vector<const Node*>& nodes,
                      const std::vector<const Values*>& in) {
  const Shape& us = nodes[0]->shape;
  const Shape& bs = nodes[3]->shape;
  const int64_t B = us[0], D = us[1], L = us[2], G = bs[1], N = bs[2], per = D / G;
  const Values &u = *in[0], &raw = *in[1], &A = *in[2], &Bm = *in[3], &Cm = *in[4], &Dskip = *in[5],
               &bias = *in[6];
  const bool softplus = n.attrs.values.at(0) != 0.0;
  auto ui = [&](int64_t b, int64_t d, int64_t l) { return static_cast<size_t>((b * D + d) * L + l); };
  auto bi = [&](int64_t b, int64_t g, int64_t k, int64_t l) {
    return static_cast<size_t>(((b * G + g) * N + k) * L + l);
  };
  auto ai = [&](int64_t d, int64_t k) { return static_cast<size_t>(d * N + k); };
  // Δ and dΔ/d(delta): softplus(x) = max(x, 0) + log1p(exp(−|x|)), whose derivative is sigmoid(x).
  auto delta_of = [&](size_t i, int64_t d) {
    const double x = raw[i] + bias[static_cast<size_t>(d)];
    if (!softplus) return std::pair<double, double>{x, 1.0};
    const double e = std::exp(-std::abs(x));
    return std::pair<double, double>{std::max(x, 0.0) + std::log1p(e),
                                     x >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e)};
  };
  const bool grad = n.op == Op::kSelectiveScanGrad;
  const int64_t nu = B * D * L, na = D * N, nb = B * G * N * L;
  Values out(static_cast<size_t>(grad ? 2 * nu + na + 2 * nb + 2 * D : nu + B * D * N), 0.0);
  std::vector<double> h(static_cast<size_t>((L + 1) * N));  // h[(l + 1)·N + k] = h_l, h_{−1} = 0
  for (int64_t b = 0; b < B; ++b)
    for (int64_t d = 0; d < D; ++d) {
      const int64_t g = d / per;
      std::fill(h.begin(), h.end(), 0.0);
      for (int64_t l = 0; l < L; ++l) {
        const double del = delta_of(ui(b, d, l), d).first;
        double y = Dskip[static_cast<size_t>(d)] * u[ui(b, d, l)];
        for (int64_t k = 0; k < N; ++k) {
          const double a = std::exp(del * A[ai(d, k)]);
          double& hk = h[static_cast<size_t>((l + 1) * N + k)];
          hk = a * h[static_cast<size_t>(l * N + k)] + del * Bm[bi(b, g, k, l)] * u[ui(b, d, l)];
          y += Cm[bi(b, g, k, l)] * hk;
        }
        if (!grad) out[ui(b, d, l)] = y;
      }
      if (!grad) {
        for (int64_t k = 0; k < N; ++k)
          out[static_cast<size_t>(nu + (b * D + d) * N + k)] = h[static_cast<size_t>(L * N + k)];
        continue;
      }
      const Values &dy_rows = *in[7], &dlast = *in[8];
      const size_t at_dB = static_cast<size_t>(2 * nu + na), at_dC = at_dB + static_cast<size_t>(nb);
      const size_t at_dD = at_dC + static_cast<size_t>(nb), at_dbias = at_dD + static_cast<size_t>(D);
      std::vector<double> dh(static_cast<size_t>(N));
      for (int64_t k = 0; k < N; ++k)
        dh[static_cast<size_t>(k)] = dlast[static_cast<size_t>((b * D + d) * N + k)];
      for (int64_t l = L - 1; l >= 0; --l) {
        const auto [del, ddel_draw] = delta_of(ui(b, d, l), d);
        const double dy = dy_rows[ui(b, d, l)], uu = u[ui(b, d, l)];
        double ddel = 0;
        out[ui(b, d, l)] += dy * Dskip[static_cast<size_t>(d)];  // du of the skip
        out[at_dD + static_cast<size_t>(d)] += dy * uu;
        for (int64_t k = 0; k < N; ++k) {
          const double hl = h[static_cast<size_t>((l + 1) * N + k)], hp = h[static_cast<size_t>(l * N + k)];
          const double a = std::exp(del * A[ai(d, k)]), bb = Bm[bi(b, g, k, l)];
          double& dk = dh[static_cast<size_t>(k)];
          dk += Cm[bi(b, g, k, l)] * dy;
          out[at_dC + bi(b, g, k, l)] += dy * hl;
          out[ui(b, d, l)] += dk * del * bb;  // du
          ddel += dk * (hp * a * A[ai(d, k)] + bb * uu);
          out[static_cast<size_t>(2 * nu) + ai(d, k)] += dk * hp * a * del;  // dA
          out[at_dB + bi(b, g, k, l)] += dk * del * uu;
          dk *= a;
        }
        out[static_cast<size_t>(nu) + ui(b, d, l)] = ddel * ddel_draw;
        out[at_dbias + static_cast<size_t>(d)] += ddel * ddel_draw;
      }
    }
  return out;
}

/// grouped_matmul (x, w, offsets) and its weight gradient (x, dy, offsets), as ops.def defines
/// them: every row r of expert e, then every output element of that row (or of w[e]).
Values grouped(const ir::Node& n, const std::vector<const ir::Node*>& in_nodes,
               const std::vector<const Values*>& in) {
  const Values &x = *in[0], &b = *in[1], &off = *in[2];
  const int64_t rows = in_nodes[0]->shape[0], k = in_nodes[0]->shape[1];
  const auto experts = static_cast<int64_t>(off.size()) - 1;
  for (int64_t e = 0; e <= experts; ++e) {
    const double o = off[static_cast<size_t>(e)], prev = e == 0 ? 0.0 : off[static_cast<size_t>(e - 1)];
    if (o < prev || o > static_cast<double>(rows) || (e == 0 && o != 0) ||
        (e == experts && o != static_cast<double>(rows)))
      throw InputError(std::string("[") + ir::op_name(n.op) + "] offsets must rise from 0 to " +
                       std::to_string(rows) + " (x's rows); offsets[" + std::to_string(e) + "] is " +
                       std::to_string(static_cast<int64_t>(o)));
  }
  const bool w_nk = n.attrs.axes[0] == 2;
  Values out(static_cast<size_t>(n.numel()), 0.0);
  for (int64_t e = 0; e < experts; ++e)
    for (auto r = static_cast<int64_t>(off[static_cast<size_t>(e)]); r < off[static_cast<size_t>(e + 1)];
         ++r) {
      const double* xr = x.data() + r * k;
      if (n.op == Op::kGroupedMatmul) {
        const int64_t cols = n.shape[1];
        const double* we = b.data() + e * cols * k;
        for (int64_t c = 0; c < cols; ++c) {
          double acc = 0;  // w_nk: w[e, c, j]; else w[e, j, c]
          for (int64_t j = 0; j < k; ++j) acc += xr[j] * (w_nk ? we[c * k + j] : we[j * cols + c]);
          out[static_cast<size_t>(r * cols + c)] = acc;
        }
      } else {
        const int64_t cols = in_nodes[1]->shape[1];
        const double* dy = b.data() + r * cols;
        double* oe = out.data() + e * cols * k;
        for (int64_t c = 0; c < cols; ++c)
          for (int64_t j = 0; j < k; ++j) oe[w_nk ? c * k + j : j * cols + c] += dy[c] * xr[j];
      }
    }
  return out;
}

/// quant_matmul (x [..., K], q [N, K], scale [N, K / G]): each output the sum over k of
/// x · q · scale in double; with offsets (4 bits, q the packed bytes [N, K / 2]), of
/// x · (c · scale + offset) with c the code of value k (byte k / 2's low nibble for even k).
Values quant_matmul(const ir::Node& n, const std::vector<const ir::Node*>& in_nodes,
                    const std::vector<const Values*>& in) {
  const Values &x = *in[0], &q = *in[1], &scale = *in[2];
  const bool four = in.size() == 4;
  const int64_t cols = in_nodes[1]->shape[0], k = in_nodes[0]->shape.back(), groups = in_nodes[2]->shape[1];
  const int64_t group = k / groups, rows = numel(in_nodes[0]->shape) / k;
  const auto weight = [&](int64_t c, int64_t j) {
    const auto g = static_cast<size_t>(c * groups + j / group);
    if (!four) return q[static_cast<size_t>(c * k + j)] * scale[g];
    const auto byte = static_cast<uint8_t>(static_cast<int8_t>(q[static_cast<size_t>(c * (k / 2) + j / 2)]));
    return ((byte >> (4 * (j % 2))) & 15) * scale[g] + (*in[3])[g];
  };
  Values out(static_cast<size_t>(n.numel()));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      double acc = 0;
      for (int64_t j = 0; j < k; ++j) acc += x[static_cast<size_t>(r * k + j)] * weight(c, j);
      out[static_cast<size_t>(r * cols + c)] = acc;
    }
  return out;
}

}  // namespace

Values compute_nn(const Node& n, const std::vector<const Node*>& in_nodes,
                  const std::vector<const Values*>& in) {
  switch (n.op) {
    case Op::kGather:
    case Op::kScatterAdd: return gather_scatter(n, *in_nodes[0], *in[0], *in[1]);
    case Op::kSample: return sample(n, *in[0], *in[1], *in[2]);
    case Op::kUpdateSlice: return update_slice(n, *in_nodes[1], *in_nodes[2], *in[0], *in[1], *in[2]);
    case Op::kSoftmax:
    case Op::kLogSoftmax: return softmax(n, *in[0]);
    case Op::kCrossEntropy:
    case Op::kCrossEntropyGrad: return cross_entropy(n, in_nodes[0]->shape, in);
    case Op::kLayerNorm:
    case Op::kLayerNormGrad:
    case Op::kRmsNorm:
    case Op::kRmsNormGrad: return norm(n, in);
    case Op::kRandom:
    case Op::kDropout: {
      const bool drop = n.op == Op::kDropout;
      const auto key = static_cast<uint32_t>(static_cast<int32_t>((*in[drop ? 1 : 0])[0]));
      const uint64_t seed = n.attrs.seed;
      const double p = drop ? n.attrs.values[0] : 0.0;
      Values out(static_cast<size_t>(n.numel()));
      for (size_t i = 0; i < out.size(); ++i) {
        const double u = philox_uniform(seed, key, i);
        out[i] = drop ? (u >= p ? (*in[0])[i] / (1.0 - p) : 0.0) : u;
      }
      return out;
    }
    case Op::kAttention:
    case Op::kAttentionGrad:
    case Op::kAttentionAt: return attention(n, in_nodes, in);
    case Op::kSelectiveScan:
    case Op::kSelectiveScanGrad: return selective_scan(n, in_nodes, in);
    case Op::kGroupedMatmul:
    case Op::kGroupedMatmulGradWeight: return grouped(n, in_nodes, in);
    case Op::kQuantMatmul: return quant_matmul(n, in_nodes, in);
    default: throw Error(std::string("[ref] ") + ir::op_name(n.op) + " is not an NN primitive");
  }
}

}  // namespace tg::backend::ref
