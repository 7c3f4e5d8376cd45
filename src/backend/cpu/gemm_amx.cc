// bf16 products on AMX tiles (see gemm_amx.h).
//
// TDPBF16PS C, A, B adds to the 16 × 16 f32 tile C the products of A (16 rows of 16 k pairs:
// 32 bf16 of one row of op(A)) and B (16 pair rows of 16 words, word n of pair row p holding
// op(B)[2p, n] in its low half and op(B)[2p+1, n] in its high half: the "VNNI" layout). With
// Kp = K rounded up to 32 (one chunk = 32 k = one tile row of A):
//   - op(A) is read in strips of 16 rows. A whole strip of an A stored [M,K] (no transpose) whose
//     K is whole chunks is loaded in place (tile rows lda apart), unless lda·2 bytes is a multiple
//     of 2 KiB (then a tile pair's 32 rows would share two L1 sets); every other strip is packed
//     as one 1 KiB tile per chunk (16 rows × 32 k), zero past K and past M (per-thread buffer,
//     once per call).
//   - op(B) is packed per N block into panels of 16 columns, Kp/2 pair rows of 16 words each,
//     zero past K and past N; a block's panels take at most kPackedB bytes (L2-resident).
// Loops (no K blocks: each C element is one accumulator over the whole of K):
//   pack the strips of op(A) that need it
//   for each N block:  pack its panels of op(B)
//     for each pair of strips (32 rows):  for each pair of panels (32 columns):
//       tmm0..3 = 2 × 2 tiles of C;  for each chunk:  A tiles → tmm4, 5, B tiles → tmm6, 7,
//                                                     4 × TDPBF16PS
//       store the tiles into C (through a 16 × 16 buffer where the tile passes M or N); the
//       chunk loop prefetches the next block's C lines for writing, so that their misses
//       overlap the products instead of stalling the tile stores
// The last strip or panel of an odd count runs 1 × 2, 2 × 1 or 1 × 1 tiles.
//
// The driver and the tile kernel are templates over the tile instructions: AmxTiles issues
// them (inline assembly, so no compiler flag is needed), EmuTiles computes them in C++ for
// gemm_bf16_amx_emulated, so the tests check this file's addressing on every CPU.
#include "backend/cpu/gemm_amx.h"
#include "backend/cpu/gemm_small.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>

#include "tensorgrad/dtype.h"
#include "tensorgrad/errors.h"
#include "util/switches.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#define TG_AMX_X86 1
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#include "backend/cpu/intrinsics.h"

namespace tg::backend::cpu {
namespace {

constexpr int64_t kChunk = 32;                  // k per tile row of A (32 bf16, 64 bytes)
constexpr int64_t kPairRows = kChunk / 2;       // pair rows per tile of B
constexpr int64_t kTileWords = kPairRows * 16;  // 32-bit words per tile of B
constexpr int64_t kPackedB = int64_t{1} << 20;  // bytes of packed op(B) per N block
thread_local PackBuffer<uint16_t> t_amx_a;
thread_local PackBuffer<uint32_t> t_amx_b;

// ---- availability ---------------------------------------------------------------------------

const char* probe_amx() {
#if defined(TG_AMX_X86) && defined(__linux__) && defined(SYS_arch_prctl)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return "CPUID has no leaf 7";
  if ((d & (1u << 24)) == 0 || (d & (1u << 22)) == 0) return "the CPU reports no AMX-TILE and AMX-BF16";
  constexpr long kArchGetXcompPerm = 0x1022, kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0)
    return "Linux refused the AMX tile data state (arch_prctl ARCH_REQ_XCOMP_PERM)";
  unsigned long granted = 0;
  if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &granted) != 0 ||
      (granted & (1ul << kXfeatureXtiledata)) == 0)
    return "Linux did not grant the AMX tile data state (arch_prctl ARCH_GET_XCOMP_PERM)";
  return nullptr;
#else
  return "not an x86-64 Linux build";
#endif
}

const char* amx_unavailable() {
  static const char* const why = probe_amx();  // once, thread-safely
  return why;
}

