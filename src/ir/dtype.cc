// binary16 conversions (see tensorgrad/dtype.h).
#include "tensorgrad/dtype.h"

namespace tg {

uint16_t f16_from_f32(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const auto sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (a >= 0x477ff000u) return sign | 0x7c00u;  // ≥ 65520 (and inf): rounds past 65504 to inf
  if (a >= 0x38800000u) {                       // normal: 2^-14 and up
    const uint32_t exp = (a >> 23) - 127 + 15, mant = a & 0x7fffffu, rest = mant & 0x1fffu;
    uint32_t h = (exp << 10) | (mant >> 13);
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry into the exponent is right
    return static_cast<uint16_t>(sign | h);
  }
  if (a <= 0x33000000u) return sign;  // ≤ 2^-25: half the smallest subnormal, ties to even zero
  // Subnormal: units of 2^-24. The value is mant · 2^(exp − 150), i.e. mant >> (126 − exp) units.
  const uint32_t exp = a >> 23, mant = (a & 0x7fffffu) | 0x800000u, shift = 126 - exp;
  uint32_t h = mant >> shift;
  const uint32_t rest = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rest > half || (rest == half && (h & 1u))) ++h;  // may become the smallest normal, 0x400
  return static_cast<uint16_t>(sign | h);
}

float f32_from_f16(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: mant · 2^-24, exact in f32
    const float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));  // inf, NaN
  return std::bit_cast<float>(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

}  // namespace tg
