// Places and steps, group by group (see schedule.h); launches and the arena are in
// schedule_arena.cc.
#include "passes/schedule.h"

#include <algorithm>

#include "ir/strides.h"
#include "passes/hoist.h"
#include "passes/schedule_internal.h"
#include "tensorgrad/errors.h"

namespace tg::passes {

using ir::Op;

bool is_view_op(Op op) {
  return op == Op::kReshape || op == Op::kPermute || op == Op::kBroadcastTo || op == Op::kSlice;
}

Scheduler::Scheduler(const ir::Graph& g, const Capabilities& caps, const ScheduleOptions& options)
    : g_(g), caps_(caps), options_(options) {
  s_.places.resize(static_cast<size_t>(g.size()));
  placed_.assign(static_cast<size_t>(g.size()), 0);
  deferrable_norm_.assign(static_cast<size_t>(g.size()), -1);
  deferrable_cast_.assign(static_cast<size_t>(g.size()), -1);
  s_.fusion = fuse(g, options.fuse, caps.reduction_sinks());
  s_.consumers.assign(static_cast<size_t>(g.size()), {});
  for (int32_t id = 0; id < g.size(); ++id)
    if (s_.fusion.group_of[static_cast<size_t>(id)] >= 0)
      for (int32_t in : g.node(id).inputs) s_.consumers[static_cast<size_t>(in)].push_back(id);
  if (options.fuse) split_waiting_casts();
}

void Scheduler::split_waiting_casts() {
  std::vector<KernelGroup>& groups = s_.fusion.groups;
  bool split = false;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    if (groups[gi].kind != KernelGroup::Kind::kElementwise || groups[gi].nodes.size() < 2) continue;
    for (int32_t c : groups[gi].nodes) {
      if (!cast_feeds_product(c)) continue;
      const ir::Node& n = g_.node(c);
      KernelGroup& grp = groups[gi];
      std::erase(grp.nodes, c);
      std::erase(grp.outputs, c);
      const int32_t x = n.inputs[0];  // now read outside the group
      if (std::find(grp.nodes.begin(), grp.nodes.end(), x) != grp.nodes.end() &&
          std::find(grp.outputs.begin(), grp.outputs.end(), x) == grp.outputs.end())
        grp.outputs.push_back(x);
      KernelGroup alone;
      alone.kind = KernelGroup::Kind::kElementwise;
      alone.nodes = alone.outputs = {c};
      groups.insert(groups.begin() + static_cast<std::ptrdiff_t>(gi) + 1, std::move(alone));
      split = true;
      break;  // at most one cast a group (the product reads one left operand)
    }
  }
  if (!split) return;
  for (size_t gi = 0; gi < groups.size(); ++gi)
    for (int32_t id : groups[gi].nodes)
      s_.fusion.group_of[static_cast<size_t>(id)] = static_cast<int32_t>(gi);
}

std::string Scheduler::ref(int32_t id) const {
  const ir::Node& n = g_.node(id);
  std::string s = std::string(ir::op_name(n.op)) + " %" + std::to_string(id);
  return n.name.empty() ? s : s + " '" + n.name + "'";
}

int32_t Scheduler::add_buffer(Buffer b) {
  s_.buffers.push_back(b);
  return static_cast<int32_t>(s_.buffers.size() - 1);
}

Place Scheduler::own(int64_t bytes, DType dtype, Buffer::Category category, const Shape& shape) {
  Buffer b;
  b.dtype = dtype;
  const int64_t a = std::max<int64_t>(caps_.alignment(), 1);
  b.bytes = (bytes + a - 1) / a * a;
  b.category = category;
  return Place{add_buffer(b), 0, contiguous_strides(shape)};
}

Place& Scheduler::own_node(int32_t id) {
  const ir::Node& n = g_.node(id);
  const Buffer::Category c = category_of(n);
  set_place(id, own(n.numel() * dtype_size(n.dtype), n.dtype, c, n.shape));
  return s_.places[static_cast<size_t>(id)];
}

void Scheduler::add_copy(int32_t node, const Place& from, const Place& to, int32_t reader) {
  Step st;
  st.kind = Step::Kind::kCopy;
  st.node = node;
  st.nodes = {reader >= 0 ? reader : node};
  st.in = {from};
  st.out = {to};
  st.bytes = 2 * g_.node(node).numel() * dtype_size(g_.node(node).dtype);
  s_.steps.push_back(std::move(st));
}

