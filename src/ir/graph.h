// The IR: a graph of nodes in topological order (every input id is smaller than the node's
// own id, by construction: nodes are only ever appended). Tracing, autograd and the
// optimizer all append to one Graph; passes and backends read it.
#pragma once
#include <cstdint>
#include <deque>
#include <optional>
#include <source_location>
#include <string>
#include <string_view>
#include <vector>

#include "tensorgrad/dtype.h"

namespace tg::ir {

enum class Op : uint8_t {
// clang-format off
#define TG_LEAF(Name, str) k##Name,
#define TG_UNARY(Name, str, dtypes, expr) k##Name,
#define TG_BINARY(Name, str, dtypes, expr) k##Name,
#define TG_COMPARE(Name, str, dtypes, expr) k##Name,
#define TG_OTHER(Name, str, arity) k##Name,
#include "ir/ops.def"
  // clang-format on
};

enum class OpKind : uint8_t { kLeaf, kUnary, kBinary, kCompare, kOther };
/// Which element types an elementwise op accepts (see ops.def).
enum class DTypes : uint8_t { kFloat, kNumeric, kLogical, kAll };

struct OpInfo {
  Op op;
  const char* name;
  OpKind kind;
  int arity;  // -1: variadic
  DTypes dtypes;
};
const OpInfo& op_info(Op op);
inline const char* op_name(Op op) { return op_info(op).name; }
bool dtype_allowed(DTypes allowed, DType t);
/// The ops whose values depend on this process's rank in a data-parallel world (ops.def's
/// last section): a backend runs them through its communicator, and no pass may fold them.
inline bool is_collective(Op op) {
  return op == Op::kAllReduce || op == Op::kReduceScatter || op == Op::kAllGather || op == Op::kRankShard;
}

/// A sliding window over the last two axes [H, W] of an NCHW tensor (conv2d and the pools):
/// output extent OH = ⌊(H + 2·ph − dh·(kh − 1) − 1) / sh⌋ + 1 (likewise OW), as PyTorch's.
struct Window {
  int64_t kh = 1, kw = 1;  // kernel
  int64_t sh = 1, sw = 1;  // stride
  int64_t ph = 0, pw = 0;  // zero padding on each side
  int64_t dh = 1, dw = 1;  // dilation
  int64_t groups = 1;      // conv2d: channels split into this many independent groups
  bool count_pad = true;   // avg_pool2d: the divisor counts padded positions (PyTorch's default)
  auto operator<=>(const Window&) const = default;
};

/// Op-specific parameters. Named fields rather than an untyped array; each op's row in
/// ops.def says which fields it uses.
struct Attrs {
  std::vector<int64_t> axes;  // reduce axes, permute order, {axis} for slice/concat/argmax
  bool keepdim = false;
  std::vector<double> values;  // constant data, arange {start, step}, slice {start, step}
  DType dtype = DType::kF32;   // cast target
  bool causal = false;         // softmax, log_softmax, attention
  bool reverse = false;        // cumsum: sum from the end of the axis
  uint64_t seed = 0;           // random, dropout: the site's stream (an integer, never rounded)
  Window window;               // conv2d and the pools, with their gradients
};

/// The type of one value: what a multi-output node lists for each of its results.
struct ValueType {
  DType dtype = DType::kF32;
  Shape shape;
  bool operator==(const ValueType&) const = default;
};

/// Which part of a training step appended a node (tracing, autograd or the optimizer):
/// memory reports group planned bytes by it.
enum class Stage : uint8_t { kForward, kBackward, kOptimizer };

struct Node {
  Op op;
  DType dtype;
  Shape shape;
  std::vector<int32_t> inputs;
  Attrs attrs;
  std::string name;  // params, inputs, state: the binding name
  std::source_location loc;
  Stage stage = Stage::kForward;  // stamped by Graph::add from Graph::stage
  // The recompute region (tg::Recompute) the node was traced in, -1 outside any: the
  // backward reads a recomputed copy of such a forward value instead of the stored one
  // (passes/remat.cc). Stamped by Graph::add from Graph::recompute.
  int32_t recompute = -1;
  // A multi-output node (selective_scan, its gradient) lists its results' types here and is
  // read only through kResult nodes, one per result used (`result(graph, id, i)`). Its own
  // dtype and shape are f32 [Σ numel(result)]: a backend lays the results out one after the
  // other in one allocation of that size, result i after the ones before it, and a kResult
  // node is a view of its part. Empty for every other node.
  std::vector<ValueType> results;

