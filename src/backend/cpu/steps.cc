// Kernels of schedule steps for the CPU (see steps.h).
#include "backend/cpu/steps.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "distributed/communicator.h"
#include "tensorgrad/errors.h"

namespace tg::backend::cpu {

using ir::Op;

namespace {

float* f32(std::byte* p) { return reinterpret_cast<float*>(p); }

class CpuCapabilities final : public passes::Capabilities {
 public:
  bool update_rows_in_place() const override { return true; }
  bool reads(const ir::Graph& g, const ir::Node& consumer, size_t index,
             const std::vector<int64_t>& strides) const override {
    const View v{nullptr, strides};
    const Shape& shape = g.node(consumer.inputs[index]).shape;
    // clang-format off
    switch (consumer.op) {
      case Op::kSum: case Op::kMax: case Op::kMin: case Op::kArgmax: case Op::kCumsum: case Op::kUpdateSlice:
      case Op::kSample: case Op::kSelectiveScan: case Op::kSelectiveScanGrad: case Op::kSoftmax: case Op::kLogSoftmax:
      case Op::kLayerNorm: case Op::kLayerNormGrad: case Op::kRmsNorm: case Op::kRmsNormGrad:
      case Op::kConv2d: case Op::kConv2dGradInput: case Op::kConv2dGradWeight: case Op::kMaxPool2d:
      case Op::kMaxPool2dGrad: case Op::kAvgPool2d: case Op::kAvgPool2dGrad: case Op::kGroupedMatmul:
      case Op::kGroupedMatmulGradWeight: case Op::kQuantMatmul:
      case Op::kReduceScatter: case Op::kAllGather: case Op::kRankShard:  // the engine sends flat buffers
        return is_contiguous(v, shape);
      case Op::kMatmul: return blas_operand(v, shape).has_value();
      case Op::kCrossEntropy: case Op::kCrossEntropyGrad:  // dense logits; targets and dloss any view
        return index > 0 || is_contiguous(v, shape);
      case Op::kAttention: case Op::kAttentionGrad:  // q, k, v, dout; out and saved are not read
        if (ir::attention_masked(consumer) && index + 1 == consumer.inputs.size())
          return is_contiguous(v, shape);  // the key mask
        return index >= 4 || attention_operand(v, shape);
      default:  // elementwise groups, copies, views, indexing, randomness, attention_at: any strides
        return true;
    }
    // clang-format on
  }
};

/// all_reduce: each input copied densely into its result (the results lie one after the other
/// in the node's allocation), then one in-place sum over the ranks per run of same-dtype results.
Kernel all_reduce_kernel(const ir::Graph& g, const passes::Step& st, const ViewOf& view,
                         dist::Communicator* comm) {
  const ir::Node& n = g.node(st.node);
  std::byte* base = view(st.out[0]).data;
  std::vector<Kernel> copies;
  struct Run {
    std::byte* data;
    int64_t count;
    DType dtype;
  };
  std::vector<Run> runs;
  for (size_t k = 0; k < n.inputs.size(); ++k) {
    const ir::ValueType& r = n.results[k];
    std::byte* dst = base + ir::result_offset(n, k) * dtype_size(r.dtype);
    copies.push_back(make_copy(r.dtype, r.shape, contiguous_view(dst, r.shape), view(st.in[k])));
    if (!runs.empty() && runs.back().dtype == r.dtype)
      runs.back().count += numel(r.shape);
    else
      runs.push_back({dst, numel(r.shape), r.dtype});
  }
  return [copies = std::move(copies), runs = std::move(runs), comm] {
    for (const Kernel& c : copies) c();
    for (const Run& r : runs) comm->all_reduce_host(r.data, r.data, r.count, r.dtype);
  };
}

/// reduce_scatter, all_gather and rank_shard over dense f32 vectors (reads() asks for dense
/// inputs; the output is the node's own allocation, apart from its input).
Kernel shard_kernel(const ir::Graph& g, const passes::Step& st, const ViewOf& view,
                    dist::Communicator* comm) {
  const ir::Node& n = g.node(st.node);
  const float* x = f32(view(st.in[0]).data);
  float* y = f32(view(st.out[0]).data);
  const int64_t in_count = g.node(n.inputs[0]).numel();
  switch (n.op) {
    case Op::kReduceScatter:
      return [x, y, count = n.numel(), comm] { comm->reduce_scatter_host(x, y, count); };
    case Op::kAllGather: return [x, y, in_count, comm] { comm->all_gather_host(x, y, in_count); };
    default: {  // rank_shard: this rank's part, fixed when the step is built
      const float* first = x + comm->rank() * n.numel();
      return [first, y, count = n.numel()] {
        if (count > 0) std::memcpy(y, first, static_cast<size_t>(count) * sizeof(float));
      };
    }
  }
}

Kernel node_kernel(const ir::Graph& g, const passes::Step& st, const ViewOf& view, dist::Communicator* comm) {
  const ir::Node& n = g.node(st.node);
  auto in = [&](size_t k) { return view(st.in[k]); };
  auto shape = [&](size_t k) -> const Shape& { return g.node(n.inputs[k]).shape; };
  const View out = view(st.out[0]);
  const int64_t esize = dtype_size(n.dtype);
  // clang-format off
  switch (n.op) {
    case Op::kSum: case Op::kMax: case Op::kMin:
      return make_reduce(n, shape(0), in(0).data, out.data);
    case Op::kArgmax: return make_argmax(n, shape(0), g.node(n.inputs[0]).dtype, in(0).data, out.data);
    case Op::kCumsum: return make_cumsum(n, in(0).data, out.data);
    case Op::kRotary: return make_rotary(n.shape, in(0), in(1), in(2), f32(out.data));
    case Op::kUnslice: {
      const auto axis = static_cast<size_t>(n.attrs.axes[0]);
      const auto start = static_cast<int64_t>(n.attrs.values[0]),
                 step = static_cast<int64_t>(n.attrs.values[1]);
      View dst = out;
      if (numel(shape(0)) > 0) dst.data += start * dst.strides[axis] * esize;  // else it may point nowhere
      dst.strides[axis] *= step;
      const auto bytes = static_cast<size_t>(n.numel() * esize);
      Kernel scatter = make_copy(n.dtype, shape(0), dst, in(0));
      return [o = out.data, bytes, scatter = std::move(scatter)] {
        std::memset(o, 0, bytes);
        scatter();
      };
    }
    case Op::kConcat: {
      const auto axis = static_cast<size_t>(n.attrs.axes[0]);
      std::vector<Kernel> pieces;
      int64_t base = 0;
      for (size_t k = 0; k < n.inputs.size(); ++k) {
        if (numel(shape(k)) > 0) {
          View dst = out;
          dst.data += base * dst.strides[axis] * esize;
          pieces.push_back(make_copy(n.dtype, shape(k), dst, in(k)));
        }
        base += shape(k)[axis];
      }
      return [pieces = std::move(pieces)] {
        for (const Kernel& k : pieces) k();
      };
    }
    case Op::kMatmul:
      return make_matmul(n.shape, shape(0), in(0), shape(1), in(1), f32(out.data), g.node(n.inputs[0]).dtype);
    case Op::kGroupedMatmul: case Op::kGroupedMatmulGradWeight:
      return make_grouped_matmul(n, shape(0), shape(1), g.node(n.inputs[0]).dtype, in(0).data, in(1).data,
                                 reinterpret_cast<const int32_t*>(in(2).data), f32(out.data));
    case Op::kQuantMatmul:
      return make_quant_matmul(shape(0), g.node(n.inputs[0]).dtype, in(0).data,
                               reinterpret_cast<const int8_t*>(in(1).data), reinterpret_cast<const float*>(in(2).data),
                               n.inputs.size() == 4 ? reinterpret_cast<const float*>(in(3).data) : nullptr,
                               shape(1)[0], shape(2)[1], f32(out.data));
    case Op::kGather: return make_gather(n, shape(0), in(0), in(1), out.data);
    case Op::kScatterAdd: return make_scatter_add(n, shape(0), in(0), in(1), f32(out.data));
    case Op::kUpdateSlice: {
      if (!st.fused.rows_in_place)
        return make_update_slice(n, shape(1), !shape(2).empty(), in(0).data, in(1).data,
                                 reinterpret_cast<const int32_t*>(in(2).data), out.data);
      // Only the new rows, written into the state itself (in: src, pos, dst[, the sibling's
      // src, dst]); out is dst.
      const auto* pos = reinterpret_cast<const int32_t*>(in(1).data);
      Kernel rows = make_update_slice(n, shape(1), !shape(2).empty(), in(2).data, in(0).data, pos, in(2).data);
      if (st.fused.sibling < 0) return rows;
      const ir::Node& sib = g.node(st.fused.sibling);
      Kernel more = make_update_slice(sib, g.node(sib.inputs[1]).shape, !shape(2).empty(), in(4).data, in(3).data, pos,
                                      in(4).data);
      return [rows = std::move(rows), more = std::move(more)] {
        rows();
        more();
      };
    }
    case Op::kConv2d: case Op::kConv2dGradInput: case Op::kConv2dGradWeight: case Op::kMaxPool2d:
    case Op::kMaxPool2dGrad: case Op::kAvgPool2d: case Op::kAvgPool2dGrad:
      return make_window(n, ir::window_geom(g, n), g.node(n.inputs[0]).dtype, in(0).data,
                         n.inputs.size() > 1 ? in(1).data : nullptr, f32(out.data));
    case Op::kSoftmax: case Op::kLogSoftmax:
      return make_softmax(n, f32(in(0).data), f32(out.data));
    case Op::kCrossEntropy: case Op::kCrossEntropyGrad:
      return make_cross_entropy(n, shape(0), f32(in(0).data), in(1),
                                n.op == Op::kCrossEntropyGrad ? in(2) : View{}, f32(out.data));
    case Op::kLayerNorm: case Op::kRmsNorm:
      return make_norm(n, f32(in(0).data), nullptr, f32(out.data));
    case Op::kLayerNormGrad: case Op::kRmsNormGrad:
      return make_norm(n, f32(in(0).data), f32(in(1).data), f32(out.data));
    case Op::kSample:
      return make_sample(n.numel(), shape(0).back(), f32(in(0).data), f32(in(1).data),
                         reinterpret_cast<const int32_t*>(in(2).data), reinterpret_cast<int32_t*>(out.data));
    case Op::kRandom: return make_random(n, View{}, in(0), f32(out.data));
    case Op::kDropout: return make_random(n, in(0), in(1), f32(out.data));
    case Op::kSelectiveScan: case Op::kSelectiveScanGrad: {
      std::vector<const float*> ptrs;
      for (size_t k = 0; k < n.inputs.size(); ++k) ptrs.push_back(f32(in(k).data));
      return make_selective_scan(n, shape(0), shape(3), ptrs, f32(out.data));
    }
    case Op::kAllReduce: return all_reduce_kernel(g, st, view, comm);
    case Op::kReduceScatter: case Op::kAllGather: case Op::kRankShard: return shard_kernel(g, st, view, comm);
    case Op::kAttentionAt:
      return make_attention_at(n, shape(0), shape(1), {in(0), in(1), in(2), in(3)}, f32(out.data));
    case Op::kAttention: case Op::kAttentionGrad: {
      // q, k, v (and dout): the backward recomputes the forward rather than read its output.
      std::vector<View> views;
      for (size_t k = 0; k < (n.op == Op::kAttention ? 3u : 4u); ++k) views.push_back(in(k));
      const auto* keys = ir::attention_masked(n) ? reinterpret_cast<const uint8_t*>(in(n.inputs.size() - 1).data)
                                                 : nullptr;
      return make_attention(n, shape(0), shape(1), views, f32(out.data), g.node(n.inputs[0]).dtype, keys);
    }
    default:
      throw Error(std::string("[cpu] no kernel for ") + ir::op_name(n.op) + " %" + std::to_string(st.node));
  }
  // clang-format on
}

}  // namespace

const passes::Capabilities& capabilities() {
  static const CpuCapabilities caps;
  return caps;
}

Kernel step_kernel(const ir::Graph& g, const passes::Step& st, const ViewOf& view, dist::Communicator* comm) {
  if (st.kind == passes::Step::Kind::kCopy) {
    const ir::Node& n = g.node(st.node);
    return make_copy(n.dtype, n.shape, view(st.out[0]), view(st.in[0]));
  }
  return node_kernel(g, st, view, comm);
}

FusedSpec group_spec(const ir::Graph& g, const passes::KernelGroup& group, const passes::Step& st,
                     const ViewOf& view) {
  // Slots: the external inputs, then one per group node.
  const size_t inputs = st.in.size();
  auto slot_of = [&](int32_t id) -> int32_t {
    for (size_t k = 0; k < inputs; ++k)
      if (st.operand_nodes[k] == id) return static_cast<int32_t>(k);
    return static_cast<int32_t>(
        inputs +
        static_cast<size_t>(std::find(group.nodes.begin(), group.nodes.end(), id) - group.nodes.begin()));
  };
  FusedSpec spec;
  spec.shape = g.node(group.nodes.front()).shape;
  for (size_t k = 0; k < inputs; ++k) {
    bool stage = false;  // its memory is also written by this group (an in-place update)
    for (const passes::Place& o : st.out) stage = stage || o.buffer == st.in[k].buffer;
    spec.inputs.push_back({view(st.in[k]), g.node(st.operand_nodes[k]).dtype, stage});
  }
  // Stored outputs in st.out order, reduction sinks after them.
  int32_t sinks = 0;
  for (size_t k = inputs; k < st.out.size() + inputs; ++k) {
    const int32_t id = st.operand_nodes[k];
    if (g.node(id).op == Op::kSum)
      spec.reductions.push_back({g.node(id).numel(), f32(view(st.out[k - inputs]).data)});
    else
      spec.outputs.push_back(view(st.out[k - inputs]).data);
  }
  for (int32_t id : group.nodes) {
    const ir::Node& n = g.node(id);
    if (n.op == Op::kSum) {
      spec.instrs.push_back({nullptr, n.dtype, {slot_of(n.inputs[0]), -1, -1}, -1, 1, sinks++});
      continue;
    }
    FusedSpec::Instr instr{block_function(n.op, g.node(n.inputs[n.op == Op::kWhere ? 1 : 0]).dtype, n.dtype),
                           n.dtype,
                           {-1, -1, -1},
                           -1,
                           op_cost(n.op),
                           -1};
    for (size_t a = 0; a < n.inputs.size(); ++a) instr.args[a] = slot_of(n.inputs[a]);
    const auto pos =
        std::find(st.operand_nodes.begin() + static_cast<std::ptrdiff_t>(inputs), st.operand_nodes.end(), id);
    if (pos != st.operand_nodes.end())
      instr.output =
          static_cast<int32_t>(pos - st.operand_nodes.begin() - static_cast<std::ptrdiff_t>(inputs));
    spec.instrs.push_back(instr);
  }
  return spec;
}

int64_t step_flops(const ir::Graph& g, const passes::Step& st) {
  if (st.kind == passes::Step::Kind::kGroup) {
    int64_t f = 0;
    for (int32_t id : st.nodes)
      f += (g.node(id).op == Op::kSum ? 1 : op_cost(g.node(id).op)) * g.node(st.nodes.front()).numel();
    return f;
  }
  if (st.kind != passes::Step::Kind::kNode) return 0;
  const ir::Node& n = g.node(st.node);
  if (n.op == Op::kMatmul) return 2 * n.numel() * g.node(n.inputs[0]).shape.back();
  if (n.op == Op::kGroupedMatmul) return 2 * n.numel() * g.node(n.inputs[0]).shape[1];  // 2·R·N·K
  if (n.op == Op::kQuantMatmul) return 2 * n.numel() * g.node(n.inputs[0]).shape.back();
  if (n.op == Op::kGroupedMatmulGradWeight)
    return 2 * g.node(n.inputs[0]).shape[0] * (n.numel() / n.shape[0]);
  if (n.op != Op::kAttention && n.op != Op::kAttentionGrad && n.op != Op::kAttentionAt) return 0;
  const Shape &qs = g.node(n.inputs[0]).shape, &ks = g.node(n.inputs[1]).shape;
  if (n.op == Op::kAttentionAt) return 4 * numel(qs) * ks[2] / 2;
  // q·kᵀ and p·v forward (half of it causal); the backward recomputes p and adds three more.
  return (n.op == Op::kAttention ? 4 : 10) * numel(qs) * ks[2] / (n.attrs.causal ? 2 : 1);
}

}  // namespace tg::backend::cpu
