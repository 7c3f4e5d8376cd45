// The NN ops of functional.h beyond the op table's rows (op_table_test.cc holds their
// forward and gradient rows): randomness and dropout, which need the runtime key and
// statistics rather than a cpu-vs-ref comparison alone; errors raised at run time (bad
// indices and targets) and at trace time (shapes); and hand-computed values that pin the
// reference backend itself.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "backend/philox.h"
#include "ops/op_harness.h"
#include "test_util.h"
#include "tensorgrad/errors.h"
#include "tensorgrad/functional.h"

// The op table keeps one row per line: not formatted (.clang-format).
// clang-format off

namespace tg::op_test {
namespace {

using enum DType;

#define FN(...) [](const Ts& x) -> Tensor { (void)x; return __VA_ARGS__; }

/// Runs the traced program on `be` with the runtime key `key` (feeds made from `specs`).
std::vector<double> run_with_key(backend::Backend& be, const Traced& t, const std::vector<InputSpec>& specs,
                                 int32_t key, uint64_t seed = 1) {
  return run_graph(be, t.graph, t.inputs, make_feeds(specs, t, seed, key)).at(0);
}

// ---- random_uniform -------------------------------------------------------------------------------

TEST(RandomUniform, CpuBitsEqualRefAndThePhiloxStream) {
  const Traced t = trace_fn({}, FN(random_uniform({1000})));
  ASSERT_GE(t.rng_key, 0) << "random_uniform must create the runtime key input";
  EXPECT_EQ(t.graph.node(t.rng_key).name, ir::kRngKeyInput);
  EXPECT_EQ(t.graph.node(t.out).attrs.seed, 0u) << "the first random site of a bare trace has seed 0";
  auto ref = backend::make_ref_backend();
  auto cpu = backend::make_cpu_backend();
  for (int32_t key : {1, 2, -7}) {
    const std::vector<double> want = run_with_key(*ref, t, {}, key);
    const std::vector<double> got = run_with_key(*cpu, t, {}, key);
    ASSERT_EQ(want.size(), 1000u);
    EXPECT_TRUE(all_close(got, want, kExact)) << "key " << key;  // bit-identical f32 values
    double total = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      // element i is philox_uniform(seed, key reinterpreted as uint32, i) on every backend
      ASSERT_EQ(want[i], backend::philox_uniform(0, static_cast<uint32_t>(key), i)) << "element " << i;
      ASSERT_TRUE(want[i] >= 0 && want[i] < 1) << want[i];
      total += want[i];
    }
    EXPECT_NEAR(total / 1000, 0.5, 0.05) << "key " << key;
  }
}

TEST(RandomUniform, DifferentKeysAndSitesGiveDifferentValues) {
  // Two sites in one program: different per-site seeds, so different streams.
  const Traced t = trace_fn({}, FN(concat({random_uniform({1000}), random_uniform({1000})}, 0)));
  for (const auto& be : both_backends()) {
    const std::vector<double> k1 = run_with_key(*be, t, {}, 1);
    const std::vector<double> k2 = run_with_key(*be, t, {}, 2);
    const std::vector<double> k1_again = run_with_key(*be, t, {}, 1);
    EXPECT_EQ(k1, k1_again) << "the same key must give the same values on " << be->name();
    int same_key = 0, same_site = 0;
    for (size_t i = 0; i < 1000; ++i) {
      same_key += k1[i] == k2[i] ? 1 : 0;
      same_site += k1[i] == k1[1000 + i] ? 1 : 0;
    }
    // Equal values by chance have probability 2^-24 per element.
    EXPECT_LE(same_key, 2) << "keys 1 and 2 give the same values on " << be->name();
    EXPECT_LE(same_site, 2) << "two random sites share a stream on " << be->name();
  }
}

// ---- dropout --------------------------------------------------------------------------------------

TEST(Dropout, OutputIsScaledInputOrZeroAndKeepsAboutOneMinusP) {
  constexpr double p = 0.3;
  const std::vector<InputSpec> specs = {away0({100000}, 0.5, 2)};  // nonzero: 0 means dropped
  const Traced t = trace_fn(specs, FN(dropout(x[0], 0.3)), /*training=*/true);
  ASSERT_EQ(t.graph.node(t.out).op, ir::Op::kDropout);
  const std::vector<double> x = make_inputs(specs, 1)[0].values;
  std::vector<std::vector<double>> outs;
  for (const auto& be : both_backends()) {
    outs.push_back(run_with_key(*be, t, specs, 12345));
    const std::vector<double>& y = outs.back();
    int64_t kept = 0, wrong = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      if (y[i] == 0) continue;
      ++kept;
      const double want = static_cast<float>(x[i] / (1 - p));
      if (std::abs(y[i] - want) > 2e-7 * std::abs(want) && ++wrong <= 5)
        ADD_FAILURE() << be->name() << " [" << i << "] " << y[i] << " is neither 0 nor x/(1-p) = " << want;
    }
    EXPECT_EQ(wrong, 0) << be->name();
    EXPECT_NEAR(static_cast<double>(kept) / static_cast<double>(y.size()), 1 - p, 0.01) << be->name();
  }
  // The same mask on both backends.
  ASSERT_EQ(outs.size(), 2u);
  int64_t mask_differs = 0;
  for (size_t i = 0; i < outs[0].size(); ++i) mask_differs += (outs[0][i] == 0) != (outs[1][i] == 0) ? 1 : 0;
  EXPECT_EQ(mask_differs, 0);
}

TEST(Dropout, GradientUsesTheForwardMask) {
  constexpr double p = 0.4;
  const std::vector<InputSpec> specs = {away0({100, 50}, 0.5, 2)};  // 5000 elements: > one CPU chunk
  std::vector<float> w(5000);
  Rng rng(7);
  for (float& v : w) v = static_cast<float>(rng.uniform(0.5, 1.5));  // nonzero weights
  int32_t y_id = -1;
  Traced t = trace_fn(specs, [&](const Ts& x) {
    Tensor y = dropout(x[0], p);
    y_id = y.id();
    return sum(y * constant(std::span<const float>(w), {100, 50}));
  }, /*training=*/true);
  const std::vector<int32_t> grads = autograd::append_gradients(t.graph, t.out, std::vector<int32_t>{t.inputs[0]});
  ASSERT_GE(grads.at(0), 0);
  t.graph.outputs = {y_id, grads[0]};
  for (int32_t key : {3, 4}) {
    for (const auto& be : both_backends()) {
      const auto outs = run_graph(*be, t.graph, t.inputs, make_feeds(specs, t, 2, key));
      const std::vector<double>& y = outs[0];
      const std::vector<double>& dx = outs[1];
      int64_t wrong = 0, kept = 0;
      for (size_t i = 0; i < y.size(); ++i) {
        const double want = y[i] != 0 ? static_cast<float>(w[i] / (1 - p)) : 0.0;
        kept += y[i] != 0 ? 1 : 0;
        if (std::abs(dx[i] - want) > 2e-7 * std::abs(want) && ++wrong <= 5)
          ADD_FAILURE() << be->name() << " key " << key << " [" << i << "] forward " << y[i] << ", gradient " << dx[i]
                        << ", expected " << want;
      }
      EXPECT_EQ(wrong, 0) << be->name() << " key " << key;
      EXPECT_NEAR(static_cast<double>(kept) / 5000.0, 1 - p, 0.03) << be->name() << " key " << key;
    }
  }
}

