// Hoisting parameter-only values out of inference programs (see hoist.h).
#include "passes/hoist.h"

#include <algorithm>
#include <string>

#include "passes/dce.h"
#include "passes/rewrite.h"
#include "passes/schedule.h"

namespace tg::passes {

using ir::Op;

namespace {

constexpr int64_t kSmallBytes = int64_t{4} << 20;  // expansions up to this size are hoisted too

int64_t bytes_of(const ir::Node& n) { return n.numel() * dtype_size(n.dtype); }

bool any_leaf(Op op) {
  return op == Op::kParam || op == Op::kConstant || op == Op::kArange || op == Op::kInput || op == Op::kState;
}

/// `id`'s expression: ops, types, attributes and parameter names, recursively.
std::string expression(const ir::Graph& g, int32_t id, std::vector<std::string>& memo) {
  std::string& e = memo[static_cast<size_t>(id)];
  if (!e.empty()) return e;
  const ir::Node& n = g.node(id);
  std::string s = std::string(ir::op_name(n.op)) + " " + dtype_name(n.dtype) + shape_str(n.shape);
  if (n.op == Op::kParam) s += " '" + n.name + "'";
  for (int64_t a : n.attrs.axes) s += " a" + std::to_string(a);
  for (double v : n.attrs.values) s += " v" + std::to_string(v);
  if (n.op == Op::kCast) s += std::string(" to ") + dtype_name(n.attrs.dtype);
  s += " (";
  for (int32_t x : n.inputs) s += expression(g, x, memo) + ", ";
  return e = s + ")";
}

}  // namespace

Hoisted hoist_parameter_values(const ir::Graph& input) {
  std::vector<int32_t> first, second, third;
  const ir::Graph graph =
      quantized_products(merge_sibling_products(cast_weights_before_views(input, first), second), third);
  const std::vector<int32_t> rewritten = compose(compose(first, second), third);
  const auto size = static_cast<size_t>(graph.size());
  const std::vector<char> fixed = parameter_only(graph);  // values of parameters and constants alone
  // The fixed values a non-fixed node reads (through views: the view stays, its source goes).
  std::vector<char> hoist(size, 0);
  auto consider = [&](int32_t x) {
    while (is_view_op(graph.node(x).op)) x = graph.node(x).inputs[0];
    const ir::Node& n = graph.node(x);
    if (any_leaf(n.op) || !n.results.empty() || n.op == Op::kResult) return;
    int64_t operand_bytes = 0;
    for (int32_t i : n.inputs) operand_bytes += bytes_of(graph.node(i));
    if (bytes_of(n) <= std::max(operand_bytes, kSmallBytes)) hoist[static_cast<size_t>(x)] = 1;
  };
  for (int32_t id = 0; id < graph.size(); ++id) {
    const ir::Node& n = graph.node(id);
    if (fixed[static_cast<size_t>(id)]) continue;
    for (int32_t x : n.inputs)
      if (fixed[static_cast<size_t>(x)]) consider(x);
  }
  // An output or an update's value that is fixed is left where it is (rare, and read back as is).
  for (int32_t id : graph.outputs) hoist[static_cast<size_t>(id)] = 0;
  for (const ir::Graph::Update& u : graph.updates) hoist[static_cast<size_t>(u.value)] = 0;

  Hoisted h;
  std::vector<std::string> memo(size);
  ir::Graph main = graph;
  ir::Graph prologue = graph;
  prologue.outputs.clear();
  prologue.updates.clear();
  for (int32_t id = 0; id < graph.size(); ++id) {
    if (!hoist[static_cast<size_t>(id)]) continue;
    const ir::Node& n = graph.node(id);
    ir::Node leaf;
    leaf.op = Op::kState;
    leaf.dtype = n.dtype;
    leaf.shape = n.shape;
    leaf.name = kHoistedPrefix + std::to_string(h.count++);
    h.keys.push_back(expression(graph, id, memo));
    leaf.loc = n.loc;
    leaf.stage = n.stage;
    main.node(id) = leaf;
    prologue.updates.push_back({prologue.add_checked(leaf), id});
  }
  // The prologue reads no inputs: they become unread constants, which DCE drops.
  for (int32_t id = 0; id < prologue.size(); ++id)
    if (ir::Node& n = prologue.node(id); n.op == Op::kInput) {
      n.op = Op::kConstant;
      n.name.clear();
      n.attrs.values = {0.0};
    }
  std::vector<int32_t> dce;
  h.main = eliminate_dead_code(main, dce);
  h.remap = compose(rewritten, dce);
  std::vector<int32_t> unused;
  if (h.count > 0) h.prologue = eliminate_dead_code(prologue, unused);
  return h;
}

}  // namespace tg::passes
