// quant_matmul of the CPU backend (ops.def): x [rows, K] · (q · scale)ᵀ with q i8 [N, K] and one
// f32 scale per group of G values of a row. Decoding reads each weight once a token, so the
// kernel reads the stored bytes (1 a weight, 4 a group) rather than a dequantized copy, widening
// and scaling each weight in registers (AVX-512 where the build targets it, else plain loops). The columns are split across the threads; x (a few rows)
// stays in cache.
#include <omp.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <vector>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/gemm_bf16.h"

// GCC 12's _mm512_undefined_ps() self-initialises, which -Wmaybe-uninitialized reports where the
// conversions inline (GCC bug 105593, fixed in 13), as in gemm_small.cc.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

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
    // Chunks of 16 values share one scale when the group is a multiple of 16: each chunk's
    // weights are widened and scaled once, then multiply up to 4 rows of x into 16-wide
    // accumulators (plain loops the compiler turns into vector FMAs); the rest goes one value
    // at a time.
    const int64_t vec_end = group % 16 == 0 ? k : 0;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t c = 0; c < cols; ++c) {
      const int8_t* qc = q + c * k;
      const float* sc = scale + c * groups;
      for (int64_t r0 = 0; r0 < rows; r0 += 4) {
        const int64_t rb = std::min<int64_t>(4, rows - r0);
        float sums[4] = {};
#if defined(__AVX512F__)
        __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
        for (int64_t k0 = 0; k0 < vec_end; k0 += 16) {
          const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qc + k0));
          const __m512 w = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(packed)),
                                         _mm512_set1_ps(sc[k0 / group]));
#pragma GCC unroll 4
          for (int r = 0; r < 4; ++r)
            if (r < rb) acc[r] = _mm512_fmadd_ps(_mm512_loadu_ps(xs + (r0 + r) * k + k0), w, acc[r]);
        }
        for (int r = 0; r < 4; ++r) sums[r] = _mm512_reduce_add_ps(acc[r]);
#else
        float acc[4][16] = {};
        for (int64_t k0 = 0; k0 < vec_end; k0 += 16) {
          const float sk = sc[k0 / group];
          float w[16];
          for (int i = 0; i < 16; ++i) w[i] = static_cast<float>(qc[k0 + i]) * sk;
          for (int64_t r = 0; r < rb; ++r) {
            const float* xr = xs + (r0 + r) * k + k0;
            for (int i = 0; i < 16; ++i) acc[r][i] += xr[i] * w[i];
          }
        }
        for (int r = 0; r < 4; ++r)
          for (int i = 0; i < 16; ++i) sums[r] += acc[r][i];
#endif
        for (int64_t r = 0; r < rb; ++r) {
          float total = sums[r];
          const float* xr = xs + (r0 + r) * k;
          for (int64_t j = vec_end; j < k; ++j) total += xr[j] * (static_cast<float>(qc[j]) * sc[j / group]);
          out[(r0 + r) * cols + c] = total;
        }
      }
    }
  };
}

}  // namespace tg::backend::cpu