[[maybe_unused]] bool avx512_packing() {
#if defined(TG_AMX_X86)
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
#else
  return false;
#endif
}

// ---- the tile instructions ------------------------------------------------------------------

/// ldtilecfg's operand: palette 1, tiles 0..7 of 16 rows × 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};
static_assert(sizeof(TileConfig) == 64);

#if defined(TG_AMX_X86)
struct AmxTiles {
  static void configure() {
    static const TileConfig config;
    asm volatile("ldtilecfg %0" ::"m"(config));
  }
  static void release() { asm volatile("tilerelease" ::: "memory"); }
  template <int T>
  static void zero() {
    asm volatile("tilezero %%tmm%c0" ::"i"(T));
  }
  template <int T>
  static void load(const void* p, int64_t stride) {
    asm volatile("tileloadd (%0,%1,1), %%tmm%c2" ::"r"(p), "r"(stride), "i"(T) : "memory");
  }
  template <int T>
  static void store(void* p, int64_t stride) {
    asm volatile("tilestored %%tmm%c2, (%0,%1,1)" ::"r"(p), "r"(stride), "i"(T) : "memory");
  }
  /// tmm[C] += tmm[A] · tmm[B] (AT&T order: B, A, C).
  template <int C, int A, int B>
  static void dot() {
    asm volatile("tdpbf16ps %%tmm%c2, %%tmm%c1, %%tmm%c0" ::"i"(C), "i"(A), "i"(B));
  }
};
#endif

/// The same operations on eight 16 × 64-byte arrays of this thread.
struct EmuTiles {
  struct Tile {
    unsigned char row[16][64];
  };
  static inline thread_local Tile tmm[8];
  static void configure() {}
  static void release() {}
  template <int T>
  static void zero() {
    std::memset(&tmm[T], 0, sizeof(Tile));
  }
  template <int T>
  static void load(const void* p, int64_t stride) {
    for (int r = 0; r < 16; ++r) std::memcpy(tmm[T].row[r], static_cast<const char*>(p) + r * stride, 64);
  }
  template <int T>
  static void store(void* p, int64_t stride) {
    for (int r = 0; r < 16; ++r) std::memcpy(static_cast<char*>(p) + r * stride, tmm[T].row[r], 64);
  }
  /// The SDM's TDPBF16PS: per row m, column n, pair k: c += a[2k]·b[2k] then c += a[2k+1]·b[2k+1]
  /// (exact products, f32 sums).
  template <int C, int A, int B>
  static void dot() {
    auto half = [](const unsigned char* p) {
      uint16_t h;
      std::memcpy(&h, p, sizeof h);
      return f32_from_bf16(h);
    };
    for (int m = 0; m < 16; ++m)
      for (int n = 0; n < 16; ++n) {
        float acc;
        std::memcpy(&acc, &tmm[C].row[m][4 * n], sizeof acc);
        for (int k = 0; k < 16; ++k) {
          acc += half(&tmm[A].row[m][4 * k]) * half(&tmm[B].row[k][4 * n]);
          acc += half(&tmm[A].row[m][4 * k + 2]) * half(&tmm[B].row[k][4 * n + 2]);
        }
        std::memcpy(&tmm[C].row[m][4 * n], &acc, sizeof acc);
      }
  }
};

// ---- packing --------------------------------------------------------------------------------

#if defined(TG_AMX_X86)
/// r[j][i] ← r[i][j] for a 16 × 16 matrix of 32-bit words, one row per register.
[[gnu::target("avx512f")]] inline void transpose16(__m512i (&r)[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 16; i += 2) {  // per 128-bit lane L: rows i, i+1 of columns 4L..4L+3
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int g = 0; g < 16; g += 4) {  // u[g + j], lane L: rows g..g+3 of column 4L + j
    u[g] = _mm512_unpacklo_epi64(t[g], t[g + 2]);
    u[g + 1] = _mm512_unpackhi_epi64(t[g], t[g + 2]);
    u[g + 2] = _mm512_unpacklo_epi64(t[g + 1], t[g + 3]);
    u[g + 3] = _mm512_unpackhi_epi64(t[g + 1], t[g + 3]);
  }
  for (int j = 0; j < 4; ++j) {  // column 4L + j, lane g: u[4g + j]'s lane L
    const __m512i v0 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x88),
                  v1 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xDD);
    const __m512i v2 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x88),
                  v3 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xDD);
    r[j] = _mm512_shuffle_i32x4(v0, v2, 0x88);
    r[4 + j] = _mm512_shuffle_i32x4(v1, v3, 0x88);
    r[8 + j] = _mm512_shuffle_i32x4(v0, v2, 0xDD);
    r[12 + j] = _mm512_shuffle_i32x4(v1, v3, 0xDD);
  }
}

