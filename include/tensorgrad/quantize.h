// Weights quantized to 8 bits: int8 values with one f32 scale per group of consecutive values
// along the last axis (symmetric, absmax; the layout of ggml's Q8_0 with an f32 scale).
//   scale[g] = max |w| over group g / 127     (0 for a group of zeros)
//   q[i]     = round_half_even(w[i] / scale)  in [-127, 127]   (0 where scale is 0)
//   w[i]    ≈ q[i] · scale[g]                 within scale[g] / 2
// A model stores its products' weights so with Module::store_params_as(DType::kI8); these are the
// host side of the same arithmetic (a program's upload_params quantizes f32 weights with them).
#pragma once
#include <cstdint>
#include <span>
#include <string>

#include "tensorgrad/program.h"

namespace tg {

/// The name of quantized parameter `weight`'s scales, "<weight>_scale" (Param::quantize_int8), and
/// back: the weight a scales' name belongs to ("" for a name of no scales).
std::string scale_name(const std::string& weight);
std::string scaled_weight(const std::string& scale);

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

}  // namespace tg
