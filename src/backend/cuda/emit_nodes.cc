// The kernels of node steps (see emit.h): one switch over the ops with a kernel of their own,
// and the fused steps the schedule made (norms with their affine or gradient neighbours,
// KV-cache rows, attention, the selective scan).
#include <algorithm>
#include <optional>

#include "backend/cuda/codegen.h"
#include "backend/cuda/emit.h"
#include "ir/strides.h"
#include "ir/window.h"
#include "tensorgrad/errors.h"

namespace tg::backend::cuda {

using ir::Op;

namespace {

const Arg kErr{{}, true};

int64_t product(const Shape& s, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t d = from; d < to && d < s.size(); ++d) p *= s[d];
  return p;
}

/// grouped_matmul (x, w, offsets) or its weight gradient (x, dy, offsets), as the kernel sees it.
GroupedShape grouped_shape(const ir::Graph& g, const ir::Node& n) {
  const Shape& xs = g.node(n.inputs[0]).shape;
  GroupedShape s;
  s.rows = xs[0], s.k = xs[1], s.experts = g.node(n.inputs[2]).shape[0] - 1;
  s.w_nk = n.attrs.axes.at(0) == 2, s.grad_weight = n.op == Op::kGroupedMatmulGradWeight;
  s.n = s.grad_weight ? g.node(n.inputs[1]).shape[1] : n.shape[1];
  s.dtype = g.node(n.inputs[0]).dtype;
  return s;
}

}  // namespace

