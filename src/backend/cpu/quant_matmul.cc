// quant_matmul of the CPU backend (ops.def): x [rows, K] · (q · scale)ᵀ with q i8 [N, K] and one
// f32 scale per group of G values of a row. Decoding reads each weight once a token, so the
// kernel reads the stored bytes (1 a weight, 4 a group) rather than a dequantized copy: per
// output, each group's Σ x·q in f32 (vectorised: the i8 values widened in registers), times the
// group's scale. The columns are split across the threads; x (a few rows) stays in cache.
#include <omp.h>

#include <algorithm>
#include <vector>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/gemm_bf16.h"

namespace tg::backend::cpu {

Kernel make_quant_matmul(const Shape& x_shape, DType x_dtype, const std::byte* x, const int8_t* q, const float* scale,
                         int64_t cols, int64_t groups, float* out) {
  const int64_t k = x_shape.back(), rows = numel(x_shape) / k, group = k / groups;
  return [=] {
    std::vector<float> widened;  // a half x, widened once (rows · K values)
    const float* xs = reinterpret_cast<const float*>(x);
    if (x_dtype != DType::kF32) {
      widened.resize(static_cast<size_t>(rows * k));
      const auto* h = reinterpret_cast<const uint16_t*>(x);
      if (x_dtype == DType::kBF16)
        widen_bf16(h, rows, k, k, widened.data());
      else
        widen_f16(h, rows, k, k, widened.data());
      xs = widened.data();
    }
    const int threads = cols * k >= (int64_t{1} << 16) ? omp_get_max_threads() : 1;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t c = 0; c < cols; ++c) {
      const int8_t* qc = q + c * k;
      const float* sc = scale + c * groups;
      for (int64_t r = 0; r < rows; ++r) {
        const float* xr = xs + r * k;
        float acc = 0;
        for (int64_t j = 0; j < groups; ++j) {
          const int8_t* qg = qc + j * group;
          const float* xg = xr + j * group;
          float part = 0;
#pragma omp simd reduction(+ : part)
          for (int64_t i = 0; i < group; ++i) part += xg[i] * static_cast<float>(qg[i]);
          acc += part * sc[j];
        }
        out[r * cols + c] = acc;
      }
    }
  };
}

}  // namespace tg::backend::cpu
