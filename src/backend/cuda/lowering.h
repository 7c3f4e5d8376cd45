// Lowering a graph for the CUDA executable (program.h), once at prepare time:
//  1. Placement, group by group in the order passes/fusion.h chose (plan.cc): every live node
//     gets a Place — an arena buffer or fixed device memory (bound parameters and state, the
//     input block, constants), a byte offset and element strides. Reshape of compatible
//     layouts, Permute, BroadcastTo, Slice and one-value Constants are views (no kernel);
//     consumers that need dense rows (norms, softmax, cross entropy) or a layout cuBLASLt / the
//     attention kernels cannot read get a copy kernel first. Each group becomes a Step: a
//     generated kernel (codegen.h, kernels.h, fused_sinks.h, small_matmul.h), a cuBLASLt
//     product or a memset; consecutive independent elementwise steps then share one launch.
//  2. Memory (launches.cc): each arena buffer lives from the first to the last step touching
//     it (outputs and update values to the end); passes::place_arena gives the offsets.
// The lowering's working state (per-node slots, the norm fusions it matched) ends with it.
#pragma once
#include <cstdint>
#include <map>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "backend/cuda/program.h"
#include "passes/fusion.h"

namespace tg::backend::cuda {

class Lowering {
 public:
  Lowering(const DeviceInfo& info, const ir::Graph& g, const Bindings& bindings, const PrepareOptions& options);
  LoweredProgram run();

 private:
  using Category = ArenaBuffer::Category;
  struct Slot {
    DType dtype = DType::kF32;
    Shape shape;
    Place place;
    bool placed = false;
    const Buffer* root = nullptr;  // the bound buffer the place reads, if any
  };

