// Mixed precision op by op: every op that reads bf16 (casts, shape ops, matmul, attention),
// traced under Precision::kBf16's policy, on each backend against the double-precision
// reference running the same graph.
//
// The casts to bf16 round identically everywhere (round to nearest even), so backend and
// reference multiply the same bf16 operands; what is left is how each accumulates. The
// tolerance table says how far each op may then differ, and why:
//
//   op (backend)              rel     abs     why
//   cast, shape ops           0       0       rounding is exact and specified; copies are copies
//   matmul (cpu)              1e-5    1e-6    f32 accumulation of exact bf16 products, any order
//   matmul (cuda)             1e-5    1e-6    the same on the tensor cores (f32 accumulate)
//   attention (cpu)           1e-5    1e-6    f32 softmax and f32 products of bf16 q, k, v
//   attention (cuda)          1e-2    1e-3    flash attention multiplies the probabilities,
//                                             rounded to bf16, by v on the tensor cores
//   gradients                 as the forward, with an absolute floor of 1e-5 (the f32
//                             gradient is summed in a different order on each backend)
//
// A second check measures the policy itself: the bf16 program's output and gradients on ref
// against the f32 program's, normwise within 2^-7 (a few bf16 roundings of O(1) values).
#include <gtest/gtest.h>

#include "ops/op_harness.h"
#include "test_util.h"
#include "tensorgrad/errors.h"
#include "tensorgrad/functional.h"

