// Fused scaled dot-product attention of the CPU backend, forward and backward, in the
// FlashAttention spirit: the T×S score matrix is never stored. Queries are processed in row
// blocks of kRowBlock rows, and a thread holds the scores of one block at a time (its
// scratch is kRowBlock × S floats forward, twice that backward, shared by every layer).
// Every matrix product is one GEMM (sgemm_small where built, else cblas_sgemm) on the operands in place: q,
// k, v and dout may be views with any batch and head strides, as long as each head's [rows, D] matrix has
// unit stride along D (a [B, T, H, D] → [B, H, T, D] permute qualifies: attention_operand).
//
// Notation per (batch b, q head h, row block R), with kv head g = h / (Hq / Hkv) (GQA) and
// only the first Sb keys visible to the block (Sb = S, or min(S, end(R) + S − T) causal):
//   S_R = scale · Q_R K_gᵀ                    [rows, Sb]   sgemm
//   P_R = softmax_rows(S_R), entries j > i + (S − T) masked to 0 when causal, and the keys the
//         key mask hides (bool [B, S]); a row with no key left is all 0
//   O_R = P_R V_g                              [rows, D]    sgemm
// Forward: one work unit per (b, h, R), all independent.
//
// Backward (dO given; O is not stored, P is recomputed exactly as in the forward):
//   dV_g += P_Rᵀ dO_R                          sgemm, β = 1
//   dP_R  = dO_R V_gᵀ                          sgemm
//   D_i   = Σ_d dO_id O_id = Σ_j P_ij dP_ij    (O_R = P_R V_g substituted: no recomputed O)
//   dS_R  = P_R ∘ (dP_R − D)                   softmax backward, row-wise; masked P = 0 → 0
//   dQ_R  = scale · dS_R K_g                   sgemm, written once
//   dK_g += scale · dS_Rᵀ Q_R                  sgemm, β = 1
// dK_g and dV_g collect contributions from every q head of the group and every row block,
// so a backward work unit is one (b, g) pair that loops over its group's heads and blocks:
// each dK/dV element has a single writer and a fixed summation order, and the result does
// not depend on the thread count. (Fewer (b, g) pairs than threads leaves threads idle;
// with a single pair no parallel region is opened and OpenBLAS threads each sgemm itself.)
//
// BLAS inside the parallel regions: an OpenMP-built OpenBLAS runs single-threaded there by
// itself; a pthreads-built one would run every call on its own pool, serialised on a lock,
// so it is limited to one thread for the duration of the region and restored afterwards.
//
// bf16 or f16 q, k, v and dout (Precision::kBf16 / kF16) are widened (exactly) to dense f32
// copies before each run; everything above then runs in f32 on exactly those values.
#include <cblas.h>
#include <omp.h>

#include <cstring>
#include <string>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/gemm_bf16.h"
#include "backend/cpu/gemm_small.h"
#include "backend/cpu/lanes.h"
#include "backend/cpu/fastmath.h"
#include "tensorgrad/errors.h"

