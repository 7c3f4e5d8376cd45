// tg::sample, the in-graph sampling of decoding: the draws follow the distribution the options
// describe (frequencies over many rows against softmax probabilities computed here in double,
// with the top-k and nucleus cuts applied by hand), greedy is argmax, the same key repeats the
// same ids and a new counter draws anew — on every backend this machine has. The op table
// (op_table_test.cc) checks cpu and cuda against ref id for id.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "tensorgrad/tensorgrad.h"
#include "test_util.h"

namespace {

using namespace tg;

struct NoParams : Module {};

std::vector<Device> devices() { return tg::testing::all_devices(); }

constexpr int64_t kRows = 20000;
const std::vector<float> kLogits{1.0f, 0.5f, 0.0f, -0.5f, 2.0f, -1.0f, 1.0f};  // two tied at 1.0
constexpr int64_t kV = 7;

class Sample : public ::testing::TestWithParam<Device> {
 protected:
  /// A program drawing one id per row of kRows copies of kLogits; params [3] or, with min_p, [4].
  Program program(int64_t params = 3) {
    return compile_forward(
        model_, [](Tensor logits, Tensor params, Tensor key) { return sample(logits, params, key); },
        {.inputs = {{"logits", {kRows, kV}}, {"params", {params}}, {"key", {2}, DType::kI32}},
         .device = GetParam()});
  }
  std::vector<int32_t> draw(Program& p, std::vector<float> params, std::vector<int32_t> key) {
    std::vector<float> logits;
    for (int64_t r = 0; r < kRows; ++r) logits.insert(logits.end(), kLogits.begin(), kLogits.end());
    return p.run({{"logits", logits}, {"params", params}, {"key", key}}).i32();
  }
  /// Every token's frequency within 5 standard errors of `want` (which sums to 1).
  static void expect_frequencies(const std::vector<int32_t>& ids, const std::vector<double>& want,
                                 const std::string& what) {
    std::vector<double> count(kV, 0);
    for (const int32_t id : ids) {
      ASSERT_GE(id, 0) << what;
      ASSERT_LT(id, kV) << what;
      count[static_cast<size_t>(id)] += 1;
    }
    for (size_t i = 0; i < kV; ++i) {
      const double f = count[i] / kRows, p = want[i];
      if (p == 0) {
        EXPECT_EQ(count[i], 0) << what << ": token " << i << " is outside the cut";
      } else {
        EXPECT_NEAR(f, p, 5 * std::sqrt(p * (1 - p) / kRows) + 1e-12) << what << ": token " << i;
      }
    }
  }
  /// softmax(kLogits / t) over the tokens `keep` marks, zero elsewhere.
  static std::vector<double> softmax_over(double t, const std::vector<bool>& keep) {
    std::vector<double> p(kV, 0);
    double z = 0;
    for (size_t i = 0; i < kV; ++i)
      if (keep[i]) z += p[i] = std::exp(kLogits[i] / t);
    for (double& v : p) v /= z;
    return p;
  }
  NoParams model_;
};

TEST_P(Sample, TemperatureFollowsTheSoftmax) {
  Program p = program();
  expect_frequencies(draw(p, {0.7f, 0, 1}, {1, 0}), softmax_over(0.7, std::vector<bool>(kV, true)), "T 0.7");
  expect_frequencies(draw(p, {2.5f, 0, 1}, {1, 1}), softmax_over(2.5, std::vector<bool>(kV, true)), "T 2.5");
}

TEST_P(Sample, TopKKeepsTheKLargestAndTiesAtTheCut) {
  Program p = program();
  // the three largest: 2.0 (token 4) and the tie at 1.0 (tokens 0 and 6)
  expect_frequencies(draw(p, {1, 3, 1}, {2, 0}),
                     softmax_over(1, {true, false, false, false, true, false, true}), "top-k 3");
  // k = 2 cuts inside the tie at 1.0: both tied tokens stay
  expect_frequencies(draw(p, {1, 2, 1}, {2, 1}),
                     softmax_over(1, {true, false, false, false, true, false, true}), "top-k 2");
  expect_frequencies(draw(p, {1, 1, 1}, {2, 2}),
                     softmax_over(1, {false, false, false, false, true, false, false}), "top-k 1");
}

TEST_P(Sample, TopPKeepsTheNucleus) {
  Program p = program();
  // softmax(x) sorted: 2.0 → 0.464, the tie at 1.0 → 0.171 each, 0.5 → 0.104, …
  const std::vector<double> probs = softmax_over(1, std::vector<bool>(kV, true));
  std::vector<size_t> order(kV);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return kLogits[a] > kLogits[b]; });
  for (const double top_p : {0.3, 0.6, 0.9}) {
    std::vector<bool> keep(kV, false);
    for (size_t i = 0; i < kV; ++i) {  // kept when the strictly larger tokens hold less than top_p
      double above = 0;
      for (size_t j = 0; j < kV; ++j)
        if (kLogits[j] > kLogits[i]) above += probs[j];
      keep[i] = above < top_p;
    }
    expect_frequencies(draw(p, {1, 0, static_cast<float>(top_p)}, {3, static_cast<int32_t>(top_p * 10)}),
                       softmax_over(1, keep), "top-p " + std::to_string(top_p));
  }
  // top-k then top-p, at temperature 0.5: of {2.0, 1.0, 1.0}, 2.0 alone holds 0.79 of the mass
  expect_frequencies(draw(p, {0.5f, 3, 0.7f}, {4, 0}),
                     softmax_over(0.5, {false, false, false, false, true, false, false}),
                     "top-k 3, top-p 0.7");
  expect_frequencies(draw(p, {0.5f, 3, 0.85f}, {4, 1}),
                     softmax_over(0.5, {true, false, false, false, true, false, true}),
                     "top-k 3, top-p 0.85");
}

