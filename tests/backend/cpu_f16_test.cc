// f16 (IEEE binary16) on the CPU backend, Precision::kF16's operand type:
//   - the f32 → f16 cast kernel against tg::f16_from_f32 bit for bit: a strided sweep of all 2^32
//     f32 patterns, every pattern whose 13 dropped bits sit at or next to a rounding tie, a
//     dense sweep of the inputs that round to f16 subnormals, and hand-picked edges (65504,
//     65520 → inf, 2^-24, 2^-25, ±0, ±inf, NaNs of either sign and any payload), at every
//     block length and alignment, and again under MXCSR flush-to-zero, denormals-are-zero and
//     round-toward-zero (which the kernel must ignore);
//   - the f16 → f32 cast kernel and widen_f16 against tg::f32_from_f16 bit for bit, all 65536
//     patterns, NaN payloads included;
//   - f16 programs traced under Precision::kF16's policy (matmul, attention causal or not and
//     with grouped queries, conv2d with stride, padding, dilation and groups, conv_transpose2d),
//     forward and gradients, on the cpu backend against the double-precision reference. Both
//     round the operands identically (to nearest even), so what is left is f32 accumulation of
//     exact products: half_op_test's tolerances (rel 1e-5, abs 1e-6; gradients abs 1e-5).
//     Products of f16 subnormals with a short K are exact in f32 and compared exactly, as are
//     casts and shape ops.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/gemm_bf16.h"
#include "ops/op_harness.h"
#include "tensorgrad/functional.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TG_TEST_X86 1
#endif

namespace tg::op_test {
namespace {

/// Every f32 pattern the sweeps and edges cover.
std::vector<uint32_t> cast_inputs() {
  std::vector<uint32_t> in;
  // All 2^32 patterns at an odd (prime) stride, so that every low bit varies.
  for (uint64_t u = 0; u <= 0xffffffffull; u += 509) in.push_back(static_cast<uint32_t>(u));
  // Every sign, exponent and kept mantissa with the 13 dropped bits at or around the tie.
  for (uint32_t hi = 0; hi < (1u << 19); ++hi)
    for (uint32_t lo : {0x0000u, 0x0001u, 0x0fffu, 0x1000u, 0x1001u, 0x1fffu}) in.push_back(hi << 13 | lo);
  // Subnormal results: f32 exponents 102..112 keep the top 24 − shift bits of the 24-bit
  // significand (shift = 126 − exponent, 14..24; at 24 only the implicit bit is kept); every kept
  // value with the dropped stored bits at or around the tie, both signs.
  for (uint32_t e = 102; e <= 112; ++e) {
    const uint32_t shift = 126 - e, half = 1u << (shift - 1), full = (1u << shift) - 1;
    const uint32_t kept_values = shift <= 23 ? 1u << (23 - shift) : 1u;
    for (uint32_t kept = 0; kept < kept_values; ++kept)
      for (uint32_t rest : {0u, 1u, half - 1, half, half + 1, full})
        for (uint32_t sign : {0u, 0x80000000u})
          in.push_back(sign | e << 23 | ((kept << shift | rest) & 0x7fffffu));
  }
  // Inputs that round to f16 subnormals (2^-25 up to 2^-14) and just beyond, with both signs.
  for (uint32_t u = 0x33000000u - 64; u <= 0x38800000u + 64; u += 61) {
    in.push_back(u);
    in.push_back(u | 0x80000000u);
  }
  const float edges[] = {0.0f,
                         65504.0f,
                         65519.99f,
                         65520.0f,
                         65536.0f,
                         1e10f,
                         0x1p-24f,
                         0x1p-25f,
                         std::nextafter(0x1p-25f, 1.0f),
                         std::nextafter(0x1p-25f, 0.0f),
                         0x1.8p-24f,
                         0x1.8p-25f,
                         0x1p-14f,
                         std::nextafter(0x1p-14f, 0.0f),
                         0x1.ff8p-15f,
                         0x1.ffcp-15f,
                         0x1p-126f,
                         0x1p-149f,
                         1.0f,
                         1.0f + 0x1p-11f,
                         1.0f + 0x1.8p-11f,
                         std::numeric_limits<float>::infinity(),
                         std::numeric_limits<float>::max()};
  for (float f : edges) {
    in.push_back(std::bit_cast<uint32_t>(f));
    in.push_back(std::bit_cast<uint32_t>(-f));
  }
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0x7fbfffffu, 0x7fffffffu, 0x7fc01234u, 0x7f802000u})
    for (uint32_t sign : {0u, 0x80000000u}) in.push_back(nan | sign);
  return in;
}

