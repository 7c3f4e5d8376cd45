// The tracing context: while compile_train / compile_forward runs the user's function, a
// Trace is current on this thread. Ops with no tensor operands (full, arange) and module
// parameters (which become `param` leaves the first time they are used) find the graph here.
#pragma once
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/graph.h"
#include "tensorgrad/tensor.h"

namespace tg {
class Param;
}

namespace tg::ir {

struct Trace {
  Graph graph;
  /// compile_train traces in training mode (dropout active); compile_forward does not.
  bool training = false;
  /// capture name → node, in capture order.
  std::vector<std::pair<std::string, int32_t>> captures;
  /// The i32 scalar input the runtime advances every call, created on first use by a
  /// random op; and the next per-site seed, so two dropout sites draw different streams.
  int32_t rng_key = -1;
  uint64_t next_seed = 0;
  /// Mixed precision (Precision::kBf16 / kF16): matmul, attention and convolutions cast their
  /// f32 operands to this type (kF32: no mixed precision), except operands that are (shape
  /// ops of) a parameter whose path starts with one of `keep_f32` (a module path such as
  /// "head", or a parameter's full path).
  DType half = DType::kF32;
  std::vector<std::string> keep_f32;
  /// Gradient accumulation (TrainOptions::micro_batches) traces the function once per
  /// micro-batch: this one's index. Captures record the first micro-batch's values only.
  int32_t micro_batch = 0;
  /// tg::state() name → the value the previous micro-batch assigned it (what this one reads),
  /// and such values → their state leaf (what assign() then targets).
  std::unordered_map<std::string, int32_t> state_values;
  std::unordered_map<int32_t, int32_t> state_leaf_of;
  /// The next tg::Recompute region's id (Graph::recompute is the open region's, -1 if none).
  int32_t next_recompute_region = 0;
  /// Parameters in first-use order and their leaf nodes.
  std::vector<const Param*> params;
  std::unordered_map<const Param*, int32_t> param_nodes;
  /// A half-stored parameter's f32 reading (the cast of its leaf), what Param::tensor returns.
  std::unordered_map<const Param*, int32_t> param_reads;
};

/// The trace being recorded on this thread, or nullptr.
Trace* current_trace();

/// Makes `trace` current for its lifetime (restores the previous one after; nesting is an error).
class TraceScope {
 public:
  explicit TraceScope(Trace& trace);
  ~TraceScope();
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;
};

/// `base`, or `base#2`, `base#3`, … : the first name not yet captured in `trace` (for
/// layers that offer a capture on every call).
std::string unused_capture_name(const Trace& trace, const std::string& base);

/// Name of the runtime-fed key input of random ops.
inline constexpr const char* kRngKeyInput = "__rng_key";
/// Prefix of the state leaves tg::state() makes (the runtime shares those between the
/// programs of a model; an optimizer's moments are per program).
inline constexpr const char* kUserStatePrefix = "state:";

/// The type the current trace's precision policy stores operand `x` of a product, an
/// attention or a convolution as: Trace::half (bf16 or f16), or kF32 where no mixed precision
/// applies to it (see Trace::half).
DType policy_operand_dtype(const Tensor& x);

/// bf16 or f16 when `x` (f32) is layout views (reshape, permute, broadcast, slice) of a value of
/// that type widened to f32 (a half-stored parameter as Param::tensor reads it), else kF32:
/// cast(x, that type) then reads the stored value through the same views, without rounding.
DType widened_half(const Tensor& x);

/// Appends `node` to `graph` (with inference) and returns its handle.
Tensor emit(Graph& graph, Node node);

}  // namespace tg::ir
