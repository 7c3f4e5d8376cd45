// The reference backend (see ref_backend.h). Every op is a direct loop over output
// elements that maps each output index to the input index it reads. Speed does not matter.
#include "backend/ref/ref_backend.h"

#include "backend/ref/ref_nn.h"
#include "distributed/communicator.h"
#include "ir/scalar.h"
#include "ir/window.h"

#include <cmath>
#include <cstring>
#include <string>

#include "tensorgrad/errors.h"

namespace tg::backend {

namespace {

using ir::to_dtype;

using ir::Graph;
using ir::Node;
using ir::Op;
using Values = std::vector<double>;

class RefBuffer : public Buffer {
 public:
  RefBuffer(DType dtype, int64_t numel) : Buffer(dtype, numel), data(static_cast<size_t>(numel), 0.0) {}
  Values data;
};

/// The multi-index of flat position `flat` in `shape`.
std::vector<int64_t> unravel(int64_t flat, const Shape& shape) {
  std::vector<int64_t> idx(shape.size(), 0);
  for (size_t i = shape.size(); i-- > 0;) {
    idx[i] = flat % shape[i];
    flat /= shape[i];
  }
  return idx;
}

int64_t ravel(const std::vector<int64_t>& idx, const Shape& shape) {
  int64_t flat = 0;
  for (size_t i = 0; i < shape.size(); ++i) flat = flat * shape[i] + idx[i];
  return flat;
}

/// Reduction: every input element folds into the output element its kept axes select.
Values reduce(const Node& n, const Shape& in_shape, const Values& x) {
  Shape kept_shape;  // the output shape with keepdim, for index arithmetic
  for (size_t i = 0; i < in_shape.size(); ++i) {
    bool reduced = false;
    for (int64_t a : n.attrs.axes) reduced = reduced || a == static_cast<int64_t>(i);
    kept_shape.push_back(reduced ? 1 : in_shape[i]);
  }
  const auto out_n = static_cast<size_t>(numel(kept_shape));
  Values out(out_n, n.op == Op::kSum ? 0.0 : NAN);
  Values best(out_n, NAN);  // argmax: best value so far
  for (int64_t flat = 0; flat < static_cast<int64_t>(x.size()); ++flat) {
    std::vector<int64_t> idx = unravel(flat, in_shape);
    const int64_t along = n.attrs.axes.empty() ? 0 : idx[static_cast<size_t>(n.attrs.axes[0])];
    for (size_t i = 0; i < idx.size(); ++i)
      if (kept_shape[i] == 1) idx[i] = 0;
    const auto o = static_cast<size_t>(ravel(idx, kept_shape));
    const double v = x[static_cast<size_t>(flat)];
    switch (n.op) {
      case Op::kSum: out[o] += v; break;
      case Op::kMax: out[o] = std::isnan(out[o]) || v > out[o] ? v : out[o]; break;
      case Op::kMin: out[o] = std::isnan(out[o]) || v < out[o] ? v : out[o]; break;
      case Op::kArgmax:
        if (std::isnan(best[o]) || v > best[o]) {
          best[o] = v;
          out[o] = static_cast<double>(along);
        }
        break;
      default: throw Error("[ref] not a reduction");
    }
  }
  return out;
}

Values matmul(const Node& n, const Node& an, const Node& bn, const Values& a, const Values& b) {
  const Shape& s = n.shape;
  const size_t r = s.size();
  const int64_t m = s[r - 2], nn = s[r - 1], k = an.shape.back();
  Values out(static_cast<size_t>(n.numel()), 0.0);
  // Maps an output batch index onto an operand's (broadcast) batch offset.
  auto operand_offset = [&](const std::vector<int64_t>& idx, const Shape& os) {
    std::vector<int64_t> oi(os.size(), 0);
    const size_t lead = r - os.size();
    for (size_t i = 0; i + 2 < os.size(); ++i) oi[i] = os[i] == 1 ? 0 : idx[i + lead];
    return ravel(oi, os);
  };
  for (int64_t flat = 0; flat < n.numel(); ++flat) {
    std::vector<int64_t> idx = unravel(flat, s);
    const int64_t i = idx[r - 2], j = idx[r - 1];
    const int64_t a0 = operand_offset(idx, an.shape), b0 = operand_offset(idx, bn.shape);
    double acc = 0;
    for (int64_t p = 0; p < k; ++p)
      acc += a[static_cast<size_t>(a0 + i * k + p)] * b[static_cast<size_t>(b0 + p * nn + j)];
    out[static_cast<size_t>(flat)] = acc;
  }
  (void)m;
  return out;
}

class RefExecutableImpl final : public RefExecutable {
 public:
  RefExecutableImpl(const Graph& graph, const Bindings& bindings, dist::Communicator* comm)
      : graph_(graph), values_(graph.size()), comm_(comm) {
    for (int32_t id = 0; id < graph_.size(); ++id) {
      Op op = graph_.node(id).op;
      if (op != Op::kParam && op != Op::kState) continue;
      auto it = bindings.find(id);
      if (it == bindings.end())
        throw Error("[ref] " + std::string(ir::op_name(op)) + " '" + graph_.node(id).name +
                    "' has no bound buffer");
      bound_[id] = static_cast<RefBuffer*>(it->second);
    }
  }