namespace tg::op_test {
namespace {

struct Bf16Case {
  std::string name;
  std::vector<InputSpec> inputs;
  BuildFn build;
  Tol cpu;
  Tol cuda;
};
void PrintTo(const Bf16Case& c, std::ostream* os) { *os << c.name; }

constexpr Tol kProduct{1e-5, 1e-6};
constexpr Tol kFlash{1e-2, 1e-3};

std::vector<Bf16Case> cases() {
  return {
      {"matmul",
       {uni({5, 7}), uni({7, 3})},
       [](const Ts& x) { return matmul(x[0], x[1]); },
       kProduct,
       kProduct},
      {"matmul_long_k",
       {uni({9, 300}), uni({300, 11})},
       [](const Ts& x) { return matmul(x[0], x[1]); },
       kProduct,
       kProduct},
      {"matmul_weight_broadcast",
       {uni({2, 5, 16}), uni({16, 8})},
       [](const Ts& x) { return matmul(x[0], x[1]); },
       kProduct,
       kProduct},
      {"matmul_batched",
       {uni({2, 3, 5, 6}), uni({2, 3, 6, 4})},
       [](const Ts& x) { return matmul(x[0], x[1]); },
       kProduct,
       kProduct},
      {"matmul_transposed",
       {uni({6, 5}), uni({4, 6})},
       [](const Ts& x) { return matmul(transpose(x[0], 0, 1), transpose(x[1], 0, 1)); },
       kProduct,
       kProduct},
      {"matmul_vector",
       {uni({7}), uni({7, 3})},
       [](const Ts& x) { return matmul(x[0], x[1]); },
       kProduct,
       kProduct},
      {"linear_bias_gelu",
       {uni({4, 6, 32}), uni({32, 48}), uni({48})},
       [](const Ts& x) { return gelu(matmul(x[0], x[1]) + x[2]); },
       kProduct,
       kProduct},
      {"linear_residual",
       {uni({24, 64}), uni({64, 64}), uni({24, 64})},
       [](const Ts& x) { return x[2] + matmul(x[0], x[1]); },
       kProduct,
       kProduct},
      {"attention_causal",
       {uni({2, 2, 9, 16}), uni({2, 2, 9, 16}), uni({2, 2, 9, 16})},
       [](const Ts& x) { return attention(x[0], x[1], x[2], {.causal = true}); },
       kProduct,
       kFlash},
      {"attention_gqa",
       {uni({1, 4, 7, 8}), uni({1, 2, 7, 8}), uni({1, 2, 7, 8})},
       [](const Ts& x) { return attention(x[0], x[1], x[2], {.causal = true}); },
       kProduct,
       kFlash},
      {"attention_cross",
       {uni({2, 2, 5, 16}), uni({2, 2, 12, 16}), uni({2, 2, 12, 16})},
       [](const Ts& x) { return attention(x[0], x[1], x[2], {.causal = false}); },
       kProduct,
       kFlash},
      {"attention_long",
       {uni({1, 2, 130, 64}), uni({1, 2, 130, 64}), uni({1, 2, 130, 64})},
       [](const Ts& x) { return attention(x[0], x[1], x[2], {.causal = true}); },
       kProduct,
       kFlash},
      {"cast_round_trip",
       {uni({3, 37}, -300, 300)},
       [](const Ts& x) { return cast(cast(x[0], DType::kBF16), DType::kF32); },
       kExact,
       kExact},
      {"shape_ops",
       {uni({4, 6}), uni({4, 2})},
       [](const Ts& x) {
         Tensor a = cast(x[0], DType::kBF16), b = cast(x[1], DType::kBF16);
         Tensor c = concat({slice(permute(a, {1, 0}), 0, 1, 5), transpose(b, 0, 1)}, 0);  // [6, 4]
         Tensor d = broadcast_to(reshape(c, {1, 24}), {3, 24});
         return cast(d, DType::kF32) * 2.0;
       },
       kExact,
       kExact},
  };
}

class Bf16Op : public ::testing::TestWithParam<Bf16Case> {};

/// Output and gradients (of sum(y·w) for fixed w) of a case traced with or without bf16.
std::vector<std::vector<double>> run_case(backend::Backend& be, const Bf16Case& row, bool bf16) {
  Rng weight_rng(seed_of(row.name) ^ 0xbf16ull);
  Tensor y_out;
  Traced t = trace_fn(
      row.inputs,
      [&](const Ts& x) {
        Tensor y = row.build(x);
        std::vector<float> w(static_cast<size_t>(y.numel()));
        for (float& v : w) v = static_cast<float>(weight_rng.uniform(-1.5, 1.5));
        y_out = y;
        return sum(y * constant(std::span<const float>(w), y.shape()));
      },
      false, bf16);
  const int32_t y = y_out.id();
  const std::vector<HostTensor> feeds = make_feeds(row.inputs, t, seed_of(row.name));
  const std::vector<int32_t> grads = autograd::append_gradients(t.graph, t.out, t.inputs);
  t.graph.outputs = {y};
  for (int32_t g : grads)
    if (g >= 0) t.graph.outputs.push_back(g);
  return run_graph(be, t.graph, t.inputs, feeds);
}

TEST_P(Bf16Op, PolicyCastsTheOperands) {
  const Bf16Case& row = GetParam();
  const Traced t = trace_fn(row.inputs, row.build, false, true);
  int bf16_values = 0;
  for (const ir::Node& n : t.graph.nodes()) bf16_values += n.dtype == DType::kBF16;
  EXPECT_GT(bf16_values, 0) << t.graph.to_string();
}

TEST_P(Bf16Op, CpuMatchesRef) {
  const Bf16Case& row = GetParam();
  auto ref = backend::make_ref_backend();
  auto cpu = backend::make_cpu_backend();
  const auto want = run_case(*ref, row, true);
  const auto got = run_case(*cpu, row, true);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_TRUE(all_close(got[0], want[0], row.cpu)) << "forward";
  const Tol grad_tol{std::max(row.cpu.rel, 1e-5), std::max(row.cpu.abs, 1e-5)};
  for (size_t i = 1; i < want.size(); ++i)
    EXPECT_TRUE(all_close(got[i], want[i], grad_tol)) << "gradient " << i;
}

TEST_P(Bf16Op, CudaMatchesRef) {
  if (const std::string why = tg::testing::gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  const Bf16Case& row = GetParam();
  auto ref = backend::make_ref_backend();
  auto gpu = backend::make_cuda_backend(0);
  const auto want = run_case(*ref, row, true);
  const auto got = run_case(*gpu, row, true);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_TRUE(all_close(got[0], want[0], row.cuda)) << "forward";
  const Tol grad_tol{std::max(row.cuda.rel, 1e-5), std::max(row.cuda.abs, 1e-5)};
  for (size_t i = 1; i < want.size(); ++i)
    EXPECT_TRUE(all_close(got[i], want[i], grad_tol)) << "gradient " << i;
}

/// ‖a − b‖ / ‖b‖.
double normwise(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

TEST_P(Bf16Op, PolicyStaysCloseToF32) {
  const Bf16Case& row = GetParam();
  auto ref = backend::make_ref_backend();
  const auto mixed = run_case(*ref, row, true);
  const auto full = run_case(*ref, row, false);
  ASSERT_EQ(mixed.size(), full.size());
  for (size_t i = 0; i < full.size(); ++i) {
    const double err = normwise(mixed[i], full[i]);
    EXPECT_LT(err, 1.0 / 128) << (i == 0 ? "forward" : "gradient " + std::to_string(i));
    // bf16 rounding must be visible: the policy is not a no-op (exact cases excepted).
    if (i == 0 && row.cpu.rel > 0) {
      EXPECT_GT(err, 1e-6);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Table, Bf16Op, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

TEST(Bf16Rules, ArithmeticOnBf16IsRefusedWithAHint) {
  ir::Trace trace;
  ir::TraceScope scope(trace);
  Tensor x = ir::named_leaf(trace.graph, ir::Op::kInput, "x", {4}, DType::kF32, Loc::current());
  Tensor b = cast(x, DType::kBF16);
  try {
    (void)(b + b);
    FAIL() << "bf16 + bf16 was accepted";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("cast to f32 first"), std::string::npos) << e.what();
  }
  // Mixed with f32, or through a float function, bf16 is promoted to f32 first.
  EXPECT_EQ((b + x).dtype(), DType::kF32);
  EXPECT_EQ((b * 2.0).dtype(), DType::kF32);
  EXPECT_EQ(exp(b).dtype(), DType::kF32);
  EXPECT_THROW((void)sum(b), ShapeError);
  EXPECT_THROW((void)cast(cast(x, DType::kI32), DType::kBF16), ShapeError);
  // A product of bf16 and f32 multiplies in f32; two bf16 operands multiply as bf16.
  const Tensor mixed = matmul(reshape(b, {2, 2}), reshape(x, {2, 2}));
  for (int32_t in : trace.graph.node(mixed.id()).inputs) EXPECT_EQ(trace.graph.node(in).dtype, DType::kF32);
  EXPECT_EQ(matmul(reshape(b, {2, 2}), reshape(b, {2, 2})).dtype(), DType::kF32);
}

}  // namespace
}  // namespace tg::op_test