Place Scheduler::readable(int32_t consumer, size_t index) {
  return readable_as(consumer, index, g_.node(consumer).inputs[index]);
}

Place Scheduler::readable_as(int32_t consumer, size_t index, int32_t input) {
  const Place& p = s_.places[static_cast<size_t>(input)];
  const ir::Node& in = g_.node(input);
  if (caps_.reads(g_, g_.node(consumer), index, p.strides)) return p;
  const Place dense = own(in.numel() * dtype_size(in.dtype), in.dtype, Buffer::Category::kScratch, in.shape);
  add_copy(input, p, dense, consumer);
  return dense;
}

void Scheduler::set_place(int32_t id, const Place& p) {
  s_.places[static_cast<size_t>(id)] = p;
  placed_[static_cast<size_t>(id)] = 1;
}

bool Scheduler::escapes(int32_t id) const {
  return std::find(g_.outputs.begin(), g_.outputs.end(), id) != g_.outputs.end() ||
         std::any_of(g_.updates.begin(), g_.updates.end(),
                     [&](const ir::Graph::Update& u) { return u.value == id; });
}

int32_t Scheduler::sole_reader(int32_t id) const {
  const auto& cs = s_.consumers[static_cast<size_t>(id)];
  return !escapes(id) && cs.size() == 1 ? cs[0] : -1;
}

int32_t Scheduler::view_source(int32_t id) const {
  while (g_.node(id).op == Op::kBroadcastTo || g_.node(id).op == Op::kReshape) id = g_.node(id).inputs[0];
  return id;
}

void Scheduler::place_view_chain(int32_t id) {
  std::vector<int32_t> chain;
  for (int32_t x = id; !placed(x) && is_view_op(g_.node(x).op); x = g_.node(x).inputs[0]) chain.push_back(x);
  if (chain.empty() || !placed(g_.node(chain.back()).inputs[0])) return;
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) place_single(*it);
}

bool Scheduler::all_read(int32_t id, const std::vector<int64_t>& strides) const {
  for (int32_t c : s_.consumers[static_cast<size_t>(id)]) {
    const ir::Node& cn = g_.node(c);
    for (size_t k = 0; k < cn.inputs.size(); ++k)
      if (cn.inputs[k] == id && !caps_.reads(g_, cn, k, strides)) return false;
  }
  return true;
}

void Scheduler::bind_leaves() {
  for (int32_t id = 0; id < g_.size(); ++id) {
    const ir::Node& n = g_.node(id);
    if (n.op != Op::kParam && n.op != Op::kState && n.op != Op::kInput) continue;
    Buffer b;
    b.home = n.op == Op::kInput ? Buffer::Home::kInput : Buffer::Home::kBound;
    b.dtype = n.dtype;
    b.bytes = n.numel() * dtype_size(n.dtype);
    b.node = id;
    // An inference program's hoisted values (a weight's bf16 copy) count with the params.
    const bool param = n.op == Op::kParam || (n.op == Op::kState && n.name.starts_with(kHoistedPrefix));
    (param ? s_.params : n.op == Op::kState ? s_.optimizer_state : s_.inputs) += b.bytes;
    set_place(id, Place{add_buffer(b), 0, contiguous_strides(n.shape)});
  }
  for (const ir::Graph::Update& u : g_.updates) {
    if (u.target < 0 || u.target >= g_.size() || u.value < 0 || u.value >= g_.size())
      throw Error("[schedule] an update refers to an unknown node");
    const ir::Node& t = g_.node(u.target);
    const ir::Node& v = g_.node(u.value);
    if (t.op != Op::kParam && t.op != Op::kState)
      throw Error("[schedule] update target " + ref(u.target) + " is not a param or state");
    if (t.dtype != v.dtype || t.numel() != v.numel())
      throw Error("[schedule] update of " + ref(u.target) + " " + dtype_name(t.dtype) + shape_str(t.shape) +
                  " with " + dtype_name(v.dtype) + shape_str(v.shape));
  }
  for (int32_t out : g_.outputs)
    if (out < 0 || out >= g_.size())
      throw Error("[schedule] output %" + std::to_string(out) + " is not a node");
}

