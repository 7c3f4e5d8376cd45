// Focused tests of the CPU backend's own machinery: views (0-stride broadcasts, strided
// slices/permutes, aliasing reshapes, transposed matmul operands), reductions and their
// chunked/transposed paths, argmax ties, cast edge cases, and update ordering. Each graph is
// built by hand and checked against numbers computed independently here; the op-by-op
// cross-check against the reference backend lives elsewhere.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "ir/graph.h"
#include "tensorgrad/errors.h"

namespace tg {
namespace {

using backend::Executable;
using ir::Graph;
using ir::Node;
using ir::Op;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

/// Appends a node; leaves need their shape and dtype, other ops get them inferred.
int32_t add(Graph& g, Op op, std::vector<int32_t> inputs, ir::Attrs attrs = {}, Shape shape = {},
            DType dtype = DType::kF32, std::string name = "") {
  Node n;
  n.op = op;
  n.dtype = dtype;
  n.shape = std::move(shape);
  n.inputs = std::move(inputs);
  n.attrs = std::move(attrs);
  n.name = std::move(name);
  return g.add(std::move(n));
}
int32_t leaf(Graph& g, Op op, DType dtype, Shape shape, std::string name) {
  return add(g, op, {}, {}, std::move(shape), dtype, std::move(name));
}
int32_t input(Graph& g, DType dtype, Shape shape) {
  return leaf(g, Op::kInput, dtype, std::move(shape), "x");
}
int32_t constant(Graph& g, DType dtype, Shape shape, std::vector<double> values) {
  ir::Attrs at;
  at.values = std::move(values);
  return add(g, Op::kConstant, {}, std::move(at), std::move(shape), dtype);
}
ir::Attrs cast_to(DType dtype) {
  ir::Attrs at;
  at.dtype = dtype;
  return at;
}
ir::Attrs axes(std::vector<int64_t> a, bool keepdim = false) {
  ir::Attrs at;
  at.axes = std::move(a);
  at.keepdim = keepdim;
  return at;
}
ir::Attrs slice_attrs(int64_t axis, int64_t start, int64_t step) {
  ir::Attrs at;
  at.axes = {axis};
  at.values = {static_cast<double>(start), static_cast<double>(step)};
  return at;
}

std::vector<float> iota(int64_t n, float start = 0, float step = 1) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = start + step * static_cast<float>(i);
  return v;
}

struct Runner {
  std::unique_ptr<backend::Backend> backend = backend::make_cpu_backend();
  std::unique_ptr<Executable> exe;
  const Graph* graph = nullptr;

  /// Prepares `g`, feeds each (input node, host data) pair and executes once.
  void run(const Graph& g, const std::vector<std::pair<int32_t, const void*>>& inputs) {
    graph = &g;
    exe = backend->prepare(g, {});
    for (const auto& [id, data] : inputs) exe->set_input(id, data);
    exe->execute();
  }
  template <class T>
  std::vector<T> read(int32_t node) {
    std::vector<T> out(static_cast<size_t>(graph->node(node).numel()));
    exe->read_output(node, out.data());
    return out;
  }
};

void expect_near_all(const std::vector<float>& got, const std::vector<double>& want, double rel = 1e-5) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], rel * (1 + std::abs(want[i]))) << "at " << i;
}

TEST(CpuBackend, BroadcastElementwiseReadsZeroStrides) {
  Graph g;
  const int32_t x = input(g, DType::kF32, {2, 1, 3});
  const int32_t y = input(g, DType::kF32, {4, 1});
  const int32_t bx = add(g, Op::kBroadcastTo, {x}, {}, {2, 4, 3});
  const int32_t by = add(g, Op::kBroadcastTo, {y}, {}, {2, 4, 3});
  const int32_t sum = add(g, Op::kAdd, {bx, by});
  const int32_t prod = add(g, Op::kMul, {bx, by});
  const int32_t half = constant(g, DType::kF32, {2, 4, 3}, {2.5});  // read at stride 0
  const int32_t scaled = add(g, Op::kMul, {sum, half});
  const int32_t red = add(g, Op::kSum, {bx}, axes({1}));  // a non-elementwise consumer of bx
  g.outputs = {sum, prod, scaled, bx, red};
  Runner r;
  const std::vector<float> xv = {1, 2, 3, 4, 5, 6}, yv = {10, 20, 30, 40};
  r.run(g, {{x, xv.data()}, {y, yv.data()}});
  std::vector<double> want_sum, want_prod, want_scaled, want_bx, want_red(6, 0.0);
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 4; ++b)
      for (int c3 = 0; c3 < 3; ++c3) {
        const double xe = xv[a * 3 + c3], ye = yv[b];
        want_sum.push_back(xe + ye);
        want_prod.push_back(xe * ye);
        want_scaled.push_back((xe + ye) * 2.5);
        want_bx.push_back(xe);
        want_red[a * 3 + c3] += xe;
      }
  expect_near_all(r.read<float>(sum), want_sum);
  expect_near_all(r.read<float>(prod), want_prod);
  expect_near_all(r.read<float>(scaled), want_scaled);
  expect_near_all(r.read<float>(bx), want_bx);
  expect_near_all(r.read<float>(red), want_red);
}