  int64_t numel() const { return tg::numel(shape); }
};

/// Whether an attention or attention_grad node carries a key mask: its last input, bool [B, S].
inline bool attention_masked(const Node& n) { return n.inputs.size() == (n.op == Op::kAttention ? 4u : 7u); }

/// Where result `index` of multi-output node `n` starts in its allocation, in elements.
int64_t result_offset(const Node& n, size_t index);

/// "file.cc:12" of a node's origin, for error messages.
std::string loc_str(const std::source_location& loc);

class Graph {
 public:
  /// Appends a node after checking arity and inferring its shape and dtype
  /// (ir/shape.cc); throws ShapeError naming the op, the shapes and node.loc.
  int32_t add(Node node);
  /// Appends without inference: for passes that copy already-checked nodes.
  int32_t add_checked(Node node);

  const Node& node(int32_t id) const { return nodes_[static_cast<size_t>(id)]; }
  Node& node(int32_t id) { return nodes_[static_cast<size_t>(id)]; }
  int32_t size() const { return static_cast<int32_t>(nodes_.size()); }
  const std::deque<Node>& nodes() const { return nodes_; }

  /// What a program produces and keeps. `outputs` are read back (loss, run results);
  /// `updates` write a value into a param/state leaf's storage after everything else ran.
  std::vector<int32_t> outputs;
  struct Update {
    int32_t target;  // a kParam or kState leaf
    int32_t value;
  };
  std::vector<Update> updates;

  /// Stamped on every node add() appends (autograd and the optimizer set it while they run).
  Stage stage = Stage::kForward;
  /// Stamped on every node add() appends as Node::recompute (tg::Recompute sets it).
  int32_t recompute = -1;

  /// Human-readable listing, one node per line: `%7 = add(%3, %6) f32[256, 64]`.
  std::string to_string() const;

  /// A process-unique number given at construction (see Tensor::graph_serial). A copy gets
  /// a new one; so does a graph whose contents were moved out, so tensors into it go stale.
  uint64_t serial() const { return serial_; }
  /// Whether `graph` is a live graph whose serial is still `serial`: a tensor made in it is
  /// usable. Never dereferences `graph` (it may have been destroyed).
  static bool is_live(const Graph* graph, uint64_t serial);

  Graph();
  Graph(const Graph& other);
  Graph(Graph&& other) noexcept;
  Graph& operator=(const Graph& other);
  Graph& operator=(Graph&& other) noexcept;
  ~Graph();

 private:
  void renew_serial();  // registers this graph under a fresh serial, dropping the old one
  uint64_t serial_ = 0;
  // A deque, not a vector: appending never moves existing nodes, so references to a node
  // (and Tensor::shape() results) stay valid while tracing and autograd append more.
  std::deque<Node> nodes_;
};

/// Infers node.shape/node.dtype from its inputs and attrs (ir/shape.cc).
void infer(const Graph& graph, Node& node);
/// Throws the ShapeError of a node that breaks its op's rule: "[op] what; input shapes: … (at
/// file:line)".
[[noreturn]] void shape_fail(const Graph& graph, const Node& node, const std::string& what);

/// The value of `id` when it is a one-value constant, looking through broadcasts and reshapes
/// (a fill of any shape); nullopt otherwise.
std::optional<double> constant_value(const Graph& graph, int32_t id);
/// Element k of a kConstant node (its values, or its one fill value) or of a kArange node.
double constant_element(const Node& n, int64_t k);

/// Whether node `id` of `g` is a bf16/f16-stored parameter read as f32 (the cast of its leaf that
/// Param::tensor makes): a weight the passes neither copy nor keep widened.
bool is_widened_param(const Graph& g, int32_t id);

}  // namespace tg::ir
