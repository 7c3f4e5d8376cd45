// Tests of the CPU backend's NN-primitive kernels (gather, scatter_add, softmax family,
// cross-entropy, layer/RMS norm, Philox random and dropout, fused attention and their
// backward kernels). Every op is compared with the reference backend (double precision) on
// several shapes — views in place of dense inputs, causal masks with S > T, grouped-query
// heads, row counts that are not a multiple of the attention row block — and with values
// computed independently here for small cases. Attention gradients are also compared with
// the gradients of the same attention written with matmul/softmax ops, run on the CPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/grad.h"
#include "backend/backend.h"
#include "backend/philox.h"
#include "backend/ref/ref_backend.h"
#include "ir/api_util.h"
#include "ir/graph.h"
#include "tensorgrad/errors.h"
#include "tensorgrad/functional.h"

namespace tg {
namespace {

using Host = std::vector<double>;
using Ts = std::vector<Tensor>;
using Fn = std::function<Ts(const Ts&)>;

// ---- tracing and running -----------------------------------------------------------------

struct Spec {
  Shape shape;
  DType dtype = DType::kF32;
};

struct Prog {
  ir::Graph graph;
  std::vector<int32_t> inputs;  // kInput leaves, in Spec order
  int32_t key = -1;             // the __rng_key input, when a random op was traced
};

/// Traces fn over fresh inputs the way compile_train/compile_forward do; its results
/// become graph.outputs.
Prog trace(const std::vector<Spec>& specs, const Fn& fn, bool training = false) {
  ir::Trace tr;
  tr.training = training;
  Prog p;
  Ts outs;
  {
    ir::TraceScope scope(tr);
    Ts xs;
    for (size_t i = 0; i < specs.size(); ++i) {
      char name[24];
      std::snprintf(name, sizeof name, "x%zu", i);
      xs.push_back(
          ir::named_leaf(tr.graph, ir::Op::kInput, name, specs[i].shape, specs[i].dtype, Loc::current()));
      p.inputs.push_back(xs.back().id());
    }
    outs = fn(xs);
  }
  p.graph = tr.graph;
  p.key = tr.rng_key;
  for (const Tensor& t : outs) p.graph.outputs.push_back(t.id());
  return p;
}

/// Appends d(outputs[0])/d(inputs[i]) for each i in `wrt` as further outputs.
void add_grads(Prog& p, const std::vector<size_t>& wrt) {
  std::vector<int32_t> leaves;
  for (size_t i : wrt) leaves.push_back(p.inputs[i]);
  const std::vector<int32_t> grads = autograd::append_gradients(p.graph, p.graph.outputs[0], leaves);
  for (int32_t g : grads) {
    ASSERT_GE(g, 0);
    p.graph.outputs.push_back(g);
  }
}

std::vector<std::byte> to_bytes(DType t, const Host& v) {
  std::vector<std::byte> b(v.size() * static_cast<size_t>(dtype_size(t)) + 1);
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == DType::kF32) {
      const auto f = static_cast<float>(v[i]);
      std::memcpy(b.data() + 4 * i, &f, 4);
    } else if (t == DType::kI32) {
      const auto n = static_cast<int32_t>(v[i]);
      std::memcpy(b.data() + 4 * i, &n, 4);
    } else {
      b[i] = static_cast<std::byte>(v[i] != 0);
    }
  }
  return b;
}

Host from_bytes(DType t, const std::vector<std::byte>& b, int64_t n) {
  Host v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == DType::kF32) {
      float f;
      std::memcpy(&f, b.data() + 4 * i, 4);
      v[i] = f;
    } else if (t == DType::kI32) {
      int32_t x;
      std::memcpy(&x, b.data() + 4 * i, 4);
      v[i] = x;
    } else {
      v[i] = std::to_integer<int>(b[i]);
    }
  }
  return v;
}

/// Runs p on the named backend ("cpu" or "ref"); returns every output, as doubles.
std::vector<Host> run(const std::string& which, const Prog& p, const std::vector<Host>& feeds,
                      int32_t key = 7) {
  std::unique_ptr<backend::Backend> be =
      which == "cpu" ? backend::make_cpu_backend() : backend::make_ref_backend();
  std::unique_ptr<backend::Executable> exe = be->prepare(p.graph, {});
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    const ir::Node& n = p.graph.node(p.inputs[i]);
    exe->set_input(p.inputs[i], to_bytes(n.dtype, feeds.at(i)).data());
  }
  if (p.key >= 0) exe->set_input(p.key, &key);
  exe->execute();
  std::vector<Host> outs;
  for (int32_t o : p.graph.outputs) {
    const ir::Node& n = p.graph.node(o);
    std::vector<std::byte> b(static_cast<size_t>(n.numel() * dtype_size(n.dtype)) + 1);
    exe->read_output(o, b.data());
    outs.push_back(from_bytes(n.dtype, b, n.numel()));
  }
  return outs;
}

