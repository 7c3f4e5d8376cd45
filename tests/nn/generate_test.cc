// tg::Generator over a GPT's KV-cached step: greedy generation equals the argmax of the plain
// forward on the growing sequence (prompts longer than the prefill window, batches of prompts
// of different lengths, the cache limit); sampling repeats for a seed and agrees across
// backends; stop tokens and the streaming callback; and the errors for bad prompts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "tensorgrad/tensorgrad.h"
#include "test_util.h"

namespace {

using namespace tg;

const nn::GptConfig kConfig{
    .vocab = 37, .seq_len = 24, .layers = 2, .d_model = 32, .heads = 4, .kv_heads = 2};
constexpr int64_t kCache = 20;

std::vector<Device> devices() { return tg::testing::all_devices(); }

Generator make_generator(nn::Gpt& model, int64_t batch, int64_t prefill_len, Device device) {
  Generator g(model,
              [&model](const Tensor& ids, const Tensor& pos, int64_t cache) {
                return model.logits_cached(ids, pos, cache);
              },
              {.batch = batch, .cache_len = kCache, .prefill_len = prefill_len, .device = device});
  g.prefill().init_params(3);
  return g;
}

/// Greedy continuation by the plain forward on the growing sequence (padded to kCache).
std::vector<int32_t> greedy_by_full_forward(nn::Gpt& model, const std::vector<int32_t>& seq, int64_t steps,
                                            Device device) {
  Program full = compile_forward(model, [&model](Tensor ids) { return model.logits(ids); },
                                 {.inputs = {{"ids", {1, kCache}, DType::kI32}}, .device = device});
  return tg::testing::greedy_by_full_forward(full, seq, steps, kCache, kConfig.vocab);
}

std::vector<int32_t> prompt_of(int64_t len, int64_t salt) {
  std::vector<int32_t> p;
  for (int64_t t = 0; t < len; ++t)
    p.push_back(static_cast<int32_t>((salt * 13 + t * 7 + 5) % kConfig.vocab));
  return p;
}

class Generate : public ::testing::TestWithParam<Device> {};

TEST_P(Generate, GreedyEqualsTheFullForward) {
  nn::Gpt model(kConfig);
  // One sequence: a 7-token prompt through a 4-token prefill window (two windows).
  Generator one = make_generator(model, 1, 4, GetParam());
  const std::vector<int32_t> prompt = prompt_of(7, 0);
  const std::vector<int32_t> got = one.generate(prompt, {.max_new_tokens = 8});
  EXPECT_EQ(got, greedy_by_full_forward(model, prompt, 8, GetParam()));
  // Up to the cache: 20 positions hold the 7 prompt tokens and 13 new ones.
  EXPECT_EQ(one.generate(prompt, {.max_new_tokens = 100}).size(), static_cast<size_t>(kCache - 7));
  // Three sequences of 7, 2 and 5 tokens at once; each as it would be alone.
  nn::Gpt model3(kConfig);
  Generator three = make_generator(model3, 3, 4, GetParam());
  const std::vector<std::vector<int32_t>> prompts{prompt_of(7, 1), prompt_of(2, 2), prompt_of(5, 3)};
  const std::vector<std::vector<int32_t>> outs = three.generate(prompts, {.max_new_tokens = 6});
  ASSERT_EQ(outs.size(), 3u);
  for (size_t i = 0; i < 3; ++i)
    EXPECT_EQ(outs[i], greedy_by_full_forward(model3, prompts[i], 6, GetParam())) << "sequence " << i;
}

// Greedy with Hugging Face's repetition penalty, on the host from the plain forward: each
// token already in the sequence has its logit s made s / penalty (s > 0) or s · penalty.
// `full` maps ids [1, kCache] to their logits.
std::vector<int32_t> penalised_greedy(Program& full, std::vector<int32_t> seq, int64_t steps, float penalty) {
  std::vector<int32_t> out;
  while (static_cast<int64_t>(out.size()) < steps && static_cast<int64_t>(seq.size()) < kCache) {
    std::vector<int32_t> padded = seq;
    padded.resize(kCache, 0);
    const std::vector<float> logits = full.run({{"ids", padded}}).f32();
    std::vector<float> row(logits.begin() + static_cast<long>((seq.size() - 1) * kConfig.vocab),
                           logits.begin() + static_cast<long>(seq.size() * kConfig.vocab));
    std::vector<bool> seen(kConfig.vocab, false);
    for (const int32_t t : seq) seen[static_cast<size_t>(t)] = true;
    for (size_t i = 0; i < row.size(); ++i)
      if (seen[i]) row[i] = row[i] > 0 ? row[i] / penalty : row[i] * penalty;
    const auto best = static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
    out.push_back(best);
    seq.push_back(best);
  }
  return out;
}

// The penalty covers the prompt (through prefill windows, padding not counted, or token by
// token without a prefill) and the tokens generated; it changes the continuation.
TEST_P(Generate, RepetitionPenaltyEqualsTheHostRule) {
  nn::Gpt model(kConfig);
  const float penalty = 3.0f;
  const std::vector<std::vector<int32_t>> prompts{prompt_of(7, 1), prompt_of(2, 2), prompt_of(5, 3)};
  Program full = compile_forward(model, [&model](Tensor ids) { return model.logits(ids); },
                                 {.inputs = {{"ids", {1, kCache}, DType::kI32}}, .device = GetParam()});
  bool first = true;  // the parameters: init_params(3) once, shared by every program here
  std::vector<std::vector<int32_t>> want, plain;
  for (const bool prefill : {true, false}) {
    Generator g(
        model,
        [&model](const Tensor& ids, const Tensor& pos, int64_t cache) {
          return model.logits_cached(ids, pos, cache);
        },
        {.batch = 3, .cache_len = kCache, .prefill_len = 4, .device = GetParam(), .prefill = prefill});
    if (first) {
      g.decode().init_params(3);
      for (const std::vector<int32_t>& p : prompts) {
        want.push_back(penalised_greedy(full, p, 8, penalty));
        plain.push_back(penalised_greedy(full, p, 8, 1.0f));
      }
      first = false;
    }
    const auto outs = g.generate(prompts, {.max_new_tokens = 8, .repetition_penalty = penalty});
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(outs[i], want[i]) << "sequence " << i << (prefill ? " with" : " without") << " a prefill";
      EXPECT_NE(outs[i], plain[i]) << "sequence " << i;
    }
    // The same Generator without the penalty (the programs that compute none), then with it
    // again: each call starts from empty caches and an empty record of the tokens seen.
    EXPECT_EQ(g.generate(prompts, {.max_new_tokens = 8}), plain);
    EXPECT_EQ(g.generate(prompts, {.max_new_tokens = 8, .repetition_penalty = penalty}), want);
  }
}