void Scheduler::place_constant(int32_t id) {
  const ir::Node& n = g_.node(id);
  // A fill read only by strided readers is one element at stride 0.
  const bool fill = n.op == Op::kConstant && (n.attrs.values.size() == 1 || n.numel() == 1);
  const std::vector<int64_t> zero(n.shape.size(), 0);
  const bool one = fill && all_read(id, zero);
  Buffer b;
  b.home = Buffer::Home::kConstant;
  b.dtype = n.dtype;
  b.bytes = (one ? 1 : n.numel()) * dtype_size(n.dtype);
  b.node = id;
  s_.constants += b.bytes;
  set_place(id, Place{add_buffer(b), 0, one ? zero : contiguous_strides(n.shape)});
}

void Scheduler::place_view(int32_t id, Place v) {
  if (all_read(id, v.strides)) {
    set_place(id, v);
    return;
  }
  const Place dst = own_node(id);
  add_copy(id, v, dst);
}

void Scheduler::place_single(int32_t id) {
  if (placed(id)) return;  // a leaf, or placed by another node's step (a result, an epilogue)
  const ir::Node& n = g_.node(id);
  const Place* in = n.inputs.empty() ? nullptr : &s_.places[static_cast<size_t>(n.inputs[0])];
  // clang-format off
  switch (n.op) {
    case Op::kParam: case Op::kState: case Op::kInput:
      return;  // bind_leaves
    case Op::kConstant: case Op::kArange:
      place_constant(id);
      return;
    case Op::kResult: {  // its part of the multi-output node's dense allocation
      Place p = *in;
      p.offset += ir::result_offset(g_.node(n.inputs[0]), static_cast<size_t>(n.attrs.axes[0])) * 4;
      p.strides = contiguous_strides(n.shape);
      set_place(id, p);
      return;
    }
    case Op::kReshape: {
      const Shape& xs = g_.node(n.inputs[0]).shape;
      if (auto st = reshaped_strides(xs, in->strides, n.shape)) {
        Place v = *in;
        v.strides = *st;
        place_view(id, std::move(v));
      } else {  // copied dense in the input's shape: row-major, so also in the new one
        const Place src = *in;
        const Place dst = own_node(id);
        add_copy(n.inputs[0], src, Place{dst.buffer, dst.offset, contiguous_strides(xs)});
      }
      return;
    }
    case Op::kPermute: {
      Place v = *in;
      v.strides.clear();
      for (int64_t a : n.attrs.axes) v.strides.push_back(in->strides[static_cast<size_t>(a)]);
      place_view(id, std::move(v));
      return;
    }
    case Op::kBroadcastTo: {
      const Shape& xs = g_.node(n.inputs[0]).shape;
      const size_t lead = n.shape.size() - xs.size();
      Place v = *in;
      v.strides.assign(n.shape.size(), 0);
      for (size_t d = 0; d < xs.size(); ++d) v.strides[lead + d] = xs[d] == 1 ? 0 : in->strides[d];
      place_view(id, std::move(v));
      return;
    }
    case Op::kSlice: {
      const auto axis = static_cast<size_t>(n.attrs.axes[0]);
      const auto start = static_cast<int64_t>(n.attrs.values[0]),
                 step = static_cast<int64_t>(n.attrs.values[1]);
      Place v = *in;
      if (n.numel() > 0) v.offset += start * v.strides[axis] * dtype_size(n.dtype);
      v.strides[axis] *= step;
      place_view(id, std::move(v));
      return;
    }
    default: break;
  }
  // clang-format on
  // clang-format off
  switch (n.op) {
    case Op::kLayerNorm: case Op::kRmsNorm:
      if (place_norm_affine(id)) return;
      break;
    case Op::kMatmul: case Op::kQuantMatmul: place_product(id); return;
    case Op::kUpdateSlice:
      if (place_update_rows(id)) return;
      break;
    default: break;
  }
  // clang-format on
  place_node(id);
}

