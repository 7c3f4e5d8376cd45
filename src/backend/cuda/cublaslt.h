// Matrix products through cuBLASLt, loaded at run time like the driver (driver.h): a build
// with CUDA support needs no CUDA toolkit, and a machine without cuBLASLt gets a DeviceError
// naming the libraries tried. Only the entry points and ABI values used here are declared.
//
// Layout: tensorgrad is row-major, cuBLASLt column-major. A row-major [m, n] result C is the
// column-major n×m matrix Cᵀ = Bᵀ·Aᵀ, so the product is planned with the operands swapped;
// each operand only needs unit stride along one of its two axes (a transposed view is read
// with op T, no copy). Batches are strided (one stride per operand, 0 = broadcast).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "backend/cuda/driver.h"
#include "tensorgrad/dtype.h"

namespace tg::backend::cuda {

/// One operand [batch, rows, cols] of a product as it lies in memory (element strides).
struct MatOperand {
  int64_t rows = 0, cols = 0;
  int64_t row_stride = 0, col_stride = 0, batch_stride = 0;
};

/// Whether cuBLASLt can read `op` directly: unit stride along one axis, and the other
/// stride at least that axis' extent (a leading dimension).
bool lt_readable(const MatOperand& op);

/// kBf16x9: cuBLAS's FP32 emulation on BF16 tensor cores (CUDA 12.9+; for bench/cuda_product_probe,
/// which measures whether this GPU runs it faster than fp32).
enum class MathMode { kFp32, kTf32, kBf16x9 };

/// out [batch, m, n] = a [batch, m, k] · b [batch, k, n] (out rows `out_row_stride` apart, 0:
/// n, dense; a padded stride keeps a product with an odd n aligned), planned once (layouts and
/// the heuristic's algorithm), then run any number of times, also under stream capture.
/// `operands` is a's and b's element type: f32, or bf16 (CUDA_R_16BF, products accumulated in
/// f32 with CUBLAS_COMPUTE_32F whatever `mode`); out, the bias and c are f32 either way.
class LtMatmul {
 public:
  LtMatmul(int64_t batch, int64_t m, int64_t n, int64_t k, const MatOperand& a, const MatOperand& b,
           MathMode mode, size_t workspace_bytes, bool with_bias = false, int64_t out_row_stride = 0,
           DType operands = DType::kF32);
  ~LtMatmul();
  LtMatmul(const LtMatmul&) = delete;
  LtMatmul& operator=(const LtMatmul&) = delete;
  /// bias (0 = none): a length-n vector added to every row of the result (the epilogue of
  /// LtMatmul(…, with_bias = true)). beta ≠ 0 adds beta times c's contents (c = 0: out's own),
  /// laid out as out: out = a·b + beta·c [+ bias].
  void run(CUdeviceptr a, CUdeviceptr b, CUdeviceptr out, CUdeviceptr workspace, CUstream stream,
           CUdeviceptr bias = 0, float beta = 0, CUdeviceptr c = 0) const;
  /// Times the heuristic's candidate algorithms on these buffers (their contents do not
  /// matter) and keeps the fastest. Products of the same layout are tuned once per process.
  void tune(CUdeviceptr a, CUdeviceptr b, CUdeviceptr out, CUdeviceptr workspace, CUstream stream,
            CUdeviceptr bias = 0, float beta = 0, CUdeviceptr c = 0);
  /// The workspace the chosen algorithm needs (≤ the workspace_bytes it was planned with).
  size_t workspace() const { return workspace_; }
  /// The heuristic's candidates (best first) and the one run() uses: for benchmarks that time them.
  size_t candidates() const { return candidates_.size(); }
  void choose(size_t index) {
    chosen_ = index;
    workspace_ = candidates_.at(index).workspace;
  }

 private:
  void* desc_ = nullptr;
  void* layout_[3] = {nullptr, nullptr, nullptr};  // cuBLASLt's A (= our b), B (= our a), C/D
  struct Candidate {
    uint64_t algo[8];
    size_t workspace;
  };
  std::vector<Candidate> candidates_;  // best first, as the heuristic ranks them
  size_t chosen_ = 0;
  std::string key_;  // the layout, for the per-process tuning cache
  size_t workspace_ = 0;
  int64_t flops_ = 0;
  bool bias_ = false;
};

/// Why cuBLASLt cannot be used ("" when it can).
std::string cublaslt_unavailable_reason();

}  // namespace tg::backend::cuda
