// ggml's block-quantized types, dequantized to f32 as ggml's reference code does (the same
// products in the same order, so values agree to the last bit up to fused multiply-adds).
// Every block stores one or two f16 super-scales; the K-quants hold 256 values in sub-blocks
// of 16 or 32 with 4- to 8-bit sub-scales. Formulas per block (q: the stored integers):
//   Q4_0  32 values: (q − 8)·d                  Q4_1  32: q·d + m
//   Q5_0  32: (q − 16)·d, q's 5th bit in qh     Q5_1  32: q·d + m, 5th bit in qh
//   Q8_0  32: q·d, q signed
//   Q2_K  256 in 16 × 16: d·s·q − dmin·m, s, m 4 bits each, q 2 bits
//   Q3_K  256 in 16 × 16: d·(s − 32)·(q − 4·!h), s 6 bits, q 2 bits plus the high bit h
//   Q4_K  256 in 8 × 32: d·s·q − dmin·m, s, m 6 bits packed in 12 bytes, q 4 bits
//   Q5_K  as Q4_K with q's 5th bit in qh
//   Q6_K  256 in 16 × 16: d·s·(q − 32), s signed 8 bits, q 6 bits (4 in ql, 2 in qh)
#include <cstring>

#include "io/gguf.h"
#include "tensorgrad/dtype.h"

namespace tg::io {
namespace {

enum : uint32_t {
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14
};

float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f32_from_f16(h);
}

void q4_0(const uint8_t* b, float* y) {  // d, qs[16]: low nibbles are values 0..15, high 16..31
  const float d = half_at(b);
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((b[2 + j] & 0xF) - 8) * d;
    y[j + 16] = static_cast<float>((b[2 + j] >> 4) - 8) * d;
  }
}

void q4_1(const uint8_t* b, float* y) {  // d, m, qs[16]
  const float d = half_at(b), m = half_at(b + 2);
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(b[4 + j] & 0xF) * d + m;
    y[j + 16] = static_cast<float>(b[4 + j] >> 4) * d + m;
  }
}

// The 5th bits of a Q5 block: bit j of qh for value j, bit j + 16 for value j + 16.
uint32_t qh_of(const uint8_t* p) {
  uint32_t qh;
  std::memcpy(&qh, p, 4);
  return qh;
}

void q5_0(const uint8_t* b, float* y) {  // d, qh[4], qs[16]
  const float d = half_at(b);
  const uint32_t qh = qh_of(b + 2);
  for (int j = 0; j < 16; ++j) {
    const int hi0 = static_cast<int>(((qh >> j) << 4) & 0x10),
              hi1 = static_cast<int>((qh >> (j + 12)) & 0x10);
    y[j] = static_cast<float>(((b[6 + j] & 0xF) | hi0) - 16) * d;
    y[j + 16] = static_cast<float>(((b[6 + j] >> 4) | hi1) - 16) * d;
  }
}

void q5_1(const uint8_t* b, float* y) {  // d, m, qh[4], qs[16]
  const float d = half_at(b), m = half_at(b + 2);
  const uint32_t qh = qh_of(b + 4);
  for (int j = 0; j < 16; ++j) {
    const int hi0 = static_cast<int>(((qh >> j) << 4) & 0x10),
              hi1 = static_cast<int>((qh >> (j + 12)) & 0x10);
    y[j] = static_cast<float>((b[8 + j] & 0xF) | hi0) * d + m;
    y[j + 16] = static_cast<float>((b[8 + j] >> 4) | hi1) * d + m;
  }
}

void q8_0(const uint8_t* b, float* y) {  // d, qs[32] signed
  const float d = half_at(b);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
}

void q2_k(const uint8_t* b, float* y) {  // scales[16], qs[64], d, dmin
  const uint8_t *scales = b, *qs = b + 16;
  const float d = half_at(b + 80), dmin = half_at(b + 82);
  int is = 0;
  for (int n = 0; n < 2; ++n, qs += 32) {  // 128 values per 32 bytes of qs, 2 bits at `shift`
    for (int shift = 0; shift < 8; shift += 2) {
      for (int half = 0; half < 2; ++half) {
        const uint8_t sc = scales[is++];
        const float dl = d * static_cast<float>(sc & 0xF), ml = dmin * static_cast<float>(sc >> 4);
        for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((qs[16 * half + l] >> shift) & 3) - ml;
      }
    }
  }
}

