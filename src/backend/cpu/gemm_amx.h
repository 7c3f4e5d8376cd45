// Products of bf16 operands on Intel AMX (the tile registers and TDPBF16PS), f32 accumulation;
// the same contract as gemm_bf16_dot (gemm_bf16.h), which it is preferred to where the CPU and
// the kernel allow it (gemm_bf16_kernel there).
//
// The tile instructions are written as inline assembly (ldtilecfg, tileloadd, tilestored,
// tilezero, tdpbf16ps, tilerelease): no compiler flag or target attribute is needed to build
// them (GCC's _tile_* macros stringify their tile numbers, so they cannot take a template's),
// only an assembler that knows AMX (binutils 2.36 or later), and they run only where
// bf16_amx_supported(). The packing code's AVX-512 paths carry their own target attributes and
// run only where the CPU has AVX-512F; elsewhere plain loops do the same.
//
// Threading as gemm_bf16_dot: nothing inside, per-thread packing buffers, and each call loads
// the tile configuration on its own thread (ldtilecfg) and releases the tiles when it returns,
// so calls from several threads may write disjoint parts of C.
#pragma once
#include <cstdint>

namespace tg::backend::cpu {

/// Whether AMX-BF16 runs here: CPUID reports AMX-TILE and AMX-BF16 (leaf 7, EDX bits 24 and 22)
/// and Linux granted this process the tile data state (arch_prctl ARCH_REQ_XCOMP_PERM,
/// XFEATURE_XTILEDATA). Asked once, thread-safely; the permission is per process.
bool bf16_amx_supported();
/// Why bf16_amx_supported() is false (for test and benchmark messages), or nullptr.
const char* bf16_amx_unavailable_reason();
/// Whether bf16 products may run on gemm_bf16_amx: where supported, unless set_bf16_amx(false)
/// turned it off (tests and benchmarks compare it with the vdpbf16ps and widening paths).
bool bf16_amx_enabled();
void set_bf16_amx(bool on);

/// C[M,N] = op(A)[M,K] · op(B)[K,N], β = 0 (C is never read), bf16 A and B as raw uint16
/// words, f32 C; layouts as gemm_bf16_dot (A stored [M,K], or [K,M] when trans_a; B stored
/// [K,N], or [N,K] when trans_b; ld* are row strides in elements). Only where
/// bf16_amx_supported(); M, N, K ≥ 0.
///
/// Each C element is one f32 accumulator that TDPBF16PS adds the exact bf16 products to, two
/// per k pair, over the whole of K in order (no K blocks, no partial sums); bf16 and f32
/// denormals are read and written as zero and each addition rounds to nearest even (Intel
/// SDM, TDPBF16PS). So |C − Σ a·b| ≤ K·2^-24·Σ|a·b| for O(1) operands, as for gemm_bf16_dot.
void gemm_bf16_amx(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const uint16_t* A,
                   int64_t lda, const uint16_t* B, int64_t ldb, float* C, int64_t ldc);

/// For tests: gemm_bf16_amx's packing, blocking and tile addressing with each tile instruction
/// emulated in C++ (16 rows of 64 bytes per tile, TDPBF16PS as the SDM's pseudocode), so that
/// everything but the instructions themselves is checked on any CPU.
void gemm_bf16_amx_emulated(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const uint16_t* A,
                            int64_t lda, const uint16_t* B, int64_t ldb, float* C, int64_t ldc);

}  // namespace tg::backend::cpu