// ---- values and comparisons --------------------------------------------------------------

/// splitmix64, so the values do not depend on the standard library.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform(double lo, double hi) {
    return lo + (hi - lo) * static_cast<double>(next() >> 11) * 0x1.0p-53;
  }
  int64_t below(int64_t n) { return static_cast<int64_t>(next() % static_cast<uint64_t>(n)); }

 private:
  uint64_t s_;
};

Host uniform(Rng& rng, int64_t n, double lo = -1, double hi = 1) {
  Host v(static_cast<size_t>(n));
  for (double& x : v) x = static_cast<float>(rng.uniform(lo, hi));
  return v;
}
Host ints(Rng& rng, int64_t n, int64_t lo, int64_t hi) {  // [lo, hi)
  Host v(static_cast<size_t>(n));
  for (double& x : v) x = static_cast<double>(lo + rng.below(hi - lo));
  return v;
}

/// |got − want| <= abs + rel·|want| elementwise; equal infinities and NaNs match.
::testing::AssertionResult close(const Host& got, const Host& want, double rel, double abs) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " vs " << want.size();
  std::ostringstream bad;
  bad.precision(9);
  int failures = 0;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    if (g == w || (std::isnan(g) && std::isnan(w))) continue;
    const double err = std::abs(g - w);
    if (err <= abs + rel * std::abs(w)) continue;
    worst = std::max(worst, err);
    if (++failures <= 6) bad << "\n  [" << i << "] got " << g << ", want " << w;
  }
  if (failures == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << failures << " of " << got.size() << " differ (worst abs " << worst << "):" << bad.str();
}

/// Every output of p on cpu against ref.
void expect_matches_ref(const Prog& p, const std::vector<Host>& feeds, double rel, double abs,
                        int32_t key = 7) {
  const std::vector<Host> want = run("ref", p, feeds, key), got = run("cpu", p, feeds, key);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(close(got[i], want[i], rel, abs)) << "output " << i;
}