  void set_input(int32_t node, const void* host) override {
    const Node& n = input_node(node);
    Values v(static_cast<size_t>(n.numel()));
    for (size_t i = 0; i < v.size(); ++i) {
      switch (n.dtype) {
        case DType::kF32: v[i] = static_cast<const float*>(host)[i]; break;
        case DType::kI32: v[i] = static_cast<const int32_t*>(host)[i]; break;
        case DType::kBool: v[i] = static_cast<const uint8_t*>(host)[i] != 0 ? 1.0 : 0.0; break;
        case DType::kBF16: v[i] = f32_from_bf16(static_cast<const uint16_t*>(host)[i]); break;
        case DType::kF16: v[i] = f32_from_f16(static_cast<const uint16_t*>(host)[i]); break;
        case DType::kI8: v[i] = static_cast<const int8_t*>(host)[i]; break;
      }
    }
    values_[static_cast<size_t>(node)] = std::move(v);
  }
  void set_input_f64(int32_t node, std::span<const double> values) override {
    const Node& n = input_node(node);
    if (static_cast<int64_t>(values.size()) != n.numel()) throw Error("[ref] input size mismatch");
    values_[static_cast<size_t>(node)].assign(values.begin(), values.end());
  }

  std::string describe() const override {
    return "ref: interprets " + std::to_string(graph_.size()) + " nodes one by one in double precision\n";
  }
  int64_t kernel_count() const override { return graph_.size(); }
  MemoryStats memory() const override {
    MemoryStats m;  // one double buffer per node, nothing shared
    for (const Node& n : graph_.nodes()) {
      const int64_t bytes = n.numel() * 8;
      if (n.op == Op::kParam)
        m.params += bytes;
      else if (n.op == Op::kState)
        m.optimizer_state += bytes;
      else if (n.op == Op::kInput)
        m.inputs += bytes;
      else
        m.arena += bytes;
    }
    m.no_reuse = m.arena;
    return m;
  }

  void execute() override {
    for (int32_t id = 0; id < graph_.size(); ++id) {
      if (graph_.node(id).op == Op::kInput) {
        if (values_[static_cast<size_t>(id)].size() != static_cast<size_t>(graph_.node(id).numel()))
          throw Error("[ref] input '" + graph_.node(id).name + "' was not set");
        continue;
      }
      values_[static_cast<size_t>(id)] = compute(id);
    }
    for (const Graph::Update& u : graph_.updates)
      bound_.at(u.target)->data = values_[static_cast<size_t>(u.value)];
  }

  void read_output(int32_t node, void* host) override {
    const Node& n = graph_.node(node);
    const Values& v = values_.at(static_cast<size_t>(node));
    for (size_t i = 0; i < v.size(); ++i) {
      switch (n.dtype) {
        case DType::kF32: static_cast<float*>(host)[i] = static_cast<float>(v[i]); break;
        case DType::kI32: static_cast<int32_t*>(host)[i] = static_cast<int32_t>(v[i]); break;
        case DType::kBool: static_cast<uint8_t*>(host)[i] = v[i] != 0.0 ? 1 : 0; break;
        case DType::kBF16: static_cast<uint16_t*>(host)[i] = bf16_from_f32(static_cast<float>(v[i])); break;
        case DType::kF16: static_cast<uint16_t*>(host)[i] = f16_from_f32(static_cast<float>(v[i])); break;
        case DType::kI8: static_cast<int8_t*>(host)[i] = static_cast<int8_t>(v[i]); break;
      }
    }
  }
  const std::vector<double>& value_f64(int32_t node) const override {
    return values_.at(static_cast<size_t>(node));
  }