TEST(CpuBackend, LargeBroadcastRunsThreadedAndMatchesLoop) {
  Graph g;
  const int64_t rows = 301, cols = 517;  // odd sizes: chunks end mid-row
  const int32_t x = input(g, DType::kF32, {rows, cols});
  const int32_t y = input(g, DType::kF32, {cols});
  const int32_t by = add(g, Op::kBroadcastTo, {y}, {}, {rows, cols});
  const int32_t d = add(g, Op::kSub, {x, by});
  const int32_t e = add(g, Op::kTanh, {d});
  g.outputs = {e};
  Runner r;
  const std::vector<float> xv = iota(rows * cols, -3.0f, 1e-4f), yv = iota(cols, 1.0f, -0.003f);
  r.run(g, {{x, xv.data()}, {y, yv.data()}});
  std::vector<double> want;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      want.push_back(std::tanh(static_cast<double>(xv[i * cols + j]) - yv[j]));
  expect_near_all(r.read<float>(e), want, 1e-5);
}

TEST(CpuBackend, Int32ArithmeticWraps) {
  Graph g;
  const int32_t a = input(g, DType::kI32, {3});
  const int32_t b = input(g, DType::kI32, {3});
  const int32_t s = add(g, Op::kAdd, {a, b});
  const int32_t m = add(g, Op::kMul, {a, b});
  const int32_t n = add(g, Op::kNeg, {a});
  const int32_t ab = add(g, Op::kAbs, {a});
  g.outputs = {s, m, n, ab};
  Runner r;
  const int32_t big = std::numeric_limits<int32_t>::max(), small = std::numeric_limits<int32_t>::min();
  const std::vector<int32_t> av = {big, small, 7}, bv = {1, -1, 3};
  r.run(g, {{a, av.data()}, {b, bv.data()}});
  EXPECT_EQ(r.read<int32_t>(s), (std::vector<int32_t>{small, big, 10}));
  EXPECT_EQ(r.read<int32_t>(m), (std::vector<int32_t>{big, small, 21}));  // MIN * -1 wraps to MIN
  EXPECT_EQ(r.read<int32_t>(n), (std::vector<int32_t>{-big, small, -7}));
  EXPECT_EQ(r.read<int32_t>(ab), (std::vector<int32_t>{big, small, 7}));
}

TEST(CpuBackend, ReductionsOverAxesWithKeepdim) {
  Graph g;
  const int32_t x = input(g, DType::kF32, {2, 3, 4});
  const int32_t s1 = add(g, Op::kSum, {x}, axes({1}));
  const int32_t s1k = add(g, Op::kSum, {x}, axes({1}, true));
  const int32_t s02 = add(g, Op::kSum, {x}, axes({0, 2}));  // not one run: transposed first
  const int32_t sall = add(g, Op::kSum, {x}, axes({0, 1, 2}, true));
  const int32_t mx = add(g, Op::kMax, {x}, axes({2}));
  const int32_t mn = add(g, Op::kMin, {x}, axes({0, 1}));
  g.outputs = {s1, s1k, s02, sall, mx, mn};
  Runner r;
  std::vector<float> xv(24);
  for (int i = 0; i < 24; ++i) xv[i] = static_cast<float>((i * 7) % 11) - 5.0f;
  r.run(g, {{x, xv.data()}});
  auto at = [&](int i, int j, int k) { return static_cast<double>(xv[i * 12 + j * 4 + k]); };
  std::vector<double> w1(8, 0), w02(3, 0), wall(1, 0), wmx(6, -1e9), wmn(4, 1e9);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) {
        w1[i * 4 + k] += at(i, j, k);
        w02[j] += at(i, j, k);
        wall[0] += at(i, j, k);
        wmx[i * 3 + j] = std::max(wmx[i * 3 + j], at(i, j, k));
        wmn[k] = std::min(wmn[k], at(i, j, k));
      }
  EXPECT_EQ(g.node(s1k).shape, (Shape{2, 1, 4}));
  EXPECT_EQ(g.node(sall).shape, (Shape{1, 1, 1}));
  expect_near_all(r.read<float>(s1), w1);
  expect_near_all(r.read<float>(s1k), w1);
  expect_near_all(r.read<float>(s02), w02);
  expect_near_all(r.read<float>(sall), wall);
  expect_near_all(r.read<float>(mx), wmx);
  expect_near_all(r.read<float>(mn), wmn);
}

