// Placement of matrix products for the CUDA executable (see executable.h): cuBLASLt with bias
// and residual epilogues, padded TF32 products, 3xTF32 split products, and the generated
// kernels for small and skinny ones (TG_CUDA_GEMV=off keeps skinny products on cuBLASLt, to
// compare).
#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>

#include "backend/cuda/codegen.h"
#include "backend/cuda/lowering.h"
#include "backend/cuda/plan_util.h"
#include "backend/cuda/small_matmul.h"
#include "ir/strides.h"
#include "util/switches.h"

namespace tg::backend::cuda {

using ir::Op;
using namespace plan_util;

/// `node` (an add riding in the product's epilogue) is computed by product `id`'s step: it
/// leaves its elementwise group, whose other nodes then read its value as an input.
void Lowering::computed_by_product(int32_t node, int32_t id) {
  int32_t& gi = fusion_.group_of[static_cast<size_t>(node)];
  if (passes::KernelGroup& grp = fusion_.groups[static_cast<size_t>(gi)]; grp.nodes.size() > 1) {
    std::erase(grp.nodes, node);
    std::erase(grp.outputs, node);
  }
  gi = fusion_.group_of[static_cast<size_t>(id)];
}

namespace {

/// Strides of an operand (`shape`, `strides`) over the output's `rank` axes, right-aligned: an
/// axis it lacks, or one of extent 1, reads with stride 0.
std::vector<int64_t> strides_over_output(const Shape& shape, const std::vector<int64_t>& strides, size_t rank) {
  std::vector<int64_t> st(rank, 0);
  for (size_t d = 0; d < shape.size(); ++d) {
    const size_t od = rank - shape.size() + d;
    st[od] = shape[d] == 1 ? 0 : strides[d];
  }
  return st;
}

/// The operand (`shape`, `strides`) as [batch, rows, cols] with one stride for the flattened
/// `batch_shape`, or nothing when its batch axes do not nest or cuBLASLt cannot read it.
std::optional<MatOperand> batch_matrix(const Shape& shape, const std::vector<int64_t>& strides, const Shape& batch_shape) {
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
    if (stride < 0) stride = bst[d];
    else if (bst[d] != stride * span) return std::nullopt;
    span *= batch_shape[d];
  }
  mo.batch_stride = all_zero ? 0 : std::max<int64_t>(stride, 0);
  if (!all_zero && stride == 0) return std::nullopt;
  if (!lt_readable(mo)) return std::nullopt;
  return mo;
}

}  // namespace

/// One product [batch..., m, k] @ [batch..., k, nn] as plan_matmul places it, filled in step
/// by step: its operands, the epilogue nodes its step computes, and its output.
struct Lowering::ProductPlan {
  int32_t id = -1;
  const ir::Node* n = nullptr;
  Shape batch_shape;  // the output's batch axes
  int64_t batch = 1, m = 0, nn = 0, k = 0;
  const DeferredNorm* dn = nullptr;  // a norm this product still has to apply; null once planned
  Place places[2];                   // the operands' places (dense copies where needed)
  MatOperand mats[2];                // the operands as [batch, rows, cols]
  int64_t bm = 1, mm = 0;            // batch and rows of the product run (a shared weight folds
                                     // the batch into the rows: bm = 1, mm = batch · m)
  int64_t ld = 0;                    // the output's row stride (padded_row for f32 unbatched)
  bool gemv = false;                 // through gemv_kernel
  // Nodes computed by the product's step (-1: none): x·W + b, gelu(·), (·) + r.
  int32_t add = -1, gelu = -1, res_add = -1;
  Place bias, residual;  // what the add and the residual add read besides the product
  Place out;             // the output: the value of the last of id, add, res_add, gelu
};