/// A 16-row strip of op(A) for A stored [K, M] (a = &A[0, first row]): the whole chunks of K,
/// dst[(k / 32)·512 + r·32 + k % 32] = a[k·lda + r]. Returns the k it stopped at.
[[gnu::target("avx512f")]] int64_t pack_a_trans_avx512(const uint16_t* a, int64_t lda, int64_t K,
                                                       uint16_t* dst) {
  int64_t k0 = 0;
  for (; k0 + kChunk <= K; k0 += kChunk) {
    __m512i w[16];  // w[p][r] = (a[k0 + 2p, r], a[k0 + 2p + 1, r])
    for (int p = 0; p < 16; ++p) {
      const uint16_t* x0 = a + (k0 + 2 * p) * lda;
      const __m512i lo = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x0)));
      const __m512i hi =
          _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x0 + lda)));
      w[p] = _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
    }
    transpose16(w);
    for (int r = 0; r < 16; ++r) _mm512_storeu_si512(dst + k0 * 16 + r * kChunk, w[r]);
  }
  return k0;
}

/// A 16-column panel of op(B) for B stored [N, K] (b = &B[first column, 0]): the whole 16-pair
/// blocks, dst[p·16 + c] = the word at b[c·ldb + 2p]. Returns the pair it stopped at.
[[gnu::target("avx512f")]] int64_t pack_b_trans_avx512(const uint16_t* b, int64_t ldb, int64_t K,
                                                       uint32_t* dst) {
  int64_t p0 = 0;
  for (; 2 * p0 + kChunk <= K; p0 += kPairRows) {
    __m512i w[16];
    for (int c = 0; c < 16; ++c) w[c] = _mm512_loadu_si512(b + c * ldb + 2 * p0);
    transpose16(w);
    for (int p = 0; p < 16; ++p) _mm512_storeu_si512(dst + (p0 + p) * 16, w[p]);
  }
  return p0;
}
#endif

/// Rows [r0, r0 + rows) (rows ≤ 16) of op(A) as a strip of `chunks` tiles of 16 rows × 32 k:
/// dst[kt·512 + r·32 + j] = op(A)[r0 + r, 32·kt + j], zero for k ≥ K or r ≥ rows.
void pack_a_strip(bool ta, const uint16_t* A, int64_t lda, int64_t r0, int64_t rows, int64_t K,
                  int64_t chunks, uint16_t* dst) {
  constexpr int64_t kTile = 16 * kChunk;
  if (!ta) {  // rows of A, 64 bytes at a time
    for (int64_t r = 0; r < 16; ++r) {
      const uint16_t* x = A + (r0 + r) * lda;
      for (int64_t kt = 0; kt < chunks; ++kt) {
        uint16_t* d = dst + kt * kTile + r * kChunk;
        const int64_t n = r < rows ? std::clamp<int64_t>(K - kt * kChunk, 0, kChunk) : 0;
        if (n > 0) std::memcpy(d, x + kt * kChunk, static_cast<size_t>(n) * sizeof(uint16_t));
        std::fill(d + n, d + kChunk, uint16_t{0});
      }
    }
    return;
  }
  // A stored [K, M]: op(A)[i, k] = A[k·lda + i].
  int64_t k0 = 0;
#if defined(TG_AMX_X86)
  if (rows == 16 && avx512_packing()) k0 = pack_a_trans_avx512(A + r0, lda, K, dst);
#endif
  std::fill(dst + k0 * 16, dst + chunks * kTile, uint16_t{0});  // k0 is whole chunks
  for (int64_t k = k0; k < K; ++k) {
    const uint16_t* x = A + k * lda + r0;
    uint16_t* d = dst + k / kChunk * kTile + k % kChunk;
    for (int64_t r = 0; r < rows; ++r) d[r * kChunk] = x[r];
  }
}

