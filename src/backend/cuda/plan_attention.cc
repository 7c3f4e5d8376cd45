// Placement of attention and its gradient for the CUDA executable (see executable.h). Both are
// multi-output nodes whose results this file places itself, choosing each one's layout:
//  - attention: out is written [B, T, Hq, D] when its readers permute it there (the heads go
//    back next to the features before the output projection), so the permute and the merge of
//    heads are free views; `saved` is each row's log-sum-exp (and room for the backward's
//    row deltas) when a gradient reads it and the shape's kernels keep statistics.
//  - attention_grad: dq, dk and dv one after the other, each [B, H, T, D]; or each written
//    [B, T, H, D] (the tiled kernels) for the same reason; or, when the three only meet again,
//    permuted and with their heads merged, in one concat along the features (the packed qkv
//    projection's gradient), written straight into that concat's rows [dq | dk | dv], which
//    then is a view.
#include <algorithm>
#include <vector>

#include "backend/cuda/lowering.h"
#include "backend/cuda/plan_util.h"
#include "ir/strides.h"

namespace tg::backend::cuda {

using ir::Op;
using namespace plan_util;

namespace {

const std::vector<int64_t> kHeadsInner = {0, 2, 1, 3};  // [B, H, T, D] ↔ [B, T, H, D]

/// Strides that lay a [B, H, T, D] value out as [B, T, H, D].
std::vector<int64_t> heads_inner_strides(const Shape& s) { return {s[2] * s[1] * s[3], s[3], s[1] * s[3], 1}; }

}  // namespace

std::vector<int32_t> Lowering::results_of(int32_t id, int64_t index) const {
  std::vector<int32_t> out;
  for (int32_t c : consumers_[static_cast<size_t>(id)])
    if (g_.node(c).op == Op::kResult && g_.node(c).attrs.axes.at(0) == index) out.push_back(c);
  return out;
}

void Lowering::place_result(int32_t id, int64_t index, const Place& base, std::vector<int64_t> strides,
                                  int64_t offset_elements) {
  for (int32_t r : results_of(id, index)) {
    Slot& s = slots_[static_cast<size_t>(r)];
    s.place = base;
    s.place.offset += offset_elements * 4;
    s.place.strides = strides;
    s.placed = true;
  }
}

int32_t Lowering::packed_qkv_concat(int32_t grad) const {
  const ir::Node& ag = g_.node(grad);
  const Shape& qs = ag.results[0].shape;
  const Shape& ks = ag.results[1].shape;
  if (qs[2] != ks[2]) return -1;
  auto sole = [&](int32_t x) {
    const auto& cs = consumers_[static_cast<size_t>(x)];
    return cs.size() == 1 && !escapes(x) ? cs[0] : -1;
  };
  int32_t concat = -1, parts[3] = {-1, -1, -1};
  for (int64_t i = 0; i < 3; ++i) {
    const std::vector<int32_t> rs = results_of(grad, i);
    if (rs.size() != 1) return -1;
    const int32_t p = sole(rs[0]), m = p >= 0 ? sole(p) : -1, c = m >= 0 ? sole(m) : -1;
    if (c < 0 || g_.node(p).op != Op::kPermute || g_.node(p).attrs.axes != kHeadsInner) return -1;
    const Shape& ps = g_.node(p).shape;
    if (g_.node(m).op != Op::kReshape || g_.node(m).shape != Shape{ps[0], ps[1], ps[2] * ps[3]}) return -1;
    if (concat >= 0 && c != concat) return -1;
    concat = c;
    parts[i] = m;
  }
  const ir::Node& cn = g_.node(concat);
  if (cn.op != Op::kConcat || cn.attrs.axes.at(0) != 2 || cn.inputs != std::vector<int32_t>{parts[0], parts[1], parts[2]})
    return -1;
  return concat;
}

int32_t Lowering::packed_qkv_source(int32_t concat) const {
  const ir::Node& cn = g_.node(concat);
  if (cn.inputs.empty()) return -1;
  int32_t x = cn.inputs[0];
  for (Op want : {Op::kReshape, Op::kPermute, Op::kResult}) {
    if (g_.node(x).op != want) return -1;
    x = g_.node(x).inputs[0];
  }
  return g_.node(x).op == Op::kAttentionGrad && packed_qkv_concat(x) == concat ? x : -1;
}

void Lowering::plan_attention(int32_t id) {
  const ir::Node& n = g_.node(id);
  auto in = [&](size_t k) -> Slot& { return slots_[static_cast<size_t>(n.inputs[k])]; };
  Place qkv[3];
  Operand ops[3];
  for (size_t k = 0; k < 3; ++k) {
    ops[k] = operand(n.inputs[k]);
    qkv[k] = in(k).place;
    if (!attention_operand_ok(ops[k])) {
      qkv[k] = dense_copy(in(k));
      ops[k].strides = contiguous_strides(ops[k].shape);
    }
  }
  AttentionShape as;
  as.batch = ops[0].shape[0];
  as.q_heads = ops[0].shape[1];
  as.kv_heads = ops[1].shape[1];
  as.t = ops[0].shape[2];
  as.s = ops[1].shape[2];
  as.d = ops[0].shape[3];
  as.scale = n.attrs.values.at(0);
  as.causal = n.attrs.causal;
  as.tf32 = options_.tf32;
  as.sm_count = info_.sm_count;
  const int64_t flops = 4 * as.batch * as.q_heads * as.t * as.s * as.d / (as.causal ? 2 : 1);
  // The gradient reads the forward's statistics when the forward's kernels keep them: a pure
  // function of the shape, so both sides agree.
  const bool stats = attention_keeps_stats(as);
  const Place base = own_node(id);

  if (n.op == Op::kAttention) {
    const Shape& os = n.results[0].shape;
    // out [B, T, Hq, D] when every reader permutes it there, or is a gradient (any strides).
    bool heads_inner = false, other = false;
    for (int32_t r : results_of(id, 0)) {
      other = other || escapes(r);
      for (int32_t c : consumers_[static_cast<size_t>(r)]) {
        const ir::Node& cn = g_.node(c);
        if (cn.op == Op::kPermute && cn.attrs.axes == kHeadsInner) heads_inner = true;
        else if (cn.op != Op::kAttentionGrad) other = true;
      }
    }
    const std::vector<int64_t> out_strides = heads_inner && !other ? heads_inner_strides(os) : contiguous_strides(os);
    place_result(id, 0, base, out_strides, 0);
    Place out = base;
    out.strides = out_strides;
    std::vector<Arg> args{{qkv[0]}, {qkv[1]}, {qkv[2]}, {out}};
    bool keep = false;
    for (int32_t r : results_of(id, 1)) keep = keep || !consumers_[static_cast<size_t>(r)].empty();
    keep = keep && stats;
    if (keep) {  // [2, B·Hq·T]: the forward's log-sum-exp, then the backward's row deltas
      const int64_t floats = 2 * as.batch * as.q_heads * as.t;
      const Place saved = own(floats * 4, {floats}, Category::kActivation);
      place_result(id, 1, saved, {1}, 0);
      args.push_back({saved});
    }
    add_kernel({id}, attention_kernel(kKernelName, as, ops[0], ops[1], ops[2], Operand{DType::kF32, os, out_strides}, keep),
               std::move(args), flops);
    return;
  }

  Operand dout_op = operand(n.inputs[3]);
  Place dout = in(3).place;
  if (!attention_operand_ok(dout_op)) {
    dout = dense_copy(in(3));
    dout_op.strides = contiguous_strides(dout_op.shape);
  }
  const Operand fwd_out = stats ? operand(n.inputs[4]) : Operand{};
  // The results' layout (see the file comment): packed rows for the qkv concat, else
  // [B, T, H, D] parts where the tiled kernels run and no result leaves the program.
  bool escaping = false;
  for (int64_t i = 0; i < 3; ++i)
    for (int32_t r : results_of(id, i)) escaping = escaping || escapes(r);
  as.grads_packed = !escaping && packed_qkv_concat(id) >= 0;
  as.grads_bthd = stats && !escaping;  // (packed rows take precedence in the kernels)
  const Shape& qs = n.results[0].shape;
  const Shape& ks = n.results[1].shape;
  const int64_t nq = numel(qs), nk = numel(ks);
  if (as.grads_packed) {
    const int64_t hq = qs[1], hk = ks[1], t = qs[2], d = qs[3], row = (hq + 2 * hk) * d;
    const std::vector<int64_t> st = {t * row, d, row, 1};  // [B, H, T, D] inside rows of [dq | dk | dv]
    place_result(id, 0, base, st, 0);
    place_result(id, 1, base, st, hq * d);
    place_result(id, 2, base, st, (hq + hk) * d);
  } else {
    const bool bthd = as.grads_bthd;  // else dense [B, H, T, D] parts
    place_result(id, 0, base, bthd ? heads_inner_strides(qs) : contiguous_strides(qs), 0);
    place_result(id, 1, base, bthd ? heads_inner_strides(ks) : contiguous_strides(ks), nq);
    place_result(id, 2, base, bthd ? heads_inner_strides(ks) : contiguous_strides(ks), nq + nk);
  }
  AttentionGradPlan plan = attention_grad_kernels(kKernelName, as, ops[0], ops[1], ops[2], dout_op, stats ? &fwd_out : nullptr);
  const Place scratch =
      stats ? in(5).place : own(std::max<int64_t>(plan.scratch_floats, 1) * 4, {plan.scratch_floats}, Category::kScratch);
  for (size_t i = 0; i < plan.launches.size(); ++i) {
    std::vector<Arg> args{{qkv[0]}, {qkv[1]}, {qkv[2]}, {dout}, {base}, {scratch}};
    if (i == 0 && plan.delta_from_out) args = {{in(4).place}, {dout}, {scratch}};
    add_kernel({id}, std::move(plan.launches[i]), std::move(args), 0);
  }
  prog_.steps.back().flops = 2 * flops + flops / 2;
}

}  // namespace tg::backend::cuda