/// [..., m, k] @ [..., k, n] through cuBLASLt. Batch axes broadcast; each operand needs one
/// uniform batch stride (else it is made dense first, broadcast expanded). Weights shared by
/// the whole batch (batch stride 0) against a row-major left operand fold the batch into m.
/// Steps: the operands, the epilogue nodes that ride along (a bias, a GELU for gemv, a
/// residual), the output's place, then one of gemv_kernel, small_matmul_kernel or cuBLASLt.
void Lowering::plan_matmul(int32_t id) {
  ProductPlan p;
  p.id = id;
  p.n = &g_.node(id);
  const ir::Node& n = *p.n;
  const Shape& os = n.shape;
  const size_t rank = os.size();
  p.m = os[rank - 2], p.nn = os[rank - 1];
  p.batch_shape = Shape(os.begin(), os.end() - 2);
  p.batch = numel(p.batch_shape);
  p.k = g_.node(n.inputs[0]).shape.back();
  // A norm left for this product to apply (plan_norm_forward placed its value): it runs inside
  // gemv_kernel, or as its own kernel before any step of the product.
  if (auto it = deferred_norms_.find(n.inputs[0]); it != deferred_norms_.end()) p.dn = &it->second;
  if (p.dn != nullptr && (p.k == 1 || n.inputs[1] == n.inputs[0])) {
    plan_deferred_norm(*p.dn);
    p.dn = nullptr;
  }
  if (p.k == 1) {
    plan_outer_product(p);
    return;
  }
  plan_product_operands(p);
  match_bias_epilogue(p);
  p.ld = p.bm == 1 && n.dtype == DType::kF32 ? padded_row(p.nn) : p.nn;
  // A skinny product (a decode step's handful of rows against a weight) streams the weight
  // once through gemv_kernel, which also applies a GELU that alone consumes the product.
  static const bool gemv_off = env::equals(env::Switch::kCudaGemv, "off");
  p.gemv = !gemv_off && n.dtype == DType::kF32 && !options_.tf32x3 &&
           gemv_applies(p.bm, p.mm, p.nn, p.k, p.mats[0], p.mats[1]) &&
           (p.dn == nullptr || (p.dn->rows == p.mm && p.dn->cols == p.k &&
                                p.places[0].buf == slots_[static_cast<size_t>(n.inputs[0])].place.buf));
  if (p.dn != nullptr && !p.gemv) {
    plan_deferred_norm(*p.dn);
    p.dn = nullptr;
  }
  match_gelu_epilogue(p);
  match_residual_epilogue(p);
  place_product_output(p);
  if (p.gemv) {
    plan_gemv_product(p);
    return;
  }
  // Products of a few MFLOP run faster as one generated kernel than through cuBLASLt.
  if (p.add < 0 && p.res_add < 0 && small_matmul_preferred(p.bm, p.mm, p.nn, p.k)) {
    add_kernel({id},
               small_matmul_kernel(kKernelName, p.bm, p.mm, p.nn, p.k, p.mats[0], p.mats[1], options_.tf32, p.ld, info_),
               {{p.places[0]}, {p.places[1]}, {p.out}}, 2 * p.batch * p.m * p.nn * p.k);
    return;
  }
  plan_lt_product(p);
}

/// k = 1, an outer product: one elementwise kernel, no BLAS call. out[.., i, j] = a[.., i, 0] ·
/// b[.., 0, j], each operand read through its strides over the output (0 along the axis it lacks).
void Lowering::plan_outer_product(const ProductPlan& p) {
  const ir::Node& n = *p.n;
  const Shape& os = n.shape;
  const size_t rank = os.size();
  const Slot& a = slots_[static_cast<size_t>(n.inputs[0])];
  const Slot& b = slots_[static_cast<size_t>(n.inputs[1])];
  std::vector<int64_t> as = strides_over_output(a.shape, a.place.strides, rank),
                       bs = strides_over_output(b.shape, b.place.strides, rank);
  as[rank - 1] = 0;  // a [.., m, 1] along n
  bs[rank - 2] = 0;  // b [.., 1, n] along m
  add_kernel({p.id}, product_kernel(kKernelName, os, as, bs), {{a.place}, {b.place}, {own_node(p.id)}}, p.batch * p.m * p.nn);
}