namespace tg::backend::cpu {
namespace {

constexpr int64_t kRowBlock = 64;

/// Every product here runs inside a parallel region, one thread per call: the AVX-512
/// sgemm_small beats single-threaded OpenBLAS on all of them where it is built.
void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, blasint m, blasint n, blasint k, float alpha,
          const float* a, blasint lda, const float* b, blasint ldb, float beta, float* c, blasint ldc) {
  if (sgemm_small_everywhere())
    sgemm_small(ta == CblasTrans, tb == CblasTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  else
    cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

blasint checked_blas_int(int64_t v) {
  if (v > std::numeric_limits<blasint>::max())
    throw Error("[cpu] attention extent " + std::to_string(v) + " exceeds the BLAS integer range");
  return static_cast<blasint>(v);
}

/// A [B, H, rows, D] operand: head (b, h) starts at data + b·sb + h·sh, rows ld apart.
struct AttnOperand {
  const float* data = nullptr;
  int64_t sb = 0, sh = 0;
  blasint ld = 1;
  const float* head(int64_t b, int64_t h) const { return data + b * sb + h * sh; }
};

AttnOperand operand(const View& v, const Shape& shape) {
  const std::optional<BlasOperand> o = blas_operand(v, shape);
  if (!o || o->trans) throw Error("[cpu] attention operand is not row-addressable (planner bug)");
  return {reinterpret_cast<const float*>(v.data), shape[0] == 1 ? 0 : v.strides[0],
          shape[1] == 1 ? 0 : v.strides[1], checked_blas_int(o->ld)};
}

struct AttnGeometry {
  int64_t B = 0, Hq = 0, Hkv = 0, T = 0, S = 0, D = 0, group = 1, blocks = 0;
  bool causal = false;
  float scale = 1;
  const uint8_t* keys = nullptr;  // the key mask, bool [B, S], or null
  /// Keys visible to some row of the block ending (exclusive) at query row r1.
  int64_t visible(int64_t r1) const { return causal ? std::min(S, r1 + (S - T)) : S; }
};

/// Limits a pthreads OpenBLAS to one thread while an OpenMP region calls it (see the top).
class SerialBlas {
 public:
  explicit SerialBlas(bool active) : active_(active && openblas_get_parallel() == 1) {
    if (!active_) return;
    saved_ = openblas_get_num_threads();
    openblas_set_num_threads(1);
  }
  ~SerialBlas() {
    if (active_) openblas_set_num_threads(saved_);
  }
  SerialBlas(const SerialBlas&) = delete;
  SerialBlas& operator=(const SerialBlas&) = delete;

 private:
  bool active_;
  int saved_ = 1;
};

/// Per-thread scratch, grown on demand (outside any region) and kept across executions.
/// One per calling thread, shared by every attention kernel that thread runs (kernels run
/// one after another), so a deep model holds one block's worth, not one per layer.
class Scratch {
 public:
  float* thread_slice(int t) { return data_.data() + static_cast<size_t>(t) * per_thread_; }
  int reserve(size_t per_thread, bool parallel) {
    const int threads = parallel ? std::max(1, omp_get_max_threads()) : 1;
    per_thread_ = per_thread;
    const size_t need = per_thread * static_cast<size_t>(threads);
    if (data_.size() < need) data_.resize(need);
    return threads;
  }

 private:
  std::vector<float> data_;
  size_t per_thread_ = 0;
};

Scratch& caller_scratch() {
  thread_local Scratch scratch;
  return scratch;
}

// ---- row primitives (fixed summation order: lanes.h) -------------------------------------

/// Σ x[0, n) in double.
inline double row_sum(const float* __restrict x, int64_t n) {
  return fixed_sum(n, [x](int64_t j) { return static_cast<double>(x[j]); });
}

/// Σ x[j]·y[j] over [0, n) in double.
inline double row_dot(const float* __restrict x, const float* __restrict y, int64_t n) {
  return fixed_sum(n, [x, y](int64_t j) { return static_cast<double>(x[j]) * static_cast<double>(y[j]); });
}

/// Row softmax in place over the first `valid` of n entries; the rest become 0, as does a row
/// whose entries are all −∞ (every key masked). With `normalise` false the row keeps
/// exp(x − max) and 1/Σ is returned instead of applied.
inline float softmax_in_place(float* __restrict row, int64_t n, int64_t valid, bool normalise = true) {
  const float m = row_max(row, valid);
  if (m == -std::numeric_limits<float>::infinity()) valid = 0;
  for (int64_t j = 0; j < valid; ++j) row[j] = fastmath::exp(row[j] - m);
  const auto inv = valid == 0 ? 0.0f : static_cast<float>(1.0 / row_sum(row, valid));
  if (normalise)
    for (int64_t j = 0; j < valid; ++j) row[j] *= inv;
  for (int64_t j = valid; j < n; ++j) row[j] = 0.0f;
  return inv;
}

/// P = masked row softmax of scale·Q Kᵀ over the first sb keys, for query rows [r0, r0+rows)
/// of sequence b.
void probabilities(const AttnGeometry& g, int64_t b, const float* q, blasint ldq, const float* k, blasint ldk,
                   int64_t r0, int64_t rows, int64_t sb, float* p) {
  const auto bsb = static_cast<blasint>(sb);
  gemm(CblasNoTrans, CblasTrans, static_cast<blasint>(rows), bsb, static_cast<blasint>(g.D), g.scale, q, ldq,
       k, ldk, 0.0f, p, bsb);
  const uint8_t* keys = g.keys != nullptr ? g.keys + b * g.S : nullptr;
  for (int64_t ii = 0; ii < rows; ++ii) {
    const int64_t valid = g.causal ? std::min(sb, r0 + ii + (g.S - g.T) + 1) : sb;
    float* row = p + ii * sb;
    if (keys != nullptr)
      for (int64_t j = 0; j < valid; ++j)
        if (keys[j] == 0) row[j] = -std::numeric_limits<float>::infinity();
    softmax_in_place(row, sb, valid);
  }
}

// ---- direct path for small heads, vectorised across heads -------------------------------
// When a head's S·D is small (e.g. T = S = 8, D = 16) a cblas call costs more than its
// arithmetic, and loops over one head's short rows vectorise poorly. So kHeads heads are
// processed together, one per SIMD lane: their rows are gathered into lane-minor scratch
// (x[(row·D + d)·kHeads + lane]) and every loop below has the lane loop innermost, with a
// compile-time trip count. Each lane's arithmetic is independent of the others and sums
// in a fixed order (over d, then over keys j, then over heads and rows in order), so the
// results depend neither on how heads are grouped nor on the thread count.

constexpr int64_t kHeads = 16;

/// Whether the direct path beats per-head sgemm calls: on small heads, where each call's fixed
/// cost outweighs its products. The backward gathers 7 operands instead of 4, so it stops
/// paying at smaller heads than the forward.
bool direct_pays(const AttnGeometry& g, bool backward) {
  if (g.keys != nullptr) return false;  // the direct path takes no key mask
  return backward ? g.S * g.D <= 256 && g.D <= 16 : g.S * g.D <= 512 && g.D <= 32;
}

using Lanes = float[kHeads];

/// dst[(j·D + d)·kHeads + l] = src(l)[j·ld + d] for the first n lanes, 0 for the rest.
template <class Src>
void gather(const Src& src, int64_t n, int64_t rows, int64_t D, int64_t ld, float* __restrict dst) {
  for (int64_t l = 0; l < kHeads; ++l) {
    if (l < n) {
      const float* __restrict x = src(l);
      for (int64_t j = 0; j < rows; ++j)
        for (int64_t d = 0; d < D; ++d) dst[(j * D + d) * kHeads + l] = x[j * ld + d];
    } else {
      for (int64_t jd = 0; jd < rows * D; ++jd) dst[jd * kHeads + l] = 0.0f;
    }
  }
}

/// dst(l)[j·D + d] = src[(j·D + d)·kHeads + l] for the first n lanes (dense rows of D).
template <class Dst>
void scatter(const float* __restrict src, int64_t n, int64_t rows, int64_t D, const Dst& dst) {
  for (int64_t l = 0; l < n; ++l) {
    float* __restrict y = dst(l);
    for (int64_t jd = 0; jd < rows * D; ++jd) y[jd] = src[jd * kHeads + l];
  }
}

/// s[j] = scale · Σ_d x[d] · m[j][d] per lane, for j < valid (x: one gathered row, m: S rows).
inline void lane_scores(const float* __restrict x, const float* __restrict m, int64_t D, int64_t valid,
                        float scale, float* __restrict s) {
  for (int64_t j = 0; j < valid; ++j) {
    Lanes acc = {};
    const float* __restrict mj = m + j * D * kHeads;
    for (int64_t d = 0; d < D; ++d)
      for (int64_t l = 0; l < kHeads; ++l) acc[l] += x[d * kHeads + l] * mj[d * kHeads + l];
    for (int64_t l = 0; l < kHeads; ++l) s[j * kHeads + l] = acc[l] * scale;
  }
}

/// Per lane: s[j] ← exp(s[j] − max) over j < valid; returns 1 / Σ in inv.
inline void lane_softmax(float* __restrict s, int64_t valid, Lanes& inv) {
  Lanes m;
  for (int64_t l = 0; l < kHeads; ++l) m[l] = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < valid; ++j)
    for (int64_t l = 0; l < kHeads; ++l) m[l] = s[j * kHeads + l] > m[l] ? s[j * kHeads + l] : m[l];
  double sum[kHeads] = {};
  for (int64_t j = 0; j < valid; ++j)
    for (int64_t l = 0; l < kHeads; ++l) {
      const float e = fastmath::exp(s[j * kHeads + l] - m[l]);
      s[j * kHeads + l] = e;
      sum[l] += static_cast<double>(e);
    }
  for (int64_t l = 0; l < kHeads; ++l) inv[l] = static_cast<float>(1.0 / sum[l]);
}

/// o[d] = f · Σ_{j < n} w[j] · m[j][d] per lane (o: one gathered row).
inline void lane_weighted(const float* __restrict w, const float* __restrict m, int64_t n, int64_t D,
                          const Lanes& f, float* __restrict o) {
  for (int64_t d = 0; d < D; ++d) {
    Lanes acc = {};
    for (int64_t j = 0; j < n; ++j)
      for (int64_t l = 0; l < kHeads; ++l) acc[l] += w[j * kHeads + l] * m[(j * D + d) * kHeads + l];
    for (int64_t l = 0; l < kHeads; ++l) o[d * kHeads + l] = acc[l] * f[l];
  }
}

int64_t visible_keys(const AttnGeometry& g, int64_t i) {
  return g.causal ? std::min(g.S, i + (g.S - g.T) + 1) : g.S;
}

void forward_direct(const AttnGeometry& g, const AttnOperand& q, const AttnOperand& k, const AttnOperand& v,
                    float* out, Scratch& scratch) {
  const int64_t heads = g.B * g.Hq, units = (heads + kHeads - 1) / kHeads;
  const int64_t sd = g.S * g.D * kHeads, td = g.T * g.D * kHeads;
  const bool parallel = units > 1 && heads * g.T * g.S * g.D > kGrainCheap;
  scratch.reserve(static_cast<size_t>(2 * sd + 2 * td + g.S * kHeads), parallel);
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t u = 0; u < units; ++u) {
    const int64_t h0 = u * kHeads, n = std::min(kHeads, heads - h0);
    float* kl = scratch.thread_slice(parallel ? omp_get_thread_num() : 0);
    float* vl = kl + sd;
    float* ql = vl + sd;
    float* ol = ql + td;
    float* s = ol + td;
    auto kv_head = [&](const AttnOperand& x) {
      return [&](int64_t l) { return x.head((h0 + l) / g.Hq, (h0 + l) % g.Hq / g.group); };
    };
    gather(kv_head(k), n, g.S, g.D, k.ld, kl);
    gather(kv_head(v), n, g.S, g.D, v.ld, vl);
    gather([&](int64_t l) { return q.head((h0 + l) / g.Hq, (h0 + l) % g.Hq); }, n, g.T, g.D, q.ld, ql);
    for (int64_t i = 0; i < g.T; ++i) {
      const int64_t valid = visible_keys(g, i);
      float* o = ol + i * g.D * kHeads;
      if (valid == 0) {  // no keys at all (S = 0): an empty weighted sum
        for (int64_t e = 0; e < g.D * kHeads; ++e) o[e] = 0.0f;
        continue;
      }
      Lanes inv;
      lane_scores(ql + i * g.D * kHeads, kl, g.D, valid, g.scale, s);
      lane_softmax(s, valid, inv);
      lane_weighted(s, vl, valid, g.D, inv, o);
    }
    scatter(ol, n, g.T, g.D, [&](int64_t l) { return out + (h0 + l) * g.T * g.D; });
  }
}

void backward_direct(const AttnGeometry& g, const AttnOperand& q, const AttnOperand& k, const AttnOperand& v,
                     const AttnOperand& dout, float* out, Scratch& scratch) {
  const int64_t pairs = g.B * g.Hkv, units = (pairs + kHeads - 1) / kHeads;
  const int64_t sd = g.S * g.D * kHeads, td = g.T * g.D * kHeads, rd = g.D * kHeads;
  const bool parallel = units > 1 && pairs * g.group * g.T * g.S * g.D > kGrainCheap / 4;
  scratch.reserve(static_cast<size_t>(4 * sd + 3 * td + 2 * g.S * kHeads), parallel);
  const int64_t nq = g.B * g.Hq * g.T * g.D, nk = pairs * g.S * g.D;
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t u = 0; u < units; ++u) {
    // Lane l is the kv pair (b, kv) = p0 + l; it owns dK and dV of that pair.
    const int64_t p0 = u * kHeads, n = std::min(kHeads, pairs - p0);
    float* kl = scratch.thread_slice(parallel ? omp_get_thread_num() : 0);
    float* vl = kl + sd;
    float* dkl = vl + sd;
    float* dvl = dkl + sd;
    float* ql = dvl + sd;
    float* dol = ql + td;
    float* dql = dol + td;
    float* p = dql + td;
    float* ds = p + g.S * kHeads;
    gather([&](int64_t l) { return k.head((p0 + l) / g.Hkv, (p0 + l) % g.Hkv); }, n, g.S, g.D, k.ld, kl);
    gather([&](int64_t l) { return v.head((p0 + l) / g.Hkv, (p0 + l) % g.Hkv); }, n, g.S, g.D, v.ld, vl);
    for (int64_t e = 0; e < 2 * sd; ++e) dkl[e] = 0.0f;
    Lanes scale;
    for (int64_t l = 0; l < kHeads; ++l) scale[l] = g.scale;
    const int64_t D = g.D;
    for (int64_t hh = 0; hh < g.group; ++hh) {
      // Lane l works on q head h = kv·group + hh of batch b.
      auto bh = [&](int64_t l) { return (p0 + l) / g.Hkv * g.Hq + (p0 + l) % g.Hkv * g.group + hh; };
      gather([&](int64_t l) { return q.head(bh(l) / g.Hq, bh(l) % g.Hq); }, n, g.T, g.D, q.ld, ql);
      gather([&](int64_t l) { return dout.head(bh(l) / g.Hq, bh(l) % g.Hq); }, n, g.T, g.D, dout.ld, dol);
      for (int64_t i = 0; i < g.T; ++i) {
        const int64_t valid = visible_keys(g, i);
        const float* __restrict qi = ql + i * rd;
        const float* __restrict doi = dol + i * rd;
        float* dqi = dql + i * rd;
        if (valid == 0) {
          for (int64_t e = 0; e < rd; ++e) dqi[e] = 0.0f;
          continue;
        }
        Lanes inv;
        lane_scores(qi, kl, g.D, valid, g.scale, p);
        lane_softmax(p, valid, inv);
        for (int64_t j = 0; j < valid; ++j)
          for (int64_t l = 0; l < kHeads; ++l) p[j * kHeads + l] *= inv[l];
        lane_scores(doi, vl, g.D, valid, 1.0f, ds);  // dP = dO Vᵀ
        double di[kHeads] = {};                      // D_i = Σ_j P_ij dP_ij
        for (int64_t j = 0; j < valid; ++j)
          for (int64_t l = 0; l < kHeads; ++l)
            di[l] += static_cast<double>(p[j * kHeads + l]) * static_cast<double>(ds[j * kHeads + l]);
        for (int64_t j = 0; j < valid; ++j)
          for (int64_t l = 0; l < kHeads; ++l)
            ds[j * kHeads + l] = p[j * kHeads + l] * (ds[j * kHeads + l] - static_cast<float>(di[l]));
        lane_weighted(ds, kl, valid, g.D, scale, dqi);  // dQ = scale · dS K
        for (int64_t j = 0; j < valid; ++j) {
          Lanes sj, pj;
          for (int64_t l = 0; l < kHeads; ++l) {
            sj[l] = scale[l] * ds[j * kHeads + l];
            pj[l] = p[j * kHeads + l];
          }
          float* __restrict dkj = dkl + j * rd;
          float* __restrict dvj = dvl + j * rd;
          for (int64_t d = 0; d < D; ++d)
            for (int64_t l = 0; l < kHeads; ++l) {
              dkj[d * kHeads + l] += sj[l] * qi[d * kHeads + l];   // dK += scale · dSᵀ Q
              dvj[d * kHeads + l] += pj[l] * doi[d * kHeads + l];  // dV += Pᵀ dO
            }
        }
      }
      scatter(dql, n, g.T, g.D, [&](int64_t l) { return out + bh(l) * g.T * g.D; });
    }
    scatter(dkl, n, g.S, g.D, [&](int64_t l) { return out + nq + (p0 + l) * g.S * g.D; });
    scatter(dvl, n, g.S, g.D, [&](int64_t l) { return out + nq + nk + (p0 + l) * g.S * g.D; });
  }
}

