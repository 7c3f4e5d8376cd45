// The op correctness table. One row per case; together the rows reach every op in
// src/ir/ops.def through the public API (tensorgrad/tensor.h), with broadcasting, size-1
// axes, negative axes and the scalar operator forms. For every row:
//   * OpForward: the traced output shape/dtype is the one the row states, and the CPU
//     backend agrees with the double-precision reference backend within the row's tolerance;
//   * OpGradient (rows marked kGrad): d/dx sum(f(x) * w) from autograd, run on the reference
//     backend in double, matches central finite differences of the same forward graph, and
//     the CPU backend runs that gradient graph to the same numbers as the reference (rows
//     marked kCpuOnly, too big for finite differences, get only the second check).
// Graphs go through dead-code elimination before prepare(), as in the runtime.
// The NN rows (functional.h) feed i32 indices and targets through `indices(shape, n)`; rows
// that draw random numbers get the runtime key input fed by the harness (make_feeds), and
// dropout rows are traced in training mode (OpCase::training). Randomness statistics, run-time
// and trace-time errors and hand-computed NN values are in nn_op_table_test.cc.
// Below the table, hand-computed expectations pin the reference backend itself (so a bug
// shared by the oracle and the VJPs cannot hide), and explicit tests cover gradient
// accumulation over several consumers and stop_gradient.
//
// Adding an op to ops.def means adding its rows to op_table_cases.h (see step 5 in ops.def).
#include <array>
#include <set>

#include "ops/op_harness.h"
#include "ops/op_table_cases.h"
#include "test_util.h"
#include "tensorgrad/functional.h"

// Not formatted (clang-format off), as when the rows (now op_table_cases.h) lived here.
// clang-format off

