// Host-side 8- and 4-bit quantization (see tensorgrad/quantize.h for the arithmetic).
#include "tensorgrad/quantize.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>

#include "tensorgrad/errors.h"

namespace tg {

namespace {
constexpr std::string_view kScaleSuffix = "_scale", kOffsetSuffix = "_offset";

std::string strip(const std::string& name, std::string_view suffix) {
  if (name.size() <= suffix.size() || !name.ends_with(suffix)) return "";
  return name.substr(0, name.size() - suffix.size());
}

void check_finite(const char* what, const float* x, int64_t n, int64_t first) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i]))
      throw InputError(std::string("[") + what + "] value " + std::to_string(first + i) + " is " +
                       std::to_string(x[i]) + ": only finite values quantize");
}

/// The shape of a tensor's groups: `shape` with its last axis divided by `group`, which must divide
/// it (and be even for 4 bits).
Shape grouped_shape(const char* what, const HostTensor& w, int64_t group, bool even) {
  const Shape& shape = w.shape();
  if (shape.empty() || group <= 0 || shape.back() % group != 0 || (even && group % 2 != 0))
    throw InputError(std::string("[") + what + "] groups of " + std::to_string(group) + " values must " +
                     (even ? "be even and " : "") + "divide the last axis of " + shape_str(shape));
  if (w.dtype() == DType::kI8 || w.dtype() == DType::kI32 || w.dtype() == DType::kBool)
    throw InputError(std::string("[") + what + "] quantizes f32, bf16 or f16 values, not " +
                     dtype_name(w.dtype()));
  Shape out = shape;
  out.back() /= group;
  return out;
}
}  // namespace

std::string scale_name(const std::string& weight) { return weight + std::string(kScaleSuffix); }
std::string scaled_weight(const std::string& scale) {
  const std::string base = strip(scale, kScaleSuffix);
  return base.empty() ? strip(scale, kOffsetSuffix) : base;
}
std::string offset_name(const std::string& weight) { return weight + std::string(kOffsetSuffix); }

HostTensor dequantize_param(const std::string& name, int bits, const HostTensor& q,
                            const std::map<std::string, HostTensor>& values) {
  const auto find = [&](const std::string& part) -> const HostTensor& {
    const auto it = values.find(part);
    if (it == values.end())
      throw InputError("[dequantize] missing '" + part + "', the " +
                       (part == offset_name(name) ? "offsets" : "scales") + " of the quantized '" + name +
                       "'");
    return it->second;
  };
  return bits == 4 ? dequantize_int4(q, find(scale_name(name)), find(offset_name(name)))
                   : dequantize_int8(q, find(scale_name(name)));
}

Shape dequantized_shape(const std::string& name, const Shape& stored,
                        const std::map<std::string, HostTensor>& params) {
  Shape s = stored;
  const auto it = params.find(name);
  if (!s.empty() && it != params.end() && it->second.dtype() == DType::kI8 &&
      params.count(offset_name(name)) != 0)
    s.back() *= 2;
  return s;
}

void quantize_int8(std::span<const float> w, int64_t group, int8_t* q, float* scale) {
  const auto n = static_cast<int64_t>(w.size());
  if (group <= 0 || n % group != 0)
    throw InputError("[quantize_int8] groups of " + std::to_string(group) + " values must divide the " +
                     std::to_string(n) + " values");
  for (int64_t g = 0; g * group < n; ++g) {
    const float* x = w.data() + g * group;
    check_finite("quantize_int8", x, group, g * group);
    float amax = 0;
    for (int64_t i = 0; i < group; ++i) amax = std::max(amax, std::fabs(x[i]));
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
  const Shape scale_shape = grouped_shape("quantize_int8", w, group, false);
  const HostTensor f = w.to(DType::kF32);
  QuantizedTensor out{HostTensor(DType::kI8, w.shape()), HostTensor(DType::kF32, scale_shape)};
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

void quantize_int4(std::span<const float> w, int64_t group, uint8_t* q, float* scale, float* offset) {
  const auto n = static_cast<int64_t>(w.size());
  if (group <= 0 || group % 2 != 0 || n % group != 0)
    throw InputError("[quantize_int4] groups of " + std::to_string(group) +
                     " values must be even and divide the " + std::to_string(n) + " values");
  for (int64_t g = 0; g * group < n; ++g) {
    const float* x = w.data() + g * group;
    check_finite("quantize_int4", x, group, g * group);
    // (No structured binding: clang 16 with OpenMP refuses the lambda below capturing one.)
    const auto range = std::minmax_element(x, x + group);
    const float lo = *range.first, s = (*range.second - lo) / 15.0f;
    scale[g] = s, offset[g] = lo;
    uint8_t* bytes = q + g * group / 2;
    for (int64_t i = 0; i < group; i += 2) {
      // Ties to even (nearbyint); the clamp only catches a last-bit error of the division.
      const auto code = [&](float v) {
        return static_cast<uint8_t>(s == 0.0f ? 0.0f : std::clamp(std::nearbyint((v - lo) / s), 0.0f, 15.0f));
      };
      bytes[i / 2] = static_cast<uint8_t>(code(x[i]) | (code(x[i + 1]) << 4));
    }
  }
}

Quantized4Tensor quantize_int4(const HostTensor& w, int64_t group) {
  const Shape groups = grouped_shape("quantize_int4", w, group, true);
  Shape packed = w.shape();
  packed.back() /= 2;
  const HostTensor f = w.to(DType::kF32);
  Quantized4Tensor out{HostTensor(DType::kI8, packed), HostTensor(DType::kF32, groups),
                       HostTensor(DType::kF32, groups)};
  quantize_int4(f.f32(), group, static_cast<uint8_t*>(out.q.data()), out.scale.f32().data(),
                out.offset.f32().data());
  return out;
}

HostTensor dequantize_int4(const HostTensor& q, const HostTensor& scale, const HostTensor& offset) {
  const Shape &qs = q.shape(), &ss = scale.shape();
  const bool shapes_fit = !qs.empty() && qs.size() == ss.size() && ss.back() > 0 &&
                          (2 * qs.back()) % ss.back() == 0 && (2 * qs.back() / ss.back()) % 2 == 0 &&
                          std::equal(qs.begin(), qs.end() - 1, ss.begin()) && offset.shape() == ss;
  if (q.dtype() != DType::kI8 || scale.dtype() != DType::kF32 || offset.dtype() != DType::kF32 || !shapes_fit)
    throw InputError(std::string("[dequantize_int4] takes packed i8 codes [..., K / 2] and f32 scales and "
                                 "offsets [..., K / group], got ") +
                     dtype_name(q.dtype()) + shape_str(qs) + ", " + dtype_name(scale.dtype()) +
                     shape_str(ss) + " and " + dtype_name(offset.dtype()) + shape_str(offset.shape()));
  Shape shape = qs;
  shape.back() *= 2;
  const int64_t group = shape.back() / ss.back();
  HostTensor out(DType::kF32, shape);
  const auto* bytes = static_cast<const uint8_t*>(q.data());
  const std::span<const float> s = scale.f32(), o = offset.f32();
  std::span<float> v = out.f32();
  for (int64_t i = 0; i < out.numel(); ++i) {
    const int code = (bytes[i / 2] >> (4 * (i % 2))) & 15;
    v[size_t(i)] = float(code) * s[size_t(i / group)] + o[size_t(i / group)];
  }
  return out;
}

}  // namespace tg
