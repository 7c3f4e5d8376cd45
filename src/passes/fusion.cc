// Greedy elementwise fusion and group ordering (see fusion.h).
#include "passes/fusion.h"

#include <algorithm>
#include <numeric>
#include <queue>
#include <stdexcept>
#include <string>
#include <unordered_map>

namespace tg::passes {

using ir::Op;

/// Widest sum output a group accumulates itself (its chunks each hold a partial row).
constexpr int64_t kMaxSinkWidth = 4096;

bool reduction_sink(const ir::Graph& g, const ir::Node& n) {
  if (n.op != Op::kSum || n.dtype != DType::kF32) return false;
  // Each parallel chunk keeps a partial row of the output: fine for bias-like outputs, not
  // for a wide one summed over few rows (a positional embedding's gradient: T·C wide, B deep).
  const Shape& in = g.node(n.inputs[0]).shape;
  if (n.numel() > kMaxSinkWidth || numel(in) < 16 * n.numel()) return false;
  bool kept_seen = false;
  for (size_t d = 0; d < in.size(); ++d) {
    if (in[d] == 1) continue;
    const bool reduced =
        std::find(n.attrs.axes.begin(), n.attrs.axes.end(), static_cast<int64_t>(d)) != n.attrs.axes.end();
    if (reduced && kept_seen) return false;
    kept_seen = kept_seen || !reduced;
  }
  return true;
}

bool fusible(Op op) {
  switch (ir::op_info(op).kind) {
    case ir::OpKind::kUnary:
    case ir::OpKind::kBinary:
    case ir::OpKind::kCompare: return true;
    default: return op == Op::kCast || op == Op::kWhere;
  }
}

namespace {

class Fuser {
 public:
  Fuser(const ir::Graph& g, bool enabled, bool sinks) : g_(g), enabled_(enabled), sinks_(sinks) {
    const auto n = static_cast<size_t>(g.size());
    live_.assign(n, 0);
    for (int32_t o : g.outputs) live_[static_cast<size_t>(o)] = 1;
    for (const ir::Graph::Update& u : g.updates) live_[static_cast<size_t>(u.value)] = 1;
    for (int32_t id = g.size(); id-- > 0;)
      if (live_[static_cast<size_t>(id)])
        for (int32_t in : g.node(id).inputs) live_[static_cast<size_t>(in)] = 1;
    set_.resize(n);
    std::iota(set_.begin(), set_.end(), 0);
    mark_.assign(n, 0);
    for (const ir::Node& node : g.nodes())
      has_copies_ = has_copies_ || (node.stage != ir::Stage::kForward && node.recompute >= 0);
  }

  Fusion run() {
    for (int32_t id = 0; id < g_.size(); ++id) {
      if (!live_[static_cast<size_t>(id)] || !enabled_ || !fusible(g_.node(id).op)) continue;
      // Try joining each same-shaped elementwise producer's group, one at a time.
      for (int32_t in : g_.node(id).inputs) {
        const int32_t a = find(in), b = find(id);
        if (a == b || !fusible(g_.node(in).op) || g_.node(in).shape != g_.node(id).shape) continue;
        if (!same_pass(a, b)) continue;
        if (mergeable(a, b)) unite(a, b);
      }
    }
    // Reductions absorb their elementwise producer (a prologue): a float sum whose kept
    // axes all follow its reduced ones reads the value inside the producer's group, which
    // accumulates it instead of storing it.
    for (int32_t id = 0; id < g_.size() && enabled_ && sinks_; ++id) {
      const ir::Node& n = g_.node(id);
      if (!live_[static_cast<size_t>(id)] || !reduction_sink(g_, n)) continue;
      const int32_t in = n.inputs[0];
      if (!fusible(g_.node(in).op)) continue;
      const int32_t a = find(in), b = find(id);
      if (a != b && same_pass(a, b)) unite(a, b);
    }
    return order();
  }

 private:
  int32_t find(int32_t x) {
    while (set_[static_cast<size_t>(x)] != x)
      x = set_[static_cast<size_t>(x)] = set_[static_cast<size_t>(set_[static_cast<size_t>(x)])];
    return x;
  }
  /// A recompute region's copies (passes/remat.cc) never share a group with forward nodes:
  /// the group would run in the forward and store the copy, undoing the recomputation.
  bool same_pass(int32_t a, int32_t b) {
    if (!has_copies_) return true;
    auto has = [&](int32_t root, auto&& pred) {
      const std::vector<int32_t>& m = members(root);
      return std::any_of(m.begin(), m.end(), [&](int32_t id) { return pred(g_.node(id)); });
    };
    auto forward = [](const ir::Node& n) { return n.stage == ir::Stage::kForward; };
    auto copy = [](const ir::Node& n) { return n.stage != ir::Stage::kForward && n.recompute >= 0; };
    return !(has(a, forward) && has(b, copy)) && !(has(a, copy) && has(b, forward));
  }
  void unite(int32_t a, int32_t b) {
    // Keep the smaller id as the root: roots double as "earliest node" for the order.
    if (a > b) std::swap(a, b);
    members(a);
    members(b);
    set_[static_cast<size_t>(b)] = a;
    members_[a].insert(members_[a].end(), members_[b].begin(), members_[b].end());
    members_.erase(b);
  }
  const std::vector<int32_t>& members(int32_t root) {
    auto [it, fresh] = members_.try_emplace(root);
    if (fresh) it->second.push_back(root);
    return it->second;
  }

