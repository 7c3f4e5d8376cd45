// selective_scan and its gradient (ops.def) on the CPU. Each unit first forms its channel's
// Δ = softplus?(delta + bias) (and the softplus's slope, for the gradient) in per-thread
// scratch. The recurrence is sequential in L and
// independent across (batch, channel), so one work unit is a (b, d) pair, and inside it the N
// states of the channel are a short vector the compiler vectorises: B and C are first
// transposed to [B, G, L, N] so each step reads N contiguous values, and exp is the backend's
// branch-free fastmath::exp. Units run in parallel over the threads.
//
// Backward: a unit first reruns its forward, keeping every state h_l (L·N floats of per-thread
// scratch), then walks l downwards with dh_l = C_l·dy_l + a_{l+1}·dh_{l+1}. du, ddelta and dA
// belong to one channel and are written by its unit alone. dB and dC sum over the channels of a
// group: each block of kChannelBlock channels accumulates into its own partial buffer, and the
// partials are added in block order afterwards, so the result does not depend on the thread
// count or the schedule.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/fastmath.h"

namespace tg::backend::cpu {
namespace {

constexpr int64_t kChannelBlock = 32;

struct Dims {
  int64_t B, D, L, G, N, per;
};

/// [B·G, N, L] → [B·G, L, N].
void to_steps_major(const float* in, int64_t bg, int64_t n, int64_t l, float* out) {
#pragma omp parallel for schedule(static) if (bg * n * l > (int64_t{1} << 16))
  for (int64_t i = 0; i < bg; ++i)
    for (int64_t k = 0; k < n; ++k)
      for (int64_t t = 0; t < l; ++t) out[(i * l + t) * n + k] = in[(i * n + k) * l + t];
}

}  // namespace

Kernel make_selective_scan(const ir::Node& node, const Shape& u_shape, const Shape& b_shape,
                           const std::vector<const float*>& in, float* out) {
  const Dims m{u_shape[0], u_shape[1], u_shape[2],
               b_shape[1], b_shape[2], u_shape[1] / std::max<int64_t>(b_shape[1], 1)};
  const bool grad = node.op == ir::Op::kSelectiveScanGrad;
  const float *u = in[0], *raw = in[1], *A = in[2], *Bm = in[3], *Cm = in[4], *Dskip = in[5], *bias = in[6];
  const float* dy_rows = grad ? in[7] : nullptr;  // [B, D, L]
  const float* dlast = grad ? in[8] : nullptr;    // [B, D, N]
  const bool softplus = node.attrs.values.at(0) != 0.0;
  // Δ of one unit's L steps into del, and dΔ/d(delta) into slope (when given).
  auto deltas = [=](int64_t unit, int64_t d, int64_t L, float* del, float* slope) {
    for (int64_t l = 0; l < L; ++l) {
      const float x = raw[unit * L + l] + bias[d];
      if (!softplus) {
        del[l] = x;
        if (slope != nullptr) slope[l] = 1.0f;
        continue;
      }
      const float e = std::exp(-std::fabs(x));
      del[l] = std::max(x, 0.0f) + std::log1p(e);
      if (slope != nullptr) slope[l] = x >= 0 ? 1.0f / (1.0f + e) : e / (1.0f + e);
    }
  };
  return [=] {
    const int64_t B = m.B, D = m.D, L = m.L, G = m.G, N = m.N;
    const int64_t nu = B * D * L, na = D * N, nb = B * G * N * L, units = B * D;
    std::vector<float> bt(static_cast<size_t>(nb)), ct(static_cast<size_t>(nb));  // B and C as [B, G, L, N]
    to_steps_major(Bm, B * G, N, L, bt.data());
    to_steps_major(Cm, B * G, N, L, ct.data());
    if (!grad) {
#pragma omp parallel
      {
        std::vector<float> h(static_cast<size_t>(N)), e(static_cast<size_t>(N)), dls(static_cast<size_t>(L));
#pragma omp for schedule(static)
        for (int64_t unit = 0; unit < units; ++unit) {
          const int64_t b = unit / D, d = unit % D, g = d / m.per;
          const float* a_row = A + d * N;
          float* __restrict hp = h.data();
          float* __restrict ep = e.data();
          std::fill(h.begin(), h.end(), 0.0f);
          deltas(unit, d, L, dls.data(), nullptr);
          for (int64_t l = 0; l < L; ++l) {
            const float del = dls[static_cast<size_t>(l)], du = del * u[unit * L + l];
            const float* __restrict bl = bt.data() + ((b * G + g) * L + l) * N;
            const float* __restrict cl = ct.data() + ((b * G + g) * L + l) * N;
            for (int64_t k = 0; k < N; ++k) ep[k] = fastmath::exp(del * a_row[k]);
            float y = Dskip[d] * u[unit * L + l];
            for (int64_t k = 0; k < N; ++k) {
              hp[k] = ep[k] * hp[k] + du * bl[k];
              y += cl[k] * hp[k];
            }
            out[unit * L + l] = y;
          }
          std::memcpy(out + nu + unit * N, h.data(), static_cast<size_t>(N) * sizeof(float));
        }
      }
      return;
    }
    float* du_out = out;
    float* ddl_out = out + nu;
    float* dA_out = out + 2 * nu;
    float* dB_out = out + 2 * nu + na;
    float* dC_out = out + 2 * nu + na + nb;
    float* dD_out = out + 2 * nu + na + 2 * nb;
    float* dbias_out = dD_out + D;
    const int64_t blocks = (D + kChannelBlock - 1) / kChannelBlock;
    // Partial dB and dC per channel block: [blocks][B·G·L·N] each (steps-major, as bt and ct).
    std::vector<float> part_b(static_cast<size_t>(blocks * nb), 0.0f),
        part_c(static_cast<size_t>(blocks * nb), 0.0f);
    std::fill(dA_out, dA_out + na, 0.0f);
    std::fill(dD_out, dD_out + 2 * D, 0.0f);  // dD and dbias
#pragma omp parallel
    {
      // Per unit: every state h_l and every factor a_l = exp(Δ_l·A), L·N floats each.
      std::vector<float> hs(static_cast<size_t>((L + 1) * N)), as(static_cast<size_t>(L * N)),
          dh(static_cast<size_t>(N));
      std::vector<float> dls(static_cast<size_t>(L)), slopes(static_cast<size_t>(L));
#pragma omp for schedule(static)
      for (int64_t blk = 0; blk < blocks; ++blk)
        for (int64_t d = blk * kChannelBlock; d < std::min(D, (blk + 1) * kChannelBlock); ++d)
          for (int64_t b = 0; b < B; ++b) {
            const int64_t unit = b * D + d, g = d / m.per;
            const float* __restrict a_row = A + d * N;
            const float* __restrict bb = bt.data() + (b * G + g) * L * N;
            const float* __restrict cc = ct.data() + (b * G + g) * L * N;
            float* __restrict pb = part_b.data() + blk * nb + (b * G + g) * L * N;
            float* __restrict pc = part_c.data() + blk * nb + (b * G + g) * L * N;
            float* __restrict h = hs.data();
            float* __restrict ea = as.data();
            float* __restrict dk = dh.data();
            float* __restrict dA = dA_out + d * N;
            std::fill(h, h + N, 0.0f);
            deltas(unit, d, L, dls.data(), slopes.data());
            for (int64_t l = 0; l < L; ++l) {
              const float del = dls[static_cast<size_t>(l)], dbu = del * u[unit * L + l];
              for (int64_t k = 0; k < N; ++k) ea[l * N + k] = fastmath::exp(del * a_row[k]);
              for (int64_t k = 0; k < N; ++k)
                h[(l + 1) * N + k] = ea[l * N + k] * h[l * N + k] + dbu * bb[l * N + k];
            }
            std::memcpy(dk, dlast + unit * N, static_cast<size_t>(N) * sizeof(float));
            float dD = 0, dbias = 0;
            for (int64_t l = L - 1; l >= 0; --l) {
              const float dy = dy_rows[unit * L + l], del = dls[static_cast<size_t>(l)], uu = u[unit * L + l];
              float du = dy * Dskip[d], ddl = 0;
              dD += dy * uu;
              for (int64_t k = 0; k < N; ++k) {
                const float hl = h[(l + 1) * N + k], hp = h[l * N + k], a = ea[l * N + k], bv = bb[l * N + k];
                const float dkk = dk[k] + cc[l * N + k] * dy;
                pc[l * N + k] += dy * hl;
                du += dkk * del * bv;
                ddl += dkk * (hp * a * a_row[k] + bv * uu);
                dA[k] += dkk * hp * a * del;
                pb[l * N + k] += dkk * del * uu;
                dk[k] = dkk * a;
              }
              du_out[unit * L + l] = du;
              ddl_out[unit * L + l] = ddl * slopes[static_cast<size_t>(l)];
              dbias += ddl_out[unit * L + l];
            }
            dD_out[d] += dD;  // this thread owns channel d: its units run here, b in order
            dbias_out[d] += dbias;
          }
    }
    // The blocks' partials, added in block order and written back as [B, G, N, L].
#pragma omp parallel for schedule(static) if (nb > (int64_t{1} << 14))
    for (int64_t i = 0; i < B * G; ++i)
      for (int64_t t = 0; t < L; ++t)
        for (int64_t k = 0; k < N; ++k) {
          float sb = 0, sc = 0;
          for (int64_t blk = 0; blk < blocks; ++blk) {
            sb += part_b[static_cast<size_t>(blk * nb + (i * L + t) * N + k)];
            sc += part_c[static_cast<size_t>(blk * nb + (i * L + t) * N + k)];
          }
          dB_out[(i * N + k) * L + t] = sb;
          dC_out[(i * N + k) * L + t] = sc;
        }
  };
}

}  // namespace tg::backend::cpu