/// The message of the tg::InputError that running p on `which` throws ("" if none).
std::string input_error(const std::string& which, const Prog& p, const std::vector<Host>& feeds) {
  try {
    run(which, p, feeds);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// ---- gather / scatter_add ------------------------------------------------------------------

TEST(CpuGather, MatchesRefOnEveryAxisAndDtype) {
  Rng rng(1);
  const Shape xs = {5, 6, 7};
  for (int64_t axis = 0; axis < 3; ++axis) {
    Shape is = xs;
    is[static_cast<size_t>(axis)] = 4 + axis;  // fewer and more indices than the extent
    for (DType dt : {DType::kF32, DType::kI32, DType::kBool}) {
      Prog p = trace({{xs, DType::kF32}, {is, DType::kI32}},
                     [&](const Ts& x) { return Ts{take_along_axis(cast(x[0], dt), x[1], axis)}; });
      Host x = dt == DType::kF32 ? uniform(rng, numel(xs)) : ints(rng, numel(xs), -1, 2);
      expect_matches_ref(p, {x, ints(rng, numel(is), 0, xs[static_cast<size_t>(axis)])}, 0, 0);
    }
  }
}

TEST(CpuGather, IndicesBroadcastOffTheAxis) {
  Rng rng(2);
  // idx [1, 3] against x [4, 5] along axis 1: the indices arrive as a 0-stride view.
  Prog p = trace({{{4, 5}}, {{1, 3}, DType::kI32}},
                 [](const Ts& x) { return Ts{take_along_axis(x[0], x[1], 1)}; });
  const Host x = uniform(rng, 20), idx = {4, 0, 2};
  const std::vector<Host> got = run("cpu", p, {x, idx});
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 3; ++c)
      EXPECT_EQ(got[0][static_cast<size_t>(r * 3 + c)], x[static_cast<size_t>(r * 5 + idx[c])]);
  expect_matches_ref(p, {x, idx}, 0, 0);
}

TEST(CpuGather, EmbeddingRowsAndTheirGradient) {
  Rng rng(3);
  const int64_t vocab = 10;
  Prog p = trace({{{vocab, 3, 4}}, {{2, 5}, DType::kI32}, {{2, 5, 3, 4}}}, [](const Ts& x) {
    Tensor e = embedding(x[0], x[1]);
    return Ts{sum(e * x[2]), e};
  });
  add_grads(p, {0});
  const Host table = uniform(rng, vocab * 12), ids = {3, 3, 0, 9, 1, 3, 2, 9, 5, 5}, w = uniform(rng, 120);
  const std::vector<Host> got = run("cpu", p, {table, ids, w});
  for (size_t t = 0; t < ids.size(); ++t)
    for (size_t j = 0; j < 12; ++j)
      ASSERT_EQ(got[1][t * 12 + j], table[static_cast<size_t>(ids[t]) * 12 + j]);
  // d/dtable[v] = Σ over tokens t with id v of w[t]: accumulated in token order, in f32.
  std::vector<float> want(static_cast<size_t>(vocab * 12), 0.0f);
  for (size_t t = 0; t < ids.size(); ++t)
    for (size_t j = 0; j < 12; ++j)
      want[static_cast<size_t>(ids[t]) * 12 + j] += static_cast<float>(w[t * 12 + j]);
  EXPECT_TRUE(close(got[2], Host(want.begin(), want.end()), 0, 0));
  expect_matches_ref(p, {table, ids, w}, 1e-6, 1e-6);
}

TEST(CpuGather, OutOfRangeIndexIsAnInputError) {
  Prog p = trace({{{16, 8}}, {{5}, DType::kI32}}, [](const Ts& x) { return Ts{embedding(x[0], x[1])}; });
  Rng rng(4);
  const Host table = uniform(rng, 128);
  const std::string msg = input_error("cpu", p, {table, {0, 3, 17, 15, 99}});
  EXPECT_NE(msg.find("[gather] index 17 out of range [0, 16)"), std::string::npos) << msg;
  EXPECT_NE(input_error("cpu", p, {table, {-1, 0, 0, 0, 0}}).find("index -1 out of range"),
            std::string::npos);
  EXPECT_EQ(input_error("cpu", p, {table, {0, 15, 1, 2, 3}}), "");
}

/// A scatter_add node built directly: zeros of out_shape, out[.., idx, ..] += src.
Prog scatter_prog(const Shape& src, const Shape& out, int64_t axis, bool broadcast_idx = false) {
  Shape idx_shape = src;
  if (broadcast_idx) idx_shape.back() = 1;
  return trace({{src}, {idx_shape, DType::kI32}}, [=](const Ts& x) {
    Tensor idx = broadcast_idx ? broadcast_to(x[1], src) : x[1];
    ir::Node n = ir::make_node(ir::Op::kScatterAdd, {x[0].id(), idx.id()}, Loc::current());
    n.shape = out;
    n.attrs.axes = {axis};
    return Ts{ir::emit(*x[0].graph(), std::move(n))};
  });
}

/// The same sum serially, in f32, in source order: what the CPU kernel must produce exactly.
Host serial_scatter(const Host& src, const Host& idx, const Shape& src_shape, const Shape& out_shape,
                    int64_t axis, bool broadcast_idx) {
  std::vector<float> out(static_cast<size_t>(numel(out_shape)), 0.0f);
  const auto a = static_cast<size_t>(axis);
  int64_t inner = 1;
  for (size_t d = a + 1; d < src_shape.size(); ++d) inner *= src_shape[d];
  const int64_t len = src_shape[a], big = out_shape[a];
  for (int64_t flat = 0; flat < numel(src_shape); ++flat) {
    const int64_t i = flat % inner, o = flat / (inner * len);
    const int64_t j =
        static_cast<int64_t>(idx[static_cast<size_t>(broadcast_idx ? flat / src_shape.back() : flat)]);
    out[static_cast<size_t>((o * big + j) * inner + i)] += static_cast<float>(src[static_cast<size_t>(flat)]);
  }
  return Host(out.begin(), out.end());
}

TEST(CpuScatterAdd, DuplicatesAccumulateOnEveryAxis) {
  Rng rng(5);
  struct Case {
    Shape src, out;
    int64_t axis;
  };
  for (const Case& c : {Case{{6, 5}, {4, 5}, 0}, Case{{6, 5}, {6, 3}, 1}, Case{{3, 9, 4}, {3, 2, 4}, 1},
                        Case{{2, 3, 300}, {2, 3, 7}, 2}}) {
    Prog p = scatter_prog(c.src, c.out, c.axis);
    const Host src = uniform(rng, numel(c.src));
    const Host idx = ints(rng, numel(c.src), 0, c.out[static_cast<size_t>(c.axis)]);
    const std::vector<Host> got = run("cpu", p, {src, idx});
    EXPECT_TRUE(close(got[0], serial_scatter(src, idx, c.src, c.out, c.axis, false), 0, 0))
        << shape_str(c.src);
    expect_matches_ref(p, {src, idx}, 1e-6, 1e-6);
  }
}

TEST(CpuScatterAdd, LargeEmbeddingGradientIsExactAndDeterministic) {
  // 40000 tokens into 50 rows of width 4: one output column block, so the kernel splits the
  // row range across threads; the sum must still be the serial one bit for bit.
  Rng rng(6);
  const Shape src = {40000, 4}, out = {50, 4};
  Prog p = scatter_prog(src, out, 0, /*broadcast_idx=*/true);
  const Host s = uniform(rng, numel(src)), idx = ints(rng, 40000, 0, 50);
  const std::vector<Host> a = run("cpu", p, {s, idx}), b = run("cpu", p, {s, idx});
  EXPECT_TRUE(close(a[0], serial_scatter(s, idx, src, out, 0, true), 0, 0));
  EXPECT_TRUE(close(a[0], b[0], 0, 0));
  expect_matches_ref(p, {s, idx}, 1e-5, 1e-4);
}

TEST(CpuScatterAdd, OutOfRangeIndexIsAnInputError) {
  Prog p = scatter_prog({4, 3}, {5, 3}, 0);
  const std::string msg = input_error("cpu", p, {Host(12, 1.0), {0, 1, 2, 4, 5, 0, 0, 0, 0, 0, 0, 0}});
  EXPECT_NE(msg.find("[scatter_add] index 5 out of range [0, 5)"), std::string::npos) << msg;
}

// ---- softmax family --------------------------------------------------------------------------

TEST(CpuSoftmax, HandComputedValues) {
  Prog p = trace({{{2, 3}}}, [](const Ts& x) { return Ts{softmax(x[0]), log_softmax(x[0])}; });
  const std::vector<Host> got = run("cpu", p, {{1, 2, 3, 1000, 1001, -1000}});
  // softmax([1, 2, 3]) = e^k / (e + e² + e³); the second row is huge but stable.
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  const Host want = {std::exp(1.0) / z,       std::exp(2.0) / z,        std::exp(3.0) / z,
                     1 / (1 + std::exp(1.0)), 1 / (1 + std::exp(-1.0)), 0.0};
  EXPECT_TRUE(close(got[0], want, 1e-6, 1e-7));
  const Host want_log = {1 - std::log(z),
                         2 - std::log(z),
                         3 - std::log(z),
                         -std::log1p(std::exp(1.0)),
                         -std::log1p(std::exp(-1.0)),
                         -2001 - std::log1p(std::exp(-1.0))};
  EXPECT_TRUE(close(got[1], want_log, 1e-6, 1e-6));
}

TEST(CpuSoftmax, MatchesRefOnEveryAxis) {
  Rng rng(7);
  for (const Shape& s : {Shape{3, 70, 5}, Shape{4, 3, 300}, Shape{64, 1000}, Shape{7}}) {
    for (int64_t axis = 0; axis < static_cast<int64_t>(s.size()); ++axis) {
      Prog p = trace({{s}}, [&](const Ts& x) { return Ts{softmax(x[0], axis), log_softmax(x[0], axis)}; });
      expect_matches_ref(p, {uniform(rng, numel(s), -4, 4)}, 1e-5, 1e-7);
    }
  }
}

TEST(CpuSoftmax, CausalMaskWithMoreKeysThanQueries) {
  Rng rng(8);
  for (const Shape& s : {Shape{2, 5, 9}, Shape{6, 6}, Shape{3, 2, 40, 130}}) {
    Prog p = trace({{s}}, [](const Ts& x) {
      return Ts{softmax(x[0], -1, true), log_softmax(x[0], -1, true)};
    });
    const Host x = uniform(rng, numel(s), -3, 3);
    expect_matches_ref(p, {x}, 1e-5, 1e-7);
    const std::vector<Host> got = run("cpu", p, {x});
    const int64_t t_len = s[s.size() - 2], s_len = s.back();
    for (int64_t flat = 0; flat < numel(s); ++flat) {
      const int64_t i = (flat / s_len) % t_len, j = flat % s_len;
      if (j > i + (s_len - t_len)) {
        ASSERT_EQ(got[0][static_cast<size_t>(flat)], 0.0);
        ASSERT_EQ(got[1][static_cast<size_t>(flat)], -INFINITY);
      }
    }
  }
}

TEST(CpuSoftmax, GradientsMatchRef) {
  Rng rng(9);
  Prog p = trace({{{3, 6, 10}}, {{3, 6, 10}}}, [](const Ts& x) {
    Tensor ls = log_softmax(x[0], -1, true);  // masked entries are −∞: keep them out of the sum
    return Ts{sum(softmax(x[0], 1) * x[1]) + sum(where(ls > -1e30, ls, 0.0) * x[1]) +
              sum(log_softmax(x[0], 0) * x[1]) + sum(softmax(x[0], -1, true) * x[1])};
  });
  add_grads(p, {0});
  expect_matches_ref(p, {uniform(rng, 180, -2, 2), uniform(rng, 180)}, 1e-5, 1e-6);
}

// ---- cross-entropy ---------------------------------------------------------------------------

TEST(CpuCrossEntropy, TwoClassRowByHand) {
  Prog p = trace({{{2, 2}}, {{2}, DType::kI32}},
                 [](const Ts& x) { return Ts{cross_entropy(x[0], x[1], {.reduction = Reduction::kNone})}; });
  // logits [1, 2]: loss(t=0) = log(1 + e), loss(t=1) = log(1 + 1/e).
  const std::vector<Host> got = run("cpu", p, {{1, 2, 1, 2}, {0, 1}});
  EXPECT_TRUE(close(got[0], {std::log1p(std::exp(1.0)), std::log1p(std::exp(-1.0))}, 1e-6, 0));
  // Its gradient: softmax − one-hot = [σ(−1) − 1, σ(1)] for t = 0.
  Prog g = trace({{{1, 2}}, {{1}, DType::kI32}}, [](const Ts& x) { return Ts{cross_entropy(x[0], x[1])}; });
  add_grads(g, {0});
  const double s = 1 / (1 + std::exp(1.0));
  EXPECT_TRUE(close(run("cpu", g, {{1, 2}, {0}})[1], {s - 1, 1 - s}, 1e-6, 1e-7));
}

TEST(CpuCrossEntropy, IgnoredRowsAndGradientsMatchRef) {
  Rng rng(10);
  for (int32_t ignore : {-100, 3}) {
    for (Reduction red : {Reduction::kNone, Reduction::kMean, Reduction::kSum}) {
      Prog p = trace({{{37, 11}}, {{37}, DType::kI32}, {{37}}}, [&](const Ts& x) {
        Tensor l = cross_entropy(x[0], x[1], {.ignore_index = ignore, .reduction = red});
        return Ts{red == Reduction::kNone ? sum(l * x[2]) : l, l};
      });
      add_grads(p, {0});
      Host t = ints(rng, 37, 0, 11);
      for (size_t r : {0, 5, 6, 36}) t[r] = ignore;
      const Host logits = uniform(rng, 37 * 11, -5, 5);
      expect_matches_ref(p, {logits, t, uniform(rng, 37)}, 1e-5, 1e-6);
      if (red != Reduction::kNone) continue;
      const std::vector<Host> got = run("cpu", p, {logits, t, uniform(rng, 37)});
      for (size_t r : {0, 5, 6, 36}) {
        EXPECT_EQ(got[1][r], 0.0);
        for (size_t c = 0; c < 11; ++c) EXPECT_EQ(got[2][r * 11 + c], 0.0);
      }
    }
  }
}

TEST(CpuCrossEntropy, LargeVocabularyMatchesRef) {
  Rng rng(11);
  Prog p =
      trace({{{64, 5000}}, {{64}, DType::kI32}}, [](const Ts& x) { return Ts{cross_entropy(x[0], x[1])}; });
  add_grads(p, {0});
  expect_matches_ref(p, {uniform(rng, 64 * 5000, -8, 8), ints(rng, 64, 0, 5000)}, 1e-5, 1e-8);
}

TEST(CpuCrossEntropy, TargetOutOfRangeIsAnInputError) {
  Prog p = trace({{{3, 5}}, {{3}, DType::kI32}}, [](const Ts& x) { return Ts{cross_entropy(x[0], x[1])}; });
  Rng rng(12);
  const Host logits = uniform(rng, 15);
  std::string msg = input_error("cpu", p, {logits, {0, 5, 1}});
  EXPECT_NE(msg.find("[cross_entropy]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("row 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("target 5"), std::string::npos) << msg;
  msg = input_error("cpu", p, {logits, {0, 4, -1}});
  EXPECT_NE(msg.find("row 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("target -1"), std::string::npos) << msg;
  EXPECT_EQ(input_error("cpu", p, {logits, {-100, 4, 0}}), "");
  add_grads(p, {0});  // the gradient kernel checks too
  EXPECT_NE(input_error("cpu", p, {logits, {0, 7, 1}}).find("[cross_entropy]"), std::string::npos);
}

// ---- normalisation ---------------------------------------------------------------------------

TEST(CpuNorm, HandComputedValues) {
  Prog p = trace({{{3}}, {{2}}}, [](const Ts& x) {
    return Ts{layer_norm(x[0], Tensor(), Tensor(), 0.0), rms_norm(x[1], Tensor(), 0.0)};
  });
  const std::vector<Host> got = run("cpu", p, {{1, 2, 3}, {3, 4}});
  EXPECT_TRUE(close(got[0], {-std::sqrt(1.5), 0, std::sqrt(1.5)}, 1e-6, 1e-7));
  EXPECT_TRUE(close(got[1], {3 / std::sqrt(12.5), 4 / std::sqrt(12.5)}, 1e-6, 0));
}

TEST(CpuNorm, ForwardAndGradientsMatchRef) {
  Rng rng(13);
  for (const Shape& s : {Shape{7, 33}, Shape{2, 3, 64}, Shape{300, 256}, Shape{5, 1}}) {
    const int64_t d = s.back();
    Prog p = trace({{s}, {{d}}, {{d}}, {s}}, [](const Ts& x) {
      Tensor a = layer_norm(x[0], x[1], x[2], 1e-5), b = rms_norm(x[0] * 3.0 + 0.5, x[1], 1e-6);
      return Ts{sum(a * x[3]) + sum(b * b * x[3]), a, b};
    });
    add_grads(p, {0, 1, 2});
    expect_matches_ref(
        p, {uniform(rng, numel(s), -2, 2), uniform(rng, d), uniform(rng, d), uniform(rng, numel(s))}, 1e-5,
        2e-5);
  }
}

// ---- randomness ------------------------------------------------------------------------------

int32_t random_node_seed(const Prog& p) {
  for (const ir::Node& n : p.graph.nodes())
    if (n.op == ir::Op::kRandom) return static_cast<int32_t>(n.attrs.seed);
  return -1;
}

TEST(CpuRandom, BitsArePhiloxAndMatchRef) {
  for (const Shape& s : {Shape{3, 1001}, Shape{5000, 3}, Shape{1}}) {
    Prog p = trace(
        {},
        [&](const Ts&) {
          return Ts{random_uniform({2}), random_uniform(s)};
        },
        true);
    ASSERT_GE(p.key, 0);
    const auto seed = static_cast<uint64_t>(random_node_seed(p));
    for (int32_t key : {7, -7, 123456789}) {
      const std::vector<Host> got = run("cpu", p, {}, key), want = run("ref", p, {}, key);
      EXPECT_TRUE(close(got[1], want[1], 0, 0));
      for (size_t i = 0; i < got[1].size(); ++i)
        ASSERT_EQ(static_cast<float>(got[1][i]), backend::philox_uniform(1, static_cast<uint32_t>(key), i))
            << i;
      for (size_t i = 0; i < got[0].size(); ++i)
        ASSERT_EQ(static_cast<float>(got[0][i]), backend::philox_uniform(seed, static_cast<uint32_t>(key), i))
            << i;
    }
    EXPECT_FALSE(close(run("cpu", p, {}, 1)[1], run("cpu", p, {}, 2)[1], 0, 0));  // a new key, a new stream
  }
}

TEST(CpuDropout, KeepsAboutOneMinusPAndScales) {
  const int64_t n = 100000;
  const double p_drop = 0.3;
  Prog p = trace(
      {{{n}}}, [&](const Ts& x) { return Ts{dropout(x[0], p_drop)}; }, true);
  Rng rng(14);
  const Host x = uniform(rng, n, 0.5, 2);
  const std::vector<Host> got = run("cpu", p, {x}, 99);
  uint64_t seed = 0;
  for (const ir::Node& nd : p.graph.nodes())
    if (nd.op == ir::Op::kDropout) seed = nd.attrs.seed;
  int64_t kept = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const bool keep = backend::philox_uniform(seed, 99, i) >= p_drop;
    kept += keep;
    ASSERT_EQ(got[0][i], keep ? static_cast<double>(static_cast<float>(x[i] / (1 - p_drop))) : 0.0) << i;
  }
  // Binomial(n, 0.7): standard deviation √(n·0.21) ≈ 145.
  EXPECT_NEAR(static_cast<double>(kept), 0.7 * n, 5 * std::sqrt(n * 0.21));
  expect_matches_ref(p, {x}, 1e-7, 0, 99);
}

TEST(CpuDropout, StridedInputAndGradientMatchRef) {
  Rng rng(15);
  // The transposed input arrives as a view; the mask follows the output's row-major order.
  Prog p = trace(
      {{{300, 7}}, {{7, 300}}},
      [](const Ts& x) {
        Tensor y = dropout(transpose(x[0]), 0.5);
        return Ts{sum(y * x[1]), y};
      },
      true);
  add_grads(p, {0});
  expect_matches_ref(p, {uniform(rng, 2100), uniform(rng, 2100)}, 1e-6, 1e-7, -3);
}

// ---- attention -------------------------------------------------------------------------------

struct AttnCase {
  int64_t B, Hq, Hkv, T, S, D;
  bool causal;
};
std::string name(const AttnCase& c) {
  char s[96];
  std::snprintf(s, sizeof s, "B%lld Hq%lld Hkv%lld T%lld S%lld D%lld%s", static_cast<long long>(c.B),
                static_cast<long long>(c.Hq), static_cast<long long>(c.Hkv), static_cast<long long>(c.T),
                static_cast<long long>(c.S), static_cast<long long>(c.D), c.causal ? " causal" : "");
  return s;
}

const std::vector<AttnCase> kAttnCases = {
    {1, 1, 1, 1, 1, 4, true},     {2, 4, 2, 70, 70, 16, true},  {1, 4, 1, 37, 100, 8, true},
    {2, 2, 2, 130, 50, 8, false}, {1, 4, 4, 64, 128, 32, true}, {2, 4, 1, 65, 65, 8, false},
    {1, 2, 1, 1, 90, 16, true},   {1, 4, 2, 129, 200, 8, true},
};

/// loss = Σ attention(q, k, v) ⊙ w, plus the output itself.
Prog attention_prog(const AttnCase& c, std::optional<double> scale = {}) {
  return trace(
      {{{c.B, c.Hq, c.T, c.D}}, {{c.B, c.Hkv, c.S, c.D}}, {{c.B, c.Hkv, c.S, c.D}}, {{c.B, c.Hq, c.T, c.D}}},
      [&](const Ts& x) {
        Tensor o = attention(x[0], x[1], x[2], {.causal = c.causal, .scale = scale});
        return Ts{sum(o * x[3]), o};
      });
}

/// The same loss written with matmul / softmax ops (GQA by repeating each kv head).
Prog composite_prog(const AttnCase& c) {
  return trace(
      {{{c.B, c.Hq, c.T, c.D}}, {{c.B, c.Hkv, c.S, c.D}}, {{c.B, c.Hkv, c.S, c.D}}, {{c.B, c.Hq, c.T, c.D}}},
      [&](const Ts& x) {
        const int64_t group = c.Hq / c.Hkv;
        auto repeat = [&](const Tensor& t) {
          return reshape(broadcast_to(unsqueeze(t, 2), {c.B, c.Hkv, group, c.S, c.D}), {c.B, c.Hq, c.S, c.D});
        };
        Tensor s = matmul(x[0], transpose(repeat(x[1]))) * (1.0 / std::sqrt(static_cast<double>(c.D)));
        Tensor o = matmul(softmax(s, -1, c.causal), repeat(x[2]));
        return Ts{sum(o * x[3]), o};
      });
}

std::vector<Host> attention_feeds(const AttnCase& c, uint64_t seed) {
  Rng rng(seed);
  const int64_t nq = c.B * c.Hq * c.T * c.D, nk = c.B * c.Hkv * c.S * c.D;
  return {uniform(rng, nq, -2, 2), uniform(rng, nk, -2, 2), uniform(rng, nk), uniform(rng, nq)};
}

TEST(CpuAttention, ForwardAndGradientsMatchRef) {
  uint64_t seed = 100;
  for (const AttnCase& c : kAttnCases) {
    SCOPED_TRACE(name(c));
    Prog p = attention_prog(c);
    add_grads(p, {0, 1, 2});
    expect_matches_ref(p, attention_feeds(c, seed++), 2e-5, 2e-5);
  }
}

TEST(CpuAttention, SmallHeadsMatchRef) {
  // Small heads (S·D ≤ 256, D ≤ 16) take the path that runs 16 heads at once, one per SIMD
  // lane: head counts that leave a partial group of lanes, GQA groups, T < S causal, T > S
  // full, one key, D not a multiple of the vector width.
  const std::vector<AttnCase> cases = {
      {5, 4, 2, 8, 8, 16, true}, {3, 6, 3, 5, 12, 16, true},   {7, 3, 3, 9, 6, 8, false},
      {2, 8, 1, 8, 8, 16, true}, {37, 1, 1, 4, 4, 4, false},   {16, 2, 2, 3, 1, 5, false},
      {1, 1, 1, 1, 1, 3, true},  {9, 4, 4, 16, 16, 16, false},
  };
  uint64_t seed = 500;
  for (const AttnCase& c : cases) {
    SCOPED_TRACE(name(c));
    Prog p = attention_prog(c);
    add_grads(p, {0, 1, 2});
    expect_matches_ref(p, attention_feeds(c, seed++), 2e-5, 2e-5);
  }
  // Heads read in place from [B, T, H, D] operands.
  const int64_t B = 6, T = 7, S = 9, Hq = 4, Hkv = 2, D = 12;
  Prog p = trace({{{B, T, Hq, D}}, {{B, S, Hkv, D}}, {{B, S, Hkv, D}}, {{B, Hq, T, D}}}, [&](const Ts& x) {
    Tensor o = attention(transpose(x[0], 1, 2), transpose(x[1], 1, 2), transpose(x[2], 1, 2),
                         {.causal = true, .scale = 0.7});
    return Ts{sum(o * x[3]), o};
  });
  add_grads(p, {0, 1, 2});
  Rng rng(301);
  expect_matches_ref(p,
                     {uniform(rng, B * T * Hq * D, -2, 2), uniform(rng, B * S * Hkv * D, -2, 2),
                      uniform(rng, B * S * Hkv * D), uniform(rng, B * Hq * T * D)},
                     2e-5, 2e-5);
}

TEST(CpuAttention, GradientsMatchTheMatmulSoftmaxComposite) {
  uint64_t seed = 200;
  for (const AttnCase& c : kAttnCases) {
    SCOPED_TRACE(name(c));
    Prog fused = attention_prog(c), composite = composite_prog(c);
    add_grads(fused, {0, 1, 2});
    add_grads(composite, {0, 1, 2});
    // The fused graph really uses the fused primitives.
    bool has_grad_op = false;
    for (const ir::Node& n : fused.graph.nodes()) has_grad_op = has_grad_op || n.op == ir::Op::kAttentionGrad;
    EXPECT_TRUE(has_grad_op);
    const std::vector<Host> feeds = attention_feeds(c, seed++);
    const std::vector<Host> a = run("cpu", fused, feeds), b = run("cpu", composite, feeds);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(close(a[i], b[i], 5e-5, 5e-5)) << "output " << i;
  }
}

TEST(CpuAttention, PermutedHeadsAreReadInPlaceAndScaleIsHonoured) {
  // q, k, v as [B, T, H, D] transposed to [B, H, T, D]: rows H·D apart, read as strided BLAS operands.
  const int64_t B = 2, T = 67, S = 80, Hq = 4, Hkv = 2, D = 8;
  Prog p = trace({{{B, T, Hq, D}}, {{B, S, Hkv, D}}, {{B, S, Hkv, D}}, {{B, Hq, T, D}}}, [&](const Ts& x) {
    Tensor o = attention(transpose(x[0], 1, 2), transpose(x[1], 1, 2), transpose(x[2], 1, 2),
                         {.causal = true, .scale = 0.3});
    return Ts{sum(o * x[3]), o};
  });
  add_grads(p, {0, 1, 2});
  Rng rng(300);
  expect_matches_ref(p,
                     {uniform(rng, B * T * Hq * D), uniform(rng, B * S * Hkv * D),
                      uniform(rng, B * S * Hkv * D), uniform(rng, B * Hq * T * D)},
                     2e-5, 2e-5);
}

TEST(CpuAttention, OneKeyGivesTheValueAndUniformScoresAverage) {
  // Independent values: with one key every query returns v; with q = 0 all scores tie and
  // the output is the mean of the visible values (causal: a prefix mean).
  Prog p = trace({{{1, 1, 3, 2}}, {{1, 1, 4, 2}}, {{1, 1, 4, 2}}},
                 [](const Ts& x) { return Ts{attention(x[0], x[1], x[2], {.causal = true})}; });
  const Host v = {1, 10, 2, 20, 3, 30, 6, 60};
  const std::vector<Host> got = run("cpu", p, {Host(6, 0.0), {1, 2, 3, 4, 5, 6, 7, 8}, v});
  // T = 3, S = 4: query i sees keys 0..i+1.
  EXPECT_TRUE(close(got[0], {1.5, 15, 2, 20, 3, 30}, 1e-6, 1e-6));
}

TEST(CpuNnKernels, EmptyExtentsAreHandled) {
  // No keys at all: an empty weighted sum (0), as on ref; no queries: zero key gradients.
  for (const AttnCase& c : {AttnCase{1, 2, 1, 3, 0, 4, false}, AttnCase{2, 2, 2, 0, 5, 4, true}}) {
    SCOPED_TRACE(name(c));
    // The primitives directly: a sum over an empty tensor is not a valid loss.
    Prog p = trace(
        {{{c.B, c.Hq, c.T, c.D}},
         {{c.B, c.Hkv, c.S, c.D}},
         {{c.B, c.Hkv, c.S, c.D}},
         {{c.B, c.Hq, c.T, c.D}}},
        [&](const Ts& x) {
          ir::Graph& g = *x[0].graph();
          ir::Node fwd = ir::make_node(ir::Op::kAttention, {x[0].id(), x[1].id(), x[2].id()}, Loc::current());
          fwd.attrs.causal = c.causal;
          fwd.attrs.values = {0.5};
          const int32_t f = ir::emit(g, fwd).id();
          const Tensor out = ir::result(g, f, 0, Loc::current()), saved = ir::result(g, f, 1, Loc::current());
          ir::Node grad = ir::make_node(ir::Op::kAttentionGrad,
                                        {x[0].id(), x[1].id(), x[2].id(), x[3].id(), out.id(), saved.id()},
                                        Loc::current());
          grad.attrs = fwd.attrs;
          const int32_t gr = ir::emit(g, std::move(grad)).id();
          return Ts{out, ir::result(g, gr, 0, Loc::current()), ir::result(g, gr, 1, Loc::current()),
                    ir::result(g, gr, 2, Loc::current())};
        });
    const std::vector<Host> feeds = attention_feeds(c, 400);
    expect_matches_ref(p, feeds, 0, 0);
    const std::vector<Host> got = run("cpu", p, feeds);
    for (size_t i = 1; i < got.size(); ++i)
      for (double v : got[i]) ASSERT_EQ(v, 0.0);  // dq, dk, dv
  }
  Prog g = trace({{{4, 0}}, {{2, 0}, DType::kI32}, {{0, 3}}, {{0}, DType::kI32}}, [](const Ts& x) {
    return Ts{take_along_axis(x[0], x[1], 0), softmax(x[0], 0),
              cross_entropy(x[2], x[3], {.reduction = Reduction::kNone})};
  });
  expect_matches_ref(g, {{}, {}, {}, {}}, 0, 0);
  // Rows of length 0 (ref would divide by the zero row length, so cpu only).
  Prog n = trace({{{3, 0}}}, [](const Ts& x) {
    return Ts{layer_norm(x[0], Tensor(), Tensor()), rms_norm(x[0], Tensor())};
  });
  EXPECT_EQ(run("cpu", n, {{}})[0].size(), 0u);
}

}  // namespace
}  // namespace tg
