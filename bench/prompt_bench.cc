// Benchmark: a recurrent model's prompt, through tg::Generator, random weights, batch 1. The
// Generator prefills a model with Mamba layers in whole windows of prefill_len tokens (each
// window's scan in parallel from the carried states) and steps the rest of the prompt through the
// decode program; `tokens` runs the whole prompt through the decode program (prefill = false).
// The time is generate(prompt, 1 new token): the prompt and one sampled token. Models:
//   mamba    state-spaces/mamba-130m shapes: 24 layers, d 768, d_state 16, vocab 50280
//   mamba2   mamba2-130m shapes: 24 layers, d 768, heads of 64, d_state 128, vocab 50288
// Prints, per mode: <model>_prompt<L> <mode> <ms> ms/prompt <tokens/s> tokens/s. Peer:
// bench/prompt_peer.py (transformers' forward of the prompt with its cache).
//
//   ./prompt_bench [cpu|cuda] [mamba|mamba2] [prompt tokens] [fp32|bf16] [prefill_len]
#include <tensorgrad/tensorgrad.h>

#include "timing.h"

#include <cstdio>
#include <random>
#include <string>
#include <vector>

namespace {

int run(int argc, char** argv) {
  const std::string where = argc > 1 ? argv[1] : "cpu", name = argc > 2 ? argv[2] : "mamba",
                    precision = argc > 4 ? argv[4] : "fp32";
  const int64_t len = argc > 3 ? std::stoll(argv[3]) : 512, window = argc > 5 ? std::stoll(argv[5]) : 64;
  if ((where != "cpu" && where != "cuda") || (name != "mamba" && name != "mamba2") ||
      (precision != "fp32" && precision != "bf16") || len < 2 || window < 1 || window > len) {
    std::fprintf(stderr,
                 "usage: prompt_bench [cpu|cuda] [mamba|mamba2] [prompt tokens >= 2] [fp32|bf16] "
                 "[prefill_len <= prompt tokens]\n");
    return 2;
  }
  const tg::Device device = where == "cuda" ? tg::Device::cuda() : tg::Device::cpu();
  const tg::Precision prec = precision == "bf16" ? tg::Precision::kBf16 : tg::Precision::kFp32;
  tg::nn::MambaLMConfig config{.vocab = 50280, .layers = 24, .d_model = 768};
  if (name == "mamba2") {
    config.vocab = 50288;
    config.version = 2;
    config.d_state = 128;
    config.head_dim = 64;
  }
  tg::nn::MambaLM model(config);
  std::mt19937 rng(0);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(config.vocab - 1));
  std::vector<int32_t> prompt;
  for (int64_t t = 0; t < len; ++t) prompt.push_back(tok(rng));
  const tg::CachedLm step = [&model](const tg::Tensor& ids, const tg::Tensor& pos, int64_t n) {
    return model.logits_cached(ids, pos, n);
  };
  tg::Generator windows(model, step,
                        {.cache_len = len + 1, .prefill_len = window, .device = device, .precision = prec});
  tg::Generator tokens(model, step,
                       {.cache_len = len + 1, .device = device, .precision = prec, .prefill = false});
  windows.decode().init_params(0);
  std::vector<int32_t> first;
  for (auto* gen : {&windows, &tokens}) {
    const double sec = median_seconds_per_step(
        [&] {
          const std::vector<int32_t> next = gen->generate(prompt, {.max_new_tokens = 1});
          if (first.empty()) first = next;
          if (next != first) std::printf("(the modes sampled different tokens: %d, %d)\n", first[0], next[0]);
        },
        1, 1);
    char mode[64];
    if (gen == &windows)
      std::snprintf(mode, sizeof mode, "tg_windows%lld_%s", static_cast<long long>(window),
                    precision.c_str());
    else
      std::snprintf(mode, sizeof mode, "tg_tokens_%s", precision.c_str());
    std::printf("%s_prompt%-6lld %-22s %10.2f ms/prompt %12.1f tokens/s\n", name.c_str(),
                static_cast<long long>(len), mode, sec * 1e3, static_cast<double>(len) / sec);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "prompt_bench: %s\n", e.what());
    return 1;
  }
}