/// The program h = cast(x, f16), y = cast(h, f32) over n f32 inputs, prepared on the cpu
/// backend (its casts are fused-group block functions, elementwise.cc). Inputs go in as raw bits,
/// so every NaN payload reaches the kernel.
class CastProgram {
 public:
  explicit CastProgram(int64_t n) : n_(n) {
    Tensor h;
    Traced t = trace_fn({uni({n})}, [&](const Ts& x) {
      h = cast(x[0], DType::kF16);
      return cast(h, DType::kF32);
    });
    t.graph.outputs = {h.id(), t.out};
    input_ = t.inputs[0], half_ = h.id(), wide_ = t.out;
    cpu_ = backend::make_cpu_backend();
    exe_ = cpu_->prepare(t.graph, {});
  }
  /// Runs on in[0, n) and returns the first element whose h differs from tg::f16_from_f32 or
  /// whose y differs from tg::f32_from_f16(h), described; "" when every one agrees.
  std::string mismatch(const uint32_t* in) {
    std::vector<uint16_t> h(static_cast<size_t>(n_), 0xdead);
    std::vector<uint32_t> y(static_cast<size_t>(n_));
    exe_->set_input(input_, in);
    exe_->execute();
    exe_->read_output(half_, h.data());
    exe_->read_output(wide_, y.data());
    for (size_t i = 0; i < h.size(); ++i) {
      const uint16_t want = f16_from_f32(std::bit_cast<float>(in[i]));
      const uint32_t back = std::bit_cast<uint32_t>(f32_from_f16(want));
      if (h[i] != want || y[i] != back) {
        char msg[128];
        std::snprintf(msg, sizeof msg, "f32 0x%08x: f16 0x%04x (want 0x%04x), back 0x%08x (want 0x%08x)",
                      in[i], h[i], want, y[i], back);
        return msg;
      }
    }
    return "";
  }

 private:
  int64_t n_;
  int32_t input_ = -1, half_ = -1, wide_ = -1;
  std::unique_ptr<backend::Backend> cpu_;
  std::unique_ptr<backend::Executable> exe_;
};

TEST(CpuF16Cast, F32ToF16IsF16FromF32BitForBit) {
  const std::vector<uint32_t> in = cast_inputs();
  CastProgram program(static_cast<int64_t>(in.size()));
  EXPECT_EQ(program.mismatch(in.data()), "") << in.size() << " inputs";
}

TEST(CpuF16Cast, HandPickedValues) {
  const std::vector<std::pair<float, uint16_t>> known = {{65504.0f, 0x7bff},
                                                         {65520.0f, 0x7c00},
                                                         {-65520.0f, 0xfc00},
                                                         {0x1p-24f, 0x0001},
                                                         {0x1p-25f, 0x0000},
                                                         {std::nextafter(0x1p-25f, 1.0f), 0x0001},
                                                         {0x1.8p-24f, 0x0002},
                                                         {-0.0f, 0x8000},
                                                         {0x1p-14f, 0x0400},
                                                         {std::numeric_limits<float>::infinity(), 0x7c00},
                                                         {std::bit_cast<float>(0xff800001u), 0xfe00},
                                                         {std::bit_cast<float>(0x7f812345u), 0x7e00}};
  std::vector<uint32_t> in;
  for (const auto& [f, h] : known) {
    in.push_back(std::bit_cast<uint32_t>(f));
    EXPECT_EQ(f16_from_f32(f), h) << "tg::f16_from_f32(" << f << ")";
  }
  CastProgram program(static_cast<int64_t>(in.size()));
  EXPECT_EQ(program.mismatch(in.data()), "");
}