TEST(CpuBackend, MaxMinSkipNaNAndInt32SumWraps) {
  Graph g;
  const int32_t x = input(g, DType::kF32, {2, 3});
  const int32_t mx = add(g, Op::kMax, {x}, axes({1}));
  const int32_t mn = add(g, Op::kMin, {x}, axes({0}));
  const int32_t i = input(g, DType::kI32, {3});
  const int32_t si = add(g, Op::kSum, {i}, axes({0}));
  g.outputs = {mx, mn, si};
  Runner r;
  const std::vector<float> xv = {kNaN, 1, -2, 4, kNaN, kNaN};
  const std::vector<int32_t> iv = {std::numeric_limits<int32_t>::max(), 2, 3};
  r.run(g, {{x, xv.data()}, {i, iv.data()}});
  EXPECT_EQ(r.read<float>(mx), (std::vector<float>{1, 4}));
  EXPECT_EQ(r.read<float>(mn), (std::vector<float>{4, 1, -2}));
  EXPECT_EQ(r.read<int32_t>(si), (std::vector<int32_t>{std::numeric_limits<int32_t>::min() + 4}));
}

TEST(CpuBackend, LargeSumsStayAccurate) {
  Graph g;
  const int64_t n = 1'000'000;
  const int32_t x = input(g, DType::kF32, {n});
  const int32_t full = add(g, Op::kSum, {x}, axes({0}));
  const int32_t y = add(g, Op::kReshape, {x}, {}, {2000, 500});
  const int32_t cols = add(g, Op::kSum, {y}, axes({0}));  // inner > 1, reduced axis chunked
  const int32_t colmax = add(g, Op::kMax, {y}, axes({0}));
  g.outputs = {full, cols, colmax};
  Runner r;
  std::vector<float> xv(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) xv[i] = 0.1f + static_cast<float>(i % 977) * 1e-3f;
  r.run(g, {{x, xv.data()}});
  double want = 0;
  std::vector<double> want_cols(500, 0), want_max(500, -1e9);
  for (int64_t i = 0; i < n; ++i) {
    want += xv[i];
    want_cols[i % 500] += xv[i];
    want_max[i % 500] = std::max<double>(want_max[i % 500], xv[i]);
  }
  EXPECT_NEAR(r.read<float>(full)[0], want, 1e-6 * want);
  expect_near_all(r.read<float>(cols), want_cols, 1e-6);
  expect_near_all(r.read<float>(colmax), want_max, 0);
}

TEST(CpuBackend, ArgmaxTakesFirstMaximum) {
  Graph g;
  const int32_t x = input(g, DType::kF32, {3, 4});
  const int32_t rows = add(g, Op::kArgmax, {x}, axes({1}));
  const int32_t cols = add(g, Op::kArgmax, {x}, axes({0}, true));
  const int32_t i = input(g, DType::kI32, {5});
  const int32_t ai = add(g, Op::kArgmax, {i}, axes({0}));
  g.outputs = {rows, cols, ai};
  Runner r;
  const std::vector<float> xv = {1,    5, 5, 2,  //
                                 7,    7, 7, 7,  //
                                 kNaN, 3, 9, 9};
  const std::vector<int32_t> iv = {-4, 8, 2, 8, 8};
  r.run(g, {{x, xv.data()}, {i, iv.data()}});
  EXPECT_EQ(g.node(cols).shape, (Shape{1, 4}));
  EXPECT_EQ(r.read<int32_t>(rows), (std::vector<int32_t>{1, 0, 2}));
  EXPECT_EQ(r.read<int32_t>(cols), (std::vector<int32_t>{1, 1, 2, 2}));
  EXPECT_EQ(r.read<int32_t>(ai), (std::vector<int32_t>{1}));
}