// Q3_K's 16 six-bit scales in 12 bytes: the low 4 bits of scale i in the nibbles of bytes 0..7,
// its high 2 bits in bytes 8..11 (two per byte, four bytes per group of 4 scales).
int q3_scale(const uint8_t* s, int i) {
  if (i < 4) return (s[i] & 0xF) | (((s[i + 8] >> 0) & 3) << 4);
  if (i < 8) return (s[i] & 0xF) | (((s[i + 4] >> 2) & 3) << 4);
  if (i < 12) return (s[i - 8] >> 4) | (((s[i] >> 4) & 3) << 4);
  return (s[i - 8] >> 4) | (((s[i - 4] >> 6) & 3) << 4);
}

void q3_k(const uint8_t* b, float* y) {  // hmask[32], qs[64], scales[12], d
  const uint8_t *hm = b, *qs = b + 32, *scales = b + 96;
  const float d = half_at(b + 108);
  int is = 0;
  uint8_t bit = 1;
  for (int n = 0; n < 2; ++n, qs += 32) {
    for (int shift = 0; shift < 8; shift += 2, bit = static_cast<uint8_t>(bit << 1)) {
      for (int half = 0; half < 2; ++half) {
        const float dl = d * static_cast<float>(q3_scale(scales, is++) - 32);
        for (int l = 16 * half; l < 16 * half + 16; ++l) {
          const int q = ((qs[l] >> shift) & 3) - ((hm[l] & bit) ? 0 : 4);
          *y++ = dl * static_cast<float>(q);
        }
      }
    }
  }
}