/// Lengths around the kernel's 8-lane steps and the executor's 512-element blocks.
TEST(CpuF16Cast, EveryLength) {
  std::vector<uint32_t> pool = cast_inputs();
  for (size_t i = 0; i < 4096; ++i) pool[i] = pool[i * 997 % pool.size()];
  std::vector<int64_t> lengths;
  for (int64_t n = 1; n <= 40; ++n) lengths.push_back(n);
  for (int64_t n : {255, 511, 512, 513, 520, 1031, 4095}) lengths.push_back(n);
  for (int64_t n : lengths)
    for (int64_t off : {0, 3}) {
      CastProgram program(n);
      EXPECT_EQ(program.mismatch(pool.data() + off), "") << "n " << n << " offset " << off;
    }
}

#if defined(TG_TEST_X86)
/// vcvtps2ph with immediate 0 ignores MXCSR's rounding control and flush-to-zero; the widening
/// never meets a denormal. A cast of 65536 elements is one chunk, run on the calling thread,
/// whose MXCSR this sets.
TEST(CpuF16Cast, IgnoresMxcsrFlushingAndRounding) {
  constexpr int64_t kN = 65536;
  std::vector<uint32_t> in;
  for (uint32_t hi = 0; hi < (1u << 19); hi += 5)
    for (uint32_t lo : {0x0fffu, 0x1000u, 0x1001u}) in.push_back(hi << 13 | lo);
  for (uint32_t u = 0x33000000u - 64; u <= 0x38800000u + 64; u += 389) in.push_back(u | (u & 1u) << 31);
  in.resize((in.size() + kN - 1) / kN * kN, 0x3f800001u);
  CastProgram program(kN);
  std::vector<uint16_t> all(65536);
  for (uint32_t h = 0; h < 65536; ++h) all[h] = static_cast<uint16_t>(h);
  std::vector<float> wide(65536);
  const unsigned saved = _mm_getcsr();
  std::string mismatch;
  // FTZ (bit 15), DAZ (bit 6), and each rounding mode (bits 13-14).
  for (unsigned rc = 0; rc < 4 && mismatch.empty(); ++rc) {
    _mm_setcsr((saved & ~0x6000u) | 0x8000u | 0x0040u | rc << 13);
    for (size_t b = 0; b < in.size() && mismatch.empty(); b += kN) mismatch = program.mismatch(in.data() + b);
    backend::cpu::widen_f16(all.data(), 1, 65536, 65536, wide.data());
    _mm_setcsr(saved);
    for (uint32_t h = 0; h < 65536; ++h)
      ASSERT_EQ(std::bit_cast<uint32_t>(wide[h]),
                std::bit_cast<uint32_t>(f32_from_f16(static_cast<uint16_t>(h))))
          << "f16 0x" << std::hex << h << " rounding mode " << rc;
  }
  EXPECT_EQ(mismatch, "");
}
#endif

TEST(CpuF16Cast, F16ToF32IsExactForEveryPattern) {
  // widen_f16 (the f16 → f32 cast's loop and the products' widening) on every pattern, NaN
  // payloads included.
  std::vector<uint16_t> all(65536);
  for (uint32_t h = 0; h < 65536; ++h) all[h] = static_cast<uint16_t>(h);
  std::vector<float> wide(65536);
  backend::cpu::widen_f16(all.data(), 1, 65536, 65536, wide.data());
  for (uint32_t h = 0; h < 65536; ++h)
    ASSERT_EQ(std::bit_cast<uint32_t>(wide[h]),
              std::bit_cast<uint32_t>(f32_from_f16(static_cast<uint16_t>(h))))
        << "f16 0x" << std::hex << h;
  // The program's casts: every f16 value through f32 and back (a NaN as the NaN the cast makes).
  std::vector<uint32_t> in(65536);
  for (uint32_t h = 0; h < 65536; ++h) in[h] = std::bit_cast<uint32_t>(wide[h]);
  CastProgram program(65536);
  EXPECT_EQ(program.mismatch(in.data()), "");
  for (uint32_t h = 0; h < 65536; ++h)
    if ((h & 0x7fffu) <= 0x7c00u) {
      ASSERT_EQ(f16_from_f32(wide[h]), h) << "f16 0x" << std::hex << h;
    }
}

TEST(CpuF16Cast, WidenF16HonoursTheLeadingDimension) {
  const int64_t rows = 37, cols = 29, ld = 41;
  std::vector<uint16_t> src(static_cast<size_t>(rows * ld));
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint16_t>(i * 2654435761u >> 7);
  std::vector<float> dst(static_cast<size_t>(rows * cols + 1), -7.0f);
  backend::cpu::widen_f16(src.data(), rows, cols, ld, dst.data());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      ASSERT_EQ(std::bit_cast<uint32_t>(dst[static_cast<size_t>(r * cols + c)]),
                std::bit_cast<uint32_t>(f32_from_f16(src[static_cast<size_t>(r * ld + c)])));
  EXPECT_EQ(dst.back(), -7.0f);
}

