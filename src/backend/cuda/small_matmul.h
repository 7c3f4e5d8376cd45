// Small f32 matrix products without cuBLASLt: one NVRTC kernel specialised to the shapes and
// strides (baked in as constants), for the tiny products of small training workloads where a
// cuBLASLt call's time is mostly fixed overhead.
//
// Scheme: each block computes a BM×BN tile of out [batch, m, n] = a [batch, m, k] · b [batch, k, n].
// K is walked in stages of BK: both operand tiles are loaded from global memory with coalesced
// loads (the loop order follows whichever stride is 1, so row- and column-major operands both
// read whole sectors) into shared memory as k-major tiles As[k][m], Bs[k][n] (double-buffered,
// next stage prefetched into registers while the current one is computed), and every thread
// accumulates a TM×TN micro-tile with exact f32 FMAs (vector shared-memory reads). Products with
// few output tiles and a long K split K two ways, both deterministic:
//   - KS thread groups of a block take interleaved slices of each stage; their partial tiles
//     meet in shared memory and are summed in group order;
//   - CL blocks of a thread-block cluster (sm_90+, __cluster_dims__) take consecutive K ranges;
//     each block stores its partial tile in its shared memory, and after a cluster barrier every
//     block sums one part of the tile over all ranks (rank order, then group order) through
//     distributed shared memory and writes it. No atomics, no scratch memory.
#pragma once
#include <cstdint>
#include <string>

#include "backend/cuda/cublaslt.h"
#include "backend/cuda/kernels.h"

namespace tg::backend::cuda {

/// The tiling of one small product (chosen by small_matmul_config; exposed for tests/tuning).
struct SmallMatmulConfig {
  int bm = 64, bn = 64, bk = 32;  // block tile and K stage
  int tm = 4, tn = 4;             // per-thread micro-tile (1, 2, 4; tn also 8)
  int ks = 1;                     // thread groups splitting each stage's K (in-block split-K)
  int cl = 1;                     // cluster size splitting K across blocks (1..8, sm_90+)
  int threads() const { return (bm / tm) * (bn / tn) * ks; }
};

/// The configuration small_matmul_kernel uses for this product on device `dev` (its SM count,
/// threads and shared memory set the cost model's waves; clusters only from sm_90).
SmallMatmulConfig small_matmul_config(int64_t batch, int64_t m, int64_t n, int64_t k, const DeviceInfo& dev);

/// out [batch, m, n] (f32; rows out_row_stride apart, ≤ 0: n; batches m·out_row_stride apart) =
/// a · b, operands read through their strides (any layout with lt_readable; batch stride 0 =
/// broadcast). tf32 currently keeps exact f32 math (allowed: it only permits rounding).
/// Params: (const float* a, const float* b, float* out).
Launch small_matmul_kernel(const std::string& name, int64_t batch, int64_t m, int64_t n, int64_t k,
                           const MatOperand& a, const MatOperand& b, bool tf32, int64_t out_row_stride,
                           const DeviceInfo& dev);
/// The same with an explicit tiling (bm % tm == 0, bn % tn == 0, bk % (8·ks) == 0).
Launch small_matmul_kernel_with(const SmallMatmulConfig& cfg, const std::string& name, int64_t batch,
                                int64_t m, int64_t n, int64_t k, const MatOperand& a, const MatOperand& b,
                                int64_t out_row_stride);

/// Whether small_matmul_kernel is expected to beat cuBLASLt on this product (small_matmul.cc says why).
bool small_matmul_preferred(int64_t batch, int64_t m, int64_t n, int64_t k);

// ---- skinny products (gemv.cc) ---------------------------------------------------------------
/// What gemv_kernel applies to each output, in this order: + bias[j], + residual[i, j] (dense
/// [m, n]), GELU (tanh form, as ops.def's gelu_tanh).
struct GemvEpilogue {
  bool bias = false, residual = false, gelu = false;
};
/// A layer or RMS norm (with its affine w, b) applied to each row of a before the product:
/// a is then the norm's raw input (dense rows), normalised on the fly (see ops.def).
struct GemvNorm {
  bool on = false, layer = true, w = false, b = false;
  double eps = 1e-5;
};
/// The storage of gemv_kernel's operands: f32 or bf16 each (bf16 rows of a and columns of b
/// are widened as they are read; sums stay f32). round_a: a is f32 that the graph rounds to bf16
/// before the product (an absorbed cast): each value is rounded as it is read, after the norm.
/// b_fixed: b is a parameter or an inference program's hoisted weight, which no kernel of the
/// step writes: with programmatic dependent launches its loads start before the kernel before ends.
/// b_i8: b is quant_matmul's int8 q (its [n, k] rows read as the columns of b [k, n]) with one
/// f32 scale per `group` values of a column, passed after b; b_i4 (with b_i8): q holds 4-bit codes
/// packed two a byte, and an f32 offset per group is passed after the scales (staged kernel only:
/// gemv_takes_int4).
struct GemvTypes {
  bool a_bf16 = false, b_bf16 = false, round_a = false, b_fixed = false, b_i8 = false, b_i4 = false;
  int64_t group = 0;
};
/// Whether gemv_kernel takes a product of 4-bit weights (the staged kernel: the rows fit in shared
/// memory, K and the group multiples of 32, fewer than 2^23 weights).
bool gemv_takes_int4(int64_t m, int64_t n, int64_t k, int64_t group, bool norm, int sm_count);
/// The most rows gemv_kernel takes in a program: 8 with f32 weights, 1 with bf16 or int8 ones
/// (with two and more rows cuBLASLt's bf16 product, and quant_matmul_kernel's columns a warp for
/// int8, are faster than widening every row per load of W: measured in decode steps).
int64_t gemv_max_rows(bool narrow_weights);
/// Whether gemv_kernel takes this product: one batch, at most 8 rows, b read down its columns
/// (row_stride 1: the transpose of a row-major [n, k] weight).
bool gemv_applies(int64_t batch, int64_t m, int64_t n, int64_t k, const MatOperand& a, const MatOperand& b);
/// out [m, n] (rows out_ld apart, ≤ 0: n) = norm?(a) [m, k] · b [k, n] with the epilogue.
/// Params: (const A* a, [const float* norm_w, const float* norm_b (both when either is on),]
/// const B* b, [const float* scale (int8 b)], [const float* offset (4-bit b)], [const float* bias],
/// [const float* residual],
/// float* out), A and B float, bf16 bits or (B) int8 as `types` says (a norm reads an f32 a).
/// `sm_count` (the device's SMs) sizes the split of each column over warps; `ks` > 0 forces the
/// warps per output column instead (1, 2, 4, 8; for timing sweeps).
Launch gemv_kernel(const std::string& name, int64_t m, int64_t n, int64_t k, const MatOperand& a,
                   const MatOperand& b, GemvEpilogue epi, int64_t out_ld, int sm_count, GemvNorm norm = {},
                   int ks = 0, GemvTypes types = {});

}  // namespace tg::backend::cuda
