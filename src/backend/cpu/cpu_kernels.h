// Shared machinery of the CPU backend: host memory, strided views and the parallel
// strided loop every elementwise and copy kernel runs on, plus the kernel builders each
// kernel file exports to the planner (cpu_backend.cc). A kernel is built once at prepare
// time — shapes, strides, dtype dispatch and the thread split are all fixed then — and
// returned as a closure that execute() calls once per step with no further decisions
// beyond the tight inner loops.
#pragma once
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "ir/strides.h"
#include "ir/graph.h"
#include "ir/window.h"

namespace tg::backend::cpu {

using Kernel = std::function<void()>;

/// Elements below which a cheap loop stays on one thread: forking the OpenMP team costs
/// a few microseconds, which is the time to stream about this many floats.
constexpr int64_t kGrainCheap = int64_t{1} << 15;
/// Same, for elementwise ops whose per-element cost is a libm call (exp, tanh, …).
constexpr int64_t kGrainHeavy = int64_t{1} << 12;

/// Zero-filled, 64-byte aligned host memory (never null, even for zero bytes, so that
/// memcpy/memset on empty tensors stay well-defined).
class HostMem {
 public:
  HostMem() = default;
  explicit HostMem(int64_t bytes);
  std::byte* data() const { return ptr_.get(); }
  int64_t bytes() const { return bytes_; }

 private:
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::unique_ptr<std::byte, Free> ptr_;
  int64_t bytes_ = 0;
};

/// Where a node's elements live: element (i0, i1, …) is at data + Σ ik·strides[k]
/// elements. Strides may be 0 (broadcast) or arbitrary (permute, slice).
struct View {
  std::byte* data = nullptr;
  std::vector<int64_t> strides;  // one per axis of the node's shape, in elements
};

/// Row-major dense, ignoring the strides of extent-1 axes (which are never stepped).
bool is_contiguous(const View& view, const Shape& shape);
inline View contiguous_view(std::byte* data, const Shape& shape) { return {data, contiguous_strides(shape)}; }

// ---- the strided loop nest -------------------------------------------------------------

constexpr int kMaxOperands = 4;

/// A loop over `shape` stepping up to kMaxOperands strided operands together, with axes of
/// extent 1 dropped and adjacent axes merged wherever every operand allows it, so that a
/// dense or scalar-broadcast operation collapses to a single flat loop.
struct Nest {
  std::vector<int64_t> extents;                            // innermost last; never empty
  std::vector<std::array<int64_t, kMaxOperands>> strides;  // [axis][operand]
  int64_t numel = 0;
  int64_t grain = kGrainCheap;  // elements per parallel chunk
  const std::array<int64_t, kMaxOperands>& inner() const { return strides.back(); }
};

Nest make_nest(const Shape& shape, const std::vector<std::vector<int64_t>>& operand_strides, int64_t grain);

/// Calls segment(offsets, count) for consecutive runs of the innermost axis covering flat
/// positions [begin, end); offsets[k] is operand k's element offset at the run's start.
template <int N, class F>
void walk_range(const Nest& nest, int64_t begin, int64_t end, const F& segment) {
  const size_t rank = nest.extents.size();
  int64_t idx_small[16];
  std::vector<int64_t> idx_big;
  int64_t* idx = idx_small;
  if (rank > 16) {
    idx_big.resize(rank);
    idx = idx_big.data();
  }
  std::array<int64_t, N> off{};
  int64_t rest = begin;
  for (size_t d = rank; d-- > 0;) {
    idx[d] = rest % nest.extents[d];
    rest /= nest.extents[d];
    for (int k = 0; k < N; ++k) off[k] += idx[d] * nest.strides[d][k];
  }
  const size_t last = rank - 1;
  while (begin < end) {
    const int64_t count = std::min(nest.extents[last] - idx[last], end - begin);
    segment(off, count);
    begin += count;
    if (begin >= end) break;
    // Carry into the outer axes like an odometer: each wrap rewinds that axis's offset.
    for (int k = 0; k < N; ++k) off[k] += count * nest.strides[last][k];
    idx[last] += count;
    for (size_t d = last; d > 0 && idx[d] == nest.extents[d]; --d) {
      for (int k = 0; k < N; ++k) off[k] += nest.strides[d - 1][k] - nest.extents[d] * nest.strides[d][k];
      idx[d] = 0;
      ++idx[d - 1];
    }
  }
}

/// Runs the nest in fixed chunks of nest.grain elements; a nest of one chunk runs on the
/// calling thread. Chunks depend only on the shape, so results never depend on the
/// thread count.
template <int N, class F>
void run_nest(const Nest& nest, const F& segment) {
  const int64_t chunks = (nest.numel + nest.grain - 1) / nest.grain;
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c)
    walk_range<N>(nest, c * nest.grain, std::min(nest.numel, (c + 1) * nest.grain), segment);
}

// ---- value conversions shared by cast, constant and arange -----------------------------

