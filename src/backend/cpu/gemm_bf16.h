// Products of bf16 operands with f32 accumulation (matmul, attention and conv2d under
// Precision::kBf16). Three paths compute the same mathematical value, Σ_k a_ik·b_kj over exact
// bf16 products rounded into an f32 accumulator:
//   - gemm_bf16_amx (gemm_amx.h): Intel AMX tiles (TDPBF16PS), where the CPU has AMX-BF16 and
//     Linux grants the tile state (bf16_amx_supported);
//   - gemm_bf16_dot: the AVX512-BF16 instruction vdpbf16ps, compiled for that target in its own
//     functions whatever the build flags, and run only where the CPU reports it
//     (bf16_dot_supported);
//   - widen_bf16 + an f32 GEMM: every other CPU (bf16 → f32 is exact, so the f32 kernel then
//     multiplies the same values).
// gemm_bf16_kernel picks between the first two (AMX > vdpbf16ps); callers widen where
// bf16_kernel_enabled() is false. f16 operands (Precision::kF16) always take the third path,
// through widen_f16: there is no f16 product kernel here.
// Threading as in gemm_small.h: nothing inside, per-thread packing buffers, so calls from
// several threads may write disjoint parts of C.
#pragma once
#include <cstdint>

namespace tg::backend::cpu {

/// Whether this CPU runs vdpbf16ps (AVX512-BF16 with AVX512F/BW/VL), asked once.
bool bf16_dot_supported();
/// Whether bf16 matmuls run on gemm_bf16_dot: where supported, unless set_bf16_dot(false)
/// turned it off (so tests and benchmarks can run the widening path on any CPU).
bool bf16_dot_enabled();
void set_bf16_dot(bool on);
/// Whether bf16 products run on one of the bf16 kernels rather than widened to f32:
/// bf16_amx_enabled() || bf16_dot_enabled() (turn both off for the widening path).
bool bf16_kernel_enabled();

/// C[M,N] = op(A)[M,K] · op(B)[K,N] (β = 0: C is never read) for bf16 A and B held as raw
/// uint16 words, f32 C; layouts as sgemm_small (A stored [M,K], or [K,M] when trans_a; B
/// stored [K,N], or [N,K] when trans_b; ld* are row strides in elements). Only where
/// bf16_dot_supported(); M, N, K ≥ 0.
///
/// vdpbf16ps adds a lane's two products to its f32 accumulator one after the other, each
/// addition rounded to nearest even (Intel SDM, VDPBF16PS; MXCSR is ignored), with bf16 and f32
/// denormals read and written as zero. A product of two bf16 values is exact in f32 (8 + 8
/// significand bits), so this is an f32 multiply–accumulate chain over k in the order
/// 2p+1, 2p per pair p; the only departure from IEEE f32 is the flushing of values below
/// 2^-126, which O(1) operands never approach.
void gemm_bf16_dot(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const uint16_t* A,
                   int64_t lda, const uint16_t* B, int64_t ldb, float* C, int64_t ldc);

/// C[M,N] = A[M,K] · Wᵀ for a few rows (M ≤ 8) against W stored [N,K] (a weight, trans_b), with
/// no packing: each output is one dot product streamed with vdpbf16ps over the contiguous rows
/// of A and W (a decode step's product, where packing W would read it three times). Only where
/// bf16_dot_supported(); the sums are f32 as gemm_bf16_dot's, in another order.
void gemv_bf16_dot(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, const uint16_t* W,
                   int64_t ldw, float* C, int64_t ldc);
/// C = op(A)·op(B) as gemm_bf16_dot (same contract), on the fastest enabled kernel:
/// gemm_bf16_amx where bf16_amx_enabled(), except products too narrow to fill a tile (M or
/// N below 16) while vdpbf16ps is enabled; else gemm_bf16_dot. Only where bf16_kernel_enabled().
void gemm_bf16_kernel(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const uint16_t* A,
                      int64_t lda, const uint16_t* B, int64_t ldb, float* C, int64_t ldc);

/// dst[r·cols + c] = f32(src[r·ld + c]) for a rows × cols matrix (exact).
void widen_bf16(const uint16_t* src, int64_t rows, int64_t cols, int64_t ld, float* dst);
/// The same for f16 (IEEE binary16) words: tg::f32_from_f16 bit for bit, NaN payloads included,
/// in a branch-free loop the compiler vectorises. f16 products (Precision::kF16) always take this
/// path: there is no f16 product kernel here.
void widen_f16(const uint16_t* src, int64_t rows, int64_t cols, int64_t ld, float* dst);

}  // namespace tg::backend::cpu
