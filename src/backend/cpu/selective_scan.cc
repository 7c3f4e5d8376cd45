// selective_scan and its gradient (ops.def) on the CPU. The recurrence is sequential in L and
// independent across (batch, channel), so one work unit is a (b, d) pair, and inside it the N
// states of the channel are a short vector the compiler vectorises (the exp, the update and the
// C·h sum run over n). Units run in parallel over the threads.
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

namespace tg::backend::cpu {
namespace {

constexpr int64_t kChannelBlock = 32;

struct Dims {
  int64_t B, D, L, G, N, per;
};

}  // namespace

Kernel make_selective_scan(const ir::Node& node, const Shape& u_shape, const Shape& b_shape, const std::vector<const float*>& in,
                           float* out) {
  const Dims m{u_shape[0], u_shape[1], u_shape[2], b_shape[1], b_shape[2], u_shape[1] / std::max<int64_t>(b_shape[1], 1)};
  const bool grad = node.op == ir::Op::kSelectiveScanGrad;
  const float *u = in[0], *dl = in[1], *A = in[2], *Bm = in[3], *Cm = in[4], *dout = grad ? in[5] : nullptr;
  return [=] {
    const int64_t B = m.B, D = m.D, L = m.L, G = m.G, N = m.N;
    const int64_t nu = B * D * L, na = D * N, nb = B * G * N * L, units = B * D;
    if (!grad) {
#pragma omp parallel
      {
        std::vector<float> h(static_cast<size_t>(N));
#pragma omp for schedule(static)
        for (int64_t unit = 0; unit < units; ++unit) {
          const int64_t b = unit / D, d = unit % D, g = d / m.per;
          const float* a_row = A + d * N;
          std::fill(h.begin(), h.end(), 0.0f);
          for (int64_t l = 0; l < L; ++l) {
            const float del = dl[unit * L + l], du = del * u[unit * L + l];
            const float* bl = Bm + (b * G + g) * N * L + l;
            const float* cl = Cm + (b * G + g) * N * L + l;
            float y = 0;
            for (int64_t k = 0; k < N; ++k) {
              h[static_cast<size_t>(k)] = std::exp(del * a_row[k]) * h[static_cast<size_t>(k)] + du * bl[k * L];
              y += cl[k * L] * h[static_cast<size_t>(k)];
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
    const int64_t blocks = (D + kChannelBlock - 1) / kChannelBlock;
    // Partial dB and dC per channel block: [blocks][B·G·N·L] each.
    std::vector<float> part_b(static_cast<size_t>(blocks * nb), 0.0f), part_c(static_cast<size_t>(blocks * nb), 0.0f);
    std::fill(dA_out, dA_out + na, 0.0f);
#pragma omp parallel
    {
      std::vector<float> hs(static_cast<size_t>((L + 1) * N)), dh(static_cast<size_t>(N));
#pragma omp for schedule(static)
      for (int64_t blk = 0; blk < blocks; ++blk)
        for (int64_t d = blk * kChannelBlock; d < std::min(D, (blk + 1) * kChannelBlock); ++d)
          for (int64_t b = 0; b < B; ++b) {
            const int64_t unit = b * D + d, g = d / m.per;
            const float* a_row = A + d * N;
            const float* bb = Bm + (b * G + g) * N * L;
            const float* cc = Cm + (b * G + g) * N * L;
            float* pb = part_b.data() + blk * nb + (b * G + g) * N * L;
            float* pc = part_c.data() + blk * nb + (b * G + g) * N * L;
            std::fill(hs.begin(), hs.begin() + N, 0.0f);
            for (int64_t l = 0; l < L; ++l) {
              const float del = dl[unit * L + l], dbu = del * u[unit * L + l];
              for (int64_t k = 0; k < N; ++k)
                hs[static_cast<size_t>((l + 1) * N + k)] = std::exp(del * a_row[k]) * hs[static_cast<size_t>(l * N + k)] + dbu * bb[k * L + l];
            }
            std::memcpy(dh.data(), dout + nu + unit * N, static_cast<size_t>(N) * sizeof(float));
            for (int64_t l = L - 1; l >= 0; --l) {
              const float dy = dout[unit * L + l], del = dl[unit * L + l], uu = u[unit * L + l];
              float du = 0, ddl = 0;
              for (int64_t k = 0; k < N; ++k) {
                const float hl = hs[static_cast<size_t>((l + 1) * N + k)], hp = hs[static_cast<size_t>(l * N + k)];
                const float a = std::exp(del * a_row[k]), bv = bb[k * L + l];
                float& dk = dh[static_cast<size_t>(k)];
                dk += cc[k * L + l] * dy;
                pc[k * L + l] += dy * hl;
                du += dk * del * bv;
                ddl += dk * (hp * a * a_row[k] + bv * uu);
                dA_out[d * N + k] += dk * hp * a * del;
                pb[k * L + l] += dk * del * uu;
                dk *= a;
              }
              du_out[unit * L + l] = du;
              ddl_out[unit * L + l] = ddl;
            }
          }
    }
    // The blocks' partials, added in block order.
#pragma omp parallel for schedule(static) if (nb > (int64_t{1} << 14))
    for (int64_t i = 0; i < nb; ++i) {
      float sb = 0, sc = 0;
      for (int64_t blk = 0; blk < blocks; ++blk) {
        sb += part_b[static_cast<size_t>(blk * nb + i)];
        sc += part_c[static_cast<size_t>(blk * nb + i)];
      }
      dB_out[i] = sb;
      dC_out[i] = sc;
    }
  };
}

}  // namespace tg::backend::cpu