TEST(Dropout, IsTheIdentityOutsideTrainingAndForPZero) {
  for (bool training : {false, true}) {
    const Traced t = trace_fn({uni({3, 4})}, [&](const Ts& x) {
      EXPECT_EQ(is_training(), training);
      Tensor eval = dropout(x[0], training ? 0.0 : 0.3);  // eval mode, or p = 0 in training
      EXPECT_EQ(eval.id(), x[0].id()) << "training " << training;
      EXPECT_EQ(eval.graph(), x[0].graph());
      return eval * 2.0;
    }, training);
    EXPECT_EQ(t.rng_key, -1) << "no random op, so no key input";
    for (const ir::Node& n : t.graph.nodes()) EXPECT_NE(n.op, ir::Op::kDropout);
  }
  EXPECT_FALSE(is_training()) << "outside any trace";
}

// ---- run-time errors: bad targets and indices ---------------------------------------------------

/// Runs `fn` over `specs` (input `which` replaced by `values`) on both backends and expects a
/// tg::InputError whose message contains every one of `parts`.
void expect_input_error(const std::vector<InputSpec>& specs, const BuildFn& fn, size_t which,
                        const std::vector<double>& values, const std::vector<std::string>& parts,
                        bool with_gradient = false, Loc loc = Loc::current()) {
  const ::testing::ScopedTrace at(loc.file_name(), static_cast<int>(loc.line()), "expect_input_error");
  Traced t = trace_fn(specs, fn);
  if (with_gradient) {  // the backward graph alone: its gradient kernels check too
    const std::vector<int32_t> g = autograd::append_gradients(t.graph, t.out, std::vector<int32_t>{t.inputs[0]});
    ASSERT_GE(g.at(0), 0);
    t.graph.outputs = {g[0]};
  }
  std::vector<HostTensor> feeds = make_feeds(specs, t, 5);
  feeds.at(which).values = values;
  for (const auto& be : both_backends()) {
    try {
      run_graph(*be, t.graph, t.inputs, feeds);
      ADD_FAILURE() << "no tg::InputError on " << be->name();
    } catch (const InputError& e) {
      const std::string msg = e.what();
      for (const std::string& part : parts)
        EXPECT_NE(msg.find(part), std::string::npos) << be->name() << ": \"" << part << "\" missing in: " << msg;
    }
  }
}

TEST(NnInputErrors, CrossEntropyTargetOutOfRange) {
  const std::vector<InputSpec> specs = {uni({4, 5}), indices({4}, 5)};
  const BuildFn loss = FN(cross_entropy(x[0], x[1]));
  expect_input_error(specs, loss, 1, {1, 0, 7, 2}, {"[cross_entropy]", "row 2", "7"});
  expect_input_error(specs, loss, 1, {1, 5, 0, 2}, {"[cross_entropy]", "row 1", "5"});
  // negative and not the ignore_index
  expect_input_error(specs, loss, 1, {-100, 0, 1, -3}, {"[cross_entropy]", "row 3", "-3"});
  expect_input_error(specs, FN(cross_entropy(x[0], x[1], {.reduction = Reduction::kNone})), 1, {0, 1, 2, 9},
                     {"[cross_entropy]", "row 3"});
  // the gradient kernel validates its targets as well
  expect_input_error(specs, loss, 1, {1, 0, 7, 2}, {"[cross_entropy]", "row 2"}, /*with_gradient=*/true);
}

TEST(NnInputErrors, IgnoredTargetsAreNotOutOfRange) {
  const Traced t = trace_fn({uni({4, 5}), indices({4}, 5)}, FN(cross_entropy(x[0], x[1], {.ignore_index = -1})));
  std::vector<HostTensor> feeds = make_feeds({uni({4, 5}), indices({4}, 5)}, t, 5);
  feeds[1].values = {-1, 4, -1, 0};
  for (const auto& be : both_backends()) EXPECT_NO_THROW(run_graph(*be, t.graph, t.inputs, feeds)) << be->name();
}

TEST(NnInputErrors, GatherIndexOutOfRange) {
  const std::vector<InputSpec> specs = {uni({3, 5}), indices({3, 2}, 5)};
  const BuildFn take = FN(take_along_axis(x[0], x[1], 1));
  expect_input_error(specs, take, 1, {0, 1, 2, 5, 4, 3}, {"[gather]", "index 5"});
  expect_input_error(specs, take, 1, {0, 1, -1, 0, 4, 3}, {"[gather]", "index -1"});
  // an embedding id past the table
  expect_input_error({uni({5, 4}), indices({2, 3}, 5)}, FN(embedding(x[0], x[1])), 1, {0, 1, 2, 3, 4, 5},
                     {"[gather]", "index 5"});
}

TEST(NnInputErrors, UpdateSliceOffsetOutOfRange) {
  const BuildFn upd = FN(update_slice(x[0], x[1], x[2], 1));
  expect_input_error({uni({2, 6, 3}), uni({2, 2, 3}), indices({}, 5)}, upd, 2, {5}, {"[update_slice]", "offset 5", "extent 6"});
  expect_input_error({uni({2, 6, 3}), uni({2, 2, 3}), indices({}, 5)}, upd, 2, {-1}, {"[update_slice]", "offset -1"});
  // per-sequence offsets: row 1's is past the cache
  expect_input_error({uni({3, 6, 3}), uni({3, 1, 3}), indices({3}, 6)}, upd, 2, {0, 6, 2}, {"[update_slice]", "offset 6 of row 1"});
}

TEST(NnInputErrors, AttentionAtPositionOutOfRange) {
  const BuildFn at = FN(attention_at(x[0], x[1], x[2], x[3]));
  // two queries over a cache of 6: positions 0 … 4 are valid
  expect_input_error({uni({2, 2, 2, 4}), uni({2, 2, 6, 4}), uni({2, 2, 6, 4}), indices({2}, 5)}, at, 3, {1, 5},
                     {"[attention_at]", "position 5 of sequence 1", "[0, 4]"});
  expect_input_error({uni({2, 2, 2, 4}), uni({2, 2, 6, 4}), uni({2, 2, 6, 4}), indices({2}, 5)}, at, 3, {-1, 0},
                     {"[attention_at]", "position -1 of sequence 0"});
}

