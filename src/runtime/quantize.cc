// Host-side int8 quantization (see tensorgrad/quantize.h for the arithmetic).
#include "tensorgrad/quantize.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>

#include "tensorgrad/errors.h"

namespace tg {

namespace {
constexpr std::string_view kScaleSuffix = "_scale";
}  // namespace

std::string scale_name(const std::string& weight) { return weight + std::string(kScaleSuffix); }

std::string scaled_weight(const std::string& scale) {
  if (scale.size() <= kScaleSuffix.size() || !scale.ends_with(kScaleSuffix)) return "";
  return scale.substr(0, scale.size() - kScaleSuffix.size());
}

void quantize_int8(std::span<const float> w, int64_t group, int8_t* q, float* scale) {
  const auto n = static_cast<int64_t>(w.size());
  if (group <= 0 || n % group != 0)
    throw InputError("[quantize_int8] groups of " + std::to_string(group) + " values must divide the " +
                     std::to_string(n) + " values");
  for (int64_t g = 0; g * group < n; ++g) {
    const float* x = w.data() + g * group;
    float amax = 0;
    for (int64_t i = 0; i < group; ++i) {
      if (!std::isfinite(x[i]))
        throw InputError("[quantize_int8] value " + std::to_string(g * group + i) + " is " +
                         std::to_string(x[i]) + ": only finite values quantize");
      amax = std::max(amax, std::fabs(x[i]));
    }
    const float s = amax / 127.0f;
    scale[g] = s;
    for (int64_t i = 0; i < group; ++i) {
      // nearbyint under the default rounding mode: ties to even. The clamp only matters for
      // values that round past 127 · s by a last-bit error of the division.
      const float v = s == 0.0f ? 0.0f : std::nearbyint(x[i] / s);
      q[g * group + i] = static_cast<int8_t>(std::clamp(v, -127.0f, 127.0f));
    }
  }
}

QuantizedTensor quantize_int8(const HostTensor& w, int64_t group) {
  const Shape& shape = w.shape();
  if (shape.empty() || group <= 0 || shape.back() % group != 0)
    throw InputError("[quantize_int8] groups of " + std::to_string(group) +
                     " values must divide the last axis of " + shape_str(shape));
  if (w.dtype() == DType::kI8 || w.dtype() == DType::kI32 || w.dtype() == DType::kBool)
    throw InputError(std::string("[quantize_int8] quantizes f32, bf16 or f16 values, not ") +
                     dtype_name(w.dtype()));
  const HostTensor f = w.to(DType::kF32);
  Shape scale_shape = shape;
  scale_shape.back() /= group;
  QuantizedTensor out{HostTensor(DType::kI8, shape), HostTensor(DType::kF32, scale_shape)};
  quantize_int8(f.f32(), group, static_cast<int8_t*>(out.q.data()), out.scale.f32().data());
  return out;
}

HostTensor dequantize_int8(const HostTensor& q, const HostTensor& scale) {
  const Shape& qs = q.shape();
  const Shape& ss = scale.shape();
  const bool shapes_fit = !qs.empty() && qs.size() == ss.size() && ss.back() > 0 &&
                          qs.back() % ss.back() == 0 && std::equal(qs.begin(), qs.end() - 1, ss.begin());
  if (q.dtype() != DType::kI8 || scale.dtype() != DType::kF32 || !shapes_fit)
    throw InputError(
        std::string("[dequantize_int8] takes i8 values [..., K] and f32 scales [..., K / group], "
                    "got ") +
        dtype_name(q.dtype()) + shape_str(qs) + " and " + dtype_name(scale.dtype()) + shape_str(ss));
  const int64_t group = qs.back() / ss.back();
  HostTensor out(DType::kF32, qs);
  const auto* v = static_cast<const int8_t*>(q.data());
  const std::span<const float> s = scale.f32();
  std::span<float> o = out.f32();
  for (int64_t i = 0; i < out.numel(); ++i) o[size_t(i)] = float(v[i]) * s[size_t(i / group)];
  return out;
}

}  // namespace tg