// ---- f16 programs: cpu against ref -------------------------------------------------------------

constexpr Tol kProduct{1e-5, 1e-6};

struct F16Case {
  std::string name;
  std::vector<InputSpec> inputs;
  BuildFn build;
  Tol tol;
  bool grads = true;  // also d sum(y·w) / d inputs
};
void PrintTo(const F16Case& c, std::ostream* os) { *os << c.name; }

F16Case attention_case(std::string name, Shape q, Shape kv, bool causal) {
  return {std::move(name),
          {uni(q), uni(kv), uni(kv)},
          [causal](const Ts& x) { return attention(x[0], x[1], x[2], {.causal = causal}); },
          kProduct};
}

std::vector<F16Case> cases() {
  return {
      {"matmul", {uni({5, 7}), uni({7, 3})}, [](const Ts& x) { return matmul(x[0], x[1]); }, kProduct},
      {"matmul_long_k",
       {uni({9, 300}), uni({300, 11})},
       [](const Ts& x) { return matmul(x[0], x[1]); },
       kProduct},
      {"matmul_batched",
       {uni({2, 3, 5, 6}), uni({2, 3, 6, 4})},
       [](const Ts& x) { return matmul(x[0], x[1]); },
       kProduct},
      {"matmul_weight_broadcast",
       {uni({2, 5, 16}), uni({16, 8})},
       [](const Ts& x) { return matmul(x[0], x[1]); },
       kProduct},
      {"matmul_transposed",
       {uni({6, 5}), uni({4, 6})},
       [](const Ts& x) { return matmul(transpose(x[0], 0, 1), transpose(x[1], 0, 1)); },
       kProduct},
      // A few rows against a transposed weight: the shape bf16 sends to its dot-product kernel.
      {"matmul_few_rows_weight_t",
       {uni({3, 64}), uni({48, 64})},
       [](const Ts& x) { return matmul(x[0], transpose(x[1], 0, 1)); },
       kProduct},
      {"matmul_threaded",
       {uni({160, 96}), uni({96, 200})},
       [](const Ts& x) { return matmul(x[0], x[1]); },
       kLargeSum},
      {"linear_bias_gelu",
       {uni({4, 6, 32}), uni({32, 48}), uni({48})},
       [](const Ts& x) { return gelu(matmul(x[0], x[1]) + x[2]); },
       kProduct},
      // Operands of f16 subnormal size: a product is mant·mant'·2^-48 and K = 4 such terms sum
      // exactly in f32, so the backends agree exactly.
      {"matmul_subnormal",
       {uni({6, 4}, -6e-5, 6e-5), uni({4, 5}, -6e-5, 6e-5)},
       [](const Ts& x) { return matmul(x[0], x[1]); },
       kExact,
       false},
      // Operands past 65504 round to ±inf: inf and NaN results, whatever the summation order.
      {"matmul_overflow",
       {uni({4, 3}, -9e4, 9e4), uni({3, 5}, -9e4, 9e4)},
       [](const Ts& x) { return matmul(x[0], x[1]); },
       kProduct,
       false},
      attention_case("attention", {2, 2, 9, 16}, {2, 2, 9, 16}, false),
      attention_case("attention_causal", {2, 2, 9, 16}, {2, 2, 9, 16}, true),
      attention_case("attention_gqa_causal", {1, 4, 7, 8}, {1, 2, 7, 8}, true),
      attention_case("attention_gqa_cross", {2, 4, 5, 16}, {2, 2, 12, 16}, false),
      attention_case("attention_long_gqa", {1, 4, 70, 32}, {1, 2, 100, 32}, true),
      {"conv2d_padded",
       {uni({2, 3, 7, 6}), uni({4, 3, 3, 3})},
       [](const Ts& x) { return conv2d(x[0], x[1], Tensor(), {.padding = 1}); },
       kProduct},
      {"conv2d_strided_grouped",
       {uni({3, 4, 9, 9}), uni({6, 2, 3, 3})},
       [](const Ts& x) { return conv2d(x[0], x[1], Tensor(), {.stride = 2, .groups = 2}); },
       kProduct},
      {"conv2d_dilated_rect",
       {uni({2, 3, 11, 10}), uni({5, 3, 3, 2})},
       [](const Ts& x) {
         return conv2d(x[0], x[1], Tensor(), {.padding = {2, 1}, .dilation = {2, 1}});
       },
       kProduct},
      {"conv2d_depthwise_strided",
       {uni({2, 4, 8, 8}), uni({4, 1, 3, 3})},
       [](const Ts& x) { return conv2d(x[0], x[1], Tensor(), {.stride = 2, .padding = 1, .groups = 4}); },
       kProduct},
      {"conv2d_1x1",
       {uni({2, 8, 5, 5}), uni({6, 8, 1, 1})},
       [](const Ts& x) { return conv2d(x[0], x[1]); },
       kProduct},
      {"conv_transpose2d_stride2",
       {uni({2, 4, 5, 5}), uni({4, 3, 3, 3})},
       [](const Ts& x) {
         return conv_transpose2d(x[0], x[1], Tensor(), {.stride = 2, .padding = 1, .output_padding = 1});
       },
       kProduct},
      {"cast_round_trip",
       {uni({3, 41}, -7e4, 7e4), uni({5, 13}, -1e-4, 1e-4)},
       [](const Ts& x) {
         return concat({reshape(cast(cast(x[0], DType::kF16), DType::kF32), {123}),
                        reshape(cast(cast(x[1], DType::kF16), DType::kF32), {65})},
                       0);
       },
       kExact,
       false},
      {"shape_ops",
       {uni({4, 6}), uni({4, 2})},
       [](const Ts& x) {
         Tensor a = cast(x[0], DType::kF16), b = cast(x[1], DType::kF16);
         Tensor c = concat({slice(permute(a, {1, 0}), 0, 1, 5), transpose(b, 0, 1)}, 0);  // [6, 4]
         Tensor d = broadcast_to(reshape(c, {1, 24}), {3, 24});
         return cast(d, DType::kF32) * 2.0;
       },
       kExact},
  };
}