/// The operands as [batch, rows, cols] matrices (p.places, p.mats): as they lie when one batch
/// stride reads them, else a dense copy broadcast-expanded over the output's batch. Then the
/// batch folds into the rows (p.bm, p.mm) when the right operand is shared by the whole batch
/// and the left one's rows follow each other from batch to batch.
void Lowering::plan_product_operands(ProductPlan& p) {
  const ir::Node& n = *p.n;
  const Shape& batch_shape = p.batch_shape;
  Place* places = p.places;
  MatOperand* mats = p.mats;
  for (size_t i = 0; i < 2; ++i) {
    const Slot& x = slots_[static_cast<size_t>(n.inputs[i])];
    places[i] = x.place;
    if (auto mo = batch_matrix(x.shape, x.place.strides, batch_shape)) {
      mats[i] = *mo;
      continue;
    }
    if (i == 0 && p.dn != nullptr) {  // the copy below reads the norm's value: compute it first
      plan_deferred_norm(*p.dn);
      p.dn = nullptr;
    }
    // Materialise broadcast-expanded over the output's batch: [batch..., rows, cols] dense.
    Shape full = batch_shape;
    full.push_back(x.shape[x.shape.size() - 2]);
    full.push_back(x.shape.back());
    Slot expanded = x;
    expanded.shape = full;
    expanded.place.strides = strides_over_output(x.shape, x.place.strides, n.shape.size());
    places[i] = dense_copy(expanded);
    const int64_t rows = full[full.size() - 2], cols = full.back();
    mats[i] = MatOperand{rows, cols, cols, 1, rows * cols};
  }
  p.bm = p.batch, p.mm = p.m;
  if (p.batch > 1 && mats[1].batch_stride == 0 && mats[0].col_stride == 1 && mats[0].batch_stride == p.m * mats[0].row_stride) {
    p.mm = p.batch * p.m;
    p.bm = 1;
    mats[0].rows = p.mm;
  }
  if (p.bm == 1) mats[0].batch_stride = mats[1].batch_stride = 0;
}

/// x·W + b: the bias rides in cuBLASLt's epilogue and the add's value is the product's
/// output. An add fused with more elementwise work (a GELU after it) leaves that group, which
/// then reads the add's value instead of the product's. Sets p.add and p.bias when it applies.
void Lowering::match_bias_epilogue(ProductPlan& p) {
  const int32_t id = p.id;
  const Shape& os = p.n->shape;
  const size_t rank = os.size();
  if (p.bm == 1 && p.n->dtype == DType::kF32 && !escapes(id) && consumers_[static_cast<size_t>(id)].size() == 1) {
    const int32_t c = consumers_[static_cast<size_t>(id)][0];
    const ir::Node& a = g_.node(c);
    const passes::KernelGroup& cg = fusion_.groups[static_cast<size_t>(fusion_.group_of[static_cast<size_t>(c)])];
    if (a.op == Op::kAdd && a.shape == os && (cg.nodes.size() == 1 || cg.kind == passes::KernelGroup::Kind::kElementwise) &&
        a.inputs[0] != a.inputs[1]) {
      const int32_t other = a.inputs[0] == id ? a.inputs[1] : a.inputs[0];
      // The bias is usually broadcast after the product is traced: place that view now.
      std::vector<int32_t> chain;
      for (int32_t x = other; !slots_[static_cast<size_t>(x)].placed; x = g_.node(x).inputs[0]) {
        const Op op = g_.node(x).op;
        if (op != Op::kBroadcastTo && op != Op::kReshape) break;
        chain.push_back(x);
      }
      if (!chain.empty() && slots_[static_cast<size_t>(g_.node(chain.back()).inputs[0])].placed)
        for (auto it = chain.rbegin(); it != chain.rend(); ++it) plan_single(*it);
      const Slot& o = slots_[static_cast<size_t>(other)];
      bool vector = o.placed && o.place.strides.back() == 1;
      for (size_t d = 0; d + 1 < rank && vector; ++d) vector = o.place.strides[d] == 0 || o.shape[d] == 1;
      if (vector) {
        p.add = c;
        p.bias = o.place;
        computed_by_product(c, id);
      }
    }
  }
}

/// gelu(x·W [+ b]) for a gemv product: the GELU that alone consumes the product (or its bias
/// add) is applied by gemv_kernel. Sets p.gelu when it applies.
void Lowering::match_gelu_epilogue(ProductPlan& p) {
  const int32_t id = p.id, add = p.add;
  if (const int32_t y = add >= 0 ? add : id; p.gemv && !escapes(y) && consumers_[static_cast<size_t>(y)].size() == 1) {
    const int32_t c = consumers_[static_cast<size_t>(y)][0];
    const passes::KernelGroup& grp = fusion_.groups[static_cast<size_t>(fusion_.group_of[static_cast<size_t>(c)])];
    if (g_.node(c).op == Op::kGeluTanh && g_.node(c).shape == p.n->shape &&
        (grp.nodes.size() == 1 || grp.kind == passes::KernelGroup::Kind::kElementwise)) {
      p.gelu = c;
      computed_by_product(c, id);
    }
  }
}