void forward(const AttnGeometry& g, const AttnOperand& q, const AttnOperand& k, const AttnOperand& v,
             float* out, Scratch& scratch) {
  const int64_t units = g.B * g.Hq * g.blocks;
  const bool parallel = units > 1;
  scratch.reserve(static_cast<size_t>(kRowBlock * g.S), parallel);
  const SerialBlas serial(parallel && omp_get_max_threads() > 1);
  const blasint bd = static_cast<blasint>(g.D);
#pragma omp parallel for schedule(dynamic) if (parallel)
  for (int64_t u = 0; u < units; ++u) {
    const int64_t blk = u % g.blocks, h = (u / g.blocks) % g.Hq, b = u / (g.blocks * g.Hq);
    const int64_t kv = h / g.group, r0 = blk * kRowBlock, rows = std::min(kRowBlock, g.T - r0);
    const int64_t sb = g.visible(r0 + rows);
    float* o = out + ((b * g.Hq + h) * g.T + r0) * g.D;
    if (sb == 0) {  // no keys at all (S = 0): an empty weighted sum
      std::memset(o, 0, static_cast<size_t>(rows * g.D) * sizeof(float));
      continue;
    }
    float* p = scratch.thread_slice(parallel ? omp_get_thread_num() : 0);
    probabilities(g, b, q.head(b, h) + r0 * q.ld, q.ld, k.head(b, kv), k.ld, r0, rows, sb, p);
    gemm(CblasNoTrans, CblasNoTrans, static_cast<blasint>(rows), bd, static_cast<blasint>(sb), 1.0f, p,
         static_cast<blasint>(sb), v.head(b, kv), v.ld, 0.0f, o, bd);
  }
}