TEST(NnInputErrors, GroupedMatmulOffsetsThatDoNotRiseFromZeroToTheRows) {
  const std::vector<InputSpec> specs = {uni({5, 3}), uni({3, 2, 3}), indices({4}, 6)};
  const BuildFn gm = FN(grouped_matmul(x[0], x[1], x[2], true));
  expect_input_error(specs, gm, 2, {0, 3, 2, 5}, {"[grouped_matmul]", "offsets must rise from 0 to 5", "offsets[2] is 2"});
  expect_input_error(specs, gm, 2, {1, 2, 3, 5}, {"[grouped_matmul]", "offsets[0] is 1"});
  expect_input_error(specs, gm, 2, {0, 2, 3, 4}, {"[grouped_matmul]", "offsets[3] is 4"});
  expect_input_error(specs, gm, 2, {0, 2, 6, 5}, {"[grouped_matmul]", "offsets[2] is 6"});
  // the weight gradient's kernel checks them as well
  expect_input_error({uni({3, 2, 3}), uni({5, 3}), indices({4}, 6)}, FN(sum(grouped_matmul(x[1], x[0], x[2], true))), 2,
                     {0, 3, 2, 5}, {"[grouped_matmul_grad_weight]", "offsets must rise from 0 to 5"}, /*with_gradient=*/true);
  // an expert id outside [0, experts) fails in sort_by_expert's gather
  expect_input_error({indices({4}, 3)}, FN(sort_by_expert(x[0], 3).position), 0, {0, 2, 3, 1}, {"[gather]", "index 3"});
}

// ---- trace-time shape errors ------------------------------------------------------------------------

/// Tracing `fn` over `specs` throws a tg::ShapeError whose message names `op` (as "[op]"),
/// contains `detail` and points at this file.
void expect_shape_error(const std::vector<InputSpec>& specs, const BuildFn& fn, const std::string& op,
                        const std::string& detail = "", Loc loc = Loc::current()) {
  const ::testing::ScopedTrace at(loc.file_name(), static_cast<int>(loc.line()), "expect_shape_error");
  try {
    trace_fn(specs, fn);
    ADD_FAILURE() << "no tg::ShapeError";
  } catch (const ShapeError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("[" + op + "]"), std::string::npos) << msg;
    EXPECT_NE(msg.find(detail), std::string::npos) << msg;
    EXPECT_NE(msg.find("nn_op_table_test.cc"), std::string::npos) << "no caller file:line in: " << msg;
  }
}

TEST(NnShapeErrors, UpdateSlice) {
  const BuildFn upd = FN(update_slice(x[0], x[1], x[2], 1));
  expect_shape_error({uni({2, 6, 3}), uni({2, 2, 4}), indices({}, 5)}, upd, "update_slice", "off the updated axis");
  expect_shape_error({uni({2, 6, 3}), uni({2, 7, 3}), indices({}, 5)}, upd, "update_slice", "longer");
  expect_shape_error({uni({2, 6, 3}), uni({2, 2, 3}), indices({3}, 5)}, upd, "update_slice", "one per index of axis 0");
  expect_shape_error({uni({2, 6, 3}), ints({2, 2, 3}), indices({}, 5)}, upd, "update_slice", "dtype");
  expect_shape_error({uni({2, 6, 3}), uni({2, 2, 3}), uni({})}, upd, "update_slice", "i32");
  expect_shape_error({uni({4, 3}), uni({1, 3}), indices({4}, 3)}, FN(update_slice(x[0], x[1], x[2], 0)), "update_slice", "axis 0");
}

TEST(NnShapeErrors, UpdateSliceHasNoGradient) {
  Traced t = trace_fn({uni({2, 6, 3}), uni({2, 2, 3}), indices({}, 5)}, FN(sum(update_slice(x[0], x[1], x[2], 1))));
  try {
    autograd::append_gradients(t.graph, t.out, std::vector<int32_t>{t.inputs[0]});
    ADD_FAILURE() << "no tg::ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("no gradient"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("nn_op_table_test.cc"), std::string::npos) << e.what();
  }
}

TEST(NnShapeErrors, GroupedMatmul) {
  const BuildFn gm = FN(grouped_matmul(x[0], x[1], x[2], true));
  const BuildFn kn = FN(grouped_matmul(x[0], x[1], x[2]));
  expect_shape_error({uni({5, 3}), uni({2, 4, 3}), indices({3}, 6)}, kn, "grouped_matmul", "does not contract with x's 3 features on axis 1");
  expect_shape_error({uni({5, 3}), uni({2, 4, 5}), indices({3}, 6)}, gm, "grouped_matmul", "does not contract");
  expect_shape_error({uni({5, 3}), uni({2, 4, 3}), indices({4}, 6)}, gm, "grouped_matmul", "offsets must be i32 [3] (experts + 1)");
  expect_shape_error({uni({5, 3}), uni({2, 4, 3}), uni({3})}, gm, "grouped_matmul", "offsets must be i32");
  expect_shape_error({uni({2, 5, 3}), uni({2, 4, 3}), indices({3}, 6)}, gm, "grouped_matmul", "x must be [rows, K]");
  expect_shape_error({uni({5, 3}), uni({4, 3}), indices({3}, 6)}, gm, "grouped_matmul", "[5, 3] and [4, 3]");
  expect_shape_error({indices({5}, 3)}, FN(sort_by_expert(x[0], 0).position), "sort_by_expert", "experts must be in [1");
  expect_shape_error({uni({5})}, FN(sort_by_expert(x[0], 3).position), "sort_by_expert", "ids must be i32 [rows]");
}

TEST(NnShapeErrors, Attention) {
  const BuildFn attn = FN(attention(x[0], x[1], x[2]));
  const BuildFn attn_full = FN(attention(x[0], x[1], x[2], {.causal = false}));
  expect_shape_error({uni({2, 4, 5, 8}), uni({2, 2, 5, 8}), uni({2, 2, 6, 8})}, attn, "attention", "k and v");
  expect_shape_error({uni({2, 3, 5, 8}), uni({2, 2, 5, 8}), uni({2, 2, 5, 8})}, attn, "attention", "multiple");
  expect_shape_error({uni({2, 4, 6, 8}), uni({2, 2, 5, 8}), uni({2, 2, 5, 8})}, attn, "attention", "keys");  // causal T > S
  expect_shape_error({uni({2, 4, 5, 8}), uni({2, 2, 5, 4}), uni({2, 2, 5, 4})}, attn_full, "attention");   // D differs
  expect_shape_error({uni({3, 4, 5, 8}), uni({2, 2, 5, 8}), uni({2, 2, 5, 8})}, attn_full, "attention");   // B differs
  expect_shape_error({uni({4, 5, 8}), uni({2, 5, 8}), uni({2, 5, 8})}, attn_full, "attention");           // rank 3
}