 private:
  const Node& input_node(int32_t node) const {
    if (node < 0 || node >= graph_.size() || graph_.node(node).op != Op::kInput)
      throw Error("[ref] node %" + std::to_string(node) + " is not an input");
    return graph_.node(node);
  }

  Values compute(int32_t id) const {
    const Node& n = graph_.node(id);
    auto in = [&](size_t i) -> const Values& { return values_[static_cast<size_t>(n.inputs[i])]; };
    auto in_node = [&](size_t i) -> const Node& { return graph_.node(n.inputs[i]); };
    const auto count = static_cast<size_t>(n.numel());
    Values out(count, 0.0);
    // clang-format off
    switch (n.op) {
      case Op::kParam:
      case Op::kState: return bound_.at(id)->data;
      case Op::kInput: return values_[static_cast<size_t>(id)];
      case Op::kConstant:
        for (size_t i = 0; i < count; ++i)
          out[i] = to_dtype(n.attrs.values.size() == 1 ? n.attrs.values[0] : n.attrs.values[i], n.dtype);
        return out;
      case Op::kArange:
        for (size_t i = 0; i < count; ++i)
          out[i] = to_dtype(n.attrs.values[0] + static_cast<double>(i) * n.attrs.values[1], n.dtype);
        return out;

      case Op::kNeg: case Op::kAbs: case Op::kSign: case Op::kExp: case Op::kLog: case Op::kSqrt:
      case Op::kRsqrt: case Op::kSin: case Op::kCos: case Op::kTanh: case Op::kSigmoid:
      case Op::kRelu: case Op::kErf: case Op::kLog1p: case Op::kReciprocal: case Op::kLogicalNot: case Op::kGeluTanh:
      case Op::kStopGradient:
        for (size_t i = 0; i < count; ++i) out[i] = ir::eval_unary(n.op, in(0)[i]);
        return out;
      case Op::kAdd: case Op::kSub: case Op::kMul: case Op::kDiv: case Op::kPow:
      case Op::kMaximum: case Op::kMinimum: case Op::kLogicalAnd: case Op::kLogicalOr: case Op::kGeluTanhGrad: case Op::kReluGrad:
      case Op::kEq: case Op::kNe: case Op::kLt: case Op::kLe: case Op::kGt: case Op::kGe:
        for (size_t i = 0; i < count; ++i) out[i] = ir::eval_binary(n.op, in(0)[i], in(1)[i]);
        return out;
      case Op::kCast:
        for (size_t i = 0; i < count; ++i) out[i] = to_dtype(in(0)[i], n.dtype);
        return out;
      case Op::kWhere:
        for (size_t i = 0; i < count; ++i) out[i] = in(0)[i] != 0.0 ? in(1)[i] : in(2)[i];
        return out;

      case Op::kRotary: {
        // x·cos + rotate_half(x)·sin; element i of a row pairs with i ± D/2.
        const size_t d = static_cast<size_t>(n.shape.back()), h = d / 2;
        for (size_t i = 0; i < count; ++i) {
          const size_t c = i % d;
          const double rotated = c < h ? -in(0)[i + h] : in(0)[i - h];
          out[i] = to_dtype(in(0)[i] * in(1)[i] + rotated * in(2)[i], n.dtype);
        }
        return out;
      }
      case Op::kSum: case Op::kMax: case Op::kMin: case Op::kArgmax:
        return reduce(n, in_node(0).shape, in(0));
      case Op::kCumsum: {
        // [outer, len, inner] around the axis; each (outer, inner) line summed in its direction.
        const size_t axis = static_cast<size_t>(n.attrs.axes[0]);
        int64_t outer = 1, inner = 1;
        for (size_t i = 0; i < axis; ++i) outer *= n.shape[i];
        for (size_t i = axis + 1; i < n.shape.size(); ++i) inner *= n.shape[i];
        const int64_t len = n.shape[axis];
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t j = 0; j < inner; ++j) {
            double acc = 0;
            for (int64_t s = 0; s < len; ++s) {
              const int64_t i = n.attrs.reverse ? len - 1 - s : s;
              const size_t at = static_cast<size_t>((o * len + i) * inner + j);
              acc += in(0)[at];
              out[at] = acc;
            }
          }
        return out;
      }

      case Op::kReshape: return in(0);
      case Op::kResult: {  // its part of the multi-output node's values (ir::Node::results)
        const auto at = in(0).begin() + ir::result_offset(in_node(0), static_cast<size_t>(n.attrs.axes[0]));
        return Values(at, at + static_cast<int64_t>(count));
      }
      case Op::kPermute:
        for (size_t flat = 0; flat < count; ++flat) {
          std::vector<int64_t> idx = unravel(static_cast<int64_t>(flat), n.shape), src(idx.size());
          for (size_t i = 0; i < idx.size(); ++i) src[static_cast<size_t>(n.attrs.axes[i])] = idx[i];
          out[flat] = in(0)[static_cast<size_t>(ravel(src, in_node(0).shape))];
        }
        return out;
      case Op::kBroadcastTo: {
        const Shape& xs = in_node(0).shape;
        const size_t lead = n.shape.size() - xs.size();
        for (size_t flat = 0; flat < count; ++flat) {
          std::vector<int64_t> idx = unravel(static_cast<int64_t>(flat), n.shape), src(xs.size());
          for (size_t i = 0; i < xs.size(); ++i) src[i] = xs[i] == 1 ? 0 : idx[i + lead];
          out[flat] = in(0)[static_cast<size_t>(ravel(src, xs))];
        }
        return out;
      }
      case Op::kSlice:
      case Op::kUnslice: {
        const auto axis = static_cast<size_t>(n.attrs.axes[0]);
        const auto start = static_cast<int64_t>(n.attrs.values[0]);
        const auto step = static_cast<int64_t>(n.attrs.values[1]);
        const Shape& small = n.op == Op::kSlice ? n.shape : in_node(0).shape;
        const Shape& big = n.op == Op::kSlice ? in_node(0).shape : n.shape;
        for (int64_t flat = 0; flat < numel(small); ++flat) {
          std::vector<int64_t> idx = unravel(flat, small);
          idx[axis] = start + idx[axis] * step;
          const auto b = static_cast<size_t>(ravel(idx, big));
          if (n.op == Op::kSlice)
            out[static_cast<size_t>(flat)] = in(0)[b];
          else
            out[b] = in(0)[static_cast<size_t>(flat)];
        }
        return out;
      }
      case Op::kConcat: {
        const auto axis = static_cast<size_t>(n.attrs.axes[0]);
        int64_t base = 0;
        for (size_t k = 0; k < n.inputs.size(); ++k) {
          const Shape& xs = in_node(k).shape;
          for (int64_t flat = 0; flat < numel(xs); ++flat) {
            std::vector<int64_t> idx = unravel(flat, xs);
            idx[axis] += base;
            out[static_cast<size_t>(ravel(idx, n.shape))] = in(k)[static_cast<size_t>(flat)];
          }
          base += xs[axis];
        }
        return out;
      }
      case Op::kMatmul: return matmul(n, in_node(0), in_node(1), in(0), in(1));
      case Op::kAllReduce: case Op::kReduceScatter: case Op::kAllGather: case Op::kRankShard: {
        std::vector<const Values*> vals;
        for (size_t k = 0; k < n.inputs.size(); ++k) vals.push_back(&in(k));
        return collective(n, vals);
      }
      case Op::kGather: case Op::kScatterAdd: case Op::kUpdateSlice: case Op::kSample: case Op::kSoftmax: case Op::kLogSoftmax:
      case Op::kCrossEntropy: case Op::kCrossEntropyGrad: case Op::kLayerNorm: case Op::kLayerNormGrad:
      case Op::kRmsNorm: case Op::kRmsNormGrad: case Op::kRandom: case Op::kDropout:
      case Op::kAttention: case Op::kAttentionGrad: case Op::kAttentionAt: case Op::kSelectiveScan:
      case Op::kSelectiveScanGrad: case Op::kConv2d: case Op::kConv2dGradInput: case Op::kConv2dGradWeight:
      case Op::kMaxPool2d: case Op::kMaxPool2dGrad: case Op::kAvgPool2d: case Op::kAvgPool2dGrad:
      case Op::kGroupedMatmul: case Op::kGroupedMatmulGradWeight: case Op::kQuantMatmul: {
        std::vector<const Node*> nodes;
        std::vector<const Values*> vals;
        for (size_t i = 0; i < n.inputs.size(); ++i) {
          nodes.push_back(&in_node(i));
          vals.push_back(&in(i));
        }
        return ir::is_window_op(n.op) ? ref::compute_window(n, nodes, vals) : ref::compute_nn(n, nodes, vals);
      }
    }
    // clang-format on
    throw Error("[ref] unhandled op");
  }