// min_p keeps the tokens at least min_p times as likely as the most likely (at temperature T:
// x ≥ max + T·ln min_p), after top-k and top-p as Hugging Face applies it.
TEST_P(Sample, MinPKeepsTheLikelyEnough) {
  Program p = program(4);
  for (const auto& [t, min_p] : {std::pair{1.0, 0.3}, {2.0, 0.3}, {1.0, 0.05}}) {
    std::vector<bool> keep(kV);
    for (size_t i = 0; i < kV; ++i) keep[i] = std::exp((kLogits[i] - 2.0) / t) >= min_p;
    expect_frequencies(
        draw(p, {static_cast<float>(t), 0, 1, static_cast<float>(min_p)}, {5, static_cast<int32_t>(t * 10)}),
        softmax_over(t, keep), "T " + std::to_string(t) + ", min-p " + std::to_string(min_p));
  }
  // Both cuts, each the tighter once. top-p 0.6 keeps {2.0, 1.0, 1.0} and min-p 0.05 five
  // tokens: the three. top-p 0.95 keeps six and min-p 0.3 the three.
  const std::vector<bool> three{true, false, false, false, true, false, true};
  expect_frequencies(draw(p, {1, 0, 0.6f, 0.05f}, {6, 0}), softmax_over(1, three), "top-p 0.6, min-p 0.05");
  expect_frequencies(draw(p, {1, 0, 0.95f, 0.3f}, {6, 2}), softmax_over(1, three), "top-p 0.95, min-p 0.3");
  // min-p above 1 keeps the most likely token alone (never none).
  expect_frequencies(draw(p, {1, 0, 1, 2}, {6, 3}),
                     softmax_over(1, {false, false, false, false, true, false, false}), "min-p 2");
  // min-p 0 is off: every token, as with params [3].
  expect_frequencies(draw(p, {1, 0, 1, 0}, {6, 1}), softmax_over(1, std::vector<bool>(kV, true)), "min-p 0");
}

TEST_P(Sample, GreedyIsTheFirstLargestAndKeysRepeat) {
  Program p = program();
  for (const int32_t id : draw(p, {0, 0, 1}, {9, 9})) ASSERT_EQ(id, 4);
  const std::vector<int32_t> a = draw(p, {1, 0, 1}, {5, 17}), b = draw(p, {1, 0, 1}, {5, 17}),
                             c = draw(p, {1, 0, 1}, {5, 18}), d = draw(p, {1, 0, 1}, {6, 17});
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(a, d);
  // A row's draws under successive counters are independent: row 0 over 2000 counters
  // follows the softmax too.
  Program one = compile_forward(
      model_, [](Tensor logits, Tensor params, Tensor key) { return sample(logits, params, key); },
      {.inputs = {{"logits", {1, kV}}, {"params", {3}}, {"key", {2}, DType::kI32}}, .device = GetParam()});
  std::vector<double> count(kV, 0);
  constexpr int kDraws = 2000;
  for (int32_t k = 0; k < kDraws; ++k)
    count[static_cast<size_t>(one.run({{"logits", kLogits},
                                       {"params", std::vector<float>{1, 0, 1}},
                                       {"key", std::vector<int32_t>{0, k}}})
                                  .i32()[0])] += 1;
  const std::vector<double> want = softmax_over(1, std::vector<bool>(kV, true));
  for (size_t i = 0; i < kV; ++i)
    EXPECT_NEAR(count[i] / kDraws, want[i], 5 * std::sqrt(want[i] * (1 - want[i]) / kDraws)) << "token " << i;
}

TEST_P(Sample, NegativeInfinityIsNeverDrawn) {
  Program p = compile_forward(
      model_, [](Tensor logits, Tensor params, Tensor key) { return sample(logits, params, key); },
      {.inputs = {{"logits", {64, 3}}, {"params", {3}}, {"key", {2}, DType::kI32}}, .device = GetParam()});
  std::vector<float> logits;
  for (int r = 0; r < 64; ++r) logits.insert(logits.end(), {-INFINITY, 1.0f, 2.0f});
  for (const float t : {1.0f, 50.0f, INFINITY}) {  // at an infinite temperature the finite ones are uniform
    std::vector<int> seen(3, 0);
    for (const int32_t id : p.run({{"logits", logits},
                                   {"params", std::vector<float>{t, 0, 1}},
                                   {"key", std::vector<int32_t>{1, 2}}})
                                .i32())
      ++seen[static_cast<size_t>(id)];
    EXPECT_EQ(seen[0], 0) << "temperature " << t;
    EXPECT_GT(seen[1], 0) << "temperature " << t;
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, Sample, ::testing::ValuesIn(devices()),
                         [](const auto& info) { return tg::testing::device_test_name(info.param); });

TEST(SampleErrors, ShapesAndDtypes) {
  NoParams m;
  const auto expect_error = [&](std::vector<InputSpec> inputs, const std::string& needle) {
    try {
      compile_forward(m, [](Tensor logits, Tensor params, Tensor key) { return sample(logits, params, key); },
                      {.inputs = std::move(inputs), .device = Device::cpu()});
      ADD_FAILURE() << "no tg::ShapeError for " << needle;
    } catch (const ShapeError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("[sample]"), std::string::npos) << e.what();
    }
  };
  expect_error({{"l", {2, 5}}, {"p", {2}}, {"k", {2}, DType::kI32}}, "params must be f32 [4]");
  expect_error({{"l", {2, 5}}, {"p", {3}}, {"k", {2}}}, "key must be i32 [2]");
  expect_error({{"l", {2, 5}, DType::kI32}, {"p", {3}}, {"k", {2}, DType::kI32}}, "logits must be f32");
}

}  // namespace
