// Accuracy of the CPU backend's float exp / tanh / sigmoid kernels (backend/cpu/fastmath.h),
// checked through the backend against double-precision references: a dense sweep of
// [-100, 100], every float in [0, 1) at a stride for tanh (small-|x| relative accuracy),
// and special values (±0, ±inf, NaN, overflow, subnormal results and inputs).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/fastmath.h"
#include "ir/graph.h"

namespace tg {
namespace {

using ir::Graph;
using ir::Node;
using ir::Op;

constexpr float kFloatInf = std::numeric_limits<float>::infinity();
constexpr float kFloatNaN = std::numeric_limits<float>::quiet_NaN();
constexpr double kMaxRel = 5e-7;  // ~4 ulp

/// Runs the unary `op` on `xs` through the CPU backend.
std::vector<float> run_unary(Op op, const std::vector<float>& xs) {
  Graph g;
  Node in;
  in.op = Op::kInput;
  in.dtype = DType::kF32;
  in.shape = {static_cast<int64_t>(xs.size())};
  in.name = "x";
  const int32_t x = g.add(std::move(in));
  Node n;
  n.op = op;
  n.dtype = DType::kF32;
  n.inputs = {x};
  const int32_t y = g.add(std::move(n));
  g.outputs = {y};
  auto be = backend::make_cpu_backend();
  auto exe = be->prepare(g, {});
  exe->set_input(x, xs.data());
  exe->execute();
  std::vector<float> out(xs.size());
  exe->read_output(y, out.data());
  return out;
}

double ref(Op op, double x) {
  switch (op) {
    case Op::kExp: return std::exp(x);
    case Op::kTanh: return std::tanh(x);
    default: return 1.0 / (1.0 + std::exp(-x));
  }
}

/// Largest error over xs, relative for results in the normal float range and in units of
/// FLT_MIN (absolute) below it; results beyond FLT_MAX must be +inf.
double max_error(Op op, const std::vector<float>& xs, float* worst_x) {
  const std::vector<float> got = run_unary(op, xs);
  double worst = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double want = ref(op, xs[i]);
    const double g = got[i];
    double e;
    if (std::isinf(static_cast<float>(want))) {
      e = g == static_cast<float>(want) ? 0 : kFloatInf;
    } else if (std::abs(want) < std::numeric_limits<float>::min()) {
      e = std::abs(g - want) / std::numeric_limits<float>::min() * kMaxRel;
    } else {
      e = std::abs(g - want) / std::abs(want);
    }
    if (!(e <= worst)) {
      worst = e;
      *worst_x = xs[i];
    }
  }
  return worst;
}

std::vector<float> sweep() {
  std::vector<float> xs;
  for (int64_t i = -2'000'000; i <= 2'000'000; ++i) xs.push_back(static_cast<float>(i * 5e-5));
  return xs;
}

TEST(CpuFastMath, DenseSweepWithinFourUlp) {
  const std::vector<float> xs = sweep();
  for (Op op : {Op::kExp, Op::kTanh, Op::kSigmoid}) {
    float at = 0;
    const double e = max_error(op, xs, &at);
    std::printf("%s: max relative error %.3g at x = %.9g\n", std::string(ir::op_name(op)).c_str(), e, at);
    EXPECT_LE(e, kMaxRel) << ir::op_name(op) << " at x = " << at;
  }
}

TEST(CpuFastMath, TanhSmallArgumentsKeepRelativeAccuracy) {
  std::vector<float> xs;
  for (uint32_t b = 0; b < 0x3f800000u; b += 97) {  // every 97th float in [0, 1), subnormals too
    float x;
    std::memcpy(&x, &b, sizeof x);
    xs.push_back(x);
    xs.push_back(-x);
  }
  float at = 0;
  const double e = max_error(Op::kTanh, xs, &at);
  std::printf("tanh |x| < 1: max relative error %.3g at x = %.9g\n", e, at);
  EXPECT_LE(e, kMaxRel) << "at x = " << at;
}

TEST(CpuFastMath, SpecialValues) {
  const std::vector<float> xs = {0.0f,     -0.0f,  kFloatInf, -kFloatInf, kFloatNaN, 88.72f,
                                 88.73f,   200.0f, -87.5f,    -100.0f,    -103.9f,   -104.5f,
                                 -1000.0f, 1e-40f, -1e-40f,   9.5f,       -9.5f};
  const std::vector<float> e = run_unary(Op::kExp, xs), t = run_unary(Op::kTanh, xs),
                           s = run_unary(Op::kSigmoid, xs);
  for (size_t i = 0; i < xs.size(); ++i) {
    const float x = xs[i];
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(e[i]));
      EXPECT_TRUE(std::isnan(t[i]));
      EXPECT_TRUE(std::isnan(s[i]));
      continue;
    }
    // exp is exact for these (including the subnormal results) to the last bit of std::exp.
    EXPECT_EQ(e[i], std::exp(x)) << "exp(" << x << ")";
    EXPECT_EQ(t[i], std::tanh(x)) << "tanh(" << x << ")";
    EXPECT_EQ(std::signbit(t[i]), std::signbit(x)) << "tanh(" << x << ")";
    EXPECT_EQ(s[i], 1.0f / (1.0f + std::exp(-x))) << "sigmoid(" << x << ")";
  }
}

TEST(CpuFastMath, HeaderFunctionsMatchBackendKernels) {
  const std::vector<float> xs = {-3.5f, -0.1f, 0.0f, 0.37f, 2.0f, 20.0f};
  const std::vector<float> e = run_unary(Op::kExp, xs), t = run_unary(Op::kTanh, xs);
  for (size_t i = 0; i < xs.size(); ++i) {
    EXPECT_EQ(e[i], backend::cpu::fastmath::exp(xs[i]));
    EXPECT_EQ(t[i], backend::cpu::fastmath::tanh(xs[i]));
  }
}

}  // namespace
}  // namespace tg
