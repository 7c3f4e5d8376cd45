// The kernels of a product step (see emit.h): the plan is products.cc's, the same the schedule
// asked for; here it becomes operand copies into the step's scratch, then gemv_kernel,
// small_matmul_kernel, a product kernel for k = 1, quant_matmul_kernel, or cuBLASLt (padded for
// TF32, or split into three TF32 products).
#include "backend/cuda/codegen.h"
#include "backend/cuda/emit.h"
#include "backend/cuda/small_matmul.h"

namespace tg::backend::cuda {

namespace {

/// Strides of an operand (`shape`, `strides`) over the output's `rank` axes, right-aligned: an
/// axis it lacks, or one of extent 1, reads with stride 0.
std::vector<int64_t> strides_over_output(const Shape& shape, const std::vector<int64_t>& strides,
                                         size_t rank) {
  std::vector<int64_t> st(rank, 0);
  for (size_t d = 0; d < shape.size(); ++d) st[rank - shape.size() + d] = shape[d] == 1 ? 0 : strides[d];
  return st;
}

}  // namespace

void Emitter::emit_product(const passes::Step& st) {
  const int32_t id = st.node;
  const ir::Node& n = g_.node(id);
  passes::ProductCandidates c;
  c.bias_add = st.fused.bias_add, c.gelu = st.fused.gelu, c.residual_add = st.fused.residual_add;
  c.norm_step = st.fused.norm_step;
  c.norm = c.norm_step >= 0 ? s_.steps[static_cast<size_t>(c.norm_step)].node : -1;
  c.cast_step = st.fused.cast_step;
  c.cast = c.cast_step >= 0 ? s_.steps[static_cast<size_t>(c.cast_step)].nodes.at(0) : -1;
  const ProductPlan p = plan_product(g_, id, {st.in[0], st.in[1]}, s_.buffers, c, info_, options_);
  const Place out = place(st.out[0]);
  const size_t rank = n.shape.size();
  if (p.quant && !p.gemv) {  // quant_matmul's own kernel, nothing fused
    const Place x = place(st.in[0]), q = place(st.in[1]), scale = place(st.in[2]);
    const bool four = n.inputs.size() == 4;
    add_kernel({id},
               quant_matmul_kernel(kName, p.operands, p.mm, p.nn, p.k, g_.node(n.inputs[2]).shape[1], four,
                                   aligned16(q), aligned16(x)),
               {{x}, {q}, {scale}, {four ? place(st.in[3]) : scale}, {out}}, 2 * p.mm * p.nn * p.k);
    return;
  }
  if (p.outer) {  // out[.., i, j] = a[.., i, 0] · b[.., 0, j]
    std::vector<int64_t> as = strides_over_output(g_.node(n.inputs[0]).shape, st.in[0].strides, rank),
                         bs = strides_over_output(g_.node(n.inputs[1]).shape, st.in[1].strides, rank);
    as[rank - 1] = 0;
    bs[rank - 2] = 0;
    add_kernel({id}, product_kernel(kName, n.shape, as, bs, p.operands),
               {{place(st.in[0])}, {place(st.in[1])}, {out}}, p.batch * p.m * p.nn);
    return;
  }
  // Operands that one batch stride cannot read: dense copies broadcast-expanded over the batch.
  Place places[2] = {place(st.in[0]), place(st.in[1])};
  size_t scratch = 0;
  for (size_t i = 0; i < 2; ++i) {
    if (!p.expand[i]) continue;
    const Shape& xs = g_.node(n.inputs[i]).shape;
    Shape full = p.batch_shape;
    full.push_back(xs[xs.size() - 2]);
    full.push_back(xs.back());
    const Place copy = place(st.scratch.at(scratch++));
    add_kernel({},
               copy_kernel(kName, Operand{p.operands, full, strides_over_output(xs, st.in[i].strides, rank)}),
               {{places[i]}, {copy}});
    places[i] = copy;
  }
  if (p.gemv) {
    emit_gemv(st, p, c.cast, places[0], places[1]);
    return;
  }
  // The epilogue operands, in the step's order (schedule.h).
  size_t next = 2;
  const Place bias = st.fused.bias_add >= 0 ? place(st.in[next++]) : Place{};
  const Place residual = st.fused.residual_add >= 0 ? place(st.in[next++]) : Place{};
  const int64_t flops = 2 * p.batch * p.m * p.nn * p.k;
  if (p.small) {  // products of a few MFLOP: one generated kernel
    add_kernel(
        {id},
        small_matmul_kernel(kName, p.bm, p.mm, p.nn, p.k, p.mats[0], p.mats[1], options_.tf32, p.ld, info_),
        {{places[0]}, {places[1]}, {out}}, flops);
    return;
  }
  MatOperand mats[2] = {p.mats[0], p.mats[1]};
  for (size_t i = 0; i < 2; ++i) {  // TF32 padding through zero-padded copies
    if (!p.pad_copy[i]) continue;
    const MatOperand& mo = p.unpadded[i];
    const Place copy = place(st.scratch.at(scratch++));
    add_kernel({},
               pad_copy_kernel(kName, mo.rows, mo.cols, mo.row_stride, mo.col_stride, mats[i].rows,
                               mats[i].cols, mo.col_stride != 1, p.operands),
               {{places[i]}, {copy}});
    places[i] = copy;
  }
  Step ls;
  ls.kind = Step::Kind::kMatmul;
  ls.nodes = st.nodes;
  ls.flops = flops;
  if (p.split) {
    // Both operands split (and zero-padded like TF32 products: padded_row) by one kernel each
    // into [lo_a | hi_a] (along k) and [hi_b ; lo_b]; one TF32 product of twice the depth gives
    // lo_a·hi_b + hi_a·lo_b and a second adds hi_a·hi_b (and the bias) to it.
    const int64_t pm = padded_row(p.mm), pk = padded_row(p.k), pn = p.ld;
    MatOperand both[2], hi[2];
    for (int i = 0; i < 2; ++i) {
      const MatOperand& mo = mats[i];
      const bool col_major = mo.col_stride != 1 && mo.row_stride == 1;
      const int64_t rows_p = i == 0 ? pm : pk, cols_p = i == 0 ? pk : pn;
      const Place split = place(st.scratch.at(scratch++));
      add_kernel({},
                 split_copy_kernel(kName, mo.rows, mo.cols, mo.row_stride, mo.col_stride, rows_p, cols_p,
                                   col_major, i == 0 ? 1 : 0, i == 0),
                 {{places[i]}, {split}});
      places[i] = split;
      if (i == 0) {  // [rows_p, 2 cols_p]: lo then hi along the columns
        both[0] = col_major ? MatOperand{pm, 2 * pk, 1, pm, 0} : MatOperand{pm, 2 * pk, 2 * pk, 1, 0};
        hi[0] = col_major ? MatOperand{pm, pk, 1, pm, 0} : MatOperand{pm, pk, 2 * pk, 1, 0};
        ls.hi_offset[0] = (col_major ? pk * pm : pk) * 4;
      } else {  // [2 rows_p, cols_p]: hi then lo along the rows
        both[1] = col_major ? MatOperand{2 * pk, pn, 1, 2 * pk, 0} : MatOperand{2 * pk, pn, pn, 1, 0};
        hi[1] = col_major ? MatOperand{pk, pn, 1, 2 * pk, 0} : MatOperand{pk, pn, pn, 1, 0};
        ls.hi_offset[1] = 0;
      }
    }
    ls.matmul = std::make_shared<LtMatmul>(1, pm, pn, 2 * pk, both[0], both[1], MathMode::kTf32,
                                           kWorkspaceBytes, false, p.ld);
    ls.matmul_hi = std::make_shared<LtMatmul>(1, pm, pn, pk, hi[0], hi[1], MathMode::kTf32, kWorkspaceBytes,
                                              st.fused.bias_add >= 0, p.ld);
  } else {
    ls.matmul = std::make_shared<LtMatmul>(p.bm, p.pm, p.pn, p.pk, mats[0], mats[1],
                                           options_.tf32 ? MathMode::kTf32 : MathMode::kFp32, kWorkspaceBytes,
                                           st.fused.bias_add >= 0, p.ld, p.operands);
  }
  ls.args = {{places[0]}, {places[1]}, {out}};
  if (st.fused.bias_add >= 0) {
    ls.bias_arg = static_cast<int>(ls.args.size());
    ls.args.push_back({bias});
  }
  if (st.fused.residual_add >= 0) {
    ls.residual_arg = static_cast<int>(ls.args.size());
    ls.args.push_back({residual});
  }
  prog_.steps.push_back(std::move(ls));
  step_launch_.push_back(launch_);
}

void Emitter::emit_gemv(const passes::Step& st, const ProductPlan& p, int32_t cast, const Place& a_place,
                        const Place& b_place) {
  const Place out = place(st.out[0]);
  // The epilogue operands and the absorbed norm's, in the step's order (schedule.h).
  size_t next = p.quant ? (p.types.b_i4 ? 4 : 3) : 2;
  const Place bias = st.fused.bias_add >= 0 ? place(st.in[next++]) : Place{};
  const Place residual = st.fused.residual_add >= 0 ? place(st.in[next++]) : Place{};
  std::vector<Arg> args{{a_place}};
  MatOperand a = p.mats[0];
  GemvNorm norm;
  std::vector<int32_t> nodes;
  if (cast >= 0) nodes.push_back(cast);
  if (st.fused.norm_step >= 0) {  // the product reads the norm's input and normalises it
    const passes::Step& ns = s_.steps[static_cast<size_t>(st.fused.norm_step)];
    const ir::Node& f = g_.node(ns.node);
    const bool with_b = ns.fused.add >= 0;
    const Place x = place(st.in[next]), w = place(st.in[next + 1]), b = with_b ? place(st.in[next + 2]) : w;
    args = {{x}, {w}, {b}};
    a = MatOperand{p.mm, p.k, p.k, 1, 0};
    norm = {
        .on = true, .layer = f.op == ir::Op::kLayerNorm, .w = true, .b = with_b, .eps = f.attrs.values.at(0)};
    nodes = ns.nodes;
  }
  args.push_back({b_place});
  if (p.quant) args.push_back({place(st.in[2])});       // the int8 weight's scales
  if (p.types.b_i4) args.push_back({place(st.in[3])});  // and a 4-bit one's offsets
  if (st.fused.bias_add >= 0) args.push_back({bias});
  if (st.fused.residual_add >= 0) args.push_back({residual});
  args.push_back({out});
  nodes.insert(nodes.end(), st.nodes.begin(), st.nodes.end());
  add_kernel(nodes,
             gemv_kernel(kName, p.mm, p.nn, p.k, a, p.mats[1],
                         {.bias = st.fused.bias_add >= 0,
                          .residual = st.fused.residual_add >= 0,
                          .gelu = st.fused.gelu >= 0},
                         p.ld, info_.sm_count, norm, 0, p.types),
             std::move(args), 2 * p.mm * p.nn * p.k);
}

}  // namespace tg::backend::cuda
