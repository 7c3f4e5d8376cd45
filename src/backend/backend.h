// The one interface every backend implements. Nothing above this folder knows which
// backend runs a program: the runtime allocates persistent buffers (parameters, optimizer
// state) through it and hands it a finished graph to prepare; the Executable it returns
// runs that graph once per step.
//
// Host data format, everywhere: f32 → float, i32 → int32_t, bool → uint8_t (0 or 1),
// row-major, exactly numel elements.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/graph.h"

namespace tg::dist {
class Communicator;
}

namespace tg::backend {

/// A persistent buffer living on the backend's device. Its contents survive across
/// executions and are shared by every Executable it is bound to.
class Buffer {
 public:
  Buffer(DType dtype, int64_t numel) : dtype_(dtype), numel_(numel) {}
  virtual ~Buffer() = default;
  DType dtype() const { return dtype_; }
  int64_t numel() const { return numel_; }

 private:
  DType dtype_;
  int64_t numel_;
};

/// Leaf node id (kParam / kState) → the persistent buffer it reads and its update writes.
using Bindings = std::unordered_map<int32_t, Buffer*>;

/// How a backend lowers a graph. Turning both off gives the one-kernel-per-node,
/// one-buffer-per-value configuration the tests compare the optimised one against.
struct PrepareOptions {
  bool fuse = true;          // elementwise kernel groups (passes/fusion.h)
  bool reuse_memory = true;  // buffers share arena space when their lifetimes do not overlap
  bool tf32 = false;         // f32 matrix products may round their inputs to TF32 (cuda)
  bool tf32x3 = false;       // large f32 products as three TF32 products (cuda; Precision::kTf32x3)
  /// Kernels may start before the one before them ends (cuda: programmatic dependent launches).
  /// Inference programs ask for it: their decode steps are chains of short kernels. Training
  /// steps measured slower with it (their large kernels share the GPU with waiting blocks).
  bool early_launch = false;
  /// The ranks that the graph's collectives (ir::is_collective) run over; required when it has any.
  dist::Communicator* communicator = nullptr;
};

/// Planned bytes, by what they hold. The arena figures are those live at the step where the
/// most arena bytes are live; `arena` is the planned arena size (≥ their sum: fragmentation).
struct MemoryStats {
  int64_t params = 0, optimizer_state = 0, inputs = 0, constants = 0;
  int64_t activations = 0, gradients = 0, optimizer_temps = 0, scratch = 0;
  int64_t arena = 0;
  int64_t no_reuse = 0;  // every arena buffer of its own: what the arena replaces
};

/// The arena as planned, for the simulator test: each buffer's place and the execution
/// indices (kernels) it is live for, and the buffers each kernel actually touches.
struct ArenaLayout {
  struct Entry {
    int64_t offset = 0, bytes = 0;
    int32_t first = 0, last = 0;
  };
  std::vector<Entry> buffers;
  std::vector<std::vector<int32_t>> kernel_buffers;
  int64_t arena_bytes = 0;
};

class Executable {
 public:
  virtual ~Executable() = default;
  /// The kernels one execution runs, one line each (op/group, shapes, bytes, flops).
  virtual std::string describe() const = 0;
  virtual int64_t kernel_count() const = 0;
  virtual MemoryStats memory() const = 0;
  /// Backends without an arena return an empty layout.
  virtual ArenaLayout arena_layout() const { return {}; }
  /// Copies host data (see the header comment) into an kInput node's storage.
  virtual void set_input(int32_t node, const void* host) = 0;
  /// Runs every node in order, then applies graph.updates: each update's value is written
  /// into its target's bound buffer only after every node has run (so all reads see the
  /// values from before the step).
  virtual void execute() = 0;
  /// Copies a node listed in graph.outputs to host memory (valid after execute()).
  virtual void read_output(int32_t node, void* host) = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  /// Whether this backend has a kernel for `op`; the reference backend supports all.
  virtual bool supports(ir::Op op) const = 0;
  /// A zero-filled persistent buffer.
  virtual std::unique_ptr<Buffer> allocate(DType dtype, int64_t numel) = 0;
  virtual void upload(Buffer& buffer, const void* host) = 0;
  virtual void download(const Buffer& buffer, void* host) = 0;
  /// Lowers `graph` (already through the passes). Every kParam/kState leaf must be bound.
  /// The executable keeps its own copy of whatever it needs from `graph`.
  virtual std::unique_ptr<Executable> prepare(const ir::Graph& graph, const Bindings& bindings,
                                              const PrepareOptions& options = {}) = 0;
};

/// Throws tg::Error naming the first op of `graph` that `backend` has no kernel for (and the
/// backend): programs fail at compile time, before any kernel is built.
void require_supported(const Backend& backend, const ir::Graph& graph);
/// Throws tg::Error when `graph` has a collective (ir::is_collective) and `comm` is null, or
/// a sharding op (reduce_scatter, all_gather, rank_shard) built for another number of ranks.
void require_communicator(const ir::Graph& graph, const dist::Communicator* comm, const char* backend);

std::unique_ptr<Backend> make_ref_backend();
std::unique_ptr<Backend> make_cpu_backend();
/// Throws DeviceError saying why when cuda:index cannot be used.
std::unique_ptr<Backend> make_cuda_backend(int index);
/// Why cuda:index cannot be used (no driver, no such device, no NVRTC or cuBLASLt), or ""
/// when it can; throws nothing, so Device::best() can ask.
std::string cuda_unavailable_reason(int index);

}  // namespace tg::backend
