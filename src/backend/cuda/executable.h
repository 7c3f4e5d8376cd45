// The CUDA backend's Executable: a graph lowered once into generated kernels over one device
// arena, captured as a CUDA graph and replayed each step.
//
// Preparation:
//  1. Placement, group by group in the order passes/fusion.h chose (plan.cc): every live
//     node gets a Place — an arena buffer or fixed device memory (bound parameters and state,
//     the input block, constants), a byte offset and element strides. Reshape of compatible
//     layouts, Permute, BroadcastTo, Slice and one-value Constants are views (no kernel);
//     consumers that need dense rows (norms, softmax, cross entropy) or a layout cuBLASLt /
//     the attention kernels cannot read get a copy kernel first. Each group becomes a Step:
//     a generated kernel (codegen.h, kernels.h, fused_sinks.h, small_matmul.h), a cuBLASLt
//     product or a memset; consecutive independent elementwise steps then share one launch.
//  2. Memory: each arena buffer lives from the first to the last step touching it (outputs
//     and update values to the end); backend/arena.h gives them offsets in one cuMemAlloc.
//  3. Kernels: all sources are compiled in parallel through NVRTC (with its disk cache);
//     identical sources (the same layer shapes repeated) compile and load once.
//  4. Capture: the input upload (one copy from pinned staging), every step and the update
//     copies are recorded into a CUDA graph, once per staging buffer (two: the host fills one
//     while a step uploads from the other); execute() launches one of them.
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "backend/arena.h"
#include "backend/backend.h"
#include "backend/cuda/cublaslt.h"
#include "backend/cuda/driver.h"
#include "backend/cuda/kernels.h"
#include "passes/fusion.h"

namespace tg::backend::cuda {

class CudaBuffer final : public Buffer {
 public:
  CudaBuffer(DType dtype, int64_t numel) : Buffer(dtype, numel), mem(static_cast<size_t>(std::max<int64_t>(numel, 1)) * dtype_size(dtype)) {}
  DeviceMemory mem;
};

/// What the backend shares with its executables.
struct CudaContext {
  DeviceInfo info;
  CUstream stream = nullptr;  // greatest priority: every step but the side steps
  CUstream side = nullptr;    // least priority: side steps (CudaExecutable::choose_side_steps)
  void make_current() const;
};

/// Every arena buffer and fixed allocation starts on this boundary (vector loads, cuBLASLt).
constexpr int64_t kAlign = 256;
/// cuBLASLt's workspace, shared by every product of an executable (they run in order).
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

class CudaExecutable final : public Executable {
 public:
  CudaExecutable(std::shared_ptr<CudaContext> ctx, const ir::Graph& graph, const Bindings& bindings,
                 const PrepareOptions& options);
  ~CudaExecutable() override;
  void set_input(int32_t node, const void* host) override;
  void execute() override;
  void read_output(int32_t node, void* host) override;
  std::string describe() const override;
  int64_t kernel_count() const override { return static_cast<int64_t>(steps_.size()); }
  MemoryStats memory() const override { return memory_; }

 private:
  struct Place {
    int32_t buf = -1;        // arena buffer, or -1: fixed memory at `fixed`
    CUdeviceptr fixed = 0;
    int64_t offset = 0;      // bytes
    std::vector<int64_t> strides;
  };
  struct Slot {
    DType dtype = DType::kF32;
    Shape shape;
    Place place;
    bool placed = false;
    const Buffer* root = nullptr;  // the bound buffer the place reads, if any
  };
  // Arena buffers whose rows are padded apart (ld > cols) with zeros in the padding, written so
  // by their producer (cross-entropy's gradient): buffer → (ld, cols). A product may read such
  // rows ld wide as a zero-padded reduction axis.
  std::map<int32_t, std::pair<int64_t, int64_t>> zero_padded_;
  using Category = ArenaBuffer::Category;
  struct Arg {
    Place place;
    bool err = false;  // the error word instead of a place
  };
  struct Step {
    enum class Kind : uint8_t { kKernel, kMatmul, kMemset };
    Kind kind = Kind::kKernel;
    std::vector<int32_t> nodes;  // for describe
    Launch launch;
    int32_t kernel = -1;         // into kernels_
    std::vector<Arg> args;       // kernel params; matmul: a, b, out, then bias and residual where present; memset: dst
    int bias_arg = -1, residual_arg = -1;  // matmul: their index in args (residual: out = a·b + bias + residual)
    std::shared_ptr<LtMatmul> matmul;
    // A split fp32 product (plan_split_product): `matmul` computes lo·hi + hi·lo from the split
    // operands args[0], args[1], then `matmul_hi` adds hi·hi (and the bias) reading the hi
    // halves, hi_offset bytes into them.
    std::shared_ptr<LtMatmul> matmul_hi;
    int64_t hi_offset[2] = {0, 0};
    int64_t bytes = 0;           // memset size
    int64_t moved = 0;           // bytes the step reads and writes at least once (profiles)
    int64_t launch_n = -1;       // >= 0: passed as a trailing `long long n` (fused groups)
    // Elementwise groups (one, or several batched into one launch): their indices into
    // fusion_.groups, each one's input strides, and how many leading args each one reads.
    std::vector<int32_t> groups;
    std::vector<std::vector<std::vector<int64_t>>> group_strides;
    std::vector<size_t> group_reads, group_args;
    int64_t flops = 0;
    // Runs on the side stream, overlapping the steps after it (choose_side_steps).
    bool side = false;
  };