TEST_P(Generate, SamplingRepeatsForASeed) {
  nn::Gpt model(kConfig);
  Generator g = make_generator(model, 2, 8, GetParam());
  const std::vector<std::vector<int32_t>> prompts{prompt_of(3, 4), prompt_of(6, 5)};
  GenerateOptions o{.max_new_tokens = 12, .temperature = 1.5f, .top_k = 20, .top_p = 0.95f, .seed = 5};
  const auto a = g.generate(prompts, o), b = g.generate(prompts, o);
  EXPECT_EQ(a, b);
  o.seed = 6;
  EXPECT_NE(a, g.generate(prompts, o));
  o.seed = 5;
  o.temperature = 0;
  EXPECT_NE(a, g.generate(prompts, o));  // greedy is another continuation
}

TEST_P(Generate, StopTokensAndTheCallback) {
  nn::Gpt model(kConfig);
  Generator g = make_generator(model, 1, 4, GetParam());
  const std::vector<int32_t> prompt = prompt_of(5, 6);
  const std::vector<int32_t> full = g.generate(prompt, {.max_new_tokens = 10});
  ASSERT_EQ(full.size(), 10u);
  // Stop at the first token that did not occur before it: everything before it comes back.
  size_t k = 1;
  while (k < full.size() && std::find(full.begin(), full.begin() + static_cast<long>(k), full[k]) !=
                                full.begin() + static_cast<long>(k))
    ++k;
  ASSERT_LT(k, full.size()) << "every token repeats an earlier one";
  EXPECT_EQ(g.generate(prompt, {.max_new_tokens = 10, .stop_tokens = {full[k]}}),
            std::vector<int32_t>(full.begin(), full.begin() + static_cast<long>(k)));
  // The callback sees the tokens in order; returning false ends the generation.
  std::vector<int32_t> streamed;
  const std::vector<int32_t> got =
      g.generate(prompt, {.max_new_tokens = 10, .on_token = [&](int64_t seq, int32_t t) {
                            EXPECT_EQ(seq, 0);
                            streamed.push_back(t);
                            return streamed.size() < 3;
                          }});
  EXPECT_EQ(streamed, std::vector<int32_t>(full.begin(), full.begin() + 3));
  EXPECT_EQ(got, streamed);
}

