// Phase 1 of CPU preparation (see executable.h): places and steps, group by group.
#include <algorithm>
#include <cstring>
#include <optional>
#include <string>

#include "backend/cpu/executable.h"
#include "tensorgrad/errors.h"

namespace tg::backend::cpu {

using ir::Op;

namespace {

std::string node_ref(const ir::Graph& g, int32_t id) {
  const ir::Node& n = g.node(id);
  std::string s = std::string(ir::op_name(n.op)) + " %" + std::to_string(id);
  return n.name.empty() ? s : s + " '" + n.name + "'";
}

bool is_view_op(Op op) { return op == Op::kReshape || op == Op::kPermute || op == Op::kBroadcastTo || op == Op::kSlice; }

/// Whether `consumer` can read its input through `view` (of `shape`) without the producer
/// making it dense first. Copies and elementwise groups take any strides; reductions want
/// dense rows; BLAS wants unit stride along one of the two matrix axes.
bool accepts(const ir::Node& consumer, const View& view, const Shape& shape) {
  switch (consumer.op) {
#define TG_UNARY(Name, str, dtypes, expr) case Op::k##Name:
#define TG_BINARY(Name, str, dtypes, expr) case Op::k##Name:
#define TG_COMPARE(Name, str, dtypes, expr) case Op::k##Name:
#include "ir/ops.def"
    case Op::kCast: case Op::kWhere: case Op::kReshape: case Op::kPermute: case Op::kBroadcastTo:
    case Op::kSlice: case Op::kUnslice: case Op::kConcat: case Op::kResult:
      return true;
    case Op::kSum: case Op::kMax: case Op::kMin: case Op::kArgmax: case Op::kCumsum:
      return is_contiguous(view, shape);
    case Op::kMatmul:
      return blas_operand(view, shape).has_value();
    case Op::kGather: case Op::kScatterAdd: case Op::kRandom: case Op::kDropout:
      return true;  // strided readers: embedding ids arrive broadcast along the feature axis
    case Op::kUpdateSlice: case Op::kSample: case Op::kSelectiveScan: case Op::kSelectiveScanGrad:
      return is_contiguous(view, shape);
    case Op::kCrossEntropy: case Op::kCrossEntropyGrad:
      return shape.size() == 1 || is_contiguous(view, shape);  // 1-D targets/dloss strided; logits dense
    case Op::kSoftmax: case Op::kLogSoftmax: case Op::kLayerNorm: case Op::kLayerNormGrad: case Op::kRmsNorm:
    case Op::kRmsNormGrad:
      return is_contiguous(view, shape);
    case Op::kAttention: case Op::kAttentionGrad:
      return attention_operand(view, shape);  // any batch/head strides, unit stride along D
    case Op::kAttentionAt:
      return true;  // strided reader
    case Op::kParam: case Op::kInput: case Op::kState: case Op::kConstant: case Op::kArange:
      return false;  // leaves consume nothing
  }
  return false;
}

float* f32(std::byte* p) { return reinterpret_cast<float*>(p); }

}  // namespace

View CpuExecutable::view(const Place& p) const {
  std::byte* base = p.buf >= 0 ? arena_.data() + bufs_[static_cast<size_t>(p.buf)].offset : p.fixed;
  return View{base + p.offset, p.strides};
}

CpuExecutable::Place CpuExecutable::own(const ir::Node& n, int64_t bytes, const Shape& shape) {
  ArenaBuffer b;
  b.bytes = bytes;
  b.category = n.stage == ir::Stage::kBackward    ? Category::kGradient
               : n.stage == ir::Stage::kOptimizer ? Category::kOptimizer
                                                  : Category::kActivation;
  bufs_.push_back(b);
  return Place{static_cast<int32_t>(bufs_.size() - 1), nullptr, 0, contiguous_strides(shape)};
}

CpuExecutable::Place& CpuExecutable::own_node(const ir::Graph& g, int32_t id) {
  Slot& s = slots_[static_cast<size_t>(id)];
  s.place = own(g.node(id), numel(s.shape) * dtype_size(s.dtype), s.shape);
  s.placed = true;
  return s.place;
}

template <class Ok>
void CpuExecutable::add_views_step(const ir::Graph& g, int32_t id, size_t ins, Ok ok, ViewKernel make) {
  std::vector<Place> places;
  for (size_t i = 0; i < ins; ++i) places.push_back(readable(g, id, g.node(id).inputs[i], ok));
  const Place out = own_node(g, id);
  std::vector<const Place*> touched;
  for (const Place& p : places) touched.push_back(&p);
  add_step({id}, touched, {&out}, [this, places, out, make = std::move(make)] {
    std::vector<View> views;
    for (const Place& p : places) views.push_back(view(p));
    return make(views, f32(view(out).data));
  });
}

void CpuExecutable::add_step(std::vector<int32_t> nodes, const std::vector<const Place*>& touched,
                             const std::vector<const Place*>& written, std::function<Kernel()> build) {
  Step st;
  st.nodes = std::move(nodes);
  for (const Place* p : touched) {
    if (p->buf >= 0) st.bufs.push_back(p->buf);
    st.reads.push_back(p->key());
  }
  for (const Place* p : written) {
    if (p->buf >= 0) st.bufs.push_back(p->buf);
    st.writes.push_back(p->key());
  }
  st.build = std::move(build);
  for (int32_t id : st.nodes) {
    const Slot& s = slots_[static_cast<size_t>(id)];
    st.bytes += numel(s.shape) * dtype_size(s.dtype);
    if (graph_)
      for (int32_t in : graph_->node(id).inputs)
        st.bytes += numel(slots_[static_cast<size_t>(in)].shape) * dtype_size(slots_[static_cast<size_t>(in)].dtype);
  }
  steps_.push_back(std::move(st));
}

template <class Ok>
CpuExecutable::Place CpuExecutable::readable(const ir::Graph& g, int32_t consumer, int32_t input, Ok ok) {
  const Slot& in = slots_[static_cast<size_t>(input)];
  if (ok(probe(in.place), in.shape)) return in.place;
  Place dense = own(g.node(consumer), numel(in.shape) * dtype_size(in.dtype), in.shape);
  bufs_[static_cast<size_t>(dense.buf)].category = Category::kScratch;
  const Place src = in.place;
  const DType dt = in.dtype;
  const Shape shape = in.shape;
  add_step({consumer}, {&src}, {&dense}, [this, dt, shape, dense, src] { return make_copy(dt, shape, view(dense), view(src)); });
  return dense;
}

void CpuExecutable::bind_leaves(const ir::Graph& g, const Bindings& bindings) {
  for (int32_t id = 0; id < g.size(); ++id) {
    const ir::Node& n = g.node(id);
    if (n.op != Op::kParam && n.op != Op::kState) continue;
    auto it = bindings.find(id);
    if (it == bindings.end() || it->second == nullptr) throw Error("[cpu] " + node_ref(g, id) + " has no bound buffer");
    auto* buffer = dynamic_cast<CpuBuffer*>(it->second);
    if (!buffer) throw Error("[cpu] the buffer bound to " + node_ref(g, id) + " was not allocated by the cpu backend");
    if (buffer->dtype() != n.dtype || buffer->numel() != n.numel())
      throw Error("[cpu] " + node_ref(g, id) + " is " + dtype_name(n.dtype) + shape_str(n.shape) +
                  " but its bound buffer holds " + std::to_string(buffer->numel()) + " " + dtype_name(buffer->dtype()));
    Slot& s = slots_[static_cast<size_t>(id)];
    s.place = Place{-1, buffer->mem.data(), 0, contiguous_strides(n.shape)};
    s.placed = true;
    s.root = buffer;
    const int64_t bytes = n.numel() * dtype_size(n.dtype);
    (n.op == Op::kParam ? memory_.params : memory_.optimizer_state) += bytes;
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
      throw Error("[cpu] update of " + node_ref(g, u.target) + " " + dtype_name(t.dtype) + shape_str(t.shape) + " with " +
                  dtype_name(v.dtype) + shape_str(v.shape));
  }
}

/// An update value computed by group `group_index` may be written over its target when every
/// other reader of the target (through any chain of views) runs in an earlier group, no
/// graph output shows the old value, and the value feeds exactly this one update.
bool CpuExecutable::in_place_target(const ir::Graph& g, int32_t value, int32_t group_index, int32_t& target) const {
  int updates = 0;
  for (const ir::Graph::Update& u : g.updates)
    if (u.value == value) {
      ++updates;
      target = u.target;
    }
  if (updates != 1 || target == value || !options_.reuse_memory) return false;
  if (g.node(target).shape != g.node(value).shape && numel(g.node(target).shape) != numel(g.node(value).shape)) return false;
  std::vector<int32_t> stack{target};
  while (!stack.empty()) {
    const int32_t x = stack.back();
    stack.pop_back();
    if (std::find(g.outputs.begin(), g.outputs.end(), x) != g.outputs.end()) return false;
    for (const ir::Graph::Update& u : g.updates)  // another update copying the old value
      if (u.value == x && x != value) return false;
    for (int32_t c : consumers_[static_cast<size_t>(x)]) {
      if (is_view_op(g.node(c).op)) {
        stack.push_back(c);
        continue;
      }
      const int32_t gc = fusion_.group_of[static_cast<size_t>(c)];
      if (gc > group_index) return false;
      // Inside the group the old value must be read at the very index being written.
      if (gc == group_index && !is_contiguous(probe(slots_[static_cast<size_t>(x)].place), g.node(x).shape)) return false;
      if (gc == group_index && numel(g.node(x).shape) != numel(g.node(value).shape)) return false;
    }
  }
  return true;
}

void CpuExecutable::plan_fused(const ir::Graph& g, const passes::KernelGroup& group, int32_t group_index) {
  // Register the program: external inputs first (deduplicated), then one slot per node.
  std::vector<int32_t> input_nodes;
  std::unordered_map<int32_t, int32_t> slot_of;
  for (int32_t id : group.nodes)
    for (int32_t in : g.node(id).inputs)
      if (fusion_.group_of[static_cast<size_t>(in)] != group_index && !slot_of.count(in)) {
        slot_of[in] = static_cast<int32_t>(input_nodes.size());
        input_nodes.push_back(in);
      }
  for (size_t k = 0; k < group.nodes.size(); ++k)
    slot_of[group.nodes[k]] = static_cast<int32_t>(input_nodes.size() + k);

  // Outputs: straight into an update target when that is safe, else an arena buffer.
  // Reduction sinks get their own buffer, written when the group's partial sums merge.
  std::vector<int32_t> output_of(group.nodes.size(), -1), reduction_of(group.nodes.size(), -1);
  std::vector<const Place*> written;
  std::vector<Place> sink_places;
  std::vector<int64_t> sink_inner;
  for (size_t k = 0; k < group.nodes.size(); ++k)
    if (g.node(group.nodes[k]).op == Op::kSum) {
      reduction_of[k] = static_cast<int32_t>(sink_places.size());
      sink_places.push_back(own_node(g, group.nodes[k]));
      sink_inner.push_back(g.node(group.nodes[k]).numel());
    }
  for (int32_t id : group.outputs) {
    const auto k = static_cast<size_t>(std::find(group.nodes.begin(), group.nodes.end(), id) - group.nodes.begin());
    if (reduction_of[k] >= 0) continue;
    int32_t target = -1;
    Slot& s = slots_[static_cast<size_t>(id)];
    if (in_place_target(g, id, group_index, target)) {
      const Slot& t = slots_[static_cast<size_t>(target)];
      s.place = Place{-1, t.place.fixed, 0, contiguous_strides(s.shape)};
      s.root = t.root;
      s.placed = true;
      for (size_t u = 0; u < g.updates.size(); ++u)
        if (g.updates[u].value == id) in_place_[u] = 1;
    } else {
      own_node(g, id);
    }
    output_of[k] = static_cast<int32_t>(written.size());
    written.push_back(&s.place);
  }
  for (const Place& p : sink_places) written.push_back(&p);

  std::vector<const Place*> touched;
  std::vector<Place> in_places;
  for (int32_t in : input_nodes) in_places.push_back(slots_[static_cast<size_t>(in)].place);
  for (const Place& p : in_places) touched.push_back(&p);
  std::vector<Place> out_places;
  for (const Place* p : written) out_places.push_back(*p);
  out_places.resize(out_places.size() - sink_places.size());

  struct Proto {
    ir::Op op;
    DType dtype, in_dtype;
    std::array<int32_t, 3> args;
    int32_t output;
    int32_t reduction;
  };
  std::vector<Proto> protos;
  for (size_t k = 0; k < group.nodes.size(); ++k) {
    const ir::Node& n = g.node(group.nodes[k]);
    Proto p{n.op, n.dtype, g.node(n.inputs[n.op == Op::kWhere ? 1 : 0]).dtype, {-1, -1, -1}, output_of[k], reduction_of[k]};
    for (size_t a = 0; a < n.inputs.size(); ++a) p.args[a] = slot_of.at(n.inputs[a]);
    protos.push_back(p);
  }
  std::vector<DType> in_dtypes;
  for (int32_t in : input_nodes) in_dtypes.push_back(g.node(in).dtype);
  const Shape shape = g.node(group.nodes.front()).shape;

  add_step(group.nodes, touched, written, nullptr);
  Step& st = steps_.back();
  st.bytes = 0;  // a group moves only its inputs and outputs
  for (int32_t in : input_nodes) {  // a broadcast input is read once per distinct element
    const Slot& is = slots_[static_cast<size_t>(in)];
    int64_t distinct = 1;
    for (size_t d = 0; d < is.shape.size(); ++d)
      if (is.place.strides[d] != 0) distinct *= is.shape[d];
    st.bytes += distinct * dtype_size(is.dtype);
  }
  for (int32_t out : group.outputs) st.bytes += g.node(out).numel() * dtype_size(g.node(out).dtype);
  for (const Proto& p : protos) st.flops += (p.reduction >= 0 ? 1 : op_cost(p.op)) * numel(shape);
  for (size_t i = 0; i < out_places.size(); ++i)  // stage inputs sharing storage with an output
    for (const Place& ip : in_places)
      if (ip.key() == out_places[i].key()) st.reads.push_back(ip.key());
  st.build_fused = [this, shape, in_places, out_places, in_dtypes, protos, sink_places, sink_inner] {
    FusedSpec spec;
    spec.shape = shape;
    for (size_t i = 0; i < in_places.size(); ++i) {
      bool stage = false;
      for (const Place& o : out_places) stage = stage || o.key() == in_places[i].key();
      spec.inputs.push_back({view(in_places[i]), in_dtypes[i], stage});
    }
    for (const Place& o : out_places) spec.outputs.push_back(view(o).data);
    for (const Proto& p : protos) {
      if (p.reduction >= 0) spec.instrs.push_back({nullptr, p.dtype, p.args, -1, 1, p.reduction});
      else spec.instrs.push_back({block_function(p.op, p.in_dtype, p.dtype), p.dtype, p.args, p.output, op_cost(p.op), -1});
    }
    for (size_t r = 0; r < sink_places.size(); ++r)
      spec.reductions.push_back({sink_inner[r], f32(view(sink_places[r]).data)});
    return spec;
  };
}

void CpuExecutable::plan_single(const ir::Graph& g, int32_t id) {
  const ir::Node& n = g.node(id);
  Slot& s = slots_[static_cast<size_t>(id)];
  auto in = [&](size_t i) -> const Slot& { return slots_[static_cast<size_t>(n.inputs[i])]; };
  const int64_t esize = dtype_size(n.dtype);
  const DType dt = n.dtype;
  const Shape shape = n.shape;
  auto all_accept = [&](const std::vector<int64_t>& strides) {
    for (int32_t c : consumers_[static_cast<size_t>(id)])
      if (!accepts(g.node(c), View{nullptr, strides}, n.shape)) return false;
    return true;
  };
  // Broadcast/permute/slice: keep the view when every consumer can read it, else copy it dense.
  auto view_or_copy = [&](Place v, const Buffer* root) {
    if (all_accept(v.strides)) {
      s.place = std::move(v);
      s.placed = true;
      s.root = root;
      return;
    }
    const Place dst = own_node(g, id);
    add_step({id}, {&v}, {&dst}, [this, dt, shape, dst, v] { return make_copy(dt, shape, view(dst), view(v)); });
  };
  auto fixed = [&](int64_t bytes) {
    std::byte* p = fixed_mems_.emplace_back(bytes).data();
    memory_.constants += bytes;
    return p;
  };
  std::vector<Place> ins;
  for (size_t i = 0; i < n.inputs.size(); ++i) ins.push_back(in(i).place);

  switch (n.op) {
    case Op::kParam:
    case Op::kState:
      return;  // bound in bind_leaves
    case Op::kInput: {
      const int64_t bytes = n.numel() * esize;
      s.place = Place{-1, fixed_mems_.emplace_back(bytes).data(), 0, contiguous_strides(n.shape)};
      s.placed = true;
      memory_.inputs += bytes;
      return;
    }
    case Op::kConstant:
    case Op::kArange: {
      // Computed once here; a fill read only elementwise is one element at stride 0.
      const bool fill = n.op == Op::kConstant && n.attrs.values.size() == 1;
      std::vector<int64_t> zero(n.shape.size(), 0);
      if (fill && all_accept(zero)) {
        s.place = Place{-1, fixed(esize), 0, zero};
        store_double(n.dtype, s.place.fixed, 0, n.attrs.values[0]);
      } else {
        s.place = Place{-1, fixed(n.numel() * esize), 0, contiguous_strides(n.shape)};
        for (int64_t i = 0; i < n.numel(); ++i) {
          const double v = n.op == Op::kArange ? n.attrs.values[0] + static_cast<double>(i) * n.attrs.values[1]
                                               : n.attrs.values[fill ? 0 : static_cast<size_t>(i)];
          store_double(n.dtype, s.place.fixed, i, v);
        }
      }
      s.placed = true;
      return;
    }

    case Op::kSum:
    case Op::kMax:
    case Op::kMin:
    case Op::kArgmax: {
      const Place x = readable(g, id, n.inputs[0], is_contiguous);
      const Place out = own_node(g, id);
      const ir::Node node = n;
      const Shape xs = in(0).shape;
      const DType xt = in(0).dtype;
      add_step({id}, {&x}, {&out}, [this, node, xs, xt, x, out] {
        if (node.op == Op::kArgmax) return make_argmax(node, xs, xt, view(x).data, view(out).data);
        return make_reduce(node, xs, view(x).data, view(out).data);
      });
      return;
    }

    case Op::kCumsum: {
      const Place x = readable(g, id, n.inputs[0], is_contiguous);
      const Place out = own_node(g, id);
      const ir::Node node = n;
      add_step({id}, {&x}, {&out}, [this, node, x, out] { return make_cumsum(node, view(x).data, view(out).data); });
      return;
    }

    case Op::kResult:  // its part of the multi-output node's (dense) allocation
      s.place = in(0).place;
      s.place.offset += ir::result_offset(g.node(n.inputs[0]), static_cast<size_t>(n.attrs.axes[0])) * 4;
      s.place.strides = contiguous_strides(n.shape);
      s.placed = true;
      s.root = in(0).root;
      return;

    case Op::kReshape:
      if (is_contiguous(probe(in(0).place), in(0).shape)) {  // same bytes, new shape: an alias
        s.place = in(0).place;
        s.place.strides = contiguous_strides(n.shape);
        s.placed = true;
        s.root = in(0).root;
        return;
      } else if (auto st = reshaped_strides(in(0).shape, in(0).place.strides, n.shape)) {
        // A strided view whose new shape only splits axes, or merges axes that form one run
        // (q/k/v heads split out of the packed projection): still a view, when readers take it.
        Place v = in(0).place;
        v.strides = *st;
        view_or_copy(std::move(v), in(0).root);
        return;
      } else {
        const Place out = own_node(g, id);
        const Shape xs = in(0).shape;
        const Place x = ins[0];
        add_step({id}, {&x}, {&out}, [this, dt, xs, x, out] { return make_copy(dt, xs, View{view(out).data, contiguous_strides(xs)}, view(x)); });
        return;
      }
    case Op::kPermute: {
      Place v = in(0).place;
      v.strides.clear();
      for (int64_t a : n.attrs.axes) v.strides.push_back(in(0).place.strides[static_cast<size_t>(a)]);
      view_or_copy(std::move(v), in(0).root);
      return;
    }
    case Op::kBroadcastTo: {
      const Shape& xs = in(0).shape;
      const size_t lead = n.shape.size() - xs.size();
      Place v = in(0).place;
      v.strides.assign(n.shape.size(), 0);
      for (size_t i = 0; i < xs.size(); ++i) v.strides[lead + i] = xs[i] == 1 ? 0 : in(0).place.strides[i];
      view_or_copy(std::move(v), in(0).root);
      return;
    }
    case Op::kSlice: {
      const auto axis = static_cast<size_t>(n.attrs.axes[0]);
      const auto start = static_cast<int64_t>(n.attrs.values[0]), step = static_cast<int64_t>(n.attrs.values[1]);
      Place v = in(0).place;
      if (n.numel() > 0) v.offset += start * v.strides[axis] * esize;
      v.strides[axis] *= step;
      view_or_copy(std::move(v), in(0).root);
      return;
    }
    default:
      plan_kernel(g, id);
      return;
  }
}

void CpuExecutable::plan_kernel(const ir::Graph& g, int32_t id) {
  const ir::Node& n = g.node(id);
  auto in = [&](size_t i) -> const Slot& { return slots_[static_cast<size_t>(n.inputs[i])]; };
  const int64_t esize = dtype_size(n.dtype);
  const DType dt = n.dtype;
  const Shape shape = n.shape;
  std::vector<Place> ins;
  for (size_t i = 0; i < n.inputs.size(); ++i) ins.push_back(in(i).place);

  switch (n.op) {
    case Op::kUnslice: {
      const auto axis = static_cast<size_t>(n.attrs.axes[0]);
      const auto start = static_cast<int64_t>(n.attrs.values[0]), step = static_cast<int64_t>(n.attrs.values[1]);
      const Place out = own_node(g, id);
      Place dst = out;
      if (numel(in(0).shape) > 0) dst.offset += start * dst.strides[axis] * esize;  // else it may point nowhere
      dst.strides[axis] *= step;
      const Shape xs = in(0).shape;
      const auto bytes = static_cast<size_t>(n.numel() * esize);
      const Place x = ins[0];
      add_step({id}, {&x}, {&out}, [this, dt, xs, x, out, dst, bytes] {
        Kernel scatter = make_copy(dt, xs, view(dst), view(x));
        std::byte* o = view(out).data;
        return Kernel([o, bytes, scatter = std::move(scatter)] {
          std::memset(o, 0, bytes);
          scatter();
        });
      });
      return;
    }
    case Op::kConcat: {
      const auto axis = static_cast<size_t>(n.attrs.axes[0]);
      const Place out = own_node(g, id);
      std::vector<std::pair<Place, Place>> pieces;  // (dst, src)
      std::vector<Shape> piece_shapes;
      int64_t base = 0;
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        if (numel(in(i).shape) > 0) {
          Place dst = out;
          dst.offset += base * dst.strides[axis] * esize;
          pieces.push_back({dst, ins[i]});
          piece_shapes.push_back(in(i).shape);
        }
        base += in(i).shape[axis];
      }
      std::vector<const Place*> touched;
      for (const Place& p : ins) touched.push_back(&p);
      add_step({id}, touched, {&out}, [this, dt, pieces, piece_shapes] {
        std::vector<Kernel> ks;
        for (size_t i = 0; i < pieces.size(); ++i)
          ks.push_back(make_copy(dt, piece_shapes[i], view(pieces[i].first), view(pieces[i].second)));
        return Kernel([ks = std::move(ks)] {
          for (const Kernel& k : ks) k();
        });
      });
      return;
    }
    case Op::kMatmul: {
      auto blas_ok = [](const View& v, const Shape& sh) { return blas_operand(v, sh).has_value(); };
      const Place a = readable(g, id, n.inputs[0], blas_ok), b = readable(g, id, n.inputs[1], blas_ok);
      const Place out = own_node(g, id);
      const Shape as = in(0).shape, bs = in(1).shape;
      add_step({id}, {&a, &b}, {&out}, [this, shape, as, bs, a, b, out] {
        return make_matmul(shape, as, view(a), bs, view(b), f32(view(out).data));
      });
      steps_.back().flops = 2 * n.numel() * as.back();
      return;
    }

    case Op::kGather:
    case Op::kScatterAdd: {
      const Place out = own_node(g, id);
      const ir::Node node = n;
      const Shape xs = in(0).shape;
      add_step({id}, {&ins[0], &ins[1]}, {&out}, [this, node, xs, x = ins[0], idx = ins[1], out] {
        if (node.op == Op::kGather) return make_gather(node, xs, view(x), view(idx), view(out).data);
        return make_scatter_add(node, xs, view(x), view(idx), f32(view(out).data));
      });
      return;
    }
    case Op::kUpdateSlice: {
      const Place dst = readable(g, id, n.inputs[0], is_contiguous), src = readable(g, id, n.inputs[1], is_contiguous),
                  pos = readable(g, id, n.inputs[2], is_contiguous);
      const Place out = own_node(g, id);
      const ir::Node node = n;
      const Shape ss = in(1).shape;
      const bool per_row = !in(2).shape.empty();
      add_step({id}, {&dst, &src, &pos}, {&out}, [this, node, ss, per_row, dst, src, pos, out] {
        return make_update_slice(node, ss, per_row, view(dst).data, view(src).data,
                                 reinterpret_cast<const int32_t*>(view(pos).data), view(out).data);
      });
      return;
    }
    default:
      plan_nn(g, id);
      return;
  }
}