TEST(NnShapeErrors, CrossEntropy) {
  expect_shape_error({uni({4, 5}), indices({5}, 5)}, FN(cross_entropy(x[0], x[1])), "cross_entropy", "targets");
  expect_shape_error({uni({2, 3, 5}), indices({3, 2}, 5)}, FN(cross_entropy(x[0], x[1])), "cross_entropy");
  expect_shape_error({uni({4, 5}), uni({4})}, FN(cross_entropy(x[0], x[1])), "cross_entropy", "i32");
}

TEST(NnShapeErrors, SoftmaxCausal) {
  expect_shape_error({uni({4, 4})}, FN(softmax(x[0], 0, true)), "softmax", "last axis");
  expect_shape_error({uni({3, 4, 4})}, FN(log_softmax(x[0], 1, true)), "log_softmax", "last axis");
  expect_shape_error({uni({4})}, FN(softmax(x[0], -1, true)), "softmax");      // rank 1
  expect_shape_error({uni({5, 3})}, FN(softmax(x[0], -1, true)), "softmax");   // T > S
  expect_shape_error({uni({3, 4})}, FN(softmax(x[0], 2)), "softmax");          // axis out of range
}

TEST(NnShapeErrors, ConvolutionalOps) {
  const BuildFn conv = FN(conv2d(x[0], x[1]));
  expect_shape_error({uni({2, 4, 5, 5}), uni({6, 2, 3, 3})}, FN(conv2d(x[0], x[1], Tensor(), {.groups = 3})), "conv2d", "groups");
  expect_shape_error({uni({2, 4, 5, 5}), uni({5, 2, 3, 3})}, FN(conv2d(x[0], x[1], Tensor(), {.groups = 2})), "conv2d", "output channels");
  expect_shape_error({uni({2, 4, 5, 5}), uni({6, 3, 3, 3})}, conv, "conv2d", "input channels per group");
  expect_shape_error({uni({1, 1, 4, 4}), uni({1, 1, 5, 5})}, conv, "conv2d", "larger than the padded input");
  expect_shape_error({uni({1, 1, 4, 4}), uni({1, 1, 3, 3})}, FN(conv2d(x[0], x[1], Tensor(), {.dilation = 2})), "conv2d", "larger than the padded input");
  expect_shape_error({uni({1, 1, 4, 4}), uni({1, 1, 3, 3})}, FN(conv2d(x[0], x[1], Tensor(), {.stride = 0})), "conv2d", "stride");
  expect_shape_error({uni({1, 1, 4, 4}), uni({1, 1, 3, 3})}, FN(conv2d(x[0], x[1], Tensor(), {.padding = -1})), "conv2d", "padding");
  expect_shape_error({uni({1, 4, 4}), uni({1, 1, 3, 3})}, conv, "conv2d", "[N, C, H, W]");
  expect_shape_error({uni({1, 1, 4, 4}), uni({1, 3, 3})}, conv, "conv2d", "weight");
  expect_shape_error({uni({1, 2, 4, 4}), uni({3, 2, 3, 3}), uni({2})}, FN(conv2d(x[0], x[1], x[2])), "conv2d", "bias");
  expect_shape_error({ints({1, 1, 4, 4}), uni({1, 1, 3, 3})}, conv, "conv2d", "f32, bf16 or f16");
  // conv_transpose2d: weight [Cin, Cout/groups, KH, KW].
  const BuildFn up = FN(conv_transpose2d(x[0], x[1]));
  expect_shape_error({uni({1, 4, 3, 3}), uni({3, 2, 3, 3})}, up, "conv_transpose2d", "input channels");
  expect_shape_error({uni({1, 4, 3, 3}), uni({4, 2, 3, 3})}, FN(conv_transpose2d(x[0], x[1], Tensor(), {.groups = 3})), "conv_transpose2d", "groups");
  expect_shape_error({uni({1, 4, 3, 3}), uni({4, 2, 3, 3})}, FN(conv_transpose2d(x[0], x[1], Tensor(), {.stride = 2, .output_padding = 2})), "conv_transpose2d", "smaller than the stride");
  expect_shape_error({uni({1, 4, 1, 1}), uni({4, 2, 1, 1})}, FN(conv_transpose2d(x[0], x[1], Tensor(), {.padding = 1})), "conv_transpose2d", "would be");
  expect_shape_error({uni({4, 3, 3}), uni({4, 2, 3, 3})}, up, "conv_transpose2d", "[N, C, H, W]");
  expect_shape_error({uni({1, 4, 3, 3}), uni({4, 2, 3})}, up, "conv_transpose2d", "weight");
  expect_shape_error({uni({1, 4, 3, 3}), uni({4, 2, 3, 3}), uni({3})}, FN(conv_transpose2d(x[0], x[1], x[2])), "conv_transpose2d", "bias");
  expect_shape_error({uni({1, 1, 2, 2})}, FN(max_pool2d(x[0], {.kernel = 3})), "max_pool2d", "larger than the padded input");
  expect_shape_error({uni({1, 1, 6, 6})}, FN(max_pool2d(x[0], {.kernel = 2, .padding = 2})), "max_pool2d", "half the kernel");
  expect_shape_error({uni({6, 6})}, FN(avg_pool2d(x[0], {.kernel = 2})), "avg_pool2d", "[N, C, H, W]");
  expect_shape_error({uni({1, 1, 6, 6})}, FN(avg_pool2d(x[0], {.kernel = 2, .dilation = 2})), "avg_pool2d", "dilation");
  expect_shape_error({uni({2, 3, 4, 4}), uni({4}), uni({3})}, FN(batch_norm(x[0], x[1], x[2], Tensor(), Tensor())), "batch_norm", "mean");
  expect_shape_error({uni({2, 3, 4, 4}), uni({3}), uni({3}), uni({2})}, FN(batch_norm(x[0], x[1], x[2], x[3], Tensor())), "batch_norm", "weight");
}

TEST(NnShapeErrors, OtherNnOps) {
  expect_shape_error({uni({3, 8}), uni({4})}, FN(layer_norm(x[0], x[1], Tensor())), "layer_norm", "weight");
  expect_shape_error({uni({3, 8}), uni({8, 1})}, FN(layer_norm(x[0], Tensor(), x[1])), "layer_norm");
  expect_shape_error({uni({3, 8}), uni({4})}, FN(rms_norm(x[0], x[1])), "rms_norm");
  expect_shape_error({uni({3, 5}), indices({3, 2, 1}, 5)}, FN(take_along_axis(x[0], x[1], 1)), "take_along_axis", "rank");
  expect_shape_error({uni({5, 4}), uni({2, 3})}, FN(embedding(x[0], x[1])), "embedding", "i32");
  expect_shape_error({uni({2, 3})}, FN(one_hot(x[0], 4)), "one_hot", "i32");
  expect_shape_error({uni({2, 5, 7})}, FN(rope(x[0])), "rope", "even");
  expect_shape_error({uni({2, 3})}, FN(pad(x[0], 1, -1, 2)), "pad");
  expect_shape_error({uni({2, 3})}, FN(dropout(x[0], 1.0)), "dropout");
  expect_shape_error({}, FN(random_uniform({2, -1})), "random", "negative");
}

