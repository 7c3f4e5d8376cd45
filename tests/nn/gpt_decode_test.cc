// KV-cached GPT inference (Gpt::logits_cached): a prefill program and a one-token decode
// program that share the model's parameters and its per-layer K/V caches give, at every
// step, the logits the plain forward gives on the whole prefix — for one sequence and for four
// sequences at different positions — on every backend this machine has (GPT with grouped-query
// attention, untied head). And the bad inputs: a prompt longer than the cache, a position past
// it, the wrong batch size.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "tensorgrad/tensorgrad.h"
#include "test_util.h"

namespace {

using namespace tg;

const nn::GptConfig kConfig{
    .vocab = 37, .seq_len = 16, .layers = 2, .d_model = 32, .heads = 4, .kv_heads = 2, .tied_head = false};
constexpr int64_t kCache = 12;

std::vector<Device> devices() { return tg::testing::all_devices(); }

Program cached_program(nn::Gpt& model, int64_t batch, int64_t tokens, Device device) {
  return compile_forward(
      model, [&model](Tensor ids, Tensor pos) { return model.logits_cached(ids, pos, kCache); },
      {.inputs = {{"ids", {batch, tokens}, DType::kI32}, {"pos", {batch}, DType::kI32}}, .device = device});
}

/// The plain forward's logits of one sequence, [T, vocab].
std::vector<float> full_logits(nn::Gpt& model, const std::vector<int32_t>& seq, Device device) {
  const auto T = static_cast<int64_t>(seq.size());
  Program p = compile_forward(model, [&model](Tensor ids) { return model.logits(ids); },
                              {.inputs = {{"ids", {1, T}, DType::kI32}}, .device = device});
  return p.run({{"ids", seq}}).f32();
}

using tg::testing::rel_diff;

class GptDecode : public ::testing::TestWithParam<Device> {};

// Four sequences whose prompts have 5, 3, 4 and 1 valid tokens (the prefill writes five rows
// for each; the later ones are masked, then overwritten), then 5 decode steps each at its own
// position. Batch 1 is the first sequence alone.
TEST_P(GptDecode, MatchesTheFullForwardOnEveryPrefix) {
  for (const int64_t batch : {int64_t{1}, int64_t{4}}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    nn::Gpt model(kConfig);
    Program prefill = cached_program(model, batch, 5, GetParam()),
            decode = cached_program(model, batch, 1, GetParam());
    prefill.init_params(3);
    const std::vector<int64_t> lens = {5, 3, 4, 1};
    std::vector<std::vector<int32_t>> seqs(static_cast<size_t>(batch));
    std::vector<int32_t> prompt;
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t t = 0; t < 5; ++t) {
        const auto tok = static_cast<int32_t>((b * 11 + t * 7 + 3) % kConfig.vocab);
        prompt.push_back(tok);
        if (t < lens[static_cast<size_t>(b)]) seqs[static_cast<size_t>(b)].push_back(tok);
      }
    const std::vector<float> first =
        prefill.run({{"ids", prompt}, {"pos", std::vector<int32_t>(static_cast<size_t>(batch), 0)}}).f32();
    const auto V = static_cast<size_t>(kConfig.vocab);
    std::vector<std::vector<float>> got(
        static_cast<size_t>(batch));  // per sequence: logits of each valid position
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t t = 0; t < lens[static_cast<size_t>(b)]; ++t) {
        const size_t at = static_cast<size_t>(b * 5 + t) * V;
        got[static_cast<size_t>(b)].insert(got[static_cast<size_t>(b)].end(),
                                           first.begin() + static_cast<long>(at),
                                           first.begin() + static_cast<long>(at + V));
      }
    for (int step = 0; step < 5; ++step) {
      std::vector<int32_t> ids, pos;
      for (int64_t b = 0; b < batch; ++b) {
        const auto tok = static_cast<int32_t>((b * 5 + step * 13 + 1) % kConfig.vocab);
        pos.push_back(static_cast<int32_t>(seqs[static_cast<size_t>(b)].size()));
        seqs[static_cast<size_t>(b)].push_back(tok);
        ids.push_back(tok);
      }
      const std::vector<float> out = decode.run({{"ids", ids}, {"pos", pos}}).f32();
      for (int64_t b = 0; b < batch; ++b)
        got[static_cast<size_t>(b)].insert(got[static_cast<size_t>(b)].end(),
                                           out.begin() + static_cast<long>(b * V),
                                           out.begin() + static_cast<long>((b + 1) * V));
    }
    double worst = 0;
    for (int64_t b = 0; b < batch; ++b) {
      const std::vector<float> want = full_logits(model, seqs[static_cast<size_t>(b)], GetParam());
      ASSERT_EQ(got[static_cast<size_t>(b)].size(), want.size());
      for (size_t t = 0; t < want.size() / V; ++t) {
        const double d = rel_diff(std::span(got[static_cast<size_t>(b)]).subspan(t * V, V),
                                  std::span(want).subspan(t * V, V));
        EXPECT_LE(d, 1e-5) << "sequence " << b << " position " << t;
        worst = std::max(worst, d);
      }
    }
    std::printf("  %s batch %lld: worst relative logit difference %.2e\n", GetParam().str().c_str(),
                static_cast<long long>(batch), worst);
  }
}

TEST_P(GptDecode, BadInputsAreClearErrors) {
  nn::Gpt model(kConfig);
  // A prompt longer than the cache: at compile time.
  EXPECT_NE(tg::testing::message_of<ShapeError>([&] {
              cached_program(model, 1, kCache + 1, GetParam());
            }).find("do not fit"),
            std::string::npos);
  // A position past the cache: when the program runs.
  Program decode = cached_program(model, 2, 1, GetParam());
  EXPECT_NO_THROW(
      decode.run({{"ids", std::vector<int32_t>{1, 2}}, {"pos", std::vector<int32_t>{0, kCache - 1}}}));
  EXPECT_THROW(decode.run({{"ids", std::vector<int32_t>{1, 2}}, {"pos", std::vector<int32_t>{0, kCache}}}),
               InputError);
  // The wrong batch size: the feed is checked against the program's inputs.
  EXPECT_THROW(decode.run({{"ids", std::vector<int32_t>{1, 2, 3}}, {"pos", std::vector<int32_t>{0, 1, 2}}}),
               InputError);
  // A second program with another batch size would need caches of another shape.
  EXPECT_NE(
      tg::testing::message_of<InputError>([&] { cached_program(model, 3, 1, GetParam()); }).find("k_cache"),
      std::string::npos);
  // Positions must be one per sequence.
  EXPECT_THROW(
      compile_forward(
          model, [&model](Tensor ids, Tensor pos) { return model.logits_cached(ids, pos, kCache); },
          {.inputs = {{"ids", {2, 1}, DType::kI32}, {"pos", {}, DType::kI32}}, .device = GetParam()}),
      ShapeError);
}

INSTANTIATE_TEST_SUITE_P(Devices, GptDecode, ::testing::ValuesIn(devices()),
                         [](const auto& info) { return tg::testing::device_test_name(info.param); });

}  // namespace
