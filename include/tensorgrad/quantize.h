// Weights quantized to 8 bits: int8 values with one f32 scale per group of consecutive values
// along the last axis (symmetric, absmax; the layout of ggml's Q8_0 with an f32 scale).
//   scale[g] = max |w| over group g / 127     (0 for a group of zeros)
//   q[i]     = round_half_even(w[i] / scale)  in [-127, 127]   (0 where scale is 0)
//   w[i]    ≈ q[i] · scale[g]                 within scale[g] / 2
// Weights quantized to 4 bits: codes 0..15 packed two to a byte, with an f32 scale and an f32
// offset per group (affine, min-max; ggml's Q4_0, Q4_1 and Q4_K blocks are exact in it):
//   offset[g] = min w over group g,  scale[g] = (max w − min w) / 15
//   c[i]      = round_half_even((w[i] − offset) / scale)  in [0, 15]   (0 where scale is 0)
//   w[i]     ≈ c[i] · scale[g] + offset[g]                within scale[g] / 2
//   byte j of a row holds c[2j] in its low nibble and c[2j + 1] in its high one.
// A model stores its products' weights so with Module::store_params_as(DType::kI8); these are the
// host side of the same arithmetic (a program's upload_params quantizes f32 weights with them).
#pragma once
#include <cstdint>
#include <map>
#include <span>
#include <string>

#include "tensorgrad/program.h"

namespace tg {

/// The name of quantized parameter `weight`'s scales, "<weight>_scale" (Param::quantize_int8), and
/// back: the weight a scales' (or a 4-bit weight's offsets') name belongs to ("" for other names).
std::string scale_name(const std::string& weight);
std::string scaled_weight(const std::string& scale);

/// The name of a 4-bit parameter's offsets, "<weight>_offset" (Param::quantize_int4).
std::string offset_name(const std::string& weight);

/// The f32 values of the quantized parameter `name` of `bits` (8 or 4) whose stored values are `q`,
/// with its scales (and offsets) taken from `values` (download_params' map, say): dequantize_int8 or
/// dequantize_int4. InputError naming what is missing or misshapen.
HostTensor dequantize_param(const std::string& name, int bits, const HostTensor& q,
                            const std::map<std::string, HostTensor>& values);

/// The shape of the values a quantized parameter stored as `stored` (its i8 values, or a 4-bit
/// one's packed bytes, as downloaded) holds: the same, or [..., 2 · K/2] where `params` holds
/// `name` as i8 with offsets (4 bits).
Shape dequantized_shape(const std::string& name, const Shape& stored,
                        const std::map<std::string, HostTensor>& params);

/// A quantized tensor: q [..., K] (i8) and scale [..., K / group] (f32).
struct QuantizedTensor {
  HostTensor q;
  HostTensor scale;
};

/// Quantizes `w` (f32, bf16 or f16, rank ≥ 1) in groups of `group` values of its last axis,
/// which `group` must divide (InputError otherwise).
QuantizedTensor quantize_int8(const HostTensor& w, int64_t group = 32);

/// q · scale as f32 (the shapes as quantize_int8 makes them; InputError otherwise).
HostTensor dequantize_int8(const HostTensor& q, const HostTensor& scale);

/// The arithmetic of quantize_int8 on raw arrays: w.size() values, w.size() / group scales.
/// InputError when `group` does not divide w.size(), and for a value that is not finite (here and
/// in the HostTensor form).
void quantize_int8(std::span<const float> w, int64_t group, int8_t* q, float* scale);

/// A tensor quantized to 4 bits: q [..., K / 2] (i8: the packed codes' bytes), scale and offset
/// [..., K / group] (f32).
struct Quantized4Tensor {
  HostTensor q;
  HostTensor scale;
  HostTensor offset;
};

/// Quantizes `w` (f32, bf16 or f16, rank ≥ 1) to 4 bits in groups of `group` values of its last
/// axis: `group` even and dividing that axis (InputError otherwise).
Quantized4Tensor quantize_int4(const HostTensor& w, int64_t group = 32);

/// c · scale + offset as f32 [..., K] (the shapes as quantize_int4 makes them; InputError otherwise).
HostTensor dequantize_int4(const HostTensor& q, const HostTensor& scale, const HostTensor& offset);

/// The arithmetic of quantize_int4 on raw arrays: w.size() values into w.size() / 2 bytes of q
/// and w.size() / group scales and offsets.
void quantize_int4(std::span<const float> w, int64_t group, uint8_t* q, float* scale, float* offset);

}  // namespace tg