/// Columns [c0, c0 + cols) (cols ≤ 16) of op(B) as a panel of kw pair rows of 16 words:
/// dst[p·16 + c] = op(B)[2p, c0 + c] | op(B)[2p + 1, c0 + c] << 16, zero for k ≥ K or c ≥ cols.
void pack_b_panel(bool tb, const uint16_t* B, int64_t ldb, int64_t c0, int64_t cols, int64_t K, int64_t kw,
                  uint32_t* dst) {
  const int64_t full = K / 2, pairs = (K + 1) / 2;
  if (!tb) {  // B stored [K, N]: rows 2p and 2p + 1 interleaved
    const uint16_t* x = B + c0;
    for (int64_t p = 0; p < pairs; ++p) {
      const uint16_t* x0 = x + 2 * p * ldb;
      uint32_t* d = dst + p * 16;
      if (p < full) {
        const uint16_t* x1 = x0 + ldb;
        if (cols == 16) {
          for (int c = 0; c < 16; ++c) d[c] = x0[c] | static_cast<uint32_t>(x1[c]) << 16;
        } else {
          for (int64_t c = 0; c < cols; ++c) d[c] = x0[c] | static_cast<uint32_t>(x1[c]) << 16;
          std::fill(d + cols, d + 16, 0u);
        }
      } else {  // an odd K's last k alone
        for (int64_t c = 0; c < cols; ++c) d[c] = x0[c];
        std::fill(d + cols, d + 16, 0u);
      }
    }
  } else {  // B stored [N, K]: a pair is one 32-bit word of a row of B
    const uint16_t* x = B + c0 * ldb;
    int64_t p0 = 0;
#if defined(TG_AMX_X86)
    if (cols == 16 && avx512_packing()) p0 = pack_b_trans_avx512(x, ldb, K, dst);
#endif
    std::fill(dst + p0 * 16, dst + pairs * 16, 0u);
    for (int64_t c = 0; c < cols; ++c) {
      const uint16_t* xc = x + c * ldb;
      for (int64_t p = p0; p < full; ++p) std::memcpy(dst + p * 16 + c, xc + 2 * p, sizeof(uint32_t));
      if (full < pairs) dst[full * 16 + c] = xc[2 * full];
    }
  }
  std::fill(dst + pairs * 16, dst + kw * 16, 0u);
}

// ---- the kernel -----------------------------------------------------------------------------

/// Where a strip of op(A) is loaded from: chunk kt's tile row r at base + kt·step elements +
/// r·stride bytes.
struct Strip {
  const uint16_t* base;
  int64_t step, stride;
};

/// Tile T into C[0:rows, 0:cols] (each ≥ 1; only the first 16 of each are in the tile).
template <class Tiles, int T>
void store_tile(float* c, int64_t ldc, int64_t rows, int64_t cols) {
  if (rows >= 16 && cols >= 16) return Tiles::template store<T>(c, ldc * static_cast<int64_t>(sizeof(float)));
  alignas(64) float tmp[16 * 16];
  Tiles::template store<T>(tmp, 16 * sizeof(float));
  const int64_t n = std::min<int64_t>(cols, 16);
  for (int64_t r = 0; r < std::min<int64_t>(rows, 16); ++r)
    std::memcpy(c + r * ldc, tmp + r * 16, static_cast<size_t>(n) * sizeof(float));
}

