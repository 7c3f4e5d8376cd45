// The kernels of a product step (see capabilities.h): cuBLASLt with bias and residual
// epilogues, padded TF32 products, 3xTF32 split products, and the generated kernels for small
// and skinny ones (TG_CUDA_GEMV=off keeps skinny products on cuBLASLt, to compare).
#include <algorithm>
#include <optional>

#include "backend/cuda/capabilities.h"
#include "backend/cuda/small_matmul.h"
#include "ir/strides.h"
#include "passes/hoist.h"
#include "util/switches.h"

namespace tg::backend::cuda {

namespace {

/// The operand (`shape`, `strides`) as [batch, rows, cols] with one stride for the flattened
/// `batch_shape`, or nothing when its batch axes do not nest or cuBLASLt cannot read it.
std::optional<MatOperand> batch_matrix(const Shape& shape, const std::vector<int64_t>& strides,
                                       const Shape& batch_shape) {
  const size_t r = shape.size();
  MatOperand mo{shape[r - 2], shape[r - 1], strides[r - 2], strides[r - 1], 0};
  // Batch strides over the output's batch axes (right-aligned; absent or extent 1 → 0).
  std::vector<int64_t> bst(batch_shape.size(), 0);
  for (size_t d = 0; d + 2 < r; ++d) {
    const size_t od = batch_shape.size() - (r - 2) + d;
    bst[od] = shape[d] == 1 ? 0 : strides[d];
  }
  // One stride for the flattened batch: consecutive non-unit axes must nest.
  int64_t stride = -1, span = 1;
  bool all_zero = true;
  for (size_t d = batch_shape.size(); d-- > 0;) {
    if (batch_shape[d] == 1) continue;
    if (bst[d] != 0) all_zero = false;
    if (stride < 0)
      stride = bst[d];
    else if (bst[d] != stride * span)
      return std::nullopt;
    span *= batch_shape[d];
  }
  mo.batch_stride = all_zero ? 0 : std::max<int64_t>(stride, 0);
  if (!all_zero && stride == 0) return std::nullopt;
  if (!lt_readable(mo)) return std::nullopt;
  return mo;
}

/// Precision::kTf32x3: f32 products of 1 GFLOP and more on a GPU with TF32 tensor cores run as
/// three TF32 products over a split of each operand into x = hi + lo, hi and lo TF32 numbers
/// (CUTLASS's "3xTF32", XLA's HIGH precision): a·b = lo_a·hi_b + hi_a·lo_b + hi_a·hi_b, dropping
/// lo_a·lo_b (≤ 2⁻²² relative); each part is rounded to nearest, so every term carries a
/// relative error of ~2⁻²¹ against f32's 2⁻²⁴. The tensor cores' own accumulation adds to that:
/// the error is a few times that of f32 FMA products (cuBLAS SGEMM) and far below plain TF32's
/// (tests/backend/cuda_split_product_test.cc bounds it), in less time than SGEMM. Products whose
/// split operands would exceed 1 GiB (GPT-2's logits gradient), batched ones and those under
/// 1 GFLOP (where the two split kernels cost more than they save) stay f32 FMA products.
bool split_product_wanted(int64_t batch, int64_t m, int64_t n, int64_t k, DType dtype, const DeviceInfo& info,
                          const PrepareOptions& options) {
  constexpr int64_t kMinFlops = int64_t{1} << 30, kMaxSplitBytes = int64_t{1} << 30;
  const int64_t pm = padded_row(m), pn = padded_row(n), pk = padded_row(k);
  return options.tf32x3 && !options.tf32 && info.sm_major >= 8 && batch == 1 && dtype == DType::kF32 &&
         2 * m * n * k >= kMinFlops && 2 * pm * pk * 4 <= kMaxSplitBytes && 2 * pk * pn * 4 <= kMaxSplitBytes;
}

/// `mo` in buffer `b` at `p`, readable as [rows_p, cols_p] ≥ its extents: in place (true) when
/// only its unit-stride axis grows within the other stride of a buffer it starts (and, for
/// `zeros`, that padding is known to be zero: Buffer::pad_ld); else a zero-padded copy is needed
/// (`copy`), up to 512 MiB; false when neither works.
bool pad_operand(MatOperand& mo, const passes::Place& p, const passes::Buffer& b, int64_t rows_p,
                 int64_t cols_p, bool zeros, int64_t elem, bool& copy) {
  copy = false;
  if (rows_p == mo.rows && cols_p == mo.cols) return true;
  const bool row_major = mo.col_stride == 1;
  if (b.home == passes::Buffer::Home::kArena && p.offset == 0) {
    const bool grows_inner =
        row_major ? rows_p == mo.rows && mo.row_stride >= cols_p && mo.rows * mo.row_stride * elem <= b.bytes
                  : mo.row_stride == 1 && cols_p == mo.cols && mo.col_stride >= rows_p &&
                        mo.cols * mo.col_stride * elem <= b.bytes;
    const bool zero_ok =
        !zeros || (b.pad_ld > 0 && (row_major ? mo.row_stride == b.pad_ld && mo.cols == b.pad_cols
                                              : mo.col_stride == b.pad_ld && mo.rows == b.pad_cols));
    if (grows_inner && zero_ok) {
      mo.rows = rows_p, mo.cols = cols_p;
      return true;
    }
  }
  if (rows_p * cols_p * elem > (int64_t{512} << 20)) return false;
  copy = true;
  mo = row_major ? MatOperand{rows_p, cols_p, cols_p, 1, 0} : MatOperand{rows_p, cols_p, 1, rows_p, 0};
  return true;
}

/// quant_matmul x [..., k] · (q [n, k] · scale [n, k / group])ᵀ as a product step: gemv_kernel
/// reading the int8 columns (with the decode step's fusions: the norm and the cast of x, the
/// bias, GELU and residual epilogues) for one row of x (gemv_max_rows), else quant_matmul_kernel
/// with nothing fused. Its output is dense [rows, n].
ProductPlan plan_quant_product(const ir::Graph& g, int32_t id, const std::vector<passes::Place>& in,
                               const passes::ProductCandidates& c, const DeviceInfo& info) {
  static const bool gemv_off = env::equals(env::Switch::kCudaGemv, "off");
  const ir::Node& n = g.node(id);
  const ir::Node &x = g.node(n.inputs[0]), &q = g.node(n.inputs[1]), &scale = g.node(n.inputs[2]);
  ProductPlan p;
  passes::ProductChoice& ch = p.choice;
  p.quant = true;
  p.k = x.shape.back();
  p.m = p.mm = x.numel() / p.k;
  p.nn = p.ld = q.shape[0];
  p.operands = x.dtype;
  p.mats[0] = MatOperand{p.mm, p.k, p.k, 1, 0};
  p.mats[1] = MatOperand{p.k, p.nn, 1, p.k, 0};  // q's rows are b's columns
  const bool dense =
      is_contiguous_strides(in[0].strides, x.shape) && is_contiguous_strides(in[1].strides, q.shape);
  int64_t norm_rows = -1, norm_cols = -1;
  if (c.norm >= 0) {
    norm_cols = g.node(c.norm).shape.back();
    norm_rows = g.node(c.norm).numel() / std::max<int64_t>(norm_cols, 1);
  }
  // 4-bit weights take gemv_kernel where its staged kernel does, else quant_matmul_kernel.
  const bool four = n.inputs.size() == 4;
  const int64_t group = p.k / scale.shape[1];
  p.gemv = !gemv_off && dense && (x.dtype == DType::kF32 || x.dtype == DType::kBF16) &&
           p.mm <= gemv_max_rows(true) && gemv_applies(1, p.mm, p.nn, p.k, p.mats[0], p.mats[1]) &&
           (c.norm < 0 || (norm_rows == p.mm && norm_cols == p.k)) &&
           (!four || gemv_takes_int4(p.mm, p.nn, p.k, group, c.norm >= 0, info.sm_count));
  if (!p.gemv) return p;
  ch.cast = c.cast >= 0;
  ch.norm = c.norm >= 0 && (c.cast < 0 || ch.cast);
  ch.bias = c.bias_add >= 0;
  ch.gelu = c.gelu >= 0;
  ch.residual = c.residual_add >= 0 && !ch.gelu;
  // Both q and the scales must be values no kernel of the step writes for their loads to start
  // before the kernel before ends (programmatic dependent launch).
  p.types = {.a_bf16 = x.dtype == DType::kBF16 && !ch.cast,
             .round_a = ch.cast,
             .b_fixed = q.op == ir::Op::kParam && scale.op == ir::Op::kParam &&
                        (!four || g.node(n.inputs[3]).op == ir::Op::kParam),
             .b_i8 = true,
             .b_i4 = four,
             .group = group};
  return p;
}

}  // namespace

std::vector<int64_t> row_padded_strides(const Shape& shape, int64_t ld) {
  std::vector<int64_t> st(shape.size(), 1);
  if (shape.size() >= 2) st[shape.size() - 2] = ld;
  for (size_t d = shape.size() - 1; d-- > 1;) st[d - 1] = st[d] * shape[d];
  return st;
}

ProductPlan plan_product(const ir::Graph& g, int32_t id, const std::vector<passes::Place>& in,
                         const std::vector<passes::Buffer>& buffers, const passes::ProductCandidates& c,
                         const DeviceInfo& info, const PrepareOptions& options) {
  const ir::Node& n = g.node(id);
  if (n.op == ir::Op::kQuantMatmul) return plan_quant_product(g, id, in, c, info);
  const Shape& os = n.shape;
  const size_t rank = os.size();
  ProductPlan p;
  passes::ProductChoice& ch = p.choice;
  p.m = os[rank - 2], p.nn = os[rank - 1];
  p.batch_shape = Shape(os.begin(), os.end() - 2);
  p.batch = numel(p.batch_shape);
  p.k = g.node(n.inputs[0]).shape.back();
  // bf16 or f16 operands (both, ir/graph.cc) give an f32 result: cuBLASLt reads them as
  // CUDA_R_16BF or CUDA_R_16F and accumulates in f32, as gemv_kernel does for bf16; the
  // generated small kernels read f32 only. (f16 products never take gemv_kernel, which reads
  // f32 and bf16 only.)
  p.operands = g.node(n.inputs[0]).dtype;
  const bool bf16 = p.operands == DType::kBF16, half = is_half(p.operands);
  const int64_t elem = dtype_size(p.operands);
  if (p.k == 1) {  // an outer product: one elementwise kernel
    p.outer = true;
    return p;
  }
  // The operands as [batch, rows, cols]: as they lie when one batch stride reads them, else a
  // dense copy broadcast-expanded over the output's batch.
  for (size_t i = 0; i < 2; ++i) {
    const Shape& xs = g.node(n.inputs[i]).shape;
    if (auto mo = batch_matrix(xs, in[i].strides, p.batch_shape)) {
      p.mats[i] = *mo;
      continue;
    }
    p.expand[i] = true;
    const int64_t rows = xs[xs.size() - 2], cols = xs.back();
    p.mats[i] = MatOperand{rows, cols, cols, 1, rows * cols};
    ch.scratch.push_back(p.batch * rows * cols * elem);
  }
  // The batch folds into the rows when the right operand is shared by the whole batch and the
  // left one's rows follow each other from batch to batch.
  MatOperand* mats = p.mats;
  p.bm = p.batch, p.mm = p.m;
  if (p.batch > 1 && mats[1].batch_stride == 0 && mats[0].col_stride == 1 &&
      mats[0].batch_stride == p.m * mats[0].row_stride) {
    p.mm = p.batch * p.m;
    p.bm = 1;
    mats[0].rows = p.mm;
  }
  if (p.bm == 1) mats[0].batch_stride = mats[1].batch_stride = 0;
  const bool f32 = n.dtype == DType::kF32;
  ch.bias = c.bias_add >= 0 && p.bm == 1 && f32;  // x·W + b: the bias rides in the epilogue
  p.ld = p.bm == 1 && f32 ? padded_row(p.nn) : p.nn;
  // A skinny product (a decode step's handful of rows against a weight) streams the weight once
  // through gemv_kernel, which may also normalise the rows it reads and apply a GELU.
  static const bool gemv_off = env::equals(env::Switch::kCudaGemv, "off");
  int64_t norm_rows = -1, norm_cols = -1;
  if (c.norm >= 0) {
    norm_cols = g.node(c.norm).shape.back();
    norm_rows = g.node(c.norm).numel() / std::max<int64_t>(norm_cols, 1);
  }
  p.gemv = !gemv_off && f32 && p.operands != DType::kF16 && !options.tf32x3 && p.mm <= gemv_max_rows(bf16) &&
           gemv_applies(p.bm, p.mm, p.nn, p.k, mats[0], mats[1]) &&
           (c.norm < 0 || (norm_rows == p.mm && norm_cols == p.k && !p.expand[0]));
  // bf16 operands: gemv_kernel widens them as it reads; an absorbed cast leaves a in f32.
  ch.cast = c.cast >= 0 && p.gemv && !p.expand[0];
  int32_t w = n.inputs[1];  // the weight behind its views: a parameter or a hoisted copy?
  while (passes::is_view_op(g.node(w).op)) w = g.node(w).inputs[0];
  const ir::Node& wn = g.node(w);
  p.types = {.a_bf16 = bf16 && !ch.cast,
             .b_bf16 = bf16,
             .round_a = ch.cast,
             .b_fixed = wn.op == ir::Op::kParam ||
                        (wn.op == ir::Op::kState && wn.name.starts_with(passes::kHoistedPrefix))};
  ch.norm = c.norm >= 0 && p.gemv && (c.cast < 0 || ch.cast);
  ch.gelu = c.gelu >= 0 && p.gemv && (c.bias_add < 0 || ch.bias);
  // (·) + r, a residual connection: r rides in as cuBLASLt's C (beta = 1), when r lies dense in
  // the output's layout.
  ch.residual = c.residual_add >= 0 && !ch.gelu && (c.bias_add < 0 || ch.bias) && p.bm == 1 && f32 &&
                p.ld == p.nn && padded_row(p.mm) == p.mm &&
                (ch.bias || half || !small_matmul_preferred(p.bm, p.mm, p.nn, p.k));
  if (p.ld != p.nn) {
    ch.out_strides = row_padded_strides(os, p.ld);
    ch.out_bytes = aligned(p.mm * p.ld * 4);
  }
  if (p.gemv) return p;
  // Products of a few MFLOP run faster as one generated kernel than through cuBLASLt.
  p.small = !half && !ch.bias && !ch.residual && small_matmul_preferred(p.bm, p.mm, p.nn, p.k);
  if (p.small) return p;
  // TF32, bf16 and f16 products with an extent of 1024 or more that is not a multiple of 64
  // (GPT-2's vocabulary of 50257) run several times slower on cuBLASLt than the same product
  // padded to the next multiple, which gets its aligned kernels. Pad m, n and k then: extra
  // rows and columns of the result are never read (the output buffer has room for them), and
  // a padded reduction axis reads zeros on both sides.
  p.pm = p.mm, p.pn = p.nn, p.pk = p.k;
  p.unpadded[0] = mats[0], p.unpadded[1] = mats[1];
  if (((options.tf32 && f32) || half) && p.bm == 1 &&
      (padded_row(p.mm) != p.mm || padded_row(p.nn) != p.nn || padded_row(p.k) != p.k)) {
    MatOperand pa = mats[0], pb = mats[1];
    const int64_t tm = padded_row(p.mm), tn = p.ld, tk = padded_row(p.k);
    bool copy_a = false, copy_b = false;
    // An expanded operand is a scratch copy already: not padded in place.
    const passes::Buffer none{};
    const passes::Buffer& ba = p.expand[0] ? none : buffers[static_cast<size_t>(in[0].buffer)];
    const passes::Buffer& bb = p.expand[1] ? none : buffers[static_cast<size_t>(in[1].buffer)];
    const passes::Place origin{};
    // A product with an output edge of 64 or less (a decode step's few rows against a weight)
    // reads its big operand once: a padded copy of it would triple that traffic every call.
    const bool skinny = std::min(p.mm, p.nn) <= 64;
    if (pad_operand(pa, p.expand[0] ? origin : in[0], ba, tm, tk, tk != p.k, elem, copy_a) &&
        pad_operand(pb, p.expand[1] ? origin : in[1], bb, tk, tn, tk != p.k, elem, copy_b) &&
        !(skinny && (copy_a || copy_b))) {
      mats[0] = pa, mats[1] = pb;
      p.pad_copy[0] = copy_a, p.pad_copy[1] = copy_b;
      if (copy_a) ch.scratch.push_back(tm * tk * elem);
      if (copy_b) ch.scratch.push_back(tk * tn * elem);
      p.pm = tm, p.pn = tn, p.pk = tk;
      ch.out_strides = row_padded_strides(os, p.ld);
      ch.out_bytes = aligned(p.pm * p.ld * 4);
    }
  }
  p.split = split_product_wanted(p.bm, p.mm, p.nn, p.k, p.operands, info, options);
  if (p.split) {
    const int64_t sm = padded_row(p.mm), sk = padded_row(p.k);
    ch.scratch.push_back(2 * sm * sk * 4);
    ch.scratch.push_back(2 * sk * p.ld * 4);
    ch.out_strides = row_padded_strides(os, p.ld);
    ch.out_bytes = std::max(ch.out_bytes, aligned(sm * p.ld * 4));
  }
  return p;
}

}  // namespace tg::backend::cuda