void Emitter::emit_node(const passes::Step& st) {
  const int32_t id = st.node;
  const ir::Node& n = g_.node(id);
  auto in = [&](size_t k) { return place(st.in[k]); };
  auto op_in = [&](size_t k) { return operand(st.in[k], n.inputs[k]); };
  const Place out = place(st.out[0]);
  // clang-format off
  switch (n.op) {
    case Op::kUnslice:
      add_kernel(
          {id},
          unslice_kernel(kName, op_in(0), n.shape, static_cast<int>(n.attrs.axes[0]),
                         static_cast<int64_t>(n.attrs.values[0]), static_cast<int64_t>(n.attrs.values[1])),
          {{in(0)}, {out}});
      return;
    case Op::kConcat: {
      std::vector<Operand> ops;
      std::vector<Arg> args;
      for (size_t k = 0; k < n.inputs.size(); ++k) {
        ops.push_back(op_in(k));
        args.push_back({in(k)});
      }
      args.push_back({out});
      add_kernel({id}, concat_kernel(kName, ops, n.shape, static_cast<int>(n.attrs.axes[0])),
                 std::move(args));
      return;
    }
    case Op::kSum: case Op::kMax: case Op::kMin: case Op::kArgmax: {
      const std::vector<int> axes(n.attrs.axes.begin(), n.attrs.axes.end());
      const char* op = n.op == Op::kSum   ? "sum"
                       : n.op == Op::kMax ? "max"
                       : n.op == Op::kMin ? "min"
                                          : "argmax";
      add_kernel({id}, reduce_kernel(kName, op, op_in(0), axes, info_), {{in(0)}, {out}});
      return;
    }
    case Op::kRotary:
      add_kernel({id}, rotary_kernel(kName, op_in(0), op_in(1), op_in(2)), {{in(0)}, {in(1)}, {in(2)}, {out}});
      return;
    case Op::kCumsum:
      add_kernel({id}, cumsum_kernel(kName, op_in(0), static_cast<int>(n.attrs.axes[0]), n.attrs.reverse),
                 {{in(0)}, {out}});
      return;
    case Op::kMatmul: case Op::kQuantMatmul: emit_product(st); return;
    case Op::kConv2d: case Op::kConv2dGradInput: case Op::kConv2dGradWeight: {
      ConvPlan plan =
          conv_kernels(kName, n.op, ir::window_geom(g_, n), g_.node(n.inputs[0]).dtype, options_.tf32, info_);
      if (plan.launches.size() == 1) {
        add_kernel({id}, std::move(plan.launches[0]), {{in(0)}, {in(1)}, {out}}, plan.flops);
        return;
      }
      const Place part = place(st.scratch.at(0));  // the weight gradient's split partials
      add_kernel({id}, std::move(plan.launches[0]), {{in(0)}, {in(1)}, {part}}, plan.flops);
      add_kernel({id}, std::move(plan.launches[1]), {{part}, {out}});
      return;
    }
    case Op::kGroupedMatmul: case Op::kGroupedMatmulGradWeight: {
      GroupedShape gs = grouped_shape(g_, n);
      gs.aligned = aligned16(in(0)) && aligned16(in(1)) && aligned16(out);
      add_kernel({id}, grouped_matmul_kernel(kName, gs, info_), {{in(0)}, {in(1)}, {in(2)}, {out}, kErr},
                 2 * gs.rows * gs.n * gs.k);
      return;
    }
    case Op::kMaxPool2d: case Op::kMaxPool2dGrad: case Op::kAvgPool2d: case Op::kAvgPool2dGrad:
      add_kernel({id}, pool_kernel(kName, n.op, ir::window_geom(g_, n), info_),
                 {{in(0)}, {n.inputs.size() > 1 ? in(1) : in(0)}, {out}});
      return;
    case Op::kGather:
      add_kernel({id}, gather_kernel(kName, op_in(0), op_in(1), static_cast<int>(n.attrs.axes[0])),
                 {{in(0)}, {in(1)}, {out}, kErr});
      return;
    case Op::kUpdateSlice: emit_update_slice(st); return;
    case Op::kScatterAdd:
      add_zero(out, n.numel() * dtype_size(n.dtype));
      add_kernel({id},
                 scatter_add_kernel(kName, op_in(0), op_in(1), n.shape, static_cast<int>(n.attrs.axes[0])),
                 {{in(0)}, {in(1)}, {out}, kErr});
      return;
    case Op::kSoftmax: case Op::kLogSoftmax: {
      const auto axis = static_cast<size_t>(n.attrs.axes[0]);
      const int64_t t = n.shape.size() >= 2 ? n.shape[n.shape.size() - 2] : 1;
      add_kernel({id},
                 softmax_kernel(kName, product(n.shape, 0, axis), n.shape[axis],
                                product(n.shape, axis + 1, n.shape.size()), n.op == Op::kLogSoftmax,
                                n.attrs.causal, t),
                 {{in(0)}, {out}});
      return;
    }
    case Op::kCrossEntropy: case Op::kCrossEntropyGrad:
      emit_cross_entropy(st);
      return;
    case Op::kLayerNorm: case Op::kRmsNorm:
      emit_norm(st);
      return;
    case Op::kLayerNormGrad: case Op::kRmsNormGrad: {
      if (st.fused.dy_mul >= 0 || st.fused.dw >= 0 || st.fused.db >= 0) {
        emit_norm_backward(st);
        return;
      }
      const int64_t cols = n.shape.back(), rows = n.numel() / std::max<int64_t>(cols, 1);
      const double eps = n.attrs.values.at(0);
      add_kernel({id},
                 n.op == Op::kLayerNormGrad ? layer_norm_grad_kernel(kName, rows, cols, eps)
                                            : rms_norm_grad_kernel(kName, rows, cols, eps),
                 {{in(0)}, {in(1)}, {out}});
      return;
    }
    case Op::kAttentionAt:
      add_kernel({id},
                 attention_at_kernel(kName, op_in(0), op_in(1), op_in(2), op_in(3), n.attrs.values.at(0)),
                 {{in(0)}, {in(1)}, {in(2)}, {in(3)}, {out}, kErr});
      return;
    case Op::kSample:
      add_kernel({id}, sample_kernel(kName, n.numel(), g_.node(n.inputs[0]).shape.back()),
                 {{in(0)}, {in(1)}, {in(2)}, {out}});
      return;
    case Op::kRandom:
      add_kernel({id}, random_kernel(kName, n.numel(), n.attrs.seed), {{in(0)}, {out}});
      return;
    case Op::kDropout:
      add_kernel({id}, dropout_kernel(kName, op_in(0), n.attrs.values.at(0), n.attrs.seed),
                 {{in(0)}, {in(1)}, {out}});
      return;
    case Op::kAttention: case Op::kAttentionGrad:
      emit_attention(st);
      return;
    case Op::kSelectiveScan: case Op::kSelectiveScanGrad:
      emit_scan(st);
      return;
    case Op::kAllReduce: case Op::kReduceScatter: case Op::kAllGather: case Op::kRankShard:
      emit_collective(st);
      return;
    default:
      throw Error(std::string("[cuda] no kernel for ") + ir::op_name(n.op) + " %" + std::to_string(id));
  }
  // clang-format on
}

