// Rematerialisation (see rewrite.h): the backward pass recomputes values instead of the
// forward pass storing them: cheap elementwise values always, and every value of a recompute
// region (tg::Recompute) that the backward reads.
#include <unordered_map>
#include <unordered_set>

#include "passes/fusion.h"
#include "passes/rewrite.h"

namespace tg::passes {
namespace {

using ir::Graph;
using ir::Node;

constexpr size_t kMaxCone = 24;  // elementwise nodes a backward group may recompute per value

/// Normalisations are recomputed like elementwise values (one read of their input, which
/// their gradient keeps alive anyway): a layer norm's output then need not be stored from the
/// forward to the backward pass just for the scale's gradient. Their input is a leaf of the
/// cone, never recomputed through.
bool is_norm(ir::Op op) { return op == ir::Op::kLayerNorm || op == ir::Op::kRmsNorm; }
bool recomputable(ir::Op op) { return fusible(op) || is_norm(op); }

/// Storage a leaf really occupies: a broadcast reads only its source.
int64_t stored_numel(const Graph& g, int32_t id) {
  while (g.node(id).op == ir::Op::kBroadcastTo) id = g.node(id).inputs[0];
  return g.node(id).numel();
}

class Remat {
 public:
  explicit Remat(const Graph& g) : g_(g) {}

  Graph run(std::vector<int32_t>& remap) {
    remap.assign(static_cast<size_t>(g_.size()), -1);
    remap_ = &remap;
    find_region_outputs();
    for (int32_t id = 0; id < g_.size(); ++id) {
      Node n = g_.node(id);
      const bool backward = n.stage != ir::Stage::kForward;
      const bool backward_elementwise = backward && fusible(n.op);
      // A held weight read as f32 (ir::is_widened_param) is widened again, not kept from the forward.
      for (int32_t& in : n.inputs) {
        if (backward && in_region(in))
          in = recompute(in);
        else
          in = (backward_elementwise && eligible(in)) || (backward && ir::is_widened_param(g_, in))
                   ? clone(in)
                   : remap[static_cast<size_t>(in)];
      }
      remap[static_cast<size_t>(id)] = out_.add_checked(std::move(n));
    }
    for (int32_t o : g_.outputs) out_.outputs.push_back(remap[static_cast<size_t>(o)]);
    for (const Graph::Update& u : g_.updates)
      out_.updates.push_back({remap[static_cast<size_t>(u.target)], remap[static_cast<size_t>(u.value)]});
    return std::move(out_);
  }

 private:
  /// A region's outputs: its values that forward ops outside it read (the next block's
  /// input). They are stored, as the region's inputs are: the next region recomputes from
  /// them, so keeping them costs nothing more.
  void find_region_outputs() {
    region_output_.assign(static_cast<size_t>(g_.size()), false);
    for (const Node& n : g_.nodes()) {
      if (n.stage != ir::Stage::kForward) continue;
      for (int32_t in : n.inputs)
        if (g_.node(in).recompute >= 0 && g_.node(in).recompute != n.recompute)
          region_output_[static_cast<size_t>(in)] = true;
    }
  }

  /// A forward value of a recompute region that the backward recomputes rather than reads:
  /// not a leaf (parameters, inputs, state and constants are stored anyway; a second leaf
  /// would be a second binding) and not a region output.
  bool in_region(int32_t id) const {
    const Node& n = g_.node(id);
    return n.stage == ir::Stage::kForward && n.recompute >= 0 &&
           ir::op_info(n.op).kind != ir::OpKind::kLeaf && !region_output_[static_cast<size_t>(id)];
  }

  /// The backward copy of a region value (one per value, shared by every backward reader),
  /// computed from the copies of the region values it reads and from the stored originals
  /// of everything else. It is appended where its first backward reader is, so the schedule
  /// (node order) recomputes block i just before block i's backward and frees the copies
  /// after it. Attributes are copied, so a random op draws the same numbers (same seed, same
  /// key input); a multi-output node is copied once and its copied kResult nodes read it.
  /// The copy keeps the region id: with stage kBackward it marks a recomputed value.
  int32_t recompute(int32_t id) {
    if (auto it = recomputed_.find(id); it != recomputed_.end()) return it->second;
    Node c = g_.node(id);
    for (int32_t& in : c.inputs) in = in_region(in) ? recompute(in) : (*remap_)[static_cast<size_t>(in)];
    c.stage = ir::Stage::kBackward;
    const int32_t copy = out_.add_checked(std::move(c));
    recomputed_[id] = copy;
    return copy;
  }

  /// A forward elementwise value whose elementwise cone is small and rests on at most one
  /// full-size stored value (so recomputing never keeps more memory alive than storing it).
  bool eligible(int32_t id) {
    if (auto it = eligible_.find(id); it != eligible_.end()) return it->second;
    const Node& n = g_.node(id);
    bool ok = n.stage == ir::Stage::kForward && recomputable(n.op);
    if (ok) {
      std::unordered_set<int32_t> cone, big_leaves;
      std::vector<int32_t> stack{id};
      while (ok && !stack.empty()) {
        const int32_t x = stack.back();
        stack.pop_back();
        if (!cone.insert(x).second) continue;
        for (int32_t in : g_.node(x).inputs) {
          if (!is_norm(g_.node(x).op) && recomputable(g_.node(in).op) && g_.node(in).shape == n.shape)
            stack.push_back(in);
          else if (2 * stored_numel(g_, in) >= n.numel())
            big_leaves.insert(in);
        }
        ok = cone.size() <= kMaxCone && big_leaves.size() <= 1;
      }
    }
    eligible_[id] = ok;
    return ok;
  }

  /// The backward copy of a forward elementwise value (one per value, shared).
  int32_t clone(int32_t id) {
    if (auto it = clones_.find(id); it != clones_.end()) return it->second;
    Node c = g_.node(id);
    for (int32_t& in : c.inputs) {
      if (in_region(in))
        in = recompute(in);
      else if (!is_norm(c.op) && recomputable(g_.node(in).op) && g_.node(in).shape == c.shape)
        in = clone(in);
      else
        in = (*remap_)[static_cast<size_t>(in)];
    }
    c.stage = ir::Stage::kBackward;
    const int32_t copy = out_.add_checked(std::move(c));
    clones_[id] = copy;
    return copy;
  }

  const Graph& g_;
  Graph out_;
  std::vector<int32_t>* remap_ = nullptr;
  std::unordered_map<int32_t, bool> eligible_;
  std::unordered_map<int32_t, int32_t> clones_;
  std::vector<bool> region_output_;
  std::unordered_map<int32_t, int32_t> recomputed_;
};

}  // namespace

Graph rematerialize(const Graph& graph, std::vector<int32_t>& remap) { return Remat(graph).run(remap); }

}  // namespace tg::passes