/// C[0:rows, 0:cols] = the RT strips a0 (, a1) times the CT panels at b (, b + panel_words),
/// over `chunks` chunks of k; rows ≤ 16·RT, cols ≤ 16·CT, and past 16·(RT−1), 16·(CT−1).
/// Prefetches next[0:next_rows, 0:next_cols] (≤ 32 × 32, the next block's C) for writing.
template <class Tiles, int RT, int CT>
void tile_block(Strip a0, Strip a1, const uint32_t* b, int64_t panel_words, int64_t chunks, float* c,
                int64_t ldc, int64_t rows, int64_t cols, const float* next, int64_t next_rows,
                int64_t next_cols) {
  // The next block's lines (two per row where it is wider than 16), spread over the chunks.
  const int64_t halves = next_cols > 16 ? 2 : 1, lines = next == nullptr ? 0 : next_rows * halves;
  const int64_t per_chunk = (lines + chunks - 1) / chunks;
  Tiles::template zero<0>();
  if constexpr (CT == 2) Tiles::template zero<1>();
  if constexpr (RT == 2) Tiles::template zero<2>();
  if constexpr (RT == 2 && CT == 2) Tiles::template zero<3>();
  for (int64_t kt = 0; kt < chunks; ++kt) {
    for (int64_t l = kt * per_chunk; l < std::min(lines, (kt + 1) * per_chunk); ++l)
      __builtin_prefetch(next + l / halves * ldc + l % halves * 16, 1, 3);
    Tiles::template load<4>(a0.base + kt * a0.step, a0.stride);
    Tiles::template load<6>(b + kt * kTileWords, 16 * sizeof(uint32_t));
    if constexpr (CT == 2) Tiles::template load<7>(b + panel_words + kt * kTileWords, 16 * sizeof(uint32_t));
    Tiles::template dot<0, 4, 6>();
    if constexpr (CT == 2) Tiles::template dot<1, 4, 7>();
    if constexpr (RT == 2) {
      Tiles::template load<5>(a1.base + kt * a1.step, a1.stride);
      Tiles::template dot<2, 5, 6>();
      if constexpr (CT == 2) Tiles::template dot<3, 5, 7>();
    }
  }
  store_tile<Tiles, 0>(c, ldc, rows, cols);
  if constexpr (CT == 2) store_tile<Tiles, 1>(c + 16, ldc, rows, cols - 16);
  if constexpr (RT == 2) store_tile<Tiles, 2>(c + 16 * ldc, ldc, rows - 16, cols);
  if constexpr (RT == 2 && CT == 2) store_tile<Tiles, 3>(c + 16 * ldc + 16, ldc, rows - 16, cols - 16);
}

