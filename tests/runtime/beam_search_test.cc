// Beam search (Generator::beam_search, T5Generator::beam_search) against transformers'
// generate(num_beams, do_sample = False) on the tiny models (tests/data/beam_golden.safetensors,
// tests/nn/gen_hf_beam_golden.py): every returned hypothesis, its tokens, how it ended and its
// score, for five settings (beams 2 to 4, length penalties 0.5 to 2, each way of stopping, and an
// end token the models favour so that hypotheses end on the way), on every backend; and the
// bookkeeping alone over a model of fixed log-probabilities, where the best hypothesis is known.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "runtime/beam_search.h"
#include "tensorgrad/tensorgrad.h"
#include "test_util.h"

namespace {

using namespace tg;
using Params = std::map<std::string, HostTensor>;

std::string data(const std::string& name) { return std::string(TG_TEST_DATA_DIR) + "/" + name; }

const Params& golden() {
  static const Params g = read_safetensors(data("beam_golden.safetensors"));
  return g;
}

// A case's settings as transformers ran them.
BeamSearchOptions settings(const std::string& model, const std::string& c, int64_t& beams) {
  const auto cases =
      nlohmann::json::parse(read_safetensors_metadata(data("beam_golden.safetensors")).at("cases"));
  const auto& s = cases.at(c);
  beams = s.at("num_beams").get<int64_t>();
  const auto& stop = s.at("early_stopping");
  const auto eos = golden().at(model + "." + c + ".eos").i32();
  return {.max_new_tokens = s.at("max_new_tokens").get<int64_t>(),
          .length_penalty = s.at("length_penalty").get<double>(),
          .stop = stop.is_string()                        ? BeamStop::kNever
                  : stop.is_boolean() && stop.get<bool>() ? BeamStop::kFull
                                                          : BeamStop::kHeuristic,
          .stop_tokens = std::vector<int32_t>(eos.begin(), eos.end())};
}

void expect_golden(const std::vector<BeamHypothesis>& got, const std::string& model, const std::string& c,
                   const std::string& where) {
  const HostTensor& seqs = golden().at(model + "." + c + ".sequences");
  const auto scores = golden().at(model + "." + c + ".scores").f32();
  const auto ended = golden().at(model + "." + c + ".ended").i32();
  const auto n = static_cast<size_t>(seqs.shape()[0]), len = static_cast<size_t>(seqs.shape()[1]);
  ASSERT_EQ(got.size(), n) << where;
  for (size_t i = 0; i < n; ++i) {
    std::vector<int32_t> want;
    for (size_t t = 0; t < len && seqs.i32()[i * len + t] >= 0; ++t) want.push_back(seqs.i32()[i * len + t]);
    EXPECT_EQ(got[i].tokens, want) << where << " hypothesis " << i;
    EXPECT_EQ(got[i].ended, ended[i] != 0) << where << " hypothesis " << i;
    EXPECT_NEAR(got[i].score, scores[i], 1e-4 * std::abs(scores[i]) + 1e-5) << where << " hypothesis " << i;
  }
}

const char* const kCases[] = {"a", "b", "c", "d", "e", "f", "g"};

class BeamSearch : public ::testing::TestWithParam<Device> {};

TEST_P(BeamSearch, DecodersEqualTransformers) {
  for (const std::string name : {"tiny_llama", "tiny_gpt2", "tiny_qwen2"}) {
    const auto p = golden().at(name + ".prompt").i32();
    const std::vector<int32_t> prompt(p.begin(), p.end());
    for (const std::string c : kCases) {
      const pretrained::Model lm = pretrained::load(data(name));  // a model's caches have one batch
      int64_t beams = 0;
      const BeamSearchOptions options = settings(name, c, beams);
      Generator gen(*lm.module, lm.step(), {.batch = beams, .cache_len = 16, .device = GetParam()});
      lm.upload(gen.decode());
      expect_golden(gen.beam_search(prompt, options), name, c,
                    name + " case " + c + " on " + GetParam().str());
    }
  }
}

TEST_P(BeamSearch, T5EqualsTransformers) {
  const auto p = golden().at("tiny_flan_t5.prompt").i32();
  const std::vector<int32_t> source(p.begin(), p.end());
  for (const std::string c : kCases) {
    const pretrained::Model m = pretrained::load(data("tiny_flan_t5"));  // a model's caches have one batch
    int64_t beams = 0;
    const BeamSearchOptions options = settings("tiny_flan_t5", c, beams);
    T5Generator gen(static_cast<nn::T5&>(*m.module), {.batch = beams,
                                                      .source_len = static_cast<int64_t>(source.size()),
                                                      .max_new_tokens = 12,
                                                      .device = GetParam()});
    m.upload(gen.encoder());
    expect_golden(gen.beam_search(source, options), "tiny_flan_t5", c,
                  "case " + c + " on " + GetParam().str());
  }
}

// The cached search, its caches reordered on the device, equals the same search over the model
// without caches: each step's log-probabilities from a full forward of every beam's whole text,
// beams reordered on the host. Mamba (a window of its prompt, then a token at a time, its recurrent
// states reordered) and Llama (prefill and KV caches).
TEST_P(BeamSearch, CachedEqualsFullForward) {
  for (const std::string name : {"tiny_llama", "tiny_mamba"}) {
    const pretrained::Model lm = pretrained::load(data(name));
    const int64_t beams = 3, window = 12;
    const std::vector<int32_t> prompt{3, 17, 42, 8, 1};
    // A cache of 11 positions holds 7 new tokens after the 5 of the prompt (the last one needs no
    // position), not 8; Llama's prompt goes through prefill windows of 2 three times, Mamba's
    // through two (the second from the first's states) and the decode program.
    const BeamSearchOptions options{.max_new_tokens = 8, .length_penalty = 0.8, .stop_tokens = {5, 9}};
    BeamSearchOptions clamped = options;
    clamped.max_new_tokens = 7;
    Program full = compile_forward(*lm.module, [&lm](Tensor x) { return lm.logits(x); },
                                   {.inputs = {{"ids", {beams, window}, DType::kI32}}, .device = GetParam()});
    lm.upload(full);
    std::vector<std::vector<int32_t>> texts(static_cast<size_t>(beams), prompt);
    detail::BeamModel ref;
    ref.beams = beams;
    ref.next = [&](const std::vector<int32_t>& tokens, int64_t) {
      std::vector<int32_t> ids(static_cast<size_t>(beams * window), 0);
      for (size_t i = 0; i < texts.size(); ++i) {
        if (!tokens.empty()) texts[i].push_back(tokens[i]);
        std::copy(texts[i].begin(), texts[i].end(), ids.begin() + static_cast<std::ptrdiff_t>(i) * window);
      }
      const std::vector<float> logits = full.run({{"ids", ids}}).f32();
      const auto vocab = static_cast<int64_t>(logits.size()) / (beams * window);
      std::vector<float> out;
      for (size_t i = 0; i < texts.size(); ++i) {  // log_softmax of the row of the text's last token
        const auto row =
            logits.begin() +
            (static_cast<int64_t>(i) * window + static_cast<int64_t>(texts[i].size()) - 1) * vocab;
        const double top = *std::max_element(row, row + vocab);
        double sum = 0;
        for (int64_t t = 0; t < vocab; ++t) sum += std::exp(double(row[t]) - top);
        for (int64_t t = 0; t < vocab; ++t)
          out.push_back(static_cast<float>(double(row[t]) - top - std::log(sum)));
      }
      return out;
    };
    ref.reorder = [&](const std::vector<int32_t>& parents) {
      const auto old = texts;
      for (size_t i = 0; i < texts.size(); ++i) texts[i] = old[static_cast<size_t>(parents[i])];
    };
    const std::vector<BeamHypothesis> want = detail::beam_search(ref, clamped).front();
    Generator gen(*lm.module, lm.step(),
                  {.batch = beams, .cache_len = 11, .prefill_len = 2, .device = GetParam()});
    lm.upload(gen.decode());
    const std::vector<BeamHypothesis> got = gen.beam_search(prompt, options);
    ASSERT_EQ(got.size(), want.size()) << name;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].tokens, want[i].tokens) << name << " hypothesis " << i;
      EXPECT_EQ(got[i].ended, want[i].ended) << name << " hypothesis " << i;
      EXPECT_NEAR(got[i].score, want[i].score, 1e-5 * std::abs(want[i].score) + 1e-6) << name;
    }
    // The second search over the same Generator starts afresh.
    const std::vector<BeamHypothesis> again = gen.beam_search(prompt, options);
    ASSERT_EQ(again.size(), got.size()) << name;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(again[i].tokens, got[i].tokens) << name;
      EXPECT_EQ(again[i].score, got[i].score) << name;
    }
  }
}