void Scheduler::place_node(int32_t id) {
  const ir::Node& n = g_.node(id);
  Step st = node_step(id);
  for (size_t k = 0; k < n.inputs.size(); ++k) {
    st.in.push_back(readable(id, k));
    st.bytes += g_.node(n.inputs[k]).numel() * dtype_size(g_.node(n.inputs[k]).dtype);
  }
  st.layout = caps_.layout(g_, id, st.in, s_.buffers);
  const NodeLayout& lay = st.layout;
  const Buffer::Category category = category_of(n);
  // A concat that only feeds an update (an inference prologue's stacked weights) writes its
  // pieces straight into the update's target, as an elementwise group's output may.
  int32_t target = -1;
  const bool into_target = n.op == Op::kConcat && lay.bytes < 0 && lay.strides.empty() && !lay.zero_padding &&
                           in_place_target(id, s_.fusion.group_of[static_cast<size_t>(id)], target);
  Place out = into_target      ? s_.places[static_cast<size_t>(target)]
              : lay.bytes >= 0 ? own(lay.bytes, n.dtype, category, n.shape)
                               : own_node(id);
  for (size_t u = 0; into_target && u < g_.updates.size(); ++u)
    if (g_.updates[u].value == id) in_place_[u] = 1;
  if (!lay.strides.empty()) out.strides = lay.strides;
  if (lay.zero_padding && n.shape.size() >= 2) {
    s_.buffers[static_cast<size_t>(out.buffer)].pad_ld = out.strides[n.shape.size() - 2];
    s_.buffers[static_cast<size_t>(out.buffer)].pad_cols = n.shape.back();
  }
  set_place(id, out);
  st.out = {out};
  st.bytes += n.numel() * dtype_size(n.dtype);
  // Results: a slice of the node's buffer (dense, one after the other, unless the layout
  // says otherwise), or a buffer of their own; a concat of them may be the buffer itself.
  for (size_t r = 0; r < n.results.size(); ++r) {
    const NodeLayout::Result* lr = r < lay.results.size() ? &lay.results[r] : nullptr;
    const int64_t esize = dtype_size(n.results[r].dtype);
    Place rp{out.buffer, out.offset + (lr ? lr->offset : ir::result_offset(n, r)) * esize,
             contiguous_strides(n.results[r].shape)};
    if (lr && lr->own_bytes > 0) {
      rp = own(lr->own_bytes, n.results[r].dtype, Buffer::Category::kActivation, n.results[r].shape);
      st.out.push_back(rp);
    }
    if (lr && !lr->strides.empty()) rp.strides = lr->strides;
    for (int32_t c : s_.consumers[static_cast<size_t>(id)])
      if (g_.node(c).op == Op::kResult && g_.node(c).attrs.axes.at(0) == static_cast<int64_t>(r))
        set_place(c, rp);
  }
  if (lay.concat >= 0)
    set_place(lay.concat, Place{out.buffer, out.offset, contiguous_strides(g_.node(lay.concat).shape)});
  for (int64_t bytes : lay.scratch) st.scratch.push_back(add_scratch(bytes));
  s_.steps.push_back(std::move(st));
}

Place Scheduler::add_scratch(int64_t bytes) {
  return own(std::max<int64_t>(bytes, 1), DType::kF32, Buffer::Category::kScratch, {});
}

bool Scheduler::in_place_target(int32_t value, int32_t group, int32_t& target) const {
  if (!options_.reuse_memory) return false;
  int updates = 0;
  for (const ir::Graph::Update& u : g_.updates)
    if (u.value == value) {
      ++updates;
      target = u.target;
    }
  if (updates != 1 || target == value) return false;
  const Place& t = s_.places[static_cast<size_t>(target)];
  const ir::Node& tn = g_.node(target);
  if (!is_contiguous_strides(t.strides, tn.shape) || tn.numel() != g_.node(value).numel()) return false;
  // Every reader of the target's memory, through any chain of views, runs in this group or an
  // earlier one; this group reads it only element for element.
  std::vector<int32_t> stack{target};
  while (!stack.empty()) {
    const int32_t x = stack.back();
    stack.pop_back();
    if (std::find(g_.outputs.begin(), g_.outputs.end(), x) != g_.outputs.end()) return false;
    for (const ir::Graph::Update& u : g_.updates)
      if (u.value == x && x != value) return false;  // another update copies the old value
    for (int32_t c : s_.consumers[static_cast<size_t>(x)]) {
      const int32_t cg = s_.fusion.group_of[static_cast<size_t>(c)];
      if (cg > group) return false;
      if (is_view_op(g_.node(c).op)) {
        stack.push_back(c);
        continue;
      }
      if (cg == group) {
        const Place& xp = s_.places[static_cast<size_t>(x)];
        if (!is_contiguous_strides(xp.strides, g_.node(x).shape) || xp.offset != t.offset ||
            g_.node(x).numel() != tn.numel())
          return false;
      }
    }
  }
  return true;
}