INSTANTIATE_TEST_SUITE_P(Devices, Generate, ::testing::ValuesIn(devices()),
                         [](const auto& info) { return tg::testing::device_test_name(info.param); });

// The same seed and prompt give the same text on every backend: greedy and sampled, against
// the double-precision reference (and cuda when this machine has a GPU).
TEST(GenerateAcrossDevices, SameTokensForTheSameSeed) {
  const std::vector<std::vector<int32_t>> prompts{prompt_of(9, 7), prompt_of(4, 8)};
  std::vector<std::vector<std::vector<int32_t>>> greedy, sampled, cut;
  for (const Device& d : devices()) {
    nn::Gpt model(kConfig);
    Generator g = make_generator(model, 2, 4, d);
    greedy.push_back(g.generate(prompts, {.max_new_tokens = 10}));
    sampled.push_back(
        g.generate(prompts, {.max_new_tokens = 10, .temperature = 1.0f, .top_p = 0.9f, .seed = 11}));
    cut.push_back(g.generate(  // min-p and the repetition penalty
        prompts,
        {.max_new_tokens = 10, .temperature = 1.5f, .min_p = 0.1f, .repetition_penalty = 1.3f, .seed = 12}));
  }
  for (size_t i = 1; i < greedy.size(); ++i) {
    EXPECT_EQ(greedy[i], greedy[0]) << tg::testing::device_test_name(devices()[i]);
    EXPECT_EQ(sampled[i], sampled[0]) << tg::testing::device_test_name(devices()[i]);
    EXPECT_EQ(cut[i], cut[0]) << tg::testing::device_test_name(devices()[i]);
  }
}

TEST(GenerateErrors, BadPromptsAndOptions) {
  nn::Gpt model(kConfig);
  Generator g = make_generator(model, 2, 4, Device::cpu());
  const auto expect_input_error = [](auto&& fn, const std::string& needle) {
    try {
      fn();
      ADD_FAILURE() << "no tg::InputError for " << needle;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_input_error([&] { g.generate(std::vector<std::vector<int32_t>>{prompt_of(3, 0)}, {}); },
                     "decodes 2 sequence(s) at once; got 1 prompt(s)");
  expect_input_error([&] { g.generate(prompt_of(3, 0)); }, "Generator of batch 2");
  expect_input_error(
      [&] {
        g.generate(std::vector<std::vector<int32_t>>{prompt_of(3, 0), {}});
      },
      "prompt 1 is empty");
  expect_input_error(
      [&] {
        g.generate(std::vector<std::vector<int32_t>>{prompt_of(3, 0), prompt_of(kCache + 1, 0)});
      },
      "more than the cache holds (cache_len = 20)");
  expect_input_error(
      [&] {
        g.generate(std::vector<std::vector<int32_t>>{prompt_of(3, 0), {1, 2, 99}});
      },
      "index 99");  // a token outside the vocabulary
  expect_input_error(
      [&] {
        Generator bad(model,
                      [&model](const Tensor& ids, const Tensor& pos, int64_t cache) {
                        return model.logits_cached(ids, pos, cache);
                      },
                      {.cache_len = 8, .prefill_len = 9, .device = Device::cpu()});
      },
      "prefill_len must be in [1, cache_len = 8]");
  // Sampling settings that would silently fall back to greedy or to every token.
  const std::vector<std::vector<int32_t>> two{prompt_of(3, 0), prompt_of(3, 1)};
  const float nan = std::nanf("");
  for (const float t : {nan, -1.0f, std::numeric_limits<float>::infinity()})
    expect_input_error([&] { g.generate(two, {.temperature = t}); }, "temperature must be finite and >= 0");
  expect_input_error([&] { g.generate(two, {.top_k = -5}); }, "top_k must be >= 0");
  for (const float p : {nan, -0.5f, 0.0f, 1.5f})
    expect_input_error([&] { g.generate(two, {.top_p = p}); }, "top_p must be in (0, 1]");
  for (const float p : {nan, -0.1f, 1.5f})
    expect_input_error([&] { g.generate(two, {.min_p = p}); }, "min_p must be in [0, 1]");
  for (const float p : {nan, 0.0f, -2.0f, std::numeric_limits<float>::infinity()})
    expect_input_error([&] { g.generate(two, {.repetition_penalty = p}); },
                       "repetition_penalty must be finite and > 0");
}

}  // namespace