void CpuExecutable::plan_nn(const ir::Graph& g, int32_t id) {
  const ir::Node& n = g.node(id);
  auto in = [&](size_t i) -> const Slot& { return slots_[static_cast<size_t>(n.inputs[i])]; };
  std::vector<Place> ins;
  for (size_t i = 0; i < n.inputs.size(); ++i) ins.push_back(in(i).place);
  switch (n.op) {
    case Op::kSoftmax:
    case Op::kLogSoftmax: {
      const Place x = readable(g, id, n.inputs[0], is_contiguous);
      const Place out = own_node(g, id);
      const ir::Node node = n;
      add_step({id}, {&x}, {&out}, [this, node, x, out] { return make_softmax(node, f32(view(x).data), f32(view(out).data)); });
      return;
    }
    case Op::kCrossEntropy:
    case Op::kCrossEntropyGrad: {
      const Place logits = readable(g, id, n.inputs[0], is_contiguous);
      const bool grad = n.op == Op::kCrossEntropyGrad;
      const Place dloss = grad ? ins[2] : Place{};
      const Place out = own_node(g, id);
      const ir::Node node = n;
      const Shape ls = in(0).shape;
      std::vector<const Place*> touched{&logits, &ins[1]};
      if (grad) touched.push_back(&dloss);
      add_step({id}, touched, {&out}, [this, node, ls, logits, t = ins[1], dloss, grad, out] {
        return make_cross_entropy(node, ls, f32(view(logits).data), view(t), grad ? view(dloss) : View{}, f32(view(out).data));
      });
      return;
    }
    case Op::kLayerNorm:
    case Op::kLayerNormGrad:
    case Op::kRmsNorm:
    case Op::kRmsNormGrad: {
      const Place x = readable(g, id, n.inputs[0], is_contiguous);
      const bool grad = n.inputs.size() > 1;
      const Place dy = grad ? readable(g, id, n.inputs[1], is_contiguous) : Place{};
      const Place out = own_node(g, id);
      const ir::Node node = n;
      std::vector<const Place*> touched{&x};
      if (grad) touched.push_back(&dy);
      add_step({id}, touched, {&out}, [this, node, x, dy, grad, out] {
        return make_norm(node, f32(view(x).data), grad ? f32(view(dy).data) : nullptr, f32(view(out).data));
      });
      return;
    }
    case Op::kSample: {
      const Place logits = readable(g, id, n.inputs[0], is_contiguous), params = readable(g, id, n.inputs[1], is_contiguous),
                  key = readable(g, id, n.inputs[2], is_contiguous);
      const Place out = own_node(g, id);
      const int64_t vocab = in(0).shape.back(), rows = n.numel();
      add_step({id}, {&logits, &params, &key}, {&out}, [this, rows, vocab, logits, params, key, out] {
        return make_sample(rows, vocab, f32(view(logits).data), f32(view(params).data),
                           reinterpret_cast<const int32_t*>(view(key).data), reinterpret_cast<int32_t*>(view(out).data));
      });
      return;
    }
    case Op::kRandom:
    case Op::kDropout: {
      const bool drop = n.op == Op::kDropout;
      const Place out = own_node(g, id);
      const ir::Node node = n;
      const Place key = ins[drop ? 1 : 0];
      const Place x = drop ? ins[0] : Place{};
      std::vector<const Place*> touched{&key};
      if (drop) touched.push_back(&x);
      add_step({id}, touched, {&out}, [this, node, x, key, drop, out] {
        return make_random(node, drop ? view(x) : View{}, view(key), f32(view(out).data));
      });
      return;
    }
    case Op::kSelectiveScan:
    case Op::kSelectiveScanGrad: {
      const ir::Node node = n;
      const Shape us = in(0).shape, bs = in(3).shape;
      add_views_step(g, id, n.inputs.size(), is_contiguous, [node, us, bs](const std::vector<View>& v, float* out) {
        std::vector<const float*> ptrs;
        for (const View& x : v) ptrs.push_back(reinterpret_cast<const float*>(x.data));
        return make_selective_scan(node, us, bs, ptrs, out);
      });
      return;
    }
    case Op::kAttentionAt: {
      const ir::Node node = n;
      const Shape qs = in(0).shape, ks = in(1).shape;
      add_views_step(g, id, 4, [](const View&, const Shape&) { return true; },
                     [node, qs, ks](const std::vector<View>& v, float* out) { return make_attention_at(node, qs, ks, v, out); });
      steps_.back().flops = 4 * numel(qs) * ks[2] / 2;
      return;
    }
    case Op::kAttention:
    case Op::kAttentionGrad: {
      const ir::Node node = n;
      const Shape qs = in(0).shape, ks = in(1).shape;
      // q, k, v (and dout): the backward recomputes the forward rather than read its output.
      add_views_step(g, id, std::min<size_t>(n.inputs.size(), 4), attention_operand,
                     [node, qs, ks](const std::vector<View>& v, float* out) { return make_attention(node, qs, ks, v, out); });
      // q·kᵀ and p·v forward (half of it causal); the backward recomputes p and adds three more.
      steps_.back().flops = (n.op == Op::kAttention ? 4 : 10) * numel(qs) * ks[2] / (n.attrs.causal ? 2 : 1);
      return;
    }

    default:
      break;
  }
  // Elementwise ops only reach here with fusion off or through a group of one: same path.
  throw Error("[cpu] no kernel for " + node_ref(g, id));
}

}  // namespace tg::backend::cpu