/// Output and (with row.grads) gradients of sum(y·w), w fixed, of a row traced under f16.
std::vector<std::vector<double>> run_case(backend::Backend& be, const F16Case& row) {
  return run_weighted(be, seed_of(row.name), row.inputs, row.build, DType::kF16, 0xf16ull, row.grads);
}

class F16Op : public ::testing::TestWithParam<F16Case> {};

TEST_P(F16Op, PolicyMakesF16Operands) {
  const F16Case& row = GetParam();
  const Traced t = trace_fn(row.inputs, row.build, false, DType::kF16);
  int f16_values = 0;
  for (const ir::Node& n : t.graph.nodes()) {
    f16_values += n.dtype == DType::kF16;
    EXPECT_NE(n.dtype, DType::kBF16);
  }
  EXPECT_GT(f16_values, 0) << t.graph.to_string();
}

TEST_P(F16Op, CpuMatchesRef) {
  const F16Case& row = GetParam();
  auto ref = backend::make_ref_backend();
  auto cpu = backend::make_cpu_backend();
  const auto want = run_case(*ref, row);
  const auto got = run_case(*cpu, row);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_TRUE(all_close(got[0], want[0], row.tol)) << "forward";
  const Tol grad_tol{std::max(row.tol.rel, 1e-5), std::max(row.tol.abs, 1e-5)};
  for (size_t i = 1; i < want.size(); ++i)
    EXPECT_TRUE(all_close(got[i], want[i], grad_tol)) << "gradient " << i;
}

INSTANTIATE_TEST_SUITE_P(Table, F16Op, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

/// The overflow row is not vacuous: its operands do reach ±inf and its results hold inf and NaN.
TEST(F16Programs, OverflowRowMakesInfinities) {
  F16Case row;
  for (const F16Case& c : cases())
    if (c.name == "matmul_overflow") row = c;
  auto cpu = backend::make_cpu_backend();
  const std::vector<double> y = run_case(*cpu, row).at(0);
  int nonfinite = 0;
  for (double v : y) nonfinite += !std::isfinite(v);
  EXPECT_GT(nonfinite, 0);
}

}  // namespace
}  // namespace tg::op_test