// Several prompts searched at once (beams = batch / prompts; prompts of different lengths, so
// different positions and prefill windows per row) find what each finds searched alone: the
// Llama family with a prefill, Mamba (prompts of one length) with a window of 4 and 2 tokens one
// at a time, Flan-T5 over several sources.
TEST_P(BeamSearch, SeveralPromptsEqualEachAlone) {
  const std::vector<std::vector<int32_t>> prompts{{3, 17, 42}, {5, 9, 11, 2, 30}, {61}};
  const BeamSearchOptions options{.max_new_tokens = 6, .length_penalty = 1.2, .stop_tokens = {7}};
  const auto expect_same = [](const std::vector<BeamHypothesis>& got, const std::vector<BeamHypothesis>& want,
                              const std::string& where) {
    ASSERT_EQ(got.size(), want.size()) << where;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].tokens, want[i].tokens) << where << " hypothesis " << i;
      EXPECT_EQ(got[i].ended, want[i].ended) << where << " hypothesis " << i;
      // Rows of a batch run through products of other shapes (and Flan-T5's sources padded to
      // the longest), so their log-probabilities round differently: up to ~5e-6 apart on the
      // 2-core CPU after a few steps, where a wrong reordering moves them by 1e-2 and more.
      EXPECT_NEAR(got[i].score, want[i].score, 1e-4 * std::abs(want[i].score) + 1e-5) << where;
    }
  };
  for (const std::string name : {"tiny_llama", "tiny_mamba"}) {
    const bool mamba = name == "tiny_mamba";
    const std::vector<std::vector<int32_t>> these =
        mamba ? std::vector<std::vector<int32_t>>{{3, 17, 42, 8, 1, 30},
                                                  {5, 9, 11, 2, 2, 6},
                                                  {61, 1, 8, 4, 9, 3}}
              : prompts;
    const pretrained::Model all = pretrained::load(data(name));
    Generator together(*all.module, all.step(),
                       {.batch = 6, .cache_len = 12, .prefill_len = 4, .device = GetParam()});
    all.upload(together.decode());
    const auto found = together.beam_search(these, options);
    ASSERT_EQ(found.size(), these.size());
    const pretrained::Model one = pretrained::load(data(name));
    Generator alone(*one.module, one.step(),
                    {.batch = 2, .cache_len = 12, .prefill_len = 4, .device = GetParam()});
    one.upload(alone.decode());
    for (size_t p = 0; p < these.size(); ++p)
      expect_same(found[p], alone.beam_search(these[p], options), name + " prompt " + std::to_string(p));
    EXPECT_THROW(together.beam_search(std::vector<std::vector<int32_t>>(4, {1, 2})),
                 InputError);  // 6 rows / 4
    if (mamba) {               // prompts of different lengths
      EXPECT_THROW(together.beam_search({{1, 2}, {3}, {4, 5}}), InputError);
    }
  }
  const pretrained::Model all = pretrained::load(data("tiny_flan_t5"));
  const auto p = golden().at("tiny_flan_t5.prompt").i32();
  const std::vector<std::vector<int32_t>> sources{std::vector<int32_t>(p.begin(), p.end()),
                                                  {19, 116, 187, 1}};
  T5Generator together(
      static_cast<nn::T5&>(*all.module),
      {.batch = 4, .source_len = static_cast<int64_t>(p.size()), .max_new_tokens = 8, .device = GetParam()});
  all.upload(together.encoder());
  const auto found = together.beam_search(sources, {.max_new_tokens = 8, .length_penalty = 1.0});
  const pretrained::Model one = pretrained::load(data("tiny_flan_t5"));
  T5Generator alone(
      static_cast<nn::T5&>(*one.module),
      {.batch = 2, .source_len = static_cast<int64_t>(p.size()), .max_new_tokens = 8, .device = GetParam()});
  one.upload(alone.encoder());
  for (size_t i = 0; i < sources.size(); ++i)
    expect_same(found[i], alone.beam_search(sources[i], {.max_new_tokens = 8, .length_penalty = 1.0}),
                "tiny_flan_t5 source " + std::to_string(i));
}

