// Op metadata generated from ops.def, node appending, and the IR printer.
#include "ir/graph.h"

#include <mutex>
#include <unordered_map>
#include <sstream>

#include "tensorgrad/errors.h"

namespace tg {
std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}
}  // namespace tg

namespace tg::ir {
namespace {
// clang-format off
constexpr OpInfo kOpInfo[] = {
#define TG_LEAF(Name, str) {Op::k##Name, str, OpKind::kLeaf, 0, DTypes::kAll},
#define TG_UNARY(Name, str, dt, expr) {Op::k##Name, str, OpKind::kUnary, 1, DTypes::dt},
#define TG_BINARY(Name, str, dt, expr) {Op::k##Name, str, OpKind::kBinary, 2, DTypes::dt},
#define TG_COMPARE(Name, str, dt, expr) {Op::k##Name, str, OpKind::kCompare, 2, DTypes::dt},
#define TG_OTHER(Name, str, arity) {Op::k##Name, str, OpKind::kOther, arity, DTypes::kAll},
#include "ir/ops.def"
};
// clang-format on
}  // namespace

const OpInfo& op_info(Op op) { return kOpInfo[static_cast<size_t>(op)]; }

bool dtype_allowed(DTypes allowed, DType t) {
  switch (allowed) {
    case DTypes::kFloat: return t == DType::kF32;
    case DTypes::kNumeric: return t == DType::kF32 || t == DType::kI32;
    case DTypes::kLogical: return t == DType::kBool;
    case DTypes::kAll: return true;
  }
  return false;
}

std::string loc_str(const std::source_location& loc) {
  std::string file = loc.file_name();
  if (file.empty()) return "<unknown>";
  return file + ":" + std::to_string(loc.line());
}

namespace {

/// serial → graph, for every graph alive in the process (tracing may run on several threads).
struct LiveGraphs {
  std::mutex mutex;
  std::unordered_map<uint64_t, const Graph*> by_serial;
  uint64_t next = 1;
};
LiveGraphs& live_graphs() {
  static LiveGraphs* live = new LiveGraphs;  // never destroyed: graphs may outlive static destruction
  return *live;
}

}  // namespace

bool Graph::is_live(const Graph* graph, uint64_t serial) {
  LiveGraphs& live = live_graphs();
  std::lock_guard lock(live.mutex);
  const auto it = live.by_serial.find(serial);
  return it != live.by_serial.end() && it->second == graph;
}

void Graph::renew_serial() {
  LiveGraphs& live = live_graphs();
  std::lock_guard lock(live.mutex);
  if (serial_ != 0) live.by_serial.erase(serial_);
  serial_ = live.next++;
  live.by_serial[serial_] = this;
}

Graph::Graph() { renew_serial(); }
Graph::Graph(const Graph& other)
    : outputs(other.outputs),
      updates(other.updates),
      stage(other.stage),
      recompute(other.recompute),
      nodes_(other.nodes_) {
  renew_serial();
}
Graph::Graph(Graph&& other) noexcept
    : outputs(std::move(other.outputs)),
      updates(std::move(other.updates)),
      stage(other.stage),
      recompute(other.recompute),
      nodes_(std::move(other.nodes_)) {
  other.nodes_.clear();
  other.outputs.clear();
  other.updates.clear();
  renew_serial();
  other.renew_serial();
}
Graph& Graph::operator=(const Graph& other) {
  if (this == &other) return *this;
  outputs = other.outputs;
  updates = other.updates;
  stage = other.stage;
  recompute = other.recompute;
  nodes_ = other.nodes_;
  renew_serial();
  return *this;
}
Graph& Graph::operator=(Graph&& other) noexcept {
  if (this == &other) return *this;
  outputs = std::move(other.outputs);
  updates = std::move(other.updates);
  stage = other.stage;
  recompute = other.recompute;
  nodes_ = std::move(other.nodes_);
  other.nodes_.clear();
  other.outputs.clear();
  other.updates.clear();
  renew_serial();
  other.renew_serial();
  return *this;
}
Graph::~Graph() {
  LiveGraphs& live = live_graphs();
  std::lock_guard lock(live.mutex);
  live.by_serial.erase(serial_);
}

namespace {

/// bf16 and f16 are the storage types of mixed precision's product operands, not arithmetic
/// types: such a value is made by a cast or a shape op and read by casts, shape ops, matmul,
/// attention and convolutions (which accumulate in f32). Everything else computes in f32
/// after a cast.
bool moves_half(Op op) {
  return op == Op::kCast || op == Op::kReshape || op == Op::kPermute || op == Op::kBroadcastTo ||
         op == Op::kSlice || op == Op::kConcat || op == Op::kGather;
}

void check_half(const Graph& g, const Node& node) {
  const char* name = op_info(node.op).name;
  const std::string dt = dtype_name(node.dtype);
  if (is_half(node.dtype) && node.inputs.empty() && node.op != Op::kParam)
    throw ShapeError("[" + std::string(name) + "] cannot be " + dt +
                     ": a program's inputs, states and constants are f32, and parameters f32 unless stored "
                     "as bf16 or f16 (Param::set_dtype) (convert " +
                     dt +
                     " data on the host with HostTensor::to(DType::kF32); Precision::kBf16 and kF16 make the "
                     "half-precision copies products need) (at " +
                     loc_str(node.loc) + ")");
  if (is_half(node.dtype) && !moves_half(node.op) && node.op != Op::kParam)
    throw ShapeError("[" + std::string(name) + "] cannot make a " + dt + " value: " + dt +
                     " values come from a cast of f32 (as mixed precision makes them) and shape ops on "
                     "those (at " +
                     loc_str(node.loc) + ")");
  if (node.op == Op::kCast && !node.inputs.empty()) {
    const DType from = g.node(node.inputs[0]).dtype;
    if ((is_half(from) || is_half(node.dtype)) && from != DType::kF32 && node.dtype != DType::kF32)
      throw ShapeError("[cast] bf16 and f16 convert to and from f32 only, not " +
                       std::string(dtype_name(from)) + " to " + dtype_name(node.dtype) + " (at " +
                       loc_str(node.loc) + ")");
  }
  const bool reads_half = moves_half(node.op) || node.op == Op::kMatmul || node.op == Op::kAttention ||
                          node.op == Op::kAttentionGrad || node.op == Op::kConv2d ||
                          node.op == Op::kGroupedMatmul || node.op == Op::kGroupedMatmulGradWeight ||
                          node.op == Op::kConv2dGradInput || node.op == Op::kConv2dGradWeight ||
                          node.op == Op::kQuantMatmul;
  for (int32_t in : node.inputs)
    if (is_half(g.node(in).dtype) && !reads_half)
      throw ShapeError(
          "[" + std::string(name) + "] does not read " + dtype_name(g.node(in).dtype) +
          " values: only casts, shape ops, matmul, grouped_matmul, attention and conv2d do; cast to f32 "
          "first (at " +
          loc_str(node.loc) + ")");
}

/// i8 is the storage of quantized weights (Module::store_params_as(DType::kI8), 8 or 4 bits): a
/// parameter, shape ops over it, quant_matmul, and a cast to f32 (which its scales then multiply,
/// after ir::unpack_int4's arithmetic for 4 bits). Nothing computes in it.
void check_int8(const Graph& g, const Node& node) {
  const char* name = op_info(node.op).name;
  const bool shape_op = moves_half(node.op) && node.op != Op::kCast;
  if (node.dtype == DType::kI8 && node.op != Op::kParam && node.op != Op::kInput && !shape_op)
    throw ShapeError("[" + std::string(name) +
                     "] cannot make an i8 value: i8 values are quantized weights (parameters stored as i8 by "
                     "Module::store_params_as(DType::kI8)), inputs, and shape ops on them (at " +
                     loc_str(node.loc) + ")");
  const bool reads_int8 =
      shape_op || (node.op == Op::kCast && node.dtype == DType::kF32) || node.op == Op::kQuantMatmul;
  for (int32_t in : node.inputs)
    if (g.node(in).dtype == DType::kI8 && !reads_int8)
      throw ShapeError("[" + std::string(name) +
                       "] does not read i8 values: only shape ops, a cast to f32 and quant_matmul do (at " +
                       loc_str(node.loc) + ")");
}

}  // namespace

bool is_widened_param(const Graph& g, int32_t id) {
  const Node& n = g.node(id);
  return n.op == Op::kCast && n.dtype == DType::kF32 && g.node(n.inputs[0]).op == Op::kParam &&
         is_half(g.node(n.inputs[0]).dtype);
}

int32_t Graph::add(Node node) {
  const OpInfo& info = op_info(node.op);
  if (info.arity >= 0 && static_cast<int>(node.inputs.size()) != info.arity)
    throw ShapeError("[" + std::string(info.name) + "] expects " + std::to_string(info.arity) +
                     " inputs, got " + std::to_string(node.inputs.size()) + " (at " + loc_str(node.loc) +
                     ")");
  for (int32_t in : node.inputs)
    if (in < 0 || in >= size())
      throw ShapeError("[" + std::string(info.name) + "] input refers to an unknown node (at " +
                       loc_str(node.loc) + ")");
  // Element counts must fit comfortably in int64 (byte offsets are numel · 4): checked on
  // the shape the caller set (leaves, reshape targets) before inference uses it, and on
  // the inferred shape after.
  auto check_count = [&] {
    int64_t count = 1;
    for (int64_t d : node.shape) {
      if (d < 0 || (d != 0 && count > (int64_t{1} << 56) / d))
        throw ShapeError("[" + std::string(info.name) + "] shape " + shape_str(node.shape) +
                         " is negative or too large (at " + loc_str(node.loc) + ")");
      count *= d;
    }
  };
  check_count();
  infer(*this, node);
  check_count();
  check_half(*this, node);
  check_int8(*this, node);
  node.stage = stage;
  node.recompute = recompute;
  return add_checked(std::move(node));
}

int32_t Graph::add_checked(Node node) {
  nodes_.push_back(std::move(node));
  return size() - 1;
}

int64_t result_offset(const Node& n, size_t index) {
  int64_t at = 0;
  for (size_t i = 0; i < index; ++i) at += tg::numel(n.results[i].shape);
  return at;
}

double constant_element(const Node& n, int64_t k) {
  const std::vector<double>& v = n.attrs.values;
  if (n.op == Op::kArange) return v[0] + static_cast<double>(k) * v[1];
  return v[v.size() == 1 ? 0 : static_cast<size_t>(k)];
}

std::optional<double> constant_value(const Graph& g, int32_t id) {
  const Node* n = &g.node(id);
  while (n->op == Op::kBroadcastTo || n->op == Op::kReshape) n = &g.node(n->inputs[0]);
  if (n->op != Op::kConstant || n->attrs.values.size() != 1) return std::nullopt;
  return n->attrs.values[0];
}

std::string Graph::to_string() const {
  std::ostringstream os;
  for (int32_t id = 0; id < size(); ++id) {
    const Node& n = node(id);
    os << "%" << id << " = " << op_name(n.op) << "(";
    for (size_t i = 0; i < n.inputs.size(); ++i) os << (i ? ", " : "") << "%" << n.inputs[i];
    if (!n.name.empty()) os << (n.inputs.empty() ? "" : ", ") << '"' << n.name << '"';
    os << ") ";
    if (n.results.empty()) {
      os << dtype_name(n.dtype) << shape_str(n.shape);
    } else {
      os << "(";
      for (size_t i = 0; i < n.results.size(); ++i)
        os << (i ? ", " : "") << dtype_name(n.results[i].dtype) << shape_str(n.results[i].shape);
      os << ")";
    }
    if (!n.attrs.axes.empty()) os << " axes=" << shape_str(n.attrs.axes);
    os << "\n";
  }
  for (int32_t out : outputs) os << "output %" << out << "\n";
  for (const Update& u : updates) os << "update %" << u.target << " <- %" << u.value << "\n";
  return os.str();
}

}  // namespace tg::ir