TEST(CpuBackend, SliceUnsliceConcatPermute) {
  Graph g;
  const int32_t x = input(g, DType::kF32, {3, 4, 5});
  const int32_t sl = add(g, Op::kSlice, {x}, slice_attrs(1, 1, 2), {3, 2, 5});  // rows 1, 3
  const int32_t sl_exp = add(g, Op::kNeg, {sl});                                // strided read
  const int32_t sl_sum = add(g, Op::kSum, {sl}, axes({2}));                     // needs it dense
  const int32_t un = add(g, Op::kUnslice, {sl}, slice_attrs(1, 1, 2), {3, 4, 5});
  const int32_t cat = add(g, Op::kConcat, {x, sl}, axes({1}));
  const int32_t pm = add(g, Op::kPermute, {x}, axes({2, 0, 1}));
  const int32_t pm_dense = add(g, Op::kReshape, {pm}, {}, {60});  // reshape of a strided view copies
  g.outputs = {sl, sl_exp, sl_sum, un, cat, pm, pm_dense};
  Runner r;
  const std::vector<float> xv = iota(60);
  r.run(g, {{x, xv.data()}});
  auto at = [&](int64_t i, int64_t j, int64_t k) { return static_cast<double>(xv[i * 20 + j * 5 + k]); };
  std::vector<double> w_sl, w_neg, w_sum(6, 0), w_un(60, 0), w_cat, w_pm;
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t k = 0; k < 5; ++k) {
        w_sl.push_back(at(i, 1 + 2 * j, k));
        w_neg.push_back(-at(i, 1 + 2 * j, k));
        w_sum[i * 2 + j] += at(i, 1 + 2 * j, k);
        w_un[i * 20 + (1 + 2 * j) * 5 + k] = at(i, 1 + 2 * j, k);
      }
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 6; ++j)
      for (int64_t k = 0; k < 5; ++k) w_cat.push_back(j < 4 ? at(i, j, k) : at(i, 1 + 2 * (j - 4), k));
  for (int64_t k = 0; k < 5; ++k)
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 4; ++j) w_pm.push_back(at(i, j, k));
  EXPECT_EQ(g.node(pm).shape, (Shape{5, 3, 4}));
  expect_near_all(r.read<float>(sl), w_sl, 0);
  expect_near_all(r.read<float>(sl_exp), w_neg, 0);
  expect_near_all(r.read<float>(sl_sum), w_sum);
  expect_near_all(r.read<float>(un), w_un, 0);
  expect_near_all(r.read<float>(cat), w_cat, 0);
  expect_near_all(r.read<float>(pm), w_pm, 0);
  expect_near_all(r.read<float>(pm_dense), w_pm, 0);
}

TEST(CpuBackend, TransposeCopiedInTilesFeedsReduction) {
  Graph g;
  const int64_t b = 3, m = 70, n = 45;  // several 32×32 tiles, ragged at both edges
  const int32_t x = input(g, DType::kF32, {b, m, n});
  const int32_t t = add(g, Op::kPermute, {x}, axes({0, 2, 1}));
  const int32_t s = add(g, Op::kSum, {t}, axes({2}));  // needs t dense: a tiled copy
  g.outputs = {t, s};
  Runner r;
  const std::vector<float> xv = iota(b * m * n, -50.0f, 0.01f);
  r.run(g, {{x, xv.data()}});
  std::vector<double> want_t, want_s;
  for (int64_t i = 0; i < b; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < m; ++k) {
        want_t.push_back(xv[(i * m + k) * n + j]);
        acc += want_t.back();
      }
      want_s.push_back(acc);
    }
  expect_near_all(r.read<float>(t), want_t, 0);
  expect_near_all(r.read<float>(s), want_s);
}