  // ---- placement (plan.cc) ----
  void bind_leaves(const ir::Graph& g, const Bindings& bindings);
  void plan_inputs(const ir::Graph& g);
  void plan_group(const ir::Graph& g, const passes::KernelGroup& group);
  void plan_fused(const ir::Graph& g, const passes::KernelGroup& group);
  void plan_single(const ir::Graph& g, int32_t id);
  void plan_matmul(const ir::Graph& g, int32_t id);
  // plan_matmul's steps (plan_products.cc), each filling in more of the product's plan.
  struct ProductPlan;
  void plan_outer_product(const ir::Graph& g, const ProductPlan& p);
  void plan_product_operands(const ir::Graph& g, ProductPlan& p);
  void match_bias_epilogue(const ir::Graph& g, ProductPlan& p);
  void match_gelu_epilogue(const ir::Graph& g, ProductPlan& p);
  void match_residual_epilogue(const ir::Graph& g, ProductPlan& p);
  void place_product_output(const ir::Graph& g, ProductPlan& p);
  void plan_gemv_product(const ProductPlan& p);
  void plan_lt_product(ProductPlan& p);
  /// selective_scan and selective_scan_grad (plan_scan.cc).
  void plan_scan(const ir::Graph& g, int32_t id);
  void computed_by_product(int32_t node, int32_t id);
  void plan_outputs_and_updates(const ir::Graph& g);
  /// Whether update value `value`, computed by group `group` (an elementwise kernel), may be
  /// written straight over its target (set in `target`): nothing reads the target's old
  /// contents after that group, the group reads it element for element, and no output or
  /// other update sees the old value.
  bool in_place_target(const ir::Graph& g, int32_t value, int32_t group, int32_t& target) const;
  Place own(const ir::Node& n, int64_t bytes, const Shape& shape, Category category);
  Place& own_node(const ir::Graph& g, int32_t id);
  Place fixed_data(const void* host, int64_t bytes, const std::vector<int64_t>& strides);
  /// The input's place if it is dense, else a dense copy (an extra step).
  Place dense(const ir::Graph& g, int32_t consumer, int32_t input);
  Place dense_copy(const ir::Node& consumer, const Slot& in);
  /// attention and attention_grad, their results' layouts (plan_attention.cc).
  void plan_attention(const ir::Graph& g, int32_t id);
  /// The concat along the features of attention_grad `grad`'s three results, each permuted to
  /// [B, T, H, D] and its heads merged, when that is all they are read for (and T = S); -1 if
  /// not. packed_qkv_source: the attention_grad whose rows such a concat `concat` is, or -1.
  int32_t packed_qkv_concat(const ir::Graph& g, int32_t grad) const;
  int32_t packed_qkv_source(const ir::Graph& g, int32_t concat) const;
  /// The kResult nodes reading result `index` of multi-output node `id` (plan_attention.cc).
  std::vector<int32_t> results_of(const ir::Graph& g, int32_t id, int64_t index) const;
  /// Places every kResult node of result `index` of `id` at `base` + offset_elements, with strides.
  void place_result(const ir::Graph& g, int32_t id, int64_t index, const Place& base, std::vector<int64_t> strides,
                    int64_t offset_elements);
  /// Whether `x` is read after the step: a graph output or an update's value.
  bool escapes(const ir::Graph& g, int32_t x) const;
  bool pad_operand(const ir::Node& consumer, MatOperand& mo, Place& place, int64_t rows_p, int64_t cols_p, bool zeros);
  // ---- norms fused with their affine forward and whole backward (norm_fusion.cc) ----
  struct NormBackward {
    int32_t grad = -1, x = -1, dz = -1;  // the norm_grad node; its input and the incoming gradient
    int32_t mul = -1, w = -1;            // dy = dz · w folded in (w: a [C] param)
    int32_t db = -1;                     // Σrows dz
    int32_t dw = -1, dw_mul = -1;        // Σrows dz · norm(x), and its product
    int32_t recompute = -1;              // the norm(x) that product read, recomputed
    int32_t at_group = -1;               // planned when this group's turn comes
  };
  int32_t view_source(const ir::Graph& g, int32_t id) const;
  /// A forward norm whose only reader is an affine group {·w[, +b]}: one kernel writes the
  /// group's value (norm_fusion.cc). False when the norm is planned on its own.
  bool plan_norm_forward(const ir::Graph& g, int32_t id);
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
  void plan_deferred_norm(const ir::Graph& g, const DeferredNorm& dn);
  void match_norm_backwards(const ir::Graph& g);
  /// Plans the fused norm backwards due at this group; true when the group was absorbed by one.
  bool plan_norm_backward_at(const ir::Graph& g, int32_t group_index);
  std::vector<NormBackward> norm_backwards_;
  std::unordered_set<int32_t> absorbed_groups_;
  bool split_product_wanted(int64_t batch, int64_t m, int64_t n, int64_t k, DType dtype) const;
  void plan_split_product(const ir::Node& n, MatOperand mats[2], Place places[2], int64_t m, int64_t k, int64_t ld,
                          bool with_bias, Step& st);
  Operand operand(int32_t id) const;
  void add_kernel(std::vector<int32_t> nodes, Launch launch, std::vector<Arg> args, int64_t flops = 0);
  void add_zero(const Place& out, int64_t bytes);  // a memset step (nothing when bytes is 0)
  CUdeviceptr address(const Place& p) const;