void Emitter::emit_collective(const passes::Step& st) {
  const int32_t id = st.node;
  const ir::Node& n = g_.node(id);
  auto in = [&](size_t k) { return place(st.in[k]); };
  const Place out = place(st.out[0]);
  if (options_.communicator == nullptr)
    throw Error(std::string("[cuda] ") + ir::op_name(n.op) + " %" + std::to_string(id) +
                " needs a communicator");
  Step c;
  c.kind = Step::Kind::kCollective;
  c.coll_op = n.op;
  c.nodes = {id};
  if (n.op == Op::kAllReduce) {
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      c.args.push_back({in(k)});
      c.coll_offset.push_back(ir::result_offset(n, k) * dtype_size(n.results[k].dtype));
      c.coll_count.push_back(numel(n.results[k].shape));
      c.coll_dtype.push_back(n.results[k].dtype);
    }
    c.args.push_back({out});
    c.moved = 2 * n.numel() * 4;
  } else {
    c.args = {{in(0)}, {out}};
    c.coll_count = {n.op == Op::kAllGather ? g_.node(n.inputs[0]).numel() : n.numel()};
    c.coll_dtype = {DType::kF32};
    c.moved = (g_.node(n.inputs[0]).numel() + n.numel()) * 4;
  }
  prog_.steps.push_back(std::move(c));
  step_launch_.push_back(launch_);
}

void Emitter::emit_update_slice(const passes::Step& st) {
  const int32_t id = st.node;
  const ir::Node& n = g_.node(id);
  if (!st.fused.rows_in_place) {
    add_kernel({id},
               update_slice_kernel(kName, operand(st.in[0], n.inputs[0]), operand(st.in[1], n.inputs[1]),
                                   operand(st.in[2], n.inputs[2]), static_cast<int>(n.attrs.axes[0])),
               {{place(st.in[0])}, {place(st.in[1])}, {place(st.in[2])}, {place(st.out[0])}, kErr});
    return;
  }
  // Only the new rows, into the state's own buffer (and its sibling's, in the same launch).
  std::vector<Arg> args;
  for (const passes::Place& p : st.in) args.push_back({place(p)});
  args.push_back(kErr);
  std::optional<Operand> src2;
  if (st.fused.sibling >= 0) src2 = operand(st.in[3], g_.node(st.fused.sibling).inputs[1]);
  add_kernel(st.nodes,
             update_rows_kernel(kName, operand(st.in[2], n.inputs[0]), operand(st.in[0], n.inputs[1]),
                                operand(st.in[1], n.inputs[2]), static_cast<int>(n.attrs.axes[0]),
                                src2 ? &*src2 : nullptr),
             std::move(args));
}

void Emitter::emit_cross_entropy(const passes::Step& st) {
  const int32_t id = st.node;
  const ir::Node& n = g_.node(id);
  const Shape& ls = g_.node(n.inputs[0]).shape;
  const int64_t cols = ls.back(), rows = numel(ls) / std::max<int64_t>(cols, 1);
  const auto ignore = static_cast<int64_t>(n.attrs.values.at(0));
  const int64_t ld =
      ls.size() >= 2 ? st.in[0].strides[ls.size() - 2] : cols;  // logits may come with padded rows
  const Place logits = place(st.in[0]), targets = place(st.in[1]), out = place(st.out[0]);
  if (n.op == Op::kCrossEntropy) {
    add_kernel({id}, cross_entropy_kernel(kName, rows, cols, ignore, ld), {{logits}, {targets}, {out}, kErr});
    return;
  }
  const int64_t out_ld = n.shape.size() >= 2 ? st.out[0].strides[n.shape.size() - 2] : cols;
  add_kernel({id}, cross_entropy_grad_kernel(kName, rows, cols, ignore, ld, out_ld),
             {{logits}, {targets}, {place(st.in[2])}, {out}, kErr});
}