// ---- hand-computed values (pin the reference backend) --------------------------------------------

constexpr double kInf = std::numeric_limits<double>::infinity();
const double kLn2 = std::log(2.0), kLn4 = std::log(4.0);

TEST(NnKnownValues, Softmax) {
  // ln 3 = 1.0986…: softmax([0, ln 3]) = [1/4, 3/4]; along axis 0 of a column.
  expect_known([] { return softmax(cf({0, 1.0986122886681098f}, {2, 1}), 0); }, {2, 1}, kF32, {0.25, 0.75}, 1e-7);
  // causal, T = 2 < S = 3: query 0 sees keys 0..1, query 1 sees all three.
  expect_known([] { return softmax(zeros({2, 3}), -1, true); }, {2, 3}, kF32,
               {0.5, 0.5, 0, 1.0 / 3, 1.0 / 3, 1.0 / 3}, 1e-7);
  // masked entries of a causal log_softmax are −∞, on both backends
  expect_known([] { return log_softmax(zeros({2, 2}), -1, true); }, {2, 2}, kF32, {0, -kInf, -kLn2, -kLn2}, 1e-7);
  expect_known([] { return log_softmax(cf({1, 2, 3}, {3})); }, {3}, kF32,
               {-2.40760596444438, -1.40760596444438, -0.40760596444438}, 1e-6);
}

TEST(NnKnownValues, CrossEntropy) {
  // logits 0: every row's loss is ln C; ignored rows contribute 0 and are not counted.
  auto targets = [] { return ci({1, -100, 3}, {3}); };
  expect_known([&] { return cross_entropy(zeros({3, 4}), targets(), {.reduction = Reduction::kNone}); }, {3}, kF32,
               {kLn4, 0, kLn4}, 1e-6);
  expect_known([&] { return cross_entropy(zeros({3, 4}), targets()); }, {}, kF32, {kLn4}, 1e-6);
  expect_known([&] { return cross_entropy(zeros({3, 4}), targets(), {.reduction = Reduction::kSum}); }, {}, kF32,
               {2 * kLn4}, 1e-6);
  // log(e + e² + e³) − 3
  expect_known([] { return cross_entropy(cf({1, 2, 3}, {1, 3}), ci({2}, {1})); }, {}, kF32, {0.40760596444438013}, 1e-6);
  // PyTorch: mean over no counted row is 0/0
  expect_known([] { return cross_entropy(zeros({2, 3}), ci({-100, -100}, {2})); }, {}, kF32,
               {std::numeric_limits<double>::quiet_NaN()});
}

TEST(NnKnownValues, UpdateSlice) {
  // one offset for every row
  expect_known([] { return update_slice(cf({1, 2, 3, 4, 5, 6}, {2, 3}), cf({9, 8}, {2, 1}), ci({1}, {}), 1); }, {2, 3}, kF32,
               {1, 9, 3, 4, 8, 6});
  // per-row offsets (a KV cache's positions): row 0 at 2, row 1 at 0
  expect_known([] { return update_slice(cf({1, 2, 3, 4, 5, 6}, {2, 3}), cf({9, 8}, {2, 1}), ci({2, 0}, {2}), 1); }, {2, 3}, kF32,
               {1, 2, 9, 8, 5, 6});
  // two rows along axis 0 at offset 1
  expect_known([] { return update_slice(cf({1, 2, 3, 4, 5, 6}, {3, 2}), cf({7, 8, 9, 10}, {2, 2}), ci({1}, {}), 0); }, {3, 2}, kF32,
               {1, 2, 7, 8, 9, 10});
}

TEST(NnKnownValues, SortByExpertAndGroupedMatmul) {
  // ids [2, 0, 2, 1] over 3 experts: sorted rows 1 (expert 0), 3 (expert 1), 0 then 2 (expert 2,
  // in their order), so positions [2, 0, 3, 1] and offsets [0, 1, 2, 4].
  expect_known([] { return sort_by_expert(ci({2, 0, 2, 1}, {4}), 3).position; }, {4}, kI32, {2, 0, 3, 1});
  expect_known([] { return sort_by_expert(ci({2, 0, 2, 1}, {4}), 3).offsets; }, {4}, kI32, {0, 1, 2, 4});
  // an expert without rows: ids [1, 1] over 3 experts
  expect_known([] { return sort_by_expert(ci({1, 1}, {2}), 3).offsets; }, {4}, kI32, {0, 0, 2, 2});
  // rows [1, 2], [3, 4], [5, 6] with offsets [0, 1, 3]: expert 0 = [[1, 0], [0, 1]] on row 0,
  // expert 1 = [[0, 1], [1, 0]] (the columns swapped) on rows 1 and 2; either layout of w
  // (both matrices are symmetric), then a non-symmetric expert 1 = [[1, 2], [3, 4]]:
  // x·w = [3·1 + 4·3, 3·2 + 4·4], and x·wᵀ = [3·1 + 4·2, 3·3 + 4·4].
  auto x = [] { return cf({1, 2, 3, 4, 5, 6}, {3, 2}); };
  auto off = [] { return ci({0, 1, 3}, {3}); };
  expect_known([&] { return grouped_matmul(x(), cf({1, 0, 0, 1, 0, 1, 1, 0}, {2, 2, 2}), off()); }, {3, 2}, kF32,
               {1, 2, 4, 3, 6, 5});
  expect_known([&] { return grouped_matmul(x(), cf({1, 0, 0, 1, 1, 2, 3, 4}, {2, 2, 2}), off()); }, {3, 2}, kF32,
               {1, 2, 15, 22, 23, 34});
  expect_known([&] { return grouped_matmul(x(), cf({1, 0, 0, 1, 1, 2, 3, 4}, {2, 2, 2}), off(), true); }, {3, 2}, kF32,
               {1, 2, 11, 25, 17, 39});
}

TEST(NnKnownValues, Rotary) {
  // x = [1, 2, 3, 4], cos = 0.5, sin = [1, 2, 3, 4]: [x₀c − x₂s₀, x₁c − x₃s₁, x₂c + x₀s₂, x₃c + x₁s₃]
  expect_known([] { return rotary(cf({1, 2, 3, 4}, {1, 4}), cf({0.5, 0.5, 0.5, 0.5}, {1, 4}), cf({1, 2, 3, 4}, {1, 4})); },
               {1, 4}, kF32, {-2.5, -7, 4.5, 10});
}