void backward_blocks(const AttnGeometry& g, const AttnOperand& q, const AttnOperand& k, const AttnOperand& v,
                     const AttnOperand& dout, float* out, Scratch& scratch) {
  const int64_t units = g.B * g.Hkv;
  const bool parallel = units > 1;
  const int64_t block_scores = kRowBlock * g.S;
  scratch.reserve(static_cast<size_t>(2 * block_scores), parallel);
  const SerialBlas serial(parallel && omp_get_max_threads() > 1);
  const int64_t nq = g.B * g.Hq * g.T * g.D, nk = g.B * g.Hkv * g.S * g.D;
  const blasint bd = static_cast<blasint>(g.D);
#pragma omp parallel for schedule(dynamic) if (parallel)
  for (int64_t u = 0; u < units; ++u) {
    const int64_t b = u / g.Hkv, kv = u % g.Hkv;
    float* dk = out + nq + u * g.S * g.D;
    float* dv = out + nq + nk + u * g.S * g.D;
    std::memset(dk, 0, static_cast<size_t>(g.S * g.D) * sizeof(float));
    std::memset(dv, 0, static_cast<size_t>(g.S * g.D) * sizeof(float));
    float* p = scratch.thread_slice(parallel ? omp_get_thread_num() : 0);
    float* ds = p + block_scores;
    const float* kh = k.head(b, kv);
    const float* vh = v.head(b, kv);
    for (int64_t h = kv * g.group; h < (kv + 1) * g.group; ++h) {
      for (int64_t blk = 0; blk < g.blocks; ++blk) {
        const int64_t r0 = blk * kRowBlock, rows = std::min(kRowBlock, g.T - r0), sb = g.visible(r0 + rows);
        float* dq = out + ((b * g.Hq + h) * g.T + r0) * g.D;
        if (sb == 0) {
          std::memset(dq, 0, static_cast<size_t>(rows * g.D) * sizeof(float));
          continue;
        }
        const float* qr = q.head(b, h) + r0 * q.ld;
        const float* dor = dout.head(b, h) + r0 * dout.ld;
        const auto brows = static_cast<blasint>(rows), bsb = static_cast<blasint>(sb);
        probabilities(g, b, qr, q.ld, kh, k.ld, r0, rows, sb, p);
        // dV[0:sb] += Pᵀ dO
        gemm(CblasTrans, CblasNoTrans, bsb, bd, brows, 1.0f, p, bsb, dor, dout.ld, 1.0f, dv, bd);
        // dP = dO Vᵀ, then dS = P ∘ (dP − rowsum(P ∘ dP)) in place
        gemm(CblasNoTrans, CblasTrans, brows, bsb, bd, 1.0f, dor, dout.ld, vh, v.ld, 0.0f, ds, bsb);
        for (int64_t ii = 0; ii < rows; ++ii) {
          const float* __restrict pr = p + ii * sb;
          float* __restrict dr = ds + ii * sb;
          const auto d = static_cast<float>(row_dot(pr, dr, sb));
          for (int64_t j = 0; j < sb; ++j) dr[j] = pr[j] * (dr[j] - d);
        }
        // dQ = scale · dS K;  dK[0:sb] += scale · dSᵀ Q
        gemm(CblasNoTrans, CblasNoTrans, brows, bd, bsb, g.scale, ds, bsb, kh, k.ld, 0.0f, dq, bd);
        gemm(CblasTrans, CblasNoTrans, bsb, bd, brows, g.scale, ds, bsb, qr, q.ld, 1.0f, dk, bd);
      }
    }
  }
}

