// What the CUDA backend's kernels read and write (see capabilities.h). Attention's layouts:
//  - attention: out is written [B, T, Hq, D] when its readers permute it there (the heads go
//    back next to the features before the output projection), so the permute and the merge of
//    heads are free views; `saved` is each row's log-sum-exp (and room for the backward's row
//    deltas) when a gradient reads it and the shape's kernels keep statistics.
//  - attention_grad: dq, dk and dv one after the other, each [B, H, T, D]; or each written
//    [B, T, H, D] (the tiled kernels) for the same reason; or, when the three only meet again,
//    permuted and with their heads merged, in one concat along the features (the packed qkv
//    projection's gradient), written straight into that concat's rows [dq | dk | dv], which
//    then is a view.
#include "backend/cuda/capabilities.h"

#include <algorithm>

#include "ir/strides.h"
#include "util/switches.h"

namespace tg::backend::cuda {

using ir::Op;

namespace {

const std::vector<int64_t> kHeadsInner = {0, 2, 1, 3};  // [B, H, T, D] ↔ [B, T, H, D]

/// Strides that lay a [B, H, T, D] value out as [B, T, H, D].
std::vector<int64_t> heads_inner_strides(const Shape& s) {
  return {s[2] * s[1] * s[3], s[3], s[1] * s[3], 1};
}

/// The row stride when `strides` are dense except for rows padded apart, else -1.
int64_t row_stride_of(const Shape& shape, const std::vector<int64_t>& strides) {
  if (shape.size() < 2 || (shape.back() != 1 && strides.back() != 1)) return -1;
  const int64_t ld = strides[shape.size() - 2];
  if (ld < shape.back()) return -1;
  const std::vector<int64_t> want = row_padded_strides(shape, ld);
  for (size_t d = 0; d + 1 < shape.size(); ++d)
    if (shape[d] != 1 && strides[d] != want[d]) return -1;
  return ld;
}

std::vector<int32_t> readers(const ir::Graph& g, int32_t id) {
  std::vector<int32_t> out;
  for (int32_t c = id + 1; c < g.size(); ++c)
    for (int32_t in : g.node(c).inputs)
      if (in == id) {
        out.push_back(c);
        break;
      }
  return out;
}

bool escapes(const ir::Graph& g, int32_t x) {
  return std::find(g.outputs.begin(), g.outputs.end(), x) != g.outputs.end() ||
         std::any_of(g.updates.begin(), g.updates.end(),
                     [&](const ir::Graph::Update& u) { return u.value == x; });
}

/// The kResult nodes reading result `index` of multi-output node `id`.
std::vector<int32_t> results_of(const ir::Graph& g, int32_t id, int64_t index) {
  std::vector<int32_t> out;
  for (int32_t c : readers(g, id))
    if (g.node(c).op == Op::kResult && g.node(c).attrs.axes.at(0) == index) out.push_back(c);
  return out;
}

/// The concat along the features of attention_grad `grad`'s three results, each permuted to
/// [B, T, H, D] and its heads merged, when that is all they are read for (and T = S); -1 if not.
int32_t packed_qkv_concat(const ir::Graph& g, int32_t grad) {
  const ir::Node& ag = g.node(grad);
  if (ag.results[0].shape[2] != ag.results[1].shape[2]) return -1;
  auto sole = [&](int32_t x) {
    const std::vector<int32_t> cs = readers(g, x);
    return cs.size() == 1 && !escapes(g, x) ? cs[0] : -1;
  };
  int32_t concat = -1, parts[3] = {-1, -1, -1};
  for (int64_t i = 0; i < 3; ++i) {
    const std::vector<int32_t> rs = results_of(g, grad, i);
    if (rs.size() != 1) return -1;
    const int32_t p = sole(rs[0]), m = p >= 0 ? sole(p) : -1, c = m >= 0 ? sole(m) : -1;
    if (c < 0 || g.node(p).op != Op::kPermute || g.node(p).attrs.axes != kHeadsInner) return -1;
    const Shape& ps = g.node(p).shape;
    if (g.node(m).op != Op::kReshape || g.node(m).shape != Shape{ps[0], ps[1], ps[2] * ps[3]}) return -1;
    if (concat >= 0 && c != concat) return -1;
    concat = c;
    parts[i] = m;
  }
  const ir::Node& cn = g.node(concat);
  if (cn.op != Op::kConcat || cn.attrs.axes.at(0) != 2 ||
      cn.inputs != std::vector<int32_t>{parts[0], parts[1], parts[2]})
    return -1;
  return concat;
}

bool dense(const ir::Graph& g, const ir::Node& consumer, size_t index, const std::vector<int64_t>& strides) {
  return is_contiguous_strides(strides, g.node(consumer.inputs[index]).shape);
}

}  // namespace

AttentionShape attention_shape(const ir::Graph& g, int32_t id, const DeviceInfo& info,
                               const PrepareOptions& options) {
  const ir::Node& n = g.node(id);
  const Shape &qs = g.node(n.inputs[0]).shape, &ks = g.node(n.inputs[1]).shape;
  AttentionShape as;
  as.batch = qs[0];
  as.q_heads = qs[1];
  as.kv_heads = ks[1];
  as.t = qs[2];
  as.s = ks[2];
  as.d = qs[3];
  as.scale = n.attrs.values.at(0);
  as.causal = n.attrs.causal;
  as.tf32 = options.tf32;
  as.sm_count = info.sm_count;
  as.key_mask = ir::attention_masked(n);
  return as;
}

bool CudaCapabilities::reads(const ir::Graph& g, const ir::Node& n, size_t index,
                             const std::vector<int64_t>& strides) const {
  const Shape& shape = g.node(n.inputs[index]).shape;
  // clang-format off
  switch (n.op) {
    case Op::kSoftmax: case Op::kLogSoftmax: case Op::kLayerNorm: case Op::kRmsNorm: case Op::kLayerNormGrad:
    case Op::kRmsNormGrad: case Op::kSample:
      return dense(g, n, index, strides);
    case Op::kConv2d: case Op::kConv2dGradInput: case Op::kConv2dGradWeight: case Op::kMaxPool2d:
    case Op::kMaxPool2dGrad: case Op::kAvgPool2d: case Op::kAvgPool2dGrad:
      return dense(g, n, index, strides);
    case Op::kGroupedMatmul: case Op::kGroupedMatmulGradWeight:  // x, w (dy), offsets
    case Op::kQuantMatmul:                                        // x, q, scale[, offset]
      return dense(g, n, index, strides);
    case Op::kAllReduce: case Op::kReduceScatter: case Op::kAllGather: case Op::kRankShard:
      // the collective engine sends flat, dense buffers
      return dense(g, n, index, strides);
    case Op::kCrossEntropy: case Op::kCrossEntropyGrad:  // logits may come with padded rows (padded_row)
      return dense(g, n, index, strides) || (index == 0 && row_stride_of(shape, strides) > 0);
    case Op::kAttention: case Op::kAttentionGrad:  // q, k, v, dout: unit stride along D; the key mask dense
      if (ir::attention_masked(n) && index + 1 == n.inputs.size()) return dense(g, n, index, strides);
      return index >= 4 || attention_operand_ok(Operand{g.node(n.inputs[index]).dtype, shape, strides});
    case Op::kSelectiveScan: case Op::kSelectiveScanGrad: {
      const bool zeros = std::all_of(strides.begin(), strides.end(), [](int64_t s) { return s == 0; });
      if (index == 5 || index == 6)
        return dense(g, n, index, strides) || (strides.size() == 1 && zeros);  // D, delta_bias
      if (index == 7) return zeros || dense(g, n, index, strides);  // dy: rows, one value or a known zero
      if (index == 8)
        return ir::constant_value(g, n.inputs[8]) == 0.0 || dense(g, n, index, strides);  // dlast
      return index >= 9 || dense(g, n, index, strides);
    }
    default:  // elementwise groups, copies, reductions, indexing, products (copied inside), attention_at
      return true;
  }
  // clang-format on
}

passes::NodeLayout CudaCapabilities::layout(const ir::Graph& g, int32_t id,
                                            const std::vector<passes::Place>& in,
                                            const std::vector<passes::Buffer>&) const {
  const ir::Node& n = g.node(id);
  passes::NodeLayout lay;
  // clang-format off
  switch (n.op) {
    case Op::kCrossEntropyGrad: {  // rows padded apart with zeros: a product reads them as a padded reduction
                                   // axis
      const int64_t cols = n.shape.back(), rows = n.numel() / std::max<int64_t>(cols, 1),
                    ld = padded_row(cols);
      lay.strides = row_padded_strides(n.shape, ld);
      lay.bytes = rows * ld * 4;
      lay.zero_padding = ld != cols;
      return lay;
    }
    case Op::kAttention: case Op::kAttentionGrad:
      return attention_layout(g, id, in);
    case Op::kConv2dGradWeight: {  // the partial sums of a split reduction
      const int64_t floats =
          conv_kernels("tg_kernel", n.op, ir::window_geom(g, n), g.node(n.inputs[0]).dtype, options_.tf32, info_)
              .scratch_floats;
      if (floats > 0) lay.scratch = {floats * 4};
      return lay;
    }
    case Op::kSelectiveScan: case Op::kSelectiveScanGrad: {
      const Shape &us = g.node(n.inputs[0]).shape, &bs = g.node(n.inputs[3]).shape;
      const ScanShape sh{us[0], us[1], us[2], bs[1], bs[2], n.attrs.values.at(0) != 0.0};
      if (sh.batch == 0 || sh.channels == 0 || sh.length == 0 || sh.states == 0) return lay;
      const ScanLayout sl = scan_layout(sh);
      if (n.op == Op::kSelectiveScanGrad) {
        lay.scratch = {sl.da_floats * 4, sl.dbc_floats * 4, sl.dd_floats * 4};
        return lay;
      }
      // Result 2 (saved): the states entering each chunk, kept for a gradient that reads them.
      bool keep = false;
      for (int32_t r : results_of(g, id, 2)) keep = keep || !readers(g, r).empty();
      lay.results = {{{}, 0, -1},
                     {{}, ir::result_offset(n, 1), -1},
                     {{}, ir::result_offset(n, 2), keep ? sl.state_floats * 4 : -1}};
      return lay;
    }
    default: return lay;
  }
  // clang-format on
}

std::vector<int64_t> CudaCapabilities::group_output_strides(const ir::Graph& g, int32_t id) const {
  // bf16 (f16) rows whose length is not a multiple of 8 elements (16 bytes) leave cuBLASLt only its
  // slow unaligned kernels (GPT-2's 50257-wide logit gradient): write them padded, like the
  // f32 rows products write (padded_row), or to the next multiple of 8 when shorter. The
  // padding is never read (products take the true extents). Values only convolutions or
  // grouped products read stay dense: those kernels read dense operands (a 14-wide image row
  // would otherwise be padded, then copied back to dense for them). (Pools read f32 only.)
  const ir::Node& n = g.node(id);
  if (!is_half(n.dtype) || n.shape.size() < 2 || n.shape.back() % 8 == 0) return {};
  const std::vector<int32_t> rs = readers(g, id);
  if (!rs.empty() && !escapes(g, id) && std::all_of(rs.begin(), rs.end(), [&](int32_t r) {
        const Op op = g.node(r).op;
        return op == Op::kConv2d || op == Op::kConv2dGradInput || op == Op::kConv2dGradWeight ||
               op == Op::kGroupedMatmul || op == Op::kGroupedMatmulGradWeight || op == Op::kQuantMatmul;
      }))
    return {};
  const int64_t cols = n.shape.back();
  return row_padded_strides(n.shape, cols >= 1024 ? padded_row(cols) : (cols + 7) / 8 * 8);
}

passes::NodeLayout CudaCapabilities::attention_layout(const ir::Graph& g, int32_t id,
                                                      const std::vector<passes::Place>& in) const {
  const ir::Node& n = g.node(id);
  const AttentionShape as = attention_shape(g, id, info_, options_);
  // The gradient reads the forward's statistics when the forward's kernels keep them: a pure
  // function of the shape, so both sides agree.
  const bool stats = attention_keeps_stats(as);
  passes::NodeLayout lay;
  if (n.op == Op::kAttention) {
    const Shape& os = n.results[0].shape;
    // out [B, T, Hq, D] when every reader permutes it there, or is a gradient (any strides).
    bool heads_inner = false, other = false;
    for (int32_t r : results_of(g, id, 0)) {
      other = other || escapes(g, r);
      for (int32_t c : readers(g, r)) {
        const ir::Node& cn = g.node(c);
        if (cn.op == Op::kPermute && cn.attrs.axes == kHeadsInner)
          heads_inner = true;
        else if (cn.op != Op::kAttentionGrad)
          other = true;
      }
    }
    bool keep = false;
    for (int32_t r : results_of(g, id, 1)) keep = keep || !readers(g, r).empty();
    lay.results = {{heads_inner && !other ? heads_inner_strides(os) : std::vector<int64_t>{}, 0, -1},
                   {{}, ir::result_offset(n, 1), keep && stats ? 2 * as.batch * as.q_heads * as.t * 4 : -1}};
    return lay;
  }
  bool escaping = false;
  for (int64_t i = 0; i < 3; ++i)
    for (int32_t r : results_of(g, id, i)) escaping = escaping || escapes(g, r);
  const int32_t concat = escaping ? -1 : packed_qkv_concat(g, id);
  const Shape &qs = n.results[0].shape, &ks = n.results[1].shape;
  const int64_t nq = numel(qs), nk = numel(ks);
  if (concat >= 0) {  // [B, H, T, D] inside rows of [dq | dk | dv]
    const int64_t hq = qs[1], hk = ks[1], t = qs[2], d = qs[3], row = (hq + 2 * hk) * d;
    const std::vector<int64_t> st = {t * row, d, row, 1};
    lay.results = {{st, 0, -1}, {st, hq * d, -1}, {st, (hq + hk) * d, -1}};
    lay.concat = concat;
  } else if (stats) {  // the tiled kernels write [B, T, H, D] parts
    lay.results = {{heads_inner_strides(qs), 0, -1},
                   {heads_inner_strides(ks), nq, -1},
                   {heads_inner_strides(ks), nq + nk, -1}};
  }
  if (!stats) {
    auto op = [&](size_t i) {
      return Operand{g.node(n.inputs[i]).dtype, g.node(n.inputs[i]).shape, in[i].strides};
    };
    const Operand q = op(0), k = op(1), v = op(2), dout = op(3);
    AttentionShape grad_shape = as;
    grad_shape.grads_packed = concat >= 0;
    lay.scratch = {
        std::max<int64_t>(attention_grad_kernels("tg_kernel", grad_shape, q, k, v, dout).scratch_floats, 1) *
        4};
  }
  return lay;
}

bool CudaCapabilities::norm_affine(const ir::Graph& g, int32_t id) const {
  return g.node(id).shape.back() <= 16384;
}

bool CudaCapabilities::norm_deferrable(const ir::Graph& g, int32_t id) const {
  static const bool off = env::equals(env::Switch::kCudaGemvNorm, "off");
  const ir::Node& f = g.node(id);
  return !off && f.numel() / std::max<int64_t>(f.shape.back(), 1) <= 8;
}

bool CudaCapabilities::cast_deferrable(const ir::Graph& g, int32_t cast, int32_t product) const {
  static const bool off = env::equals(env::Switch::kCudaGemv, "off");
  const ir::Node &c = g.node(cast), &m = g.node(product);
  const int64_t k = c.shape.back(), rows = c.numel() / std::max<int64_t>(k, 1), n = m.shape.back();
  // The shapes gemv_kernel takes (gemv_applies; the layouts are checked when the product is
  // planned); it rounds to bf16 only (f16 products run on cuBLASLt). The product's weights are
  // bf16, or a quant_matmul's int8.
  return !off && c.dtype == DType::kBF16 && rows <= gemv_max_rows(true) && m.numel() == rows * n && k >= 32 &&
         n * k >= (int64_t{1} << 16);
}

bool CudaCapabilities::norm_backward(const ir::Graph& g, int32_t id) const {
  const int64_t cols = g.node(id).shape.back();
  return cols >= 1 && cols <= 1024;  // the warp-per-row scheme
}

int64_t norm_backward_blocks(int64_t rows, const DeviceInfo& info) {
  constexpr int64_t kRowsPerBlock = 8, kBlocksPerSm = 2;  // enough to fill the device; the partials stay few
  return std::min<int64_t>(kBlocksPerSm * info.sm_count, (rows + kRowsPerBlock - 1) / kRowsPerBlock);
}

std::vector<int64_t> CudaCapabilities::norm_backward_scratch(const ir::Graph& g,
                                                             const passes::Step& st) const {
  const ir::Node& lg = g.node(st.node);
  const int64_t cols = lg.shape.back(), rows = lg.numel() / cols, blocks = norm_backward_blocks(rows, info_);
  return {(st.fused.dw >= 0 || st.fused.db >= 0 ? 2 * blocks * cols : 1) * 4};
}

}  // namespace tg::backend::cuda
