// Steps that compute more than one node beyond elementwise groups (see schedule.h), each taken
// only where the backend's Capabilities accept it:
//  - a norm and the affine group {·w[, +b]} that alone reads it: one step writing the affine value;
//  - a product with its epilogue nodes (x·W + b, then gelu(·) or (·) + r) and a norm step whose
//    value only its left operand reads;
//  - a norm gradient with its neighbours: autograd leaves, per affine norm, dy = dz·w (a mul),
//    x̂ = norm(x) again (remat), dw = Σrows dz·x̂ (a mul and a sum), db = Σrows dz, dx =
//    norm_grad(x, dy); one step reads x and dz once and writes dx, dw and db;
//  - update_slice writing its rows straight into the state it updates (a KV cache), beside a
//    sibling written at the same offsets.
#include <algorithm>

#include "ir/strides.h"
#include "passes/schedule_internal.h"

namespace tg::passes {

using ir::Op;

namespace {

bool is_norm_grad(Op op) { return op == Op::kLayerNormGrad || op == Op::kRmsNormGrad; }
Op forward_of(Op grad) { return grad == Op::kLayerNormGrad ? Op::kLayerNorm : Op::kRmsNorm; }

}  // namespace

bool Scheduler::place_norm_affine(int32_t id) {
  const ir::Node& f = g_.node(id);
  if (!options_.fuse || f.dtype != DType::kF32 || !caps_.norm_affine(g_, id)) return false;
  auto group = [&](int32_t n) { return s_.fusion.group_of[static_cast<size_t>(n)]; };
  const int64_t cols = f.shape.back();
  // The [C] param a broadcast operand of `op` (other than `self`) reads, or -1.
  auto vector_param = [&](const ir::Node& op, int32_t self) {
    const int32_t other = op.inputs[0] == self ? op.inputs[1] : op.inputs[0];
    if (op.inputs[0] == op.inputs[1]) return -1;
    const int32_t src = view_source(other);
    const ir::Node& p = g_.node(src);
    return p.op == Op::kParam && p.dtype == DType::kF32 && p.numel() == cols ? src : -1;
  };
  const int32_t mul = sole_reader(id);
  if (mul < 0 || g_.node(mul).op != Op::kMul || g_.node(mul).shape != f.shape || group(mul) < 0) return false;
  const int32_t w = vector_param(g_.node(mul), id);
  if (w < 0) return false;
  int32_t add = sole_reader(mul), b = -1;
  if (add >= 0 && (g_.node(add).op != Op::kAdd || g_.node(add).shape != f.shape || group(add) != group(mul)))
    add = -1;
  if (add >= 0 && (b = vector_param(g_.node(add), mul)) < 0) add = -1;
  std::vector<int32_t> absorbed = add >= 0 ? std::vector<int32_t>{mul, add} : std::vector<int32_t>{mul};
  std::vector<int32_t> have = s_.fusion.groups[static_cast<size_t>(group(mul))].nodes;
  std::sort(have.begin(), have.end());
  if (have != absorbed) return false;
  const int32_t last = absorbed.back();
  Step st = node_step(id);
  st.nodes.insert(st.nodes.end(), absorbed.begin(), absorbed.end());
  st.fused.mul = mul;
  st.fused.add = add;
  st.in = {readable(id, 0), s_.places[static_cast<size_t>(w)]};
  if (add >= 0) st.in.push_back(s_.places[static_cast<size_t>(b)]);
  st.out = {own_node(last)};
  st.bytes = 2 * f.numel() * 4;
  for (int32_t x : st.nodes) set_place(x, st.out[0]);  // only the last holds a value
  // A decode step's few rows feeding a product may wait for it: the product may normalise its
  // rows itself. Not when x is a state or updated: an update written in place before the
  // product could change x first.
  const int32_t x_source = view_source(f.inputs[0]);
  const bool x_updated = g_.node(x_source).op == Op::kState ||
                         std::any_of(g_.updates.begin(), g_.updates.end(),
                                     [&](const ir::Graph::Update& u) { return u.target == x_source; });
  if (!x_updated && caps_.norm_deferrable(g_, id) && read_as_left_operands(last))
    deferrable_norm_[static_cast<size_t>(last)] = static_cast<int32_t>(s_.steps.size());
  s_.steps.push_back(std::move(st));
  return true;
}

void Scheduler::keep_step(int32_t step) {
  if (step < 0) return;
  kept_steps_.insert(step);
  s_.steps[static_cast<size_t>(step)].absorbed = false;
}

void Scheduler::absorb_step(int32_t step) {
  if (kept_steps_.count(step) == 0) s_.steps[static_cast<size_t>(step)].absorbed = true;
}

void Scheduler::absorb(int32_t node, int32_t product) {
  int32_t& gi = s_.fusion.group_of[static_cast<size_t>(node)];
  if (KernelGroup& grp = s_.fusion.groups[static_cast<size_t>(gi)]; grp.nodes.size() > 1) {
    std::erase(grp.nodes, node);
    std::erase(grp.outputs, node);
  }
  gi = s_.fusion.group_of[static_cast<size_t>(product)];
}

std::vector<int32_t> Scheduler::left_operand_products(int32_t id) const {
  const auto& cs = s_.consumers[static_cast<size_t>(id)];
  if (escapes(id) || cs.empty()) return {};
  for (int32_t r : cs) {
    const ir::Node& m = g_.node(r);
    const bool product = m.op == Op::kMatmul || m.op == Op::kQuantMatmul;
    if (!product || m.inputs[0] != id || m.inputs[1] == id) return {};
  }
  return cs;
}

bool Scheduler::read_as_left_operands(int32_t id) const {
  if (!left_operand_products(id).empty()) return true;
  const int32_t reader = sole_reader(id);  // or through one cast to bf16 the products take
  return reader >= 0 && g_.node(reader).op == Op::kCast && cast_waits(reader);
}

bool Scheduler::cast_feeds_product(int32_t id) const {
  const ir::Node& n = g_.node(id);
  if (n.op != Op::kCast || !is_half(n.dtype) || g_.node(n.inputs[0]).dtype != DType::kF32) return false;
  const std::vector<int32_t> readers = left_operand_products(id);
  if (readers.empty()) return false;
  // Not when the cast reads a state or an updated value: an update written in place before the
  // product could change it first (as for the deferred norm).
  const int32_t source = view_source(n.inputs[0]);
  const bool updated = g_.node(source).op == Op::kState ||
                       std::any_of(g_.updates.begin(), g_.updates.end(),
                                   [&](const ir::Graph::Update& u) { return u.target == source; });
  return !updated && std::all_of(readers.begin(), readers.end(),
                                 [&](int32_t r) { return caps_.cast_deferrable(g_, id, r); });
}

bool Scheduler::cast_waits(int32_t id) const {
  const int32_t group = s_.fusion.group_of[static_cast<size_t>(id)];
  return group >= 0 && s_.fusion.groups[static_cast<size_t>(group)].nodes.size() == 1 &&
         cast_feeds_product(id);
}

ProductCandidates Scheduler::product_candidates(int32_t id) {
  const ir::Node& n = g_.node(id);
  ProductCandidates c;
  // Alone in its group, or in an elementwise one that does not accumulate x: a reduction sink
  // stays with the value it sums (the sinks kernel computes that value itself).
  auto joinable = [&](int32_t x) {
    const KernelGroup& grp =
        s_.fusion.groups[static_cast<size_t>(s_.fusion.group_of[static_cast<size_t>(x)])];
    if (grp.nodes.size() == 1) return true;
    return grp.kind == KernelGroup::Kind::kElementwise &&
           std::none_of(grp.nodes.begin(), grp.nodes.end(),
                        [&](int32_t m) { return g_.node(m).op == Op::kSum && g_.node(m).inputs[0] == x; });
  };
  int32_t a = n.inputs[0];
  if (const int32_t d = deferrable_cast_[static_cast<size_t>(a)];
      d >= 0 &&
      is_contiguous_strides(s_.places[static_cast<size_t>(g_.node(a).inputs[0])].strides, g_.node(a).shape)) {
    c.cast_step = d;
    c.cast = a;
    a = g_.node(a).inputs[0];
  }
  if (const int32_t d = deferrable_norm_[static_cast<size_t>(a)];
      d >= 0 && n.inputs[1] != n.inputs[0] && (a == n.inputs[0] || c.cast >= 0)) {
    c.norm_step = d;
    c.norm = s_.steps[static_cast<size_t>(d)].node;
  }
  // x·W + b with b a vector broadcast over the rows (placed now: usually traced after the product).
  if (const int32_t a = sole_reader(id); a >= 0 && g_.node(a).op == Op::kAdd && g_.node(a).shape == n.shape &&
                                         joinable(a) && g_.node(a).inputs[0] != g_.node(a).inputs[1]) {
    const int32_t other = g_.node(a).inputs[0] == id ? g_.node(a).inputs[1] : g_.node(a).inputs[0];
    place_view_chain(other);
    const Place& o = s_.places[static_cast<size_t>(other)];
    bool vector = placed(other) && !o.strides.empty() && o.strides.back() == 1;
    for (size_t d = 0; d + 1 < n.shape.size() && vector; ++d)
      vector = o.strides[d] == 0 || g_.node(other).shape[d] == 1;
    if (vector) c.bias_add = a;
  }
  const int32_t y = c.bias_add >= 0 ? c.bias_add : id;
  if (const int32_t r = sole_reader(y); r >= 0 && joinable(r) && g_.node(r).shape == n.shape) {
    const ir::Node& rn = g_.node(r);
    if (rn.op == Op::kGeluTanh) c.gelu = r;
    if (rn.op == Op::kAdd && rn.inputs[0] != rn.inputs[1]) {  // (·) + z, z dense in the output's layout
      const int32_t z = rn.inputs[0] == y ? rn.inputs[1] : rn.inputs[0];
      const Place& zp = s_.places[static_cast<size_t>(z)];
      if (placed(z) && g_.node(z).dtype == DType::kF32 && g_.node(z).shape == n.shape &&
          is_contiguous_strides(zp.strides, n.shape))
        c.residual_add = r;
    }
  }
  return c;
}

void Scheduler::place_product(int32_t id) {
  const ir::Node& n = g_.node(id);
  Step st = node_step(id);
  st.in = {readable(id, 0), readable(id, 1)};
  if (n.op == Op::kQuantMatmul)  // the weight's scales (and a 4-bit one's offsets)
    for (size_t i = 2; i < n.inputs.size(); ++i) st.in.push_back(readable(id, i));
  const ProductCandidates c =
      options_.fuse && caps_.fuses_products() ? product_candidates(id) : ProductCandidates{};
  const ProductChoice ch = caps_.product(g_, id, st.in, s_.buffers, c);
  auto other_input = [&](int32_t node, int32_t self) {
    const ir::Node& a = g_.node(node);
    return a.inputs[0] == self ? a.inputs[1] : a.inputs[0];
  };
  if (ch.bias && c.bias_add >= 0) {
    st.fused.bias_add = c.bias_add;
    st.in.push_back(s_.places[static_cast<size_t>(other_input(c.bias_add, id))]);
  }
  const int32_t y = st.fused.bias_add >= 0 ? st.fused.bias_add : id;
  if (ch.gelu && c.gelu >= 0 && (c.bias_add < 0 || ch.bias)) st.fused.gelu = c.gelu;
  if (ch.residual && c.residual_add >= 0 && (c.bias_add < 0 || ch.bias) && st.fused.gelu < 0) {
    st.fused.residual_add = c.residual_add;
    st.in.push_back(s_.places[static_cast<size_t>(other_input(c.residual_add, y))]);
  }
  // A deferred cast or norm step may feed several products (q, k and v reading one normalised
  // x): each that can computes it itself, and the step emits nothing unless one of them cannot
  // (then it runs, and so does the norm step the cast reads).
  const bool takes_cast = ch.cast && c.cast_step >= 0;
  const bool takes_norm = ch.norm && c.norm_step >= 0 && (c.cast < 0 || ch.cast);
  if (c.cast_step >= 0 && !takes_cast) {
    keep_step(c.cast_step);
    keep_step(c.norm_step);
  }
  if (c.norm_step >= 0 && !takes_norm) keep_step(c.norm_step);
  if (takes_cast) {
    absorb_step(c.cast_step);
    st.fused.cast_step = c.cast_step;
    st.in[0] = s_.places[static_cast<size_t>(g_.node(c.cast).inputs[0])];
  }
  if (takes_norm) {
    absorb_step(c.norm_step);
    st.fused.norm_step = c.norm_step;
    const Step& norm = s_.steps[static_cast<size_t>(c.norm_step)];
    st.in.insert(st.in.end(), norm.in.begin(), norm.in.end());
  }
  for (int32_t x : {st.fused.bias_add, st.fused.gelu, st.fused.residual_add})
    if (x >= 0) {
      absorb(x, id);
      st.nodes.push_back(x);
    }
  // The output belongs to the last node the step computes; the others share its place.
  const int32_t holder = st.nodes.back();
  const ir::Node& h = g_.node(holder);
  const Buffer::Category category = category_of(h);
  Place out = ch.out_bytes >= 0 ? own(ch.out_bytes, n.dtype, category, n.shape) : own_node(holder);
  if (!ch.out_strides.empty()) out.strides = ch.out_strides;
  for (int32_t x : st.nodes) set_place(x, out);
  st.out = {out};
  for (int64_t bytes : ch.scratch) st.scratch.push_back(add_scratch(bytes));
  // The operands at their own element sizes (a product's bf16 weight moves 2 bytes an element).
  st.bytes = 0;
  for (size_t i = 0; i < n.inputs.size(); ++i)
    st.bytes += g_.node(n.inputs[i]).numel() * dtype_size(g_.node(n.inputs[i]).dtype);
  st.bytes += n.numel() * dtype_size(n.dtype);
  s_.steps.push_back(std::move(st));
}

bool Scheduler::place_update_rows(int32_t id) {
  if (!caps_.update_rows_in_place() || !options_.reuse_memory) return false;
  const ir::Node& n = g_.node(id);
  // Whether update_slice `u` writes back over its own cache (the update at index ui), which
  // nothing else reads and which lies dense.
  auto in_place = [&](int32_t u, size_t& ui) {
    const int32_t d = g_.node(u).inputs[0];
    ui = g_.updates.size();
    for (size_t i = 0; i < g_.updates.size(); ++i)
      if (g_.updates[i].value == u && g_.updates[i].target == d) ui = i;
    const Place& dp = s_.places[static_cast<size_t>(d)];
    return ui < g_.updates.size() && s_.consumers[static_cast<size_t>(d)].size() == 1 &&
           std::count_if(g_.updates.begin(), g_.updates.end(),
                         [&](const ir::Graph::Update& x) { return x.target == d; }) == 1 &&
           is_contiguous_strides(dp.strides, g_.node(d).shape);
  };
  size_t update = 0;
  if (!in_place(id, update)) return false;
  const Place& dst = s_.places[static_cast<size_t>(n.inputs[0])];
  const Place& src = s_.places[static_cast<size_t>(n.inputs[1])];
  Step st = node_step(id);
  st.in = {readable(id, 1), readable(id, 2), dst};
  st.fused.rows_in_place = true;
  // A sibling written at the same offsets with the same layout (the layer's other cache).
  for (size_t u = 0; u < g_.updates.size() && st.fused.sibling < 0; ++u) {
    const int32_t v = g_.updates[u].value;
    if (v == id || g_.node(v).op != Op::kUpdateSlice || placed(v)) continue;
    const ir::Node& vn = g_.node(v);
    const Place &src2 = s_.places[static_cast<size_t>(vn.inputs[1])],
                &dst2 = s_.places[static_cast<size_t>(vn.inputs[0])];
    size_t vu = 0;
    if (vn.inputs[2] == n.inputs[2] && vn.attrs.axes == n.attrs.axes && placed(vn.inputs[1]) &&
        g_.node(vn.inputs[0]).shape == g_.node(n.inputs[0]).shape && dst2.strides == dst.strides &&
        g_.node(vn.inputs[1]).shape == g_.node(n.inputs[1]).shape &&
        (caps_.sibling_rows_any_strides() || src2.strides == src.strides) &&
        g_.node(vn.inputs[1]).dtype == g_.node(n.inputs[1]).dtype && in_place(v, vu)) {
      st.fused.sibling = v;
      st.nodes.push_back(v);
      st.in.push_back(readable(v, 1));
      st.in.push_back(dst2);
      set_place(v, dst2);
      in_place_[vu] = 1;
    }
  }
  st.out = {dst};
  st.bytes = 2 * g_.node(n.inputs[1]).numel() * dtype_size(n.dtype) * static_cast<int64_t>(st.nodes.size());
  set_place(id, dst);
  in_place_[update] = 1;
  s_.steps.push_back(std::move(st));
  return true;
}

void Scheduler::match_norm_backwards() {
  absorbed_groups_.assign(s_.fusion.groups.size(), 0);
  auto group = [&](int32_t id) { return s_.fusion.group_of[static_cast<size_t>(id)]; };
  auto only_reader = [&](int32_t x, int32_t c) { return sole_reader(x) == c; };
  auto group_is = [&](int32_t gi, std::vector<int32_t> nodes) {
    std::vector<int32_t> have = s_.fusion.groups[static_cast<size_t>(gi)].nodes;
    std::sort(nodes.begin(), nodes.end());
    std::sort(have.begin(), have.end());
    return have == nodes;
  };
  // A sum over every axis but the last of a [..., C] value, to [1, …, 1, C] or [C].
  auto column_sum_of = [&](int32_t s, int32_t input, int64_t cols) {
    const ir::Node& n = g_.node(s);
    if (n.op != Op::kSum || n.inputs[0] != input || n.dtype != DType::kF32 || n.shape.empty() ||
        n.shape.back() != cols || n.numel() != cols)
      return false;
    return n.attrs.axes.size() + 1 == g_.node(input).shape.size();
  };
  for (int32_t id = 0; id < g_.size(); ++id) {
    const ir::Node& lg = g_.node(id);
    if (!is_norm_grad(lg.op) || group(id) < 0 || lg.dtype != DType::kF32 || !caps_.norm_backward(g_, id))
      continue;
    const int64_t cols = lg.shape.back();
    NormBackward m;
    m.grad = id;
    m.x = lg.inputs[0];
    m.dz = lg.inputs[1];
    std::vector<int32_t> groups{group(id)};
    // dy = dz · broadcast(w [C]) read only here: folded in.
    if (const ir::Node& mul = g_.node(m.dz); mul.op == Op::kMul && mul.shape == lg.shape &&
                                             only_reader(m.dz, id) && group(m.dz) >= 0 &&
                                             group_is(group(m.dz), {m.dz})) {
      for (int side = 0; side < 2; ++side) {
        const int32_t w = mul.inputs[static_cast<size_t>(side)],
                      other = mul.inputs[static_cast<size_t>(1 - side)];
        const int32_t src = view_source(w);
        if (g_.node(other).shape != lg.shape || g_.node(src).numel() != cols ||
            g_.node(src).dtype != DType::kF32)
          continue;
        if (g_.node(src).op != Op::kParam) continue;  // bound, dense, placed from the start
        m.fused.dy_mul = m.dz;
        m.w = src;
        m.dz = other;
        groups.push_back(group(m.fused.dy_mul));
        break;
      }
    }
    // db = Σ dz and dw = Σ dz · norm(x), each a group of its own.
    for (int32_t c : s_.consumers[static_cast<size_t>(m.dz)]) {
      if (m.fused.db < 0 && column_sum_of(c, m.dz, cols) && group_is(group(c), {c})) {
        m.fused.db = c;
        continue;
      }
      const ir::Node& p = g_.node(c);
      if (m.fused.dw >= 0 || p.op != Op::kMul || p.shape != lg.shape ||
          s_.consumers[static_cast<size_t>(c)].size() != 1 || escapes(c))
        continue;
      const int32_t xh = p.inputs[0] == m.dz ? p.inputs[1] : p.inputs[0];
      const ir::Node& f = g_.node(xh);
      if (f.op != forward_of(lg.op) || f.inputs[0] != m.x || f.attrs.values.at(0) != lg.attrs.values.at(0))
        continue;
      const int32_t s = s_.consumers[static_cast<size_t>(c)][0];
      if (!column_sum_of(s, c, cols)) continue;
      if (group(s) == group(c) && group_is(group(s), {c, s})) {
        m.fused.dw = s;
        m.fused.dw_mul = c;
        // The recomputed norm goes too when nothing else reads it.
        if (only_reader(xh, c) && group(xh) >= 0 && group_is(group(xh), {xh})) m.fused.recompute = xh;
      }
    }
    for (int32_t x : {m.fused.db, m.fused.dw, m.fused.recompute})
      if (x >= 0) groups.push_back(group(x));
    if (m.fused.dy_mul < 0 && m.fused.dw < 0 && m.fused.db < 0)
      continue;  // nothing to gain over the plain kernel
    const int32_t first = *std::min_element(groups.begin(), groups.end());
    // Inputs ready before the first absorbed group: bound leaves or computed by an earlier group.
    auto ready = [&](int32_t v) {
      const int32_t src = view_source(v);
      return placed(src) || (group(src) >= 0 && group(src) < first);
    };
    if (!ready(m.x) || !ready(m.dz)) continue;
    m.first_group = first;
    for (int32_t gi : groups) absorbed_groups_[static_cast<size_t>(gi)] = 1;
    norm_backwards_.push_back(m);
  }
}

bool Scheduler::place_norm_backwards_at(int32_t gi) {
  if (absorbed_groups_.empty() || !absorbed_groups_[static_cast<size_t>(gi)]) return false;
  for (const NormBackward& m : norm_backwards_) {
    if (m.first_group != gi) continue;
    const ir::Node& lg = g_.node(m.grad);
    for (int32_t v : {m.x, m.dz}) place_view_chain(v);  // a reshape of the residual stream, say
    Step st = node_step(m.grad);
    st.fused = m.fused;
    for (int32_t x : {m.fused.dy_mul, m.fused.recompute, m.fused.dw_mul, m.fused.dw, m.fused.db})
      if (x >= 0) st.nodes.push_back(x);
    st.in = {readable_as(m.grad, 0, m.x), readable_as(m.grad, 1, m.dz)};
    if (m.w >= 0) st.in.push_back(s_.places[static_cast<size_t>(m.w)]);
    st.out = {own_node(m.grad)};
    for (int32_t s : {m.fused.dw, m.fused.db})
      if (s >= 0) st.out.push_back(own_node(s));
    // What the absorbed nodes computed is now placed (or, for the folded mul and the
    // recomputed norm, no longer needed).
    for (int32_t x : {m.fused.dy_mul, m.fused.recompute, m.fused.dw_mul})
      if (x >= 0) set_place(x, st.out[0]);
    for (int64_t bytes : caps_.norm_backward_scratch(g_, st)) st.scratch.push_back(add_scratch(bytes));
    st.bytes = 3 * lg.numel() * 4;
    s_.steps.push_back(std::move(st));
  }
  return true;
}

}  // namespace tg::passes
