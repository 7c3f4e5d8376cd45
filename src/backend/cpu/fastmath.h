// Branch-free float exp / expm1-based tanh for the CPU backend's f32 elementwise kernels.
// Everything is inline, straight-line arithmetic and bit manipulation (no libm calls, no
// data-dependent branches), so loops over these functions vectorise at -O3.
//
// exp(x) = 2^k · exp(r), k = round(x / ln2), r = x − k·ln2 with ln2 split into a 16-bit
// `hi` part (k·hi is exact for |k| ≤ 256) and a `lo` correction (Cody–Waite), so
// |r| ≤ ln2/2. expm1(r) is the Taylor series r + r²/2! + … + r⁷/7!; its truncation error
// r⁸/8! ≤ 5.2e-9 (relative ≤ 1.5e-8 of expm1(r)) is far below float rounding. 2^k is
// assembled from exponent bits, in two factors so that k = 128 (results up to FLT_MAX)
// and k down to −150 (subnormal results, rounded once) are exact scalings.
//
// tanh(x) = sign(x) · e / (e + 2) with e = expm1(2|x|): no cancellation anywhere, so the
// relative error stays at a few ulp down to subnormal x; |x| is clamped to 9, where
// tanh rounds to within one ulp of 1.
//
// Special values: NaN propagates (clamps are written so NaN passes through), exp(+inf)
// and overflow give +inf, exp(−inf) and deep underflow give 0, tanh(±inf) = ±1,
// tanh(±0) = ±0.
#pragma once

#include <bit>
#include <cstdint>

namespace tg::backend::cpu::fastmath {

namespace detail {

inline constexpr float kLog2e = 0x1.715476p+0f;   // 1/ln2 rounded to float
inline constexpr float kLn2Hi = 0x1.62e4p-1f;     // ln2 to 16 significant bits
inline constexpr float kLn2Lo = 0x1.7f7d1cp-20f;  // ln2 − kLn2Hi rounded to float
inline constexpr float kRound = 0x1.8p23f;        // adding it rounds to an integer (|v| < 2^22)

/// `c ? a : b` as a bit select, so the optimiser keeps it straight-line (a ternary with a
/// constant arm gets jump-threaded into a branch, which blocks vectorisation).
inline float select(bool c, float a, float b) {
  const uint32_t m = 0u - static_cast<uint32_t>(c);
  return std::bit_cast<float>((std::bit_cast<uint32_t>(a) & m) | (std::bit_cast<uint32_t>(b) & ~m));
}

/// 2^k for k in [−126, 127], from exponent bits.
inline float pow2i(int32_t k) { return std::bit_cast<float>(static_cast<uint32_t>(k + 127) << 23); }

/// Range reduction: returns r with |r| ≤ ln2/2 (+ rounding) and k with x = k·ln2 + r.
/// Needs |x| well below 2^22·ln2 (callers clamp).
inline float reduce(float x, int32_t& k) {
  const float t = x * kLog2e + kRound;  // round-to-nearest of x/ln2 in the low mantissa bits
  k = static_cast<int32_t>(std::bit_cast<uint32_t>(t) - std::bit_cast<uint32_t>(kRound));
  const float kf = t - kRound;  // exact
  return (x - kf * kLn2Hi) - kf * kLn2Lo;
}

/// expm1(r) for |r| ≤ ~0.35: Taylor series to degree 7, Horner form.
inline float expm1_poly(float r) {
  constexpr float c2 = 1.0f / 2, c3 = 1.0f / 6, c4 = 1.0f / 24, c5 = 1.0f / 120, c6 = 1.0f / 720,
                  c7 = 1.0f / 5040;
  const float q = c2 + r * (c3 + r * (c4 + r * (c5 + r * (c6 + r * c7))));
  return r + (r * r) * q;
}

}  // namespace detail

/// e^x for float.
inline float exp(float x) {
  // Below −104 the result rounds to 0; above 89 the scaling overflows to +inf. Comparisons
  // are false for NaN, which therefore passes through to the arithmetic.
  x = detail::select(x < -104.0f, -104.0f, x);
  x = detail::select(x > 89.0f, 89.0f, x);
  int32_t k;
  const float r = detail::reduce(x, k);          // k in [−150, 128]
  const float p = 1.0f + detail::expm1_poly(r);  // e^r in [0.70, 1.42]
  const int32_t k1 = k >> 1;                     // k1, k − k1 in [−75, 64]: both normal
  return (p * detail::pow2i(k1)) * detail::pow2i(k - k1);
}

/// tanh(x) for float.
inline float tanh(float x) {
  const uint32_t sign = std::bit_cast<uint32_t>(x) & 0x80000000u;
  float ax = std::bit_cast<float>(std::bit_cast<uint32_t>(x) & 0x7fffffffu);
  ax = detail::select(ax > 9.0f, 9.0f, ax);  // NaN passes through
  int32_t k;
  const float r = detail::reduce(2.0f * ax, k);  // k in [0, 26]
  const float s = detail::pow2i(k);
  // expm1(2|x|) = 2^k·expm1(r) + (2^k − 1); for k ≥ 1 both terms are ≥ 0 after adding.
  const float e = s * detail::expm1_poly(r) + (s - 1.0f);
  const float t = e / (e + 2.0f);
  return std::bit_cast<float>(std::bit_cast<uint32_t>(t) | sign);
}

}  // namespace tg::backend::cpu::fastmath