/// A bf16 or f16 [B, H, rows, D] operand as make_attention receives it: strides as AttnOperand's.
struct HalfOperand {
  const uint16_t* data = nullptr;
  int64_t sb = 0, sh = 0, ld = 1;
  int64_t B = 0, H = 0, rows = 0, D = 0;
  bool f16 = false;  // else bf16
};

HalfOperand half_operand(const View& v, const Shape& shape, DType dtype) {
  const AttnOperand o = operand(v, shape);
  HalfOperand x{
      reinterpret_cast<const uint16_t*>(v.data), o.sb, o.sh, o.ld, shape[0], shape[1], shape[2], shape[3]};
  x.f16 = dtype == DType::kF16;
  return x;
}

int64_t dense_numel(const HalfOperand& x) { return x.B * x.H * x.rows * x.D; }

/// The f32 values of x (exact), dense [B, H, rows, D] at dst, as an AttnOperand.
AttnOperand widen(const HalfOperand& x, float* dst) {
  const int64_t heads = x.B * x.H, head = x.rows * x.D;
  const auto widen_head = x.f16 ? widen_f16 : widen_bf16;
#pragma omp parallel for schedule(static) if (heads > 1 && heads * head > kGrainCheap)
  for (int64_t bh = 0; bh < heads; ++bh)
    widen_head(x.data + bh / x.H * x.sb + bh % x.H * x.sh, x.rows, x.D, x.ld, dst + bh * head);
  return {dst, x.H * head, head, checked_blas_int(std::max<int64_t>(1, x.D))};
}

