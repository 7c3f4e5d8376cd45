// bf16 and f16 as host formats: the conversions against hand-derived bit patterns and an
// independent formula, every one of the 65,536 patterns of each, HostTensor::to, and programs
// refusing them with an error that says how to convert.
#include <gtest/gtest.h>
#include <tensorgrad/tensorgrad.h>

#include <cmath>
#include <cstring>
#include <limits>

namespace {

using tg::DType;

float from_bits(uint32_t u) { return std::bit_cast<float>(u); }

TEST(Half, KnownBitPatterns) {
  // bf16: the upper half of the f32, rounded to nearest even.
  EXPECT_EQ(tg::bf16_from_f32(1.0f), 0x3f80);
  EXPECT_EQ(tg::bf16_from_f32(-2.5f), 0xc020);
  EXPECT_EQ(tg::bf16_from_f32(3.14159274f), 0x4049);            // 0x40490fdb: below the halfway point
  EXPECT_EQ(tg::bf16_from_f32(from_bits(0x3f808000)), 0x3f80);  // a tie: to the even 0x3f80
  EXPECT_EQ(tg::bf16_from_f32(from_bits(0x3f818000)), 0x3f82);  // a tie: to the even 0x3f82
  EXPECT_EQ(tg::bf16_from_f32(from_bits(0x3f808001)), 0x3f81);  // just above the tie
  EXPECT_EQ(tg::bf16_from_f32(std::numeric_limits<float>::max()), 0x7f80);  // overflows to inf
  EXPECT_EQ(tg::bf16_from_f32(-std::numeric_limits<float>::infinity()), 0xff80);
  EXPECT_EQ(tg::bf16_from_f32(std::nanf("")), 0x7fc0);
  EXPECT_EQ(tg::bf16_from_f32(-std::nanf("")), 0x7fc0);  // PyTorch's one NaN
  EXPECT_EQ(tg::f32_from_bf16(0x4049), from_bits(0x40490000));
  // f16: IEEE binary16.
  EXPECT_EQ(tg::f16_from_f32(1.0f), 0x3c00);
  EXPECT_EQ(tg::f16_from_f32(-2.0f), 0xc000);
  EXPECT_EQ(tg::f16_from_f32(65504.0f), 0x7bff);   // the largest finite
  EXPECT_EQ(tg::f16_from_f32(65519.99f), 0x7bff);  // below the halfway point to 65536
  EXPECT_EQ(tg::f16_from_f32(65520.0f), 0x7c00);   // the tie goes to the even: inf
  EXPECT_EQ(tg::f16_from_f32(1.0f / 3.0f), 0x3555);
  EXPECT_EQ(tg::f16_from_f32(0.1f), 0x2e66);
  EXPECT_EQ(tg::f16_from_f32(std::ldexp(1.0f, -24)), 0x0001);  // the smallest subnormal
  EXPECT_EQ(tg::f16_from_f32(std::ldexp(1.0f, -25)), 0x0000);  // half of it: ties to even zero
  EXPECT_EQ(tg::f16_from_f32(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(tg::f16_from_f32(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 units: tie to even 2
  EXPECT_EQ(tg::f16_from_f32(-0.0f), 0x8000);
  EXPECT_EQ(tg::f16_from_f32(std::ldexp(1023.5f, -24)), 0x0400);  // rounds up into the normals
  EXPECT_EQ(tg::f16_from_f32(std::nanf("")), 0x7e00);
  EXPECT_EQ(tg::f16_from_f32(-std::nanf("")), 0xfe00);
}

/// The value of a binary16 pattern by the definition, in double.
double f16_value(uint16_t h) {
  const int sign = (h & 0x8000) ? -1 : 1, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  if (exp == 0) return sign * std::ldexp(static_cast<double>(mant), -24);
  if (exp == 31)
    return mant ? std::numeric_limits<double>::quiet_NaN() : sign * std::numeric_limits<double>::infinity();
  return sign * std::ldexp(1.0 + mant / 1024.0, exp - 15);
}

TEST(Half, EveryF16PatternDecodesByTheDefinitionAndRoundTrips) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const auto x = static_cast<uint16_t>(h);
    const float f = tg::f32_from_f16(x);
    const double want = f16_value(x);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(f)) << std::hex << h;
      EXPECT_EQ(tg::f16_from_f32(f), (x & 0x8000) | 0x7e00) << std::hex << h;
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), want) << std::hex << h;
    ASSERT_EQ(tg::f16_from_f32(f), x) << std::hex << h;
    // The midpoint to the next pattern up (same sign, finite) rounds to the even of the two.
    const uint16_t next = static_cast<uint16_t>(x + 1);
    if ((x & 0x7fff) < 0x7bff) {
      const double mid = (want + f16_value(next)) / 2;
      const uint16_t even = (x & 1) ? next : x;
      ASSERT_EQ(tg::f16_from_f32(static_cast<float>(mid)), even) << std::hex << h;
    }
  }
}

