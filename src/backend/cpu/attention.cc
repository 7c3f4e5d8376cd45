// Fused scaled dot-product attention of the CPU backend, forward and backward, in the
// FlashAttention spirit: the T×S score matrix is never stored. Queries are processed in row
// blocks of kRowBlock rows, and a thread holds the scores of one block at a time (its
// scratch is kRowBlock × S floats forward, twice that backward, shared by every layer).
// Every matrix product is a cblas_sgemm on the operands in place: q, k, v and dout may be
// views with any batch and head strides, as long as each head's [rows, D] matrix has unit
// stride along D (a [B, T, H, D] → [B, H, T, D] permute qualifies: attention_operand).
//
// Notation per (batch b, q head h, row block R), with kv head g = h / (Hq / Hkv) (GQA) and
// only the first Sb keys visible to the block (Sb = S, or min(S, end(R) + S − T) causal):
//   S_R = scale · Q_R K_gᵀ                    [rows, Sb]   sgemm
//   P_R = softmax_rows(S_R), entries j > i + (S − T) masked to 0 when causal
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
#include <cblas.h>
#include <omp.h>

#include <cstring>
#include <string>

#include "backend/cpu/cpu_kernels.h"
#include "tensorgrad/errors.h"

namespace tg::backend::cpu {
namespace {

constexpr int64_t kRowBlock = 64;

blasint checked_blas_int(int64_t v) {
  if (v > std::numeric_limits<blasint>::max())
    throw Error("[cpu] attention extent " + std::to_string(v) + " exceeds the BLAS integer range");
  return static_cast<blasint>(v);
}

/// A [B, H, rows, D] operand: head (b, h) starts at data + b·sb + h·sh, rows ld apart.
struct Operand {
  const float* data = nullptr;
  int64_t sb = 0, sh = 0;
  blasint ld = 1;
  const float* head(int64_t b, int64_t h) const { return data + b * sb + h * sh; }
};

Operand operand(const View& v, const Shape& shape) {
  const std::optional<BlasOperand> o = blas_operand(v, shape);
  if (!o || o->trans) throw Error("[cpu] attention operand is not row-addressable (planner bug)");
  return {reinterpret_cast<const float*>(v.data), shape[0] == 1 ? 0 : v.strides[0], shape[1] == 1 ? 0 : v.strides[1],
          checked_blas_int(o->ld)};
}

struct Geometry {
  int64_t B = 0, Hq = 0, Hkv = 0, T = 0, S = 0, D = 0, group = 1, blocks = 0;
  bool causal = false;
  float scale = 1;
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

/// P = masked row softmax of scale·Q Kᵀ over the first sb keys, for query rows [r0, r0+rows).
void probabilities(const Geometry& g, const float* q, blasint ldq, const float* k, blasint ldk, int64_t r0,
                   int64_t rows, int64_t sb, float* p) {
  const auto bsb = static_cast<blasint>(sb);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(rows), bsb, static_cast<blasint>(g.D),
              g.scale, q, ldq, k, ldk, 0.0f, p, bsb);
  for (int64_t ii = 0; ii < rows; ++ii) {
    float* row = p + ii * sb;
    const int64_t valid = g.causal ? std::min(sb, r0 + ii + (g.S - g.T) + 1) : sb;
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < valid; ++j) m = row[j] > m ? row[j] : m;
    double sum = 0;
    for (int64_t j = 0; j < valid; ++j) {
      row[j] = std::exp(row[j] - m);
      sum += static_cast<double>(row[j]);
    }
    const auto inv = static_cast<float>(1.0 / sum);
    for (int64_t j = 0; j < valid; ++j) row[j] *= inv;
    for (int64_t j = valid; j < sb; ++j) row[j] = 0.0f;
  }
}

void forward(const Geometry& g, const Operand& q, const Operand& k, const Operand& v, float* out, Scratch& scratch) {
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
    probabilities(g, q.head(b, h) + r0 * q.ld, q.ld, k.head(b, kv), k.ld, r0, rows, sb, p);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<blasint>(rows), bd, static_cast<blasint>(sb),
                1.0f, p, static_cast<blasint>(sb), v.head(b, kv), v.ld, 0.0f, o, bd);
  }
}

void backward(const Geometry& g, const Operand& q, const Operand& k, const Operand& v, const Operand& dout, float* out,
              Scratch& scratch) {
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
        probabilities(g, qr, q.ld, kh, k.ld, r0, rows, sb, p);
        // dV[0:sb] += Pᵀ dO
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bsb, bd, brows, 1.0f, p, bsb, dor, dout.ld, 1.0f, dv, bd);
        // dP = dO Vᵀ, then dS = P ∘ (dP − rowsum(P ∘ dP)) in place
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, brows, bsb, bd, 1.0f, dor, dout.ld, vh, v.ld, 0.0f, ds, bsb);
        for (int64_t ii = 0; ii < rows; ++ii) {
          const float* pr = p + ii * sb;
          float* dr = ds + ii * sb;
          double di = 0;
          for (int64_t j = 0; j < sb; ++j) di += static_cast<double>(pr[j]) * static_cast<double>(dr[j]);
          const auto d = static_cast<float>(di);
          for (int64_t j = 0; j < sb; ++j) dr[j] = pr[j] * (dr[j] - d);
        }
        // dQ = scale · dS K;  dK[0:sb] += scale · dSᵀ Q
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, brows, bd, bsb, g.scale, ds, bsb, kh, k.ld, 0.0f, dq, bd);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bsb, bd, brows, g.scale, ds, bsb, qr, q.ld, 1.0f, dk, bd);
      }
    }
  }
}

}  // namespace

bool attention_operand(const View& view, const Shape& shape) {
  const std::optional<BlasOperand> o = blas_operand(view, shape);
  return o.has_value() && !o->trans;
}

Kernel make_attention(const ir::Node& node, const Shape& q_shape, const Shape& kv_shape, const std::vector<View>& in,
                      float* out) {
  Geometry g;
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
  checked_blas_int(kRowBlock * g.S);
  checked_blas_int(g.D);
  const Operand q = operand(in[0], q_shape), k = operand(in[1], kv_shape), v = operand(in[2], kv_shape);
  const int64_t out_numel = numel(node.shape);
  if (node.op == ir::Op::kAttention) {
    return [=] {
      if (out_numel == 0) return;
      forward(g, q, k, v, out, caller_scratch());
    };
  }
  const Operand dout = operand(in[3], q_shape);
  return [=] {
    if (out_numel == 0) return;
    if (g.D == 0) return;  // unreachable (numel would be 0), but keeps sgemm away from k = 0
    backward(g, q, k, v, dout, out, caller_scratch());
  };
}

}  // namespace tg::backend::cpu