  // ---- placement (plan.cc) ----
  void bind_leaves(const Bindings& bindings);
  void plan_inputs();
  void plan_group(const passes::KernelGroup& group);
  void plan_fused(const passes::KernelGroup& group);
  /// Leaves and views, then plan_kernel for ops with a kernel of their own.
  void plan_single(int32_t id);
  void plan_kernel(int32_t id);
  void plan_update_slice(int32_t id);
  void plan_cross_entropy(int32_t id);
  void plan_matmul(int32_t id);
  // plan_matmul's steps (plan_products.cc), each filling in more of the product's plan.
  struct ProductPlan;
  void plan_outer_product(const ProductPlan& p);
  void plan_product_operands(ProductPlan& p);
  void match_bias_epilogue(ProductPlan& p);
  void match_gelu_epilogue(ProductPlan& p);
  void match_residual_epilogue(ProductPlan& p);
  void place_product_output(ProductPlan& p);
  void plan_gemv_product(const ProductPlan& p);
  void plan_lt_product(ProductPlan& p);
  /// selective_scan and selective_scan_grad (plan_scan.cc).
  void plan_scan(int32_t id);
  void computed_by_product(int32_t node, int32_t id);
  void plan_outputs_and_updates();
  /// Whether update value `value`, computed by group `group` (an elementwise kernel), may be
  /// written straight over its target (set in `target`): nothing reads the target's old
  /// contents after that group, the group reads it element for element, and no output or
  /// other update sees the old value.
  bool in_place_target(int32_t value, int32_t group, int32_t& target) const;
  Place own(int64_t bytes, const Shape& shape, Category category);
  Place& own_node(int32_t id);
  Place fixed_data(const void* host, int64_t bytes, const std::vector<int64_t>& strides);
  /// The input's place if it is dense, else a dense copy (an extra step).
  Place dense(int32_t input);
  Place dense_copy(const Slot& in);
  /// attention and attention_grad, their results' layouts (plan_attention.cc).
  void plan_attention(int32_t id);
  /// The concat along the features of attention_grad `grad`'s three results, each permuted to
  /// [B, T, H, D] and its heads merged, when that is all they are read for (and T = S); -1 if
  /// not. packed_qkv_source: the attention_grad whose rows such a concat `concat` is, or -1.
  int32_t packed_qkv_concat(int32_t grad) const;
  int32_t packed_qkv_source(int32_t concat) const;
  /// The kResult nodes reading result `index` of multi-output node `id` (plan_attention.cc).
  std::vector<int32_t> results_of(int32_t id, int64_t index) const;
  /// Places every kResult node of result `index` of `id` at `base` + offset_elements, with strides.
  void place_result(int32_t id, int64_t index, const Place& base, std::vector<int64_t> strides, int64_t offset_elements);
  /// Whether `x` is read after the step: a graph output or an update's value.
  bool escapes(int32_t x) const;
  bool pad_operand(MatOperand& mo, Place& place, int64_t rows_p, int64_t cols_p, bool zeros);
  // ---- norms fused with their affine forward and whole backward (norm_fusion.cc) ----
  struct NormBackward {
    int32_t grad = -1, x = -1, dz = -1;  // the norm_grad node; its input and the incoming gradient
    int32_t mul = -1, w = -1;            // dy = dz · w folded in (w: a [C] param)
    int32_t db = -1;                     // Σrows dz
    int32_t dw = -1, dw_mul = -1;        // Σrows dz · norm(x), and its product
    int32_t recompute = -1;              // the norm(x) that product read, recomputed
    int32_t at_group = -1;               // planned when this group's turn comes
  };
  int32_t view_source(int32_t id) const;
  /// A forward norm whose only reader is an affine group {·w[, +b]}: one kernel writes the
  /// group's value (norm_fusion.cc). False when the norm is planned on its own.
  bool plan_norm_forward(int32_t id);
  /// A forward norm (with its affine group) whose only reader is a product with a few rows:
  /// planned by that product, whose gemv_kernel normalises the rows as it reads them, or else
  /// as its own kernel just before the product (plan_deferred_norm).
  struct DeferredNorm {
    int32_t norm = -1;
    std::vector<int32_t> nodes;  // the norm and its affine nodes; the last holds the value
    Place x, w, b;
    NormAffine affine;
    int64_t rows = 0, cols = 0;
    double eps = 0;
    bool layer = true;
  };
  std::unordered_map<int32_t, DeferredNorm> deferred_norms_;  // by the value the product reads
  void plan_deferred_norm(const DeferredNorm& dn);
  void match_norm_backwards();
  /// Plans the fused norm backwards due at this group; true when the group was absorbed by one.
  bool plan_norm_backward_at(int32_t group_index);
  std::vector<NormBackward> norm_backwards_;
  std::unordered_set<int32_t> absorbed_groups_;
  bool split_product_wanted(int64_t batch, int64_t m, int64_t n, int64_t k, DType dtype) const;
  void plan_split_product(MatOperand mats[2], Place places[2], int64_t m, int64_t k, int64_t ld, bool with_bias, Step& st);
  Operand operand(int32_t id) const;
  void add_kernel(std::vector<int32_t> nodes, Launch launch, std::vector<Arg> args, int64_t flops = 0);
  void add_zero(const Place& out, int64_t bytes);  // a memset step (nothing when bytes is 0)

  // ---- launches and memory (launches.cc) ----
  /// Horizontal fusion: consecutive elementwise steps with no memory hazard between them
  /// (neither reads or writes what another writes) become one launch.
  void batch_steps();
  /// Marks the steps that can run beside the steps after them (Step::side) and keeps their
  /// buffers allocated to the end. TG_CUDA_NO_SIDE=1 turns it off.
  void choose_side_steps(bool reuse);
  void plan_arena(bool reuse);
  /// Each step's minimum traffic: the values it writes and the distinct values it reads from
  /// outside itself (what a roofline compares against bandwidth).
  void estimate_traffic();

  const DeviceInfo& info_;
  const ir::Graph& g_;
  PrepareOptions options_;
  LoweredProgram prog_;
  passes::Fusion fusion_;
  std::vector<std::vector<int32_t>> consumers_;  // live consumers per node
  std::vector<char> in_place_;                   // per update: its group writes the target directly
  std::vector<Slot> slots_;
  // Arena buffers whose rows are padded apart (ld > cols) with zeros in the padding, written so
  // by their producer (cross-entropy's gradient): buffer → (ld, cols). A product may read such
  // rows ld wide as a zero-padded reduction axis.
  std::map<int32_t, std::pair<int64_t, int64_t>> zero_padded_;
};

}  // namespace tg::backend::cuda