TEST(CpuBackend, ReshapeAliasesAndBoolOps) {
  Graph g;
  const int32_t x = input(g, DType::kF32, {2, 3});
  const int32_t rs = add(g, Op::kReshape, {x}, {}, {3, 2});
  const int32_t zero = constant(g, DType::kF32, {3, 2}, {0.0});
  const int32_t pos = add(g, Op::kGt, {rs, zero});
  const int32_t neg = add(g, Op::kLogicalNot, {pos});
  const int32_t w = add(g, Op::kWhere, {pos, rs, zero});
  ir::Attrs range;
  range.values = {-1.5, 1.0};  // computed in double, then truncated: -1.5 -0.5 0.5 1.5
  const int32_t ari = add(g, Op::kArange, {}, range, {4}, DType::kI32);
  g.outputs = {rs, pos, neg, w, ari};
  Runner r;
  const std::vector<float> xv = {-1, 2, 0, 3, -4, 5};
  r.run(g, {{x, xv.data()}});
  EXPECT_EQ(r.read<float>(rs), xv);
  EXPECT_EQ(r.read<uint8_t>(pos), (std::vector<uint8_t>{0, 1, 0, 1, 0, 1}));
  EXPECT_EQ(r.read<uint8_t>(neg), (std::vector<uint8_t>{1, 0, 1, 0, 1, 0}));
  EXPECT_EQ(r.read<float>(w), (std::vector<float>{0, 2, 0, 3, 0, 5}));
  EXPECT_EQ(r.read<int32_t>(ari), (std::vector<int32_t>{-1, 0, 0, 1}));
}

/// Independent batched matmul in double: a [batch..., m, k], b [batch..., k, n] already
/// expanded by the caller's index functions.
std::vector<double> matmul_ref(int64_t batches, int64_t m, int64_t k, int64_t n,
                               const std::function<double(int64_t, int64_t, int64_t)>& a,
                               const std::function<double(int64_t, int64_t, int64_t)>& b) {
  std::vector<double> out;
  for (int64_t bi = 0; bi < batches; ++bi)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < k; ++p) acc += a(bi, i, p) * b(bi, p, j);
        out.push_back(acc);
      }
  return out;
}

TEST(CpuBackend, MatmulBatchBroadcastAndTranspose) {
  Graph g;
  const int32_t a = input(g, DType::kF32, {2, 1, 3, 4});
  const int32_t b = input(g, DType::kF32, {3, 4, 5});
  const int32_t bt_src = input(g, DType::kF32, {3, 5, 4});
  const int32_t bt = add(g, Op::kPermute, {bt_src}, axes({0, 2, 1}));  // a BLAS transpose flag
  const int32_t ab = add(g, Op::kMatmul, {a, b});
  const int32_t abt = add(g, Op::kMatmul, {a, bt});
  g.outputs = {ab, abt};
  Runner r;
  const std::vector<float> av = iota(24, -1.0f, 0.25f), bv = iota(60, 2.0f, -0.1f),
                           btv = iota(60, 0.5f, 0.05f);
  r.run(g, {{a, av.data()}, {b, bv.data()}, {bt_src, btv.data()}});
  EXPECT_EQ(g.node(ab).shape, (Shape{2, 3, 3, 5}));
  // Output batch (p, q): a uses batch p (its q axis broadcasts), b uses batch q.
  auto a_at = [&](int64_t bi, int64_t i, int64_t p) {
    return static_cast<double>(av[(bi / 3) * 12 + i * 4 + p]);
  };
  auto b_at = [&](int64_t bi, int64_t p, int64_t j) {
    return static_cast<double>(bv[(bi % 3) * 20 + p * 5 + j]);
  };
  auto bt_at = [&](int64_t bi, int64_t p, int64_t j) {
    return static_cast<double>(btv[(bi % 3) * 20 + j * 4 + p]);
  };
  expect_near_all(r.read<float>(ab), matmul_ref(6, 3, 4, 5, a_at, b_at));
  expect_near_all(r.read<float>(abt), matmul_ref(6, 3, 4, 5, a_at, bt_at));
}