/// Truncation toward zero that saturates instead of being UB: NaN → 0, ±big → INT32 limits.
inline int32_t saturate_i32(double v) {
  if (!(v == v)) return 0;
  if (v >= 2147483647.0) return std::numeric_limits<int32_t>::max();
  if (v <= -2147483648.0) return std::numeric_limits<int32_t>::min();
  return static_cast<int32_t>(v);
}
/// double → float without UB for finite values beyond float's range (they become ±inf).
inline float narrow_f32(double v) {
  constexpr double kMax = std::numeric_limits<float>::max();
  if (v > kMax) return std::numeric_limits<float>::infinity();
  if (v < -kMax) return -std::numeric_limits<float>::infinity();
  return static_cast<float>(v);
}
/// Writes `v` converted to `dtype` (f32 round, i32 truncate+saturate, bool ≠ 0) at dst[i].
void store_double(DType dtype, std::byte* dst, int64_t i, double v);

// ---- kernel builders (one file each; `out` is always the node's own dense storage) -----

/// n dense elements of the operands → n dense results; unused operands are null.
using BlockFn = void (*)(std::byte* out, const std::byte* a, const std::byte* b, const std::byte* c,
                         int64_t n);
/// The block function of an elementwise row of ops.def, cast or where. in_dtype is the
/// operands' type (for where: the branches'), out_dtype the result's.
BlockFn block_function(ir::Op op, DType in_dtype, DType out_dtype);
/// Relative per-element cost of an elementwise op (1 = an add).
int op_cost(ir::Op op);

/// One elementwise kernel group (passes/fusion.h), lowered by fused.cc: a register program
/// over cache-resident blocks. Slots 0..inputs-1 are the external inputs (views shaped like
/// the group), slot inputs+i is instruction i's result. Results listed in `outputs` are
/// written straight to their dense storage; the rest live only in per-thread scratch.
struct FusedSpec {
  Shape shape;
  struct Input {
    View view;
    DType dtype = DType::kF32;
    bool stage = false;  // read through scratch: its memory is also written by this group
  };
  struct Instr {
    BlockFn fn = nullptr;
    DType dtype = DType::kF32;  // result type
    std::array<int32_t, 3> args{-1, -1, -1};
    int32_t output = -1;  // index into outputs, or -1
    int cost = 1;
    int32_t reduction = -1;  // ≥ 0: a sum sink (fn null): args[0] accumulates into that reduction
  };
  /// An f32 sum of a slot over the group: flat position i adds into out[i mod inner]
  /// (passes::reduction_sink). Chunks accumulate partials in double, merged in chunk order.
  struct Reduction {
    int64_t inner = 1;
    float* out = nullptr;
  };
  std::vector<Input> inputs;
  std::vector<Instr> instrs;
  std::vector<std::byte*> outputs;  // dense, row-major over `shape`
  std::vector<Reduction> reductions;
};
/// Several independent groups (e.g. every parameter's optimizer update) run as one
/// parallel region over all their chunks: the multi-tensor form.
Kernel make_fused(std::vector<FusedSpec> groups);

/// Strided copy of `shape` elements from `src` to `dst` (both views may be arbitrary).
Kernel make_copy(DType dtype, const Shape& shape, const View& dst, const View& src);
void copy_now(DType dtype, const Shape& shape, const View& dst, const View& src);

/// Sum / Max / Min over node.attrs.axes of a dense input of shape in_shape.
Kernel make_reduce(const ir::Node& node, const Shape& in_shape, const std::byte* in, std::byte* out);
Kernel make_argmax(const ir::Node& node, const Shape& in_shape, DType in_dtype, const std::byte* in,
                   std::byte* out);
/// Inclusive prefix sum (node.attrs.axes = {axis}, node.attrs.reverse) of a dense input.
Kernel make_cumsum(const ir::Node& node, const std::byte* in, std::byte* out);

/// How a matrix view maps onto a BLAS operand: row-major `ld`, transposed or not.
struct BlasOperand {
  bool trans = false;
  int64_t ld = 1;
};
/// Whether the last two axes of `view` (extents rows × cols) are BLAS-addressable.
std::optional<BlasOperand> blas_operand(const View& view, const Shape& shape);
/// [..., m, k] @ [..., k, n] → dense f32 out of node.shape; both views must pass blas_operand.
/// dtype: both operands' type, f32, bf16 or f16 (accumulated in f32).
Kernel make_matmul(const Shape& out_shape, const Shape& a_shape, const View& a, const Shape& b_shape,
                   const View& b, float* out, DType dtype = DType::kF32);

/// grouped_matmul (x, w, offsets) and its weight gradient (x, dy, offsets) over dense operands
/// of `dtype` (f32, bf16 or f16): one product per expert on its rows. Offsets that do not rise
/// from 0 to x's rows throw InputError.
Kernel make_grouped_matmul(const ir::Node& node, const Shape& x_shape, const Shape& b_shape, DType dtype,
                           const std::byte* x, const std::byte* b, const int32_t* offsets, float* out);

