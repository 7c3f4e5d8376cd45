// A communicator: one process's handle on the group of processes (ranks) that train one model
// together, over an existing collective engine (MPI between CPU processes, NCCL between GPUs;
// no home-made transport). Backends run the graph's collective nodes through it; the runtime
// uses its host exchanges for control (checking that every rank compiled the same program).
//
// Every rank must issue the same collectives, with the same sizes, in the same order.
#pragma once
#include <cstdint>
#include <string>

#include "tensorgrad/dtype.h"

namespace tg::dist {

enum class Engine : uint8_t { kMpi, kNccl };

class Communicator {
 public:
  virtual ~Communicator() = default;
  int rank() const { return rank_; }
  int size() const { return size_; }
  virtual Engine engine() const = 0;
  /// "mpi" or "nccl".
  virtual const char* name() const = 0;

  // ---- Host memory, blocking (MPI; NCCL throws tg::Error: its tensors live on the GPU). ----
  /// recv[i] = Σ over ranks of send[i], `count` elements of f32 or i32; send == recv is in
  /// place.
  virtual void all_reduce_host(const void* send, void* recv, int64_t count, DType dtype) = 0;
  /// all_reduce_host over doubles (which DType does not name): the reference backend computes
  /// in double. The default throws tg::Error (NCCL).
  virtual void all_reduce_host_f64(const double* send, double* recv, int64_t count);
  /// recv (count elements) = rank r's part of the sum of every rank's send (count · size
  /// elements): elements [r·count, (r+1)·count). f32 (reduce_scatter_host) or double (_f64, for
  /// the reference backend); send and recv must not overlap. The defaults throw tg::Error (NCCL).
  virtual void reduce_scatter_host(const float* send, float* recv, int64_t count);
  virtual void reduce_scatter_host_f64(const double* send, double* recv, int64_t count);
  /// recv (count · size elements) = every rank's send (count elements) in rank order; f32 or
  /// double; send and recv must not overlap. The defaults throw tg::Error (NCCL).
  virtual void all_gather_host(const float* send, float* recv, int64_t count);
  virtual void all_gather_host_f64(const double* send, double* recv, int64_t count);

  // ---- Device memory, enqueued on `stream` (a CUstream; NCCL; MPI throws tg::Error). ----
  /// recv[i] = Σ over ranks of send[i]; f32 or bf16; send == recv is in place.
  virtual void all_reduce_device(const void* send, void* recv, int64_t count, DType dtype, void* stream) = 0;
  /// recv (count elements) = rank r's part of the sum of every rank's send (count · size elements):
  /// elements [r·count, (r+1)·count).
  virtual void reduce_scatter_device(const void* send, void* recv, int64_t count, DType dtype,
                                     void* stream) = 0;
  /// recv (count · size elements) = every rank's send (count elements) in rank order.
  virtual void all_gather_device(const void* send, void* recv, int64_t count, DType dtype, void* stream) = 0;
  /// Collectives issued between group_start and group_end run as one fused launch (NCCL's
  /// grouping; no-ops for MPI).
  virtual void group_start() {}
  virtual void group_end() {}

  // ---- Control, host memory, any engine. ----
  /// out (bytes · size) = every rank's `bytes` bytes of `in`, in rank order.
  virtual void all_gather_bytes(const void* in, void* out, int64_t bytes) = 0;
  virtual void barrier() = 0;

 protected:
  Communicator(int rank, int size) : rank_(rank), size_(size) {}

 private:
  int rank_;
  int size_;
};

/// The communicator distributed::init() made, or nullptr before init() (and after finalize()).
Communicator* world();

}  // namespace tg::dist