TEST(CpuBackend, MatmulVectorsAndFoldedBatch) {
  Graph g;
  const int32_t row = input(g, DType::kF32, {1, 4});
  const int32_t col = input(g, DType::kF32, {4, 1});
  const int32_t m = input(g, DType::kF32, {3, 4, 4});  // batched left, shared right: one sgemm
  const int32_t w = input(g, DType::kF32, {4, 4});
  const int32_t wt = add(g, Op::kPermute, {w}, axes({1, 0}));
  const int32_t rw = add(g, Op::kMatmul, {row, w});    // 1 row
  const int32_t wc = add(g, Op::kMatmul, {w, col});    // 1 column
  const int32_t rc = add(g, Op::kMatmul, {col, row});  // outer product, k = 1
  const int32_t mw = add(g, Op::kMatmul, {m, wt});
  const int32_t wtm = add(g, Op::kMatmul, {wt, m});  // transposed left, batched right
  g.outputs = {rw, wc, rc, mw, wtm};
  Runner r;
  const std::vector<float> rv = {1, -2, 3, 0.5f}, cv = {0.25f, 2, -1, 4};
  const std::vector<float> mv = iota(48, -2.0f, 0.1f), wv = iota(16, 1.0f, -0.2f);
  r.run(g, {{row, rv.data()}, {col, cv.data()}, {m, mv.data()}, {w, wv.data()}});
  auto W = [&](int64_t, int64_t i, int64_t j) { return static_cast<double>(wv[i * 4 + j]); };
  auto WT = [&](int64_t, int64_t i, int64_t j) { return static_cast<double>(wv[j * 4 + i]); };
  auto R = [&](int64_t, int64_t, int64_t j) { return static_cast<double>(rv[j]); };
  auto C = [&](int64_t, int64_t i, int64_t) { return static_cast<double>(cv[i]); };
  auto M = [&](int64_t bi, int64_t i, int64_t j) { return static_cast<double>(mv[bi * 16 + i * 4 + j]); };
  expect_near_all(r.read<float>(rw), matmul_ref(1, 1, 4, 4, R, W));
  expect_near_all(r.read<float>(wc), matmul_ref(1, 4, 4, 1, W, C));
  expect_near_all(r.read<float>(rc), matmul_ref(1, 4, 1, 4, C, R));
  expect_near_all(r.read<float>(mw), matmul_ref(3, 4, 4, 4, M, WT));
  expect_near_all(r.read<float>(wtm), matmul_ref(3, 4, 4, 4, WT, M));
}

TEST(CpuBackend, CastEdgeCases) {
  Graph g;
  const int32_t f = input(g, DType::kF32, {8});
  const ir::Attrs to_i32 = cast_to(DType::kI32), to_bool = cast_to(DType::kBool),
                  to_f32 = cast_to(DType::kF32);
  const int32_t fi = add(g, Op::kCast, {f}, to_i32);
  const int32_t fb = add(g, Op::kCast, {f}, to_bool);
  const int32_t b = input(g, DType::kBool, {3});
  const int32_t bf = add(g, Op::kCast, {b}, to_f32);
  const int32_t bi = add(g, Op::kCast, {b}, to_i32);
  const int32_t i = input(g, DType::kI32, {3});
  const int32_t i_f = add(g, Op::kCast, {i}, to_f32);
  const int32_t ib = add(g, Op::kCast, {i}, to_bool);
  g.outputs = {fi, fb, bf, bi, i_f, ib};
  Runner r;
  const std::vector<float> fv = {1.9f, -1.9f, 3e9f, -3e9f, kNaN, kInf, -kInf, -0.0f};
  const std::vector<uint8_t> bv = {1, 0, 7};  // a non-0/1 host byte still means true
  const std::vector<int32_t> iv = {-3, 0, 16777217};
  r.run(g, {{f, fv.data()}, {b, bv.data()}, {i, iv.data()}});
  const int32_t big = std::numeric_limits<int32_t>::max(), small = std::numeric_limits<int32_t>::min();
  EXPECT_EQ(r.read<int32_t>(fi), (std::vector<int32_t>{1, -1, big, small, 0, big, small, 0}));
  EXPECT_EQ(r.read<uint8_t>(fb), (std::vector<uint8_t>{1, 1, 1, 1, 1, 1, 1, 0}));
  EXPECT_EQ(r.read<float>(bf), (std::vector<float>{1, 0, 1}));
  EXPECT_EQ(r.read<int32_t>(bi), (std::vector<int32_t>{1, 0, 1}));
  EXPECT_EQ(r.read<float>(i_f), (std::vector<float>{-3, 0, 16777216.0f}));
  EXPECT_EQ(r.read<uint8_t>(ib), (std::vector<uint8_t>{1, 0, 1}));
}