TEST(NnKnownValues, Normalisation) {
  expect_known([] { return layer_norm(cf({1, 2, 3, 4}, {1, 4}), Tensor(), Tensor(), 0.0); }, {1, 4}, kF32,
               {-1.3416407864998738, -0.4472135954999579, 0.4472135954999579, 1.3416407864998738}, 1e-6);
  expect_known([] { return layer_norm(cf({1, 2, 3, 4}, {1, 4}), cf({1, 2, 1, -1}, {4}), cf({0, 0, 1, 0}, {4}), 0.0); },
               {1, 4}, kF32, {-1.3416407864998738, -0.8944271909999158, 1.4472135954999579, -1.3416407864998738}, 1e-6);
  // eps enters under the root: var 1.25 + eps 0.75 = 2
  expect_known([] { return layer_norm(cf({1, 2, 3, 4}, {4}), Tensor(), Tensor(), 0.75); }, {4}, kF32,
               {-1.5 / std::sqrt(2.0), -0.5 / std::sqrt(2.0), 0.5 / std::sqrt(2.0), 1.5 / std::sqrt(2.0)}, 1e-6);
  expect_known([] { return rms_norm(cf({3, 4}, {1, 2}), Tensor(), 0.0); }, {1, 2}, kF32,
               {0.848528137423857, 1.131370849898476}, 1e-6);
  expect_known([] { return rms_norm(cf({3, 4}, {2}), cf({2, -1}, {2}), 0.0); }, {2}, kF32,
               {2 * 0.848528137423857, -1.131370849898476}, 1e-6);
}

// max_pool2d's rule on ties and NaN (the CPU's tiling and 2×2 kernels against ref): the first
// maximum in window order wins, a NaN wins and stays; the gradient goes to that one element.
TEST(NnKnownValues, MaxPoolTiesAndNaN) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // Windows [[1, 3], [3, 2]] → 3 at (0, 1); [[NaN, 5], [7, NaN]] → the first NaN.
  const std::vector<double> x = {1, 3, nan, 5, 3, 2, 7, nan};
  expect_known([&] { return max_pool2d(cf(std::vector<float>(x.begin(), x.end()), {1, 1, 2, 4}), {.kernel = 2}); },
               {1, 1, 1, 2}, kF32, {3, nan});
  expect_grads({{1, 1, 2, 4}}, {x}, [](const Ts& t) { return sum(max_pool2d(t[0], {.kernel = 2})); },
               {{0, 1, 1, 0, 0, 0, 0, 0}});
  // Twenty windows of four equal values (16 and 4 across a vector): the first element takes it.
  std::vector<double> ties(2 * 40), pooled(20), grad(ties.size(), 0.0);
  for (int j = 0; j < 20; ++j) {
    for (int r = 0; r < 2; ++r) ties[r * 40 + 2 * j] = ties[r * 40 + 2 * j + 1] = j % 5;
    pooled[j] = j % 5;
    grad[2 * j] = 1;
  }
  expect_known([&] { return max_pool2d(cf(std::vector<float>(ties.begin(), ties.end()), {1, 1, 2, 40}), {.kernel = 2}); },
               {1, 1, 1, 20}, kF32, pooled);
  expect_grads({{1, 1, 2, 40}}, {ties}, [](const Ts& t) { return sum(max_pool2d(t[0], {.kernel = 2})); }, {grad});
}

TEST(NnKnownValues, Indexing) {
  expect_known([] { return take_along_axis(cf({10, 11, 12, 20, 21, 22}, {2, 3}), ci({2, 0, 1, 1}, {2, 2}), 1); }, {2, 2},
               kF32, {12, 10, 21, 21});
  expect_known([] { return take_along_axis(cf({10, 11, 12, 20, 21, 22}, {2, 3}), ci({1, 0, 1}, {1, 3}), 0); }, {1, 3},
               kF32, {20, 11, 22});
  // broadcast indices: one index row used for both rows of x
  expect_known([] { return take_along_axis(cf({10, 11, 12, 20, 21, 22}, {2, 3}), ci({2, 2, 0}, {1, 3}), 1); }, {2, 3},
               kF32, {12, 12, 10, 22, 22, 20});
  expect_known([] { return embedding(cf({0, 1, 10, 11, 20, 21}, {3, 2}), ci({2, 0, 2, 1}, {2, 2})); }, {2, 2, 2}, kF32,
               {20, 21, 0, 1, 20, 21, 10, 11});
  expect_known([] { return one_hot(ci({2, 0, 1}, {3}), 3); }, {3, 3}, kF32, {0, 0, 1, 1, 0, 0, 0, 1, 0});
}

TEST(NnKnownValues, Activations) {
  auto one = [] { return cf({1}, {1}); };
  expect_known([&] { return gelu(one()); }, {1}, kF32, {0.8413447460685429}, 1e-6);
  expect_known([&] { return gelu(one(), GeluApprox::kTanh); }, {1}, kF32, {0.8411919906082768}, 1e-6);
  expect_known([&] { return silu(one()); }, {1}, kF32, {0.7310585786300049}, 1e-6);
  expect_known([&] { return swiglu(one(), cf({2}, {1})); }, {1}, kF32, {1.4621171572600098}, 1e-6);
  expect_known([] { return pad(cf({1, 2}, {2}), 0, 1, 2, 9); }, {5}, kF32, {9, 1, 2, 9, 9});
  expect_known([] { return pad(cf({1, 2}, {2, 1}), 1, 1, 0); }, {2, 2}, kF32, {0, 1, 0, 2});
}

TEST(NnKnownValues, SoftplusStaysFiniteAndExactAtLargeMagnitude) {
  // softplus(100) = 100 exactly in f32; softplus(−100) = e^−100 ≈ 3.72e-44, an f32 subnormal
  // (3.64e-44 or 3.78e-44 after rounding), neither 0 nor inf.
  const Traced t = trace_fn({}, FN(softplus(cf({100, -100, 0, 20, -20}, {5}))));
  for (const auto& be : both_backends()) {
    const std::vector<double> y = run_graph(*be, t.graph, {}, {}).at(0);
    EXPECT_EQ(y[0], 100.0) << be->name();
    EXPECT_GT(y[1], 3.5e-44) << be->name();
    EXPECT_LT(y[1], 3.9e-44) << be->name();
    EXPECT_NEAR(y[2], kLn2, 1e-7) << be->name();
    EXPECT_NEAR(y[3], 20.000000002061153, 2e-6) << be->name();
    EXPECT_NEAR(y[4], 2.0611536900435727e-09, 1e-15) << be->name();
  }
  // d softplus = sigmoid: 1 and ~0 at ±100, finite.
  expect_grads({{2}}, {{100, -100}}, FN(sum(softplus(x[0]))), {{1, 0}}, 1e-30);
}