  /// No path from one set to the other through a group outside both. The walk is over
  /// groups, not nodes: a group runs as a unit, so reading any member waits for all of them.
  bool mergeable(int32_t a, int32_t b) {
    ++epoch_;
    std::vector<int32_t> stack;
    auto push_inputs_of = [&](int32_t root) -> bool {
      for (int32_t m : members(root))
        for (int32_t in : g_.node(m).inputs) {
          const int32_t r = find(in);
          if (r == a || r == b) {
            if (root != a && root != b) return false;  // a/b → outside group → a/b
            continue;
          }
          stack.push_back(r);
        }
      return true;
    };
    push_inputs_of(a);
    push_inputs_of(b);
    while (!stack.empty()) {
      const int32_t r = stack.back();
      stack.pop_back();
      if (mark_[static_cast<size_t>(r)] == epoch_) continue;
      mark_[static_cast<size_t>(r)] = epoch_;
      if (!push_inputs_of(r)) return false;
    }
    return true;
  }

  Fusion order() {
    Fusion f;
    const auto n = static_cast<size_t>(g_.size());
    f.group_of.assign(n, -1);
    // Groups by root, in root order (roots are each group's smallest id).
    std::vector<int32_t> root_group(n, -1);
    std::vector<KernelGroup> groups;
    for (int32_t id = 0; id < g_.size(); ++id) {
      if (!live_[static_cast<size_t>(id)]) continue;
      const int32_t r = find(id);
      if (root_group[static_cast<size_t>(r)] < 0) {
        root_group[static_cast<size_t>(r)] = static_cast<int32_t>(groups.size());
        groups.emplace_back();
        groups.back().kind =
            fusible(g_.node(id).op) ? KernelGroup::Kind::kElementwise : KernelGroup::Kind::kSingle;
      }
      groups[static_cast<size_t>(root_group[static_cast<size_t>(r)])].nodes.push_back(id);
    }
    std::vector<int32_t> unsorted_of(n, -1);
    for (size_t gi = 0; gi < groups.size(); ++gi)
      for (int32_t id : groups[gi].nodes) unsorted_of[static_cast<size_t>(id)] = static_cast<int32_t>(gi);

    // Kahn's algorithm over the group DAG, smallest first node first.
    std::vector<std::vector<int32_t>> succ(groups.size());
    std::vector<int32_t> preds(groups.size(), 0);
    for (size_t gi = 0; gi < groups.size(); ++gi) {
      std::vector<int32_t> from;
      for (int32_t id : groups[gi].nodes)
        for (int32_t in : g_.node(id).inputs) {
          const int32_t p = unsorted_of[static_cast<size_t>(in)];
          if (p != static_cast<int32_t>(gi)) from.push_back(p);
        }
      std::sort(from.begin(), from.end());
      from.erase(std::unique(from.begin(), from.end()), from.end());
      for (int32_t p : from) succ[static_cast<size_t>(p)].push_back(static_cast<int32_t>(gi));
      preds[gi] = static_cast<int32_t>(from.size());
    }
    std::priority_queue<int32_t, std::vector<int32_t>, std::greater<>> ready;  // group index = root order
    for (size_t gi = 0; gi < groups.size(); ++gi)
      if (preds[gi] == 0) ready.push(static_cast<int32_t>(gi));
    while (!ready.empty()) {
      const int32_t gi = ready.top();
      ready.pop();
      for (int32_t id : groups[static_cast<size_t>(gi)].nodes)
        f.group_of[static_cast<size_t>(id)] = static_cast<int32_t>(f.groups.size());
      f.groups.push_back(std::move(groups[static_cast<size_t>(gi)]));
      for (int32_t s : succ[static_cast<size_t>(gi)])
        if (--preds[static_cast<size_t>(s)] == 0) ready.push(s);
    }

    if (f.groups.size() != groups.size())
      throw std::logic_error("fusion: the kernel groups form a cycle (" +
                             std::to_string(groups.size() - f.groups.size()) + " groups unordered)");
    // Outputs: members read from another group, by the graph's outputs or by an update.
    std::vector<char> escapes(n, 0);
    for (int32_t id = 0; id < g_.size(); ++id)
      if (live_[static_cast<size_t>(id)])
        for (int32_t in : g_.node(id).inputs)
          if (f.group_of[static_cast<size_t>(in)] != f.group_of[static_cast<size_t>(id)])
            escapes[static_cast<size_t>(in)] = 1;
    for (int32_t o : g_.outputs) escapes[static_cast<size_t>(o)] = 1;
    for (const ir::Graph::Update& u : g_.updates) escapes[static_cast<size_t>(u.value)] = 1;
    for (KernelGroup& group : f.groups)
      for (int32_t id : group.nodes)
        if (escapes[static_cast<size_t>(id)]) group.outputs.push_back(id);
    return f;
  }

  const ir::Graph& g_;
  bool enabled_, sinks_;
  bool has_copies_ = false;  // the graph holds recompute-region copies (same_pass)
  std::vector<char> live_;
  std::vector<int32_t> set_;  // union-find parent
  std::unordered_map<int32_t, std::vector<int32_t>> members_;
  std::vector<uint32_t> mark_;
  uint32_t epoch_ = 0;
};

}  // namespace

Fusion fuse(const ir::Graph& graph, bool enabled, bool reduction_sinks) {
  return Fuser(graph, enabled, reduction_sinks).run();
}

}  // namespace tg::passes