TEST(CpuBackend, UpdatesApplyAfterAllReads) {
  Graph g;
  const int32_t s = leaf(g, Op::kState, DType::kF32, {3}, "s");
  const int32_t t = leaf(g, Op::kState, DType::kF32, {3}, "t");
  const int32_t c2 = constant(g, DType::kF32, {3}, {2.0});
  const int32_t doubled = add(g, Op::kMul, {s, c2});
  const int32_t next = add(g, Op::kAdd, {s, c2});
  const int32_t t_view = add(g, Op::kReshape, {t}, {}, {3});  // an alias of t's buffer
  g.outputs = {doubled, s, t_view};
  // s ← s + 2 and t ← s in one step, while `doubled` reads s: every read, including the
  // outputs s and t_view read back after execute(), sees the pre-step values.
  g.updates = {{s, next}, {t, s}};
  auto backend = backend::make_cpu_backend();
  auto bs = backend->allocate(DType::kF32, 3), bt = backend->allocate(DType::kF32, 3);
  const std::vector<float> s0 = {1, 2, 3}, t0 = {-1, -2, -3};
  backend->upload(*bs, s0.data());
  backend->upload(*bt, t0.data());
  auto exe = backend->prepare(g, {{s, bs.get()}, {t, bt.get()}});
  std::vector<float> got(3);
  auto output = [&](int32_t id) {
    exe->read_output(id, got.data());
    return got;
  };
  auto buffer = [&](const backend::Buffer& b) {
    backend->download(b, got.data());
    return got;
  };
  exe->execute();
  EXPECT_EQ(output(doubled), (std::vector<float>{2, 4, 6}));
  EXPECT_EQ(output(s), s0);  // the step's value of the leaf, not the updated buffer
  EXPECT_EQ(output(t_view), t0);
  EXPECT_EQ(buffer(*bs), (std::vector<float>{3, 4, 5}));
  EXPECT_EQ(buffer(*bt), s0);  // t took the pre-step s
  exe->execute();              // a second step continues from the updated buffers
  EXPECT_EQ(output(doubled), (std::vector<float>{6, 8, 10}));
  EXPECT_EQ(buffer(*bt), (std::vector<float>{3, 4, 5}));
}

TEST(CpuBackend, SwappingUpdatesSeePreStepValues) {
  Graph g;
  const int32_t p = leaf(g, Op::kParam, DType::kI32, {2}, "p");
  const int32_t q = leaf(g, Op::kParam, DType::kI32, {2}, "q");
  g.updates = {{p, q}, {q, p}};
  auto backend = backend::make_cpu_backend();
  auto bp = backend->allocate(DType::kI32, 2), bq = backend->allocate(DType::kI32, 2);
  const std::vector<int32_t> p0 = {1, 2}, q0 = {3, 4};
  backend->upload(*bp, p0.data());
  backend->upload(*bq, q0.data());
  auto exe = backend->prepare(g, {{p, bp.get()}, {q, bq.get()}});
  exe->execute();
  std::vector<int32_t> got(2);
  backend->download(*bp, got.data());
  EXPECT_EQ(got, q0);
  backend->download(*bq, got.data());
  EXPECT_EQ(got, p0);
}

TEST(CpuBackend, MisuseThrowsCpuErrors) {
  Graph g;
  const int32_t x = input(g, DType::kF32, {2});
  const int32_t w = leaf(g, Op::kParam, DType::kF32, {2}, "w");
  const int32_t y = add(g, Op::kAdd, {x, w});
  const int32_t z = add(g, Op::kNeg, {y});
  g.outputs = {y};
  auto backend = backend::make_cpu_backend();
  auto expect_cpu_error = [](auto&& fn) {
    try {
      fn();
      ADD_FAILURE() << "no error thrown";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("[cpu]", 0), 0u) << e.what();
    }
  };
  expect_cpu_error([&] { backend->prepare(g, {}); });  // w unbound
  auto bw = backend->allocate(DType::kF32, 2);
  auto exe = backend->prepare(g, {{w, bw.get()}});
  const std::vector<float> v = {1, 2};
  std::vector<float> out(2);
  expect_cpu_error([&] { exe->set_input(y, v.data()); });
  expect_cpu_error([&] { exe->execute(); });  // x never set
  exe->set_input(x, v.data());
  exe->execute();
  expect_cpu_error([&] { exe->read_output(z, out.data()); });
  exe->read_output(y, out.data());
  EXPECT_EQ(out, v);
  EXPECT_TRUE(backend->supports(Op::kMatmul));
}

}  // namespace
}  // namespace tg