/// Memory for the widened operands of the attention kernels run by the calling thread (one
/// after another, like caller_scratch), grown outside any parallel region.
float* widened_scratch(int64_t floats) {
  thread_local std::vector<float> data;
  if (data.size() < static_cast<size_t>(floats)) data.resize(static_cast<size_t>(floats));
  return data.data();
}

}  // namespace

bool attention_operand(const View& view, const Shape& shape) {
  const std::optional<BlasOperand> o = blas_operand(view, shape);
  return o.has_value() && !o->trans;
}

Kernel make_attention(const ir::Node& node, const Shape& q_shape, const Shape& kv_shape,
                      const std::vector<View>& in, float* out, DType dtype, const uint8_t* key_mask) {
  AttnGeometry g;
  g.B = q_shape[0];
  g.Hq = q_shape[1];
  g.T = q_shape[2];
  g.D = q_shape[3];
  g.Hkv = kv_shape[1];
  g.S = kv_shape[2];
  g.group = g.Hkv == 0 ? 1 : g.Hq / g.Hkv;
  g.blocks = (g.T + kRowBlock - 1) / kRowBlock;
  g.causal = node.attrs.causal;
  g.scale = static_cast<float>(node.attrs.values[0]);
  g.keys = key_mask;
  checked_blas_int(kRowBlock * g.S);
  checked_blas_int(g.D);
  const int64_t out_numel = numel(node.shape);
  const bool backward = node.op == ir::Op::kAttentionGrad;
  const bool direct = direct_pays(g, backward);
  // Runs the f32 kernel on f32 operands (q, k, v[, dout]).
  auto run = [=](const AttnOperand& q, const AttnOperand& k, const AttnOperand& v, const AttnOperand& dout) {
    if (!backward)
      (direct ? forward_direct : forward)(g, q, k, v, out, caller_scratch());
    else
      (direct ? backward_direct : backward_blocks)(g, q, k, v, dout, out, caller_scratch());
  };
  const size_t operands = backward ? 4 : 3;
  if (is_half(dtype)) {
    // bf16 and f16 operands are widened (exactly) to dense f32 copies first: O(B·H·T·D) work
    // against the kernel's O(B·H·T·S·D), and the f32 kernel then multiplies the same values.
    std::vector<HalfOperand> narrow;
    for (size_t i = 0; i < operands; ++i)
      narrow.push_back(half_operand(in[i], i == 1 || i == 2 ? kv_shape : q_shape, dtype));
    return [=] {
      if (out_numel == 0 || (backward && g.D == 0)) return;
      int64_t total = 0;
      for (const HalfOperand& x : narrow) total += dense_numel(x);
      float* dst = widened_scratch(total);
      std::vector<AttnOperand> wide;
      for (const HalfOperand& x : narrow) {
        wide.push_back(widen(x, dst));
        dst += dense_numel(x);
      }
      run(wide[0], wide[1], wide[2], backward ? wide[3] : AttnOperand{});
    };
  }
  std::vector<AttnOperand> ops;
  for (size_t i = 0; i < operands; ++i) ops.push_back(operand(in[i], i == 1 || i == 2 ? kv_shape : q_shape));
  return [=] {
    // The backward's D == 0 is unreachable (numel would be 0), but keeps sgemm away from k = 0.
    if (out_numel == 0 || (backward && g.D == 0)) return;
    run(ops[0], ops[1], ops[2], backward ? ops[3] : AttnOperand{});
  };
}

}  // namespace tg::backend::cpu