TEST(Half, EveryBf16PatternRoundTripsAndTiesGoToEven) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const auto x = static_cast<uint16_t>(h);
    const float f = tg::f32_from_bf16(x);
    ASSERT_EQ(std::bit_cast<uint32_t>(f), h << 16);
    if (std::isnan(f)) {
      EXPECT_EQ(tg::bf16_from_f32(f), 0x7fc0);
      continue;
    }
    ASSERT_EQ(tg::bf16_from_f32(f), x) << std::hex << h;
    if ((x & 0x7fff) < 0x7f7f) {  // the tie between x and x + 1
      const uint16_t even = (x & 1) ? static_cast<uint16_t>(x + 1) : x;
      ASSERT_EQ(tg::bf16_from_f32(from_bits((h << 16) | 0x8000)), even) << std::hex << h;
    }
  }
}

TEST(Half, HostTensorConverts) {
  const tg::HostTensor f = tg::HostTensor::f32({1.0f, 0.1f, -65520.0f, 3.0e-8f}, {2, 2});
  const tg::HostTensor b = f.to(DType::kBF16), h = f.to(DType::kF16);
  EXPECT_EQ(b.dtype(), DType::kBF16);
  EXPECT_EQ(b.shape(), (tg::Shape{2, 2}));
  uint16_t hb[4], hh[4];
  std::memcpy(hb, b.data(), sizeof hb);
  std::memcpy(hh, h.data(), sizeof hh);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(hb[i], tg::bf16_from_f32(f.f32()[static_cast<size_t>(i)]));
    EXPECT_EQ(hh[i], tg::f16_from_f32(f.f32()[static_cast<size_t>(i)]));
  }
  EXPECT_EQ(hh[2], 0xfc00);  // −65520 → −inf in f16
  const tg::HostTensor back = h.to(DType::kF32);
  EXPECT_EQ(back.f32()[1], tg::f32_from_f16(0x2e66));
  EXPECT_DOUBLE_EQ(b.item(), 1.0);
  EXPECT_THROW(tg::HostTensor::i32({1}, {1}).to(DType::kBF16), tg::InputError);
  EXPECT_THROW((void)b.f32(), tg::InputError);  // a bf16 tensor is not viewed as f32
}

TEST(Half, ProgramsRefuseThemAndSayHowToConvert) {
  struct None : tg::Module {
  } m;
  try {
    (void)tg::compile_forward(m, [](tg::Tensor x) { return x * 2.0; },
                              {.inputs = {{"x", {2}, DType::kBF16}}, .device = tg::Device::cpu()});
    FAIL() << "no error";
  } catch (const tg::ShapeError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("cannot be bf16: a program's inputs"), std::string::npos) << msg;
    EXPECT_NE(msg.find("HostTensor::to"), std::string::npos) << msg;
  }
  // f16 follows the same rule (a value made inside by a cast, never an input).
  try {
    (void)tg::compile_forward(m, [](tg::Tensor x) { return x * 2.0; },
                              {.inputs = {{"x", {2}, DType::kF16}}, .device = tg::Device::cpu()});
    FAIL() << "no error";
  } catch (const tg::ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot be f16: a program's inputs"), std::string::npos) << e.what();
  }
}

}  // namespace
