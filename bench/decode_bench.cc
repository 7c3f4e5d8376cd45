// Benchmark: gpt2_decode of ../shared/bench/README.md — GPT-2 124M shapes, random weights,
// batch 1, a 16-token prompt, greedy decoding with a KV cache (Gpt::logits_cached): one
// prefill program, then one single-token decode program per new token; the argmax is taken
// in the graph, so only the token id leaves the device. New tokens: 256 on a GPU, 32 on the
// CPU (as the peer). Prints, in the torch_peer.py format, the whole generation's tokens/s and
// the median per-token latency of the decode calls:
//   gpt2_decode <mode> <ms> ms/step <tokens/s> tokens/s
//
// With bf16, the products read bf16 weights and activations (Precision::kBf16; an inference
// program keeps the weights' bf16 copies between runs, so they are read, not converted, per token).
//
//   ./decode_bench [cpu|cuda] [new tokens] [fp32|bf16]
#include <tensorgrad/tensorgrad.h>

#include "timing.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  const tg::Device device =
      argc > 1 && std::string(argv[1]) == "cuda" ? tg::Device::cuda() : tg::Device::cpu();
  const bool gpu = device.kind == tg::Device::Kind::kCuda;
  const int64_t prompt_len = 16,
                fresh = argc > 2 ? std::stoll(argv[2])
                        : gpu    ? 256
                                 : 32,
                cache = prompt_len + fresh;
  const bool bf16 = argc > 3 && std::string(argv[3]) == "bf16";
  const tg::Precision precision = bf16 ? tg::Precision::kBf16 : tg::Precision::kFp32;
  const tg::nn::GptConfig config{.vocab = 50257, .seq_len = 1024, .layers = 12, .d_model = 768, .heads = 12};
  tg::nn::Gpt model(config);
  // The greedy choice of the last position, in the graph: [1] i32.
  auto next_token = [&](tg::Tensor ids, tg::Tensor pos) {
    tg::Tensor logits = model.logits_cached(ids, pos, cache);  // [1, T, vocab]
    const int64_t T = ids.shape()[1];
    return tg::argmax(tg::reshape(tg::slice(logits, 1, T - 1, T), {1, config.vocab}), -1);
  };
  const auto t0 = std::chrono::steady_clock::now();
  tg::Program prefill = tg::compile_forward(
      model, next_token,
      {.inputs = {{"ids", {1, prompt_len}, tg::DType::kI32}, {"pos", {1}, tg::DType::kI32}},
       .device = device,
       .precision = precision});
  tg::Program decode =
      tg::compile_forward(model, next_token,
                          {.inputs = {{"ids", {1, 1}, tg::DType::kI32}, {"pos", {1}, tg::DType::kI32}},
                           .device = device,
                           .precision = precision});
  const double compile_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::mt19937 rng(0);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(config.vocab - 1));
  std::vector<int32_t> prompt(static_cast<size_t>(prompt_len));
  for (int32_t& t : prompt) t = tok(rng);

  std::vector<double> per_token;
  std::vector<int32_t> generated;
  auto generate = [&] {
    generated.clear();
    per_token.clear();
    int32_t next = prefill.run({{"ids", prompt}, {"pos", std::vector<int32_t>{0}}}).i32()[0];
    for (int64_t s = 0; s < fresh; ++s) {
      generated.push_back(next);
      if (s + 1 == fresh) break;
      const auto a = std::chrono::steady_clock::now();
      next = decode
                 .run({{"ids", std::vector<int32_t>{next}},
                       {"pos", std::vector<int32_t>{static_cast<int32_t>(prompt_len + s)}}})
                 .i32()[0];
      per_token.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
    }
  };
  // As the peer: one warm-up generation, then the median of three.
  const double sec = median_seconds_per_step(generate, 1, 1);
  std::sort(per_token.begin(), per_token.end());
  const double latency = per_token.empty() ? 0 : per_token[per_token.size() / 2];
  const std::string mode =
      std::string("tg_greedy_b1_") + std::to_string(fresh) + "tok" + (bf16 ? "_bf16" : "");
  std::printf("%-22s %-26s %10.3f ms/step %14.1f tokens/s\n", "gpt2_decode", mode.c_str(), sec * 1e3,
              static_cast<double>(fresh) / sec);
  std::printf("# gpt2_decode per-token latency (median decode call) %.3f ms; compile_s %.2f; first tokens",
              latency * 1e3, compile_s);
  for (size_t i = 0; i < std::min<size_t>(8, generated.size()); ++i) std::printf(" %d", generated[i]);
  std::printf("\n");
  report_compiled("gpt2_decode(decode program)", decode);
  return 0;
}
