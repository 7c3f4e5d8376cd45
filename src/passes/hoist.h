// Hoisting what an inference program computes from its parameters alone. Between two runs of
// a compile_forward program the parameters rarely change, yet every value computed from
// parameters and constants only (a weight's bf16 copy under Precision::kBf16, a rotary table
// built from arange) would be recomputed on every run: for a decode step that means reading
// each f32 weight and writing its bf16 copy per token, more traffic than the product itself.
// The split moves such values into a prologue graph that writes them into state leaves; the
// main graph reads those leaves instead. The program runs the prologue again only after the
// parameters changed (DeviceStore::version).
#pragma once
#include <string>
#include <vector>

#include "ir/graph.h"

namespace tg::passes {

/// Name prefix of the state leaves that hold hoisted values ("hoisted/0", "hoisted/1", …).
inline constexpr const char* kHoistedPrefix = "hoisted/";

struct Hoisted {
  /// The graph with each hoisted value replaced by a state leaf "hoisted/<i>" (DCE applied).
  ir::Graph main;
  /// Computes the hoisted values from params and constants and writes each into its state
  /// leaf (graph updates); no inputs, no outputs.
  ir::Graph prologue;
  /// Ids of the given graph → ids of `main` (as eliminate_dead_code's remap; -1: gone).
  std::vector<int32_t> remap;
  int32_t count = 0;  // hoisted values; 0: nothing qualified (main is the graph after DCE)
  /// Per hoisted value (leaf "hoisted/<i>"): its expression over parameter names, constants and
  /// ops, equal in every program that computes the same value (programs share its buffer).
  std::vector<std::string> keys;
};

/// Per node: whether its value depends on params, constants and aranges only (no input, state,
/// random draw or collective on the way; i8 params, quantized weights, count as inputs).
std::vector<char> parameter_only(const ir::Graph& graph);

/// Inference rewrites run first (weights.cc): a cast of a permuted or reshaped parameter becomes
/// the permute/reshape of the cast parameter (its bf16 copy keeps the parameter's layout, which
/// a decode step's skinny products read best), and products x·wᵢᵀ sharing x, with each wᵢ
/// computed from a parameter (a bf16 copy), become one product over concat(w₁, w₂, …) and a
/// slice of its columns each (Llama's q/k/v and gate/up projections: one kernel, not three).
ir::Graph cast_weights_before_views(const ir::Graph& graph, std::vector<int32_t>& remap);
ir::Graph merge_sibling_products(const ir::Graph& graph, std::vector<int32_t>& remap);
/// And a product of at most this many rows over a quantized Linear's weight (Param::quantize_int8:
/// x · (q·scale)ᵀ, a decode step's; quantize_int4: with offsets) becomes quant_matmul(x, q, scale[,
/// offset]), which reads the 8- or 4-bit weight itself; larger ones keep the dequantized copy and a GEMM.
inline constexpr int64_t kQuantizedProductRows = 16;
ir::Graph quantized_products(const ir::Graph& graph, std::vector<int32_t>& remap);

/// Splits an inference graph (no gradients, no optimizer). A value is hoisted when it is not a
/// leaf or a view, is computed from params, constants and aranges only (no input, state or
/// collective on the way), is read by something that is not (or is an output), and is no
/// larger than its operands together (a cast to bf16 halves a weight; an expansion of a
/// small value stays in the step, unless it is at most 4 MiB). Views of a hoisted value stay
/// in the main graph.
Hoisted hoist_parameter_values(const ir::Graph& graph);

}  // namespace tg::passes
