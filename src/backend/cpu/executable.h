// The CPU backend's Executable: the graph's schedule (passes/schedule.h) over one host arena,
// its kernels built once at prepare time (steps.h) with real addresses, one per launch; a
// launch of several group steps is one parallel region over all their chunks. execute() only
// runs kernels, then copies the update values that were not written in place.
#pragma once
#include <source_location>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_kernels.h"
#include "passes/schedule.h"

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
  /// Memory for every schedule buffer: the bound ones, the arena, inputs and constants.
  void allocate(const ir::Graph& g, const Bindings& bindings);
  void build_kernels(const ir::Graph& g, dist::Communicator* comm);
  View view(const passes::Place& p) const;
  std::string step_label(const passes::Step& s) const;

  passes::Schedule schedule_;
  std::vector<std::byte*> base_;  // per schedule buffer
  HostMem arena_;
  std::vector<HostMem> fixed_mems_;  // inputs and constants
  struct NodeInfo {
    ir::Op op;
    DType dtype;
    Shape shape;
    std::string name;
    std::source_location loc;
  };
  std::vector<NodeInfo> nodes_;
  std::vector<char> input_set_;
  bool all_inputs_set_ = false;
  std::vector<Kernel> kernels_;  // one per launch
  std::vector<Kernel> updates_;  // the update copies, after every launch
  std::vector<int64_t> step_flops_;
  MemoryStats memory_;
  // TG_CHECK_FINITE=1: each kernel's float results (f32, bf16, f16) are scanned after it runs
  // (check_finite).
  bool check_finite_ = false;
  std::vector<std::pair<size_t, size_t>> kernel_steps_;  // per kernel: its steps [first, last)
  void check_finite(size_t kernel) const;
  // TG_PROFILE=1: wall time per kernel, printed by op when the executable is destroyed.
  bool profile_ = false;
  std::vector<double> kernel_seconds_;
  int64_t executions_ = 0;
};

}  // namespace tg::backend::cpu
