// What a schedule becomes on the device (emit.h builds it, CudaExecutable runs it): steps
// that each launch one kernel, cuBLASLt product or memset over places in one arena or in fixed
// memory, then the update copies.
#pragma once
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/arena.h"
#include "backend/backend.h"
#include "backend/cuda/cublaslt.h"
#include "backend/cuda/driver.h"
#include "backend/cuda/kernels.h"

namespace tg::backend::cuda {

/// Every arena buffer and fixed allocation starts on this boundary (vector loads, cuBLASLt).
constexpr int64_t kAlign = 256;
/// cuBLASLt's workspace, shared by every product of an executable (they run in order).
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

/// A persistent buffer (parameters, optimizer state) in device memory.
class CudaBuffer final : public Buffer {
 public:
  CudaBuffer(DType dtype, int64_t numel)
      : Buffer(dtype, numel), mem(static_cast<size_t>(std::max<int64_t>(numel, 1)) * dtype_size(dtype)) {}
  DeviceMemory mem;
};

/// Where a value's elements are: arena buffer `buf` at `offset`, or fixed memory.
struct Place {
  int32_t buf = -1;  // arena buffer, or -1: fixed memory at `fixed`
  CUdeviceptr fixed = 0;
  int64_t offset = 0;  // bytes
  std::vector<int64_t> strides;
};

struct Arg {
  Place place;
  bool err = false;  // the error word instead of a place
};

struct Step {
  enum class Kind : uint8_t { kKernel, kMatmul, kMemset, kCollective };
  Kind kind = Kind::kKernel;
  std::vector<int32_t> nodes;  // for describe
  Launch launch;
  int32_t kernel = -1;  // into the executable's loaded kernels
  std::vector<Arg>
      args;  // kernel params; matmul: a, b, out, then bias and residual where present; memset: dst
  int bias_arg = -1,
      residual_arg = -1;  // matmul: their index in args (residual: out = a·b + bias + residual)
  std::shared_ptr<LtMatmul> matmul;
  // A split fp32 product (emit_products.cc): `matmul` computes lo·hi + hi·lo from
  // the split operands args[0], args[1], then `matmul_hi` adds hi·hi (and the bias) reading
  // the hi halves, hi_offset bytes into them.
  std::shared_ptr<LtMatmul> matmul_hi;
  int64_t hi_offset[2] = {0, 0};
  int64_t bytes = 0;      // memset size
  int64_t moved = 0;      // bytes the step reads and writes at least once (profiles)
  int64_t launch_n = -1;  // >= 0: passed as a trailing `long long n` (fused groups)
  // Elementwise groups (one, or several batched into one launch): their indices into the
  // fusion's groups, each one's input strides followed by its stored outputs' strides, and how
  // many leading args each one reads.
  std::vector<int32_t> groups;
  std::vector<std::vector<std::vector<int64_t>>> group_strides;
  std::vector<size_t> group_reads, group_args;
  int64_t flops = 0;
  // kCollective: the node's op is coll_op. all_reduce: args are its inputs then its
  // allocation; input k is summed over the ranks into the allocation at byte offset
  // coll_offset[k], coll_count[k] elements of coll_dtype[k], all in one grouped collective.
  // reduce_scatter, all_gather, rank_shard: args are the dense f32 input and the output;
  // coll_count[0] is the elements each rank contributes (all_gather) or receives (the others).
  ir::Op coll_op = ir::Op::kAllReduce;
  std::vector<int64_t> coll_offset, coll_count;
  std::vector<DType> coll_dtype;
  bool side = false;  // runs on the side stream, overlapping the steps after it
  // A collective runs on the communication stream, beside the steps after it; a step lists
  // the collectives (their step indices) whose results it is the first to touch: it waits for
  // them. The updates and the readback wait for every collective.
  std::vector<int32_t> waits;
  bool on_comm = false;  // a collective on the communication stream (else in the main chain)
};

struct UpdateCopy {
  Place dst, src;
  int64_t bytes;
};

struct LoweredProgram {
  std::vector<Step> steps;
  std::vector<ArenaBuffer> bufs;         // placed: offsets into one arena of memory.arena bytes
  std::vector<DeviceMemory> fixed_mems;  // constants
  DeviceMemory inputs;                   // every input, one block
  int64_t input_bytes = 0;
  std::unordered_map<int32_t, int64_t> input_offset;  // input node → byte offset in the block
  std::vector<UpdateCopy> update_copies;              // the updates not written in place
  std::unordered_map<int32_t, Place> outputs;         // output node → dense place valid after the step
  MemoryStats memory;
  struct Node {
    ir::Op op;
    DType dtype;
    Shape shape;
    std::string name;
  };
  std::vector<Node> nodes;  // per graph node (describe, readback sizes)
};

}  // namespace tg::backend::cuda