  // ---- memory, kernels, capture (executable.cc) ----
  /// Horizontal fusion: consecutive elementwise steps with no memory hazard between them
  /// (neither reads or writes what another writes) become one launch.
  void batch_steps(const ir::Graph& g);
  void plan_arena(bool reuse);
  /// Marks the steps that can run beside the steps after them (Step::side; executable.cc) and
  /// keeps their buffers allocated to the end. TG_CUDA_NO_SIDE=1 turns it off.
  void choose_side_steps(bool reuse);
  /// Each step's minimum traffic: the values it writes and the distinct values it reads from
  /// outside itself (what a roofline compares against bandwidth).
  void estimate_traffic(const ir::Graph& g);
  void compile_kernels();
  void enqueue_step(const Step& s, CUstream stream);
  /// Everything one execution does, in stream order, reading inputs from staging_[k].
  void enqueue_all(int k);
  void enqueue_prologue(int k);  // the input upload and clearing the error word
  void enqueue_updates();        // the update copies that are not written in place
  void capture(int k);
  void profile_execution(int k);
  std::string step_line(const Step& s) const;

  std::shared_ptr<CudaContext> ctx_;
  PrepareOptions options_;
  passes::Fusion fusion_;
  std::vector<std::vector<int32_t>> consumers_;  // live consumers per node
  std::vector<char> in_place_;                   // per update: its group writes the target directly
  std::vector<Slot> slots_;
  std::vector<ir::Op> ops_;
  std::vector<std::string> names_;
  std::vector<ArenaBuffer> bufs_;
  DeviceMemory arena_;
  std::vector<DeviceMemory> fixed_mems_;  // constants, the error word
  DeviceMemory inputs_;                   // every input, one block
  // Inputs are staged in pinned host memory, double-buffered: while step i runs (uploading
  // from staging_[i % 2]), the host fills staging_[(i + 1) % 2] for the next step, so steps
  // that do not read their loss queue up without waiting. One captured graph per buffer.
  void* staging_[2] = {nullptr, nullptr};
  int next_ = 0;                  // the buffer (and graph) of the next execute()
  bool launched_[2] = {false, false};
  CUevent done_[2] = {nullptr, nullptr};  // recorded after the launch that reads staging_[k]
  std::vector<CUevent> side_events_;      // the side steps' forks, then the join (none without side steps)
  int64_t input_bytes_ = 0;
  std::unordered_map<int32_t, int64_t> input_offset_;  // input node → byte offset in the block
  std::unordered_map<int32_t, uint64_t> input_version_;  // bumped by each set_input
  std::unordered_map<int32_t, uint64_t> staged_version_[2];  // the version each buffer holds
  void wait_staging(int k);
  DeviceMemory err_;
  bool uses_err_ = false;  // some kernel takes the error word (else it is neither reset nor read back)
  DeviceMemory workspace_;  // cuBLASLt
  std::vector<Step> steps_;
  std::vector<Kernel> kernels_;
  struct UpdateCopy {
    Place dst, src;
    int64_t bytes;
  };
  std::vector<UpdateCopy> update_copies_;
  std::unordered_map<int32_t, Place> outputs_;  // output node → dense place valid after the step
  // Small outputs (a loss, sampled token ids) and the error word come back inside the step:
  // its graph ends with copies into this pinned block, so reading one costs a wait, not a copy.
  void* readback_ = nullptr;
  std::unordered_map<int32_t, int64_t> readback_offset_;  // output node → byte offset (the error word at 0)
  int64_t readback_bytes_ = 0;
  void plan_readback();
  void enqueue_readback();
  MemoryStats memory_;
  void* graph_[2] = {nullptr, nullptr};       // CUgraph, per staging buffer
  void* graph_exec_[2] = {nullptr, nullptr};  // CUgraphExec
  bool profile_ = false;
  // TG_PROFILE=1: per-op milliseconds and launch counts, summed over executions, printed
  // when the executable is destroyed.
  std::map<std::string, std::pair<double, int64_t>> profile_ms_;
  int64_t executions_ = 0;
};

}  // namespace tg::backend::cuda
