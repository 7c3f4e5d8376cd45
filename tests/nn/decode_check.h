// The KV-cache check shared by the decoder tests (gpt_decode_test, llama_test): a prefill
// program and a one-token decode program of a model's logits_cached must give, at every step,
// the logits its plain forward gives on the whole prefix.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "tensorgrad/tensorgrad.h"
#include "test_util.h"

namespace tg::testing {

template <class Model>
Program cached_program(Model& model, int64_t batch, int64_t tokens, int64_t cache_len, Device device) {
  return compile_forward(
      model, [&model, cache_len](Tensor ids, Tensor pos) { return model.logits_cached(ids, pos, cache_len); },
      {.inputs = {{"ids", {batch, tokens}, DType::kI32}, {"pos", {batch}, DType::kI32}}, .device = device});
}

/// The plain forward's logits of one sequence, [T, vocab].
template <class Model>
std::vector<float> full_logits(Model& model, const std::vector<int32_t>& seq, Device device) {
  const auto T = static_cast<int64_t>(seq.size());
  Program p = compile_forward(model, [&model](Tensor ids) { return model.logits(ids); },
                              {.inputs = {{"ids", {1, T}, DType::kI32}}, .device = device});
  return p.run({{"ids", seq}}).f32();
}

/// Four sequences whose prompts have 5, 3, 4 and 1 valid tokens (the prefill writes five rows
/// for each; the later ones are masked, then overwritten), then 5 decode steps each at its own
/// position; batch 1 is the first sequence alone. Every logit row within `tolerance`
/// (rel_diff) of the full forward's. Parameters from init_params(3).
template <class Model>
void expect_cached_equals_full(Model& model, int64_t vocab, int64_t cache_len, int64_t batch, Device device,
                               double tolerance = 1e-5) {
  Program prefill = cached_program(model, batch, 5, cache_len, device),
          decode = cached_program(model, batch, 1, cache_len, device);
  prefill.init_params(3);
  const std::vector<int64_t> lens = {5, 3, 4, 1};
  std::vector<std::vector<int32_t>> seqs(static_cast<size_t>(batch));
  std::vector<int32_t> prompt;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < 5; ++t) {
      const auto tok = static_cast<int32_t>((b * 11 + t * 7 + 3) % vocab);
      prompt.push_back(tok);
      if (t < lens[static_cast<size_t>(b)]) seqs[static_cast<size_t>(b)].push_back(tok);
    }
  const std::vector<float> first =
      prefill.run({{"ids", prompt}, {"pos", std::vector<int32_t>(static_cast<size_t>(batch), 0)}}).f32();
  const auto V = static_cast<size_t>(vocab);
  std::vector<std::vector<float>> got(static_cast<size_t>(batch));  // per sequence: each valid position
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
      const auto tok = static_cast<int32_t>((b * 5 + step * 13 + 1) % vocab);
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
    const std::vector<float> want = full_logits(model, seqs[static_cast<size_t>(b)], device);
    ASSERT_EQ(got[static_cast<size_t>(b)].size(), want.size());
    for (size_t t = 0; t < want.size() / V; ++t) {
      const double d = rel_diff(std::span(got[static_cast<size_t>(b)]).subspan(t * V, V),
                                std::span(want).subspan(t * V, V));
      EXPECT_LE(d, tolerance) << "sequence " << b << " position " << t;
      worst = std::max(worst, d);
    }
  }
  std::printf("  %s batch %lld: worst relative logit difference %.2e\n", device.str().c_str(),
              static_cast<long long>(batch), worst);
}

}  // namespace tg::testing