template <class Tiles>
void gemm_amx(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda,
              const uint16_t* B, int64_t ldb, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    for (int64_t i = 0; i < M; ++i) std::fill(C + i * ldc, C + i * ldc + N, 0.0f);
    return;
  }
  const int64_t kp = (K + kChunk - 1) / kChunk * kChunk, kw = kp / 2, chunks = kp / kChunk;
  const int64_t panel_words = kw * 16, strips = (M + 15) / 16;
  // Whole strips of an untransposed A whose K is whole chunks are read in place, unless the
  // row stride is a multiple of 2 KiB (see the top).
  const int64_t in_place = !ta && K % kChunk == 0 && (lda * 2) % 2048 != 0 ? M / 16 : 0;
  // N blocks of whole 32-column steps whose packed panels take at most kPackedB bytes.
  const int64_t nc =
      std::min((N + 31) / 32 * 32,
               std::max<int64_t>(32, kPackedB / (kp * static_cast<int64_t>(sizeof(uint16_t))) / 32 * 32));
  uint16_t* ap = strips > in_place ? t_amx_a.get((strips - in_place) * 16 * kp) : nullptr;
  uint32_t* bp = t_amx_b.get(nc / 16 * panel_words);
  for (int64_t s = in_place; s < strips; ++s)
    pack_a_strip(ta, A, lda, s * 16, std::min<int64_t>(16, M - s * 16), K, chunks,
                 ap + (s - in_place) * 16 * kp);
  auto strip = [&](int64_t s) -> Strip {
    if (s < in_place) return {A + s * 16 * lda, kChunk, lda * static_cast<int64_t>(sizeof(uint16_t))};
    return {ap + (s - in_place) * 16 * kp, 16 * kChunk, kChunk * static_cast<int64_t>(sizeof(uint16_t))};
  };
  Tiles::configure();
  for (int64_t jc = 0; jc < N; jc += nc) {
    const int64_t ncur = std::min(nc, N - jc), panels = (ncur + 15) / 16;
    for (int64_t q = 0; q < panels; ++q)
      pack_b_panel(tb, B, ldb, jc + q * 16, std::min<int64_t>(16, ncur - q * 16), K, kw,
                   bp + q * panel_words);
    for (int64_t s = 0; s < strips; s += 2) {
      const bool two_rows = s + 1 < strips;
      const Strip a0 = strip(s), a1 = two_rows ? strip(s + 1) : a0;
      const int64_t rows = std::min<int64_t>(32, M - s * 16);
      for (int64_t q = 0; q < panels; q += 2) {
        const bool two_cols = q + 1 < panels;
        const uint32_t* b = bp + q * panel_words;
        float* c = C + s * 16 * ldc + jc + q * 16;
        const int64_t cols = std::min<int64_t>(32, ncur - q * 16);
        // The block after this one in this N block: the next panel pair, or the next strips' first.
        const float* next = nullptr;
        int64_t next_rows = 0, next_cols = 0;
        if (q + 2 < panels) {
          next = c + 32, next_rows = rows, next_cols = std::min<int64_t>(32, ncur - (q + 2) * 16);
        } else if (s + 2 < strips) {
          next = C + (s + 2) * 16 * ldc + jc, next_rows = std::min<int64_t>(32, M - (s + 2) * 16);
          next_cols = std::min<int64_t>(32, ncur);
        }
        if (two_rows && two_cols)
          tile_block<Tiles, 2, 2>(a0, a1, b, panel_words, chunks, c, ldc, rows, cols, next, next_rows,
                                  next_cols);
        else if (two_rows)
          tile_block<Tiles, 2, 1>(a0, a1, b, panel_words, chunks, c, ldc, rows, cols, next, next_rows,
                                  next_cols);
        else if (two_cols)
          tile_block<Tiles, 1, 2>(a0, a1, b, panel_words, chunks, c, ldc, rows, cols, next, next_rows,
                                  next_cols);
        else
          tile_block<Tiles, 1, 1>(a0, a1, b, panel_words, chunks, c, ldc, rows, cols, next, next_rows,
                                  next_cols);
      }
    }
  }
  Tiles::release();
}

std::atomic<bool> g_amx_on{true};

}  // namespace

bool bf16_amx_supported() { return amx_unavailable() == nullptr; }
const char* bf16_amx_unavailable_reason() { return amx_unavailable(); }
bool bf16_amx_enabled() {
  static const bool env_off = env::equals(env::Switch::kCpuAmx, "off");  // read once: asked every product
  return g_amx_on.load(std::memory_order_relaxed) && !env_off && bf16_amx_supported();
}
void set_bf16_amx(bool on) { g_amx_on.store(on, std::memory_order_relaxed); }

void gemm_bf16_amx(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const uint16_t* A,
                   int64_t lda, const uint16_t* B, int64_t ldb, float* C, int64_t ldc) {
#if defined(TG_AMX_X86)
  if (!bf16_amx_supported())
    throw Error(std::string("[cpu] gemm_bf16_amx: no AMX here: ") + amx_unavailable());
  gemm_amx<AmxTiles>(trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc);
#else
  (void)trans_a, (void)trans_b, (void)M, (void)N, (void)K, (void)A, (void)lda, (void)B, (void)ldb, (void)C,
      (void)ldc;
  throw Error(std::string("[cpu] gemm_bf16_amx: no AMX here: ") + amx_unavailable());
#endif
}

void gemm_bf16_amx_emulated(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const uint16_t* A,
                            int64_t lda, const uint16_t* B, int64_t ldb, float* C, int64_t ldc) {
  gemm_amx<EmuTiles>(trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc);
}

}  // namespace tg::backend::cpu