INSTANTIATE_TEST_SUITE_P(Devices, BeamSearch, ::testing::ValuesIn(tg::testing::all_devices()),
                         [](const ::testing::TestParamInfo<Device>& info) {
                           return tg::testing::device_test_name(info.param);
                         });

// The bookkeeping over fixed log-probabilities (3 tokens; token 2 ends): after token 0 (or the
// prompt) token 0 has log p −0.1, token 1 −2.5, token 2 −3.0; after token 1, token 0 has −1.0.
// With 2 beams and 3 new tokens the beams run on {0} and {1}, then {0, 0} and {0, 1}; at the
// length limit the best two continuations, {0, 0, 0} (−0.3) and {0, 0, 1} (−2.7), finish, scored
// over their 3 tokens: −0.1 and −0.9. The end token never ranks among the best two.
TEST(BeamSearchBookkeeping, FixedModel) {
  detail::BeamModel m;
  m.beams = 2;
  std::vector<int32_t> reordered;
  m.next = [](const std::vector<int32_t>& tokens, int64_t) {
    std::vector<float> out;
    for (size_t i = 0; i < 2; ++i)
      out.insert(out.end(), {!tokens.empty() && tokens[i] == 1 ? -1.0f : -0.1f, -2.5f, -3.0f});
    return out;
  };
  m.reorder = [&](const std::vector<int32_t>& parents) {
    reordered.insert(reordered.end(), parents.begin(), parents.end());
  };
  const std::vector<BeamHypothesis> h =
      detail::beam_search(m, {.max_new_tokens = 3, .length_penalty = 1.0, .stop_tokens = {2}}).front();
  ASSERT_EQ(h.size(), 2u);
  EXPECT_EQ(h[0].tokens, (std::vector<int32_t>{0, 0, 0}));
  EXPECT_FALSE(h[0].ended);
  EXPECT_NEAR(h[0].score, -0.1, 1e-6);
  EXPECT_EQ(h[1].tokens, (std::vector<int32_t>{0, 0, 1}));
  EXPECT_NEAR(h[1].score, -0.9, 1e-6);
  // After each of the first two steps both beams continue beam 0 ({0} and {1}, then {0, 0} and
  // {0, 1}): parents [0, 0] twice; the last step ends the search without a reordering.
  EXPECT_EQ(reordered, (std::vector<int32_t>{0, 0, 0, 0}));
  EXPECT_THROW(detail::beam_search(m, {.max_new_tokens = 0}), InputError);
}

}  // namespace
