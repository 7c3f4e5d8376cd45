// The CPU backend's Executable: a graph lowered once, at prepare time, into a list of
// prebuilt kernels over one memory arena. Preparation runs in two phases:
//
//  1. Placement (plan.cc), group by group in the order passes/fusion.h chose: where every
//     live node's elements live (a Place: an arena buffer, a bound param/state buffer or
//     prepare-time memory, plus an offset and strides) and which step computes it. Reshape
//     of dense data, and BroadcastTo / Permute / Slice / one-value Constants whose every
//     consumer can read strided data, become views with no copy. Elementwise groups become
//     one fused step whose internal values never get a buffer; an optimizer update whose
//     value comes out of such a group is written straight into the parameter or moment
//     (no end-of-step copy) when nothing reads the old value afterwards. Consecutive
//     independent fused steps are batched into one parallel region (multi-tensor).
//  2. Memory and kernels (executable.cc): each arena buffer lives from the first to the
//     last step that touches it (outputs and non-in-place update values to the end); the
//     buffers get offsets in one arena by best-fit over those intervals; then every step's
//     kernel is built with real addresses. execute() only runs kernels.
#pragma once
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/arena.h"
#include "backend/backend.h"
#include "backend/cpu/cpu_kernels.h"
#include "passes/fusion.h"

namespace tg::backend::cpu {

class CpuBuffer final : public Buffer {
 public:
  CpuBuffer(DType dtype, int64_t numel) : Buffer(dtype, numel), mem(numel * dtype_size(dtype)) {}
  HostMem mem;
};

class CpuExecutable final : public Executable {
 public:
  CpuExecutable(const ir::Graph& graph, const Bindings& bindings, const PrepareOptions& options);
  ~CpuExecutable() override;
  void set_input(int32_t node, const void* host) override;
  void execute() override;
  void read_output(int32_t node, void* host) override;
  std::string describe() const override;
  int64_t kernel_count() const override { return static_cast<int64_t>(kernels_.size()); }
  MemoryStats memory() const override { return memory_; }
  ArenaLayout arena_layout() const override;

 private:
  /// Where a value lives before the arena exists: arena buffer `buf` (>= 0) or fixed memory.
  struct Place {
    int32_t buf = -1;
    std::byte* fixed = nullptr;
    int64_t offset = 0;  // bytes
    std::vector<int64_t> strides;
    /// Identifies the underlying storage (for hazards between batched steps).
    int64_t key() const { return buf >= 0 ? buf : -1 - static_cast<int64_t>(reinterpret_cast<uintptr_t>(fixed) >> 6); }
  };
  struct Slot {
    DType dtype = DType::kF32;
    Shape shape;
    Place place;
    bool placed = false;
    const Buffer* root = nullptr;  // the bound buffer the place reads, if any
  };
  using Category = ArenaBuffer::Category;
  struct Step {
    std::vector<int32_t> nodes;  // what it computes (describe / profile)
    std::vector<int32_t> bufs;   // arena buffers it reads or writes
    std::vector<int64_t> reads, writes;  // storage keys (Place::key)
    std::function<Kernel()> build;                // non-fused steps
    std::function<FusedSpec()> build_fused;       // fused elementwise groups
    int32_t exec = -1;                            // index of the kernel it runs in
    int64_t bytes = 0, flops = 0;
  };

  // ---- phase 1 (plan.cc) ----
  void bind_leaves(const ir::Graph& g, const Bindings& bindings);
  void check_updates(const ir::Graph& g) const;
  /// Leaves, reductions and views (a view when every reader takes its strides), then the rest:
  void plan_single(const ir::Graph& g, int32_t id);
  /// the ops that run a kernel of their own: copies, products, indexing,
  void plan_kernel(const ir::Graph& g, int32_t id);
  /// and the NN primitives (softmax, cross entropy, norms, randomness, sampling, scan, attention).
  void plan_nn(const ir::Graph& g, int32_t id);
  void plan_fused(const ir::Graph& g, const passes::KernelGroup& group, int32_t group_index);
  bool in_place_target(const ir::Graph& g, int32_t value, int32_t group_index, int32_t& target) const;
  Place own(const ir::Node& n, int64_t bytes, const Shape& shape);
  Place& own_node(const ir::Graph& g, int32_t id);
  /// The input's place, or a dense scratch copy (an extra step) when `ok` rejects it.
  template <class Ok>
  Place readable(const ir::Graph& g, int32_t consumer, int32_t input, Ok ok);
  void add_step(std::vector<int32_t> nodes, const std::vector<const Place*>& touched,
                const std::vector<const Place*>& written, std::function<Kernel()> build);
  /// A step of node `id` reading `ins` as views (each made readable by `ok`) and writing the
  /// node's own dense f32 output: `make(views, out)` builds its kernel.
  using ViewKernel = std::function<Kernel(const std::vector<View>& in, float* out)>;
  template <class Ok>
  void add_views_step(const ir::Graph& g, int32_t id, size_t ins, Ok ok, ViewKernel make);
  View view(const Place& p) const;
  static View probe(const Place& p) { return View{nullptr, p.strides}; }

  // ---- phase 2 (executable.cc) ----
  void batch_steps();
  void plan_arena(bool reuse);
  void build_kernels();
  void plan_outputs_and_updates(const ir::Graph& g);
  std::string step_label(const Step& s) const;

  PrepareOptions options_;
  const ir::Graph* graph_ = nullptr;  // valid during prepare only
  passes::Fusion fusion_;
  std::vector<std::vector<int32_t>> consumers_;  // live consumers per node
  std::vector<Slot> slots_;
  std::vector<ir::Op> ops_;
  std::vector<std::string> names_;
  std::vector<ir::Stage> stages_;
  std::vector<char> input_set_;
  bool all_inputs_set_ = false;
  std::vector<ArenaBuffer> bufs_;
  HostMem arena_;
  std::vector<HostMem> fixed_mems_;  // inputs, constants, staging: prepare-time memory
  std::vector<Step> steps_;
  std::vector<char> in_place_;       // per update: written by its group, no copy at the end
  std::vector<Kernel> kernels_;      // one per execution index
  std::vector<std::vector<size_t>> kernel_steps_;
  struct Output {
    std::shared_ptr<HostMem> snapshot;  // when the value lives in a buffer an update overwrites
    Kernel take;
  };
  std::unordered_map<int32_t, Output> outputs_;
  struct UpdatePlan {
    Kernel stage;  // copies the value aside first when it aliases an updated buffer
    Kernel apply;
  };
  std::vector<UpdatePlan> updates_;
  MemoryStats memory_;
  // TG_PROFILE=1: wall time per kernel, printed by op when the executable is destroyed.
  bool profile_ = false;
  std::vector<double> kernel_seconds_;
  int64_t executions_ = 0;
};

}  // namespace tg::backend::cpu