// Q4_K's and Q5_K's 8 six-bit scales and 8 six-bit mins in 12 bytes.
void scale_min_k4(int j, const uint8_t* q, int& sc, int& m) {
  if (j < 4) {
    sc = q[j] & 63, m = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

void q4_k(const uint8_t* b, float* y) {  // d, dmin, scales[12], qs[128]
  const float d = half_at(b), dmin = half_at(b + 2);
  const uint8_t *scales = b + 4, *qs = b + 16;
  for (int j = 0; j < 4; ++j, qs += 32) {  // 64 values per 32 bytes: low nibbles, then high
    int sc, m;
    scale_min_k4(2 * j, scales, sc, m);
    const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
    scale_min_k4(2 * j + 1, scales, sc, m);
    const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(qs[l] & 0xF) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(qs[l] >> 4) - m2;
  }
}

void q5_k(const uint8_t* b, float* y) {  // d, dmin, scales[12], qh[32], qs[128]
  const float d = half_at(b), dmin = half_at(b + 2);
  const uint8_t *scales = b + 4, *qh = b + 16, *qs = b + 48;
  for (int j = 0; j < 4; ++j, qs += 32) {
    int sc, m;
    scale_min_k4(2 * j, scales, sc, m);
    const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
    scale_min_k4(2 * j + 1, scales, sc, m);
    const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
    const int u1 = 1 << (2 * j), u2 = 2 << (2 * j);
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>((qs[l] & 0xF) + ((qh[l] & u1) ? 16 : 0)) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>((qs[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
  }
}

void q6_k(const uint8_t* b, float* y) {  // ql[128], qh[64], scales[16] signed, d
  const float d = half_at(b + 208);
  const uint8_t *ql = b, *qh = b + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
  for (int n = 0; n < 2; ++n, ql += 64, qh += 32, sc += 8, y += 128) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
      y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
      y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
      y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
    }
  }
}

// Codes c[0..31] of one group packed as quantize.h packs them: c[2j] in byte j's low nibble.
void pack_group(const int* c, uint8_t* q) {
  for (int j = 0; j < 16; ++j) q[j] = static_cast<uint8_t>(c[2 * j] | (c[2 * j + 1] << 4));
}

// One Q4_0 or Q4_1 block as one group: (q − 8)·d = q·d + (−8d) and q·d + m, both exact in f32
// (a 4-bit integer times an f16 value).
void int4_of_q4_01(const uint8_t* b, bool with_min, uint8_t* q, float* scale, float* offset) {
  const float d = half_at(b);
  *scale = d;
  *offset = with_min ? half_at(b + 2) : -8.0f * d;
  const uint8_t* qs = b + (with_min ? 4 : 2);
  int c[32];
  for (int j = 0; j < 16; ++j) c[j] = qs[j] & 0xF, c[j + 16] = qs[j] >> 4;
  pack_group(c, q);
}

// One Q4_K block as 8 groups: d·s·q − dmin·m with scale d·s and offset −dmin·m per 32 values,
// as q4_k computes them.
void int4_of_q4_k(const uint8_t* b, uint8_t* q, float* scale, float* offset) {
  const float d = half_at(b), dmin = half_at(b + 2);
  const uint8_t *scales = b + 4, *qs = b + 16;
  for (int j = 0; j < 4; ++j, qs += 32) {
    for (int h = 0; h < 2; ++h) {
      int sc, m;
      scale_min_k4(2 * j + h, scales, sc, m);
      scale[2 * j + h] = d * static_cast<float>(sc);
      offset[2 * j + h] = -(dmin * static_cast<float>(m));
      int c[32];
      for (int l = 0; l < 32; ++l) c[l] = h == 0 ? qs[l] & 0xF : qs[l] >> 4;
      pack_group(c, q + 16 * (2 * j + h));
    }
  }
}

}  // namespace

bool ggml_is_int4(uint32_t type) { return type == kQ4_0 || type == kQ4_1 || type == kQ4_K; }

int ggml_bits(uint32_t type) {
  switch (type) {
    case kQ2_K: return 2;
    case kQ3_K: return 3;
    case kQ4_0:
    case kQ4_1:
    case kQ4_K: return 4;
    case kQ5_0:
    case kQ5_1:
    case kQ5_K: return 5;
    case kQ6_K: return 6;
    case kQ8_0: return 8;
    default: return 0;
  }
}

bool ggml_as_int4(uint32_t type, const uint8_t* src, int64_t blocks, uint8_t* q, float* scale,
                  float* offset) {
  if (!ggml_is_int4(type)) return false;
  const GgmlBlock blk = ggml_block(type);
  const int64_t groups = blk.values / 32;
  for (int64_t i = 0; i < blocks; ++i) {
    const uint8_t* b = src + i * blk.bytes;
    uint8_t* qi = q + i * groups * 16;
    if (type == kQ4_K)
      int4_of_q4_k(b, qi, scale + i * groups, offset + i * groups);
    else
      int4_of_q4_01(b, type == kQ4_1, qi, scale + i, offset + i);
  }
  return true;
}

GgmlBlock ggml_block(uint32_t type) {
  switch (type) {
    case 0: return {1, 4};   // F32
    case 1: return {1, 2};   // F16
    case 30: return {1, 2};  // BF16
    case kQ4_0: return {32, 18};
    case kQ4_1: return {32, 20};
    case kQ5_0: return {32, 22};
    case kQ5_1: return {32, 24};
    case kQ8_0: return {32, 34};
    case kQ2_K: return {256, 84};
    case kQ3_K: return {256, 110};
    case kQ4_K: return {256, 144};
    case kQ5_K: return {256, 176};
    case kQ6_K: return {256, 210};
    default: return {};
  }
}

void dequantize_ggml(uint32_t type, const uint8_t* src, int64_t blocks, float* dst) {
  void (*one)(const uint8_t*, float*) = nullptr;
  switch (type) {
    case kQ4_0: one = q4_0; break;
    case kQ4_1: one = q4_1; break;
    case kQ5_0: one = q5_0; break;
    case kQ5_1: one = q5_1; break;
    case kQ8_0: one = q8_0; break;
    case kQ2_K: one = q2_k; break;
    case kQ3_K: one = q3_k; break;
    case kQ4_K: one = q4_k; break;
    case kQ5_K: one = q5_k; break;
    case kQ6_K: one = q6_k; break;
    default: return;
  }
  const GgmlBlock blk = ggml_block(type);
  for (int64_t i = 0; i < blocks; ++i) one(src + i * blk.bytes, dst + i * blk.values);
}

}  // namespace tg::io
