// quant_matmul of the CPU backend (ops.def): x [rows, K] · (q · scale)ᵀ with q i8 [N, K] and one
// f32 scale per group of G values of a row, or x · (c · scale + offset)ᵀ with 4-bit codes c packed
// two a byte in q [N, K / 2]. Decoding reads each weight once a token, so the kernel reads the
// stored bytes (1 or ½ a weight, 4 or 8 a group) rather than a dequantized copy, widening and
// scaling each weight in registers (AVX-512 where the build targets it, else plain loops).
// The columns are split across the threads; x (a few rows) stays in cache.
#include <omp.h>

#include <algorithm>
#include <vector>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/gemm_bf16.h"
#include "backend/cpu/intrinsics.h"

namespace tg::backend::cpu {

Kernel make_quant_matmul(const Shape& x_shape, DType x_dtype, const std::byte* x, const int8_t* q,
                         const float* scale, const float* offset, int64_t cols, int64_t groups, float* out) {
  const int64_t k = x_shape.back(), rows = numel(x_shape) / k, group = k / groups;
  const bool four = offset != nullptr;
  const int64_t row_bytes = four ? k / 2 : k;
  return [=] {
    static thread_local std::vector<float> widened;  // a half x, widened once (rows · K values), reused
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
    // accumulators; other groups go one value at a time.
    const int64_t vec_end = group % 16 == 0 ? k : 0;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t c = 0; c < cols; ++c) {
      const int8_t* qc = q + c * row_bytes;
      const float* sc = scale + c * groups;
      const float* oc = four ? offset + c * groups : nullptr;
      // Weight j of the column, dequantized.
      const auto weight = [&](int64_t j) {
        if (!four) return static_cast<float>(qc[j]) * sc[j / group];
        const int code = (static_cast<uint8_t>(qc[j / 2]) >> (4 * (j % 2))) & 15;
        return static_cast<float>(code) * sc[j / group] + oc[j / group];
      };
      for (int64_t r0 = 0; r0 < rows; r0 += 4) {
        const int64_t rb = std::min<int64_t>(4, rows - r0);
        float sums[4] = {};
#if defined(__AVX512F__)
        // Each row's accumulators stay in registers: a one-row pass (decoding) of its own, with
        // two accumulators so that consecutive FMAs do not wait for each other; group by group,
        // so that no chunk divides to find its scale.
        // Values k0 .. k0 + 15 (one group's) scaled by sg (and offset by og: 4 bits, whose eight
        // bytes' nibbles are spread to sixteen bytes in order, low nibble first).
        const auto weights = [&](int64_t k0, __m512 sg, __m512 og) {
          if (four) {
            const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(qc + k0 / 2));
            const __m128i mask = _mm_set1_epi8(15);
            const __m128i codes =
                _mm_unpacklo_epi8(_mm_and_si128(b, mask), _mm_and_si128(_mm_srli_epi16(b, 4), mask));
            return _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(codes)), sg, og);
          }
          const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qc + k0));
          return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(packed)), sg);
        };
        const auto offset_of = [&](int64_t g) { return _mm512_set1_ps(four ? oc[g] : 0.0f); };
        if (rb == 1) {
          const float* xr = xs + r0 * k;
          __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
          for (int64_t g0 = 0; g0 < vec_end; g0 += group) {
            const __m512 sg = _mm512_set1_ps(sc[g0 / group]), og = offset_of(g0 / group);
            int64_t k0 = g0;
            for (; k0 + 32 <= g0 + group; k0 += 32) {
              a0 = _mm512_fmadd_ps(_mm512_loadu_ps(xr + k0), weights(k0, sg, og), a0);
              a1 = _mm512_fmadd_ps(_mm512_loadu_ps(xr + k0 + 16), weights(k0 + 16, sg, og), a1);
            }
            if (k0 < g0 + group) a0 = _mm512_fmadd_ps(_mm512_loadu_ps(xr + k0), weights(k0, sg, og), a0);
          }
          sums[0] = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
        } else {
          __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(),
                 a3 = _mm512_setzero_ps();
          const float* x0 = xs + r0 * k;
          const float *x1 = x0 + k, *x2 = x0 + (rb > 2 ? 2 : 0) * k, *x3 = x0 + (rb > 3 ? 3 : 0) * k;
          for (int64_t g0 = 0; g0 < vec_end; g0 += group) {
            const __m512 sg = _mm512_set1_ps(sc[g0 / group]), og = offset_of(g0 / group);
            for (int64_t k0 = g0; k0 < g0 + group; k0 += 16) {
              const __m512 w = weights(k0, sg, og);
              a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x0 + k0), w, a0);
              a1 = _mm512_fmadd_ps(_mm512_loadu_ps(x1 + k0), w, a1);
              a2 = _mm512_fmadd_ps(_mm512_loadu_ps(x2 + k0), w, a2);  // a row past rb repeats row 0:
              a3 = _mm512_fmadd_ps(_mm512_loadu_ps(x3 + k0), w, a3);  // computed, never stored
            }
          }
          sums[0] = _mm512_reduce_add_ps(a0), sums[1] = _mm512_reduce_add_ps(a1);
          sums[2] = _mm512_reduce_add_ps(a2), sums[3] = _mm512_reduce_add_ps(a3);
        }
#else  // plain loops the compiler vectorises
        float acc[4][16] = {};
        for (int64_t k0 = 0; k0 < vec_end; k0 += 16) {
          float w[16];
          for (int i = 0; i < 16; ++i) w[i] = weight(k0 + i);
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
          for (int64_t j = vec_end; j < k; ++j) total += xr[j] * weight(j);
          out[(r0 + r) * cols + c] = total;
        }
      }
    }
  };
}

}  // namespace tg::backend::cpu
