// Placement for the CUDA executable (see executable.h): places, views and one step per group.
#include <algorithm>
#include <cstring>
#include <optional>

#include "backend/cuda/codegen.h"
#include "backend/cuda/lowering.h"
#include "backend/cuda/fused_sinks.h"
#include "backend/cuda/plan_util.h"
#include "ir/strides.h"
#include "tensorgrad/errors.h"

namespace tg::backend::cuda {

using ir::Op;
using namespace plan_util;

namespace {

std::string node_ref(const ir::Graph& g, int32_t id) {
  const ir::Node& n = g.node(id);
  std::string s = std::string(ir::op_name(n.op)) + " %" + std::to_string(id);
  return n.name.empty() ? s : s + " '" + n.name + "'";
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

int64_t product(const Shape& s, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t d = from; d < to && d < s.size(); ++d) p *= s[d];
  return p;
}

}  // namespace

Place Lowering::own(int64_t bytes, const Shape& shape, Category category) {
  ArenaBuffer b;
  b.bytes = aligned(bytes);
  b.category = category;
  prog_.bufs.push_back(b);
  return Place{static_cast<int32_t>(prog_.bufs.size() - 1), 0, 0, contiguous_strides(shape)};
}

Place& Lowering::own_node(int32_t id) {
  const ir::Node& n = g_.node(id);
  Slot& s = slots_[static_cast<size_t>(id)];
  const Category c = n.stage == ir::Stage::kBackward    ? Category::kGradient
                     : n.stage == ir::Stage::kOptimizer ? Category::kOptimizer
                                                        : Category::kActivation;
  s.place = own(numel(s.shape) * dtype_size(s.dtype), s.shape, c);
  s.placed = true;
  return s.place;
}

Place Lowering::fixed_data(const void* host, int64_t bytes, const std::vector<int64_t>& strides) {
  prog_.fixed_mems.emplace_back(static_cast<size_t>(aligned(bytes)));
  prog_.fixed_mems.back().upload(host, static_cast<size_t>(bytes));
  prog_.memory.constants += bytes;
  return Place{-1, prog_.fixed_mems.back().get(), 0, strides};
}

Operand Lowering::operand(int32_t id) const {
  const Slot& s = slots_[static_cast<size_t>(id)];
  return Operand{s.dtype, s.shape, s.place.strides};
}

void Lowering::add_kernel(std::vector<int32_t> nodes, Launch launch, std::vector<Arg> args, int64_t flops) {
  if (launch.shared_bytes > info_.smem_per_block)
    throw DeviceError("[cuda] kernel " + launch.name + " needs " + std::to_string(launch.shared_bytes) +
                      " bytes of shared memory a block; " +
                      info_.name + " allows " + std::to_string(info_.smem_per_block));
  Step st;
  st.kind = Step::Kind::kKernel;
  st.nodes = std::move(nodes);
  st.launch = std::move(launch);
  st.args = std::move(args);
  st.flops = flops;
  prog_.steps.push_back(std::move(st));
}

void Lowering::add_zero(const Place& out, int64_t bytes) {
  if (bytes == 0) return;
  Step zero;
  zero.kind = Step::Kind::kMemset;
  zero.args = {{out}};
  zero.bytes = bytes;
  prog_.steps.push_back(std::move(zero));
}

Place Lowering::dense_copy(const Slot& in) {
  Place d = own(numel(in.shape) * dtype_size(in.dtype), in.shape, Category::kScratch);
  add_kernel({}, copy_kernel(kKernelName, Operand{in.dtype, in.shape, in.place.strides}), {{in.place}, {d}});
  return d;
}

Place Lowering::dense(int32_t input) {
  const Slot& in = slots_[static_cast<size_t>(input)];
  if (is_contiguous_strides(in.place.strides, in.shape)) return in.place;
  return dense_copy(in);
}

void Lowering::bind_leaves(const Bindings& bindings) {
  for (int32_t id = 0; id < g_.size(); ++id) {
    const ir::Node& n = g_.node(id);
    if (n.op != Op::kParam && n.op != Op::kState) continue;
    auto it = bindings.find(id);
    if (it == bindings.end() || it->second == nullptr) throw Error("[cuda] " + node_ref(g_, id) + " has no bound buffer");
    auto* buffer = dynamic_cast<CudaBuffer*>(it->second);
    if (!buffer) throw Error("[cuda] the buffer bound to " + node_ref(g_, id) + " was not allocated by the cuda backend");
    if (buffer->dtype() != n.dtype || buffer->numel() != n.numel())
      throw Error("[cuda] " + node_ref(g_, id) + " is " + dtype_name(n.dtype) + shape_str(n.shape) + " but its bound buffer holds " +
                  std::to_string(buffer->numel()) + " " + dtype_name(buffer->dtype()));
    Slot& s = slots_[static_cast<size_t>(id)];
    s.place = Place{-1, buffer->mem.get(), 0, contiguous_strides(n.shape)};
    s.placed = true;
    s.root = buffer;
    (n.op == Op::kParam ? prog_.memory.params : prog_.memory.optimizer_state) += n.numel() * dtype_size(n.dtype);
  }
}

/// Every input lives in one device block mirrored by pinned host memory: one upload a step.
void Lowering::plan_inputs() {
  for (int32_t id = 0; id < g_.size(); ++id) {
    const ir::Node& n = g_.node(id);
    if (n.op != Op::kInput) continue;
    prog_.input_offset[id] = prog_.input_bytes;
    prog_.input_bytes += aligned(n.numel() * dtype_size(n.dtype));
  }
  prog_.memory.inputs = prog_.input_bytes;
  if (prog_.input_bytes == 0) return;
  prog_.inputs = DeviceMemory(static_cast<size_t>(prog_.input_bytes));
  for (const auto& [id, offset] : prog_.input_offset) {
    Slot& s = slots_[static_cast<size_t>(id)];
    s.place = Place{-1, prog_.inputs.get(), offset, contiguous_strides(s.shape)};
    s.placed = true;
  }
}

void Lowering::plan_group(const passes::KernelGroup& group) {
  if (plan_norm_backward_at(fusion_.group_of[static_cast<size_t>(group.nodes.front())])) return;
  if (slots_[static_cast<size_t>(group.nodes.front())].placed) return;  // a bias add done by its product
  if (group.kind == passes::KernelGroup::Kind::kElementwise) plan_fused(group);
  else plan_single(group.nodes.front());
}

void Lowering::plan_fused(const passes::KernelGroup& group) {
  const std::vector<int32_t> inputs = group_inputs(g_, group);
  std::vector<std::vector<int64_t>> strides;
  std::vector<Arg> args;
  for (int32_t in : inputs) {
    strides.push_back(slots_[static_cast<size_t>(in)].place.strides);
    args.push_back({slots_[static_cast<size_t>(in)].place});
  }
  const int32_t gi = fusion_.group_of[static_cast<size_t>(group.nodes.front())];
  std::vector<int32_t> sinks;
  for (int32_t id : group.nodes)
    if (g_.node(id).op == Op::kSum) sinks.push_back(id);
  for (int32_t out : group.outputs) {
    if (g_.node(out).op == Op::kSum) continue;  // sinks come last, in node order
    int32_t target = -1;
    if (in_place_target(out, gi, target)) {
      Slot& s = slots_[static_cast<size_t>(out)];
      s.place = slots_[static_cast<size_t>(target)].place;
      s.placed = true;
      for (size_t u = 0; u < g_.updates.size(); ++u)
        if (g_.updates[u].value == out) in_place_[u] = 1;
      args.push_back({s.place});
    } else {
      args.push_back({own_node(out)});
    }
  }
  if (!sinks.empty()) {  // sums accumulated inside the group: one kernel of its own kind
    for (int32_t sink : sinks) args.push_back({own_node(sink)});
    add_kernel(group.nodes, fused_sinks_kernel(g_, group, strides, kKernelName), std::move(args));
    return;
  }
  GroupKernel k = fused_group_kernel(g_, group, strides, kKernelName);
  Launch l;
  l.name = k.name;
  l.source = std::move(k.source);
  const int64_t n = g_.node(group.nodes.front()).numel();
  fused_group_launch(l, n);
  const size_t arg_count = args.size();
  add_kernel(group.nodes, std::move(l), std::move(args));
  Step& st = prog_.steps.back();
  st.launch_n = n;
  st.groups = {gi};
  st.group_strides = {strides};
  st.group_reads = {inputs.size()};
  st.group_args = {arg_count};
}

void Lowering::plan_single(int32_t id) {
  const ir::Node& n = g_.node(id);
  Slot& s = slots_[static_cast<size_t>(id)];
  auto in = [&](size_t k) -> Slot& { return slots_[static_cast<size_t>(n.inputs[k])]; };
  auto view = [&](Place p) {
    s.place = std::move(p);
    s.placed = true;
    s.root = in(0).root;
  };
  const Arg err{{}, true};
  switch (n.op) {
    case Op::kParam: case Op::kState: case Op::kInput:
      return;  // placed up front
    case Op::kConstant: {
      const auto& v = n.attrs.values;
      if (v.size() == 1 || n.numel() == 1) {  // a fill: one element read with zero strides
        const double x = v.at(0);
        const float f = static_cast<float>(x);
        const int32_t i = static_cast<int32_t>(x);
        const uint8_t b = x != 0;
        const void* p = n.dtype == DType::kF32 ? static_cast<const void*>(&f) : n.dtype == DType::kI32 ? static_cast<const void*>(&i) : &b;
        s.place = fixed_data(p, dtype_size(n.dtype), std::vector<int64_t>(n.shape.size(), 0));
      } else {
        std::vector<std::byte> host(static_cast<size_t>(n.numel() * dtype_size(n.dtype)));
        for (size_t k = 0; k < v.size(); ++k) {
          if (n.dtype == DType::kF32) reinterpret_cast<float*>(host.data())[k] = static_cast<float>(v[k]);
          else if (n.dtype == DType::kI32) reinterpret_cast<int32_t*>(host.data())[k] = static_cast<int32_t>(v[k]);
          else reinterpret_cast<uint8_t*>(host.data())[k] = v[k] != 0;
        }
        s.place = fixed_data(host.data(), static_cast<int64_t>(host.size()), contiguous_strides(n.shape));
      }
      s.placed = true;
      return;
    }
    case Op::kArange: {
      std::vector<std::byte> host(static_cast<size_t>(n.numel() * dtype_size(n.dtype)));
      for (int64_t k = 0; k < n.numel(); ++k) {
        const double x = n.attrs.values[0] + static_cast<double>(k) * n.attrs.values[1];
        if (n.dtype == DType::kF32) reinterpret_cast<float*>(host.data())[k] = static_cast<float>(x);
        else reinterpret_cast<int32_t*>(host.data())[k] = static_cast<int32_t>(x);
      }
      s.place = fixed_data(host.data(), static_cast<int64_t>(host.size()), contiguous_strides(n.shape));
      s.placed = true;
      return;
    }
    case Op::kReshape: {
      if (auto st = reshaped_strides(in(0).shape, in(0).place.strides, n.shape)) {
        Place p = in(0).place;
        p.strides = *st;
        view(std::move(p));
      } else {
        Place p = dense_copy(in(0));
        p.strides = contiguous_strides(n.shape);
        view(std::move(p));
        s.root = nullptr;
      }
      return;
    }
    case Op::kResult: {
      if (s.placed) return;  // placed by its node's step (a backend-sized result: selective_scan's saved)
      // Its part of the multi-output node's dense allocation.
      Place p = in(0).place;
      p.offset += ir::result_offset(g_.node(n.inputs[0]), static_cast<size_t>(n.attrs.axes[0])) * 4;
      p.strides = contiguous_strides(n.shape);
      view(std::move(p));
      return;
    }
    case Op::kPermute: {
      Place p = in(0).place;
      p.strides.clear();
      for (int64_t a : n.attrs.axes) p.strides.push_back(in(0).place.strides[static_cast<size_t>(a)]);
      view(std::move(p));
      return;
    }
    case Op::kBroadcastTo: {
      Place p = in(0).place;
      const Shape& from = in(0).shape;
      p.strides.assign(n.shape.size(), 0);
      const size_t lead = n.shape.size() - from.size();
      for (size_t d = 0; d < from.size(); ++d)
        p.strides[lead + d] = from[d] == n.shape[lead + d] ? in(0).place.strides[d] : 0;
      view(std::move(p));
      return;
    }
    case Op::kSlice: {
      Place p = in(0).place;
      const auto axis = static_cast<size_t>(n.attrs.axes[0]);
      const auto start = static_cast<int64_t>(n.attrs.values[0]), step = static_cast<int64_t>(n.attrs.values[1]);
      p.offset += start * p.strides[axis] * dtype_size(n.dtype);
      p.strides[axis] *= step;
      view(std::move(p));
      return;
    }
    default:
      plan_kernel(id);
      return;
  }
}

void Lowering::plan_kernel(int32_t id) {
  const ir::Node& n = g_.node(id);
  Slot& s = slots_[static_cast<size_t>(id)];
  auto in = [&](size_t k) -> Slot& { return slots_[static_cast<size_t>(n.inputs[k])]; };
  auto view = [&](Place p) {
    s.place = std::move(p);
    s.placed = true;
    s.root = in(0).root;
  };
  const Arg err{{}, true};
  switch (n.op) {
    case Op::kUnslice: {
      const Place out = own_node(id);
      add_kernel({id}, unslice_kernel(kKernelName, operand(n.inputs[0]), n.shape, static_cast<int>(n.attrs.axes[0]),
                                      static_cast<int64_t>(n.attrs.values[0]), static_cast<int64_t>(n.attrs.values[1])),
                 {{in(0).place}, {out}});
      return;
    }
    case Op::kConcat: {
      if (const int32_t grad = packed_qkv_source(id); grad >= 0) {  // written in place by attention_grad
        Place p = slots_[static_cast<size_t>(grad)].place;
        p.strides = contiguous_strides(n.shape);
        view(std::move(p));
        return;
      }
      std::vector<Operand> ops;
      std::vector<Arg> args;
      for (size_t k = 0; k < n.inputs.size(); ++k) {
        ops.push_back(operand(n.inputs[k]));
        args.push_back({in(k).place});
      }
      args.push_back({own_node(id)});
      add_kernel({id}, concat_kernel(kKernelName, ops, n.shape, static_cast<int>(n.attrs.axes[0])), std::move(args));
      return;
    }
    case Op::kSum: case Op::kMax: case Op::kMin: case Op::kArgmax: {
      std::vector<int> axes(n.attrs.axes.begin(), n.attrs.axes.end());
      const char* op = n.op == Op::kSum ? "sum" : n.op == Op::kMax ? "max" : n.op == Op::kMin ? "min" : "argmax";
      const Place x = in(0).place;
      add_kernel({id}, reduce_kernel(kKernelName, op, operand(n.inputs[0]), axes, info_), {{x}, {own_node(id)}});
      return;
    }
    case Op::kCumsum:
      add_kernel({id}, cumsum_kernel(kKernelName, operand(n.inputs[0]), static_cast<int>(n.attrs.axes[0]), n.attrs.reverse),
                 {{in(0).place}, {own_node(id)}});
      return;
    case Op::kMatmul:
      plan_matmul(id);
      return;
    case Op::kGather: {
      const Launch l = gather_kernel(kKernelName, operand(n.inputs[0]), operand(n.inputs[1]), static_cast<int>(n.attrs.axes[0]));
      add_kernel({id}, l, {{in(0).place}, {in(1).place}, {own_node(id)}, err});
      return;
    }
    case Op::kUpdateSlice:
      plan_update_slice(id);
      return;
    case Op::kScatterAdd: {
      const Place out = own_node(id);
      add_zero(out, n.numel() * dtype_size(n.dtype));
      add_kernel({id}, scatter_add_kernel(kKernelName, operand(n.inputs[0]), operand(n.inputs[1]), n.shape, static_cast<int>(n.attrs.axes[0])),
                 {{in(0).place}, {in(1).place}, {out}, err});
      return;
    }
    case Op::kSoftmax: case Op::kLogSoftmax: {
      const Place x = dense(n.inputs[0]);
      const auto axis = static_cast<size_t>(n.attrs.axes[0]);
      const int64_t t = n.shape.size() >= 2 ? n.shape[n.shape.size() - 2] : 1;
      add_kernel({id}, softmax_kernel(kKernelName, product(n.shape, 0, axis), n.shape[axis], product(n.shape, axis + 1, n.shape.size()),
                                      n.op == Op::kLogSoftmax, n.attrs.causal, t),
                 {{x}, {own_node(id)}});
      return;
    }
    case Op::kCrossEntropy: case Op::kCrossEntropyGrad:
      plan_cross_entropy(id);
      return;
    case Op::kLayerNorm: case Op::kRmsNorm: case Op::kLayerNormGrad: case Op::kRmsNormGrad: {
      if ((n.op == Op::kLayerNorm || n.op == Op::kRmsNorm) && plan_norm_forward(id)) return;
      const int64_t cols = n.shape.back(), rows = n.numel() / std::max<int64_t>(cols, 1);
      const double eps = n.attrs.values.at(0);
      const Place x = dense(n.inputs[0]);
      if (n.op == Op::kLayerNorm || n.op == Op::kRmsNorm) {
        add_kernel({id}, n.op == Op::kLayerNorm ? layer_norm_kernel(kKernelName, rows, cols, eps) : rms_norm_kernel(kKernelName, rows, cols, eps),
                   {{x}, {own_node(id)}});
      } else {
        const Place dy = dense(n.inputs[1]);
        add_kernel({id},
                   n.op == Op::kLayerNormGrad ? layer_norm_grad_kernel(kKernelName, rows, cols, eps)
                                               : rms_norm_grad_kernel(kKernelName, rows, cols, eps),
                   {{x}, {dy}, {own_node(id)}});
      }
      return;
    }
    case Op::kAttentionAt:
      add_kernel({id},
                 attention_at_kernel(kKernelName, operand(n.inputs[0]), operand(n.inputs[1]), operand(n.inputs[2]),
                                     operand(n.inputs[3]), n.attrs.values.at(0)),
                 {{in(0).place}, {in(1).place}, {in(2).place}, {in(3).place}, {own_node(id)}, err});
      return;
    case Op::kSample: {
      const Place logits = dense(n.inputs[0]);
      const int64_t vocab = in(0).shape.back();
      add_kernel({id}, sample_kernel(kKernelName, n.numel(), vocab),
                 {{logits}, {dense(n.inputs[1])}, {dense(n.inputs[2])}, {own_node(id)}});
      return;
    }
    case Op::kRandom:
      add_kernel({id}, random_kernel(kKernelName, n.numel(), n.attrs.seed), {{in(0).place}, {own_node(id)}});
      return;
    case Op::kDropout:
      add_kernel({id}, dropout_kernel(kKernelName, operand(n.inputs[0]), n.attrs.values.at(0), n.attrs.seed),
                 {{in(0).place}, {in(1).place}, {own_node(id)}});
      return;
    case Op::kAttention: case Op::kAttentionGrad:
      plan_attention(id);
      return;
    case Op::kSelectiveScan: case Op::kSelectiveScanGrad:
      plan_scan(id);
      return;
    default:
      throw Error(std::string("[cuda] no kernel for ") + ir::op_name(n.op) + " (" + node_ref(g_, id) + ")");
  }
}

/// A KV-cache write (update_slice): in place over the state when nothing else reads it, beside
/// a sibling cache written at the same offsets.
void Lowering::plan_update_slice(int32_t id) {
  const ir::Node& n = g_.node(id);
  Slot& s = slots_[static_cast<size_t>(id)];
  auto in = [&](size_t k) -> Slot& { return slots_[static_cast<size_t>(n.inputs[k])]; };
  const Arg err{{}, true};
  // A cache written back over itself (tg::assign(cache, update_slice(cache, rows, pos)))
  // and read by nothing else: only the new rows are written, into the state's own buffer.
  const int32_t dst = n.inputs[0];
  size_t update = g_.updates.size();
  for (size_t u = 0; u < g_.updates.size(); ++u)
    if (g_.updates[u].value == id && g_.updates[u].target == dst) update = u;
  const Slot& ds = slots_[static_cast<size_t>(dst)];
  // Whether update_slice node `u` (its state update at index `ui`) can write its cache in place.
  auto in_place = [&](int32_t u, size_t ui) {
    const int32_t d = g_.node(u).inputs[0];
    const Slot& dsl = slots_[static_cast<size_t>(d)];
    return options_.reuse_memory && ui < g_.updates.size() && consumers_[static_cast<size_t>(d)].size() == 1 &&
           std::count_if(g_.updates.begin(), g_.updates.end(), [&](const ir::Graph::Update& x) { return x.target == d; }) == 1 &&
           is_contiguous_strides(dsl.place.strides, dsl.shape);
  };
  if (in_place(id, update)) {
    // A sibling written at the same offsets with the same layout (the layer's other cache)
    // rides in the same launch.
    size_t pair = g_.updates.size();
    for (size_t u = 0; u < g_.updates.size() && pair == g_.updates.size(); ++u) {
      const int32_t v = g_.updates[u].value;
      if (v == id || v < 0 || g_.node(v).op != Op::kUpdateSlice || g_.updates[u].target != g_.node(v).inputs[0]) continue;
      const ir::Node& vn = g_.node(v);
      const Slot &src2 = slots_[static_cast<size_t>(vn.inputs[1])], &dst2 = slots_[static_cast<size_t>(vn.inputs[0])];
      if (vn.inputs[2] == n.inputs[2] && vn.attrs.axes == n.attrs.axes && !slots_[static_cast<size_t>(v)].placed && src2.placed &&
          dst2.shape == ds.shape && dst2.place.strides == ds.place.strides && src2.shape == in(1).shape &&
          src2.place.strides == in(1).place.strides && src2.dtype == in(1).dtype && in_place(v, u))
        pair = u;
    }
    std::vector<Arg> args{{in(1).place}, {in(2).place}, {ds.place}};
    std::vector<int32_t> nodes{id};
    if (pair < g_.updates.size()) {
      const int32_t v = g_.updates[pair].value;
      const ir::Node& vn = g_.node(v);
      Slot& vs = slots_[static_cast<size_t>(v)];
      const Slot& dst2 = slots_[static_cast<size_t>(vn.inputs[0])];
      args.push_back({slots_[static_cast<size_t>(vn.inputs[1])].place});
      args.push_back({dst2.place});
      nodes.push_back(v);
      vs.place = dst2.place;
      vs.placed = true;
      vs.root = dst2.root;
      in_place_[pair] = 1;
    }
    args.push_back(err);
    add_kernel(nodes, update_rows_kernel(kKernelName, operand(dst), operand(n.inputs[1]), operand(n.inputs[2]),
                                         static_cast<int>(n.attrs.axes[0]), nodes.size() == 2),
               std::move(args));
    s.place = ds.place;
    s.placed = true;
    s.root = ds.root;
    in_place_[update] = 1;
    return;
  }
  add_kernel({id}, update_slice_kernel(kKernelName, operand(n.inputs[0]), operand(n.inputs[1]), operand(n.inputs[2]),
                                       static_cast<int>(n.attrs.axes[0])),
             {{in(0).place}, {in(1).place}, {in(2).place}, {own_node(id)}, err});
  return;
}

/// Cross entropy and its gradient, which writes its rows padded apart (padded_row) with zeros
/// in the padding: a product may read them as a zero-padded reduction axis.
void Lowering::plan_cross_entropy(int32_t id) {
  const ir::Node& n = g_.node(id);
  Slot& s = slots_[static_cast<size_t>(id)];
  auto in = [&](size_t k) -> Slot& { return slots_[static_cast<size_t>(n.inputs[k])]; };
  const Arg err{{}, true};
  const Shape& ls = in(0).shape;
  const int64_t cols = ls.back(), rows = numel(ls) / std::max<int64_t>(cols, 1);
  const auto ignore = static_cast<int64_t>(n.attrs.values.at(0));
  // Logits may arrive with padded rows (padded_row); anything else is made dense.
  int64_t ld = row_stride_of(ls, in(0).place.strides);
  const Place logits = ld > 0 ? in(0).place : dense(n.inputs[0]);
  if (ld < 0) ld = cols;
  const Place targets = dense(n.inputs[1]);
  if (n.op == Op::kCrossEntropy) {
    add_kernel({id}, cross_entropy_kernel(kKernelName, rows, cols, ignore, ld), {{logits}, {targets}, {own_node(id)}, err});
  } else {
    const Place dloss = dense(n.inputs[2]);
    const int64_t out_ld = padded_row(cols);
    Place out = own(rows * out_ld * 4, n.shape, Category::kGradient);
    out.strides = row_padded_strides(n.shape, out_ld);
    s.place = out;
    s.placed = true;
    if (out_ld != cols) zero_padded_[out.buf] = {out_ld, cols};
    add_kernel({id}, cross_entropy_grad_kernel(kKernelName, rows, cols, ignore, ld, out_ld),
               {{logits}, {targets}, {dloss}, {out}, err});
  }
  return;
}


bool Lowering::escapes(int32_t x) const {
  return std::find(g_.outputs.begin(), g_.outputs.end(), x) != g_.outputs.end() ||
         std::any_of(g_.updates.begin(), g_.updates.end(), [&](const ir::Graph::Update& u) { return u.value == x; });
}

bool Lowering::in_place_target(int32_t value, int32_t group, int32_t& target) const {
  if (!options_.reuse_memory) return false;
  int updates = 0;
  for (const ir::Graph::Update& u : g_.updates)
    if (u.value == value) {
      ++updates;
      target = u.target;
    }
  if (updates != 1 || target == value) return false;
  const Slot& t = slots_[static_cast<size_t>(target)];
  if (!is_contiguous_strides(t.place.strides, t.shape) || t.shape != slots_[static_cast<size_t>(value)].shape) return false;
  // Every reader of the target's memory, through any chain of views, runs in this group or an
  // earlier one; this group reads it only element for element.
  std::vector<int32_t> stack{target};
  while (!stack.empty()) {
    const int32_t x = stack.back();
    stack.pop_back();
    if (std::find(g_.outputs.begin(), g_.outputs.end(), x) != g_.outputs.end()) return false;
    for (const ir::Graph::Update& u : g_.updates)
      if (u.value == x && x != value) return false;  // another update copies the old value
    for (int32_t c : consumers_[static_cast<size_t>(x)]) {
      const Op op = g_.node(c).op;
      const int32_t cg = fusion_.group_of[static_cast<size_t>(c)];
      if (op == Op::kPermute || op == Op::kBroadcastTo || op == Op::kSlice || op == Op::kReshape) {
        if (cg > group) return false;  // conservatively: a view planned later may copy
        stack.push_back(c);
        continue;
      }
      if (cg > group) return false;
      if (cg == group) {
        const Slot& in = slots_[static_cast<size_t>(x)];
        if (in.shape != t.shape || !is_contiguous_strides(in.place.strides, in.shape) || in.place.offset != 0) return false;
      }
    }
  }
  return true;
}

void Lowering::plan_outputs_and_updates() {
  std::vector<const Buffer*> targets;
  for (size_t i = 0; i < g_.updates.size(); ++i)
    if (!in_place_[i]) targets.push_back(slots_[static_cast<size_t>(g_.updates[i].target)].root);
  auto overwritten = [&](const Slot& s) { return s.root && std::find(targets.begin(), targets.end(), s.root) != targets.end(); };
  // Values read after the step, or copied over a buffer an update writes, are made dense in
  // their own arena buffer first when they are views or alias an updated buffer.
  auto settle = [&](int32_t id) -> Place {
    const Slot& s = slots_[static_cast<size_t>(id)];
    Place p = s.place;
    if (!is_contiguous_strides(p.strides, s.shape) || overwritten(s)) p = dense_copy(s);
    if (p.buf >= 0) prog_.bufs[static_cast<size_t>(p.buf)].to_end = true;
    return p;
  };
  for (int32_t out : g_.outputs)
    if (!prog_.outputs.count(out)) prog_.outputs[out] = settle(out);
  for (size_t i = 0; i < g_.updates.size(); ++i) {
    const ir::Graph::Update& u = g_.updates[i];
    const Slot& t = slots_[static_cast<size_t>(u.target)];
    if (u.value == u.target || in_place_[i]) continue;
    prog_.update_copies.push_back({t.place, settle(u.value), t.place.strides.empty() ? dtype_size(t.dtype) : numel(t.shape) * dtype_size(t.dtype)});
  }
}

}  // namespace tg::backend::cuda