TEST(NnKnownValues, Rope) {
  // D = 4, base 10⁴: θ = t·{1, 1/100}; at position t = offset = 1:
  // [x0 cos θ0 − x2 sin θ0, x1 cos θ1 − x3 sin θ1, x2 cos θ0 + x0 sin θ0, x3 cos θ1 + x1 sin θ1]
  expect_known([] { return rope(cf({1, 2, 3, 4}, {1, 4}), 10000.0, 1); }, {1, 4}, kF32,
               {-1.9841106485555495, 1.959900667496664, 2.4623779024123156, 4.019799668334994}, 2e-6);
  // position 0 is the identity
  expect_known([] { return rope(cf({1, 2, 3, 4, 5, 6, 7, 8}, {2, 4}), 10000.0, 0); }, {2, 4}, kF32,
               {1, 2, 3, 4, 5 * std::cos(1.0) - 7 * std::sin(1.0), 6 * std::cos(0.01) - 8 * std::sin(0.01),
                7 * std::cos(1.0) + 5 * std::sin(1.0), 8 * std::cos(0.01) + 6 * std::sin(0.01)},
               2e-6);
}

TEST(NnKnownValues, Attention) {
  // q = 0: every visible key gets the same weight. Hq = 2 heads share one kv head (MQA),
  // causal T = S = 2: row 0 sees key 0, row 1 averages keys 0 and 1.
  auto v = [] { return cf({1, 2, 3, 4}, {1, 1, 2, 2}); };
  expect_known([&] { return attention(zeros({1, 2, 2, 2}), cf({5, -1, 2, 7}, {1, 1, 2, 2}), v()); }, {1, 2, 2, 2}, kF32,
               {1, 2, 2, 3, 1, 2, 2, 3}, 1e-6);
  expect_known([&] { return attention(zeros({1, 2, 2, 2}), cf({5, -1, 2, 7}, {1, 1, 2, 2}), v(), {.causal = false}); },
               {1, 2, 2, 2}, kF32, {2, 3, 2, 3, 2, 3, 2, 3}, 1e-6);
  // T = 1 < S = 2 causal: the one query is the last position and sees both keys. With
  // q·k = [0, ln 3] (scale 1): weights [1/4, 3/4].
  expect_known([&] {
    return attention(cf({1, 0}, {1, 1, 1, 2}), cf({0, 0, 1.0986122886681098f, 0}, {1, 1, 2, 2}), v(),
                     {.causal = true, .scale = 1.0});
  }, {1, 1, 1, 2}, kF32, {0.25 * 1 + 0.75 * 3, 0.25 * 2 + 0.75 * 4}, 1e-6);
}

// A key mask that keeps the first L_b keys of sequence b gives what attention over those L_b keys
// alone gives (built here by slicing, with no mask), gradients included (the padding keys get
// none). Causal with T = S: a query at t < L_b sees keys ≤ t as in the short sequence; one at
// t ≥ L_b sees all L_b keys, as a non-causal query over them. On ref, cpu and (with a GPU) cuda.
TEST(NnKnownValues, AttentionKeyMaskEqualsTheShorterSequences) {
  const int64_t T = 5, lengths[2] = {3, 5};
  const std::vector<InputSpec> in{uni({2, 2, T, 4}), uni({2, 1, T, 4}), uni({2, 1, T, 4})};
  std::vector<std::unique_ptr<backend::Backend>> backends = both_backends();
  if (tg::testing::gpu_skip_reason().empty()) backends.push_back(backend::make_cuda_backend(0));
  for (const bool causal : {false, true}) {
    const BuildFn masked = [&](const Ts& x) {
      const Tensor mask = cf({1, 1, 1, 0, 0, 1, 1, 1, 1, 1}, {2, T});  // nonzero: kept
      return attention(x[0], x[1], x[2], {.causal = causal, .key_mask = mask});
    };
    const BuildFn sliced = [&](const Ts& x) {
      std::vector<Tensor> rows;
      for (int64_t b = 0; b < 2; ++b) {
        const int64_t n = lengths[b];
        auto cut = [&](const Tensor& t, int64_t lo, int64_t hi) { return slice(slice(t, 0, b, b + 1), 2, lo, hi); };
        const Tensor k = cut(x[1], 0, n), v = cut(x[2], 0, n);
        if (!causal) {
          rows.push_back(attention(cut(x[0], 0, T), k, v, {.causal = false}));
        } else {
          const Tensor early = attention(cut(x[0], 0, n), k, v);
          rows.push_back(n == T ? early : concat({early, attention(cut(x[0], n, T), k, v, {.causal = false})}, 2));
        }
      }
      return concat(std::span<const Tensor>(rows), 0);
    };
    for (const auto& be : backends) {
      const auto want = run_weighted(*be, 11, in, sliced, kF32, 0x77);
      const auto got = run_weighted(*be, 11, in, masked, kF32, 0x77);
      ASSERT_EQ(got.size(), want.size());
      const char* what[] = {"out", "dq", "dk", "dv"};
      for (size_t i = 0; i < want.size(); ++i)
        EXPECT_TRUE(all_close(got[i], want[i], {1e-5, 1e-6}))
            << what[i] << (causal ? " causal" : "") << " on " << be->name();
    }
  }
}

// ---- hand-computed gradients ---------------------------------------------------------------------

TEST(NnKnownGradients, CrossEntropyIgnoredRowsGetNoGradient) {
  // mean over the 1 counted row: d/dlogits = softmax − onehot = [1/3 − 1, 1/3, 1/3]; row 1 ignored.
  expect_grads({{2, 3}}, {{0, 0, 0, 5, -2, 1}}, FN(cross_entropy(x[0], ci({0, -100}, {2}))),
               {{-2.0 / 3, 1.0 / 3, 1.0 / 3, 0, 0, 0}});
  // kNone weighted by [2, 3]: each row scaled by its own weight; an ignored row stays exactly 0.
  expect_grads({{3, 2}}, {{0, 0, 1, -1, 3, 3}},
               FN(sum(cross_entropy(x[0], ci({1, -100, 0}, {3}), {.reduction = Reduction::kNone}) * cf({2, 7, 3}, {3}))),
               {{1, -1, 0, 0, -1.5, 1.5}}, 1e-7);
}

TEST(NnKnownGradients, EmbeddingRepeatedIdsAccumulate) {
  // ids {0, 2, 0}: table row 0 collects the weights of outputs 0 and 2, row 1 nothing.
  expect_grads({{3, 2}}, {{1, 2, 3, 4, 5, 6}},
               FN(sum(embedding(x[0], ci({0, 2, 0}, {3})) * cf({1, 2, 10, 20, 100, 200}, {3, 2}))),
               {{101, 202, 0, 0, 10, 20}}, 0);
  // take_along_axis along axis 0 with repeated indices: the same accumulation
  expect_grads({{2, 2}}, {{1, 2, 3, 4}}, FN(sum(take_along_axis(x[0], ci({1, 1, 1, 0}, {2, 2}), 0))), {{0, 1, 2, 1}}, 0);
}