  /// The collectives, over the ranks of comm_, in double.
  Values collective(const Node& n, const std::vector<const Values*>& in) const {
    switch (n.op) {
      case Op::kAllReduce: {  // the results one after the other
        Values all;
        for (const Values* v : in) all.insert(all.end(), v->begin(), v->end());
        comm_->all_reduce_host_f64(all.data(), all.data(), static_cast<int64_t>(all.size()));
        return all;
      }
      case Op::kReduceScatter: {
        Values mine(static_cast<size_t>(n.numel()));
        comm_->reduce_scatter_host_f64(in[0]->data(), mine.data(), n.numel());
        return mine;
      }
      case Op::kAllGather: {
        Values all(static_cast<size_t>(n.numel()));
        comm_->all_gather_host_f64(in[0]->data(), all.data(), static_cast<int64_t>(in[0]->size()));
        return all;
      }
      default: {  // rank_shard: this rank's part
        const auto first = in[0]->begin() + comm_->rank() * n.numel();
        return Values(first, first + n.numel());
      }
    }
  }

  Graph graph_;
  std::vector<Values> values_;
  std::unordered_map<int32_t, RefBuffer*> bound_;
  dist::Communicator* comm_;
};

class RefBackend final : public Backend {
 public:
  const char* name() const override { return "ref"; }
  bool supports(ir::Op) const override { return true; }
  std::unique_ptr<Buffer> allocate(DType dtype, int64_t numel) override {
    return std::make_unique<RefBuffer>(dtype, numel);
  }
  void upload(Buffer& buffer, const void* host) override {
    Values& d = static_cast<RefBuffer&>(buffer).data;
    for (size_t i = 0; i < d.size(); ++i) {
      switch (buffer.dtype()) {
        case DType::kF32: d[i] = static_cast<const float*>(host)[i]; break;
        case DType::kI32: d[i] = static_cast<const int32_t*>(host)[i]; break;
        case DType::kBool: d[i] = static_cast<const uint8_t*>(host)[i] != 0; break;
        case DType::kBF16: d[i] = f32_from_bf16(static_cast<const uint16_t*>(host)[i]); break;
        case DType::kF16: d[i] = f32_from_f16(static_cast<const uint16_t*>(host)[i]); break;
        case DType::kI8: d[i] = static_cast<const int8_t*>(host)[i]; break;
      }
    }
  }
  void download(const Buffer& buffer, void* host) override {
    const Values& d = static_cast<const RefBuffer&>(buffer).data;
    for (size_t i = 0; i < d.size(); ++i) {
      switch (buffer.dtype()) {
        case DType::kF32: static_cast<float*>(host)[i] = static_cast<float>(d[i]); break;
        case DType::kI32: static_cast<int32_t*>(host)[i] = static_cast<int32_t>(d[i]); break;
        case DType::kBool: static_cast<uint8_t*>(host)[i] = d[i] != 0 ? 1 : 0; break;
        case DType::kBF16: static_cast<uint16_t*>(host)[i] = bf16_from_f32(static_cast<float>(d[i])); break;
        case DType::kF16: static_cast<uint16_t*>(host)[i] = f16_from_f32(static_cast<float>(d[i])); break;
        case DType::kI8: static_cast<int8_t*>(host)[i] = static_cast<int8_t>(d[i]); break;
      }
    }
  }
  std::unique_ptr<Executable> prepare(const Graph& graph, const Bindings& bindings,
                                      const PrepareOptions& options) override {
    require_communicator(graph, options.communicator, "ref");
    return std::make_unique<RefExecutableImpl>(graph, bindings, options.communicator);
  }
};

}  // namespace

std::vector<double>& ref_buffer_data(Buffer& buffer) { return static_cast<RefBuffer&>(buffer).data; }

std::unique_ptr<Backend> make_ref_backend() { return std::make_unique<RefBackend>(); }

}  // namespace tg::backend
