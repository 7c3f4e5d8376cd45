// Thread-local tracing context and the Tensor accessors that read the graph.
#include "ir/trace.h"

#include "tensorgrad/errors.h"
#include "tensorgrad/functional.h"

namespace tg::ir {
namespace {
thread_local Trace* g_current = nullptr;
}

Trace* current_trace() { return g_current; }

TraceScope::TraceScope(Trace& trace) {
  if (g_current != nullptr)
    throw Error("[compile] cannot compile a program while tracing another one on the same thread");
  g_current = &trace;
}
TraceScope::~TraceScope() { g_current = nullptr; }

std::string unused_capture_name(const Trace& trace, const std::string& base) {
  auto taken = [&](const std::string& name) {
    for (const auto& [existing, id] : trace.captures)
      if (existing == name) return true;
    return false;
  };
  std::string name = base;
  for (int call = 2; taken(name); ++call) name = base + "#" + std::to_string(call);
  return name;
}

namespace {

/// The policy's type for the f32 value `id` of t's graph: follow shape ops back to where the
/// value was computed; a kept parameter stays f32 (a half-stored one is widened exactly), and
/// so does a concat of values (a mixture's stacked experts) of which any is kept.
DType policy_of(const Trace& t, int32_t id) {
  for (;;) {
    const Node& n = t.graph.node(id);
    // A half-stored parameter reads as the f32 cast of its leaf: follow that cast too.
    const bool widened = n.op == Op::kCast && is_half(t.graph.node(n.inputs[0]).dtype);
    const bool moves = n.op == Op::kReshape || n.op == Op::kPermute || n.op == Op::kBroadcastTo ||
                       n.op == Op::kSlice || n.op == Op::kConcat || widened;
    if (moves && n.inputs.size() == 1) {
      id = n.inputs[0];
      continue;
    }
    if (n.op == Op::kConcat) {
      for (int32_t in : n.inputs)
        if (policy_of(t, in) == DType::kF32) return DType::kF32;
      return t.half;
    }
    if (n.op != Op::kParam) return t.half;
    for (const std::string& prefix : t.keep_f32) {
      const bool at_boundary = n.name.size() == prefix.size() || n.name[prefix.size()] == '.';
      if (!prefix.empty() && n.name.rfind(prefix, 0) == 0 && at_boundary) return DType::kF32;
    }
    return t.half;
  }
}

}  // namespace

DType policy_operand_dtype(const Tensor& x) {
  const Trace* t = current_trace();
  if (t == nullptr || t->half == DType::kF32 || x.graph() != &t->graph || x.dtype() != DType::kF32)
    return DType::kF32;
  return policy_of(*t, x.id());
}

Tensor emit(Graph& graph, Node node) { return Tensor(&graph, graph.add(std::move(node))); }

}  // namespace tg::ir

namespace tg {
// Only the outermost scope opens a region: an inner one leaves Graph::recompute as it is.
Recompute::Recompute(bool enabled) {
  ir::Trace* t = ir::current_trace();
  if (!enabled || t == nullptr || t->graph.recompute >= 0) return;
  trace_ = t;
  t->graph.recompute = t->next_recompute_region++;
}
Recompute::~Recompute() {
  if (trace_ != nullptr) trace_->graph.recompute = -1;
}

Tensor::Tensor(ir::Graph* graph, int32_t id) : graph_(graph), id_(id), serial_(graph ? graph->serial() : 0) {}

namespace {
const ir::Node& node_of(const Tensor& t) {
  if (!t.valid()) throw Error("[Tensor] used an empty (default-constructed) tensor");
  if (!ir::Graph::is_live(t.graph(), t.graph_serial()))
    throw ShapeError(
        "[Tensor] used a tensor whose trace has ended: tensors are only valid inside the function being "
        "traced (keep them out of statics and members that outlive compile_train/compile_forward)");
  return t.graph()->node(t.id());
}
}  // namespace

const Shape& Tensor::shape() const { return node_of(*this).shape; }
DType Tensor::dtype() const { return node_of(*this).dtype; }
int64_t Tensor::size(int64_t axis) const {
  const Shape& s = shape();
  int64_t r = static_cast<int64_t>(s.size());
  if (axis < -r || axis >= r)
    throw ShapeError("[size] axis " + std::to_string(axis) + " out of range for shape " + shape_str(s));
  return s[static_cast<size_t>(axis < 0 ? axis + r : axis)];
}
}  // namespace tg