void Scheduler::place_group(int32_t gi) {
  const KernelGroup& group = s_.fusion.groups[static_cast<size_t>(gi)];
  Step st;
  st.kind = Step::Kind::kGroup;
  st.group = gi;
  st.nodes = group.nodes;
  for (int32_t id : group.nodes)
    for (int32_t in : g_.node(id).inputs)
      if (s_.fusion.group_of[static_cast<size_t>(in)] != gi &&
          std::find(st.operand_nodes.begin(), st.operand_nodes.end(), in) == st.operand_nodes.end()) {
        st.operand_nodes.push_back(in);
        const Place& p = s_.places[static_cast<size_t>(in)];
        st.in.push_back(p);
        int64_t distinct = 1;  // a broadcast input is read once per distinct element
        for (size_t d = 0; d < p.strides.size(); ++d)
          if (p.strides[d] != 0) distinct *= g_.node(in).shape[d];
        st.bytes += distinct * dtype_size(g_.node(in).dtype);
      }
  // Stored outputs: straight into an update's target when that is safe, else their own
  // buffer; reduction sinks last.
  std::vector<int32_t> sinks;
  const bool has_sinks = std::any_of(group.nodes.begin(), group.nodes.end(),
                                     [&](int32_t id) { return g_.node(id).op == Op::kSum; });
  for (int32_t out : group.outputs) {
    if (g_.node(out).op == Op::kSum) continue;
    int32_t target = -1;
    const std::vector<int64_t> strides =
        has_sinks ? std::vector<int64_t>{} : caps_.group_output_strides(g_, out);
    if (in_place_target(out, gi, target)) {
      set_place(out, s_.places[static_cast<size_t>(target)]);
      for (size_t u = 0; u < g_.updates.size(); ++u)
        if (g_.updates[u].value == out) in_place_[u] = 1;
    } else if (!strides.empty()) {
      const ir::Node& n = g_.node(out);
      int64_t span = 1;  // elements from the first to one past the last
      for (size_t d = 0; d < n.shape.size(); ++d) span += (n.shape[d] - 1) * strides[d];
      Place p = own(n.numel() == 0 ? 0 : span * dtype_size(n.dtype), n.dtype, category_of(n), n.shape);
      p.strides = strides;
      Buffer& b = s_.buffers[static_cast<size_t>(p.buffer)];
      if (n.shape.size() >= 2 && strides.back() == 1) {  // padded rows, zero-filled by the group
        b.pad_ld = strides[n.shape.size() - 2];
        b.pad_cols = n.shape.back();
        b.bytes = std::max(b.bytes, n.numel() / n.shape.back() * b.pad_ld * dtype_size(n.dtype));
      }
      set_place(out, p);
    } else {
      own_node(out);
    }
    st.operand_nodes.push_back(out);
    st.out.push_back(s_.places[static_cast<size_t>(out)]);
  }
  for (int32_t id : group.nodes)
    if (g_.node(id).op == Op::kSum) {
      st.operand_nodes.push_back(id);
      st.out.push_back(own_node(id));
    }
  for (int32_t out : group.outputs) st.bytes += g_.node(out).numel() * dtype_size(g_.node(out).dtype);
  if (group.nodes.size() == 1 && cast_waits(group.nodes[0]))
    deferrable_cast_[static_cast<size_t>(group.nodes[0])] = static_cast<int32_t>(s_.steps.size());
  s_.steps.push_back(std::move(st));
}

Schedule schedule(const ir::Graph& graph, const Capabilities& caps, const ScheduleOptions& options) {
  Scheduler s(graph, caps, options);
  return s.run();
}

Schedule Scheduler::run() {
  bind_leaves();
  in_place_.assign(g_.updates.size(), 0);
  if (options_.fuse) match_norm_backwards();
  for (size_t gi = 0; gi < s_.fusion.groups.size(); ++gi) {
    if (place_norm_backwards_at(static_cast<int32_t>(gi))) continue;
    const KernelGroup& group = s_.fusion.groups[gi];
    if (placed(group.nodes.front())) continue;  // computed by another step (an epilogue, a norm's affine)
    if (group.kind == KernelGroup::Kind::kElementwise)
      place_group(static_cast<int32_t>(gi));
    else
      place_single(group.nodes.front());
  }
  settle_outputs_and_updates();
  assign_launches();
  place_arena();
  return std::move(s_);
}

}  // namespace tg::passes