namespace tg::op_test {
namespace {

using enum DType;
std::string case_name(const ::testing::TestParamInfo<OpCase>& info) { return info.param.name; }

class OpForward : public ::testing::TestWithParam<OpCase> {};
class OpGradient : public ::testing::TestWithParam<OpCase> {};

TEST(OpTable, NamesAreUnique) {
  std::set<std::string> seen;
  for (const OpCase& c : op_cases()) EXPECT_TRUE(seen.insert(c.name).second) << c.name;
}

// ---- forward: cpu vs ref -----------------------------------------------------------------------

TEST_P(OpForward, CpuMatchesRef) {
  const OpCase& row = GetParam();
  const Traced t = trace_fn(row.inputs, row.build, row.training);
  const ir::Node& out = t.graph.node(t.out);
  ASSERT_EQ(shape_and_dtype(out.shape, out.dtype), shape_and_dtype(row.shape, row.dtype)) << t.graph.to_string();
  ASSERT_NE(out.op, ir::Op::kInput) << "the case must compute something, not return its input";

  const std::vector<HostTensor> feeds = make_feeds(row.inputs, t, seed_of(row.name));
  auto ref = backend::make_ref_backend();
  auto cpu = backend::make_cpu_backend();
  const std::vector<double> want = run_graph(*ref, t.graph, t.inputs, feeds).at(0);
  const std::vector<double> got = run_graph(*cpu, t.graph, t.inputs, feeds).at(0);
  for (double v : want) ASSERT_TRUE(std::isfinite(v)) << "input range reaches a singularity";
  EXPECT_TRUE(all_close(got, want, row.tol)) << "graph:\n" << t.graph.to_string();
}

// ---- gradients: autograd vs finite differences (ref, double), then cpu vs ref ------------------

TEST_P(OpGradient, MatchesFiniteDifferencesAndCpu) {
  const OpCase& row = GetParam();
  Rng weight_rng(seed_of(row.name) ^ 0x5eedull);
  // L = sum(f(x) * w) with a fixed random w: every output element gets its own weight, so
  // a gradient routed to the wrong element cannot cancel out.
  Traced t = trace_fn(row.inputs, [&](const Ts& x) {
    Tensor y = row.build(x);
    if (y.dtype() != kF32) throw std::logic_error("gradient rows need an f32 output");
    std::vector<float> w(static_cast<size_t>(y.numel()));
    for (float& v : w) v = static_cast<float>(weight_rng.uniform(-1.5, 1.5));
    return sum(y * constant(std::span<const float>(w), y.shape()));
  }, row.training);
  const std::vector<HostTensor> feeds = make_feeds(row.inputs, t, seed_of(row.name));
  const ir::Graph forward = t.graph;  // outputs = {L}

  std::vector<size_t> wrt_index;  // which row inputs are differentiated (the f32 ones)
  std::vector<int32_t> wrt;
  for (size_t i = 0; i < row.inputs.size(); ++i)
    if (row.inputs[i].dtype == kF32) {
      wrt_index.push_back(i);
      wrt.push_back(t.inputs[i]);
    }
  ASSERT_FALSE(wrt.empty());
  // Outside any trace, as compile_train does it.
  const std::vector<int32_t> grads = autograd::append_gradients(t.graph, t.out, wrt);
  ASSERT_EQ(grads.size(), wrt.size());
  t.graph.outputs = {t.out};
  for (int32_t g : grads)
    if (g >= 0) t.graph.outputs.push_back(g);

  auto ref = backend::make_ref_backend();
  RefRun analytic(*ref, t.graph, t.inputs, feeds);
  for (size_t j = 0; j < wrt.size() && row.grad == kGrad; ++j) {
    const size_t input = wrt_index[j];
    const std::vector<double> numeric = finite_differences(*ref, forward, t.out, t.inputs, feeds, input);
    // A leaf the loss does not depend on (-1) has gradient zero.
    const std::vector<double> exact =
        grads[j] >= 0 ? analytic.exe->value_f64(grads[j]) : std::vector<double>(numeric.size(), 0.0);
    EXPECT_TRUE(matches_fd(exact, numeric)) << "d/dx" << input << "\ngraph:\n" << t.graph.to_string();
  }

  // The backward graph is just more ops: the cpu backend must run it like the ref does.
  const auto want = run_graph(*ref, t.graph, t.inputs, feeds);
  auto cpu = backend::make_cpu_backend();
  const auto got = run_graph(*cpu, t.graph, t.inputs, feeds);
  const Tol grad_tol{std::max(row.tol.rel, 1e-5), std::max(row.tol.abs, 2e-6)};
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_TRUE(all_close(got[i], want[i], grad_tol)) << "output %" << t.graph.outputs[i] << " (0 is the loss)";
}

// ---- the same rows on the GPU (skipped without one) -------------------------------------------

TEST_P(OpForward, CudaMatchesRef) {
  if (const std::string why = tg::testing::gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  const OpCase& row = GetParam();
  const Traced t = trace_fn(row.inputs, row.build, row.training);
  const std::vector<HostTensor> feeds = make_feeds(row.inputs, t, seed_of(row.name));
  auto ref = backend::make_ref_backend();
  auto gpu = backend::make_cuda_backend(0);
  const std::vector<double> want = run_graph(*ref, t.graph, t.inputs, feeds).at(0);
  std::vector<double> got;
  try {
    got = run_graph(*gpu, t.graph, t.inputs, feeds).at(0);
  } catch (const DeviceError& e) {
    if (std::string(e.what()).find("not implemented on the CUDA backend yet") == std::string::npos) throw;
    GTEST_SKIP() << e.what();
  }
  EXPECT_TRUE(all_close(got, want, row.tol)) << "graph:\n" << t.graph.to_string();
}

TEST_P(OpGradient, CudaMatchesRef) {
  if (const std::string why = tg::testing::gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  const OpCase& row = GetParam();
  Rng weight_rng(seed_of(row.name) ^ 0x5eedull);
  Traced t = trace_fn(row.inputs, [&](const Ts& x) {
    Tensor y = row.build(x);
    std::vector<float> w(static_cast<size_t>(y.numel()));
    for (float& v : w) v = static_cast<float>(weight_rng.uniform(-1.5, 1.5));
    return sum(y * constant(std::span<const float>(w), y.shape()));
  }, row.training);
  const std::vector<HostTensor> feeds = make_feeds(row.inputs, t, seed_of(row.name));
  std::vector<int32_t> wrt;
  for (size_t i = 0; i < row.inputs.size(); ++i)
    if (row.inputs[i].dtype == kF32) wrt.push_back(t.inputs[i]);
  const std::vector<int32_t> grads = autograd::append_gradients(t.graph, t.out, wrt);
  t.graph.outputs = {t.out};
  for (int32_t g : grads)
    if (g >= 0) t.graph.outputs.push_back(g);
  auto ref = backend::make_ref_backend();
  auto gpu = backend::make_cuda_backend(0);
  const auto want = run_graph(*ref, t.graph, t.inputs, feeds);
  std::vector<std::vector<double>> got;
  try {
    got = run_graph(*gpu, t.graph, t.inputs, feeds);
  } catch (const DeviceError& e) {
    if (std::string(e.what()).find("not implemented on the CUDA backend yet") == std::string::npos) throw;
    GTEST_SKIP() << e.what();
  }
  const Tol grad_tol{std::max(row.tol.rel, 1e-5), std::max(row.tol.abs, 2e-6)};
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_TRUE(all_close(got[i], want[i], grad_tol)) << "output %" << t.graph.outputs[i] << " (0 is the loss)";
}

INSTANTIATE_TEST_SUITE_P(Table, OpForward, ::testing::ValuesIn(op_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Table, OpGradient, ::testing::ValuesIn(grad_cases()), case_name);

// ---- every op is reached ----------------------------------------------------------------------

// Guards the claim in the header: the forward graphs of the rows plus the backward graphs
// of the gradient rows contain every op of ops.def except the leaves only the runtime
// creates (param, state) and the collectives, which need ranks (tests/distributed). Unslice,
// for instance, only appears as slice's VJP.
TEST(OpTable, CoversEveryOp) {
  std::set<ir::Op> seen;
  for (const OpCase& row : op_cases()) {
    Traced t = trace_fn(row.inputs, [&](const Ts& x) {
      Tensor y = row.build(x);
      return row.grad != kNoGrad ? sum(y) : y;
    }, row.training);
    if (row.grad != kNoGrad) {
      std::vector<int32_t> wrt;
      for (size_t i = 0; i < row.inputs.size(); ++i)
        if (row.inputs[i].dtype == kF32) wrt.push_back(t.inputs[i]);
      autograd::append_gradients(t.graph, t.out, wrt);
    }
    for (const ir::Node& n : t.graph.nodes()) seen.insert(n.op);
  }
  std::vector<ir::Op> all = {
#define TG_LEAF(Name, str) ir::Op::k##Name,
#define TG_UNARY(Name, str, dtypes, expr) ir::Op::k##Name,
#define TG_BINARY(Name, str, dtypes, expr) ir::Op::k##Name,
#define TG_COMPARE(Name, str, dtypes, expr) ir::Op::k##Name,
#define TG_OTHER(Name, str, arity) ir::Op::k##Name,
#include "ir/ops.def"
  };
  for (ir::Op op : all) {
    if (op == ir::Op::kParam || op == ir::Op::kState || ir::is_collective(op)) continue;
    EXPECT_TRUE(seen.count(op)) << "no row reaches op " << ir::op_name(op);
  }
}

// ---- hand-computed expectations (pin the oracle itself) ----------------------------------------

// cf, ci and expect_known live in op_harness.h (shared with nn_op_table_test.cc).

TEST(KnownValues, Reductions) {
  auto m = [] { return cf({1, 2, 3, 4, 5, 6}, {2, 3}); };
  expect_known([&] { return sum(m(), {1}); }, {2}, kF32, {6, 15});
  expect_known([&] { return sum(m(), {0}); }, {3}, kF32, {5, 7, 9});
  expect_known([&] { return sum(m(), {-1}, true); }, {2, 1}, kF32, {6, 15});
  expect_known([&] { return sum(m()); }, {}, kF32, {21});
  expect_known([&] { return mean(m(), {0}); }, {3}, kF32, {2.5, 3.5, 4.5});
  auto n = [] { return cf({1, 5, 3, -4, -2, -6}, {2, 3}); };
  expect_known([&] { return max(n(), {1}); }, {2}, kF32, {5, -2});
  expect_known([&] { return min(n(), {1}); }, {2}, kF32, {1, -6});
  expect_known([&] { return max(n(), {0}, true); }, {1, 3}, kF32, {1, 5, 3});
  expect_known([&] { return sum(ci({1, 2, 3, 4}, {2, 2}), {0}); }, {2}, kI32, {4, 6});
}

TEST(KnownValues, ArgmaxTiesReturnFirstIndex) {
  expect_known([] { return argmax(cf({1, 3, 3, 2, 2, 1, 0, 0, 0}, {3, 3}), 1); }, {3}, kI32, {1, 0, 0});
  expect_known([] { return argmax(cf({1, 3, 1, 3}, {2, 2}), 0); }, {2}, kI32, {0, 0});
  expect_known([] { return argmax(cf({0, 5, 5, 1}, {2, 2})); }, {}, kI32, {1});
  expect_known([] { return argmax(ci({-1, 4, 4, -7}, {4}), 0, true); }, {1}, kI32, {1});
}

TEST(KnownValues, Cumsum) {
  auto m = [] { return cf({1, 2, 3, 4, 5, 6}, {2, 3}); };
  expect_known([&] { return cumsum(m(), 1); }, {2, 3}, kF32, {1, 3, 6, 4, 9, 15});
  expect_known([&] { return cumsum(m(), 0); }, {2, 3}, kF32, {1, 2, 3, 5, 7, 9});
  expect_known([&] { return cumsum(m(), -1, true); }, {2, 3}, kF32, {6, 5, 3, 15, 11, 6});
  expect_known([] { return cumsum(ci({3, -1, 0, 7}, {4}), 0); }, {4}, kI32, {3, 2, 2, 9});
}

TEST(KnownValues, Matmul) {
  expect_known([] { return matmul(cf({1, 2, 3, 4}, {2, 2}), cf({5, 6, 7, 8}, {2, 2})); }, {2, 2}, kF32, {19, 22, 43, 50});
  expect_known([] { return matmul(cf({1, 2, 3}, {3}), cf({4, 5, 6}, {3})); }, {}, kF32, {32});
  // [1, 2] @ batch {[1; 1], [2; -1]} → {[3], [0]}.
  expect_known([] { return matmul(cf({1, 2}, {1, 2}), cf({1, 1, 2, -1}, {2, 2, 1})); }, {2, 1, 1}, kF32, {3, 0});
  // Aᵀ B with A = [[1, 2], [3, 4]]: [[1, 3], [2, 4]] @ [[1, 0], [0, 1]].
  expect_known([] { return matmul(transpose(cf({1, 2, 3, 4}, {2, 2})), cf({1, 0, 0, 1}, {2, 2})); }, {2, 2}, kF32,
               {1, 3, 2, 4});
}

TEST(KnownValues, SliceConcatShape) {
  expect_known([] { return slice(arange(0, 10), 0, 1, 8, 2); }, {4}, kI32, {1, 3, 5, 7});
  expect_known([] { return slice(arange(0, 10), 0, -3, 10); }, {3}, kI32, {7, 8, 9});
  expect_known([] { return slice(reshape(arange(0, 10), {2, 5}), 1, 0, 5, 2); }, {2, 3}, kI32, {0, 2, 4, 5, 7, 9});
  expect_known([] { return concat({cf({1, 2}, {1, 2}), cf({3, 4, 5, 6}, {2, 2})}, 0); }, {3, 2}, kF32,
               {1, 2, 3, 4, 5, 6});
  expect_known([] { return concat({cf({1, 2}, {2, 1}), cf({3, 4, 5, 6}, {2, 2})}, -1); }, {2, 3}, kF32,
               {1, 3, 4, 2, 5, 6});
  expect_known([] { return transpose(cf({1, 2, 3, 4, 5, 6}, {2, 3})); }, {3, 2}, kF32, {1, 4, 2, 5, 3, 6});
  expect_known([] { return permute(reshape(arange(0, 6), {1, 2, 3}), {2, 0, 1}); }, {3, 1, 2}, kI32, {0, 3, 1, 4, 2, 5});
  expect_known([] { return broadcast_to(cf({1, 2}, {2, 1}), {2, 3}); }, {2, 3}, kF32, {1, 1, 1, 2, 2, 2});
  expect_known([] { return reshape(arange(0, 6), {-1, 3}); }, {2, 3}, kI32, {0, 1, 2, 3, 4, 5});
  expect_known([] { return squeeze(unsqueeze(arange(0, 3), 0), 0) * 2; }, {3}, kI32, {0, 2, 4});
}

TEST(KnownValues, WhereCastCompare) {
  expect_known([] { return where(cast(ci({1, 0, 1}, {3}), kBool), cf({1, 2, 3}, {3}), 10); }, {3}, kF32, {1, 10, 3});
  // f32 → i32 truncates toward zero.
  expect_known([] { return cast(cf({-1.7f, -0.5f, 0.5f, 1.7f, 2.0f, -2.9f}, {6}), kI32); }, {6}, kI32,
               {-1, 0, 0, 1, 2, -2});
  expect_known([] { return cast(cf({0, -0.5f, 2}, {3}), kBool); }, {3}, kBool, {0, 1, 1});
  expect_known([] { return cast(ci({-3, 0, 7}, {3}), kF32); }, {3}, kF32, {-3, 0, 7});
  auto a = [] { return cf({1, 2, 3}, {3}); };
  auto b = [] { return cf({2, 2, 2}, {3}); };
  expect_known([&] { return a() < b(); }, {3}, kBool, {1, 0, 0});
  expect_known([&] { return a() <= b(); }, {3}, kBool, {1, 1, 0});
  expect_known([&] { return a() > b(); }, {3}, kBool, {0, 0, 1});
  expect_known([&] { return a() >= b(); }, {3}, kBool, {0, 1, 1});
  expect_known([&] { return eq(a(), b()); }, {3}, kBool, {0, 1, 0});
  expect_known([&] { return ne(a(), b()); }, {3}, kBool, {1, 0, 1});
  auto p = [] { return cast(ci({1, 1, 0, 0}, {4}), kBool); };
  auto q = [] { return cast(ci({1, 0, 1, 0}, {4}), kBool); };
  expect_known([&] { return p() && q(); }, {4}, kBool, {1, 0, 0, 0});
  expect_known([&] { return p() || q(); }, {4}, kBool, {1, 1, 1, 0});
  expect_known([&] { return !p(); }, {4}, kBool, {0, 0, 1, 1});
}

TEST(KnownValues, ElementwiseMath) {
  auto x = [] { return cf({1, 2, 3}, {3}); };
  expect_known([&] { return 2.0f * x() + 1; }, {3}, kF32, {3, 5, 7});
  expect_known([&] { return 1 - x(); }, {3}, kF32, {0, -1, -2});
  expect_known([&] { return x() / 3; }, {3}, kF32, {1.0 / 3, 2.0 / 3, 1}, 1e-7);
  expect_known([&] { return -x(); }, {3}, kF32, {-1, -2, -3});
  expect_known([] { return ci({1, 2, 3}, {3}) / 2; }, {3}, kF32, {0.5, 1, 1.5});
  expect_known([] { return cf({1, 2}, {2, 1}) + cf({10, 20, 30}, {3}); }, {2, 3}, kF32, {11, 21, 31, 12, 22, 32});
  expect_known([] { return abs(cf({-2, 0, 3}, {3})); }, {3}, kF32, {2, 0, 3});
  expect_known([] { return sign(cf({-3, 0, 2}, {3})); }, {3}, kF32, {-1, 0, 1});
  expect_known([] { return relu(cf({-1, 0, 2}, {3})); }, {3}, kF32, {0, 0, 2});
  expect_known([] { return maximum(cf({1, 5}, {2}), cf({3, 2}, {2})); }, {2}, kF32, {3, 5});
  expect_known([] { return minimum(cf({1, 5}, {2}), cf({3, 2}, {2})); }, {2}, kF32, {1, 2});
  expect_known([] { return pow(cf({2, 9}, {2}), cf({3, 0.5f}, {2})); }, {2}, kF32, {8, 3}, 1e-6);
  expect_known([] { return sqrt(cf({4, 0.25f}, {2})); }, {2}, kF32, {2, 0.5});
  expect_known([] { return rsqrt(cf({4, 0.25f}, {2})); }, {2}, kF32, {0.5, 2}, 1e-6);
  expect_known([] { return reciprocal(cf({4, -0.5f}, {2})); }, {2}, kF32, {0.25, -2});
  expect_known([] { return exp(cf({0, 1}, {2})); }, {2}, kF32, {1, 2.718281828459045}, 1e-6);
  expect_known([] { return log(cf({1, 2.718281828f}, {2})); }, {2}, kF32, {0, 1}, 1e-6);
  expect_known([] { return log1p(cf({0, 1}, {2})); }, {2}, kF32, {0, 0.6931471805599453}, 1e-6);
  expect_known([] { return sigmoid(cf({0, 2}, {2})); }, {2}, kF32, {0.5, 0.8807970779778823}, 1e-6);
  expect_known([] { return tanh(cf({0, 1}, {2})); }, {2}, kF32, {0, 0.7615941559557649}, 1e-6);
  expect_known([] { return erf(cf({0, 1}, {2})); }, {2}, kF32, {0, 0.8427007929497149}, 1e-6);
  expect_known([] { return sin(cf({0, 1.5707963267948966f}, {2})); }, {2}, kF32, {0, 1}, 1e-6);
  expect_known([] { return cos(cf({0, 3.141592653589793f}, {2})); }, {2}, kF32, {1, -1}, 1e-6);
}

TEST(KnownValues, Leaves) {
  expect_known([] { return arange(0, 5); }, {5}, kI32, {0, 1, 2, 3, 4});
  expect_known([] { return arange(1, 2, 0.25, kF32); }, {4}, kF32, {1, 1.25, 1.5, 1.75});
  expect_known([] { return arange(5, 0, -2); }, {3}, kI32, {5, 3, 1});
  expect_known([] { return full({2, 2}, 1.5); }, {2, 2}, kF32, {1.5, 1.5, 1.5, 1.5});
  expect_known([] { return zeros({2}, kI32) + ones({2}, kI32); }, {2}, kI32, {1, 1});
}

// ---- gradients with hand-computed values ---------------------------------------------------------

// grads_on and expect_grads live in op_harness.h.

TEST(KnownGradients, Conventions) {
  // sum(x * x) → 2x.
  expect_grads({{3}}, {{1, -2, 0.5}}, FN(sum(x[0] * x[0])), {{2, -4, 1}});
  // max over an axis with a tie splits the gradient evenly among the tied elements.
  expect_grads({{2, 3}}, {{1, 3, 3, 2, 0, 1}}, FN(sum(max(x[0], {1}))), {{0, 0.5, 0.5, 1, 0, 0}});
  // maximum/minimum with a tie: half to each side.
  expect_grads({{2}, {2}}, {{1, 2}, {1, 3}}, FN(sum(maximum(x[0], x[1]))), {{0.5, 0}, {0.5, 1}});
  expect_grads({{2}, {2}}, {{1, 2}, {1, 3}}, FN(sum(minimum(x[0], x[1]))), {{0.5, 1}, {0.5, 0}});
  // relu and abs have gradient 0 at 0 (PyTorch's choice).
  expect_grads({{3}}, {{0, 2, -1}}, FN(sum(relu(x[0]))), {{0, 1, 0}});
  expect_grads({{3}}, {{0, 2, -1}}, FN(sum(abs(x[0]))), {{0, 1, -1}});
  // sum(A @ B): dA = 1 Bᵀ, dB = Aᵀ 1.
  expect_grads({{2, 2}, {2, 2}}, {{1, 2, 3, 4}, {5, 6, 7, 8}}, FN(sum(matmul(x[0], x[1]))),
               {{11, 15, 11, 15}, {4, 4, 6, 6}});
  // A slice's gradient is scattered back into zeros.
  expect_grads({{6}}, {{9, 9, 9, 9, 9, 9}}, FN(sum(slice(x[0], 0, 1, 6, 2) * cf({1, 2, 3}, {3}))),
               {{0, 1, 0, 2, 0, 3}});
  // A broadcast's gradient is summed over the broadcast axes.
  expect_grads({{3, 1}}, {{1, 2, 3}}, FN(sum(broadcast_to(x[0], {3, 4}))), {{4, 4, 4}});
  // d/db (a / b) = -a / b².
  expect_grads({{1}, {1}}, {{3}, {2}}, FN(sum(x[0] / x[1])), {{0.5}, {-0.75}});
}

// ---- accumulation over several consumers ---------------------------------------------------------

/// Checks autograd of `loss` on ref against finite differences for every input and the cpu
/// backend against ref; returns the ref gradients (double) for further hand checks.
std::vector<std::vector<double>> check_loss_gradients(const std::vector<InputSpec>& specs, const BuildFn& loss,
                                                      uint64_t seed) {
  const std::vector<HostTensor> feeds = make_inputs(specs, seed);
  Traced t = trace_fn(specs, loss);
  const ir::Graph forward = t.graph;
  const std::vector<int32_t> grads = autograd::append_gradients(t.graph, t.out, t.inputs);
  t.graph.outputs.clear();
  for (int32_t g : grads) {
    EXPECT_GE(g, 0);
    if (g < 0) return {};
    t.graph.outputs.push_back(g);
  }
  auto ref = backend::make_ref_backend();
  RefRun analytic(*ref, t.graph, t.inputs, feeds);
  std::vector<std::vector<double>> out;
  for (size_t i = 0; i < grads.size(); ++i) {
    out.push_back(analytic.exe->value_f64(grads[i]));
    EXPECT_TRUE(matches_fd(out.back(), finite_differences(*ref, forward, t.out, t.inputs, feeds, i))) << "d/dx" << i;
  }
  auto cpu = backend::make_cpu_backend();
  const auto want = run_graph(*ref, t.graph, t.inputs, feeds);
  const auto got = run_graph(*cpu, t.graph, t.inputs, feeds);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(all_close(got[i], want[i], {1e-5, 2e-6})) << "d/dx" << i;
  return out;
}

TEST(GradAccumulation, SameInputUsedThreeTimes) {
  const std::vector<InputSpec> specs = {uni({2, 3}, -2, 2)};
  const std::vector<HostTensor> feeds = make_inputs(specs, 11);
  static const std::vector<float> w = {0.5f, -1.0f, 1.5f, 2.0f, -0.25f, 1.0f};
  // x feeds mul (twice), sin and the scalar product: d/dx = w (2x + cos x + 2).
  const auto grads = check_loss_gradients(
      specs, FN(sum((x[0] * x[0] + sin(x[0]) + 2.0 * x[0]) * cf(w, {2, 3}))), 11);
  ASSERT_EQ(grads.size(), 1u);
  std::vector<double> want;
  for (size_t k = 0; k < w.size(); ++k) {
    const double v = feeds[0].values[k];
    want.push_back(w[k] * (2 * v + std::cos(v) + 2));
  }
  EXPECT_TRUE(all_close(grads[0], want, {1e-12, 1e-12}));
}

TEST(GradAccumulation, ConsumersThroughBroadcastMatmulAndReduce) {
  // x [3] reaches the loss through a broadcast add, a matrix-vector product, a reduction
  // and a gather-like slice; y [2, 3] through the add and the product.
  check_loss_gradients({uni({3}), uni({2, 3})}, [](const Ts& x) {
    Tensor a = sum((x[0] + x[1]) * cf({1, -2, 3, 0.5f, 1.5f, -1}, {2, 3}));
    Tensor b = sum(matmul(x[1], x[0]) * cf({2, -1}, {2}));
    Tensor c = sum(x[0]) * 3 + sum(slice(x[0], 0, 0, 3, 2) * x[0].size(0));
    return a + b + c;
  }, 12);
}

// ---- stop_gradient and other gradient barriers ---------------------------------------------------

TEST(StopGradient, BlocksOnlyItsOwnPath) {
  // L = sum(stop_gradient(x) * x): the blocked factor counts as a constant, so dL/dx = x
  // (finite differences would give 2x).
  const std::vector<double> xv = {0.5, -1.25, 2};
  expect_grads({{3}}, {xv}, FN(sum(stop_gradient(x[0]) * x[0])), {xv});
  // L = sum(exp(stop_gradient(x)) * x): dL/dx = exp(x).
  expect_grads({{3}}, {xv}, FN(sum(exp(stop_gradient(x[0])) * x[0])),
               {{std::exp(0.5), std::exp(-1.25), std::exp(2.0)}}, 2e-6);
}

TEST(StopGradient, NoGradientReachesABlockedLeaf) {
  for (const BuildFn& loss : std::vector<BuildFn>{
           FN(sum(stop_gradient(x[0] * x[0]) * cf({1, 2, 3}, {3}))),
           FN(sum(stop_gradient(exp(x[0])))),
           // comparisons, casts to integers and argmax are barriers too
           FN(sum(cast(x[0] > 0, kF32) * 2)),
           FN(sum(cast(cast(x[0] * 10, kI32), kF32))),
           FN(sum(cast(argmax(x[0]), kF32))),
       }) {
    Traced t = trace_fn({uni({3})}, loss);
    const std::vector<int32_t> grads = autograd::append_gradients(t.graph, t.out, t.inputs);
    ASSERT_EQ(grads.size(), 1u);
    EXPECT_EQ(grads[0], -1) << t.graph.to_string();
  }
  // An i32 input never receives a gradient either.
  Traced t = trace_fn({ints({3})}, FN(sum(cast(x[0], kF32) * 2.5)));
  EXPECT_EQ(autograd::append_gradients(t.graph, t.out, t.inputs).at(0), -1);
}

}  // namespace
}  // namespace tg::op_test