/// quant_matmul (quant_matmul.cc): dense x [..., K] of `x_dtype` (f32, bf16 or f16) times the
/// transpose of the 8-bit weight q [cols, K] with `groups` f32 scales a row → dense out [..., cols];
/// with `offset` (else null), of the 4-bit weight whose codes q [cols, K / 2] packs (ops.def).
Kernel make_quant_matmul(const Shape& x_shape, DType x_dtype, const std::byte* x, const int8_t* q,
                         const float* scale, const float* offset, int64_t cols, int64_t groups, float* out);

// ---- NN primitives (indexing.cc, nn_kernels.cc, random.cc, attention.cc) ----------------
// Errors found in the data (an index or target out of range) are recorded inside the
// parallel loops and thrown as tg::InputError after them, never from inside a region.

/// Gather along node.attrs.axes[0]: x (x_shape, any view, any dtype) read at i32 idx (node.shape,
/// any view — embedding ids arrive broadcast) → dense out of node.shape.
Kernel make_gather(const ir::Node& node, const Shape& x_shape, const View& x, const View& idx,
                   std::byte* out);
/// update_slice over dense dst, src and out (out may be dst itself): out = dst, then src's rows
/// at the offsets pos (one, or one per index of axis 0). An offset out of range throws.
Kernel make_update_slice(const ir::Node& node, const Shape& src_shape, bool per_row, const std::byte* dst,
                         const std::byte* src, const int32_t* pos, std::byte* out);
/// Rotary: out = x·cos + rotate_half(x)·sin over rows of the last axis (f32, any views; the
/// last axis of each may be strided) → dense out of `shape`.
Kernel make_rotary(const Shape& shape, const View& x, const View& cos, const View& sin, float* out);
/// ScatterAdd: zeros of node.shape, then out[.., idx[i], ..] += src[i] for src and idx of
/// src_shape (any views); each output element accumulates in index order on one thread.
Kernel make_scatter_add(const ir::Node& node, const Shape& src_shape, const View& src, const View& idx,
                        float* out);

/// conv2d, the pools and their gradients (conv.cc): a (x, w, dy…) of `dtype` (f32, or bf16 or f16
/// for the conv ops), dense NCHW; b null for the one-operand ops.
Kernel make_window(const ir::Node& node, const ir::WindowGeom& geom, DType dtype, const std::byte* a,
                   const std::byte* b, float* out);

/// Softmax / LogSoftmax over node.attrs.axes[0] (with node.attrs.causal) of a dense input.
Kernel make_softmax(const ir::Node& node, const float* x, float* out);
/// CrossEntropy (dloss unused) / CrossEntropyGrad over dense logits [N, C]; the 1-D targets
/// (i32) and dloss (f32) may be any views.
Kernel make_cross_entropy(const ir::Node& node, const Shape& logits_shape, const float* logits,
                          const View& targets, const View& dloss, float* out);
/// LayerNorm / RmsNorm (dy null) and their grads over the last axis of dense inputs.
Kernel make_norm(const ir::Node& node, const float* x, const float* dy, float* out);
/// Random (x unused) / Dropout of a view x, under the i32 scalar key read at execute time.
Kernel make_random(const ir::Node& node, const View& x, const View& key, float* out);
/// Sample (ops.def) over dense logits [rows, V] with params f32 [3] and key i32 [2], both read
/// at execute time; one i32 id per row.
Kernel make_sample(int64_t rows, int64_t vocab, const float* logits, const float* params, const int32_t* key,
                   int32_t* out);

/// Whether attention can read a [B, H, T, D] operand in place: any batch and head strides,
/// rows addressable by BLAS without a transpose (unit stride along D).
bool attention_operand(const View& view, const Shape& shape);
/// SelectiveScan (u, delta, A, B, C, D, bias) / SelectiveScanGrad (…, dy, dlast, saved) over
/// dense inputs, writing the node's results one after the other into `out` (ir::Node::results).
Kernel make_selective_scan(const ir::Node& node, const Shape& u_shape, const Shape& b_shape,
                           const std::vector<const float*>& in, float* out);
/// AttentionAt (q, k, v, pos) over any views; dense out [B, Hq, T, D]. A position outside
/// [0, S − T] throws.
Kernel make_attention_at(const ir::Node& node, const Shape& q_shape, const Shape& kv_shape,
                         const std::vector<View>& in, float* out);
/// Attention (q, k, v) / AttentionGrad (q, k, v, dout); every view passes attention_operand.
/// dtype: the type of q, k, v and dout, f32, bf16 or f16 (half ones widened to f32 before each run).
/// key_mask: the node's dense bool [B, S] key mask, or null.
Kernel make_attention(const ir::Node& node, const Shape& q_shape, const Shape& kv_shape,
                      const std::vector<View>& in, float* out, DType dtype = DType::kF32,
                      const uint8_t* key_mask = nullptr);

}  // namespace tg::backend::cpu