void Emitter::emit_norm(const passes::Step& st) {
  const ir::Node& n = g_.node(st.node);
  const int64_t cols = n.shape.back(), rows = n.numel() / std::max<int64_t>(cols, 1);
  const double eps = n.attrs.values.at(0);
  const bool layer = n.op == Op::kLayerNorm;
  if (st.fused.mul < 0) {
    add_kernel({st.node},
               layer ? layer_norm_kernel(kName, rows, cols, eps) : rms_norm_kernel(kName, rows, cols, eps),
               {{place(st.in[0])}, {place(st.out[0])}});
    return;
  }
  // With its affine group {·w[, +b]}: the kernel writes the affine value.
  const NormAffine affine{true, st.fused.add >= 0};
  const Place w = place(st.in[1]), b = st.fused.add >= 0 ? place(st.in[2]) : w;
  add_kernel(st.nodes,
             layer ? layer_norm_kernel(kName, rows, cols, eps, affine)
                   : rms_norm_kernel(kName, rows, cols, eps, affine),
             {{place(st.in[0])}, {w}, {b}, {place(st.out[0])}});
}

void Emitter::emit_norm_backward(const passes::Step& st) {
  const ir::Node& lg = g_.node(st.node);
  const int64_t cols = lg.shape.back(), rows = lg.numel() / cols;
  const bool dw = st.fused.dw >= 0, db = st.fused.db >= 0, has_w = st.in.size() > 2;
  const int64_t blocks = norm_backward_blocks(rows, info_);
  const Place part = place(st.scratch.at(0));
  std::vector<Arg> args{{place(st.in[0])}, {place(st.in[1])}};
  if (has_w) args.push_back({place(st.in[2])});
  args.push_back({place(st.out[0])});
  args.push_back({part});
  std::vector<int32_t> nodes{st.node};
  for (int32_t x : {st.fused.dy_mul, st.fused.recompute, st.fused.dw_mul})
    if (x >= 0) nodes.push_back(x);
  add_kernel(nodes,
             norm_backward_kernel(kName, rows, cols, lg.attrs.values.at(0), lg.op == Op::kLayerNormGrad,
                                  has_w, dw, db, blocks),
             std::move(args));
  if (!dw && !db) return;
  std::vector<Arg> pargs{{part}};
  std::vector<int32_t> sums;
  size_t k = 1;
  for (int32_t s : {st.fused.dw, st.fused.db})
    if (s >= 0) {
      pargs.push_back({place(st.out[k++])});
      sums.push_back(s);
    }
  add_kernel(sums, norm_partials_kernel(kName, cols, blocks, dw, db), std::move(pargs));
}

void Emitter::emit_scan(const passes::Step& st) {
  const int32_t id = st.node;
  const ir::Node& n = g_.node(id);
  const Shape &us = g_.node(n.inputs[0]).shape, &bs = g_.node(n.inputs[3]).shape;
  ScanShape sh{us[0], us[1], us[2], bs[1], bs[2], n.attrs.values.at(0) != 0.0};
  const Place out = place(st.out[0]);
  if (sh.batch == 0 || sh.channels == 0 || sh.length == 0 || sh.states == 0) {
    // Nothing to scan: every output is empty or zero (the state after no steps, y and the
    // gradients: sums over no steps).
    add_zero(out, n.numel() * dtype_size(n.dtype));
    return;
  }
  std::vector<Arg> args;
  for (size_t i = 0; i < 7; ++i) {
    // D (5) and delta_bias (6) broadcast from one value are read with stride 0.
    const std::vector<int64_t>& s = st.in[i].strides;
    if ((i == 5 || i == 6) && s.size() == 1 && s[0] == 0) (i == 5 ? sh.d_stride : sh.bias_stride) = 0;
    args.push_back({place(st.in[i])});
  }
  if (n.op == Op::kSelectiveScan) {
    // The saved states (result 2) have a buffer of their own when a gradient reads them.
    const bool keep = st.out.size() > 1;
    sh.vec = aligned16(args[0].place) && aligned16(args[1].place) && aligned16(args[3].place) &&
             aligned16(args[4].place);
    args.push_back({out});
    args.push_back({keep ? place(st.out[1]) : out});
    add_kernel({id}, scan_forward_kernel(kName, sh, keep), std::move(args));
    return;
  }
  // The gradient's cotangents: dy as rows, as one value broadcast (the gradient of a plain
  // sum) or a known zero; dlast as rows or a known zero (not read).
  const Place hs = place(st.in[9]);  // the forward's saved states (its result 2)
  Place dy = hs, dlast = hs;         // absent parts are not read: any valid place
  const std::vector<int64_t>& dys = st.in[7].strides;
  if (ir::constant_value(g_, n.inputs[7]) == 0.0) {
    sh.dy = ScanShape::Dy::kZero;
  } else {
    dy = place(st.in[7]);
    if (std::all_of(dys.begin(), dys.end(), [](int64_t s) { return s == 0; })) sh.dy = ScanShape::Dy::kOne;
  }
  sh.dlast = ir::constant_value(g_, n.inputs[8]) != 0.0;
  if (sh.dlast) dlast = place(st.in[8]);
  sh.vec = aligned16(args[0].place) && aligned16(args[1].place) && aligned16(args[3].place) &&
           aligned16(args[4].place) && (sh.dy != ScanShape::Dy::kRows || aligned16(dy));
  const Place da = place(st.scratch.at(0)), dbc = place(st.scratch.at(1)), ddb = place(st.scratch.at(2));
  for (const Place& p : {dy, dlast, hs, out, da, dbc, ddb}) args.push_back({p});
  add_kernel({id}, scan_backward_kernel(kName, sh), std::move(args));
  add_kernel({id}, scan_reduce_kernel(kName, sh), {{da}, {dbc}, {ddb}, {out}});
}