/// (x·W [+ b]) + r, a residual connection: r rides in as cuBLASLt's C (beta = 1) and the
/// add's value is the product's output, when r lies dense in the output's layout. Sets
/// p.res_add and p.residual when it applies.
void Lowering::match_residual_epilogue(ProductPlan& p) {
  const int32_t id = p.id, add = p.add;
  const Shape& os = p.n->shape;
  const int64_t mm = p.mm, nn = p.nn;
  if (const int32_t y = add >= 0 ? add : id;
      p.gelu < 0 && p.bm == 1 && p.n->dtype == DType::kF32 && p.ld == nn && padded_row(mm) == mm &&
      (add >= 0 || !small_matmul_preferred(p.bm, mm, nn, p.k)) && !escapes(y) && consumers_[static_cast<size_t>(y)].size() == 1) {
    const int32_t r = consumers_[static_cast<size_t>(y)][0];
    const ir::Node& ra = g_.node(r);
    const int32_t gi = fusion_.group_of[static_cast<size_t>(r)];
    const passes::KernelGroup& grp = fusion_.groups[static_cast<size_t>(gi)];
    const int32_t z = ra.inputs[0] == y ? ra.inputs[1] : ra.inputs[0];
    const Slot& zs = slots_[static_cast<size_t>(z)];
    if (ra.op == Op::kAdd && ra.shape == os && ra.inputs[0] != ra.inputs[1] && (grp.nodes.size() == 1 || grp.kind == passes::KernelGroup::Kind::kElementwise) &&
        zs.placed && zs.dtype == DType::kF32 && zs.shape == os && is_contiguous_strides(zs.place.strides, os)) {
      p.res_add = r;
      p.residual = zs.place;
      computed_by_product(r, id);
    }
  }
}

/// The output (p.out) is owned by the last node the step computes (the holder); the product
/// and its other epilogue nodes share that place. Rows ld > nn apart widen the buffer.
void Lowering::place_product_output(ProductPlan& p) {
  const int32_t id = p.id, add = p.add, res_add = p.res_add, gelu = p.gelu;
  const int32_t holder = gelu >= 0 ? gelu : res_add >= 0 ? res_add : add >= 0 ? add : id;
  Place out = own_node(holder);
  if (p.ld != p.nn) {
    prog_.bufs[static_cast<size_t>(out.buf)].bytes = aligned(p.mm * p.ld * 4);
    out.strides = row_padded_strides(p.n->shape, p.ld);
    slots_[static_cast<size_t>(holder)].place = out;
  }
  for (int32_t x : {id, add, res_add})
    if (x >= 0 && x != holder) {
      slots_[static_cast<size_t>(x)].place = out;
      slots_[static_cast<size_t>(x)].placed = true;
    }
  p.out = out;
}

/// The product as one gemv_kernel: args a (or, with a deferred norm, the norm's input and its
/// affine weights), b, then the bias and residual where present, then out.
void Lowering::plan_gemv_product(const ProductPlan& p) {
  const int64_t mm = p.mm, nn = p.nn, k = p.k;
  const int32_t add = p.add, res_add = p.res_add, gelu = p.gelu;
  const DeferredNorm* dn = p.dn;
  std::vector<Arg> args{{p.places[0]}};
  MatOperand a = p.mats[0];
  GemvNorm norm;
  std::vector<int32_t> nodes;
  if (dn != nullptr) {  // the product reads the norm's input and normalises it
    args = {{dn->x}};
    a = MatOperand{mm, k, k, 1, 0};
    norm = {.on = true, .layer = dn->layer, .w = dn->affine.w, .b = dn->affine.b, .eps = dn->eps};
    if (dn->affine.w || dn->affine.b) args.insert(args.end(), {{dn->w}, {dn->b}});
    nodes = dn->nodes;
  }
  args.push_back({p.places[1]});
  if (add >= 0) args.push_back({p.bias});
  if (res_add >= 0) args.push_back({p.residual});
  args.push_back({p.out});
  nodes.push_back(p.id);
  for (int32_t x : {add, res_add, gelu})
    if (x >= 0) nodes.push_back(x);
  add_kernel(nodes,
             gemv_kernel(kKernelName, mm, nn, k, a, p.mats[1],
                         {.bias = add >= 0, .residual = res_add >= 0, .gelu = gelu >= 0}, p.ld, info_.sm_count,
                         norm),
             std::move(args), 2 * mm * nn * k);
}

