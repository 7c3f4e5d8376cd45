// Placement for the CUDA executable (see executable.h): places, views and one step per group.
#include <algorithm>
#include <cstring>
#include <optional>

#include "backend/cuda/codegen.h"
#include "backend/cuda/executable.h"
#include "backend/cuda/fused_sinks.h"
#include "backend/cuda/plan_util.h"
#include "backend/strides.h"
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
  if (launch.shared_bytes > ctx_->info.smem_per_block)
    throw DeviceError("[cuda] kernel " + launch.name + " needs " + std::to_string(launch.shared_bytes) +
                      " bytes of shared memory a block; " +
                      ctx_->info.name + " allows " + std::to_string(ctx_->info.smem_per_block));
  Step st;
  st.kind = Step::Kind::kKernel;
  st.nodes = std::move(nodes);
  st.launch = std::move(launch);
  st.args = std::move(args);
  st.flops = flops;
  steps_.push_back(std::move(st));
}

void CudaExecutable::add_zero(const Place& out, int64_t bytes) {
  if (bytes == 0) return;
  Step zero;
  zero.kind = Step::Kind::kMemset;
  zero.args = {{out}};
  zero.bytes = bytes;
  steps_.push_back(std::move(zero));
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
    case Op::kResult: {
      if (s.placed) return;  // placed by its node's step (a backend-sized result: selective_scan's saved)
      // Its part of the multi-output node's dense allocation.
      Place p = in(0).place;
      p.offset += ir::result_offset(g.node(n.inputs[0]), static_cast<size_t>(n.attrs.axes[0])) * 4;
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
      add_kernel({id}, reduce_kernel(kKernelName, op, operand(n.inputs[0]), axes, ctx_->info), {{x}, {own_node(g, id)}});
      return;
    }
    case Op::kCumsum:
      add_kernel({id}, cumsum_kernel(kKernelName, operand(n.inputs[0]), static_cast<int>(n.attrs.axes[0]), n.attrs.reverse),
                 {{in(0).place}, {own_node(g, id)}});
      return;
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
      // Whether update_slice node `u` (its state update at index `ui`) can write its cache in place.
      auto in_place = [&](int32_t u, size_t ui) {
        const int32_t d = g.node(u).inputs[0];
        const Slot& dsl = slots_[static_cast<size_t>(d)];
        return options_.reuse_memory && ui < g.updates.size() && consumers_[static_cast<size_t>(d)].size() == 1 &&
               std::count_if(g.updates.begin(), g.updates.end(), [&](const ir::Graph::Update& x) { return x.target == d; }) == 1 &&
               is_contiguous_strides(dsl.place.strides, dsl.shape);
      };
      if (in_place(id, update)) {
        // A sibling written at the same offsets with the same layout (the layer's other cache)
        // rides in the same launch.
        size_t pair = g.updates.size();
        for (size_t u = 0; u < g.updates.size() && pair == g.updates.size(); ++u) {
          const int32_t v = g.updates[u].value;
          if (v == id || v < 0 || g.node(v).op != Op::kUpdateSlice || g.updates[u].target != g.node(v).inputs[0]) continue;
          const ir::Node& vn = g.node(v);
          const Slot &src2 = slots_[static_cast<size_t>(vn.inputs[1])], &dst2 = slots_[static_cast<size_t>(vn.inputs[0])];
          if (vn.inputs[2] == n.inputs[2] && vn.attrs.axes == n.attrs.axes && !slots_[static_cast<size_t>(v)].placed && src2.placed &&
              dst2.shape == ds.shape && dst2.place.strides == ds.place.strides && src2.shape == in(1).shape &&
              src2.place.strides == in(1).place.strides && src2.dtype == in(1).dtype && in_place(v, u))
            pair = u;
        }
        std::vector<Arg> args{{in(1).place}, {in(2).place}, {ds.place}};
        std::vector<int32_t> nodes{id};
        if (pair < g.updates.size()) {
          const int32_t v = g.updates[pair].value;
          const ir::Node& vn = g.node(v);
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
                 {{in(0).place}, {in(1).place}, {in(2).place}, {own_node(g, id)}, err});
      return;
    }
    case Op::kScatterAdd: {
      const Place out = own_node(g, id);
      add_zero(out, n.numel() * dtype_size(n.dtype));
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
    case Op::kAttentionAt:
      add_kernel({id},
                 attention_at_kernel(kKernelName, operand(n.inputs[0]), operand(n.inputs[1]), operand(n.inputs[2]),
                                     operand(n.inputs[3]), n.attrs.values.at(0)),
                 {{in(0).place}, {in(1).place}, {in(2).place}, {in(3).place}, {own_node(g, id)}, err});
      return;
    case Op::kSample: {
      const Place logits = dense(g, id, n.inputs[0]);
      const int64_t vocab = in(0).shape.back();
      add_kernel({id}, sample_kernel(kKernelName, n.numel(), vocab),
                 {{logits}, {dense(g, id, n.inputs[1])}, {dense(g, id, n.inputs[2])}, {own_node(g, id)}});
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
    case Op::kSelectiveScan: case Op::kSelectiveScanGrad:
      plan_scan(g, id);
      return;
    default:
      throw Error(std::string("[cuda] no kernel for ") + ir::op_name(n.op) + " (" + node_ref(g, id) + ")");
  }
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