void Emitter::emit_attention(const passes::Step& st) {
  const int32_t id = st.node;
  const ir::Node& n = g_.node(id);
  AttentionShape as = attention_shape(g_, id, info_, options_);
  const Operand q = operand(st.in[0], n.inputs[0]), k = operand(st.in[1], n.inputs[1]),
                v = operand(st.in[2], n.inputs[2]);
  const int64_t flops = 4 * as.batch * as.q_heads * as.t * as.s * as.d / (as.causal ? 2 : 1);
  const bool stats = attention_keeps_stats(as);
  const Place base = place(st.out[0]);
  const std::vector<passes::NodeLayout::Result>& results = st.layout.results;
  if (n.op == Op::kAttention) {
    const Shape& os = n.results[0].shape;
    const std::vector<int64_t> out_strides =
        results[0].strides.empty() ? contiguous_strides(os) : results[0].strides;
    Place out = base;
    out.strides = out_strides;
    std::vector<Arg> args{{place(st.in[0])}, {place(st.in[1])}, {place(st.in[2])}, {out}};
    const bool keep = st.out.size() > 1;  // the saved statistics have a buffer of their own
    if (keep) args.push_back({place(st.out[1])});
    if (as.key_mask) args.push_back({place(st.in.back())});
    add_kernel({id}, attention_kernel(kName, as, q, k, v, Operand{DType::kF32, os, out_strides}, keep),
               std::move(args), flops);
    return;
  }
  const Operand dout = operand(st.in[3], n.inputs[3]);
  const Operand fwd_out = stats ? operand(st.in[4], n.inputs[4]) : Operand{};
  as.grads_packed = st.layout.concat >= 0;
  as.grads_bthd =
      stats && !results.empty();  // the results not read after the step (packed rows take precedence)
  AttentionGradPlan plan = attention_grad_kernels(kName, as, q, k, v, dout, stats ? &fwd_out : nullptr);
  const Place scratch = stats ? place(st.in[5]) : place(st.scratch.at(0));
  for (size_t i = 0; i < plan.launches.size(); ++i) {
    std::vector<Arg> args{{place(st.in[0])}, {place(st.in[1])}, {place(st.in[2])}, {place(st.in[3])}, {base},
                          {scratch}};
    if (as.key_mask) args.push_back({place(st.in.back())});
    if (i == 0 && plan.delta_from_out) args = {{place(st.in[4])}, {place(st.in[3])}, {scratch}};
    add_kernel({id}, std::move(plan.launches[i]), std::move(args), 0);
  }
  prog_.steps.back().flops = 2 * flops + flops / 2;
}

}  // namespace tg::backend::cuda
