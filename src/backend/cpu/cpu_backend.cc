// The CPU backend: persistent buffers as zero-filled host memory, and the planner that
// turns a graph into a list of prebuilt kernels. prepare() decides everything once: which
// nodes are live (reachable from outputs and updates), where each node's elements live and
// with which strides. Reshape of dense data, and BroadcastTo / Permute / Slice / one-value
// Constants whose every consumer can read strided data (elementwise ops read 0-strides,
// Matmul reads a swapped-last-two-axes permute as a BLAS transpose flag, Gather/ScatterAdd
// read broadcast indices, Attention reads permuted [B, T, H, D] heads), become views with
// no copy; everything else gets its own buffer. execute() then only runs kernels, and applies
// the updates after every node has run, staging any value that aliases an updated buffer.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <unordered_map>

#include "backend/backend.h"
#include "backend/cpu/cpu_kernels.h"
#include "tensorgrad/errors.h"

namespace tg::backend {
namespace cpu {
namespace {

using ir::Op;

class CpuBuffer final : public Buffer {
 public:
  CpuBuffer(DType dtype, int64_t numel) : Buffer(dtype, numel), mem(numel * dtype_size(dtype)) {}
  HostMem mem;
};

float* f32(std::byte* p) { return reinterpret_cast<float*>(p); }

std::string node_ref(const ir::Graph& g, int32_t id) {
  const ir::Node& n = g.node(id);
  std::string s = std::string(ir::op_name(n.op)) + " %" + std::to_string(id);
  return n.name.empty() ? s : s + " '" + n.name + "'";
}

/// Whether `consumer` can read its input through `view` (of `shape`) without the producer
/// making it dense first. Copies and elementwise kernels take any strides; reductions want
/// dense rows; BLAS wants unit stride along one of the two matrix axes.
bool accepts(const ir::Node& consumer, const View& view, const Shape& shape) {
  switch (consumer.op) {
#define TG_UNARY(Name, str, dtypes, expr) case Op::k##Name:
#define TG_BINARY(Name, str, dtypes, expr) case Op::k##Name:
#define TG_COMPARE(Name, str, dtypes, expr) case Op::k##Name:
#include "ir/ops.def"
    case Op::kCast: case Op::kWhere: case Op::kReshape: case Op::kPermute: case Op::kBroadcastTo:
    case Op::kSlice: case Op::kUnslice: case Op::kConcat:
      return true;
    case Op::kSum: case Op::kMax: case Op::kMin: case Op::kArgmax:
      return is_contiguous(view, shape);
    case Op::kMatmul:
      return blas_operand(view, shape).has_value();
    case Op::kGather: case Op::kScatterAdd: case Op::kRandom: case Op::kDropout:
      return true;  // strided readers: embedding ids arrive broadcast along the feature axis
    case Op::kCrossEntropy: case Op::kCrossEntropyGrad:
      return shape.size() == 1 || is_contiguous(view, shape);  // 1-D targets/dloss strided; logits dense
    case Op::kSoftmax: case Op::kLogSoftmax:
    case Op::kLayerNorm: case Op::kLayerNormGrad: case Op::kRmsNorm: case Op::kRmsNormGrad:
      return is_contiguous(view, shape);
    case Op::kAttention: case Op::kAttentionGrad:
      return attention_operand(view, shape);  // any batch/head strides, unit stride along D
    case Op::kParam: case Op::kInput: case Op::kState: case Op::kConstant: case Op::kArange:
      return false;  // leaves consume nothing
  }
  return false;
}

class CpuExecutable final : public Executable {
 public:
  CpuExecutable(const ir::Graph& graph, const Bindings& bindings);
  void set_input(int32_t node, const void* host) override;
  void execute() override;
  void read_output(int32_t node, void* host) override;

 private:
  struct Slot {
    DType dtype = DType::kF32;
    Shape shape;
    View view;
    const Buffer* root = nullptr;  // the bound buffer the view reads, if any
  };
  struct Output {
    std::shared_ptr<HostMem> snapshot;  // when the view reads a buffer an update overwrites
    Kernel take;
  };
  struct UpdatePlan {
    Kernel stage;  // copies the value aside first when it aliases an updated buffer
    Kernel apply;
  };

