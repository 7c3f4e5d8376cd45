// The CUDA backend's Executable: runs the program the graph's schedule (passes/schedule.h)
// emits (emit.h), captured as a CUDA graph and replayed each step.
//  - Kernels: all sources are compiled in parallel through NVRTC (with its disk cache);
//    identical sources (the same layer shapes repeated) compile and load once; each cuBLASLt
//    product picks the fastest of its candidate algorithms on the real buffers.
//  - Capture: the input upload (one copy from pinned staging), every step and the update copies
//    are recorded into a CUDA graph, once per staging buffer (two: the host fills one while a
//    step uploads from the other); execute() launches one of them. Small outputs and the error
//    word come back inside the step, into pinned memory.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/cuda/program.h"

namespace tg::backend::cuda {

/// What the backend shares with its executables.
struct CudaContext {
  DeviceInfo info;
  CUstream stream = nullptr;  // greatest priority: every step but the side steps
  CUstream side = nullptr;    // least priority: side steps (Step::side)
  CUstream comm = nullptr;    // greatest priority: collectives, beside the steps after them
  void make_current() const;
};

/// `source` prepared for programmatic dependent launches on a device of `sm_major` (see
/// executable.cc); `early` says whether the kernel may be launched as one.
std::string pdl_source(const std::string& source, int sm_major, bool& early);

class CudaExecutable final : public Executable {
 public:
  CudaExecutable(std::shared_ptr<CudaContext> ctx, const ir::Graph& graph, const Bindings& bindings,
                 const PrepareOptions& options);
  ~CudaExecutable() override;
  void set_input(int32_t node, const void* host) override;
  void execute() override;
  void read_output(int32_t node, void* host) override;
  std::string describe() const override;
  int64_t kernel_count() const override { return static_cast<int64_t>(prog_.steps.size()); }
  MemoryStats memory() const override { return prog_.memory; }

 private:
  CUdeviceptr address(const Place& p) const;
  void compile_kernels(bool early_launch);  // early_launch: see PrepareOptions
  void tune_products();
  void plan_readback();
  void enqueue_step(const Step& s, CUstream stream);
  /// Everything one execution does, in stream order, reading inputs from staging_[k].
  void enqueue_all(int k);
  void enqueue_prologue(int k);  // the input upload and clearing the error word
  void enqueue_updates();        // the update copies that are not written in place
  void enqueue_readback();
  void capture(int k);
  void wait_staging(int k);
  void profile_execution(int k);
  std::string step_line(const Step& s) const;

  std::shared_ptr<CudaContext> ctx_;
  dist::Communicator* comm_ = nullptr;  // the ranks all_reduce steps sum over
  LoweredProgram prog_;
  DeviceMemory arena_;
  DeviceMemory err_;
  bool uses_err_ = false;   // some kernel takes the error word (else it is neither reset nor read back)
  DeviceMemory workspace_;  // cuBLASLt
  std::vector<Kernel> kernels_;
  std::vector<char> kernel_early_;  // per kernel: launched as a programmatic dependent launch
  // Inputs are staged in pinned host memory, double-buffered: while step i runs (uploading
  // from staging_[i % 2]), the host fills staging_[(i + 1) % 2] for the next step, so steps
  // that do not read their loss queue up without waiting. One captured graph per buffer.
  void* staging_[2] = {nullptr, nullptr};
  int next_ = 0;  // the buffer (and graph) of the next execute()
  bool launched_[2] = {false, false};
  CUevent done_[2] = {nullptr, nullptr};  // recorded after the launch that reads staging_[k]
  std::vector<CUevent> coll_events_;      // per collective step: its fork, its end (Step::waits)
  std::vector<CUevent> side_events_;      // the side steps' forks, then the join (none without side steps)
  std::unordered_map<int32_t, uint64_t> input_version_;      // bumped by each set_input
  std::unordered_map<int32_t, uint64_t> staged_version_[2];  // the version each buffer holds
  // Small outputs (a loss, sampled token ids) come back inside the step: its graph ends with
  // copies into this pinned block (the error word at 0), so reading one costs a wait, not a copy.
  void* readback_ = nullptr;
  std::unordered_map<int32_t, int64_t> readback_offset_;  // output node → byte offset
  int64_t readback_bytes_ = 0;
  void* graph_[2] = {nullptr, nullptr};       // CUgraph, per staging buffer
  void* graph_exec_[2] = {nullptr, nullptr};  // CUgraphExec
  // TG_PROFILE=1: per-op milliseconds and launch counts, summed over executions, printed
  // when the executable is destroyed.
  bool profile_ = false;
  std::map<std::string, std::pair<double, int64_t>> profile_ms_;
  int64_t executions_ = 0;
};

}  // namespace tg::backend::cuda