/// The product as a cuBLASLt step (Step::Kind::kMatmul; args a, b, out, then the bias and the
/// residual where present): padded for TF32 where that pays, or split into three TF32
/// products (split_product_wanted).
void Lowering::plan_lt_product(ProductPlan& p) {
  const ir::Node& n = *p.n;
  const int64_t bm = p.bm, mm = p.mm, nn = p.nn, k = p.k, ld = p.ld;
  const int32_t add = p.add, res_add = p.res_add;
  MatOperand* mats = p.mats;
  Place* places = p.places;
  const Place& out = p.out;
  // TF32 products with an extent of 1024 or more that is not a multiple of 64 (GPT-2's
  // vocabulary of 50257) run much slower on cuBLASLt than the same product padded to the next
  // multiple, which gets its aligned kernels. Pad m, n and k then: extra rows and columns of
  // the result are never read (the output buffer has room for them), and a padded reduction
  // axis reads zeros on both sides.
  int64_t pm = mm, pn = nn, pk = k;
  if (options_.tf32 && bm == 1 && n.dtype == DType::kF32 && (padded_row(mm) != mm || padded_row(nn) != nn || padded_row(k) != k)) {
    MatOperand pa = mats[0], pb = mats[1];
    Place qa = places[0], qb = places[1];
    const int64_t tm = padded_row(mm), tn = ld, tk = padded_row(k);
    if (pad_operand(pa, qa, tm, tk, tk != k) && pad_operand(pb, qb, tk, tn, tk != k)) {
      mats[0] = pa, mats[1] = pb, places[0] = qa, places[1] = qb;
      pm = tm, pn = tn, pk = tk;
      prog_.bufs[static_cast<size_t>(out.buf)].bytes = aligned(pm * ld * 4);
    }
  }
  Step st;
  st.kind = Step::Kind::kMatmul;
  st.nodes = {p.id};
  if (add >= 0) st.nodes.push_back(add);
  if (res_add >= 0) st.nodes.push_back(res_add);
  st.flops = 2 * p.batch * p.m * nn * k;
  auto operands = [&] {
    st.args = {{places[0]}, {places[1]}, {out}};
    if (add >= 0) {
      st.bias_arg = static_cast<int>(st.args.size());
      st.args.push_back({p.bias});
    }
    if (res_add >= 0) {
      st.residual_arg = static_cast<int>(st.args.size());
      st.args.push_back({p.residual});
    }
  };
  if (split_product_wanted(bm, mm, nn, k, n.dtype)) {
    plan_split_product(mats, places, mm, k, ld, add >= 0, st);
    prog_.bufs[static_cast<size_t>(out.buf)].bytes = std::max(prog_.bufs[static_cast<size_t>(out.buf)].bytes, aligned(padded_row(mm) * ld * 4));
    operands();
    prog_.steps.push_back(std::move(st));
    return;
  }
  operands();
  st.matmul = std::make_shared<LtMatmul>(bm, pm, pn, pk, mats[0], mats[1],
                                         options_.tf32 ? MathMode::kTf32 : MathMode::kFp32, kWorkspaceBytes, add >= 0, ld);
  prog_.steps.push_back(std::move(st));
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
bool Lowering::split_product_wanted(int64_t batch, int64_t m, int64_t n, int64_t k, DType dtype) const {
  constexpr int64_t kMinFlops = int64_t{1} << 30, kMaxSplitBytes = int64_t{1} << 30;
  const int64_t pm = padded_row(m), pn = padded_row(n), pk = padded_row(k);
  return options_.tf32x3 && !options_.tf32 && info_.sm_major >= 8 && batch == 1 && dtype == DType::kF32 &&
         2 * m * n * k >= kMinFlops && 2 * pm * pk * 4 <= kMaxSplitBytes && 2 * pk * pn * 4 <= kMaxSplitBytes;
}

/// Plans `st` as the split product of split_product_wanted: both operands split (and zero-
/// padded like TF32 products: padded_row) by one kernel each into [lo_a | hi_a] (along k) and
/// [hi_b ; lo_b], then one TF32 product of twice the depth gives lo_a·hi_b + hi_a·lo_b and a
/// second adds hi_a·hi_b (and the bias) to it. `places` become the split buffers.
void Lowering::plan_split_product(MatOperand mats[2], Place places[2], int64_t m, int64_t k,
                                        int64_t ld, bool with_bias, Step& st) {
  const int64_t pm = padded_row(m), pk = padded_row(k), pn = ld;
  MatOperand both[2], hi[2];
  for (int i = 0; i < 2; ++i) {
    const MatOperand& mo = mats[i];
    const bool col_major = mo.col_stride != 1 && mo.row_stride == 1;
    const int64_t rows_p = i == 0 ? pm : pk, cols_p = i == 0 ? pk : pn;
    const Place split = own(2 * rows_p * cols_p * 4, {2 * rows_p * cols_p}, Category::kScratch);
    add_kernel({}, split_copy_kernel(kKernelName, mo.rows, mo.cols, mo.row_stride, mo.col_stride, rows_p, cols_p, col_major,
                                     i == 0 ? 1 : 0, i == 0),
               {{places[i]}, {split}});
    places[i] = split;
    if (i == 0) {  // [rows_p, 2 cols_p]: lo then hi along the columns
      both[0] = col_major ? MatOperand{pm, 2 * pk, 1, pm, 0} : MatOperand{pm, 2 * pk, 2 * pk, 1, 0};
      hi[0] = col_major ? MatOperand{pm, pk, 1, pm, 0} : MatOperand{pm, pk, 2 * pk, 1, 0};
      st.hi_offset[0] = (col_major ? pk * pm : pk) * 4;
    } else {  // [2 rows_p, cols_p]: hi then lo along the rows
      both[1] = col_major ? MatOperand{2 * pk, pn, 1, 2 * pk, 0} : MatOperand{2 * pk, pn, pn, 1, 0};
      hi[1] = col_major ? MatOperand{pk, pn, 1, 2 * pk, 0} : MatOperand{pk, pn, pn, 1, 0};
      st.hi_offset[1] = 0;
    }
  }
  st.matmul = std::make_shared<LtMatmul>(1, pm, pn, 2 * pk, both[0], both[1], MathMode::kTf32, kWorkspaceBytes, false, ld);
  st.matmul_hi = std::make_shared<LtMatmul>(1, pm, pn, pk, hi[0], hi[1], MathMode::kTf32, kWorkspaceBytes, with_bias, ld);
}

/// `mo` (at `place`) readable as [rows_p, cols_p] ≥ its extents: in place when only its unit-
/// stride axis grows within the other stride of a buffer it starts (and, for `zeros`, that
/// padding is known to be zero: zero_padded_), else through a zero-padded copy (operands up
/// to 512 MiB). False when neither works.
bool Lowering::pad_operand(MatOperand& mo, Place& place, int64_t rows_p, int64_t cols_p,
                                 bool zeros) {
  if (rows_p == mo.rows && cols_p == mo.cols) return true;
  const bool row_major = mo.col_stride == 1;
  if (place.buf >= 0 && place.offset == 0) {
    const int64_t bytes = prog_.bufs[static_cast<size_t>(place.buf)].bytes;
    const bool grows_inner = row_major ? rows_p == mo.rows && mo.row_stride >= cols_p && mo.rows * mo.row_stride * 4 <= bytes
                                       : mo.row_stride == 1 && cols_p == mo.cols && mo.col_stride >= rows_p &&
                                             mo.cols * mo.col_stride * 4 <= bytes;
    bool zero_ok = !zeros;
    if (auto it = zero_padded_.find(place.buf); zeros && it != zero_padded_.end())
      zero_ok = row_major ? mo.row_stride == it->second.first && mo.cols == it->second.second
                          : mo.col_stride == it->second.first && mo.rows == it->second.second;
    if (grows_inner && zero_ok) {
      mo.rows = rows_p, mo.cols = cols_p;
      return true;
    }
  }
  if (rows_p * cols_p * 4 > (int64_t{512} << 20)) return false;
  const Place copy = own(rows_p * cols_p * 4, {rows_p * cols_p}, Category::kScratch);
  add_kernel({}, pad_copy_kernel(kKernelName, mo.rows, mo.cols, mo.row_stride, mo.col_stride, rows_p, cols_p, !row_major),
             {{place}, {copy}});
  place = copy;
  mo = row_major ? MatOperand{rows_p, cols_p, cols_p, 1, 0} : MatOperand{rows_p, cols_p, 1, rows_p, 0};
  return true;
}

}  // namespace tg::backend::cuda
