// Single-threaded float32 GEMM for the small matrices of small models (M, N, K in the tens to
// a few thousands), where OpenBLAS's per-call overhead and its parallel dispatch dominate.
// Register-blocked microkernel (AVX-512: 8 rows x 32 columns, AVX2+FMA: 6 x 16, portable
// fallback: 4 x 16 plain loops), op(B) packed into NR-column panels, op(A) read in place.
//
// Threading: no OpenMP or other threads inside. Each thread has its own packing buffer
// (thread_local, grown once, never shrunk), so calls from different threads are safe as long
// as they write disjoint parts of C — e.g. a caller splitting M across threads passes each
// thread its own row range (A + r0*lda, or A + r0 when trans_a; C + r0*ldc).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <new>

namespace tg::backend::cpu {

/// C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C, row-major like cblas_sgemm with
/// CblasRowMajor: op(X) = X or Xᵀ per trans flag; lda/ldb/ldc are the row strides of the
/// stored matrices (A stored [M,K], or [K,M] when trans_a; B stored [K,N], or [N,K] when
/// trans_b). beta == 0 never reads C (it may hold NaN); K == 0 or alpha == 0 reduce to
/// C = beta * C (C = 0 when beta == 0), as in BLAS.
void sgemm_small(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                 int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

/// Whether one single-threaded sgemm_small call is expected to beat one cblas_sgemm call by
/// OpenBLAS using its threads: true when M·N·K < 2^24, or when op(B) has at most 4096 elements
/// and M <= 4096. Where OpenBLAS would run on one thread anyway (e.g. called inside the caller's
/// own parallel region), sgemm_small is the faster one, up to 512^3. The reasons behind the
/// thresholds: gemm_small.cc. That rule is for an AVX-512 build; an AVX2-only build answers
/// true only for min(M, N, K) == 1, and the portable fallback (no AVX2/FMA at compile time)
/// always false.
bool prefer_sgemm_small(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K);

/// Whether the AVX-512 kernel is built: then sgemm_small, split by rows across the threads,
/// beats multi-threaded OpenBLAS (see gemm_small.cc), on large shapes too.
constexpr bool sgemm_small_everywhere() {
#if defined(__AVX512F__)
  return true;
#else
  return false;
#endif
}

/// Per-thread packing memory of the GEMM kernels (gemm_small.cc, gemm_bf16.cc): at least n
/// elements, 64-byte aligned; grows, never shrinks, so steady state allocates nothing.
template <class T>
class PackBuffer {
 public:
  PackBuffer() = default;
  PackBuffer(const PackBuffer&) = delete;
  PackBuffer& operator=(const PackBuffer&) = delete;
  ~PackBuffer() { std::free(p_); }
  T* get(int64_t n) {
    if (n > cap_) {
      const int64_t want = std::max(n, cap_ * 2);
      void* q = std::aligned_alloc(64, (static_cast<size_t>(want) * sizeof(T) + 63) & ~size_t{63});
      if (!q) throw std::bad_alloc();
      std::free(p_);
      p_ = static_cast<T*>(q);
      cap_ = want;
    }
    return p_;
  }

 private:
  T* p_ = nullptr;
  int64_t cap_ = 0;
};

}  // namespace tg::backend::cpu
