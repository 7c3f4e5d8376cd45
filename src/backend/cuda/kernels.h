// Kernel templates of the CUDA backend: for each non-elementwise op, a function that writes
// the CUDA C++ of one kernel specialised to the node's shapes (baked in as constants) and
// says how to launch it. The executable (backend/cuda/executable.cc) compiles them through
// NVRTC and launches them with the parameters listed per function below, in that order.
//
// Conventions shared by every function here:
//   - `name` is the kernel's extern "C" name; the source defines exactly that __global__.
//   - Element types: f32 → float, i32 → int, bool → unsigned char.
//   - An Operand is how a kernel reads an input: element strides over `shape` (0 = broadcast
//     along that axis); the pointer the executable passes already includes any offset.
//   - Outputs are dense, row-major, over the node's shape.
//   - `int* err` (where listed) is a device word the kernel sets to a nonzero code when it
//     finds bad data (an index out of range); the executable reports it as an InputError
//     after the step. The kernel must still not read or write out of bounds.
//   - Semantics are the reference backend's (backend/ref), within f32 rounding.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "backend/cuda/driver.h"
#include "ir/window.h"
#include "tensorgrad/dtype.h"

namespace tg::backend::cuda {

struct Launch {
  std::string name, source;
  unsigned grid[3] = {1, 1, 1}, block[3] = {1, 1, 1};
  unsigned shared_bytes = 0;  // dynamic shared memory (above 48 KiB is allowed: the executable opts in)
};

struct Operand {
  DType dtype = DType::kF32;
  Shape shape;
  std::vector<int64_t> strides;  // elements
};

// ---- reductions (kernels_reduce.cc) -------------------------------------------------------
/// Sum / Max / Min (f32 or i32, result of the same type) or Argmax (i32 result, the first
/// index of the maximum; NaN handling as the reference) of `in` over `axes` (sorted).
/// Output: dense over the kept axes, in order. Params: (const T* in, R* out).
/// `op` is one of "sum", "max", "min", "argmax".
/// `dev` sizes the launch (how many blocks fill it).
Launch reduce_kernel(const std::string& name, const std::string& op, const Operand& in,
                     const std::vector<int>& axes, const DeviceInfo& dev);

// ---- prefix sums (kernels_cumsum.cc) ---------------------------------------------------------
/// Inclusive prefix sum of `in` (f32 or i32) along `axis`, from its end when `reverse` (see
/// ops.def Cumsum). Output dense over in.shape. Params: (const T* in, T* out).
Launch cumsum_kernel(const std::string& name, const Operand& in, int axis, bool reverse);

// ---- indexing and randomness (kernels_reduce.cc) -------------------------------------------
/// out = take_along_axis(x, idx, axis) over idx's shape (see ops.def Gather).
/// Params: (const T* x, const int* idx, T* out, int* err).
Launch gather_kernel(const std::string& name, const Operand& x, const Operand& idx, int axis);
/// out (dense over dst's shape) = update_slice(dst, src, pos, axis) (see ops.def UpdateSlice);
/// an offset out of range sets *err. Params: (const T* dst, const T* src, const int* pos, T* out, int* err).
Launch update_slice_kernel(const std::string& name, const Operand& dst, const Operand& src,
                           const Operand& pos, int axis);
/// update_slice in place: only src's rows are written into dst (dense) at the offsets; an
/// offset out of range sets *err and writes nothing. Params: (const T* src, const int* pos, T* dst, int*
/// err). `src2`: a second (src2, dst2) pair in the same launch, at the same offsets, dst2 laid out as dst
/// and src2 of src's shape through its own strides (a layer's K and V caches); params (src, pos, dst, src2,
/// dst2, err).
Launch update_rows_kernel(const std::string& name, const Operand& dst, const Operand& src, const Operand& pos,
                          int axis, const Operand* src2 = nullptr);
/// out (already zeroed by the executable, dense over out_shape) += src scattered along axis
/// by idx (see ops.def ScatterAdd). f32 or i32. Params: (const T* src, const int* idx, T* out, int* err).
Launch scatter_add_kernel(const std::string& name, const Operand& src, const Operand& idx,
                          const Shape& out_shape, int axis);
/// Uniform [0, 1) f32 of `numel` elements, bit-identical to backend/philox.h's philox_uniform.
/// Params: (const int* key, float* out).
Launch random_kernel(const std::string& name, int64_t numel, uint64_t seed);
/// Device code of Philox4x32-10, bit-identical to backend/philox.h (which uses std::array, so
/// NVRTC cannot include it): philox_block(block, key) under the baked-in `seed`,
/// philox_block_seeded(block, key, seed_lo, seed_hi) under a run-time seed, and to_uniform(word).
std::string philox_source(uint64_t seed);
/// x·[u ≥ p]/(1−p) with u the same stream as random_kernel. Params: (const float* x, const int* key, float*
/// out).
Launch dropout_kernel(const std::string& name, const Operand& x, double p, uint64_t seed);

/// attention_at (ops.def): q [B, Hq, T, D], k/v [B, Hkv, S, D], pos i32 [B], any strides;
/// out dense [B, Hq, T, D]; a position outside [0, S − T] sets *err.
/// Params: (const float* q, const float* k, const float* v, const int* pos, float* out, int* err).
Launch attention_at_kernel(const std::string& name, const Operand& q, const Operand& k, const Operand& v,
                           const Operand& pos, double scale);
/// selective_scan (ops.def) over dense operands (selective_scan.cc): states in registers (two
/// states of two channels per thread when N ≤ 64, else four states), time walked in chunks of 8 steps.
struct ScanShape {
  int64_t batch = 0, channels = 0, length = 0, groups = 1, states = 0;
  bool softplus = false;
  bool vec = false;  // every operand 16-byte aligned: with length % 4 == 0, rows load as float4
  // D and delta_bias may be one value broadcast over the channels (stride 0: an absent D or
  // bias is a broadcast zero), read as they are instead of copied into a dense vector.
  int64_t d_stride = 1, bias_stride = 1;
  // The backward's cotangents (selective_scan_grad's dy and dlast): dy as dense rows [B, D, L],
  // as one value for every element (the gradient of a plain sum) or a known zero (not read);
  // dlast [B, D, N] as rows or a known zero (not read).
  enum class Dy { kRows, kOne, kZero };
  Dy dy = Dy::kRows;
  bool dlast = true;
  // Tuning sweeps only (0: the built-in choice): the backward's blocks per SM, and the most
  // channels one block takes.
  int blocks_per_sm = 0, max_channels = 0;
};
/// How the backward splits the work and the scratch the kernels use (floats): lanes per channel
/// (⌈N/2⌉ for N ≤ 64, else ⌈N/4⌉, rounded up to a power of two), channels per block, blocks per
/// sequence, 8-step chunks.
/// Scratch: the states entering each chunk [B, D, chunks, N]; the gradient's partials: dA
/// [B, D, N], dB/dC [blocks, B, 2, N, L], dD/dbias [2, B, D]. Throws when d_state > 128.
struct ScanLayout {
  int64_t lanes = 1, channels_per_block = 1, blocks = 1, chunks = 1;
  int64_t state_floats = 0, da_floats = 0, dbc_floats = 0, dd_floats = 0;
};
ScanLayout scan_layout(const ScanShape& s);
/// y (with the D skip) and the last state into out; with `keep`, the states entering each chunk
/// into hs. Params: (u, delta, A, B, C, Dskip, bias, out, hs) (hs unused without keep).
Launch scan_forward_kernel(const std::string& name, const ScanShape& s, bool keep);
/// du and d(delta) into out, the dA, dB/dC and dD/dbias partials, from the forward's kept
/// states. Params: (u, delta, A, B, C, Dskip, bias, dy, dlast, hs, out, dA_part, dBC_part,
/// dDb_part); dy and dlast as s.dy and s.dlast say (unread when absent).
Launch scan_backward_kernel(const std::string& name, const ScanShape& s);
/// dA, dB, dC, dD and dbias of out from the partials, summed in a fixed order.
/// Params: (dA_part, dBC_part, dDb_part, out).
Launch scan_reduce_kernel(const std::string& name, const ScanShape& s);
/// sample (ops.def) of dense logits [rows, vocab]: one block per row. Params:
/// (const float* logits, const float* params, const int* key, int* out).
Launch sample_kernel(const std::string& name, int64_t rows, int64_t vocab);

// ---- row kernels over dense f32 data (kernels_rows.cc) --------------------------------------
/// Softmax or log-softmax over the middle axis of a dense [outer, axis, inner] view.
/// causal (inner == 1 only): row r (of outer) is query i = r mod t of a [t, axis] block;
/// column j is masked when j > i + (axis − t): probability 0, log-probability −inf.
/// Params: (const float* in, float* out).
Launch softmax_kernel(const std::string& name, int64_t outer, int64_t axis, int64_t inner, bool log,
                      bool causal, int64_t t);
/// Per-row loss −log_softmax(logits[n])[target[n]] of dense logits [rows, cols]; 0 where the
/// target equals ignore_index; a target outside [0, cols) sets *err and gives NaN.
/// Rows of logits start `logits_ld` elements apart (-1: cols, dense).
/// Params: (const float* logits, const int* targets, float* loss, int* err).
Launch cross_entropy_kernel(const std::string& name, int64_t rows, int64_t cols, int64_t ignore_index,
                            int64_t logits_ld = -1);
/// dlogits = (softmax(logits) − onehot(target))·dloss[n] (0 rows where ignored).
/// Row strides as in cross_entropy_kernel, for logits and dlogits.
/// Params: (const float* logits, const int* targets, const float* dloss, float* dlogits, int* err).
Launch cross_entropy_grad_kernel(const std::string& name, int64_t rows, int64_t cols, int64_t ignore_index,
                                 int64_t logits_ld = -1, int64_t dlogits_ld = -1);
/// A forward norm's affine epilogue, y = x̂ · w + b, w and b length-cols vectors (either optional).
struct NormAffine {
  bool w = false, b = false;
};
/// (x − mean)/sqrt(var + eps) per row (biased var), then `affine`. Params: (const float* x,
/// [const float* w, const float* b (both, when either is asked for),] float* y).
Launch layer_norm_kernel(const std::string& name, int64_t rows, int64_t cols, double eps,
                         NormAffine affine = {});
/// Params: (const float* x, const float* dy, float* dx).
Launch layer_norm_grad_kernel(const std::string& name, int64_t rows, int64_t cols, double eps);
/// A norm's backward (norm_fusion.cc), one warp per row (cols ≤ 1024), `blocks` blocks of 8
/// warps walking the rows: dx = norm_grad(x, dz · w) (layer: centred; else RMS) and, as asked,
/// each block's column partials of dz · norm(x) (k = 0) and dz (k = 1) into part[k][block][col].
/// Params: (x, dz, [w,] dx, part).
Launch norm_backward_kernel(const std::string& name, int64_t rows, int64_t cols, double eps, bool layer,
                            bool has_w, bool dw, bool db, int64_t blocks);
/// dw[c], db[c] (those asked for) = Σ over blocks, in block order, of part[k][block][c].
/// Params: (part, [dw,] [db]).
Launch norm_partials_kernel(const std::string& name, int64_t cols, int64_t blocks, bool dw, bool db);
/// x/sqrt(mean(x²) + eps) per row. Params: (const float* x, float* y).
Launch rms_norm_kernel(const std::string& name, int64_t rows, int64_t cols, double eps,
                       NormAffine affine = {});
/// Params: (const float* x, const float* dy, float* dx).
Launch rms_norm_grad_kernel(const std::string& name, int64_t rows, int64_t cols, double eps);

// ---- attention (attention.cc) ---------------------------------------------------------------
/// q [B, Hq, T, D], k and v [B, Hkv, S, D] as Operands (any batch/head/row strides; the kernel
/// may require unit stride along D, see attention_operand_ok), Hq a multiple of Hkv.
struct AttentionShape {
  int64_t batch = 0, q_heads = 0, kv_heads = 0, t = 0, s = 0, d = 0;
  double scale = 1;
  bool causal = false;
  /// Products may round q, k, v, p and dO to TF32 (tensor cores), as the matmul precision
  /// option allows; false keeps exact fp32 math. The executable sets it from its precision option.
  bool tf32 = false;
  /// Backward only (tiled paths, attention_keeps_stats): write dq as [B, T, Hq, D] and dk, dv as
  /// [B, S, Hkv, D] inside [dq | dk | dv] (heads next to the features, as a qkv projection's
  /// gradient wants them) instead of [B, H, T, D].
  bool grads_bthd = false;
  /// With t = s (any path): the gradients packed per token as [B, T, (Hq + 2 Hkv)·D], each row
  /// [dq | dk | dv] — the gradient of a packed qkv projection, so no concat follows.
  bool grads_packed = false;
  /// The device's SM count (DeviceInfo): the short-sequence path sizes its blocks by it.
  int sm_count = 0;
  /// A key mask, bool [B, S] (ops.def Attention): every kernel takes it as its last parameter,
  /// `const unsigned char* kmask` (the delta kernel excepted). The short-sequence path takes
  /// none, so such shapes run on the tiled kernels.
  bool key_mask = false;
  /// Tuning sweeps only (empty: the built-in tiles): per kernel (f forward, k dk/dv, q dq),
  /// "f:<warps>,<rows>,<columns per thread>;…" on the fp32 tiled path or
  /// "f:<warps>,<key columns>;…" on the tensor-core path.
  std::string tiles = {};
};
/// Whether the attention kernels read `op` as it is (else the executable makes it dense).
bool attention_operand_ok(const Operand& op);
/// Flash-style forward: never stores the T×S scores. `out` describes the output [B, Hq, T, D]:
/// any batch/head/row strides with unit stride along D (attention_operand_ok), e.g. a permuted
/// view of a [B, T, Hq, D] buffer; element [b, h, t, d] is written at b·s0 + h·s1 + t·s2 + d,
/// nothing else (gaps between rows stay untouched). Its elements must not overlap.
/// Params: (const float* q, const float* k, const float* v, float* out), and with keep_stats a
/// trailing float* stats: [2, B·Hq·T] floats whose first half gets each query row's
/// log-sum-exp, for the backward (only where attention_keeps_stats).
Launch attention_kernel(const std::string& name, const AttentionShape& s, const Operand& q, const Operand& k,
                        const Operand& v, const Operand& out, bool keep_stats = false);
/// Whether this shape's forward can keep its row statistics for the backward: the tiled paths
/// do; the short-sequence path recomputes them inside its one-launch backward.
bool attention_keeps_stats(const AttentionShape& s);
/// Backward: the launches run in order, every one with the params
/// (const float* q, const float* k, const float* v, const float* dout, float* grads, float* scratch)
/// where dout [B, Hq, T, D] is read through the strides of the `dout` Operand (any batch/head/row
/// strides, unit stride along D, as for the forward's out), grads is [dq | dk | dv] flattened
/// (dense, in that order), and scratch holds `scratch_floats` floats of the executable's arena.
/// With `out` (the forward's output, whose kernel kept its statistics: attention_kernel with
/// keep_stats), scratch is that forward's stats buffer and the forward is not re-run: the
/// first launch (delta_from_out) has params (const float* out, const float* dout, float* scratch)
/// and computes Σ dO·O per row from the stored output.
struct AttentionGradPlan {
  std::vector<Launch> launches;
  int64_t scratch_floats = 0;
  bool delta_from_out = false;
};
AttentionGradPlan attention_grad_kernels(const std::string& name, const AttentionShape& s, const Operand& q,
                                         const Operand& k, const Operand& v, const Operand& dout,
                                         const Operand* out = nullptr);

// ---- convolutional networks (kernels_conv.cc) -------------------------------------------
/// conv2d or one of its gradients as implicit GEMMs (kernels/conv.cuh). launches[0] has params
/// (const IN_T* p0, const IN_T* p1, float* out): (x, w, y), (dy, w, dx) or (x, dy, dw); IN_T is
/// float or bf16 bits (`dtype`), operands dense. With `tf32` (or bf16 operands, exact in tf32)
/// the products run on the tensor cores (tf32 rounding of f32 operands). A weight gradient split over several
/// blocks writes partials to `scratch_floats` floats of scratch (then launches[0]'s out) and adds them with
/// launches[1], params (const float* scratch, float* dw).
struct ConvPlan {
  std::vector<Launch> launches;
  int64_t scratch_floats = 0;
  int64_t flops = 0;
};
/// Where the tile kernels apply (tensor-core products whose operand windows fit in shared
/// memory; the input's gradient only at stride 1) and `tiles` is true, they are used; else the
/// gathering implicit GEMMs. TG_CUDA_CONV=gather sets `tiles` false by default.
bool conv_tiles_allowed();
ConvPlan conv_kernels(const std::string& name, ir::Op op, const ir::WindowGeom& geom, DType dtype, bool tf32,
                      const DeviceInfo& dev, bool tiles = conv_tiles_allowed());
/// max_pool2d, avg_pool2d or a gradient (f32, dense). Params (const float* a, const float* b,
/// float* out): (x, unused, y), (x, dy, dx) for max's gradient, (dy, unused, dx) for avg's.
Launch pool_kernel(const std::string& name, ir::Op op, const ir::WindowGeom& geom, const DeviceInfo& dev);

// ---- mixtures of experts (kernels_grouped.cc) -----------------------------------------------
/// grouped_matmul (grad_weight false) or grouped_matmul_grad_weight (ops.def) over dense
/// operands: x [rows, k]; w [experts, n, k] (w_nk: attrs.axes {2}) or [experts, k, n]; dy
/// [rows, n]; x and w (or dy) of `dtype` (f32, or bf16 / f16 bits), f32 accumulation and out.
struct GroupedShape {
  int64_t rows = 0, k = 0, n = 0, experts = 1;
  bool w_nk = true, grad_weight = false;
  DType dtype = DType::kF32;
  bool aligned = false;  // x, w (dy) and out start 16-byte aligned: vector loads where rows allow
};
/// Which kernel: the forward's gemv kernels (each expert matrix with rows is read once per 16
/// of its rows) or the 64 × 64 tiles (the forward over (expert, row tile) pairs, the weight
/// gradient over (tile, expert)); tiles of bf16 / f16 run on tensor cores on sm_80+
/// (grouped_uses_tensor_cores), f32 ones on f32 FMAs. kAuto: gemv for a forward of few rows
/// (grouped_uses_gemv: at most 64 for w [E, N, K]; for w [E, K, N] 16, or 8 where the tiles run
/// on tensor cores), else tiles. kFmaTiles: the f32 FMA tiles whatever the type.
enum class GroupedPath { kAuto, kTiles, kGemv, kFmaTiles };
bool grouped_uses_gemv(const GroupedShape& s, const DeviceInfo& dev);
bool grouped_uses_tensor_cores(const GroupedShape& s, const DeviceInfo& dev);
/// One launch; offsets that do not rise from 0 to rows set *err (nothing is read out of
/// bounds; the output is then undefined). Deterministic: fixed summation orders, no atomics.
/// Params: (const IN_T* x, const IN_T* w_or_dy, const int* offsets, float* out, int* err).
Launch grouped_matmul_kernel(const std::string& name, const GroupedShape& s, const DeviceInfo& dev,
                             GroupedPath path = GroupedPath::kAuto);

// ---- quant_matmul (kernels_quant.cc) -------------------------------------------------------
/// x [rows, k] (f32, bf16 or f16, dense) · (q · scale)ᵀ with q i8 [cols, k] and `groups` f32 scales
/// a row (dense) → f32 [rows, cols]; `four`: x · (c · scale + offset)ᵀ with 4-bit codes c packed in
/// q [cols, k / 2]. `q_aligned`, `x_aligned`: the buffers start 16-byte aligned (the vector loads
/// need k and the group multiples of 16 too). Params: (const XT* x, const signed char* q, const
/// float* scale, const float* offset (read when `four`), float* out).
Launch quant_matmul_kernel(const std::string& name, DType x_dtype, int64_t rows, int64_t cols, int64_t k,
                           int64_t groups, bool four, bool q_aligned, bool x_aligned);

}  // namespace tg::backend::cuda
