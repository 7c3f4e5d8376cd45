// Placement for the CUDA executable (see executable.h): places, views and one step per group.
#include <algorithm>
#include <cstring>
#include <optional>

#include "backend/cuda/codegen.h"
#include "backend/cuda/executable.h"
#include "backend/cuda/fused_sinks.h"
#include "backend/cuda/small_matmul.h"
#include "backend/strides.h"
#include "tensorgrad/errors.h"

namespace tg::backend::cuda {

using ir::Op;

namespace {

/// Every generated kernel has this name: each lives in its own module, and identical sources
/// (the same shapes in every layer) then compile, cache and load once.
constexpr const char* kKernelName = "tg_kernel";

int64_t aligned(int64_t bytes) { return (std::max<int64_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign; }

std::string node_ref(const ir::Graph& g, int32_t id) {
  const ir::Node& n = g.node(id);
  std::string s = std::string(ir::op_name(n.op)) + " %" + std::to_string(id);
  return n.name.empty() ? s : s + " '" + n.name + "'";
}

/// Rows this long whose length is not a multiple of 64 are laid out 64-aligned apart (a
/// vocabulary of 50257 in rows of 50304): the products reading and writing them then run on
/// cuBLASLt's aligned kernels, ~3x faster on an H200 for GPT-2's head.
int64_t padded_row(int64_t cols) { return cols >= 1024 && cols % 64 != 0 ? (cols + 63) / 64 * 64 : cols; }

/// Strides of `shape` with its rows `ld` elements apart and everything else dense.
std::vector<int64_t> row_padded_strides(const Shape& shape, int64_t ld) {
  std::vector<int64_t> st(shape.size(), 1);
  if (shape.size() >= 2) st[shape.size() - 2] = ld;
  for (size_t d = shape.size() - 1; d-- > 1;) st[d - 1] = st[d] * shape[d];
  return st;
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

CUdeviceptr CudaExecutable::address(const Place& p) const {
  const CUdeviceptr base = p.buf >= 0 ? arena_.get() + static_cast<CUdeviceptr>(bufs_[static_cast<size_t>(p.buf)].offset) : p.fixed;
  return base + static_cast<CUdeviceptr>(p.offset);
}

CudaExecutable::Place CudaExecutable::own(const ir::Node& n, int64_t bytes, const Shape& shape, Category category) {
  (void)n;
  ArenaBuffer b;
  b.bytes = aligned(bytes);
  b.category = category;
  bufs_.push_back(b);
  return Place{static_cast<int32_t>(bufs_.size() - 1), 0, 0, contiguous_strides(shape)};
}

CudaExecutable::Place& CudaExecutable::own_node(const ir::Graph& g, int32_t id) {
  const ir::Node& n = g.node(id);
  Slot& s = slots_[static_cast<size_t>(id)];
  const Category c = n.stage == ir::Stage::kBackward    ? Category::kGradient
                     : n.stage == ir::Stage::kOptimizer ? Category::kOptimizer
                                                        : Category::kActivation;
  s.place = own(n, numel(s.shape) * dtype_size(s.dtype), s.shape, c);
  s.placed = true;
  return s.place;
}

CudaExecutable::Place CudaExecutable::fixed_data(const void* host, int64_t bytes, const std::vector<int64_t>& strides) {
  fixed_mems_.emplace_back(static_cast<size_t>(aligned(bytes)));
  fixed_mems_.back().upload(host, static_cast<size_t>(bytes));
  memory_.constants += bytes;
  return Place{-1, fixed_mems_.back().get(), 0, strides};
}

Operand CudaExecutable::operand(int32_t id) const {
  const Slot& s = slots_[static_cast<size_t>(id)];
  return Operand{s.dtype, s.shape, s.place.strides};
}

void CudaExecutable::add_kernel(std::vector<int32_t> nodes, Launch launch, std::vector<Arg> args, int64_t flops) {
  Step st;
  st.kind = Step::Kind::kKernel;
  st.nodes = std::move(nodes);
  st.launch = std::move(launch);
  st.args = std::move(args);
  st.flops = flops;
  steps_.push_back(std::move(st));
}

CudaExecutable::Place CudaExecutable::dense_copy(const ir::Node& consumer, const Slot& in) {
  Place d = own(consumer, numel(in.shape) * dtype_size(in.dtype), in.shape, Category::kScratch);
  add_kernel({}, copy_kernel(kKernelName, Operand{in.dtype, in.shape, in.place.strides}), {{in.place}, {d}});
  return d;
}

CudaExecutable::Place CudaExecutable::dense(const ir::Graph& g, int32_t consumer, int32_t input) {
  const Slot& in = slots_[static_cast<size_t>(input)];
  if (is_contiguous_strides(in.place.strides, in.shape)) return in.place;
  return dense_copy(g.node(consumer), in);
}

void CudaExecutable::bind_leaves(const ir::Graph& g, const Bindings& bindings) {
  for (int32_t id = 0; id < g.size(); ++id) {
    const ir::Node& n = g.node(id);
    if (n.op != Op::kParam && n.op != Op::kState) continue;
    auto it = bindings.find(id);
    if (it == bindings.end() || it->second == nullptr) throw Error("[cuda] " + node_ref(g, id) + " has no bound buffer");
    auto* buffer = dynamic_cast<CudaBuffer*>(it->second);
    if (!buffer) throw Error("[cuda] the buffer bound to " + node_ref(g, id) + " was not allocated by the cuda backend");
    if (buffer->dtype() != n.dtype || buffer->numel() != n.numel())
      throw Error("[cuda] " + node_ref(g, id) + " is " + dtype_name(n.dtype) + shape_str(n.shape) + " but its bound buffer holds " +
                  std::to_string(buffer->numel()) + " " + dtype_name(buffer->dtype()));
    Slot& s = slots_[static_cast<size_t>(id)];
    s.place = Place{-1, buffer->mem.get(), 0, contiguous_strides(n.shape)};
    s.placed = true;
    s.root = buffer;
    (n.op == Op::kParam ? memory_.params : memory_.optimizer_state) += n.numel() * dtype_size(n.dtype);
  }
}

/// Every input lives in one device block mirrored by pinned host memory: one upload a step.
void CudaExecutable::plan_inputs(const ir::Graph& g) {
  for (int32_t id = 0; id < g.size(); ++id) {
    const ir::Node& n = g.node(id);
    if (n.op != Op::kInput) continue;
    input_offset_[id] = input_bytes_;
    input_bytes_ += aligned(n.numel() * dtype_size(n.dtype));
  }
  memory_.inputs = input_bytes_;
  if (input_bytes_ == 0) return;
  inputs_ = DeviceMemory(static_cast<size_t>(input_bytes_));
  for (void*& staging : staging_) {
    check(driver().cuMemAllocHost(&staging, static_cast<size_t>(input_bytes_)), "cuMemAllocHost (input staging)");
    std::memset(staging, 0, static_cast<size_t>(input_bytes_));
  }
  for (const auto& [id, offset] : input_offset_) {
    Slot& s = slots_[static_cast<size_t>(id)];
    s.place = Place{-1, inputs_.get(), offset, contiguous_strides(s.shape)};
    s.placed = true;
  }
}

void CudaExecutable::plan_group(const ir::Graph& g, const passes::KernelGroup& group) {
  if (plan_norm_backward_at(g, fusion_.group_of[static_cast<size_t>(group.nodes.front())])) return;
  if (slots_[static_cast<size_t>(group.nodes.front())].placed) return;  // a bias add done by its product
  if (group.kind == passes::KernelGroup::Kind::kElementwise) plan_fused(g, group);
  else plan_single(g, group.nodes.front());
}

void CudaExecutable::plan_fused(const ir::Graph& g, const passes::KernelGroup& group) {
  const std::vector<int32_t> inputs = group_inputs(g, group);
  std::vector<std::vector<int64_t>> strides;
  std::vector<Arg> args;
  for (int32_t in : inputs) {
    strides.push_back(slots_[static_cast<size_t>(in)].place.strides);
    args.push_back({slots_[static_cast<size_t>(in)].place});
  }
  const int32_t gi = fusion_.group_of[static_cast<size_t>(group.nodes.front())];
  std::vector<int32_t> sinks;
  for (int32_t id : group.nodes)
    if (g.node(id).op == Op::kSum) sinks.push_back(id);
  for (int32_t out : group.outputs) {
    if (g.node(out).op == Op::kSum) continue;  // sinks come last, in node order
    int32_t target = -1;
    if (in_place_target(g, out, gi, target)) {
      Slot& s = slots_[static_cast<size_t>(out)];
      s.place = slots_[static_cast<size_t>(target)].place;
      s.placed = true;
      for (size_t u = 0; u < g.updates.size(); ++u)
        if (g.updates[u].value == out) in_place_[u] = 1;
      args.push_back({s.place});
    } else {
      args.push_back({own_node(g, out)});
    }
  }
  if (!sinks.empty()) {  // sums accumulated inside the group: one kernel of its own kind
    for (int32_t sink : sinks) args.push_back({own_node(g, sink)});
    add_kernel(group.nodes, fused_sinks_kernel(g, group, strides, kKernelName), std::move(args));
    return;
  }
  GroupKernel k = fused_group_kernel(g, group, strides, kKernelName);
  Launch l;
  l.name = k.name;
  l.source = std::move(k.source);
  const int64_t n = g.node(group.nodes.front()).numel();
  fused_group_launch(l, n);
  const size_t arg_count = args.size();
  add_kernel(group.nodes, std::move(l), std::move(args));
  Step& st = steps_.back();
  st.launch_n = n;
  st.groups = {gi};
  st.group_strides = {strides};
  st.group_reads = {inputs.size()};
  st.group_args = {arg_count};
}

void CudaExecutable::plan_single(const ir::Graph& g, int32_t id) {
  const ir::Node& n = g.node(id);
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
      // One part of an attention gradient written [B, T, H, D] (grads_bthd), seen as [B, H, T, D].
      if (const ir::Node& src = g.node(n.inputs[0]); src.op == Op::kSlice && bthd_grads_.count(src.inputs[0])) {
        Place p = in(0).place;
        const int64_t H = n.shape.at(1), T = n.shape.at(2), D = n.shape.at(3);
        p.strides = {T * H * D, D, H * D, 1};
        const int32_t grad = src.inputs[0];
        if (std::any_of(packed_concats_.begin(), packed_concats_.end(), [&](const auto& e) { return e.second == grad; })) {
          // Packed rows [dq | dk | dv] (AttentionShape::grads_packed): this part's columns.
          const Shape& qs = g.node(g.node(grad).inputs[0]).shape;
          const Shape& ks = g.node(g.node(grad).inputs[1]).shape;
          const auto start = static_cast<int64_t>(src.attrs.values.at(0));
          const int64_t rs = (qs[1] + 2 * ks[1]) * D, col = start == 0 ? 0 : start == numel(qs) ? qs[1] * D : (qs[1] + ks[1]) * D;
          p.offset = slots_[static_cast<size_t>(grad)].place.offset + col * 4;
          p.strides = {T * rs, D, rs, 1};
        }
        view(std::move(p));
        return;
      }
      if (auto st = reshaped_strides(in(0).shape, in(0).place.strides, n.shape)) {
        Place p = in(0).place;
        p.strides = *st;
        view(std::move(p));
      } else {
        Place p = dense_copy(n, in(0));
        p.strides = contiguous_strides(n.shape);
        view(std::move(p));
        s.root = nullptr;
      }
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
    case Op::kUnslice: {
      const Place out = own_node(g, id);
      add_kernel({id}, unslice_kernel(kKernelName, operand(n.inputs[0]), n.shape, static_cast<int>(n.attrs.axes[0]),
                                      static_cast<int64_t>(n.attrs.values[0]), static_cast<int64_t>(n.attrs.values[1])),
                 {{in(0).place}, {out}});
      return;
    }
    case Op::kConcat: {
      if (auto it = packed_concats_.find(id); it != packed_concats_.end()) {  // written in place by attention_grad
        Place p = slots_[static_cast<size_t>(it->second)].place;
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
      args.push_back({own_node(g, id)});
      add_kernel({id}, concat_kernel(kKernelName, ops, n.shape, static_cast<int>(n.attrs.axes[0])), std::move(args));
      return;
    }
    case Op::kSum: case Op::kMax: case Op::kMin: case Op::kArgmax: {
      std::vector<int> axes(n.attrs.axes.begin(), n.attrs.axes.end());
      const char* op = n.op == Op::kSum ? "sum" : n.op == Op::kMax ? "max" : n.op == Op::kMin ? "min" : "argmax";
      const Place x = in(0).place;
      add_kernel({id}, reduce_kernel(kKernelName, op, operand(n.inputs[0]), axes), {{x}, {own_node(g, id)}});
      return;
    }
    case Op::kMatmul:
      plan_matmul(g, id);
      return;
    case Op::kGather: {
      const Launch l = gather_kernel(kKernelName, operand(n.inputs[0]), operand(n.inputs[1]), static_cast<int>(n.attrs.axes[0]));
      add_kernel({id}, l, {{in(0).place}, {in(1).place}, {own_node(g, id)}, err});
      return;
    }
    case Op::kUpdateSlice: {
      // A cache written back over itself (tg::assign(cache, update_slice(cache, rows, pos)))
      // and read by nothing else: only the new rows are written, into the state's own buffer.
      const int32_t dst = n.inputs[0];
      size_t update = g.updates.size();
      for (size_t u = 0; u < g.updates.size(); ++u)
        if (g.updates[u].value == id && g.updates[u].target == dst) update = u;
      const Slot& ds = slots_[static_cast<size_t>(dst)];
      if (options_.reuse_memory && update < g.updates.size() && consumers_[static_cast<size_t>(dst)].size() == 1 &&
          std::count_if(g.updates.begin(), g.updates.end(), [&](const ir::Graph::Update& u) { return u.target == dst; }) == 1 &&
          is_contiguous_strides(ds.place.strides, ds.shape)) {
        add_kernel({id}, update_rows_kernel(kKernelName, operand(dst), operand(n.inputs[1]), operand(n.inputs[2]),
                                            static_cast<int>(n.attrs.axes[0])),
                   {{in(1).place}, {in(2).place}, {ds.place}, err});
        s.place = ds.place;
        s.placed = true;
        s.root = ds.root;
        in_place_[update] = 1;
        return;
      }
      add_kernel({id}, update_slice_kernel(kKernelName, operand(n.inputs[0]), operand(n.inputs[1]), operand(n.inputs[2]),
                                           static_cast<int>(n.attrs.axes[0])),
                 {{in(0).place}, {in(1).place}, {in(2).place}, {own_node(g, id)}, err});
      return;
    }
    case Op::kScatterAdd: {
      const Place out = own_node(g, id);
      Step zero;
      zero.kind = Step::Kind::kMemset;
      zero.args = {{out}};
      zero.bytes = n.numel() * dtype_size(n.dtype);
      steps_.push_back(std::move(zero));
      add_kernel({id}, scatter_add_kernel(kKernelName, operand(n.inputs[0]), operand(n.inputs[1]), n.shape, static_cast<int>(n.attrs.axes[0])),
                 {{in(0).place}, {in(1).place}, {out}, err});
      return;
    }
    case Op::kSoftmax: case Op::kLogSoftmax: {
      const Place x = dense(g, id, n.inputs[0]);
      const auto axis = static_cast<size_t>(n.attrs.axes[0]);
      const int64_t t = n.shape.size() >= 2 ? n.shape[n.shape.size() - 2] : 1;
      add_kernel({id}, softmax_kernel(kKernelName, product(n.shape, 0, axis), n.shape[axis], product(n.shape, axis + 1, n.shape.size()),
                                      n.op == Op::kLogSoftmax, n.attrs.causal, t),
                 {{x}, {own_node(g, id)}});
      return;
    }
    case Op::kCrossEntropy: case Op::kCrossEntropyGrad: {
      const Shape& ls = in(0).shape;
      const int64_t cols = ls.back(), rows = numel(ls) / std::max<int64_t>(cols, 1);
      const auto ignore = static_cast<int64_t>(n.attrs.values.at(0));
      // Logits may arrive with padded rows (padded_row); anything else is made dense.
      int64_t ld = row_stride_of(ls, in(0).place.strides);
      const Place logits = ld > 0 ? in(0).place : dense(g, id, n.inputs[0]);
      if (ld < 0) ld = cols;
      const Place targets = dense(g, id, n.inputs[1]);
      if (n.op == Op::kCrossEntropy) {
        add_kernel({id}, cross_entropy_kernel(kKernelName, rows, cols, ignore, ld), {{logits}, {targets}, {own_node(g, id)}, err});
      } else {
        const Place dloss = dense(g, id, n.inputs[2]);
        const int64_t out_ld = padded_row(cols);
        Place out = own(n, rows * out_ld * 4, n.shape, Category::kGradient);
        out.strides = row_padded_strides(n.shape, out_ld);
        s.place = out;
        s.placed = true;
        if (out_ld != cols) zero_padded_[out.buf] = {out_ld, cols};
        add_kernel({id}, cross_entropy_grad_kernel(kKernelName, rows, cols, ignore, ld, out_ld),
                   {{logits}, {targets}, {dloss}, {out}, err});
      }
      return;
    }
    case Op::kLayerNorm: case Op::kRmsNorm: case Op::kLayerNormGrad: case Op::kRmsNormGrad: {
      if ((n.op == Op::kLayerNorm || n.op == Op::kRmsNorm) && plan_norm_forward(g, id)) return;
      const int64_t cols = n.shape.back(), rows = n.numel() / std::max<int64_t>(cols, 1);
      const double eps = n.attrs.values.at(0);
      const Place x = dense(g, id, n.inputs[0]);
      if (n.op == Op::kLayerNorm || n.op == Op::kRmsNorm) {
        add_kernel({id}, n.op == Op::kLayerNorm ? layer_norm_kernel(kKernelName, rows, cols, eps) : rms_norm_kernel(kKernelName, rows, cols, eps),
                   {{x}, {own_node(g, id)}});
      } else {
        const Place dy = dense(g, id, n.inputs[1]);
        add_kernel({id},
                   n.op == Op::kLayerNormGrad ? layer_norm_grad_kernel(kKernelName, rows, cols, eps)
                                               : rms_norm_grad_kernel(kKernelName, rows, cols, eps),
                   {{x}, {dy}, {own_node(g, id)}});
      }
      return;
    }
    case Op::kRandom:
      add_kernel({id}, random_kernel(kKernelName, n.numel(), n.attrs.seed), {{in(0).place}, {own_node(g, id)}});
      return;
    case Op::kDropout:
      add_kernel({id}, dropout_kernel(kKernelName, operand(n.inputs[0]), n.attrs.values.at(0), n.attrs.seed),
                 {{in(0).place}, {in(1).place}, {own_node(g, id)}});
      return;
    case Op::kAttention: case Op::kAttentionGrad: {
      Place qkv[3];
      Operand ops[3];
      for (size_t k = 0; k < 3; ++k) {
        ops[k] = operand(n.inputs[k]);
        qkv[k] = in(k).place;
        if (!attention_operand_ok(ops[k])) {
          qkv[k] = dense_copy(n, in(k));
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
      const int64_t flops = 4 * as.batch * as.q_heads * as.t * as.s * as.d / (as.causal ? 2 : 1);
      if (n.op == Op::kAttention) {
        // Heads are usually swapped back next to the features ([B, T, Hq, D], then merged):
        // then write that layout directly, so the permute and the reshape are free views.
        // (The backward reading this output for its statistics takes any strides.)
        bool heads_inner = false, other = false;
        for (int32_t c : consumers_[static_cast<size_t>(id)]) {
          const ir::Node& cn = g.node(c);
          if (cn.op == Op::kPermute && cn.attrs.axes == std::vector<int64_t>{0, 2, 1, 3}) heads_inner = true;
          else if (!(cn.op == Op::kAttentionGrad && cn.inputs.size() == 5 && cn.inputs[4] == id && cn.inputs[3] != id)) other = true;
        }
        heads_inner = heads_inner && !other;
        if (std::find(g.outputs.begin(), g.outputs.end(), id) != g.outputs.end()) heads_inner = false;
        Place out = own_node(g, id);
        if (heads_inner)
          out.strides = {as.t * as.q_heads * as.d, as.d, as.q_heads * as.d, 1};
        s.place = out;
        // When this program also runs the backward (an attention_grad reading this node as its
        // forward output), the kernel keeps each row's log-sum-exp there for it.
        bool keep = false;
        for (int32_t c : consumers_[static_cast<size_t>(id)]) {
          const ir::Node& cn = g.node(c);
          keep = keep || (cn.op == Op::kAttentionGrad && cn.inputs.size() == 5 && cn.inputs[4] == id &&
                          std::equal(n.inputs.begin(), n.inputs.end(), cn.inputs.begin()) && cn.attrs.causal == n.attrs.causal &&
                          cn.attrs.values == n.attrs.values);
        }
        keep = keep && attention_keeps_stats(as);
        std::vector<Arg> args{{qkv[0]}, {qkv[1]}, {qkv[2]}, {out}};
        if (keep) {
          const int64_t floats = 2 * as.batch * as.q_heads * as.t;
          attention_stats_[id] = own(n, floats * 4, {floats}, Category::kActivation);
          args.push_back({attention_stats_[id]});
        }
        add_kernel({id}, attention_kernel(kKernelName, as, ops[0], ops[1], ops[2], Operand{DType::kF32, n.shape, out.strides}, keep),
                   std::move(args), flops);
      } else {
        Operand dout_op = operand(n.inputs[3]);
        Place dout = in(3).place;
        if (!attention_operand_ok(dout_op)) {
          dout = dense_copy(n, in(3));
          dout_op.strides = contiguous_strides(dout_op.shape);
        }
        // The forward's output and kept statistics, when its kernel kept them (see above).
        const auto kept = n.inputs.size() == 5 ? attention_stats_.find(n.inputs[4]) : attention_stats_.end();
        const bool from_forward = kept != attention_stats_.end();
        const Operand fwd_out = from_forward ? operand(n.inputs[4]) : Operand{};
        // Autograd slices [dq | dk | dv] into its parts and reshapes each to [B, H, T, D], which
        // is then permuted back to [B, T, H, D] for the qkv projection: written [B, T, H, D],
        // every one of those is a free view (see kReshape) instead of a copy.
        const bool split = grads_split_into_parts(g, id, ops[0].shape, ops[1].shape);
        as.grads_bthd = attention_keeps_stats(as) && split;
        // When those parts only meet again in the concat that forms the packed qkv
        // projection's gradient, they are written there directly (the concat is a view). Every
        // path writes packed gradients; only the tiled ones write [B, T, H, D] ones.
        if (const int32_t c = split ? packed_grads_concat(g, id) : -1; c >= 0) {
          as.grads_packed = true;
          packed_concats_[c] = id;
        }
        if (as.grads_bthd || as.grads_packed) bthd_grads_.insert(id);
        AttentionGradPlan plan =
            attention_grad_kernels(kKernelName, as, ops[0], ops[1], ops[2], dout_op, from_forward ? &fwd_out : nullptr);
        const Place out = own_node(g, id);
        const Place scratch = from_forward ? kept->second
                                           : own(n, std::max<int64_t>(plan.scratch_floats, 1) * 4, {plan.scratch_floats}, Category::kScratch);
        for (size_t i = 0; i < plan.launches.size(); ++i) {
          std::vector<Arg> args{{qkv[0]}, {qkv[1]}, {qkv[2]}, {dout}, {out}, {scratch}};
          if (i == 0 && plan.delta_from_out) args = {{in(4).place}, {dout}, {scratch}};
          add_kernel({id}, std::move(plan.launches[i]), std::move(args), 0);
        }
        steps_.back().flops = 2 * flops + flops / 2;
      }
      return;
    }
    default:
      throw Error(std::string("[cuda] no kernel for ") + ir::op_name(n.op) + " (" + node_ref(g, id) + ")");
  }
}

/// [..., m, k] @ [..., k, n] through cuBLASLt. Batch axes broadcast; each operand needs one
/// uniform batch stride (else it is made dense first, broadcast expanded). Weights shared by
/// the whole batch (batch stride 0) against a row-major left operand fold the batch into m.
void CudaExecutable::plan_matmul(const ir::Graph& g, int32_t id) {
  const ir::Node& n = g.node(id);
  const Shape& os = n.shape;
  const size_t rank = os.size();
  const int64_t m = os[rank - 2], nn = os[rank - 1];
  const Shape batch_shape(os.begin(), os.end() - 2);
  const int64_t batch = numel(batch_shape);
  const int64_t k = g.node(n.inputs[0]).shape.back();
  // Each operand's strides over the output's batch axes (right-aligned; absent or extent 1 → 0).
  auto over_output = [&](const Slot& x) {
    std::vector<int64_t> st(rank, 0);
    for (size_t d = 0; d < x.shape.size(); ++d) {
      const size_t od = rank - x.shape.size() + d;
      st[od] = x.shape[d] == 1 ? 0 : x.place.strides[d];
    }
    return st;
  };
  if (k == 1) {  // an outer product: one elementwise kernel, no BLAS call
    const Slot& a = slots_[static_cast<size_t>(n.inputs[0])];
    const Slot& b = slots_[static_cast<size_t>(n.inputs[1])];
    std::vector<int64_t> as = over_output(a), bs = over_output(b);
    as[rank - 1] = 0;  // a [.., m, 1] along n
    bs[rank - 2] = 0;  // b [.., 1, n] along m
    add_kernel({id}, product_kernel(kKernelName, os, as, bs), {{a.place}, {b.place}, {own_node(g, id)}}, batch * m * nn);
    return;
  }

  // The operand as [batch, rows, cols] with one batch stride, or nothing.
  auto as_mat = [&](const Slot& x) -> std::optional<MatOperand> {
    const size_t r = x.shape.size();
    MatOperand mo{x.shape[r - 2], x.shape[r - 1], x.place.strides[r - 2], x.place.strides[r - 1], 0};
    // Batch strides over the output's batch axes (right-aligned; absent or extent 1 → 0).
    std::vector<int64_t> bst(batch_shape.size(), 0);
    for (size_t d = 0; d + 2 < r; ++d) {
      const size_t od = batch_shape.size() - (r - 2) + d;
      bst[od] = x.shape[d] == 1 ? 0 : x.place.strides[d];
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
  };
  Place places[2];
  MatOperand mats[2];
  for (size_t i = 0; i < 2; ++i) {
    const Slot& x = slots_[static_cast<size_t>(n.inputs[i])];
    places[i] = x.place;
    if (auto mo = as_mat(x)) {
      mats[i] = *mo;
      continue;
    }
    // Materialise broadcast-expanded over the output's batch: [batch..., rows, cols] dense.
    Shape full = batch_shape;
    full.push_back(x.shape[x.shape.size() - 2]);
    full.push_back(x.shape.back());
    Slot expanded = x;
    expanded.shape = full;
    expanded.place.strides = over_output(x);
    places[i] = dense_copy(n, expanded);
    const int64_t rows = full[full.size() - 2], cols = full.back();
    mats[i] = MatOperand{rows, cols, cols, 1, rows * cols};
  }
  int64_t bm = batch, mm = m;
  if (batch > 1 && mats[1].batch_stride == 0 && mats[0].col_stride == 1 && mats[0].batch_stride == m * mats[0].row_stride) {
    mm = batch * m;
    bm = 1;
    mats[0].rows = mm;
  }
  if (bm == 1) mats[0].batch_stride = mats[1].batch_stride = 0;
  // x·W + b: the bias rides in cuBLASLt's epilogue and the add's value is the product's
  // output. An add fused with more elementwise work (a GELU after it) leaves that group, which
  // then reads the add's value instead of the product's.
  int32_t add = -1;
  Place bias;
  if (bm == 1 && n.dtype == DType::kF32 && !escapes(g, id) && consumers_[static_cast<size_t>(id)].size() == 1) {
    const int32_t c = consumers_[static_cast<size_t>(id)][0];
    const ir::Node& a = g.node(c);
    const passes::KernelGroup& cg = fusion_.groups[static_cast<size_t>(fusion_.group_of[static_cast<size_t>(c)])];
    if (a.op == Op::kAdd && a.shape == os && (cg.nodes.size() == 1 || cg.kind == passes::KernelGroup::Kind::kElementwise) &&
        a.inputs[0] != a.inputs[1]) {
      const int32_t other = a.inputs[0] == id ? a.inputs[1] : a.inputs[0];
      // The bias is usually broadcast after the product is traced: place that view now.
      std::vector<int32_t> chain;
      for (int32_t x = other; !slots_[static_cast<size_t>(x)].placed; x = g.node(x).inputs[0]) {
        const Op op = g.node(x).op;
        if (op != Op::kBroadcastTo && op != Op::kReshape) break;
        chain.push_back(x);
      }
      if (!chain.empty() && slots_[static_cast<size_t>(g.node(chain.back()).inputs[0])].placed)
        for (auto it = chain.rbegin(); it != chain.rend(); ++it) plan_single(g, *it);
      const Slot& o = slots_[static_cast<size_t>(other)];
      bool vector = o.placed && o.place.strides.back() == 1;
      for (size_t d = 0; d + 1 < rank && vector; ++d) vector = o.place.strides[d] == 0 || o.shape[d] == 1;
      if (vector) {
        add = c;
        bias = o.place;
        const int32_t gi = fusion_.group_of[static_cast<size_t>(c)];
        if (passes::KernelGroup& grp = fusion_.groups[static_cast<size_t>(gi)]; grp.nodes.size() > 1) {
          std::erase(grp.nodes, c);
          std::erase(grp.outputs, c);
          fusion_.group_of[static_cast<size_t>(c)] = fusion_.group_of[static_cast<size_t>(id)];
        }
      }
    }
  }
  const int64_t ld = bm == 1 && n.dtype == DType::kF32 ? padded_row(nn) : nn;
  // (x·W [+ b]) + r, a residual connection: r rides in as cuBLASLt's C (beta = 1) and the
  // add's value is the product's output, when r lies dense in the output's layout.
  int32_t res_add = -1;
  Place residual;
  if (const int32_t y = add >= 0 ? add : id;
      bm == 1 && n.dtype == DType::kF32 && ld == nn && padded_row(mm) == mm && (add >= 0 || !small_matmul_preferred(bm, mm, nn, k)) &&
      !escapes(g, y) && consumers_[static_cast<size_t>(y)].size() == 1) {
    const int32_t r = consumers_[static_cast<size_t>(y)][0];
    const ir::Node& ra = g.node(r);
    const int32_t gi = fusion_.group_of[static_cast<size_t>(r)];
    passes::KernelGroup& grp = fusion_.groups[static_cast<size_t>(gi)];
    const int32_t z = ra.inputs[0] == y ? ra.inputs[1] : ra.inputs[0];
    const Slot& zs = slots_[static_cast<size_t>(z)];
    if (ra.op == Op::kAdd && ra.shape == os && ra.inputs[0] != ra.inputs[1] && (grp.nodes.size() == 1 || grp.kind == passes::KernelGroup::Kind::kElementwise) &&
        zs.placed && zs.dtype == DType::kF32 && zs.shape == os && is_contiguous_strides(zs.place.strides, os)) {
      res_add = r;
      residual = zs.place;
      if (grp.nodes.size() > 1) {
        std::erase(grp.nodes, r);
        std::erase(grp.outputs, r);
      }
      fusion_.group_of[static_cast<size_t>(r)] = fusion_.group_of[static_cast<size_t>(id)];
    }
  }
  const int32_t holder = res_add >= 0 ? res_add : add >= 0 ? add : id;
  Place out = own_node(g, holder);
  if (ld != nn) {
    bufs_[static_cast<size_t>(out.buf)].bytes = aligned(mm * ld * 4);
    out.strides = row_padded_strides(os, ld);
    slots_[static_cast<size_t>(holder)].place = out;
  }
  for (int32_t x : {id, add})
    if (x >= 0 && x != holder) {
      slots_[static_cast<size_t>(x)].place = out;
      slots_[static_cast<size_t>(x)].placed = true;
    }
  // Products of a few MFLOP run faster as one generated kernel than through cuBLASLt.
  if (add < 0 && res_add < 0 && small_matmul_preferred(bm, mm, nn, k)) {
    add_kernel({id}, small_matmul_kernel(kKernelName, bm, mm, nn, k, mats[0], mats[1], options_.tf32, ld, ctx_->info.sm_major),
               {{places[0]}, {places[1]}, {out}}, 2 * batch * m * nn * k);
    return;
  }
  // TF32 products with an extent of 1024 or more that is not a multiple of 64 (GPT-2's
  // vocabulary of 50257) run 2-3x slower on cuBLASLt than the same product padded to the next
  // multiple (bench/cuda_product_probe on an H200: x·wteᵀ 9.6 -> 3.0 ms, dlogits·wte 9.1 ->
  // 2.9 ms). Pad m, n and k then: extra rows and columns of the result are never read (the
  // output buffer has room for them), and a padded reduction axis reads zeros on both sides.
  int64_t pm = mm, pn = nn, pk = k;
  if (options_.tf32 && bm == 1 && n.dtype == DType::kF32 && (padded_row(mm) != mm || padded_row(nn) != nn || padded_row(k) != k)) {
    MatOperand pa = mats[0], pb = mats[1];
    Place qa = places[0], qb = places[1];
    const int64_t tm = padded_row(mm), tn = ld, tk = padded_row(k);
    if (pad_operand(n, pa, qa, tm, tk, tk != k) && pad_operand(n, pb, qb, tk, tn, tk != k)) {
      mats[0] = pa, mats[1] = pb, places[0] = qa, places[1] = qb;
      pm = tm, pn = tn, pk = tk;
      bufs_[static_cast<size_t>(out.buf)].bytes = aligned(pm * ld * 4);
    }
  }
  Step st;
  st.kind = Step::Kind::kMatmul;
  st.nodes = {id};
  if (add >= 0) st.nodes.push_back(add);
  if (res_add >= 0) st.nodes.push_back(res_add);
  st.flops = 2 * batch * m * nn * k;
  auto operands = [&] {
    st.args = {{places[0]}, {places[1]}, {out}};
    if (add >= 0) {
      st.bias_arg = static_cast<int>(st.args.size());
      st.args.push_back({bias});
    }
    if (res_add >= 0) {
      st.residual_arg = static_cast<int>(st.args.size());
      st.args.push_back({residual});
    }
  };
  if (split_product_wanted(bm, mm, nn, k, n.dtype)) {
    plan_split_product(n, mats, places, mm, k, ld, add >= 0, st);
    bufs_[static_cast<size_t>(out.buf)].bytes = std::max(bufs_[static_cast<size_t>(out.buf)].bytes, aligned(padded_row(mm) * ld * 4));
    operands();
    steps_.push_back(std::move(st));
    return;
  }
  operands();
  st.matmul = std::make_shared<LtMatmul>(bm, pm, pn, pk, mats[0], mats[1],
                                         options_.tf32 ? MathMode::kTf32 : MathMode::kFp32, kWorkspaceBytes, add >= 0, ld);
  steps_.push_back(std::move(st));
}

/// Precision::kTf32x3: f32 products of 1 GFLOP and more on a GPU with TF32 tensor cores run as
/// three TF32 products over a split of each operand into x = hi + lo, hi and lo TF32 numbers
/// (CUTLASS's "3xTF32", XLA's HIGH precision): a·b = lo_a·hi_b + hi_a·lo_b + hi_a·hi_b, dropping
/// lo_a·lo_b (≤ 2⁻²² relative); each part is rounded to nearest, so every term carries a
/// relative error of ~2⁻²¹ against f32's 2⁻²⁴. The tensor cores' own accumulation adds to that:
/// tests/backend/cuda_split_product_test.cc measures 2-6x the error of f32 FMA products (cuBLAS
/// SGEMM), 70-100x below plain TF32's, for about half SGEMM's time on an H200. Products whose
/// split operands would exceed 1 GiB (GPT-2's logits gradient), batched ones and those under
/// 1 GFLOP (where the two split kernels cost more than they save) stay f32 FMA products.
bool CudaExecutable::split_product_wanted(int64_t batch, int64_t m, int64_t n, int64_t k, DType dtype) const {
  constexpr int64_t kMinFlops = int64_t{1} << 30, kMaxSplitBytes = int64_t{1} << 30;
  const int64_t pm = padded_row(m), pn = padded_row(n), pk = padded_row(k);
  return options_.tf32x3 && !options_.tf32 && ctx_->info.sm_major >= 8 && batch == 1 && dtype == DType::kF32 &&
         2 * m * n * k >= kMinFlops && 2 * pm * pk * 4 <= kMaxSplitBytes && 2 * pk * pn * 4 <= kMaxSplitBytes;
}

/// Plans `st` as the split product of split_product_wanted: both operands split (and zero-
/// padded like TF32 products: padded_row) by one kernel each into [lo_a | hi_a] (along k) and
/// [hi_b ; lo_b], then one TF32 product of twice the depth gives lo_a·hi_b + hi_a·lo_b and a
/// second adds hi_a·hi_b (and the bias) to it. `places` become the split buffers.
void CudaExecutable::plan_split_product(const ir::Node& n, MatOperand mats[2], Place places[2], int64_t m, int64_t k,
                                        int64_t ld, bool with_bias, Step& st) {
  const int64_t pm = padded_row(m), pk = padded_row(k), pn = ld;
  MatOperand both[2], hi[2];
  for (int i = 0; i < 2; ++i) {
    const MatOperand& mo = mats[i];
    const bool col_major = mo.col_stride != 1 && mo.row_stride == 1;
    const int64_t rows_p = i == 0 ? pm : pk, cols_p = i == 0 ? pk : pn;
    const Place split = own(n, 2 * rows_p * cols_p * 4, {2 * rows_p * cols_p}, Category::kScratch);
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
bool CudaExecutable::pad_operand(const ir::Node& consumer, MatOperand& mo, Place& place, int64_t rows_p, int64_t cols_p,
                                 bool zeros) {
  if (rows_p == mo.rows && cols_p == mo.cols) return true;
  const bool row_major = mo.col_stride == 1;
  if (place.buf >= 0 && place.offset == 0) {
    const int64_t bytes = bufs_[static_cast<size_t>(place.buf)].bytes;
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
  const Place copy = own(consumer, rows_p * cols_p * 4, {rows_p * cols_p}, Category::kScratch);
  add_kernel({}, pad_copy_kernel(kKernelName, mo.rows, mo.cols, mo.row_stride, mo.col_stride, rows_p, cols_p, !row_major),
             {{place}, {copy}});
  place = copy;
  mo = row_major ? MatOperand{rows_p, cols_p, cols_p, 1, 0} : MatOperand{rows_p, cols_p, 1, rows_p, 0};
  return true;
}

bool CudaExecutable::escapes(const ir::Graph& g, int32_t x) const {
  return std::find(g.outputs.begin(), g.outputs.end(), x) != g.outputs.end() ||
         std::any_of(g.updates.begin(), g.updates.end(), [&](const ir::Graph::Update& u) { return u.value == x; });
}

/// The concat that joins attention_grad `id`'s parts back into a packed qkv gradient, when
/// that is all they are read for: each part's slice → reshape [B, H, T, D] → permute to
/// [B, T, H, D] → reshape [B, T, H·D] is read only by one concat along the last axis of
/// exactly (dq, dk, dv), and T = S. -1 otherwise.
int32_t CudaExecutable::packed_grads_concat(const ir::Graph& g, int32_t id) const {
  const ir::Node& ag = g.node(id);
  const Shape& qs = g.node(ag.inputs[0]).shape;
  const Shape& ks = g.node(ag.inputs[1]).shape;
  if (qs.size() != 4 || ks.size() != 4 || qs[2] != ks[2]) return -1;
  const int64_t nq = numel(qs), nk = numel(ks);
  auto sole = [&](int32_t x) { return consumers_[static_cast<size_t>(x)].size() == 1 && !escapes(g, x) ? consumers_[static_cast<size_t>(x)][0] : -1; };
  int32_t concat = -1, parts[3] = {-1, -1, -1};
  for (int32_t sl : consumers_[static_cast<size_t>(id)]) {
    const auto start = static_cast<int64_t>(g.node(sl).attrs.values.at(0));
    const int part = start == 0 ? 0 : start == nq ? 1 : start == nq + nk ? 2 : -1;
    const int32_t r = sole(sl), p = r >= 0 ? sole(r) : -1, r2 = p >= 0 ? sole(p) : -1, c = r2 >= 0 ? sole(r2) : -1;
    if (part < 0 || parts[part] >= 0 || c < 0 || (concat >= 0 && c != concat)) return -1;
    const ir::Node& pn = g.node(p);
    if (pn.op != Op::kPermute || pn.attrs.axes != std::vector<int64_t>{0, 2, 1, 3}) return -1;
    if (g.node(r2).op != Op::kReshape || g.node(r2).shape != Shape{pn.shape[0], pn.shape[1], pn.shape[2] * pn.shape[3]}) return -1;
    concat = c;
    parts[part] = r2;
  }
  if (concat < 0) return -1;
  const ir::Node& cn = g.node(concat);
  if (cn.op != Op::kConcat || cn.attrs.axes.at(0) != 2 || cn.inputs != std::vector<int32_t>{parts[0], parts[1], parts[2]}) return -1;
  return concat;
}

/// Whether every reader of attention_grad `id` is a slice of exactly one of its parts (dq, dk,
/// dv) read only by reshapes to that part's [B, H, T, D] shape, and none of them escapes.
bool CudaExecutable::grads_split_into_parts(const ir::Graph& g, int32_t id, const Shape& qs, const Shape& ks) const {
  auto escapes = [&](int32_t x) { return this->escapes(g, x); };
  const int64_t nq = numel(qs), nk = numel(ks);
  if (escapes(id) || consumers_[static_cast<size_t>(id)].empty()) return false;
  for (int32_t c : consumers_[static_cast<size_t>(id)]) {
    const ir::Node& sl = g.node(c);
    if (sl.op != Op::kSlice || sl.attrs.axes.at(0) != 0 || sl.attrs.values.at(1) != 1 || escapes(c) ||
        consumers_[static_cast<size_t>(c)].empty())
      return false;
    const auto start = static_cast<int64_t>(sl.attrs.values[0]), len = sl.shape.at(0);
    const Shape* part = start == 0 && len == nq ? &qs : (start == nq || start == nq + nk) && len == nk ? &ks : nullptr;
    if (!part) return false;
    for (int32_t r : consumers_[static_cast<size_t>(c)])
      if (g.node(r).op != Op::kReshape || g.node(r).shape != *part) return false;
  }
  return true;
}

bool CudaExecutable::in_place_target(const ir::Graph& g, int32_t value, int32_t group, int32_t& target) const {
  if (!options_.reuse_memory) return false;
  int updates = 0;
  for (const ir::Graph::Update& u : g.updates)
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
    if (std::find(g.outputs.begin(), g.outputs.end(), x) != g.outputs.end()) return false;
    for (const ir::Graph::Update& u : g.updates)
      if (u.value == x && x != value) return false;  // another update copies the old value
    for (int32_t c : consumers_[static_cast<size_t>(x)]) {
      const Op op = g.node(c).op;
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

void CudaExecutable::plan_outputs_and_updates(const ir::Graph& g) {
  std::vector<const Buffer*> targets;
  for (size_t i = 0; i < g.updates.size(); ++i)
    if (!in_place_[i]) targets.push_back(slots_[static_cast<size_t>(g.updates[i].target)].root);
  auto overwritten = [&](const Slot& s) { return s.root && std::find(targets.begin(), targets.end(), s.root) != targets.end(); };
  // Values read after the step, or copied over a buffer an update writes, are made dense in
  // their own arena buffer first when they are views or alias an updated buffer.
  auto settle = [&](int32_t id) -> Place {
    const Slot& s = slots_[static_cast<size_t>(id)];
    Place p = s.place;
    if (!is_contiguous_strides(p.strides, s.shape) || overwritten(s)) p = dense_copy(g.node(id), s);
    if (p.buf >= 0) bufs_[static_cast<size_t>(p.buf)].to_end = true;
    return p;
  };
  for (int32_t out : g.outputs)
    if (!outputs_.count(out)) outputs_[out] = settle(out);
  for (size_t i = 0; i < g.updates.size(); ++i) {
    const ir::Graph::Update& u = g.updates[i];
    const Slot& t = slots_[static_cast<size_t>(u.target)];
    if (u.value == u.target || in_place_[i]) continue;
    update_copies_.push_back({t.place, settle(u.value), t.place.strides.empty() ? dtype_size(t.dtype) : numel(t.shape) * dtype_size(t.dtype)});
  }
}

}  // namespace tg::backend::cuda