// max_pool2d(relu(y + b)) is traced as relu(max_pool2d(y) + b) (ir/api_conv.cc): exact, so
// both the values and the gradients equal those of the form the rewrite does not touch (the
// relu's output passed through a multiplication by one first), with windows whose maximum is
// negative (no gradient), positive, and ties between negative values.
TEST(NnKnownGradients, MaxPoolOfReluIsPooledFirstExactly) {
  std::vector<double> x(2 * 3 * 4 * 4), b = {0.25, -0.5, 0.0}, w(2 * 3 * 2 * 2);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(1.7 * static_cast<double>(i) + 0.3) * 2;
  x[0] = x[1] = x[4] = x[5] = -1.5;  // a window of equal negative values
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.5 + 0.1 * static_cast<double>(i);
  const auto pooled = [&](bool plain) {
    return [plain, &w](const Ts& t) {
      Tensor r = relu(t[0] + reshape(t[1], {1, 3, 1, 1}));
      if (plain) r = r * 1.0;
      return sum(max_pool2d(r, {.kernel = 2}) * cf(std::vector<float>(w.begin(), w.end()), {2, 3, 2, 2}));
    };
  };
  const std::vector<InputSpec> specs = {uni({2, 3, 4, 4}), uni({3})};
  const Traced t = trace_fn(specs, pooled(false));
  for (const ir::Node& n : t.graph.nodes()) {
    if (n.op == ir::Op::kMaxPool2d) {
      EXPECT_NE(t.graph.node(n.inputs[0]).op, ir::Op::kRelu) << "not pooled first";
    }
  }
  for (const auto& be : both_backends()) {
    const auto rewritten = grads_on(*be, {{2, 3, 4, 4}, {3}}, {x, b}, pooled(false));
    const auto plain = grads_on(*be, {{2, 3, 4, 4}, {3}}, {x, b}, pooled(true));
    for (size_t i = 0; i < 2; ++i) EXPECT_TRUE(all_close(rewritten[i], plain[i], {1e-6, 1e-7})) << "d/dx" << i << " on " << be->name();
    const std::vector<HostTensor> feeds = {{DType::kF32, x}, {DType::kF32, b}};
    const auto value = [&](bool plain_form) {
      const Traced tr = trace_fn(specs, pooled(plain_form));
      return run_graph(*be, tr.graph, tr.inputs, feeds).at(0);
    };
    EXPECT_EQ(value(false), value(true)) << be->name();
  }
}

TEST(NnKnownGradients, SoftmaxAndNorms) {
  // sum(softmax(x)) is 1 whatever x: zero gradient, also through a causal mask.
  expect_grads({{2, 3}}, {{0.5, -1, 2, 0, 1, 3}}, FN(sum(softmax(x[0], -1, true))), {{0, 0, 0, 0, 0, 0}}, 1e-7);
  // d/dx sum(log_softmax(x)) over C = 3 = 1 − 3 softmax(x); at x = 0: 0.
  expect_grads({{3}}, {{0, 0, 0}}, FN(sum(log_softmax(x[0]))), {{0, 0, 0}}, 1e-7);
  // layer_norm output sums to 0 per row whatever x: zero gradient; weight gets x̂, bias 1.
  expect_grads({{1, 4}, {4}, {4}}, {{1, 2, 3, 4}, {1, 1, 1, 1}, {0, 0, 0, 0}}, FN(sum(layer_norm(x[0], x[1], x[2], 0.0))),
               {{0, 0, 0, 0}, {-1.3416407864998738, -0.4472135954999579, 0.4472135954999579, 1.3416407864998738}, {1, 1, 1, 1}},
               1e-6);
}

}  // namespace
// Soft-capped, windowed, grouped-query attention against the formula computed here in double:
// scores s = scale·q·k capped to c·tanh(s/c); query i of head h sits at position p = i + S − T,
// reads kv head h / (Hq / Hkv) and sees keys p − W < j ≤ p; with sinks, e^{sink[h]} joins each
// row's denominator. Fewer queries than keys (the composite), and self-attention long enough for
// blocks of 2W keys (T = 10, padded to 12), where no tensor of the graph is as large as the
// heads' T × S scores together.
TEST(NnKnownValues, AttentionWindowSoftcapAndSinks) {
  struct Sizes {
    int64_t Hq, Hkv, T, S, D, W;
  };
  for (const bool with_sinks : {false, true})
  for (const Sizes z : {Sizes{2, 1, 2, 3, 2, 2}, Sizes{4, 2, 10, 10, 3, 3}}) {
    const auto values = [](int64_t n, double phase) {
      std::vector<float> out;
      for (int64_t i = 0; i < n; ++i) out.push_back(static_cast<float>(1.5 * std::sin(0.7 * double(i) + phase)));
      return out;
    };
    const std::vector<float> q = values(z.Hq * z.T * z.D, 0.1), k = values(z.Hkv * z.S * z.D, 1.3),
                             v = values(z.Hkv * z.S * z.D, 2.9);
    const double scale = 0.8, cap = 1.5;
    const std::vector<float> sinks = values(z.Hq, 4.1);
    std::vector<double> want;
    for (int64_t h = 0; h < z.Hq; ++h)
      for (int64_t i = 0; i < z.T; ++i) {
        const int64_t p = i + z.S - z.T, kv = h / (z.Hq / z.Hkv);
        std::vector<double> e(static_cast<size_t>(z.S), 0.0);
        double total = with_sinks ? std::exp(double(sinks[size_t(h)])) : 0.0;
        for (int64_t j = std::max<int64_t>(0, p - z.W + 1); j <= p; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < z.D; ++d)
            dot += double(q[size_t((h * z.T + i) * z.D + d)]) * double(k[size_t((kv * z.S + j) * z.D + d)]);
          e[size_t(j)] = std::exp(cap * std::tanh(scale * dot / cap));
          total += e[size_t(j)];
        }
        for (int64_t d = 0; d < z.D; ++d) {
          double o = 0;
          for (int64_t j = 0; j < z.S; ++j) o += e[size_t(j)] / total * double(v[size_t((kv * z.S + j) * z.D + d)]);
          want.push_back(o);
        }
      }
    const auto fn = [&] {
      return attention(cf(q, {1, z.Hq, z.T, z.D}), cf(k, {1, z.Hkv, z.S, z.D}), cf(v, {1, z.Hkv, z.S, z.D}),
                       {.scale = scale,
                        .window = z.W,
                        .softcap = cap,
                        .sinks = with_sinks ? std::optional<Tensor>(cf(sinks, {z.Hq})) : std::nullopt});
    };
    expect_known(fn, {1, z.Hq, z.T, z.D}, kF32, want, 1e-6);
    if (z.T == z.S) {
      const Traced t = trace_fn({}, [&](const Ts&) { return fn(); });
      for (const ir::Node& n : t.graph.nodes())
        EXPECT_LT(numel(n.shape), z.Hq * z.T * z.S) << ir::op_name(n.op) << " holds all the scores";
    }
  }
}

}  // namespace tg::op_test