  void bind_leaves(const ir::Graph& g, const Bindings& bindings);
  void check_updates(const ir::Graph& g) const;
  std::vector<std::vector<int32_t>> mark_live(const ir::Graph& g);
  void plan(const ir::Graph& g, int32_t id, const std::vector<int32_t>& consumers);
  /// A dense buffer of `bytes`, owned by this executable.
  std::byte* own(int64_t bytes) { return mems_.emplace_back(bytes).data(); }
  std::byte* own_node(Slot& s) {
    s.view = contiguous_view(own(numel(s.shape) * dtype_size(s.dtype)), s.shape);
    return s.view.data;
  }
  /// Either `view` itself, or when `ok` rejects it, a dense copy made by an extra step.
  template <class Ok>
  View readable(const Slot& in, Ok ok) {
    if (ok(in.view, in.shape)) return in.view;
    View dense = contiguous_view(own(numel(in.shape) * dtype_size(in.dtype)), in.shape);
    add_step(make_copy(in.dtype, in.shape, dense, in.view));
    return dense;
  }

  std::vector<Slot> slots_;  // per node id; views are empty for skipped nodes
  std::vector<Op> ops_;
  std::vector<char> live_, input_set_;
  std::vector<std::string> input_names_;
  std::vector<HostMem> mems_;
  std::vector<Kernel> steps_;
  std::vector<int32_t> step_node_;  // node each step belongs to (profiling)
  int32_t current_ = -1;
  void add_step(Kernel k) {
    steps_.push_back(std::move(k));
    step_node_.push_back(current_);
  }
  // TG_PROFILE=1: wall time per step, summed by op and shape, printed when destroyed.
  bool profile_ = std::getenv("TG_PROFILE") != nullptr;
  std::vector<double> step_seconds_;
  std::vector<std::string> step_label_;
  int64_t executions_ = 0;
 public:
  ~CpuExecutable() override;
 private:
  std::unordered_map<int32_t, Output> outputs_;
  std::vector<UpdatePlan> updates_;
};

CpuExecutable::CpuExecutable(const ir::Graph& g, const Bindings& bindings) {
  const auto count = static_cast<size_t>(g.size());
  slots_.resize(count);
  ops_.resize(count);
  input_set_.assign(count, 0);
  input_names_.resize(count);
  for (int32_t id = 0; id < g.size(); ++id) {
    const ir::Node& n = g.node(id);
    slots_[static_cast<size_t>(id)].dtype = n.dtype;
    slots_[static_cast<size_t>(id)].shape = n.shape;
    ops_[static_cast<size_t>(id)] = n.op;
    input_names_[static_cast<size_t>(id)] = n.name;
  }
  bind_leaves(g, bindings);
  check_updates(g);
  const std::vector<std::vector<int32_t>> consumers = mark_live(g);
  for (int32_t id = 0; id < g.size(); ++id)
    if (live_[static_cast<size_t>(id)] || g.node(id).op == Op::kInput) {
      current_ = id;
      plan(g, id, consumers[static_cast<size_t>(id)]);
    }
  step_seconds_.assign(steps_.size(), 0.0);
  for (int32_t node : step_node_) {
    const ir::Node& n = g.node(node);
    std::string label = std::string(ir::op_name(n.op)) + " " + shape_str(n.shape);
    for (int32_t i : n.inputs) label += " " + shape_str(g.node(i).shape);
    step_label_.push_back(label);
  }

  std::vector<const Buffer*> targets;
  for (const ir::Graph::Update& u : g.updates) targets.push_back(slots_[static_cast<size_t>(u.target)].root);
  auto overwritten = [&](const Slot& s) {
    return s.root && std::find(targets.begin(), targets.end(), s.root) != targets.end();
  };
  for (int32_t out : g.outputs) {
    if (out < 0 || out >= g.size()) throw Error("[cpu] output %" + std::to_string(out) + " is not a node");
    Output& o = outputs_[out];
    const Slot& s = slots_[static_cast<size_t>(out)];
    // Outputs read the step's values, so a view of an updated buffer is copied before updates.
    if (overwritten(s) && !o.snapshot) {
      o.snapshot = std::make_shared<HostMem>(numel(s.shape) * dtype_size(s.dtype));
      o.take = make_copy(s.dtype, s.shape, contiguous_view(o.snapshot->data(), s.shape), s.view);
    }
  }
  for (const ir::Graph::Update& u : g.updates) {
    const Slot& value = slots_[static_cast<size_t>(u.value)];
    const Slot& target = slots_[static_cast<size_t>(u.target)];
    UpdatePlan p;
    View src = value.view;
    if (overwritten(value)) {
      src = contiguous_view(own(numel(value.shape) * dtype_size(value.dtype)), value.shape);
      p.stage = make_copy(value.dtype, value.shape, src, value.view);
    }
    // The target buffer is dense; copying in the value's shape lays it out row-major.
    p.apply = make_copy(value.dtype, value.shape, contiguous_view(target.view.data, value.shape), src);
    updates_.push_back(std::move(p));
  }
}

void CpuExecutable::bind_leaves(const ir::Graph& g, const Bindings& bindings) {
  for (int32_t id = 0; id < g.size(); ++id) {
    const ir::Node& n = g.node(id);
    if (n.op != Op::kParam && n.op != Op::kState) continue;
    auto it = bindings.find(id);
    if (it == bindings.end() || it->second == nullptr)
      throw Error("[cpu] " + node_ref(g, id) + " has no bound buffer");
    auto* buffer = dynamic_cast<CpuBuffer*>(it->second);
    if (!buffer) throw Error("[cpu] the buffer bound to " + node_ref(g, id) + " was not allocated by the cpu backend");
    if (buffer->dtype() != n.dtype || buffer->numel() != n.numel())
      throw Error("[cpu] " + node_ref(g, id) + " is " + dtype_name(n.dtype) + shape_str(n.shape) +
                  " but its bound buffer holds " + std::to_string(buffer->numel()) + " " + dtype_name(buffer->dtype()));
    Slot& s = slots_[static_cast<size_t>(id)];
    s.view = contiguous_view(buffer->mem.data(), n.shape);
    s.root = buffer;
  }
}

void CpuExecutable::check_updates(const ir::Graph& g) const {
  for (const ir::Graph::Update& u : g.updates) {
    if (u.target < 0 || u.target >= g.size() || u.value < 0 || u.value >= g.size())
      throw Error("[cpu] an update refers to an unknown node");
    const ir::Node& t = g.node(u.target);
    const ir::Node& v = g.node(u.value);
    if (t.op != Op::kParam && t.op != Op::kState)
      throw Error("[cpu] update target " + node_ref(g, u.target) + " is not a param or state");
    if (t.dtype != v.dtype || t.numel() != v.numel())
      throw Error("[cpu] update of " + node_ref(g, u.target) + " " + dtype_name(t.dtype) + shape_str(t.shape) +
                  " with " + dtype_name(v.dtype) + shape_str(v.shape));
  }
}

std::vector<std::vector<int32_t>> CpuExecutable::mark_live(const ir::Graph& g) {
  live_.assign(static_cast<size_t>(g.size()), 0);
  for (int32_t out : g.outputs)
    if (out >= 0 && out < g.size()) live_[static_cast<size_t>(out)] = 1;
  for (const ir::Graph::Update& u : g.updates) live_[static_cast<size_t>(u.value)] = 1;
  // Inputs precede their users, so one backward sweep reaches every transitive input.
  for (int32_t id = g.size(); id-- > 0;)
    if (live_[static_cast<size_t>(id)])
      for (int32_t in : g.node(id).inputs) live_[static_cast<size_t>(in)] = 1;
  std::vector<std::vector<int32_t>> consumers(static_cast<size_t>(g.size()));
  for (int32_t id = 0; id < g.size(); ++id)
    if (live_[static_cast<size_t>(id)])
      for (int32_t in : g.node(id).inputs) consumers[static_cast<size_t>(in)].push_back(id);
  return consumers;
}

void CpuExecutable::plan(const ir::Graph& g, int32_t id, const std::vector<int32_t>& consumers) {
  const ir::Node& n = g.node(id);
  Slot& s = slots_[static_cast<size_t>(id)];
  auto in = [&](size_t i) -> const Slot& { return slots_[static_cast<size_t>(n.inputs[i])]; };
  const int64_t esize = dtype_size(n.dtype);
  auto all_accept = [&](const View& v) {
    for (int32_t c : consumers)
      if (!accepts(g.node(c), v, n.shape)) return false;
    return true;
  };
  // Broadcast/permute/slice: keep the view when every consumer can read it, else copy it dense.
  auto view_or_copy = [&](View v, const Buffer* root) {
    if (all_accept(v)) {
      s.view = std::move(v);
      s.root = root;
      return;
    }
    own_node(s);
    add_step(make_copy(n.dtype, n.shape, s.view, v));
  };

  switch (n.op) {
    case Op::kParam:
    case Op::kState:
      return;  // bound in bind_leaves
    case Op::kInput:
      own_node(s);
      return;
    case Op::kConstant: {
      // Constants are computed once here; a fill read only elementwise is one element at stride 0.
      const bool fill = n.attrs.values.size() == 1;
      View scalar{nullptr, std::vector<int64_t>(n.shape.size(), 0)};
      if (fill && all_accept(scalar)) {
        scalar.data = own(esize);
        store_double(n.dtype, scalar.data, 0, n.attrs.values[0]);
        s.view = std::move(scalar);
        return;
      }
      std::byte* out = own_node(s);
      for (int64_t i = 0; i < n.numel(); ++i)
        store_double(n.dtype, out, i, n.attrs.values[fill ? 0 : static_cast<size_t>(i)]);
      return;
    }
    case Op::kArange: {
      std::byte* out = own_node(s);
      for (int64_t i = 0; i < n.numel(); ++i)
        store_double(n.dtype, out, i, n.attrs.values[0] + static_cast<double>(i) * n.attrs.values[1]);
      return;
    }

#define TG_UNARY(Name, str, dtypes, expr) case Op::k##Name:
#define TG_BINARY(Name, str, dtypes, expr) case Op::k##Name:
#define TG_COMPARE(Name, str, dtypes, expr) case Op::k##Name:
#include "ir/ops.def"
    {
      std::vector<View> views;
      for (size_t i = 0; i < n.inputs.size(); ++i) views.push_back(in(i).view);
      add_step(make_elementwise(n, in(0).dtype, views, own_node(s)));
      return;
    }
    case Op::kCast:
      add_step(make_cast(n.shape, in(0).dtype, n.dtype, in(0).view, own_node(s)));
      return;
    case Op::kWhere:
      add_step(make_where(n.shape, n.dtype, {in(0).view, in(1).view, in(2).view}, own_node(s)));
      return;

    case Op::kSum:
    case Op::kMax:
    case Op::kMin: {
      const View x = readable(in(0), is_contiguous);
      add_step(make_reduce(n, in(0).shape, x.data, own_node(s)));
      return;
    }
    case Op::kArgmax: {
      const View x = readable(in(0), is_contiguous);
      add_step(make_argmax(n, in(0).shape, in(0).dtype, x.data, own_node(s)));
      return;
    }

    case Op::kReshape:
      if (is_contiguous(in(0).view, in(0).shape)) {  // same bytes, new shape: an alias
        s.view = contiguous_view(in(0).view.data, n.shape);
        s.root = in(0).root;
        return;
      }
      add_step(make_copy(n.dtype, in(0).shape, contiguous_view(own_node(s), in(0).shape), in(0).view));
      return;
    case Op::kPermute: {
      View v{in(0).view.data, {}};
      for (int64_t a : n.attrs.axes) v.strides.push_back(in(0).view.strides[static_cast<size_t>(a)]);
      view_or_copy(std::move(v), in(0).root);
      return;
    }
    case Op::kBroadcastTo: {
      const Shape& xs = in(0).shape;
      const size_t lead = n.shape.size() - xs.size();
      View v{in(0).view.data, std::vector<int64_t>(n.shape.size(), 0)};
      for (size_t i = 0; i < xs.size(); ++i) v.strides[lead + i] = xs[i] == 1 ? 0 : in(0).view.strides[i];
      view_or_copy(std::move(v), in(0).root);
      return;
    }
    case Op::kSlice: {
      const auto axis = static_cast<size_t>(n.attrs.axes[0]);
      const auto start = static_cast<int64_t>(n.attrs.values[0]), step = static_cast<int64_t>(n.attrs.values[1]);
      View v = in(0).view;
      if (n.numel() > 0) v.data += start * v.strides[axis] * esize;
      v.strides[axis] *= step;
      view_or_copy(std::move(v), in(0).root);
      return;
    }
    case Op::kUnslice: {
      const auto axis = static_cast<size_t>(n.attrs.axes[0]);
      const auto start = static_cast<int64_t>(n.attrs.values[0]), step = static_cast<int64_t>(n.attrs.values[1]);
      std::byte* out = own_node(s);
      View dst = s.view;
      if (numel(in(0).shape) > 0) dst.data += start * dst.strides[axis] * esize;  // else it may point nowhere
      dst.strides[axis] *= step;
      Kernel scatter = make_copy(n.dtype, in(0).shape, dst, in(0).view);
      const auto bytes = static_cast<size_t>(n.numel() * esize);
      add_step([out, bytes, scatter = std::move(scatter)] {
        std::memset(out, 0, bytes);
        scatter();
      });
      return;
    }
    case Op::kConcat: {
      const auto axis = static_cast<size_t>(n.attrs.axes[0]);
      own_node(s);
      std::vector<Kernel> pieces;
      int64_t base = 0;
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        if (numel(in(i).shape) > 0) {
          View dst = s.view;
          dst.data += base * dst.strides[axis] * esize;
          pieces.push_back(make_copy(n.dtype, in(i).shape, dst, in(i).view));
        }
        base += in(i).shape[axis];
      }
      add_step([pieces = std::move(pieces)] {
        for (const Kernel& k : pieces) k();
      });
      return;
    }
    case Op::kMatmul: {
      auto blas_ok = [](const View& v, const Shape& shape) { return blas_operand(v, shape).has_value(); };
      const View a = readable(in(0), blas_ok), b = readable(in(1), blas_ok);
      add_step(make_matmul(n.shape, in(0).shape, a, in(1).shape, b, reinterpret_cast<float*>(own_node(s))));
      return;
    }

    case Op::kGather:
      add_step(make_gather(n, in(0).shape, in(0).view, in(1).view, own_node(s)));
      return;
    case Op::kScatterAdd:
      add_step(make_scatter_add(n, in(0).shape, in(0).view, in(1).view, f32(own_node(s))));
      return;
    case Op::kSoftmax:
    case Op::kLogSoftmax: {
      const View x = readable(in(0), is_contiguous);
      add_step(make_softmax(n, f32(x.data), f32(own_node(s))));
      return;
    }
    case Op::kCrossEntropy:
    case Op::kCrossEntropyGrad: {
      const View logits = readable(in(0), is_contiguous);
      const View dloss = n.op == Op::kCrossEntropyGrad ? in(2).view : View{};
      add_step(make_cross_entropy(n, in(0).shape, f32(logits.data), in(1).view, dloss, f32(own_node(s))));
      return;
    }
    case Op::kLayerNorm:
    case Op::kLayerNormGrad:
    case Op::kRmsNorm:
    case Op::kRmsNormGrad: {
      const View x = readable(in(0), is_contiguous);
      const float* dy = n.inputs.size() > 1 ? f32(readable(in(1), is_contiguous).data) : nullptr;
      add_step(make_norm(n, f32(x.data), dy, f32(own_node(s))));
      return;
    }
    case Op::kRandom:
      add_step(make_random(n, View{}, in(0).view, f32(own_node(s))));
      return;
    case Op::kDropout:
      add_step(make_random(n, in(0).view, in(1).view, f32(own_node(s))));
      return;
    case Op::kAttention:
    case Op::kAttentionGrad: {
      std::vector<View> views;
      for (size_t i = 0; i < n.inputs.size(); ++i) views.push_back(readable(in(i), attention_operand));
      add_step(make_attention(n, in(0).shape, in(1).shape, views, f32(own_node(s))));
      return;
    }
  }
  throw Error("[cpu] no kernel for " + node_ref(g, id));
}

void CpuExecutable::set_input(int32_t node, const void* host) {
  if (node < 0 || node >= static_cast<int32_t>(ops_.size()) || ops_[static_cast<size_t>(node)] != Op::kInput)
    throw Error("[cpu] set_input: node %" + std::to_string(node) + " is not an input");
  Slot& s = slots_[static_cast<size_t>(node)];
  const int64_t count = numel(s.shape);
  if (s.dtype == DType::kBool) {  // normalise so every kernel may assume 0/1
    const auto* src = static_cast<const uint8_t*>(host);
    auto* dst = reinterpret_cast<uint8_t*>(s.view.data);
    for (int64_t i = 0; i < count; ++i) dst[i] = src[i] != 0 ? 1 : 0;
  } else if (count > 0) {
    std::memcpy(s.view.data, host, static_cast<size_t>(count * dtype_size(s.dtype)));
  }
  input_set_[static_cast<size_t>(node)] = 1;
}

void CpuExecutable::execute() {
  for (size_t id = 0; id < ops_.size(); ++id)
    if (ops_[id] == Op::kInput && !input_set_[id])
      throw Error("[cpu] input '" + input_names_[id] + "' (%" + std::to_string(id) + ") was not set");
  if (profile_) {
    for (size_t i = 0; i < steps_.size(); ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      steps_[i]();
      step_seconds_[i] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    ++executions_;
  } else {
    for (const Kernel& k : steps_) k();
  }
  for (auto& [id, out] : outputs_)
    if (out.take) out.take();
  // Stage every aliased value before the first write, so all updates see pre-step values.
  for (const UpdatePlan& u : updates_)
    if (u.stage) u.stage();
  for (const UpdatePlan& u : updates_) u.apply();
}

CpuExecutable::~CpuExecutable() {
  if (!profile_ || executions_ == 0) return;
  std::map<std::string, std::pair<double, int>> by_label;
  double total = 0;
  for (size_t i = 0; i < steps_.size(); ++i) {
    auto& e = by_label[step_label_[i]];
    e.first += step_seconds_[i];
    e.second += 1;
    total += step_seconds_[i];
  }
  std::vector<std::pair<double, std::string>> rows;
  for (auto& [label, e] : by_label) rows.push_back({e.first, label + " x" + std::to_string(e.second)});
  std::sort(rows.rbegin(), rows.rend());
  std::fprintf(stderr, "[cpu profile] %zu steps, %.3f ms per execution\n", steps_.size(), total * 1e3 / double(executions_));
  for (size_t i = 0; i < rows.size() && i < 40; ++i)
    std::fprintf(stderr, "  %8.3f ms %5.1f%%  %s\n", rows[i].first * 1e3 / double(executions_), 100 * rows[i].first / total,
                 rows[i].second.c_str());
}

void CpuExecutable::read_output(int32_t node, void* host) {
  auto it = outputs_.find(node);
  if (it == outputs_.end()) throw Error("[cpu] read_output: node %" + std::to_string(node) + " is not an output");
  const Slot& s = slots_[static_cast<size_t>(node)];
  const View dst = contiguous_view(static_cast<std::byte*>(host), s.shape);
  if (numel(s.shape) == 0) return;
  if (it->second.snapshot) copy_now(s.dtype, s.shape, dst, contiguous_view(it->second.snapshot->data(), s.shape));
  else copy_now(s.dtype, s.shape, dst, s.view);
}

class CpuBackend final : public Backend {
 public:
  const char* name() const override { return "cpu"; }
  bool supports(ir::Op) const override { return true; }
  std::unique_ptr<Buffer> allocate(DType dtype, int64_t numel) override {
    if (numel < 0) throw Error("[cpu] allocate: negative element count " + std::to_string(numel));
    return std::make_unique<CpuBuffer>(dtype, numel);
  }
  void upload(Buffer& buffer, const void* host) override {
    HostMem& mem = cpu_buffer(buffer).mem;
    if (buffer.dtype() == DType::kBool) {
      const auto* src = static_cast<const uint8_t*>(host);
      auto* dst = reinterpret_cast<uint8_t*>(mem.data());
      for (int64_t i = 0; i < buffer.numel(); ++i) dst[i] = src[i] != 0 ? 1 : 0;
    } else if (mem.bytes() > 0) {
      std::memcpy(mem.data(), host, static_cast<size_t>(mem.bytes()));
    }
  }
  void download(const Buffer& buffer, void* host) override {
    const HostMem& mem = cpu_buffer(const_cast<Buffer&>(buffer)).mem;
    if (mem.bytes() > 0) std::memcpy(host, mem.data(), static_cast<size_t>(mem.bytes()));
  }
  std::unique_ptr<Executable> prepare(const ir::Graph& graph, const Bindings& bindings) override {
    return std::make_unique<CpuExecutable>(graph, bindings);
  }

 private:
  static CpuBuffer& cpu_buffer(Buffer& buffer) {
    auto* b = dynamic_cast<CpuBuffer*>(&buffer);
    if (!b) throw Error("[cpu] buffer was not allocated by the cpu backend");
    return *b;
  }
};

}  // namespace
}  // namespace cpu

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<cpu::CpuBackend>(); }

}  // namespace tg::backend
