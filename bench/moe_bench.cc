// Benchmark: one Adam training step of a Llama-family mixture of experts, the experts' tokens
// sorted by expert (Experts::Dispatch::kSorted: grouped_matmul) against every expert on every
// token (kDense), in one command. Random weights and tokens; the two dispatches compute the same
// function, so the first step's losses are printed side by side.
//   moe_train  4 layers, d 512, 8 heads, 2 KV heads, 16 experts of width 1024, top 2
//              renormalised, vocab 8192; batch 8 × 256 tokens on a GPU, 2 × 128 on the CPU.
// Prints, in the torch_peer.py format:
//   moe_train tg_<sorted|dense>[_bf16] <ms> ms/step
//
//   ./moe_bench [cpu|cuda] [fp32|bf16]
#include <tensorgrad/tensorgrad.h>

#include "timing.h"

#include <cstdio>
#include <random>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  const std::string where = argc > 1 ? argv[1] : "cpu", precision = argc > 2 ? argv[2] : "fp32";
  if ((where != "cpu" && where != "cuda") || (precision != "fp32" && precision != "bf16")) {
    std::fprintf(stderr, "usage: moe_bench [cpu|cuda] [fp32|bf16]\n");
    return 2;
  }
  const bool gpu = where == "cuda", bf16 = precision == "bf16";
  const int64_t batch = gpu ? 8 : 2, seq = gpu ? 256 : 128;
  tg::nn::LlamaConfig config{.vocab = 8192,
                             .seq_len = seq,
                             .layers = 4,
                             .d_model = 512,
                             .heads = 8,
                             .kv_heads = 2,
                             .mlp_hidden = 1024};
  config.experts = {.count = 16, .top_k = 2, .hidden = 1024, .normalize = true};
  std::mt19937 rng(0);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(config.vocab - 1));
  std::vector<int32_t> ids(static_cast<size_t>(batch * seq)), targets(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = tok(rng), targets[i] = tok(rng);
  for (const auto dispatch :
       {tg::nn::LlamaConfig::Experts::Dispatch::kSorted, tg::nn::LlamaConfig::Experts::Dispatch::kDense}) {
    config.experts.dispatch = dispatch;
    tg::nn::Llama model(config);
    tg::Program train = tg::compile_train(
        model, [&model](tg::Tensor i, tg::Tensor t) { return model.loss(i, t); },
        {.inputs = {{"ids", {batch, seq}, tg::DType::kI32}, {"targets", {batch, seq}, tg::DType::kI32}},
         .optimizer = tg::Adam{.lr = 1e-4},
         .device = gpu ? tg::Device::cuda() : tg::Device::cpu(),
         .precision = bf16 ? tg::Precision::kBf16 : tg::Precision::kFp32});
    train.init_params(0);
    const float first = train.step({{"ids", ids}, {"targets", targets}});
    const double sec = median_seconds_per_step(
        [&] {
          train.step({{"ids", ids}, {"targets", targets}});
        },
        2, gpu ? 20 : 2);
    const bool sorted = dispatch == tg::nn::LlamaConfig::Experts::Dispatch::kSorted;
    std::printf("%-22s %-26s %10.3f ms/step   (first loss %.6f)\n", "moe_train",
                (std::string(sorted ? "tg_sorted" : "tg_dense") + (bf16 ? "_bf16" : "")).c_str(), sec * 1e3,
                static_cast<double>(first));
  }
  return 0;
}
