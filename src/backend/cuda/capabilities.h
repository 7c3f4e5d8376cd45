// What the CUDA backend tells the schedule (passes/schedule.h): the strides its kernels read,
// the layouts its kernels write, and the steps beyond elementwise groups it runs as one
// (product epilogues, norms with their affine and their gradient's neighbours, KV-cache rows
// written in place). Every answer is a pure function of the schedule's view of a step, so the
// emitter (emit.h) finds the same kernels the schedule sized.
#pragma once
#include <vector>

#include "backend/cuda/program.h"
#include "backend/cuda/small_matmul.h"
#include "passes/schedule.h"

namespace tg::backend::cuda {

/// Rows this long whose length is not a multiple of 64 are laid out 64-aligned apart (a
/// vocabulary of 50257 in rows of 50304): the products reading and writing them then run on
/// cuBLASLt's aligned kernels, much faster than its unaligned ones on GPT-2's head.
inline int64_t padded_row(int64_t cols) {
  return cols >= 1024 && cols % 64 != 0 ? (cols + 63) / 64 * 64 : cols;
}
/// Strides of `shape` with its rows `ld` elements apart and everything else dense.
std::vector<int64_t> row_padded_strides(const Shape& shape, int64_t ld);
inline int64_t aligned(int64_t bytes) { return (std::max<int64_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign; }

/// A product step's kernels (products.cc): [batch..., m, k] @ [batch..., k, nn].
struct ProductPlan {
  Shape batch_shape;  // the output's batch axes
  int64_t batch = 1, m = 0, nn = 0, k = 0;
  int64_t bm = 1,
          mm = 0;      // batch and rows of the product run (a shared weight folds the batch into the rows)
  int64_t ld = 0;      // the output's row stride (padded_row for f32 unbatched)
  MatOperand mats[2];  // the operands as the product reads them (after any copy or padding)
  MatOperand unpadded[2];             // the same before TF32 padding (what a padded copy reads)
  bool expand[2] = {false, false};    // read through a dense copy broadcast over the batch (scratch)
  bool pad_copy[2] = {false, false};  // TF32-padded through a zero-padded copy (scratch)
  bool quant = false;                 // quant_matmul: gemv_kernel on its int8 q, else quant_matmul_kernel
  bool outer = false;                 // k = 1: one elementwise kernel
  bool gemv = false;                  // skinny: gemv_kernel (which may normalise the rows and apply a GELU)
  bool small = false;                 // small_matmul_kernel
  bool split = false;  // three TF32 products (split_product_wanted; two split operands in scratch)
  int64_t pm = 0, pn = 0, pk = 0;  // the cuBLASLt product's extents (padded for TF32)
  DType operands = DType::kF32;    // both operands' element type: f32, or bf16 (the result is f32 either way)
  GemvTypes types;                 // gemv: how a and b are stored (a stays f32 when it absorbed the cast)
  passes::ProductChoice choice;
};
/// `norm`: the norm node of candidates.norm_step, or null.
ProductPlan plan_product(const ir::Graph& g, int32_t id, const std::vector<passes::Place>& in,
                         const std::vector<passes::Buffer>& buffers, const passes::ProductCandidates& c,
                         const DeviceInfo& info, const PrepareOptions& options);

/// The attention shape of an attention or attention_grad node.
AttentionShape attention_shape(const ir::Graph& g, int32_t id, const DeviceInfo& info,
                               const PrepareOptions& options);

class CudaCapabilities final : public passes::Capabilities {
 public:
  CudaCapabilities(const DeviceInfo& info, const PrepareOptions& options) : info_(info), options_(options) {}
  bool reads(const ir::Graph& g, const ir::Node& consumer, size_t index,
             const std::vector<int64_t>& strides) const override;
  bool batch_sinks() const override { return false; }
  size_t batch_operands() const override { return 500; }  // pointers under the classic 4 KB parameter limit
  int64_t alignment() const override { return kAlign; }
  passes::NodeLayout layout(const ir::Graph& g, int32_t id, const std::vector<passes::Place>& in,
                            const std::vector<passes::Buffer>& buffers) const override;
  std::vector<int64_t> group_output_strides(const ir::Graph& g, int32_t id) const override;
  bool fuses_products() const override { return true; }
  passes::ProductChoice product(const ir::Graph& g, int32_t id, const std::vector<passes::Place>& in,
                                const std::vector<passes::Buffer>& buffers,
                                const passes::ProductCandidates& c) const override {
    return plan_product(g, id, in, buffers, c, info_, options_).choice;
  }
  bool norm_affine(const ir::Graph& g, int32_t id) const override;
  bool norm_deferrable(const ir::Graph& g, int32_t id) const override;
  bool cast_deferrable(const ir::Graph& g, int32_t cast, int32_t product) const override;
  bool norm_backward(const ir::Graph& g, int32_t id) const override;
  std::vector<int64_t> norm_backward_scratch(const ir::Graph& g, const passes::Step& st) const override;
  bool update_rows_in_place() const override { return true; }
  bool sibling_rows_any_strides() const override { return true; }

 private:
  passes::NodeLayout attention_layout(const ir::Graph& g, int32_t id,
                                      const std::vector<passes::Place>& in) const;
  DeviceInfo info_;
  PrepareOptions options_;
};

/// Blocks of the fused norm backward (one warp a row, 8 rows a block, two blocks an SM at most).
int64_t norm_backward_blocks(int64_t rows, const DeviceInfo& info);

}  // namespace tg::backend::cuda
