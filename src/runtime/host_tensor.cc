// HostTensor: a typed, shaped byte vector on the host.
#include <cstring>

#include "tensorgrad/program.h"

namespace tg {

HostTensor::HostTensor(DType dtype, Shape shape)
    : dtype_(dtype),
      shape_(std::move(shape)),
      bytes_(static_cast<size_t>(tg::numel(shape_) * dtype_size(dtype)), 0) {}

HostTensor HostTensor::f32(std::vector<float> values, Shape shape) {
  if (static_cast<int64_t>(values.size()) != tg::numel(shape))
    throw InputError("[HostTensor] " + std::to_string(values.size()) + " values do not fill shape " +
                     shape_str(shape));
  HostTensor t(DType::kF32, std::move(shape));
  std::memcpy(t.data(), values.data(), values.size() * sizeof(float));
  return t;
}

HostTensor HostTensor::i32(std::vector<int32_t> values, Shape shape) {
  if (static_cast<int64_t>(values.size()) != tg::numel(shape))
    throw InputError("[HostTensor] " + std::to_string(values.size()) + " values do not fill shape " +
                     shape_str(shape));
  HostTensor t(DType::kI32, std::move(shape));
  std::memcpy(t.data(), values.data(), values.size() * sizeof(int32_t));
  return t;
}

namespace {
void expect(DType have, DType want) {
  if (have != want)
    throw InputError(std::string("[HostTensor] holds ") + dtype_name(have) + ", asked for " +
                     dtype_name(want));
}
}  // namespace

std::span<float> HostTensor::f32() & {
  expect(dtype_, DType::kF32);
  return {reinterpret_cast<float*>(bytes_.data()), static_cast<size_t>(numel())};
}
std::span<const float> HostTensor::f32() const& {
  expect(dtype_, DType::kF32);
  return {reinterpret_cast<const float*>(bytes_.data()), static_cast<size_t>(numel())};
}
std::span<int32_t> HostTensor::i32() & {
  expect(dtype_, DType::kI32);
  return {reinterpret_cast<int32_t*>(bytes_.data()), static_cast<size_t>(numel())};
}
std::span<const int32_t> HostTensor::i32() const& {
  expect(dtype_, DType::kI32);
  return {reinterpret_cast<const int32_t*>(bytes_.data()), static_cast<size_t>(numel())};
}

std::vector<float> HostTensor::f32() && {
  const auto view = static_cast<const HostTensor&>(*this).f32();
  return {view.begin(), view.end()};
}
std::vector<int32_t> HostTensor::i32() && {
  const auto view = static_cast<const HostTensor&>(*this).i32();
  return {view.begin(), view.end()};
}

double HostTensor::item() const {
  if (numel() == 0) throw InputError("[HostTensor] item() of an empty tensor");
  switch (dtype_) {
    case DType::kF32: return f32()[0];
    case DType::kI32: return i32()[0];
    case DType::kBool: return bytes_[0] != 0 ? 1.0 : 0.0;
    case DType::kBF16: return f32_from_bf16(half_at(0));
    case DType::kF16: return f32_from_f16(half_at(0));
    case DType::kI8: return static_cast<int8_t>(bytes_[0]);
  }
  return 0;
}

uint16_t HostTensor::half_at(int64_t i) const {
  uint16_t h = 0;
  std::memcpy(&h, bytes_.data() + 2 * i, 2);
  return h;
}

HostTensor HostTensor::to(DType dtype) const {
  if (dtype == dtype_) return *this;
  if (is_half(dtype) && is_half(dtype_)) return to(DType::kF32).to(dtype);  // exact widening, one rounding
  if (dtype_ == DType::kI8 && dtype == DType::kF32) {  // the integers themselves (not dequantized)
    HostTensor out(dtype, shape_);
    float* dst = reinterpret_cast<float*>(out.bytes_.data());
    for (int64_t i = 0; i < numel(); ++i) dst[i] = static_cast<int8_t>(bytes_[static_cast<size_t>(i)]);
    return out;
  }
  const bool half_to_f32 = (dtype_ == DType::kBF16 || dtype_ == DType::kF16) && dtype == DType::kF32;
  const bool f32_to_half = dtype_ == DType::kF32 && (dtype == DType::kBF16 || dtype == DType::kF16);
  if (!half_to_f32 && !f32_to_half)
    throw InputError(std::string("[HostTensor] to(") + dtype_name(dtype) +
                     "): converts between f32 and bf16 or f16 and from i8 to f32, not from " +
                     dtype_name(dtype_) +
                     (dtype == DType::kI8 ? " (tg::quantize_int8 and quantize_int4 make i8 weights with their scales)" : ""));
  HostTensor out(dtype, shape_);
  const int64_t n = numel();
  if (half_to_f32) {
    float* dst = reinterpret_cast<float*>(out.bytes_.data());
    for (int64_t i = 0; i < n; ++i)
      dst[i] = dtype_ == DType::kBF16 ? f32_from_bf16(half_at(i)) : f32_from_f16(half_at(i));
  } else {
    const float* src = reinterpret_cast<const float*>(bytes_.data());
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t h = dtype == DType::kBF16 ? bf16_from_f32(src[i]) : f16_from_f32(src[i]);
      std::memcpy(out.bytes_.data() + 2 * i, &h, 2);
    }
  }
  return out;
}

}  // namespace tg
