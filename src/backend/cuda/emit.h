// The CUDA backend's half of the schedule (passes/schedule.h): one generated kernel, cuBLASLt
// product or memset per schedule step (a few for the steps that need them: a product's
// operand copies, a norm gradient's partials), over the schedule's buffers and places. It
// decides nothing the schedule decided; it picks kernels (capabilities.h says which, as pure
// functions the schedule asked too) and marks the steps that may run on the side stream.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/cuda/capabilities.h"
#include "backend/cuda/program.h"
#include "passes/schedule.h"

namespace tg::backend::cuda {

/// Every generated kernel has this name: each lives in its own module, and identical sources
/// (the same shapes in every layer) then compile, cache and load once.
constexpr const char* kName = "tg_kernel";

/// Whether a place starts on a 16-byte boundary (the vector loads' alignment).
inline bool aligned16(const Place& p) { return p.offset % 16 == 0 && p.fixed % 16 == 0; }

class Emitter {
 public:
  Emitter(const DeviceInfo& info, const ir::Graph& g, const passes::Schedule& s, const Bindings& bindings,
          const PrepareOptions& options);
  LoweredProgram run();

 private:
  // ---- memory, steps, launches (emit.cc) ----
  void bind(const Bindings& bindings);
  void emit_step(const passes::Step& st);
  void emit_group(const passes::Step& st);
  /// Consecutive group kernels of one launch become one batched kernel.
  void batch_launches();
  /// Marks the steps that can run beside the steps after them (Step::side) and keeps their
  /// buffers allocated to the end. TG_CUDA_NO_SIDE=1 turns it off.
  void choose_side_steps();
  /// Sets Step::waits for the collective steps (run on the communication stream) and keeps
  /// their operands allocated until then.
  void overlap_collectives();
  Place place(const passes::Place& p) const;
  Operand operand(const passes::Place& p, int32_t node) const;
  void add_kernel(std::vector<int32_t> nodes, Launch launch, std::vector<Arg> args, int64_t flops = 0);
  void add_zero(const Place& out, int64_t bytes);  // a memset step (nothing when bytes is 0)

  // ---- nodes (emit_nodes.cc) ----
  void emit_node(const passes::Step& st);
  void emit_update_slice(const passes::Step& st);
  /// all_reduce, reduce_scatter, all_gather, rank_shard: one kCollective step.
  void emit_collective(const passes::Step& st);
  void emit_cross_entropy(const passes::Step& st);
  void emit_norm(const passes::Step& st);
  void emit_norm_backward(const passes::Step& st);
  void emit_scan(const passes::Step& st);
  void emit_attention(const passes::Step& st);

  // ---- products (emit_products.cc) ----
  void emit_product(const passes::Step& st);
  /// A product planned on gemv_kernel (p.gemv): a and b as its step reads them; `cast` the
  /// absorbed cast node or -1.
  void emit_gemv(const passes::Step& st, const ProductPlan& p, int32_t cast, const Place& a_place,
                 const Place& b_place);

  const DeviceInfo& info_;
  const ir::Graph& g_;
  const passes::Schedule& s_;
  PrepareOptions options_;
  LoweredProgram prog_;
  std::vector<CUdeviceptr> fixed_;    // per schedule buffer outside the arena: its memory
  int32_t launch_ = 0;                // the schedule launch being emitted
  std::vector<int32_t> step_launch_;  // per emitted step
};

}  // namespace tg::backend::cuda
