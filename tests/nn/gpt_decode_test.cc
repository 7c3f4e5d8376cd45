// KV-cached GPT inference (Gpt::logits_cached): a prefill program and a one-token decode
// program that share the model's parameters and its per-layer K/V caches give, at every
// step, the logits the plain forward gives on the whole prefix — for one sequence and for four
// sequences at different positions — on every backend this machine has (GPT with grouped-query
// attention, untied head; learned and rotary positions). And the bad inputs: a prompt longer
// than the cache, a position past it, the wrong batch size.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "tensorgrad/tensorgrad.h"
#include "decode_check.h"
#include "test_util.h"

namespace {

using namespace tg;

const nn::GptConfig kDecodeConfig{
    .vocab = 37, .seq_len = 16, .layers = 2, .d_model = 32, .heads = 4, .kv_heads = 2, .tied_head = false};
constexpr int64_t kDecodeCache = 12;

std::vector<Device> decode_devices() { return tg::testing::all_devices(); }

Program cached_program(nn::Gpt& model, int64_t batch, int64_t tokens, Device device) {
  return tg::testing::cached_program(model, batch, tokens, kDecodeCache, device);
}

class GptDecode : public ::testing::TestWithParam<Device> {};

TEST_P(GptDecode, MatchesTheFullForwardOnEveryPrefix) {
  for (const int64_t batch : {int64_t{1}, int64_t{4}}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    nn::Gpt model(kDecodeConfig);
    tg::testing::expect_cached_equals_full(model, kDecodeConfig.vocab, kDecodeCache, batch, GetParam());
  }
}

// Rotary positions (a base other than the default): the queries and new keys are rotated at
// their own positions pos[b] + i, so the cached logits again equal the full forward's.
TEST_P(GptDecode, RotaryMatchesTheFullForwardOnEveryPrefix) {
  nn::GptConfig rotary = kDecodeConfig;
  rotary.rotary = true;
  rotary.rope_theta = 500.0;
  for (const int64_t batch : {int64_t{1}, int64_t{4}}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    nn::Gpt model(rotary);
    tg::testing::expect_cached_equals_full(model, rotary.vocab, kDecodeCache, batch, GetParam());
  }
}

TEST_P(GptDecode, BadInputsAreClearErrors) {
  nn::Gpt model(kDecodeConfig);
  // A prompt longer than the cache: at compile time.
  EXPECT_NE(tg::testing::message_of<ShapeError>([&] {
              cached_program(model, 1, kDecodeCache + 1, GetParam());
            }).find("do not fit"),
            std::string::npos);
  // A position past the cache: when the program runs.
  Program decode = cached_program(model, 2, 1, GetParam());
  EXPECT_NO_THROW(
      decode.run({{"ids", std::vector<int32_t>{1, 2}}, {"pos", std::vector<int32_t>{0, kDecodeCache - 1}}}));
  EXPECT_THROW(
      decode.run({{"ids", std::vector<int32_t>{1, 2}}, {"pos", std::vector<int32_t>{0, kDecodeCache}}}),
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
          model, [&model](Tensor ids, Tensor pos) { return model.logits_cached(ids, pos, kDecodeCache); },
          {.inputs = {{"ids", {2, 1}, DType::kI32}, {"pos", {}, DType::kI32}}, .device = GetParam()}),
      ShapeError);
}

INSTANTIATE_TEST_SUITE_P(Devices, GptDecode, ::testing::ValuesIn(decode_devices()),
                         [](const auto& info) { return tg::testing::device_test_name(info.param); });

}  // namespace
